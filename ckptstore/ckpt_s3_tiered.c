/*
 * ckpt_s3_tiered: the tier of an "s3://bucket/prefix" store: a local cache
 * directory (the fast tier, a ckpt_tier_local) in front of the bucket (a
 * ckpt_tier_s3), with background uploads and repair in both directions.
 *
 * Why: training must never wait for the network, yet a checkpoint must be
 * able to survive the loss of the machine. So chunks are written to the
 * cache (durable on return, as the local tier promises) and queued for
 * upload by this tier's own threads; the writer pool, and the trainer
 * behind it, never touch S3. What "durable" means for a commit is
 * cfg.require_both:
 *
 *   both   the manifest put (commit step C4, ckpt_commit.c) blocks until
 *          every chunk the manifest names is in the bucket (uploaded now, or
 *          found there) and then puts the manifest object; only then does
 *          the commit reach its catalog write. If S3 stays down past the
 *          retry budget the put fails, and so does the commit (reported).
 *   local  the manifest is journaled (<cache>/uploads/<key with '!' for
 *          '/'>, fsynced) before its local put and uploaded in the
 *          background, retried with backoff until it succeeds, also by the
 *          next process that opens the store writable.
 *
 * Invariants:
 *   B1 a manifest object reaches the bucket only after every chunk it names
 *      is in the bucket (upload_manifest: ensure each chunk, then put), so
 *      the bucket alone always holds whole checkpoints: rebuild-catalog
 *      never lists one that cannot be restored.
 *   B2 a chunk is uploaded only after its cache copy decoded and hashed to
 *      its name; a bucket chunk is never overwritten (If-None-Match: *)
 *      except by a repair, which first proved the bucket copy missing or
 *      bad and the cache copy good.
 *   B3 get("chunks/...") returns bytes that hash to the name whenever either
 *      tier has such bytes: cache first, bucket second; a bad or missing
 *      cache copy is replaced by the bucket's (repaired_local). With scrub
 *      on (ckpt verify), the bucket copy is also read and re-uploaded from
 *      the cache when missing or bad (repaired_remote).
 *   B3b get of a mark object (manifests/.../STEP.mark) asks the bucket
 *      first, the cache when the bucket has none: marks are set by any host.
 *   B4 GC timestamps are the cache's: exists/freshen/now go to the cache;
 *      del_if_older deletes from the bucket what it deletes from the cache,
 *      and bucket-only chunks by their LastModified.
 *   B5 FT_S3_CACHE_PER_HOST=1 (each host its own cache, e.g. on node-local
 *      disk; the supervisor commits from another host): a writer's chunk is
 *      durable only once it is in the bucket (td_sync), and exists, also
 *      with freshen, falls back to the bucket when the cache lacks the key.
 *      A bucket-only chunk cannot be freshened; the commit that names it
 *      and a GC never run at once (one catalog writer, and a commit and a
 *      GC both hold the store's meta lock).
 *
 * Threads: cfg.upload_threads uploaders (writable stores only) take keys
 * from a FIFO. mu guards the queue, the "pending" set (queued or in flight)
 * and the "known" set (confirmed in the bucket by this process). A thread
 * that must ensure a chunk that is still queued takes it out of the queue
 * and uploads it itself, so a manifest upload never waits on a queue that
 * no thread serves. Close waits up to cfg.drain_s for the queue to empty,
 * then abandons the requests in flight (ckpt_s3_client_cancel: it does not
 * wait out their retries); what is left is journaled (manifests) or re-checked when a manifest that
 * names it is uploaded (chunks).
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h):
 *   S1 the queue (check_queue, under mu, wherever it changes and where
 *      flush and the stats read it): head and tail agree, a store without
 *      upload threads (read-only) queues nothing, and every queued key is
 *      K_QUEUED in pending (the first CHECK_WALK of them);
 *   B1 a manifest object is put in the bucket only after this process
 *      ensured every object it names, as many as it names (upload_manifest:
 *      check_manifest_ensured);
 *   B2 every put of a content-addressed object to the bucket goes through
 *      put_remote_object, which checks the bytes are sound for the name
 *      (chunk_ok, again) and that only a repair overwrites (no
 *      CKPT_S3_CREATE_ONLY) (check_put).
 * B3-B5 are which tier each operation asks, not state this file keeps:
 * they are not asserted here (tested in s3_store, s3_gc_safety).
 */
#include "ckpt_s3.h"

#include "ckpt_hashset.h"
#include "ckpt_int.h"
#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- key states in the ckpt_hashset sets ------------------------------------ */

