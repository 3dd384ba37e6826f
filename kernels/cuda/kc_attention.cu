/*
 * kc_attention: fused causal multi-head self-attention, flash-attention
 * style: the (T,T) score matrix is never stored; softmax statistics are
 * kept online in fp32 and the log-sum-exp of each query row is saved for
 * the backward pass.
 *
 * Layout (as k_attention.c): qkv (B,T,3C) = [q | k | v] on the last
 * dimension, head h owning columns h*HS .. h*HS+HS-1 of each part, so for
 * one (b,h) Q, K, V are (T,HS) views with leading dimension 3C; out and
 * dout are (T,HS) views with leading dimension C; lse and the backward's D
 * are (B,NH,T) fp32. scale = 1/sqrt(HS), score s_ij = scale q_i.k_j for
 * j <= i.
 *
 * Work split (all kernels templated on HS in {16, 32, 64, 128}): a block
 * owns ROWS = 64 rows (queries, or keys for dK/dV) of one (b,h); G = HS/16
 * consecutive threads own one row, thread r of the group holding the 16
 * dimensions d = r, r+G, r+2G, ... in registers (interleaved, so that the
 * G threads read consecutive shared-memory words: no bank conflicts; the
 * other groups of the warp read the same words: broadcasts). The other
 * operand streams through shared memory in tiles of TILE = 32 rows,
 * converted to fp32. A dot product is the per-thread partial sum followed
 * by a fixed xor-butterfly over the G threads (every thread of the group
 * gets the same bits).
 *
 *   forward  per query tile, loop over key tiles 0 .. last query: scores
 *            for the tile, then the online softmax update
 *              m' = max(m, max_j s_ij), l = l e^(m-m') + sum_j e^(s_ij-m'),
 *              o = o e^(m-m') + sum_j e^(s_ij-m') v_j;
 *            out = o / l (bf16), lse = m + log l.
 *   D        D_i = dout_i . out_i (fp32, one thread per (b,t,h); needs
 *            the (B,NH,T) scratch of the kc_ctx).
 *   dQ       per query tile, loop over key tiles 0 .. last query:
 *            P_ij = exp(s_ij - lse_i), dP_ij = dout_i . v_j,
 *            dS_ij = P_ij (dP_ij - D_i), dq_i = scale sum_j dS_ij k_j.
 *   dK, dV   per key tile, loop over query tiles from the tile's first key
 *            to T: dv_j = sum_i P_ij dout_i, dk_j = scale sum_i dS_ij q_i.
 * Each output element is accumulated by one thread in a fixed order and
 * written once (dqkv is overwritten, all of it): no atomics, same bits for
 * the same inputs. All math fp32 (expf, logf: full-precision versions).
 * Masking is by select (-inf score, 0 probability); every thread runs the
 * same loops so that the warp shuffles see all lanes, and the first key
 * tile always holds key 0, which every query sees, so the running max is
 * finite after it (no inf - inf).
 *
 * Speed is secondary here (SIMT fp32 FMAs, no tensor cores): the point is
 * an exact, deterministic reference-quality kernel with shared-memory
 * tiling.
 *
 * Constraints (FT_EINVAL otherwise): C % NH == 0 and HS = C/NH in {16, 32,
 * 64, 128}; B, T, NH > 0; ceil(T/64) <= 65535; B*NH < 2^31.
 *
 * Dispatch: with the implementation choice "tc" (the default since an
 * H100 passed the kernel tests, compute-sanitizer's memcheck and racecheck
 * and ran GPT-2 124M 2.1x faster with it; kc_attention_set_impl, initially
 * the environment variable FT_ATTENTION, read once), HS == 64 and the bf16
 * pointers 16-byte aligned, the forward and the dQ, dK/dV passes are
 * kc_attention_tc.cu's tensor-core kernels instead (the shape checks and
 * the D kernel stay here). Otherwise, and with FT_ATTENTION=simt, the
 * kernels below run.
 */
#include "kc_int.h"

#include <atomic>
#include <stdlib.h>
#include <string.h>

