/*
 * ckpt_testwriter: writes GPT-2-shaped checkpoints into a store, the way the
 * trainer does, for the ckpt integration tests (crash, corruption, CLI).
 *
 *   ckpt_testwriter --store URI [--run NAME] [--steps N] [--start S] [--every E]
 *                   [--world W] [--layers L] [--embd C] [--gc-keep K]
 *                   [--chunk-mib M] [--threads T] [--catalog DIR]
 *                   [--retry-file FILE] [--full-every N] [--gc-beside MS]
 *
 * For each checkpoint step: every rank r of W submits its FSDP slice of
 * every tensor ("param/<group>", "adam_m/<group>", "adam_v/<group>": weights-
 * like normals that drift from step to step; lnf stays constant so some
 * chunks are shared), the shards are awaited and committed together. After a
 * commit returns it prints "committed STEP" (flushed): the crash test checks
 * that every step it printed is in the catalog. With --gc-keep K it runs GC
 * (keep_last K, grace 0) after every commit, so a kill can land inside GC.
 * --catalog DIR puts the catalog there (opts.catalog_dir). --full-every N
 * writes delta chunks (opts.full_every: chains up to N-1 long). With --retry-file
 * FILE a failed step (submit, write or commit) prints "failed STEP: DETAIL"
 * and waits until FILE exists, deletes it and tries the step again, in the
 * same process with the same open store (at most 5 times in all): the
 * full-disk test frees space meanwhile. --gc-beside MS runs one GC
 * (keep_last: --gc-keep, else 100) on a thread of its own after the first
 * commit, as supervise's retention does, printing "gc started" before it and
 * "gc returned RC" after; the writer waits MS ms, then commits the other
 * steps beside it (s3_chaos G: a GC waiting for a bucket that is down must
 * not hold up commits with FT_S3_REQUIRE=local).
 * Exit: 0 done, 1 any library error (printed).
 */
#include "ckptstore.h"
#include "ft_err.h"
#include "ft_gpt2.h"

