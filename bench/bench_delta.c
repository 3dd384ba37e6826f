/*
 * bench_delta: what delta chunks save, and cost, on a real run's states.
 *
 *   bench_delta SRC_URI RUN OUT_DIR [FULL_EVERY[:MOMENTS]...]
 *
 * Reads every checkpoint of RUN in the store at SRC_URI (a training run's
 * successive states) into memory, then writes them again, one after the
 * other as the run did, into a fresh store under OUT_DIR for each
 * FULL_EVERY given (default: 1, today's codec with no deltas, and 8; with
 * ":q8" or ":bf16" the Adam moments in that lossy form, as
 * checkpoint.moments stores them, and compared with the source only in
 * size: the weights still byte for byte), and
 * prints per store: stored bytes (and the ratio to the full size), write
 * throughput (submit to committed, the states' logical bytes over the
 * time), and restore throughput of the newest checkpoint with the
 * longest chain (page cache dropped, every byte read back, hash-verified
 * and compared with the source) and that depth. Each row is measured in the same
 * run, on the same disk. Not a test: no assertions on speed (label bench).
 */
#include "bench_fs.h"
#include "ckptstore.h"
#include "ft_clock.h"
#include "ft_err.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct state {
  int64_t step;
  ckpt_part *parts;
  int nparts;
  uint64_t bytes;
} state;

static int die(int rc, const char *what) {
  fprintf(stderr, "bench_delta: %s: %s: %s\n", what, ft_strerror(rc), ft_err_detail());
  return 1;
}

/* Every tensor of (run, step) whole, as one rank's parts. */
static int load_state(ckpt_store *s, const char *run, int64_t step, state *st) {
  ckpt_manifest *m = NULL;
  int rc = ckpt_store_load(s, run, step, &m);
  if (rc)
    return rc;
  int n = ckpt_manifest_ntensors(m);
  st->step = step;
  st->parts = calloc((size_t)n, sizeof *st->parts);
  st->nparts = n;
  for (int i = 0; i < n && rc == FT_OK; i++) {
    ckpt_tensor_info ti;
    ckpt_manifest_tensor(m, i, &ti);
    void *buf = malloc(ti.nbytes ? ti.nbytes : 1);
    ckpt_part *p = &st->parts[i];
    p->tensor = strdup(ti.name);
    p->dtype = strdup(ti.dtype);
    p->ndim = ti.ndim;
    memcpy(p->shape, ti.shape, sizeof p->shape);
    p->len = ti.nbytes;
    p->data = buf;
    st->bytes += ti.nbytes;
    rc = buf ? ckpt_store_read(s, m, ti.name, 0, ti.nbytes, buf) : FT_ENOMEM;
  }
  ckpt_manifest_free(m);
  return rc;
}

typedef struct result {
  uint64_t stored, restored;
  double write_s, restore_s;
  int depth;
} result;

/* The form of part p in mode moments ("", "bf16" or "q8"), as the worker
 * picks it (checkpoint.moments). */
static int form_of(const ckpt_part *p, const char *moments) {
  int m = !strncmp(p->tensor, "adam_m/", 7), v = !strncmp(p->tensor, "adam_v/", 7);
  if (!strcmp(moments, "bf16") && (m || v))
    return CKPT_LOSSY_BF16;
  if (!strcmp(moments, "q8") && (m || v))
    return m ? CKPT_LOSSY_Q8 : CKPT_LOSSY_Q8LOG;
  return CKPT_EXACT;
}

