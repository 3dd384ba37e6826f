/*
 * kc_matmul: the Linear layer (out = inp @ w^T + bias, w (OC,C) as in
 * PyTorch) and its backward, through cuBLASLt with bf16 operands and fp32
 * accumulation (CUBLAS_COMPUTE_32F, fp32 alpha/beta).
 *
 * Row-major to column-major. cuBLAS reads a row-major (R,K) array as the
 * column-major (K,R) matrix with leading dimension K, i.e. as its
 * transpose. So every product is computed transposed:
 *
 *   forward   out (N,OC) = inp (N,C) @ w^T
 *             <=>  out^T (OC,N) = w (OC,C) @ inp^T (C,N)       [col-major]
 *             A = w    stored col-major (C,OC), ld C,  op T -> (OC,C)
 *             B = inp  stored col-major (C,N),  ld C,  op N
 *             D = out  col-major (OC,N), ld OC;  m = OC, n = N, k = C
 *             bias (OC) is cuBLASLt's per-row-of-D bias (= per column of
 *             the row-major out); pre_gelu, the GELU aux, is laid out as D
 *             (AUX_LD = OC).
 *   dinp      dinp (N,C) = dout (N,OC) @ w (OC,C)
 *             <=>  dinp^T (C,N) = w^T (C,OC) @ dout^T (OC,N)
 *             A = w    stored col-major (C,OC), ld C,  op N
 *             B = dout stored col-major (OC,N), ld OC, op N
 *             D = dinp col-major (C,N), ld C;  m = C, n = N, k = OC
 *             DGELU epilogue: D = (A B) * gelu'(aux), aux = dgelu_pre laid
 *             out as D (AUX_LD = C).
 *   dw        dw (OC,C) += dout^T (OC,N) @ inp (N,C)
 *             <=>  dw^T (C,OC) += inp^T (C,N) @ dout (N,OC)
 *             A = inp  stored col-major (C,N),  ld C,  op N
 *             B = dout stored col-major (OC,N), ld OC, op T -> (N,OC)
 *             C = D = dw, fp32, col-major (C,OC), ld C, beta = 1;
 *             m = C, n = OC, k = N
 *   dbias     column sums of dout by kc__colsum (fixed tree, fp32 +=), not
 *             a cuBLASLt BGRAD epilogue (its reduction order is not ours
 *             to fix, and it would overwrite instead of accumulate).
 *
 * Shape and alignment constraints (FT_EINVAL otherwise):
 *  - C % 8 == 0 and OC % 8 == 0: every leading dimension (C, OC in bf16
 *    elements) must be a multiple of 16 bytes for the tensor-core kernels,
 *    and cuBLASLt requires the GELU aux leading dimension (OC forward, C
 *    backward) to be a multiple of 8;
 *  - every pointer (inp, w, bias, out, pre_gelu, dout, dinp, dgelu_pre, dw)
 *    16-byte aligned. The algorithm is chosen with the minimum-alignment
 *    preferences set to 16 bytes and with probe bias/aux pointers that are
 *    exactly 16-byte aligned (cublasLtMatmulAlgoGetHeuristic reads the
 *    alignment of those pointers without dereferencing them), so the
 *    cached algorithm is valid for any 16-byte aligned buffers;
 *  - N >= 0 (N == 0: nothing to do), C, OC > 0, all below 2^31.
 *
 * Determinism: the algorithm is picked by cublasLtMatmulAlgoGetHeuristic
 * once per (kind, m, n, k, epilogue) and cached in the kc_ctx, and the
 * workspace is the context's own: cuBLAS documents bit-wise reproducible
 * results for a given toolkit version, GPU architecture and SM count under
 * those conditions (its split-K reduction schemes are sequential: in place
 * with ordering counters, or a separate reduction pass). dbias uses
 * kc__colsum, not an epilogue.
 */
#include "kc_int.h"

#include <string.h>

static const float kOne = 1.0f, kZero = 0.0f;

#define BLAS(call, what)                                                                           \
  do {                                                                                             \
    rc = kc__blas_err((call), what);                                                               \
    if (rc)                                                                                        \
      goto out;                                                                                    \
  } while (0)