enum { K_QUEUED = 1, K_INFLIGHT = 2, K_KNOWN = 3 };

/* ---- the tier ------------------------------------------------------------------ */

typedef struct item {
  struct item *next;
  int fails;
  char key[];
} item;

typedef struct tiered {
  ckpt_tier t;
  ckpt_tier *local, *remote;
  ckpt_s3_config cfg; /* secrets wiped: the client has its own copy */
  int writable;
  char journal[PATH_MAX + 16];
  char desc[PATH_MAX + 1024];

  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done, cv_stop;
  item *head, *tail;
  ckpt_hashset pending; /* K_QUEUED / K_INFLIGHT */
  ckpt_hashset known;   /* K_KNOWN: in the bucket */
  int stopping;
  pthread_t *th;
  int nth;
  int scrub;
  char last_err[512];
  uint64_t uploads_done, uploads_failed, repaired_local, repaired_remote;
} tiered;

/* Content-addressed objects: chunks, and shard objects (their JSON text
 * named by its SHA-256), uploaded and checked alike. */
static int is_chunk(const char *key) {
  return ckpt_objkey_chunk_name(key) != NULL || ckpt_objkey_shard_name(key) != NULL;
}
/* Manifests and their mark objects: journaled and retried until uploaded. */
static int is_manifest(const char *key) {
  return ckpt_objkey_in_manifests(key);
}

/* 1 if obj is a sound chunk object for the key's name: one that stands
 * alone decodes to bytes of that hash; a delta's seal matches (its bytes
 * need its base, which is checked as a chunk of its own). */
static int chunk_ok(const char *key, const uint8_t *obj, size_t len) {
  uint8_t h[CKPT_HASH_LEN];
  uint8_t got[CKPT_HASH_LEN];
  if (ckpt_unhex(key + 7, h) != FT_OK) /* "chunks/" and "shards/" are both 7 long */
    return 0;
  if (ckpt_objkey_shard_name(key))
    return ckpt_sha256(obj, len, got) == FT_OK && memcmp(got, h, CKPT_HASH_LEN) == 0;
  return ckpt_chunk_check_alone(obj, len, h) == FT_OK;
}

#if FT_INVARIANTS_ON
/* How many queued keys S1 looks at. */
#define CHECK_WALK 64

/* S1 (mu held) */
static void check_queue(tiered *td) {
  FT_ASSERT_INV(!td->head == !td->tail && (!td->tail || !td->tail->next),
                "S1: upload queue head %p, tail %p", (void *)td->head, (void *)td->tail);
  FT_ASSERT_INV(td->nth || (!td->head && !td->pending.n),
                "S1: %zu uploads pending on a store with no upload threads (queue %s)",
                td->pending.n, td->head ? td->head->key : "empty");
  FT_ASSERT_INV(td->writable || !td->nth, "S1: %d upload threads on a read-only store", td->nth);
  int n = 0;
  for (const item *it = td->head; it && n < CHECK_WALK; it = it->next, n++) {
    const int *st = ckpt_hashset_get(&td->pending, it->key, strlen(it->key));
    FT_ASSERT_INV(st && *st == K_QUEUED, "S1: queued %s is %s in pending", it->key,
                  !st                 ? "absent"
                  : *st == K_INFLIGHT ? "in flight"
                                      : "known");
  }
}

/* B1: just before the put of manifest key, every object it names (n of
 * them: chunks with their chains, or shard objects) was ensured. */
static void check_manifest_ensured(const char *key, const ckpt_manifest *m, int ensured) {
  int n = m->nobjs + m->nnodes;
  for (int t = 0; t < m->ntensors; t++)
    for (int c = 0; c < m->tensors[t].nchunks; c++)
      n += 1 + m->tensors[t].chunks[c].depth;
  FT_ASSERT_INV(ensured == n, "B1: %s put in the bucket with %d of its %d objects ensured there",
                key, ensured, n);
}

/* B2: a content-addressed object goes up sound; only a repair overwrites */
static void check_put(const char *key, const void *obj, size_t len, int flags, int repair) {
  FT_ASSERT_INV(is_chunk(key), "B2: %s put as a chunk, and is none", key);
  FT_ASSERT_INV(chunk_ok(key, obj, len), "B2: %s put in the bucket with bytes not of its name",
                key);
  FT_ASSERT_INV(repair || (flags & CKPT_S3_CREATE_ONLY),
                "B2: %s put over the bucket's copy without a repair", key);
}
#else
static void check_queue(tiered *td) {}
static void check_manifest_ensured(const char *key, const ckpt_manifest *m, int ensured) {}
static void check_put(const char *key, const void *obj, size_t len, int flags, int repair) {}
#endif

