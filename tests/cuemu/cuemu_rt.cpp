/*
 * cuemu_rt: the CPU side of cuemu (see cuemu.h): fibers for CUDA threads,
 * streams as deferred queues, the CUDA runtime calls and the cuBLASLt calls
 * that kernels/cuda makes, on host memory, with checks.
 *
 * Settings (environment):
 *   CUEMU_ORDER   fibre order between barriers: shuffle (default), fwd, rev
 *   CUEMU_ASYNC   lazy (default): stream work runs when the host waits for
 *                 it; eager: each operation runs when it is enqueued
 *   CUEMU_SEED    seed of both random orders (default 1)
 *   CUEMU_MEM_MB  device memory (default 4096); cudaMalloc beyond it fails
 *                 with cudaErrorMemoryAllocation
 *   CUEMU_DEVICES devices reported (default 1)
 *
 * Every violation found (a bad pointer argument, a copy outside its
 * allocation, a barrier not reached by the whole block, a cuBLASLt call
 * outside what cuBLASLt accepts) prints "cuemu: ..." and aborts: the tests
 * that run on cuemu then fail with that line.
 */
#include "cuemu.h"

#include <cublasLt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

/* ---- settings and diagnostics -------------------------------------------------------- */

static int env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : dflt;
}
static const char *env_str(const char *name, const char *dflt) {
  const char *s = getenv(name);
  return s && *s ? s : dflt;
}

[[noreturn]] static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cuemu: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

static uint64_t rng_state;
static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static std::recursive_mutex g_mu; /* every entry point; kernels run under it */
#define LOCK std::lock_guard<std::recursive_mutex> lock_(g_mu)

static bool g_lazy;
static int g_order; /* 0 shuffle, 1 fwd, 2 rev */
static size_t g_mem_limit;
static int g_devices;

static void init_once(void) {
  static bool done = false;
  if (done)
    return;
  done = true;
  g_lazy = strcmp(env_str("CUEMU_ASYNC", "lazy"), "eager") != 0;
  const char *o = env_str("CUEMU_ORDER", "shuffle");
  g_order = !strcmp(o, "fwd") ? 1 : !strcmp(o, "rev") ? 2 : 0;
  rng_state = (uint64_t)env_int("CUEMU_SEED", 1);
  g_mem_limit = (size_t)(atof(env_str("CUEMU_MEM_MB", "4096")) * 1048576.0);
  g_devices = env_int("CUEMU_DEVICES", 1);
}

/* ---- fibers ------------------------------------------------------------------------------ */

/* cuemu_swap(save, to): saves the callee-saved registers and the stack
 * pointer in *save, switches to the stack `to` and restores from there. */
extern "C" void cuemu_swap(void **save, void *to);
asm(R"(
  .text
  .globl cuemu_swap
  .type cuemu_swap,@function
cuemu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuemu_swap,.-cuemu_swap
)");

enum { F_RUN, F_BAR_BLOCK, F_BAR_WARP, F_DONE };

struct fiber {
  void *sp;
  int state;
  bool started;
  unsigned warp_mask; /* mask of the warp barrier it waits at */
  uint64_t shfl;      /* its published shuffle value */
  const void *pub;    /* its published pointer (WMMA) */
  uint3 tid;
};

#define STACK_BYTES (256u << 10)
#define GUARD_BYTES 4096u
#define MAX_THREADS 1024

uint3 cuemu_threadIdx, cuemu_blockIdx;
dim3 cuemu_blockDim, cuemu_gridDim;

static fiber g_fib[MAX_THREADS];
static char *g_stacks;
static void *g_sched_sp;
static int g_cur, g_nthreads;
static cuemu_work *g_work;
static const char *g_kernel;
static bool g_warned_exit_barrier;

static void fiber_main(void) {
  g_work->run();
  g_fib[g_cur].state = F_DONE;
  cuemu_swap(&g_fib[g_cur].sp, g_sched_sp);
  die("a finished fibre was resumed");
}

static void fiber_start(int i) {
  if (!g_stacks) {
    size_t per = STACK_BYTES + GUARD_BYTES;
    g_stacks = (char *)mmap(NULL, per * MAX_THREADS, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_stacks == MAP_FAILED)
      die("no memory for %d fibre stacks", MAX_THREADS);
    for (int k = 0; k < MAX_THREADS; k++)
      mprotect(g_stacks + (size_t)k * per, GUARD_BYTES, PROT_NONE); /* overflow guard */
  }
  char *top = g_stacks + (size_t)(i + 1) * (STACK_BYTES + GUARD_BYTES);
  void **sp = (void **)top;
  *--sp = NULL;                /* fiber_main's (never used) return address */
  *--sp = (void *)&fiber_main; /* popped by cuemu_swap's ret */
  for (int r = 0; r < 6; r++)
    *--sp = NULL; /* rbp rbx r12 r13 r14 r15 */
  g_fib[i].sp = sp;
  g_fib[i].started = true;
}

