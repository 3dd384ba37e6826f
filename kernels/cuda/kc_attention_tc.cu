/*
 * kc_attention_tc: the tensor-core variant of kc_attention's fused causal
 * attention, for head size 64 only (GPT-2 124M and 350M). kc_attention.cu
 * dispatches here when kc_attention_impl() is "tc" (FT_ATTENTION=tc, or
 * kc_attention_set_impl("tc")), HS == 64 and every bf16 pointer is 16-byte
 * aligned; otherwise its SIMT kernels run. Same contract, layout, math and
 * work split as kc_attention.cu (read its comment first): the forward saves
 * lse; the backward is D = rowsum(dout * out) (kc_attention.cu's kernel,
 * passed in), a dQ kernel per query tile over the key tiles up to its
 * diagonal, and a dK/dV kernel per key tile over the query tiles from its
 * diagonal to T.
 *
 * How. A block of 4 warps owns a 64-row tile of one (b,h); warp w owns
 * rows 16w .. 16w+15 (its "strip") of every 64 x 64 product, so a row's
 * softmax statistics and elementwise steps stay inside one warp: the only
 * block barriers surround the loads of the streamed tiles. Every product
 * is one warp computing its 16 x 64 strip = (16 x 64) x (64 x 64) with
 * 16x16x16 WMMA fragments (bf16 operands, fp32 accumulators, k blocks in
 * the fixed order 0..3):
 *   forward  S = Q K^T -> fp32 strip in shared memory; scale, causal mask
 *            and online softmax in fp32 (two lanes per row, 32 interleaved
 *            columns each, one xor-shuffle to combine: m, l in registers);
 *            P = exp(s - m') rounded to bf16 in shared memory; O is fp32 in
 *            shared memory: the lanes rescale their rows by e^(m - m'),
 *            then the warp loads O as the accumulator of O += P V and
 *            stores it back (a WMMA fragment's element-to-row map is
 *            opaque, so a per-row rescale cannot be done in registers).
 *            l sums the fp32 p, so lse = m + log l is the fp32 value.
 *   dQ       S = Q K^T, dP = dO V^T -> fp32 strips; P = exp(s - lse),
 *            dS = P (dP - D) rounded to bf16; dQ += dS K in accumulator
 *            fragments held in registers across the key tiles.
 *   dK, dV   the transposed strips S^T = K Q^T, dP^T = V dO^T; P^T and
 *            dS^T rounded to bf16; dV += P^T dO, dK += dS^T Q in registers
 *            across the query tiles.
 * Outputs are staged as bf16 in the warp's strip and written with 16-byte
 * stores; tiles are loaded with 16-byte loads.
 *
 * Why WMMA (mma.h) rather than mma.sync PTX: correctness rests only on the
 * documented semantics of load/store_matrix_sync (row/col-major, ldm), not
 * on hand-computed register layouts. The price is speed (no cp.async
 * pipeline, no ldmatrix swizzles, P and O round-trip through shared
 * memory), acceptable for a first tensor-core version.
 *
 * Precision, versus the SIMT kernel: P (forward and backward) and dS are
 * rounded to bf16 as GEMM operands, as in FlashAttention; scores, softmax
 * statistics, lse, O and every accumulation stay fp32 (expf, logf: the
 * full-precision versions).
 *
 * Invariants:
 *  - shared memory is dynamic (70 to 89 KB per block, over the 48 KB
 *    default: cudaFuncSetAttribute before each launch, which is per device
 *    and cheap) and the kernels have no static shared memory, so every
 *    buffer offset below (a multiple of 128 bytes) is from an aligned base;
 *  - every WMMA pointer into shared memory is 32-byte aligned with ldm a
 *    multiple of 8 (bf16) or 4 (fp32): bf16 tiles are 64 x LDB = 72 (rows
 *    of 144 bytes: a 16-row step is 2304 bytes, a 16-column step 32 bytes),
 *    fp32 tiles 64 x LDF = 68 (4352 and 64 bytes). The padding staggers the
 *    banks of consecutive rows; padding columns are never read;
 *  - rows at or past T of every loaded tile are zero in shared memory (so
 *    that no 0 x garbage product can make a NaN), and such rows and columns
 *    are masked by select (score -inf, P = dS = 0). The first key tile
 *    holds key 0, which every query sees, so the running max is finite
 *    after it, and every later tile j0 <= q0 holds a visible key j0;
 *  - a warp's strips are private to it: a store by some lanes and a read
 *    by others are ordered by __syncwarp; shared tiles by __syncthreads;
 *  - no atomics: each output element is written once by one thread after a
 *    fixed sequence of operations, so the bits are the same run to run;
 *  - global memory: qkv, out, dout, dqkv 16-byte aligned (checked by the
 *    dispatcher); with HS = 64, C = 64 NH so every row offset is a multiple
 *    of 128 bytes. Grid (B*NH, ceil(T/64)), checked by kc_attention.cu.
 */
