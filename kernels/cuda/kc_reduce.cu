/*
 * kc_reduce: the deterministic reductions over many rows: column sums of a
 * (N,C) bf16 matrix (kc__colsum: matmul dbias, layernorm dw and db) and the
 * sum of squares of an fp32 vector in double (kc_sumsq, for gradient-norm
 * clipping).
 *
 * Why two passes: a sum over rows spread across thread blocks would need
 * float atomics, whose arrival order (and so whose rounding) changes from
 * run to run. Instead every block writes its partial sums to the kc_ctx's
 * scratch, and a second kernel adds the partials in block order. Inside a
 * block the tree is fixed too (shared-memory columns added in thread
 * order, halving trees for kc_sumsq). The partition depends only on the
 * sizes (N, C or n), so the same inputs give the same bits.
 *
 * Shapes: N, C >= 0 and below 2^31; n any size_t. Scratch: 4 * C *
 * ceil(N / COL_ROWS) bytes per output vector for kc__colsum, 8 *
 * ceil(n / SSQ_CHUNK) bytes for kc_sumsq.
 */
#include "kc_int.h"

/* ---- column sums ----------------------------------------------------------------- */

#define COL_TX 32    /* columns per block (one warp wide, coalesced) */
#define COL_TY 8     /* row lanes per block */
#define COL_ROWS 256 /* rows per chunk (one partial per chunk and column) */

/* Block (bx, by) = columns bx*32.., rows by*COL_ROWS... Thread (tx, ty)
 * adds rows r0+ty, r0+ty+8, ... of its column in order; thread ty == 0
 * then adds the 8 row lanes in ty order and writes the chunk's partial. */
template <bool LN>
__global__ void __launch_bounds__(COL_TX *COL_TY)
    colsum_part_kernel(float *part0, float *part1, const __nv_bfloat16 *g, const __nv_bfloat16 *xin,
                       const float *mean, const float *rstd, int N, int C) {
  __shared__ float s0[COL_TY][COL_TX + 1], s1[COL_TY][COL_TX + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * COL_TX + tx;
  const int r0 = blockIdx.y * COL_ROWS;
  const int r1 = min(N, r0 + COL_ROWS);
  float a0 = 0.0f, a1 = 0.0f;
  if (col < C) {
    for (int r = r0 + ty; r < r1; r += COL_TY) {
      size_t idx = (size_t)r * C + col;
      float d = kc__f(g[idx]);
      a0 += d;
      if (LN) {
        float xh = (kc__f(xin[idx]) - mean[r]) * rstd[r];
        a1 += xh * d;
      }
    }
  }
  s0[ty][tx] = a0;
  s1[ty][tx] = a1;
  __syncthreads();
  if (ty == 0 && col < C) {
    float t0 = s0[0][tx], t1 = s1[0][tx];
#pragma unroll
    for (int y = 1; y < COL_TY; y++) {
      t0 += s0[y][tx];
      t1 += s1[y][tx];
    }
    size_t o = (size_t)blockIdx.y * C + col;
    part0[o] = t0;
    if (LN)
      part1[o] = t1;
  }
}

/* out[c] += sum over chunks, in chunk order (one thread per column). */
__global__ void colsum_final_kernel(float *out0, float *out1, const float *part0,
                                    const float *part1, int nchunks, int C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C)
    return;
  float t0 = 0.0f, t1 = 0.0f;
  for (int k = 0; k < nchunks; k++) {
    t0 += part0[(size_t)k * C + col];
    if (out1)
      t1 += part1[(size_t)k * C + col];
  }
  out0[col] += t0;
  if (out1)
    out1[col] += t1;
}

