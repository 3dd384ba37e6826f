/*
 * test_kernels: correctness of the CPU kernels (kernels.h).
 *
 * Forward passes are checked against naive double-precision references.
 * Every backward pass is checked against central finite differences of a
 * scalar loss L = sum(out * R) for a fixed random R (for cross-entropy: the
 * mean loss), computed in double from the fp32 forward.
 *
 * Tolerance, and why: the forward runs in fp32, so each evaluation of L
 * carries a rounding error of roughly 1e-7 * sum|out * R| (about 1e-7 to
 * 1e-6 here); divided by the 2 * eps = 2e-3 step this is noise of order
 * 1e-4 in the numerical gradient (measured: at most 1.6e-4 absolute), and
 * the O(eps^2) truncation error of the central difference is far smaller.
 * So an element passes when
 *   |analytic - numeric| <= 5e-3 * max(|analytic|, |numeric|) + 1e-3,
 * six times the observed noise, yet tight enough to catch a wrong term,
 * factor, sign or index (errors of 1e-2 relative or more on these inputs).
 * The worst err/tol ratio of each check is printed.
 * Backward outputs that accumulate (+=) are pre-filled with known values
 * and the increment is compared, so the accumulate contract is tested too.
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

#include "kernels.h"

#define FD_EPS 1e-3f
#define FD_RTOL 5e-3
#define FD_ATOL 1e-3

/* Small shapes: B=2, T=5, C=8, NH=2, V=11, Vp=16. */
enum { B = 2, T = 5, C = 8, NH = 2, V = 11, VP = 16, N = B * T, OC = 12 };

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state;

static void rng_seed(uint64_t s) {
  rng_state = s * 0x9E3779B97F4A7C15ull + 1;
}

static double rng_uniform(void) { /* [0, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static float *randv(size_t n, float scale) {
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((2.0 * rng_uniform() - 1.0) * scale);
  return x;
}

static float *copyv(const float *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  assert_non_null(y);
  memcpy(y, x, n * sizeof *y);
  return y;
}

static double dotd(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

typedef double (*loss_fn)(void *ctx);

/* Central finite differences of f with respect to each element of param. */
static void fd_grad(loss_fn f, void *ctx, float *param, size_t n, double *num) {
  for (size_t i = 0; i < n; i++) {
    float x = param[i];
    float xp = x + FD_EPS, xm = x - FD_EPS;
    param[i] = xp;
    double lp = f(ctx);
    param[i] = xm;
    double lm = f(ctx);
    param[i] = x;
    num[i] = (lp - lm) / ((double)xp - (double)xm);
  }
}

/* analytic = after - before (the increment an accumulating bwd added). */
static void check_grad(const char *what, const float *after, const float *before, const double *num,
                       size_t n) {
  double worst = 0.0;
  size_t worst_i = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double a = before ? (double)after[i] - before[i] : after[i];
    double d = fabs(a - num[i]);
    double tol = FD_RTOL * fmax(fabs(a), fabs(num[i])) + FD_ATOL;
    if (d / tol > worst) {
      worst = d / tol;
      worst_i = i;
    }
    if (d > tol) {
      if (bad++ < 5)
        print_error("%s[%zu]: analytic %.6g numeric %.6g\n", what, i, a, num[i]);
    }
  }
  print_message("%s: worst |err|/tol %.3g at [%zu]\n", what, worst, worst_i);
  if (bad)
    fail_msg("%s: %d of %zu elements off (worst err/tol %.3g)", what, bad, n, worst);
}

static void grad_test(const char *what, loss_fn f, void *ctx, float *param, size_t n,
                      const float *after, const float *before) {
  double *num = malloc(n * sizeof *num);
  assert_non_null(num);
  fd_grad(f, ctx, param, n, num);
  check_grad(what, after, before, num, n);
  free(num);
}

static void assert_close(const char *what, const float *got, const double *want, size_t n,
                         double rtol, double atol) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]);
    if (d > rtol * fabs(want[i]) + atol)
      fail_msg("%s[%zu]: got %.9g want %.9g", what, i, got[i], want[i]);
  }
}

