/*
 * test_data_s3: the pieces of the s3:// loader (worker/data_s3.c) that need
 * no server; tests/integration/data_s3.sh runs it whole against moto.
 *
 *   - the key glob: the literal prefix the listing asks for, and matching
 *     (a wildcard stays inside one '/' level, brackets select shards);
 *   - a listing's ETags (ckpt_s3_xml_list_objects), the older callback
 *     unchanged;
 *   - the cache directory's eviction: least recently used first, down to
 *     the bound with room for the new block; other files untouched; a dead
 *     writer's temp file removed, a live one counted;
 *   - which errors are the storage's (retry, FT_EXIT_STORE) and which the
 *     data's (FT_EXIT_DATA); a pattern without a key glob refused at once;
 *   - the run file's data.* keys for s3:// data, into data_opts (an s3://
 *     glob is not made relative to the run file's directory; a local one
 *     still is; block_bytes below 4096 refused);
 *   - the block size when data.block_bytes is not set (auto): the largest
 *     power of two <= the bytes a host reads per micro-batch, within 64 KiB
 *     .. 4 MiB, 4 MiB when the geometry is unknown; the run file's
 *     block_bytes: auto (or absent) is 0 in data_opts, a number as written;
 *   - the recorded listing's file: two patterns saved and read back (an
 *     entry replaced, the other kept), a pattern not recorded, a file that
 *     is not a listing refused (before any request), with the data
 *     bucket's own keys (FT_DATA_AWS_*) and none of the store's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt_s3.h"
#include "data_int.h"
#include "ft_err.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void test_glob_prefix(void **st) {
  (void)st;
  assert_int_equal(data_s3_glob_prefix("data/synth_train_*.bin"), strlen("data/synth_train_"));
  assert_int_equal(data_s3_glob_prefix("a/b[0-9].bin"), strlen("a/b"));
  assert_int_equal(data_s3_glob_prefix("a/?.bin"), strlen("a/"));
  assert_int_equal(data_s3_glob_prefix("plain/key.bin"), strlen("plain/key.bin"));
}

static void test_glob_match(void **st) {
  (void)st;
  assert_true(data_s3_key_matches("d/s_*.bin", "d/s_000.bin"));
  assert_false(data_s3_key_matches("d/s_*.bin", "d/s_9/x.bin")); /* one level only */
  assert_false(data_s3_key_matches("d/s_*.bin", "d/s_000.txt"));
  assert_false(data_s3_key_matches("d/s_*.bin", "e/s_000.bin"));
  assert_true(data_s3_key_matches("d/s_00[34].bin", "d/s_003.bin"));
  assert_false(data_s3_key_matches("d/s_00[34].bin", "d/s_002.bin"));
  assert_true(data_s3_key_matches("d/*/s.bin", "d/x/s.bin"));
}

typedef struct seen {
  int n;
  char key[4][64], etag[4][64];
  uint64_t size[4];
} seen;

static int on_obj(void *ud, const ckpt_s3_object *o) {
  seen *s = ud;
  snprintf(s->key[s->n], sizeof s->key[0], "%s", o->key);
  snprintf(s->etag[s->n], sizeof s->etag[0], "%s", o->etag);
  s->size[s->n++] = o->size;
  return FT_OK;
}

static int on_old(void *ud, const char *key, uint64_t size, int64_t mtime_ns) {
  (void)key, (void)size, (void)mtime_ns;
  (*(int *)ud)++;
  return FT_OK;
}

