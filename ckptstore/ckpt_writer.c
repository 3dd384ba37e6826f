/*
 * ckpt_writer: the asynchronous writer (ckpt_store_submit and ckpt_job_*).
 *
 * submit cuts every part into tasks of at most chunk_mib bytes and queues
 * them (FIFO) for a pool of opts->threads threads; it returns once every task
 * is queued. A thread takes a task and:
 *   1. hashes the raw bytes (SHA-256) -> the chunk's name;
 *   2. if the tier already has that chunk, freshens its timestamp (the GC
 *      protocol in ckpt_gc.c relies on it) and is done with the bytes;
 *      otherwise compresses them into its own memory;
 *   3. counts the task as "released": the caller's buffer is no longer read;
 *   4. writes the chunk object crash-safely (tier put), then counts the task
 *      as durable and records (offset, len, hash, stored size) in the job's
 *      shard manifest.
 * A job is released when all its tasks passed 3, done when all passed 4.
 * A memory-only job (ckpt_store_submit_memory) stops after step 1: the
 * chunk is kept in memory (ckpt_mem_put) and named, nothing is compressed or
 * written (stored size 0); it is done once every chunk is hashed.
 *
 * Back-pressure policy: the store bounds the raw bytes queued or being
 * processed (queue_bytes, default 1 GiB). submit blocks, before queueing a
 * task, while the bound would be exceeded and something is in flight (a task
 * larger than the bound still goes through alone). Nothing is dropped or
 * reordered; the caller of submit is the one who waits, so a trainer that
 * checkpoints faster than the disk can write slows down instead of growing
 * memory. Only step 4's completion frees space, so the bound also bounds the
 * compressed copies held by threads.
 *
 * Failure: the first error of a job is kept (with its detail text) and
 * reported by ckpt_job_wait; the job's remaining tasks are skipped (they
 * still release their bytes). Chunks already written stay: they are valid
 * and content-addressed, and GC removes them if nothing references them.
 *
 * Threads: s->mu guards the queue and the byte count; each job has its own
 * mutex for its counters; the shard's chunk slots are preallocated, each
 * written by exactly one task, and read only after the job is done.
 */
#include "ckpt_int.h"

#include "ft_err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ckpt_task {
  ckpt_job *job;
  int part, idx;
  const uint8_t *data;
  uint64_t offset, len;
  int esize;
  int delta;    /* 1: may be a delta against the base of its byte range */
  int lossy;    /* enum ckpt_lossy of its part */
  uint64_t gen; /* s->delta_gen when submitted */
  ckpt_task *next;
};

struct ckpt_job {
  ckpt_store *s;
  ckpt_shard *shard;
  int unreleased, pending;
  int rc;
  char err[512];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int taken;       /* shard handed out by ckpt_job_wait */
  int memory_only; /* ckpt_store_submit_memory: hash and keep, write nothing */
};

/* ---- delta bases ------------------------------------------------------------
 *
 * With full_every > 1, every chunk this handle writes (or finds already
 * written) is remembered under (run, rank, tensor, offset, len): its name,
 * a copy of its raw bytes and its chain. The chunk of the next shard for
 * the same range is encoded against it (ckpt_chunk_encode picks the delta
 * only when it is smaller; a chunk in a lossy form, its decoded values,
 * when that beats the form), unless that shard is one of the full ones (the
 * first of each full_every, counted per run and rank) or the base's chain
 * is already full_every - 1 long. An entry is replaced only once the new
 * chunk is durable, so a base is always a chunk in the tier; users hold a
 * reference while they encode against it. */

#define CKPT_DBASE_BUCKETS 4096

struct ckpt_dbase {
  ckpt_dbase *next;
  char *key;
  uint64_t h;
  uint8_t hash[CKPT_HASH_LEN];
  uint8_t *raw;
  uint64_t len;
  int depth;
  uint8_t *chain; /* depth names */
  int refs;       /* the table's (1 while in it) and encoders' */
  int64_t step;   /* of the shard that wrote or found it */
};