static void yield_as(int state) {
  g_fib[g_cur].state = state;
  cuemu_swap(&g_fib[g_cur].sp, g_sched_sp);
}

static unsigned warp_lanes(int w) { /* mask of the lanes that exist in warp w */
  int n = g_nthreads - 32 * w;
  return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

void cuemu_syncthreads(void) {
  if (!g_work)
    die("__syncthreads outside a kernel");
  yield_as(F_BAR_BLOCK);
}

void cuemu_syncwarp(unsigned mask) {
  if (!g_work)
    die("__syncwarp outside a kernel");
  g_fib[g_cur].warp_mask = mask;
  yield_as(F_BAR_WARP);
}

uint64_t cuemu_shfl(unsigned mask, uint64_t v, int src) {
  int lane = g_cur & 31, base = g_cur - lane;
  if (!(mask >> lane & 1u))
    die("%s: lane %d shuffles with mask %#x that leaves it out", g_kernel, lane, mask);
  if (!(mask >> src & 1u))
    die("%s: lane %d reads lane %d, outside the shuffle's mask %#x", g_kernel, lane, src, mask);
  g_fib[g_cur].shfl = v;
  cuemu_syncwarp(mask);
  uint64_t r = g_fib[base + src].shfl;
  cuemu_syncwarp(mask);
  return r;
}

void cuemu_warp_publish(const void *p) {
  g_fib[g_cur].pub = p;
}
const void *cuemu_warp_peer(int lane) {
  return g_fib[(g_cur & ~31) + lane].pub;
}

void cuemu_trap(const char *what) {
  die("%s in kernel %s, block (%u,%u,%u) thread (%u,%u,%u)", what, g_kernel, cuemu_blockIdx.x,
      cuemu_blockIdx.y, cuemu_blockIdx.z, cuemu_threadIdx.x, cuemu_threadIdx.y, cuemu_threadIdx.z);
}

static void describe_and_die(const char *why) {
  fprintf(stderr, "cuemu: %s: %s in block (%u,%u,%u); thread states:", g_kernel, why,
          cuemu_blockIdx.x, cuemu_blockIdx.y, cuemu_blockIdx.z);
  static const char *nm[] = {"run", "syncthreads", "warp-barrier", "exited"};
  for (int i = 0; i < g_nthreads; i++)
    if (i < 64 || g_fib[i].state != F_DONE)
      fprintf(stderr, " %d:%s", i, nm[g_fib[i].state]);
  fputc('\n', stderr);
  abort();
}

/* Releases warp w's lanes that wait at a warp barrier when every lane of
 * the barrier's mask is there. False when none could be released. */
static bool release_warp(int w) {
  int base = 32 * w;
  unsigned lanes = warp_lanes(w), waiting = 0, mask = 0;
  bool first = true;
  for (int l = 0; l < 32; l++) {
    if (!(lanes >> l & 1u) || g_fib[base + l].state != F_BAR_WARP)
      continue;
    if (first)
      mask = g_fib[base + l].warp_mask, first = false;
    else if (g_fib[base + l].warp_mask != mask)
      describe_and_die("lanes of one warp wait at warp barriers with different masks");
    waiting |= 1u << l;
  }
  if (!waiting)
    return false;
  if (mask & ~lanes)
    describe_and_die("a warp barrier or shuffle names lanes the block does not have");
  if ((waiting & mask) != mask)
    return false; /* some lanes of the mask are elsewhere */
  for (int l = 0; l < 32; l++)
    if (waiting >> l & 1u)
      g_fib[base + l].state = F_RUN;
  return true;
}

unsigned char *cuemu_dyn_smem;
static size_t g_dyn_bytes;

/* order[0..n) = 0..n-1, forward, reversed or shuffled (CUEMU_ORDER). */
static void make_order(int *order, int n) {
  for (int i = 0; i < n; i++)
    order[i] = g_order == 2 ? n - 1 - i : i;
  if (g_order == 0)
    for (int i = n - 1; i > 0; i--)
      std::swap(order[i],
                order[(size_t)(((unsigned __int128)rng_next() * (unsigned)(i + 1)) >> 64)]);
}

/* Runs warp w until each of its lanes has exited or waits at
 * __syncthreads; warp barriers and shuffles complete inside. Warps run one
 * after another between block barriers: a schedule the hardware may pick. */
static void run_warp(int w) {
  int base = 32 * w, n = g_nthreads - base < 32 ? g_nthreads - base : 32;
  int order[32];
  for (;;) {
    make_order(order, n);
    for (int k = 0; k < n; k++) {
      int i = base + order[k];
      if (g_fib[i].state != F_RUN)
        continue;
      if (!g_fib[i].started)
        fiber_start(i);
      g_cur = i;
      cuemu_threadIdx = g_fib[i].tid;
      cuemu_swap(&g_sched_sp, g_fib[i].sp);
    }
    bool at_warp = false;
    for (int k = 0; k < n; k++)
      at_warp |= g_fib[base + k].state == F_BAR_WARP;
    if (!at_warp)
      return;
    if (!release_warp(w))
      describe_and_die(
          "deadlock: a warp barrier or shuffle that some lanes of its mask never reach");
  }
}

static void run_block(void) {
  if (g_dyn_bytes)
    memset(cuemu_dyn_smem, 0xff, g_dyn_bytes); /* uninitialised shared memory reads as NaN */
  for (int i = 0; i < g_nthreads; i++) {
    fiber &f = g_fib[i];
    f.state = F_RUN;
    f.started = false;
    unsigned bx = cuemu_blockDim.x, by = cuemu_blockDim.y;
    f.tid = make_uint3(i % bx, (i / bx) % by, i / (bx * by));
  }
  int nwarps = (g_nthreads + 31) / 32, worder[MAX_THREADS / 32];
  for (;;) {
    make_order(worder, nwarps);
    for (int k = 0; k < nwarps; k++)
      run_warp(worder[k]);
    int done = 0;
    for (int i = 0; i < g_nthreads; i++)
      done += g_fib[i].state == F_DONE;
    if (done == g_nthreads)
      return;
    if (done && !g_warned_exit_barrier) {
      g_warned_exit_barrier = true;
      fprintf(stderr,
              "cuemu: warning: %s: __syncthreads reached after %d of %d threads exited (undefined "
              "behaviour in CUDA's model)\n",
              g_kernel, done, g_nthreads);
    }
    for (int i = 0; i < g_nthreads; i++)
      if (g_fib[i].state == F_BAR_BLOCK)
        g_fib[i].state = F_RUN;
  }
}

static void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, cuemu_work *w) {
  static std::vector<unsigned char> dyn;
  if (dyn.size() < smem + 128)
    dyn.resize(smem + 128);
  cuemu_dyn_smem = (unsigned char *)(((uintptr_t)dyn.data() + 127) & ~(uintptr_t)127);
  g_dyn_bytes = smem;
  g_kernel = name;
  g_work = w;
  g_warned_exit_barrier = false;
  cuemu_gridDim = grid;
  cuemu_blockDim = block;
  g_nthreads = (int)(block.x * block.y * block.z);
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        cuemu_blockIdx = make_uint3(x, y, z);
        run_block();
      }
  g_work = NULL;
}

