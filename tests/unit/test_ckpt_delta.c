/*
 * test_ckpt_delta: delta chunks and lossy forms. The delta codec (a chunk
 * encoded against its base, decoded only with it, a damaged object or the
 * wrong base refused);
 * and the store: successive shards written as deltas with chains no longer
 * than full_every - 1, every checkpoint read back exactly, GC keeping the
 * bases a kept checkpoint needs, a damaged base making its dependants fail
 * verify and drop out of ckpt_store_latest, and a reset standing alone.
 * The lossy forms: within their error, named by what they decode to, exact
 * where they cannot hold a value, and said in the checkpoint's record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#define HDR_FOR_TEST 32 /* a chunk object's header (ckpt_chunk.c) */

/* One "training step": every value moves by a small relative amount. */
static void nudge(float *w, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 7;
  for (size_t i = 0; i < n; i++) {
    double u = (double)(tu_rng(&s) >> 11) / 9007199254740992.0 - 0.5;
    w[i] += (float)(w[i] * 2e-3 * u);
  }
}

static void test_codec(void **st) {
  size_t n = 128 * 1024, len = n * 4;
  float *x = malloc(len), *y = malloc(len), *out = malloc(len);
  tu_fill(x, n, 3);
  memcpy(y, x, len);
  nudge(y, n, 1);
  uint8_t hx[CKPT_HASH_LEN], hy[CKPT_HASH_LEN];
  ckpt_sha256(x, len, hx);
  ckpt_sha256(y, len, hy);
  uint8_t *plain = NULL, *obj = NULL;
  size_t plainlen = 0, objlen = 0;
  assert_int_equal(ckpt_chunk_encode(y, len, 4, 1, NULL, &plain, &plainlen), FT_OK);
  ckpt_chunk_base b = {.raw = (const uint8_t *)x, .chain = hx, .depth = 1};
  assert_int_equal(ckpt_chunk_encode(y, len, 4, 1, &b, &obj, &objlen), FT_OK);
  assert_int_equal(obj[6], 2);            /* the delta won */
  assert_true(objlen * 4 < plainlen * 3); /* by a wide margin on a small step */
  int depth = 0;
  const uint8_t *chain = NULL;
  assert_int_equal(ckpt_chunk_chain(obj, objlen, &depth, &chain), FT_OK);
  assert_int_equal(depth, 1);
  assert_memory_equal(chain, hx, CKPT_HASH_LEN);
  assert_int_equal(ckpt_chunk_check_alone(obj, objlen, hy), FT_OK);
  assert_int_equal(ckpt_chunk_decode(obj, objlen, hy, x, out, len), FT_OK);
  assert_memory_equal(out, y, len);
  /* without its base, or with the wrong one: refused */
  assert_int_equal(ckpt_chunk_decode(obj, objlen, hy, NULL, out, len), FT_EINVAL);
  assert_int_equal(ckpt_chunk_decode(obj, objlen, hy, y, out, len), FT_ECORRUPT);
  /* a flipped byte in the chain or the payload: the seal says so */
  for (size_t at = 40; at < objlen; at += objlen / 3) {
    obj[at] ^= 1;
    assert_int_equal(ckpt_chunk_check_alone(obj, objlen, hy), FT_ECORRUPT);
    obj[at] ^= 1;
  }
  /* a depth past the limit is a damaged header, not a long walk */
  obj[24] = CKPT_MAX_CHAIN + 1;
  assert_int_equal(ckpt_chunk_chain(obj, objlen, &depth, &chain), FT_ECORRUPT);
  free(obj);
  /* bytes that are not 2- or 4-byte elements never become deltas */
  b.raw = (const uint8_t *)x;
  assert_int_equal(ckpt_chunk_encode(y, len - 1, 4, 1, &b, &obj, &objlen), FT_OK);
  assert_int_not_equal(obj[6], 2);
  free(obj);
  free(plain);
  free(x);
  free(y);
  free(out);
}

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float *w;
  size_t n;
} fx;

static int commit_w(fx *f, int64_t step) {
  ckpt_part p[2] = {tu_part("param/a", f->w, f->n, 0, f->n / 2),
                    tu_part("param/a", f->w, f->n, f->n / 2, f->n - f->n / 2)};
  return tu_commit(f->s, "r", step, p, 2);
}

