/*
 * kc_ops: fp32 device kernels mirroring the CPU kernels of kernels.h.
 *
 * Elementwise kernels use grid-stride loops (any n, size_t indices).
 * LayerNorm uses one warp per row with shuffle reductions in a fixed tree,
 * so it is deterministic; no kernel here uses atomics. Launch errors are
 * returned; execution errors surface at kc_sync / the next copy.
 */
#include "kernels_cuda.h"
#include "kc_int.h"

#include <math.h>

extern "C" {
#include "ft_err.h"
}

#define KC_THREADS 256
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

static unsigned grid_for(size_t n) {
  size_t g = (n + KC_THREADS - 1) / KC_THREADS;
  if (g > 65535u * 8u)
    g = 65535u * 8u; /* grid-stride loops cover the rest */
  return g ? (unsigned)g : 1u;
}

__global__ void encoder_fwd_kernel(float *out, const int32_t *inp, const float *wte,
                                   const float *wpe, int T, int C, size_t total) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % T);
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}

__global__ void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_K * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_K * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * GELU_K * x * x);
    dinp[i] += g * dout[i];
  }
}

__global__ void residual_fwd_kernel(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    if (wd != 0.0f)
      upd += wd * p[i];
    p[i] -= lr * upd;
  }
}

__device__ static float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/* One warp per row; blockDim.x = 32 * rows per block. */
__global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C) {
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N)
    return; /* whole warps exit together: row is uniform within a warp */
  const float *x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32)
    s += x[i];
  float m = warp_sum(s) / C;
  float q = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float d = x[i] - m;
    q += d * d;
  }
  float rs = rsqrtf(warp_sum(q) / C + 1e-5f);
  float *o = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32)
    o[i] = (x[i] - m) * rs * w[i] + b[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

extern "C" int kc_encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe,
                              int B, int T, int C) {
  size_t total = (size_t)B * T * C;
  encoder_fwd_kernel<<<grid_for(total), KC_THREADS>>>(out, inp, wte, wpe, T, C, total);
  return KC_LAUNCHED("encoder_fwd");
}

extern "C" int kc_gelu_fwd(float *out, const float *inp, size_t n) {
  gelu_fwd_kernel<<<grid_for(n), KC_THREADS>>>(out, inp, n);
  return KC_LAUNCHED("gelu_fwd");
}

extern "C" int kc_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
  gelu_bwd_kernel<<<grid_for(n), KC_THREADS>>>(dinp, inp, dout, n);
  return KC_LAUNCHED("gelu_bwd");
}

extern "C" int kc_residual_fwd(float *out, const float *a, const float *b, size_t n) {
  residual_fwd_kernel<<<grid_for(n), KC_THREADS>>>(out, a, b, n);
  return KC_LAUNCHED("residual_fwd");
}

extern "C" int kc_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, int64_t t) {
  /* as k_adamw: bias corrections in double, rounded to float */
  float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
  float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
  adamw_kernel<<<grid_for(n), KC_THREADS>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
  return KC_LAUNCHED("adamw");
}

extern "C" int kc_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  if (N <= 0)
    return FT_OK;
  const int rows_per_block = KC_THREADS / 32;
  unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
  layernorm_fwd_kernel<<<grid, KC_THREADS>>>(out, mean, rstd, inp, w, b, N, C);
  return KC_LAUNCHED("layernorm_fwd");
}
