/*
 * test_ckpt_catalog: the catalog's rules, against RocksDB on disk: one
 * writer (a second gets FT_EBUSY naming the holder), readers that work while
 * the writer is open, states and transitions, latest() skipping BAD and
 * PENDING, pins, read-only refusals; a missing or damaged catalog is an
 * error naming it and rebuild_catalog restores every checkpoint with its
 * GOOD/BAD mark and pin; catalog_behind; a BAD step committed again.
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

static void assert_state(ckpt_store *s, const char *run, int64_t step, int state, int pinned) {
  ckpt_info i;
  assert_int_equal(ckpt_store_get_info(s, run, step, &i), FT_OK);
  if (i.state != state || i.pinned != pinned)
    fail_msg("%s step %lld: state %s pinned %d, expected %s pinned %d", run, (long long)step,
             ckpt_state_name(i.state), i.pinned, ckpt_state_name(state), pinned);
}

/* The checkpoints and marks the rebuild tests start from. */
static void marked_store(fx *f) {
  for (int64_t s = 10; s <= 40; s += 10)
    assert_int_equal(commit_step(f, "run", s), FT_OK);
  assert_int_equal(commit_step(f, "other", 99), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 20, CKPT_GOOD), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 30, CKPT_BAD), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "run", 10, 1), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "run", 30, 1), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 40, CKPT_GOOD), FT_OK);
  assert_int_equal(ckpt_store_set_state(f->s, "run", 40, CKPT_BAD), FT_OK); /* last one counts */
  assert_int_equal(ckpt_store_pin(f->s, "other", 99, 1), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "other", 99, 0), FT_OK);
}

static void assert_marks_back(fx *f) {
  assert_state(f->s, "run", 10, CKPT_COMMITTED, 1);
  assert_state(f->s, "run", 20, CKPT_GOOD, 0);
  assert_state(f->s, "run", 30, CKPT_BAD, 1);
  assert_state(f->s, "run", 40, CKPT_BAD, 0);
  assert_state(f->s, "other", 99, CKPT_COMMITTED, 0);
  int64_t step = -1;
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 20);
  /* and the data reads back */
  ckpt_manifest *m = NULL;
  float out[4096];
  assert_int_equal(ckpt_store_load(f->s, "run", 20, &m), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, m, "param/x", 0, sizeof out, out), FT_OK);
  ckpt_manifest_free(m);
  tu_fill(f->w, 4096, 20);
  assert_memory_equal(out, f->w, sizeof out);
}

/* A deleted catalog in a store with manifests is an error naming it, for
 * writers and readers alike (never an empty store: a run would start over);
 * rebuild-catalog brings back every checkpoint with its marks and pins. */
static void test_missing_catalog_then_rebuild_keeps_marks(void **st) {
  fx *f = *st;
  marked_store(f);
  ckpt_store_free(f->s);
  f->s = NULL;
  char cat[4300], cmd[4400];
  snprintf(cat, sizeof cat, "%s/store/catalog", f->dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cat);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_EDB);
  assert_null(f->s);
  assert_non_null(strstr(ft_err_detail(), cat));
  assert_non_null(strstr(ft_err_detail(), "rebuild-catalog"));
  assert_false(tu_exists(cat)); /* and nothing was created there */
  ckpt_store_opts ro = {.read_only = 1};
  assert_int_equal(ckpt_store_open(f->uri, &ro, &f->s), FT_EDB);
  assert_non_null(strstr(ft_err_detail(), "rebuild-catalog"));

  ckpt_store_opts rb = {.rebuild_catalog = 1};
  assert_int_equal(ckpt_store_open(f->uri, &rb, &f->s), FT_OK);
  int found = 0, added = 0;
  assert_int_equal(ckpt_store_rebuild_catalog(f->s, &found, &added), FT_OK);
  assert_int_equal(found, 5);
  assert_int_equal(added, 5);
  assert_marks_back(f);
  int64_t newest = -2;
  assert_int_equal(ckpt_store_catalog_behind(f->s, "run", &newest), 0);
  assert_int_equal(newest, 40);
  /* a second rebuild adds nothing and changes no mark */
  assert_int_equal(ckpt_store_rebuild_catalog(f->s, &found, &added), FT_OK);
  assert_int_equal(added, 0);
  ckpt_store_free(f->s); /* and a plain open works again */
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_OK);
  assert_marks_back(f);
}

