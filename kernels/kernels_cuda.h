/*
 * kernels_cuda: the CUDA implementation of the kernels, behind a pure C
 * interface (no CUDA header is included; device memory is a plain pointer,
 * streams and events are opaque handles).
 *
 * Precision (docs/design.md §4): activations and the parameters used for compute are
 * bf16 (kc_bf16, the upper 16 bits of an IEEE float, round-to-nearest-even
 * on conversion); every reduction and every GEMM accumulates in fp32;
 * parameter gradients, fp32 master weights and AdamW moments are fp32.
 * Shapes and semantics follow kernels.h (see there: B, T, C, NH, V, Vp,
 * N = B*T, row-major); where a function differs (overwrite instead of
 * accumulate, fused epilogue) its comment says so.
 *
 * Determinism: every kernel gives the same bits for the same inputs on the
 * same GPU model: no atomics whose order can change a result; every
 * reduction has a fixed tree (per-block partial sums in scratch owned by
 * the kc_ctx, then a fixed-order final pass). cuBLASLt's GEMMs are
 * deterministic for a fixed algorithm, which kc_ctx picks once per shape
 * and caches.
 *
 * Pointers named d_* and every array argument of a kernel are DEVICE
 * pointers from kc_malloc; h_* are host pointers. All borrowed. Kernels are
 * enqueued on the given stream (NULL: the legacy default stream) and return
 * at once: the return value reports launch errors; errors raised while a
 * kernel runs surface at the next synchronising call.
 *
 * Errors: every int function returns FT_OK (0), FT_ENOMEM (device or pinned
 * memory exhausted: the caller may retry smaller, docs/design.md §4), FT_EINVAL (a
 * shape this implementation does not support, e.g. a head size other than
 * 16, 32, 64 or 128) or FT_ECUDA, with the CUDA/cuBLAS error name and
 * message recorded through ft_err_set (ft_err_detail()).
 *
 * Threading: a kc_ctx is used by one host thread at a time, and its scratch
 * by one stream at a time (the compute stream). Streams and events are as
 * CUDA's.
 */
#ifndef KERNELS_CUDA_H
#define KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kc_bf16;             /* bf16 bits */
typedef struct kc_stream_ *kc_stream; /* a cudaStream_t */
typedef struct kc_event_ *kc_event;   /* a cudaEvent_t (timing disabled) */
typedef struct kc_ctx kc_ctx;         /* cuBLASLt handle, workspace, scratch */

/* ---- devices, memory, streams, events ------------------------------------ */

/* Number of usable CUDA devices; 0 when there is no GPU, no driver, or the
 * driver is too old. Never fails, never aborts. */
int kc_device_count(void);
/* Makes device dev current for the calling thread. */
int kc_set_device(int dev);
/* Facts about device dev: name (NUL-terminated, truncated to namelen),
 * total memory, SM count, compute capability. Any out pointer may be NULL. */
int kc_device_info(int dev, char *name, size_t namelen, size_t *mem_total, int *sms, int *cc_major,
                   int *cc_minor);
/* PCI bus id of device dev, e.g. "0000:3B:00.0" (len >= 13), for matching
 * the kernel log's and NVML's Xid reports. */
int kc_device_pci(int dev, char *pci, size_t len);
/* Free and total memory of the current device. */
int kc_mem_info(size_t *free_bytes, size_t *total_bytes);
/* The CUDA runtime's and cuBLASLt's versions, e.g. "CUDA 13.0, cuBLASLt
 * 130001": with the device's model, what fixes the kernels' bits. */
int kc_versions(char *buf, size_t len);

/* *d_ptr = bytes of device memory (uninitialised); on failure *d_ptr = NULL
 * and the code is FT_ENOMEM when the device is out of memory. bytes == 0
 * gives NULL and FT_OK. */
int kc_malloc(void **d_ptr, size_t bytes);
/* Frees device memory from kc_malloc; NULL is a no-op. */
int kc_free(void *d_ptr);
/* Page-locked host memory (for asynchronous copies); FT_ENOMEM on failure. */
int kc_host_alloc(void **h_ptr, size_t bytes);
void kc_host_free(void *h_ptr);

/* Synchronous copies (they wait for the legacy default stream). */
int kc_memcpy_h2d(void *d_dst, const void *h_src, size_t bytes);
int kc_memcpy_d2h(void *h_dst, const void *d_src, size_t bytes);
/* Asynchronous copies on stream s; host memory should be from kc_host_alloc
 * for the copy to overlap (pageable memory makes CUDA copy synchronously). */
int kc_memcpy_h2d_async(void *d_dst, const void *h_src, size_t bytes, kc_stream s);
int kc_memcpy_d2h_async(void *h_dst, const void *d_src, size_t bytes, kc_stream s);
int kc_memcpy_d2d_async(void *d_dst, const void *d_src, size_t bytes, kc_stream s);
int kc_memset_async(void *d_dst, int byte, size_t bytes, kc_stream s);

