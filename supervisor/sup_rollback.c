/*
 * sup_rollback: pure rollback arithmetic (see sup_rollback.h). The
 * recovery machine (sup_recovery.c) applies what this file computes.
 *
 * sup_rollback_batch_of_step jumps over runs of unskipped batches instead of
 * walking step by step: O(n^2) per call for n ranges, independent of k, so
 * it is cheap for runs of millions of steps.
 */
#include "sup_rollback.h"

#include "ft_err.h"

#include <string.h>

/* The rule's skip: while b lies in some range, b = its end. */
static int64_t skip_forward(const ft_wire_range *r, int n, int64_t b) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < n; i++)
      if (b >= r[i].first && b < r[i].end) {
        b = r[i].end;
        moved = 1;
      }
  }
  return b;
}

int64_t sup_rollback_batch_of_step(const ft_wire_range *skips, int n, int64_t k) {
  if (k < 1)
    return -1;
  int64_t b = 0, left = k; /* steps still to consume, including step k */
  for (;;) {
    b = skip_forward(skips, n, b);
    int64_t next = INT64_MAX; /* the nearest range start after b */
    for (int i = 0; i < n; i++)
      if (skips[i].first > b && skips[i].first < next && skips[i].end > skips[i].first)
        next = skips[i].first;
    if (next == INT64_MAX || left <= next - b)
      return b + left - 1;
    left -= next - b;
    b = next;
  }
}

int sup_rollback_skips_add(ft_wire_range *skips, int *n, int cap, int64_t first, int64_t end) {
  if (first < 0 || end <= first)
    return ft_err_set(FT_EINVAL, "skip range [%lld, %lld) is empty or negative", (long long)first,
                      (long long)end);
  /* ranges overlapping or touching [first, end) merge into it */
  int lo = 0;
  while (lo < *n && skips[lo].end < first)
    lo++;
  int hi = lo; /* [lo, hi): the ranges merged */
  while (hi < *n && skips[hi].first <= end) {
    if (skips[hi].first < first)
      first = skips[hi].first;
    if (skips[hi].end > end)
      end = skips[hi].end;
    hi++;
  }
  int nn = *n - (hi - lo) + 1;
  if (nn > cap)
    return ft_err_set(FT_ENOSPC, "more than %d skip ranges", cap);
  memmove(&skips[lo + 1], &skips[hi], sizeof *skips * (size_t)(*n - hi));
  skips[lo].first = first;
  skips[lo].end = end;
  *n = nn;
  return FT_OK;
}

void sup_rollback_skip_range(const ft_wire_range *skips, int n, int64_t restore_step,
                             int64_t spike_step, int64_t skip_batches, int64_t *first,
                             int64_t *end) {
  int64_t next = restore_step + 1 < 1 ? 1 : restore_step + 1;
  int64_t bn = sup_rollback_batch_of_step(skips, n, next);
  int64_t bs = sup_rollback_batch_of_step(skips, n, spike_step < next ? next : spike_step);
  int64_t e = bn + (skip_batches > 0 ? skip_batches : 0);
  if (e < bs + 1)
    e = bs + 1;
  *first = bn;
  *end = e;
}

/* ---- GOOD candidates ------------------------------------------------------ */

void sup_rollback_good_init(sup_rollback_good *g) {
  memset(g, 0, sizeof *g);
}

static void drop(sup_rollback_good *g, int i) {
  memmove(&g->step[i], &g->step[i + 1], sizeof g->step[0] * (size_t)(g->n - i - 1));
  memmove(&g->tainted[i], &g->tainted[i + 1], sizeof g->tainted[0] * (size_t)(g->n - i - 1));
  g->n--;
}

void sup_rollback_good_add(sup_rollback_good *g, int64_t step) {
  int i = 0;
  while (i < g->n && g->step[i] < step)
    i++;
  if (i < g->n && g->step[i] == step)
    return;
  if (g->n == SUP_ROLLBACK_MAX_CAND) {
    if (i == 0)
      return; /* older than everything we track */
    drop(g, 0);
    i--;
  }
  memmove(&g->step[i + 1], &g->step[i], sizeof g->step[0] * (size_t)(g->n - i));
  memmove(&g->tainted[i + 1], &g->tainted[i], sizeof g->tainted[0] * (size_t)(g->n - i));
  g->step[i] = step;
  g->tainted[i] = 0;
  g->n++;
}

void sup_rollback_good_fault(sup_rollback_good *g, int64_t s, int rolled_back,
                             int64_t restore_step) {
  for (int i = g->n - 1; i >= 0; i--) {
    if (rolled_back) {
      if (g->step[i] > restore_step)
        drop(g, i);
    } else if (g->step[i] < s) {
      g->tainted[i] = 1;
    }
  }
}

int sup_rollback_good_due(sup_rollback_good *g, int64_t k, int64_t window, int64_t *due, int cap) {
  int nd = 0;
  for (int i = 0; i < g->n;) {
    if (k >= g->step[i] + window && (g->tainted[i] || nd < cap)) {
      if (!g->tainted[i])
        due[nd++] = g->step[i];
      drop(g, i);
      continue;
    }
    i++;
  }
  return nd;
}