struct ckpt_dseq {
  ckpt_dseq *next;
  char *run;
  int rank;
  int64_t n; /* shards submitted since the last reset */
};

static uint64_t fnv(const char *k) {
  uint64_t h = 1469598103934665603ull;
  for (; *k; k++)
    h = (h ^ (uint8_t)*k) * 1099511628211ull;
  return h;
}

static char *dbase_key(const ckpt_job *j, const ckpt_task *t) {
  char *k = NULL;
  if (asprintf(&k, "%s/%d/%s/%" PRIu64 "+%" PRIu64, j->shard->run, j->shard->rank,
               j->shard->parts[t->part].name, t->offset, t->len) < 0)
    return NULL;
  return k;
}

static void dbase_unref_locked(ckpt_dbase *b) {
  if (b && --b->refs == 0) {
    free(b->key);
    free(b->raw);
    free(b->chain);
    free(b);
  }
}

static void dbase_unref(ckpt_store *s, ckpt_dbase *b) {
  if (!b)
    return;
  pthread_mutex_lock(&s->delta_mu);
  dbase_unref_locked(b);
  pthread_mutex_unlock(&s->delta_mu);
}

/* The base of key, referenced (dbase_unref when done), or NULL. */
static ckpt_dbase *dbase_get(ckpt_store *s, const char *key) {
  uint64_t h = fnv(key);
  ckpt_dbase *b = NULL;
  pthread_mutex_lock(&s->delta_mu);
  for (b = s->dbase ? s->dbase[h % CKPT_DBASE_BUCKETS] : NULL; b; b = b->next)
    if (b->h == h && !strcmp(b->key, key))
      break;
  if (b)
    b->refs++;
  pthread_mutex_unlock(&s->delta_mu);
  return b;
}

/* Installs n (taking it) as the base of its key, unless a reset happened
 * since gen; frees it otherwise. */
static void dbase_put(ckpt_store *s, ckpt_dbase *n, uint64_t gen) {
  n->h = fnv(n->key);
  n->refs = 1;
  pthread_mutex_lock(&s->delta_mu);
  if (!s->dbase)
    s->dbase = calloc(CKPT_DBASE_BUCKETS, sizeof *s->dbase);
  if (!s->dbase || gen != s->delta_gen) {
    dbase_unref_locked(n);
    pthread_mutex_unlock(&s->delta_mu);
    return;
  }
  ckpt_dbase **p = &s->dbase[n->h % CKPT_DBASE_BUCKETS];
  for (; *p; p = &(*p)->next)
    if ((*p)->h == n->h && !strcmp((*p)->key, n->key)) {
      ckpt_dbase *old = *p;
      n->next = old->next;
      *p = n;
      dbase_unref_locked(old);
      pthread_mutex_unlock(&s->delta_mu);
      return;
    }
  *p = n;
  pthread_mutex_unlock(&s->delta_mu);
}

/* Drops every base and counter; under delta_mu. */
static void dbase_clear_locked(ckpt_store *s) {
  for (int i = 0; s->dbase && i < CKPT_DBASE_BUCKETS; i++)
    while (s->dbase[i]) {
      ckpt_dbase *b = s->dbase[i];
      s->dbase[i] = b->next;
      dbase_unref_locked(b);
    }
  while (s->dseq) {
    ckpt_dseq *q = s->dseq;
    s->dseq = q->next;
    free(q->run);
    free(q);
  }
}

void ckpt_store_delta_reset(ckpt_store *s) {
  pthread_mutex_lock(&s->delta_mu);
  s->delta_gen++;
  dbase_clear_locked(s);
  pthread_mutex_unlock(&s->delta_mu);
}