#include <getopt.h>
#include <pthread.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static float normal(uint64_t *s) {
  double u1 = ((rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
  double u2 = (rng_next(s) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static int die(int rc, const char *what) {
  fprintf(stderr, "ckpt_testwriter: %s: %s: %s\n", what, ft_strerror(rc), ft_err_detail());
  return 1;
}

typedef struct {
  ckpt_store *s;
  int keep;
} gc_beside;

static void *gc_beside_main(void *arg) {
  gc_beside *g = arg;
  ckpt_retention ret = {.keep_last = g->keep};
  printf("gc started\n");
  fflush(stdout);
  int rc = ckpt_store_gc(g->s, &ret, 0, NULL);
  printf("gc returned %d%s%s\n", rc, rc ? ": " : "", rc ? ft_err_detail() : "");
  fflush(stdout);
  return NULL;
}

int main(int argc, char **argv) {
  const char *store = NULL, *run = "testrun", *catalog = NULL, *retry_file = NULL;
  int retries = 0, gc_beside_ms = -1;
  pthread_t gc_th;
  gc_beside gcb = {0};
  int steps = 3, world = 1, gc_keep = 0, chunk_mib = 1, threads = 2, full_every = 0;
  int64_t start = 1, every = 1;
  ft_gpt2_dims d = {
      .max_seq_len = 64, .vocab_size = 256, .n_layer = 2, .n_head = 4, .channels = 64};
  static const struct option opts[] = {{"store", 1, 0, 's'},      {"run", 1, 0, 'r'},
                                       {"steps", 1, 0, 'n'},      {"start", 1, 0, 'b'},
                                       {"every", 1, 0, 'e'},      {"world", 1, 0, 'w'},
                                       {"layers", 1, 0, 'l'},     {"embd", 1, 0, 'c'},
                                       {"gc-keep", 1, 0, 'g'},    {"chunk-mib", 1, 0, 'm'},
                                       {"threads", 1, 0, 't'},    {"catalog", 1, 0, 'C'},
                                       {"retry-file", 1, 0, 'R'}, {"full-every", 1, 0, 'F'},
                                       {"gc-beside", 1, 0, 'G'},  {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's':
      store = optarg;
      break;
    case 'r':
      run = optarg;
      break;
    case 'n':
      steps = atoi(optarg);
      break;
    case 'b':
      start = atoll(optarg);
      break;
    case 'e':
      every = atoll(optarg);
      break;
    case 'w':
      world = atoi(optarg);
      break;
    case 'l':
      d.n_layer = atoi(optarg);
      break;
    case 'c':
      d.channels = atoi(optarg);
      break;
    case 'g':
      gc_keep = atoi(optarg);
      break;
    case 'm':
      chunk_mib = atoi(optarg);
      break;
    case 't':
      threads = atoi(optarg);
      break;
    case 'C':
      catalog = optarg;
      break;
    case 'R':
      retry_file = optarg;
      break;
    case 'F':
      full_every = atoi(optarg);
      break;
    case 'G':
      gc_beside_ms = atoi(optarg);
      break;
    default:
      fprintf(stderr, "usage: ckpt_testwriter --store URI [--run NAME] [--steps N] ...\n");
      return 2;
    }
  }
  if (!store || world < 1 || steps < 0) {
    fprintf(stderr, "ckpt_testwriter: --store is required; --world >= 1\n");
    return 2;
  }
  d.padded_vocab_size = ft_gpt2_pad_vocab(d.vocab_size);
  int ng = ft_gpt2_ngroups(&d);
  size_t np = ft_gpt2_num_params(&d);
  const char *kinds[3] = {"param", "adam_m", "adam_v"};
  float *state = malloc(3 * np * sizeof(float));
  ckpt_part *parts = calloc((size_t)3 * ng, sizeof *parts);
  char(*names)[64] = calloc((size_t)3 * ng, sizeof *names);
  ckpt_job **jobs = calloc((size_t)world, sizeof *jobs);
  ckpt_shard **shards = calloc((size_t)world, sizeof *shards);
  if (!state || !parts || !names || !jobs || !shards)
    return die(FT_ENOMEM, "alloc");
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < 3 * np; i++)
    state[i] = 0.02f * normal(&seed);
  char config[512];
  snprintf(config, sizeof config,
           "{\"model\":{\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,\"vocab_size\":%d,"
           "\"seq_len\":%d},\"train\":{\"lr\":0.0003}}",
           d.n_layer, d.n_head, d.channels, d.vocab_size, d.max_seq_len);

  ckpt_store *s = NULL;
  ckpt_store_opts o = {
      .chunk_mib = chunk_mib, .threads = threads, .catalog_dir = catalog, .full_every = full_every};
  int rc = ckpt_store_open(store, &o, &s);
  if (rc)
    return die(rc, "open");
  ckpt_store_set_gc_grace(s, 0);
  /* the crash test times its kill from this line, not from exec: the state
   * set-up above takes seconds under ASan on a loaded machine */
  printf("opened\n");
  fflush(stdout);
  int64_t parent = -1;
  for (int k = 0; k < steps; k++) {
    int64_t step = start + k * every;
    /* a "training step": everything but lnf drifts */
    size_t lnf = ft_gpt2_group_offset(&d, ng - 1);
    for (int kind = 0; kind < 3; kind++)
      for (size_t i = 0; i < lnf; i++)
        state[kind * np + i] += 0.001f * normal(&seed);
    for (int r = 0; r < world; r++) {
      int n = 0;
      for (int kind = 0; kind < 3; kind++)
        for (int g = 0; g < ng; g++) {
          char gn[32];
          size_t numel = ft_gpt2_group_numel(&d, g);
          size_t padded = (numel + (size_t)world - 1) / (size_t)world * (size_t)world;
          size_t S = padded / (size_t)world, a = (size_t)r * S;
          size_t b = a + S < numel ? a + S : numel;
          if (a >= b)
            continue;
          snprintf(names[n], sizeof names[0], "%s/%s", kinds[kind],
                   ft_gpt2_group_name(&d, g, gn, sizeof gn));
          parts[n] = (ckpt_part){.tensor = names[n],
                                 .dtype = "f32",
                                 .ndim = 1,
                                 .shape = {(int64_t)numel},
                                 .offset = a * 4,
                                 .len = (b - a) * 4,
                                 .data = state + kind * np + ft_gpt2_group_offset(&d, g) + a};
          n++;
        }
      rc = ckpt_store_submit(s, run, step, r, world, parts, n, &jobs[r]);
      if (rc && !retry_file)
        return die(rc, "submit");
      if (rc)
        break;
      /* parts/names are copied by submit; the data buffer is reused only
       * after every job released it (below) */
    }
    for (int r = 0; r < world; r++) {
      int rc2 = jobs[r] ? ckpt_job_wait(jobs[r], &shards[r]) : FT_OK;
      if (rc2 && !retry_file)
        return die(rc2, "wait");
      if (rc2 && !rc)
        rc = rc2;
      ckpt_job_free(jobs[r]);
      jobs[r] = NULL;
    }
    char metrics[128], st[128];
    double loss = 5.0 / (1.0 + 0.01 * (double)step);
    snprintf(metrics, sizeof metrics, "{\"loss\":%.6f}", loss);
    snprintf(st, sizeof st, "{\"data_pos\":%" PRId64 ",\"rng\":\"18446744073709551557\"}",
             step * 32);
    ckpt_meta meta = {.run = run,
                      .step = step,
                      .parent_step = parent,
                      .world = world,
                      .loss = loss,
                      .config_json = config,
                      .state_json = st,
                      .metrics_json = metrics};
    if (rc == FT_OK)
      rc = ckpt_store_commit(s, &meta, shards, world);
    for (int r = 0; r < world; r++) {
      ckpt_shard_free(shards[r]);
      shards[r] = NULL;
    }
    if (rc && retry_file && ++retries <= 5) {
      printf("failed %" PRId64 ": %s: %s\n", step, ft_strerror(rc), ft_err_detail());
      fflush(stdout);
      for (int w = 0; w < 1200 && access(retry_file, F_OK) != 0; w++)
        usleep(50000);
      unlink(retry_file);
      k--;
      continue;
    }
    if (rc)
      return die(rc, "commit");
    printf("committed %" PRId64 "\n", step);
    fflush(stdout);
    parent = step;
    if (gc_beside_ms >= 0 && !gcb.s) {
      gcb.s = s;
      gcb.keep = gc_keep > 0 ? gc_keep : 100;
      if (pthread_create(&gc_th, NULL, gc_beside_main, &gcb))
        return die(FT_ENOMEM, "gc thread");
      usleep((useconds_t)gc_beside_ms * 1000);
      continue;
    }
    if (gc_keep > 0) {
      ckpt_retention ret = {.keep_last = gc_keep};
      rc = ckpt_store_gc(s, &ret, 0, NULL);
      if (rc)
        return die(rc, "gc");
    }
  }
  if (gcb.s)
    pthread_join(gc_th, NULL);
  ckpt_store_free(s);
  free(state);
  free(parts);
  free(names);
  free(jobs);
  free(shards);
  return 0;
}
