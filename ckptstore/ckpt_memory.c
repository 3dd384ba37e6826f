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
 * Buffers: a chunk evicted leaves its buffer on a short free list, and a
 * put of the same length takes it back (ckpt_mem_buffer), so a checkpoint
 * every step does not map and fault in fresh pages for every chunk. A put
 * copies into its buffer outside the lock; ckpt_mem_adopt takes a buffer
 * already filled (a replica received straight into it) without a copy.
 *
 * Threads: one mutex; copies out happen under it (chunks are a few MiB, and
 * puts come from the writer threads and the replica server, gets from a
 * restore or a push).
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

#define MEM_SPARES 4 /* evicted buffers kept for reuse */

struct ckpt_mem {
  pthread_mutex_t mu;
  mem_chunk *v;
  size_t n, cap;
  uint8_t *spare[MEM_SPARES];
  uint64_t spare_len[MEM_SPARES];
  int nspare;
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
  for (int i = 0; i < m->nspare; i++)
    free(m->spare[i]);
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

/* A buffer no longer needed: onto the free list, or freed. */
static void spare_locked(ckpt_mem *m, uint8_t *buf, uint64_t len) {
  if (m->nspare == MEM_SPARES) {
    free(m->spare[0]);
    memmove(m->spare, m->spare + 1, (MEM_SPARES - 1) * sizeof *m->spare);
    memmove(m->spare_len, m->spare_len + 1, (MEM_SPARES - 1) * sizeof *m->spare_len);
    m->nspare--;
  }
  m->spare[m->nspare] = buf;
  m->spare_len[m->nspare++] = len;
}

/* Drops the chunk put longest ago. */
static void evict_locked(ckpt_mem *m) {
  size_t old = 0;
  for (size_t i = 1; i < m->n; i++)
    if (m->v[i].seq < m->v[old].seq)
      old = i;
  m->bytes -= m->v[old].len;
  spare_locked(m, m->v[old].data, m->v[old].len);
  m->v[old] = m->v[--m->n];
}

uint8_t *ckpt_mem_buffer(ckpt_mem *m, uint64_t len) {
  if (m) {
    pthread_mutex_lock(&m->mu);
    for (int i = m->nspare; i-- > 0;)
      if (m->spare_len[i] == len) {
        uint8_t *b = m->spare[i];
        m->spare[i] = m->spare[--m->nspare];
        m->spare_len[i] = m->spare_len[m->nspare];
        pthread_mutex_unlock(&m->mu);
        return b;
      }
    pthread_mutex_unlock(&m->mu);
  }
  return malloc(len ? len : 1);
}

void ckpt_mem_release(ckpt_mem *m, uint8_t *buf, uint64_t len) {
  if (!m) {
    free(buf);
    return;
  }
  pthread_mutex_lock(&m->mu);
  spare_locked(m, buf, len);
  pthread_mutex_unlock(&m->mu);
}

void ckpt_mem_adopt(ckpt_mem *m, const uint8_t *hash, uint8_t *buf, uint64_t len) {
  if (!m || len > m->max_bytes) {
    free(buf);
    return;
  }
  pthread_mutex_lock(&m->mu);
  mem_chunk *c = find_locked(m, hash);
  if (c) { /* kept already (another copy raced this one in) */
    c->seq = ++m->seq;
    spare_locked(m, buf, len);
    pthread_mutex_unlock(&m->mu);
    return;
  }
  while (m->n && m->bytes + len > m->max_bytes)
    evict_locked(m);
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    mem_chunk *v = realloc(m->v, cap * sizeof *v);
    if (!v) { /* out of memory: this chunk is simply not kept */
      pthread_mutex_unlock(&m->mu);
      free(buf);
      return;
    }
    m->v = v;
    m->cap = cap;
  }
  c = &m->v[m->n++];
  memcpy(c->hash, hash, CKPT_HASH_LEN);
  c->data = buf;
  c->len = len;
  c->seq = ++m->seq;
  m->bytes += len;
  pthread_mutex_unlock(&m->mu);
}

void ckpt_mem_put(ckpt_mem *m, const uint8_t *hash, const void *data, uint64_t len) {
  if (!m || len > m->max_bytes)
    return;
  pthread_mutex_lock(&m->mu);
  mem_chunk *c = find_locked(m, hash);
  if (c)
    c->seq = ++m->seq;
  pthread_mutex_unlock(&m->mu);
  if (c)
    return;
  uint8_t *copy = ckpt_mem_buffer(m, len);
  if (!copy) /* out of memory: this chunk is simply not kept */
    return;
  memcpy(copy, data, len); /* outside the lock */
  ckpt_mem_adopt(m, hash, copy, len);
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
