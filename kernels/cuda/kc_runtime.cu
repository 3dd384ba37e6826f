/*
 * kc_runtime: device discovery, memory and synchronisation for the CUDA
 * kernels, and the single place where cudaError_t becomes FT_ECUDA.
 *
 * kc_device_count must be safe on machines without a GPU or driver: the
 * runtime then returns an error from cudaGetDeviceCount, which is cleared
 * and reported as 0 devices.
 */
#include "kernels_cuda.h"
#include "kc_int.h"

extern "C" {
#include "ft_err.h"
}

int kc__err(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return FT_OK;
  return ft_err_set(FT_ECUDA, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" int kc_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the (non-sticky) error */
    return 0;
  }
  return n;
}

extern "C" int kc_malloc(void **d_ptr, size_t bytes) {
  *d_ptr = NULL;
  int rc = kc__err(cudaMalloc(d_ptr, bytes), "cudaMalloc");
  if (rc)
    *d_ptr = NULL;
  return rc;
}

extern "C" int kc_free(void *d_ptr) {
  if (!d_ptr)
    return FT_OK;
  return kc__err(cudaFree(d_ptr), "cudaFree");
}

extern "C" int kc_memcpy_h2d(void *d_dst, const void *h_src, size_t bytes) {
  return kc__err(cudaMemcpy(d_dst, h_src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

extern "C" int kc_memcpy_d2h(void *h_dst, const void *d_src, size_t bytes) {
  return kc__err(cudaMemcpy(h_dst, d_src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

extern "C" int kc_sync(void) {
  return kc__err(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