/* Every put of a chunk or shard object into the bucket (B2); repair: the
 * bucket's copy was proved missing or bad and obj good (scrub_remote). */
static int put_remote_object(tiered *td, const char *key, const void *obj, size_t len, int flags,
                             int repair) {
  check_put(key, obj, len, flags, repair);
  return ckpt_tier_s3_put_flags(td->remote, key, obj, len, flags);
}

static void journal_path(tiered *td, const char *key, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s/", td->journal);
  for (const char *p = key; *p && (size_t)w + 1 < n; p++)
    buf[w++] = *p == '/' ? '!' : *p;
  buf[w] = 0;
}

static int fsync_path(const char *path, int dir) {
  int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0)
    return ft_err_set(ft_err_from_errno(errno), "open %s: %s", path, strerror(errno));
  int rc = fsync(fd) == 0
               ? FT_OK
               : ft_err_set(ft_err_from_errno(errno), "fsync %s: %s", path, strerror(errno));
  close(fd);
  return rc;
}

static int journal_add(tiered *td, const char *key) {
  char p[PATH_MAX + 600];
  journal_path(td, key, p, sizeof p);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return ft_err_set(ft_err_from_errno(errno), "create %s: %s", p, strerror(errno));
  int rc = fsync(fd) == 0
               ? FT_OK
               : ft_err_set(ft_err_from_errno(errno), "fsync %s: %s", p, strerror(errno));
  close(fd);
  return rc ? rc : fsync_path(td->journal, 1);
}

static void journal_del(tiered *td, const char *key) {
  char p[PATH_MAX + 600];
  journal_path(td, key, p, sizeof p);
  if (unlink(p) == 0)
    fsync_path(td->journal, 1);
}

/* Under mu: queue key unless it is pending or known. */
static int enqueue_locked(tiered *td, const char *key, int force) {
  check_queue(td);
  if (!td->nth)
    return FT_OK;
  if (ckpt_hashset_has(&td->pending, key, strlen(key)))
    return FT_OK;
  if (!force && ckpt_hashset_has(&td->known, key, strlen(key)))
    return FT_OK;
  size_t l = strlen(key);
  item *it = calloc(1, sizeof *it + l + 1);
  if (!it)
    return ft_err_set(FT_ENOMEM, "out of memory");
  memcpy(it->key, key, l + 1);
  int rc = ckpt_hashset_put(&td->pending, key, strlen(key), K_QUEUED);
  if (rc) {
    free(it);
    return rc;
  }
  if (td->tail)
    td->tail->next = it;
  else
    td->head = it;
  td->tail = it;
  check_queue(td);
  pthread_cond_signal(&td->cv_work);
  return FT_OK;
}

static void finish_locked(tiered *td, const char *key, int rc) {
  ckpt_hashset_del(&td->pending, key, strlen(key));
  if (rc == FT_OK) {
    ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
    td->uploads_done++;
  } else {
    td->uploads_failed++;
    snprintf(td->last_err, sizeof td->last_err, "%s: %s", key, ft_err_detail());
  }
  check_queue(td);
  pthread_cond_broadcast(&td->cv_done);
}

/* Uploads one chunk from the cache (B2). create-only: 412 is success. */
static int upload_chunk(tiered *td, const char *key) {
  uint8_t *obj = NULL;
  size_t len = 0;
  int rc = td->local->get(td->local, key, &obj, &len);
  if (rc)
    return ckpt_err_wrap(rc, "upload of %s: no cache copy", key);
  if (!chunk_ok(key, obj, len)) {
    free(obj);
    return ft_err_set(FT_ECORRUPT, "upload of %s refused: the cache copy is damaged", key);
  }
  rc = put_remote_object(td, key, obj, len, CKPT_S3_CREATE_ONLY, 0);
  free(obj);
  return rc == FT_EEXIST ? FT_OK : rc;
}

/* Makes sure chunk key is in the bucket: waits for an in-flight upload of
 * it, takes a queued one out of the queue and does it here, or (not
 * pending, not known) asks the bucket and uploads when it is absent. */
