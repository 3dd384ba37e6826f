/*
 * test_ckpt_gc_inv: the GC's invariant checks (ckptstore/ckpt_gc.c:
 * check_marked for I1, check_dropped_gone for I3) catch the states a bug in
 * the GC would leave: a sweep about to run while a checkpoint the catalog
 * holds has chunks outside the marked set, and a dropped checkpoint the
 * catalog still lists once G3's batch is written. No public call builds
 * those states (the GC's context lives in one call), so this test includes
 * ckpt_gc.c itself, builds the context as the bug would have, and calls the
 * check at the point where gc_pass calls it (meta_mu held). Death tests
 * (test_inv.h): the child must abort naming the invariant.
 */
#include "test_inv.h"

#include "test_ckpt_util.h"

#include "../../ckptstore/ckpt_gc.c"

#define N 4000

static char *g_dir, *g_uri;
static ckpt_store *g_s;
static float g_data[N];

/* A store with one committed checkpoint, run step 1 (format 1: its
 * manifest names its chunks). */
static void store_with_one(void) {
  assert_int_equal(tu_store_open(&g_dir, &g_uri, &g_s, NULL), FT_OK);
  tu_fill(g_data, N, 7);
  ckpt_part p = tu_part("param/a", g_data, N, 0, N);
  assert_int_equal(tu_commit(g_s, "run", 1, &p, 1), FT_OK);
}

/* I1: G4 forgot a manifest (here: marked nothing) and the sweep would
 * delete chunks a listed checkpoint needs. */
static void unmarked_body(void) {
  store_with_one();
  gc_ctx g = {.s = g_s};
  pthread_mutex_lock(&g_s->meta_mu);
  check_marked(g_s, &g);
}
static void test_inv_unmarked_chunk(void **st) {
  (void)st;
  assert_inv_broken(unmarked_body, "I1: chunk 0 (chain -1) of param/a in run step 1 not marked");
}

/* I3: G3 dropped step 1 but its catalog record is still there (a batch
 * that missed a key). */
static void still_listed_body(void) {
  store_with_one();
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(g_s, "run", 1, &in), FT_OK);
  gc_ctx g = {.s = g_s, .dropped = &in, .ndropped = 1};
  pthread_mutex_lock(&g_s->meta_mu);
  check_dropped_gone(g_s, &g);
}
static void test_inv_dropped_still_listed(void **st) {
  (void)st;
  assert_inv_broken(still_listed_body, "I3: dropped run step 1 still in the catalog (rc 0)");
}

/* G2: retention asked to drop a pinned record. */
static void drop_pinned_body(void) {
  ckpt_info x = {.run = "run", .step = 4, .state = CKPT_COMMITTED, .pinned = 1};
  drop_record(&x);
}
static void test_inv_drop_pinned(void **st) {
  (void)st;
  assert_inv_broken(drop_pinned_body, "G2: dropping run step 4 (pinned 1, state");
}

/* The same checks pass on what the real GC leaves (each run under it). */
static void test_real_gc_passes(void **st) {
  (void)st;
  char *dir, *uri;
  ckpt_store *s;
  assert_int_equal(tu_store_open(&dir, &uri, &s, NULL), FT_OK);
  ckpt_store_set_gc_grace(s, 0);
  float d[N];
  for (int step = 1; step <= 4; step++) {
    tu_fill(d, N, (uint64_t)step);
    ckpt_part p = tu_part("param/a", d, N, 0, N);
    assert_int_equal(tu_commit(s, "run", step, &p, 1), FT_OK);
  }
  ckpt_retention r = {.keep_last = 2};
  ckpt_gc_report rep;
  assert_int_equal(ckpt_store_gc(s, &r, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 2);
  tu_store_close(dir, uri, s);
}

int main(void) {
  /* the children's stores go in here, removed at the end (they abort) */
  char *root = tu_tmpdir();
  setenv("TMPDIR", root, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_gc_passes),
      cmocka_unit_test(test_inv_unmarked_chunk),
      cmocka_unit_test(test_inv_dropped_still_listed),
      cmocka_unit_test(test_inv_drop_pinned),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tu_rmrf(root);
  free(root);
  return rc;
}
