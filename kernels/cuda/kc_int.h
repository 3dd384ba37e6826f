/*
 * kc_int: internals shared by the CUDA sources of kernels_cuda.h (C++/CUDA
 * only; never included from C).
 *
 * What lives here:
 *  - the two error translators: kc__err (cudaError_t, kc_runtime.cu) and
 *    kc__blas_err (cublasStatus_t, kc_ctx.cu). They are the only places
 *    where a CUDA or cuBLAS status becomes an FT_E* code;
 *  - struct kc_ctx and its helpers (kc_ctx.cu): the grow-on-demand device
 *    scratch, the pinned upload buffer, the cuBLASLt plan cache;
 *  - the deterministic column-sum helper shared by the matmul (dbias) and
 *    layernorm (dw, db) backward passes (kc_reduce.cu);
 *  - small device helpers (bf16 <-> fp32, fixed-tree warp and block sums).
 *
 * Invariants every .cu file keeps:
 *  - bf16 crosses the C interface as kc_bf16 (uint16_t bits) and is
 *    reinterpret_cast to __nv_bfloat16 inside; all arithmetic is fp32
 *    (double in kc_sumsq), rounded to bf16 once, on store (round to
 *    nearest even, __float2bfloat16_rn);
 *  - no floating-point atomics: every output element is written by exactly
 *    one thread, and every reduction is a fixed tree (shuffle-xor trees,
 *    shared-memory halving, per-block partials summed in block order);
 *  - a kernel launch is followed by KC_LAUNCHED, which reports (and
 *    clears) a launch error. Nothing launches with an empty grid: zero-size
 *    calls return FT_OK before launching.
 */
#ifndef KC_INT_H
#define KC_INT_H

#include <cublasLt.h>
#include <math.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels_cuda.h"

extern "C" {
#include "ft_err.h"
}

/* ---- errors ---------------------------------------------------------------- */

/* The one translation of cudaError_t: FT_OK for cudaSuccess;
 * cudaErrorMemoryAllocation -> FT_ENOMEM; anything else -> FT_ECUDA; the
 * detail "what: name: message" is recorded with ft_err_set, and the
 * runtime's (non-sticky) last-error state is cleared so that a later
 * launch check does not report this error again. */
int kc__err(cudaError_t e, const char *what);
/* The one translation of cublasStatus_t: CUBLAS_STATUS_ALLOC_FAILED ->
 * FT_ENOMEM, CUBLAS_STATUS_NOT_SUPPORTED -> FT_EINVAL (no kernel for this
 * shape or alignment), anything else -> FT_ECUDA, with the detail. */
int kc__blas_err(cublasStatus_t st, const char *what);

/* Launch-error check after a kernel launch. */
#define KC_LAUNCHED(what) kc__err(cudaGetLastError(), what)

static inline cudaStream_t kc__st(kc_stream s) {
  return reinterpret_cast<cudaStream_t>(s);
}

/* ---- context ---------------------------------------------------------------- */

/* GEMM kinds of kc_matmul (see kc_matmul.cu for the column-major mapping). */
enum kc__gemm_kind { KC_GEMM_FWD = 1, KC_GEMM_DINP = 2, KC_GEMM_DW = 3 };

/* One cached GEMM: everything but the data pointers, fixed at the first
 * call of its (kind, m, n, k, epilogue) and reused, so the same algorithm
 * computes every later call of that shape (the determinism contract). */
struct kc__plan_key {
  int kind;
  int m, n, k; /* cuBLAS (column-major) problem size */
  int epi;     /* cublasLtEpilogue_t */
};
struct kc__plan {
  int used;
  kc__plan_key key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo;
};
#define KC_PLANS 64

#define KC_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace (Hopper's size) */

struct kc_ctx {
  int dev; /* the device current at kc_ctx_new */
  cublasLtHandle_t lt;
  void *ws; /* KC_WORKSPACE_BYTES of device memory, 256-byte aligned */
  /* Device scratch for reductions and uploads; grows, never shrinks. One
   * call takes it once (kc__scratch) and uses it on its stream only. */
  void *scratch;
  size_t scratch_bytes;
  /* Pinned host staging for kc_encoder_bwd's upload; pin_ev is recorded
   * after each upload and waited on before the buffer is written again. */
  void *h_pin;
  size_t h_pin_bytes;
  cudaEvent_t pin_ev;
  int pin_pending;
  /* Host counting-sort table of kc_encoder_bwd (one counter per token id). */
  int32_t *h_count;
  size_t h_count_len;
  kc__plan plans[KC_PLANS];
};