static int ensure_remote(tiered *td, const char *key) {
  int mine = 0;
  pthread_mutex_lock(&td->mu);
  for (;;) {
    int *state = ckpt_hashset_get(&td->pending, key, strlen(key));
    if (!state)
      break;
    if (*state == K_QUEUED) {
      for (item **p = &td->head, *prev = NULL; *p; prev = *p, p = &(*p)->next)
        if (!strcmp((*p)->key, key)) {
          item *it = *p;
          *p = it->next;
          if (td->tail == it)
            td->tail = prev;
          free(it);
          break;
        }
      *state = K_INFLIGHT;
      mine = 1;
      check_queue(td);
      break;
    }
    pthread_cond_wait(&td->cv_done, &td->mu);
  }
  int known = ckpt_hashset_has(&td->known, key, strlen(key));
  pthread_mutex_unlock(&td->mu);
  if (known && !mine)
    return FT_OK;
  int rc = FT_OK;
  if (!mine) {
    rc = td->remote->exists(td->remote, key, 0, NULL, NULL);
    if (rc == FT_OK) {
      pthread_mutex_lock(&td->mu);
      ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
      pthread_mutex_unlock(&td->mu);
      return FT_OK;
    }
    if (rc != FT_ENOENT)
      return rc;
  }
  rc = upload_chunk(td, key);
  pthread_mutex_lock(&td->mu);
  if (mine)
    finish_locked(td, key, rc);
  else if (rc == FT_OK)
    ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
  pthread_mutex_unlock(&td->mu);
  return rc;
}

/* B1: every chunk of the manifest (and every base its deltas need) first,
 * then the manifest object. */
static int upload_manifest(tiered *td, const char *key, const char *json) {
  if (ckpt_objkey_manifest_step(key, NULL) != 0) /* a mark object: names no chunks */
    return ckpt_tier_s3_put_flags(td->remote, key, json, strlen(json), 0);
  ckpt_manifest *m = NULL;
  /* format 2: its shard objects from the cache, or from the bucket where
   * another host's worker put them (FT_S3_CACHE_PER_HOST) */
  int rc = ckpt_manifest_read(&td->t, json, &m);
  if (rc)
    return ckpt_err_wrap(rc, "upload of %s", key);
  int ensured = 0;                                    /* B1 */
  for (int i = 0; i < m->nobjs && rc == FT_OK; i++) { /* format 2: its shard objects too */
    char sk[128];
    ckpt_objkey_shard(sk, sizeof sk, m->objs[i].hash);
    rc = ensure_remote(td, sk);
    ensured += rc == FT_OK;
  }
  for (int i = 0; i < m->nnodes && rc == FT_OK; i++) { /* format 3: its index, the root last */
    char sk[128];
    ckpt_objkey_shard(sk, sizeof sk, m->nodes[i]);
    rc = ensure_remote(td, sk);
    ensured += rc == FT_OK;
  }
  for (int t = 0; t < m->ntensors && rc == FT_OK; t++)
    for (int c = 0; c < m->tensors[t].nchunks && rc == FT_OK; c++) {
      const ckpt_chunk_ref *r = &m->tensors[t].chunks[c];
      for (int k = -1; k < r->depth && rc == FT_OK; k++) { /* the chunk, then its chain */
        char hex[CKPT_HEX_LEN + 1], ck[128];
        ckpt_hex(k < 0 ? r->hash : r->chain + (size_t)k * CKPT_HASH_LEN, hex);
        ckpt_objkey_chunk(ck, sizeof ck, hex);
        rc = ensure_remote(td, ck);
        ensured += rc == FT_OK;
      }
    }
  if (rc == FT_OK)
    check_manifest_ensured(key, m, ensured);
  ckpt_manifest_free(m);
  if (rc)
    return ckpt_err_wrap(rc, "manifest %s not uploaded (a chunk of it is not in the bucket)", key);
  return ckpt_tier_s3_put_flags(td->remote, key, json, strlen(json), 0);
}

/* A background upload of key (chunk, manifest or other). */
static int upload_key(tiered *td, const char *key) {
  if (is_chunk(key))
    return upload_chunk(td, key);
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = td->local->get(td->local, key, &data, &len);
  if (rc == FT_ENOENT && is_manifest(key)) {
    journal_del(td, key); /* a commit that never wrote its manifest */
    return FT_OK;
  }
  if (rc)
    return rc;
  if (is_manifest(key)) {
    char *js = ckpt_text(data, len);
    if (!js) {
      free(data);
      return FT_ENOMEM;
    }
    rc = upload_manifest(td, key, js);
    free(js);
    if (rc == FT_OK)
      journal_del(td, key);
  } else {
    rc = ckpt_tier_s3_put_flags(td->remote, key, data, len, 0);
  }
  free(data);
  return rc;
}

