/*
 * k_threads: thread count of the kernels (OpenMP) and of BLAS (OpenBLAS),
 * and a GEMM rate probe for benchmarks.
 *
 * k_set_threads sets the OpenMP thread count; it is meant to be called once,
 * before any kernel, from the thread that runs the kernels. OpenBLAS itself
 * is kept single-threaded: k_matmul parallelises over fixed GEMM tiles with
 * OpenMP instead, because OpenBLAS's own threading changes the result bits
 * with the thread count (see k_matmul.c).
 *
 * k_sgemm_gflops measures the machine's reference rate: OpenBLAS's own
 * multithreaded sgemm with k_get_threads() threads (restored to one thread
 * afterwards). It allocates its three n x n matrices itself (and frees them);
 * it returns 0 if n <= 0 or the allocation fails. Not to be called while
 * kernels run on another thread.
 */
#include "kernels.h"

#include "ft_clock.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

void k_set_threads(int n) {
  if (n <= 0)
    return;
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int k_get_threads(void) {
  return omp_get_max_threads();
}

double k_sgemm_gflops(int n, double min_seconds) {
  if (n <= 0)
    return 0.0;
  size_t nn = (size_t)n * n;
  float *a = malloc(nn * sizeof *a);
  float *b = malloc(nn * sizeof *b);
  float *c = malloc(nn * sizeof *c);
  double rate = 0.0;
  if (!a || !b || !c)
    goto out;
  openblas_set_num_threads(k_get_threads());
  for (size_t i = 0; i < nn; i++) {
    a[i] = (float)((i * 7 + 3) % 17) * 0.05f - 0.4f;
    b[i] = (float)((i * 5 + 1) % 13) * 0.07f - 0.4f;
    c[i] = 0.0f;
  }
  /* One untimed call: thread pool start-up, page faults. */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  long iters = 0;
  double t0 = ft_now_s(), el = 0.0;
  do {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    iters++;
    el = ft_now_s() - t0;
  } while (el < min_seconds);
  if (el > 0.0)
    rate = 2.0 * (double)n * n * n * (double)iters / el / 1e9;
  openblas_set_num_threads(1);
out:
  free(c);
  free(b);
  free(a);
  return rate;
}

const char *k_blas_config(void) {
  const char *c = openblas_get_config();
  return c ? c : "unknown BLAS";
}
