/*
 * test_ckpt_read: reading arbitrary byte ranges of logical tensors across
 * chunk boundaries, and resharding: a checkpoint written at world 3 with
 * uneven ranges is read back at world 1 and world 2 (FSDP slices), by a
 * separate read-only store handle. A damaged chunk is refused (FT_ECORRUPT)
 * and never copied out; verify reports it and marks the checkpoint bad.
 * A store that keeps its chunks in memory (ckpt_store_keep_in_memory) reads
 * them from there (the chunk files on disk may even be damaged), within its
 * bound: the chunks written longest ago are read from disk again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#define NBIG ((size_t)(3u << 20) / 4 + 1234) /* ~3 MiB of f32: 4 chunks of 1 MiB */
#define NSMALL ((size_t)1001)

typedef struct fx {
  char *dir, *uri;
  float *big, *small;
} fx;

/* World 3, uneven: rank 0 gets a sliver, rank 1 most, rank 2 the tail; the
 * small tensor is owned by rank 2 alone. Ranks' ranges start off chunk
 * boundaries, so a read crosses chunks of different ranks. */
static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  f->dir = tu_tmpdir();
  f->uri = tu_uri(f->dir);
  f->big = malloc(NBIG * 4);
  f->small = malloc(NSMALL * 4);
  tu_fill(f->big, NBIG, 11);
  tu_fill(f->small, NSMALL, 12);
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 3};
  if (ckpt_store_open(f->uri, &o, &s))
    return -1;
  size_t cut[4] = {0, 1000, 1000 + (1u << 20) / 4 * 2 + 77, NBIG};
  ckpt_job *j[3];
  ckpt_shard *sh[3];
  for (int r = 0; r < 3; r++) {
    ckpt_part p[2];
    int n = 0;
    p[n++] = tu_part("param/big", f->big, NBIG, cut[r], cut[r + 1] - cut[r]);
    if (r == 2)
      p[n++] = tu_part("param/small", f->small, NSMALL, 0, NSMALL);
    if (ckpt_store_submit(s, "rs", 100, r, 3, p, n, &j[r]))
      return -1;
  }
  for (int r = 0; r < 3; r++) {
    if (ckpt_job_wait(j[r], &sh[r]))
      return -1;
    ckpt_job_free(j[r]);
  }
  ckpt_meta m = {.run = "rs", .step = 100, .parent_step = -1, .world = 3, .loss = 3.0};
  int rc = ckpt_store_commit(s, &m, sh, 3);
  for (int r = 0; r < 3; r++)
    ckpt_shard_free(sh[r]);
  ckpt_store_free(s);
  *st = f;
  return rc ? -1 : 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_rmrf(f->dir);
  free(f->dir);
  free(f->uri);
  free(f->big);
  free(f->small);
  free(f);
  return 0;
}

static ckpt_store *open_reader(fx *f) {
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.read_only = 1, .threads = 2};
  assert_int_equal(ckpt_store_open(f->uri, &o, &s), FT_OK);
  return s;
}

static void test_reshard(void **st) {
  fx *f = *st;
  ckpt_store *s = open_reader(f);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(s, "rs", 100, &m), FT_OK);
  assert_int_equal(ckpt_manifest_info(m)->world, 3);
  float *out = malloc(NBIG * 4);
  /* world 1: everything */
  assert_int_equal(ckpt_store_read(s, m, "param/big", 0, NBIG * 4, out), FT_OK);
  assert_memory_equal(out, f->big, NBIG * 4);
  assert_int_equal(ckpt_store_read(s, m, "param/small", 0, NSMALL * 4, out), FT_OK);
  assert_memory_equal(out, f->small, NSMALL * 4);
  /* world 2: FSDP slices (numel padded to a multiple of 2) */
  const char *names[2] = {"param/big", "param/small"};
  size_t numels[2] = {NBIG, NSMALL};
  const float *src[2] = {f->big, f->small};
  for (int t = 0; t < 2; t++) {
    size_t S = (numels[t] + 1) / 2;
    for (int r = 0; r < 2; r++) {
      size_t a = (size_t)r * S, b = a + S < numels[t] ? a + S : numels[t];
      memset(out, 0, NBIG * 4);
      assert_int_equal(ckpt_store_read(s, m, names[t], a * 4, (b - a) * 4, out), FT_OK);
      assert_memory_equal(out, src[t] + a, (b - a) * 4);
    }
  }
  ckpt_manifest_free(m);
  ckpt_store_free(s);
  free(out);
}