void ckpt_delta_free(ckpt_store *s) {
  pthread_mutex_lock(&s->delta_mu);
  dbase_clear_locked(s);
  free(s->dbase);
  s->dbase = NULL;
  pthread_mutex_unlock(&s->delta_mu);
}

/* Counts a submit of (run, rank): 1 if its chunks may be deltas (it is not
 * one of the full ones), else 0. *gen: the reset generation it belongs to. */
static int dseq_next(ckpt_store *s, const char *run, int rank, uint64_t *gen) {
  int delta = 0;
  pthread_mutex_lock(&s->delta_mu);
  *gen = s->delta_gen;
  ckpt_dseq *q = s->dseq;
  while (q && (q->rank != rank || strcmp(q->run, run)))
    q = q->next;
  if (!q) {
    if ((q = calloc(1, sizeof *q)) && !(q->run = strdup(run))) {
      free(q);
      q = NULL;
    }
    if (q) {
      q->rank = rank;
      q->next = s->dseq;
      s->dseq = q;
    }
  }
  if (q) /* out of memory: no delta, which is always right */
    delta = q->n++ % s->full_every != 0;
  pthread_mutex_unlock(&s->delta_mu);
  return delta;
}

static void job_fail(ckpt_job *j, int rc) {
  pthread_mutex_lock(&j->mu);
  if (!j->rc) {
    j->rc = rc;
    snprintf(j->err, sizeof j->err, "%s", ft_err_detail());
  }
  pthread_mutex_unlock(&j->mu);
}