/* ---- memory ---------------------------------------------------------------------------- */

static std::map<uintptr_t, size_t> g_dev, g_pinned; /* base -> bytes */
static size_t g_dev_used;

/* True when one allocation of `m` holds all of [p, p+n). */
static bool in_map(const std::map<uintptr_t, size_t> &m, const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  auto it = m.upper_bound(a);
  if (it == m.begin())
    return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}
static bool is_dev(const void *p, size_t n) {
  return in_map(g_dev, p, n);
}
static bool is_pinned(const void *p, size_t n) {
  return in_map(g_pinned, p, n);
}

/* ---- streams and events --------------------------------------------------------------- */

struct CUevent_st {
  uint64_t recorded = 0, done = 0; /* records enqueued, records completed */
  double t_ms = 0;
};

struct op {
  enum { KERNEL, COPY, SET, RECORD, WAIT, FN, COLL } kind;
  const char *name = "";
  dim3 grid, block;
  size_t smem = 0;
  cuemu_work *work = NULL;
  void *dst = NULL;
  const void *src = NULL;
  std::vector<unsigned char> staged; /* a pageable H2D source, copied at enqueue */
  size_t n = 0;
  int value = 0;
  CUevent_st *ev = NULL;
  uint64_t seq = 0;
  std::function<void()> fn;   /* FN: a cuBLASLt call */
  std::function<bool()> poll; /* COLL: a collective's progress (cuemu_nccl.cpp); true: it can
                                 run, i.e. land its result (fn) */
};

struct CUstream_st {
  std::deque<op *> q;
};
static CUstream_st g_default;
static std::vector<CUstream_st *> g_streams = {&g_default};
static cudaError_t g_last = cudaSuccess;

