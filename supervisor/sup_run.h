/*
 * sup_run.h: training as the worker messages show it (sup_run.c owns it;
 * struct sup holds it as s->run): rank 0's last step and its figures, the
 * checkpoints collecting reports, the progress line's pace, the retention
 * GC's last outcome. sup_run.c's calls are in sup_int.h (layer 3).
 *
 * Who else reads it: sup_http.c (/metrics, /status), sup_main.c (the final
 * summary), the recovery (last_step, last_step_at_s: what a fault cost),
 * sup_act.c (sup_pending_clear empties pending at a new generation),
 * sup_watch.c, sup_nodes.c and sup_stall.c (last_step in events).
 * Single-threaded: the loop's, but gc_swept_at (the commit thread's).
 */
#ifndef SUP_RUN_H
#define SUP_RUN_H

#include <stdint.h>

struct sup_pending_ckpt;

typedef struct sup_run_state {
  int64_t last_step; /* last step rank 0 reported in this process */
  double last_loss, last_tps, last_step_ms, last_val_loss;
  double last_grad_norm, last_lr; /* the last step's (NaN: none); lr by the run file's schedule */
  double tokens_total;            /* tokens trained in this process (global batch x seq_len per step
                                     heard, rolled-back steps included: work done) */
  double last_step_at_s;          /* ft_now_s of rank 0's last STEP; 0: none yet */
  int64_t newest_committed;       /* the newest checkpoint this process saw committed; -1: none */
  struct sup_pending_ckpt *pending; /* checkpoints still collecting SHARD_SAVED */
  /* the terminal's progress line: the pace since a mark */
  double pace_t, pace_rate, progress_next_s;
  int64_t pace_step;
  double gc_swept_at;   /* when the retention GC last swept (ft_now_s; 0:
                           never; the commit thread's alone) */
  char gc_failed[1024]; /* the reason of the last gc_failed event; "" none
                           since a GC that succeeded */
  /* the run's checkpoints the views were told of (committed here, or in
   * the store when this process began), by step: a step gone from a later
   * list of the store's is told as checkpoint_deleted (sup_run.c) */
  struct sup_known_ckpt {
    int64_t step;
    int level;      /* enum ckpt_level */
    double done_at; /* ft_now_s when it was in the catalog (0: before this process) */
  } * known;
  size_t nknown, capknown;
} sup_run_state;

#endif
