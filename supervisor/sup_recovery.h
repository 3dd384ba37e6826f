/*
 * sup_recovery.h: the state of the recovery round in progress
 * (sup_recovery.c owns it; struct sup holds it as s->recovery). The
 * recovery's calls are in sup_int.h (layer 2); its states, invariants and
 * transitions are written at the top of sup_recovery.c.
 *
 * Who else touches it: its timers (sup_timers.c) read t_detect_s, coll,
 * isolated_s and cfg_deadline_s; sup_nodes.c reads the launch queue to
 * create the logs ahead; sup_http.c reads the storage wait for /status.
 * The run's state itself (s->state, s->rphase, s->gen, s->restarts) is in
 * struct sup: every module reads it. Single-threaded: the loop's.
 */
#ifndef SUP_RECOVERY_H
#define SUP_RECOVERY_H

#include "sup_gang.h"

#include <stdint.h>
#include <sys/types.h>

typedef struct sup_recovery_state {
  /* the record lane, as the round waits on it (invariant 1): answered up
   * to rec_done; RECORDING waits for record rec_wait (of generation
   * rec_wait_gen); gen_rec is the record of s->gen: no message carries
   * s->gen before rec_done reaches it */
  uint64_t rec_done;
  uint64_t rec_wait, rec_wait_gen;
  uint64_t gen_rec;
  /* the round: detected, stopped (ft_now_s), rank 0's step at the fault,
   * nodes of this round's gang that rejoined in process */
  double t_detect_s, t_stopped_s;
  int64_t fault_last_step;
  int rejoined_nodes;
  /* nodes to launch, a slice per loop turn (launch_more):
   * launch_q[launch_qi..nlaunch_q); gang_ready's first worker not found
   * ready yet */
  int launch_q[SUP_MAX_NODES], nlaunch_q, launch_qi;
  int ready_cursor;
  /* check_stopped's first gang position not found stopped yet (a hint:
   * the round is declared stopped only after a scan of the whole gang) */
  int stop_cursor;
  /* in process: a collective failure nobody's silence explains yet
   * (sup_recovery_collective_failed; sup_timers.c's coll timer judges it) */
  struct {
    uint64_t gen;
    int node, slot;
    pid_t pid;
    char detail[256];
  } coll;
  /* waiting on storage (storage_wait): a storage hang (every rank stuck in
   * a data read or a checkpoint write) is not restarted into at once: the
   * plan waits watchdog.storage_backoff_s, doubled for each consecutive one
   * (storage_hangs, reset by a step past storage_hang_step, where the last
   * one stalled), at most SUP_STORAGE_WAIT_MAX_S */
  int storage_hangs;
  int64_t storage_hang_step;
  double storage_wait_s;       /* this round's wait; 0: none */
  double storage_wait_until_s; /* its end (ft_now_s) once started; 0: not started */
  /* ft_now_s when every worker was last found silent at once (the
   * supervisor's own isolation, sup_rec_isolated); 0: never */
  double isolated_s;
  /* a gang worker exited with a configuration or data error before the
   * gang trained: the verdict (every worker alike: the run fails; else the
   * node's failure) falls by this time; 0: none pending */
  double cfg_deadline_s;
} sup_recovery_state;

#endif