#define ROWS 64 /* rows (queries, or keys) owned by a block */
#define TILE 32 /* rows of the streamed operand per shared-memory tile */
#define DPT 16  /* dimensions per thread (HS / G) */

typedef __nv_bfloat16 bf16;

/* Sum over the G consecutive lanes of a group (G a power of two <= 32). */
template <int G> static __device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = G / 2; off > 0; off >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/* dst[rr][d] = src[(r0 + rr) * ld + d] as fp32 for rr < TILE, zero for rows
 * at or past T. Called by all NT threads of the block. */
template <int HS, int NT>
static __device__ __forceinline__ void load_tile(float (*dst)[HS], const bf16 *src, size_t ld,
                                                 int r0, int T) {
  for (int idx = threadIdx.x; idx < TILE * HS; idx += NT) {
    const int rr = idx / HS, d = idx % HS;
    const int rw = r0 + rr;
    dst[rr][d] = rw < T ? kc__f(src[(size_t)rw * ld + d]) : 0.0f;
  }
}

/* ---- forward ------------------------------------------------------------------------ */

template <int HS>
__global__ void __launch_bounds__(ROWS *(HS / 16))
    attn_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH, float scale) {
  constexpr int G = HS / 16, NT = ROWS * G;
  __shared__ float Ks[TILE][HS], Vs[TILE][HS];
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.y * ROWS;
  const int r = threadIdx.x % G;
  const int i = q0 + threadIdx.x / G; /* this group's query */
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;

  float q[DPT], o[DPT];
#pragma unroll
  for (int k = 0; k < DPT; k++) {
    q[k] = i < T ? kc__f(qb[(size_t)i * C3 + r + G * k]) : 0.0f;
    o[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int kend = min(T, q0 + ROWS); /* keys 0 .. kend-1 can be seen by this block */
  for (int j0 = 0; j0 < kend; j0 += TILE) {
    __syncthreads(); /* the previous tile is consumed */
    load_tile<HS, NT>(Ks, kb, C3, j0, T);
    load_tile<HS, NT>(Vs, vb, C3, j0, T);
    __syncthreads();
    float sc[TILE];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < TILE; jj++) {
      float a = 0.0f;
#pragma unroll
      for (int k = 0; k < DPT; k++)
        a += q[k] * Ks[jj][r + G * k];
      a = group_sum<G>(a) * scale;
      const int j = j0 + jj;
      sc[jj] = (j <= i && j < T) ? a : -INFINITY;
      tmax = fmaxf(tmax, sc[jj]);
    }
    const float mnew = fmaxf(m, tmax); /* finite: tile 0 holds key 0 <= i */
    const float alpha = expf(m - mnew);
    l *= alpha;
#pragma unroll
    for (int k = 0; k < DPT; k++)
      o[k] *= alpha;
#pragma unroll
    for (int jj = 0; jj < TILE; jj++) {
      const float p = expf(sc[jj] - mnew); /* 0 for masked keys */
      l += p;
#pragma unroll
      for (int k = 0; k < DPT; k++)
        o[k] += p * Vs[jj][r + G * k];
    }
    m = mnew;
  }
  if (i < T) {
    const float inv = 1.0f / l;
    bf16 *ob = out + ((size_t)b * T + i) * C + (size_t)h * HS;
#pragma unroll
    for (int k = 0; k < DPT; k++)
      ob[r + G * k] = kc__b(o[k] * inv);
    if (r == 0)
      lse[(size_t)bh * T + i] = m + logf(l);
  }
}

/* ---- backward ----------------------------------------------------------------------- */

/* D[(b*NH + h)*T + t] = dout[b,t,h,:] . out[b,t,h,:]; thread idx runs over
 * (b, t, h) with h fastest, so neighbouring threads read neighbouring
 * memory. */
__global__ void attn_bwd_d_kernel(float *D, const bf16 *dout, const bf16 *out, int T, int C, int NH,
                                  int HS, size_t total) {
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const size_t bt = idx / NH;
    const int h = (int)(idx - bt * NH);
    const size_t b = bt / T, t = bt - b * T;
    const size_t base = bt * C + (size_t)h * HS;
    float a = 0.0f;
    for (int d = 0; d < HS; d++)
      a += kc__f(dout[base + d]) * kc__f(out[base + d]);
    D[(b * NH + h) * T + t] = a;
  }
}

