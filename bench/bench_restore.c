/*
 * bench_restore: the bytes one rank reads to restore a checkpoint of many
 * ranks (issue 43, part 2; docs/design.md §10), beside that rank's own
 * shard.
 *
 * For each world W: the checkpoint the scale swarm writes (a GPT-2 of 32
 * layers x 4096 channels, 6.7e9 parameters, sharded W ways as the FSDP
 * engine shards it: worker/shardmap.h; every chunk a zero chunk, one
 * object per length), each rank's shard an object of the store (a file
 * written without fsync, as tests/scale/ftswarm.c writes them), committed
 * from the W references (format 3: the manifest names the root of the
 * shard objects' index). Then one rank restores through the worker's own
 * path (ckpt_store_load_lazy, shardmap_restore, which reads through
 * ckpt_store_load_for_ranges) on a fresh handle, at the same world and at
 * half of it, and its reads are counted (ckpt_read_stats: manifest, index
 * and shard object bytes, and chunk bytes). Beside it: the rank's own
 * shard (the bytes of its ranges), the target (within 2x of that) and what
 * the old path read (every shard object: measured with --old up to that
 * world, else their total size).
 *
 * usage: bench_restore DIR [--old MAXW] W...     (DIR is created, then removed;
 *        BENCH_KEEP=1 keeps each world's store in DIR/w<W>)
 */
#include "ckpt_int.h"
#include "ft_err.h"
#include "ft_gpt2.h"
#include "shardmap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *const KINDS[3] = {"param", "adam_m", "adam_v"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The zero chunks of each length written so far (a shard of one chunk). */
typedef struct zero {
  uint64_t len;
  ckpt_shard *sh;
} zero;
static zero zeros[64];
static int nzeros;

static const ckpt_shard *zero_chunks(ckpt_store *s, uint64_t len) {
  for (int i = 0; i < nzeros; i++)
    if (zeros[i].len == len)
      return zeros[i].sh;
  if (nzeros == 64)
    return NULL;
  void *z = calloc(1, len);
  ckpt_part p = {
      .tensor = "zeros", .dtype = "u8", .ndim = 1, .shape = {(int64_t)len}, .len = len, .data = z};
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  if (!z || ckpt_store_submit(s, "bench-zeros", 0, 0, 1, &p, 1, &j) || ckpt_job_wait(j, &sh)) {
    fprintf(stderr, "bench_restore: a zero chunk of %" PRIu64 " bytes: %s\n", len, ft_err_detail());
    exit(1);
  }
  ckpt_job_free(j);
  free(z);
  zeros[nzeros] = (zero){.len = len, .sh = sh};
  return zeros[nzeros++].sh;
}

/* Rank r's shard of world w as an object under dir/shards/ (no fsync), as
 * a reference: *ref malloc'd. *bytes += the object's size. */
