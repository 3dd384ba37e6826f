/* Unit tests of supervisor/sup_gang.c: ranks, first gangs, recovery plans. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_gang.h"

#include <string.h>

static void test_rank(void **st) {
  assert_int_equal(sup_gang_rank(0, 0, 2), 0);
  assert_int_equal(sup_gang_rank(0, 1, 2), 1);
  assert_int_equal(sup_gang_rank(2, 1, 2), 5);
  assert_int_equal(sup_gang_rank(3, 0, 1), 3);
}

static void test_parse(void **st) {
  assert_int_equal(sup_no_spares_parse("shrink"), SUP_NOSPARE_SHRINK);
  assert_int_equal(sup_no_spares_parse("wait"), SUP_NOSPARE_WAIT);
  assert_int_equal(sup_no_spares_parse("fail"), SUP_NOSPARE_FAIL);
  assert_int_equal(sup_no_spares_parse("panic"), -1);
}

static void test_initial(void **st) {
  int roles[4] = {SUP_ROLE_ACTIVE, SUP_ROLE_QUARANTINED, SUP_ROLE_ACTIVE, SUP_ROLE_SPARE};
  sup_plan p;
  sup_gang_initial(roles, 4, 2, 2, 16, SUP_NOSPARE_FAIL, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.ngang, 2);
  assert_int_equal(p.gang[0], 0);
  assert_int_equal(p.gang[1], 2); /* skips the quarantined node */
  assert_int_equal(roles[2], SUP_ROLE_ACTIVE);
  assert_int_equal(roles[3], SUP_ROLE_SPARE);
  assert_int_equal(roles[1], SUP_ROLE_QUARANTINED);
  assert_int_equal(p.world_after, 4);

  int r2[3] = {SUP_ROLE_QUARANTINED, SUP_ROLE_ACTIVE, SUP_ROLE_QUARANTINED};
  sup_gang_initial(r2, 3, 2, 1, 16, SUP_NOSPARE_FAIL, &p);
  assert_int_equal(p.verdict, SUP_PLAN_FAIL);
  sup_gang_initial(r2, 3, 2, 1, 16, SUP_NOSPARE_SHRINK, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.ngang, 1);
  assert_int_equal(p.shrunk, 1);
  assert_int_equal(p.world_after, 1);
}

static void test_swap_spare_in_place(void **st) {
  int gang[3] = {0, 1, 2}, faulty[5] = {0, 1, 0, 0, 0}, spares[2] = {4, 3};
  sup_plan p;
  sup_gang_plan(gang, 3, faulty, spares, 2, 2, 48, SUP_NOSPARE_FAIL, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.ngang, 3);
  assert_int_equal(p.gang[0], 0);
  assert_int_equal(p.gang[1], 4); /* the spare takes the faulty node's position */
  assert_int_equal(p.gang[2], 2);
  assert_int_equal(p.nquarantine, 1);
  assert_int_equal(p.quarantine[0], 1);
  assert_int_equal(p.npromote, 1);
  assert_int_equal(p.promote_spare[0], 4);
  assert_int_equal(p.promote_for[0], 1);
  assert_int_equal(p.nrestart, 2); /* healthy nodes restart in place */
  assert_int_equal(p.restart[0], 0);
  assert_int_equal(p.restart[1], 2);
  assert_int_equal(p.shrunk, 0);
  assert_int_equal(p.world_after, 6);
}

static void test_no_fault_restarts_all(void **st) {
  int gang[2] = {0, 1}, faulty[2] = {0, 0};
  sup_plan p;
  sup_gang_plan(gang, 2, faulty, NULL, 0, 1, 16, SUP_NOSPARE_FAIL, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.nrestart, 2);
  assert_int_equal(p.nquarantine, 0);
  assert_int_equal(p.ngang, 2);
}

static void test_no_spares_policies(void **st) {
  int gang[2] = {0, 1}, faulty[2] = {0, 1};
  sup_plan p;
  sup_gang_plan(gang, 2, faulty, NULL, 0, 1, 16, SUP_NOSPARE_SHRINK, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.ngang, 1);
  assert_int_equal(p.gang[0], 0);
  assert_int_equal(p.shrunk, 1);
  assert_int_equal(p.world_before, 2);
  assert_int_equal(p.world_after, 1);
  assert_int_equal(p.nquarantine, 1);

  sup_gang_plan(gang, 2, faulty, NULL, 0, 1, 16, SUP_NOSPARE_WAIT, &p);
  assert_int_equal(p.verdict, SUP_PLAN_WAIT);
  sup_gang_plan(gang, 2, faulty, NULL, 0, 1, 16, SUP_NOSPARE_FAIL, &p);
  assert_int_equal(p.verdict, SUP_PLAN_FAIL);
  assert_non_null(strstr(p.reason, "no spare"));
}