static CUstream_st *stream_of(cudaStream_t s) {
  return s ? (CUstream_st *)s : &g_default;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A collective at the head of its stream makes what progress its peers
 * allow each time it is looked at (cuemu_nccl.cpp); it can run (a no-op)
 * once it is complete. */
static bool g_coll_waiting; /* step() found a collective waiting for its peers */

static bool runnable(op *o) {
  if (o->kind == op::COLL) {
    if (o->poll())
      return true;
    g_coll_waiting = true;
    return false;
  }
  return o->kind != op::WAIT || o->ev->done >= o->seq;
}

static void execute(op *o) {
  switch (o->kind) {
  case op::KERNEL:
    run_grid(o->name, o->grid, o->block, o->smem, o->work);
    delete o->work;
    break;
  case op::COPY:
    memmove(o->dst, o->staged.empty() ? o->src : o->staged.data(), o->n);
    break;
  case op::SET:
    memset(o->dst, o->value, o->n);
    break;
  case op::RECORD:
    o->ev->done = o->seq;
    o->ev->t_ms = now_ms();
    break;
  case op::WAIT:
    break;
  case op::FN:
    o->fn();
    break;
  case op::COLL:
    o->fn();
    break;
  }
  delete o;
}

/* Runs one ready operation (the head of a random stream that has one).
 * False when none is ready. */
static bool step(void) {
  g_coll_waiting = false;
  /* a ready collective runs only when nothing else is ready: its result
   * lands as late as stream order allows (a transfer outlasts a kernel), so
   * a kernel that does not wait for it reads what was there before */
  std::vector<CUstream_st *> ready, colls;
  for (CUstream_st *s : g_streams)
    if (!s->q.empty() && runnable(s->q.front()))
      (s->q.front()->kind == op::COLL ? colls : ready).push_back(s);
  if (ready.empty())
    ready.swap(colls);
  if (ready.empty())
    return false;
  CUstream_st *s = ready[(size_t)(rng_next() % ready.size())];
  op *o = s->q.front();
  s->q.pop_front();
  execute(o);
  return true;
}

/* After a step() that ran nothing: true when a collective waits for its
 * peers (other processes), after a short sleep with the lock let go (an
 * abort from another thread may come); false when nothing can ever run. A
 * wait for a peer that never comes is a hang, as on a GPU. */
static bool wait_for_peers(void) {
  if (!g_coll_waiting)
    return false;
  g_mu.unlock();
  struct timespec ts = {0, 100 * 1000};
  nanosleep(&ts, NULL);
  g_mu.lock();
  return true;
}

static void drain_all(void) {
  for (;;) {
    while (step()) {
    }
    if (!wait_for_peers())
      break;
  }
  for (CUstream_st *s : g_streams)
    if (!s->q.empty())
      die("stream work left that can never run (a wait on an event that is never recorded)");
}

static void drain_stream(CUstream_st *s) {
  while (!s->q.empty())
    if (!step() && !wait_for_peers())
      die("stream work left that can never run");
}

static void drain_event(CUevent_st *e, uint64_t seq) {
  while (e->done < seq)
    if (!step() && !wait_for_peers())
      die("an event that can never complete");
}

static void enqueue(cudaStream_t st, op *o) {
  init_once();
  stream_of(st)->q.push_back(o);
  if (!g_lazy) /* eager: all that can run now (a collective may wait for its peers) */
    while (step()) {
    }
}

/* For cuemu_nccl.cpp: a collective on stream st; poll makes its progress and
 * says when it can run, land writes its result when it runs. */
void cuemu_enqueue_coll(cudaStream_t st, const char *name, std::function<bool()> poll,
                        std::function<void()> land) {
  LOCK;
  op *o = new op;
  o->kind = op::COLL;
  o->name = name;
  o->poll = std::move(poll);
  o->fn = std::move(land);
  enqueue(st, o);
}

/* For cuemu_nccl.cpp: dies unless [p, p+n) is inside one device allocation. */
void cuemu_check_dev(const void *p, size_t n, const char *what) {
  LOCK;
  if (!is_dev(p, n ? n : 1))
    die("%s: %zu bytes at %p are not inside a device allocation", what, n, p);
}

/* For cuemu_nccl.cpp: the lock of every entry point. */
std::recursive_mutex &cuemu_lock(void) {
  return g_mu;
}

static std::map<const void *, int> g_max_dyn; /* cudaFuncAttributeMaxDynamicSharedMemorySize */

void cuemu_enqueue_kernel(const char *name, const void *fn, const cuemu_cfg &cfg,
                          const void *const *ptrs, int nptrs, cuemu_work *w) {
  LOCK;
  init_once();
  const dim3 g = cfg.grid, b = cfg.block;
  uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 ||
      g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    fprintf(stderr, "cuemu: %s: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n", name, g.x, g.y,
            g.z, b.x, b.y, b.z);
    g_last = cudaErrorInvalidConfiguration;
    delete w;
    return;
  }
  size_t allowed = 48u << 10;
  if (g_max_dyn.count(fn))
    allowed = (size_t)g_max_dyn[fn];
  if (cfg.smem > allowed) {
    fprintf(stderr,
            "cuemu: %s: %zu bytes of dynamic shared memory, above the %zu allowed (raise it with "
            "cudaFuncSetAttribute)\n",
            name, cfg.smem, allowed);
    g_last = cudaErrorInvalidValue;
    delete w;
    return;
  }
  for (int i = 0; i < nptrs; i++)
    if (ptrs[i] && !is_dev(ptrs[i], 0))
      die("%s: pointer argument %d (%p) is not device memory", name, i, ptrs[i]);
  if (cfg.st &&
      std::find(g_streams.begin(), g_streams.end(), (CUstream_st *)cfg.st) == g_streams.end())
    die("%s: launched on a stream that does not exist", name);
  op *o = new op;
  o->kind = op::KERNEL;
  o->name = name;
  o->grid = g;
  o->block = b;
  o->smem = cfg.smem;
  o->work = w;
  enqueue(cfg.st, o);
}

