/*
 * sup_gang: the pure decisions of the node pool: ranks of a gang, which
 * nodes form the first gang, and what a recovery does with each node.
 *
 * A gang is an ordered list of node indices; rank of (gang position p,
 * slot j) = p*G + j, world = ngang*G. Pure functions over plain arrays, so
 * every decision the recovery machine takes has a unit test
 * (tests/unit/test_sup_gang.c). No I/O, no allocation.
 */
#ifndef SUP_GANG_H
#define SUP_GANG_H

#define SUP_MAX_NODES 32768

/* Roles of a node in the pool. */
enum sup_role {
  SUP_ROLE_ACTIVE = 0,      /* in the gang */
  SUP_ROLE_SPARE = 1,       /* launched, idle: a warm spare */
  SUP_ROLE_QUARANTINED = 2, /* faulty: never used again in this run */
  SUP_ROLE_LOST = 3,        /* a spare whose process died: out of the pool */
  SUP_ROLE_IDLE = 4,        /* healthy but not needed (no processes) */
};
const char *sup_role_name(int role);

enum sup_no_spares { SUP_NOSPARE_SHRINK = 0, SUP_NOSPARE_WAIT = 1, SUP_NOSPARE_FAIL = 2 };
/* "shrink" | "wait" | "fail" -> enum; -1 if unknown. */
int sup_no_spares_parse(const char *s);

static inline int sup_gang_rank(int pos, int slot, int G) {
  return pos * G + slot;
}

enum sup_verdict { SUP_PLAN_OK = 0, SUP_PLAN_WAIT = 1, SUP_PLAN_FAIL = 2 };

typedef struct sup_plan {
  int verdict;             /* enum sup_verdict */
  int gang[SUP_MAX_NODES]; /* the new gang, in rank order */
  int ngang;
  int restart[SUP_MAX_NODES]; /* healthy old gang nodes restarted in place */
  int nrestart;
  int quarantine[SUP_MAX_NODES]; /* faulty nodes (all of them) */
  int nquarantine;
  int promote_spare[SUP_MAX_NODES]; /* spare promote_spare[i] replaces */
  int promote_for[SUP_MAX_NODES];   /* faulty node promote_for[i] */
  int npromote;
  int shrunk; /* 1 if the world got smaller */
  int world_before, world_after;
  char reason[256]; /* for FAIL and WAIT */
} sup_plan;

/* The first gang of a run: the first `want` nodes of 0..nnodes-1 whose
 * role is not QUARANTINED/LOST, the rest of the usable ones become spares
 * (roles[] is updated: ACTIVE / SPARE). Fewer than `want` usable nodes:
 * policy shrink -> a smaller gang (if it divides global_batch), else FAIL.
 * Fills plan->gang/ngang/verdict/reason (and world_* / shrunk). */
void sup_gang_initial(int *roles, int nnodes, int want, int G, int global_batch, int policy,
                      sup_plan *plan);

/* Recovery decision (step 4 of the recovery machine in sup_recovery.c).
 * gang/ngang: the old gang; faulty[n] != 0 for a node blamed for a fault;
 * spares: usable warm spares in order of preference (connected first);
 * policy: enum sup_no_spares; global_batch: train.global_batch.
 * Each faulty node is quarantined and replaced, at its gang position, by the
 * next spare; with none left: shrink drops it, wait -> WAIT, fail -> FAIL.
 * Healthy nodes stay at their positions and are restarted in place.
 * A new world that does not divide global_batch -> FAIL with the reason;
 * an empty gang -> FAIL ("no nodes left"). */
void sup_gang_plan(const int *gang, int ngang, const int *faulty, const int *spares, int nspares,
                   int G, int global_batch, int policy, sup_plan *plan);

/* ---- blame: when a node leaves the pool ----------------------------------
 *
 * A failure of a worker process on a host that still answers (a crash, an
 * exit code of its own, a hang) is counted against its node; the node is
 * quarantined when `threshold` failures (recovery.node_failures_to_quarantine)
 * fall within `window_s` (recovery.node_failure_window_s). Until then the
 * gang restarts in place, as torchrun and NVRx do. A hardware cause (a fatal
 * Xid, the host gone or unreachable) quarantines at once. */
#define SUP_FAIL_HIST 64
typedef struct sup_failures {
  double t[SUP_FAIL_HIST]; /* times of the most recent failures, oldest first */
  int n;
} sup_failures;

/* Records a failure at time now (seconds, monotonic); returns how many
 * recorded failures lie within window_s before now, this one included.
 * Older ones are forgotten. */
int sup_failures_add(sup_failures *f, double now, double window_s);
/* 1 if `count` failures within the window reach threshold (< 1 counts as 1). */
static inline int sup_failures_quarantine(int count, int threshold) {
  return count >= (threshold < 1 ? 1 : threshold);
}

/* How long a worker has been silent at `now`, its last frame at last_msg_s,
 * not counting the supervisor's own stall that ended at stall_end_s (0:
 * none): while the supervisor did not run it read nothing, so silence
 * before stall_end_s is never the worker's. */
static inline double sup_silence_s(double now, double last_msg_s, double stall_end_s) {
  return now - (last_msg_s > stall_end_s ? last_msg_s : stall_end_s);
}

#endif