/* ---- encoder ------------------------------------------------------------ */

static const int32_t tok[N] = {3, 7, 3, 0, 10, 7, 7, 1, 3, 9}; /* repeats on purpose */

struct enc_ctx {
  float *wte, *wpe, *out, *R;
};

static double enc_loss(void *p) {
  struct enc_ctx *c = p;
  k_encoder_fwd(c->out, tok, c->wte, c->wpe, B, T, C);
  return dotd(c->out, c->R, (size_t)N * C);
}

static void test_encoder_fwd(void **state) {
  rng_seed(1);
  float *wte = randv(V * C, 1), *wpe = randv(T * C, 1), *out = randv(N * C, 1);
  k_encoder_fwd(out, tok, wte, wpe, B, T, C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        assert_true(out[(b * T + t) * C + c] == wte[tok[b * T + t] * C + c] + wpe[t * C + c]);
  free(wte), free(wpe), free(out);
}

static void test_encoder_bwd(void **state) {
  rng_seed(2);
  struct enc_ctx c = {randv(V * C, 1), randv(T * C, 1), randv(N * C, 1), randv(N * C, 1)};
  float *dwte = randv(V * C, 1), *dwpe = randv(T * C, 1);
  float *dwte0 = copyv(dwte, V * C), *dwpe0 = copyv(dwpe, T * C);
  k_encoder_bwd(dwte, dwpe, c.R, tok, B, T, C); /* dL/dout = R */
  grad_test("dwte", enc_loss, &c, c.wte, V * C, dwte, dwte0);
  grad_test("dwpe", enc_loss, &c, c.wpe, T * C, dwpe, dwpe0);
  free(c.wte), free(c.wpe), free(c.out), free(c.R);
  free(dwte), free(dwpe), free(dwte0), free(dwpe0);
}

/* ---- layernorm ---------------------------------------------------------- */

struct ln_ctx {
  float *inp, *w, *b, *out, *mean, *rstd, *R;
};

static double ln_loss(void *p) {
  struct ln_ctx *c = p;
  k_layernorm_fwd(c->out, c->mean, c->rstd, c->inp, c->w, c->b, N, C);
  return dotd(c->out, c->R, (size_t)N * C);
}

static void test_layernorm_fwd(void **state) {
  rng_seed(3);
  float *inp = randv(N * C, 2), *w = randv(C, 1), *b = randv(C, 1);
  float *out = randv(N * C, 1), mean[N], rstd[N];
  for (int i = 0; i < N * C; i++)
    inp[i] += 0.5f; /* non-zero mean */
  k_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
  double want[N * C];
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int i = 0; i < C; i++)
      m += inp[n * C + i];
    m /= C;
    for (int i = 0; i < C; i++)
      v += (inp[n * C + i] - m) * (inp[n * C + i] - m);
    v /= C;
    double rs = 1.0 / sqrt(v + 1e-5);
    assert_true(fabs(mean[n] - m) <= 1e-6 * fabs(m) + 1e-7);
    assert_true(fabs(rstd[n] - rs) <= 1e-6 * rs);
    for (int i = 0; i < C; i++)
      want[n * C + i] = (inp[n * C + i] - m) * rs * w[i] + b[i];
  }
  assert_close("ln out", out, want, N * C, 1e-5, 1e-6);
  free(inp), free(w), free(b), free(out);
}

static void test_layernorm_bwd(void **state) {
  rng_seed(4);
  float mean[N], rstd[N];
  struct ln_ctx c = {randv(N * C, 1), randv(C, 1), randv(C, 1), randv(N * C, 1), mean, rstd,
                     randv(N * C, 1)};
  float *dinp = randv(N * C, 1), *dw = randv(C, 1), *db = randv(C, 1);
  float *dinp0 = copyv(dinp, N * C), *dw0 = copyv(dw, C), *db0 = copyv(db, C);
  ln_loss(&c);
  k_layernorm_bwd(dinp, dw, db, c.R, c.inp, c.w, mean, rstd, N, C);
  grad_test("ln dinp", ln_loss, &c, c.inp, N * C, dinp, dinp0);
  grad_test("ln dw", ln_loss, &c, c.w, C, dw, dw0);
  grad_test("ln db", ln_loss, &c, c.b, C, db, db0);
  free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R);
  free(dinp), free(dw), free(db), free(dinp0), free(dw0), free(db0);
}