static void info(fx *f, int64_t step, ckpt_info *in) {
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "r", step, &m), FT_OK);
  *in = *ckpt_manifest_info(m);
  ckpt_manifest_free(m);
}

/* Reads step back and compares with the bytes it had (kept in saved). */
static void check_step(fx *f, int64_t step, const float *saved) {
  ckpt_manifest *m = NULL;
  float *out = malloc(f->n * 4);
  assert_int_equal(ckpt_store_load(f->s, "r", step, &m), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, m, "param/a", 0, f->n * 4, out), FT_OK);
  assert_memory_equal(out, saved, f->n * 4);
  ckpt_manifest_free(m);
  free(out);
}

static void test_chains(void **st) {
  fx f = {.n = 3 * 256 * 1024}; /* 3 MiB: 4 chunks of at most 1 MiB in 2 parts */
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 2, .full_every = 3};
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_OK);
  ckpt_store_set_gc_grace(f.s, 0);
  f.w = malloc(f.n * 4);
  tu_fill(f.w, f.n, 5);
  float *saved[6];
  int want_depth[6] = {0, 1, 2, 0, 1, 2};
  for (int64_t step = 0; step < 6; step++) {
    if (step)
      nudge(f.w, f.n, (uint64_t)step);
    saved[step] = malloc(f.n * 4);
    memcpy(saved[step], f.w, f.n * 4);
    assert_int_equal(commit_w(&f, step), FT_OK);
    ckpt_info in;
    info(&f, step, &in);
    assert_int_equal(in.depth, want_depth[step]);
    assert_int_equal(in.base_step, want_depth[step] ? step - 1 : -1);
    if (want_depth[step]) /* deltas are smaller than what stands alone */
      assert_true(in.stored_bytes * 4 < in.logical_bytes * 3);
  }
  for (int64_t step = 0; step < 6; step++)
    check_step(&f, step, saved[step]);
  /* the listing says it too */
  ckpt_info *l = NULL;
  size_t nl = 0;
  assert_int_equal(ckpt_store_list(f.s, "r", &l, &nl), FT_OK);
  assert_int_equal(nl, 6);
  assert_int_equal(l[5].depth, 2);
  assert_int_equal(l[5].base_step, 4);
  free(l);

  /* keep the newest only: its chain (steps 3 and 4's chunks) stays */
  ckpt_retention ret = {.keep_last = 1};
  ckpt_gc_report rep;
  assert_int_equal(ckpt_store_gc(f.s, &ret, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 5);
  check_step(&f, 5, saved[5]);
  ckpt_verify_report vr;
  assert_int_equal(ckpt_store_verify(f.s, "r", 5, &vr, NULL, NULL), FT_OK);

  /* damage the full chunk at the root of step 5's chain: step 5 fails
   * verify (naming that chunk) and is no longer restorable */
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f.s, "r", 5, &m), FT_OK);
  const ckpt_chunk_ref *r = &m->tensors[0].chunks[0];
  assert_int_equal(r->depth, 2);
  const uint8_t *root = r->chain + CKPT_HASH_LEN;
  char path[4300], hex[CKPT_HEX_LEN + 1];
  tu_chunk_path(f.dir, root, path, sizeof path);
  ckpt_hex(root, hex);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  tu_flip(path, (long)sb.st_size - 10);
  float *out = malloc(f.n * 4);
  assert_int_equal(ckpt_store_read(f.s, m, "param/a", 0, f.n * 4, out), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), hex));
  assert_int_equal(ckpt_store_verify(f.s, "r", 5, &vr, NULL, NULL), FT_ECORRUPT);
  assert_true(vr.chunks_corrupt >= 1);
  assert_non_null(strstr(vr.first_problem, hex));
  int64_t latest = -1;
  assert_int_equal(ckpt_store_latest(f.s, "r", INT64_MAX, &latest), FT_ENOENT);
  ckpt_manifest_free(m);
  free(out);
  for (int i = 0; i < 6; i++)
    free(saved[i]);
  free(f.w);
  tu_store_close(f.dir, f.uri, f.s);
}

/* Unchanged bytes keep their chain; a reset (a restore) stands alone; a
 * store without full_every writes no deltas. */