template <int HS>
__global__ void __launch_bounds__(ROWS *(HS / 16))
    attn_bwd_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                       const float *D, int T, int C, int NH, float scale) {
  constexpr int G = HS / 16, NT = ROWS * G;
  __shared__ float Ks[TILE][HS], Vs[TILE][HS];
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.y * ROWS;
  const int r = threadIdx.x % G;
  const int i = q0 + threadIdx.x / G;
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;
  const bf16 *dob = dout + (size_t)b * T * C + (size_t)h * HS;

  float q[DPT], dO[DPT], dq[DPT];
#pragma unroll
  for (int k = 0; k < DPT; k++) {
    q[k] = i < T ? kc__f(qb[(size_t)i * C3 + r + G * k]) : 0.0f;
    dO[k] = i < T ? kc__f(dob[(size_t)i * C + r + G * k]) : 0.0f;
    dq[k] = 0.0f;
  }
  const float li = i < T ? lse[(size_t)bh * T + i] : 0.0f;
  const float Di = i < T ? D[(size_t)bh * T + i] : 0.0f;
  const int kend = min(T, q0 + ROWS);
  for (int j0 = 0; j0 < kend; j0 += TILE) {
    __syncthreads();
    load_tile<HS, NT>(Ks, kb, C3, j0, T);
    load_tile<HS, NT>(Vs, vb, C3, j0, T);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < TILE; jj++) {
      float a = 0.0f, e = 0.0f;
#pragma unroll
      for (int k = 0; k < DPT; k++) {
        a += q[k] * Ks[jj][r + G * k];
        e += dO[k] * Vs[jj][r + G * k];
      }
      a = group_sum<G>(a);
      e = group_sum<G>(e);
      const int j = j0 + jj;
      const float p = (j <= i && i < T) ? expf(a * scale - li) : 0.0f;
      const float ds = p * (e - Di);
#pragma unroll
      for (int k = 0; k < DPT; k++)
        dq[k] += ds * Ks[jj][r + G * k];
    }
  }
  if (i < T) {
    bf16 *dqb = dqkv + ((size_t)b * T + i) * C3 + (size_t)h * HS;
#pragma unroll
    for (int k = 0; k < DPT; k++)
      dqb[r + G * k] = kc__b(dq[k] * scale);
  }
}

template <int HS>
__global__ void __launch_bounds__(ROWS *(HS / 16))
    attn_bwd_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                        const float *D, int T, int C, int NH, float scale) {
  constexpr int G = HS / 16, NT = ROWS * G;
  __shared__ float Qs[TILE][HS], dOs[TILE][HS];
  __shared__ float Ls[TILE], Ds[TILE];
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.y * ROWS;
  const int r = threadIdx.x % G;
  const int j = k0 + threadIdx.x / G; /* this group's key */
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;
  const bf16 *dob = dout + (size_t)b * T * C + (size_t)h * HS;
  const float *lb = lse + (size_t)bh * T, *db = D + (size_t)bh * T;

  float kr[DPT], vr[DPT], dk[DPT], dv[DPT];
#pragma unroll
  for (int k = 0; k < DPT; k++) {
    kr[k] = j < T ? kc__f(kb[(size_t)j * C3 + r + G * k]) : 0.0f;
    vr[k] = j < T ? kc__f(vb[(size_t)j * C3 + r + G * k]) : 0.0f;
    dk[k] = 0.0f;
    dv[k] = 0.0f;
  }
  /* queries before k0 see none of this block's keys */
  for (int i0 = k0; i0 < T; i0 += TILE) {
    __syncthreads();
    load_tile<HS, NT>(Qs, qb, C3, i0, T);
    load_tile<HS, NT>(dOs, dob, C, i0, T);
    if (threadIdx.x < TILE) {
      const int iq = i0 + threadIdx.x;
      Ls[threadIdx.x] = iq < T ? lb[iq] : 0.0f;
      Ds[threadIdx.x] = iq < T ? db[iq] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int ii = 0; ii < TILE; ii++) {
      float a = 0.0f, e = 0.0f;
#pragma unroll
      for (int k = 0; k < DPT; k++) {
        a += Qs[ii][r + G * k] * kr[k];
        e += dOs[ii][r + G * k] * vr[k];
      }
      a = group_sum<G>(a);
      e = group_sum<G>(e);
      const int i = i0 + ii;
      const float p = (i >= j && i < T && j < T) ? expf(a * scale - Ls[ii]) : 0.0f;
      const float ds = p * (e - Ds[ii]);
#pragma unroll
      for (int k = 0; k < DPT; k++) {
        dv[k] += p * dOs[ii][r + G * k];
        dk[k] += ds * Qs[ii][r + G * k];
      }
    }
  }
  if (j < T) {
    bf16 *dkb = dqkv + ((size_t)b * T + j) * C3 + C + (size_t)h * HS;
    bf16 *dvb = dkb + C;
#pragma unroll
    for (int k = 0; k < DPT; k++) {
      dkb[r + G * k] = kc__b(dk[k] * scale);
      dvb[r + G * k] = kc__b(dv[k]);
    }
  }
}