static void put_shard(ckpt_store *s, const char *dir, const ft_gpt2_dims *d, int r, int w,
                      ckpt_shard *ref, uint64_t *bytes) {
  int ng = ft_gpt2_ngroups(d), np = 0;
  ckpt_tensor *parts = calloc((size_t)(3 * ng), sizeof *parts);
  char(*names)[64] = calloc((size_t)(3 * ng), sizeof *names);
  for (int k = 0; k < 3; k++)
    for (int g = 0; g < ng; g++) {
      size_t n = ft_gpt2_group_numel(d, g), S = (n + (size_t)w - 1) / (size_t)w;
      size_t b = (size_t)r * S, cnt = b >= n ? 0 : (n - b < S ? n - b : S);
      if (!cnt)
        continue;
      char gname[32];
      snprintf(names[np], sizeof names[np], "%s/%s", KINDS[k],
               ft_gpt2_group_name(d, g, gname, sizeof gname));
      const ckpt_shard *z = zero_chunks(s, cnt * 4);
      ckpt_tensor *t = &parts[np++];
      t->name = names[np - 1];
      snprintf(t->dtype, sizeof t->dtype, "f32");
      t->ndim = 1;
      t->shape[0] = (int64_t)n;
      t->offset = b * 4;
      t->len = cnt * 4;
      t->nchunks = t->cap = z->parts[0].nchunks;
      t->chunks = malloc(sizeof *t->chunks * (size_t)t->nchunks);
      for (int c = 0; c < t->nchunks; c++) {
        t->chunks[c] = z->parts[0].chunks[c];
        t->chunks[c].offset += t->offset;
      }
    }
  ckpt_shard sh = {.run = "bench", .step = 1, .rank = r, .world = w, .parts = parts, .nparts = np};
  char *js = ckpt_shard_to_json(&sh), hex[CKPT_HEX_LEN + 1], path[4400];
  size_t len = js ? strlen(js) : 0;
  if (!js || ckpt_sha256(js, len, sh.object)) {
    fprintf(stderr, "bench_restore: out of memory\n");
    exit(1);
  }
  ckpt_hex(sh.object, hex);
  snprintf(path, sizeof path, "%.4000s/shards/%s", dir, hex);
  FILE *f = fopen(path, "w");
  if (!f || fwrite(js, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "bench_restore: writing %s: %s\n", path, strerror(errno));
    exit(1);
  }
  *bytes += len;
  ckpt_shard_add_up(&sh);
  sh.sum.base_step = -1;
  *ref = (ckpt_shard){.run = strdup("bench"),
                      .step = 1,
                      .rank = r,
                      .world = w,
                      .is_ref = 1,
                      .has_object = 1,
                      .sum = sh.sum};
  memcpy(ref->object, sh.object, CKPT_HASH_LEN);
  for (int i = 0; i < np; i++)
    free(parts[i].chunks);
  free(parts);
  free(names);
  free(js);
}

/* Rank r of world nw restores through the worker's path on a fresh
 * handle: *meta and *chunks the bytes it read, *own its shard's bytes.
 * old: through ckpt_store_load (every shard object) instead. */