static void *uploader(void *arg) {
  tiered *td = arg;
  pthread_mutex_lock(&td->mu);
  for (;;) {
    while (!td->head && !td->stopping)
      pthread_cond_wait(&td->cv_work, &td->mu);
    if (td->stopping)
      break;
    item *it = td->head;
    td->head = it->next;
    if (!td->head)
      td->tail = NULL;
    it->next = NULL;
    ckpt_hashset_put(&td->pending, it->key, strlen(it->key), K_INFLIGHT);
    check_queue(td);
    pthread_mutex_unlock(&td->mu);
    int rc = upload_key(td, it->key);
    pthread_mutex_lock(&td->mu);
    if (rc && is_manifest(it->key) && !td->stopping) {
      /* manifests are retried until they get there (B1 keeps it safe) */
      td->uploads_failed++;
      snprintf(td->last_err, sizeof td->last_err, "%s: %s", it->key, ft_err_detail());
      it->fails++;
      int shift = it->fails < 5 ? it->fails : 5;
      struct timespec ts = ft_wall_deadline(1000LL << shift); /* 2, 4, ... 32 s */
      pthread_cond_timedwait(&td->cv_stop, &td->mu, &ts);
      if (!td->stopping) {
        ckpt_hashset_put(&td->pending, it->key, strlen(it->key), K_QUEUED);
        if (td->tail)
          td->tail->next = it;
        else
          td->head = it;
        td->tail = it;
        check_queue(td);
        pthread_cond_broadcast(&td->cv_done);
        continue;
      }
      ckpt_hashset_del(&td->pending, it->key, strlen(it->key));
      pthread_cond_broadcast(&td->cv_done);
      free(it);
      continue;
    }
    finish_locked(td, it->key, rc);
    free(it);
  }
  pthread_mutex_unlock(&td->mu);
  return NULL;
}

/* ---- tier operations ------------------------------------------------------------- */

static int td_put(ckpt_tier *t, const char *key, const void *data, size_t len) {
  tiered *td = (tiered *)t;
  int rc;
  if (is_manifest(key) && td->cfg.require_both) {
    rc = td->local->put(td->local, key, data, len);
    if (rc)
      return rc;
    char *js = ckpt_text(data, len);
    if (!js)
      return FT_ENOMEM;
    rc = upload_manifest(td, key, js);
    free(js);
    if (rc)
      return ckpt_err_wrap(rc, "not durable in the bucket (FT_S3_REQUIRE=both)");
    pthread_mutex_lock(&td->mu);
    ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
    td->uploads_done++;
    pthread_mutex_unlock(&td->mu);
    return FT_OK;
  }
  if (is_manifest(key) && td->nth) {
    rc = journal_add(td, key);
    if (rc)
      return rc;
  }
  rc = td->local->put(td->local, key, data, len);
  if (rc)
    return rc;
  if (td->nth) {
    pthread_mutex_lock(&td->mu);
    rc = enqueue_locked(td, key, !is_chunk(key));
    pthread_mutex_unlock(&td->mu);
  }
  return rc;
}

/* Scrub: the bucket's copy of a chunk whose cache copy (obj) is good. */
static int scrub_remote(tiered *td, const char *key, const uint8_t *obj, size_t len) {
  uint8_t *r = NULL;
  size_t rl = 0;
  int rc = td->remote->get(td->remote, key, &r, &rl);
  int bad = rc == FT_ENOENT || (rc == FT_OK && !chunk_ok(key, r, rl));
  free(r);
  if (rc && rc != FT_ENOENT)
    return rc;
  if (!bad)
    return FT_OK;
  rc = put_remote_object(td, key, obj, len, 0, 1); /* B2: the repair */
  if (rc)
    return ckpt_err_wrap(rc, "repairing the bucket's copy of %s", key);
  pthread_mutex_lock(&td->mu);
  td->repaired_remote++;
  ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
  pthread_mutex_unlock(&td->mu);
  return FT_OK;
}

