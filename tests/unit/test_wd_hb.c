/*
 * Tests of wd_hb (watchdog/wd_hb.c): silence is measured strictly past the
 * timeout, each silent member is reported once until seen again, the
 * start time counts as a sighting, and the output capacity is honoured.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_hb.h"

static void test_timeout_and_once(void **state) {
  wd_hb *hb;
  assert_int_equal(wd_hb_new(3, 10.0, 100.0, &hb), FT_OK);
  wd_hb_silent s[3];
  assert_int_equal(wd_hb_check(hb, 110.0, s, 3), 0); /* exactly the timeout: not yet */
  assert_int_equal(wd_hb_seen(hb, 105.0, 0), FT_OK);
  assert_int_equal(wd_hb_seen(hb, 108.0, 2), FT_OK);
  /* member 1 never heartbeat: silent since t0 = 100 */
  assert_int_equal(wd_hb_check(hb, 110.5, s, 3), 1);
  assert_int_equal(s[0].member, 1);
  assert_true(s[0].last_seen == 100.0);
  assert_true(s[0].silent_s == 10.5);
  /* reported once */
  assert_int_equal(wd_hb_check(hb, 111.0, s, 3), 0);
  /* 0 goes silent at 115.0 + */
  assert_int_equal(wd_hb_check(hb, 115.25, s, 3), 1);
  assert_int_equal(s[0].member, 0);
  assert_true(s[0].last_seen == 105.0);
  assert_true(s[0].silent_s == 10.25);
  /* member 1 comes back, then goes silent again: reported again */
  assert_int_equal(wd_hb_seen(hb, 116.0, 1), FT_OK);
  assert_int_equal(wd_hb_check(hb, 118.5, s, 3), 1); /* 2: last 108 */
  assert_int_equal(s[0].member, 2);
  assert_int_equal(wd_hb_check(hb, 126.5, s, 3), 1);
  assert_int_equal(s[0].member, 1);
  assert_true(s[0].last_seen == 116.0);
  assert_true(wd_hb_last_seen(hb, 1) == 116.0);
  assert_true(isnan(wd_hb_last_seen(hb, 3)));
  wd_hb_free(hb);
}

static void test_reordered_and_bad(void **state) {
  wd_hb *hb;
  assert_int_equal(wd_hb_new(2, 5.0, 0.0, &hb), FT_OK);
  assert_int_equal(wd_hb_seen(hb, 4.0, 0), FT_OK);
  assert_int_equal(wd_hb_seen(hb, 3.0, 0), FT_OK); /* older: ignored */
  assert_true(wd_hb_last_seen(hb, 0) == 4.0);
  wd_hb_silent s[2];
  assert_int_equal(wd_hb_check(hb, 8.5, s, 2), 1); /* only member 1 (since 0) */
  assert_int_equal(s[0].member, 1);
  assert_int_equal(wd_hb_seen(hb, 1.0, 2), FT_EINVAL);
  assert_int_equal(wd_hb_seen(hb, 1.0, -1), FT_EINVAL);
  assert_int_equal(wd_hb_seen(hb, NAN, 0), FT_EINVAL);
  assert_int_equal(wd_hb_check(hb, 1.0, NULL, 1), FT_EINVAL);
  assert_int_equal(wd_hb_count(hb), 2);
  assert_true(wd_hb_timeout(hb) == 5.0);
  wd_hb_free(hb);
  assert_int_equal(wd_hb_new(0, 5.0, 0.0, &hb), FT_EINVAL);
  assert_int_equal(wd_hb_new(1, 0.0, 0.0, &hb), FT_EINVAL);
  assert_int_equal(wd_hb_new(1, INFINITY, 0.0, &hb), FT_EINVAL);
  wd_hb_free(NULL);
}

static void test_capacity_and_reset(void **state) {
  wd_hb *hb;
  assert_int_equal(wd_hb_new(5, 1.0, 0.0, &hb), FT_OK);
  wd_hb_silent s[2];
  assert_int_equal(wd_hb_check(hb, 2.0, s, 2), 2);
  assert_int_equal(s[0].member, 0);
  assert_int_equal(s[1].member, 1);
  assert_int_equal(wd_hb_check(hb, 2.0, s, 2), 2); /* the rest come next */
  assert_int_equal(s[0].member, 2);
  assert_int_equal(s[1].member, 3);
  assert_int_equal(wd_hb_check(hb, 2.0, s, 2), 1);
  assert_int_equal(s[0].member, 4);
  assert_int_equal(wd_hb_check(hb, 2.0, s, 2), 0);
  wd_hb_reset(hb, 10.0); /* new generation */
  assert_int_equal(wd_hb_check(hb, 10.5, s, 2), 0);
  assert_int_equal(wd_hb_check(hb, 11.5, s, 0), 0);
  assert_int_equal(wd_hb_check(hb, 11.5, s, 2), 2);
  wd_hb_free(hb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_timeout_and_once),
      cmocka_unit_test(test_reordered_and_bad),
      cmocka_unit_test(test_capacity_and_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
