/*
 * test_kernels_cuda: every kc_ kernel (kernels_cuda.h) against its CPU k_
 * counterpart (kernels.h) on random inputs. Label "gpu": exits 77 (skipped)
 * when kc_device_count() == 0 (no GPU or no driver).
 *
 * Tolerances, and why:
 *  - encoder, residual: one fp32 addition of the same operands on both
 *    sides, so the results must be bit-identical;
 *  - gelu fwd/bwd: the device tanhf differs from glibc's by a few ulp and
 *    nvcc fuses multiply-adds, so 1e-5 relative + 1e-6 absolute;
 *  - adamw: the same float formula, FMA contraction and the device's
 *    division/sqrt rounding give ulp-level differences in m, v and the
 *    update: 1e-5 relative + 1e-6 absolute over a few steps;
 *  - layernorm: the GPU reduces each row in float through a warp tree, the
 *    CPU in double in index order: 1e-4 relative + 1e-5 absolute on out,
 *    1e-5 on mean and rstd (inputs of order 1, C = 768).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "ft_err.h"
#include "kernels.h"
#include "kernels_cuda.h"

static uint64_t rng_state = 42;

static float rng_float(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 4503599627370496.0 - 1.0);
}

static float *randv(size_t n, float scale) {
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++)
    x[i] = rng_float() * scale;
  return x;
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_)                                                                                       \
      fail_msg("%s: %s (%s)", #call, ft_strerror(rc_), ft_err_detail());                           \
  } while (0)

/* Device copy of a host array. */
static void *dev_from(const void *h, size_t bytes) {
  void *d = NULL;
  CK(kc_malloc(&d, bytes));
  CK(kc_memcpy_h2d(d, h, bytes));
  return d;
}

static float *host_from(const void *d, size_t n) {
  float *h = malloc(n * sizeof *h);
  assert_non_null(h);
  CK(kc_sync());
  CK(kc_memcpy_d2h(h, d, n * sizeof *h));
  return h;
}

static void assert_near(const char *what, const float *gpu, const float *cpu, size_t n, double rtol,
                        double atol) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)gpu[i] - cpu[i]);
    if (!(d <= rtol * fabs(cpu[i]) + atol))
      fail_msg("%s[%zu]: gpu %.9g cpu %.9g", what, i, gpu[i], cpu[i]);
  }
}

static void test_memory(void **state) {
  enum { n = 1000 };
  float *h = randv(n, 1);
  float *d = dev_from(h, n * sizeof *h);
  float *back = host_from(d, n);
  assert_memory_equal(h, back, n * sizeof *h);
  CK(kc_free(d));
  CK(kc_free(NULL));
  /* an impossible allocation is reported as FT_ECUDA with a detail */
  void *huge = (void *)1;
  assert_int_equal(kc_malloc(&huge, (size_t)1 << 62), FT_ECUDA);
  assert_null(huge);
  assert_non_null(strstr(ft_err_detail(), "cudaMalloc"));
  free(h), free(back);
}

static void test_encoder(void **state) {
  enum { B = 4, T = 64, C = 200, V = 97 };
  float *wte = randv(V * C, 1), *wpe = randv(T * C, 1), *cpu = malloc(B * T * C * sizeof *cpu);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++)
    inp[i] = (int32_t)((i * 31 + 7) % V);
  k_encoder_fwd(cpu, inp, wte, wpe, B, T, C);
  float *dwte = dev_from(wte, V * C * 4), *dwpe = dev_from(wpe, T * C * 4), *dout = NULL;
  int32_t *dinp = dev_from(inp, sizeof inp);
  CK(kc_malloc((void **)&dout, B * T * C * 4));
  CK(kc_encoder_fwd(dout, dinp, dwte, dwpe, B, T, C));
  float *gpu = host_from(dout, B * T * C);
  assert_memory_equal(gpu, cpu, B * T * C * sizeof *cpu);
  kc_free(dwte), kc_free(dwpe), kc_free(dinp), kc_free(dout);
  free(wte), free(wpe), free(cpu), free(gpu);
}

