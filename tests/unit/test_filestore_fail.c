/*
 * test_filestore_fail: a set on the directory rendezvous store
 * (worker/comm_filestore.c) whose write fails. The file size limit
 * (RLIMIT_FSIZE, SIGXFSZ ignored) makes every write past 1 KiB fail with
 * EFBIG: each set must fail with a detail naming the write, leave no
 * temporary file and no open descriptor behind (it used to leak one per
 * failed set), and a small value must still go through afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm_filestore.h"
#include "ft_err.h"

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      n++;
  closedir(d);
  return n;
}

static void test_failed_set_leaks_nothing(void **state) {
  (void)state;
  char dir[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/ft_test_kvfail.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(dir));
  comm_kv kv;
  assert_int_equal(comm_filestore_init(&kv, dir), FT_OK);

  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 1024;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);

  int fds_before = count_entries("/proc/self/fd");
  static char big[64 << 10];
  memset(big, 7, sizeof big);
  for (int i = 0; i < 20; i++) {
    char key[32];
    snprintf(key, sizeof key, "big%d", i);
    int rc = kv.set(kv.ud, key, big, sizeof big);
    assert_int_not_equal(rc, FT_OK);
    assert_non_null(strstr(ft_err_detail(), "filestore set: write "));
  }
  assert_int_equal(count_entries("/proc/self/fd"), fds_before);
  assert_int_equal(count_entries(dir), 0); /* no value, no temp file */

  assert_int_equal(kv.set(kv.ud, "small", "ok", 2), FT_OK);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  void *val = NULL;
  size_t len = 0;
  assert_int_equal(kv.get(kv.ud, "small", &val, &len), FT_OK);
  assert_int_equal(len, 2);
  assert_memory_equal(val, "ok", 2);
  free(val);

  comm_filestore_release(&kv);
  char path[300];
  snprintf(path, sizeof path, "%s/small", dir);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failed_set_leaks_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
