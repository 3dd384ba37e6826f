/*
 * fsdp: sharded parameters, gradients and optimizer state (see fsdp.h).
 *
 * Shard layout: for group g with n_g elements, S_g = ceil(n_g / W); rank r
 * owns padded positions [r*S_g, (r+1)*S_g), of which the ones < n_g are
 * real. The shard arrays (params, grads, m, v) concatenate the groups' S_g
 * slots in group order; padding slots are zero and stay zero (their
 * gradient is zero, so AdamW leaves them at zero).
 *
 * Collective order: every rank runs the same forward/backward, so the
 * gathers and reduce-scatters come in the same order everywhere, which is
 * what the comm requires.
 */
#include "fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_clock.h"
#include "ft_err.h"
#include "kernels.h"

struct fsdp {
  gpt2 *m;
  comm *c;
  int rank, world, ngroups;
  size_t *numel;         /* n_g */
  size_t *S;             /* S_g */
  size_t *shoff;         /* offset of group g in the shard arrays */
  size_t shard_n;        /* sum of S_g */
  float *p, *g, *mo, *v; /* shard arrays */
  float *scratch;        /* W * max S_g */
  gpt2_hooks hooks;
  uint64_t comm_ns; /* time inside collectives */
};

/* Real (unpadded) elements this rank owns in group g, and the first one. */
static size_t own_begin(const fsdp *f, int g) {
  size_t b = (size_t)f->rank * f->S[g];
  return b < f->numel[g] ? b : f->numel[g];
}
static size_t own_count(const fsdp *f, int g) {
  size_t b = own_begin(f, g), e = b + f->S[g];
  if (e > f->numel[g])
    e = f->numel[g];
  return e - b;
}

static int hook_gather(void *ud, gpt2 *m, int g) {
  fsdp *f = ud;
  float *dst = m->params + ft_gpt2_group_offset(&m->d, g);
  if (!f->c) {
    memcpy(dst, f->p + f->shoff[g], f->numel[g] * sizeof(float));
    return FT_OK;
  }
  uint64_t t0 = ft_now_ns();
  int rc = comm_allgather(f->c, f->p + f->shoff[g], f->scratch, f->S[g]);
  f->comm_ns += ft_now_ns() - t0;
  if (rc)
    return rc;
  memcpy(dst, f->scratch, f->numel[g] * sizeof(float));
  return FT_OK;
}

static void hook_release(void *ud, gpt2 *m, int g) {
  (void)ud;
  (void)m;
  (void)g; /* the working buffer is reused; nothing to return on the CPU */
}

static int hook_reduce(void *ud, gpt2 *m, int g) {
  fsdp *f = ud;
  float *src = m->grads + ft_gpt2_group_offset(&m->d, g);
  float *dst = f->g + f->shoff[g];
  size_t n = f->numel[g];
  if (!f->c) {
    for (size_t i = 0; i < n; i++)
      dst[i] += src[i];
  } else {
    size_t padded = f->S[g] * (size_t)f->world;
    memcpy(f->scratch, src, n * sizeof(float));
    memset(f->scratch + n, 0, (padded - n) * sizeof(float));
    float *recv = f->scratch + padded; /* scratch is W*maxS + maxS floats */
    uint64_t t0 = ft_now_ns();
    int rc = comm_reduce_scatter(f->c, f->scratch, recv, f->S[g]);
    f->comm_ns += ft_now_ns() - t0;
    if (rc)
      return rc;
    for (size_t i = 0; i < f->S[g]; i++)
      dst[i] += recv[i];
  }
  memset(src, 0, n * sizeof(float));
  return FT_OK;
}

