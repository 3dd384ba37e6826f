/*
 * ckpt_memory: the store's chunks kept in this process's memory
 * (ckpt_store_keep_in_memory), the nearest source a restore reads from.
 *
 * What: the writer (ckpt_writer.c) hands every chunk it hashes to
 * ckpt_mem_put, which keeps a copy of the raw bytes under its SHA-256;
 * ckpt_store_read asks ckpt_mem_get first and uses the bytes only if they
 * hash to the chunk's name again (memory can be damaged too: a mismatch is
 * counted and the chunk is read from the tier instead). Content addressing
 * makes this a cache without invalidation: a hash names its bytes forever.
 *
 * Bound: at most max_bytes of chunk bytes; the chunks put longest ago go
 * first (a put of bytes already kept refreshes them), so with max_bytes at
 * least twice a rank's snapshot the newest snapshot is always whole.
 *
 * Threads: one mutex; the copies in and out happen under it (chunks are a
 * few MiB, and puts come from the writer threads, gets from a restore).
 */
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_failpoint.h"

#include <stdlib.h>
#include <string.h>

typedef struct mem_chunk {
  uint8_t hash[CKPT_HASH_LEN];
  uint8_t *data;
  uint64_t len;
  uint64_t seq; /* when put (or put again) */
} mem_chunk;

struct ckpt_mem {
  pthread_mutex_t mu;
  mem_chunk *v;
  size_t n, cap;
  uint64_t bytes, max_bytes, seq;
  int64_t gets; /* chunks copied out (failpoint corrupt_memory_chunk) */
};

int ckpt_mem_new(uint64_t max_bytes, ckpt_mem **out) {
  ckpt_mem *m = calloc(1, sizeof *m);
  if (!m)
    return ft_err_set(FT_ENOMEM, "out of memory");
  pthread_mutex_init(&m->mu, NULL);
  m->max_bytes = max_bytes;
  *out = m;
  return FT_OK;
}

void ckpt_mem_free(ckpt_mem *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->n; i++)
    free(m->v[i].data);
  free(m->v);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

static mem_chunk *find_locked(ckpt_mem *m, const uint8_t *hash) {
  for (size_t i = 0; i < m->n; i++)
    if (memcmp(m->v[i].hash, hash, CKPT_HASH_LEN) == 0)
      return &m->v[i];
  return NULL;
}

/* Drops the chunk put longest ago. */
static void evict_locked(ckpt_mem *m) {
  size_t old = 0;
  for (size_t i = 1; i < m->n; i++)
    if (m->v[i].seq < m->v[old].seq)
      old = i;
  m->bytes -= m->v[old].len;
  free(m->v[old].data);
  m->v[old] = m->v[--m->n];
}

void ckpt_mem_put(ckpt_mem *m, const uint8_t *hash, const void *data, uint64_t len) {
  if (!m || len > m->max_bytes)
    return;
  pthread_mutex_lock(&m->mu);
  mem_chunk *c = find_locked(m, hash);
  if (c) {
    c->seq = ++m->seq;
    pthread_mutex_unlock(&m->mu);
    return;
  }
  while (m->n && m->bytes + len > m->max_bytes)
    evict_locked(m);
  uint8_t *copy = malloc(len ? len : 1);
  if (copy && m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    mem_chunk *v = realloc(m->v, cap * sizeof *v);
    if (!v) {
      free(copy);
      copy = NULL;
    } else {
      m->v = v;
      m->cap = cap;
    }
  }
  if (copy) { /* out of memory: this chunk is simply not kept */
    memcpy(copy, data, len);
    c = &m->v[m->n++];
    memcpy(c->hash, hash, CKPT_HASH_LEN);
    c->data = copy;
    c->len = len;
    c->seq = ++m->seq;
    m->bytes += len;
  }
  pthread_mutex_unlock(&m->mu);
}

int ckpt_mem_has(ckpt_mem *m, const uint8_t *hash, uint64_t len) {
  if (!m)
    return 0;
  pthread_mutex_lock(&m->mu);
  mem_chunk *c = find_locked(m, hash);
  int has = c && c->len == len;
  pthread_mutex_unlock(&m->mu);
  return has;
}

static int copy_out(ckpt_mem *m, const uint8_t *hash, void *dst, uint64_t len, int restore) {
  if (!m)
    return 0;
  pthread_mutex_lock(&m->mu);
  mem_chunk *c = find_locked(m, hash);
  int found = c && c->len == len;
  if (found) {
    memcpy(dst, c->data, len);
    int64_t nth; /* failpoint: the nth chunk a restore read from memory was damaged there */
    if (restore && ft_failpoint("corrupt_memory_chunk", &nth) && ++m->gets == nth && len)
      ((uint8_t *)dst)[len / 2] ^= 0x40;
  }
  pthread_mutex_unlock(&m->mu);
  return found;
}

int ckpt_mem_get(ckpt_mem *m, const uint8_t *hash, void *dst, uint64_t len) {
  return copy_out(m, hash, dst, len, 1);
}

int ckpt_mem_copy(ckpt_mem *m, const uint8_t *hash, void *dst, uint64_t len) {
  return copy_out(m, hash, dst, len, 0);
}
