/*
 * test_ckpt_manifest: shard and checkpoint manifests: JSON round trips, the
 * checksum catching a changed byte, and the commit's coverage check (a
 * missing or doubly covered range is refused and nothing is listed); a
 * sealed manifest that breaks an invariant (chunk gap or overlap, nbytes,
 * dtype, world, step, run name, tensor order) is FT_EFORMAT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float *w;
} fx;

#define N 3000

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  ckpt_store_opts o = {.chunk_mib = 1};
  if (tu_store_open(&f->dir, &f->uri, &f->s, &o))
    return -1;
  f->w = malloc(N * 4);
  tu_fill(f->w, N, 9);
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_store_close(f->dir, f->uri, f->s);
  free(f->w);
  free(f);
  return 0;
}

/* Rank r of world writes elements [a, b) of tensor "t". */
static ckpt_shard *shard_of(fx *f, int64_t step, int rank, int world, size_t a, size_t b) {
  ckpt_part p = tu_part("param/t", f->w, N, a, b - a);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", step, rank, world, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  return sh;
}

static void test_shard_json_checksum(void **st) {
  fx *f = *st;
  ckpt_shard *sh = shard_of(f, 5, 1, 2, 1000, 3000);
  char *js = ckpt_shard_to_json(sh);
  assert_non_null(strstr(js, "\"checksum\""));
  ckpt_shard *back = NULL;
  assert_int_equal(ckpt_shard_from_json(js, &back), FT_OK);
  assert_int_equal(ckpt_shard_rank(back), 1);
  assert_int_equal(ckpt_shard_step(back), 5);
  assert_int_equal(back->parts[0].offset, 4000);
  assert_int_equal(back->parts[0].len, 8000);
  ckpt_shard_free(back);
  /* one changed digit (the offset 4000 -> 5000) is caught */
  char *p = strstr(js, "4000");
  assert_non_null(p);
  p[0] = '5';
  assert_int_equal(ckpt_shard_from_json(js, &back), FT_ECORRUPT);
  assert_null(back);
  assert_non_null(strstr(ft_err_detail(), "checksum"));
  /* truncation too */
  p[0] = '4';
  js[strlen(js) / 2] = 0;
  assert_int_not_equal(ckpt_shard_from_json(js, &back), FT_OK);
  free(js);
  ckpt_shard_free(sh);
}

static void test_manifest_json_checksum(void **st) {
  fx *f = *st;
  ckpt_shard *a = shard_of(f, 7, 0, 2, 0, 1500), *b = shard_of(f, 7, 1, 2, 1500, 3000);
  ckpt_shard *both[2] = {b, a}; /* order does not matter */
  const char *cfg = "{\"model\":{\"n_layer\":2},  \"seed\": 18446744073709551557}";
  ckpt_meta m = {.run = "run",
                 .step = 7,
                 .parent_step = 3,
                 .world = 2,
                 .loss = 2.5,
                 .config_json = cfg,
                 .state_json = "{\"pos\":12}"};
  ckpt_manifest *man = NULL;
  assert_int_equal(ckpt_manifest_build(&m, both, 2, &man), FT_OK);
  char *js = ckpt_manifest_to_json(man);
  ckpt_manifest *back = NULL;
  assert_int_equal(ckpt_manifest_from_json(js, &back), FT_OK);
  assert_string_equal(ckpt_manifest_config_json(back), cfg); /* byte for byte */
  assert_string_equal(ckpt_manifest_state_json(back), "{\"pos\":12}");
  assert_string_equal(ckpt_manifest_metrics_json(back), "{}");
  const ckpt_info *i = ckpt_manifest_info(back);
  assert_int_equal(i->step, 7);
  assert_int_equal(i->parent_step, 3);
  assert_int_equal(i->world, 2);
  assert_int_equal(i->logical_bytes, N * 4);
  ckpt_tensor_info ti;
  assert_int_equal(ckpt_manifest_tensor(back, 0, &ti), FT_OK);
  assert_string_equal(ti.name, "param/t");
  assert_int_equal(ti.nbytes, N * 4);
  assert_int_equal(ti.shape[0], N);
  assert_int_equal(ckpt_manifest_tensor(back, 1, &ti), FT_EINVAL);
  assert_int_equal(ckpt_manifest_find(back, "param/t"), 0);
  assert_int_equal(ckpt_manifest_find(back, "param/x"), -1);
  ckpt_manifest_free(back);
  char *p = strstr(js, "\"world\"");
  assert_non_null(p);
  p[1] = 'W';
  assert_int_equal(ckpt_manifest_from_json(js, &back), FT_ECORRUPT);
  free(js);
  ckpt_manifest_free(man);
  ckpt_shard_free(a);
  ckpt_shard_free(b);
}

