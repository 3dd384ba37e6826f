/* k_residual: the residual connection, out = a + b, and its gradient.
 * Elementwise, parallel over elements. */
#include "kernels.h"

void k_residual_fwd(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

void k_residual_bwd(float *da, float *db, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}
