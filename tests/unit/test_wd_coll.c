/*
 * Tests of wd_coll (watchdog/wd_coll.c): the oldest outstanding collective
 * is reported once it is older than the timeout; begin/end bookkeeping and
 * errors; and two threads (a "training" thread doing begin/end and a
 * "watchdog" thread checking) sharing one tracker without outside locking
 * (run under TSan/ASan; here it checks the invariants hold throughout).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_coll.h"

static void test_oldest_overdue(void **state) {
  wd_coll *c;
  assert_int_equal(wd_coll_new(30.0, &c), FT_OK);
  wd_coll_op op;
  assert_int_equal(wd_coll_check(c, 1000.0, &op), 0); /* nothing outstanding */
  assert_int_equal(wd_coll_begin(c, 10.0, "all_gather", 1), FT_OK);
  assert_int_equal(wd_coll_begin(c, 12.0, "reduce_scatter", 2), FT_OK);
  assert_int_equal(wd_coll_begin(c, 11.0, "all_reduce", 3), FT_OK);
  assert_int_equal(wd_coll_outstanding(c), 3);
  assert_int_equal(wd_coll_check(c, 40.0, &op), 0); /* age exactly 30: not yet */
  assert_int_equal(wd_coll_check(c, 40.5, &op), 1);
  assert_string_equal(op.name, "all_gather");
  assert_int_equal(op.seq, 1);
  assert_true(op.begin == 10.0);
  assert_true(op.age_s == 30.5);
  /* stateless: reported again until it ends */
  assert_int_equal(wd_coll_check(c, 40.5, &op), 1);
  assert_int_equal(wd_coll_end(c, 1), FT_OK);
  assert_int_equal(wd_coll_check(c, 40.5, &op), 0); /* all_reduce age 29.5 */
  assert_int_equal(wd_coll_check(c, 41.25, &op), 1);
  assert_string_equal(op.name, "all_reduce"); /* began at 11, before seq 2 */
  assert_int_equal(op.seq, 3);
  assert_true(op.age_s == 30.25);
  assert_int_equal(wd_coll_end(c, 3), FT_OK);
  assert_int_equal(wd_coll_end(c, 2), FT_OK);
  assert_int_equal(wd_coll_outstanding(c), 0);
  assert_int_equal(wd_coll_check(c, 1e9, &op), 0);
  wd_coll_free(c);
}

static void test_errors_and_names(void **state) {
  wd_coll *c;
  assert_int_equal(wd_coll_new(0, &c), FT_EINVAL);
  assert_int_equal(wd_coll_new(1.0, &c), FT_OK);
  assert_int_equal(wd_coll_end(c, 7), FT_ENOENT);
  assert_int_equal(wd_coll_begin(c, 0.0, "x", 7), FT_OK);
  assert_int_equal(wd_coll_begin(c, 0.5, "y", 7), FT_EEXIST);
  char longname[200];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  assert_int_equal(wd_coll_begin(c, 0.25, longname, 8), FT_OK);
  assert_int_equal(wd_coll_begin(c, 0.75, NULL, 9), FT_OK);
  assert_int_equal(wd_coll_end(c, 7), FT_OK);
  wd_coll_op op;
  assert_int_equal(wd_coll_check(c, 2.0, &op), 1);
  assert_int_equal(op.seq, 8);
  assert_int_equal(strlen(op.name), WD_COLL_NAME_MAX - 1);
  assert_int_equal(wd_coll_end(c, 8), FT_OK);
  assert_int_equal(wd_coll_check(c, 2.0, &op), 1);
  assert_string_equal(op.name, "");
  wd_coll_reset(c);
  assert_int_equal(wd_coll_outstanding(c), 0);
  assert_int_equal(wd_coll_check(c, 2.0, NULL), FT_EINVAL);
  /* many outstanding ops: growth */
  for (uint64_t s = 0; s < 1000; s++)
    assert_int_equal(wd_coll_begin(c, (double)s, "op", s), FT_OK);
  assert_int_equal(wd_coll_outstanding(c), 1000);
  for (uint64_t s = 0; s < 999; s++)
    assert_int_equal(wd_coll_end(c, s), FT_OK);
  assert_int_equal(wd_coll_check(c, 1000.5, &op), 1);
  assert_int_equal(op.seq, 999);
  wd_coll_free(c);
  wd_coll_free(NULL);
}

#define NOPS 200000
typedef struct shared {
  wd_coll *c;
  atomic_int done;
  int bad;
} shared;

static void *trainer(void *arg) {
  shared *sh = arg;
  /* Ops begin at t = seq and end at once, except every 1000th which stays
   * open for 3 more ops; so no op is ever older than ~3 when the checker
   * looks at "now" = the newest begin time. */
  for (uint64_t s = 0; s < NOPS; s++) {
    if (wd_coll_begin(sh->c, (double)s, "all_gather", s) != FT_OK)
      sh->bad++;
    if (s % 1000 != 0 && wd_coll_end(sh->c, s) != FT_OK)
      sh->bad++;
    if (s >= 3 && (s - 3) % 1000 == 0 && wd_coll_end(sh->c, s - 3) != FT_OK)
      sh->bad++;
  }
  atomic_store(&sh->done, 1);
  return NULL;
}

static void test_two_threads(void **state) {
  shared sh;
  memset(&sh, 0, sizeof sh);
  atomic_init(&sh.done, 0);
  assert_int_equal(wd_coll_new(10.0, &sh.c), FT_OK);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, trainer, &sh), 0);
  long checks = 0, overdue = 0;
  while (!atomic_load(&sh.done)) {
    wd_coll_op op;
    int rc = wd_coll_check(sh.c, 0.0, &op); /* t = 0: nothing is ever overdue */
    assert_true(rc == 0);
    rc = wd_coll_check(sh.c, 1e12, &op); /* far future: whatever is open is */
    assert_true(rc == 0 || rc == 1);
    if (rc == 1) {
      overdue++;
      assert_string_equal(op.name, "all_gather");
      assert_true(op.seq < NOPS);
      assert_true(op.begin == (double)op.seq);
    }
    int n = wd_coll_outstanding(sh.c);
    assert_true(n >= 0 && n <= 5);
    checks++;
  }
  pthread_join(th, NULL);
  assert_int_equal(sh.bad, 0);
  /* The last long op (seq 199000) ended at 199003: nothing left open. */
  assert_int_equal(wd_coll_outstanding(sh.c), 0);
  assert_true(checks > 0);
  (void)overdue;
  wd_coll_free(sh.c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oldest_overdue),
      cmocka_unit_test(test_errors_and_names),
      cmocka_unit_test(test_two_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