static int restore(const char *uri, const ft_gpt2_dims *d, int r, int nw, int old, uint64_t *meta,
                   uint64_t *chunks, uint64_t *own, double *secs) {
  ckpt_store_opts o = {.shard_writer = 1};
  ckpt_store *s = NULL;
  shardmap sm;
  ckpt_manifest *m = NULL;
  double t0 = now_s();
  int rc = ckpt_store_open(uri, &o, &s);
  if (rc == FT_OK)
    rc = shardmap_init(&sm, d, r, nw);
  if (rc)
    return rc;
  float *buf = malloc(3 * sm.shard_n * sizeof(float));
  float *const dst[3] = {buf, buf + sm.shard_n, buf + 2 * sm.shard_n};
  rc = buf ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
  if (rc == FT_OK)
    rc = old ? ckpt_store_load(s, "bench", 1, &m) : ckpt_store_load_lazy(s, "bench", 1, &m);
  if (rc == FT_OK)
    rc = shardmap_restore(&sm, s, m, dst);
  ckpt_read_stats st;
  ckpt_store_read_stats(s, &st);
  *meta = st.meta_bytes;
  *chunks = st.store_bytes + st.memory_bytes + st.remote_bytes;
  *own = 0;
  for (int g = 0; g < sm.ngroups; g++)
    *own += 3 * shardmap_own_count(&sm, g) * sizeof(float);
  *secs = now_s() - t0;
  ckpt_manifest_free(m);
  free(buf);
  shardmap_release(&sm);
  ckpt_store_free(s);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_restore DIR [--old MAXW] W...\n");
    return 2;
  }
  const char *base = argv[1];
  int ai = 2, old_max = 16384;
  if (ai + 1 < argc && !strcmp(argv[ai], "--old")) {
    old_max = atoi(argv[ai + 1]);
    ai += 2;
  }
  ft_gpt2_dims d = {.max_seq_len = 2048,
                    .vocab_size = 50257,
                    .padded_vocab_size = ft_gpt2_pad_vocab(50257),
                    .n_layer = 32,
                    .n_head = 32,
                    .channels = 4096};
  printf("%-8s %-34s %s\n", "ranks", "figure", "measured (reference, target)");
  for (; ai < argc; ai++) {
    int w = atoi(argv[ai]);
    char dir[4200], uri[4300], cmd[8600];
    snprintf(dir, sizeof dir, "%.4000s/w%d", base, w);
    snprintf(uri, sizeof uri, "local:%s", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/shards'", dir, dir);
    if (w < 2 || system(cmd) != 0) {
      fprintf(stderr, "bench_restore: bad world %s, or cannot make %s\n", argv[ai], dir);
      return 2;
    }
    /* the checkpoint: W shard objects, then one commit of W references */
    ckpt_store *s = NULL;
    if (ckpt_store_open(uri, NULL, &s)) {
      fprintf(stderr, "bench_restore: %s: %s\n", uri, ft_err_detail());
      return 1;
    }
    double t0 = now_s();
    ckpt_shard *refs = calloc((size_t)w, sizeof *refs);
    ckpt_shard **rp = calloc((size_t)w, sizeof *rp);
    uint64_t objbytes = 0;
    for (int r = 0; r < w; r++) {
      put_shard(s, dir, &d, r, w, &refs[r], &objbytes);
      rp[r] = &refs[r];
    }
    double t1 = now_s();
    ckpt_meta meta = {.run = "bench", .step = 1, .parent_step = -1, .world = w, .loss = 1.0};
    if (ckpt_store_commit(s, &meta, rp, w)) {
      fprintf(stderr, "bench_restore: commit at %d ranks: %s\n", w, ft_err_detail());
      return 1;
    }
    double t2 = now_s();
    char key[256], *val = NULL;
    size_t mlen = 0;
    ckpt_key_man(key, sizeof key, "bench", 1);
    if (ckpt_catalog_get(s->cat, key, &val, &mlen) == FT_OK)
      free(val);
    for (int i = 0; i < nzeros; i++)
      ckpt_shard_free(zeros[i].sh);
    nzeros = 0;
    ckpt_store_free(s);
    for (int r = 0; r < w; r++)
      free(refs[r].run);
    free(refs);
    free(rp);
    printf("%-8d %-34s %.1f s + commit %.2f s (%" PRIu64 " MB of shard objects; manifest %zu "
           "bytes)\n",
           w, "checkpoint written", t1 - t0, t2 - t1, objbytes / 1000000, mlen);
    /* one rank restores: the same world, then half of it */
    for (int half = 0; half < 2; half++) {
      int nw = half ? w / 2 : w, r = nw / 2 + 1;
      uint64_t mb = 0, cb = 0, own = 0;
      double secs = 0;
      if (restore(uri, &d, r, nw, 0, &mb, &cb, &own, &secs)) {
        fprintf(stderr, "bench_restore: restore of rank %d of %d: %s\n", r, nw, ft_err_detail());
        return 1;
      }
      char fig[64];
      snprintf(fig, sizeof fig, "rank %d of %d restores", r, nw);
      printf("%-8d %-34s %.2f MB read = %.3f MB metadata + %.2f MB chunks, %.2fx its shard, "
             "%.2f s (shard %.2f MB; target < 2x)\n",
             w, fig, (mb + cb) / 1e6, mb / 1e6, cb / 1e6, (double)(mb + cb) / (double)own, secs,
             own / 1e6);
    }
    /* the old path: every shard object */
    int r = w / 2 + 1;
    uint64_t mb = 0, cb = 0, own = 0;
    double secs = 0;
    if (w <= old_max) {
      if (restore(uri, &d, r, w, 1, &mb, &cb, &own, &secs)) {
        fprintf(stderr, "bench_restore: old restore of rank %d: %s\n", r, ft_err_detail());
        return 1;
      }
      printf("%-8d %-34s %.1f MB read = %.1f MB metadata + %.2f MB chunks, %.0fx its shard, "
             "%.1f s\n",
             w, "old path (every shard object)", (mb + cb) / 1e6, mb / 1e6, cb / 1e6,
             (double)(mb + cb) / (double)own, secs);
    } else {
      printf("%-8d %-34s %.1f MB of shard objects (their sizes, not read here)\n", w,
             "old path (every shard object)", objbytes / 1e6);
    }
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("BENCH_KEEP") && !strcmp(getenv("BENCH_KEEP"), "1"))
      printf("bench_restore: the store of %d ranks is kept: %s\n", w, uri);
    else if (system(cmd) != 0)
      fprintf(stderr, "bench_restore: could not remove %s\n", dir);
  }
  return 0;
}
