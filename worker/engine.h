/*
 * engine: one rank's model, shards and optimizer behind one interface, so
 * the training loop (train.c) does not know whether it runs on the CPU or on
 * a GPU (docs/design.md §4).
 *
 *   cpu  (engine_cpu.c):  gpt2.c on the fp32 CPU kernels, sharded by fsdp.c
 *                         over a Gloo comm (or none at world 1).
 *   cuda (engine_cuda.c): bf16 compute on kernels_cuda.h with fp32 master
 *                         weights and moments; FSDP over a NCCL comm with
 *                         the next block's all-gather on a side stream while
 *                         the current block computes, and each block's
 *                         reduce-scatter overlapped with the backward of the
 *                         blocks before it. Built only where nvcc is;
 *                         elsewhere engine_cuda_new fails with FT_ECONFIG.
 *
 * A step, as the trainer drives it:
 *   engine_zero_grad; accum x engine_micro(inputs, targets, 1/(accum*world));
 *   engine_loss (the sum of the micro-batches' mean losses);
 *   engine_grad_norm; [engine_scale_grads]; engine_adamw.
 * Checkpoints: engine_snapshot fills staging owned by the engine and may
 * leave the copy in flight (the CUDA engine copies device -> pinned host on
 * its own stream): the returned fence tells when the bytes are there. The
 * next engine_adamw waits for that copy, never the training before it.
 *
 * Ownership: the comm is borrowed and must outlive the engine. Pointers the
 * engine returns are valid until the next call that says it invalidates
 * them. Threading: one training thread; the fence may be called from
 * another thread (the checkpoint committer).
 *
 * Errors: FT_OK, FT_ENOMEM (for engine_set_micro and engine_micro: the
 * micro-batch does not fit; the state is intact and the caller may retry
 * smaller), FT_ECOMM / FT_ETIMEDOUT (a collective failed), FT_ECUDA,
 * FT_EINVAL, FT_ECONFIG (backend not built).
 */
#ifndef ENGINE_H
#define ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "ckptstore.h"
#include "comm.h"
#include "ft_gpt2.h"

typedef struct engine engine;

/* Blocks until the staging bytes of a snapshot are in place (NULL fn: they
 * already are). Returns FT_OK or the copy's error. */
typedef struct engine_fence {
  int (*fn)(void *ud);
  void *ud;
} engine_fence;

/* An engine of `backend` ("cpu" or "cuda") for rank `rank` of `world`
 * over comm c (NULL only at world 1; for cuda a NCCL comm, comm_is_device),
 * micro-batch shape (B, T); device is the CUDA device (ignored on cpu).
 * Parameters start at zero: call engine_set_params or engine_restore.
 * FT_ENOMEM: the model and micro-batch B do not fit; a smaller B may. */
int engine_new(const char *backend, const ft_gpt2_dims *d, int B, int T, comm *c, int rank,
               int world, int device, engine **out);
/* Number of usable CUDA devices (0 where CUDA is not built or not there). */
int engine_cuda_devices(void);
/* Waits for in-flight work and frees everything. NULL is a no-op. */
void engine_free(engine *e);

/* "cpu" or "cuda". */
const char *engine_backend(const engine *e);
/* One line about the device (e.g. "NVIDIA H200, 139 GiB, sm_90"). */
const char *engine_device_name(const engine *e);
int engine_micro_batch(const engine *e);
/* PCI bus id of the engine's GPU (len >= 13); FT_ENOENT on the cpu. */
int engine_device_pci(const engine *e, char *pci, size_t len);

/* Re-sizes the activations for micro-batch B (same T), keeping the
 * parameters, moments and gradient shards. FT_ENOMEM leaves the engine
 * without activations: call again with a smaller B. */
int engine_set_micro(engine *e, int B);

/* This rank's shards of a full fp32 parameter array (ft_gpt2 layout, every
 * rank holds the same one, e.g. from the seed); zeroes the moments. */
int engine_set_params(engine *e, const float *full);
/* The full fp32 parameters (collective): *out valid until the next call of
 * any engine function but engine_eval. */