#include "kc_int.h"

#include <mma.h>
#include <type_traits>

namespace wmma = nvcuda::wmma;

/* WMMA's bf16 fragments exist from sm_80 on: a build for an older
 * architecture compiles these kernels as traps (kc_attention never picks
 * them there, the device having no bf16 tensor cores). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KC_TC_DEVICE 0
#else
#define KC_TC_DEVICE 1
#endif
typedef __nv_bfloat16 bf16;

#define TC_HS 64                /* head size */
#define TC_ROWS 64              /* rows of a tile (queries or keys) */
#define TC_WARPS (TC_ROWS / 16) /* one warp per 16-row strip */
#define TC_NT (TC_WARPS * 32)   /* threads per block */
#define LDB 72                  /* ld of bf16 tiles in shared memory */
#define LDF 68                  /* ld of fp32 tiles in shared memory */

static constexpr size_t TILE_B = (size_t)TC_ROWS * LDB * sizeof(bf16);  /* 9216 */
static constexpr size_t TILE_F = (size_t)TC_ROWS * LDF * sizeof(float); /* 17408 */
static constexpr size_t STAT_B = 2 * TC_ROWS * sizeof(float);           /* lse, D */
static constexpr size_t FWD_SMEM = 4 * TILE_B + 2 * TILE_F;             /* 71680 */
static constexpr size_t DQ_SMEM = 5 * TILE_B + 2 * TILE_F + STAT_B;     /* 81408 */
static constexpr size_t DKV_SMEM = 6 * TILE_B + 2 * TILE_F + STAT_B;    /* 90624 */
static_assert(TILE_B % 128 == 0 && TILE_F % 128 == 0, "shared buffers 128-byte aligned");
static_assert((16 * LDB * sizeof(bf16)) % 32 == 0 && (16 * LDF * sizeof(float)) % 32 == 0,
              "16-row steps keep WMMA pointers 32-byte aligned");
static_assert(LDB % 8 == 0 && LDF % 4 == 0, "WMMA ldm rules");

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;

static __device__ __forceinline__ bf16 *tile_b(unsigned char *smem, int k) {
  return reinterpret_cast<bf16 *>(smem + k * TILE_B);
}

/* dst (64 x LDB, shared) = rows r0 .. r0+63 of src (ld elements per row,
 * 64 columns), zero for rows at or past T. All threads of the block. */
static __device__ __forceinline__ void tile_load(bf16 *dst, const bf16 *__restrict__ src, size_t ld,
                                                 int r0, int T) {
  for (int idx = threadIdx.x; idx < TC_ROWS * (TC_HS / 8); idx += TC_NT) {
    const int rr = idx / (TC_HS / 8), cc = (idx % (TC_HS / 8)) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r0 + rr < T)
      v = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + rr) * ld + cc);
    *reinterpret_cast<uint4 *>(dst + rr * LDB + cc) = v;
  }
}

/* Rows row0 .. row0+15 of dst (ld elements) = the warp's bf16 strip src
 * (16 x LDB), rows at or past T skipped. One warp. */
