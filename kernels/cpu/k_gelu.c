/*
 * k_gelu: GELU with GPT-2's tanh approximation, elementwise, parallel over
 * elements (each output independent, so deterministic).
 *   gelu(x) = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2/pi)
 */
#include "kernels.h"

#include <math.h>

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

void k_gelu_fwd(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_K * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

void k_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_S * (x + GELU_K * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * GELU_K * x * x);
    dinp[i] += g * dout[i];
  }
}