static int td_get(ckpt_tier *t, const char *key, uint8_t **data, size_t *len) {
  tiered *td = (tiered *)t;
  uint8_t *lo = NULL, *ro = NULL;
  size_t ll = 0, rl = 0;
  *data = NULL;
  *len = 0;
  size_t kl = strlen(key);
  if (is_manifest(key) && kl > 5 && strcmp(key + kl - 5, ".mark") == 0) {
    /* a mark object (a pin, a GOOD or BAD state) is read from the bucket
     * first: another host may have set it since this cache's copy, and gc
     * (ckpt_gc.c G2a) and a rebuild follow it. The cache's copy only when
     * the bucket has none (its upload still journaled). */
    int rc = td->remote->get(td->remote, key, data, len);
    return rc == FT_ENOENT ? td->local->get(td->local, key, data, len) : rc;
  }
  int lrc = td->local->get(td->local, key, &lo, &ll);
  if (!is_chunk(key)) {
    if (lrc != FT_ENOENT) {
      *data = lo;
      *len = ll;
      return lrc;
    }
    int rc = td->remote->get(td->remote, key, &ro, &rl);
    if (rc == FT_OK && is_manifest(key))
      td->local->put(td->local, key, ro, rl); /* cache it; a failure is harmless */
    *data = ro;
    *len = rl;
    return rc;
  }
  if (lrc == FT_OK && chunk_ok(key, lo, ll)) {
    if (td->scrub) {
      int rc = scrub_remote(td, key, lo, ll);
      if (rc) {
        free(lo);
        return rc;
      }
    }
    *data = lo;
    *len = ll;
    return FT_OK;
  }
  if (lrc != FT_OK && lrc != FT_ENOENT)
    lo = NULL; /* an I/O error on the cache: try the bucket all the same */
  int rrc = td->remote->get(td->remote, key, &ro, &rl);
  if (rrc == FT_OK && chunk_ok(key, ro, rl)) {
    /* B3: repair the cache from the bucket */
    if (lrc == FT_OK)
      td->local->del(td->local, key);
    int prc = td->local->put(td->local, key, ro, rl);
    pthread_mutex_lock(&td->mu);
    if (prc == FT_OK)
      td->repaired_local++;
    ckpt_hashset_put(&td->known, key, strlen(key), K_KNOWN);
    pthread_mutex_unlock(&td->mu);
    free(lo);
    *data = ro;
    *len = rl;
    return FT_OK;
  }
  if (rrc != FT_OK && rrc != FT_ENOENT) {
    /* the bucket cannot be asked: no verdict on the chunk */
    free(lo);
    return ckpt_err_wrap(rrc, "%s is %s in the cache and the bucket cannot be read", key,
                         lrc == FT_OK ? "damaged" : "missing");
  }
  /* no good copy anywhere: hand back a damaged one so the caller's hash check
   * names it corrupt, or say it is missing */
  if (lrc == FT_OK) {
    free(ro);
    *data = lo;
    *len = ll;
    return FT_OK;
  }
  if (rrc == FT_OK) {
    *data = ro;
    *len = rl;
    return FT_OK;
  }
  return ft_err_set(FT_ENOENT, "%s is in neither the cache %s nor the bucket", key,
                    td->local->desc);
}

static int td_exists(ckpt_tier *t, const char *key, int freshen, uint64_t *size, int64_t *mtime) {
  tiered *td = (tiered *)t;
  int rc = td->local->exists(td->local, key, freshen, size, mtime);
  if (rc != FT_ENOENT || (freshen && !td->cfg.cache_per_host))
    return rc; /* B4: writers and commits look at the cache only */
  /* B5: with a cache on each host, a chunk another host wrote is only in
   * the bucket (its writer synced it there before its shard counted) */
  return td->remote->exists(td->remote, key, 0, size, mtime);
}

/* B5 (FT_S3_CACHE_PER_HOST=1): a chunk counts as durable once it is in the
 * bucket, since the process that commits (the supervisor, on another host)
 * sees only its own cache and the bucket. The uploads of a shard's chunks
 * then run on the writer's threads (the trainer still does not wait: the
 * writer pool is asynchronous), bounded by the S3 retry budget. */
static int td_sync(ckpt_tier *t, const char *key) {
  tiered *td = (tiered *)t;
  if (!td->cfg.cache_per_host || !is_chunk(key))
    return FT_OK;
  return ensure_remote(td, key);
}

static int td_del(ckpt_tier *t, const char *key) {
  tiered *td = (tiered *)t;
  int lrc = td->local->del(td->local, key);
  int rrc = td->remote->del(td->remote, key);
  pthread_mutex_lock(&td->mu);
  ckpt_hashset_del(&td->known, key, strlen(key));
  pthread_mutex_unlock(&td->mu);
  if (lrc && lrc != FT_ENOENT)
    return lrc;
  if (rrc && rrc != FT_ENOENT)
    return rrc;
  return lrc == FT_OK || rrc == FT_OK ? FT_OK : FT_ENOENT;
}