static void test_unchanged_and_reset(void **st) {
  fx f = {.n = 64 * 1024};
  ckpt_store_opts o = {.full_every = 8};
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_OK);
  f.w = malloc(f.n * 4);
  tu_fill(f.w, f.n, 9);
  ckpt_info in;
  assert_int_equal(commit_w(&f, 1), FT_OK);
  nudge(f.w, f.n, 1);
  assert_int_equal(commit_w(&f, 2), FT_OK);
  info(&f, 2, &in);
  assert_int_equal(in.depth, 1);
  assert_int_equal(commit_w(&f, 3), FT_OK); /* the same bytes as step 2 */
  info(&f, 3, &in);
  assert_int_equal(in.depth, 1); /* step 2's chunks, and so their chain */
  assert_int_equal(in.new_bytes, 0);
  ckpt_store_delta_reset(f.s);
  nudge(f.w, f.n, 2);
  assert_int_equal(commit_w(&f, 4), FT_OK);
  info(&f, 4, &in);
  assert_int_equal(in.depth, 0);
  assert_int_equal(in.base_step, -1);
  float *saved = malloc(f.n * 4);
  memcpy(saved, f.w, f.n * 4);
  check_step(&f, 4, saved);
  free(saved);
  tu_store_close(f.dir, f.uri, f.s);

  o.full_every = 0;
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_OK);
  assert_int_equal(commit_w(&f, 1), FT_OK);
  nudge(f.w, f.n, 3);
  assert_int_equal(commit_w(&f, 2), FT_OK);
  info(&f, 2, &in);
  assert_int_equal(in.depth, 0);
  tu_store_close(f.dir, f.uri, f.s);
  o.full_every = CKPT_MAX_FULL_EVERY + 1;
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_EINVAL);
  tu_rmrf(f.dir);
  free(f.dir);
  free(f.uri);
  free(f.w);
}

/* Verify of a base alone marks the checkpoints that need it bad too. */
static void test_verify_marks_dependants(void **st) {
  fx f = {.n = 64 * 1024};
  ckpt_store_opts o = {.full_every = 4};
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_OK);
  f.w = malloc(f.n * 4);
  tu_fill(f.w, f.n, 11);
  for (int64_t step = 1; step <= 3; step++) {
    nudge(f.w, f.n, (uint64_t)step);
    assert_int_equal(commit_w(&f, step), FT_OK);
  }
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f.s, "r", 1, &m), FT_OK);
  assert_int_equal(tu_damage_chunk(f.dir, &m->tensors[0], 0), 0);
  ckpt_manifest_free(m);
  ckpt_verify_report vr;
  assert_int_equal(ckpt_store_verify(f.s, "r", 1, &vr, NULL, NULL), FT_ECORRUPT);
  assert_int_equal(vr.dependants_bad, 2); /* steps 2 and 3: chains through step 1's chunk */
  ckpt_info in;
  info(&f, 3, &in);
  assert_int_equal(in.state, CKPT_BAD);
  int64_t latest = -1;
  assert_int_equal(ckpt_store_latest(f.s, "r", INT64_MAX, &latest), FT_ENOENT);
  free(f.w);
  tu_store_close(f.dir, f.uri, f.s);
}

/* A commit whose delta's base is gone from the store is refused, and the
 * writer does not encode against a base whose chain is gone. */