/* ckpt_meta.data_json: kept verbatim under "data", in the catalog and the
 * manifest object; absent when not given (as in manifests older than it). */
static void test_manifest_data(void **st) {
  fx *f = *st;
  const char *data = "{\"version\": 1, \"patterns\": {\"s3://b/d/*.bin\": {\"objects\": []}}}";
  ckpt_shard *a = shard_of(f, 4, 0, 1, 0, 3000), *b = shard_of(f, 6, 0, 1, 0, 3000);
  ckpt_meta m = {.run = "run", .step = 4, .parent_step = -1, .world = 1, .data_json = data};
  assert_int_equal(ckpt_store_commit(f->s, &m, &a, 1), FT_OK);
  m.step = 6;
  m.data_json = NULL;
  assert_int_equal(ckpt_store_commit(f->s, &m, &b, 1), FT_OK);
  ckpt_manifest *man = NULL;
  char *got = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 4, &man), FT_OK);
  assert_non_null(ckpt_manifest_data_json(man));
  assert_string_equal(ckpt_manifest_data_json(man), data);
  char *js = ckpt_manifest_to_json(man);
  assert_non_null(strstr(js, "\"data\""));
  free(js);
  ckpt_manifest_free(man);
  assert_int_equal(ckpt_store_load_data(f->s, "run", 4, &got), FT_OK);
  assert_non_null(got);
  assert_string_equal(got, data);
  free(got);
  assert_int_equal(ckpt_store_load(f->s, "run", 6, &man), FT_OK);
  assert_null(ckpt_manifest_data_json(man));
  js = ckpt_manifest_to_json(man);
  assert_null(strstr(js, "\"data\"")); /* what an older build wrote, and reads */
  free(js);
  ckpt_manifest_free(man);
  assert_int_equal(ckpt_store_load_data(f->s, "run", 6, &got), FT_OK);
  assert_null(got);
  assert_int_equal(ckpt_store_load_data(f->s, "run", 5, &got), FT_ENOENT);
  ckpt_shard_free(a);
  ckpt_shard_free(b);
}

static void test_commit_coverage(void **st) {
  fx *f = *st;
  ckpt_meta m = {.run = "run", .step = 9, .parent_step = -1, .world = 3, .loss = 1};
  ckpt_shard *a = shard_of(f, 9, 0, 3, 0, 1000), *b = shard_of(f, 9, 1, 3, 1000, 2000),
             *c = shard_of(f, 9, 2, 3, 2000, 3000), *over = shard_of(f, 9, 2, 3, 1500, 3000);
  /* a missing rank: bytes [8000, 12000) are in no shard */
  ckpt_shard *two[2] = {a, b};
  assert_int_equal(ckpt_store_commit(f->s, &m, two, 2), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "in no shard"));
  /* a hole at the start */
  ckpt_shard *hole[2] = {b, c};
  assert_int_equal(ckpt_store_commit(f->s, &m, hole, 2), FT_EINVAL);
  /* an overlap */
  ckpt_shard *ov[3] = {a, b, over};
  assert_int_equal(ckpt_store_commit(f->s, &m, ov, 3), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "two shards"));
  /* a shard of another step */
  ckpt_shard *other = shard_of(f, 8, 2, 3, 2000, 3000);
  ckpt_shard *mixed[3] = {a, b, other};
  assert_int_equal(ckpt_store_commit(f->s, &m, mixed, 3), FT_EINVAL);
  ckpt_info *v = NULL;
  size_t n = 9;
  assert_int_equal(ckpt_store_list(f->s, NULL, &v, &n), FT_OK);
  assert_int_equal(n, 0); /* nothing refused became visible */
  free(v);
  /* the whole set commits, once */
  ckpt_shard *all[3] = {a, b, c};
  assert_int_equal(ckpt_store_commit(f->s, &m, all, 3), FT_OK);
  assert_int_equal(ckpt_store_commit(f->s, &m, all, 3), FT_EEXIST);
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(v[0].state, CKPT_COMMITTED);
  assert_int_equal(v[0].world, 3);
  assert_int_equal(v[0].logical_bytes, N * 4);
  assert_true(v[0].new_bytes > 0);
  free(v);
  ckpt_shard *shards[] = {a, b, c, over, other};
  for (int i = 0; i < 5; i++)
    ckpt_shard_free(shards[i]);
}

