/*
 * kc_ctx: the per-device context of the CUDA kernels: the cuBLASLt handle
 * and its 32 MiB workspace, the device scratch of the deterministic
 * reductions, the pinned staging buffer of kc_encoder_bwd, and the cache
 * of cuBLASLt plans (descriptors + the algorithm picked once per shape).
 * Also the single place where a cublasStatus_t becomes an FT_E* code
 * (kc__blas_err).
 *
 * Why a context: deterministic reductions need somewhere to put per-block
 * partial sums, and cuBLASLt is only deterministic for a fixed algorithm
 * and a workspace owned by the caller (the cuBLAS "results
 * reproducibility" rules); keeping both here means no kernel allocates on
 * the hot path once the first step has sized the scratch.
 *
 * Invariants:
 *  - scratch is used by one stream at a time (the compute stream): each kc_
 *    call takes it once through kc__scratch and enqueues all its users on
 *    its stream, so consecutive calls on that stream are ordered. Growth
 *    synchronises the device before freeing the old block, because kernels
 *    enqueued earlier may still read it;
 *  - h_pin is written by the host only after pin_ev (recorded after the
 *    last upload from it) has completed;
 *  - a plan, once cached, is never replaced: the same (kind, m, n, k,
 *    epilogue) always runs the same algorithm. The cache holds KC_PLANS
 *    shapes; beyond that kc_matmul builds one-off plans (heuristic per call).
 *
 * Threading: a kc_ctx is used by one host thread at a time, on the device
 * that was current at kc_ctx_new.
 */
#include "kc_int.h"

#include <stdlib.h>
#include <string.h>

int kc__blas_err(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return FT_OK;
  int code = st == CUBLAS_STATUS_ALLOC_FAILED    ? FT_ENOMEM
             : st == CUBLAS_STATUS_NOT_SUPPORTED ? FT_EINVAL
                                                 : FT_ECUDA;
  return ft_err_set(code, "%s: %s: %s", what, cublasLtGetStatusName(st),
                    cublasLtGetStatusString(st));
}

extern "C" int kc_ctx_new(kc_ctx **out) {
  *out = NULL;
  kc_ctx *c = (kc_ctx *)calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "kc_ctx_new: calloc");
  int rc = kc__err(cudaGetDevice(&c->dev), "cudaGetDevice");
  if (rc)
    goto out;
  rc = kc__blas_err(cublasLtCreate(&c->lt), "cublasLtCreate");
  if (rc)
    goto out;
  rc = kc__err(cudaMalloc(&c->ws, KC_WORKSPACE_BYTES), "cudaMalloc workspace");
  if (rc)
    goto out;
  rc = kc__err(cudaEventCreateWithFlags(&c->pin_ev, cudaEventDisableTiming), "cudaEventCreate");
  if (rc)
    goto out;
  *out = c;
  return FT_OK;
out:
  kc_ctx_free(c);
  return rc;
}

extern "C" void kc_ctx_free(kc_ctx *c) {
  if (!c)
    return;
  (void)kc__err(cudaDeviceSynchronize(), "kc_ctx_free: cudaDeviceSynchronize");
  for (int i = 0; i < KC_PLANS; i++)
    if (c->plans[i].used)
      kc__plan_release(&c->plans[i]);
  if (c->pin_ev)
    (void)kc__err(cudaEventDestroy(c->pin_ev), "cudaEventDestroy");
  if (c->h_pin)
    (void)kc__err(cudaFreeHost(c->h_pin), "cudaFreeHost");
  if (c->scratch)
    (void)kc__err(cudaFree(c->scratch), "cudaFree scratch");
  if (c->ws)
    (void)kc__err(cudaFree(c->ws), "cudaFree workspace");
  if (c->lt)
    (void)kc__blas_err(cublasLtDestroy(c->lt), "cublasLtDestroy");
  free(c->h_count);
  free(c);
}

int kc__scratch(kc_ctx *c, size_t bytes, void **out) {
  *out = NULL;
  if (bytes <= c->scratch_bytes) {
    *out = c->scratch;
    return FT_OK;
  }
  /* round up to 1 MiB so that slowly growing requests do not reallocate
   * every call */
  size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  if (c->scratch) {
    int rc = kc__err(cudaDeviceSynchronize(), "kc scratch: cudaDeviceSynchronize");
    if (rc)
      return rc;
    rc = kc__err(cudaFree(c->scratch), "cudaFree scratch");
    c->scratch = NULL;
    c->scratch_bytes = 0;
    if (rc)
      return rc;
  }
  int rc = kc__err(cudaMalloc(&c->scratch, want), "cudaMalloc scratch");
  if (rc) {
    c->scratch = NULL;
    return rc;
  }
  c->scratch_bytes = want;
  *out = c->scratch;
  return FT_OK;
}

int kc__pinned(kc_ctx *c, size_t bytes, void **out) {
  *out = NULL;
  if (c->pin_pending) {
    int rc = kc__err(cudaEventSynchronize(c->pin_ev), "cudaEventSynchronize pinned");
    if (rc)
      return rc;
    c->pin_pending = 0;
  }
  if (bytes > c->h_pin_bytes) {
    if (c->h_pin) {
      int rc = kc__err(cudaFreeHost(c->h_pin), "cudaFreeHost");
      c->h_pin = NULL;
      c->h_pin_bytes = 0;
      if (rc)
        return rc;
    }
    size_t want = (bytes + 65535) & ~(size_t)65535;
    int rc = kc__err(cudaHostAlloc(&c->h_pin, want, cudaHostAllocDefault), "cudaHostAlloc");
    if (rc) {
      c->h_pin = NULL;
      return rc;
    }
    c->h_pin_bytes = want;
  }
  *out = c->h_pin;
  return FT_OK;
}

int kc__pinned_enqueued(kc_ctx *c, cudaStream_t s) {
  int rc = kc__err(cudaEventRecord(c->pin_ev, s), "cudaEventRecord pinned");
  if (rc == FT_OK)
    c->pin_pending = 1;
  return rc;
}

int kc__host_count(kc_ctx *c, size_t n, int32_t **out) {
  *out = NULL;
  if (n > c->h_count_len) {
    int32_t *p = (int32_t *)realloc(c->h_count, n * sizeof *p);
    if (!p)
      return ft_err_set(FT_ENOMEM, "kc_encoder_bwd: %zu host counters", n);
    c->h_count = p;
    c->h_count_len = n;
  }
  *out = c->h_count;
  return FT_OK;
}

kc__plan *kc__plan_find(kc_ctx *c, const kc__plan_key *key) {
  for (int i = 0; i < KC_PLANS; i++) {
    kc__plan *p = &c->plans[i];
    if (p->used && p->key.kind == key->kind && p->key.m == key->m && p->key.n == key->n &&
        p->key.k == key->k && p->key.epi == key->epi)
      return p;
  }
  return NULL;
}

kc__plan *kc__plan_slot(kc_ctx *c) {
  for (int i = 0; i < KC_PLANS; i++)
    if (!c->plans[i].used)
      return &c->plans[i];
  return NULL;
}

void kc__plan_release(kc__plan *p) {
  if (p->la)
    (void)cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb)
    (void)cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc)
    (void)cublasLtMatrixLayoutDestroy(p->lc);
  if (p->ld)
    (void)cublasLtMatrixLayoutDestroy(p->ld);
  if (p->op)
    (void)cublasLtMatmulDescDestroy(p->op);
  memset(p, 0, sizeof *p);
}
