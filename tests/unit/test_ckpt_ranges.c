/*
 * test_ckpt_ranges: a rank restores only what it needs (issue 43, part 2).
 * A checkpoint of W ranks is committed from shard references (format 3: a
 * small manifest naming the root of an index of its shard objects); one
 * rank of another world (W/2: aligned; 3W/4: its ranges straddle the old
 * ranks') reads its ranges through ckpt_store_load_lazy and
 * ckpt_store_load_for_ranges. The bytes match, and the bytes it read
 * (manifest, index and shard objects, and chunks: ckpt_read_stats) do not
 * grow with W: at W = 64 and 1024 within 1.75x of each other, and, at W/2,
 * below twice the rank's own shard. With FT_TEST_READ_ALL=1 the rank
 * restores the old way instead (ckpt_store_load: every shard object), and
 * the test fails on the bytes read.
 *
 * Each tensor is split evenly, as FSDP shards (rank k holds elements
 * [k*S, (k+1)*S), S = ceil(n/W)); "param/ln" has fewer elements than W, so
 * high ranks hold none of it. The chunks of the ranks the restore reads
 * hold real values; every other rank's name a zero chunk (one object per
 * length, as the scale swarm does), so a read of a rank it should not need
 * shows as wrong bytes. Shard objects are written as files without fsync.
 *
 * Also: an old manifest of format 2 (every shard object named) and one of
 * format 1 (the tensors listed) read through the same call; a layout the
 * even split does not describe falls back to reading the whole checkpoint
 * with the same bytes; a damaged or missing index object is named by a
 * load, a verify (the checkpoint BAD) and a GC (nothing swept).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#include <inttypes.h>

#define NT 4
static const char *const tnames[NT] = {"adam_m/a", "adam_v/a", "param/a", "param/ln"};
#define PER_RANK 4096 /* elements of each big tensor per rank */

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
} fx;

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  if (tu_store_open(&f->dir, &f->uri, &f->s, NULL))
    return -1;
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_store_close(f->dir, f->uri, f->s);
  free(f);
  return 0;
}

/* Elements of tensor t in a checkpoint of world w. */
static uint64_t numel(int t, int w) {
  return t == 3 ? 300 : (uint64_t)PER_RANK * (uint64_t)w - 3;
}

/* The value of element i of tensor t: every one distinct. */
static float value(int t, uint64_t i) {
  return (float)t * 1e7f + (float)i;
}

/* Rank k's elements [*b, *e) of n under the even split of world w. */
static void split(uint64_t n, int w, int k, uint64_t *b, uint64_t *e) {
  uint64_t s = (n + (uint64_t)w - 1) / (uint64_t)w;
  *b = (uint64_t)k * s < n ? (uint64_t)k * s : n;
  *e = *b + s < n ? *b + s : n;
}

/* Stores raw as a chunk object (if not there) and sets c to name it. */
static void put_chunk(fx *f, const void *raw, uint64_t len, uint64_t off, ckpt_chunk_ref *c) {
  uint8_t *obj = NULL;
  size_t olen = 0;
  char hex[CKPT_HEX_LEN + 1], key[256];
  memset(c, 0, sizeof *c);
  assert_int_equal(ckpt_sha256(raw, len, c->hash), FT_OK);
  ckpt_hex(c->hash, hex);
  ckpt_objkey_chunk(key, sizeof key, hex);
  assert_int_equal(ckpt_chunk_encode(raw, len, 4, 1, NULL, &obj, &olen), FT_OK);
  if (f->s->tier->exists(f->s->tier, key, 0, NULL, NULL) == FT_ENOENT)
    assert_int_equal(f->s->tier->put(f->s->tier, key, obj, olen), FT_OK);
  free(obj);
  c->offset = off;
  c->len = len;
  c->stored = olen;
}