static bool epi_has_bias(int epi) {
  return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epi_has_aux(int epi) {
  return epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         epi == CUBLASLT_EPILOGUE_DGELU;
}

/* Fills p (descriptors and algorithm) for key; on failure releases what it
 * created. The probe pointers stand for the bias/aux pointers during the
 * heuristic query (see the top comment); they are never dereferenced. */
static int plan_build(kc_ctx *c, const kc__plan_key *key, kc__plan *p) {
  int rc = FT_OK;
  memset(p, 0, sizeof *p);
  p->key = *key;
  const int m = key->m, n = key->n, k = key->k;
  const cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epi;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cudaDataType_t dtype = CUDA_R_16BF;
  /* stored (rows, cols, ld) of A and B, column-major; see the top comment */
  uint64_t ar, ac, br, bc;
  switch (key->kind) {
  case KC_GEMM_FWD:
    ta = CUBLAS_OP_T, ar = k, ac = m; /* w: (C,OC) ld C */
    br = k, bc = n;                   /* inp: (C,N) ld C */
    break;
  case KC_GEMM_DINP:
    ar = m, ac = k; /* w: (C,OC) ld C */
    br = k, bc = n; /* dout: (OC,N) ld OC */
    break;
  default: /* KC_GEMM_DW */
    tb = CUBLAS_OP_T;
    ar = m, ac = k; /* inp: (C,N) ld C */
    br = n, bc = k; /* dout: (OC,N) ld OC */
    dtype = CUDA_R_32F;
    break;
  }
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  uint64_t ws = KC_WORKSPACE_BYTES;
  uint32_t align = 16;
  int32_t bias_type = CUDA_R_16BF;
  int64_t aux_ld = m;
  const void *probe = (const char *)c->ws + 16; /* 16-byte but not 32-byte aligned */

  BLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
       "cublasLtMatmulDescCreate");
  BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
       "cublasLt TRANSA");
  BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
       "cublasLt TRANSB");
  BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
       "cublasLt EPILOGUE");
  if (epi_has_bias(epi)) {
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                        sizeof bias_type),
         "cublasLt BIAS_DATA_TYPE");
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &probe,
                                        sizeof probe),
         "cublasLt BIAS_POINTER");
  }
  if (epi_has_aux(epi)) {
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                        sizeof aux_ld),
         "cublasLt EPILOGUE_AUX_LD");
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &probe,
                                        sizeof probe),
         "cublasLt EPILOGUE_AUX_POINTER");
  }
  BLAS(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, ar, ac, (int64_t)ar), "cublasLt layout A");
  BLAS(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, br, bc, (int64_t)br), "cublasLt layout B");
  BLAS(cublasLtMatrixLayoutCreate(&p->lc, dtype, (uint64_t)m, (uint64_t)n, m), "cublasLt layout C");
  BLAS(cublasLtMatrixLayoutCreate(&p->ld, dtype, (uint64_t)m, (uint64_t)n, m), "cublasLt layout D");

  BLAS(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws),
       "cublasLt PREF_MAX_WORKSPACE_BYTES");
  BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                            &align, sizeof align),
       "cublasLt PREF_MIN_ALIGNMENT_A");
  BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                            &align, sizeof align),
       "cublasLt PREF_MIN_ALIGNMENT_B");
  BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                            &align, sizeof align),
       "cublasLt PREF_MIN_ALIGNMENT_C");
  BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                            &align, sizeof align),
       "cublasLt PREF_MIN_ALIGNMENT_D");
  memset(&heur, 0, sizeof heur);
  BLAS(cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->ld, pref, 1, &heur,
                                      &found),
       "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1 || heur.state != CUBLAS_STATUS_SUCCESS) {
    rc = ft_err_set(FT_EINVAL, "cuBLASLt: no algorithm for kind %d m %d n %d k %d epilogue %d",
                    key->kind, m, n, k, key->epi);
    goto out;
  }
  p->algo = heur.algo;
  p->used = 1;
out:
  if (pref)
    (void)cublasLtMatmulPreferenceDestroy(pref);
  if (rc)
    kc__plan_release(p);
  return rc;
}

