/*
 * test_ckpt_chunk: chunking, SHA-256 names, the shuffle filter, chunk
 * encode/decode with damage detection, and idempotent writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

static void test_sha256_vector(void **st) {
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  assert_int_equal(ckpt_sha256("abc", 3, h), FT_OK);
  ckpt_hex(h, hex);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  uint8_t back[CKPT_HASH_LEN];
  assert_int_equal(ckpt_unhex(hex, back), FT_OK);
  assert_memory_equal(back, h, CKPT_HASH_LEN);
  assert_int_not_equal(ckpt_unhex("xyz", back), FT_OK);
}

static void test_shuffle_round_trip(void **st) {
  size_t len = 8 * 1000;
  uint8_t *a = malloc(len), *b = malloc(len), *c = malloc(len);
  uint64_t s = 7;
  for (size_t i = 0; i < len; i++)
    a[i] = (uint8_t)tu_rng(&s);
  int sizes[] = {2, 4, 8};
  for (int k = 0; k < 3; k++) {
    int es = sizes[k];
    ckpt_shuffle(b, a, len, es);
    size_t n = len / (size_t)es;
    /* byte 1 of element 5 lands at position 1*n + 5 */
    assert_int_equal(b[n + 5], a[5 * es + 1]);
    assert_memory_not_equal(a, b, len);
    ckpt_unshuffle(c, b, len, es);
    assert_memory_equal(a, c, len);
  }
  free(a);
  free(b);
  free(c);
}

static void test_encode_decode(void **st) {
  size_t n = 256 * 1024;
  float *w = malloc(n * 4);
  tu_fill(w, n, 1);
  uint8_t h[CKPT_HASH_LEN];
  ckpt_sha256(w, n * 4, h);
  uint8_t *obj = NULL;
  size_t objlen = 0;
  assert_int_equal(ckpt_chunk_encode(w, n * 4, 4, 1, NULL, &obj, &objlen), FT_OK);
  assert_true(objlen < n * 4); /* float normals compress a little */
  assert_int_equal(obj[6], 1); /* and the shuffle filter is what helps */
  float *out = malloc(n * 4);
  assert_int_equal(ckpt_chunk_decode(obj, objlen, h, NULL, out, n * 4), FT_OK);
  assert_memory_equal(out, w, n * 4);
  /* one flipped payload byte: refused */
  obj[objlen / 2] ^= 1;
  assert_int_equal(ckpt_chunk_decode(obj, objlen, h, NULL, out, n * 4), FT_ECORRUPT);
  obj[objlen / 2] ^= 1;
  /* the wrong name: refused, and the message names the chunk */
  uint8_t h2[CKPT_HASH_LEN];
  memcpy(h2, h, sizeof h2);
  h2[0] ^= 1;
  assert_int_equal(ckpt_chunk_decode(obj, objlen, h2, NULL, out, n * 4), FT_ECORRUPT);
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(h2, hex);
  assert_non_null(strstr(ft_err_detail(), hex));
  free(obj);

  /* random bytes do not compress: stored raw, no filter, still round-trips */
  uint8_t *r = malloc(100000);
  uint64_t s = 3;
  for (int i = 0; i < 100000; i++)
    r[i] = (uint8_t)tu_rng(&s);
  ckpt_sha256(r, 100000, h);
  assert_int_equal(ckpt_chunk_encode(r, 100000, 1, 1, NULL, &obj, &objlen), FT_OK);
  assert_int_equal(obj[5], 0);
  assert_int_equal(obj[6], 0);
  assert_int_equal(ckpt_chunk_decode(obj, objlen, h, NULL, out, 100000), FT_OK);
  assert_memory_equal(out, r, 100000);
  /* a raw object cut short, its header's lengths made to agree with the
   * file: refused, never read past its end (the payload is the bytes) */
  uint8_t *cut = malloc(objlen - 10);
  memcpy(cut, obj, objlen - 10);
  uint64_t plen = objlen - 10 - 32;
  for (int i = 0; i < 8; i++)
    cut[16 + i] = (uint8_t)(plen >> (8 * i));
  assert_int_equal(ckpt_chunk_decode(cut, objlen - 10, h, NULL, out, 100000), FT_ECORRUPT);
  free(cut);
  free(obj);
  free(r);
  free(out);
  free(w);
}