/* Writes sh as a shard object (a file, no fsync) and makes it a reference. */
static void put_shard_object(fx *f, ckpt_shard *sh) {
  ckpt_shard_add_up(sh);
  char *js = ckpt_shard_to_json(sh), hex[CKPT_HEX_LEN + 1], path[4400];
  assert_non_null(js);
  assert_int_equal(ckpt_sha256(js, strlen(js), sh->object), FT_OK);
  ckpt_hex(sh->object, hex);
  snprintf(path, sizeof path, "%s/store/shards", f->dir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/store/shards/%s", f->dir, hex);
  FILE *o = fopen(path, "w");
  assert_non_null(o);
  assert_int_equal(fwrite(js, 1, strlen(js), o), strlen(js));
  assert_int_equal(fclose(o), 0);
  free(js);
  sh->is_ref = sh->has_object = 1;
}

/* Rank k's shard of world w at step: real values where real[k], else zero
 * chunks. even 0: rank 0 holds one element less of "param/a" and rank 1
 * one more (a layout the even split does not describe). */
static ckpt_shard *make_shard(fx *f, int64_t step, int k, int w, const char *real, int even) {
  ckpt_shard *sh = calloc(1, sizeof *sh);
  sh->run = strdup("run");
  sh->step = step;
  sh->rank = k;
  sh->world = w;
  sh->parts = calloc(NT, sizeof *sh->parts);
  for (int t = 0; t < NT; t++) {
    uint64_t n = numel(t, w), b, e;
    split(n, w, k, &b, &e);
    if (!even && t == 2 && k <= 1) {
      b = k == 0 ? 0 : b - 1;
      e = k == 0 ? e - 1 : e;
    }
    if (e == b)
      continue;
    ckpt_tensor *p = &sh->parts[sh->nparts++];
    p->name = strdup(tnames[t]);
    snprintf(p->dtype, sizeof p->dtype, "f32");
    p->ndim = 1;
    p->shape[0] = (int64_t)n;
    p->offset = b * 4;
    p->len = (e - b) * 4;
    float *raw = calloc(e - b, sizeof *raw);
    for (uint64_t i = b; real[k] && i < e; i++)
      raw[i - b] = value(t, i);
    ckpt_chunk_ref c;
    put_chunk(f, raw, p->len, p->offset, &c);
    assert_int_equal(ckpt_tensor_add_chunk(p, &c), FT_OK);
    free(raw);
  }
  put_shard_object(f, sh);
  return sh;
}

/* The ranges rank k of world nw owns of a checkpoint of world w. */
static void ranges_of(int w, int nw, int k, ckpt_range r[NT]) {
  for (int t = 0; t < NT; t++) {
    uint64_t b, e;
    split(numel(t, w), nw, k, &b, &e);
    r[t] = (ckpt_range){.tensor = tnames[t], .offset = b * 4, .len = (e - b) * 4};
  }
}

/* Commits a checkpoint of world w at step whose chunks are real for the
 * ranks holding any byte of the ranges of new ranks (nw, k) (and rank 0):
 * *real (malloc'd) says which. Returns the references (caller frees). */
static ckpt_shard **commit_world(fx *f, int64_t step, int w, const int *nw, const int *k, int nk,
                                 int even, char **real) {
  *real = calloc((size_t)w, 1);
  (*real)[0] = 1;
  for (int j = 0; j < nk; j++) {
    ckpt_range r[NT];
    ranges_of(w, nw[j], k[j], r);
    for (int t = 0; t < NT; t++)
      for (int o = 0; o < w; o++) {
        uint64_t b, e;
        split(numel(t, w), w, o, &b, &e);
        if (b * 4 < r[t].offset + r[t].len && e * 4 > r[t].offset)
          (*real)[o] = 1;
      }
  }
  ckpt_shard **sh = calloc((size_t)w, sizeof *sh);
  for (int o = 0; o < w; o++)
    sh[o] = make_shard(f, step, o, w, *real, even);
  ckpt_meta meta = {.run = "run", .step = step, .parent_step = -1, .world = w, .loss = 1.0};
  int rc = ckpt_store_commit(f->s, &meta, sh, w);
  if (rc)
    fprintf(stderr, "commit: %s\n", ft_err_detail());
  assert_int_equal(rc, FT_OK);
  return sh;
}

static void free_shards(ckpt_shard **sh, int w) {
  for (int o = 0; o < w; o++)
    ckpt_shard_free(sh[o]);
  free(sh);
}

static uint64_t bytes_read(fx *f) {
  ckpt_read_stats st;
  ckpt_store_read_stats(f->s, &st);
  return st.meta_bytes + st.store_bytes + st.memory_bytes + st.remote_bytes;
}

/* Reads ranges r of manifest m (through a manifest of those ranges, or
 * from m itself when it is whole) and checks every value. */
static void read_and_check(fx *f, const ckpt_manifest *m, const ckpt_range *r) {
  ckpt_manifest *part = NULL;
  int rc = ckpt_store_load_for_ranges(f->s, m, r, NT, &part);
  if (rc)
    fprintf(stderr, "load_for_ranges: %s\n", ft_err_detail());
  assert_int_equal(rc, FT_OK);
  for (int t = 0; t < NT; t++) {
    if (!r[t].len)
      continue;
    float *got = malloc(r[t].len);
    assert_int_equal(ckpt_store_read(f->s, part, r[t].tensor, r[t].offset, r[t].len, got), FT_OK);
    for (uint64_t i = 0; i < r[t].len / 4; i++)
      if (got[i] != value(t, r[t].offset / 4 + i))
        fail_msg("%s element %" PRIu64 ": %g, not %g", r[t].tensor, r[t].offset / 4 + i,
                 (double)got[i], (double)value(t, r[t].offset / 4 + i));
    free(got);
  }
  ckpt_manifest_free(part);
}

/* Restores rank k of world nw from step: the bytes it read, and (in *own)
 * the bytes of its ranges. */
static uint64_t restore_rank(fx *f, int64_t step, int w, int nw, int k, uint64_t *own) {
  ckpt_range r[NT];
  ranges_of(w, nw, k, r);
  *own = 0;
  for (int t = 0; t < NT; t++)
    *own += r[t].len;
  const char *all = getenv("FT_TEST_READ_ALL");
  uint64_t before = bytes_read(f);
  ckpt_manifest *m = NULL;
  if (all && !strcmp(all, "1")) /* the old way: every shard object */
    assert_int_equal(ckpt_store_load(f->s, "run", step, &m), FT_OK);
  else
    assert_int_equal(ckpt_store_load_lazy(f->s, "run", step, &m), FT_OK);
  read_and_check(f, m, r);
  ckpt_manifest_free(m);
  return bytes_read(f) - before;
}

static void test_bytes_read_do_not_grow(void **st) {
  fx *f = *st;
  static const int ws[2] = {64, 1024};
  uint64_t half[2], half_own[2], odd[2], odd_own[2];
  for (int i = 0; i < 2; i++) {
    int w = ws[i], nw[2] = {w / 2, 3 * w / 4}, k[2] = {w / 4 + 1, 3 * w / 8 + 1};
    char *real = NULL;
    ckpt_shard **sh = commit_world(f, 10 + i, w, nw, k, 2, 1, &real);
    /* the manifest is small: the root of the index, not W names */
    char key[256], *val = NULL;
    size_t vlen = 0;
    ckpt_key_man(key, sizeof key, "run", 10 + i);
    assert_int_equal(ckpt_catalog_get(f->s->cat, key, &val, &vlen), FT_OK);
    assert_non_null(strstr(val, "\"index\""));
    assert_null(strstr(val, "\"shards\""));
    assert_true(vlen < 1024);
    free(val);
    half[i] = restore_rank(f, 10 + i, w, nw[0], k[0], &half_own[i]);
    odd[i] = restore_rank(f, 10 + i, w, nw[1], k[1], &odd_own[i]);
    printf("world %4d: rank %d of %d read %" PRIu64 " bytes for its %" PRIu64
           " (%.2fx); rank %d of %d read %" PRIu64 " for %" PRIu64 " (%.2fx)\n",
           w, k[0], nw[0], half[i], half_own[i], (double)half[i] / (double)half_own[i], k[1], nw[1],
           odd[i], odd_own[i], (double)odd[i] / (double)odd_own[i]);
    free(real);
    free_shards(sh, w);
  }
  /* per byte of its own shard: no growth with the world beyond the index's
   * depth, and below 2x where the new ranks hold whole old ones */
  for (int i = 0; i < 2; i++)
    assert_true(half[i] < 2 * half_own[i]);
  double g_half = ((double)half[1] / (double)half_own[1]) / ((double)half[0] / (double)half_own[0]);
  double g_odd = ((double)odd[1] / (double)odd_own[1]) / ((double)odd[0] / (double)odd_own[0]);
  printf("growth from world 64 to 1024, per own byte: %.2fx (W/2), %.2fx (3W/4)\n", g_half, g_odd);
  assert_true(g_half < 1.75);
  assert_true(g_odd < 1.75);
}

/* The same call on a manifest of format 2 (every shard object named, as
 * committed before the index) and of format 1 (the tensors listed). */
static void test_old_formats(void **st) {
  fx *f = *st;
  int w = 16, nw = 8, k = 3;
  char *real = NULL;
  ckpt_shard **sh = commit_world(f, 20, w, &nw, &k, 1, 1, &real);
  ckpt_range r[NT];
  ranges_of(w, nw, k, r);
  /* format 2: the manifest of the same shard objects, without the index */
  ckpt_meta meta = {.run = "run", .step = 20, .parent_step = -1, .world = w, .loss = 1.0};
  ckpt_manifest *m2 = NULL, *back = NULL;
  assert_int_equal(ckpt_manifest_build_refs(&meta, sh, w, &m2), FT_OK);
  char *js = ckpt_manifest_to_json(m2);
  assert_non_null(strstr(js, "\"shards\""));
  assert_int_equal(ckpt_manifest_from_json(js, &back), FT_OK);
  uint64_t before = bytes_read(f);
  read_and_check(f, back, r);
  uint64_t v2 = bytes_read(f) - before;
  ckpt_manifest_free(back);
  ckpt_manifest_free(m2);
  free(js);
  /* format 1: the tensors listed (the whole shards committed) */
  for (int o = 0; o < w; o++)
    sh[o]->is_ref = 0;
  meta.step = 21;
  for (int o = 0; o < w; o++) {
    free(sh[o]->run);
    sh[o]->run = strdup("run");
    sh[o]->step = 21;
  }
  assert_int_equal(ckpt_store_commit(f->s, &meta, sh, w), FT_OK);
  ckpt_manifest *m1 = NULL;
  assert_int_equal(ckpt_store_load_lazy(f->s, "run", 21, &m1), FT_OK);
  assert_true(ckpt_manifest_ntensors(m1) == NT);
  read_and_check(f, m1, r);
  ckpt_manifest_free(m1);
  /* format 2 read only what it needed of the shard objects */
  assert_true(v2 > 0);
  free(real);
  free_shards(sh, w);
}

/* Another layout: the ranks the even split names do not hold the bytes,
 * so the whole checkpoint is read, with the same result. */
static void test_uneven_layout_reads_all(void **st) {
  fx *f = *st;
  int w = 8, nw = 4, k = 0;
  char *real = calloc(8, 1);
  memset(real, 1, 8);
  ckpt_shard **sh = calloc(8, sizeof *sh);
  for (int o = 0; o < w; o++)
    sh[o] = make_shard(f, 30, o, w, real, 0);
  ckpt_meta meta = {.run = "run", .step = 30, .parent_step = -1, .world = w, .loss = 1.0};
  assert_int_equal(ckpt_store_commit(f->s, &meta, sh, w), FT_OK);
  ckpt_range r[NT];
  ranges_of(w, nw, k, r);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load_lazy(f->s, "run", 30, &m), FT_OK);
  read_and_check(f, m, r);
  /* a range the manifest was not loaded for is refused, not read as zeros */
  ckpt_manifest *part = NULL;
  assert_int_equal(ckpt_store_load_for_ranges(f->s, m, r, 1, &part), FT_OK);
  float x[4];
  assert_int_equal(ckpt_store_read(f->s, part, tnames[0], r[0].offset + r[0].len, 4, x), FT_EINVAL);
  ckpt_manifest_free(part);
  ckpt_manifest_free(m);
  free(real);
  free_shards(sh, w);
}

