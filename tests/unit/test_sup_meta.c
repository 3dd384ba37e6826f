/* Unit tests of ckptstore/ckpt_meta.c: the supervisor's records in the
 * catalog (real RocksDB in a temp dir). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckptstore.h"
#include "ft_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_put_get_reopen(void **st) {
  char dir[] = "/tmp/test_sup_meta.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char uri[128];
  snprintf(uri, sizeof uri, "local:%s/store", dir);
  ckpt_store *s;
  assert_int_equal(ckpt_store_open(uri, NULL, &s), 0);
  char *v = (char *)1;
  assert_int_equal(ckpt_store_get_meta(s, "run/state", &v), FT_ENOENT);
  assert_null(v);
  assert_int_equal(ckpt_store_put_meta(s, "run/state", "{\"gen\":3}"), 0);
  assert_int_equal(ckpt_store_put_meta(s, "run/state", "{\"gen\":4}"), 0); /* overwrite */
  assert_int_equal(ckpt_store_get_meta(s, "run/state", &v), 0);
  assert_string_equal(v, "{\"gen\":4}");
  free(v);
  assert_true(ckpt_store_put_meta(s, "", "x") < 0);
  /* meta keys are not checkpoints */
  ckpt_info *list = NULL;
  size_t n = 9;
  assert_int_equal(ckpt_store_list(s, NULL, &list, &n), 0);
  assert_int_equal(n, 0);
  free(list);
  ckpt_store_free(s);

  /* durable across a reopen; a reader sees it but cannot write */
  ckpt_store_opts ro = {.read_only = 1};
  assert_int_equal(ckpt_store_open(uri, &ro, &s), 0);
  assert_int_equal(ckpt_store_get_meta(s, "run/state", &v), 0);
  assert_string_equal(v, "{\"gen\":4}");
  free(v);
  assert_int_equal(ckpt_store_put_meta(s, "run/state", "{}"), FT_ESTATE);
  ckpt_store_free(s);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_put_get_reopen)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
