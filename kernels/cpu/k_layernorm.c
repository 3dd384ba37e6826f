/*
 * k_layernorm: LayerNorm over the last dimension (eps 1e-5), as in GPT-2.
 *
 * Forward and the dinp part of backward are per row, parallel over rows;
 * row statistics are accumulated in double in index order. The parameter
 * gradients dw, db are sums over rows: they are parallel over channel blocks,
 * each thread owning its channels and adding the rows in index order, so
 * the bits do not depend on the thread count. No allocation.
 */
#include "kernels.h"

#include <math.h>

#define LN_EPS 1e-5
#define LN_CBLOCK 32

void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C;
    double s = 0.0;
    for (int c = 0; c < C; c++)
      s += x[c];
    double m = s / C;
    double v = 0.0;
    for (int c = 0; c < C; c++) {
      double d = x[c] - m;
      v += d * d;
    }
    v /= C;
    float fm = (float)m;
    float rs = (float)(1.0 / sqrt(v + LN_EPS));
    for (int c = 0; c < C; c++)
      o[c] = (x[c] - fm) * rs * w[c] + b[c];
    mean[n] = fm;
    rstd[n] = rs;
  }
}

void k_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int N, int C) {
  /* dinp: per row. With xh = (x - mean) * rstd and g = w * dout:
   * dx = rstd * (g - mean(g) - xh * mean(g * xh)). */
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    const float *d = dout + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    float m = mean[n], rs = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int c = 0; c < C; c++) {
      float xh = (x[c] - m) * rs;
      float g = w[c] * d[c];
      sg += g;
      sgx += (double)g * xh;
    }
    float mg = (float)(sg / C), mgx = (float)(sgx / C);
    for (int c = 0; c < C; c++) {
      float xh = (x[c] - m) * rs;
      float g = w[c] * d[c];
      dx[c] += (g - mg - xh * mgx) * rs;
    }
  }
  /* dw, db: sums over rows, per channel block. */
  int nblk = (C + LN_CBLOCK - 1) / LN_CBLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    int c0 = blk * LN_CBLOCK;
    int c1 = c0 + LN_CBLOCK < C ? c0 + LN_CBLOCK : C;
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C;
      const float *d = dout + (size_t)n * C;
      float m = mean[n], rs = rstd[n];
      for (int c = c0; c < c1; c++) {
        float xh = (x[c] - m) * rs;
        dw[c] += xh * d[c];
        db[c] += d[c];
      }
    }
  }
}
