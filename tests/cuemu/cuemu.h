/*
 * cuemu: runs the project's CUDA kernels on the CPU, for checking their
 * logic where no GPU is lent (a test tool, not a product path).
 *
 * How: each .cu file of kernels/cuda is compiled by the host C++ compiler with
 * this header forced in (-include cuemu.h), after cuemu_launch.py has
 * rewritten every `k<<<grid, block, smem, stream>>>(args)` into
 * cuemu_launch(...). The real CUDA headers give the types (dim3,
 * __nv_bfloat16 with its host conversions, cuBLASLt's enums); cuemu_rt.cpp
 * implements the runtime and cuBLASLt calls the sources make, on host
 * memory.
 *
 * What it models, so that the kernels' logic is what gets tested:
 *  - threads: one fiber per CUDA thread of a block; blocks run one after
 *    another. __syncthreads and __syncwarp are barriers; a shuffle is a
 *    warp barrier with an exchange. The order in which fibers run between
 *    barriers is forward, reversed or shuffled (CUEMU_ORDER), so a read of
 *    shared memory that lacks its barrier sees the wrong value in one order
 *    or the other. A barrier that some threads of the block never reach,
 *    or a full-mask shuffle with a lane missing, is reported and aborts;
 *  - __shared__ is a static of the kernel: one copy, shared by the block
 *    that runs;
 *  - streams are queues: work is deferred until the host waits for it
 *    (CUEMU_ASYNC=lazy, the default) and streams with work ready run in a
 *    seeded random order, so a missing cross-stream wait or a host read
 *    without its fence shows up as a wrong result;
 *  - launches are checked (block size, grid limits, every pointer argument
 *    inside a device allocation), copies are checked against the
 *    allocations and their direction, device memory has a limit
 *    (CUEMU_MEM_MB) so that out-of-memory paths run.
 *
 *  - WMMA: a fragment holds 8 elements per lane (lane l: elements 8l ..
 *    8l+7 of the row-major 16x16 tile); load, store and mma are warp
 *    collectives with the alignment and ldm rules checked. A load reads at
 *    each lane's arrival and a store writes after the warp's barrier, so
 *    a __syncwarp missing between them and the lanes' own accesses shows.
 *
 *  - NCCL (cuemu_nccl.cpp): ranks are processes exchanging through shared
 *    memory, each collective an operation of its stream whose result lands
 *    only when nothing else on the device is ready.
 *
 * What it does not model: timing, memory ordering between threads without
 * a barrier (each fibre's writes are visible at once), the tensor cores'
 * own summation order (mma sums in k order, in fp32), and cuBLASLt's own
 * algorithms (cuemu_rt.cpp computes the documented result of each call in
 * fp32).
 */
#ifndef CUEMU_H
#define CUEMU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

/* ---- the thread model (cuemu_sched.cpp) ------------------------------------------ */

extern uint3 cuemu_threadIdx, cuemu_blockIdx;
extern dim3 cuemu_blockDim, cuemu_gridDim;

#define threadIdx cuemu_threadIdx
#define blockIdx cuemu_blockIdx
#define blockDim cuemu_blockDim
#define gridDim cuemu_gridDim

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

void cuemu_syncthreads(void);
void cuemu_syncwarp(unsigned mask);
/* Publishes v as this lane's value, waits for the lanes of mask, returns
 * lane src's value, and waits again (so the slot is not reused early). */
uint64_t cuemu_shfl(unsigned mask, uint64_t v, int src);
[[noreturn]] void cuemu_trap(const char *what);
/* Warp-collective helpers of the WMMA model: publish a pointer, then (after
 * a full-warp barrier) read the one another lane published. */
void cuemu_warp_publish(const void *p);
const void *cuemu_warp_peer(int lane);
/* The block's dynamic shared memory (extern __shared__ arrays). */
extern unsigned char *cuemu_dyn_smem;

