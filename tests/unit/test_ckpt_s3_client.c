/*
 * test_ckpt_s3_client: the S3 client and the bucket tier against a real
 * S3-protocol server. Run by tests/integration/s3_client.sh, which starts
 * the server and sets FT_S3_ENDPOINT and fake credentials; run without it,
 * this test FAILS (it never skips: a missing server is a broken setup).
 */
#include "ckpt_int.h"
#include "ckpt_s3.h"
#include "ft_err.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

static ckpt_s3_config cfg;

static ckpt_s3_client *client(const char *bucket) {
  ckpt_s3_config c = cfg;
  snprintf(c.bucket, sizeof c.bucket, "%s", bucket);
  ckpt_s3_client *cl = NULL;
  assert_int_equal(ckpt_s3_client_new(&c, &cl), FT_OK);
  return cl;
}

static int setup(void **st) {
  char uri[] = "s3://unit-bucket/pre";
  if (ckpt_s3_config_from_uri(uri, &cfg) != FT_OK) {
    fprintf(stderr, "config: %s\n", ft_err_detail());
    return -1;
  }
  cfg.retries = 3;
  cfg.retry_base_ms = 20;
  ckpt_s3_client *c = client("unit-bucket");
  int rc = ckpt_s3_client_create_bucket(c);
  if (rc)
    fprintf(stderr, "create bucket: %s\n", ft_err_detail());
  assert_int_equal(ckpt_s3_client_create_bucket(c), FT_OK); /* twice: still fine */
  ckpt_s3_client_free(c);
  return rc ? -1 : 0;
}

static void test_put_get_head_delete(void **st) {
  ckpt_s3_client *c = client("unit-bucket");
  const char *body = "hello, bucket";
  assert_int_equal(ckpt_s3_client_put(c, "pre/a/b c.txt", body, strlen(body), 0), FT_OK);
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_s3_client_get(c, "pre/a/b c.txt", &d, &n, 0), FT_OK);
  assert_int_equal(n, strlen(body));
  assert_memory_equal(d, body, n);
  free(d);
  uint64_t size = 0;
  int64_t mt = 0;
  assert_int_equal(ckpt_s3_client_head(c, "pre/a/b c.txt", &size, &mt, 0), FT_OK);
  assert_int_equal(size, strlen(body));
  int64_t now = (int64_t)time(NULL) * 1000000000LL;
  assert_true(mt > now - 600 * 1000000000LL && mt < now + 600 * 1000000000LL);
  assert_int_equal(ckpt_s3_client_delete(c, "pre/a/b c.txt"), FT_OK);
  assert_int_equal(ckpt_s3_client_get(c, "pre/a/b c.txt", &d, &n, 0), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "no such object"));
  assert_int_equal(ckpt_s3_client_head(c, "pre/a/b c.txt", NULL, NULL, 0), FT_ENOENT);
  ckpt_s3_stats s;
  ckpt_s3_client_stats(c, &s);
  assert_true(s.requests >= 6);
  assert_int_equal(s.retries, 0);
  ckpt_s3_client_free(c);
}

static void test_create_only_never_overwrites(void **st) {
  ckpt_s3_client *c = client("unit-bucket");
  assert_int_equal(ckpt_s3_client_put(c, "pre/once", "first", 5, CKPT_S3_CREATE_ONLY), FT_OK);
  int rc = ckpt_s3_client_put(c, "pre/once", "other", 5, CKPT_S3_CREATE_ONLY);
  assert_int_equal(rc, FT_EEXIST);
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_s3_client_get(c, "pre/once", &d, &n, 0), FT_OK);
  assert_memory_equal(d, "first", 5);
  free(d);
  ckpt_s3_client_free(c);
}

static void test_multipart_roundtrip(void **st) {
  ckpt_s3_config c2 = cfg;
  c2.multipart_threshold = 5u << 20;
  c2.part_size = 5u << 20;
  ckpt_s3_client *c = NULL;
  assert_int_equal(ckpt_s3_client_new(&c2, &c), FT_OK);
  size_t len = (11u << 20) + 12345;
  uint8_t *big = malloc(len);
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    big[i] = (uint8_t)x;
  }
  ckpt_s3_stats a, b;
  ckpt_s3_client_stats(c, &a);
  assert_int_equal(ckpt_s3_client_put(c, "pre/big", big, len, CKPT_S3_CREATE_ONLY), FT_OK);
  ckpt_s3_client_stats(c, &b);
  /* create + 3 parts + complete */
  assert_int_equal(b.requests - a.requests, 5);
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_s3_client_get(c, "pre/big", &d, &n, 0), FT_OK);
  assert_int_equal(n, len);
  assert_memory_equal(d, big, len);
  free(d);
  /* a second create-only multipart upload of the same key is refused */
  assert_int_equal(ckpt_s3_client_put(c, "pre/big", big, len, CKPT_S3_CREATE_ONLY), FT_EEXIST);
  free(big);
  ckpt_s3_client_free(c);
}

typedef struct acc {
  int n;
  char keys[64][128];
} acc;