static const char LIST[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>d/</Prefix><IsTruncated>false</IsTruncated>"
    "<Contents><Key>d/a.bin</Key><LastModified>2026-01-02T03:04:05.000Z</LastModified>"
    "<ETag>&quot;0123abcd&quot;</ETag><Size>2048</Size></Contents>"
    "<Contents><Key>d/b.bin</Key><Size>1024</Size>"
    "<ETag>\"ffee-3\"</ETag></Contents>"
    "<Contents><Key>d/c.bin</Key><Size>7</Size></Contents>"
    "</ListBucketResult>";

static void test_list_etags(void **st) {
  (void)st;
  seen s = {0};
  int trunc = 1;
  char tok[64];
  assert_int_equal(
      ckpt_s3_xml_list_objects(LIST, strlen(LIST), on_obj, &s, &trunc, tok, sizeof tok), FT_OK);
  assert_int_equal(s.n, 3);
  assert_false(trunc);
  assert_string_equal(s.key[0], "d/a.bin");
  assert_string_equal(s.etag[0], "\"0123abcd\"");
  assert_int_equal(s.size[0], 2048);
  assert_string_equal(s.etag[1], "\"ffee-3\""); /* a multipart upload's */
  assert_string_equal(s.etag[2], "");           /* none given: not the last one's */
  int n = 0;
  assert_int_equal(ckpt_s3_xml_list(LIST, strlen(LIST), on_old, &n, &trunc, tok, sizeof tok),
                   FT_OK);
  assert_int_equal(n, 3);
}

static void put_file(const char *dir, const char *name, size_t len, time_t mtime) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < len; i++)
    fputc('x', f);
  fclose(f);
  struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
  assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static int exists(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static void test_cache_eviction(void **st) {
  (void)st;
  char dir[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%.200s/ft_test_data_s3.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(dir));
  time_t now = time(NULL);
  /* used in the order c, a, d, b (oldest first) */
  put_file(dir, "b_1.blk", 1000, now - 10);
  put_file(dir, "a_1.blk", 1000, now - 30);
  put_file(dir, "d_1.blk", 1000, now - 20);
  put_file(dir, "c_1.blk", 1000, now - 40);
  put_file(dir, "notes.txt", 5000, now - 100);          /* not the cache's */
  put_file(dir, "x_1.blk.tmp.AAAAAA", 300, now - 3600); /* a dead writer's */
  put_file(dir, "y_1.blk.tmp.BBBBBB", 200, now);        /* a live writer's */
  uint64_t ev = 0;
  /* everything fits: nothing goes but the dead temp file */
  assert_int_equal(data_cache_make_room(dir, 10000, 1000, &ev), 4200);
  assert_int_equal(ev, 0);
  assert_false(exists(dir, "x_1.blk.tmp.AAAAAA"));
  /* room for 1000 more under 2700: 4200 -> 1200 (c, a, d go; b stays) */
  assert_int_equal(data_cache_make_room(dir, 2700, 1000, &ev), 1200);
  assert_int_equal(ev, 3);
  assert_false(exists(dir, "c_1.blk"));
  assert_false(exists(dir, "a_1.blk"));
  assert_false(exists(dir, "d_1.blk"));
  assert_true(exists(dir, "b_1.blk"));
  assert_true(exists(dir, "notes.txt"));
  assert_true(exists(dir, "y_1.blk.tmp.BBBBBB"));
  /* a bound below the live temp file: every block goes, the temp stays */
  assert_int_equal(data_cache_make_room(dir, 100, 0, &ev), 200);
  assert_int_equal(ev, 4);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_fault_kinds(void **st) {
  (void)st;
  /* the data's: stop the run, blame nobody */
  assert_false(data_err_is_storage(FT_ENOENT));  /* a listed object is gone */
  assert_false(data_err_is_storage(FT_ESTATE));  /* it changed (If-Match: 412) */
  assert_false(data_err_is_storage(FT_EFORMAT)); /* bad header, token out of vocab */
  /* the storage's: wait and retry */
  assert_true(data_err_is_storage(FT_EIO));   /* 5xx past the retries */
  assert_true(data_err_is_storage(FT_EBUSY)); /* 429/SlowDown past the retries */
  assert_true(data_err_is_storage(FT_ETIMEDOUT));
  assert_true(data_err_is_storage(FT_ENET));
  assert_true(data_err_is_storage(FT_ECONFIG)); /* keys refused */
  assert_false(data_err_is_storage(FT_OK));
}

static void test_bad_patterns(void **st) {
  (void)st;
  data_loader *dl = (data_loader *)1;
  assert_int_equal(data_open("s3://bucket", 256, &dl), FT_EINVAL);
  assert_null(dl);
  assert_non_null(strstr(ft_err_detail(), "s3://bucket/prefix/GLOB"));
  assert_int_equal(data_open("s3://bucket/", 256, &dl), FT_EINVAL);
  setenv("FT_DATA_BLOCK_BYTES", "4097", 1); /* odd: a token would straddle two blocks */
  assert_int_equal(data_open("s3://bucket/d/*.bin", 256, &dl), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), "even"));
  unsetenv("FT_DATA_BLOCK_BYTES");
  assert_true(data_is_s3("s3://b/x"));
  assert_false(data_is_s3("data/s3://x"));
}

