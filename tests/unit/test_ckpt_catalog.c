/*
 * test_ckpt_catalog: the catalog's rules, against RocksDB on disk: one
 * writer (a second gets FT_EBUSY naming the holder), readers that work while
 * the writer is open, states and transitions, latest() skipping BAD and
 * PENDING, pins, read-only refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float w[4096];
} fx;

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  f->dir = tu_tmpdir();
  f->uri = tu_uri(f->dir);
  if (ckpt_store_open(f->uri, NULL, &f->s))
    return -1;
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  ckpt_store_free(f->s);
  tu_rmrf(f->dir);
  free(f->dir);
  free(f->uri);
  free(f);
  return 0;
}

static int commit_step(fx *f, const char *run, int64_t step) {
  tu_fill(f->w, 4096, (uint64_t)step);
  ckpt_part p = tu_part("param/x", f->w, 4096, 0, 4096);
  return tu_commit(f->s, run, step, &p, 1);
}

static void test_second_writer_busy(void **st) {
  fx *f = *st;
  ckpt_store *s2 = NULL;
  assert_int_equal(ckpt_store_open(f->uri, NULL, &s2), FT_EBUSY);
  assert_null(s2);
  assert_non_null(strstr(ft_err_detail(), "locked by another writer"));
  char pid[32];
  snprintf(pid, sizeof pid, "pid %d", (int)getpid());
  assert_non_null(strstr(ft_err_detail(), pid));
  /* after the writer closes, the next one gets in */
  ckpt_store_free(f->s);
  f->s = NULL;
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_OK);
}

static void test_reader_while_writer_open(void **st) {
  fx *f = *st;
  assert_int_equal(commit_step(f, "run", 10), FT_OK);
  ckpt_store *r = NULL;
  ckpt_store_opts ro = {.read_only = 1};
  assert_int_equal(ckpt_store_open(f->uri, &ro, &r), FT_OK);
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(r, "run", &v, &n), FT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(v[0].step, 10);
  free(v);
  ckpt_manifest *m = NULL;
  float out[4096];
  assert_int_equal(ckpt_store_load(r, "run", 10, &m), FT_OK);
  assert_int_equal(ckpt_store_read(r, m, "param/x", 0, sizeof out, out), FT_OK);
  tu_fill(f->w, 4096, 10);
  assert_memory_equal(out, f->w, sizeof out);
  /* a reader cannot write */
  ckpt_job *j = NULL;
  ckpt_part p = tu_part("param/x", f->w, 4096, 0, 4096);
  assert_int_equal(ckpt_store_submit(r, "run", 11, 0, 1, &p, 1, &j), FT_ESTATE);
  assert_int_equal(ckpt_store_set_state(r, "run", 10, CKPT_GOOD), FT_ESTATE);
  assert_int_equal(ckpt_store_pin(r, "run", 10, 1), FT_ESTATE);
  ckpt_meta meta = {.run = "run", .step = 11, .world = 1};
  ckpt_shard *none = NULL;
  assert_int_equal(ckpt_store_commit(r, &meta, &none, 1), FT_ESTATE);
  ckpt_manifest_free(m);
  ckpt_store_free(r);
  /* a reader of a store that does not exist: not found, nothing created */
  char missing[4300];
  snprintf(missing, sizeof missing, "local:%s/nothing", f->dir);
  assert_int_equal(ckpt_store_open(missing, &ro, &r), FT_ENOENT);
  snprintf(missing, sizeof missing, "%s/nothing", f->dir);
  assert_false(tu_exists(missing));
  assert_int_equal(ckpt_store_open("s3:/bad", &ro, &r), FT_EINVAL);
}

static void test_latest_skips_bad_and_pending(void **st) {
  fx *f = *st;
  int64_t step = -1;
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_ENOENT);
  for (int64_t s = 10; s <= 30; s += 10)
    assert_int_equal(commit_step(f, "run", s), FT_OK);
  assert_int_equal(commit_step(f, "other", 99), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 40, CKPT_PENDING), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 30, CKPT_BAD), FT_OK);
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 20);
  assert_int_equal(ckpt_store_latest(f->s, "run", 15, &step), FT_OK);
  assert_int_equal(step, 10);
  assert_int_equal(ckpt_store_latest(f->s, "run", 9, &step), FT_ENOENT);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 20, CKPT_GOOD), FT_OK);
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 20);
  /* transitions that make no sense are refused */
  assert_int_equal(ckpt_store_set_state(f->s, "run", 40, CKPT_GOOD), FT_ESTATE);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 20, CKPT_PENDING), FT_ESTATE);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 50, CKPT_GOOD), FT_ENOENT);
  /* a pending checkpoint is not loadable; committing it makes it so */
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 40, &m), FT_ENOENT);
  assert_int_equal(commit_step(f, "run", 40), FT_OK);
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 40);
  /* list: all runs, ordered by run then step */
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(f->s, NULL, &v, &n), FT_OK);
  assert_int_equal(n, 5);
  assert_string_equal(v[0].run, "other");
  assert_int_equal(v[1].step, 10);
  assert_int_equal(v[4].step, 40);
  assert_int_equal(v[3].state, CKPT_BAD);
  assert_int_equal(v[2].state, CKPT_GOOD);
  free(v);
  assert_string_equal(ckpt_state_name(CKPT_BAD), "bad");
  assert_string_equal(ckpt_state_name(CKPT_PENDING), "pending");
}

static void test_pin_and_persistence(void **st) {
  fx *f = *st;
  assert_int_equal(commit_step(f, "run", 1), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "run", 1, 1), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "run", 2, 1), FT_ENOENT);
  ckpt_store_free(f->s); /* what was committed survives a reopen */
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_OK);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 1, &m), FT_OK);
  assert_int_equal(ckpt_manifest_info(m)->pinned, 1);
  assert_int_equal(ckpt_manifest_info(m)->state, CKPT_COMMITTED);
  assert_true(ckpt_manifest_info(m)->time_ms > 0);
  ckpt_manifest_free(m);
  assert_int_equal(ckpt_store_pin(f->s, "run", 1, 0), FT_OK);
  assert_int_equal(ckpt_store_load(f->s, "run", 1, &m), FT_OK);
  assert_int_equal(ckpt_manifest_info(m)->pinned, 0);
  ckpt_manifest_free(m);
  /* the manifest object beside the chunks is there too */
  char path[4300];
  snprintf(path, sizeof path, "%s/store/manifests/run/%020d.json", f->dir, 1);
  assert_true(tu_exists(path));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_second_writer_busy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reader_while_writer_open, setup, teardown),
      cmocka_unit_test_setup_teardown(test_latest_skips_bad_and_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pin_and_persistence, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
