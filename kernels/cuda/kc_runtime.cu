/*
 * kc_runtime: devices, memory, copies, streams, events and timers for the
 * CUDA kernels, and the single place where a cudaError_t becomes an FT_E*
 * code (kc__err).
 *
 * Why: the rest of the project sees CUDA only through kernels_cuda.h, as
 * plain pointers and opaque handles; this file is the thin, checked wrapper
 * around the CUDA runtime calls behind them.
 *
 * Failure model:
 *  - kc_device_count never fails: no driver, no device or a driver too old
 *    all read as 0 devices (the runtime's error is cleared);
 *  - an allocation that fails for lack of memory (device or pinned host) is
 *    FT_ENOMEM, so the trainer can retry with a smaller micro-batch;
 *  - every other runtime error is FT_ECUDA with "what: name: message" in
 *    ft_err_detail(). kc__err also clears the runtime's last-error state, so
 *    a recoverable error (an allocation failure) is not reported again by
 *    the next launch check; sticky errors (a kernel fault) keep failing
 *    every later call, as CUDA does.
 *
 * Threading: as the CUDA runtime's (any host thread; the current device is
 * per thread, see kc_set_device).
 */
#include "kc_int.h"

#include <stdio.h>
#include <string.h>

int kc__err(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return FT_OK;
  (void)cudaGetLastError(); /* clear the last-error state (sticky errors stay) */
  int code = e == cudaErrorMemoryAllocation ? FT_ENOMEM : FT_ECUDA;
  return ft_err_set(code, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- devices ------------------------------------------------------------------ */

extern "C" int kc_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver / no device: not an error here */
    return 0;
  }
  return n;
}

extern "C" int kc_set_device(int dev) {
  return kc__err(cudaSetDevice(dev), "cudaSetDevice");
}

extern "C" int kc_device_info(int dev, char *name, size_t namelen, size_t *mem_total, int *sms,
                              int *cc_major, int *cc_minor) {
  cudaDeviceProp p;
  int rc = kc__err(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  if (rc)
    return rc;
  if (name && namelen > 0) {
    size_t n = strnlen(p.name, sizeof p.name);
    if (n >= namelen)
      n = namelen - 1;
    memcpy(name, p.name, n);
    name[n] = '\0';
  }
  if (mem_total)
    *mem_total = p.totalGlobalMem;
  if (sms)
    *sms = p.multiProcessorCount;
  if (cc_major)
    *cc_major = p.major;
  if (cc_minor)
    *cc_minor = p.minor;
  return FT_OK;
}

extern "C" int kc_device_pci(int dev, char *pci, size_t len) {
  if (!pci || len < 13)
    return ft_err_set(FT_EINVAL, "kc_device_pci: buffer of %zu bytes (13 needed)", len);
  return kc__err(cudaDeviceGetPCIBusId(pci, (int)len, dev), "cudaDeviceGetPCIBusId");
}

extern "C" int kc_mem_info(size_t *free_bytes, size_t *total_bytes) {
  size_t f = 0, t = 0;
  int rc = kc__err(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
  if (rc)
    return rc;
  if (free_bytes)
    *free_bytes = f;
  if (total_bytes)
    *total_bytes = t;
  return FT_OK;
}

/* ---- memory -------------------------------------------------------------------- */

extern "C" int kc_malloc(void **d_ptr, size_t bytes) {
  *d_ptr = NULL;
  if (bytes == 0)
    return FT_OK;
  void *p = NULL;
  int rc = kc__err(cudaMalloc(&p, bytes), "cudaMalloc");
  if (rc)
    return rc;
  *d_ptr = p;
  return FT_OK;
}

extern "C" int kc_free(void *d_ptr) {
  if (!d_ptr)
    return FT_OK;
  return kc__err(cudaFree(d_ptr), "cudaFree");
}

extern "C" int kc_host_alloc(void **h_ptr, size_t bytes) {
  *h_ptr = NULL;
  if (bytes == 0)
    return FT_OK;
  void *p = NULL;
  int rc = kc__err(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  if (rc)
    return rc;
  *h_ptr = p;
  return FT_OK;
}

extern "C" void kc_host_free(void *h_ptr) {
  if (h_ptr)
    (void)kc__err(cudaFreeHost(h_ptr), "cudaFreeHost");
}

extern "C" int kc_memcpy_h2d(void *d_dst, const void *h_src, size_t bytes) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemcpy(d_dst, h_src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

extern "C" int kc_memcpy_d2h(void *h_dst, const void *d_src, size_t bytes) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemcpy(h_dst, d_src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

extern "C" int kc_memcpy_h2d_async(void *d_dst, const void *h_src, size_t bytes, kc_stream s) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemcpyAsync(d_dst, h_src, bytes, cudaMemcpyHostToDevice, kc__st(s)),
                 "cudaMemcpyAsync H2D");
}

extern "C" int kc_memcpy_d2h_async(void *h_dst, const void *d_src, size_t bytes, kc_stream s) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemcpyAsync(h_dst, d_src, bytes, cudaMemcpyDeviceToHost, kc__st(s)),
                 "cudaMemcpyAsync D2H");
}

extern "C" int kc_memcpy_d2d_async(void *d_dst, const void *d_src, size_t bytes, kc_stream s) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, kc__st(s)),
                 "cudaMemcpyAsync D2D");
}