/* ---- matmul ------------------------------------------------------------- */

struct mm_ctx {
  float *inp, *w, *bias, *out, *R;
};

static double mm_loss(void *p) {
  struct mm_ctx *c = p;
  k_matmul_fwd(c->out, c->inp, c->w, c->bias, N, C, OC);
  return dotd(c->out, c->R, (size_t)N * OC);
}

static void test_matmul_fwd(void **state) {
  rng_seed(5);
  float *inp = randv(N * C, 1), *w = randv(OC * C, 1), *bias = randv(OC, 1);
  float *out = randv(N * OC, 1);
  double want[N * OC];
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    k_matmul_fwd(out, inp, w, with_bias ? bias : NULL, N, C, OC);
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double s = with_bias ? bias[o] : 0.0;
        for (int i = 0; i < C; i++)
          s += (double)inp[n * C + i] * w[o * C + i];
        want[n * OC + o] = s;
      }
    assert_close("matmul out", out, want, N * OC, 1e-5, 1e-5);
  }
  free(inp), free(w), free(bias), free(out);
}

static void test_matmul_bwd(void **state) {
  rng_seed(6);
  struct mm_ctx c = {randv(N * C, 1), randv(OC * C, 1), randv(OC, 1), randv(N * OC, 1),
                     randv(N * OC, 1)};
  float *dinp = randv(N * C, 1), *dw = randv(OC * C, 1), *db = randv(OC, 1);
  float *dinp0 = copyv(dinp, N * C), *dw0 = copyv(dw, OC * C), *db0 = copyv(db, OC);
  k_matmul_bwd(dinp, dw, db, c.R, c.inp, c.w, N, C, OC);
  grad_test("mm dinp", mm_loss, &c, c.inp, N * C, dinp, dinp0);
  grad_test("mm dw", mm_loss, &c, c.w, OC * C, dw, dw0);
  grad_test("mm dbias", mm_loss, &c, c.bias, OC, db, db0);
  /* dinp == NULL and dbias == NULL: the same dw, nothing else touched. */
  float *dw2 = copyv(dw0, OC * C);
  k_matmul_bwd(NULL, dw2, NULL, c.R, c.inp, c.w, N, C, OC);
  assert_memory_equal(dw2, dw, OC * C * sizeof(float));
  free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.R);
  free(dinp), free(dw), free(db), free(dinp0), free(dw0), free(db0), free(dw2);
}

/* ---- attention ---------------------------------------------------------- */

struct att_ctx {
  float *qkv, *out, *preatt, *att, *R;
};

static double att_loss(void *p) {
  struct att_ctx *c = p;
  k_attention_fwd(c->out, c->preatt, c->att, c->qkv, B, T, C, NH);
  return dotd(c->out, c->R, (size_t)N * C);
}