/* A sealed manifest (its checksum right) that breaks what the store relies
 * on is FT_EFORMAT, never a manifest: from disk or a bucket it is input. */
static void expect_format(ckpt_manifest *m, const char *why) {
  char *js = ckpt_manifest_to_json(m);
  assert_non_null(js);
  ckpt_manifest *back = NULL;
  int rc = ckpt_manifest_from_json(js, &back);
  if (rc != FT_EFORMAT)
    fail_msg("%s: from_json gave %d (%s), not FT_EFORMAT", why, rc, ft_err_detail());
  assert_null(back);
  free(js);
}

static void test_manifest_checks_invariants(void **st) {
  fx *f = *st;
  ckpt_shard *sh[2] = {shard_of(f, 7, 0, 2, 0, N / 2), shard_of(f, 7, 1, 2, N / 2, N)};
  ckpt_meta meta = {.run = "run", .step = 7, .parent_step = -1, .world = 2, .loss = 1};
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_manifest_build(&meta, sh, 2, &m), FT_OK);
  ckpt_tensor *t = &m->tensors[0];
  assert_int_equal(t->nchunks, 2); /* one per shard */
  char *js = ckpt_manifest_to_json(m);
  ckpt_manifest *ok = NULL;
  assert_int_equal(ckpt_manifest_from_json(js, &ok), FT_OK); /* the untouched one parses */
  ckpt_manifest_free(ok);
  free(js);

  t->chunks[1].offset += 4; /* a gap between chunks */
  expect_format(m, "gap");
  t->chunks[1].offset -= 8; /* an overlap */
  expect_format(m, "overlap");
  t->chunks[1].offset += 4;
  t->len += 4; /* nbytes that disagrees with dtype and shape */
  expect_format(m, "nbytes");
  t->len -= 4;
  char dt[8];
  memcpy(dt, t->dtype, sizeof dt);
  snprintf(t->dtype, sizeof t->dtype, "f31");
  expect_format(m, "dtype");
  memcpy(t->dtype, dt, sizeof dt);
  m->info.world = 0;
  expect_format(m, "world 0");
  m->info.world = 1;
  m->info.step = -5;
  expect_format(m, "negative step");
  m->info.step = 7;
  snprintf(m->info.run, sizeof m->info.run, "../etc");
  expect_format(m, "run name");
  snprintf(m->info.run, sizeof m->info.run, "run");
  /* two tensors out of order: find() could not see one of them */
  ckpt_tensor two[2];
  two[0] = m->tensors[0];
  two[1] = m->tensors[0];
  two[0].name = "param/z";
  ckpt_tensor *keep = m->tensors;
  m->tensors = two;
  m->ntensors = 2;
  expect_format(m, "unsorted tensors");
  two[0].name = two[1].name;
  expect_format(m, "repeated tensor");
  m->tensors = keep;
  m->ntensors = 1;
  ckpt_manifest_free(m);
  ckpt_shard_free(sh[0]);
  ckpt_shard_free(sh[1]);

  /* a catalog record whose numbers are not integers in range */
  ckpt_info i;
  memset(&i, 0, sizeof i);
  snprintf(i.run, sizeof i.run, "run");
  i.state = 9;
  char *ij = ckpt_info_to_json(&i);
  assert_int_equal(ckpt_info_from_json(ij, &i), FT_EFORMAT);
  free(ij);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_shard_json_checksum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manifest_json_checksum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manifest_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_coverage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manifest_checks_invariants, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