static __device__ __forceinline__ void strip_store(bf16 *dst, size_t ld, const bf16 *src, int row0,
                                                   int T, int lane) {
#pragma unroll
  for (int t = 0; t < 4; t++) {
    const int idx = lane + 32 * t, rr = idx / (TC_HS / 8), cc = (idx % (TC_HS / 8)) * 8;
    if (row0 + rr < T)
      *reinterpret_cast<uint4 *>(dst + (size_t)(row0 + rr) * ld + cc) =
          *reinterpret_cast<const uint4 *>(src + rr * LDB + cc);
  }
}

#if KC_TC_DEVICE
/* acc[n] += A B[:, 16n .. 16n+15] for n < 4. A: the 16 x 64 row-major bf16
 * strip at a (ld LDB). B (64 x 64) from the row-major 64 x 64 bf16 tile x
 * (ld LDB): with BT, B = x^T (B[k][n] = x[n][k], x's rows are B's columns:
 * col_major); without, B = x (row_major). One warp; k blocks in order. */
template <bool BT>
static __device__ __forceinline__ void strip_mma(frag_c (&acc)[4], const bf16 *a, const bf16 *x) {
  typedef typename std::conditional<BT, wmma::col_major, wmma::row_major>::type layout_b;
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    frag_a fa;
    wmma::load_matrix_sync(fa, a + kk * 16, LDB);
#pragma unroll
    for (int nn = 0; nn < 4; nn++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, layout_b> fb;
      wmma::load_matrix_sync(fb, BT ? x + nn * 16 * LDB + kk * 16 : x + kk * 16 * LDB + nn * 16,
                             LDB);
      wmma::mma_sync(acc[nn], fa, fb, acc[nn]);
    }
  }
}

static __device__ __forceinline__ void frags_zero(frag_c (&acc)[4]) {
#pragma unroll
  for (int nn = 0; nn < 4; nn++)
    wmma::fill_fragment(acc[nn], 0.0f);
}

/* The warp's fp32 strip f (16 x LDF) = acc. */
static __device__ __forceinline__ void frags_store(float *f, const frag_c (&acc)[4]) {
#pragma unroll
  for (int nn = 0; nn < 4; nn++)
    wmma::store_matrix_sync(f + nn * 16, acc[nn], LDF, wmma::mem_row_major);
}

#endif

/* ---- forward ------------------------------------------------------------------------ */