static void test_attention_fwd(void **state) {
  rng_seed(7);
  int hs = C / NH;
  float *qkv = randv(N * 3 * C, 1.5f), *out = randv(N * C, 1);
  float *preatt = randv(B * NH * T * T, 1), *att = randv(B * NH * T * T, 1);
  k_attention_fwd(out, preatt, att, qkv, B, T, C, NH);
  double want[N * C];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double s[T], mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) {
          s[u] = 0;
          for (int i = 0; i < hs; i++)
            s[u] += (double)qkv[(b * T + t) * 3 * C + h * hs + i] *
                    qkv[(b * T + u) * 3 * C + C + h * hs + i];
          s[u] /= sqrt((double)hs);
          mx = fmax(mx, s[u]);
        }
        for (int u = 0; u <= t; u++)
          sum += exp(s[u] - mx);
        const float *arow = att + ((b * NH + h) * T + t) * T;
        double asum = 0;
        for (int u = 0; u < T; u++) {
          if (u > t) {
            assert_true(arow[u] == 0.0f); /* causal: nothing above the diagonal */
            continue;
          }
          double a = exp(s[u] - mx) / sum;
          assert_true(fabs(arow[u] - a) <= 1e-5);
          asum += arow[u];
        }
        assert_true(fabs(asum - 1.0) < 1e-5);
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int u = 0; u <= t; u++)
            o += exp(s[u] - mx) / sum * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          want[(b * T + t) * C + h * hs + i] = o;
        }
      }
  assert_close("attention out", out, want, N * C, 1e-5, 1e-5);
  free(qkv), free(out), free(preatt), free(att);
}

static void test_attention_bwd(void **state) {
  rng_seed(8);
  size_t nat = (size_t)B * NH * T * T;
  struct att_ctx c = {randv(N * 3 * C, 1.5f), randv(N * C, 1), randv(nat, 1), randv(nat, 1),
                      randv(N * C, 1)};
  float *dqkv = randv(N * 3 * C, 1), *dqkv0 = copyv(dqkv, N * 3 * C);
  float *dpre = randv(nat, 1), *datt = randv(nat, 1);
  att_loss(&c);
  k_attention_bwd(dqkv, dpre, datt, c.R, c.qkv, c.att, B, T, C, NH);
  grad_test("attention dqkv", att_loss, &c, c.qkv, N * 3 * C, dqkv, dqkv0);
  free(c.qkv), free(c.out), free(c.preatt), free(c.att), free(c.R);
  free(dqkv), free(dqkv0), free(dpre), free(datt);
}

/* Long sequences: the kernel takes the causal structure in row blocks, so
 * T = 150 spans several blocks and ends in a partial one (and B*NH is not a
 * multiple of any thread count used). Finite differences would be too
 * noisy at this length (the loss sums 2400 products), so forward AND
 * backward are checked against a double-precision reference of the same
 * formulas, whose correctness the small finite-difference test above pins
 * down: s = q.k / sqrt(hs), a = softmax over u <= t, out = sum a v;
 * datt = dout.v, ds = a (datt - sum a datt), dq = sum ds k / sqrt(hs),
 * dk = sum ds q / sqrt(hs), dv = sum a dout. An index or block-edge slip
 * gives errors of order 0.1 here, far above the 1e-4 tolerance. */
enum { LB = 1, LT = 150, LC = 16, LNH = 2, LN = LB * LT };