static void test_commit_needs_bases(void **st) {
  fx f = {.n = 64 * 1024};
  ckpt_store_opts o = {.full_every = 4};
  assert_int_equal(tu_store_open(&f.dir, &f.uri, &f.s, &o), FT_OK);
  f.w = malloc(f.n * 4);
  tu_fill(f.w, f.n, 13);
  assert_int_equal(commit_w(&f, 1), FT_OK);
  nudge(f.w, f.n, 1);
  ckpt_part p[2] = {tu_part("param/a", f.w, f.n, 0, f.n / 2),
                    tu_part("param/a", f.w, f.n, f.n / 2, f.n - f.n / 2)};
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(f.s, "r", 2, 0, 1, p, 2, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  assert_int_equal(sh->parts[0].chunks[0].depth, 1);
  char path[4300], hex[CKPT_HEX_LEN + 1];
  tu_chunk_path(f.dir, sh->parts[0].chunks[0].chain, path, sizeof path);
  ckpt_hex(sh->parts[0].chunks[0].chain, hex);
  assert_int_equal(unlink(path), 0);
  ckpt_meta m = {.run = "r", .step = 2, .parent_step = 1, .world = 1, .loss = 1};
  assert_int_equal(ckpt_store_commit(f.s, &m, &sh, 1), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), hex));
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f.s, "r", 2, &in), FT_ENOENT); /* nothing recorded */
  /* the next shard's base (step 2's chunk) needs the chunk that is gone:
   * the writer sees it and writes that shard standing alone */
  nudge(f.w, f.n, 2);
  assert_int_equal(commit_w(&f, 3), FT_OK);
  ckpt_manifest *m3 = NULL;
  assert_int_equal(ckpt_store_load(f.s, "r", 3, &m3), FT_OK);
  assert_int_equal(m3->tensors[0].chunks[0].depth, 0); /* the half whose chain broke */
  assert_int_equal(m3->tensors[0].chunks[1].depth, 2); /* the other half goes on */
  ckpt_manifest_free(m3);
  ckpt_shard_free(sh);
  free(f.w);
  tu_store_close(f.dir, f.uri, f.s);
}

/* The lossy forms: what they decode to is what the chunk is named by and
 * what a read gets back, within each form's error; values a form cannot
 * hold leave the chunk exact; the record says the checkpoint is not exact. */
