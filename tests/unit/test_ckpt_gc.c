/*
 * test_ckpt_gc: retention (keep_last, keep_every, pinned) and the sweep:
 * a chunk shared with a kept checkpoint survives, unreferenced ones go,
 * young unreferenced ones stay within the grace period, a dry run deletes
 * nothing, and a commit whose chunks a GC swept is refused, not listed
 * (also when the GC ran while the commit checked its chunks, which it does
 * without the store's lock). Memory-level checkpoints: written nowhere,
 * pruned (by GC and by prune_memory), dropped, upgraded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#define NV 5000
#define NS 3000

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float shared[NS], varying[11][NV];
} fx;

/* Steps 1..10: "param/shared" is the same bytes every step, "param/var"
 * differs; step 2 is pinned. */
static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  if (tu_store_open(&f->dir, &f->uri, &f->s, NULL))
    return -1;
  ckpt_store_set_gc_grace(f->s, 0);
  tu_fill(f->shared, NS, 1000);
  for (int step = 1; step <= 10; step++) {
    tu_fill(f->varying[step], NV, (uint64_t)step);
    ckpt_part p[2] = {tu_part("param/shared", f->shared, NS, 0, NS),
                      tu_part("param/var", f->varying[step], NV, 0, NV)};
    if (tu_commit(f->s, "run", step, p, 2))
      return -1;
  }
  if (ckpt_store_pin(f->s, "run", 2, 1))
    return -1;
  usleep(30000); /* file timestamps are coarse: be clearly older than the GC */
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_store_close(f->dir, f->uri, f->s);
  free(f);
  return 0;
}

static void var_chunk_path(fx *f, int step, char *path, size_t n) {
  uint8_t h[CKPT_HASH_LEN];
  ckpt_sha256(f->varying[step], NV * 4, h);
  tu_chunk_path(f->dir, h, path, n);
}

static void test_retention(void **st) {
  fx *f = *st;
  assert_int_equal(tu_count_chunks(f->dir), 11); /* 10 varying + 1 shared */
  ckpt_retention r = {.keep_last = 3, .keep_every = 4};
  ckpt_gc_report rep;
  /* dry run: the same verdict, nothing deleted */
  assert_int_equal(ckpt_store_gc(f->s, &r, 1, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 5);
  assert_int_equal(rep.chunks_deleted, 5);
  assert_int_equal(tu_count_chunks(f->dir), 11);
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(n, 10);
  free(v);

  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 5);
  assert_int_equal(rep.chunks_deleted, 5);
  assert_true(rep.bytes_freed > 0);
  /* kept: 2 (pinned), 4 and 8 (every 4th), 8, 9, 10 (last 3) */
  int64_t want[] = {2, 4, 8, 9, 10};
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(n, 5);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(v[i].step, want[i]);
  free(v);
  assert_int_equal(tu_count_chunks(f->dir), 6);
  char path[4300];
  for (int step = 1; step <= 10; step++) {
    var_chunk_path(f, step, path, sizeof path);
    int kept = step == 2 || step == 4 || step >= 8;
    assert_int_equal(tu_exists(path), kept);
    snprintf(path, sizeof path, "%s/store/manifests/run/%020d.json", f->dir, step);
    assert_int_equal(tu_exists(path), kept);
  }
  /* the shared chunk survived, and every kept checkpoint is whole */
  for (size_t i = 0; i < 5; i++) {
    ckpt_verify_report vr;
    assert_int_equal(ckpt_store_verify(f->s, "run", want[i], &vr, NULL, NULL), FT_OK);
    assert_int_equal(vr.chunks_checked, 2);
  }
  ckpt_manifest *m = NULL;
  float out[NS];
  assert_int_equal(ckpt_store_load(f->s, "run", 2, &m), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, m, "param/shared", 0, sizeof out, out), FT_OK);
  assert_memory_equal(out, f->shared, sizeof out);
  ckpt_manifest_free(m);
  /* a second pass finds nothing more */
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 0);
  assert_int_equal(rep.chunks_deleted, 0);
  /* unpinning 2 lets it go */
  assert_int_equal(ckpt_store_pin(f->s, "run", 2, 0), FT_OK);
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 1);
}