static void count_skip(void *ud, const char *key, const char *why) {
  (void)why;
  if (strstr(key, "00000000000000000030.json"))
    (*(int *)ud)++;
}

/* Damaged SST: a writer's open reads the whole catalog and fails naming the
 * file; rebuild_catalog moves it aside and the rebuild restores everything,
 * naming the manifest it could not use. */
static void test_damaged_catalog_then_rebuild(void **st) {
  fx *f = *st;
  marked_store(f);
  /* the supervisor's run state: in no manifest, salvaged from the old catalog */
  assert_int_equal(ckpt_store_put_meta(f->s, "run/state", "{\"gen\":7}"), FT_OK);
  ckpt_store_free(f->s);
  /* a reopen flushes the WAL into an SST file; damage its middle */
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_OK);
  ckpt_store_free(f->s);
  f->s = NULL;
  char cat[4300], sst[4600] = "";
  snprintf(cat, sizeof cat, "%s/store/catalog", f->dir);
  DIR *d = opendir(cat);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".sst"))
      snprintf(sst, sizeof sst, "%s/%s", cat, e->d_name);
  closedir(d);
  assert_true(sst[0]);
  struct stat sb;
  assert_int_equal(stat(sst, &sb), 0);
  for (long off = 0; off < sb.st_size / 2; off += 512)
    tu_flip(sst, off);
  assert_int_equal(ckpt_store_open(f->uri, NULL, &f->s), FT_EDB);
  assert_non_null(strstr(ft_err_detail(), ".sst"));
  assert_non_null(strstr(ft_err_detail(), "rebuild-catalog"));
  /* a damaged manifest object is skipped and named */
  char man[4400];
  snprintf(man, sizeof man, "%s/store/manifests/run/%020d.json", f->dir, 30);
  tu_flip(man, 40);
  ckpt_store_opts rb = {.rebuild_catalog = 1};
  assert_int_equal(ckpt_store_open(f->uri, &rb, &f->s), FT_OK);
  assert_true(f->s->catalog_aside[0]);
  assert_true(tu_exists(f->s->catalog_aside));
  assert_int_equal(f->s->salvaged_meta, 1);
  char *meta = NULL;
  assert_int_equal(ckpt_store_get_meta(f->s, "run/state", &meta), FT_OK);
  assert_string_equal(meta, "{\"gen\":7}");
  free(meta);
  int found = 0, added = 0, skipped = 0;
  assert_int_equal(ckpt_store_rebuild_catalog_report(f->s, count_skip, &skipped, &found, &added),
                   FT_OK);
  assert_int_equal(found, 5);
  assert_int_equal(added, 4);
  assert_int_equal(skipped, 1);
  assert_state(f->s, "run", 10, CKPT_COMMITTED, 1);
  assert_state(f->s, "run", 20, CKPT_GOOD, 0);
  assert_state(f->s, "run", 40, CKPT_BAD, 0);
}