static void test_gelu_residual(void **state) {
  const size_t n = 1000003; /* not a multiple of the block size */
  float *x = randv(n, 5), *y = randv(n, 1), *acc = randv(n, 1);
  float *cf = malloc(n * 4), *cb = malloc(n * 4), *cr = malloc(n * 4);
  memcpy(cb, acc, n * 4);
  k_gelu_fwd(cf, x, n);
  k_gelu_bwd(cb, x, y, n);
  k_residual_fwd(cr, x, y, n);
  float *dx = dev_from(x, n * 4), *dy = dev_from(y, n * 4), *db = dev_from(acc, n * 4);
  float *df = NULL, *dr = NULL;
  CK(kc_malloc((void **)&df, n * 4));
  CK(kc_malloc((void **)&dr, n * 4));
  CK(kc_gelu_fwd(df, dx, n));
  CK(kc_gelu_bwd(db, dx, dy, n));
  CK(kc_residual_fwd(dr, dx, dy, n));
  float *gf = host_from(df, n), *gb = host_from(db, n), *gr = host_from(dr, n);
  assert_near("gelu_fwd", gf, cf, n, 1e-5, 1e-6);
  assert_near("gelu_bwd", gb, cb, n, 1e-5, 1e-6);
  assert_memory_equal(gr, cr, n * 4);
  kc_free(dx), kc_free(dy), kc_free(db), kc_free(df), kc_free(dr);
  free(x), free(y), free(acc), free(cf), free(cb), free(cr), free(gf), free(gb), free(gr);
}

static void test_adamw(void **state) {
  const size_t n = 300007;
  for (int k = 0; k < 2; k++) {
    float wd = k ? 0.1f : 0.0f;
    float *p = randv(n, 1), *m = randv(n, 0.1f), *v = randv(n, 0.01f);
    for (size_t i = 0; i < n; i++)
      v[i] = fabsf(v[i]);
    float *dp = dev_from(p, n * 4), *dm = dev_from(m, n * 4), *dv = dev_from(v, n * 4);
    float *dg = NULL;
    CK(kc_malloc((void **)&dg, n * 4));
    for (int64_t t = 1; t <= 3; t++) {
      float *g = randv(n, 1);
      CK(kc_memcpy_h2d(dg, g, n * 4));
      k_adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t);
      CK(kc_adamw(dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t));
      CK(kc_sync());
      free(g);
    }
    float *gp = host_from(dp, n), *gm = host_from(dm, n), *gv = host_from(dv, n);
    assert_near("adamw m", gm, m, n, 1e-5, 1e-6);
    assert_near("adamw v", gv, v, n, 1e-5, 1e-6);
    assert_near("adamw p", gp, p, n, 1e-5, 1e-6);
    kc_free(dp), kc_free(dm), kc_free(dv), kc_free(dg);
    free(p), free(m), free(v), free(gp), free(gm), free(gv);
  }
}

static void test_layernorm(void **state) {
  enum { N = 1001, C = 768 };
  float *x = randv((size_t)N * C, 1), *w = randv(C, 1), *b = randv(C, 1);
  for (size_t i = 0; i < (size_t)N * C; i++)
    x[i] += 0.3f;
  float *co = malloc((size_t)N * C * 4), cm[N], cr[N];
  k_layernorm_fwd(co, cm, cr, x, w, b, N, C);
  float *dx = dev_from(x, (size_t)N * C * 4), *dw = dev_from(w, C * 4), *db = dev_from(b, C * 4);
  float *dout = NULL, *dmean = NULL, *drstd = NULL;
  CK(kc_malloc((void **)&dout, (size_t)N * C * 4));
  CK(kc_malloc((void **)&dmean, N * 4));
  CK(kc_malloc((void **)&drstd, N * 4));
  CK(kc_layernorm_fwd(dout, dmean, drstd, dx, dw, db, N, C));
  float *go = host_from(dout, (size_t)N * C), *gm = host_from(dmean, N), *gr = host_from(drstd, N);
  assert_near("layernorm mean", gm, cm, N, 1e-5, 1e-6);
  assert_near("layernorm rstd", gr, cr, N, 1e-5, 0);
  assert_near("layernorm out", go, co, (size_t)N * C, 1e-4, 1e-5);
  kc_free(dx), kc_free(dw), kc_free(db), kc_free(dout), kc_free(dmean), kc_free(drstd);
  free(x), free(w), free(b), free(co), free(go), free(gm), free(gr);
}

int main(void) {
  int n = kc_device_count();
  if (n == 0) {
    printf("test_kernels_cuda: no CUDA device visible: skipped\n");
    return 77;
  }
  printf("test_kernels_cuda: %d CUDA device(s)\n", n);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory),        cmocka_unit_test(test_encoder),
      cmocka_unit_test(test_gelu_residual), cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_layernorm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
