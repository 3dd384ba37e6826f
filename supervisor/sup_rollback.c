/*
 * sup_rollback: pure rollback arithmetic (see sup_rollback.h). The
 * recovery machine (sup_recovery.c) applies what this file computes.
 *
 * sup_rollback_batch_of_step jumps over runs of unskipped batches instead of
 * walking step by step: O(n^2) per call for n ranges, independent of k, so
 * it is cheap for runs of millions of steps.
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h):
 *   R1 a skip list kept by sup_rollback_skips_add is sorted by first, its
 *      ranges disjoint and not adjacent, each 0 <= first < end, and n within
 *      [0, cap] (check_skips, on entry to and exit from skips_add);
 *   R2 an add changes the union of the ranges by exactly [first, end): every
 *      range before it lies inside one after it, and the lengths add up
 *      (check_skips_union, on exit; a refused add leaves the list as it was);
 *   G1 the GOOD tracker's candidates are strictly ascending, 0 <= n <= its
 *      capacity, each tainted 0 or 1, and an added step is one of them
 *      unless the tracker is full of newer ones (check_good, check_good_add,
 *      on entry to and exit from every sup_rollback_good_* that changes it);
 *   G2 after a rollback no candidate is past the restored step, after a warn
 *      every candidate before the spike is tainted, and after good_due none
 *      is left that was due, but untainted ones past the caller's cap
 *      (check_good_fault, check_good_due).
 * All O(n), n the list's length: at most FT_WIRE_MAX_SKIPS ranges (the old
 * list is copied for R2 only when it is short) and SUP_ROLLBACK_MAX_CAND
 * candidates, once per rollback or reported step.
 */
#include "sup_rollback.h"

#include "ft_bug.h"
#include "ft_err.h"

#include <inttypes.h>
#include <string.h>

#if FT_INVARIANTS_ON
/* R1, for the list a caller keeps (sup_recovery.c's s->skips). */
static void check_skips(const ft_wire_range *r, int n, int cap) {
  FT_ASSERT_INV(n >= 0 && n <= cap, "R1: %d skip ranges, capacity %d", n, cap);
  for (int i = 0; i < n; i++) {
    FT_ASSERT_INV(r[i].first >= 0 && r[i].first < r[i].end,
                  "R1: skip range %d is [%" PRId64 ", %" PRId64 ")", i, r[i].first, r[i].end);
    FT_ASSERT_INV(i == 0 || r[i - 1].end < r[i].first,
                  "R1: skip ranges %d [%" PRId64 ", %" PRId64 ") and %d [%" PRId64 ", %" PRId64
                  ") are not sorted, disjoint and apart",
                  i - 1, r[i - 1].first, r[i - 1].end, i, r[i].first, r[i].end);
  }
}

/* The summed lengths of n disjoint ranges, modulo 2^64 (both sides of R2's
 * equation wrap alike). */
static uint64_t skips_len(const ft_wire_range *r, int n) {
  uint64_t l = 0;
  for (int i = 0; i < n; i++)
    l += (uint64_t)(r[i].end - r[i].first);
  return l;
}

/* The part of [first, end) that the disjoint ranges r cover. */
static uint64_t skips_overlap(const ft_wire_range *r, int n, int64_t first, int64_t end) {
  uint64_t l = 0;
  for (int i = 0; i < n; i++) {
    int64_t a = r[i].first > first ? r[i].first : first, b = r[i].end < end ? r[i].end : end;
    if (a < b)
      l += (uint64_t)(b - a);
  }
  return l;
}

/* 1 if [first, end) lies inside one of the sorted ranges r. */
static int skips_cover(const ft_wire_range *r, int n, int64_t first, int64_t end) {
  for (int i = 0; i < n && r[i].first <= first; i++)
    if (end <= r[i].end)
      return 1;
  return 0;
}

/* What an add must leave (R2): the old ranges (old, nold; NULL when not
 * copied) and [first, end) inside the new ones, whose lengths sum to the
 * old union's plus what the add did not overlap (want). */
static void check_skips_union(const ft_wire_range *r, int n, const ft_wire_range *old, int nold,
                              int64_t first, int64_t end, uint64_t want) {
  FT_ASSERT_INV(skips_len(r, n) == want,
                "R2: the skip ranges cover %" PRIu64 " batches after adding [%" PRId64 ", %" PRId64
                "), %" PRIu64 " expected",
                skips_len(r, n), first, end, want);
  FT_ASSERT_INV(skips_cover(r, n, first, end),
                "R2: [%" PRId64 ", %" PRId64 ") is not skipped after its add", first, end);
  for (int i = 0; old && i < nold; i++)
    FT_ASSERT_INV(skips_cover(r, n, old[i].first, old[i].end),
                  "R2: [%" PRId64 ", %" PRId64 ") is no longer skipped after adding [%" PRId64
                  ", %" PRId64 ")",
                  old[i].first, old[i].end, first, end);
}