/* Runs one GEMM of the given key: D = alpha A B + beta C (with C = D),
 * bias and aux the epilogue's pointers (ignored when it has none). */
static int gemm(kc_ctx *c, const kc__plan_key *key, const void *A, const void *B, void *D,
                float beta, const void *bias, const void *aux, cudaStream_t s) {
  int rc = FT_OK;
  kc__plan one_off;
  kc__plan *p = kc__plan_find(c, key);
  bool temp = false;
  if (!p) {
    p = kc__plan_slot(c);
    if (!p) {
      p = &one_off;
      temp = true;
    }
    rc = plan_build(c, key, p);
    if (rc)
      return rc;
  }
  if (epi_has_bias(key->epi))
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias),
         "cublasLt BIAS_POINTER");
  if (epi_has_aux(key->epi))
    BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                        sizeof aux),
         "cublasLt EPILOGUE_AUX_POINTER");
  BLAS(cublasLtMatmul(c->lt, p->op, &kOne, A, p->la, B, p->lb, beta != 0.0f ? &kOne : &kZero, D,
                      p->lc, D, p->ld, &p->algo, c->ws, KC_WORKSPACE_BYTES, s),
       "cublasLtMatmul");
out:
  if (temp)
    kc__plan_release(p);
  return rc;
}

static int check_shape(const char *fn, int N, int C, int OC) {
  if (N < 0 || C <= 0 || OC <= 0 || C % 8 || OC % 8)
    return ft_err_set(FT_EINVAL, "%s: N %d C %d OC %d: C and OC must be positive multiples of 8",
                      fn, N, C, OC);
  return FT_OK;
}

static int check_align(const char *fn, const void *const *ptrs, int n) {
  for (int i = 0; i < n; i++)
    if (ptrs[i] && !kc__aligned16(ptrs[i]))
      return ft_err_set(FT_EINVAL, "%s: pointer %p is not 16-byte aligned", fn, ptrs[i]);
  return FT_OK;
}

extern "C" int kc_matmul_fwd(kc_ctx *c, kc_bf16 *out, kc_bf16 *pre_gelu, const kc_bf16 *inp,
                             const kc_bf16 *w, const kc_bf16 *bias, int N, int C, int OC,
                             kc_stream s) {
  int rc = check_shape("kc_matmul_fwd", N, C, OC);
  if (rc)
    return rc;
  const void *ptrs[] = {out, pre_gelu, inp, w, bias};
  rc = check_align("kc_matmul_fwd", ptrs, 5);
  if (rc || N == 0)
    return rc;
  int epi = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                     : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  kc__plan_key key = {KC_GEMM_FWD, OC, N, C, epi};
  return gemm(c, &key, w, inp, out, 0.0f, bias, pre_gelu, kc__st(s));
}

extern "C" int kc_matmul_bwd(kc_ctx *c, kc_bf16 *dinp, float *dw, float *dbias, const kc_bf16 *dout,
                             const kc_bf16 *inp, const kc_bf16 *w, const kc_bf16 *dgelu_pre, int N,
                             int C, int OC, kc_stream s) {
  int rc = check_shape("kc_matmul_bwd", N, C, OC);
  if (rc)
    return rc;
  const void *ptrs[] = {dinp, dw, dout, inp, w, dgelu_pre};
  rc = check_align("kc_matmul_bwd", ptrs, 6);
  if (rc || N == 0)
    return rc;
  cudaStream_t st = kc__st(s);
  if (dinp) {
    int epi = dgelu_pre ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    kc__plan_key key = {KC_GEMM_DINP, C, N, OC, epi};
    rc = gemm(c, &key, w, dout, dinp, 0.0f, NULL, dgelu_pre, st);
    if (rc)
      return rc;
  }
  if (dw) {
    kc__plan_key key = {KC_GEMM_DW, C, OC, N, CUBLASLT_EPILOGUE_DEFAULT};
    rc = gemm(c, &key, inp, dout, dw, 1.0f, NULL, NULL, st);
    if (rc)
      return rc;
  }
  if (dbias)
    rc = kc__colsum(c, dbias, NULL, dout, NULL, NULL, NULL, N, OC, st);
  return rc;
}
