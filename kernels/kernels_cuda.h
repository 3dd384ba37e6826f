/*
 * kernels_cuda: the CUDA implementation of the kernels, behind a pure C
 * interface (no CUDA header is included; device memory is a plain pointer).
 *
 * This is the foundation the CUDA trainer grows from: device management,
 * memory, and fp32 device kernels mirroring their CPU counterparts in
 * kernels.h (same shapes and semantics; see there). Results agree with the
 * CPU kernels within float rounding, not bit for bit (different reduction
 * trees, fused multiply-adds, device math functions).
 *
 * Pointers named d_* (and every array argument of a kernel) are DEVICE
 * pointers from kc_malloc; h_* are host pointers. All borrowed.
 *
 * Errors: every function returns FT_OK (0) or FT_ECUDA, with the CUDA error
 * name and message recorded through ft_err_set (ft_err_detail()). Kernels
 * are launched asynchronously on the default stream of the current device:
 * a kernel's return value reports launch errors; errors raised while it
 * runs surface at the next kc_sync or copy. kc_memcpy_* are synchronous.
 *
 * Threading: as CUDA's runtime; calls from one host thread are ordered.
 */
#ifndef KERNELS_CUDA_H
#define KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no GPU, no driver, or the
 * driver is too old. Never fails, never aborts. */
int kc_device_count(void);

/* *d_ptr = bytes of device memory (uninitialised); on failure *d_ptr = NULL. */
int kc_malloc(void **d_ptr, size_t bytes);
/* Frees device memory from kc_malloc; NULL is a no-op. */
int kc_free(void *d_ptr);
int kc_memcpy_h2d(void *d_dst, const void *h_src, size_t bytes);
int kc_memcpy_d2h(void *h_dst, const void *d_src, size_t bytes);
/* Waits for all work on the current device; reports asynchronous errors. */
int kc_sync(void);

/* As k_encoder_fwd. inp: device int32 (B,T). */
int kc_encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                   int C);
/* As k_gelu_fwd / k_gelu_bwd (dinp +=). */
int kc_gelu_fwd(float *out, const float *inp, size_t n);
int kc_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n);
/* As k_residual_fwd. */
int kc_residual_fwd(float *out, const float *a, const float *b, size_t n);
/* As k_adamw (bias corrections computed on the host in double, as on CPU). */
int kc_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
             float beta2, float eps, float wd, int64_t t);
/* As k_layernorm_fwd: one warp per row, fixed reduction order
 * (deterministic, no atomics). */
int kc_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, int N, int C);

#ifdef __cplusplus
}
#endif
#endif
