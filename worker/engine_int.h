/*
 * engine_int: what an engine backend implements (private to engine*.c).
 * engine.c checks the state common to every backend (the OOM failpoint,
 * argument sanity) and dispatches through the table; a backend sees only
 * calls engine.h allows.
 */
#ifndef ENGINE_INT_H
#define ENGINE_INT_H

#include "engine.h"

struct engine_ops {
  const char *name;
  void (*destroy)(void *impl);
  const char *(*device_name)(void *impl);
  int (*set_micro)(void *impl, int B);
  int (*set_params)(void *impl, const float *full);
  int (*full_params)(void *impl, const float **out);
  void (*zero_grad)(void *impl);
  int (*micro)(void *impl, const int32_t *inputs, const int32_t *targets, float dloss_scale);
  int (*loss)(void *impl, double *sum);
  int (*eval)(void *impl, const int32_t *inputs, const int32_t *targets, double *loss);
  int (*allreduce_sum)(void *impl, double *x, int n);
  int (*grad_norm)(void *impl, float *norm);
  int (*scale_grads)(void *impl, float s);
  int (*adamw)(void *impl, float lr, float beta1, float beta2, float eps, float wd, int64_t t);
  double (*comm_seconds)(void *impl);
  double (*fence_ms)(void *impl);
  int (*device_pci)(void *impl, char *pci, size_t len);
  int (*nparts)(void *impl);
  size_t (*snapshot_bytes)(void *impl);
  int (*snapshot)(void *impl, ckpt_part *parts, char (*names)[64], engine_fence *fence);
  int (*restore)(void *impl, ckpt_store *s, const ckpt_manifest *man);
  int (*set_comm)(void *impl, comm *c, int rank, int world); /* NULL: not supported */
  int (*touch)(void *impl);                                  /* NULL: not supported */
  /* engine_grad_check / engine_recompute: arm (hash) or disarm (NULL) the
   * next micro's hashing; discard: a recomputation. NULL: not supported. */
  int (*check)(void *impl, uint64_t *hash, int discard);
  void (*corrupt)(void *impl, int on); /* NULL: not supported */
};

struct engine {
  const struct engine_ops *ops;
  void *impl;
  int B; /* current micro-batch */
};

/* The backends' constructors (engine_new's arguments). */
int engine_cpu_new(const ft_gpt2_dims *d, int B, int T, comm *c, int rank, int world, engine **out);
int engine_cuda_new(const ft_gpt2_dims *d, int B, int T, comm *c, int rank, int world, int device,
                    engine **out);

/* Wraps a backend's state; on FT_ENOMEM the caller still owns impl. */
int engine__wrap(const struct engine_ops *ops, void *impl, int B, engine **out);

#endif
