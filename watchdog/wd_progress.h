/*
 * wd_progress: hangs where the processes stay alive (issue 36;
 * docs/watchdog.md, "Progress"), judged from every rank's progress record.
 *
 * A worker whose training thread is stuck heartbeats on from its control
 * thread, so wd_hb never fires. Since wire version 7 every HEARTBEAT
 * carries the training thread's progress (worker/progress.h): its phase
 * (ft_phase), its collective count coll_seq (every rank issues the same
 * collectives in the same order, so equal counts are the same collective),
 * its last completed step and how long ago any of them last changed. This
 * detector is a pure function of those records: no I/O, no clock of its
 * own (the caller passes every age), so every case is exactly testable.
 *
 * INPUT: per rank of the current generation (index = rank) a wd_prog_rank:
 * its node, whether its heartbeats carry the current generation (in_gen),
 * its record, and stuck_s: seconds since its progress last changed. A rank
 * has JOINED the generation when in_gen and it has left phase idle or
 * counted a collective (a worker that takes an ASSIGN goes to rendezvous at
 * once; one that finished, or waits for a STOP after reporting a fault, is
 * idle with collectives counted). Plus the recent step durations in
 * seconds (NaN, infinite or <= 0 entries ignored) and whether the
 * generation has completed a step yet.
 *
 * DEADLINE (wd_progress_deadline; every number a wd_progress_cfg field,
 * defaults in brackets):
 *   floor  = max(floor_s [60], heartbeat_timeout_s [10]): progress is seen
 *            at heartbeat granularity, so never less than a heartbeat timeout
 *   base   = timeout_s when > 0 (fixed: the run file's number), else `auto`:
 *            multiple [10] x the slowest recent step, clamped to
 *            [floor, ceiling_s [1800]]; with no recent step, or before the
 *            generation's first step completes, at least first_step_s [600]
 *            (communicator set-up, the first kernels, a cold page cache)
 *   per phase, the deadline of a rank in it:
 *            restore, rendezvous    max(base, restore_s [600]) (reading a
 *                                   checkpoint; waiting for every rank of a
 *                                   new generation to be launched)
 *            validation             base + validation_s [300]
 *            snapshot,
 *            checkpoint_write       base + checkpoint_s [600]
 *            storage_wait           max(base, storage_wait_s [0]): the
 *                                   caller sets storage_wait_s to the
 *                                   longest one read of the data's S3
 *                                   client can take (ckpt_s3_read_bound_s:
 *                                   FT_S3_RETRY_BUDGET_S + 2 x
 *                                   FT_S3_TIMEOUT_S) plus a heartbeat
 *                                   timeout, so the client gives up first
 *                                   (the worker exits 4: a restart in
 *                                   place, nobody blamed)
 *            every other phase      base
 *
 * VERDICT: a hang only when EVERY joined rank has been stuck longer than
 * its own phase's deadline (one rank that still moves means the gang
 * moves: a slow rank is the straggler detector's business, never a hang
 * here). Ranks that have not joined count as stuck. Then, in this order:
 *   none        nobody joined (the generation has not started: the
 *               supervisor's own wait), or every joined rank is idle (done,
 *               or waiting for the supervisor's STOP after a fault it
 *               reported): nothing for the workers to do
 *   rendezvous  (d) some ranks never joined the generation while the others
 *               did: culprits = the ranks not joined, their nodes named
 *   storage     (b) every joined rank is in data, storage_wait or
 *               checkpoint_write (or idle after its part, e.g. its final
 *               shard durable while others' are not), at least one not
 *               idle: the store or the data's file system; or (b') some
 *               ranks are in storage_wait (waiting on their data's bucket)
 *               and every other one waits in collective N (or is idle
 *               after its part): the data's storage; nobody blamed
 *   network     (c) every joined rank is in the same collective N: nobody
 *               is behind; the network (or the collectives' library);
 *               nobody blamed
 *   behind      (a) N = the highest coll_seq; the ranks waiting in
 *               collective N (or idle after their part) are ahead; the
 *               others (in compute, data, a snapshot, or an older
 *               collective) are behind, and they are the culprits when
 *               they are at most half of the joined ranks and at least
 *               one rank waits: their nodes named, with their phase. A
 *               rank in storage_wait is never behind, nor a culprit: it
 *               waits on a service, not on its node
 *   gang        anything else (every rank stuck in compute at the same
 *               point, more than half behind): a common cause (the
 *               program, a shared dependency); nobody blamed
 *
 * THREADING: none; reentrant. FAILURE: FT_EINVAL for bad arguments; never
 * aborts on any input values.
 */
#ifndef WD_PROGRESS_H
#define WD_PROGRESS_H

#include <stdint.h>

typedef struct wd_progress_cfg {
  double timeout_s;           /* > 0: fixed base deadline; 0: auto */
  double heartbeat_timeout_s; /* part of the floor */
  double multiple;            /* auto: times the slowest recent step */
  double floor_s, ceiling_s;  /* auto's clamp (floor also >= heartbeat_timeout_s) */
  double first_step_s;        /* auto: at least this before a first step */
  double restore_s;           /* restore and rendezvous phases: at least this */
  double validation_s;        /* validation: base + this */
  double checkpoint_s;        /* snapshot and checkpoint_write: base + this */
  double storage_wait_s;      /* storage_wait: at least this (the data read's bound) */
} wd_progress_cfg;

