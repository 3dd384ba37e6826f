/*
 * bench_train: tokens/s and achieved GFLOP/s of the CPU trainer, beside the
 * machine's single-precision GEMM rate through the same BLAS (the ceiling).
 *
 * FLOPs per token of one training step (forward + backward), as in the
 * PaLM/Chinchilla accounting: 6*N + 12*L*C*T, with N the parameter count
 * without the embeddings' padding (the tied output projection is counted
 * once, through wte), L layers, C channels, T context. The attention term
 * 12*L*C*T counts QK^T and AV (2 GEMM-like ops, 2 FLOPs each, x3 for the
 * backward) and ignores causality (as the formula does).
 *
 * usage: bench_train [L C T B steps]   default 6 384 256 4 5
 */
#include <stdio.h>
#include <stdlib.h>

#include "ft_clock.h"
#include "gpt2.h"
#include "kernels.h"

int main(int argc, char **argv) {
  int L = argc > 1 ? atoi(argv[1]) : 6, C = argc > 2 ? atoi(argv[2]) : 384;
  int T = argc > 3 ? atoi(argv[3]) : 256, B = argc > 4 ? atoi(argv[4]) : 4;
  int steps = argc > 5 ? atoi(argv[5]) : 5, V = 256;
  ft_gpt2_dims d = {.max_seq_len = T,
                    .vocab_size = V,
                    .padded_vocab_size = ft_gpt2_pad_vocab(V),
                    .n_layer = L,
                    .n_head = C / 64 > 0 ? C / 64 : 1,
                    .channels = C};
  gpt2 *m;
  if (gpt2_new(&d, B, T, &m)) {
    fprintf(stderr, "bench_train: cannot allocate the model\n");
    return 1;
  }
  gpt2_init_weights(m, 1);
  int32_t *inp = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
  uint64_t s = 7;
  for (int i = 0; i < B * T; i++) {
    inp[i] = (int32_t)(gpt2_rng_next(&s) % V);
    tgt[i] = (int32_t)(gpt2_rng_next(&s) % V);
  }
  double N = (double)ft_gpt2_num_params(&d) - (double)(d.padded_vocab_size - V) * C;
  double flop_tok = 6.0 * N + 12.0 * L * C * T;

  /* one warm-up step, then the timed ones */
  double best = 1e30, total = 0;
  for (int i = 0; i <= steps; i++) {
    double t0 = ft_now_s();
    gpt2_zero_grad(m);
    gpt2_forward(m, inp, tgt);
    gpt2_backward(m, 1.0f);
    gpt2_grad_norm(m);
    gpt2_adamw(m, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, i + 1);
    double dt = ft_now_s() - t0;
    if (i > 0) {
      total += dt;
      if (dt < best)
        best = dt;
    }
  }
  double tok = (double)B * T, mean = total / steps;
  double gemm = k_sgemm_gflops(1024, 2.0);
  printf("CPU trainer, GPT-2 L=%d C=%d H=%d T=%d, micro-batch %d, threads %d\n", L, C, d.n_head, T,
         B, k_get_threads());
  printf("  parameters N            %.2f M\n", N / 1e6);
  printf("  FLOPs per token         6N + 12*L*C*T = %.3f MFLOP\n", flop_tok / 1e6);
  printf("  step time               mean %.1f ms, best %.1f ms (%d steps)\n", mean * 1e3,
         best * 1e3, steps);
  printf("  tokens/s                %.0f (mean)\n", tok / mean);
  printf("  trainer GFLOP/s         %.1f (mean), %.1f (best)\n", flop_tok * tok / mean / 1e9,
         flop_tok * tok / best / 1e9);
  printf("  sgemm 1024^3 GFLOP/s    %.1f (the ceiling, same BLAS, same threads)\n", gemm);
  printf("  fraction of ceiling     %.0f%%\n", 100.0 * flop_tok * tok / mean / 1e9 / gemm);
  free(inp);
  free(tgt);
  gpt2_free(m);
  return 0;
}