static void test_shrink_batch_and_empty(void **st) {
  /* 3 nodes x 1 -> 2: global batch 6 divides 3 but not... 6 % 2 == 0; use 9 */
  int gang[3] = {0, 1, 2}, faulty[3] = {0, 0, 1};
  sup_plan p;
  sup_gang_plan(gang, 3, faulty, NULL, 0, 1, 9, SUP_NOSPARE_SHRINK, &p);
  assert_int_equal(p.verdict, SUP_PLAN_FAIL);
  assert_non_null(strstr(p.reason, "not divisible"));
  int g1[1] = {0}, f1[1] = {1};
  sup_gang_plan(g1, 1, f1, NULL, 0, 1, 8, SUP_NOSPARE_SHRINK, &p);
  assert_int_equal(p.verdict, SUP_PLAN_FAIL);
  assert_non_null(strstr(p.reason, "no nodes left"));
}

static void test_more_faults_than_spares(void **st) {
  int gang[3] = {0, 1, 2}, faulty[4] = {1, 0, 1, 0}, spares[1] = {3};
  sup_plan p;
  sup_gang_plan(gang, 3, faulty, spares, 1, 1, 4, SUP_NOSPARE_SHRINK, &p);
  assert_int_equal(p.verdict, SUP_PLAN_OK);
  assert_int_equal(p.ngang, 2);
  assert_int_equal(p.gang[0], 3); /* first faulty node gets the spare */
  assert_int_equal(p.gang[1], 1);
  assert_int_equal(p.nquarantine, 2);
  assert_int_equal(p.shrunk, 1);
}

/* recovery.node_failures_to_quarantine within node_failure_window_s: a
 * node is quarantined on the threshold-th failure inside the window, never
 * for failures spread wider apart than the window. */
static void test_failure_window(void **st) {
  sup_failures f;
  memset(&f, 0, sizeof f);
  assert_int_equal(sup_failures_add(&f, 100.0, 600.0), 1);
  assert_false(sup_failures_quarantine(1, 2)); /* the first: restart in place */
  assert_int_equal(sup_failures_add(&f, 300.0, 600.0), 2);
  assert_true(sup_failures_quarantine(2, 2)); /* the second inside 600 s */
  /* spread out: each one alone in its window */
  memset(&f, 0, sizeof f);
  for (int i = 0; i < 10; i++)
    assert_int_equal(sup_failures_add(&f, 1000.0 * i, 600.0), 1);
  /* the edge of the window still counts */
  assert_int_equal(sup_failures_add(&f, 9600.0, 600.0), 2);
  /* threshold 1: every failure quarantines; 0 is taken as 1 */
  assert_true(sup_failures_quarantine(1, 1));
  assert_true(sup_failures_quarantine(1, 0));
  assert_false(sup_failures_quarantine(2, 3));
  /* a full history forgets the oldest, the count stays right */
  memset(&f, 0, sizeof f);
  for (int i = 0; i < SUP_FAIL_HIST + 10; i++)
    assert_int_equal(sup_failures_add(&f, (double)i, 1e9),
                     i < SUP_FAIL_HIST ? i + 1 : SUP_FAIL_HIST);
}

/* A worker's silence never includes the supervisor's own stall. */
static void test_silence(void **st) {
  /* no stall: plain silence */
  assert_true(sup_silence_s(100.0, 90.0, 0.0) == 10.0);
  /* the supervisor stalled until 99: the worker's last frame at 90 was
   * before it, so only 1 s of silence is the worker's */
  assert_true(sup_silence_s(100.0, 90.0, 99.0) == 1.0);
  /* a frame after the stall: measured from the frame */
  assert_true(sup_silence_s(100.0, 99.5, 99.0) == 0.5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rank),
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_initial),
      cmocka_unit_test(test_swap_spare_in_place),
      cmocka_unit_test(test_no_fault_restarts_all),
      cmocka_unit_test(test_no_spares_policies),
      cmocka_unit_test(test_shrink_batch_and_empty),
      cmocka_unit_test(test_more_faults_than_spares),
      cmocka_unit_test(test_failure_window),
      cmocka_unit_test(test_silence),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