static void test_arbitrary_ranges(void **st) {
  fx *f = *st;
  ckpt_store *s = open_reader(f);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(s, "rs", 100, &m), FT_OK);
  uint8_t *out = malloc(NBIG * 4);
  const uint8_t *ref = (const uint8_t *)f->big;
  uint64_t total = NBIG * 4, seed = 99;
  /* byte-granular ranges, many straddling the 1 MiB chunk boundaries */
  for (int k = 0; k < 200; k++) {
    uint64_t off, len;
    if (k % 2) {
      uint64_t boundary = (1 + tu_rng(&seed) % 2) << 20;
      off = boundary - 1 - tu_rng(&seed) % 5000;
      len = 1 + tu_rng(&seed) % 10000;
    } else {
      off = tu_rng(&seed) % total;
      len = tu_rng(&seed) % (total - off + 1);
    }
    if (off + len > total)
      len = total - off;
    assert_int_equal(ckpt_store_read(s, m, "param/big", off, len, out), FT_OK);
    assert_memory_equal(out, ref + off, len);
  }
  assert_int_equal(ckpt_store_read(s, m, "param/big", total - 4, 8, out), FT_EINVAL);
  assert_int_equal(ckpt_store_read(s, m, "param/nope", 0, 4, out), FT_ENOENT);
  ckpt_manifest_free(m);
  ckpt_store_free(s);
  free(out);
}

static void test_corrupt_chunk_refused(void **st) {
  fx *f = *st;
  ckpt_store *s = NULL;
  assert_int_equal(ckpt_store_open(f->uri, NULL, &s), FT_OK);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(s, "rs", 100, &m), FT_OK);
  /* damage the chunk holding bytes around 2 MiB + 10 */
  const ckpt_tensor *t = &m->tensors[ckpt_manifest_find(m, "param/big")];
  int victim = -1;
  for (int c = 0; c < t->nchunks; c++)
    if (t->chunks[c].offset <= (2u << 20) + 10 &&
        t->chunks[c].offset + t->chunks[c].len > (2u << 20) + 10)
      victim = c;
  assert_true(victim >= 0);
  assert_int_equal(tu_damage_chunk(f->dir, t, victim), 0);
  uint64_t off = t->chunks[victim].offset, len = t->chunks[victim].len;
  uint8_t *out = malloc(len);
  memset(out, 0xab, len);
  assert_int_equal(ckpt_store_read(s, m, "param/big", off, len, out), FT_ECORRUPT);
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(t->chunks[victim].hash, hex);
  assert_non_null(strstr(ft_err_detail(), hex));
  for (uint64_t i = 0; i < len; i++) /* nothing of the bad chunk reached dst */
    assert_int_equal(out[i], 0xab);
  /* other chunks still read fine */
  assert_int_equal(ckpt_store_read(s, m, "param/small", 0, NSMALL * 4, out), FT_OK);
  /* verify: reported, and the checkpoint becomes BAD; latest skips it */
  ckpt_verify_report rep;
  assert_int_equal(ckpt_store_verify(s, "rs", 100, &rep, NULL, NULL), FT_ECORRUPT);
  assert_int_equal(rep.chunks_corrupt, 1);
  assert_int_equal(rep.chunks_missing, 0);
  assert_int_equal(rep.chunks_checked, m->info.nchunks);
  assert_non_null(strstr(rep.first_problem, hex));
  ckpt_info info;
  assert_int_equal(ckpt_store_get_info(s, "rs", 100, &info), FT_OK);
  assert_int_equal(info.state, CKPT_BAD);
  int64_t latest;
  assert_int_equal(ckpt_store_latest(s, "rs", INT64_MAX, &latest), FT_ENOENT);
  /* a missing chunk is reported as missing */
  char path[4300];
  tu_chunk_path(f->dir, t->chunks[victim].hash, path, sizeof path);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(ckpt_store_verify(s, "rs", 100, &rep, NULL, NULL), FT_ECORRUPT);
  assert_int_equal(rep.chunks_missing, 1);
  assert_int_equal(ckpt_store_read(s, m, "param/big", off, len, out), FT_ECORRUPT);
  ckpt_manifest_free(m);
  ckpt_store_free(s);
  free(out);
}

