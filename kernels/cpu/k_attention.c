/*
 * k_attention: causal multi-head self-attention with materialised scores.
 *
 * Layout: qkv (B,T,3C) = [q | k | v] on the last dimension, head h owning
 * channels h*hs .. h*hs+hs-1 of each part (hs = C/NH). preatt, att
 * (B,NH,T,T) hold the scaled scores and their causal softmax; entries above
 * the diagonal are written as 0 so that every output byte is defined.
 *
 * Forward is parallel over (b, h, t): each query row is independent.
 * Backward runs in two parallel passes, each over independent outputs:
 *   1. per (b,h,t): datt = dout_t . v, dpreatt = softmax backward, dq_t;
 *   2. per (b,h,t2): dk_t2 and dv_t2, summing over t >= t2 in index order.
 * No thread ever writes an element another thread writes, and every sum
 * runs in a fixed order, so the bits do not depend on the thread count.
 */
#include "kernels.h"

#include <math.h>

void k_attention_fwd(float *out, float *preatt, float *att, const float *qkv, int B, int T, int C,
                     int NH) {
  int hs = C / NH;
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
        size_t row = (((size_t)b * NH + h) * T + t) * T;
        float *pre = preatt + row;
        float *a = att + row;
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
          float s = 0.0f;
          for (int i = 0; i < hs; i++)
            s += q[i] * k[i];
          s *= scale;
          pre[t2] = s;
          if (s > maxv)
            maxv = s;
        }
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
        float *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++)
          o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
          float w = a[t2];
          for (int i = 0; i < hs; i++)
            o[i] += w * v[i];
        }
      }
    }
  }
}

void k_attention_bwd(float *dqkv, float *dpreatt, float *datt, const float *dout, const float *qkv,
                     const float *att, int B, int T, int C, int NH) {
  int hs = C / NH;
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  /* Pass 1: per query row t: datt, dpreatt (gradient of the scaled scores),
   * and dq_t = scale * sum_t2 dpreatt[t2] * k_t2. */
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        size_t row = (((size_t)b * NH + h) * T + t) * T;
        const float *a = att + row;
        float *da = datt + row;
        float *dp = dpreatt + row;
        const float *d = dout + ((size_t)b * T + t) * C + h * hs;
        float dot = 0.0f; /* sum_t2 att[t2] * datt[t2] */
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
          float s = 0.0f;
          for (int i = 0; i < hs; i++)
            s += d[i] * v[i];
          da[t2] = s;
          dot += a[t2] * s;
        }
        for (int t2 = 0; t2 <= t; t2++)
          dp[t2] = a[t2] * (da[t2] - dot);
        for (int t2 = t + 1; t2 < T; t2++) {
          da[t2] = 0.0f;
          dp[t2] = 0.0f;
        }
        float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
          float g = dp[t2] * scale;
          for (int i = 0; i < hs; i++)
            dq[i] += g * k[i];
        }
      }
    }
  }
  /* Pass 2: per key/value row t2: dk_t2 = scale * sum_{t>=t2} dpreatt[t][t2] * q_t,
   * dv_t2 = sum_{t>=t2} att[t][t2] * dout_t, t ascending. */
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t2 = 0; t2 < T; t2++) {
        size_t base = ((size_t)b * NH + h) * T * T;
        float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
        float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
        for (int t = t2; t < T; t++) {
          const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
          const float *d = dout + ((size_t)b * T + t) * C + h * hs;
          float g = dpreatt[base + (size_t)t * T + t2] * scale;
          float w = att[base + (size_t)t * T + t2];
          for (int i = 0; i < hs; i++) {
            dk[i] += g * q[i];
            dv[i] += w * d[i];
          }
        }
      }
    }
  }
}