int fsdp_new(gpt2 *m, comm *c, int rank, int world, fsdp **out) {
  *out = NULL;
  if (world < 1 || rank < 0 || rank >= world || (!c && world != 1))
    return ft_err_set(FT_EINVAL, "fsdp: bad rank %d of world %d", rank, world);
  fsdp *f = calloc(1, sizeof *f);
  if (!f)
    return ft_err_set(FT_ENOMEM, "fsdp: out of memory");
  f->m = m;
  f->c = c;
  f->rank = rank;
  f->world = world;
  f->ngroups = ft_gpt2_ngroups(&m->d);
  f->numel = calloc((size_t)f->ngroups, sizeof(size_t));
  f->S = calloc((size_t)f->ngroups, sizeof(size_t));
  f->shoff = calloc((size_t)f->ngroups, sizeof(size_t));
  size_t maxS = 0;
  for (int g = 0; f->numel && f->S && f->shoff && g < f->ngroups; g++) {
    f->numel[g] = ft_gpt2_group_numel(&m->d, g);
    f->S[g] = (f->numel[g] + world - 1) / world;
    f->shoff[g] = f->shard_n;
    f->shard_n += f->S[g];
    if (f->S[g] > maxS)
      maxS = f->S[g];
  }
  f->p = calloc(f->shard_n, sizeof(float));
  f->g = calloc(f->shard_n, sizeof(float));
  f->mo = calloc(f->shard_n, sizeof(float));
  f->v = calloc(f->shard_n, sizeof(float));
  /* gather: W*maxS; reduce-scatter: W*maxS send + maxS recv */
  f->scratch = calloc(maxS * (size_t)world + maxS, sizeof(float));
  if (!f->numel || !f->S || !f->shoff || !f->p || !f->g || !f->mo || !f->v || !f->scratch) {
    fsdp_free(f);
    return ft_err_set(FT_ENOMEM, "fsdp: out of memory for shards");
  }
  f->hooks =
      (gpt2_hooks){.ud = f, .gather = hook_gather, .release = hook_release, .reduce = hook_reduce};
  m->hooks = &f->hooks;
  memset(m->grads, 0, m->nparams * sizeof(float));
  *out = f;
  return FT_OK;
}

void fsdp_free(fsdp *f) {
  if (!f)
    return;
  if (f->m && f->m->hooks == &f->hooks)
    f->m->hooks = NULL;
  free(f->numel);
  free(f->S);
  free(f->shoff);
  free(f->p);
  free(f->g);
  free(f->mo);
  free(f->v);
  free(f->scratch);
  free(f);
}

void fsdp_shard_from_model(fsdp *f) {
  memset(f->p, 0, f->shard_n * sizeof(float));
  for (int g = 0; g < f->ngroups; g++)
    memcpy(f->p + f->shoff[g], f->m->params + ft_gpt2_group_offset(&f->m->d, g) + own_begin(f, g),
           own_count(f, g) * sizeof(float));
  memset(f->mo, 0, f->shard_n * sizeof(float));
  memset(f->v, 0, f->shard_n * sizeof(float));
}

void fsdp_zero_grad(fsdp *f) {
  memset(f->g, 0, f->shard_n * sizeof(float));
}

int fsdp_allreduce_sum(fsdp *f, double *x, int n) {
  if (!f->c)
    return FT_OK;
  uint64_t t0 = ft_now_ns();
  int rc = comm_allreduce_f64(f->c, x, (size_t)n);
  f->comm_ns += ft_now_ns() - t0;
  return rc;
}

double fsdp_comm_seconds(const fsdp *f) {
  return (double)f->comm_ns * 1e-9;
}

int fsdp_grad_norm(fsdp *f, float *norm) {
  double ss = k_sumsq(f->g, f->shard_n); /* padding slots are zero */
  int rc = fsdp_allreduce_sum(f, &ss, 1);
  *norm = (float)sqrt(ss);
  return rc;
}

void fsdp_scale_grads(fsdp *f, float s) {
  k_scale(f->g, s, f->shard_n);
}

typedef struct seg_args {
  fsdp *f;
  int g;
  float lr, b1, b2, eps, wd;
  int64_t t;
} seg_args;

