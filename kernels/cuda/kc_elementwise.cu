/*
 * kc_elementwise: the element-wise kernels (bf16/fp32 casts, fp32 add and
 * scale, GELU, residual, AdamW) and the token/position embedding
 * (kc_encoder_fwd/bwd).
 *
 * Element-wise kernels are grid-stride loops over size_t indices, one
 * thread per element at a time: every output is written by one thread, so
 * they are deterministic by construction. Math is fp32, bf16 rounded once
 * on store (round to nearest even).
 *
 * GELU uses the tanh approximation through the same sigmoid identity as the
 * CPU (k_gelu.c): 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), with expf.
 *
 * AdamW follows k_adamw.c operation for operation, with the bias
 * corrections computed on the host in double and rounded to float, and
 * with explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...) so that
 * nvcc does not contract a*b+c into an FMA: the update then rounds like
 * the CPU's (whose build does not enable FMA), up to sqrtf and division,
 * which are IEEE-rounded on both sides by default (no -use_fast_math).
 *
 * The encoder backward scatters rows of dout into dwte rows chosen by token.
 * Without atomics: the host buckets the positions by token (a stable
 * counting sort, so positions stay in increasing order within a token),
 * uploads the sorted positions and each unique token's range through the
 * kc_ctx's pinned buffer, and one block per unique token walks its
 * positions in order, adding them to dwte starting from dwte's value. That
 * is the CPU's order of additions (k_encoder_bwd adds rows in (b,t) order
 * into dwte), so the fp32 results are identical to the CPU's for the same
 * bf16 dout. dwpe[t] likewise adds b = 0..B-1 in order.
 *
 * Constraints: tokens in [0, rows of wte) (the caller's contract, as on the
 * CPU; negative tokens in kc_encoder_bwd give FT_EINVAL); B*T and C below
 * 2^31.
 */
#include "kc_int.h"

#include <math.h>
#include <string.h>

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

#define GRID_STRIDE(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

typedef __nv_bfloat16 bf16;

static inline const bf16 *bfp(const kc_bf16 *p) {
  return reinterpret_cast<const bf16 *>(p);
}
static inline bf16 *bfp(kc_bf16 *p) {
  return reinterpret_cast<bf16 *>(p);
}

/* ---- casts, add, scale -------------------------------------------------------------- */

__global__ void f32_to_bf16_kernel(bf16 *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = kc__b(in[i]);
}

__global__ void bf16_to_f32_kernel(float *out, const bf16 *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = kc__f(in[i]);
}

__global__ void add_f32_kernel(float *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void scale_f32_kernel(float *x, float a, size_t n) {
  GRID_STRIDE(i, n) x[i] *= a;
}

extern "C" int kc_f32_to_bf16(kc_bf16 *out, const float *in, size_t n, kc_stream s) {
  if (n == 0)
    return FT_OK;
  f32_to_bf16_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(bfp(out), in, n);
  return KC_LAUNCHED("f32_to_bf16");
}

extern "C" int kc_bf16_to_f32(float *out, const kc_bf16 *in, size_t n, kc_stream s) {
  if (n == 0)
    return FT_OK;
  bf16_to_f32_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(out, bfp(in), n);
  return KC_LAUNCHED("bf16_to_f32");
}

extern "C" int kc_add_f32(float *dst, const float *src, size_t n, kc_stream s) {
  if (n == 0)
    return FT_OK;
  add_f32_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(dst, src, n);
  return KC_LAUNCHED("add_f32");
}

extern "C" int kc_scale_f32(float *x, float a, size_t n, kc_stream s) {
  if (n == 0)
    return FT_OK;
  scale_f32_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(x, a, n);
  return KC_LAUNCHED("scale_f32");
}

/* ---- GELU ------------------------------------------------------------------------- */

/* sigmoid(2u) of x's tanh-GELU argument u; *e = exp(-2u), *z = -2u */
static __device__ __forceinline__ float gelu_sigmoid(float x, float *e, float *z) {
  *z = -2.0f * GELU_S * (x + GELU_K * x * x * x);
  *e = expf(*z);
  return 1.0f / (1.0f + *e);
}

__global__ void gelu_fwd_kernel(bf16 *out, const bf16 *inp, size_t n) {
  GRID_STRIDE(i, n) {
    float x = kc__f(inp[i]), e, z;
    out[i] = kc__b(x * gelu_sigmoid(x, &e, &z));
  }
}

__global__ void gelu_bwd_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float x = kc__f(inp[i]), e, z;
    float sg = gelu_sigmoid(x, &e, &z);
    float om = z < 80.0f ? e * sg : 1.0f; /* 1 - sg without cancellation */
    float g = sg + 2.0f * x * sg * om * GELU_S * (1.0f + 3.0f * GELU_K * x * x);
    dinp[i] = kc__b(g * kc__f(dout[i]));
  }
}