static void test_lossy(void **st) {
  size_t n = 3000, len = n * 4; /* 11 blocks and a short one */
  float *m = malloc(len), *v = malloc(len), *deq = malloc(len), *out = malloc(len);
  tu_fill(m, n, 21);
  for (size_t i = 0; i < n; i++)
    v[i] = m[i] * m[i] * (float)(1 + i % 7) * 1e-3f; /* >= 0, wide range */
  v[5] = 0.0f;
  v[6] = 1e-30f;  /* far below its block's top: raised, not zeroed */
  v[10] = 1.999f; /* its block's top, the last step of the top binade */
  int kinds[3] = {CKPT_LOSSY_BF16, CKPT_LOSSY_Q8, CKPT_LOSSY_Q8LOG};
  for (int k = 0; k < 3; k++) {
    const float *x = kinds[k] == CKPT_LOSSY_Q8LOG ? v : m;
    uint8_t *obj = NULL;
    size_t objlen = 0;
    assert_int_equal(ckpt_chunk_encode_lossy(x, len, kinds[k], 1, (uint8_t *)deq, &obj, &objlen),
                     FT_OK);
    assert_non_null(obj);
    assert_true(objlen < len / (kinds[k] == CKPT_LOSSY_BF16 ? 1.9 : 3.5));
    uint8_t h[CKPT_HASH_LEN];
    ckpt_sha256(deq, len, h);
    assert_int_equal(ckpt_chunk_decode(obj, objlen, h, NULL, out, len), FT_OK);
    assert_memory_equal(out, deq, len); /* decodes to what it is named by */
    for (size_t i = 0; i < n; i++) {
      float err = fabsf(out[i] - x[i]);
      if (kinds[k] == CKPT_LOSSY_BF16)
        assert_true(err <= fabsf(x[i]) / 256);
      else if (kinds[k] == CKPT_LOSSY_Q8) { /* half a step of the block's scale */
        float amax = 0;
        for (size_t j = i / 256 * 256; j < n && j < i / 256 * 256 + 256; j++)
          amax = fmaxf(amax, fabsf(x[j]));
        assert_true(err <= amax / 127 / 2 * 1.0001f);
      } else if (x[i] == 0) {
        assert_true(out[i] == 0);
      } else {
        assert_true(out[i] > 0); /* never zeroed */
        if (i != 6)
          assert_true(err <= x[i] / (i == 10 ? 15 : 30) || out[i] > x[i]);
      }
    }
    obj[HDR_FOR_TEST + 3] ^= 0x40; /* a damaged code: the name says so */
    assert_int_equal(ckpt_chunk_decode(obj, objlen, h, NULL, out, len), FT_ECORRUPT);
    free(obj);
  }
  /* a NaN, or a negative value for the log form: no lossy object */
  uint8_t *obj = NULL;
  size_t objlen = 0;
  m[7] = NAN;
  assert_int_equal(ckpt_chunk_encode_lossy(m, len, CKPT_LOSSY_Q8, 1, (uint8_t *)deq, &obj, &objlen),
                   FT_OK);
  assert_null(obj);
  v[9] = -1.0f;
  assert_int_equal(
      ckpt_chunk_encode_lossy(v, len, CKPT_LOSSY_Q8LOG, 1, (uint8_t *)deq, &obj, &objlen), FT_OK);
  assert_null(obj);
  m[7] = 0.5f;
  v[9] = 1.0f;

  /* through the store: the record is not exact, a read returns the
   * decoded values, the weights stay exact */
  char *dir, *uri;
  ckpt_store *s;
  ckpt_store_opts o = {.full_every = 4};
  assert_int_equal(tu_store_open(&dir, &uri, &s, &o), FT_OK);
  ckpt_part p[3] = {tu_part("adam_m/a", m, n, 0, n), tu_part("adam_v/a", v, n, 0, n),
                    tu_part("param/a", m, n, 0, n)};
  p[0].lossy = CKPT_LOSSY_Q8;
  p[1].lossy = CKPT_LOSSY_Q8LOG;
  assert_int_equal(tu_commit(s, "r", 1, p, 3), FT_OK);
  ckpt_manifest *man = NULL;
  assert_int_equal(ckpt_store_load(s, "r", 1, &man), FT_OK);
  assert_int_equal(ckpt_manifest_info(man)->lossy, (1 << CKPT_LOSSY_Q8) | (1 << CKPT_LOSSY_Q8LOG));
  ckpt_tensor_info ti;
  assert_int_equal(ckpt_manifest_tensor(man, ckpt_manifest_find(man, "adam_v/a"), &ti), FT_OK);
  assert_int_equal(ti.lossy, CKPT_LOSSY_Q8LOG);
  assert_int_equal(ckpt_store_read(s, man, "param/a", 0, len, out), FT_OK);
  assert_memory_equal(out, m, len);
  assert_int_equal(ckpt_store_read(s, man, "adam_m/a", 0, len, out), FT_OK);
  assert_memory_not_equal(out, m, len);
  ckpt_chunk_encode_lossy(m, len, CKPT_LOSSY_Q8, 1, (uint8_t *)deq, &obj, &objlen);
  free(obj);
  assert_memory_equal(out, deq, len);
  ckpt_info *l = NULL;
  size_t nl = 0;
  assert_int_equal(ckpt_store_list(s, "r", &l, &nl), FT_OK);
  assert_int_equal(l[0].lossy, ckpt_manifest_info(man)->lossy); /* the record says so too */
  free(l);
  /* a second moment that moved a little: its decoded values as a delta on
   * the last ones beat the form itself */
  uint64_t v1 = ti.stored_bytes;
  for (size_t i = 0; i < n; i += 3)
    v[i] *= 1.01f;
  assert_int_equal(tu_commit(s, "r", 2, p, 3), FT_OK);
  ckpt_manifest_free(man);
  assert_int_equal(ckpt_store_load(s, "r", 2, &man), FT_OK);
  assert_int_equal(ckpt_manifest_tensor(man, ckpt_manifest_find(man, "adam_v/a"), &ti), FT_OK);
  assert_int_equal(ti.delta_chunks, 1);
  assert_true(ti.stored_bytes * 2 < v1);
  assert_int_equal(ckpt_store_read(s, man, "adam_v/a", 0, len, out), FT_OK);
  ckpt_chunk_encode_lossy(v, len, CKPT_LOSSY_Q8LOG, 1, (uint8_t *)deq, &obj, &objlen);
  free(obj);
  assert_memory_equal(out, deq, len);
  ckpt_manifest_free(man);
  /* only for f32 */
  ckpt_part bad = p[0];
  bad.dtype = "bf16";
  ckpt_job *j = NULL;
  assert_int_equal(ckpt_store_submit(s, "r", 2, 0, 1, &bad, 1, &j), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "f32 only"));
  tu_store_close(dir, uri, s);
  free(m);
  free(v);
  free(deq);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codec),
      cmocka_unit_test(test_chains),
      cmocka_unit_test(test_unchanged_and_reset),
      cmocka_unit_test(test_verify_marks_dependants),
      cmocka_unit_test(test_commit_needs_bases),
      cmocka_unit_test(test_lossy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
