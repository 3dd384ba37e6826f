/*
 * wd_straggler: per-rank step-time outliers (docs/watchdog.md, "straggler").
 *
 * WHAT: once per step the caller passes every rank's step time (ms, or any
 * unit). Rank r is an outlier at a step when
 *
 *     time[r] > ratio * median(time of the other ranks)
 *
 * A rank that was an outlier in at least min_hits of its last `window`
 * observed steps is reported once (WD_STRAG_FLAGGED, with its ratio at that
 * step); it is reported again (WD_STRAG_CLEARED) after it has been a
 * non-outlier for min_hits consecutive observed steps, and its history
 * starts afresh then (so it needs min_hits new outlier steps to be flagged
 * again). The asymmetry is deliberate hysteresis: a rank that is slow every
 * other step stays flagged instead of flapping.
 *
 * WHY "median of the others": with 2 ranks the median of all would sit
 * between the two; excluding the rank itself makes the comparison fair for
 * any world size >= 2, and one slow rank cannot drag its own reference.
 *
 * INVARIANTS: a time that is NaN, infinite or < 0 means "no observation for
 * this rank at this step": its history does not move and it is not part of
 * the others' median. A step with fewer than 2 observed ranks judges nobody.
 * 1 <= min_hits <= window <= 64.
 *
 * THREADING: none (one owner: the supervisor). FAILURE: FT_EINVAL, FT_ENOMEM.
 */
#ifndef WD_STRAGGLER_H
#define WD_STRAGGLER_H

#include <stdint.h>

typedef struct wd_straggler_cfg {
  int nranks;   /* >= 2 */
  double ratio; /* > 1; default 1.5 */
  int window;   /* 1..64; default 20 */
  int min_hits; /* 1..window; default 10 */
} wd_straggler_cfg;

typedef enum wd_strag_kind {
  WD_STRAG_FLAGGED = 1, /* fault FT_FAULT_STRAGGLER */
  WD_STRAG_CLEARED = 2, /* the rank recovered */
} wd_strag_kind;

typedef struct wd_strag_event {
  wd_strag_kind kind;
  int rank;
  int64_t step;
  double ratio; /* time / median of the others at this step */
  int hits;     /* outlier steps in the window (FLAGGED) */
} wd_strag_event;

/* Defaults for n ranks: ratio 1.5, window 20, min_hits 10. */
void wd_straggler_cfg_default(wd_straggler_cfg *cfg, int nranks);

typedef struct wd_straggler wd_straggler;

int wd_straggler_new(const wd_straggler_cfg *cfg, wd_straggler **out);
void wd_straggler_free(wd_straggler *s); /* NULL: no-op */

/* Judges one step; times[0..nranks). Writes at most one event per rank to
 * out[0..cap) (cap >= nranks never loses one; events past cap are dropped
 * and their state change still happens). Returns the number written or a
 * negative FT_E*. */
int wd_straggler_step(wd_straggler *s, int64_t step, const double *times, wd_strag_event *out,
                      int cap);

/* 1 when the rank is currently flagged, 0 when not, -1 out of range. */
int wd_straggler_flagged(const wd_straggler *s, int rank);

#endif