/* ---- the runtime API --------------------------------------------------------------------- */

extern "C" {

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION; /* the headers cuemu is compiled against */
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n) {
  init_once();
  *n = g_devices;
  return cudaSuccess;
}
static int g_cur_dev; /* this process's current device (one model of memory for all) */
cudaError_t cudaSetDevice(int d) {
  init_once();
  if (d < 0 || d >= g_devices)
    return cudaErrorInvalidDevice;
  g_cur_dev = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
  *d = g_cur_dev;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
  init_once();
  if (d < 0 || d >= g_devices)
    return cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "cuemu (CUDA on the CPU)");
  p->totalGlobalMem = g_mem_limit;
  p->multiProcessorCount = 4;
  p->major = 9;
  p->minor = 0;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->pciBusID = 0x10 + d;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *pci, int len, int d) {
  init_once();
  if (d < 0 || d >= g_devices)
    return cudaErrorInvalidDevice;
  snprintf(pci, (size_t)len, "0000:%02X:00.0", 0x10 + d);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  LOCK;
  init_once();
  *free_b = g_mem_limit - g_dev_used;
  *total = g_mem_limit;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  LOCK;
  init_once();
  *p = NULL;
  if (g_dev_used + n > g_mem_limit)
    return g_last = cudaErrorMemoryAllocation;
  void *m = NULL;
  if (posix_memalign(&m, 256, n ? n : 1))
    return g_last = cudaErrorMemoryAllocation;
  memset(m, 0xff, n); /* uninitialised device memory reads as NaN */
  g_dev[(uintptr_t)m] = n;
  g_dev_used += n;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  LOCK;
  if (!p)
    return cudaSuccess;
  drain_all(); /* cudaFree waits for the device */
  auto it = g_dev.find((uintptr_t)p);
  if (it == g_dev.end())
    die("cudaFree of %p, which is not the start of a device allocation", p);
  g_dev_used -= it->second;
  g_dev.erase(it);
  free(p);
  return cudaSuccess;
}
/* Stream-ordered allocation: the memory at once, its release in stream order. */
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
  return cudaMalloc(p, n);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t st) {
  LOCK;
  if (!p)
    return cudaSuccess;
  if (g_dev.find((uintptr_t)p) == g_dev.end())
    die("cudaFreeAsync of %p, which is not the start of a device allocation", p);
  op *o = new op;
  o->kind = op::FN;
  o->name = "cudaFreeAsync";
  o->fn = [p]() {
    auto it = g_dev.find((uintptr_t)p);
    g_dev_used -= it->second;
    g_dev.erase(it);
    free(p);
  };
  enqueue(st, o);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int) {
  LOCK;
  void *m = NULL;
  if (posix_memalign(&m, 4096, n ? n : 1))
    return g_last = cudaErrorMemoryAllocation;
  memset(m, 0xff, n);
  g_pinned[(uintptr_t)m] = n;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
  return cudaHostAlloc(p, n, 0);
}
cudaError_t cudaFreeHost(void *p) {
  LOCK;
  if (!p)
    return cudaSuccess;
  drain_all();
  auto it = g_pinned.find((uintptr_t)p);
  if (it == g_pinned.end())
    die("cudaFreeHost of %p, which is not a pinned allocation", p);
  g_pinned.erase(it);
  free(p);
  return cudaSuccess;
}