extern "C" int kc_memset_async(void *d_dst, int byte, size_t bytes, kc_stream s) {
  if (bytes == 0)
    return FT_OK;
  return kc__err(cudaMemsetAsync(d_dst, byte, bytes, kc__st(s)), "cudaMemsetAsync");
}

/* ---- synchronisation ----------------------------------------------------------- */

extern "C" int kc_sync(void) {
  return kc__err(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

/* A kernel that never finishes: one thread waiting for a device word that
 * nothing ever writes (volatile: read again on every pass). */
__global__ void stall_kernel(volatile int *flag) {
  while (*flag == 0) {
  }
}

extern "C" int kc_stall(kc_stream s) {
  int *flag = NULL; /* never freed: the kernel reads it for ever */
  int rc = kc__err(cudaMalloc((void **)&flag, sizeof *flag), "cudaMalloc (stall)");
  if (rc)
    return rc;
  rc = kc__err(cudaMemsetAsync(flag, 0, sizeof *flag, kc__st(s)), "cudaMemsetAsync (stall)");
  if (rc)
    return rc;
  stall_kernel<<<1, 1, 0, kc__st(s)>>>(flag);
  return KC_LAUNCHED("stall");
}

extern "C" int kc_check(void) {
  /* A recorded (launch or sticky) error first; then a non-blocking query of
   * the legacy stream, which reports a kernel fault raised so far. "Not
   * ready" only means work is still running. */
  cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess)
    return kc__err(e, "kc_check");
  e = cudaStreamQuery(0);
  if (e == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady)
      (void)cudaGetLastError();
    return FT_OK;
  }
  return kc__err(e, "kc_check");
}

/* ---- streams and events ---------------------------------------------------------- */

extern "C" int kc_stream_new(kc_stream *out) {
  *out = NULL;
  cudaStream_t st = NULL;
  int rc = kc__err(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  if (rc)
    return rc;
  *out = reinterpret_cast<kc_stream>(st);
  return FT_OK;
}

extern "C" void kc_stream_free(kc_stream s) {
  if (s)
    (void)kc__err(cudaStreamDestroy(kc__st(s)), "cudaStreamDestroy");
}

extern "C" int kc_stream_sync(kc_stream s) {
  return kc__err(cudaStreamSynchronize(kc__st(s)), "cudaStreamSynchronize");
}

static int event_new(kc_event *out, unsigned flags) {
  *out = NULL;
  cudaEvent_t ev = NULL;
  int rc = kc__err(cudaEventCreateWithFlags(&ev, flags), "cudaEventCreate");
  if (rc)
    return rc;
  *out = reinterpret_cast<kc_event>(ev);
  return FT_OK;
}

static inline cudaEvent_t ev_of(kc_event e) {
  return reinterpret_cast<cudaEvent_t>(e);
}

extern "C" int kc_event_new(kc_event *out) {
  return event_new(out, cudaEventDisableTiming);
}

extern "C" int kc_timer_new(kc_event *out) {
  return event_new(out, cudaEventDefault);
}

extern "C" void kc_event_free(kc_event e) {
  if (e)
    (void)kc__err(cudaEventDestroy(ev_of(e)), "cudaEventDestroy");
}

extern "C" int kc_event_record(kc_event e, kc_stream s) {
  return kc__err(cudaEventRecord(ev_of(e), kc__st(s)), "cudaEventRecord");
}

extern "C" int kc_stream_wait(kc_stream s, kc_event e) {
  return kc__err(cudaStreamWaitEvent(kc__st(s), ev_of(e), 0), "cudaStreamWaitEvent");
}

extern "C" int kc_event_sync(kc_event e) {
  return kc__err(cudaEventSynchronize(ev_of(e)), "cudaEventSynchronize");
}

extern "C" int kc_event_query(kc_event e) {
  cudaError_t r = cudaEventQuery(ev_of(e));
  if (r == cudaSuccess)
    return 1;
  if (r == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady)
      (void)cudaGetLastError();
    return 0;
  }
  return kc__err(r, "cudaEventQuery");
}

extern "C" int kc_timer_ms(kc_event start, kc_event stop, float *ms) {
  return kc__err(cudaEventElapsedTime(ms, ev_of(start), ev_of(stop)), "cudaEventElapsedTime");
}

extern "C" int kc_versions(char *buf, size_t len) {
  int rt = 0;
  int rc = kc__err(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
  if (rc)
    return rc;
  snprintf(buf, len, "CUDA %d.%d, cuBLASLt %zu", rt / 1000, (rt % 1000) / 10,
           (size_t)cublasLtGetVersion());
  return FT_OK;
}