#define __syncthreads() cuemu_syncthreads()
#define __syncwarp(...) cuemu_syncwarp_(__VA_ARGS__)
#define __trap() cuemu_trap("__trap")

static inline void cuemu_syncwarp_(void) {
  cuemu_syncwarp(0xffffffffu);
}
static inline void cuemu_syncwarp_(unsigned mask) {
  cuemu_syncwarp(mask);
}

static inline unsigned cuemu_lane(void) {
  unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return lin & 31u;
}

/* v of lane src, as the same type T (up to 8 bytes). */
template <class T> static inline T cuemu_shfl_as(unsigned mask, T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = cuemu_shfl(mask, bits, (int)src);
  T r;
  memcpy(&r, &bits, sizeof r);
  return r;
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32) {
  unsigned lane = cuemu_lane();
  return cuemu_shfl_as(
      mask, v, (lane & ~(unsigned)(width - 1)) | ((lane ^ (unsigned)lanemask) & (width - 1)));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  unsigned lane = cuemu_lane(), seg = lane & ~(unsigned)(width - 1);
  return cuemu_shfl_as(mask, v, (lane - seg) + d < (unsigned)width ? lane + d : lane);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  unsigned lane = cuemu_lane();
  return cuemu_shfl_as(mask, v, (lane & ~(unsigned)(width - 1)) | ((unsigned)src & (width - 1)));
}

/* ---- device math that has no host declaration --------------------------------------- */

static inline float __fmul_rn(float a, float b) {
  return a * b;
}
static inline float __fadd_rn(float a, float b) {
  return a + b;
}
static inline float __fsub_rn(float a, float b) {
  return a - b;
}
static inline float __fdiv_rn(float a, float b) {
  return a / b;
}
static inline float __fsqrt_rn(float a) {
  return sqrtf(a);
}
static inline float __fdividef(float a, float b) {
  return a / b;
}
static inline float rsqrtf(float a) {
  return 1.0f / sqrtf(a);
}
static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
static inline int __float_as_int(float f) {
  int i;
  memcpy(&i, &f, sizeof i);
  return i;
}
static inline int min(int a, int b) {
  return a < b ? a : b;
}
static inline int max(int a, int b) {
  return a > b ? a : b;
}
static inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
static inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
static inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
static inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
template <class T> static inline T __ldg(const T *p) {
  return *p;
}

/* ---- WMMA (mma.h's nvcuda::wmma, 16x16x16 bf16 -> fp32 only) ---------------------------- */

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cuemu models 16x16x16 fragments only");
  enum { num_elements = 8 };
  T x[8];
};

