/*
 * k_adamw: one AdamW step (decoupled weight decay), elementwise, parallel
 * over elements (each parameter independent, so deterministic).
 *
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t)
 *   p -= lr (mhat / (sqrt(vhat) + eps) + wd p)   (the wd term only if wd != 0)
 * The bias corrections 1 - b^t are computed once in double and rounded to
 * float; the per-element arithmetic is float.
 */
#include "kernels.h"

#include <math.h>

void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
             float beta2, float eps, float wd, int64_t t) {
  float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
  float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
  int decay = wd != 0.0f;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    float upd = mhat / (sqrtf(vhat) + eps);
    if (decay)
      upd += wd * p[i];
    p[i] -= lr * upd;
  }
}