/* The defaults above (auto), with this heartbeat timeout. */
void wd_progress_cfg_default(wd_progress_cfg *cfg, double heartbeat_timeout_s);

typedef struct wd_prog_rank {
  int node;          /* the rank's node: what a verdict names */
  int in_gen;        /* its heartbeats carry the current generation */
  int phase;         /* ft_phase (out of range: treated as compute) */
  uint64_t coll_seq; /* collectives it started this generation */
  int64_t step;      /* its last completed step */
  double stuck_s;    /* seconds since its progress last changed */
} wd_prog_rank;

typedef enum wd_prog_class {
  WD_PROG_NONE = 0,
  WD_PROG_BEHIND = 1,     /* (a) culprits named */
  WD_PROG_STORAGE = 2,    /* (b) nobody blamed */
  WD_PROG_NETWORK = 3,    /* (c) nobody blamed */
  WD_PROG_RENDEZVOUS = 4, /* (d) culprits named */
  WD_PROG_GANG = 5,       /* no culprit can be named */
} wd_prog_class;

/* "none", "behind", "storage", "network", "rendezvous", "gang"; "?" */
const char *wd_prog_class_name(int cls);

#define WD_PROG_MAX_CULPRITS 64

typedef struct wd_prog_verdict {
  wd_prog_class cls;
  int phase;         /* ft_phase: the first culprit's (behind), the first stuck
                        rank's (storage), collective (network), rendezvous
                        (rendezvous), rank 0's (gang); -1 with none */
  uint64_t coll_seq; /* behind, network: the collective the others wait in */
  double stuck_s;    /* the least stuck_s of the joined ranks: how long the gang stands */
  double deadline_s; /* the base deadline (wd_progress_deadline of a compute phase) */
  int nculprits;     /* ranks blamed in all (culprits[] holds the first 64) */
  int culprits[WD_PROG_MAX_CULPRITS];
  int nnodes; /* distinct nodes of the culprits, in rank order (first 64) */
  int nodes[WD_PROG_MAX_CULPRITS];
  char why[320]; /* one line for an event or a log */
} wd_prog_verdict;

/* The deadline of a rank in `phase` (see DEADLINE). step_s[0..nsteps):
 * recent step durations; first_step: no step completed in this generation.
 * Never below the floor. */
double wd_progress_deadline(const wd_progress_cfg *cfg, int phase, const double *step_s, int nsteps,
                            int first_step);

/* Judges the gang: ranks[0..n), n >= 1. Fills *v (cls WD_PROG_NONE when no
 * hang). FT_OK or FT_EINVAL. */
int wd_progress_judge(const wd_progress_cfg *cfg, const wd_prog_rank *ranks, int n,
                      const double *step_s, int nsteps, int first_step, wd_prog_verdict *v);

/* After a collective timeout (issue 36): a worker reported that collective
 * `seq` (its coll_seq: the collective it waited in) did not complete within
 * watchdog.collective_timeout_s. That timeout is itself the deadline, so no
 * stuck time is judged: the ranks BEHIND are those whose coll_seq < seq (they
 * never started the collective the reporter waited in, whatever their phase
 * now). Phases are not compared, because a rank whose collective failed goes
 * back to the phase before it. Fills *v (cls WD_PROG_BEHIND with the
 * culprits, their nodes and the first culprit's phase; coll_seq = seq) when
 * every rank is in the generation (in_gen), seq >= 1, at least one and at
 * most half of the ranks are behind, and every rank behind has made no
 * progress for at least min_stuck_s (one that moved more recently crashed
 * or is merely slow: not a hang to name); else cls WD_PROG_NONE (nobody to
 * name: the caller blames nobody, as before). A rank behind in
 * storage_wait is waiting on its data's bucket, never a culprit (whatever
 * its stuck time): when every rank behind is, cls WD_PROG_STORAGE (phase
 * storage_wait, nobody named: the data's storage outlasted the collective
 * timeout); the others behind are judged as above without it.
 * seq 0: the reporter timed out before the generation's first collective,
 * in its rendezvous (a worker's rendezvous gives up after max(the
 * collective timeout, 60 s), long before the rendezvous phase's deadline
 * above). The culprits are then the ranks that never JOINED (in_gen: they
 * heartbeat in the generation, but idle with nothing counted): cls
 * WD_PROG_RENDEZVOUS, phase rendezvous, stuck_s the least of the joined
 * ranks' (how long they waited), under the same rules (every rank in_gen,
 * at least one and at most half absent, each absent one unmoved for
 * min_stuck_s). FT_OK or FT_EINVAL. */
int wd_progress_behind(const wd_prog_rank *ranks, int n, uint64_t seq, double min_stuck_s,
                       wd_prog_verdict *v);

#endif