/* Checks a copy's two sides against its kind. */
static void check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k, const char *what) {
  bool dd = is_dev(dst, n), sd = is_dev(src, n);
  bool ok = k == cudaMemcpyHostToDevice     ? dd && !is_dev(src, 1)
            : k == cudaMemcpyDeviceToHost   ? sd && !is_dev(dst, 1)
            : k == cudaMemcpyDeviceToDevice ? dd && sd
            : k == cudaMemcpyDefault        ? true
                                            : !is_dev(dst, 1) && !is_dev(src, 1);
  if (!ok)
    die("%s of %zu bytes, kind %d: dst %p (device: %d) src %p (device: %d) do not match the kind "
        "or leave their allocation",
        what, n, (int)k, dst, (int)dd, src, (int)sd);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
  LOCK;
  init_once();
  if (!n)
    return cudaSuccess;
  check_copy(dst, src, n, k, "cudaMemcpy");
  drain_all(); /* legacy default stream: after all earlier work */
  memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                            cudaStream_t st) {
  LOCK;
  init_once();
  if (!n)
    return cudaSuccess;
  check_copy(dst, src, n, k, "cudaMemcpyAsync");
  op *o = new op;
  o->kind = op::COPY;
  o->dst = dst;
  o->src = src;
  o->n = n;
  bool pageable_src = k == cudaMemcpyHostToDevice && !is_pinned(src, n);
  bool pageable_dst = k == cudaMemcpyDeviceToHost && !is_pinned(dst, n);
  if (pageable_src) /* staged before the call returns, as CUDA does */
    o->staged.assign((const unsigned char *)src, (const unsigned char *)src + n);
  enqueue(st, o);
  if (pageable_dst) /* returns once the copy is done, as CUDA does */
    drain_stream(stream_of(st));
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t st) {
  LOCK;
  if (!n)
    return cudaSuccess;
  if (!is_dev(dst, n))
    die("cudaMemsetAsync of %zu bytes at %p: not inside a device allocation", n, dst);
  op *o = new op;
  o->kind = op::SET;
  o->dst = dst;
  o->n = n;
  o->value = value;
  enqueue(st, o);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int value, size_t n) {
  LOCK;
  cudaError_t e = cudaMemsetAsync(dst, value, n, 0);
  drain_all();
  return e;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) {
  LOCK;
  CUstream_st *st = new CUstream_st;
  g_streams.push_back(st);
  *s = st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  return cudaStreamCreateWithFlags(s, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  LOCK;
  CUstream_st *st = stream_of(s);
  drain_stream(st); /* the work already queued completes */
  g_streams.erase(std::find(g_streams.begin(), g_streams.end(), st));
  if (st != &g_default)
    delete st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  LOCK;
  drain_stream(stream_of(s));
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  LOCK;
  (void)step(); /* a poll lets the device make progress */
  return stream_of(s)->q.empty() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  LOCK;
  if (e->recorded == e->done)
    return cudaSuccess; /* nothing outstanding to wait for */
  op *o = new op;
  o->kind = op::WAIT;
  o->ev = e;
  o->seq = e->recorded;
  enqueue(s, o);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  LOCK;
  drain_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  LOCK;
  drain_event(e, e->recorded); /* queued records of it still point at it */
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  LOCK;
  op *o = new op;
  o->kind = op::RECORD;
  o->ev = e;
  o->seq = ++e->recorded;
  enqueue(s, o);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  LOCK;
  drain_event(e, e->recorded);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  LOCK;
  if (e->done < e->recorded)
    (void)step();
  return e->done >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  LOCK;
  if (a->done < a->recorded || b->done < b->recorded || !a->done || !b->done)
    return cudaErrorNotReady;
  *ms = (float)(b->t_ms - a->t_ms);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *fn, enum cudaFuncAttribute a, int v) {
  LOCK;
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (v < 0 || v > (227 << 10))
      return g_last = cudaErrorInvalidValue;
    g_max_dyn[fn] = v;
  }
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  LOCK;
  cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  LOCK;
  return g_last;
}
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration:
    return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  default:
    return "cudaError (cuemu)";
  }
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorNotReady:
    return "device not ready";
  default:
    return "error (cuemu)";
  }
}

} /* extern "C" */

/* ---- cuBLASLt ------------------------------------------------------------------------------ */

/* What cuemu keeps of each descriptor (the opaque structs are only sized
 * storage to cuBLASLt's users, so ours live inside them). */
