/* Unit tests of supervisor/sup_kv.c: the rendezvous store with waiting gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_kv.h"

#include <stdlib.h>
#include <string.h>

typedef struct reply {
  void *tag;
  uint64_t owner;
  uint32_t req;
  int status;
  uint32_t nvals;
  char vals[4][32];
} reply;

static reply g_r[16];
static int g_n;

static void on_reply(void *ud, void *tag, uint64_t owner, uint32_t req, int status,
                     const ft_wire_blob *vals, uint32_t nvals) {
  assert_true(g_n < 16);
  reply *r = &g_r[g_n++];
  memset(r, 0, sizeof *r);
  r->tag = tag;
  r->owner = owner;
  r->req = req;
  r->status = status;
  r->nvals = nvals;
  for (uint32_t i = 0; i < nvals && i < 4; i++)
    memcpy(r->vals[i], vals[i].data, vals[i].len < 31 ? vals[i].len : 31);
}

static int setup(void **st) {
  g_n = 0;
  sup_kv *kv;
  assert_int_equal(sup_kv_new(on_reply, NULL, &kv), 0);
  *st = kv;
  return 0;
}
static int teardown(void **st) {
  sup_kv_free(*st);
  return 0;
}

static void set_s(sup_kv *kv, const char *k, const char *v) {
  assert_int_equal(sup_kv_set(kv, k, (const uint8_t *)v, (uint32_t)strlen(v)), 0);
}

static void test_immediate(void **st) {
  sup_kv *kv = *st;
  set_s(kv, "g1/a", "A");
  set_s(kv, "g1/b", "B");
  const char *keys[] = {"g1/b", "g1/a"};
  int tag;
  assert_int_equal(sup_kv_get(kv, 3, 9, keys, 2, &tag), 1);
  assert_int_equal(g_n, 1);
  assert_int_equal(g_r[0].status, FT_KV_OK);
  assert_int_equal(g_r[0].req, 9);
  assert_int_equal(g_r[0].owner, 3);
  assert_ptr_equal(g_r[0].tag, &tag);
  assert_int_equal(g_r[0].nvals, 2);
  assert_string_equal(g_r[0].vals[0], "B"); /* key order, not set order */
  assert_string_equal(g_r[0].vals[1], "A");
  assert_int_equal(sup_kv_npending(kv), 0);
}

static void test_waits_until_complete(void **st) {
  sup_kv *kv = *st;
  const char *keys[] = {"g1/r0", "g1/r1"};
  int t1, t2;
  assert_int_equal(sup_kv_get(kv, 1, 1, keys, 2, &t1), 0);
  assert_int_equal(sup_kv_get(kv, 2, 1, keys, 1, &t2), 0);
  assert_int_equal(sup_kv_npending(kv), 2);
  set_s(kv, "g1/r0", "x0");
  assert_int_equal(g_n, 1); /* only the one-key get is complete */
  assert_ptr_equal(g_r[0].tag, &t2);
  assert_string_equal(g_r[0].vals[0], "x0");
  set_s(kv, "unrelated", "u");
  assert_int_equal(g_n, 1);
  set_s(kv, "g1/r1", "x1");
  assert_int_equal(g_n, 2);
  assert_ptr_equal(g_r[1].tag, &t1);
  assert_int_equal(g_r[1].nvals, 2);
  assert_string_equal(g_r[1].vals[1], "x1");
  assert_int_equal(sup_kv_npending(kv), 0);
}

static void test_overwrite_and_binary(void **st) {
  sup_kv *kv = *st;
  set_s(kv, "k", "old");
  uint8_t bin[3] = {0, 255, 7};
  assert_int_equal(sup_kv_set(kv, "k", bin, 3), 0);
  uint32_t len;
  const uint8_t *v = sup_kv_lookup(kv, "k", &len);
  assert_non_null(v);
  assert_int_equal(len, 3);
  assert_memory_equal(v, bin, 3);
  assert_int_equal(sup_kv_nkeys(kv), 1);
  assert_int_equal(sup_kv_set(kv, "empty", NULL, 0), 0);
  assert_non_null(sup_kv_lookup(kv, "empty", &len));
  assert_int_equal(len, 0);
}

static void test_timeout_and_drop(void **st) {
  sup_kv *kv = *st;
  const char *keys[] = {"never"};
  int t1, t2, t3;
  assert_int_equal(sup_kv_get(kv, 1, 5, keys, 1, &t1), 0);
  assert_int_equal(sup_kv_get(kv, 2, 6, keys, 1, &t2), 0);
  assert_int_equal(sup_kv_get(kv, 2, 7, keys, 1, &t3), 0);
  assert_int_equal(sup_kv_timeout(kv, &t1), 1);
  assert_int_equal(g_r[0].status, FT_KV_TIMEOUT);
  assert_int_equal(g_r[0].nvals, 0);
  assert_int_equal(g_r[0].req, 5);
  assert_int_equal(sup_kv_timeout(kv, &t1), 0); /* answered once only */
  sup_kv_drop_owner(kv, 2);
  assert_int_equal(g_n, 3);
  assert_int_equal(g_r[1].status, -1);
  assert_int_equal(g_r[2].status, -1);
  assert_int_equal(sup_kv_npending(kv), 0);
  set_s(kv, "never", "now");
  assert_int_equal(g_n, 3); /* dropped gets are never answered */
}

static void test_free_drops_pending(void **st) {
  sup_kv *kv = *st;
  const char *keys[] = {"x"};
  int t;
  assert_int_equal(sup_kv_get(kv, 1, 1, keys, 1, &t), 0);
  sup_kv_free(kv);
  *st = NULL;
  assert_int_equal(g_n, 1);
  assert_int_equal(g_r[0].status, -1);
  assert_int_equal(sup_kv_new(on_reply, NULL, (sup_kv **)st), 0);
}

static void test_bad_counts(void **st) {
  sup_kv *kv = *st;
  const char *keys[] = {"x"};
  assert_true(sup_kv_get(kv, 1, 1, keys, 0, NULL) < 0);
  assert_int_equal(g_n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_immediate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_waits_until_complete, setup, teardown),
      cmocka_unit_test_setup_teardown(test_overwrite_and_binary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_and_drop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_free_drops_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_counts, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
