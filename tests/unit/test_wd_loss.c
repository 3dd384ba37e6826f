/*
 * Tests of wd_loss (watchdog/wd_loss.c): no false positives on a realistic
 * decaying loss curve with noise, a 3x jump fires with the right numbers,
 * spikes do not enter the window, NaN/Inf is a fault at once (warm-up too),
 * MAD == 0 is guarded, warm-up length and config validation.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_loss.h"

/* Deterministic N(0,1) from xorshift + Box-Muller (no libc rand()). */
static uint64_t rng;
static double unif(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double gauss(void) {
  return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
}

/* A GPT-style curve: from ~10.8 (ln 50257) down to ~3 with exponential
 * decay, and multiplicative noise of 2% (batch-to-batch variation). */
static double curve(int step) {
  return 3.0 + 7.8 * exp(-step / 150.0);
}

static wd_loss *make_default(void) {
  wd_loss_cfg cfg;
  wd_loss_cfg_default(&cfg);
  wd_loss *d;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_OK);
  return d;
}

static void test_no_false_positive_on_decay(void **state) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    rng = 0x9E3779B97F4A7C15ULL * seed;
    wd_loss *d = make_default();
    int warm = 0, ok = 0;
    for (int s = 0; s < 1000; s++) {
      double x = curve(s) * (1.0 + 0.02 * gauss());
      wd_loss_event ev;
      assert_int_equal(wd_loss_push(d, s, x, 1.0, &ev), FT_OK);
      if (ev.verdict == WD_LOSS_SPIKE)
        fail_msg("false positive: seed %llu step %d loss %.4f median %.4f mad %.5f z %.2f",
                 (unsigned long long)seed, s, x, ev.median, ev.mad, ev.z);
      assert_true(ev.verdict == WD_LOSS_OK || ev.verdict == WD_LOSS_WARMUP);
      warm += ev.verdict == WD_LOSS_WARMUP;
      ok += ev.verdict == WD_LOSS_OK;
    }
    assert_int_equal(warm, 20); /* min_steps */
    assert_int_equal(ok, 980);
    wd_loss_free(d);
  }
}

