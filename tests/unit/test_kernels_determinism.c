/*
 * test_kernels_determinism: every kernel with parallel work gives the same
 * bits whatever the thread count (1, 2, 3) and from one run to the next.
 *
 * Each case runs the kernel from the same inputs (accumulating outputs are
 * reset to the same non-zero values first) under k_set_threads(1), (2), (3)
 * and a second time under (2), and memcmp's the outputs against the 1-thread
 * run. Shapes are mid-size so that OpenMP and OpenBLAS really split the
 * work (OpenBLAS goes multithreaded above a few hundred thousand
 * multiply-adds) and so that OpenBLAS blocks the GEMM's K dimension.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels.h"

static uint64_t rng_state;

static void rng_seed(uint64_t s) {
  rng_state = s * 0x9E3779B97F4A7C15ull + 1;
}

static float rng_float(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 4503599627370496.0 - 1.0);
}

static float *randv(size_t n) {
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++)
    x[i] = rng_float();
  return x;
}

/* A case: run() recomputes outputs from inputs; outs lists the buffers to
 * compare, each of nbytes. */
struct dcase {
  void (*run)(struct dcase *);
  void *p[16];
  size_t nbytes[8];
  int nout;
};

static const int thread_counts[] = {1, 2, 3, 2};

static void check_case(struct dcase *c) {
  void *ref[8];
  for (int i = 0; i < c->nout; i++)
    ref[i] = malloc(c->nbytes[i]);
  for (size_t k = 0; k < sizeof thread_counts / sizeof *thread_counts; k++) {
    k_set_threads(thread_counts[k]);
    c->run(c);
    for (int i = 0; i < c->nout; i++) {
      if (k == 0)
        memcpy(ref[i], c->p[i], c->nbytes[i]);
      else if (memcmp(ref[i], c->p[i], c->nbytes[i]) != 0)
        fail_msg("output %d differs with %d threads (run %zu)", i, thread_counts[k], k);
    }
  }
  for (int i = 0; i < c->nout; i++)
    free(ref[i]);
  k_set_threads(1);
}

static void free_case(struct dcase *c) {
  for (int i = 0; i < 16; i++)
    free(c->p[i]);
}

/* ---- matmul: N = 512 rows (> OpenBLAS's K block for dw) ------------------ */
enum { MN = 512, MC = 192, MOC = 576 };

static void run_matmul(struct dcase *c) {
  float *out = c->p[0], *dinp = c->p[1], *dw = c->p[2], *db = c->p[3];
  float *inp = c->p[4], *w = c->p[5], *bias = c->p[6], *dout = c->p[7];
  float *dinp0 = c->p[8], *dw0 = c->p[9], *db0 = c->p[10];
  memcpy(dinp, dinp0, c->nbytes[1]);
  memcpy(dw, dw0, c->nbytes[2]);
  memcpy(db, db0, c->nbytes[3]);
  k_matmul_fwd(out, inp, w, bias, MN, MC, MOC);
  k_matmul_bwd(dinp, dw, db, dout, inp, w, MN, MC, MOC);
}

