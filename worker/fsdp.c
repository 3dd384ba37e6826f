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

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "kernels.h"
#include "shardmap.h"

struct fsdp {
  gpt2 *m;
  comm *c;
  int rank, world, ngroups;
  shardmap sm;
  const size_t *numel;   /* sm's n_g */
  const size_t *S;       /* sm's S_g */
  const size_t *shoff;   /* sm's group offsets in the shard arrays */
  size_t shard_n;        /* sum of S_g */
  float *p, *g, *mo, *v; /* shard arrays */
  float *scratch;        /* W * max S_g */
  gpt2_hooks hooks;
  uint64_t comm_ns; /* time inside collectives */
  uint64_t *check;  /* fsdp_set_check: the gradients' hash, or NULL */
  int discard;      /* fsdp_set_check: a recomputation (no reduction) */
  int corrupt;      /* fsdp_set_corrupt (failpoint): a chip computing wrong */
};

/* FNV-1a over 64-bit words (and a tail): a change in any one word changes
 * the result, since each step is a bijection of the running hash. Not
 * cryptographic: the check looks for a chip's errors, not an adversary's. */
uint64_t fsdp_hash_fold(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* A detached fsdp (a warm spare's: world > 1, no comm yet) has no
 * collectives until fsdp_set_comm. */
static int detached(const fsdp *f) {
  return !f->c && f->world != 1;
}

static int hook_gather(void *ud, gpt2 *m, int g) {
  fsdp *f = ud;
  float *dst = m->params + ft_gpt2_group_offset(&m->d, g);
  if (detached(f))
    return ft_err_set(FT_ESTATE, "fsdp: no comm yet (a warm engine)");
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

static int64_t g_reduces; /* this process's gradient reductions (failpoint) */

static int hook_reduce(void *ud, gpt2 *m, int g) {
  fsdp *f = ud;
  if (!f->discard) /* failpoint hang_in=compute: mid-backward, before the reduction */
    ft_failpoint_hang_here(FT_HANG_COMPUTE);
  int64_t nth; /* failpoint: the Nth reduction fails, a backward cut short */
  if (!f->discard && ft_failpoint("fail_reduce_once", &nth) &&
      __atomic_add_fetch(&g_reduces, 1, __ATOMIC_RELAXED) == nth)
    return ft_err_set(FT_ECOMM,
                      "failpoint fail_reduce_once=%" PRId64 ": group %d's gradient "
                      "reduction failed",
                      nth, g);
  float *src = m->grads + ft_gpt2_group_offset(&m->d, g);
  float *dst = f->g + f->shoff[g];
  size_t n = f->numel[g];
  if (detached(f))
    return ft_err_set(FT_ESTATE, "fsdp: no comm yet (a warm engine)");
  if (f->corrupt && n) { /* a low mantissa bit of the group's first element */
    uint32_t u;
    memcpy(&u, src, 4);
    u ^= 1u << 3;
    memcpy(src, &u, 4);
  }
  if (f->check)
    *f->check = fsdp_hash_fold(*f->check, src, n * sizeof(float));
  if (f->discard) { /* a recomputation: hashed, never reduced */
    memset(src, 0, n * sizeof(float));
    return FT_OK;
  }
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
  if (world < 1 || rank < 0 || rank >= world)
    return ft_err_set(FT_EINVAL, "fsdp: bad rank %d of world %d", rank, world);
  fsdp *f = calloc(1, sizeof *f);
  if (!f)
    return ft_err_set(FT_ENOMEM, "fsdp: out of memory");
  int rc = shardmap_init(&f->sm, &m->d, rank, world);
  if (rc) {
    free(f);
    return rc;
  }
  f->c = c;
  f->rank = rank;
  f->world = world;
  f->ngroups = f->sm.ngroups;
  f->numel = f->sm.numel;
  f->S = f->sm.S;
  f->shoff = f->sm.shoff;
  f->shard_n = f->sm.shard_n;
  size_t maxS = f->sm.maxS;
  f->p = calloc(f->shard_n, sizeof(float));
  f->g = calloc(f->shard_n, sizeof(float));
  f->mo = calloc(f->shard_n, sizeof(float));
  f->v = calloc(f->shard_n, sizeof(float));
  /* gather: W*maxS; reduce-scatter: W*maxS send + maxS recv */
  f->scratch = calloc(maxS * (size_t)world + maxS, sizeof(float));
  if (!f->p || !f->g || !f->mo || !f->v || !f->scratch) {
    fsdp_free(f);
    return ft_err_set(FT_ENOMEM, "fsdp: out of memory for shards");
  }
  f->hooks =
      (gpt2_hooks){.ud = f, .gather = hook_gather, .release = hook_release, .reduce = hook_reduce};
  fsdp_rebind(f, m);
  *out = f;
  return FT_OK;
}

int fsdp_set_comm(fsdp *f, comm *c, int rank, int world) {
  if (world != f->world || rank < 0 || rank >= world || (!c && world != 1))
    return ft_err_set(FT_EINVAL, "fsdp: rank %d of world %d for an engine of world %d", rank, world,
                      f->world);
  f->c = c;
  f->rank = rank;
  f->sm.rank = rank;
  /* a backward cut short by the old comm's failure left the gradients of
   * the groups it had not reduced yet in the model's working buffer */
  memset(f->m->grads, 0, f->m->nparams * sizeof(float));
  memset(f->p, 0, f->shard_n * sizeof(float));
  memset(f->g, 0, f->shard_n * sizeof(float));
  memset(f->mo, 0, f->shard_n * sizeof(float));
  memset(f->v, 0, f->shard_n * sizeof(float));
  return FT_OK;
}

void fsdp_touch(fsdp *f) {
  memset(f->p, 0, f->shard_n * sizeof(float));
  memset(f->g, 0, f->shard_n * sizeof(float));
  memset(f->mo, 0, f->shard_n * sizeof(float));
  memset(f->v, 0, f->shard_n * sizeof(float));
  memset(f->scratch, 0, (f->sm.maxS * (size_t)f->world + f->sm.maxS) * sizeof(float));
}

void fsdp_rebind(fsdp *f, gpt2 *m) {
  if (f->m && f->m->hooks == &f->hooks)
    f->m->hooks = NULL;
  f->m = m;
  m->hooks = &f->hooks;
  memset(m->grads, 0, m->nparams * sizeof(float));
}

void fsdp_free(fsdp *f) {
  if (!f)
    return;
  if (f->m && f->m->hooks == &f->hooks)
    f->m->hooks = NULL;
  shardmap_release(&f->sm);
  free(f->p);
  free(f->g);
  free(f->mo);
  free(f->v);
  free(f->scratch);
  free(f);
}

void fsdp_shard_from_model(fsdp *f) {
  shardmap_take(&f->sm, f->m->params, f->p);
  memset(f->mo, 0, f->shard_n * sizeof(float));
  memset(f->v, 0, f->shard_n * sizeof(float));
}

void fsdp_zero_grad(fsdp *f) {
  memset(f->g, 0, f->shard_n * sizeof(float));
}

int fsdp_allreduce_sum(fsdp *f, double *x, int n) {
  if (detached(f))
    return ft_err_set(FT_ESTATE, "fsdp: no comm yet (a warm engine)");
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

typedef struct adamw_args {
  fsdp *f;
  float lr, b1, b2, eps;
  int64_t t;
} adamw_args;

static int adamw_run(void *ud, size_t o, size_t n, float wd) {
  adamw_args *a = ud;
  fsdp *f = a->f;
  k_adamw(f->p + o, f->g + o, f->mo + o, f->v + o, n, a->lr, a->b1, a->b2, a->eps, wd, a->t);
  return FT_OK;
}

void fsdp_adamw(fsdp *f, float lr, float beta1, float beta2, float eps, float wd, int64_t t) {
  adamw_args a = {f, lr, beta1, beta2, eps, t};
  gpt2_adamw_runs(&f->m->d, &f->sm, wd, adamw_run, &a);
}

int fsdp_nparts(const fsdp *f) {
  return shardmap_nparts(&f->sm);
}

size_t fsdp_staging_floats(const fsdp *f) {
  return 3 * f->shard_n;
}

int fsdp_snapshot(const fsdp *f, float *staging, ckpt_part *parts, char (*names)[64]) {
  const float *src[3] = {f->p, f->mo, f->v};
  const float *dst[3];
  for (int k = 0; k < 3; k++) {
    dst[k] = staging + (size_t)k * f->shard_n;
    memcpy(staging + (size_t)k * f->shard_n, src[k], f->shard_n * sizeof(float));
  }
  return shardmap_parts(&f->sm, dst, parts, names);
}

int fsdp_restore(fsdp *f, ckpt_store *s, const ckpt_manifest *man) {
  float *const dst[3] = {f->p, f->mo, f->v};
  return shardmap_restore(&f->sm, s, man, dst);
}

int fsdp_gather_all(fsdp *f) {
  for (int g = 0; g < f->ngroups; g++) {
    int rc = hook_gather(f, f->m, g);
    if (rc)
      return rc;
  }
  return FT_OK;
}

void fsdp_set_check(fsdp *f, uint64_t *check, int discard) {
  f->check = check;
  f->discard = check && discard;
}

void fsdp_set_corrupt(fsdp *f, int on) {
  f->corrupt = on;
}