static void job_release(ckpt_job *j) {
  pthread_mutex_lock(&j->mu);
  j->unreleased--;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

/* The chain of a chunk already in the tier that this handle did not write
 * last (its object's header says it), into ref. */
static int chain_of_stored(ckpt_store *s, const char *key, ckpt_chunk_ref *ref) {
  uint8_t *obj = NULL;
  size_t objlen = 0;
  int depth = 0;
  const uint8_t *chain = NULL;
  int rc = s->tier->get(s->tier, key, &obj, &objlen);
  if (rc == FT_OK)
    rc = ckpt_chunk_chain(obj, objlen, &depth, &chain);
  if (rc == FT_OK && depth > 0) {
    if ((ref->chain = malloc((size_t)depth * CKPT_HASH_LEN)))
      memcpy(ref->chain, chain, (size_t)depth * CKPT_HASH_LEN);
    else
      rc = ft_err_set(FT_ENOMEM, "out of memory");
  }
  ref->depth = ref->chain ? depth : 0;
  free(obj);
  return rc;
}

/* 1 if base and every chunk of its chain are in the tier, each freshened
 * as a reused chunk is (the GC protocol, ckpt_gc.c): a delta is written only
 * on bases a concurrent GC will not sweep before the commit checks them. */
static int chain_present(ckpt_store *s, const ckpt_dbase *base) {
  for (int k = -1; k < base->depth; k++) {
    char hex[CKPT_HEX_LEN + 1], key[128];
    ckpt_hex(k < 0 ? base->hash : base->chain + (size_t)k * CKPT_HASH_LEN, hex);
    ckpt_objkey_chunk(key, sizeof key, hex);
    if (s->tier->exists(s->tier, key, 1, NULL, NULL) != FT_OK)
      return 0;
  }
  return 1;
}

static void run_task(ckpt_store *s, ckpt_task *t) {
  ckpt_job *j = t->job;
  ckpt_chunk_ref ref = {.offset = t->offset, .len = t->len};
  uint8_t *obj = NULL;
  size_t objlen = 0;
  int released = 0, rc;
  ckpt_dbase *base = NULL, *next = NULL; /* the base used; the one this chunk becomes */
  uint8_t *deq = NULL;                   /* a lossy chunk's bytes: what its form decodes to */
  const uint8_t *bytes = t->data;
  pthread_mutex_lock(&j->mu);
  int failed = j->rc != 0;
  pthread_mutex_unlock(&j->mu);
  if (failed)
    goto out;
  if (t->lossy && !j->memory_only) {
    if (!(deq = malloc(t->len ? t->len : 1))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory quantizing a chunk");
      goto fail;
    }
    rc = ckpt_chunk_encode_lossy(t->data, t->len, t->lossy, s->zstd_level, deq, &obj, &objlen);
    if (rc)
      goto fail;
    if (obj) /* else a value the form cannot hold: the chunk stays exact */
      bytes = deq;
  }
  rc = ckpt_sha256(bytes, t->len, ref.hash);
  if (rc)
    goto fail;
  ckpt_mem_put(s->mem, ref.hash, bytes, t->len); /* the nearest copy for a restore */
  if (j->memory_only) { /* done: the chunk lives in this process's memory */
    j->shard->parts[t->part].chunks[t->idx] = ref;
    goto out;
  }
  char hex[CKPT_HEX_LEN + 1], key[128];
  ckpt_hex(ref.hash, hex);
  ckpt_objkey_chunk(key, sizeof key, hex);
  if (s->full_every > 1 && ckpt_chunk_delta_ok(t->len, t->esize)) {
    /* this chunk will be the base of the next shard's: keep its bytes */
    next = calloc(1, sizeof *next);
    if (!next || !(next->key = dbase_key(j, t)) || !(next->raw = malloc(t->len))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory keeping a delta base");
      goto fail;
    }
    memcpy(next->raw, bytes, t->len);
    next->len = t->len;
    memcpy(next->hash, ref.hash, CKPT_HASH_LEN);
    next->step = j->shard->step;
    if (t->delta)
      base = dbase_get(s, next->key);
    if (base && (base->depth + 1 >= s->full_every || !chain_present(s, base))) {
      dbase_unref(s, base); /* its chain is as long as allowed, or gone: stand alone */
      base = NULL;
    }
  }
  uint64_t size = 0;
  rc = s->tier->exists(s->tier, key, 1, &size, NULL);
  if (rc == FT_OK) { /* idempotent: the same bytes are already stored */
    ref.stored = size;
    job_release(j);
    released = 1;
    free(obj); /* a lossy form made for nothing */
    obj = NULL;
    if (base && !memcmp(base->hash, ref.hash, CKPT_HASH_LEN)) { /* unchanged since */
      if (base->depth && !(ref.chain = malloc((size_t)base->depth * CKPT_HASH_LEN))) {
        rc = ft_err_set(FT_ENOMEM, "out of memory");
        goto fail;
      }
      if (base->depth)
        memcpy(ref.chain, base->chain, (size_t)base->depth * CKPT_HASH_LEN);
      ref.depth = base->depth;
    } else if ((rc = chain_of_stored(s, key, &ref))) {
      goto fail;
    }
  } else if (rc == FT_ENOENT) {
    uint8_t *chain = NULL;
    ckpt_chunk_base cb = {0};
    if (base) { /* the delta names the base, then the base's chain */
      cb.depth = base->depth + 1;
      cb.raw = base->raw;
      cb.chain = chain = malloc((size_t)cb.depth * CKPT_HASH_LEN);
      if (chain) {
        memcpy(chain, base->hash, CKPT_HASH_LEN);
        if (base->depth)
          memcpy(chain + CKPT_HASH_LEN, base->chain, (size_t)base->depth * CKPT_HASH_LEN);
      }
    }
    rc = FT_OK;
    if (!obj) {
      rc = ckpt_chunk_encode(t->data, t->len, t->esize, s->zstd_level, chain ? &cb : NULL, &obj,
                             &objlen);
    } else if (chain) { /* lossy: its decoded values as a delta on the base's, if smaller */
      uint8_t *dobj = NULL;
      size_t dlen = 0;
      rc = ckpt_chunk_encode(bytes, t->len, t->esize, s->zstd_level, &cb, &dobj, &dlen);
      if (rc == FT_OK && dlen < objlen) {
        free(obj);
        obj = dobj;
        objlen = dlen;
      } else {
        free(dobj);
      }
    }
    free(chain);
    job_release(j);
    released = 1;
    const uint8_t *oc = NULL;
    if (rc == FT_OK && (rc = ckpt_chunk_chain(obj, objlen, &ref.depth, &oc)) == FT_OK &&
        ref.depth > 0) {
      if ((ref.chain = malloc((size_t)ref.depth * CKPT_HASH_LEN)))
        memcpy(ref.chain, oc, (size_t)ref.depth * CKPT_HASH_LEN);
      else
        rc = ft_err_set(FT_ENOMEM, "out of memory");
    }
    if (rc)
      goto fail;
    rc = s->tier->put(s->tier, key, obj, objlen);
    if (rc)
      goto fail;
    ref.stored = objlen;
    pthread_mutex_lock(&j->mu); /* the shard's totals (ckpt_store_put_shard) */
    j->shard->sum.new_bytes += objlen;
    if (ref.depth > 0 && base && base->step > j->shard->sum.base_step)
      j->shard->sum.base_step = base->step;
    pthread_mutex_unlock(&j->mu);
  } else {
    goto fail;
  }
  if (s->tier->sync && (rc = s->tier->sync(s->tier, key)) != FT_OK)
    goto fail;
  if (next) { /* durable: the base of this range from now on */
    next->depth = ref.depth;
    if (ref.depth && (next->chain = malloc((size_t)ref.depth * CKPT_HASH_LEN)))
      memcpy(next->chain, ref.chain, (size_t)ref.depth * CKPT_HASH_LEN);
    if (!ref.depth || next->chain) { /* else out of memory: no base here */
      dbase_put(s, next, t->gen);
      next = NULL;
    }
  }
  j->shard->parts[t->part].chunks[t->idx] = ref;
  ref.chain = NULL; /* the shard's now */
  goto out;
fail:
  job_fail(j, ckpt_err_wrap(rc, "writing %s bytes %" PRIu64 "..%" PRIu64 " (rank %d)",
                            j->shard->parts[t->part].name, t->offset, t->offset + t->len,
                            j->shard->rank));
out:
  free(ref.chain);
  free(obj);
  free(deq);
  dbase_unref(s, base);
  if (next) {
    next->refs = 1;
    dbase_unref(s, next);
  }
  if (!released)
    job_release(j);
  pthread_mutex_lock(&j->mu);
  j->pending--;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void *pool_main(void *arg) {
  ckpt_store *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stopping)
      pthread_cond_wait(&s->cv_work, &s->mu);
    if (!s->head)
      break;
    ckpt_task *t = s->head;
    s->head = t->next;
    if (!s->head)
      s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    uint64_t len = t->len;
    run_task(s, t);
    free(t);
    pthread_mutex_lock(&s->mu);
    s->inflight_bytes -= len;
    pthread_cond_broadcast(&s->cv_space);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int ckpt_writer_start(ckpt_store *s) {
  s->pool = calloc((size_t)s->threads, sizeof *s->pool);
  if (!s->pool)
    return ft_err_set(FT_ENOMEM, "out of memory");
  for (int i = 0; i < s->threads; i++) {
    if (pthread_create(&s->pool[i], NULL, pool_main, s) != 0) {
      ckpt_writer_stop(s);
      return ft_err_set(FT_ENOMEM, "cannot start writer thread %d", i);
    }
    s->nthreads_started++;
  }
  return FT_OK;
}

void ckpt_writer_stop(ckpt_store *s) {
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < s->nthreads_started; i++)
    pthread_join(s->pool[i], NULL);
  s->nthreads_started = 0;
}

static void job_destroy(ckpt_job *j) {
  ckpt_shard_free(j->shard);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j);
}