static void test_runfile_keys(void **st) {
  (void)st;
  static const char Y[] = "data:\n"
                          "  train: \"s3://corpus/tiny/t_*.bin\"\n"
                          "  val: \"v/t_*.bin\"\n"
                          "  cache_dir: /var/cache/ftdata\n"
                          "  cache_bytes: 1000000\n"
                          "  block_bytes: 65536\n"
                          "  prefetch_blocks: 0\n"
                          "  s3_endpoint: http://127.0.0.1:9000\n";
  ft_runfile *rf = malloc(sizeof *rf);
  assert_non_null(rf);
  char err[512];
  assert_int_equal(ft_runfile_parse("runs/a.yaml", Y, strlen(Y), rf, err, sizeof err), FT_OK);
  assert_string_equal(rf->data.train, "s3://corpus/tiny/t_*.bin"); /* as written */
  assert_string_equal(rf->data.val, "runs/v/t_*.bin");             /* under the file's dir */
  data_opts o;
  data_opts_from_runfile(&rf->data, &o);
  assert_string_equal(o.cache_dir, "/var/cache/ftdata");
  assert_int_equal(o.cache_bytes, 1000000);
  assert_int_equal(o.block_bytes, 65536);
  assert_int_equal(o.prefetch_blocks, 0);
  assert_string_equal(o.s3_endpoint, "http://127.0.0.1:9000");
  /* the defaults are data.h's */
  assert_int_equal(ft_runfile_parse("b.yaml", "run: x\n", 7, rf, err, sizeof err), FT_OK);
  data_opts_from_runfile(&rf->data, &o);
  data_opts d;
  data_opts_default(&d);
  assert_int_equal(o.cache_bytes, d.cache_bytes);
  assert_int_equal(o.block_bytes, d.block_bytes);
  assert_int_equal(o.prefetch_blocks, d.prefetch_blocks);
  static const char BAD[] = "data: {block_bytes: 100}\n";
  assert_int_not_equal(ft_runfile_parse("c.yaml", BAD, strlen(BAD), rf, err, sizeof err), FT_OK);
  assert_non_null(strstr(err, "data.block_bytes"));
  free(rf);
}

static void test_block_auto(void **st) {
  (void)st;
  assert_int_equal(data_block_bytes_auto(0), DATA_BLOCK_BYTES_DEFAULT); /* ftdata: unknown */
  assert_int_equal(data_block_bytes_auto(-1), DATA_BLOCK_BYTES_DEFAULT);
  /* 1,000 GPUs: 8 per host x micro 8 x 1024 tokens x 2 bytes = 128 KiB */
  assert_int_equal(data_block_bytes_auto(2LL * 8 * 8 * 1024), 128 << 10);
  assert_int_equal(data_block_bytes_auto((128 << 10) + 2), 128 << 10); /* rounded down */
  assert_int_equal(data_block_bytes_auto((256 << 10) - 2), 128 << 10);
  assert_int_equal(data_block_bytes_auto(2LL * 1 * 8 * 64), DATA_BLOCK_AUTO_MIN); /* the demo */
  assert_int_equal(data_block_bytes_auto(1LL << 40), DATA_BLOCK_BYTES_DEFAULT);   /* capped */
  static const char A[] = "data: {block_bytes: auto}\n";
  ft_runfile *rf = malloc(sizeof *rf);
  assert_non_null(rf);
  char err[512];
  assert_int_equal(ft_runfile_parse("a.yaml", A, strlen(A), rf, err, sizeof err), FT_OK);
  assert_int_equal(rf->data.block_bytes, 0);
  assert_int_equal(ft_runfile_validate(rf, err, sizeof err), FT_OK);
  assert_int_equal(ft_runfile_set(rf, "data.block_bytes", "8192", err, sizeof err), FT_OK);
  assert_int_equal(rf->data.block_bytes, 8192);
  assert_int_not_equal(ft_runfile_set(rf, "data.block_bytes", "autox", err, sizeof err), FT_OK);
  assert_non_null(strstr(err, "an integer or auto"));
  free(rf);
}