int engine_full_params(engine *e, const float **out);

void engine_zero_grad(engine *e);
/* Forward and backward of one micro-batch (B,T) of host tokens; its mean
 * loss weighs dloss_scale in the step's loss. Gradients accumulate into the
 * shards. May return before the device is done (see engine_loss). */
int engine_micro(engine *e, const int32_t *inputs, const int32_t *targets, float dloss_scale);
/* Sum of the mean losses of the micro-batches since engine_zero_grad, in
 * their order (waits for the device). */
int engine_loss(engine *e, double *sum);
/* Mean loss of one micro-batch, forward only (validation). */
int engine_eval(engine *e, const int32_t *inputs, const int32_t *targets, double *loss);
/* In-place sum over ranks (host doubles: losses). */
int engine_allreduce_sum(engine *e, double *x, int n);
/* Global L2 norm of the gradient shards (collective). */
int engine_grad_norm(engine *e, float *norm);
int engine_scale_grads(engine *e, float s);
/* AdamW on this rank's shards (1-based step t); waits for a snapshot copy
 * still in flight. */
int engine_adamw(engine *e, float lr, float beta1, float beta2, float eps, float wd, int64_t t);
/* Seconds this rank spent blocked in collectives since creation. */
double engine_comm_seconds(const engine *e);
/* Milliseconds the last engine_adamw waited for a snapshot copy (0 if none). */
double engine_fence_ms(const engine *e);

/* Checkpoint parts this rank writes (param/, adam_m/, adam_v/ per group it
 * owns a non-empty range of). */
int engine_nparts(const engine *e);
/* Copies this rank's shards into staging owned by the engine and
 * describes them in parts (engine_nparts entries; names is their storage).
 * The staging stays valid and unchanged until the next engine_snapshot;
 * the caller must not call engine_snapshot again before the previous
 * snapshot's bytes are persisted. *fence says when the bytes are there. */
int engine_snapshot(engine *e, ckpt_part *parts, char (*names)[64], engine_fence *fence);
/* Bytes engine_snapshot copies (this rank's params, adam_m, adam_v). */
size_t engine_snapshot_bytes(const engine *e);
/* Reads this rank's shards from a checkpoint written at any world size. */
int engine_restore(engine *e, ckpt_store *s, const ckpt_manifest *man);
/* Silent data corruption (docs/design.md §6). engine_grad_check arms the
 * next engine_micro (hash != NULL): its loss and each gradient group it
 * computes, before that group's reduction, are folded into *hash, in an
 * order that is the same on every rank; NULL disarms. engine_recompute runs
 * one micro-batch's forward and backward again into *hash (the gathers are
 * collectives: every rank calls it at the same point) and drops its
 * gradients: shards, their gradients and engine_loss are untouched. Both:
 * FT_ECONFIG where the backend has no check (cuda, for now). */
int engine_grad_check(engine *e, uint64_t *hash);
int engine_recompute(engine *e, const int32_t *inputs, const int32_t *targets, float dloss_scale,
                     uint64_t *hash);
/* Failpoint support: while on, one bit of every gradient group flips
 * before its reduction, as on a chip that computes wrong (no-op where the
 * backend has no check). */
void engine_corrupt(engine *e, int on);

/* Keeps the engine for a new generation of the same world size (an
 * in-process rejoin): comm c, rank `rank`; its memory (already touched,
 * which on a fresh engine costs most of a first step) is reused, its
 * weights and moments zeroed until a restore sets them. FT_ESTATE where
 * the backend cannot (CUDA: its NCCL resources belong to the old comm),
 * FT_EINVAL for another world size: then make a new engine. */
int engine_set_comm(engine *e, comm *c, int rank, int world);
/* A warm spare's engine: world `world` with no comm yet (every collective
 * fails with FT_ESTATE until engine_set_comm), its memory touched so that
 * the first step after it takes a rank runs as fast as any. FT_ESTATE
 * where the backend cannot (CUDA). */
int engine_new_warm(const char *backend, const ft_gpt2_dims *d, int B, int T, int world,
                    engine **out);

#endif