static int submit(ckpt_store *s, const char *run, int64_t step, int rank, int world,
                  const ckpt_part *parts, int nparts, int memory_only, ckpt_job **out) {
  *out = NULL;
  if (memory_only && !s->mem)
    return ft_err_set(FT_ESTATE, "a memory-only checkpoint needs the store's memory "
                                 "(ckpt_store_keep_in_memory)");
  if (s->read_only && !s->shard_writer)
    return ft_err_set(FT_ESTATE, "submit: the store is open read-only");
  if (!ckpt_run_name_ok(run))
    return ft_err_set(FT_EINVAL, "submit: bad run name '%s' (1-127 of letters, digits, . _ -)",
                      run ? run : "(null)");
  if (world < 1 || rank < 0 || rank >= world || nparts < 0 || (nparts > 0 && !parts))
    return ft_err_set(FT_EINVAL, "submit: bad rank %d / world %d / %d parts", rank, world, nparts);
  uint64_t chunk = (uint64_t)s->chunk_mib << 20;
  int ntasks = 0;
  for (int i = 0; i < nparts; i++) {
    const ckpt_part *p = &parts[i];
    uint64_t nb = p->tensor ? ckpt_tensor_nbytes(p->dtype, p->ndim, p->shape) : 0;
    if (!p->tensor || !p->tensor[0] || !ckpt_dtype_size(p->dtype) || p->ndim < 0 ||
        p->ndim > CKPT_MAX_DIMS)
      return ft_err_set(FT_EINVAL, "submit: part %d: missing name, unknown dtype '%s' or bad ndim",
                        i, p->dtype ? p->dtype : "(null)");
    if (p->lossy < CKPT_EXACT || p->lossy > CKPT_LOSSY_Q8LOG ||
        (p->lossy && strcmp(p->dtype, "f32") != 0))
      return ft_err_set(FT_EINVAL, "submit: part %d (%s): a lossy form (%d) is for f32 only", i,
                        p->tensor, p->lossy);
    if (p->offset > nb || p->len > nb - p->offset || (p->len && !p->data))
      return ft_err_set(FT_EINVAL,
                        "submit: part %d (%s): bytes [%" PRIu64 ", %" PRIu64
                        ") do not fit the tensor's %" PRIu64 " bytes",
                        i, p->tensor, p->offset, p->offset + p->len, nb);
    ntasks += (int)((p->len + chunk - 1) / chunk);
  }
  ckpt_job *j = calloc(1, sizeof *j);
  ckpt_shard *sh = calloc(1, sizeof *sh);
  if (!j || !sh) {
    free(j);
    free(sh);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->s = s;
  sh->sum.base_step = -1;
  j->shard = sh;
  j->memory_only = memory_only;
  sh->run = strdup(run);
  sh->step = step;
  sh->rank = rank;
  sh->world = world;
  sh->parts = calloc((size_t)(nparts ? nparts : 1), sizeof *sh->parts);
  if (!sh->run || !sh->parts)
    goto nomem;
  for (int i = 0; i < nparts; i++) {
    const ckpt_part *p = &parts[i];
    ckpt_tensor *t = &sh->parts[sh->nparts++];
    int n = (int)((p->len + chunk - 1) / chunk);
    if (!(t->name = strdup(p->tensor)))
      goto nomem;
    snprintf(t->dtype, sizeof t->dtype, "%s", p->dtype);
    t->ndim = p->ndim;
    memcpy(t->shape, p->shape, sizeof t->shape);
    t->offset = p->offset;
    t->len = p->len;
    t->lossy = memory_only ? CKPT_EXACT : p->lossy;
    t->chunks = calloc((size_t)(n ? n : 1), sizeof *t->chunks);
    if (!t->chunks)
      goto nomem;
    t->nchunks = t->cap = n;
  }
  uint64_t gen = 0;
  int delta = !memory_only && s->full_every > 1 && dseq_next(s, run, rank, &gen);
  j->unreleased = j->pending = ntasks;
  for (int i = 0; i < nparts; i++) {
    const ckpt_part *p = &parts[i];
    int esize = ckpt_dtype_is_float(p->dtype) ? ckpt_dtype_size(p->dtype) : 1;
    for (uint64_t off = 0, k = 0; off < p->len; off += chunk, k++) {
      ckpt_task *t = calloc(1, sizeof *t);
      if (!t) {
        /* the tasks not queued count as failed, so the job still finishes */
        job_fail(j, ft_err_set(FT_ENOMEM, "out of memory queueing a checkpoint"));
        int left = 0;
        for (int a = i; a < nparts; a++)
          for (uint64_t o = (a == i ? off : 0); o < parts[a].len; o += chunk)
            left++;
        pthread_mutex_lock(&j->mu);
        j->unreleased -= left;
        j->pending -= left;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        *out = j;
        return FT_OK;
      }
      t->job = j;
      t->part = i;
      t->idx = (int)k;
      t->offset = p->offset + off;
      t->len = p->len - off < chunk ? p->len - off : chunk;
      t->data = (const uint8_t *)p->data + off;
      t->esize = esize;
      t->delta = delta;
      t->gen = gen;
      t->lossy = memory_only ? CKPT_EXACT : p->lossy;
      pthread_mutex_lock(&s->mu);
      while (s->inflight_bytes > 0 && s->inflight_bytes + t->len > s->queue_bytes)
        pthread_cond_wait(&s->cv_space, &s->mu);
      s->inflight_bytes += t->len;
      if (s->tail)
        s->tail->next = t;
      else
        s->head = t;
      s->tail = t;
      pthread_cond_signal(&s->cv_work);
      pthread_mutex_unlock(&s->mu);
    }
  }
  *out = j;
  return FT_OK;
nomem:
  job_destroy(j);
  return ft_err_set(FT_ENOMEM, "out of memory");
}

int ckpt_store_submit(ckpt_store *s, const char *run, int64_t step, int rank, int world,
                      const ckpt_part *parts, int nparts, ckpt_job **out) {
  return submit(s, run, step, rank, world, parts, nparts, 0, out);
}

int ckpt_store_submit_memory(ckpt_store *s, const char *run, int64_t step, int rank, int world,
                             const ckpt_part *parts, int nparts, ckpt_job **out) {
  return submit(s, run, step, rank, world, parts, nparts, 1, out);
}

int ckpt_job_released(ckpt_job *j, int wait) {
  pthread_mutex_lock(&j->mu);
  while (wait && j->unreleased > 0)
    pthread_cond_wait(&j->cv, &j->mu);
  int r = j->unreleased <= 0;
  pthread_mutex_unlock(&j->mu);
  return r;
}

int ckpt_job_done(ckpt_job *j) {
  pthread_mutex_lock(&j->mu);
  int r = j->pending <= 0;
  pthread_mutex_unlock(&j->mu);
  return r;
}

int ckpt_job_wait(ckpt_job *j, ckpt_shard **shard) {
  if (shard)
    *shard = NULL;
  pthread_mutex_lock(&j->mu);
  while (j->pending > 0)
    pthread_cond_wait(&j->cv, &j->mu);
  int rc = j->rc;
  pthread_mutex_unlock(&j->mu);
  if (rc)
    return ft_err_set(rc, "%s", j->err);
  if (shard) {
    if (j->taken)
      return ft_err_set(FT_ESTATE, "ckpt_job_wait: the shard was already handed out");
    *shard = j->shard;
    j->shard = NULL;
    j->taken = 1;
  }
  return FT_OK;
}

void ckpt_job_free(ckpt_job *j) {
  if (!j)
    return;
  pthread_mutex_lock(&j->mu);
  while (j->pending > 0)
    pthread_cond_wait(&j->cv, &j->mu);
  pthread_mutex_unlock(&j->mu);
  job_destroy(j);
}
