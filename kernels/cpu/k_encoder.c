/*
 * k_encoder: token + position embedding (forward) and its gradient.
 *
 * Forward is parallel over rows (b,t). Backward scatters rows of dout into
 * dwte rows chosen by token id, so two rows may hit the same dwte row; to
 * stay race-free and deterministic it is parallel over channel blocks
 * instead: each thread owns a range of channels and walks all (b,t) in index
 * order, so every dwte/dwpe element receives its terms in (b,t) order
 * whatever the thread count. No atomics, no allocation.
 */
#include "kernels.h"

/* Channels per work item of the backward pass (a few cache lines). */
#define ENC_CBLOCK 32

void k_encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                   int C) {
  long N = (long)B * T;
#pragma omp parallel for schedule(static)
  for (long bt = 0; bt < N; bt++) {
    int t = (int)(bt % T);
    float *o = out + bt * C;
    const float *we = wte + (size_t)inp[bt] * C;
    const float *pe = wpe + (size_t)t * C;
    for (int c = 0; c < C; c++)
      o[c] = we[c] + pe[c];
  }
}

void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                   int C) {
  long N = (long)B * T;
  int nblk = (C + ENC_CBLOCK - 1) / ENC_CBLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    int c0 = blk * ENC_CBLOCK;
    int c1 = c0 + ENC_CBLOCK < C ? c0 + ENC_CBLOCK : C;
    for (long bt = 0; bt < N; bt++) {
      int t = (int)(bt % T);
      const float *d = dout + bt * C;
      float *we = dwte + (size_t)inp[bt] * C;
      float *pe = dwpe + (size_t)t * C;
      for (int c = c0; c < c1; c++) {
        we[c] += d[c];
        pe[c] += d[c];
      }
    }
  }
}
