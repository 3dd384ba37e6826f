/* Unit tests of supervisor/sup_kv.c: the rendezvous store with waiting gets,
 * and the bounds on what one peer (account) may store; and that its checks
 * (check_kv: K1-K4) catch a caller that breaks the store's rules (death
 * tests, test_inv.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_inv.h"

#include <pthread.h>

#include "ft_err.h"
#include "sup_kv.h"

#include <stdio.h>
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

/* One account may hold max_keys keys and max_bytes bytes (key + value);
 * a set past either is refused with FT_EPROTO naming the bound, stores
 * nothing, and leaves other accounts and the supervisor's own sets free.
 * Overwriting its own key re-charges it; another's key moves the charge. */
static void test_peer_bounds(void **st) {
  sup_kv *kv = *st;
  sup_kv_set_limits(kv, 100, 3);
  uint8_t v[64] = {0};
  size_t bytes, keys;
  assert_int_equal(sup_kv_set_by(kv, 7, "a", v, 10), FT_OK); /* 11 */
  assert_int_equal(sup_kv_set_by(kv, 7, "b", v, 10), FT_OK); /* 22 */
  assert_int_equal(sup_kv_set_by(kv, 7, "a", v, 40), FT_OK); /* own key again: 52 */
  sup_kv_account(kv, 7, &bytes, &keys);
  assert_int_equal(bytes, 52);
  assert_int_equal(keys, 2);
  assert_int_equal(sup_kv_set_by(kv, 7, "c", v, 60), FT_EPROTO); /* 113 bytes > 100 */
  assert_non_null(strstr(ft_err_detail(), "would store 113 bytes (at most 100)"));
  assert_null(sup_kv_lookup(kv, "c", NULL));
  assert_int_equal(sup_kv_set_by(kv, 7, "c", v, 1), FT_OK);
  assert_int_equal(sup_kv_set_by(kv, 7, "d", v, 1), FT_EPROTO); /* a fourth key */
  assert_non_null(strstr(ft_err_detail(), "would store 4 keys (at most 3)"));
  assert_null(sup_kv_lookup(kv, "d", NULL));
  /* another peer and the supervisor are not held back by peer 7 */
  assert_int_equal(sup_kv_set_by(kv, 8, "d", v, 60), FT_OK);
  assert_int_equal(sup_kv_set(kv, "big", v, 64), FT_OK);
  /* peer 8 takes over peer 7's "a": the charge moves, 7 can store again */
  assert_int_equal(sup_kv_set_by(kv, 8, "a", v, 1), FT_OK);
  sup_kv_account(kv, 7, &bytes, &keys);
  assert_int_equal(keys, 2);
  assert_int_equal(bytes, 13);
  assert_int_equal(sup_kv_set_by(kv, 7, "e", v, 60), FT_OK);
  /* many accounts (the table grows) each keep their own charge */
  for (uint64_t w = 100; w < 400; w++) {
    char k[16];
    snprintf(k, sizeof k, "r%u", (unsigned)w);
    assert_int_equal(sup_kv_set_by(kv, w << 32, k, v, (uint32_t)(w % 50)), FT_OK);
  }
  for (uint64_t w = 100; w < 400; w++) {
    sup_kv_account(kv, w << 32, &bytes, &keys);
    assert_int_equal(keys, 1);
    assert_int_equal(bytes, (w < 1000 ? 4 : 5) + w % 50);
  }
}

/* K1: a reply callback that touches the store (the supervisor's closes a
 * connection only from the loop for this reason: sup_conn.c overflow). */
static sup_kv *g_kv;
static void reply_sets(void *ud, void *tag, uint64_t owner, uint32_t req, int status,
                       const ft_wire_blob *vals, uint32_t nvals) {
  sup_kv_set(g_kv, "g1/late", (const uint8_t *)"x", 1);
}
static void reply_reenters_body(void) {
  assert_int_equal(sup_kv_new(reply_sets, NULL, &g_kv), 0);
  const char *keys[] = {"g1/a"};
  assert_int_equal(sup_kv_get(g_kv, 1, 1, keys, 1, NULL), 0);
  sup_kv_set(g_kv, "g1/a", (const uint8_t *)"A", 1); /* answers the get: the reply sets */
}
static void test_inv_reply_reenters(void **st) {
  (void)st;
  assert_inv_broken(reply_reenters_body,
                    "K1: sup_kv_set from inside the reply callback (it may not touch kv)");
}

/* K1: a call from a thread other than the loop's. */
static void *get_elsewhere(void *arg) {
  const char *keys[] = {"g1/a"};
  sup_kv_get(arg, 1, 1, keys, 1, NULL);
  return NULL;
}
static void other_thread_body(void) {
  sup_kv *kv;
  assert_int_equal(sup_kv_new(on_reply, NULL, &kv), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, get_elsewhere, kv), 0);
  pthread_join(th, NULL);
}
static void test_inv_other_thread(void **st) {
  (void)st;
  assert_inv_broken(other_thread_body,
                    "K1: sup_kv_get on a thread other than the store's (it is single-threaded)");
}

/* K3: one tag for two pending gets (one timer for two requests): the
 * second reply would free what the first did. */
static void tag_twice_body(void) {
  sup_kv *kv;
  int tag;
  assert_int_equal(sup_kv_new(on_reply, NULL, &kv), 0);
  const char *keys[] = {"g1/a"};
  assert_int_equal(sup_kv_get(kv, 1, 1, keys, 1, &tag), 0);
  sup_kv_get(kv, 2, 1, keys, 1, &tag);
}
static void test_inv_tag_twice(void **st) {
  (void)st;
  assert_inv_broken(tag_twice_body,
                    "K3: two pending gets share one tag (owner 2 req 1, owner 1 req 1)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_immediate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_waits_until_complete, setup, teardown),
      cmocka_unit_test_setup_teardown(test_overwrite_and_binary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_and_drop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_free_drops_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_peer_bounds, setup, teardown),
      cmocka_unit_test(test_inv_reply_reenters),
      cmocka_unit_test(test_inv_other_thread),
      cmocka_unit_test(test_inv_tag_twice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
