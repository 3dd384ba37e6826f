/*
 * test_ckpt_hosts: checkpoints committed from hosts' references
 * (ckpt_store_put_host: a host's agent writes the leaf of the index that
 * names its ranks' shard objects and sends one reference for them). A
 * world of 6: ranks 0..2 on host A and 4..5 on host B come as host
 * references, rank 3 alone (a host whose agent did not gather, or a
 * direct worker); the commit writes only rank 3's leaf and the levels
 * above. Checked: the load gives the same bytes; one rank's restore reads
 * only the objects on its way; verify passes; a damaged leaf is named;
 * refused: a rank given twice (by a host and alone), a host leaf that is
 * not in the store, put_host over a missing shard object or ranks not in
 * a row; a leaf too old to vouch is read through, so a chunk a GC swept
 * under it still refuses the commit; GC keeps a kept checkpoint's leaves,
 * objects and chunks and sweeps a dropped one's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_ckpt_util.h"

#define W 6
#define PER 1000
#define NV (W * PER)

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  float w[3][NV];
} fx;

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  if (tu_store_open(&f->dir, &f->uri, &f->s, NULL))
    return -1;
  for (int k = 0; k < 3; k++)
    tu_fill(f->w[k], NV, (uint64_t)(k + 7));
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  tu_store_close(f->dir, f->uri, f->s);
  free(f);
  return 0;
}

/* Rank r's shard of step (data f->w[k]) stored as an object; its
 * reference as it travels (through its text). */
static ckpt_shard *saved_ref(fx *f, int64_t step, int r, int k) {
  ckpt_part p = tu_part("param/w", f->w[k], NV, (size_t)r * PER, PER);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL, *ref = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", step, r, W, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  assert_int_equal(ckpt_store_put_shard(f->s, sh), FT_OK);
  char *js = ckpt_shard_report_to_json(sh);
  assert_int_equal(ckpt_shard_from_json(js, &ref), FT_OK);
  free(js);
  ckpt_shard_free(sh);
  return ref;
}

/* A host's reference for refs (as it travels: through its text). */
static ckpt_shard *host_ref(fx *f, ckpt_shard **refs, int n) {
  ckpt_shard *h = NULL, *back = NULL;
  int rc = ckpt_store_put_host(f->s, refs, n, &h);
  if (rc)
    fprintf(stderr, "put_host: %s\n", ft_err_detail());
  assert_int_equal(rc, FT_OK);
  char *js = ckpt_shard_report_to_json(h);
  assert_non_null(strstr(js, "\"ranks\""));
  assert_true(strlen(js) < 1000);
  assert_int_equal(ckpt_shard_from_json(js, &back), FT_OK);
  assert_int_equal(ckpt_shard_nranks(back), n);
  assert_int_equal(ckpt_shard_rank(back), ckpt_shard_rank(h));
  free(js);
  ckpt_shard_free(h);
  return back;
}

/* Step's six ranks saved: ranks[] per rank, and the three references a
 * commit gets (host A, rank 3, host B) in got[]. */
static void save_step(fx *f, int64_t step, int k, ckpt_shard *ranks[W], ckpt_shard *got[3]) {
  for (int r = 0; r < W; r++)
    ranks[r] = saved_ref(f, step, r, k);
  ckpt_shard *a[3] = {ranks[2], ranks[0], ranks[1]}; /* any order */
  got[0] = host_ref(f, a, 3);
  got[1] = ranks[3];
  got[2] = host_ref(f, ranks + 4, 2);
}

static void free_step(ckpt_shard *ranks[W], ckpt_shard *got[3]) {
  for (int r = 0; r < W; r++)
    ckpt_shard_free(ranks[r]);
  ckpt_shard_free(got[0]);
  ckpt_shard_free(got[2]);
}

static int commit(fx *f, int64_t step, ckpt_shard **refs, int n) {
  ckpt_meta m = {.run = "run", .step = step, .parent_step = -1, .world = W, .loss = 1.0};
  return ckpt_store_commit(f->s, &m, refs, n);
}

static void obj_path(fx *f, const ckpt_shard *ref, char *out, size_t n) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(ref->object, hex);
  snprintf(out, n, "%s/store/shards/%s", f->dir, hex);
}

static int count_shard_files(fx *f) {
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "ls %s/store/shards | wc -l", f->dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  assert_int_equal(fscanf(p, "%d", &n), 1);
  pclose(p);
  return n;
}

