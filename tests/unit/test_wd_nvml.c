/*
 * Tests of wd_nvml (watchdog/wd_nvml.c). This project's test machines have
 * no GPU, so only the absent and failed paths are exercised: no library, a
 * library without NVML's symbols; and the health query's reading of each
 * answer against a stand-in library (fake_nvml.c). Where libnvidia-ml.so.1 does load, the
 * default open is checked to either work (a wait with timeout 0 returns
 * 0 or 1) or fail cleanly; the real event path is NOT tested here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_nvml.h"

static void test_absent_library(void **state) {
  wd_nvml *n = (wd_nvml *)0x1;
  assert_int_equal(wd_nvml_open("/nonexistent/libnvidia-ml.so.1", &n), FT_ENOENT);
  assert_null(n);
  assert_non_null(strstr(ft_err_detail(), "NVML not available"));
  wd_nvml_close(NULL);
  assert_int_equal(wd_nvml_device_count(NULL), 0);
  wd_nvml_xid ev;
  assert_int_equal(wd_nvml_wait(NULL, 0, &ev), FT_EINVAL);
}

static void test_library_without_symbols(void **state) {
  wd_nvml *n = NULL;
  /* libm is always there and has none of NVML's symbols. */
  assert_int_equal(wd_nvml_open("libm.so.6", &n), FT_ENOENT);
  assert_null(n);
  assert_non_null(strstr(ft_err_detail(), "nvmlInit_v2"));
}

static void test_default_library(void **state) {
  wd_nvml *n = NULL;
  int rc = wd_nvml_open(NULL, &n);
  if (rc == FT_ENOENT || rc == FT_EIO) { /* no driver: the expected case here */
    assert_null(n);
    assert_true(strlen(ft_err_detail()) > 0);
    return;
  }
  assert_int_equal(rc, FT_OK);
  assert_true(wd_nvml_device_count(n) > 0);
  wd_nvml_xid ev;
  rc = wd_nvml_wait(n, 0, &ev);
  assert_true(rc == 0 || rc == 1);
  wd_nvml_close(n);
}

static void test_health(void **state) {
  (void)state;
  wd_nvml_health h;
  assert_int_equal(wd_nvml_health_of("/nonexistent/libnvidia-ml.so.1", "0000:3B:00.0", &h),
                   FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "NVML not available"));
  assert_true(h.ecc_uncorrected == -1 && h.retired_pending == -1 && h.remap_pending == -1);
  assert_int_equal(wd_nvml_health_of("libm.so.6", "0000:3B:00.0", &h), FT_ENOENT);
  /* the stand-in: a healthy board, then each kind of bad memory */
  setenv("FAKE_NVML_PCI", "0000:3B:00.0", 1);
  assert_int_equal(wd_nvml_health_of(FAKE_NVML, "0000:3b:00.0", &h), FT_OK);
  assert_true(h.ecc_uncorrected == 0 && h.retired_pending == 0 && h.remap_pending == 0 &&
              h.remap_failed == 0);
  setenv("FAKE_NVML_ECC", "3", 1);
  setenv("FAKE_NVML_RETIRED", "1", 1);
  setenv("FAKE_NVML_REMAP", "failed", 1);
  assert_int_equal(wd_nvml_health_of(FAKE_NVML, "0000:3B:00.0", &h), FT_OK);
  assert_true(h.ecc_uncorrected == 3 && h.retired_pending == 1 && h.remap_pending == 0 &&
              h.remap_failed == 1);
  assert_int_equal(wd_nvml_health_of(FAKE_NVML, "0000:AF:00.0", &h), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "no GPU at 0000:AF:00.0"));
  setenv("FAKE_NVML_INIT", "999", 1);
  assert_int_equal(wd_nvml_health_of(FAKE_NVML, "0000:3B:00.0", &h), FT_EIO);
  unsetenv("FAKE_NVML_INIT");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health),
      cmocka_unit_test(test_absent_library),
      cmocka_unit_test(test_library_without_symbols),
      cmocka_unit_test(test_default_library),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
