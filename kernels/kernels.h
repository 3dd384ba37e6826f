/*
 * kernels: the math of GPT-2 training behind one C interface.
 *
 * This header is the CPU implementation's interface (fp32 throughout, GEMMs
 * through BLAS, loops multithreaded with OpenMP). The CUDA implementation
 * (kernels_cuda.h) mirrors these operations on device memory.
 *
 * Conventions (as in llm.c):
 *   B batch, T sequence length, C channels, NH heads, V vocab (padded: Vp),
 *   N = B*T rows. All arrays are row-major and contiguous.
 *   Every *_bwd ACCUMULATES (+=) into parameter gradients (dw, db, dwte,
 *   dwpe) and into dinp, so callers zero gradient buffers once per optimizer
 *   step (gradient accumulation) and activation-gradient buffers per use.
 *   All pointers are borrowed; nothing is allocated or freed here, except
 *   where a function says so.
 *
 * Determinism: every function gives the same bits for the same inputs,
 * whatever the number of threads. Work is split only over independent
 * outputs; every reduction runs in a fixed order (fixed-size blocks summed
 * in index order), never in thread-arrival order.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
 * out (B,T,C), inp (B,T), wte (V,C), wpe (maxT,C) */
void k_encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                   int C);
/* dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] */
void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                   int C);

/* LayerNorm over the last dimension, eps 1e-5.
 * out (N,C); mean, rstd (N) saved for backward; w, b (C) */
void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, int N, int C);
/* dinp (N,C) +=; dw, db (C) += */
void k_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ w^T + bias; w (OC,C) as in PyTorch's Linear; bias (OC) or NULL */
void k_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                  int OC);
/* dinp (N,C) += dout @ w; dw (OC,C) += dout^T @ inp; dbias (OC) += sum over N (if non-NULL).
 * dinp may be NULL (no input gradient wanted, e.g. for the token ids path). */
void k_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                  const float *w, int N, int C, int OC);

/* Causal multi-head self-attention.
 * qkv (B,T,3C) holds q, k, v concatenated on the last dimension;
 * out (B,T,C); preatt, att (B,NH,T,T) saved for backward (att = softmax of
 * scaled, causally masked preatt; entries above the diagonal are 0). */
void k_attention_fwd(float *out, float *preatt, float *att, const float *qkv, int B, int T, int C,
                     int NH);
/* dqkv (B,T,3C) +=; dpreatt, datt (B,NH,T,T) are scratch, overwritten. */
void k_attention_bwd(float *dqkv, float *dpreatt, float *datt, const float *dout, const float *qkv,
                     const float *att, int B, int T, int C, int NH);

/* GELU, tanh approximation (GPT-2's). out, inp (n) */
void k_gelu_fwd(float *out, const float *inp, size_t n);
/* dinp (n) += dout * gelu'(inp) */
void k_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b, elementwise (n) */
void k_residual_fwd(float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout */
void k_residual_bwd(float *da, float *db, const float *dout, size_t n);

/* Softmax cross-entropy over the first V of Vp logits per row.
 * logits (N,Vp) -> probs (N,Vp) (the padded tail is set to 0);
 * losses (N) = -log probs[target]. Returns the mean loss over the N rows. */
float k_crossentropy_fwd(float *probs, float *losses, const float *logits, const int32_t *targets,
                         int N, int V, int Vp);
/* dlogits (N,Vp) = (probs - onehot(target)) * dloss, with dloss the
 * gradient of the reported loss per row (e.g. 1/(N*accum) for a mean).
 * The padded tail of dlogits is set to 0. Overwrites dlogits. */
void k_crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                        int N, int V, int Vp);

/* Sum of squares of x (n) in a fixed order: blocks of K_REDUCE_BLOCK summed
 * in double, block results summed in index order. Same bits for any thread
 * count. */
#define K_REDUCE_BLOCK 8192
double k_sumsq(const float *x, size_t n);

/* x *= s (n) */
void k_scale(float *x, float s, size_t n);

/* AdamW with decoupled weight decay, one step on n parameters.
 * t is the 1-based step count used for bias correction.
 * p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)  (wd applied only when wd != 0) */
void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
             float beta2, float eps, float wd, int64_t t);

/* Threads used by the kernels (OpenMP). 0 leaves the default
 * (OMP_NUM_THREADS / the number of cores). Call before any kernel.
 * BLAS itself always runs single-threaded: GEMMs are split into fixed
 * output tiles spread over the OpenMP threads, because OpenBLAS's own
 * threading gives different bits for different thread counts. */
void k_set_threads(int n);
int k_get_threads(void);
/* The BLAS build and the CPU kernel it chose at run time (OpenBLAS's
 * openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY
 * Haswell MAX_THREADS=64"): with the CPU model, what fixes the kernels' bits
 * (the node doctor compares results only between nodes that share both). */
const char *k_blas_config(void);

/* Measured single-precision GEMM rate of this machine through the same
 * BLAS: runs sgemm of (n x n) @ (n x n) for at least min_seconds, with
 * OpenBLAS's own threading at k_get_threads() threads (reset to one after),
 * and returns GFLOP/s (0 if n <= 0 or its buffers cannot be allocated; it
 * allocates and frees them itself). For benchmarks; not while kernels run. */
double k_sgemm_gflops(int n, double min_seconds);

#ifdef __cplusplus
}
#endif
#endif