static void test_commit_and_load(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600);
  ckpt_shard *ranks[W], *got[3];
  save_step(f, 10, 0, ranks, got);
  int before = count_shard_files(f); /* the 6 shard objects and the 2 hosts' leaves */
  assert_int_equal(before, W + 2);
  ckpt_shard *order[3] = {got[2], got[1], got[0]};
  assert_int_equal(commit(f, 10, order, 3), FT_OK);
  /* the commit wrote rank 3's leaf and the root above the three leaves */
  assert_int_equal(count_shard_files(f), before + 2);
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 10, &in), FT_OK);
  assert_int_equal(in.state, CKPT_COMMITTED);
  assert_int_equal(in.logical_bytes, NV * 4);
  assert_int_equal(in.ntensors, 1);
  assert_int_equal(in.new_bytes, in.stored_bytes);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 10, &m), FT_OK);
  float back[NV];
  assert_int_equal(ckpt_store_read(f->s, m, "param/w", 0, sizeof back, back), FT_OK);
  assert_memory_equal(back, f->w[0], sizeof back);
  ckpt_manifest_free(m);
  assert_int_equal(ckpt_store_verify(f->s, "run", 10, NULL, NULL, NULL), FT_OK);
  /* rank 5's restore: the root, host B's leaf and rank 5's object only */
  ckpt_read_stats a, b;
  ckpt_manifest *lazy = NULL, *part = NULL;
  assert_int_equal(ckpt_store_load_lazy(f->s, "run", 10, &lazy), FT_OK);
  ckpt_store_read_stats(f->s, &a);
  ckpt_range r = {"param/w", 5 * PER * 4, PER * 4};
  assert_int_equal(ckpt_store_load_for_ranges(f->s, lazy, &r, 1, &part), FT_OK);
  assert_int_equal(ckpt_store_read(f->s, part, "param/w", r.offset, r.len, back), FT_OK);
  assert_memory_equal(back, f->w[0] + 5 * PER, r.len);
  ckpt_store_read_stats(f->s, &b);
  uint64_t meta = b.meta_bytes - a.meta_bytes;
  assert_true(meta > 0 && meta < 4000); /* three small objects, not six shards and three leaves */
  ckpt_manifest_free(part);
  /* a damaged host leaf is named on load */
  char path[4400];
  obj_path(f, got[2], path, sizeof path);
  tu_flip(path, 40);
  assert_int_equal(ckpt_store_load(f->s, "run", 10, &m), FT_ECORRUPT);
  assert_non_null(strstr(ft_err_detail(), "index object"));
  assert_non_null(strstr(ft_err_detail(), "ranks 4..5"));
  ckpt_manifest_free(lazy);
  free_step(ranks, got);
}

static void test_refused(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600);
  ckpt_shard *ranks[W], *got[3];
  save_step(f, 20, 1, ranks, got);
  /* rank 1 twice: in host A's leaf and alone; rank 3 never */
  ckpt_shard *twice[3] = {got[0], ranks[1], got[2]};
  assert_int_equal(commit(f, 20, twice, 3), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "a second shard of rank 1"));
  /* ranks not in a row make no host */
  ckpt_shard *gap[2] = {ranks[0], ranks[2]}, *h = NULL;
  assert_int_equal(ckpt_store_put_host(f->s, gap, 2, &h), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "does not follow"));
  /* a host leaf that is not in the store */
  char path[4400];
  obj_path(f, got[2], path, sizeof path);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(commit(f, 20, got, 3), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "index leaf of ranks 4..5"));
  ckpt_info in;
  assert_int_equal(ckpt_store_get_info(f->s, "run", 20, &in), FT_ENOENT);
  /* a host over a shard object that is not in the store */
  obj_path(f, ranks[5], path, sizeof path);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(ckpt_store_put_host(f->s, ranks + 4, 2, &h), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "rank 5"));
  free_step(ranks, got);
}

/* A GC between the save and the commit sweeps chunks older than its
 * grace; the leaf and its objects are then as old, so the commit reads
 * the leaf, checks each object's chunks and is refused. */
static void test_old_leaf_read_through(void **st) {
  fx *f = *st;
  ckpt_shard *ranks[W], *got[3];
  save_step(f, 30, 2, ranks, got);
  ckpt_shard *c = host_ref(f, ranks + 3, 3); /* every rank in a host's leaf */
  usleep(30000);
  ckpt_store_set_gc_grace(f->s, 0);
  /* keep every object, lose the chunks: as a GC whose grace ran out would */
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "mv %s/store/shards %s/keep && mkdir %s/store/shards", f->dir, f->dir,
           f->dir);
  assert_int_equal(system(cmd), 0);
  ckpt_gc_report rep;
  ckpt_retention r = {0};
  assert_int_equal(ckpt_store_gc(f->s, &r, 0, &rep), FT_OK);
  assert_true(rep.chunks_deleted >= W);
  snprintf(cmd, sizeof cmd, "rmdir %s/store/shards && mv %s/keep %s/store/shards", f->dir, f->dir,
           f->dir);
  assert_int_equal(system(cmd), 0);
  ckpt_shard *hosts_only[2] = {got[0], c};
  assert_int_equal(commit(f, 30, hosts_only, 2), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "is not in the store"));
  assert_non_null(strstr(ft_err_detail(), "param/w"));
  ckpt_shard_free(c);
  free_step(ranks, got);
}

static void test_gc_keeps_and_sweeps(void **st) {
  fx *f = *st;
  ckpt_store_set_gc_grace(f->s, 3600);
  for (int64_t step = 40; step <= 41; step++) {
    ckpt_shard *ranks[W], *got[3];
    save_step(f, step, (int)(step - 40), ranks, got);
    assert_int_equal(commit(f, step, got, 3), FT_OK);
    free_step(ranks, got);
  }
  usleep(30000);
  ckpt_store_set_gc_grace(f->s, 0);
  ckpt_gc_report rep;
  ckpt_retention keep1 = {.keep_last = 1};
  assert_int_equal(ckpt_store_gc(f->s, &keep1, 0, &rep), FT_OK);
  assert_int_equal(rep.checkpoints_deleted, 1);
  /* step 40's six objects, its hosts' two leaves, rank 3's leaf and the root */
  assert_int_equal(rep.shards_deleted, W + 4);
  assert_int_equal(ckpt_store_verify(f->s, "run", 41, NULL, NULL, NULL), FT_OK);
  ckpt_manifest *m = NULL;
  assert_int_equal(ckpt_store_load(f->s, "run", 41, &m), FT_OK);
  float back[NV];
  assert_int_equal(ckpt_store_read(f->s, m, "param/w", 0, sizeof back, back), FT_OK);
  assert_memory_equal(back, f->w[1], sizeof back);
  ckpt_manifest_free(m);
  assert_int_equal(ckpt_store_gc(f->s, &keep1, 0, &rep), FT_OK);
  assert_int_equal(rep.shards_deleted, 0);
  assert_int_equal(rep.chunks_deleted, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_commit_and_load, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_leaf_read_through, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_keeps_and_sweeps, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
