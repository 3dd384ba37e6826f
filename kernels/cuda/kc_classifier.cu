/*
 * kc_classifier: the fused softmax + cross-entropy of the language-model
 * head, and (optionally) its gradient written over the logits.
 *
 * One block per row of the (N,Vp) bf16 logits, all math in fp32:
 *   1. max over the first V logits (each thread over a strided slice, then
 *      a fixed block tree);
 *   2. sum of exp(x - max) (per thread in index order, then a fixed block
 *      tree), lse = max + log(sum);
 *   3. losses[row] = lse - x[target]: -log p[target] computed without
 *      forming p, so it stays finite when p underflows;
 *   4. with write_dlogits: x[i] = (exp(x[i] - max) / sum - [i == target]) *
 *      dloss for i < V and 0 for the padded tail V..Vp-1, in place. Every
 *      element is read for steps 1-2 before the block's barrier and
 *      rewritten by the thread that read it in step 4, so the in-place
 *      update is race-free. Without write_dlogits nothing is written to
 *      the logits.
 * The trees are fixed, so the same row gives the same bits.
 *
 * Constraints: 0 < V <= Vp, N >= 0, targets in [0, V) (the caller's
 * contract; a target outside gives a NaN loss and no onehot term rather
 * than an out-of-bounds read).
 */
#include "kc_int.h"

#define CLS_THREADS 512

typedef __nv_bfloat16 bf16;

__global__ void __launch_bounds__(CLS_THREADS)
    classifier_kernel(float *losses, bf16 *logits, const int32_t *targets, float dloss, int V,
                      int Vp, int write_dlogits) {
  __shared__ float buf[32];
  const size_t row = blockIdx.x;
  bf16 *x = logits + row * (size_t)Vp;
  const int tid = threadIdx.x;

  float m = -INFINITY;
  for (int i = tid; i < V; i += CLS_THREADS)
    m = fmaxf(m, kc__f(x[i]));
  m = kc__block_reduce<true>(m, buf);

  float s = 0.0f;
  for (int i = tid; i < V; i += CLS_THREADS)
    s += expf(kc__f(x[i]) - m);
  s = kc__block_reduce<false>(s, buf);

  const int tgt = targets[row];
  const bool tgt_ok = tgt >= 0 && tgt < V;
  if (tid == 0) {
    float lse = m + logf(s);
    losses[row] = tgt_ok ? lse - kc__f(x[tgt]) : __int_as_float(0x7fc00000);
  }
  if (!write_dlogits)
    return;
  /* thread 0 read x[tgt] above; this barrier orders that read before
   * x[tgt]'s owner overwrites it below. Every other element is read and
   * written below only by its owner thread. */
  __syncthreads();
  const float inv = 1.0f / s;
  for (int i = tid; i < Vp; i += CLS_THREADS) {
    float d = 0.0f;
    if (i < V) {
      float p = expf(kc__f(x[i]) - m) * inv;
      d = (p - (i == tgt ? 1.0f : 0.0f)) * dloss;
    }
    x[i] = kc__b(d);
  }
}

extern "C" int kc_classifier(float *losses, kc_bf16 *logits, const int32_t *targets, float dloss,
                             int N, int V, int Vp, int write_dlogits, kc_stream s) {
  if (N < 0 || V <= 0 || Vp < V)
    return ft_err_set(FT_EINVAL, "kc_classifier: N %d V %d Vp %d", N, V, Vp);
  if (N == 0)
    return FT_OK;
  classifier_kernel<<<(unsigned)N, CLS_THREADS, 0, kc__st(s)>>>(
      losses, reinterpret_cast<bf16 *>(logits), targets, dloss, V, Vp, write_dlogits);
  return KC_LAUNCHED("classifier");
}
