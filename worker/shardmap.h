/*
 * shardmap: which elements of each parameter group a rank owns under FSDP,
 * and how those shards become checkpoint parts and come back (docs/design.md §4, §5).
 *
 * Group g (ft_gpt2 layout: wte, wpe, h.0..h.L-1, lnf) of n_g elements is
 * padded to a multiple of the world size W and split evenly: S_g =
 * ceil(n_g / W), rank r owns padded positions [r*S_g, (r+1)*S_g), of which
 * the ones below n_g are real. A rank's shard arrays concatenate the groups'
 * S_g slots in group order (offset shoff[g]); padding slots are zero.
 *
 * Checkpoints name the logical, unsharded tensors: "param/<group>",
 * "adam_m/<group>", "adam_v/<group>", fp32, 1-D, and each rank writes the
 * byte range it owns, so a checkpoint written at world W restores at any
 * other world size. Shared by the CPU (fsdp.c) and CUDA (engine_cuda.c)
 * engines, so both write the same checkpoints.
 */
#ifndef SHARDMAP_H
#define SHARDMAP_H

#include <stddef.h>

#include "ckptstore.h"
#include "ft_gpt2.h"

typedef struct shardmap {
  ft_gpt2_dims d;
  int rank, world, ngroups;
  size_t *numel;  /* n_g */
  size_t *S;      /* S_g */
  size_t *shoff;  /* offset of group g in the shard arrays */
  size_t shard_n; /* sum of S_g */
  size_t maxS;    /* max S_g */
} shardmap;

/* Caller-owned struct; shardmap_release frees its arrays. */
int shardmap_init(shardmap *sm, const ft_gpt2_dims *d, int rank, int world);
void shardmap_release(shardmap *sm);

/* Real elements this rank owns in group g, and the first one's index. */
size_t shardmap_own_begin(const shardmap *sm, int g);
size_t shardmap_own_count(const shardmap *sm, int g);

/* The part of elements [off, off+n) of group g this rank owns: its offset
 * in the shard arrays (*shard_off) and length (returned; 0 if none). */
size_t shardmap_clip(const shardmap *sm, int g, size_t off, size_t n, size_t *shard_off);

/* This rank's shard (shard_n floats, padding zeroed) of a full array. */
void shardmap_take(const shardmap *sm, const float *full, float *shard);

/* Number of parts shardmap_parts fills: 3 x groups with a non-empty range. */
int shardmap_nparts(const shardmap *sm);
/* Describes shard arrays src[0..2] (params, adam_m, adam_v; shard_n floats
 * each, borrowed by the parts) as checkpoint parts; names is the storage
 * for the tensor names. Returns the number of parts. */
int shardmap_parts(const shardmap *sm, const float *const src[3], ckpt_part *parts,
                   char (*names)[64]);
/* Reads this rank's ranges of checkpoint man into dst[0..2] (zeroed
 * first). man may come from ckpt_store_load_lazy: only the shard objects
 * that hold this rank's ranges are read (ckpt_store_load_for_ranges).
 * FT_EFORMAT names a tensor missing or of another size. */
int shardmap_restore(const shardmap *sm, ckpt_store *s, const ckpt_manifest *man,
                     float *const dst[3]);

#endif
