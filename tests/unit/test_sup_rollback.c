/*
 * test_sup_rollback: the pure rollback arithmetic of supervisor/sup_rollback:
 * the batch a step consumes under skip ranges (against a step-by-step
 * simulation of the rule as the worker applies it), merging skip lists,
 * the skip range of a rollback_and_skip, and the GOOD decisions; and that
 * the invariant checks (check_skips, check_good) catch a list or a tracker
 * that only a bug could leave (death tests, test_inv.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_inv.h"

#include "ft_err.h"
#include "sup_rollback.h"

#include <stdlib.h>

/* The rule, literally: before each step, while b is in a range, b = end. */
static int64_t brute_batch(const ft_wire_range *r, int n, int64_t k) {
  int64_t b = 0, got = -1;
  for (int64_t step = 1; step <= k; step++) {
    for (int moved = 1; moved;) {
      moved = 0;
      for (int i = 0; i < n; i++)
        if (b >= r[i].first && b < r[i].end) {
          b = r[i].end;
          moved = 1;
        }
    }
    got = b;
    b++;
  }
  return got;
}

static void test_no_skips(void **st) {
  (void)st;
  assert_int_equal(sup_rollback_batch_of_step(NULL, 0, 1), 0);
  assert_int_equal(sup_rollback_batch_of_step(NULL, 0, 57), 56);
  assert_int_equal(sup_rollback_batch_of_step(NULL, 0, 0), -1);
}

static void test_simple_skip(void **st) {
  (void)st;
  ft_wire_range r[] = {{10, 20}};
  /* steps 1..10 consume 0..9, step 11 consumes 20 */
  assert_int_equal(sup_rollback_batch_of_step(r, 1, 10), 9);
  assert_int_equal(sup_rollback_batch_of_step(r, 1, 11), 20);
  assert_int_equal(sup_rollback_batch_of_step(r, 1, 12), 21);
  ft_wire_range z[] = {{0, 5}};
  assert_int_equal(sup_rollback_batch_of_step(z, 1, 1), 5);
}

static void test_matches_rule_random(void **st) {
  (void)st;
  srand(7);
  for (int trial = 0; trial < 300; trial++) {
    ft_wire_range r[6];
    int n = rand() % 6;
    for (int i = 0; i < n; i++) {
      r[i].first = rand() % 80;
      r[i].end = r[i].first + 1 + rand() % 15; /* unsorted, overlapping, chained */
    }
    for (int64_t k = 1; k <= 120; k++)
      assert_int_equal(sup_rollback_batch_of_step(r, n, k), brute_batch(r, n, k));
  }
}

static void test_skips_add_merges(void **st) {
  (void)st;
  ft_wire_range r[4];
  int n = 0;
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 50, 60), FT_OK);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 10, 20), FT_OK);
  assert_int_equal(n, 2);
  assert_int_equal(r[0].first, 10);
  assert_int_equal(r[1].first, 50);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 15, 50), FT_OK); /* bridges both */
  assert_int_equal(n, 1);
  assert_int_equal(r[0].first, 10);
  assert_int_equal(r[0].end, 60);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 70, 71), FT_OK);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 80, 81), FT_OK);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 90, 91), FT_OK);
  assert_int_equal(n, 4);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 100, 101), FT_ENOSPC);
  assert_int_equal(n, 4);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, 5, 5), FT_EINVAL);
  assert_int_equal(sup_rollback_skips_add(r, &n, 4, -1, 5), FT_EINVAL);
}

static void test_merge_keeps_semantics(void **st) {
  (void)st;
  srand(11);
  for (int trial = 0; trial < 200; trial++) {
    ft_wire_range raw[5], merged[5];
    int n = 1 + rand() % 5, nm = 0;
    for (int i = 0; i < n; i++) {
      raw[i].first = rand() % 60;
      raw[i].end = raw[i].first + 1 + rand() % 12;
      assert_int_equal(sup_rollback_skips_add(merged, &nm, 5, raw[i].first, raw[i].end), FT_OK);
    }
    for (int i = 1; i < nm; i++)
      assert_true(merged[i - 1].end < merged[i].first);
    for (int64_t k = 1; k <= 90; k++)
      assert_int_equal(sup_rollback_batch_of_step(merged, nm, k), brute_batch(raw, n, k));
  }
}

static void test_skip_range(void **st) {
  (void)st;
  int64_t f, e;
  /* spike at step 57, checkpoint 50: next step 51 consumes batch 50 */
  sup_rollback_skip_range(NULL, 0, 50, 57, 200, &f, &e);
  assert_int_equal(f, 50);
  assert_int_equal(e, 250);
  /* skip_batches smaller than the distance: the spike's batch is covered */
  sup_rollback_skip_range(NULL, 0, 50, 57, 3, &f, &e);
  assert_int_equal(f, 50);
  assert_int_equal(e, 57); /* b_57 = 56, so end = 57 */
  /* no checkpoint before: from step 1 (batch 0) */
  sup_rollback_skip_range(NULL, 0, -1, 4, 2, &f, &e);
  assert_int_equal(f, 0);
  assert_int_equal(e, 4);
  /* with an earlier skip [10, 20): step 11 consumed 20 */
  ft_wire_range r[] = {{10, 20}};
  sup_rollback_skip_range(r, 1, 10, 15, 2, &f, &e);
  assert_int_equal(f, 20);
  assert_int_equal(e, 25); /* b_15 = 24 */
  /* after adding it, the restarted step 11 consumes past the spike */
  ft_wire_range l[4] = {{10, 20}};
  int n = 1;
  assert_int_equal(sup_rollback_skips_add(l, &n, 4, f, e), FT_OK);
  assert_int_equal(sup_rollback_batch_of_step(l, n, 11), 25);
}

