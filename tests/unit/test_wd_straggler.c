/*
 * Tests of wd_straggler (watchdog/wd_straggler.c): a rank that is slow in
 * min_hits of the last window steps is flagged once with its ratio, cleared
 * after min_hits good steps in a row; occasional slow steps never flag;
 * missing observations; the median-of-others arithmetic; bad config.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_straggler.h"

#define NR 8

static wd_straggler *make(int window, int min_hits) {
  wd_straggler_cfg cfg;
  wd_straggler_cfg_default(&cfg, NR);
  cfg.window = window;
  cfg.min_hits = min_hits;
  wd_straggler *s;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_OK);
  return s;
}

static void fill(double *t, double base) {
  for (int r = 0; r < NR; r++)
    t[r] = base + r; /* 100..107: all within a few % */
}

static void test_flag_once_and_clear(void **state) {
  wd_straggler *s = make(10, 5);
  double t[NR];
  wd_strag_event ev[NR];
  int64_t step = 0;
  for (; step < 20; step++) {
    fill(t, 100);
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  /* rank 3 becomes 2x slower */
  for (int i = 0; i < 4; i++, step++) {
    fill(t, 100);
    t[3] = 200;
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  fill(t, 100);
  t[3] = 200;
  assert_int_equal(wd_straggler_step(s, step++, t, ev, NR), 1); /* 5th hit */
  assert_int_equal(ev[0].kind, WD_STRAG_FLAGGED);
  assert_int_equal(ev[0].rank, 3);
  assert_int_equal(ev[0].step, 24);
  assert_int_equal(ev[0].hits, 5);
  /* others {100,101,102,104,105,106,107}: median 104 */
  assert_true(fabs(ev[0].ratio - 200.0 / 104.0) < 1e-12);
  assert_int_equal(wd_straggler_flagged(s, 3), 1);
  /* stays slow: no repeat */
  for (int i = 0; i < 10; i++, step++) {
    fill(t, 100);
    t[3] = 200;
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  /* recovers: cleared after 5 good steps in a row, not before */
  for (int i = 0; i < 4; i++, step++) {
    fill(t, 100);
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  fill(t, 100);
  assert_int_equal(wd_straggler_step(s, step++, t, ev, NR), 1);
  assert_int_equal(ev[0].kind, WD_STRAG_CLEARED);
  assert_int_equal(ev[0].rank, 3);
  assert_int_equal(wd_straggler_flagged(s, 3), 0);
  /* history starts afresh: 4 slow steps do not flag again */
  for (int i = 0; i < 4; i++, step++) {
    fill(t, 100);
    t[3] = 200;
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  wd_straggler_free(s);
}

static void test_occasional_slow_and_flapping(void **state) {
  wd_straggler *s = make(10, 5);
  double t[NR];
  wd_strag_event ev[NR];
  /* rank 5 slow every 3rd step: at most 4 of any 10 -> never flagged */
  for (int64_t step = 0; step < 100; step++) {
    fill(t, 100);
    if (step % 3 == 0)
      t[5] = 300;
    assert_int_equal(wd_straggler_step(s, step, t, ev, NR), 0);
  }
  /* rank 6 slow every other step: flagged once, and never cleared (no 5
   * good steps in a row) */
  int flagged = 0;
  for (int64_t step = 100; step < 200; step++) {
    fill(t, 100);
    if (step % 2 == 0)
      t[6] = 300;
    int n = wd_straggler_step(s, step, t, ev, NR);
    for (int i = 0; i < n; i++) {
      assert_int_equal(ev[i].rank, 6);
      assert_int_equal(ev[i].kind, WD_STRAG_FLAGGED);
      flagged++;
    }
  }
  assert_int_equal(flagged, 1);
  assert_int_equal(wd_straggler_flagged(s, 6), 1);
  /* uniformly slow gang (all ranks 2x): nobody is an outlier */
  for (int64_t step = 200; step < 230; step++) {
    fill(t, 200);
    int n = wd_straggler_step(s, step, t, ev, NR);
    for (int i = 0; i < n; i++)
      assert_int_equal(ev[i].kind, WD_STRAG_CLEARED); /* rank 6 recovers */
  }
  assert_int_equal(wd_straggler_flagged(s, 6), 0);
  wd_straggler_free(s);
}

static void test_missing_and_two_ranks(void **state) {
  wd_straggler_cfg cfg;
  wd_straggler_cfg_default(&cfg, 2);
  cfg.window = 3;
  cfg.min_hits = 2;
  wd_straggler *s;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_OK);
  wd_strag_event ev[2];
  double t[2] = {100, 160}; /* 1.6 > 1.5 */
  assert_int_equal(wd_straggler_step(s, 0, t, ev, 2), 0);
  double miss[2] = {100, NAN}; /* no observation: history unchanged */
  assert_int_equal(wd_straggler_step(s, 1, miss, ev, 2), 0);
  double neg[2] = {-1, 160};
  assert_int_equal(wd_straggler_step(s, 2, neg, ev, 2), 0);
  assert_int_equal(wd_straggler_step(s, 3, t, ev, 2), 1);
  assert_int_equal(ev[0].rank, 1);
  assert_true(fabs(ev[0].ratio - 1.6) < 1e-12);
  /* cap 0: state changes, event dropped */
  wd_straggler_free(s);

  assert_int_equal(wd_straggler_new(&cfg, &s), FT_OK);
  assert_int_equal(wd_straggler_step(s, 0, t, NULL, 0), 0);
  assert_int_equal(wd_straggler_step(s, 1, t, NULL, 0), 0);
  assert_int_equal(wd_straggler_flagged(s, 1), 1);
  assert_int_equal(wd_straggler_flagged(s, 0), 0);
  assert_int_equal(wd_straggler_flagged(s, 2), -1);
  /* zero times: no division by zero */
  double z[2] = {0, 0};
  assert_int_equal(wd_straggler_step(s, 2, z, ev, 2), 0);
  wd_straggler_free(s);
}

static void test_bad_config(void **state) {
  wd_straggler_cfg cfg;
  wd_straggler *s;
  wd_straggler_cfg_default(&cfg, 1);
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_EINVAL);
  wd_straggler_cfg_default(&cfg, 4);
  cfg.ratio = 1.0;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_EINVAL);
  wd_straggler_cfg_default(&cfg, 4);
  cfg.window = 65;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_EINVAL);
  wd_straggler_cfg_default(&cfg, 4);
  cfg.min_hits = 21;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_EINVAL);
  wd_straggler_cfg_default(&cfg, 4);
  cfg.window = 64;
  cfg.min_hits = 64;
  assert_int_equal(wd_straggler_new(&cfg, &s), FT_OK);
  double t[4] = {1, 1, 1, 1};
  assert_int_equal(wd_straggler_step(s, 0, NULL, NULL, 0), FT_EINVAL);
  assert_int_equal(wd_straggler_step(s, 0, t, NULL, 1), FT_EINVAL);
  wd_straggler_free(s);
  wd_straggler_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flag_once_and_clear),
      cmocka_unit_test(test_occasional_slow_and_flapping),
      cmocka_unit_test(test_missing_and_two_ranks),
      cmocka_unit_test(test_bad_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