struct lt_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t ta, tb;
  uint32_t epi;
  int32_t bias_type, aux_type;
  const void *bias, *aux;
  int64_t aux_ld;
};
struct lt_layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "lt_desc too big");
static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "lt_layout too big");

static float gelu_tanh(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  float u = k * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
static float dgelu_tanh(float x) {
  const float k = 0.7978845608028654f;
  float u = k * (x + 0.044715f * x * x * x), t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

static float load(cudaDataType_t t, const void *p, size_t i) {
  if (t == CUDA_R_32F)
    return ((const float *)p)[i];
  return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}
static void store(cudaDataType_t t, void *p, size_t i, float v) {
  if (t == CUDA_R_32F)
    ((float *)p)[i] = v;
  else
    ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}
static size_t tsize(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

template <class T> static cublasStatus_t set_attr(T *field, const void *buf, size_t n) {
  if (n != sizeof(T))
    return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(field, buf, n);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

size_t cublasLtGetVersion(void) {
  return 0; /* cuemu: no cuBLASLt; its matmul is the documented arithmetic */
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = (cublasLtHandle_t) new char[1];
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete[](char *) h;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasLtGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR (cuemu)";
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "error (cuemu)";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
                                        cudaDataType_t scale) {
  auto *o = new cublasLtMatmulDescOpaque_t();
  lt_desc *x = (lt_desc *)o;
  memset(x, 0, sizeof *x);
  x->compute = ct;
  x->scale = scale;
  x->ta = x->tb = CUBLAS_OP_N;
  x->epi = CUBLASLT_EPILOGUE_DEFAULT;
  x->bias_type = x->aux_type = -1;
  *d = o;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
  lt_desc *x = (lt_desc *)d;
  switch (a) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return set_attr(&x->ta, buf, n);
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return set_attr(&x->tb, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return set_attr(&x->epi, buf, n);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return set_attr(&x->bias, buf, n);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return set_attr(&x->bias_type, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    return set_attr(&x->aux, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    return set_attr(&x->aux_ld, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
    return set_attr(&x->aux_type, buf, n);
  default:
    die("cublasLtMatmulDescSetAttribute: attribute %d is not modelled", (int)a);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  auto *o = new cublasLtMatrixLayoutOpaque_t();
  lt_layout *x = (lt_layout *)o;
  x->type = t;
  x->rows = rows;
  x->cols = cols;
  x->ld = ld;
  if (ld < (int64_t)rows)
    return CUBLAS_STATUS_INVALID_VALUE;
  *l = o;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

/* The checks cuBLASLt makes (or that its documentation states) for the
 * subset of calls the project makes; NULL when the call is valid. */
static const char *lt_invalid(const lt_desc *x, const lt_layout *a, const lt_layout *b,
                              const lt_layout *c, const lt_layout *d, uint64_t *m, uint64_t *n,
                              uint64_t *k) {
  if (x->compute != CUBLAS_COMPUTE_32F || x->scale != CUDA_R_32F)
    return "compute type must be CUBLAS_COMPUTE_32F with fp32 scale (as modelled)";
  if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF)
    return "A and B must be bf16 (as modelled)";
  if (c->type != d->type || (d->type != CUDA_R_16BF && d->type != CUDA_R_32F))
    return "C and D must have one type, bf16 or fp32";
  *m = x->ta == CUBLAS_OP_N ? a->rows : a->cols;
  *k = x->ta == CUBLAS_OP_N ? a->cols : a->rows;
  uint64_t kb = x->tb == CUBLAS_OP_N ? b->rows : b->cols;
  *n = x->tb == CUBLAS_OP_N ? b->cols : b->rows;
  if (kb != *k)
    return "op(A) columns differ from op(B) rows";
  if (c->rows != *m || c->cols != *n || d->rows != *m || d->cols != *n)
    return "C or D is not m x n";
  bool bias = x->epi == CUBLASLT_EPILOGUE_BIAS || x->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool aux = x->epi == CUBLASLT_EPILOGUE_GELU_AUX || x->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
             x->epi == CUBLASLT_EPILOGUE_DGELU;
  if (!bias && !aux && x->epi != CUBLASLT_EPILOGUE_DEFAULT)
    return "epilogue not modelled";
  if (bias && x->bias_type != -1 && x->bias_type != (int32_t)d->type)
    return "bias type differs from D's (as modelled)";
  if (aux && (x->aux_ld < (int64_t)*m || x->aux_ld % 8))
    return "EPILOGUE_AUX_LD must be >= the rows of D and divisible by 8";
  return NULL;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *found) {
  uint64_t m, n, k;
  const char *why = lt_invalid((lt_desc *)d, (lt_layout *)a, (lt_layout *)b, (lt_layout *)c,
                               (lt_layout *)dl, &m, &n, &k);
  if (why)
    die("cublasLtMatmulAlgoGetHeuristic: %s", why);
  *found = 0;
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  memset(res, 0, sizeof *res);
  res->state = CUBLAS_STATUS_SUCCESS;
  res->wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t st) {
  LOCK;
  init_once();
  const lt_desc x = *(lt_desc *)desc;
  const lt_layout a = *(lt_layout *)Adesc, b = *(lt_layout *)Bdesc, c = *(lt_layout *)Cdesc,
                  d = *(lt_layout *)Ddesc;
  uint64_t m, n, k;
  const char *why = lt_invalid(&x, &a, &b, &c, &d, &m, &n, &k);
  if (why)
    die("cublasLtMatmul: %s", why);
  const float al = *(const float *)alpha, be = *(const float *)beta;
  bool has_bias = x.epi == CUBLASLT_EPILOGUE_BIAS || x.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool gelu_fwd = x.epi == CUBLASLT_EPILOGUE_GELU_AUX || x.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool dgelu = x.epi == CUBLASLT_EPILOGUE_DGELU;
  /* every operand inside its device allocation */
  struct {
    bool used;
    const void *p;
    size_t bytes;
    const char *what;
  } span[] = {
      {true, A, (size_t)((a.cols - 1) * a.ld + a.rows) * 2, "A"},
      {true, B, (size_t)((b.cols - 1) * b.ld + b.rows) * 2, "B"},
      {be != 0.0f, C, (size_t)((c.cols - 1) * c.ld + c.rows) * tsize(c.type), "C"},
      {true, D, (size_t)((d.cols - 1) * d.ld + d.rows) * tsize(d.type), "D"},
      {has_bias, x.bias, (size_t)m * tsize(d.type), "bias"},
      {gelu_fwd || dgelu, x.aux, (size_t)((n - 1) * x.aux_ld + m) * tsize(d.type), "aux"},
  };
  for (auto &s : span)
    if (s.used && !is_dev(s.p, s.bytes))
      die("cublasLtMatmul: %s (%p, %zu bytes) is not inside a device allocation", s.what, s.p,
          s.bytes);
  op *o = new op;
  o->kind = op::FN;
  o->fn = [=]() {
    /* op(A) as m rows of k floats, op(B)^T as n rows of k floats: every
     * dot product then reads two contiguous rows. Eight partial sums per
     * dot product, added in a fixed order: deterministic, like cuBLASLt's
     * fixed algorithm, though not its order. */
    std::vector<float> ra((size_t)(m * k)), rb((size_t)(n * k));
    for (uint64_t i = 0; i < m; i++)
      for (uint64_t p = 0; p < k; p++)
        ra[(size_t)(i * k + p)] = __bfloat162float(
            ((const __nv_bfloat16 *)
                 A)[x.ta == CUBLAS_OP_N ? i + p * (uint64_t)a.ld : p + i * (uint64_t)a.ld]);
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t p = 0; p < k; p++)
        rb[(size_t)(j * k + p)] = __bfloat162float(
            ((const __nv_bfloat16 *)
                 B)[x.tb == CUBLAS_OP_N ? p + j * (uint64_t)b.ld : j + p * (uint64_t)b.ld]);
    for (uint64_t j = 0; j < n; j++) {
      const float *bj = &rb[(size_t)(j * k)];
      for (uint64_t i = 0; i < m; i++) {
        const float *ai = &ra[(size_t)(i * k)];
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint64_t p = 0;
        for (; p + 8 <= k; p += 8)
          for (int q = 0; q < 8; q++)
            part[q] += ai[p + q] * bj[p + q];
        for (; p < k; p++)
          part[p % 8] += ai[p] * bj[p];
        float acc = ((part[0] + part[1]) + (part[2] + part[3])) +
                    ((part[4] + part[5]) + (part[6] + part[7]));
        float v = al * acc;
        if (be != 0.0f)
          v += be * load(c.type, C, i + j * (uint64_t)c.ld);
        if (has_bias)
          v += load(d.type, x.bias, i);
        if (gelu_fwd) {
          store(d.type, (void *)x.aux, i + j * (uint64_t)x.aux_ld, v);
          v = gelu_tanh(v);
        } else if (dgelu) {
          v *= dgelu_tanh(load(d.type, x.aux, i + j * (uint64_t)x.aux_ld));
        }
        store(d.type, D, i + j * (uint64_t)d.ld, v);
      }
    }
  };
  enqueue(st, o);
  return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