static void test_listing_file(void **st) {
  (void)st;
  char dir[256], path[300];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%.200s/ft_test_listing.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/listing.json", dir);
  data_obj a[2] = {{"d/a.bin", "\"e1\"", 1028, 2}, {"d/b.bin", "\"e2-3\"", 3024, 1000}};
  data_obj v[1] = {{"v/x.bin", "\"e3\"", 1026, 1}};
  data_obj *ob = NULL;
  int n = -1, found = -1;
  assert_int_equal(data_listing_load(path, "s3://b/d/*.bin", &ob, &n, &found), FT_OK);
  assert_int_equal(found, 0); /* no file yet */
  assert_int_equal(data_listing_save(path, "s3://b/d/*.bin", "here", v, 1), FT_OK);
  assert_int_equal(data_listing_save(path, "s3://b/v/*.bin", "here", v, 1), FT_OK);
  assert_int_equal(data_listing_save(path, "s3://b/d/*.bin", "here", a, 2), FT_OK); /* replaced */
  assert_int_equal(data_listing_load(path, "s3://b/d/*.bin", &ob, &n, &found), FT_OK);
  assert_int_equal(found, 1);
  assert_int_equal(n, 2);
  assert_string_equal(ob[1].key, "d/b.bin");
  assert_string_equal(ob[1].etag, "\"e2-3\"");
  assert_int_equal(ob[1].size, 3024);
  assert_int_equal(ob[1].tokens, 1000);
  data_objs_free(ob, n);
  assert_int_equal(data_listing_load(path, "s3://b/v/*.bin", &ob, &n, &found), FT_OK);
  assert_int_equal(n, 1);
  data_objs_free(ob, n);
  assert_int_equal(data_listing_load(path, "s3://b/other/*.bin", &ob, &n, &found), FT_OK);
  assert_int_equal(found, 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("{\"patterns\": []}", f);
  fclose(f);
  assert_int_equal(data_listing_load(path, "s3://b/d/*.bin", &ob, &n, &found), FT_EFORMAT);
  assert_non_null(strstr(ft_err_detail(), "not a data listing"));
  setenv("FT_DATA_LISTING", path, 1);
  setenv("FT_DATA_CACHE_BYTES", "0", 1);
  /* the data bucket's own keys: the store's may be absent */
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
  setenv("FT_DATA_AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
  setenv("FT_DATA_AWS_SECRET_ACCESS_KEY", "secret", 1);
  data_loader *dl = NULL;
  assert_int_equal(data_open("s3://bkt/d/*.bin", 256, &dl), FT_EFORMAT);
  unsetenv("FT_DATA_LISTING");
  unsetenv("FT_DATA_CACHE_BYTES");
  unsetenv("FT_DATA_AWS_ACCESS_KEY_ID");
  unsetenv("FT_DATA_AWS_SECRET_ACCESS_KEY");
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_glob_prefix),  cmocka_unit_test(test_glob_match),
      cmocka_unit_test(test_list_etags),   cmocka_unit_test(test_cache_eviction),
      cmocka_unit_test(test_fault_kinds),  cmocka_unit_test(test_bad_patterns),
      cmocka_unit_test(test_listing_file), cmocka_unit_test(test_runfile_keys),
      cmocka_unit_test(test_block_auto),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