int kc__colsum(kc_ctx *c, float *s0, float *s1, const kc_bf16 *g, const kc_bf16 *xin,
               const float *mean, const float *rstd, int N, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0)
    return FT_OK;
  const bool ln = s1 != NULL;
  const int nchunks = (N + COL_ROWS - 1) / COL_ROWS;
  if (nchunks > 65535)
    return ft_err_set(FT_EINVAL, "kc column sums: N %d above %d rows", N, 65535 * COL_ROWS);
  size_t one = (size_t)nchunks * C * sizeof(float);
  one = (one + 255) & ~(size_t)255;
  void *scr = NULL;
  int rc = kc__scratch(c, ln ? 2 * one : one, &scr);
  if (rc)
    return rc;
  float *p0 = (float *)scr;
  float *p1 = ln ? (float *)((char *)scr + one) : NULL;
  dim3 grid((unsigned)((C + COL_TX - 1) / COL_TX), (unsigned)nchunks);
  dim3 block(COL_TX, COL_TY);
  const __nv_bfloat16 *gb = reinterpret_cast<const __nv_bfloat16 *>(g);
  if (ln)
    colsum_part_kernel<true><<<grid, block, 0, s>>>(
        p0, p1, gb, reinterpret_cast<const __nv_bfloat16 *>(xin), mean, rstd, N, C);
  else
    colsum_part_kernel<false><<<grid, block, 0, s>>>(p0, NULL, gb, NULL, NULL, NULL, N, C);
  rc = KC_LAUNCHED("colsum_part");
  if (rc)
    return rc;
  colsum_final_kernel<<<(unsigned)((C + 255) / 256), 256, 0, s>>>(s0, s1, p0, p1, nchunks, C);
  return KC_LAUNCHED("colsum_final");
}

/* ---- sum of squares ------------------------------------------------------------- */

#define SSQ_THREADS 256
#define SSQ_CHUNK (SSQ_THREADS * 64) /* elements per block */
#define SSQ_FINAL 1024               /* threads of the final pass */

/* Halving tree over buf[0..n) (n a power of two), in double; all threads of
 * the block call it; the result is buf[0]. */
static __device__ void tree_sum_d(double *buf, int n) {
  for (int h = n / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h)
      buf[threadIdx.x] += buf[threadIdx.x + h];
    __syncthreads();
  }
}

__global__ void __launch_bounds__(SSQ_THREADS)
    sumsq_part_kernel(double *part, const float *x, size_t n) {
  __shared__ double buf[SSQ_THREADS];
  size_t base = (size_t)blockIdx.x * SSQ_CHUNK;
  size_t end = base + SSQ_CHUNK < n ? base + SSQ_CHUNK : n;
  double a = 0.0;
  for (size_t i = base + threadIdx.x; i < end; i += SSQ_THREADS) {
    double v = (double)x[i];
    a += v * v;
  }
  buf[threadIdx.x] = a;
  __syncthreads();
  tree_sum_d(buf, SSQ_THREADS);
  if (threadIdx.x == 0)
    part[blockIdx.x] = buf[0];
}

__global__ void __launch_bounds__(SSQ_FINAL)
    sumsq_final_kernel(double *out, const double *part, size_t nparts) {
  __shared__ double buf[SSQ_FINAL];
  double a = 0.0;
  for (size_t i = threadIdx.x; i < nparts; i += SSQ_FINAL)
    a += part[i];
  buf[threadIdx.x] = a;
  __syncthreads();
  tree_sum_d(buf, SSQ_FINAL);
  if (threadIdx.x == 0)
    *out = buf[0];
}

extern "C" int kc_sumsq(kc_ctx *c, double *d_out, const float *x, size_t n, kc_stream s) {
  cudaStream_t st = kc__st(s);
  if (n == 0)
    return kc__err(cudaMemsetAsync(d_out, 0, sizeof(double), st), "kc_sumsq memset");
  size_t nparts = (n + SSQ_CHUNK - 1) / SSQ_CHUNK;
  if (nparts > 0x7fffffffu)
    return ft_err_set(FT_EINVAL, "kc_sumsq: n %zu too large", n);
  void *scr = NULL;
  int rc = kc__scratch(c, nparts * sizeof(double), &scr);
  if (rc)
    return rc;
  double *part = (double *)scr;
  sumsq_part_kernel<<<(unsigned)nparts, SSQ_THREADS, 0, st>>>(part, x, n);
  rc = KC_LAUNCHED("sumsq_part");
  if (rc)
    return rc;
  sumsq_final_kernel<<<1, SSQ_FINAL, 0, st>>>(d_out, part, nparts);
  return KC_LAUNCHED("sumsq_final");
}
