/*
 * shardmap: FSDP shard geometry and its checkpoint parts (see shardmap.h).
 */
#include "shardmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

static const char *const kinds[3] = {"param", "adam_m", "adam_v"};

int shardmap_init(shardmap *sm, const ft_gpt2_dims *d, int rank, int world) {
  memset(sm, 0, sizeof *sm);
  if (world < 1 || rank < 0 || rank >= world)
    return ft_err_set(FT_EINVAL, "shardmap: bad rank %d of world %d", rank, world);
  sm->d = *d;
  sm->rank = rank;
  sm->world = world;
  sm->ngroups = ft_gpt2_ngroups(d);
  sm->numel = calloc((size_t)sm->ngroups, sizeof(size_t));
  sm->S = calloc((size_t)sm->ngroups, sizeof(size_t));
  sm->shoff = calloc((size_t)sm->ngroups, sizeof(size_t));
  if (!sm->numel || !sm->S || !sm->shoff) {
    shardmap_release(sm);
    return ft_err_set(FT_ENOMEM, "shardmap: out of memory");
  }
  for (int g = 0; g < sm->ngroups; g++) {
    sm->numel[g] = ft_gpt2_group_numel(d, g);
    sm->S[g] = (sm->numel[g] + (size_t)world - 1) / (size_t)world;
    sm->shoff[g] = sm->shard_n;
    sm->shard_n += sm->S[g];
    if (sm->S[g] > sm->maxS)
      sm->maxS = sm->S[g];
  }
  return FT_OK;
}

void shardmap_release(shardmap *sm) {
  free(sm->numel);
  free(sm->S);
  free(sm->shoff);
  memset(sm, 0, sizeof *sm);
}

size_t shardmap_own_begin(const shardmap *sm, int g) {
  size_t b = (size_t)sm->rank * sm->S[g];
  return b < sm->numel[g] ? b : sm->numel[g];
}

size_t shardmap_own_count(const shardmap *sm, int g) {
  size_t b = shardmap_own_begin(sm, g), e = b + sm->S[g];
  if (e > sm->numel[g])
    e = sm->numel[g];
  return e - b;
}

size_t shardmap_clip(const shardmap *sm, int g, size_t off, size_t n, size_t *shard_off) {
  size_t b = shardmap_own_begin(sm, g), e = b + shardmap_own_count(sm, g);
  size_t lo = off > b ? off : b, hi = off + n < e ? off + n : e;
  *shard_off = sm->shoff[g] + (lo - b);
  return lo < hi ? hi - lo : 0;
}

void shardmap_take(const shardmap *sm, const float *full, float *shard) {
  memset(shard, 0, sm->shard_n * sizeof(float));
  for (int g = 0; g < sm->ngroups; g++)
    memcpy(shard + sm->shoff[g], full + ft_gpt2_group_offset(&sm->d, g) + shardmap_own_begin(sm, g),
           shardmap_own_count(sm, g) * sizeof(float));
}

int shardmap_nparts(const shardmap *sm) {
  int n = 0;
  for (int g = 0; g < sm->ngroups; g++)
    n += shardmap_own_count(sm, g) > 0;
  return 3 * n;
}

static void tensor_name(const shardmap *sm, int k, int g, char out[64]) {
  char gname[32];
  snprintf(out, 64, "%s/%s", kinds[k], ft_gpt2_group_name(&sm->d, g, gname, sizeof gname));
}

int shardmap_parts(const shardmap *sm, const float *const src[3], ckpt_part *parts,
                   char (*names)[64]) {
  int np = 0;
  for (int k = 0; k < 3; k++) {
    for (int g = 0; g < sm->ngroups; g++) {
      size_t cnt = shardmap_own_count(sm, g);
      if (!cnt)
        continue;
      tensor_name(sm, k, g, names[np]);
      parts[np] = (ckpt_part){.tensor = names[np],
                              .dtype = "f32",
                              .ndim = 1,
                              .shape = {(int64_t)sm->numel[g]},
                              .offset = shardmap_own_begin(sm, g) * sizeof(float),
                              .len = cnt * sizeof(float),
                              .data = src[k] + sm->shoff[g]};
      np++;
    }
  }
  return np;
}

int shardmap_restore(const shardmap *sm, ckpt_store *s, const ckpt_manifest *man,
                     float *const dst[3]) {
  /* what this rank owns of every tensor: only the shard objects that hold
   * it are read (ckpt_store_load_for_ranges), whatever the world wrote it */
  int nr = 3 * sm->ngroups;
  ckpt_range *r = calloc((size_t)nr, sizeof *r);
  char(*names)[64] = calloc((size_t)nr, sizeof *names);
  ckpt_manifest *part = NULL;
  int rc = r && names ? FT_OK : ft_err_set(FT_ENOMEM, "shardmap: out of memory");
  for (int k = 0; k < 3 && rc == FT_OK; k++)
    for (int g = 0; g < sm->ngroups; g++) {
      int i = k * sm->ngroups + g;
      tensor_name(sm, k, g, names[i]);
      r[i] = (ckpt_range){.tensor = names[i],
                          .offset = shardmap_own_begin(sm, g) * sizeof(float),
                          .len = shardmap_own_count(sm, g) * sizeof(float)};
    }
  if (rc == FT_OK)
    rc = ckpt_store_load_for_ranges(s, man, r, nr, &part);
  if (rc == FT_ENOENT || rc == FT_EINVAL) {
    char why[512];
    snprintf(why, sizeof why, "%s", ft_err_detail());
    rc = ft_err_set(FT_EFORMAT, "checkpoint does not match this model: %s", why);
  }
  for (int k = 0; k < 3 && rc == FT_OK; k++) {
    memset(dst[k], 0, sm->shard_n * sizeof(float));
    for (int g = 0; g < sm->ngroups && rc == FT_OK; g++) {
      const char *name = names[k * sm->ngroups + g];
      int ti = ckpt_manifest_find(part, name);
      ckpt_tensor_info info;
      if (ti < 0 || ckpt_manifest_tensor(part, ti, &info) ||
          info.nbytes != sm->numel[g] * sizeof(float)) {
        rc = ft_err_set(FT_EFORMAT,
                        "checkpoint does not match this model: tensor %s missing or of "
                        "another size",
                        name);
        break;
      }
      size_t cnt = shardmap_own_count(sm, g);
      if (cnt)
        rc = ckpt_store_read(s, part, name, shardmap_own_begin(sm, g) * sizeof(float),
                             cnt * sizeof(float), dst[k] + sm->shoff[g]);
    }
  }
  ckpt_manifest_free(part);
  free(names);
  free(r);
  return rc;
}
