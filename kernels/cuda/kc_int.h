/* kc_int: internals shared by the CUDA sources (C++ / CUDA only). */
#ifndef KC_INT_H
#define KC_INT_H

#include <cuda_runtime.h>

/* The one translation of cudaError_t into the project's error space:
 * FT_OK for cudaSuccess, else FT_ECUDA with "what: name: message" recorded
 * by ft_err_set. */
int kc__err(cudaError_t e, const char *what);

/* Launch-error check after a kernel launch. */
#define KC_LAUNCHED(what) kc__err(cudaGetLastError(), what)

#endif
