/*
 * Tests of wd_nvml (watchdog/wd_nvml.c). This project's test machines have
 * no GPU, so only the absent and failed paths are exercised: no library, a
 * library without NVML's symbols. Where libnvidia-ml.so.1 does load, the
 * default open is checked to either work (a wait with timeout 0 returns
 * 0 or 1) or fail cleanly; the real event path is NOT tested here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_absent_library),
      cmocka_unit_test(test_library_without_symbols),
      cmocka_unit_test(test_default_library),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