/* Waits for all work on the current device; reports asynchronous errors. */
int kc_sync(void);
/* Non-blocking: the first asynchronous error raised so far, FT_OK if none. */
int kc_check(void);
/* Enqueues on s a kernel that never finishes (failpoint hang_in=cuda: a
 * rank stuck inside the device, as a deadlocked kernel leaves it); every
 * later wait for s, kc_sync included, blocks for ever. */
int kc_stall(kc_stream s);

/* A non-blocking stream (does not synchronise with the legacy stream). */
int kc_stream_new(kc_stream *out);
void kc_stream_free(kc_stream s); /* NULL is a no-op */
int kc_stream_sync(kc_stream s);
int kc_event_new(kc_event *out);
void kc_event_free(kc_event e); /* NULL is a no-op */
int kc_event_record(kc_event e, kc_stream s);
/* Work enqueued on s after this call waits for e's last record. */
int kc_stream_wait(kc_stream s, kc_event e);
/* Blocks the host until e's last record has completed. */
int kc_event_sync(kc_event e);
/* 1 if e's last record has completed, 0 if not yet, < 0 on error. */
int kc_event_query(kc_event e);
/* Milliseconds between two completed records of timing events. Events from
 * kc_event_new have timing disabled; use kc_timer_new for these. */
int kc_timer_new(kc_event *out);
int kc_timer_ms(kc_event start, kc_event stop, float *ms);

/* ---- context: cuBLASLt handle, workspace, reduction scratch -------------- */

/* Creates a context on the current device (cuBLASLt handle, a 32 MiB GEMM
 * workspace, scratch for deterministic reductions that grows on demand).
 * *out owned by the caller (kc_ctx_free). */
int kc_ctx_new(kc_ctx **out);
void kc_ctx_free(kc_ctx *c); /* NULL is a no-op; waits for the device */

/* ---- conversions and elementwise ----------------------------------------- */

int kc_f32_to_bf16(kc_bf16 *out, const float *in, size_t n, kc_stream s);
int kc_bf16_to_f32(float *out, const kc_bf16 *in, size_t n, kc_stream s);
/* dst[i] += src[i] (fp32) */
int kc_add_f32(float *dst, const float *src, size_t n, kc_stream s);
/* x *= a (fp32) */
int kc_scale_f32(float *x, float a, size_t n, kc_stream s);
/* *d_out = sum of x[i]^2 in double through a fixed tree (overwrites *d_out). */
int kc_sumsq(kc_ctx *c, double *d_out, const float *x, size_t n, kc_stream s);

/* ---- the GPT-2 ops (bf16 activations) ------------------------------------- */

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] (sum in fp32, rounded once).
 * out (B,T,C) bf16; inp (B,T) int32 on the device; wte (Vp,C), wpe (maxT,C) bf16 */
int kc_encoder_fwd(kc_bf16 *out, const int32_t *inp, const kc_bf16 *wte, const kc_bf16 *wpe, int B,
                   int T, int C, kc_stream s);
/* dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:].
 * dwte, dwpe fp32. h_inp is the host copy of the same tokens: the positions
 * are bucketed by token on the host so that each row of dwte is summed by
 * one thread block in position order (no atomics). h_inp is read before
 * the call returns. */
int kc_encoder_bwd(kc_ctx *c, float *dwte, float *dwpe, const kc_bf16 *dout, const int32_t *h_inp,
                   int B, int T, int C, kc_stream s);

/* LayerNorm over C, eps 1e-5, statistics in fp32.
 * out (N,C) bf16; mean, rstd (N) fp32 saved for backward; w, b (C) bf16 */
int kc_layernorm_fwd(kc_bf16 *out, float *mean, float *rstd, const kc_bf16 *inp, const kc_bf16 *w,
                     const kc_bf16 *b, int N, int C, kc_stream s);
/* dinp (N,C) bf16 += ; dw, db (C) fp32 += (per-block partials in c's
 * scratch, summed in block order). */
int kc_layernorm_bwd(kc_ctx *c, kc_bf16 *dinp, float *dw, float *db, const kc_bf16 *dout,
                     const kc_bf16 *inp, const kc_bf16 *w, const float *mean, const float *rstd,
                     int N, int C, kc_stream s);

/* out (N,OC) = inp (N,C) @ w^T + bias, w (OC,C) bf16, bias (OC) bf16 or NULL.
 * With pre_gelu non-NULL: pre_gelu (N,OC) = inp @ w^T + bias and
 * out = gelu(pre_gelu) (cuBLASLt's GELU_AUX_BIAS epilogue). Overwrites out.
 * C and OC must be multiples of 8 and every pointer 16-byte aligned (as
 * for kc_matmul_bwd; cuBLASLt's leading-dimension and GELU-aux rules),
 * else FT_EINVAL. */
int kc_matmul_fwd(kc_ctx *c, kc_bf16 *out, kc_bf16 *pre_gelu, const kc_bf16 *inp, const kc_bf16 *w,
                  const kc_bf16 *bias, int N, int C, int OC, kc_stream s);