/* G1 */
static void check_good(const sup_rollback_good *g) {
  FT_ASSERT_INV(g->n >= 0 && g->n <= SUP_ROLLBACK_MAX_CAND, "G1: %d GOOD candidates", g->n);
  for (int i = 0; i < g->n; i++) {
    FT_ASSERT_INV(i == 0 || g->step[i - 1] < g->step[i],
                  "G1: GOOD candidates not ascending: step %" PRId64 " then %" PRId64,
                  g->step[i - 1], g->step[i]);
    FT_ASSERT_INV(g->tainted[i] == 0 || g->tainted[i] == 1, "G1: candidate %" PRId64 " tainted %d",
                  g->step[i], g->tainted[i]);
  }
}

/* G1 after sup_rollback_good_add: step is tracked, unless the tracker is
 * full of newer ones */
static void check_good_add(const sup_rollback_good *g, int64_t step) {
  check_good(g);
  int have = 0;
  for (int i = 0; i < g->n && !have; i++)
    have = g->step[i] == step;
  FT_ASSERT_INV(have || (g->n == SUP_ROLLBACK_MAX_CAND && step < g->step[0]),
                "G1: committed step %" PRId64 " is not a GOOD candidate after its add", step);
}

/* G2, after sup_rollback_good_fault */
static void check_good_fault(const sup_rollback_good *g, int64_t s, int rolled_back,
                             int64_t restore_step) {
  check_good(g);
  for (int i = 0; i < g->n; i++) {
    if (rolled_back)
      FT_ASSERT_INV(g->step[i] <= restore_step,
                    "G2: candidate %" PRId64 " kept past the restored step %" PRId64, g->step[i],
                    restore_step);
    else
      FT_ASSERT_INV(g->step[i] >= s || g->tainted[i],
                    "G2: candidate %" PRId64 " untainted after a loss fault at step %" PRId64,
                    g->step[i], s);
  }
}

/* G2, after sup_rollback_good_due wrote nd of cap */
static void check_good_due(const sup_rollback_good *g, int64_t k, int64_t window, int nd, int cap) {
  check_good(g);
  FT_ASSERT_INV(nd >= 0 && nd <= (cap > 0 ? cap : 0), "G2: %d due of %d", nd, cap);
  for (int i = 0; i < g->n; i++)
    FT_ASSERT_INV(k < g->step[i] + window || (!g->tainted[i] && nd >= cap),
                  "G2: candidate %" PRId64 " (tainted %d) still tracked at step %" PRId64
                  ", window %" PRId64,
                  g->step[i], g->tainted[i], k, window);
}
#else
static void check_skips(const ft_wire_range *r, int n, int cap) {}
static void check_good(const sup_rollback_good *g) {}
static void check_good_add(const sup_rollback_good *g, int64_t step) {}
static void check_good_fault(const sup_rollback_good *g, int64_t s, int rolled_back,
                             int64_t restore_step) {}
static void check_good_due(const sup_rollback_good *g, int64_t k, int64_t window, int nd, int cap) {
}
#endif

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

static int skips_add(ft_wire_range *skips, int *n, int cap, int64_t first, int64_t end) {
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

/* R2 needs the old list: copied when it is this short (else only the
 * lengths and the new range are checked). */
#define CHECK_SKIPS_COPY 64

int sup_rollback_skips_add(ft_wire_range *skips, int *n, int cap, int64_t first, int64_t end) {
  check_skips(skips, *n, cap);
#if FT_INVARIANTS_ON
  ft_wire_range old[CHECK_SKIPS_COPY];
  int nold = *n, copied = nold <= CHECK_SKIPS_COPY;
  if (copied)
    memcpy(old, skips, sizeof *skips * (size_t)nold);
  uint64_t before = skips_len(skips, nold), want = before;
  if (first >= 0 && end > first)
    want += (uint64_t)(end - first) - skips_overlap(skips, nold, first, end);
#endif
  int rc = skips_add(skips, n, cap, first, end);
  check_skips(skips, *n, cap);
#if FT_INVARIANTS_ON
  if (rc == FT_OK)
    check_skips_union(skips, *n, copied ? old : NULL, nold, first, end, want);
  else
    FT_ASSERT_INV(*n == nold && skips_len(skips, *n) == before &&
                      (!copied || !memcmp(old, skips, sizeof *skips * (size_t)nold)),
                  "R2: a refused add (rc %d) changed the skip list", rc);
#endif
  return rc;
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

static void good_add(sup_rollback_good *g, int64_t step) {
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

void sup_rollback_good_add(sup_rollback_good *g, int64_t step) {
  check_good(g);
  good_add(g, step);
  check_good_add(g, step);
}

void sup_rollback_good_fault(sup_rollback_good *g, int64_t s, int rolled_back,
                             int64_t restore_step) {
  check_good(g);
  for (int i = g->n - 1; i >= 0; i--) {
    if (rolled_back) {
      if (g->step[i] > restore_step)
        drop(g, i);
    } else if (g->step[i] < s) {
      g->tainted[i] = 1;
    }
  }
  check_good_fault(g, s, rolled_back, restore_step);
}

int sup_rollback_good_due(sup_rollback_good *g, int64_t k, int64_t window, int64_t *due, int cap) {
  check_good(g);
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
  check_good_due(g, k, window, nd, cap);
  return nd;
}