static void test_chunking_and_idempotence(void **st) {
  char *dir, *uri;
  ckpt_store *s;
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 2};
  assert_int_equal(tu_store_open(&dir, &uri, &s, &o), FT_OK);
  size_t n = (5u << 20) / 8; /* 2.5 MiB of f32 -> chunks of 1, 1, 0.5 MiB */
  float *w = malloc(n * 4);
  tu_fill(w, n, 2);
  ckpt_part p = tu_part("param/w", w, n, 0, n);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(s, "r", 1, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_released(j, 1), 1);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  assert_int_equal(ckpt_job_done(j), 1);
  ckpt_job_free(j);
  assert_int_equal(sh->nparts, 1);
  assert_int_equal(sh->parts[0].nchunks, 3);
  uint64_t expect_len[3] = {1u << 20, 1u << 20, 1u << 19};
  struct stat st1[3];
  for (int c = 0; c < 3; c++) {
    ckpt_chunk_ref *r = &sh->parts[0].chunks[c];
    assert_int_equal(r->offset, (uint64_t)c << 20);
    assert_int_equal(r->len, expect_len[c]);
    uint8_t h[CKPT_HASH_LEN];
    ckpt_sha256((uint8_t *)w + r->offset, r->len, h);
    assert_memory_equal(h, r->hash, CKPT_HASH_LEN); /* named by the raw bytes */
    char path[4300];
    tu_chunk_path(dir, r->hash, path, sizeof path);
    assert_int_equal(stat(path, &st1[c]), 0);
    assert_int_equal((uint64_t)st1[c].st_size, r->stored);
  }
  assert_int_equal(tu_count_chunks(dir), 3);

  /* the same bytes again (another step): nothing new written, same names */
  ckpt_shard *sh2 = NULL;
  assert_int_equal(ckpt_store_submit(s, "r", 2, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh2), FT_OK);
  ckpt_job_free(j);
  assert_int_equal(tu_count_chunks(dir), 3);
  for (int c = 0; c < 3; c++) {
    assert_memory_equal(sh2->parts[0].chunks[c].hash, sh->parts[0].chunks[c].hash, CKPT_HASH_LEN);
    char path[4300];
    struct stat st2;
    tu_chunk_path(dir, sh->parts[0].chunks[c].hash, path, sizeof path);
    assert_int_equal(stat(path, &st2), 0);
    assert_int_equal(st2.st_ino, st1[c].st_ino); /* not rewritten */
  }
  /* a manifest's JSON form carries the same chunks */
  char *js = ckpt_shard_to_json(sh2);
  ckpt_shard *back = NULL;
  assert_int_equal(ckpt_shard_from_json(js, &back), FT_OK);
  assert_int_equal(ckpt_shard_step(back), 2);
  assert_int_equal(ckpt_shard_rank(back), 0);
  assert_memory_equal(back->parts[0].chunks, sh2->parts[0].chunks, 3 * sizeof(ckpt_chunk_ref));
  ckpt_shard_free(back);
  free(js);
  ckpt_shard_free(sh);
  ckpt_shard_free(sh2);
  tu_store_close(dir, uri, s);
  free(w);
}

/* A bounded queue smaller than one checkpoint still completes, and the
 * buffer may be scribbled on as soon as the job says it is released. */
static void test_backpressure_and_release(void **st) {
  char *dir, *uri;
  ckpt_store *s;
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 2, .queue_bytes = 1u << 20};
  assert_int_equal(tu_store_open(&dir, &uri, &s, &o), FT_OK);
  size_t n = (6u << 20) / 4;
  float *w = malloc(n * 4), *copy = malloc(n * 4), *out = malloc(n * 4);
  tu_fill(w, n, 5);
  memcpy(copy, w, n * 4);
  ckpt_part p = tu_part("param/big", w, n, 0, n);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(s, "r", 1, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_released(j, 1), 1);
  memset(w, 0xff, n * 4); /* the staging buffer is reused */
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  ckpt_meta m = {.run = "r", .step = 1, .parent_step = -1, .world = 1, .loss = NAN};
  assert_int_equal(ckpt_store_commit(s, &m, &sh, 1), FT_OK);
  ckpt_shard_free(sh);
  ckpt_manifest *man = NULL;
  assert_int_equal(ckpt_store_load(s, "r", 1, &man), FT_OK);
  assert_int_equal(ckpt_store_read(s, man, "param/big", 0, n * 4, out), FT_OK);
  assert_memory_equal(out, copy, n * 4);
  ckpt_manifest_free(man);
  tu_store_close(dir, uri, s);
  free(w);
  free(copy);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vector),
      cmocka_unit_test(test_shuffle_round_trip),
      cmocka_unit_test(test_encode_decode),
      cmocka_unit_test(test_chunking_and_idempotence),
      cmocka_unit_test(test_backpressure_and_release),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