static int td_del_if_older(ckpt_tier *t, const char *key, int64_t cutoff_ns, uint64_t *freed) {
  tiered *td = (tiered *)t;
  int rc = td->local->del_if_older(td->local, key, cutoff_ns, freed);
  if (rc == FT_EEXIST || (rc && rc != FT_ENOENT))
    return rc;
  pthread_mutex_lock(&td->mu);
  ckpt_hashset_del(&td->known, key, strlen(key));
  pthread_mutex_unlock(&td->mu);
  if (rc == FT_OK) {
    int r = td->remote->del(td->remote, key);
    return r == FT_ENOENT ? FT_OK : r;
  }
  return td->remote->del_if_older(td->remote, key, cutoff_ns, freed); /* bucket-only */
}

typedef struct list_ctx {
  ckpt_hashset seen;
  int (*fn)(void *ud, const char *key);
  void *ud;
  int pass;
} list_ctx;

static int list_cb(void *ud, const char *key) {
  list_ctx *l = ud;
  if (l->pass == 0) {
    int rc = ckpt_hashset_put(&l->seen, key, strlen(key), K_KNOWN);
    return rc ? rc : l->fn(l->ud, key);
  }
  return ckpt_hashset_has(&l->seen, key, strlen(key)) ? FT_OK : l->fn(l->ud, key);
}

static int td_list(ckpt_tier *t, const char *prefix, int (*fn)(void *ud, const char *key),
                   void *ud) {
  tiered *td = (tiered *)t;
  list_ctx l = {.fn = fn, .ud = ud};
  int rc = td->local->list(td->local, prefix, list_cb, &l);
  if (rc == FT_OK) {
    l.pass = 1;
    rc = td->remote->list(td->remote, prefix, list_cb, &l);
  }
  ckpt_hashset_release(&l.seen);
  return rc;
}

static int td_now(ckpt_tier *t, int64_t *now_ns) {
  tiered *td = (tiered *)t;
  return td->local->now(td->local, now_ns);
}

static void td_free(ckpt_tier *t) {
  tiered *td = (tiered *)t;
  if (!td)
    return;
  if (td->nth) {
    /* best effort; the rest is journaled. What is still in flight after
     * drain_s is abandoned rather than retried for retry_budget_s */
    if (ckpt_s3_tiered_flush(t, td->cfg.drain_s))
      ckpt_s3_client_cancel(ckpt_tier_s3_client(td->remote));
    pthread_mutex_lock(&td->mu);
    td->stopping = 1;
    pthread_cond_broadcast(&td->cv_work);
    pthread_cond_broadcast(&td->cv_stop);
    pthread_mutex_unlock(&td->mu);
    for (int i = 0; i < td->nth; i++)
      pthread_join(td->th[i], NULL);
  }
  for (item *it = td->head, *n; it; it = n) {
    n = it->next;
    free(it);
  }
  ckpt_hashset_release(&td->pending);
  ckpt_hashset_release(&td->known);
  free(td->th);
  if (td->local)
    td->local->free(td->local);
  if (td->remote)
    td->remote->free(td->remote);
  pthread_mutex_destroy(&td->mu);
  pthread_cond_destroy(&td->cv_work);
  pthread_cond_destroy(&td->cv_done);
  pthread_cond_destroy(&td->cv_stop);
  free(td);
}

/* ---- public -------------------------------------------------------------------- */

int ckpt_s3_tiered_is(const ckpt_tier *t) {
  return t && t->free == td_free;
}

ckpt_tier *ckpt_s3_tiered_remote(ckpt_tier *t) {
  return ((tiered *)t)->remote;
}

void ckpt_s3_tiered_set_scrub(ckpt_tier *t, int on) {
  ((tiered *)t)->scrub = on;
}

void ckpt_s3_tiered_stats_get(ckpt_tier *t, ckpt_s3_tiered_stats *st) {
  tiered *td = (tiered *)t;
  memset(st, 0, sizeof *st);
  ckpt_s3_client_stats(ckpt_tier_s3_client(td->remote), &st->http);
  pthread_mutex_lock(&td->mu);
  check_queue(td);
  st->uploads_done = td->uploads_done;
  st->uploads_failed = td->uploads_failed;
  st->uploads_pending = td->pending.n;
  st->repaired_local = td->repaired_local;
  st->repaired_remote = td->repaired_remote;
  pthread_mutex_unlock(&td->mu);
}

