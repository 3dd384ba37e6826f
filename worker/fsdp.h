/*
 * fsdp: fully sharded data parallelism over a comm (docs/design.md §4).
 *
 * Each parameter group of the model (wte, wpe, each block, lnf: one flat
 * fp32 buffer each) is padded to a multiple of the world size W and split
 * evenly: rank r owns elements [r*S, (r+1)*S) of the padded group, S =
 * ceil(n/W). The owner alone holds the fp32 master weights, the gradient
 * and the AdamW moments of its shard. Forward and backward see the model
 * through gpt2_hooks: a group is all-gathered just before use and released
 * after; its gradient is reduce-scattered into the shards as soon as the
 * backward has completed it. The optimizer, the gradient norm (a local sum
 * of squares plus one all-reduce) and the checkpoint (each rank writes the
 * byte ranges of the logical tensors it owns) work on shards only, so a
 * checkpoint written at world W restores at any other world size.
 *
 * Without a comm (world 1) the collectives degenerate to copies and the
 * same code path trains the standalone worker.
 *
 * Memory on the CPU path: the model's full-size params/grads arrays serve
 * as the gather and gradient working buffers; "release" marks a group as no
 * longer valid rather than returning memory. The communication pattern and
 * the ownership of optimizer state are FSDP's; the activation-sized memory
 * saving is left to the CUDA path.
 */
#ifndef FSDP_H
#define FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "ckptstore.h"
#include "comm.h"
#include "gpt2.h"

typedef struct fsdp fsdp;

/* Wraps model m (borrowed, must outlive the fsdp) for rank `rank` of `world`
 * over comm c (borrowed; NULL when world == 1, or detached: a warm spare's
 * engine, whose collectives fail with FT_ESTATE until fsdp_set_comm).
 * Installs the hooks on m. Shards start zeroed: call fsdp_shard_from_model
 * or fsdp_restore. */
int fsdp_new(gpt2 *m, comm *c, int rank, int world, fsdp **out);
void fsdp_free(fsdp *f);
/* Moves the hooks to model m (same dims, e.g. re-allocated for another
 * micro-batch); the shards are untouched. m's gradients are zeroed. */
void fsdp_rebind(fsdp *f, gpt2 *m);
/* Moves f to comm c as rank `rank` of the same world (an in-process
 * rejoin): the shard layout does not depend on the rank, so only whose
 * elements the shards hold changes; shards, gradients and moments are
 * zeroed (a restore or fsdp_shard_from_model sets them), and so is the
 * model's gradient buffer, where a backward cut short by the old comm's
 * failure left the groups it had not reduced. FT_EINVAL for another world
 * size. */
int fsdp_set_comm(fsdp *f, comm *c, int rank, int world);
/* Writes zeros over the shards and the collectives' scratch (their pages
 * mapped before they are needed). */
void fsdp_touch(fsdp *f);

/* Takes this rank's shards of m's current parameters (every rank holds the
 * same full initialisation, e.g. from the seed) and zeroes the moments. */
void fsdp_shard_from_model(fsdp *f);
/* Zeroes the shard gradients (start of an optimizer step). */
void fsdp_zero_grad(fsdp *f);
/* Global gradient L2 norm across ranks. */
int fsdp_grad_norm(fsdp *f, float *norm);
/* Multiplies the shard gradients by s (clipping). */
void fsdp_scale_grads(fsdp *f, float s);
/* AdamW on the shards; weight decay only where gpt2_group_segments says. */
void fsdp_adamw(fsdp *f, float lr, float beta1, float beta2, float eps, float wd, int64_t t);
/* Sum of x over ranks (losses). */
int fsdp_allreduce_sum(fsdp *f, double *x, int n);

/* Number of checkpoint parts this rank writes (3 kinds x groups it owns a
 * non-empty range of). */
int fsdp_nparts(const fsdp *f);
/* Copies this rank's shards (params, adam_m, adam_v) into staging (at least
 * fsdp_staging_floats floats) and describes them as ckpt parts named
 * "param/<group>", "adam_m/<group>", "adam_v/<group>" with their byte
 * offsets in the logical tensors. names: storage for the tensor names
 * (fsdp_nparts entries). Returns the number of parts filled. */
size_t fsdp_staging_floats(const fsdp *f);
int fsdp_snapshot(const fsdp *f, float *staging, ckpt_part *parts, char (*names)[64]);
/* Reads this rank's shards from checkpoint manifest man (any world size
 * wrote it). */
int fsdp_restore(fsdp *f, ckpt_store *s, const ckpt_manifest *man);
/* Seconds spent inside collectives since fsdp_new (blocked on peers
 * included): step time minus this is the rank's own compute time. */
double fsdp_comm_seconds(const fsdp *f);
/* Gathers the full parameters into m->params (for export), collective. */
int fsdp_gather_all(fsdp *f);

/* The silent-data-corruption check (docs/design.md §6). With check set,
 * each group's gradient is folded into *check (fsdp_hash_fold) as the
 * backward completes it, before its reduction, in the backward's group
 * order (the same on every rank); with discard it is then dropped instead
 * of reduced (a recomputation of another rank's micro-batch: the gathers
 * still run, the shards' gradients are untouched). check NULL: off. */
void fsdp_set_check(fsdp *f, uint64_t *check, int discard);
/* Failpoint support: while on, one bit of each group's gradient flips
 * before it is hashed and reduced, as on a chip that computes wrong. */
void fsdp_set_corrupt(fsdp *f, int on);
/* h folded with n bytes at p (64-bit FNV-1a over words). */
uint64_t fsdp_hash_fold(uint64_t h, const void *p, size_t n);

#endif