static void test_fires_on_3x_jump(void **state) {
  rng = 12345;
  wd_loss *d = make_default();
  wd_loss_event ev;
  double last = 0;
  for (int s = 0; s < 500; s++) {
    last = curve(s) * (1.0 + 0.02 * gauss());
    assert_int_equal(wd_loss_push(d, s, last, 1.0, &ev), FT_OK);
    assert_true(ev.verdict != WD_LOSS_SPIKE);
  }
  double med0, mad0;
  assert_int_equal(wd_loss_stats(d, &med0, &mad0), FT_OK);
  double spike = 3.0 * curve(500);
  assert_int_equal(wd_loss_push(d, 500, spike, 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_SPIKE);
  assert_int_equal(ev.step, 500);
  assert_true(ev.value == spike);
  assert_true(ev.median == med0);
  assert_true(ev.mad == mad0);
  double scale = fmax(1.4826 * mad0, 0.01 * fabs(med0));
  assert_true(fabs(ev.z - (spike - med0) / scale) < 1e-9);
  assert_true(ev.z > 6.0);
  /* The spike was not added: the window is as before. */
  double med1, mad1;
  assert_int_equal(wd_loss_stats(d, &med1, &mad1), FT_OK);
  assert_true(med1 == med0 && mad1 == mad0);
  /* A second spike in a row still fires (baseline not raised)... */
  assert_int_equal(wd_loss_push(d, 501, spike, 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_SPIKE);
  /* ...and the next normal value is fine. */
  assert_int_equal(wd_loss_push(d, 502, curve(502), 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_OK);
  /* A sudden drop is not a fault. */
  assert_int_equal(wd_loss_push(d, 503, 0.3 * curve(503), 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_OK);
  wd_loss_free(d);
}

static void test_nonfinite_always(void **state) {
  wd_loss *d = make_default();
  wd_loss_event ev;
  /* during warm-up */
  assert_int_equal(wd_loss_push(d, 0, NAN, 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_NONFINITE);
  assert_true(isnan(ev.median)); /* empty window */
  assert_int_equal(wd_loss_push(d, 1, 5.0, INFINITY, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_NONFINITE);
  assert_int_equal(wd_loss_push(d, 2, -INFINITY, 1.0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_NONFINITE);
  double med, mad;
  assert_int_equal(wd_loss_stats(d, &med, &mad), FT_ESTATE); /* nothing accepted */
  for (int s = 3; s < 40; s++) {
    assert_int_equal(wd_loss_push(d, s, 4.0 + 0.01 * (s % 3), 1.0, &ev), FT_OK);
    assert_true(ev.verdict == WD_LOSS_OK || ev.verdict == WD_LOSS_WARMUP);
  }
  assert_int_equal(wd_loss_push(d, 40, 4.0, NAN, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_NONFINITE);
  assert_int_equal(ev.step, 40);
  assert_true(isnan(ev.grad_norm));
  assert_true(isnan(ev.z));
  wd_loss_free(d);
}

static void test_warmup_and_mad_zero(void **state) {
  wd_loss_cfg cfg;
  wd_loss_cfg_default(&cfg);
  cfg.window = 10;
  cfg.min_steps = 5;
  wd_loss *d;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_OK);
  wd_loss_event ev;
  /* A constant loss: MAD == 0. Large values during warm-up never fire. */
  for (int s = 0; s < 5; s++) {
    assert_int_equal(wd_loss_push(d, s, s == 3 ? 100.0 : 2.0, 0, &ev), FT_OK);
    assert_int_equal(ev.verdict, WD_LOSS_WARMUP);
  }
  for (int s = 5; s < 15; s++) {
    assert_int_equal(wd_loss_push(d, s, 2.0, 0, &ev), FT_OK);
    assert_int_equal(ev.verdict, WD_LOSS_OK);
  }
  /* window is all 2.0 now: MAD 0, scale = 1% of 2.0 = 0.02 */
  assert_int_equal(wd_loss_push(d, 15, 2.1, 0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_OK); /* z = 5 */
  assert_true(ev.mad == 0.0);
  assert_true(fabs(ev.z - 5.0) < 1e-9);
  assert_int_equal(wd_loss_push(d, 16, 2.2, 0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_SPIKE); /* z = 10 */
  assert_true(isfinite(ev.z));
  /* reset: warm-up again */
  wd_loss_reset(d);
  assert_int_equal(wd_loss_push(d, 17, 50.0, 0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_WARMUP);
  wd_loss_free(d);

  /* min_steps 0 still needs 3 values; a zero median needs the absolute floor */
  cfg.min_steps = 0;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_OK);
  for (int s = 0; s < 3; s++) {
    assert_int_equal(wd_loss_push(d, s, 0.0, 0, &ev), FT_OK);
    assert_int_equal(ev.verdict, WD_LOSS_WARMUP);
  }
  assert_int_equal(wd_loss_push(d, 3, 1e-3, 0, &ev), FT_OK);
  assert_int_equal(ev.verdict, WD_LOSS_SPIKE);
  assert_true(isfinite(ev.z));
  wd_loss_free(d);
}

static void test_window_rolls(void **state) {
  wd_loss_cfg cfg;
  wd_loss_cfg_default(&cfg);
  cfg.window = 5;
  cfg.min_steps = 3;
  wd_loss *d;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_OK);
  wd_loss_event ev;
  double xs[] = {10, 9, 8, 7, 6, 5, 4};
  for (int i = 0; i < 7; i++)
    assert_int_equal(wd_loss_push(d, i, xs[i], 0, &ev), FT_OK);
  double med, mad;
  assert_int_equal(wd_loss_stats(d, &med, &mad), FT_OK);
  assert_true(med == 6.0); /* window {8,7,6,5,4} */
  assert_true(mad == 1.0);
  wd_loss_free(d);
}

static void test_bad_config(void **state) {
  wd_loss_cfg cfg;
  wd_loss *d;
  wd_loss_cfg_default(&cfg);
  cfg.window = 1;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_EINVAL);
  wd_loss_cfg_default(&cfg);
  cfg.zscore = 0;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_EINVAL);
  wd_loss_cfg_default(&cfg);
  cfg.zscore = NAN;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_EINVAL);
  wd_loss_cfg_default(&cfg);
  cfg.min_steps = -1;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_EINVAL);
  wd_loss_cfg_default(&cfg);
  cfg.mad_floor_rel = -0.1;
  assert_int_equal(wd_loss_new(&cfg, &d), FT_EINVAL);
  assert_string_equal(wd_loss_verdict_name(WD_LOSS_SPIKE), "spike");
  assert_string_equal(wd_loss_verdict_name(42), "unknown");
  wd_loss_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_false_positive_on_decay),
      cmocka_unit_test(test_fires_on_3x_jump),
      cmocka_unit_test(test_nonfinite_always),
      cmocka_unit_test(test_warmup_and_mad_zero),
      cmocka_unit_test(test_window_rolls),
      cmocka_unit_test(test_bad_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
