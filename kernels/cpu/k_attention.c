/*
 * k_attention: causal multi-head self-attention with materialised scores,
 * its matrix products through BLAS.
 *
 * Layout: qkv (B,T,3C) = [q | k | v] on the last dimension, head h owning
 * channels h*hs .. h*hs+hs-1 of each part (hs = C/NH). So for one (b, h)
 * pair Q, K, V are (T, hs) strided views into qkv with leading dimension
 * 3C, and out_h, dout_h are (T, hs) views with leading dimension C.
 * preatt, att (B,NH,T,T) hold the scaled scores and their causal softmax;
 * entries above the diagonal are written as 0 so that every output byte is
 * defined.
 *
 * Per (b, h) pair, with S = 1/sqrt(hs):
 *   forward   preatt = S * Q K^T, masked softmax per row -> att, out_h = att V
 *   backward  datt = dout_h V^T, dpreatt = att * (datt - rowsum(att*datt)),
 *             dQ += S * dpreatt K, dK += S * dpreatt^T Q, dV += att^T dout_h
 * Causality by blocking: rows are taken in fixed blocks of ATT_BT; a row
 * block i0..i1-1 only needs score columns 0..i1-1, and a key block
 * j0..j1-1 only receives from query rows j0..T-1, so the GEMMs skip the
 * upper triangle up to the diagonal blocks (whose upper parts are then
 * overwritten with 0, or are 0 already).
 *
 * Threading and determinism: the (b, h) pairs are spread over OpenMP
 * threads (schedule(static)); each pair writes only its own head's slices
 * of out/dqkv and its own (T, T) score planes, and runs the same fixed
 * sequence of single-threaded cblas_sgemm calls and scalar loops whatever
 * the thread count. So every output element is computed by the same
 * operations in the same order, and the bits do not depend on the number
 * of threads. Invariant: OpenBLAS runs single-threaded (blas_single(), as
 * in k_matmul; k_set_threads keeps it so). No allocation.
 */
#include "kernels.h"

#include <cblas.h>
#include <math.h>

#define ATT_BT 64 /* rows per causal block */

static void blas_single(void) {
  if (openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

/* Masked softmax of one score row in place into a: a[0..t] =
 * softmax(pre[0..t]), a and pre above the diagonal (t+1 .. T-1) set to 0. */
static void softmax_row(float *a, float *pre, int t, int T) {
  float maxv = -INFINITY;
  for (int t2 = 0; t2 <= t; t2++)
    maxv = pre[t2] > maxv ? pre[t2] : maxv;
  float sum = 0.0f;
  for (int t2 = 0; t2 <= t; t2++) {
    float e = expf(pre[t2] - maxv);
    a[t2] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  for (int t2 = 0; t2 <= t; t2++)
    a[t2] *= inv;
  for (int t2 = t + 1; t2 < T; t2++) {
    pre[t2] = 0.0f;
    a[t2] = 0.0f;
  }
}

void k_attention_fwd(float *out, float *preatt, float *att, const float *qkv, int B, int T, int C,
                     int NH) {
  int hs = C / NH;
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  blas_single();
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * C3 + h * hs; /* (T,hs), ld C3 */
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *o = out + (size_t)b * T * C + h * hs; /* (T,hs), ld C */
    float *pre = preatt + (size_t)bh * T * T;    /* (T,T) */
    float *a = att + (size_t)bh * T * T;
    for (int i0 = 0; i0 < T; i0 += ATT_BT) {
      int i1 = i0 + ATT_BT < T ? i0 + ATT_BT : T, m = i1 - i0;
      /* pre[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, scale, q + (size_t)i0 * C3,
                  C3, k, C3, 0.0f, pre + (size_t)i0 * T, T);
      for (int t = i0; t < i1; t++)
        softmax_row(a + (size_t)t * T, pre + (size_t)t * T, t, T);
      /* out[i0:i1] = att[i0:i1, 0:i1] V[0:i1] */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f, a + (size_t)i0 * T, T,
                  v, C3, 0.0f, o + (size_t)i0 * C, C);
    }
  }
}

void k_attention_bwd(float *dqkv, float *dpreatt, float *datt, const float *dout, const float *qkv,
                     const float *att, int B, int T, int C, int NH) {
  int hs = C / NH;
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  blas_single();
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * C3 + h * hs; /* (T,hs), ld C3 */
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *dq = dqkv + (size_t)b * T * C3 + h * hs;
    float *dk = dq + C;
    float *dv = dq + 2 * C;
    const float *d = dout + (size_t)b * T * C + h * hs; /* (T,hs), ld C */
    const float *a = att + (size_t)bh * T * T;          /* (T,T) */
    float *da = datt + (size_t)bh * T * T;
    float *dp = dpreatt + (size_t)bh * T * T;
    /* Query-row blocks: datt, dpreatt, dQ. */
    for (int i0 = 0; i0 < T; i0 += ATT_BT) {
      int i1 = i0 + ATT_BT < T ? i0 + ATT_BT : T, m = i1 - i0;
      /* datt[i0:i1, 0:i1] = dout[i0:i1] V[0:i1]^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, 1.0f, d + (size_t)i0 * C, C,
                  v, C3, 0.0f, da + (size_t)i0 * T, T);
      for (int t = i0; t < i1; t++) {
        const float *ar = a + (size_t)t * T;
        float *dar = da + (size_t)t * T, *dpr = dp + (size_t)t * T;
        float dot = 0.0f; /* sum_t2 att[t2] * datt[t2] */
        for (int t2 = 0; t2 <= t; t2++)
          dot += ar[t2] * dar[t2];
        for (int t2 = 0; t2 <= t; t2++)
          dpr[t2] = ar[t2] * (dar[t2] - dot);
        for (int t2 = t + 1; t2 < T; t2++) {
          dar[t2] = 0.0f;
          dpr[t2] = 0.0f;
        }
      }
      /* dQ[i0:i1] += scale * dpreatt[i0:i1, 0:i1] K[0:i1] */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, scale, dp + (size_t)i0 * T,
                  T, k, C3, 1.0f, dq + (size_t)i0 * C3, C3);
    }
    /* Key-row blocks: rows j0..j1-1 of dK, dV receive from query rows
     * j0..T-1 only (dpreatt and att are 0 above the diagonal). */
    for (int j0 = 0; j0 < T; j0 += ATT_BT) {
      int j1 = j0 + ATT_BT < T ? j0 + ATT_BT : T, m = j1 - j0, n = T - j0;
      /* dK[j0:j1] += scale * dpreatt[j0:T, j0:j1]^T Q[j0:T] */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hs, n, scale,
                  dp + (size_t)j0 * T + j0, T, q + (size_t)j0 * C3, C3, 1.0f, dk + (size_t)j0 * C3,
                  C3);
      /* dV[j0:j1] += att[j0:T, j0:j1]^T dout[j0:T] */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hs, n, 1.0f, a + (size_t)j0 * T + j0,
                  T, d + (size_t)j0 * C, C, 1.0f, dv + (size_t)j0 * C3, C3);
    }
  }
}