/* AdamW on the intersection of segment [off, off+n) of group g with this
 * rank's range. */
static void adamw_seg(void *ud, size_t off, size_t n, int decays) {
  seg_args *a = ud;
  fsdp *f = a->f;
  size_t b = own_begin(f, a->g), e = b + own_count(f, a->g);
  size_t lo = off > b ? off : b, hi = off + n < e ? off + n : e;
  if (lo >= hi)
    return;
  size_t o = f->shoff[a->g] + (lo - b);
  k_adamw(f->p + o, f->g + o, f->mo + o, f->v + o, hi - lo, a->lr, a->b1, a->b2, a->eps,
          decays ? a->wd : 0.0f, a->t);
}

void fsdp_adamw(fsdp *f, float lr, float beta1, float beta2, float eps, float wd, int64_t t) {
  seg_args a = {f, 0, lr, beta1, beta2, eps, wd, t};
  for (int g = 0; g < f->ngroups; g++) {
    a.g = g;
    gpt2_group_segments(&f->m->d, g, adamw_seg, &a);
  }
}

static const char *const kinds[3] = {"param", "adam_m", "adam_v"};

int fsdp_nparts(const fsdp *f) {
  int n = 0;
  for (int g = 0; g < f->ngroups; g++)
    n += own_count(f, g) > 0;
  return 3 * n;
}

size_t fsdp_staging_floats(const fsdp *f) {
  return 3 * f->shard_n;
}

int fsdp_snapshot(const fsdp *f, float *staging, ckpt_part *parts, char (*names)[64]) {
  const float *src[3] = {f->p, f->mo, f->v};
  int np = 0;
  for (int k = 0; k < 3; k++) {
    float *dst = staging + (size_t)k * f->shard_n;
    memcpy(dst, src[k], f->shard_n * sizeof(float));
    for (int g = 0; g < f->ngroups; g++) {
      size_t cnt = own_count(f, g);
      if (!cnt)
        continue;
      char gname[32];
      snprintf(names[np], 64, "%s/%s", kinds[k],
               ft_gpt2_group_name(&f->m->d, g, gname, sizeof gname));
      parts[np] = (ckpt_part){.tensor = names[np],
                              .dtype = "f32",
                              .ndim = 1,
                              .shape = {(int64_t)f->numel[g]},
                              .offset = own_begin(f, g) * sizeof(float),
                              .len = cnt * sizeof(float),
                              .data = dst + f->shoff[g]};
      np++;
    }
  }
  return np;
}

int fsdp_restore(fsdp *f, ckpt_store *s, const ckpt_manifest *man) {
  float *dst[3] = {f->p, f->mo, f->v};
  for (int k = 0; k < 3; k++) {
    memset(dst[k], 0, f->shard_n * sizeof(float));
    for (int g = 0; g < f->ngroups; g++) {
      char gname[32], name[64];
      snprintf(name, sizeof name, "%s/%s", kinds[k],
               ft_gpt2_group_name(&f->m->d, g, gname, sizeof gname));
      int ti = ckpt_manifest_find(man, name);
      ckpt_tensor_info info;
      if (ti < 0 || ckpt_manifest_tensor(man, ti, &info) ||
          info.nbytes != f->numel[g] * sizeof(float))
        return ft_err_set(FT_EFORMAT,
                          "checkpoint does not match this model: tensor %s missing or of "
                          "another size",
                          name);
      size_t cnt = own_count(f, g);
      if (!cnt)
        continue;
      int rc = ckpt_store_read(s, man, name, own_begin(f, g) * sizeof(float), cnt * sizeof(float),
                               dst[k] + f->shoff[g]);
      if (rc)
        return rc;
    }
  }
  return FT_OK;
}

int fsdp_gather_all(fsdp *f) {
  for (int g = 0; g < f->ngroups; g++) {
    int rc = hook_gather(f, f->m, g);
    if (rc)
      return rc;
  }
  return FT_OK;
}