static void test_attention_long(void **state) {
  rng_seed(10);
  int hs = LC / LNH;
  double sc = 1.0 / sqrt((double)hs);
  size_t nat = (size_t)LB * LNH * LT * LT, nq = (size_t)LN * 3 * LC, no = (size_t)LN * LC;
  float *qkv = randv(nq, 1.5f), *out = randv(no, 1), *dout = randv(no, 1);
  float *preatt = randv(nat, 1), *att = randv(nat, 1), *dpre = randv(nat, 1);
  float *datt = randv(nat, 1), *dqkv = randv(nq, 1), *dqkv0 = copyv(dqkv, nq);
  double *want = calloc(no, sizeof *want), *dwant = calloc(nq, sizeof *dwant);
  double *a = malloc(LT * sizeof *a), *ds = malloc(LT * sizeof *ds);
  assert_non_null(want), assert_non_null(dwant), assert_non_null(a), assert_non_null(ds);
  k_attention_fwd(out, preatt, att, qkv, LB, LT, LC, LNH);
  k_attention_bwd(dqkv, dpre, datt, dout, qkv, att, LB, LT, LC, LNH);
#define Q(b, t, i) qkv[((size_t)(b)*LT + (t)) * 3 * LC + (i)]
  for (int b = 0; b < LB; b++)
    for (int h = 0; h < LNH; h++)
      for (int t = 0; t < LT; t++) {
        size_t row = (((size_t)b * LNH + h) * LT + t) * LT;
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int u = 0; u <= t; u++) {
          double s = 0;
          for (int i = 0; i < hs; i++)
            s += (double)Q(b, t, h * hs + i) * Q(b, u, LC + h * hs + i);
          a[u] = s * sc;
          assert_true(fabs(preatt[row + u] - a[u]) <= 1e-5 + 1e-5 * fabs(a[u]));
          mx = fmax(mx, a[u]);
        }
        for (int u = 0; u <= t; u++)
          sum += (a[u] = exp(a[u] - mx));
        for (int u = 0; u < LT; u++) {
          if (u > t) { /* causal: nothing above the diagonal */
            assert_true(att[row + u] == 0.0f && preatt[row + u] == 0.0f);
            assert_true(datt[row + u] == 0.0f && dpre[row + u] == 0.0f);
            continue;
          }
          a[u] /= sum;
          assert_true(fabs(att[row + u] - a[u]) <= 1e-6);
        }
        for (int u = 0; u <= t; u++) {
          double da = 0;
          for (int i = 0; i < hs; i++) {
            want[((size_t)b * LT + t) * LC + h * hs + i] += a[u] * Q(b, u, 2 * LC + h * hs + i);
            da +=
                (double)dout[((size_t)b * LT + t) * LC + h * hs + i] * Q(b, u, 2 * LC + h * hs + i);
          }
          ds[u] = da;
          dot += a[u] * da;
        }
        for (int u = 0; u <= t; u++) {
          ds[u] = a[u] * (ds[u] - dot);
          for (int i = 0; i < hs; i++) {
            double d = dout[((size_t)b * LT + t) * LC + h * hs + i];
            dwant[((size_t)b * LT + t) * 3 * LC + h * hs + i] +=
                ds[u] * sc * Q(b, u, LC + h * hs + i);
            dwant[((size_t)b * LT + u) * 3 * LC + LC + h * hs + i] +=
                ds[u] * sc * Q(b, t, h * hs + i);
            dwant[((size_t)b * LT + u) * 3 * LC + 2 * LC + h * hs + i] += a[u] * d;
          }
        }
      }
#undef Q
  assert_close("long attention out", out, want, no, 1e-4, 1e-5);
  for (size_t i = 0; i < nq; i++)
    dwant[i] += dqkv0[i]; /* the kernel accumulates */
  assert_close("long attention dqkv", dqkv, dwant, nq, 1e-4, 1e-5);
  free(qkv), free(out), free(dout), free(preatt), free(att), free(dpre), free(datt);
  free(dqkv), free(dqkv0), free(want), free(dwant), free(a), free(ds);
}

/* ---- gelu, residual ----------------------------------------------------- */

struct ew_ctx {
  float *a, *b, *out, *R;
  size_t n;
  int residual;
};

static double ew_loss(void *p) {
  struct ew_ctx *c = p;
  if (c->residual)
    k_residual_fwd(c->out, c->a, c->b, c->n);
  else
    k_gelu_fwd(c->out, c->a, c->n);
  return dotd(c->out, c->R, c->n);
}