static void test_matmul(void **state) {
  rng_seed(1);
  struct dcase c = {.run = run_matmul, .nout = 4};
  size_t n[11] = {MN * MOC, MN * MC,  MOC * MC, MOC,      MN * MC, MOC * MC,
                  MOC,      MN * MOC, MN * MC,  MOC * MC, MOC};
  for (int i = 0; i < 11; i++)
    c.p[i] = randv(n[i]);
  for (int i = 0; i < 4; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- attention: B=2, T=64, C=64, NH=4 ----------------------------------- */
enum { AB = 2, AT = 64, AC = 64, ANH = 4 };

static void run_attention(struct dcase *c) {
  float *out = c->p[0], *preatt = c->p[1], *att = c->p[2], *dqkv = c->p[3];
  float *dpre = c->p[4], *datt = c->p[5], *qkv = c->p[6], *dout = c->p[7], *dqkv0 = c->p[8];
  memcpy(dqkv, dqkv0, c->nbytes[3]);
  k_attention_fwd(out, preatt, att, qkv, AB, AT, AC, ANH);
  k_attention_bwd(dqkv, dpre, datt, dout, qkv, att, AB, AT, AC, ANH);
}

static void test_attention(void **state) {
  rng_seed(2);
  struct dcase c = {.run = run_attention, .nout = 6};
  size_t nat = (size_t)AB * ANH * AT * AT, nq = (size_t)AB * AT * 3 * AC, no = AB * AT * AC;
  size_t n[9] = {no, nat, nat, nq, nat, nat, nq, no, nq};
  for (int i = 0; i < 9; i++)
    c.p[i] = randv(n[i]);
  for (int i = 0; i < 6; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- attention over several causal row blocks and a partial one:
 * B=3, T=150, C=96, NH=3 (9 (b,h) pairs: uneven over 2 and 3 threads) --- */
enum { LAB = 3, LAT = 150, LAC = 96, LANH = 3 };

static void run_attention_long(struct dcase *c) {
  float *out = c->p[0], *preatt = c->p[1], *att = c->p[2], *dqkv = c->p[3];
  float *dpre = c->p[4], *datt = c->p[5], *qkv = c->p[6], *dout = c->p[7], *dqkv0 = c->p[8];
  memcpy(dqkv, dqkv0, c->nbytes[3]);
  k_attention_fwd(out, preatt, att, qkv, LAB, LAT, LAC, LANH);
  k_attention_bwd(dqkv, dpre, datt, dout, qkv, att, LAB, LAT, LAC, LANH);
}

static void test_attention_long(void **state) {
  rng_seed(7);
  struct dcase c = {.run = run_attention_long, .nout = 6};
  size_t nat = (size_t)LAB * LANH * LAT * LAT, nq = (size_t)LAB * LAT * 3 * LAC,
         no = LAB * LAT * LAC;
  size_t n[9] = {no, nat, nat, nq, nat, nat, nq, no, nq};
  for (int i = 0; i < 9; i++)
    c.p[i] = randv(n[i]);
  for (int i = 0; i < 6; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- layernorm: N = 256, C = 200 (not a multiple of the channel block) --- */
enum { LN = 256, LC = 200 };

static void run_layernorm(struct dcase *c) {
  float *out = c->p[0], *mean = c->p[1], *rstd = c->p[2], *dinp = c->p[3], *dw = c->p[4];
  float *db = c->p[5], *inp = c->p[6], *w = c->p[7], *b = c->p[8], *dout = c->p[9];
  float *dinp0 = c->p[10], *dw0 = c->p[11], *db0 = c->p[12];
  memcpy(dinp, dinp0, c->nbytes[3]);
  memcpy(dw, dw0, c->nbytes[4]);
  memcpy(db, db0, c->nbytes[5]);
  k_layernorm_fwd(out, mean, rstd, inp, w, b, LN, LC);
  k_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, LN, LC);
}

static void test_layernorm(void **state) {
  rng_seed(3);
  struct dcase c = {.run = run_layernorm, .nout = 6};
  size_t n[13] = {LN * LC, LN, LN, LN * LC, LC, LC, LN * LC, LC, LC, LN * LC, LN * LC, LC, LC};
  for (int i = 0; i < 13; i++)
    c.p[i] = randv(n[i]);
  for (int i = 0; i < 6; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- encoder: B=4, T=64, C=200, V=50 (many repeated tokens) -------------- */
enum { EB = 4, ET = 64, EC = 200, EV = 50 };

static void run_encoder(struct dcase *c) {
  float *out = c->p[0], *dwte = c->p[1], *dwpe = c->p[2], *wte = c->p[3], *wpe = c->p[4];
  float *dout = c->p[5], *dwte0 = c->p[6], *dwpe0 = c->p[7];
  const int32_t *inp = c->p[8];
  memcpy(dwte, dwte0, c->nbytes[1]);
  memcpy(dwpe, dwpe0, c->nbytes[2]);
  k_encoder_fwd(out, inp, wte, wpe, EB, ET, EC);
  k_encoder_bwd(dwte, dwpe, dout, inp, EB, ET, EC);
}

static void test_encoder(void **state) {
  rng_seed(4);
  struct dcase c = {.run = run_encoder, .nout = 3};
  size_t n[8] = {EB * ET * EC, EV * EC, ET * EC, EV * EC, ET * EC, EB * ET * EC, EV * EC, ET * EC};
  for (int i = 0; i < 8; i++)
    c.p[i] = randv(n[i]);
  int32_t *inp = malloc(EB * ET * sizeof *inp);
  assert_non_null(inp);
  for (int i = 0; i < EB * ET; i++)
    inp[i] = (int32_t)((rng_float() + 1.0f) * 0.5f * EV) % EV;
  c.p[8] = inp;
  for (int i = 0; i < 3; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- gelu, residual, cross-entropy, scale -------------------------------- */
enum { EN = 100003, CN = 64, CV = 1000, CVP = 1024 };

static void run_elementwise(struct dcase *c) {
  float *gout = c->p[0], *gd = c->p[1], *rout = c->p[2], *probs = c->p[3], *dlog = c->p[4];
  float *x = c->p[5], *y = c->p[6], *gd0 = c->p[7], *logits = c->p[8], *losses = c->p[9];
  const int32_t *tg = c->p[10];
  memcpy(gd, gd0, c->nbytes[1]);
  k_gelu_fwd(gout, x, EN);
  k_gelu_bwd(gd, x, y, EN);
  k_residual_fwd(rout, x, y, EN);
  float mean = k_crossentropy_fwd(probs, losses, logits, tg, CN, CV, CVP);
  k_crossentropy_bwd(dlog, probs, tg, 1.0f / CN, CN, CV, CVP);
  k_scale(rout, mean, EN);
}

static void test_elementwise(void **state) {
  rng_seed(5);
  struct dcase c = {.run = run_elementwise, .nout = 5};
  size_t n[10] = {EN, EN, EN, CN * CVP, CN * CVP, EN, EN, EN, CN * CVP, CN};
  for (int i = 0; i < 10; i++)
    c.p[i] = randv(n[i]);
  int32_t *tg = malloc(CN * sizeof *tg);
  assert_non_null(tg);
  for (int i = 0; i < CN; i++)
    tg[i] = (i * 37) % CV;
  c.p[10] = tg;
  for (int i = 0; i < 5; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

/* ---- k_sumsq and AdamW --------------------------------------------------- */
enum { SN = 37 * K_REDUCE_BLOCK + 1234, AN = 100003 };

static void run_optim(struct dcase *c) {
  double *ss = c->p[0];
  float *p = c->p[1], *m = c->p[2], *v = c->p[3], *x = c->p[4], *g = c->p[5];
  float *p0 = c->p[6], *m0 = c->p[7], *v0 = c->p[8];
  *ss = k_sumsq(x, SN);
  memcpy(p, p0, c->nbytes[1]);
  memcpy(m, m0, c->nbytes[2]);
  memcpy(v, v0, c->nbytes[3]);
  for (int i = 0; i < AN; i++) /* second moments are non-negative */
    v[i] = v[i] < 0 ? -v[i] : v[i];
  k_adamw(p, g, m, v, AN, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  k_adamw(p, g, m, v, AN, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 8);
}

static void test_optim(void **state) {
  rng_seed(6);
  struct dcase c = {.run = run_optim, .nout = 4};
  c.p[0] = malloc(sizeof(double));
  size_t n[9] = {0, AN, AN, AN, SN, AN, AN, AN, AN};
  for (int i = 1; i < 9; i++)
    c.p[i] = randv(n[i]);
  c.nbytes[0] = sizeof(double);
  for (int i = 1; i < 4; i++)
    c.nbytes[i] = n[i] * sizeof(float);
  check_case(&c);
  free_case(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul),         cmocka_unit_test(test_attention),
      cmocka_unit_test(test_attention_long), cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_encoder),        cmocka_unit_test(test_elementwise),
      cmocka_unit_test(test_optim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
