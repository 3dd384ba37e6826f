/*
 * test_data: the token-shard loader (worker/data.c).
 *
 * Good shards: the on-disk bytes follow llm.c's format, two shards read as
 * one stream (a sequence crossing the boundary, wrap-around, an empty shard
 * in the middle). Bad shards: each refused with FT_EFORMAT / FT_ENOENT and a
 * detail that names the file and says what was found and expected.
 * Every test works in its own temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data.h"
#include "ft_err.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  char dir[256];
  char path[512];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/ft_test_data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(f->dir))
    return -1;
  *state = f;
  return 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(p);
}

static int teardown(void **state) {
  fixture *f = *state;
  nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  free(f);
  return 0;
}

static const char *P(fixture *f, const char *name) {
  snprintf(f->path, sizeof f->path, "%s/%s", f->dir, name);
  return f->path;
}

/* Writes a shard by hand (not through data_write_shard) with any header. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *tok, size_t ntok) {
  int32_t h[DATA_HEADER_INTS] = {magic, version, count};
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(h, sizeof h, 1, fp), 1);
  if (ntok)
    assert_int_equal(fwrite(tok, 2, ntok, fp), ntok);
  assert_int_equal(fclose(fp), 0);
}

/* A deterministic token pattern with no short period. */
static uint16_t tokv(uint64_t i) {
  return (uint16_t)((i * 37 + i / 7) % 251);
}

static void fill(uint16_t *t, size_t n, uint64_t base) {
  for (size_t i = 0; i < n; i++)
    t[i] = tokv(base + i);
}

static void assert_detail_has(const char *needle) {
  const char *d = ft_err_detail();
  if (!strstr(d, needle))
    fail_msg("detail \"%s\" lacks \"%s\"", d, needle);
}

static void test_write_format(void **state) {
  fixture *f = *state;
  uint16_t t[10];
  fill(t, 10, 0);
  assert_int_equal(data_write_shard(P(f, "x_000.bin"), t, 10), FT_OK);
  /* The bytes are llm.c's: 256 int32 header then uint16 tokens. */
  FILE *fp = fopen(f->path, "rb");
  assert_non_null(fp);
  int32_t h[256];
  uint16_t back[11];
  assert_int_equal(fread(h, sizeof h, 1, fp), 1);
  assert_int_equal(fread(back, 2, 11, fp), 10);
  fclose(fp);
  assert_int_equal(h[0], 20240520);
  assert_int_equal(h[1], 1);
  assert_int_equal(h[2], 10);
  for (int i = 3; i < 256; i++)
    assert_int_equal(h[i], 0);
  assert_memory_equal(back, t, sizeof t);
  /* No temp file left beside it. */
  DIR *d = opendir(f->dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      n++;
      assert_string_equal(e->d_name, "x_000.bin");
    }
  closedir(d);
  assert_int_equal(n, 1);
  /* Overwrite in place works (rename over an existing file). */
  assert_int_equal(data_write_shard(f->path, t, 5), FT_OK);
  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_size, 1024 + 10);
}

static void check_seq(const data_loader *dl, uint64_t i, int T, uint64_t start) {
  int32_t inp[64], tgt[64];
  assert_int_equal(data_sequence(dl, i, T, inp, tgt), FT_OK);
  for (int j = 0; j < T; j++) {
    assert_int_equal(inp[j], tokv(start + j));
    assert_int_equal(tgt[j], tokv(start + j + 1));
  }
}

static void test_two_shards(void **state) {
  fixture *f = *state;
  uint16_t a[100], b[100];
  fill(a, 100, 0);
  fill(b, 100, 100);
  /* Written out of order: the loader sorts by path. */
  assert_int_equal(data_write_shard(P(f, "s_001.bin"), b, 100), FT_OK);
  assert_int_equal(data_write_shard(P(f, "s_000.bin"), a, 100), FT_OK);
  data_loader *dl = NULL;
  assert_int_equal(data_open(P(f, "s_*.bin"), 256, &dl), FT_OK);
  assert_int_equal(data_num_shards(dl), 2);
  assert_int_equal(data_num_tokens(dl), 200);
  assert_int_equal(data_num_sequences(dl, 16), 199 / 16);
  check_seq(dl, 0, 16, 0);
  check_seq(dl, 6, 16, 96);   /* tokens 96..112: crosses the boundary at 100 */
  check_seq(dl, 11, 16, 176); /* the last full sequence */
  check_seq(dl, 12, 16, 0);   /* wraps around */
  check_seq(dl, 12 * 1000 + 6, 16, 96);
  assert_int_equal(data_num_sequences(dl, 199), 1);
  int32_t inp[200], tgt[200];
  assert_int_equal(data_sequence(dl, 0, 199, inp, tgt), FT_OK);
  assert_int_equal(tgt[198], tokv(199));
  assert_int_equal(data_num_sequences(dl, 200), 0);
  assert_int_equal(data_sequence(dl, 0, 200, inp, tgt), FT_EINVAL);
  data_free(dl);
}

