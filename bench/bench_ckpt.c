/*
 * bench_ckpt: checkpoint store throughput beside the disk's and zstd's own.
 *
 *   bench_ckpt [DIR]      (default ./ckpt_bench.tmp; env CKPT_BENCH_MIB=1024)
 *
 * One fp32 state of CKPT_BENCH_MIB MiB (weights-like normals, sd 0.02, cut
 * into 64 MiB tensors), measured in the same run on the same disk:
 *   plain write+fsync and plain read of the bytes (page cache dropped);
 *   `zstd -1` (the CLI) on a file of the same bytes;
 *   ckpt save (submit -> durable -> committed) with 1 and 2 writer threads;
 *   ckpt restore (every byte read back and hash-verified; cache dropped).
 * Prints a table; exit 0 unless something fails. Not a test: no assertions
 * on speed (CTest label "bench").
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
#include <sys/stat.h>
#include <unistd.h>

#define TENSOR_MIB 64

static void fill(float *v, size_t n) {
  uint64_t s = 0x243f6a8885a308d3ULL;
  for (size_t i = 0; i + 1 < n; i += 2) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u2 = (s >> 11) / 9007199254740992.0;
    double r = 0.02 * sqrt(-2.0 * log(u1));
    v[i] = (float)(r * cos(6.283185307179586 * u2));
    v[i + 1] = (float)(r * sin(6.283185307179586 * u2));
  }
}

static uint64_t tree_bytes(const char *dir) {
  DIR *d = opendir(dir);
  uint64_t n = 0;
  if (!d)
    return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &st) == 0)
      n += S_ISDIR(st.st_mode) ? tree_bytes(p) : (uint64_t)st.st_size;
  }
  closedir(d);
  return n;
}

static void row(const char *what, double bytes, double secs, const char *note) {
  printf("%-34s %9.2f s %10.1f MiB/s   %s\n", what, secs, bytes / secs / (1 << 20), note);
}

static int die(int rc, const char *what) {
  fprintf(stderr, "bench_ckpt: %s: %s: %s\n", what, ft_strerror(rc), ft_err_detail());
  return 1;
}

static int save(const char *dir, int threads, const float *state, size_t bytes, double *secs,
                double *release_secs, uint64_t *stored) {
  char uri[4300], path[4200];
  snprintf(path, sizeof path, "%s/store_t%d", dir, threads);
  snprintf(uri, sizeof uri, "local:%s", path);
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.threads = threads, .chunk_mib = 4, .zstd_level = 1};
  int rc = ckpt_store_open(uri, &o, &s);
  if (rc)
    return die(rc, "open");
  int nt = (int)(bytes / ((size_t)TENSOR_MIB << 20));
  ckpt_part *parts = calloc((size_t)nt, sizeof *parts);
  char(*names)[32] = calloc((size_t)nt, sizeof *names);
  size_t per = ((size_t)TENSOR_MIB << 20) / 4;
  for (int i = 0; i < nt; i++) {
    snprintf(names[i], sizeof names[0], "param/g%d", i);
    parts[i] = (ckpt_part){.tensor = names[i],
                           .dtype = "f32",
                           .ndim = 1,
                           .shape = {(int64_t)per},
                           .offset = 0,
                           .len = per * 4,
                           .data = state + (size_t)i * per};
  }
  double t0 = ft_now_s();
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  rc = ckpt_store_submit(s, "bench", 1, 0, 1, parts, nt, &j);
  if (rc)
    return die(rc, "submit");
  ckpt_job_released(j, 1);
  *release_secs = ft_now_s() - t0;
  rc = ckpt_job_wait(j, &sh);
  if (rc)
    return die(rc, "wait");
  ckpt_meta m = {.run = "bench", .step = 1, .parent_step = -1, .world = 1, .loss = NAN};
  rc = ckpt_store_commit(s, &m, &sh, 1);
  if (rc)
    return die(rc, "commit");
  *secs = ft_now_s() - t0;
  ckpt_info *v = NULL;
  size_t n = 0;
  ckpt_store_list(s, "bench", &v, &n);
  *stored = n ? v[0].stored_bytes : 0;
  free(v);
  ckpt_shard_free(sh);
  ckpt_job_free(j);
  ckpt_store_free(s);
  free(parts);
  free(names);
  return 0;
}

static int restore(const char *dir, int threads, const float *state, size_t bytes, float *out,
                   double *secs) {
  char uri[4300], path[4200];
  snprintf(path, sizeof path, "%s/store_t%d", dir, threads);
  snprintf(uri, sizeof uri, "local:%s", path);
  bench_drop_cache_tree(path);
  ckpt_store *s = NULL;
  ckpt_store_opts o = {.read_only = 1, .threads = threads};
  double t0 = ft_now_s();
  int rc = ckpt_store_open(uri, &o, &s);
  if (rc)
    return die(rc, "open");
  ckpt_manifest *m = NULL;
  rc = ckpt_store_load(s, "bench", 1, &m);
  if (rc)
    return die(rc, "load");
  size_t per = ((size_t)TENSOR_MIB << 20) / 4;
  for (int i = 0; i < ckpt_manifest_ntensors(m); i++) {
    char name[32];
    snprintf(name, sizeof name, "param/g%d", i);
    rc = ckpt_store_read(s, m, name, 0, per * 4, out + (size_t)i * per);
    if (rc)
      return die(rc, "read");
  }
  *secs = ft_now_s() - t0;
  ckpt_manifest_free(m);
  ckpt_store_free(s);
  if (memcmp(out, state, bytes) != 0) {
    fprintf(stderr, "bench_ckpt: restored bytes differ\n");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "ckpt_bench.tmp";
  size_t mib = getenv("CKPT_BENCH_MIB") ? strtoul(getenv("CKPT_BENCH_MIB"), NULL, 10) : 1024;
  mib = mib < TENSOR_MIB ? TENSOR_MIB : mib / TENSOR_MIB * TENSOR_MIB;
  size_t bytes = mib << 20;
  char cmd[9000], file[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  if (system(cmd) != 0)
    return 1;
  float *state = malloc(bytes), *out = malloc(bytes);
  if (!state || !out)
    return 1;
  double t = ft_now_s();
  fill(state, bytes / 4);
  printf("bench_ckpt: %zu MiB fp32 state (normals, sd 0.02; generated in %.1f s) in %s\n\n", mib,
         ft_now_s() - t, dir);
  printf("%-34s %11s %16s   %s\n", "what", "time", "throughput", "note");

  /* plain sequential write + fsync, then read with a cold cache */
  snprintf(file, sizeof file, "%s/plain.bin", dir);
  t = ft_now_s();
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t off = 0; off < bytes;) {
    ssize_t w = write(fd, (char *)state + off, bytes - off < (8u << 20) ? bytes - off : (8u << 20));
    if (w <= 0)
      return 1;
    off += (size_t)w;
  }
  fsync(fd);
  close(fd);
  row("plain write + fsync", (double)bytes, ft_now_s() - t, "");
  bench_drop_cache_file(file);
  t = ft_now_s();
  fd = open(file, O_RDONLY);
  for (size_t off = 0; off < bytes;) {
    ssize_t r = read(fd, (char *)out + off, bytes - off);
    if (r <= 0)
      return 1;
    off += (size_t)r;
  }
  close(fd);
  row("plain read (cold cache)", (double)bytes, ft_now_s() - t, "");

  /* zstd -1 CLI on the same bytes (file cached: it measures the codec) */
  snprintf(cmd, sizeof cmd, "zstd -1 -q -f '%s' -o '%s.zst'", file, file);
  t = ft_now_s();
  int zrc = system(cmd);
  double zs = ft_now_s() - t;
  if (zrc == 0) {
    char zf[4300], note[64];
    struct stat st;
    snprintf(zf, sizeof zf, "%s.zst", file);
    stat(zf, &st);
    snprintf(note, sizeof note, "ratio %.3f (raw/zst)", (double)bytes / (double)st.st_size);
    row("zstd -1 (CLI, 1 thread)", (double)bytes, zs, note);
    unlink(zf);
  } else {
    printf("%-34s   (zstd CLI not available)\n", "zstd -1");
  }
  unlink(file);

  for (int threads = 1; threads <= 2; threads++) {
    double secs, rel, rs;
    uint64_t stored = 0;
    if (save(dir, threads, state, bytes, &secs, &rel, &stored))
      return 1;
    char what[64], note[128];
    snprintf(what, sizeof what, "ckpt save, %d writer thread%s", threads, threads > 1 ? "s" : "");
    char sp[4200];
    snprintf(sp, sizeof sp, "%s/store_t%d/chunks", dir, threads);
    snprintf(note, sizeof note, "ratio %.3f; buffers released after %.2f s; %.0f MiB on disk",
             (double)bytes / (double)stored, rel, (double)tree_bytes(sp) / (1 << 20));
    row(what, (double)bytes, secs, note);
    if (restore(dir, threads, state, bytes, out, &rs))
      return 1;
    snprintf(what, sizeof what, "ckpt restore, %d thread%s", threads, threads > 1 ? "s" : "");
    row(what, (double)bytes, rs, "cold cache, every chunk hash-verified");
    snprintf(cmd, sizeof cmd, "rm -rf '%s/store_t%d'", dir, threads);
    if (system(cmd) != 0)
      return 1;
  }
  printf("\n(throughput = logical bytes / wall time; cores on this machine: %ld)\n",
         sysconf(_SC_NPROCESSORS_ONLN));
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    return 1;
  free(state);
  free(out);
  return 0;
}