/* ---- implementation choice ---------------------------------------------------------- */

enum { ATTN_SIMT = 0, ATTN_TC = 1 };
/* -1 until first used; then ATTN_SIMT or ATTN_TC, process-wide. Atomic so
 * that threads driving different devices may read it concurrently. */
static std::atomic<int> attn_impl_choice(-1);

static int attn_impl(void) {
  int v = attn_impl_choice.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("FT_ATTENTION");
    int expected = -1;
    attn_impl_choice.compare_exchange_strong(
        expected, e && !strcmp(e, "simt") ? ATTN_SIMT : ATTN_TC, std::memory_order_relaxed);
    v = attn_impl_choice.load(std::memory_order_relaxed);
  }
  return v;
}

extern "C" int kc_attention_set_impl(const char *name) {
  int v;
  if (name && !strcmp(name, "simt"))
    v = ATTN_SIMT;
  else if (name && !strcmp(name, "tc"))
    v = ATTN_TC;
  else
    return ft_err_set(FT_EINVAL, "kc_attention_set_impl: unknown implementation \"%s\"",
                      name ? name : "(null)");
  attn_impl_choice.store(v, std::memory_order_relaxed);
  return FT_OK;
}

extern "C" const char *kc_attention_impl(void) {
  return attn_impl() == ATTN_TC ? "tc" : "simt";
}

/* ---- launchers ---------------------------------------------------------------------- */

/* HS = C / NH, checked; the grid is (B*NH, ceil(T/ROWS)). */
static int attn_shape(const char *fn, int B, int T, int C, int NH, int *hs, dim3 *grid) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH)
    return ft_err_set(FT_EINVAL, "%s: B %d T %d C %d NH %d", fn, B, T, C, NH);
  int h = C / NH;
  if (h != 16 && h != 32 && h != 64 && h != 128)
    return ft_err_set(FT_EINVAL, "%s: head size %d (C %d / NH %d) is not 16, 32, 64 or 128", fn, h,
                      C, NH);
  long long bhn = (long long)B * NH, tiles = (T + ROWS - 1) / ROWS;
  if (bhn > 0x7fffffffLL || tiles > 65535)
    return ft_err_set(FT_EINVAL, "%s: B*NH %lld or T %d too large", fn, bhn, T);
  *hs = h;
  *grid = dim3((unsigned)bhn, (unsigned)tiles);
  return FT_OK;
}

template <int HS>
static void launch_fwd(dim3 grid, cudaStream_t s, bf16 *out, float *lse, const bf16 *qkv, int T,
                       int C, int NH) {
  const float scale = 1.0f / sqrtf((float)HS);
  attn_fwd_kernel<HS><<<grid, ROWS *(HS / 16), 0, s>>>(out, lse, qkv, T, C, NH, scale);
}

