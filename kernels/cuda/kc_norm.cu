/*
 * kc_norm: LayerNorm over the last dimension (eps 1e-5), forward and
 * backward, with llm.c's semantics (kernels/cpu/k_layernorm.c): bf16
 * activations and weights, fp32 statistics saved for backward.
 *
 * Forward: one warp per row. The mean and then the variance (two passes
 * over the row, (x - mean)^2, not E[x^2] - mean^2) are summed per lane in
 * index order and combined by a fixed xor-butterfly; rstd = 1/sqrt(var +
 * eps) with an IEEE square root and division.
 *
 * Backward, with xh = (x - mean) rstd and g = w dout:
 *   dinp += rstd (g - mean(g) - xh mean(g xh))      one warp per row, bf16 +=
 *                                                   (dinp NULL: skipped)
 *   dw += sum_rows xh dout,  db += sum_rows dout     fp32 +=, kc__colsum
 * The parameter gradients are sums over rows: per-chunk partials in the
 * kc_ctx's scratch, then added in chunk order (no atomics), so the same
 * inputs give the same bits.
 *
 * Shapes: N >= 0, C > 0, both below 2^31; N at most 65535 * 256 rows in the
 * backward (kc__colsum's grid).
 */
#include "kc_int.h"

#define LN_EPS 1e-5f
#define LN_WARPS 8 /* rows (warps) per block */

typedef __nv_bfloat16 bf16;

__global__ void __launch_bounds__(LN_WARPS * 32)
    layernorm_fwd_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                         const bf16 *b, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= N)
    return; /* row is uniform within a warp: whole warps leave */
  const bf16 *x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32)
    s += kc__f(x[i]);
  const float m = kc__warp_sum(s) / (float)C;
  float q = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float d = kc__f(x[i]) - m;
    q += d * d;
  }
  const float var = kc__warp_sum(q) / (float)C;
  const float rs = 1.0f / sqrtf(var + LN_EPS);
  bf16 *o = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32)
    o[i] = kc__b((kc__f(x[i]) - m) * rs * kc__f(w[i]) + kc__f(b[i]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

__global__ void __launch_bounds__(LN_WARPS * 32)
    layernorm_bwd_dinp_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w,
                              const float *mean, const float *rstd, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= N)
    return;
  const size_t base = (size_t)row * C;
  const float m = mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float xh = (kc__f(inp[base + i]) - m) * rs;
    float g = kc__f(w[i]) * kc__f(dout[base + i]);
    sg += g;
    sgx += g * xh;
  }
  const float mg = kc__warp_sum(sg) / (float)C;
  const float mgx = kc__warp_sum(sgx) / (float)C;
  for (int i = lane; i < C; i += 32) {
    float xh = (kc__f(inp[base + i]) - m) * rs;
    float g = kc__f(w[i]) * kc__f(dout[base + i]);
    dinp[base + i] = kc__b(kc__f(dinp[base + i]) + (g - mg - xh * mgx) * rs);
  }
}

extern "C" int kc_layernorm_fwd(kc_bf16 *out, float *mean, float *rstd, const kc_bf16 *inp,
                                const kc_bf16 *w, const kc_bf16 *b, int N, int C, kc_stream s) {
  if (N < 0 || C <= 0)
    return ft_err_set(FT_EINVAL, "kc_layernorm_fwd: N %d C %d", N, C);
  if (N == 0)
    return FT_OK;
  unsigned grid = (unsigned)((N + LN_WARPS - 1) / LN_WARPS);
  layernorm_fwd_kernel<<<grid, LN_WARPS * 32, 0, kc__st(s)>>>(
      reinterpret_cast<bf16 *>(out), mean, rstd, reinterpret_cast<const bf16 *>(inp),
      reinterpret_cast<const bf16 *>(w), reinterpret_cast<const bf16 *>(b), N, C);
  return KC_LAUNCHED("layernorm_fwd");
}

extern "C" int kc_layernorm_bwd(kc_ctx *c, kc_bf16 *dinp, float *dw, float *db, const kc_bf16 *dout,
                                const kc_bf16 *inp, const kc_bf16 *w, const float *mean,
                                const float *rstd, int N, int C, kc_stream s) {
  if (N < 0 || C <= 0 || !dw || !db)
    return ft_err_set(FT_EINVAL, "kc_layernorm_bwd: N %d C %d dw %p db %p", N, C, (void *)dw,
                      (void *)db);
  if (N == 0)
    return FT_OK;
  cudaStream_t st = kc__st(s);
  if (dinp) {
    unsigned grid = (unsigned)((N + LN_WARPS - 1) / LN_WARPS);
    layernorm_bwd_dinp_kernel<<<grid, LN_WARPS * 32, 0, st>>>(
        reinterpret_cast<bf16 *>(dinp), reinterpret_cast<const bf16 *>(dout),
        reinterpret_cast<const bf16 *>(inp), reinterpret_cast<const bf16 *>(w), mean, rstd, N, C);
    int rc = KC_LAUNCHED("layernorm_bwd_dinp");
    if (rc)
      return rc;
  }
  /* db += column sums of dout; dw += column sums of xh * dout */
  return kc__colsum(c, db, dw, dout, inp, mean, rstd, N, C, st);
}