static inline unsigned lane_(void) {
  return cuemu_lane();
}
static inline void check_ptr_(const void *p, unsigned ldm, size_t esize, const char *what) {
  if ((uintptr_t)p % 32u)
    cuemu_trap(what); /* WMMA pointers must be 256-bit aligned */
  if ((ldm * esize) % 16u)
    cuemu_trap(what); /* ldm: a multiple of 16 bytes */
}
/* element (r, c) of a 16x16 matrix stored row- or column-major with ldm */
template <class T> static inline T at_(const T *p, unsigned ldm, bool rowmajor, int r, int c) {
  return rowmajor ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <class Use, class T, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
  check_ptr_(p, ldm, sizeof(T), "wmma::load_matrix_sync: misaligned pointer or ldm");
  const bool rm = std::is_same<L, row_major>::value;
  for (int e = 0; e < 8; e++) {
    int idx = (int)lane_() * 8 + e;
    f.x[e] = at_(p, ldm, rm, idx / 16, idx % 16);
  }
  cuemu_syncwarp(0xffffffffu);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l) {
  check_ptr_(p, ldm, sizeof(float), "wmma::load_matrix_sync: misaligned pointer or ldm");
  for (int e = 0; e < 8; e++) {
    int idx = (int)lane_() * 8 + e;
    f.x[e] = at_(p, ldm, l == mem_row_major, idx / 16, idx % 16);
  }
  cuemu_syncwarp(0xffffffffu);
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l) {
  check_ptr_(p, ldm, sizeof(float), "wmma::store_matrix_sync: misaligned pointer or ldm");
  cuemu_syncwarp(0xffffffffu); /* "waits until all lanes have arrived", then stores */
  for (int e = 0; e < 8; e++) {
    int idx = (int)lane_() * 8 + e, r = idx / 16, c = idx % 16;
    (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[e];
  }
}
template <class Use, class T, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
  for (int e = 0; e < 8; e++)
    f.x[e] = v;
}
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
  struct mine {
    const __nv_bfloat16 *a, *b;
  } me = {a.x, b.x};
  cuemu_warp_publish(&me);
  cuemu_syncwarp(0xffffffffu);
  float out[8];
  for (int e = 0; e < 8; e++) {
    int idx = (int)lane_() * 8 + e, r = idx / 16, col = idx % 16;
    float s = c.x[e];
    for (int k = 0; k < 16; k++) {
      int ia = r * 16 + k, ib = k * 16 + col; /* element indices in A and B (row-major) */
      const mine *pa = (const mine *)cuemu_warp_peer(ia / 8);
      const mine *pb = (const mine *)cuemu_warp_peer(ib / 8);
      s += __bfloat162float(pa->a[ia % 8]) * __bfloat162float(pb->b[ib % 8]);
    }
    out[e] = s;
  }
  cuemu_syncwarp(0xffffffffu); /* every lane has read the others' a and b */
  for (int e = 0; e < 8; e++)
    d.x[e] = out[e];
}
} // namespace wmma
} // namespace nvcuda

/* cuda_runtime.h's C++ overload for kernels (nvcc only) */
template <class... P>
static inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), cudaFuncAttribute a, int v) {
  return ::cudaFuncSetAttribute((const void *)k, a, v);
}

/* ---- launches ------------------------------------------------------------------------ */

struct cuemu_cfg {
  dim3 grid, block;
  size_t smem;
  cudaStream_t st;
};
static inline cuemu_cfg cuemu_config(dim3 g, dim3 b, size_t smem = 0, cudaStream_t st = 0) {
  return cuemu_cfg{g, b, smem, st};
}

/* A kernel body, type-erased: runs the kernel with its arguments (bound at
 * launch, as CUDA copies them). */
struct cuemu_work {
  virtual ~cuemu_work() {}
  virtual void run() = 0;
};

/* Checks cfg and the pointer arguments, then queues the grid on cfg.st.
 * ptrs: the arguments that are pointers (each must be NULL or inside a
 * device allocation). Takes ownership of w. */
void cuemu_enqueue_kernel(const char *name, const void *fn, const cuemu_cfg &cfg,
                          const void *const *ptrs, int nptrs, cuemu_work *w);

template <class T> static inline void cuemu_ptr_of(const T &, const void **, int *) {}
template <class T> static inline void cuemu_ptr_of(T *const &p, const void **out, int *n) {
  out[(*n)++] = (const void *)p;
}

template <class... P> struct cuemu_kernel_work : cuemu_work {
  void (*k)(P...);
  std::tuple<typename std::decay<P>::type...> args;
  template <class... A> cuemu_kernel_work(void (*k_)(P...), A &&...a) : k(k_), args(a...) {}
  void run() override {
    std::apply(k, args);
  }
};

template <class... P, class... A>
static inline void cuemu_launch(const char *name, const cuemu_cfg &cfg, void (*k)(P...), A &&...a) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  auto *w = new cuemu_kernel_work<P...>(k, std::forward<A>(a)...);
  const void *ptrs[sizeof...(P) + 1];
  int n = 0;
  std::apply([&](const auto &...x) { (cuemu_ptr_of(x, ptrs, &n), ...); }, w->args);
  cuemu_enqueue_kernel(name, (const void *)k, cfg, ptrs, n, w);
}

#endif