template <int HS>
static void launch_bwd(dim3 grid, cudaStream_t s, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                       const float *lse, const float *D, int T, int C, int NH, int *rc) {
  const float scale = 1.0f / sqrtf((float)HS);
  attn_bwd_dq_kernel<HS><<<grid, ROWS *(HS / 16), 0, s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  *rc = KC_LAUNCHED("attention_bwd_dq");
  if (*rc)
    return;
  attn_bwd_dkv_kernel<HS>
      <<<grid, ROWS *(HS / 16), 0, s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  *rc = KC_LAUNCHED("attention_bwd_dkv");
}

extern "C" int kc_attention_fwd(kc_bf16 *out, float *lse, const kc_bf16 *qkv, int B, int T, int C,
                                int NH, kc_stream s) {
  int hs = 0;
  dim3 grid;
  int rc = attn_shape("kc_attention_fwd", B, T, C, NH, &hs, &grid);
  if (rc)
    return rc;
  bf16 *o = reinterpret_cast<bf16 *>(out);
  const bf16 *x = reinterpret_cast<const bf16 *>(qkv);
  cudaStream_t st = kc__st(s);
  if (hs == 64 && attn_impl() == ATTN_TC && kc__aligned16(out) && kc__aligned16(qkv))
    return kc__attention_tc_fwd(o, lse, x, B, T, C, NH, st);
  switch (hs) {
  case 16:
    launch_fwd<16>(grid, st, o, lse, x, T, C, NH);
    break;
  case 32:
    launch_fwd<32>(grid, st, o, lse, x, T, C, NH);
    break;
  case 64:
    launch_fwd<64>(grid, st, o, lse, x, T, C, NH);
    break;
  default:
    launch_fwd<128>(grid, st, o, lse, x, T, C, NH);
    break;
  }
  return KC_LAUNCHED("attention_fwd");
}

extern "C" int kc_attention_bwd(kc_ctx *c, kc_bf16 *dqkv, const kc_bf16 *dout, const kc_bf16 *qkv,
                                const kc_bf16 *out, const float *lse, int B, int T, int C, int NH,
                                kc_stream s) {
  int hs = 0;
  dim3 grid;
  int rc = attn_shape("kc_attention_bwd", B, T, C, NH, &hs, &grid);
  if (rc)
    return rc;
  const size_t rows = (size_t)B * NH * T;
  void *scr = NULL;
  rc = kc__scratch(c, rows * sizeof(float), &scr);
  if (rc)
    return rc;
  float *D = (float *)scr;
  cudaStream_t st = kc__st(s);
  const bf16 *dO = reinterpret_cast<const bf16 *>(dout);
  const bf16 *x = reinterpret_cast<const bf16 *>(qkv);
  bf16 *dx = reinterpret_cast<bf16 *>(dqkv);
  attn_bwd_d_kernel<<<kc__grid(rows), KC_THREADS, 0, st>>>(
      D, dO, reinterpret_cast<const bf16 *>(out), T, C, NH, hs, rows);
  rc = KC_LAUNCHED("attention_bwd_d");
  if (rc)
    return rc;
  if (hs == 64 && attn_impl() == ATTN_TC && kc__aligned16(dqkv) && kc__aligned16(dout) &&
      kc__aligned16(qkv))
    return kc__attention_tc_bwd(dx, dO, x, lse, D, B, T, C, NH, st);
  switch (hs) {
  case 16:
    launch_bwd<16>(grid, st, dx, dO, x, lse, D, T, C, NH, &rc);
    break;
  case 32:
    launch_bwd<32>(grid, st, dx, dO, x, lse, D, T, C, NH, &rc);
    break;
  case 64:
    launch_bwd<64>(grid, st, dx, dO, x, lse, D, T, C, NH, &rc);
    break;
  default:
    launch_bwd<128>(grid, st, dx, dO, x, lse, D, T, C, NH, &rc);
    break;
  }
  return rc;
}