static int list_cb(void *ud, const char *key, uint64_t size, int64_t mt) {
  acc *a = ud;
  if (a->n < 64)
    snprintf(a->keys[a->n++], 128, "%s", key);
  return FT_OK;
}

static void test_list(void **st) {
  ckpt_s3_client *c = client("unit-bucket");
  const char *keys[] = {"pre/l/x&y", "pre/l/a", "pre/l/sub/z", "pre/other"};
  for (int i = 0; i < 4; i++)
    assert_int_equal(ckpt_s3_client_put(c, keys[i], "1", 1, 0), FT_OK);
  acc a = {0};
  assert_int_equal(ckpt_s3_client_list(c, "pre/l/", list_cb, &a), FT_OK);
  assert_int_equal(a.n, 3);
  assert_string_equal(a.keys[0], "pre/l/a");
  assert_string_equal(a.keys[1], "pre/l/sub/z");
  assert_string_equal(a.keys[2], "pre/l/x&y");
  ckpt_s3_client_free(c);
}

static void test_no_bucket(void **st) {
  ckpt_s3_client *c = client("no-such-bucket-here");
  uint8_t *d = NULL;
  size_t n = 0;
  int rc = ckpt_s3_client_get(c, "k", &d, &n, 0);
  assert_true(rc == FT_ENOENT);
  ckpt_s3_client_free(c);
}

static void test_dead_server_is_a_network_error_after_retries(void **st) {
  ckpt_s3_config c2 = cfg;
  snprintf(c2.endpoint, sizeof c2.endpoint, "http://127.0.0.1:1");
  c2.retries = 3;
  c2.retry_base_ms = 10;
  ckpt_s3_client *c = NULL;
  assert_int_equal(ckpt_s3_client_new(&c2, &c), FT_OK);
  int rc = ckpt_s3_client_put(c, "pre/x", "x", 1, 0);
  assert_int_equal(rc, FT_ENET);
  const char *d = ft_err_detail();
  assert_non_null(strstr(d, "3 attempts"));
  /* never the secrets */
  assert_null(strstr(d, cfg.secret_key));
  assert_null(strstr(d, cfg.access_key));
  ckpt_s3_stats s;
  ckpt_s3_client_stats(c, &s);
  assert_int_equal(s.requests, 3);
  assert_int_equal(s.retries, 2);
  /* FAST: one attempt */
  assert_int_equal(ckpt_s3_client_head(c, "pre/x", NULL, NULL, CKPT_S3_FAST), FT_ENET);
  ckpt_s3_client_stats(c, &s);
  assert_int_equal(s.requests, 4);
  ckpt_s3_client_free(c);
}

typedef struct find_ctx {
  const char *want;
  int found;
} find_ctx;

static int find_cb(void *ud, const char *k) {
  find_ctx *f = ud;
  if (!strcmp(k, f->want))
    f->found++;
  return FT_OK;
}

static void test_tier_layout_and_list(void **st) {
  ckpt_tier *t = NULL;
  assert_int_equal(ckpt_tier_s3_open(client("unit-bucket"), &t), FT_OK);
  const char *raw = "chunk bytes chunk bytes chunk bytes";
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1], key[128];
  ckpt_sha256(raw, strlen(raw), h);
  ckpt_hex(h, hex);
  snprintf(key, sizeof key, "chunks/%s", hex);
  uint8_t *obj = NULL;
  size_t objlen = 0;
  assert_int_equal(ckpt_chunk_encode(raw, strlen(raw), 1, 1, &obj, &objlen), FT_OK);
  assert_int_equal(t->put(t, key, obj, objlen), FT_OK);
  assert_int_equal(t->put(t, key, obj, objlen), FT_OK); /* 412 is success for chunks */
  /* where it lives in the bucket */
  char ok[256];
  snprintf(ok, sizeof ok, "pre/chunks/%.2s/%s", hex, hex);
  uint8_t *d = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_s3_client_get(ckpt_tier_s3_client(t), ok, &d, &n, 0), FT_OK);
  assert_int_equal(n, objlen);
  free(d);
  uint64_t size = 0;
  assert_int_equal(t->exists(t, key, 1, &size, NULL), FT_OK);
  assert_int_equal(size, objlen);
  /* tier keys come back without the prefix and the fan-out folder */
  find_ctx f = {.want = key};
  assert_int_equal(t->list(t, "chunks/", find_cb, &f), FT_OK);
  assert_int_equal(f.found, 1);
  assert_int_equal(t->del(t, key), FT_OK);
  assert_int_equal(t->exists(t, key, 0, NULL, NULL), FT_ENOENT);
  free(obj);
  t->free(t);
}

int main(void) {
  if (!getenv("FT_S3_ENDPOINT")) {
    fprintf(stderr, "test_ckpt_s3_client: FT_S3_ENDPOINT is not set; run it through "
                    "tests/integration/s3_client.sh, which starts a server\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_put_get_head_delete),
      cmocka_unit_test(test_create_only_never_overwrites),
      cmocka_unit_test(test_multipart_roundtrip),
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_no_bucket),
      cmocka_unit_test(test_dead_server_is_a_network_error_after_retries),
      cmocka_unit_test(test_tier_layout_and_list),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
