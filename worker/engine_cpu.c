/*
 * engine_cpu: the CPU engine (engine.h): gpt2.c's fp32 model on the CPU
 * kernels, sharded by fsdp.c over a Gloo comm.
 *
 * The model (activations, full-size working buffers) is sized for one
 * micro-batch and is the only thing engine_set_micro re-allocates; the
 * shards, moments and gradient shards live in the fsdp and survive it.
 * Snapshots copy into a host staging buffer synchronously (no fence).
 * Losses are summed in double in micro-batch order, as the trainer did
 * before engines existed, so CPU results keep their bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "fsdp.h"
#include "ft_err.h"
#include "gpt2.h"
#include "progress.h"

typedef struct ecpu {
  ft_gpt2_dims d;
  int T, rank, world;
  comm *c;
  gpt2 *m;
  fsdp *f;
  float *staging;
  double loss_sum;
  uint64_t *check; /* ecpu_check: the armed hash, or NULL */
  int discard;     /* ...of a recomputation: its loss is not the step's */
} ecpu;

static int ecpu_set_comm(void *impl, comm *c, int rank, int world) {
  ecpu *e = impl;
  int rc = fsdp_set_comm(e->f, c, rank, world);
  if (rc == FT_OK) {
    e->c = c;
    e->rank = rank;
    e->loss_sum = 0;
    e->m->err = FT_OK;
  }
  return rc;
}

static int ecpu_touch(void *impl) {
  ecpu *e = impl;
  gpt2_touch(e->m);
  fsdp_touch(e->f);
  if (!e->staging)
    e->staging = malloc(fsdp_staging_floats(e->f) * sizeof(float));
  if (!e->staging)
    return ft_err_set(FT_ENOMEM, "engine: no memory for the staging buffer");
  memset(e->staging, 0, fsdp_staging_floats(e->f) * sizeof(float));
  return FT_OK;
}

static void ecpu_destroy(void *impl) {
  ecpu *e = impl;
  fsdp_free(e->f);
  gpt2_free(e->m);
  free(e->staging);
  free(e);
}

static const char *ecpu_device_name(void *impl) {
  (void)impl;
  return "cpu";
}

static int ecpu_set_micro(void *impl, int B) {
  ecpu *e = impl;
  gpt2 *m = NULL;
  gpt2_free(e->m); /* first: the old activations make room for the new */
  e->m = NULL;
  int rc = gpt2_new(&e->d, B, e->T, &m);
  if (rc)
    return rc;
  e->m = m;
  if (e->f)
    fsdp_rebind(e->f, m);
  return FT_OK;
}

static int ecpu_set_params(void *impl, const float *full) {
  ecpu *e = impl;
  memcpy(e->m->params, full, e->m->nparams * sizeof(float));
  fsdp_shard_from_model(e->f);
  return FT_OK;
}

static int ecpu_full_params(void *impl, const float **out) {
  ecpu *e = impl;
  int rc = fsdp_gather_all(e->f);
  *out = rc ? NULL : e->m->params;
  return rc;
}

static void ecpu_zero_grad(void *impl) {
  ecpu *e = impl;
  fsdp_zero_grad(e->f);
  e->loss_sum = 0;
}

static int ecpu_micro(void *impl, const int32_t *inputs, const int32_t *targets,
                      float dloss_scale) {
  ecpu *e = impl;
  double loss = gpt2_forward(e->m, inputs, targets);
  if (e->check)
    *e->check = fsdp_hash_fold(*e->check, &loss, sizeof loss);
  if (!e->discard)
    e->loss_sum += loss;
  progress_phase_if(FT_PHASE_FORWARD, FT_PHASE_BACKWARD); /* a training micro-batch's */
  return e->m->err ? e->m->err : gpt2_backward(e->m, dloss_scale);
}

static int ecpu_check(void *impl, uint64_t *hash, int discard) {
  ecpu *e = impl;
  e->check = hash;
  e->discard = hash && discard;
  fsdp_set_check(e->f, hash, discard);
  return FT_OK;
}

static void ecpu_corrupt(void *impl, int on) {
  fsdp_set_corrupt(((ecpu *)impl)->f, on);
}

static int ecpu_loss(void *impl, double *sum) {
  *sum = ((ecpu *)impl)->loss_sum;
  return FT_OK;
}