/* *out = at least `bytes` of c's device scratch (256-byte aligned). Growth
 * waits for the device (the old block may still be in use by enqueued
 * kernels) before freeing it. FT_ENOMEM when the device is full. */
int kc__scratch(kc_ctx *c, size_t bytes, void **out);
/* *out = at least `bytes` of c's pinned host buffer, after waiting for the
 * previous upload from it to complete. */
int kc__pinned(kc_ctx *c, size_t bytes, void **out);
/* Records c's pinned-buffer event on s after an upload was enqueued. */
int kc__pinned_enqueued(kc_ctx *c, cudaStream_t s);
/* *out = host int32 table of at least n entries owned by c (grown with
 * realloc; contents undefined). */
int kc__host_count(kc_ctx *c, size_t n, int32_t **out);

/* The cached plan with this key, or NULL. */
kc__plan *kc__plan_find(kc_ctx *c, const kc__plan_key *key);
/* An unused slot of the cache, or NULL when all KC_PLANS are taken (the
 * caller then builds a one-off plan and releases it after the call). */
kc__plan *kc__plan_slot(kc_ctx *c);
/* Destroys a plan's descriptors and marks it unused (NULL fields skipped). */
void kc__plan_release(kc__plan *p);

/* ---- deterministic column sums (kc_reduce.cu) -------------------------------- */

/* For a (N,C) bf16 matrix g, adds the column sums to s0 (C, fp32):
 * s0[c] += sum_n g[n,c]. With xin, mean, rstd non-NULL (layernorm's
 * backward) also s1[c] += sum_n ((xin[n,c] - mean[n]) * rstd[n]) * g[n,c].
 * Rows are cut into fixed chunks; each chunk's sums go to c's scratch and
 * the chunks are added in chunk order: same bits for the same N, C. */
int kc__colsum(kc_ctx *c, float *s0, float *s1, const kc_bf16 *g, const kc_bf16 *xin,
               const float *mean, const float *rstd, int N, int C, cudaStream_t s);

/* ---- tensor-core attention, head size 64 (kc_attention_tc.cu) ------------------ */

/* The WMMA variants of kc_attention_fwd and of kc_attention_bwd's dQ and
 * dK/dV passes, called by kc_attention.cu's dispatcher only after its shape
 * checks (B, T, C, NH > 0, C == 64 NH, B*NH < 2^31, ceil(T/64) <= 65535)
 * and with qkv, out, dout, dqkv 16-byte aligned. Same arguments and
 * results as the SIMT kernels (the backward takes D = rowsum(dout * out),
 * (B,NH,T) fp32, already enqueued on s). Return the launch status. */
int kc__attention_tc_fwd(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, int B, int T,
                         int C, int NH, cudaStream_t s);
int kc__attention_tc_bwd(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const __nv_bfloat16 *qkv,
                         const float *lse, const float *D, int B, int T, int C, int NH,
                         cudaStream_t s);

/* ---- device helpers ----------------------------------------------------------- */

#define KC_THREADS 256

/* Blocks for a grid-stride loop over n items with KC_THREADS threads
 * (capped; the loops cover the rest). n > 0. */
static inline unsigned kc__grid(size_t n) {
  size_t g = (n + KC_THREADS - 1) / KC_THREADS;
  const size_t cap = (size_t)65535 * 16;
  if (g > cap)
    g = cap;
  return g ? (unsigned)g : 1u;
}

static inline bool kc__aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

static __device__ __forceinline__ float kc__f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
static __device__ __forceinline__ __nv_bfloat16 kc__b(float x) {
  return __float2bfloat16_rn(x);
}

/* Sum over the 32 lanes of a warp by a fixed xor-butterfly; every lane
 * gets the same bits (fp32 addition is commutative). All lanes must be
 * active. */
static __device__ __forceinline__ float kc__warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
static __device__ __forceinline__ float kc__warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

/* Block-wide sum (or max) in a fixed tree: warp butterflies, then warp 0
 * over the per-warp results. Every thread of the block must call it; all
 * get the result. buf: __shared__ float[32]. blockDim.x a multiple of 32. */
template <bool MAX> static __device__ __forceinline__ float kc__block_reduce(float x, float *buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  x = MAX ? kc__warp_max(x) : kc__warp_sum(x);
  __syncthreads(); /* buf may still be read by a previous call */
  if (lane == 0)
    buf[warp] = x;
  __syncthreads();
  if (warp == 0) {
    float y = lane < nwarps ? buf[lane] : (MAX ? -INFINITY : 0.0f);
    y = MAX ? kc__warp_max(y) : kc__warp_sum(y);
    if (lane == 0)
      buf[0] = y;
  }
  __syncthreads();
  return buf[0];
}

#endif