/* The path of index object hash in f's store. */
static void index_path(fx *f, const uint8_t *hash, char *out, size_t n) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  snprintf(out, n, "%s/store/shards/%s", f->dir, hex);
}

static void test_damaged_index(void **st) {
  fx *f = *st;
  int w = 300, nw = 300, k = 299; /* two levels: a root and two leaves */
  char *real = NULL;
  ckpt_shard **sh = commit_world(f, 40, w, &nw, &k, 1, 1, &real);
  ckpt_manifest *m = NULL, *whole_ix = NULL;
  assert_int_equal(ckpt_store_load_lazy(f->s, "run", 40, &m), FT_OK);
  assert_int_equal(m->index_depth, 2);
  assert_null(m->objs);
  /* the whole index, read as a GC or an upload reads it */
  assert_int_equal(ckpt_store_load_lazy(f->s, "run", 40, &whole_ix), FT_OK);
  assert_int_equal(ckpt_index_load_tier(f->s->tier, whole_ix), FT_OK);
  assert_int_equal(whole_ix->nobjs, w);
  assert_int_equal(whole_ix->nnodes, 3);
  assert_memory_equal(whole_ix->nodes[2], whole_ix->index_root, CKPT_HASH_LEN); /* the root last */
  char path[4400];
  index_path(f, whole_ix->nodes[1], path, sizeof path); /* the second leaf */
  ckpt_manifest_free(whole_ix);
  ckpt_range r[NT];
  ranges_of(w, nw, k, r);
  ckpt_manifest *part = NULL;
  tu_flip(path, 60);
  assert_int_equal(ckpt_store_load_for_ranges(f->s, m, r, NT, &part), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "index object shards/"));
  assert_non_null(strstr(ft_err_detail(), "is damaged"));
  ckpt_manifest *whole = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 40, &whole), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "ranks 256..299"));
  /* a GC that keeps it stops before it sweeps anything */
  ckpt_gc_report rep;
  ckpt_retention all = {0};
  assert_int_equal(ckpt_store_gc(f->s, &all, 0, &rep), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "gc stopped, nothing swept"));
  assert_non_null(strstr(ft_err_detail(), "index object"));
  /* missing: named too; verify marks the checkpoint BAD */
  assert_int_equal(unlink(path), 0);
  assert_int_equal(ckpt_store_load_for_ranges(f->s, m, r, NT, &part), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "is missing"));
  assert_int_equal(ckpt_store_verify(f->s, "run", 40, NULL, NULL, NULL), FT_ECORRUPT);
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 40, &in), FT_OK);
  assert_int_equal(in.state, CKPT_BAD);
  ckpt_manifest_free(m);
  free(real);
  free_shards(sh, w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bytes_read_do_not_grow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_formats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_uneven_layout_reads_all, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_index, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
