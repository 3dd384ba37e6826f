/*
 * test_clock: common/ft_clock.h.
 *
 * The monotonic clock in its three units agrees with itself and never goes
 * back; ft_wall_ns agrees with ft_wall_ms; ft_wall_deadline gives a
 * normalised CLOCK_REALTIME instant no earlier than now + ms and no later
 * than the clock read just after, for every millisecond remainder (a
 * tv_nsec of 1e9 or more makes pthread_cond_timedwait fail with EINVAL), and
 * a condition wait on it times out (ETIMEDOUT). Bounds only: nothing here
 * depends on how fast the machine is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "ft_clock.h"

static int64_t ts_ns(struct timespec ts) {
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void test_monotonic_units(void **state) {
  (void)state;
  uint64_t a = ft_now_ns();
  int64_t ms = ft_now_ms();
  double s = ft_now_s();
  uint64_t b = ft_now_ns();
  assert_true(b >= a);
  assert_true(ms >= (int64_t)(a / 1000000u) && ms <= (int64_t)(b / 1000000u));
  assert_true(s >= (double)a * 1e-9 - 1e-6 && s <= (double)b * 1e-9 + 1e-6);
}

static void test_wall_units(void **state) {
  (void)state;
  int64_t ms0 = ft_wall_ms(), ns = ft_wall_ns(), ms1 = ft_wall_ms();
  assert_true(ns / 1000000 >= ms0 && ns / 1000000 <= ms1);
  assert_true(ms0 > 1600000000000LL); /* after 2020: really the epoch clock */
}

static void test_deadline(void **state) {
  (void)state;
  const int64_t cases[] = {0, 1, 10, 999, 1000, 1001, 1500, 1999, 2000, 32000, 86400123};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* Many tries, so some land with the clock's tv_nsec near 1e9. */
    for (int k = 0; k < 2000; k++) {
      int64_t before = ft_wall_ns();
      struct timespec d = ft_wall_deadline(cases[i]);
      int64_t after = ft_wall_ns();
      assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
      assert_true(ts_ns(d) >= before + cases[i] * 1000000LL);
      assert_true(ts_ns(d) <= after + cases[i] * 1000000LL);
    }
  }
  struct timespec neg = ft_wall_deadline(-5000);
  assert_true(ts_ns(neg) <= ft_wall_ns());
}

static void test_deadline_timedwait(void **state) {
  (void)state;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  pthread_mutex_lock(&mu);
  for (int ms = 1; ms <= 30; ms++) {
    struct timespec d = ft_wall_deadline(ms);
    int rc;
    do
      rc = pthread_cond_timedwait(&cv, &mu, &d);
    while (rc == 0); /* a spurious wake-up: wait again */
    assert_int_equal(rc, ETIMEDOUT);
  }
  pthread_mutex_unlock(&mu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_monotonic_units),
      cmocka_unit_test(test_wall_units),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_deadline_timedwait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
