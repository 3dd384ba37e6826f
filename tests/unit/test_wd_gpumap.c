/*
 * Tests of wd_gpumap (watchdog/wd_gpumap.c): parsing nvidia-smi's CSV output
 * (tests/data/xid/nvidia-smi.csv) and hand-written map files, lookups in any
 * bus-id form, errors; and the nvidia-smi runner against a fake nvidia-smi
 * script on PATH (and with none on PATH: "not available").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_gpumap.h"

static void test_parse_nvidia_smi_file(void **state) {
  const char *src = getenv("FT_SRC");
  if (!src)
    skip();
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/xid/nvidia-smi.csv", src);
  wd_gpumap m;
  assert_int_equal(wd_gpumap_load(path, &m), FT_OK);
  assert_int_equal(m.n, 8);
  assert_int_equal(wd_gpumap_index(&m, "0000:3b:00"), 1);
  assert_int_equal(wd_gpumap_index(&m, "PCI:0000:3B:00"), 1);
  assert_int_equal(wd_gpumap_index(&m, "00000000:DB:00.0"), 6);
  assert_int_equal(wd_gpumap_index(&m, "0000:5e:00"), 2);
  assert_int_equal(wd_gpumap_index(&m, "0001:5e:00"), 7); /* other domain */
  assert_int_equal(wd_gpumap_index(&m, "0000:99:00"), -1);
  assert_int_equal(wd_gpumap_index(&m, "garbage"), -1);
  assert_int_equal(wd_gpumap_load("/nonexistent/map.csv", &m), FT_ENOENT);
}

static void test_parse_forms_and_errors(void **state) {
  const char *text = "# index pci\n\n  3   0000:3b:00\r\n0,00000000:18:00.0\n";
  wd_gpumap m;
  assert_int_equal(wd_gpumap_parse(text, strlen(text), &m), FT_OK);
  assert_int_equal(m.n, 2);
  assert_int_equal(wd_gpumap_index(&m, "0000:3b:00"), 3);
  assert_int_equal(wd_gpumap_index(&m, "0000:18:00"), 0);
  assert_int_equal(wd_gpumap_parse("", 0, &m), FT_OK);
  assert_int_equal(m.n, 0);

  const char *bad[] = {"x, 0000:3b:00",
                       "1 0000:3b:00\n2 0000:3b:00",
                       "1, 0000:3b:00\n1, 0000:18:00",
                       "1",
                       "1,",
                       "12345, 0000:3b:00",
                       "1, 0000:3b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    m.n = 42;
    if (wd_gpumap_parse(bad[i], strlen(bad[i]), &m) != FT_EFORMAT)
      fail_msg("accepted bad map: %s", bad[i]);
    assert_int_equal(m.n, 42); /* untouched on error */
  }
  assert_int_equal(wd_gpumap_parse("1 0000:3b:00\n2 0000:3b:00", 25, &m), FT_EFORMAT);
  assert_non_null(strstr(ft_err_detail(), "line 2"));

  char big[8192];
  size_t n = 0;
  for (int i = 0; i <= WD_GPUMAP_MAX; i++)
    n += (size_t)snprintf(big + n, sizeof big - n, "%d, 0000:%02x:00\n", i, i);
  assert_int_equal(wd_gpumap_parse(big, n, &m), FT_ENOSPC);
}

static void test_nvidia_smi_runner(void **state) {
  char dir[] = "/tmp/test_wd_gpumap.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
  wd_gpumap m;

  /* Nothing on PATH: cleanly "not available". */
  setenv("PATH", dir, 1);
  assert_int_equal(wd_gpumap_from_nvidia_smi(&m), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "not available"));

  /* A fake nvidia-smi that checks its arguments. */
  char exe[256];
  snprintf(exe, sizeof exe, "%s/nvidia-smi", dir);
  FILE *f = fopen(exe, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n"
             "[ \"$*\" = \"--query-gpu=index,pci.bus_id --format=csv,noheader\" ] || exit 3\n"
             "echo '0, 00000000:18:00.0'\necho '1, 00000000:3B:00.0'\n");
  fclose(f);
  assert_int_equal(chmod(exe, 0755), 0);
  char path[1024];
  snprintf(path, sizeof path, "%s:/bin:/usr/bin", dir);
  setenv("PATH", path, 1);
  assert_int_equal(wd_gpumap_from_nvidia_smi(&m), FT_OK);
  assert_int_equal(m.n, 2);
  assert_int_equal(wd_gpumap_index(&m, "0000:3b:00"), 1);

  /* A failing nvidia-smi (no driver loaded). */
  f = fopen(exe, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n");
  fclose(f);
  assert_int_equal(wd_gpumap_from_nvidia_smi(&m), FT_EIO);

  if (old) {
    setenv("PATH", old, 1);
    free(old);
  }
  unlink(exe);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_nvidia_smi_file),
      cmocka_unit_test(test_parse_forms_and_errors),
      cmocka_unit_test(test_nvidia_smi_runner),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