static void test_gelu(void **state) {
  rng_seed(9);
  size_t n = 200;
  struct ew_ctx c = {randv(n, 4), NULL, randv(n, 1), randv(n, 1), n, 0};
  double want[200];
  k_gelu_fwd(c.out, c.a, n);
  for (size_t i = 0; i < n; i++) {
    double x = c.a[i];
    want[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  assert_close("gelu out", c.out, want, n, 1e-5, 1e-6);
  float *d = randv(n, 1), *d0 = copyv(d, n);
  k_gelu_bwd(d, c.a, c.R, n);
  grad_test("gelu dinp", ew_loss, &c, c.a, n, d, d0);
  free(c.a), free(c.out), free(c.R), free(d), free(d0);
}

static void test_residual(void **state) {
  rng_seed(10);
  size_t n = 50;
  struct ew_ctx c = {randv(n, 1), randv(n, 1), randv(n, 1), randv(n, 1), n, 1};
  k_residual_fwd(c.out, c.a, c.b, n);
  for (size_t i = 0; i < n; i++)
    assert_true(c.out[i] == c.a[i] + c.b[i]);
  float *da = randv(n, 1), *db = randv(n, 1), *da0 = copyv(da, n), *db0 = copyv(db, n);
  k_residual_bwd(da, db, c.R, n);
  grad_test("residual da", ew_loss, &c, c.a, n, da, da0);
  grad_test("residual db", ew_loss, &c, c.b, n, db, db0);
  free(c.a), free(c.b), free(c.out), free(c.R), free(da), free(db), free(da0), free(db0);
}

/* ---- cross-entropy ------------------------------------------------------ */

static const int32_t tgt[N] = {0, 10, 4, 4, 7, 1, 2, 9, 5, 3};

struct ce_ctx {
  float *logits, *probs, *losses;
};

static double ce_loss(void *p) {
  struct ce_ctx *c = p;
  k_crossentropy_fwd(c->probs, c->losses, c->logits, tgt, N, V, VP);
  double s = 0;
  for (int n = 0; n < N; n++)
    s += c->losses[n];
  return s / N;
}

static void test_crossentropy_fwd(void **state) {
  rng_seed(11);
  float *logits = randv(N * VP, 3), *probs = randv(N * VP, 1), losses[N];
  logits[0] = 60.0f; /* a large logit: must stay finite (max subtracted) */
  float mean = k_crossentropy_fwd(probs, losses, logits, tgt, N, V, VP);
  double total = 0;
  for (int n = 0; n < N; n++) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
      mx = fmax(mx, logits[n * VP + i]);
    for (int i = 0; i < V; i++)
      sum += exp(logits[n * VP + i] - mx);
    for (int i = 0; i < VP; i++) {
      double want = i < V ? exp(logits[n * VP + i] - mx) / sum : 0.0;
      assert_true(fabs(probs[n * VP + i] - want) <= 1e-6 * want + 1e-7);
      if (i >= V)
        assert_true(probs[n * VP + i] == 0.0f);
    }
    double l = -(logits[n * VP + tgt[n]] - mx - log(sum));
    assert_true(isfinite(losses[n]));
    assert_true(fabs(losses[n] - l) <= 1e-5 * fabs(l) + 1e-6);
    total += l;
  }
  assert_true(fabs(mean - total / N) <= 1e-5 * fabs(total / N));
  free(logits), free(probs);
}

static void test_crossentropy_bwd(void **state) {
  rng_seed(12);
  float losses[N];
  struct ce_ctx c = {randv(N * VP, 2), randv(N * VP, 1), losses};
  float *dlogits = randv(N * VP, 1);
  ce_loss(&c);
  k_crossentropy_bwd(dlogits, c.probs, tgt, 1.0f / N, N, V, VP);
  /* overwrites; the padded columns get 0, and the loss does not depend on them */
  grad_test("ce dlogits", ce_loss, &c, c.logits, N * VP, dlogits, NULL);
  for (int n = 0; n < N; n++)
    for (int i = V; i < VP; i++)
      assert_true(dlogits[n * VP + i] == 0.0f);
  free(c.logits), free(c.probs), free(dlogits);
}

/* ---- reductions, optimizer, threads ------------------------------------- */

static void test_sumsq(void **state) {
  rng_seed(13);
  size_t sizes[] = {0, 1, 5, K_REDUCE_BLOCK, 3 * K_REDUCE_BLOCK + 777, 300 * K_REDUCE_BLOCK + 3};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = randv(n ? n : 1, 1);
    double got = k_sumsq(x, n);
    /* the documented order, exactly: block sums in double, added in order */
    double blocked = 0.0, plain = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += K_REDUCE_BLOCK) {
      double bs = 0.0;
      for (size_t i = i0; i < n && i < i0 + K_REDUCE_BLOCK; i++)
        bs += (double)x[i] * x[i];
      blocked += bs;
    }
    for (size_t i = 0; i < n; i++)
      plain += (double)x[i] * x[i];
    assert_memory_equal(&got, &blocked, sizeof got);
    assert_true(fabs(got - plain) <= 1e-12 * plain);
    free(x);
  }
}

