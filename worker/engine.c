/*
 * engine: the backend-neutral half of engine.h: argument checks, the
 * out-of-memory failpoint, and dispatch to the backend's table.
 *
 * Failpoint oom_above_micro=N (docs/failpoints.md): engine_set_micro and
 * engine_micro fail with FT_ENOMEM while the micro-batch is above N, as a
 * GPU that cannot hold the activations would; the trainer's answer (halve
 * the micro-batch, double the accumulation) is then exercised on any
 * machine.
 */
#include "engine_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"
#include "ft_failpoint.h"

int engine__wrap(const struct engine_ops *ops, void *impl, int B, engine **out) {
  engine *e = calloc(1, sizeof *e);
  if (!e)
    return ft_err_set(FT_ENOMEM, "engine: out of memory");
  e->ops = ops;
  e->impl = impl;
  e->B = B;
  *out = e;
  return FT_OK;
}

/* FT_ENOMEM when the failpoint says micro-batch B does not fit. */
static int fake_oom(int B) {
  int64_t limit;
  if (ft_failpoint("oom_above_micro", &limit) && B > limit)
    return ft_err_set(FT_ENOMEM,
                      "out of memory for micro-batch %d (failpoint oom_above_micro=%lld)", B,
                      (long long)limit);
  return FT_OK;
}

int engine_new(const char *backend, const ft_gpt2_dims *d, int B, int T, comm *c, int rank,
               int world, int device, engine **out) {
  *out = NULL;
  if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world || (!c && world > 1))
    return ft_err_set(FT_EINVAL, "engine: bad shape B=%d T=%d or rank %d of %d", B, T, rank, world);
  int rc = fake_oom(B);
  if (rc)
    return rc;
  if (strcmp(backend, "cpu") == 0)
    return engine_cpu_new(d, B, T, c, rank, world, out);
  if (strcmp(backend, "cuda") == 0)
    return engine_cuda_new(d, B, T, c, rank, world, device, out);
  return ft_err_set(FT_EINVAL, "engine: unknown backend '%s' (cpu or cuda)", backend);
}

int engine_set_comm(engine *e, comm *c, int rank, int world) {
  if (!e->ops->set_comm)
    return ft_err_set(FT_ESTATE, "engine %s: no new comm for a live engine", e->ops->name);
  return e->ops->set_comm(e->impl, c, rank, world);
}

int engine_new_warm(const char *backend, const ft_gpt2_dims *d, int B, int T, int world,
                    engine **out) {
  *out = NULL;
  if (B < 1 || T < 1 || world < 1)
    return ft_err_set(FT_EINVAL, "engine: bad shape B=%d T=%d or world %d", B, T, world);
  if (strcmp(backend, "cpu") != 0)
    return ft_err_set(FT_ESTATE, "engine %s: no warm engine before a comm", backend);
  int rc = engine_cpu_new(d, B, T, NULL, 0, world, out);
  if (rc == FT_OK && (*out)->ops->touch)
    rc = (*out)->ops->touch((*out)->impl);
  if (rc) {
    engine_free(*out);
    *out = NULL;
  }
  return rc;
}

void engine_free(engine *e) {
  if (!e)
    return;
  e->ops->destroy(e->impl);
  free(e);
}

const char *engine_backend(const engine *e) {
  return e->ops->name;
}
const char *engine_device_name(const engine *e) {
  return e->ops->device_name(e->impl);
}
int engine_device_pci(const engine *e, char *pci, size_t len) {
  return e->ops->device_pci(e->impl, pci, len);
}
int engine_micro_batch(const engine *e) {
  return e->B;
}

int engine_set_micro(engine *e, int B) {
  if (B < 1)
    return ft_err_set(FT_EINVAL, "engine_set_micro: micro-batch %d", B);
  int rc = fake_oom(B);
  if (rc == FT_OK)
    rc = e->ops->set_micro(e->impl, B);
  if (rc == FT_OK)
    e->B = B;
  return rc;
}

int engine_set_params(engine *e, const float *full) {
  return e->ops->set_params(e->impl, full);
}
int engine_full_params(engine *e, const float **out) {
  return e->ops->full_params(e->impl, out);
}
void engine_zero_grad(engine *e) {
  e->ops->zero_grad(e->impl);
}

int engine_micro(engine *e, const int32_t *inputs, const int32_t *targets, float dloss_scale) {
  int rc = fake_oom(e->B);
  return rc ? rc : e->ops->micro(e->impl, inputs, targets, dloss_scale);
}

int engine_loss(engine *e, double *sum) {
  return e->ops->loss(e->impl, sum);
}
static int no_check(const engine *e) {
  return ft_err_set(FT_ECONFIG, "the %s engine has no silent-data-corruption check yet",
                    e->ops->name);
}

int engine_grad_check(engine *e, uint64_t *hash) {
  return e->ops->check ? e->ops->check(e->impl, hash, 0) : no_check(e);
}

int engine_recompute(engine *e, const int32_t *inputs, const int32_t *targets, float dloss_scale,
                     uint64_t *hash) {
  if (!e->ops->check)
    return no_check(e);
  int rc = e->ops->check(e->impl, hash, 1);
  if (rc == FT_OK)
    rc = e->ops->micro(e->impl, inputs, targets, dloss_scale);
  e->ops->check(e->impl, NULL, 0);
  return rc;
}

void engine_corrupt(engine *e, int on) {
  if (e->ops->corrupt)
    e->ops->corrupt(e->impl, on);
}

int engine_eval(engine *e, const int32_t *inputs, const int32_t *targets, double *loss) {
  return e->ops->eval(e->impl, inputs, targets, loss);
}
int engine_allreduce_sum(engine *e, double *x, int n) {
  return e->ops->allreduce_sum(e->impl, x, n);
}
int engine_grad_norm(engine *e, float *norm) {
  return e->ops->grad_norm(e->impl, norm);
}
int engine_scale_grads(engine *e, float s) {
  return e->ops->scale_grads(e->impl, s);
}
int engine_adamw(engine *e, float lr, float beta1, float beta2, float eps, float wd, int64_t t) {
  return e->ops->adamw(e->impl, lr, beta1, beta2, eps, wd, t);
}
double engine_comm_seconds(const engine *e) {
  return e->ops->comm_seconds(e->impl);
}
double engine_fence_ms(const engine *e) {
  return e->ops->fence_ms(e->impl);
}
int engine_nparts(const engine *e) {
  return e->ops->nparts(e->impl);
}
size_t engine_snapshot_bytes(const engine *e) {
  return e->ops->snapshot_bytes(e->impl);
}
int engine_snapshot(engine *e, ckpt_part *parts, char (*names)[64], engine_fence *fence) {
  *fence = (engine_fence){0};
  return e->ops->snapshot(e->impl, parts, names, fence);
}
int engine_restore(engine *e, ckpt_store *s, const ckpt_manifest *man) {
  return e->ops->restore(e->impl, s, man);
}

#ifndef FT_WITH_CUDA
int engine_cuda_new(const ft_gpt2_dims *d, int B, int T, comm *c, int rank, int world, int device,
                    engine **out) {
  (void)d, (void)B, (void)T, (void)c, (void)rank, (void)world, (void)device;
  *out = NULL;
  return ft_err_set(FT_ECONFIG, "nodes.device is cuda but this worker was built without CUDA "
                                "(no nvcc at build time): rebuild on a machine with the CUDA "
                                "toolkit, or set nodes.device: cpu");
}
int engine_cuda_devices(void) {
  return 0;
}
#endif
