/*
 * k_crossentropy: softmax + cross-entropy over the first V of Vp logits.
 *
 * Per row (parallel over rows): subtract the row maximum, exponentiate,
 * normalise; the loss is computed as log(sum) - (logit[target] - max), which
 * equals -log probs[target] but stays finite when that probability
 * underflows. The padded columns V..Vp-1 of probs and dlogits are written as
 * 0. The mean loss sums the rows in index order (in double) after the
 * parallel loop, so it does not depend on the thread count.
 * Targets must lie in [0, V); this is the caller's contract.
 */
#include "kernels.h"

#include <math.h>

float k_crossentropy_fwd(float *probs, float *losses, const float *logits, const int32_t *targets,
                         int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * Vp;
    float *p = probs + (size_t)n * Vp;
    float maxv = -INFINITY;
    for (int i = 0; i < V; i++)
      if (x[i] > maxv)
        maxv = x[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
      float e = expf(x[i] - maxv);
      p[i] = e;
      sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++)
      p[i] *= inv;
    for (int i = V; i < Vp; i++)
      p[i] = 0.0f;
    losses[n] = (float)(log(sum) - ((double)x[targets[n]] - maxv));
  }
  double total = 0.0;
  for (int n = 0; n < N; n++)
    total += losses[n];
  return N > 0 ? (float)(total / N) : 0.0f;
}

void k_crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                        int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * Vp;
    float *d = dlogits + (size_t)n * Vp;
    int tgt = targets[n];
    for (int i = 0; i < V; i++)
      d[i] = (p[i] - (i == tgt ? 1.0f : 0.0f)) * dloss;
    for (int i = V; i < Vp; i++)
      d[i] = 0.0f;
  }
}