static void test_scale(void **state) {
  float x[5] = {1, -2, 3.5f, 0, 8};
  k_scale(x, 0.5f, 5);
  float want[5] = {0.5f, -1, 1.75f, 0, 4};
  assert_memory_equal(x, want, sizeof x);
}

static void test_adamw(void **state) {
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  float wds[2] = {0.0f, 0.1f};
  for (int k = 0; k < 2; k++) {
    float wd = wds[k];
    float p[4] = {0.5f, -1.0f, 2.0f, 0.25f}, m[4] = {0}, v[4] = {0};
    double hp[4], hm[4] = {0}, hv[4] = {0};
    for (int i = 0; i < 4; i++)
      hp[i] = p[i];
    /* three steps with different gradients; the last element has g = 0
     * always, so it moves only through weight decay */
    float gs[3][4] = {{0.1f, -0.2f, 0.3f, 0}, {-0.05f, 0.4f, 0.1f, 0}, {0.2f, 0.2f, -0.3f, 0}};
    for (int64_t t = 1; t <= 3; t++) {
      k_adamw(p, gs[t - 1], m, v, 4, lr, b1, b2, eps, wd, t);
      for (int i = 0; i < 4; i++) {
        double g = gs[t - 1][i];
        hm[i] = b1 * hm[i] + (1 - (double)b1) * g;
        hv[i] = b2 * hv[i] + (1 - (double)b2) * g * g;
        double mh = hm[i] / (1 - pow(b1, (double)t)), vh = hv[i] / (1 - pow(b2, (double)t));
        hp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * hp[i]);
      }
      for (int i = 0; i < 4; i++) {
        assert_true(fabs(m[i] - hm[i]) <= 1e-6 * fabs(hm[i]) + 1e-9);
        assert_true(fabs(v[i] - hv[i]) <= 1e-6 * fabs(hv[i]) + 1e-12);
        assert_true(fabs(p[i] - hp[i]) <= 1e-6 * fabs(hp[i]) + 1e-7);
      }
    }
    if (wd == 0.0f)
      assert_true(p[3] == 0.25f); /* no gradient, no decay: untouched */
    else
      assert_true(p[3] < 0.25f);
  }
  /* first step of Adam moves each parameter by about lr * sign(g) */
  float p = 1.0f, g = 3.0f, m = 0, v = 0;
  k_adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  assert_true(fabs(p - 0.9f) < 1e-6);
}

static void test_threads(void **state) {
  k_set_threads(2);
  assert_int_equal(k_get_threads(), 2);
  k_set_threads(0); /* 0 leaves the setting alone */
  assert_int_equal(k_get_threads(), 2);
  k_set_threads(1);
  assert_int_equal(k_get_threads(), 1);
  assert_true(k_sgemm_gflops(64, 0.01) > 0.0);
  assert_true(k_sgemm_gflops(0, 0.01) == 0.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encoder_fwd),
      cmocka_unit_test(test_encoder_bwd),
      cmocka_unit_test(test_layernorm_fwd),
      cmocka_unit_test(test_layernorm_bwd),
      cmocka_unit_test(test_matmul_fwd),
      cmocka_unit_test(test_matmul_bwd),
      cmocka_unit_test(test_attention_fwd),
      cmocka_unit_test(test_attention_bwd),
      cmocka_unit_test(test_attention_long),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_residual),
      cmocka_unit_test(test_crossentropy_fwd),
      cmocka_unit_test(test_crossentropy_bwd),
      cmocka_unit_test(test_sumsq),
      cmocka_unit_test(test_scale),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
