/*
 * test_comm_filestore: the directory-backed rendezvous store
 * (worker/comm_filestore.c) on its own: values round-trip byte for byte
 * (empty and binary ones too), keys with '/', '.', '%' stay inside the
 * directory and never collide, wait times out on an absent key and returns
 * at once when every key is there, get of an absent key is FT_ENOENT, and a
 * key set by another process while we wait is seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm_filestore.h"
#include "ft_err.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  char dir[256];
  comm_kv kv;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/ft_test_kv.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(f->dir))
    return -1;
  if (comm_filestore_init(&f->kv, f->dir) != FT_OK)
    return -1;
  *state = f;
  return 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(p);
}

static int teardown(void **state) {
  fixture *f = *state;
  comm_filestore_release(&f->kv);
  nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  free(f);
  return 0;
}

static void check_kv_value(comm_kv *kv, const char *key, const void *want, size_t wlen) {
  void *val = NULL;
  size_t len = 99;
  assert_int_equal(kv->get(kv->ud, key, &val, &len), FT_OK);
  assert_int_equal(len, wlen);
  if (wlen)
    assert_memory_equal(val, want, wlen);
  free(val);
}

static void test_roundtrip(void **state) {
  fixture *f = *state;
  comm_kv *kv = &f->kv;
  unsigned char bin[300];
  for (size_t i = 0; i < sizeof bin; i++)
    bin[i] = (unsigned char)(i * 7);
  assert_int_equal(kv->set(kv->ud, "gen1/rank_0", bin, sizeof bin), FT_OK);
  assert_int_equal(kv->set(kv->ud, "gen1/empty", "", 0), FT_OK);
  check_kv_value(kv, "gen1/rank_0", bin, sizeof bin);
  check_kv_value(kv, "gen1/empty", "", 0);
  /* a later set replaces the value whole */
  assert_int_equal(kv->set(kv->ud, "gen1/rank_0", "xy", 2), FT_OK);
  check_kv_value(kv, "gen1/rank_0", "xy", 2);
}

static void test_keys_stay_inside(void **state) {
  fixture *f = *state;
  comm_kv *kv = &f->kv;
  const char *keys[] = {"..", "../escape", "a/b", "a%2Fb", ".tmp.1.2", "a.b", "a b"};
  const int n = (int)(sizeof keys / sizeof keys[0]);
  for (int i = 0; i < n; i++)
    assert_int_equal(kv->set(kv->ud, keys[i], keys[i], strlen(keys[i])), FT_OK);
  for (int i = 0; i < n; i++)
    check_kv_value(kv, keys[i], keys[i], strlen(keys[i]));
  /* exactly n plain files in the directory, none elsewhere, no temporaries left */
  DIR *d = opendir(f->dir);
  assert_non_null(d);
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    assert_true(e->d_name[0] != '.');
    assert_null(strchr(e->d_name, '/'));
    files++;
  }
  closedir(d);
  assert_int_equal(files, n);
  char outside[512];
  snprintf(outside, sizeof outside, "%s/../escape", f->dir);
  assert_int_not_equal(access(outside, F_OK), 0);
}

static void test_absent(void **state) {
  fixture *f = *state;
  comm_kv *kv = &f->kv;
  void *val = (void *)1;
  size_t len = 5;
  assert_int_equal(kv->get(kv->ud, "nope", &val, &len), FT_ENOENT);
  assert_null(val);
  assert_int_equal(kv->set(kv->ud, "yes", "1", 1), FT_OK);
  const char *both[] = {"yes", "nope"};
  assert_int_equal(kv->wait(kv->ud, both, 2, 50), FT_ETIMEDOUT);
  assert_non_null(strstr(ft_err_detail(), "nope"));
  assert_int_equal(kv->wait(kv->ud, both, 1, 0), FT_OK);
}

static void test_wait_sees_other_process(void **state) {
  fixture *f = *state;
  comm_kv *kv = &f->kv;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    usleep(100 * 1000);
    _exit(kv->set(kv->ud, "late/key", "v", 1) == FT_OK ? 0 : 1);
  }
  const char *k[] = {"late/key"};
  assert_int_equal(kv->wait(kv->ud, k, 1, 10000), FT_OK);
  check_kv_value(kv, "late/key", "v", 1);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_bad_dir(void **state) {
  comm_kv kv;
  assert_int_equal(comm_filestore_init(&kv, "/nonexistent/ft_kv_dir"), FT_ENOENT);
  comm_filestore_release(&kv); /* zeroed by the failed init: a no-op */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_keys_stay_inside, setup, teardown),
      cmocka_unit_test_setup_teardown(test_absent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wait_sees_other_process, setup, teardown),
      cmocka_unit_test(test_bad_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