static int write_all(const char *dir, int full_every, const char *moments, state *sts, int n,
                     result *r) {
  char uri[4300], path[4200];
  snprintf(path, sizeof path, "%s/full_every_%d%s", dir, full_every, moments);
  snprintf(uri, sizeof uri, "local:%s", path);
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.full_every = full_every};
  int rc = ckpt_store_open(uri, &o, &s);
  if (rc)
    return die(rc, "open");
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < sts[i].nparts; k++)
      sts[i].parts[k].lossy = form_of(&sts[i].parts[k], moments);
    double t0 = ft_now_s();
    ckpt_job *j = NULL;
    ckpt_shard *sh = NULL;
    if ((rc = ckpt_store_submit(s, "bench", sts[i].step, 0, 1, sts[i].parts, sts[i].nparts, &j)) ||
        (rc = ckpt_job_wait(j, &sh)))
      return die(rc, "write");
    ckpt_meta m = {.run = "bench",
                   .step = sts[i].step,
                   .parent_step = i ? sts[i - 1].step : -1,
                   .world = 1,
                   .loss = NAN};
    if ((rc = ckpt_store_commit(s, &m, &sh, 1)))
      return die(rc, "commit");
    r->write_s += ft_now_s() - t0;
    ckpt_shard_free(sh);
    ckpt_job_free(j);
  }
  ckpt_info *v = NULL;
  size_t nv = 0;
  if ((rc = ckpt_store_list(s, "bench", &v, &nv)))
    return die(rc, "list");
  int at = n - 1; /* the newest of those with the longest chain */
  for (size_t i = 0; i < nv; i++) {
    r->stored += v[i].new_bytes;
    if (v[i].depth >= r->depth) {
      r->depth = v[i].depth;
      at = (int)i;
    }
  }
  free(v);
  ckpt_store_free(s);

  /* that one back, from a cold cache */
  bench_drop_cache_tree(path);
  const state *last = &sts[at];
  r->restored = last->bytes;
  double t0 = ft_now_s();
  ckpt_store_opts ro = {.read_only = 1};
  ckpt_manifest *m = NULL;
  if ((rc = ckpt_store_open(uri, &ro, &s)) || (rc = ckpt_store_load(s, "bench", last->step, &m)))
    return die(rc, "open for restore");
  for (int i = 0; i < last->nparts; i++) {
    const ckpt_part *p = &last->parts[i];
    void *buf = malloc(p->len ? p->len : 1);
    if ((rc = ckpt_store_read(s, m, p->tensor, 0, p->len, buf)))
      return die(rc, "restore");
    if (!p->lossy && memcmp(buf, p->data, p->len) != 0) {
      fprintf(stderr, "bench_delta: restored %s differs\n", p->tensor);
      return 1;
    }
    free(buf);
  }
  r->restore_s = ft_now_s() - t0;
  ckpt_manifest_free(m);
  ckpt_store_free(s);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_delta SRC_URI RUN OUT_DIR [FULL_EVERY[:MOMENTS]...]\n");
    return 2;
  }
  ckpt_store *src = NULL;
  ckpt_store_opts ro = {.read_only = 1};
  int rc = ckpt_store_open(argv[1], &ro, &src);
  if (rc)
    return die(rc, argv[1]);
  ckpt_info *v = NULL;
  size_t n = 0;
  if ((rc = ckpt_store_list(src, argv[2], &v, &n)) || n == 0)
    return die(rc ? rc : FT_ENOENT, "list");
  state *sts = calloc(n, sizeof *sts);
  uint64_t logical = 0;
  for (size_t i = 0; i < n; i++) {
    if ((rc = load_state(src, argv[2], v[i].step, &sts[i])))
      return die(rc, "load");
    logical += sts[i].bytes;
  }
  ckpt_store_free(src);
  int fe[16] = {1, 8}, nfe = 2;
  const char *mo[16] = {"", ""};
  if (argc > 4)
    for (nfe = 0; nfe < 16 && 4 + nfe < argc; nfe++) { /* N, or N:q8 / N:bf16 */
      fe[nfe] = atoi(argv[4 + nfe]);
      const char *colon = strchr(argv[4 + nfe], ':');
      mo[nfe] = colon ? colon + 1 : "";
    }
  printf("%zu checkpoints (steps %" PRId64 "..%" PRId64 "), %.1f MiB of state each, %.1f MiB "
         "in all\n",
         n, v[0].step, v[n - 1].step, sts[0].bytes / 1048576.0, logical / 1048576.0);
  printf("%-36s %11s %7s %11s %13s %6s\n", "codec", "stored MiB", "ratio", "write MB/s",
         "restore MB/s", "depth");
  for (int k = 0; k < nfe; k++) {
    result r = {0};
    if (write_all(argv[3], fe[k], mo[k], sts, (int)n, &r))
      return 1;
    char name[64];
    if (fe[k] <= 1)
      snprintf(name, sizeof name, "shuffle+zstd (no deltas)%s%s", mo[k][0] ? ", moments " : "",
               mo[k]);
    else
      snprintf(name, sizeof name, "delta, full_every %d%s%s", fe[k], mo[k][0] ? ", moments " : "",
               mo[k]);
    printf("%-36s %11.1f %6.2fx %11.0f %13.0f %6d\n", name, r.stored / 1048576.0,
           (double)logical / (double)r.stored, logical / r.write_s / 1e6,
           r.restored / r.restore_s / 1e6, r.depth);
    fflush(stdout);
  }
  free(v);
  return 0;
}