static void test_bad_ones_go_and_keep_all(void **st) {
  fx *f = *st;
  assert_int_equal(ckpt_store_set_state(f->s, "run", 9, CKPT_BAD), FT_OK);
  ckpt_gc_report rep;
  ckpt_retention all = {0};
  assert_int_equal(ckpt_store_gc(f->s, &all, 0, &rep), FT_OK); /* keep_last 0: keep all */
  assert_int_equal(rep.checkpoints_deleted, 0);
  assert_int_equal(rep.chunks_deleted, 0);
  ckpt_retention r = {.keep_last = 2};
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  /* kept: 10 and 8 (the last 2 restorable; 9 is bad), 2 (pinned) */
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(n, 3);
  assert_int_equal(v[0].step, 2);
  assert_int_equal(v[1].step, 8);
  assert_int_equal(v[2].step, 10);
  free(v);
}

static void test_unreferenced_and_grace(void **st) {
  fx *f = *st;
  float orphan[NV];
  tu_fill(orphan, NV, 777);
  ckpt_part p = tu_part("param/var", orphan, NV, 0, NV);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", 11, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  uint8_t h[CKPT_HASH_LEN];
  char path[4300];
  ckpt_sha256(orphan, sizeof orphan, h);
  tu_chunk_path(f->dir, h, path, sizeof path);
  assert_true(tu_exists(path));
  /* a leftover temp file of an interrupted write */
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s.tmp.1.2.3", path);
  FILE *t = fopen(tmp, "w");
  fputs("partial", t);
  fclose(t);
  ckpt_gc_report rep;
  ckpt_retention r = {0};
  /* young: within the grace period, left alone (it may be mid-checkpoint) */
  ckpt_store_set_gc_grace(f->s, 3600);
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.chunks_deleted, 0);
  assert_true(tu_exists(path));
  /* with no grace: the unreferenced chunk and the temp file go */
  usleep(30000);
  ckpt_store_set_gc_grace(f->s, 0);
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.chunks_deleted, 2);
  assert_false(tu_exists(path));
  assert_false(tu_exists(tmp));
  assert_int_equal(tu_count_chunks(f->dir), 11);
  /* committing the swept shard now is refused, and nothing is listed */
  ckpt_meta m = {.run = "run", .step = 11, .parent_step = 10, .world = 1, .loss = 0.5};
  assert_int_equal(ckpt_store_commit(f->s, &m, &sh, 1), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "not in the store"));
  ckpt_info info;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 11, &info), FT_ENOENT);
  ckpt_shard_free(sh);
}

static int commit_memory(ckpt_store *s, int64_t step, const ckpt_part *p, int n) {
  return tu_commit_at(s, "run", step, p, n, 1);
}

static int level_of(ckpt_store *s, int64_t step) {
  ckpt_info *v = NULL;
  size_t n = 0;
  int level = -1;
  if (ckpt_store_list(s, "run", &v, &n) == FT_OK)
    for (size_t i = 0; i < n; i++)
      if (v[i].step == step)
        level = v[i].level;
  free(v);
  return level;
}

/* A tier whose exists() (the commit's chunk check, C3) and put() of a
 * manifest object (C4) run a function once each, at their first call, and
 * say whether the store's meta_mu was free then. */
typedef void (*during_fn)(ckpt_store *s);
static struct {
  ckpt_store *s;
  int (*exists)(ckpt_tier *t, const char *key, int freshen, uint64_t *size, int64_t *mtime_ns);
  int (*put)(ckpt_tier *t, const char *key, const void *data, size_t len);
  during_fn c3, c4;
  int calls, meta_free, puts, put_meta_free;
} hook;

