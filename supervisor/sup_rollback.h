/*
 * sup_rollback: the pure arithmetic of a loss-fault rollback: which global
 * batch a step consumes under a skip list, the skip range a
 * rollback_and_skip adds, and which checkpoints become GOOD.
 *
 * DATA POSITIONS (shared with the worker, see docs of ASSIGN in ft_wire.h):
 * step k (1-based) consumes global batch b_k. Skip ranges are ranges of
 * global batch indices [first, end). The rule, applied before each step:
 * while b lies in some range [f, e), b = e; the step consumes b; b + 1 is
 * next. Without skips b_k = k - 1. The supervisor never sees the worker's
 * data loader: it simulates this rule (sup_rollback_batch_of_step) so the
 * two always agree.
 *
 * INVARIANTS: a skip list kept by sup_rollback_skips_add is sorted by first,
 * its ranges are disjoint and not adjacent (merged), each first < end. Merging
 * never changes which batches the rule consumes (the rule only sees the
 * union of the ranges). Debug and sanitizer builds check both on entry to
 * and exit from sup_rollback_skips_add, and the GOOD tracker's order on
 * every change (sup_rollback.c: check_skips, check_skips_union,
 * check_good; a broken one aborts, common/ft_bug.h).
 *
 * GOOD decisions (sup_rollback_good_*): a committed checkpoint c becomes
 * GOOD when rank 0 has reported step >= c + window with no loss fault since
 * c. A tracker holds the candidates; it is plain data, no I/O.
 *
 * THREADING: none. FAILURE: plain return codes; no allocation.
 */
#ifndef SUP_ROLLBACK_H
#define SUP_ROLLBACK_H

#include "ft_wire.h"

#include <stdint.h>

/* The global batch index that step k (k >= 1) consumes under skips[0..n).
 * The ranges may be in any order and may overlap. k < 1: -1. */
int64_t sup_rollback_batch_of_step(const ft_wire_range *skips, int n, int64_t k);

/* Adds [first, end) to a sorted, merged list of *n ranges (capacity cap),
 * keeping it sorted and merged. FT_EINVAL if first < 0 or end <= first;
 * FT_ENOSPC (list unchanged) when it would need more than cap ranges. */
int sup_rollback_skips_add(ft_wire_range *skips, int *n, int cap, int64_t first, int64_t end);

/* The range a rollback_and_skip adds for a loss fault at step spike_step,
 * restoring checkpoint restore_step (-1: none, the run restarts at step 1):
 * with next = max(1, restore_step + 1) (the first step trained again),
 *   first = b_next, end = max(first + skip_batches, b_spike + 1)
 * both b computed with the skip list so far. So the spike's own batch and
 * at least skip_batches batches from the restore point are never trained
 * on again. skip_batches >= 0. */
void sup_rollback_skip_range(const ft_wire_range *skips, int n, int64_t restore_step,
                             int64_t spike_step, int64_t skip_batches, int64_t *first,
                             int64_t *end);

/* ---- GOOD candidates ------------------------------------------------------ */

#define SUP_ROLLBACK_MAX_CAND 256

typedef struct sup_rollback_good {
  int64_t step[SUP_ROLLBACK_MAX_CAND]; /* committed checkpoints, ascending */
  int tainted[SUP_ROLLBACK_MAX_CAND];  /* a loss fault came after it */
  int n;
} sup_rollback_good;

void sup_rollback_good_init(sup_rollback_good *g);
/* A checkpoint was committed (ignored if already present; the oldest
 * candidate is dropped when full). */
void sup_rollback_good_add(sup_rollback_good *g, int64_t step);
/* A loss fault at step s. rolled_back: the run restores restore_step and
 * re-trains from there: candidates > restore_step are dropped (they are
 * marked BAD), the others stay untainted, judged on the new timeline.
 * Otherwise (warn: training goes on with the spike in it) every candidate
 * < s is tainted: it never becomes GOOD. */
void sup_rollback_good_fault(sup_rollback_good *g, int64_t s, int rolled_back,
                             int64_t restore_step);
/* Rank 0 reported step k: writes to due[0..cap) the untainted candidates c
 * with k >= c + window, removes them (and tainted ones with k >= c + window,
 * which can never become GOOD) from the tracker; returns how many were
 * written. */
int sup_rollback_good_due(sup_rollback_good *g, int64_t k, int64_t window, int64_t *due, int cap);

#endif
