/*
 * test_ckpt_util.h: helpers shared by the ckptstore unit tests (header-only,
 * static functions): temp store folders and the store set-up and tear-down,
 * deterministic weights-like data,
 * one-call "write a checkpoint", counting chunk files.
 */
#ifndef TEST_CKPT_UTIL_H
#define TEST_CKPT_UTIL_H

#include "ckpt_int.h"
#include "ft_err.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline char *tu_tmpdir(void) {
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char *p = malloc(4096);
  snprintf(p, 4096, "%s/ckpt_test_XXXXXX", base);
  if (!mkdtemp(p))
    abort();
  return p;
}

static inline char *tu_uri(const char *dir) {
  char *u = malloc(4200);
  snprintf(u, 4200, "local:%s/store", dir);
  return u;
}

static inline void tu_rmrf(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

/* The set-up of every store test: a fresh temp folder (*dir), its local:
 * URI (*uri) and the store opened there with o (NULL: the defaults) (*s).
 * Returns ckpt_store_open's code; *dir and *uri are set even then, so
 * tu_store_close still cleans up. */
static inline int tu_store_open(char **dir, char **uri, ckpt_store **s, const ckpt_store_opts *o) {
  *dir = tu_tmpdir();
  *uri = tu_uri(*dir);
  *s = NULL;
  return ckpt_store_open(*uri, o, s);
}

/* The tear-down: frees the store (NULL is fine), removes the folder and
 * frees the two strings. */
static inline void tu_store_close(char *dir, char *uri, ckpt_store *s) {
  ckpt_store_free(s);
  tu_rmrf(dir);
  free(dir);
  free(uri);
}

static inline uint64_t tu_rng(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Weights-like fp32: normals with standard deviation 0.02. */
static inline void tu_fill(float *v, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; i++) {
    double u1 = ((tu_rng(&s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (tu_rng(&s) >> 11) / 9007199254740992.0;
    v[i] = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

static inline ckpt_part tu_part(const char *name, const float *data, size_t numel, size_t first,
                                size_t count) {
  ckpt_part p = {.tensor = name,
                 .dtype = "f32",
                 .ndim = 1,
                 .shape = {(int64_t)numel},
                 .offset = first * 4,
                 .len = count * 4,
                 .data = data + first};
  return p;
}

/* Submits parts as one rank of a world-1 checkpoint and commits it; memory:
 * as a memory-level one (hashed and kept in memory, nothing written) that
 * names memory epoch `epoch` (0: none; ckpt_meta.memory_epoch). */
static inline int tu_commit_epoch(ckpt_store *s, const char *run, int64_t step,
                                  const ckpt_part *parts, int n, int memory, uint64_t epoch) {
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  int rc = memory ? ckpt_store_submit_memory(s, run, step, 0, 1, parts, n, &j)
                  : ckpt_store_submit(s, run, step, 0, 1, parts, n, &j);
  if (rc)
    return rc;
  rc = ckpt_job_wait(j, &sh);
  ckpt_job_free(j);
  if (rc)
    return rc;
  ckpt_meta m = {.run = run,
                 .step = step,
                 .parent_step = -1,
                 .world = 1,
                 .loss = 1.0 / (double)(step + 1),
                 .level = memory ? CKPT_LEVEL_MEMORY : CKPT_LEVEL_DURABLE,
                 .memory_epoch = epoch};
  rc = ckpt_store_commit(s, &m, &sh, 1);
  ckpt_shard_free(sh);
  return rc;
}

/* tu_commit_epoch without an epoch. */
static inline int tu_commit_at(ckpt_store *s, const char *run, int64_t step, const ckpt_part *parts,
                               int n, int memory) {
  return tu_commit_epoch(s, run, step, parts, n, memory, 0);
}

static inline int tu_commit(ckpt_store *s, const char *run, int64_t step, const ckpt_part *parts,
                            int n) {
  return tu_commit_at(s, run, step, parts, n, 0);
}

static inline int tu_count_chunks(const char *dir) {
  char path[4200];
  int n = 0;
  for (int i = 0; i < 256; i++) {
    snprintf(path, sizeof path, "%s/store/chunks/%02x", dir, i);
    DIR *d = opendir(path);
    if (!d)
      continue;
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.')
        n++;
    closedir(d);
  }
  return n;
}

static inline void tu_chunk_path(const char *dir, const uint8_t *hash, char *out, size_t n) {
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(hash, hex);
  snprintf(out, n, "%s/store/chunks/%.2s/%s", dir, hex, hex);
}

static inline int tu_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Flips one byte of a file at offset off. */
static inline void tu_flip(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  if (!f)
    abort();
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

/* Damages chunk c of tensor t of the store in dir: one byte flipped in the
 * middle of its file (0 on success, -1 if the file is not there). */
static inline int tu_damage_chunk(const char *dir, const ckpt_tensor *t, int c) {
  char path[4300];
  struct stat sb;
  tu_chunk_path(dir, t->chunks[c].hash, path, sizeof path);
  if (stat(path, &sb) != 0)
    return -1;
  tu_flip(path, (long)sb.st_size / 2);
  return 0;
}

#endif