static int meta_free(void) {
  int f = pthread_mutex_trylock(&hook.s->meta_mu) == 0;
  if (f)
    pthread_mutex_unlock(&hook.s->meta_mu);
  return f;
}

static int hooked_exists(ckpt_tier *t, const char *key, int freshen, uint64_t *size,
                         int64_t *mtime_ns) {
  int rc = hook.exists(t, key, freshen, size, mtime_ns);
  if (hook.calls++ == 0) {
    hook.meta_free = meta_free();
    if (hook.c3 && hook.meta_free) /* else it would wait for the lock held */
      hook.c3(hook.s);
  }
  return rc;
}

static int hooked_put(ckpt_tier *t, const char *key, const void *data, size_t len) {
  int rc = hook.put(t, key, data, len);
  if (!strncmp(key, "manifests/", 10) && hook.puts++ == 0) {
    hook.put_meta_free = meta_free();
    if (hook.c4 && hook.put_meta_free)
      hook.c4(hook.s);
  }
  return rc;
}

/* Writes data as step's one shard, then commits it with the hooks on. */
static int commit_hooked(fx *f, int64_t step, float *data, during_fn c3, during_fn c4) {
  ckpt_part p = tu_part("param/var", data, NV, 0, NV);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", step, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  hook.s = f->s;
  hook.exists = f->s->tier->exists;
  hook.put = f->s->tier->put;
  hook.c3 = c3;
  hook.c4 = c4;
  hook.calls = hook.meta_free = hook.puts = hook.put_meta_free = 0;
  f->s->tier->exists = hooked_exists;
  f->s->tier->put = hooked_put;
  ckpt_meta m = {.run = "run", .step = step, .parent_step = -1, .world = 1, .loss = 0.5};
  int rc = ckpt_store_commit(f->s, &m, &sh, 1);
  f->s->tier->exists = hook.exists;
  f->s->tier->put = hook.put;
  ckpt_shard_free(sh);
  return rc;
}

static float busy_mem[NV];
static int64_t busy_step;

static void memory_commit_meanwhile(ckpt_store *s) {
  ckpt_part p = tu_part("param/var", busy_mem, NV, 0, NV);
  assert_int_equal(tu_commit_at(s, "run", busy_step, &p, 1, 1), FT_OK);
}

static void gc_meanwhile(ckpt_store *s) {
  ckpt_retention r = {0};
  ckpt_gc_report rep;
  usleep(30000); /* past the chunk's freshen time: grace 0 sweeps it */
  assert_int_equal(ckpt_store_gc(s, &r, 0, &rep), FT_OK);
}

/* The commit's chunk check (C3) and its manifest put (C4) hold no lock: a
 * memory-level commit goes through while a store-level one checks its
 * chunks or writes its manifest (on s3, requests that take seconds), and a
 * GC that took its clock reading meanwhile makes the commit check them
 * again, so a chunk that GC swept refuses the commit: nothing broken is
 * listed, and its manifest object is taken back. */