static void test_good_basic(void **st) {
  (void)st;
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  sup_rollback_good_add(&g, 10);
  sup_rollback_good_add(&g, 20);
  sup_rollback_good_add(&g, 10); /* repeat: ignored */
  assert_int_equal(g.n, 2);
  int64_t due[8];
  assert_int_equal(sup_rollback_good_due(&g, 59, 50, due, 8), 0);
  assert_int_equal(sup_rollback_good_due(&g, 60, 50, due, 8), 1);
  assert_int_equal(due[0], 10);
  assert_int_equal(sup_rollback_good_due(&g, 60, 50, due, 8), 0); /* once */
  assert_int_equal(sup_rollback_good_due(&g, 75, 50, due, 8), 1);
  assert_int_equal(due[0], 20);
  assert_int_equal(g.n, 0);
}

static void test_good_after_rollback(void **st) {
  (void)st;
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  sup_rollback_good_add(&g, 10);
  sup_rollback_good_add(&g, 20);
  sup_rollback_good_add(&g, 30);
  /* spike at 33, restore 30: nothing dropped; 40 would be */
  sup_rollback_good_add(&g, 40);
  sup_rollback_good_fault(&g, 43, 1, 30);
  assert_int_equal(g.n, 3);
  int64_t due[8];
  /* the new timeline passes 10 + 50 */
  assert_int_equal(sup_rollback_good_due(&g, 60, 50, due, 8), 1);
  assert_int_equal(due[0], 10);
  /* a rollback to -1 drops everything */
  sup_rollback_good_fault(&g, 65, 1, -1);
  assert_int_equal(g.n, 0);
}

static void test_good_warn_taints(void **st) {
  (void)st;
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  sup_rollback_good_add(&g, 10);
  sup_rollback_good_fault(&g, 33, 0, -1); /* warn: training goes on */
  sup_rollback_good_add(&g, 40);          /* after the spike: clean */
  int64_t due[8];
  assert_int_equal(sup_rollback_good_due(&g, 100, 50, due, 8), 1);
  assert_int_equal(due[0], 40);
  assert_int_equal(g.n, 0); /* the tainted one is gone too */
}

static void test_good_cap(void **st) {
  (void)st;
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  for (int i = 1; i <= SUP_ROLLBACK_MAX_CAND + 5; i++)
    sup_rollback_good_add(&g, i);
  assert_int_equal(g.n, SUP_ROLLBACK_MAX_CAND);
  assert_int_equal(g.step[0], 6); /* the oldest were dropped */
  int64_t due[2];
  assert_int_equal(sup_rollback_good_due(&g, 1000, 1, due, 2), 2);
  assert_int_equal(g.n, SUP_ROLLBACK_MAX_CAND - 2); /* the rest wait for the next call */
}

/* R1: a kept skip list that is not sorted (a caller that appended instead
 * of adding) is refused on entry to the next add. */
static void unsorted_skips_body(void) {
  ft_wire_range r[4] = {{50, 60}, {10, 20}};
  int n = 2;
  sup_rollback_skips_add(r, &n, 4, 70, 80);
}
static void test_inv_skips_unsorted(void **st) {
  (void)st;
  assert_inv_broken(unsorted_skips_body,
                    "R1: skip ranges 0 [50, 60) and 1 [10, 20) are not sorted");
}

/* R1: overlapping ranges, and an empty one. */
static void overlap_skips_body(void) {
  ft_wire_range r[4] = {{10, 30}, {20, 40}};
  int n = 2;
  sup_rollback_skips_add(r, &n, 4, 70, 80);
}
static void empty_skips_body(void) {
  ft_wire_range r[4] = {{10, 10}};
  int n = 1;
  sup_rollback_skips_add(r, &n, 4, 70, 80);
}
static void test_inv_skips_overlap(void **st) {
  (void)st;
  assert_inv_broken(overlap_skips_body, "are not sorted, disjoint and apart");
  assert_inv_broken(empty_skips_body, "R1: skip range 0 is [10, 10)");
}

/* G1: a tracker whose candidates are out of order. */
static void good_unsorted_body(void) {
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  sup_rollback_good_add(&g, 10);
  sup_rollback_good_add(&g, 20);
  g.step[1] = 5; /* a bug's write */
  sup_rollback_good_add(&g, 30);
}
static void good_tainted_body(void) {
  sup_rollback_good g;
  sup_rollback_good_init(&g);
  sup_rollback_good_add(&g, 10);
  g.tainted[0] = 7;
  int64_t due[4];
  sup_rollback_good_due(&g, 11, 100, due, 4);
}
static void test_inv_good(void **st) {
  (void)st;
  assert_inv_broken(good_unsorted_body, "G1: GOOD candidates not ascending: step 10 then 5");
  assert_inv_broken(good_tainted_body, "G1: candidate 10 tainted 7");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_skips),
      cmocka_unit_test(test_simple_skip),
      cmocka_unit_test(test_matches_rule_random),
      cmocka_unit_test(test_skips_add_merges),
      cmocka_unit_test(test_merge_keeps_semantics),
      cmocka_unit_test(test_skip_range),
      cmocka_unit_test(test_good_basic),
      cmocka_unit_test(test_good_after_rollback),
      cmocka_unit_test(test_good_warn_taints),
      cmocka_unit_test(test_good_cap),
      cmocka_unit_test(test_inv_skips_unsorted),
      cmocka_unit_test(test_inv_skips_overlap),
      cmocka_unit_test(test_inv_good),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