/* Backward of kc_matmul_fwd without its GELU:
 *   dinp (N,C) bf16 = dout @ w  (OVERWRITTEN; NULL: not computed); with
 *     dgelu_pre non-NULL, dinp = (dout @ w) * gelu'(dgelu_pre), dgelu_pre
 *     (N,C) being the pre-activation of the layer whose output was inp
 *     (the DGELU epilogue: the fc layer's backward fused into fcproj's);
 *   dw (OC,C) fp32 += dout^T @ inp  (bf16 operands, fp32 accumulation);
 *   dbias (OC) fp32 += column sums of dout (fixed tree; NULL: none). */
int kc_matmul_bwd(kc_ctx *c, kc_bf16 *dinp, float *dw, float *dbias, const kc_bf16 *dout,
                  const kc_bf16 *inp, const kc_bf16 *w, const kc_bf16 *dgelu_pre, int N, int C,
                  int OC, kc_stream s);

/* Fused causal self-attention, flash-attention style (the (T,T) matrix is
 * never stored): qkv (B,T,3C) bf16 holds q, k, v; out (B,T,C) bf16;
 * lse (B,NH,T) fp32 = log-sum-exp of each query's scaled scores, saved for
 * backward. Head size C/NH must be 16, 32, 64 or 128 (else FT_EINVAL).
 * With the implementation "tc" (the default) and HS == 64, tensor-core
 * (WMMA) kernels run, forward and backward (kc_attention_tc.cu; P and dS
 * rounded to bf16 as GEMM operands); every other head size, and every call
 * with "simt" (FT_ATTENTION=simt or kc_attention_set_impl), runs the fp32
 * CUDA-core kernel. */
int kc_attention_fwd(kc_bf16 *out, float *lse, const kc_bf16 *qkv, int B, int T, int C, int NH,
                     kc_stream s);
/* dqkv (B,T,3C) bf16 OVERWRITTEN with the gradient of q, k and v, from
 * dout (B,T,C), the forward's qkv, out and lse. dq and dk/dv are computed
 * by separate passes that each own their outputs (no atomics). c provides
 * the (B,NH,T) fp32 scratch for rowsum(dout * out). */
int kc_attention_bwd(kc_ctx *c, kc_bf16 *dqkv, const kc_bf16 *dout, const kc_bf16 *qkv,
                     const kc_bf16 *out, const float *lse, int B, int T, int C, int NH,
                     kc_stream s);

/* The attention implementation used from now on by the whole process (not
 * per context): "simt" or "tc" (the latter for HS == 64 with 16-byte
 * aligned bf16 pointers; every other call keeps "simt"). The initial value
 * is the environment variable FT_ATTENTION, read once at the first use
 * ("simt"; anything else or unset: "tc"). FT_EINVAL for NULL or another
 * name, the choice unchanged. Meant for tests and benchmarks: a forward
 * and its backward may use different implementations (the backward needs
 * only out and lse), but the bits then match neither alone. */
int kc_attention_set_impl(const char *name);
/* The current choice, "simt" or "tc" (a static string). */
const char *kc_attention_impl(void);

/* GELU (tanh approximation), bf16 in and out, math in fp32. */
int kc_gelu_fwd(kc_bf16 *out, const kc_bf16 *inp, size_t n, kc_stream s);
/* dinp = dout * gelu'(inp) (OVERWRITTEN). */
int kc_gelu_bwd(kc_bf16 *dinp, const kc_bf16 *inp, const kc_bf16 *dout, size_t n, kc_stream s);

/* out = a + b (bf16, sum in fp32). */
int kc_residual_fwd(kc_bf16 *out, const kc_bf16 *a, const kc_bf16 *b, size_t n, kc_stream s);
/* da += dout; db += dout (bf16; either may be NULL). */
int kc_residual_bwd(kc_bf16 *da, kc_bf16 *db, const kc_bf16 *dout, size_t n, kc_stream s);

/* Fused classifier: per row i of N, softmax over the first V of Vp logits
 * (fp32 math), losses[i] = -log p[targets[i]] (fp32). With write_dlogits,
 * logits (N,Vp) is then OVERWRITTEN by its gradient (p - onehot) * dloss,
 * with 0 in the padded tail; without, logits is left as it was (validation).
 * One block per row; the row's max and sum are reduced in a fixed tree. */
int kc_classifier(float *losses, kc_bf16 *logits, const int32_t *targets, float dloss, int N, int V,
                  int Vp, int write_dlogits, kc_stream s);

/* AdamW with decoupled weight decay on n fp32 master weights p with fp32
 * gradient g and moments m, v (the formula of k_adamw; bias corrections are
 * computed on the host in double, as on the CPU). If p_bf16 is non-NULL it
 * receives the updated weights rounded to bf16 (the copy used for compute). */
int kc_adamw(float *p, kc_bf16 *p_bf16, const float *g, float *m, float *v, size_t n, float lr,
             float beta1, float beta2, float eps, float wd, int64_t t, kc_stream s);

#ifdef __cplusplus
}
#endif
#endif
