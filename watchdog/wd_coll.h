/*
 * wd_coll: collective-operation timer for the worker's watchdog thread
 * (the "collective timeout" detector of docs/watchdog.md).
 *
 * WHAT: the training thread calls wd_coll_begin(t, name, seq) before it
 * enqueues a collective and wd_coll_end(seq) when the collective has
 * completed; the watchdog thread calls wd_coll_check(t) now and then and gets
 * the oldest outstanding op when it is older than timeout_s. That is how a
 * hang inside NCCL/Gloo is noticed long before NCCL's own default timeout.
 *
 * WHY: a collective that never returns blocks the training thread, so only
 * another thread can notice; this module is the small piece of state the two
 * threads share. Time is passed in (seconds, a monotonic clock), so the tests
 * are exact.
 *
 * INVARIANTS: seq numbers of outstanding ops are unique (begin with a seq
 * already outstanding is FT_EEXIST); at most WD_COLL_MAX_OUTSTANDING ops are
 * outstanding; names are copied (truncated to WD_COLL_NAME_MAX - 1 bytes).
 * wd_coll_check is stateless: it reports the same overdue op on every call
 * until that op ends or wd_coll_reset is called; the caller acts once
 * (abort the communicator, send FAULT).
 *
 * THREADING: every function takes the tracker's own mutex, so begin/end on
 * the training thread and check on the watchdog thread need no outside lock.
 * The mutex is held only for a few array operations (never across I/O).
 * FAILURE: FT_EINVAL, FT_EEXIST, FT_ENOENT, FT_ENOMEM; never aborts.
 */
#ifndef WD_COLL_H
#define WD_COLL_H

#include <stdint.h>

#define WD_COLL_NAME_MAX 48
#define WD_COLL_MAX_OUTSTANDING 4096

typedef struct wd_coll wd_coll;

typedef struct wd_coll_op {
  char name[WD_COLL_NAME_MAX]; /* e.g. "all_gather" */
  uint64_t seq;                /* the caller's sequence number */
  double begin;                /* time of wd_coll_begin */
  double age_s;                /* t - begin at the check */
} wd_coll_op;

/* timeout_s > 0. *out owned by the caller (wd_coll_free). */
int wd_coll_new(double timeout_s, wd_coll **out);
void wd_coll_free(wd_coll *c); /* NULL: no-op; no other thread may use it */

/* Marks op seq (named op_name, may be NULL) as started at time t. */
int wd_coll_begin(wd_coll *c, double t, const char *op_name, uint64_t seq);

/* Marks op seq as finished. FT_ENOENT when it was not outstanding. */
int wd_coll_end(wd_coll *c, uint64_t seq);

/* Forgets every outstanding op (after the communicator was aborted). */
void wd_coll_reset(wd_coll *c);

/* 1 and *op filled when the oldest outstanding op is older than timeout_s
 * at time t (t - begin > timeout_s); 0 when none is; negative FT_E* on bad
 * arguments. */
int wd_coll_check(wd_coll *c, double t, wd_coll_op *op);

/* Number of outstanding ops. */
int wd_coll_outstanding(wd_coll *c);

#endif
