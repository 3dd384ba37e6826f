/*
 * test_ckpt_shardobj: checkpoints made of shard objects (format 3: the
 * manifest names the root of an index of them, test_ckpt_ranges). Two
 * ranks store their shards as objects (ckpt_store_put_shard) and send
 * references; the commit checks one object per rank; a load reads the
 * objects back into whole tensors with the same bytes. Refused: a missing
 * shard object, a rank twice, a shard whose chunks a GC swept between the
 * save and the commit (the commit then checks the chunks themselves). A
 * damaged or missing shard object is named on load and by verify (which
 * marks the checkpoint BAD). GC keeps a kept checkpoint's objects and
 * chunks and sweeps those of a dropped one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#define NV 6000 /* two ranks, 3000 values each */

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float w[4][NV];
} fx;

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  if (tu_store_open(&f->dir, &f->uri, &f->s, NULL))
    return -1;
  for (int k = 0; k < 4; k++)
    tu_fill(f->w[k], NV, (uint64_t)(k + 1));
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_store_close(f->dir, f->uri, f->s);
  free(f);
  return 0;
}

/* Rank r's shard of step (data f->w[k]), stored as an object; the
 * reference as the committing process gets it (from its text). */
static ckpt_shard *saved_ref(fx *f, int64_t step, int r, int k, char **text) {
  ckpt_part p = tu_part("param/w", f->w[k], NV, (size_t)r * (NV / 2), NV / 2);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL, *ref = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", step, r, 2, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  int prc = ckpt_store_put_shard(f->s, sh);
  if (prc)
    fprintf(stderr, "put_shard: %s\n", ft_err_detail());
  assert_int_equal(prc, FT_OK);
  char *js = ckpt_shard_report_to_json(sh);
  assert_non_null(strstr(js, "ftckpt-shard-ref"));
  assert_int_equal(ckpt_shard_from_json(js, &ref), FT_OK);
  assert_true(ckpt_shard_is_ref(ref));
  ckpt_shard_free(sh);
  if (text)
    *text = js;
  else
    free(js);
  return ref;
}

static int commit2(fx *f, int64_t step, ckpt_shard *a, ckpt_shard *b) {
  ckpt_meta m = {.run = "run", .step = step, .parent_step = -1, .world = 2, .loss = 1.0};
  ckpt_shard *both[2] = {a, b};
  return ckpt_store_commit(f->s, &m, both, 2);
}

static void shard_obj_path(fx *f, const ckpt_shard *ref, char *out, size_t n) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(ref->object, hex);
  snprintf(out, n, "%s/store/shards/%s", f->dir, hex);
}

static void test_commit_and_load(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600); /* young shards: the commit reads none of them */
  char *text = NULL;
  ckpt_shard *a = saved_ref(f, 10, 0, 0, &text), *b = saved_ref(f, 10, 1, 0, NULL);
  assert_true(strlen(text) < 1000); /* what travels: a name and totals, not the chunks */
  free(text);
  assert_int_equal(commit2(f, 10, b, a), FT_OK); /* any order */
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 10, &in), FT_OK);
  assert_int_equal(in.state, CKPT_COMMITTED);
  assert_int_equal(in.logical_bytes, NV * 4);
  assert_int_equal(in.ntensors, 1);
  assert_int_equal(in.new_bytes, in.stored_bytes); /* every chunk written by this save */
  /* the load reads both objects back into one tensor with the same bytes */
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 10, &m), FT_OK);
  assert_int_equal(ckpt_manifest_ntensors(m), 1);
  float back[NV];
  assert_int_equal(ckpt_store_read(f->s, m, "param/w", 0, sizeof back, back), FT_OK);
  assert_memory_equal(back, f->w[0], sizeof back);
  ckpt_manifest_free(m);
  /* the catalog's manifest names the root of the objects' index (format
   * 3), neither the objects nor the chunks */
  char key[256], *val = NULL;
  ckpt_key_man(key, sizeof key, "run", 10);
  assert_int_equal(ckpt_catalog_get(f->s->cat, key, &val, NULL), FT_OK);
  assert_non_null(strstr(val, "\"index\""));
  assert_null(strstr(val, "\"shards\""));
  assert_null(strstr(val, "\"tensors\""));
  free(val);
  assert_int_equal(ckpt_store_verify(f->s, "run", 10, NULL, NULL, NULL), FT_OK);
  /* a damaged shard object is named on load, not taken for a smaller checkpoint */
  char path[4400];
  shard_obj_path(f, a, path, sizeof path);
  tu_flip(path, 40);
  assert_int_equal(ckpt_store_load(f->s, "run", 10, &m), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "shards/"));
  assert_non_null(strstr(ft_err_detail(), "rank 0"));
  ckpt_shard_free(a);
  ckpt_shard_free(b);
}

