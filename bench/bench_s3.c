/*
 * bench_s3: throughput of the S3 tier against an S3-protocol server, and the
 * number of requests per checkpoint. Driven by bench_s3.sh, which starts the
 * server, creates the bucket and times `aws s3 cp` of the same file.
 *
 *   bench_s3 object FILE s3://bucket/key     one object: PUT (multipart above
 *                                            FT_S3_MULTIPART_MIB) then GET
 *   bench_s3 ckpt FILE s3://bucket/prefix    FILE's bytes as one f32 tensor,
 *                                            checkpointed (4 MiB chunks,
 *                                            FT_S3_REQUIRE=both) then read
 *                                            back from an empty cache
 * Prints one line per measurement: what, MiB, seconds, MiB/s, requests.
 */
#include "ckpt_int.h"
#include "ckpt_s3.h"
#include "ft_clock.h"
#include "ft_err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int die(int rc, const char *what) {
  fprintf(stderr, "bench_s3: %s: %s: %s\n", what, ft_strerror(rc), ft_err_detail());
  return 1;
}

static void line(const char *what, size_t bytes, double s, uint64_t req) {
  double mib = (double)bytes / 1048576.0;
  printf("%-44s %9.1f MiB %8.2f s %9.1f MiB/s %7llu requests\n", what, mib, s, mib / s,
         (unsigned long long)req);
  fflush(stdout);
}

static int object(uint8_t *data, size_t n, const char *uri) {
  ckpt_s3_config cfg;
  int rc = ckpt_s3_config_from_uri(uri, &cfg);
  if (rc)
    return die(rc, "config");
  ckpt_s3_client *c = NULL;
  if ((rc = ckpt_s3_client_new(&cfg, &c)))
    return die(rc, "client");
  ckpt_s3_config_wipe(&cfg);
  const char *key = ckpt_s3_client_config(c)->prefix;
  ckpt_s3_stats a, b;
  ckpt_s3_client_stats(c, &a);
  double t0 = ft_now_s();
  if ((rc = ckpt_s3_client_put(c, key, data, n, 0)))
    return die(rc, "put");
  double t1 = ft_now_s();
  ckpt_s3_client_stats(c, &b);
  line("ftckpt client PUT (one object)", n, t1 - t0, b.requests - a.requests);
  uint8_t *back = NULL;
  size_t bn = 0;
  t0 = ft_now_s();
  if ((rc = ckpt_s3_client_get(c, key, &back, &bn, 0)))
    return die(rc, "get");
  t1 = ft_now_s();
  ckpt_s3_client_stats(c, &a);
  line("ftckpt client GET (one object)", bn, t1 - t0, a.requests - b.requests);
  int same = bn == n && memcmp(back, data, n) == 0;
  free(back);
  ckpt_s3_client_free(c);
  if (!same) {
    fprintf(stderr, "bench_s3: GET returned different bytes\n");
    return 1;
  }
  return 0;
}

static int ckpt(uint8_t *data, size_t n, const char *uri, const char *cache2) {
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.chunk_mib = 4, .threads = 4};
  int rc = ckpt_store_open(uri, &o, &s);
  if (rc)
    return die(rc, "open");
  ckpt_tier_stats a, b;
  ckpt_store_tier_stats(s, &a);
  size_t nf = n / 4;
  ckpt_part p = {.tensor = "param/w",
                 .dtype = "f32",
                 .ndim = 1,
                 .shape = {(int64_t)nf},
                 .offset = 0,
                 .len = nf * 4,
                 .data = data};
  double t0 = ft_now_s();
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  if ((rc = ckpt_store_submit(s, "bench", 1, 0, 1, &p, 1, &j)))
    return die(rc, "submit");
  ckpt_job_released(j, 1);
  double tr = ft_now_s();
  if ((rc = ckpt_job_wait(j, &sh)))
    return die(rc, "wait");
  double tl = ft_now_s();
  ckpt_job_free(j);
  ckpt_meta m = {.run = "bench", .step = 1, .parent_step = -1, .world = 1, .loss = NAN};
  if ((rc = ckpt_store_commit(s, &m, &sh, 1)))
    return die(rc, "commit");
  double t1 = ft_now_s();
  ckpt_shard_free(sh);
  ckpt_store_tier_stats(s, &b);
  printf("  (trainer blocked %.2f s until its buffer was released; shard in the cache after "
         "%.2f s; %llu MiB uploaded)\n",
         tr - t0, tl - t0, (unsigned long long)((b.bytes_up - a.bytes_up) >> 20));
  line("ftckpt checkpoint, submit -> commit (both)", nf * 4, t1 - t0, b.requests - a.requests);
  ckpt_store_free(s);

  setenv("FT_S3_CACHE", cache2, 1);
  s = NULL;
  ckpt_store_opts ro = {.read_only = 1, .threads = 4};
  t0 = ft_now_s();
  if ((rc = ckpt_store_open(uri, &ro, &s)))
    return die(rc, "open from the bucket");
  ckpt_manifest *man = NULL;
  if ((rc = ckpt_store_load(s, "bench", 1, &man)))
    return die(rc, "load");
  uint8_t *back = malloc(nf * 4);
  if (!back)
    return die(FT_ENOMEM, "malloc");
  if ((rc = ckpt_store_read(s, man, "param/w", 0, nf * 4, back)))
    return die(rc, "read");
  t1 = ft_now_s();
  ckpt_store_tier_stats(s, &a);
  line("ftckpt restore from the bucket (empty cache)", nf * 4, t1 - t0, a.requests);
  int same = memcmp(back, data, nf * 4) == 0;
  free(back);
  ckpt_manifest_free(man);
  ckpt_store_free(s);
  if (!same) {
    fprintf(stderr, "bench_s3: restored bytes differ\n");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_s3 object|ckpt FILE s3://bucket/key [CACHE2]\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f)
    return die(FT_ENOENT, argv[2]);
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(n ? n : 1);
  if (!data || fread(data, 1, n, f) != n)
    return die(FT_EIO, "read the file");
  fclose(f);
  int r = !strcmp(argv[1], "object") ? object(data, n, argv[3])
                                     : ckpt(data, n, argv[3], argc > 4 ? argv[4] : "/tmp/c2");
  free(data);
  return r;
}