int ckpt_s3_tiered_flush(ckpt_tier *t, int timeout_s) {
  tiered *td = (tiered *)t;
  struct timespec until = ft_wall_deadline(timeout_s < 0 ? 0 : 1000LL * timeout_s);
  int rc = FT_OK;
  pthread_mutex_lock(&td->mu);
  check_queue(td);
  while (td->pending.n > 0 && rc == FT_OK) {
    if (timeout_s < 0)
      pthread_cond_wait(&td->cv_done, &td->mu);
    else if (pthread_cond_timedwait(&td->cv_done, &td->mu, &until) == ETIMEDOUT)
      rc = FT_ETIMEDOUT;
  }
  size_t left = td->pending.n;
  char last[512];
  snprintf(last, sizeof last, "%s", td->last_err[0] ? td->last_err : "none");
  pthread_mutex_unlock(&td->mu);
  if (rc)
    return ft_err_set(rc, "%zu uploads to s3://%s/%s still pending after %d s (last error: %s)",
                      left, td->cfg.bucket, td->cfg.prefix, timeout_s, last);
  return FT_OK;
}

static int requeue_journal(tiered *td) {
  DIR *d = opendir(td->journal);
  if (!d)
    return ft_err_set(ft_err_from_errno(errno), "open %s: %s", td->journal, strerror(errno));
  struct dirent *e;
  int rc = FT_OK;
  pthread_mutex_lock(&td->mu);
  while (rc == FT_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char key[512];
    snprintf(key, sizeof key, "%s", e->d_name);
    for (char *p = key; *p; p++)
      if (*p == '!')
        *p = '/';
    rc = enqueue_locked(td, key, 1);
  }
  pthread_mutex_unlock(&td->mu);
  closedir(d);
  return rc;
}

int ckpt_s3_tiered_open(const ckpt_s3_config *cfg, int writable, ckpt_tier **out) {
  *out = NULL;
  tiered *td = calloc(1, sizeof *td);
  if (!td)
    return ft_err_set(FT_ENOMEM, "out of memory");
  td->cfg = *cfg;
  ckpt_s3_config_wipe(&td->cfg);
  td->writable = writable;
  pthread_mutex_init(&td->mu, NULL);
  pthread_cond_init(&td->cv_work, NULL);
  pthread_cond_init(&td->cv_done, NULL);
  pthread_cond_init(&td->cv_stop, NULL);
  td->t = (ckpt_tier){.name = "s3+cache",
                      .put = td_put,
                      .get = td_get,
                      .exists = td_exists,
                      .del = td_del,
                      .del_if_older = td_del_if_older,
                      .list = td_list,
                      .now = td_now,
                      .sync = td_sync,
                      .free = td_free,
                      .desc = td->desc,
                      .foreign_commits = td->cfg.cache_per_host,
                      .commit_level = td->cfg.require_both ? CKPT_LEVEL_DURABLE : CKPT_LEVEL_LOCAL};
  snprintf(td->desc, sizeof td->desc, "s3://%s/%s (cache %s)", cfg->bucket, cfg->prefix,
           cfg->cache_dir);
  ckpt_s3_client *c = NULL;
  int rc = ckpt_tier_local_open(cfg->cache_dir, 1, &td->local);
  if (rc)
    goto fail;
  rc = ckpt_s3_client_new(cfg, &c);
  if (rc)
    goto fail;
  rc = ckpt_tier_s3_open(c, &td->remote);
  if (rc)
    goto fail;
  snprintf(td->journal, sizeof td->journal, "%s/uploads", cfg->cache_dir);
  if (mkdir(td->journal, 0755) != 0 && errno != EEXIST) {
    rc = ft_err_set(ft_err_from_errno(errno), "mkdir %s: %s", td->journal, strerror(errno));
    goto fail;
  }
  if (writable) {
    td->th = calloc((size_t)cfg->upload_threads, sizeof *td->th);
    if (!td->th) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      goto fail;
    }
    for (int i = 0; i < cfg->upload_threads; i++) {
      if (pthread_create(&td->th[i], NULL, uploader, td) != 0) {
        rc = ft_err_set(FT_ENOMEM, "cannot start S3 upload thread %d", i);
        goto fail;
      }
      td->nth++;
    }
    rc = requeue_journal(td);
    if (rc)
      goto fail;
  }
  *out = &td->t;
  return FT_OK;
fail:
  td->cfg.drain_s = 0;
  td_free(&td->t);
  return rc;
}