static void test_commit_checks_chunks_unlocked(void **st) {
  fx *f = *st;
  float a[NV], b[NV], c[NV];
  tu_fill(a, NV, 4242);
  tu_fill(b, NV, 4343);
  tu_fill(c, NV, 4545);
  tu_fill(busy_mem, NV, 4444);
  assert_int_equal(ckpt_store_keep_in_memory(f->s, 1 << 22), FT_OK);
  busy_step = 12;
  assert_int_equal(commit_hooked(f, 11, a, memory_commit_meanwhile, NULL), FT_OK);
  assert_true(hook.meta_free);
  assert_int_equal(level_of(f->s, 12), CKPT_LEVEL_MEMORY);
  assert_int_equal(level_of(f->s, 11), CKPT_LEVEL_DURABLE);
  assert_int_equal(hook.calls, 1); /* no GC in between: checked once */
  assert_int_equal(ckpt_store_verify(f->s, "run", 11, NULL, NULL, NULL), FT_OK);
  busy_step = 14;
  assert_int_equal(commit_hooked(f, 13, c, NULL, memory_commit_meanwhile), FT_OK);
  assert_true(hook.put_meta_free);
  assert_int_equal(level_of(f->s, 14), CKPT_LEVEL_MEMORY);
  assert_int_equal(ckpt_store_verify(f->s, "run", 13, NULL, NULL, NULL), FT_OK);
  /* a GC between C3 and the catalog write: the chunk it swept is missed */
  ckpt_store_set_gc_grace(f->s, 0);
  char path[4300];
  snprintf(path, sizeof path, "%s/store/manifests/run/%020d.json", f->dir, 15);
  assert_int_equal(commit_hooked(f, 15, b, gc_meanwhile, NULL), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "not in the store"));
  assert_int_equal(hook.calls, 2); /* checked again, and found gone */
  assert_int_equal(level_of(f->s, 15), -1);
  /* the same with the GC during the manifest's put */
  assert_int_equal(commit_hooked(f, 15, b, NULL, gc_meanwhile), FT_ENOENT);
  assert_int_equal(hook.puts, 1);
  assert_int_equal(level_of(f->s, 15), -1);
  assert_false(tu_exists(path)); /* the manifest object was taken back */
}

/* Levels (checkpoint.persist_every, checkpoint.require memory): memory-level
 * checkpoints write no chunk and no manifest object, are read from memory,
 * are skipped by latest_at(LOCAL) and refused by verify, are pruned by GC
 * once a newer persisted one exists (keep_last 0 too), are dropped by
 * drop_memory (and one made before a drop is refused after it), and a
 * persisted commit of the same step upgrades one. */
