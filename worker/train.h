/*
 * train: the training loop of one process: standalone (world 1, or one
 * rank of --world W), or a gang's worker under the supervisor (ctl).
 *
 * Reads the run file's model/train/data sections, initialises GPT-2 from
 * the seed (or an llm.c model file), trains with AdamW, linear warmup and
 * cosine (or linear/constant) decay, gradient accumulation from global and
 * micro batch, and global-norm clipping; logs each step; checkpoints through
 * snap; resumes exactly from the newest committed checkpoint.
 */
#ifndef TRAIN_H
#define TRAIN_H

#include <stdint.h>

#include "ctl.h"
#include "ft_runfile.h"
#include "ft_wire.h"

typedef struct train_opts {
  const ft_runfile *rf;
  const char *log_json;    /* one JSON object per step, or NULL */
  const char *store_uri;   /* checkpoints go here; NULL: no checkpoints */
  int64_t ckpt_every;      /* steps between checkpoints (with store_uri) */
  int resume;              /* continue from the newest committed checkpoint */
  const char *init_from;   /* llm.c model file to start from, or NULL */
  const char *export_path; /* safetensors written at the end, or NULL */
  int quiet;               /* no per-step human lines */
  ctl *ctl;                /* gang mode: the supervisor connection (NULL: standalone) */
  uint32_t node, slot;     /* gang mode: this worker's place in the pool */
  int rank, world;         /* --world W without a supervisor: rank of W ... */
  const char *rdzv_dir;    /* ... meeting through this folder (no checkpoints) */
} train_opts;

/* Exit codes of the worker program: FT_EXIT_* (common/ft_wire.h),
 * documented in worker --help. */

/* Runs training; prints its own errors; returns an FT_EXIT_* code. */
int train_main(const train_opts *o);

#endif