static int ecpu_eval(void *impl, const int32_t *inputs, const int32_t *targets, double *loss) {
  ecpu *e = impl;
  *loss = gpt2_forward(e->m, inputs, targets);
  return e->m->err;
}

static int ecpu_allreduce_sum(void *impl, double *x, int n) {
  return fsdp_allreduce_sum(((ecpu *)impl)->f, x, n);
}
static int ecpu_grad_norm(void *impl, float *norm) {
  return fsdp_grad_norm(((ecpu *)impl)->f, norm);
}
static int ecpu_scale_grads(void *impl, float s) {
  fsdp_scale_grads(((ecpu *)impl)->f, s);
  return FT_OK;
}
static int ecpu_adamw(void *impl, float lr, float beta1, float beta2, float eps, float wd,
                      int64_t t) {
  fsdp_adamw(((ecpu *)impl)->f, lr, beta1, beta2, eps, wd, t);
  return FT_OK;
}
static double ecpu_comm_seconds(void *impl) {
  return fsdp_comm_seconds(((ecpu *)impl)->f);
}
static double ecpu_fence_ms(void *impl) {
  (void)impl;
  return 0;
}
static int ecpu_device_pci(void *impl, char *pci, size_t len) {
  (void)impl, (void)pci, (void)len;
  return ft_err_set(FT_ENOENT, "the cpu engine has no GPU");
}
static int ecpu_nparts(void *impl) {
  return fsdp_nparts(((ecpu *)impl)->f);
}

static size_t ecpu_snapshot_bytes(void *impl) {
  return fsdp_staging_floats(((ecpu *)impl)->f) * sizeof(float);
}

static int ecpu_snapshot(void *impl, ckpt_part *parts, char (*names)[64], engine_fence *fence) {
  ecpu *e = impl;
  (void)fence; /* the copy is done when fsdp_snapshot returns */
  if (!e->staging) {
    e->staging = malloc(fsdp_staging_floats(e->f) * sizeof(float));
    if (!e->staging)
      return ft_err_set(FT_ENOMEM, "snapshot: no memory for a %zu-byte staging buffer",
                        fsdp_staging_floats(e->f) * sizeof(float));
  }
  fsdp_snapshot(e->f, e->staging, parts, names);
  return FT_OK;
}

static int ecpu_restore(void *impl, ckpt_store *s, const ckpt_manifest *man) {
  return fsdp_restore(((ecpu *)impl)->f, s, man);
}

static const struct engine_ops ecpu_ops = {
    .name = "cpu",
    .destroy = ecpu_destroy,
    .device_name = ecpu_device_name,
    .set_micro = ecpu_set_micro,
    .set_params = ecpu_set_params,
    .full_params = ecpu_full_params,
    .zero_grad = ecpu_zero_grad,
    .micro = ecpu_micro,
    .loss = ecpu_loss,
    .eval = ecpu_eval,
    .allreduce_sum = ecpu_allreduce_sum,
    .grad_norm = ecpu_grad_norm,
    .scale_grads = ecpu_scale_grads,
    .adamw = ecpu_adamw,
    .comm_seconds = ecpu_comm_seconds,
    .fence_ms = ecpu_fence_ms,
    .device_pci = ecpu_device_pci,
    .nparts = ecpu_nparts,
    .snapshot_bytes = ecpu_snapshot_bytes,
    .snapshot = ecpu_snapshot,
    .restore = ecpu_restore,
    .set_comm = ecpu_set_comm,
    .touch = ecpu_touch,
    .check = ecpu_check,
    .corrupt = ecpu_corrupt,
};

int engine_cpu_new(const ft_gpt2_dims *d, int B, int T, comm *c, int rank, int world,
                   engine **out) {
  *out = NULL;
  ecpu *e = calloc(1, sizeof *e);
  if (!e)
    return ft_err_set(FT_ENOMEM, "engine: out of memory");
  e->d = *d;
  e->T = T;
  e->rank = rank;
  e->world = world;
  e->c = c;
  int rc = ecpu_set_micro(e, B);
  if (rc == FT_OK)
    rc = fsdp_new(e->m, c, rank, world, &e->f);
  if (rc == FT_OK)
    rc = engine__wrap(&ecpu_ops, e, B, out);
  if (rc)
    ecpu_destroy(e);
  return rc;
}
