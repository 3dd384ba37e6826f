/*
 * k_reduce: deterministic reductions and scaling over flat arrays
 * (k_sumsq for gradient-norm clipping, k_scale).
 *
 * k_sumsq splits x into blocks of K_REDUCE_BLOCK elements; each block's sum
 * of squares is computed in double in index order (in parallel over
 * blocks), then the block sums are added in block order by one thread. The
 * block partials of a round of SUMSQ_ROUND blocks live on the stack, so no
 * allocation is needed and the summation tree is the same for any thread
 * count: identical bits.
 */
#include "kernels.h"

#define SUMSQ_ROUND 256

double k_sumsq(const float *x, size_t n) {
  size_t nblk = (n + K_REDUCE_BLOCK - 1) / K_REDUCE_BLOCK;
  double total = 0.0;
  double part[SUMSQ_ROUND];
  for (size_t r0 = 0; r0 < nblk; r0 += SUMSQ_ROUND) {
    long cnt = (long)(nblk - r0 < SUMSQ_ROUND ? nblk - r0 : SUMSQ_ROUND);
#pragma omp parallel for schedule(static)
    for (long j = 0; j < cnt; j++) {
      size_t i0 = (r0 + (size_t)j) * K_REDUCE_BLOCK;
      size_t i1 = i0 + K_REDUCE_BLOCK < n ? i0 + K_REDUCE_BLOCK : n;
      double s = 0.0;
      for (size_t i = i0; i < i1; i++)
        s += (double)x[i] * (double)x[i];
      part[j] = s;
    }
    for (long j = 0; j < cnt; j++)
      total += part[j];
  }
  return total;
}

void k_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    x[i] *= s;
}