/* Shared memory: Q, K, V, P (bf16 tiles), S, O (fp32 tiles). */
static __global__ void __launch_bounds__(TC_NT)
    attn_tc_fwd_kernel(bf16 *out, float *lse, const bf16 *__restrict__ qkv, int T, int C, int NH,
                       float scale) {
#if KC_TC_DEVICE
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = tile_b(smem, 0), *Ks = tile_b(smem, 1), *Vs = tile_b(smem, 2), *Ps = tile_b(smem, 3);
  float *Ss = reinterpret_cast<float *>(smem + 4 * TILE_B);
  float *Os = reinterpret_cast<float *>(smem + 4 * TILE_B + TILE_F);
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * TC_ROWS; /* the longest tiles first */
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * TC_HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;
  const bf16 *Qw = Qs + 16 * w * LDB;
  bf16 *Pw = Ps + 16 * w * LDB;
  float *Sw = Ss + 16 * w * LDF, *Ow = Os + 16 * w * LDF;
  /* elementwise phases: lanes 2r, 2r+1 own row r of the strip, columns
   * hf, hf+2, ..., hf+62 */
  const int r = lane >> 1, hf = lane & 1;
  const int i = q0 + 16 * w + r; /* this lane's query */
  float *srow = Sw + r * LDF, *orow = Ow + r * LDF;
  bf16 *prow = Pw + r * LDB;

  tile_load(Qs, qb, C3, q0, T);
#pragma unroll
  for (int k = 0; k < 32; k++)
    orow[hf + 2 * k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int kend = min(T, q0 + TC_ROWS); /* keys 0 .. kend-1 can be seen by this block */
  for (int j0 = 0; j0 < kend; j0 += TC_ROWS) {
    __syncthreads(); /* the previous K, V are consumed (and Q, O zeros are in place) */
    tile_load(Ks, kb, C3, j0, T);
    tile_load(Vs, vb, C3, j0, T);
    __syncthreads();
    frag_c acc[4];
    frags_zero(acc);
    strip_mma<true>(acc, Qw, Ks); /* S = Q K^T */
    frags_store(Sw, acc);
    __syncwarp();
    float s[32];
    float tmax = -INFINITY;
#pragma unroll
    for (int k = 0; k < 32; k++) {
      const int j = j0 + hf + 2 * k;
      const float v = srow[hf + 2 * k] * scale;
      s[k] = (j <= i && j < T) ? v : -INFINITY;
      tmax = fmaxf(tmax, s[k]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float mnew = fmaxf(m, tmax);  /* finite: this tile holds a key this row sees */
    const float alpha = expf(m - mnew); /* 0 on the first tile */
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; k++) {
      const float p = expf(s[k] - mnew); /* 0 for masked keys */
      sum += p;
      prow[hf + 2 * k] = kc__b(p);
      orow[hf + 2 * k] *= alpha;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* same bits in both lanes */
    l = l * alpha + sum;
    m = mnew;
    __syncwarp();
#pragma unroll
    for (int nn = 0; nn < 4; nn++)
      wmma::load_matrix_sync(acc[nn], Ow + nn * 16, LDF, wmma::mem_row_major);
    strip_mma<false>(acc, Pw, Vs); /* O += P V */
    frags_store(Ow, acc);
  }
  __syncwarp(); /* O stored by every lane; P read by every lane */
  const float inv = 1.0f / l;
#pragma unroll
  for (int k = 0; k < 32; k++)
    prow[hf + 2 * k] = kc__b(orow[hf + 2 * k] * inv);
  if (hf == 0 && i < T)
    lse[(size_t)bh * T + i] = m + logf(l);
  __syncwarp();
  strip_store(out + (size_t)b * T * C + (size_t)h * TC_HS, C, Pw, q0 + 16 * w, T, lane);
#else
  __trap();
#endif
}

/* ---- backward ----------------------------------------------------------------------- */

/* Shared memory: Q, dO, K, V, dS (bf16 tiles), S, dP (fp32 tiles), then
 * lse and D of the block's 64 queries. */
static __global__ void __launch_bounds__(TC_NT)
    attn_tc_bwd_dq_kernel(bf16 *dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
                          const float *__restrict__ lse, const float *__restrict__ D, int T, int C,
                          int NH, float scale) {
#if KC_TC_DEVICE
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = tile_b(smem, 0), *dOs = tile_b(smem, 1), *Ks = tile_b(smem, 2), *Vs = tile_b(smem, 3);
  bf16 *dSs = tile_b(smem, 4);
  float *Ss = reinterpret_cast<float *>(smem + 5 * TILE_B);
  float *dPs = Ss + TC_ROWS * LDF, *Ls = dPs + TC_ROWS * LDF, *Ds = Ls + TC_ROWS;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * TC_ROWS;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * TC_HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;
  const bf16 *dob = dout + (size_t)b * T * C + (size_t)h * TC_HS;
  const bf16 *Qw = Qs + 16 * w * LDB, *dOw = dOs + 16 * w * LDB;
  bf16 *dSw = dSs + 16 * w * LDB;
  float *Sw = Ss + 16 * w * LDF, *dPw = dPs + 16 * w * LDF;

  tile_load(Qs, qb, C3, q0, T);
  tile_load(dOs, dob, C, q0, T);
  if (threadIdx.x < TC_ROWS) {
    const int iq = q0 + threadIdx.x;
    Ls[threadIdx.x] = iq < T ? lse[(size_t)bh * T + iq] : 0.0f;
    Ds[threadIdx.x] = iq < T ? D[(size_t)bh * T + iq] : 0.0f;
  }
  frag_c dq[4];
  frags_zero(dq);
  const int kend = min(T, q0 + TC_ROWS);
  for (int j0 = 0; j0 < kend; j0 += TC_ROWS) {
    __syncthreads();
    tile_load(Ks, kb, C3, j0, T);
    tile_load(Vs, vb, C3, j0, T);
    __syncthreads();
    {
      frag_c acc[4];
      frags_zero(acc);
      strip_mma<true>(acc, Qw, Ks); /* S = Q K^T */
      frags_store(Sw, acc);
      frags_zero(acc);
      strip_mma<true>(acc, dOw, Vs); /* dP = dO V^T */
      frags_store(dPw, acc);
    }
    __syncwarp();
    /* lane owns columns lane and lane + 32 of every row of the strip */
#pragma unroll 4
    for (int rr = 0; rr < 16; rr++) {
      const int i = q0 + 16 * w + rr;
      const float li = Ls[16 * w + rr], di = Ds[16 * w + rr];
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const int c = lane + 32 * half, j = j0 + c;
        const float p = (j <= i && i < T) ? expf(Sw[rr * LDF + c] * scale - li) : 0.0f;
        dSw[rr * LDB + c] = kc__b(p * (dPw[rr * LDF + c] - di));
      }
    }
    __syncwarp();
    strip_mma<false>(dq, dSw, Ks); /* dQ += dS K */
  }
  frags_store(Sw, dq); /* S was last read before the loop's final __syncwarp */
  __syncwarp();
#pragma unroll 4
  for (int rr = 0; rr < 16; rr++)
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int c = lane + 32 * half;
      dSw[rr * LDB + c] = kc__b(Sw[rr * LDF + c] * scale);
    }
  __syncwarp();
  strip_store(dqkv + (size_t)b * T * C3 + (size_t)h * TC_HS, C3, dSw, q0 + 16 * w, T, lane);
#else
  __trap();
#endif
}

/* Shared memory: K, V, Q, dO, P^T, dS^T (bf16 tiles), S^T, dP^T (fp32
 * tiles), then lse and D of the current 64 queries. */
static __global__ void __launch_bounds__(TC_NT)
    attn_tc_bwd_dkv_kernel(bf16 *dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
                           const float *__restrict__ lse, const float *__restrict__ D, int T, int C,
                           int NH, float scale) {
#if KC_TC_DEVICE
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = tile_b(smem, 0), *Vs = tile_b(smem, 1), *Qs = tile_b(smem, 2), *dOs = tile_b(smem, 3);
  bf16 *Pts = tile_b(smem, 4), *dSts = tile_b(smem, 5);
  float *Ss = reinterpret_cast<float *>(smem + 6 * TILE_B);
  float *dPs = Ss + TC_ROWS * LDF, *Ls = dPs + TC_ROWS * LDF, *Ds = Ls + TC_ROWS;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.y * TC_ROWS; /* the longest tiles (k0 = 0) first */
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t C3 = 3 * (size_t)C;
  const bf16 *qb = qkv + (size_t)b * T * C3 + (size_t)h * TC_HS;
  const bf16 *kb = qb + C, *vb = qb + 2 * (size_t)C;
  const bf16 *dob = dout + (size_t)b * T * C + (size_t)h * TC_HS;
  const float *lb = lse + (size_t)bh * T, *db = D + (size_t)bh * T;
  const bf16 *Kw = Ks + 16 * w * LDB, *Vw = Vs + 16 * w * LDB;
  bf16 *Ptw = Pts + 16 * w * LDB, *dStw = dSts + 16 * w * LDB;
  float *Sw = Ss + 16 * w * LDF, *dPw = dPs + 16 * w * LDF;

  tile_load(Ks, kb, C3, k0, T);
  tile_load(Vs, vb, C3, k0, T);
  frag_c dk[4], dv[4];
  frags_zero(dk);
  frags_zero(dv);
  /* queries before k0 see none of this block's keys */
  for (int i0 = k0; i0 < T; i0 += TC_ROWS) {
    __syncthreads();
    tile_load(Qs, qb, C3, i0, T);
    tile_load(dOs, dob, C, i0, T);
    if (threadIdx.x < TC_ROWS) {
      const int iq = i0 + threadIdx.x;
      Ls[threadIdx.x] = iq < T ? lb[iq] : 0.0f;
      Ds[threadIdx.x] = iq < T ? db[iq] : 0.0f;
    }
    __syncthreads();
    {
      frag_c acc[4];
      frags_zero(acc);
      strip_mma<true>(acc, Kw, Qs); /* S^T = K Q^T */
      frags_store(Sw, acc);
      frags_zero(acc);
      strip_mma<true>(acc, Vw, dOs); /* dP^T = V dO^T */
      frags_store(dPw, acc);
    }
    __syncwarp();
#pragma unroll 4
    for (int rr = 0; rr < 16; rr++) {
      const int j = k0 + 16 * w + rr; /* key */
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const int c = lane + 32 * half, i = i0 + c; /* query */
        const float p = (i >= j && i < T) ? expf(Sw[rr * LDF + c] * scale - Ls[c]) : 0.0f;
        Ptw[rr * LDB + c] = kc__b(p);
        dStw[rr * LDB + c] = kc__b(p * (dPw[rr * LDF + c] - Ds[c]));
      }
    }
    __syncwarp();
    strip_mma<false>(dv, Ptw, dOs); /* dV += P^T dO */
    strip_mma<false>(dk, dStw, Qs); /* dK += dS^T Q */
  }
  frags_store(Sw, dk);
  frags_store(dPw, dv);
  __syncwarp();
#pragma unroll 4
  for (int rr = 0; rr < 16; rr++)
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int c = lane + 32 * half;
      dStw[rr * LDB + c] = kc__b(Sw[rr * LDF + c] * scale);
      Ptw[rr * LDB + c] = kc__b(dPw[rr * LDF + c]);
    }
  __syncwarp();
  bf16 *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)h * TC_HS;
  strip_store(dkb, C3, dStw, k0 + 16 * w, T, lane);
  strip_store(dkb + C, C3, Ptw, k0 + 16 * w, T, lane);