extern "C" int kc_gelu_fwd(kc_bf16 *out, const kc_bf16 *inp, size_t n, kc_stream s) {
  if (n == 0)
    return FT_OK;
  gelu_fwd_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(bfp(out), bfp(inp), n);
  return KC_LAUNCHED("gelu_fwd");
}

extern "C" int kc_gelu_bwd(kc_bf16 *dinp, const kc_bf16 *inp, const kc_bf16 *dout, size_t n,
                           kc_stream s) {
  if (n == 0)
    return FT_OK;
  gelu_bwd_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(bfp(dinp), bfp(inp), bfp(dout), n);
  return KC_LAUNCHED("gelu_bwd");
}

/* ---- residual ----------------------------------------------------------------------- */

__global__ void residual_fwd_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n) {
  GRID_STRIDE(i, n) out[i] = kc__b(kc__f(a[i]) + kc__f(b[i]));
}

/* dout is read before da/db are written, so it may alias either. */
__global__ void residual_bwd_kernel(bf16 *da, bf16 *db, const bf16 *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float d = kc__f(dout[i]);
    if (da)
      da[i] = kc__b(kc__f(da[i]) + d);
    if (db)
      db[i] = kc__b(kc__f(db[i]) + d);
  }
}

extern "C" int kc_residual_fwd(kc_bf16 *out, const kc_bf16 *a, const kc_bf16 *b, size_t n,
                               kc_stream s) {
  if (n == 0)
    return FT_OK;
  residual_fwd_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(bfp(out), bfp(a), bfp(b), n);
  return KC_LAUNCHED("residual_fwd");
}

extern "C" int kc_residual_bwd(kc_bf16 *da, kc_bf16 *db, const kc_bf16 *dout, size_t n,
                               kc_stream s) {
  if (n == 0 || (!da && !db))
    return FT_OK;
  residual_bwd_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(bfp(da), bfp(db), bfp(dout), n);
  return KC_LAUNCHED("residual_bwd");
}

/* ---- AdamW --------------------------------------------------------------------------- */

__global__ void adamw_kernel(float *p, bf16 *p16, const float *g, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float bc1,
                             float bc2) {
  const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
  const bool decay = wd != 0.0f;
  GRID_STRIDE(i, n) {
    float gi = g[i];
    float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(omb1, gi));
    float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float mhat = __fdiv_rn(mi, bc1);
    float vhat = __fdiv_rn(vi, bc2);
    float upd = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps));
    float pi = p[i];
    if (decay)
      upd = __fadd_rn(upd, __fmul_rn(wd, pi));
    pi = __fsub_rn(pi, __fmul_rn(lr, upd));
    p[i] = pi;
    if (p16)
      p16[i] = kc__b(pi);
  }
}

extern "C" int kc_adamw(float *p, kc_bf16 *p_bf16, const float *g, float *m, float *v, size_t n,
                        float lr, float beta1, float beta2, float eps, float wd, int64_t t,
                        kc_stream s) {
  if (n == 0)
    return FT_OK;
  /* as k_adamw: bias corrections in double, rounded to float */
  float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
  float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
  adamw_kernel<<<kc__grid(n), KC_THREADS, 0, kc__st(s)>>>(p, bfp(p_bf16), g, m, v, n, lr, beta1,
                                                          beta2, eps, wd, bc1, bc2);
  return KC_LAUNCHED("adamw");
}

/* ---- encoder ------------------------------------------------------------------------ */

__global__ void encoder_fwd_kernel(bf16 *out, const int32_t *inp, const bf16 *wte, const bf16 *wpe,
                                   int T, int C, size_t total) {
  GRID_STRIDE(i, total) {
    size_t bt = i / (size_t)C;
    int c = (int)(i - bt * (size_t)C);
    int t = (int)(bt % (size_t)T);
    out[i] = kc__b(kc__f(wte[(size_t)inp[bt] * C + c]) + kc__f(wpe[(size_t)t * C + c]));
  }
}

extern "C" int kc_encoder_fwd(kc_bf16 *out, const int32_t *inp, const kc_bf16 *wte,
                              const kc_bf16 *wpe, int B_, int T, int C, kc_stream s) {
  if (B_ < 0 || T < 0 || C < 0)
    return ft_err_set(FT_EINVAL, "kc_encoder_fwd: B %d T %d C %d", B_, T, C);
  size_t total = (size_t)B_ * T * C;
  if (total == 0)
    return FT_OK;
  encoder_fwd_kernel<<<kc__grid(total), KC_THREADS, 0, kc__st(s)>>>(bfp(out), inp, bfp(wte),
                                                                    bfp(wpe), T, C, total);
  return KC_LAUNCHED("encoder_fwd");
}