static void test_empty_shard_between(void **state) {
  fixture *f = *state;
  uint16_t a[50], c[50];
  fill(a, 50, 0);
  fill(c, 50, 50);
  assert_int_equal(data_write_shard(P(f, "s_000.bin"), a, 50), FT_OK);
  assert_int_equal(data_write_shard(P(f, "s_001.bin"), NULL, 0), FT_OK);
  assert_int_equal(data_write_shard(P(f, "s_002.bin"), c, 50), FT_OK);
  data_loader *dl = NULL;
  assert_int_equal(data_open(P(f, "s_*.bin"), 256, &dl), FT_OK);
  assert_int_equal(data_num_shards(dl), 3);
  assert_int_equal(data_num_tokens(dl), 100);
  for (uint64_t i = 0; i < data_num_sequences(dl, 7); i++)
    check_seq(dl, i, 7, i * 7);
  for (uint64_t i = 0; i < 99; i++)
    check_seq(dl, i, 1, i);
  data_free(dl);
}

static void test_bad_magic(void **state) {
  fixture *f = *state;
  uint16_t t[4] = {1, 2, 3, 4};
  write_raw(P(f, "bad_magic.bin"), 12345, 1, 4, t, 4);
  data_loader *dl = (data_loader *)1;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_null(dl);
  assert_detail_has(f->path);
  assert_detail_has("20240520");
  assert_detail_has("12345");
}

static void test_model_file_hint(void **state) {
  fixture *f = *state;
  write_raw(P(f, "model.bin"), 20240326, 3, 0, NULL, 0);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_detail_has(f->path);
  assert_detail_has("model file");
}

static void test_text_file_hint(void **state) {
  fixture *f = *state;
  FILE *fp = fopen(P(f, "notes.txt"), "w");
  assert_non_null(fp);
  for (int i = 0; i < 100; i++)
    fputs("Some plain text, not tokens.\n", fp);
  fclose(fp);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_detail_has(f->path);
  assert_detail_has("text");
  assert_detail_has("20240520");
}

static void test_bad_version(void **state) {
  fixture *f = *state;
  uint16_t t[4] = {1, 2, 3, 4};
  write_raw(P(f, "bad_version.bin"), 20240520, 7, 4, t, 4);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_detail_has(f->path);
  assert_detail_has("version 7");
  assert_detail_has("expected 1");
}

static void test_truncated(void **state) {
  fixture *f = *state;
  uint16_t t[100];
  fill(t, 100, 0);
  assert_int_equal(data_write_shard(P(f, "trunc.bin"), t, 100), FT_OK);
  assert_int_equal(truncate(f->path, 1024 + 2 * 60), 0);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_detail_has(f->path);
  assert_detail_has("1144 bytes"); /* actual */
  assert_detail_has("1224 bytes"); /* expected: 1024 + 2 * 100 */
  /* Shorter than the header itself. */
  assert_int_equal(truncate(f->path, 100), 0);
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_detail_has(f->path);
  assert_detail_has("100 bytes");
}

static void test_token_out_of_vocab(void **state) {
  fixture *f = *state;
  uint16_t t[10];
  fill(t, 10, 0);
  t[5] = 300;
  assert_int_equal(data_write_shard(P(f, "big_token.bin"), t, 10), FT_OK);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 256, &dl), FT_EFORMAT);
  assert_null(dl);
  assert_detail_has(f->path);
  assert_detail_has("token 300");
  assert_detail_has("index 5");
  assert_detail_has("256");
  /* The same file is fine for a larger vocabulary. */
  assert_int_equal(data_open(f->path, 301, &dl), FT_OK);
  data_free(dl);
  assert_int_equal(data_open(f->path, 300, &dl), FT_EFORMAT);
}

static void test_bad_shard_among_good(void **state) {
  fixture *f = *state;
  uint16_t t[10];
  fill(t, 10, 0);
  assert_int_equal(data_write_shard(P(f, "s_000.bin"), t, 10), FT_OK);
  assert_int_equal(data_write_shard(P(f, "s_002.bin"), t, 10), FT_OK);
  write_raw(P(f, "s_001.bin"), 20240520, 1, 11, t, 10);
  char bad[512];
  snprintf(bad, sizeof bad, "%s", f->path);
  data_loader *dl = NULL;
  assert_int_equal(data_open(P(f, "s_*.bin"), 256, &dl), FT_EFORMAT);
  assert_null(dl);
  assert_detail_has(bad);
  assert_null(strstr(ft_err_detail(), "s_000"));
}

static void test_empty_glob(void **state) {
  fixture *f = *state;
  data_loader *dl = NULL;
  assert_int_equal(data_open(P(f, "nothing_*.bin"), 256, &dl), FT_ENOENT);
  assert_null(dl);
  assert_detail_has(f->path);
}

static void test_bad_args(void **state) {
  fixture *f = *state;
  uint16_t t[4] = {1, 2, 3, 4};
  assert_int_equal(data_write_shard(P(f, "ok.bin"), t, 4), FT_OK);
  data_loader *dl = NULL;
  assert_int_equal(data_open(f->path, 0, &dl), FT_EINVAL);
  assert_int_equal(data_open(f->path, 65537, &dl), FT_EINVAL);
  assert_int_equal(data_open(f->path, 65536, &dl), FT_OK);
  assert_int_equal(data_num_sequences(dl, 0), 0);
  assert_int_equal(data_num_sequences(dl, 3), 1);
  data_free(dl);
  data_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_write_format, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_shards, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_shard_between, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_magic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_model_file_hint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_text_file_hint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_token_out_of_vocab, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_shard_among_good, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_glob, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
