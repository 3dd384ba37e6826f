/*
 * k_matmul: the Linear layer, out = inp @ w^T + bias, through BLAS sgemm.
 *
 * Why tiles: OpenBLAS's own multithreading splits a GEMM into per-thread
 * panels whose shapes depend on the thread count, and its micro-kernels
 * round edge panels differently, so its results change with the number of
 * threads (measured here: thousands of differing elements between 1 and 2
 * threads on a 512x192x576 GEMM). To keep the determinism contract, every
 * GEMM is cut into FIXED output tiles of MM_TM x MM_TN; each tile is one
 * single-threaded cblas_sgemm over the full K, and the tiles are spread
 * over OpenMP threads. A tile's bits depend only on its shape and data,
 * never on which thread computes it or how many there are.
 * Invariant: OpenBLAS runs single-threaded (blas_single() before each GEMM).
 *
 * The bias gradient is a sum over rows: parallel over column blocks, rows
 * added in index order. No allocation.
 */
#include "kernels.h"

#include <cblas.h>

#define MM_TM 128 /* output tile rows */
#define MM_TN 256 /* output tile columns */
#define MM_CBLOCK 32

static void blas_single(void) {
  if (openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

/* C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C, row-major, in fixed
 * tiles of C. A, B, C as for cblas_sgemm with CblasRowMajor. */
static void gemm_tiled(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                       int ldb, float beta, float *Cm, int ldc) {
  int mt = (M + MM_TM - 1) / MM_TM, nt = (N + MM_TN - 1) / MM_TN;
  long ntiles = (long)mt * nt;
  blas_single();
#pragma omp parallel for schedule(static)
  for (long tile = 0; tile < ntiles; tile++) {
    int i0 = (int)(tile / nt) * MM_TM, j0 = (int)(tile % nt) * MM_TN;
    int m = M - i0 < MM_TM ? M - i0 : MM_TM;
    int n = N - j0 < MM_TN ? N - j0 : MM_TN;
    const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
    const float *b = tb ? B + (size_t)j0 * ldb : B + j0;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                K, 1.0f, a, lda, b, ldb, beta, Cm + (size_t)i0 * ldc + j0, ldc);
  }
}

void k_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                  int OC) {
  /* out (N,OC) = inp (N,C) @ w^T (C,OC) */
  gemm_tiled(0, 1, N, OC, C, inp, C, w, C, 0.0f, out, OC);
  if (!bias)
    return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * OC;
    for (int j = 0; j < OC; j++)
      o[j] += bias[j];
  }
}

void k_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                  const float *w, int N, int C, int OC) {
  /* dinp (N,C) += dout (N,OC) @ w (OC,C) */
  if (dinp)
    gemm_tiled(0, 0, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
  /* dw (OC,C) += dout^T (OC,N) @ inp (N,C) */
  gemm_tiled(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
  if (!dbias)
    return;
  int nblk = (OC + MM_CBLOCK - 1) / MM_CBLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    int j0 = blk * MM_CBLOCK;
    int j1 = j0 + MM_CBLOCK < OC ? j0 + MM_CBLOCK : OC;
    float acc[MM_CBLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * OC;
      for (int j = j0; j < j1; j++)
        acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; j++)
      dbias[j] += acc[j - j0];
  }
}