/* One block per unique token u: dwte[tok[u], c] += dout[pos, c] for the
 * positions pos = sorted[off[u] .. off[u+1]) in increasing order. */
__global__ void encoder_bwd_wte_kernel(float *dwte, const bf16 *dout, const int32_t *sorted,
                                       const int32_t *tok, const int32_t *off, int C) {
  const int u = blockIdx.x;
  const int p0 = off[u], p1 = off[u + 1];
  float *row = dwte + (size_t)tok[u] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int p = p0; p < p1; p++)
      acc += kc__f(dout[(size_t)sorted[p] * C + c]);
    row[c] = acc;
  }
}

/* dwpe[t, c] += dout[b, t, c] for b = 0..B-1 in order. */
__global__ void encoder_bwd_wpe_kernel(float *dwpe, const bf16 *dout, int B_, int T, int C) {
  const size_t tc = (size_t)T * C;
  GRID_STRIDE(i, tc) {
    float acc = dwpe[i];
    for (int b = 0; b < B_; b++)
      acc += kc__f(dout[(size_t)b * tc + i]);
    dwpe[i] = acc;
  }
}

extern "C" int kc_encoder_bwd(kc_ctx *c, float *dwte, float *dwpe, const kc_bf16 *dout,
                              const int32_t *h_inp, int B_, int T, int C, kc_stream s) {
  if (B_ < 0 || T < 0 || C < 0)
    return ft_err_set(FT_EINVAL, "kc_encoder_bwd: B %d T %d C %d", B_, T, C);
  const int N = B_ * T;
  if (N == 0 || C == 0)
    return FT_OK;
  cudaStream_t st = kc__st(s);

  /* counting sort of the positions by token, stable */
  int32_t maxtok = 0;
  for (int i = 0; i < N; i++) {
    if (h_inp[i] < 0)
      return ft_err_set(FT_EINVAL, "kc_encoder_bwd: token %d at position %d", (int)h_inp[i], i);
    if (h_inp[i] > maxtok)
      maxtok = h_inp[i];
  }
  int32_t *count = NULL;
  int rc = kc__host_count(c, (size_t)maxtok + 1, &count);
  if (rc)
    return rc;
  /* pinned layout: sorted[N] | tok[U] | off[U+1], U <= N */
  int32_t *h = NULL;
  rc = kc__pinned(c, (3 * (size_t)N + 1) * sizeof(int32_t), (void **)&h);
  if (rc)
    return rc;
  memset(count, 0, ((size_t)maxtok + 1) * sizeof *count);
  for (int i = 0; i < N; i++)
    count[h_inp[i]]++;
  int32_t *tok = h + N;
  int U = 0;
  for (int32_t v = 0; v <= maxtok; v++)
    if (count[v])
      tok[U++] = v;
  int32_t *off = tok + U;
  /* count[v] becomes the next free slot of token v */
  int32_t at = 0;
  for (int u = 0; u < U; u++) {
    off[u] = at;
    int32_t n = count[tok[u]];
    count[tok[u]] = at;
    at += n;
  }
  off[U] = at;
  for (int i = 0; i < N; i++)
    h[count[h_inp[i]]++] = i;

  size_t bytes = ((size_t)N + 2 * (size_t)U + 1) * sizeof(int32_t);
  void *d = NULL;
  rc = kc__scratch(c, bytes, &d);
  if (rc)
    return rc;
  rc = kc__err(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, st), "kc_encoder_bwd upload");
  if (rc)
    return rc;
  rc = kc__pinned_enqueued(c, st);
  if (rc)
    return rc;
  const int32_t *d_sorted = (const int32_t *)d;
  const int32_t *d_tok = d_sorted + N;
  const int32_t *d_off = d_tok + U;
  int threads = C >= KC_THREADS ? KC_THREADS : ((C + 31) / 32) * 32;
  encoder_bwd_wte_kernel<<<(unsigned)U, threads, 0, st>>>(dwte, bfp(dout), d_sorted, d_tok, d_off,
                                                          C);
  rc = KC_LAUNCHED("encoder_bwd_wte");
  if (rc)
    return rc;
  encoder_bwd_wpe_kernel<<<kc__grid((size_t)T * C), KC_THREADS, 0, st>>>(dwpe, bfp(dout), B_, T, C);
  return KC_LAUNCHED("encoder_bwd_wpe");
}