static void test_refused(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600);
  ckpt_shard *a = saved_ref(f, 20, 0, 1, NULL), *b = saved_ref(f, 20, 1, 1, NULL);
  /* rank 0 twice, rank 1 never */
  assert_int_equal(commit2(f, 20, a, a), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "rank 0"));
  /* an object that is not in the store */
  char path[4400];
  shard_obj_path(f, b, path, sizeof path);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(commit2(f, 20, a, b), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "shard object of rank 1"));
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 20, &in), FT_ENOENT);
  ckpt_shard_free(a);
  ckpt_shard_free(b);
}

/* A GC between the save and the commit sweeps the uncommitted chunks when
 * they are older than its grace; the shard is then as old, so the commit
 * checks its chunks one by one and is refused. */
static void test_gc_between_save_and_commit(void **st) {
  fx *f = *st;
  ckpt_shard *a = saved_ref(f, 30, 0, 2, NULL), *b = saved_ref(f, 30, 1, 2, NULL);
  /* keep the shard objects, lose a chunk: as a GC whose grace ran out would */
  usleep(30000);
  ckpt_store_set_gc_grace(f->s, 0);
  char obja[4400], objb[4400], keepa[4500], keepb[4500];
  shard_obj_path(f, a, obja, sizeof obja);
  shard_obj_path(f, b, objb, sizeof objb);
  snprintf(keepa, sizeof keepa, "%s/keep_a", f->dir);
  snprintf(keepb, sizeof keepb, "%s/keep_b", f->dir);
  assert_int_equal(rename(obja, keepa), 0);
  assert_int_equal(rename(objb, keepb), 0);
  ckpt_gc_report rep;
  ckpt_retention r = {0};
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_true(rep.chunks_deleted >= 2);
  assert_int_equal(rename(keepa, obja), 0);
  assert_int_equal(rename(keepb, objb), 0);
  assert_int_equal(commit2(f, 30, a, b), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "is not in the store"));
  assert_non_null(strstr(ft_err_detail(), "param/w"));
  ckpt_shard_free(a);
  ckpt_shard_free(b);
}

static void test_gc_keeps_and_sweeps(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600);
  for (int64_t step = 40; step <= 41; step++) {
    ckpt_shard *a = saved_ref(f, step, 0, (int)(step - 38), NULL);
    ckpt_shard *b = saved_ref(f, step, 1, (int)(step - 38), NULL);
    assert_int_equal(commit2(f, step, a, b), FT_OK);
    ckpt_shard_free(a);
    ckpt_shard_free(b);
  }
  usleep(30000);
  ckpt_store_set_gc_grace(f->s, 0);
  ckpt_gc_report rep;
  ckpt_retention keep1 = {.keep_last = 1};
  assert_int_equal(ckpt_store_gc(f->s, &keep1, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 1);
  assert_int_equal(rep.shards_deleted, 3); /* step 40's two, and its index object */
  assert_true(rep.chunks_deleted >= 2);
  /* step 41 is whole: its objects and every chunk they name */
  assert_int_equal(ckpt_store_verify(f->s, "run", 41, NULL, NULL, NULL), FT_OK);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 41, &m), FT_OK);
  float back[NV];
  assert_int_equal(ckpt_store_read(f->s, m, "param/w", 0, sizeof back, back), FT_OK);
  assert_memory_equal(back, f->w[3], sizeof back);
  ckpt_manifest_free(m);
  assert_int_equal(ckpt_store_gc(f->s, &keep1, 0, &rep), FT_OK);
  assert_int_equal(rep.shards_deleted, 0);
  assert_int_equal(rep.chunks_deleted, 0);
  /* a kept checkpoint that lost a shard object: verify names it, marks it BAD */
  ckpt_shard *a = saved_ref(f, 41, 1, 3, NULL); /* the same bytes: the same object */
  char path[4400];
  shard_obj_path(f, a, path, sizeof path);
  ckpt_shard_free(a);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(ckpt_store_verify(f->s, "run", 41, NULL, NULL, NULL), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "(rank 1) is missing"));
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 41, &in), FT_OK);
  assert_int_equal(in.state, CKPT_BAD);
  /* a GC that keeps it stops before sweeping anything rather than lose
   * the chunks its lost object named */
  ckpt_retention all = {0};
  assert_int_equal(ckpt_store_gc(f->s, &all, 0, &rep), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "gc stopped, nothing swept"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_commit_and_load, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_between_save_and_commit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_keeps_and_sweeps, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
