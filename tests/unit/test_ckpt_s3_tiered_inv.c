/*
 * test_ckpt_s3_tiered_inv: the s3 tier's invariant checks
 * (ckptstore/ckpt_s3_tiered.c: check_queue for S1, check_put for B2) catch
 * the states a bug would leave: a key queued for upload on a store that
 * has no thread to upload it (and does not count it pending), and a
 * content-addressed object about to go to the bucket with bytes that are
 * not of its name, or over the bucket's copy without a repair. No request
 * is made: the checks abort before one (the endpoint is a closed port).
 * The tier's state is private to ckpt_s3_tiered.c, so this test includes
 * it. Death tests (test_inv.h): the child must abort naming the invariant.
 */
#include "test_inv.h"

#include "test_ckpt_util.h"

#include "../../ckptstore/ckpt_s3_tiered.c"

static char *g_dir;

/* A read-only tier (no upload threads) over a cache in a temp folder. */
static tiered *open_tier(void) {
  ckpt_s3_config c;
  memset(&c, 0, sizeof c);
  g_dir = tu_tmpdir();
  snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:1");
  snprintf(c.region, sizeof c.region, "us-east-1");
  snprintf(c.bucket, sizeof c.bucket, "ckpts");
  snprintf(c.access_key, sizeof c.access_key, "AKIDEXAMPLE");
  snprintf(c.secret_key, sizeof c.secret_key, "secret");
  snprintf(c.cache_dir, sizeof c.cache_dir, "%s", g_dir);
  c.timeout_s = 1;
  c.retries = 1;
  c.upload_threads = 1;
  ckpt_tier *t = NULL;
  assert_int_equal(ckpt_s3_tiered_open(&c, 0, &t), FT_OK);
  return (tiered *)t;
}

/* S1: a key queued past enqueue_locked's "no threads" test. */
static void queued_without_threads_body(void) {
  tiered *td = open_tier();
  item *it = calloc(1, sizeof *it + 32);
  snprintf(it->key, 32, "manifests/run/1.json");
  td->head = td->tail = it;
  ckpt_s3_tiered_stats st;
  ckpt_s3_tiered_stats_get(&td->t, &st);
}
static void test_inv_queued_without_threads(void **st) {
  (void)st;
  assert_inv_broken(queued_without_threads_body,
                    "S1: 0 uploads pending on a store with no upload threads (queue "
                    "manifests/run/1.json)");
}

/* The name of text as a shard object. */
static void shard_key(const char *text, char *key, size_t n) {
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  assert_int_equal(ckpt_sha256(text, strlen(text), h), FT_OK);
  ckpt_hex(h, hex);
  snprintf(key, n, "shards/%s", hex);
}

/* B2: bytes that are not the object's (a path that skipped chunk_ok). */
static void wrong_bytes_body(void) {
  tiered *td = open_tier();
  char key[128];
  shard_key("{\"rank\":0}", key, sizeof key);
  put_remote_object(td, key, "{\"rank\":1}", 10, CKPT_S3_CREATE_ONLY, 0);
}
static void test_inv_wrong_bytes(void **st) {
  (void)st;
  assert_inv_broken(wrong_bytes_body, "put in the bucket with bytes not of its name");
}

/* B2: an overwrite that is not a repair. */
static void overwrite_body(void) {
  tiered *td = open_tier();
  char key[128];
  shard_key("{\"rank\":0}", key, sizeof key);
  put_remote_object(td, key, "{\"rank\":0}", 10, 0, 0);
}
static void test_inv_overwrite(void **st) {
  (void)st;
  assert_inv_broken(overwrite_body, "put over the bucket's copy without a repair");
}

/* A sound tier passes its own checks (opened, read, freed). */
static void test_sound_tier(void **st) {
  (void)st;
  tiered *td = open_tier();
  ckpt_s3_tiered_stats s;
  ckpt_s3_tiered_stats_get(&td->t, &s);
  assert_int_equal(s.uploads_pending, 0);
  td->t.free(&td->t);
  tu_rmrf(g_dir);
  free(g_dir);
}

int main(void) {
  /* the children's stores go in here, removed at the end (they abort) */
  char *root = tu_tmpdir();
  setenv("TMPDIR", root, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sound_tier),
      cmocka_unit_test(test_inv_queued_without_threads),
      cmocka_unit_test(test_inv_wrong_bytes),
      cmocka_unit_test(test_inv_overwrite),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tu_rmrf(root);
  free(root);
  return rc;
}