#else
  __trap();
#endif
}

/* ---- launchers ---------------------------------------------------------------------- */

int kc__attention_tc_fwd(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, int B, int T,
                         int C, int NH, cudaStream_t s) {
  int rc = kc__err(cudaFuncSetAttribute(attn_tc_fwd_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FWD_SMEM),
                   "attention_tc_fwd: cudaFuncSetAttribute");
  if (rc)
    return rc;
  const dim3 grid((unsigned)B * (unsigned)NH, (unsigned)((T + TC_ROWS - 1) / TC_ROWS));
  const float scale = 1.0f / sqrtf((float)TC_HS);
  attn_tc_fwd_kernel<<<grid, TC_NT, FWD_SMEM, s>>>(out, lse, qkv, T, C, NH, scale);
  return KC_LAUNCHED("attention_tc_fwd");
}

int kc__attention_tc_bwd(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const __nv_bfloat16 *qkv,
                         const float *lse, const float *D, int B, int T, int C, int NH,
                         cudaStream_t s) {
  int rc = kc__err(cudaFuncSetAttribute(attn_tc_bwd_dq_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)DQ_SMEM),
                   "attention_tc_bwd_dq: cudaFuncSetAttribute");
  if (rc)
    return rc;
  rc = kc__err(cudaFuncSetAttribute(attn_tc_bwd_dkv_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)DKV_SMEM),
               "attention_tc_bwd_dkv: cudaFuncSetAttribute");
  if (rc)
    return rc;
  const dim3 grid((unsigned)B * (unsigned)NH, (unsigned)((T + TC_ROWS - 1) / TC_ROWS));
  const float scale = 1.0f / sqrtf((float)TC_HS);
  attn_tc_bwd_dq_kernel<<<grid, TC_NT, DQ_SMEM, s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  rc = KC_LAUNCHED("attention_tc_bwd_dq");
  if (rc)
    return rc;
  attn_tc_bwd_dkv_kernel<<<grid, TC_NT, DKV_SMEM, s>>>(dqkv, dout, qkv, lse, D, T, C, NH, scale);
  return KC_LAUNCHED("attention_tc_bwd_dkv");
}
