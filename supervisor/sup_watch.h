/*
 * sup_watch.h: the state of the watchdog's detectors in the supervisor
 * (sup_watch.c owns it; struct sup holds it as s->watch). Their calls are
 * in sup_int.h (layer 3); sup_watch.c's file-top comment says what each
 * detector does.
 *
 * Who else touches it: the recovery (sup_recovery.c) reads on_spike (what
 * a loss fault does), trained_gen (whether a generation trained) and
 * steptime_world (checked against the gang), and moves the GOOD window
 * back at a rollback (sup_rollback_good_fault on good). Nothing else.
 * Single-threaded: the loop's.
 */
#ifndef SUP_WATCH_H
#define SUP_WATCH_H

#include "sup_rollback.h"
#include "wd_loss.h"
#include "wd_progress.h"
#include "wd_straggler.h"

#include <stddef.h>
#include <stdint.h>

/* Restore fallback (sup_watch.c, on_restore_corrupt). A chunk of the
 * checkpoint being restored that fails its hash from every source marks
 * that checkpoint BAD and the next generation restores the next older one;
 * at most SUP_MAX_FALLBACKS checkpoints between two generations that train
 * (then the run fails, naming them: something is wrong with the store, not
 * with one checkpoint). A node that reports failed hashes on
 * SUP_HASHFAIL_SUSPECT (sup_int.h) restores within
 * recovery.node_failure_window_s is the suspect (its memory or disk) rather
 * than the store: quarantined, and the checkpoint it could not read is
 * tried again on the spare. */
#define SUP_MAX_FALLBACKS 3

/* One accepted (step, loss) of rank 0, to rebuild the loss window. */
typedef struct sup_loss_pt {
  int64_t step;
  double loss;
} sup_loss_pt;

/* Recent step durations the progress watchdog's auto deadline is derived
 * from. */
#define SUP_PROG_STEPS 32

/* Per-rank step times of one step, until every rank has reported it. */
#define SUP_STEPTIME_SLOTS 8
typedef struct sup_steptime {
  int64_t step; /* -1: free */
  int nhave;
  double *ms; /* [world]; NaN: not yet */
  unsigned char *have;
} sup_steptime;

typedef struct sup_watch_state {
  /* loss faults: what a spike does (enum sup_on_spike), rank 0's losses of
   * the current timeline, the accepted values (ascending steps) to rebuild
   * the window after a restore, and the last step fed */
  int on_spike;
  wd_loss *loss;
  sup_loss_pt *losshist;
  size_t nloss, caploss;
  int64_t loss_fed;
  sup_rollback_good good; /* GOOD marking (sup_rollback.h) */
  uint64_t trained_gen;   /* the last generation that reported a STEP */
  /* stragglers: per-rank step times (NULL when world < 2), the slots of
   * the steps not yet reported by every rank, and the world they are for */
  wd_straggler *strag;
  sup_steptime steptime[SUP_STEPTIME_SLOTS];
  int steptime_world;
  /* slow links: per gang node round trips (NULL: off), the next
   * judgement, how many were made */
  wd_straggler *linkstrag;
  double link_next_s;
  int64_t link_round;
  /* the progress watchdog (sup_watch_progress): its config
   * (watchdog.progress_timeout_s), the recent step durations in seconds (a
   * ring of rank 0's STEP intervals), rank 0's last STEP (generation,
   * step, arrival), the own stall last seen (a tick that finds a new one
   * does not judge), when it last judged (every SUP_PROGRESS_EVERY_S of
   * the ticks), and the detector's input (grown) */
  wd_progress_cfg prog_cfg;
  double prog_step_s[SUP_PROG_STEPS];
  int prog_nsteps, prog_stepi;
  uint64_t prog_last_gen;
  int64_t prog_last_step;
  double prog_last_at;
  double prog_stall_seen;
  double prog_judged_s;
  wd_prog_rank *prog_ranks;
  int prog_cap;
  /* restore fallback: checkpoints marked BAD by restores since the last
   * generation that trained, which (oldest first) */
  int nfallbacks;
  int64_t fallback_steps[SUP_MAX_FALLBACKS];
} sup_watch_state;

#endif