/* ckpt_store_catalog_behind: a manifest newer than what the catalog knows. */
static void test_catalog_behind(void **st) {
  fx *f = *st;
  int64_t newest = -2;
  assert_int_equal(ckpt_store_catalog_behind(f->s, "run", &newest), 0);
  assert_int_equal(newest, -1);
  assert_int_equal(commit_step(f, "run", 10), FT_OK);
  assert_int_equal(commit_step(f, "run", 20), FT_OK);
  assert_int_equal(ckpt_store_catalog_behind(f->s, "run", &newest), 0);
  assert_int_equal(newest, 20);
  /* a manifest the catalog lost (as a WAL that dropped its tail would) */
  char a[4400], b[4400], cmd[9000];
  snprintf(a, sizeof a, "%s/store/manifests/run/%020d.json", f->dir, 20);
  snprintf(b, sizeof b, "%s/store/manifests/run/%020d.json", f->dir, 30);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", a, b);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(ckpt_store_catalog_behind(f->s, "run", &newest), 1);
  assert_int_equal(newest, 30);
  /* a PENDING record is not a checkpoint the catalog knows */
  assert_int_equal(ckpt_store_set_state(f->s, "run", 30, CKPT_PENDING), FT_OK);
  assert_int_equal(ckpt_store_catalog_behind(f->s, "run", &newest), 1);
  assert_int_equal(ckpt_store_catalog_behind(f->s, "nosuchrun", &newest), 0);
  assert_int_equal(newest, -1);
  assert_true(ckpt_store_catalog_behind(f->s, "../x", &newest) < 0);
}

/* A BAD checkpoint is replaced by a new commit at the same (run, step): the
 * re-trained timeline after a loss-spike rollback. Its pin survives. */
static void test_commit_replaces_bad(void **st) {
  fx *f = *st;
  assert_int_equal(commit_step(f, "run", 10), FT_OK);
  assert_int_equal(commit_step(f, "run", 30), FT_OK);
  assert_int_equal(commit_step(f, "run", 30), FT_EEXIST); /* not while COMMITTED */
  assert_int_equal(ckpt_store_set_state(f->s, "run", 30, CKPT_GOOD), FT_OK);
  assert_int_equal(commit_step(f, "run", 30), FT_EEXIST); /* nor GOOD */
  assert_int_equal(ckpt_store_set_state(f->s, "run", 30, CKPT_BAD), FT_OK);
  assert_int_equal(ckpt_store_pin(f->s, "run", 30, 1), FT_OK);
  int64_t step = -1;
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 10);
  /* the re-trained step 30 has other weights */
  tu_fill(f->w, 4096, 3030);
  ckpt_part p = tu_part("param/x", f->w, 4096, 0, 4096);
  assert_int_equal(tu_commit(f->s, "run", 30, &p, 1), FT_OK);
  assert_state(f->s, "run", 30, CKPT_COMMITTED, 1);
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 30);
  ckpt_manifest *m = NULL;
  float out[4096];
  assert_int_equal(ckpt_store_load(f->s, "run", 30, &m), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, m, "param/x", 0, sizeof out, out), FT_OK);
  ckpt_manifest_free(m);
  assert_memory_equal(out, f->w, sizeof out);
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(n, 2); /* replaced, not added */
  free(v);
  /* its mark object says so too: a rebuild sees it committed and pinned */
  ckpt_store_free(f->s);
  f->s = NULL;
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/store/catalog'", f->dir);
  assert_int_equal(system(cmd), 0);
  ckpt_store_opts rb = {.rebuild_catalog = 1};
  assert_int_equal(ckpt_store_open(f->uri, &rb, &f->s), FT_OK);
  assert_int_equal(ckpt_store_rebuild_catalog(f->s, NULL, NULL), FT_OK);
  assert_state(f->s, "run", 30, CKPT_COMMITTED, 1);
  assert_int_equal(ckpt_store_load(f->s, "run", 30, &m), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, m, "param/x", 0, sizeof out, out), FT_OK);
  ckpt_manifest_free(m);
  assert_memory_equal(out, f->w, sizeof out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_second_writer_busy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reader_while_writer_open, setup, teardown),
      cmocka_unit_test_setup_teardown(test_latest_skips_bad_and_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pin_and_persistence, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_catalog_then_rebuild_keeps_marks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_damaged_catalog_then_rebuild, setup, teardown),
      cmocka_unit_test_setup_teardown(test_catalog_behind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_replaces_bad, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