static void test_memory_levels(void **st) {
  fx *f = *st;
  float mem[13][NV];
  assert_int_equal(ckpt_store_submit_memory(f->s, "run", 11, 0, 1, NULL, 0, &(ckpt_job *){0}),
                   FT_ESTATE); /* no memory kept yet: refused */
  assert_int_equal(ckpt_store_keep_in_memory(f->s, 1 << 22), FT_OK);
  int chunks = tu_count_chunks(f->dir);
  for (int step = 11; step <= 13; step++) {
    tu_fill(mem[step - 1], NV, (uint64_t)step * 77);
    ckpt_part p[2] = {tu_part("param/shared", f->shared, NS, 0, NS),
                      tu_part("param/var", mem[step - 1], NV, 0, NV)};
    assert_int_equal(commit_memory(f->s, step, p, 2), FT_OK);
    assert_int_equal(level_of(f->s, step), CKPT_LEVEL_MEMORY);
  }
  assert_int_equal(tu_count_chunks(f->dir), chunks); /* nothing written */
  char path[4300];
  snprintf(path, sizeof path, "%s/store/manifests/run/%020d.json", f->dir, 13);
  assert_false(tu_exists(path));
  assert_int_equal(level_of(f->s, 10), CKPT_LEVEL_DURABLE);
  int64_t step = 0;
  assert_int_equal(ckpt_store_latest(f->s, "run", INT64_MAX, &step), FT_OK);
  assert_int_equal(step, 13);
  assert_int_equal(ckpt_store_latest_at(f->s, "run", INT64_MAX, CKPT_LEVEL_LOCAL, &step), FT_OK);
  assert_int_equal(step, 10);
  /* read back from memory; verify refuses (nothing of it in the store) */
  ckpt_manifest *m = NULL;
  float out[NV];
  assert_int_equal(ckpt_store_load(f->s, "run", 12, &m), FT_OK);
  assert_int_equal(ckpt_manifest_info(m)->level, CKPT_LEVEL_MEMORY);
  assert_int_equal(ckpt_store_read(f->s, m, "param/var", 0, sizeof out, out), FT_OK);
  assert_memory_equal(out, mem[11], sizeof out);
  ckpt_manifest_free(m);
  assert_int_equal(ckpt_store_verify(f->s, "run", 12, NULL, NULL, NULL), FT_ESTATE);
  /* prune_memory (the catalog only), as GC with keep_last 0 would: the
   * newest CKPT_GC_KEEP_MEMORY (2) memory ones stay, nothing else goes */
  ckpt_retention all = {0};
  ckpt_gc_report rep;
  int pruned = 0;
  assert_int_equal(ckpt_store_prune_memory(f->s, "run", &pruned), FT_OK);
  assert_int_equal(pruned, 1);
  assert_int_equal(level_of(f->s, 11), -1);
  assert_int_equal(level_of(f->s, 13), CKPT_LEVEL_MEMORY);
  assert_int_equal(level_of(f->s, 1), CKPT_LEVEL_DURABLE);
  assert_int_equal(ckpt_store_gc(f->s, &all, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 0);
  /* step 13 reaches the store: its record is upgraded, not refused */
  ckpt_part p[2] = {tu_part("param/shared", f->shared, NS, 0, NS),
                    tu_part("param/var", mem[12], NV, 0, NV)};
  assert_int_equal(ckpt_store_set_state(f->s, "run", 13, CKPT_GOOD), FT_OK);
  assert_int_equal(tu_commit(f->s, "run", 13, p, 2), FT_OK);
  assert_int_equal(level_of(f->s, 13), CKPT_LEVEL_DURABLE);
  assert_true(tu_exists(path));
  ckpt_info *v = NULL;
  size_t n = 0;
  assert_int_equal(ckpt_store_list(f->s, "run", &v, &n), FT_OK);
  assert_int_equal(v[n - 1].state, CKPT_GOOD); /* the upgrade kept its state */
  free(v);
  assert_int_equal(ckpt_store_verify(f->s, "run", 13, NULL, NULL, NULL), FT_OK);
  assert_int_equal(tu_commit(f->s, "run", 13, p, 2), FT_EEXIST); /* once */
  /* now older than a persisted one: step 12 is pruned */
  assert_int_equal(ckpt_store_gc(f->s, &all, 0, &rep), FT_OK);
  assert_int_equal(level_of(f->s, 12), -1);
  /* drop_memory drops memory ones only */
  assert_int_equal(commit_memory(f->s, 14, p, 2), FT_OK);
  int dropped = 0;
  assert_int_equal(ckpt_store_drop_memory(f->s, "run", 0, &dropped), FT_OK);
  assert_int_equal(dropped, 1);
  assert_int_equal(level_of(f->s, 14), -1);
  assert_int_equal(level_of(f->s, 13), CKPT_LEVEL_DURABLE);
  /* a memory commit made before a drop (queued behind it) is refused after
   * it; one made after it, and one that names no epoch, are recorded */
  uint64_t before = ckpt_store_memory_epoch(f->s);
  assert_int_equal(ckpt_store_drop_memory(f->s, "run", 0, NULL), FT_OK);
  assert_int_equal(ckpt_store_memory_epoch(f->s), before + 1);
  assert_int_equal(tu_commit_epoch(f->s, "run", 15, p, 2, 1, before), FT_ECANCELED);
  assert_non_null(strstr(ft_err_detail(), "before the run's memory records were dropped"));
  assert_int_equal(level_of(f->s, 15), -1);
  assert_int_equal(tu_commit_epoch(f->s, "run", 15, p, 2, 1, before + 1), FT_OK);
  assert_int_equal(level_of(f->s, 15), CKPT_LEVEL_MEMORY);
  assert_int_equal(tu_commit_epoch(f->s, "run", 16, p, 2, 1, 0), FT_OK);
  assert_int_equal(level_of(f->s, 16), CKPT_LEVEL_MEMORY);
  /* the epoch does not touch persisted commits */
  assert_int_equal(tu_commit_epoch(f->s, "run", 17, p, 2, 0, before), FT_OK);
  assert_int_equal(level_of(f->s, 17), CKPT_LEVEL_DURABLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_ones_go_and_keep_all, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreferenced_and_grace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_levels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_checks_chunks_unlocked, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