static void test_memory_first(void **st) {
  (void)st;
  char *dir, *uri;
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 2};
  assert_int_equal(tu_store_open(&dir, &uri, &s, &o), FT_OK);
  assert_int_equal(ckpt_store_keep_in_memory(s, 5u << 20), FT_OK);
  float *v[3], *out = malloc(NBIG * 4);
  for (int k = 0; k < 3; k++) {
    v[k] = malloc(NBIG * 4);
    tu_fill(v[k], NBIG, 40 + (uint64_t)k);
  }
  ckpt_part p = tu_part("param/big", v[0], NBIG, 0, NBIG);
  assert_int_equal(tu_commit(s, "mem", 1, &p, 1), FT_OK);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(s, "mem", 1, &m), FT_OK);
  /* every chunk file damaged: the reads must not touch them */
  const ckpt_tensor *t = &m->tensors[ckpt_manifest_find(m, "param/big")];
  for (int c = 0; c < t->nchunks; c++)
    assert_int_equal(tu_damage_chunk(dir, t, c), 0);
  ckpt_read_stats r0, r1;
  ckpt_store_read_stats(s, &r0);
  assert_int_equal(ckpt_store_read(s, m, "param/big", 0, NBIG * 4, out), FT_OK);
  assert_memory_equal(out, v[0], NBIG * 4);
  ckpt_store_read_stats(s, &r1);
  assert_int_equal(r1.memory_bytes - r0.memory_bytes, NBIG * 4);
  assert_int_equal(r1.store_bytes - r0.store_bytes, 0);
  assert_int_equal(r1.memory_rejected, 0);
  /* another handle on the same store has nothing in memory: the damage shows */
  ckpt_store *r = NULL;
  ckpt_store_opts ro = {.read_only = 1};
  assert_int_equal(ckpt_store_open(uri, &ro, &r), FT_OK);
  assert_int_equal(ckpt_store_read(r, m, "param/big", 0, NBIG * 4, out), FT_ECORRUPT);
  ckpt_store_free(r);
  ckpt_manifest_free(m);
  /* two more checkpoints (3 MiB each): step 1 and then the first chunks of
   * step 2 leave the 5 MiB bound, step 3 stays whole */
  for (int k = 1; k < 3; k++) {
    p = tu_part("param/big", v[k], NBIG, 0, NBIG);
    assert_int_equal(tu_commit(s, "mem", 1 + k, &p, 1), FT_OK);
  }
  for (int k = 2; k >= 1; k--) {
    assert_int_equal(ckpt_store_load(s, "mem", 1 + k, &m), FT_OK);
    ckpt_store_read_stats(s, &r0);
    assert_int_equal(ckpt_store_read(s, m, "param/big", 0, NBIG * 4, out), FT_OK);
    assert_memory_equal(out, v[k], NBIG * 4);
    ckpt_store_read_stats(s, &r1);
    if (k == 2) /* the newest: all from memory */
      assert_int_equal(r1.store_bytes - r0.store_bytes, 0);
    else
      assert_true(r1.store_bytes > r0.store_bytes && r1.memory_bytes > r0.memory_bytes);
    ckpt_manifest_free(m);
  }
  for (int k = 0; k < 3; k++)
    free(v[k]);
  free(out);
  tu_store_close(dir, uri, s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_first),
      cmocka_unit_test_setup_teardown(test_reshard, setup, teardown),
      cmocka_unit_test_setup_teardown(test_arbitrary_ranges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_chunk_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
