/*
 * ckpt_gc: retention and mark-and-sweep garbage collection of chunks.
 *
 * Retention (per run), applied only when keep_last > 0:
 *   kept = pinned
 *        + PENDING records (a commit may be under way)
 *        + the newest keep_last restorable ones (COMMITTED or GOOD)
 *        + every restorable one whose step is a multiple of keep_every
 *   everything else is dropped, including BAD ones (pin a bad checkpoint to
 *   keep it for a post-mortem). keep_last == 0 keeps every checkpoint and
 *   only sweeps unreferenced chunks. Memory-level records (keep_set) are
 *   pruned whatever keep_last says.
 *
 * The protocol. Actors: writer threads of any process (ckpt_writer.c) put or
 * freshen chunks without touching the catalog; commit (ckpt_commit.c) and GC
 * run in the one process holding the catalog lock.
 *
 * Chunk states in the tier:
 *   ABSENT --put--> FRESH --time--> OLD --freshen (dedup or commit)--> FRESH
 *   OLD and unreferenced --G5 del_if_older--> ABSENT
 * where "referenced" = named by a manifest the catalog holds at G4.
 *
 * Steps of ckpt_store_gc (the function performing each in brackets):
 *   G0 list the store's manifest objects (the local manifests/ folder, or
 *      the cache's and the bucket's) [ckpt_tier_manifest_keys], before
 *      meta_mu: a bucket's listing takes requests.
 *   G0a with keep_last > 0, read the mark object of every committed record
 *      the catalog lists [read_marks], before meta_mu for the same reason.
 *   G1 take meta_mu (no commit runs from here to G4; gc_epoch counts this
 *      GC, so a commit whose C3 ran before it checks its chunks again, see
 *      ckpt_commit.c); read the tier's clock
 *      T0 [tier->now]; the sweep's cutoff is T0 - grace (grace: 1 h by
 *      default, ckpt_store_set_gc_grace) so chunks written for a checkpoint
 *      that is still being written (not yet committed) are left alone.
 *   G1b the catalog must list every manifest G0 saw, except those a commit
 *      of this handle is between C4 and C5 with (ckpt_commit_busy); else
 *      it is incomplete: refuse (FT_ESTATE naming them, nothing done, a
 *      dry run alike) [check_catalog_whole]. What the catalog does not
 *      list G4 does not mark, so G5 would delete the chunks of those
 *      checkpoints (a catalog left empty by an interrupted rebuild would
 *      lose the whole store). A manifest put after G0 belongs to a commit
 *      that records it under meta_mu, so after G4 (I1 below).
 *   G2 decide retention from the catalog's info records [keep_set], where
 *      keep_last > 0 after merging in the mark objects G0a read (a pin or a
 *      BAD mark the catalog lags behind) [merge_marks, G2a].
 *   G3 drop: delete the manifest objects of dropped checkpoints, then one
 *      synced batch deleting their catalog records [ckpt_catalog_write].
 *   G4 mark: collect every chunk hash named by a manifest still in the
 *      catalog [mark_cb]; of a manifest made of shard objects (format 2),
 *      the objects' names (format 3: the root of their index); release
 *      meta_mu.
 *   G4b mark the rest of a format 3 index (its objects and the shard
 *      objects they name), then the chunks the shard objects name, read
 *      now, without meta_mu [mark_objs; why that is safe: there].
 *   G5 sweep: for every object under chunks/ not in the marked set (this
 *      includes leftovers of interrupted writes), delete it if its timestamp
 *      is older than the cutoff [tier->del_if_older: rename aside, re-check
 *      the timestamp, then unlink or rename back].
 *      Shard objects (and index objects, kept beside them) no kept
 *      checkpoint names are swept the same way: a shard not yet committed,
 *      and the index a commit under way wrote, are younger than the cutoff.
 *   G6 drop the "first seen" catalog entries of the deleted chunks.
 *   Also swept: temp files of manifest writes a crash left (older than a
 *   minute, and the process named in their name is not alive).
 *
 * A full disk: when the catalog cannot be written (FT_ENOSPC / FT_EIO) G3
 * is skipped (nothing is dropped, rep->sweep_only = 1, rep->note says why)
 * but G5 still sweeps every unreferenced chunk, which is usually what fills
 * the disk; if that made room, the whole GC runs again with retention.
 *
 * Invariants:
 *   I1 a chunk named by a manifest in the catalog is never deleted. Manifests
 *      present at G4 are in the marked set. A commit after G4 freshened all
 *      its chunks at its step C3, after T0, so their timestamps are >= T0 >
 *      cutoff; if G5 had already renamed one aside, C3's freshen fails and
 *      the commit is refused (nothing partial is listed).
 *   I2 a writer that reuses an existing chunk freshens it; if G5 renamed it
 *      aside first, the freshen fails and the writer writes the chunk again.
 *      del_if_older re-checks the timestamp after its rename, so a freshen
 *      just before the rename is seen and the chunk put back.
 *   I3 a crash at any step leaves every checkpoint still in the catalog
 *      whole: chunks are deleted only at G5, after the catalog stopped
 *      naming the dropped checkpoints (G3), and a crash between the manifest
 *      objects' deletion and G3's batch leaves those checkpoints restorable
 *      from the catalog (their chunks are untouched). A chunk renamed aside
 *      by a crashed sweep was unreferenced; the next sweep deletes it.
 * Dry run: G3, G5 and G6 only count. no_sweep (ckpt_retention): G1-G3
 * only.
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h):
 * meta_mu is held from G1 to G4 (check_locked); retention drops no pinned
 * or PENDING record (drop_record, G2) and the cutoff is not after T0
 * (check_decided); after G3's batch, under meta_mu, the catalog lists none
 * of the dropped checkpoints (I3: check_dropped_gone); at the end of G4,
 * still under meta_mu, the chunks (format 1) or shard objects (format 2)
 * of the manifests the catalog holds are in the marked sets (I1:
 * check_marked); G5 starts only once G4b has marked every format 2
 * checkpoint's chunks (I1: check_sweep_ready). check_marked re-reads at
 * most CHECK_GC_MAN_BYTES of manifests (all of a test's store; a format 1
 * manifest of a large gang names a million chunks), check_dropped_gone
 * looks up CHECK_GC_DROPPED records at most. I2 is the tier's
 * del_if_older (ckpt_tier_local.c), not this file's state.
 */
#include "ckpt_hashset.h"
#include "ckpt_int.h"

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct gc_ctx {
  ckpt_store *s;
  ckpt_info *dropped;
  size_t ndropped;
  ckpt_hashset marked;     /* chunk hashes (G4) */
  ckpt_hashset shards;     /* shard objects of kept checkpoints (G4) */
  ckpt_manifest **objmans; /* kept format 2 manifests, their chunks to mark (G4b) */
  size_t nobjmans, capobjmans;
  int64_t cutoff;
  int dry_run;
  ckpt_gc_report *rep;
  ckpt_batch *idx; /* G6 */
} gc_ctx;

static int is_dropped(const gc_ctx *g, const char *run, int64_t step) {
  for (size_t i = 0; i < g->ndropped; i++)
    if (g->dropped[i].step == step && strcmp(g->dropped[i].run, run) == 0)
      return 1;
  return 0;
}

#if FT_INVARIANTS_ON
/* How much each GC's I1 check re-reads of the catalog's manifests (bytes
 * of JSON: every manifest of a small store, a part of a large one), and
 * how many dropped checkpoints its I3 check looks up. */
#define CHECK_GC_MAN_BYTES ((size_t)4 << 20)
#define CHECK_GC_DROPPED 64

/* G1-G4 run under meta_mu (held by this GC: it took it at G1) */
static void check_locked(ckpt_store *s, const char *step) {
  int rc = pthread_mutex_trylock(&s->meta_mu);
  FT_ASSERT_INV(rc == EBUSY, "%s: meta_mu not held (trylock %d)", step, rc);
}

/* After G2: the sweep's cutoff is at or before T0 (a chunk a commit
 * freshened after T0 is never older than it: I1), and retention dropped no
 * pinned record (drop_record saw the PENDING ones). */
static void check_decided(const gc_ctx *g, int64_t t0) {
  FT_ASSERT_INV(g->cutoff <= t0, "I1: cutoff %" PRId64 " after T0 %" PRId64, g->cutoff, t0);
  for (size_t i = 0; i < g->ndropped; i++)
    FT_ASSERT_INV(!g->dropped[i].pinned, "G2: pinned %s step %" PRId64 " dropped",
                  g->dropped[i].run, g->dropped[i].step);
}

/* I3, after G3's batch and under meta_mu: the catalog no longer names the
 * dropped checkpoints, so nothing G5 deletes is named by one. */
static void check_dropped_gone(ckpt_store *s, const gc_ctx *g) {
  check_locked(s, "I3");
  for (size_t i = 0; i < g->ndropped && i < CHECK_GC_DROPPED; i++) {
    ckpt_info in;
    int rc = ckpt_store_get_info(s, g->dropped[i].run, g->dropped[i].step, &in);
    FT_ASSERT_INV(rc == FT_ENOENT, "I3: dropped %s step %" PRId64 " still in the catalog (rc %d)",
                  g->dropped[i].run, g->dropped[i].step, rc);
  }
}

typedef struct check_mark_ctx {
  const gc_ctx *g;
  size_t bytes; /* of manifest JSON read so far */
} check_mark_ctx;

static int check_mark_cb(void *ud, const char *key, const char *val, size_t vlen) {
  check_mark_ctx *c = ud;
  const gc_ctx *g = c->g;
  ckpt_manifest *m = NULL;
  if (ckpt_manifest_from_json(val, &m) != FT_OK)
    return FT_OK; /* G4 refused it already */
  if (!is_dropped(g, m->info.run, m->info.step)) {
    for (int i = 0; i < m->nobjs; i++)
      FT_ASSERT_INV(ckpt_hashset_has(&g->shards, m->objs[i].hash, CKPT_HASH_LEN),
                    "I1: shard object %d of %s step %" PRId64 " not marked", i, m->info.run,
                    m->info.step);
    /* format 3: its index root (G4b marked the rest of its index) */
    FT_ASSERT_INV(!m->has_index || ckpt_hashset_has(&g->shards, m->index_root, CKPT_HASH_LEN),
                  "I1: index root of %s step %" PRId64 " not marked", m->info.run, m->info.step);
    for (int t = 0; t < m->ntensors; t++)
      for (int k = 0; k < m->tensors[t].nchunks; k++) {
        const ckpt_chunk_ref *r = &m->tensors[t].chunks[k];
        for (int d = -1; d < r->depth; d++) /* the chunk, then its chain */
          FT_ASSERT_INV(ckpt_hashset_has(&g->marked,
                                         d < 0 ? r->hash : r->chain + (size_t)d * CKPT_HASH_LEN,
                                         CKPT_HASH_LEN),
                        "I1: chunk %d (chain %d) of %s in %s step %" PRId64 " not marked", k, d,
                        m->tensors[t].name, m->info.run, m->info.step);
      }
  }
  ckpt_manifest_free(m);
  c->bytes += vlen;
  return c->bytes < CHECK_GC_MAN_BYTES ? FT_OK : FT_ECANCELED; /* enough */
}

/* I1 at the end of G4, under meta_mu: what the catalog's manifests name is
 * marked (format 2: their shard objects; G4b marks those objects' chunks). */
static void check_marked(ckpt_store *s, const gc_ctx *g) {
  char key[256];
  check_locked(s, "I1");
  check_mark_ctx c = {.g = g};
  ckpt_key_man_prefix(key, sizeof key);
  (void)ckpt_catalog_scan(s->cat, key, check_mark_cb, &c);
}

/* I1 at G5's start: G4b marked the chunks of every format 2 checkpoint. */
static void check_sweep_ready(const gc_ctx *g) {
  for (size_t i = 0; i < g->nobjmans; i++)
    FT_ASSERT_INV(!g->objmans[i], "I1: sweeping before %s step %" PRId64 "'s chunks were marked",
                  g->objmans[i]->info.run, g->objmans[i]->info.step);
}
#else
static void check_locked(ckpt_store *s, const char *step) {}
static void check_decided(const gc_ctx *g, int64_t t0) {}
static void check_dropped_gone(ckpt_store *s, const gc_ctx *g) {}
static void check_marked(ckpt_store *s, const gc_ctx *g) {}
static void check_sweep_ready(const gc_ctx *g) {}
#endif

/* G2: a record retention drops (never a pinned or PENDING one). */
static void drop_record(ckpt_info *x) {
  FT_ASSERT_INV(!x->pinned && x->state != CKPT_PENDING,
                "G2: dropping %s step %" PRId64 " (pinned %d, state %d)", x->run, x->step,
                x->pinned, x->state);
  x->state = -1;
}

/* G2: marks v[i].state = -1 for the dropped ones. v is sorted by run, step.
 * Memory-level records (chunks only in workers' memory) are not counted by
 * keep_last or keep_every: one is kept only while it is newer than the
 * run's newest persisted restorable checkpoint, and only the newest
 * CKPT_GC_KEEP_MEMORY of those (a worker's memory holds two snapshots), so
 * they are pruned even when keep_last is 0. */
#define CKPT_GC_KEEP_MEMORY 2
static void keep_set(ckpt_info *v, size_t n, const ckpt_retention *ret) {
  for (size_t a = 0; a < n;) {
    size_t b = a;
    while (b < n && strcmp(v[b].run, v[a].run) == 0)
      b++;
    int restorable_seen = 0, memory_seen = 0, persisted_seen = 0;
    for (size_t i = b; i-- > a;) {
      ckpt_info *x = &v[i];
      int restorable = x->state == CKPT_COMMITTED || x->state == CKPT_GOOD;
      int keep = x->pinned || x->state == CKPT_PENDING;
      if (x->level == CKPT_LEVEL_MEMORY) {
        if (restorable && !persisted_seen && memory_seen < CKPT_GC_KEEP_MEMORY)
          keep = 1;
        memory_seen += restorable;
        if (!keep && (restorable || ret->keep_last > 0))
          drop_record(x);
        continue;
      }
      persisted_seen |= restorable;
      if (ret->keep_last <= 0)
        continue;
      if (restorable && restorable_seen < ret->keep_last)
        keep = 1;
      if (restorable && ret->keep_every > 0 && x->step % ret->keep_every == 0)
        keep = 1;
      if (restorable)
        restorable_seen++;
      if (!keep)
        drop_record(x);
    }
    a = b;
  }
}

/* G2a: the store's mark objects where they say more than the catalog. A
 * pin or a state is written to the mark object first and to the catalog
 * second (put_marked), so a catalog can lag its marks (a crash between the
 * two, a copy put back, an s3 cache another host's pin bypassed) but not
 * the other way round. For retention the two are merged the safe way:
 * pinned if either says so; BAD if either says so (a BAD mark came from a
 * real failed hash: it must not count as one of the newest keep_last),
 * else GOOD if either does. Records that change are written back to the
 * catalog (not in a dry run), so ls shows what gc followed.
 *
 * The marks are read at G0a, before meta_mu (read_marks): on an s3 store a
 * mark is a request to the bucket, and a bucket that is down would hold
 * meta_mu, and with it every commit, for the whole retry budget (with
 * FT_S3_REQUIRE=local commits must go on while the bucket is away). A
 * record committed after G0a has no mark read: its catalog record stands
 * (a commit writes its mark and its record together). */
typedef struct gc_mark {
  char run[sizeof((ckpt_info *)0)->run];
  int64_t step;
  int state, pinned;
} gc_mark;

static int read_marks(ckpt_store *s, gc_mark **out, size_t *nout) {
  ckpt_info *v = NULL;
  size_t n = 0;
  *out = NULL;
  *nout = 0;
  int rc = ckpt_store_list(s, NULL, &v, &n);
  gc_mark *m = rc == FT_OK ? calloc(n ? n : 1, sizeof *m) : NULL;
  if (rc == FT_OK && !m)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n && rc == FT_OK; i++) {
    const ckpt_info *x = &v[i];
    if (x->level == CKPT_LEVEL_MEMORY || x->state == CKPT_PENDING)
      continue; /* no mark object: a memory-level or uncommitted record */
    int state = CKPT_COMMITTED, pinned = 0;
    rc = ckpt_tier_get_mark(s->tier, x->run, x->step, &state, &pinned);
    if (rc == FT_ENOENT || rc == FT_EFORMAT) {
      rc = FT_OK; /* none, or damaged: the catalog's record stands */
      continue;
    }
    if (rc) {
      rc = ckpt_err_wrap(rc, "gc stopped, nothing deleted: reading the mark of %s step %" PRId64,
                         x->run, x->step);
      break;
    }
    snprintf(m[k].run, sizeof m[k].run, "%s", x->run);
    m[k].step = x->step;
    m[k].state = state;
    m[k].pinned = pinned;
    k++;
  }
  free(v);
  if (rc) {
    free(m);
    return rc;
  }
  *out = m;
  *nout = k;
  return FT_OK;
}

/* Under meta_mu: merges the marks read_marks read into v (and the catalog). */
static int merge_marks(ckpt_store *s, ckpt_info *v, size_t n, const gc_mark *mk, size_t nmk,
                       int dry_run, int *merged) {
  ckpt_batch *b = NULL;
  int rc = FT_OK;
  *merged = 0;
  for (size_t i = 0; i < n && rc == FT_OK; i++) {
    ckpt_info *x = &v[i];
    if (x->level == CKPT_LEVEL_MEMORY || x->state == CKPT_PENDING)
      continue;
    const gc_mark *m = NULL;
    for (size_t j = 0; j < nmk && !m; j++)
      if (mk[j].step == x->step && strcmp(mk[j].run, x->run) == 0)
        m = &mk[j];
    if (!m)
      continue; /* no mark, or committed after G0a: the catalog's record stands */
    int st = x->state == CKPT_BAD || m->state == CKPT_BAD     ? CKPT_BAD
             : x->state == CKPT_GOOD || m->state == CKPT_GOOD ? CKPT_GOOD
                                                              : CKPT_COMMITTED;
    if (st == x->state && (x->pinned || !m->pinned))
      continue;
    x->state = st;
    x->pinned = x->pinned || m->pinned;
    (*merged)++;
    if (dry_run)
      continue;
    char key[256], *js = ckpt_info_to_json(x);
    if (!js || (!b && !(b = ckpt_batch_new()))) {
      free(js);
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      break;
    }
    ckpt_key_info(key, sizeof key, x->run, x->step);
    ckpt_batch_put(b, key, js, strlen(js));
    free(js);
  }
  if (b && rc == FT_OK) {
    /* best effort: the decision below uses the merged records either way
     * (a full disk must not stop the sweep that frees it) */
    (void)ckpt_catalog_write(s->cat, b);
  } else {
    ckpt_batch_free(b);
  }
  return rc;
}

static int mark_chunks(gc_ctx *g, const ckpt_tensor *ts, int n) {
  int rc = FT_OK;
  for (int t = 0; t < n && rc == FT_OK; t++)
    for (int c = 0; c < ts[t].nchunks && rc == FT_OK; c++) {
      const ckpt_chunk_ref *r = &ts[t].chunks[c];
      rc = ckpt_hashset_put(&g->marked, r->hash, CKPT_HASH_LEN, 1);
      for (int k = 0; k < r->depth && rc == FT_OK; k++)
        rc = ckpt_hashset_put(&g->marked, r->chain + (size_t)k * CKPT_HASH_LEN, CKPT_HASH_LEN, 1);
    }
  return rc;
}

/* G4: every chunk of every manifest the catalog still holds, and every
 * chunk in a delta's chain (its base, the base's base, ...): a kept
 * checkpoint's chains stay whole, whatever happens to the checkpoints
 * whose chunks the bases first were. */
static int mark_cb(void *ud, const char *key, const char *val, size_t vlen) {
  gc_ctx *g = ud;
  ckpt_manifest *m = NULL;
  int rc = ckpt_manifest_from_json(val, &m);
  if (rc)
    return ckpt_err_wrap(rc, "gc stopped, nothing swept: catalog manifest %s is unreadable", key);
  if (ckpt_manifest_has_objs(m) && !is_dropped(g, m->info.run, m->info.step)) {
    /* its shard objects now (format 3: the root of their index), the rest
     * of its index and their chunks after meta_mu (G4b) */
    for (int i = 0; i < m->nobjs && rc == FT_OK; i++)
      rc = ckpt_hashset_put(&g->shards, m->objs[i].hash, CKPT_HASH_LEN, 1);
    if (rc == FT_OK && m->has_index)
      rc = ckpt_hashset_put(&g->shards, m->index_root, CKPT_HASH_LEN, 1);
    if (rc == FT_OK && g->nobjmans == g->capobjmans) {
      size_t cap = g->capobjmans ? 2 * g->capobjmans : 8;
      ckpt_manifest **n = realloc(g->objmans, cap * sizeof *n);
      if (!n)
        rc = ft_err_set(FT_ENOMEM, "out of memory");
      else {
        g->objmans = n;
        g->capobjmans = cap;
      }
    }
    if (rc == FT_OK) {
      g->objmans[g->nobjmans++] = m;
      return FT_OK;
    }
  }
  if (!is_dropped(g, m->info.run, m->info.step))
    rc = mark_chunks(g, m->tensors, m->ntensors);
  ckpt_manifest_free(m);
  return rc;
}

/* G4b: the chunks of the kept checkpoints made of shard objects, read
 * without meta_mu (16,384 objects of a large gang take seconds, and a
 * commit waits on meta_mu). Safe: a commit after G4 vouches for its own
 * chunks (ckpt_commit.c, check_shards), and nothing but this GC deletes
 * the objects of a kept checkpoint. A shard object that cannot be read
 * stops the GC before anything is swept. */
static int mark_objs(gc_ctx *g) {
  int rc = FT_OK;
  for (size_t i = 0; i < g->nobjmans && rc == FT_OK; i++) {
    ckpt_manifest *m = g->objmans[i];
    /* format 3: every object of its index, and the shard objects it names
     * (a missing or damaged one stops the GC, named) */
    if (m->has_index && (rc = ckpt_index_load_tier(g->s->tier, m)) != FT_OK)
      rc = ckpt_err_wrap(rc, "gc stopped, nothing swept");
    for (int k = 0; k < m->nnodes && rc == FT_OK; k++)
      rc = ckpt_hashset_put(&g->shards, m->nodes[k], CKPT_HASH_LEN, 1);
    for (int k = 0; m->has_index && k < m->nobjs && rc == FT_OK; k++)
      rc = ckpt_hashset_put(&g->shards, m->objs[k].hash, CKPT_HASH_LEN, 1);
    for (int k = 0; k < m->nobjs && rc == FT_OK; k++) { /* one shard at a time */
      ckpt_shard *sh = NULL;
      rc = ckpt_shard_obj_read(g->s->tier, m, &m->objs[k], &sh);
      if (rc == FT_OK)
        rc = mark_chunks(g, sh->parts, sh->nparts);
      else
        rc = ckpt_err_wrap(rc, "gc stopped, nothing swept");
      ckpt_shard_free(sh);
    }
    ckpt_manifest_free(m);
    g->objmans[i] = NULL;
  }
  return rc;
}

/* G5 for an object that nothing kept names (a chunk, or a shard object:
 * one not yet committed is younger than the cutoff): deleted if older than
 * the cutoff, counted in *count; *deleted 1 if it went (a dry run: never). */
static int sweep_key(gc_ctx *g, const char *key, uint64_t *count, int *deleted) {
  uint64_t size = 0;
  int64_t mtime = 0;
  int rc;
  *deleted = 0;
  if (g->dry_run) {
    rc = g->s->tier->exists(g->s->tier, key, 0, &size, &mtime);
    if (rc == FT_OK && mtime < g->cutoff) {
      (*count)++;
      g->rep->bytes_freed += size;
    }
    return rc == FT_ENOENT ? FT_OK : rc;
  }
  rc = g->s->tier->del_if_older(g->s->tier, key, g->cutoff, &size);
  if (rc == FT_EEXIST || rc == FT_ENOENT)
    return FT_OK;
  if (rc)
    return rc;
  (*count)++;
  g->rep->bytes_freed += size;
  *deleted = 1;
  return FT_OK;
}

static int sweep_shard_cb(void *ud, const char *key) {
  gc_ctx *g = ud;
  const char *name = ckpt_objkey_shard_name(key);
  uint8_t h[CKPT_HASH_LEN];
  int deleted;
  if (name && strlen(name) == CKPT_HEX_LEN && ckpt_unhex(name, h) == FT_OK &&
      ckpt_hashset_has(&g->shards, h, CKPT_HASH_LEN))
    return FT_OK;
  return sweep_key(g, key, &g->rep->shards_deleted, &deleted);
}

static int sweep_cb(void *ud, const char *key) {
  gc_ctx *g = ud;
  const char *name = ckpt_objkey_chunk_name(key);
  uint8_t h[CKPT_HASH_LEN];
  int valid = name && ckpt_unhex(name, h) == FT_OK, deleted = 0;
  if (valid && ckpt_hashset_has(&g->marked, h, CKPT_HASH_LEN))
    return FT_OK;
  int rc = sweep_key(g, key, &g->rep->chunks_deleted, &deleted);
  if (rc == FT_OK && deleted && valid) {
    char k[128];
    ckpt_key_chunk(k, sizeof k, name);
    ckpt_batch_del(g->idx, k);
  }
  return rc;
}

/* Temp files of manifest and mark writes (manifests/<run>/<name>.tmp.<pid>.
 * <tid>.<n>) that a crash left: deleted once older than a minute, unless the
 * process named in them is alive (its write may still be under way). */
#define GC_TMP_AGE_S 60

static int tmp_writer_alive(const char *key) {
  const char *t = strstr(key, ".tmp.");
  if (!t)
    return 0;
  char *end;
  long pid = strtol(t + 5, &end, 10);
  if (end == t + 5 || *end != '.' || pid <= 0)
    return 0;
  return pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

typedef struct tmp_ctx {
  gc_ctx *g;
  int64_t cutoff;
  ckpt_tier *tier;
  char **runs;
  size_t nruns, cap;
} tmp_ctx;

static int tmp_run_cb(void *ud, const char *key) {
  tmp_ctx *t = ud;
  if (strstr(key, ".tmp."))
    return FT_OK;
  if (t->nruns == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    char **n = realloc(t->runs, cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    t->runs = n;
    t->cap = cap;
  }
  if (!(t->runs[t->nruns] = strdup(key)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  t->nruns++;
  return FT_OK;
}

static int tmp_file_cb(void *ud, const char *key) {
  tmp_ctx *t = ud;
  if (!strstr(key, ".tmp.") || tmp_writer_alive(key))
    return FT_OK;
  uint64_t size = 0;
  int rc;
  if (t->g->dry_run) {
    int64_t mtime = 0;
    rc = t->tier->exists(t->tier, key, 0, &size, &mtime);
    if (rc == FT_OK && mtime < t->cutoff)
      t->g->rep->tmp_deleted++;
    return rc == FT_ENOENT ? FT_OK : rc;
  }
  rc = t->tier->del_if_older(t->tier, key, t->cutoff, &size);
  if (rc == FT_EEXIST || rc == FT_ENOENT)
    return FT_OK;
  if (rc == FT_OK)
    t->g->rep->tmp_deleted++;
  return rc;
}

/* Sweeps the manifest temp files left by crashed writers. */
static int sweep_manifest_tmp(gc_ctx *g, int64_t t0) {
  tmp_ctx t = {.g = g, .cutoff = t0 - GC_TMP_AGE_S * 1000000000LL, .tier = g->s->tier};
  int rc = t.tier->list(t.tier, CKPT_OBJ_MANIFESTS, tmp_run_cb, &t);
  for (size_t i = 0; i < t.nruns; i++) {
    char sub[600];
    snprintf(sub, sizeof sub, "%s/", t.runs[i]);
    if (rc == FT_OK && !strstr(t.runs[i] + strlen(CKPT_OBJ_MANIFESTS), "/"))
      rc = t.tier->list(t.tier, sub, tmp_file_cb, &t);
    else if (rc == FT_OK)
      rc = tmp_file_cb(&t, t.runs[i]); /* a bucket lists whole keys */
    free(t.runs[i]);
  }
  free(t.runs);
  return rc;
}

/* G1b: every manifest object G0 listed (keys) has its checkpoint in the
 * catalog (ckpt/man/<run>/<step>), unless a commit of this handle is
 * writing it (C4 puts the object before C5 records it, with meta_mu let
 * go). Else the catalog is incomplete (an interrupted rebuild, a lost or
 * older copy, a commit that crashed between C4 and C5) and G4 would miss
 * chunks a checkpoint needs: FT_ESTATE naming the first few, and nothing
 * is done. Under meta_mu. */
#define GC_NAMED 3
static int check_catalog_whole(ckpt_store *s, char **keys, size_t n) {
  char names[3 * 320] = "", key[512];
  size_t missing = 0, plen = strlen(CKPT_OBJ_MANIFESTS);
  int rc = FT_OK;
  for (size_t i = 0; i < n && rc == FT_OK; i++) {
    int64_t step;
    const char *run = keys[i] + plen, *slash = strrchr(keys[i], '/');
    if (strncmp(keys[i], CKPT_OBJ_MANIFESTS, plen) != 0 || !slash || slash <= run ||
        slash - run > 200 || ckpt_objkey_manifest_step(keys[i], &step) != 0)
      continue; /* ckpt_tier_manifest_keys lists no other */
    char rn[256], *val = NULL;
    snprintf(rn, sizeof rn, "%.*s", (int)(slash - run), run);
    ckpt_key_man(key, sizeof key, rn, step);
    rc = ckpt_catalog_get(s->cat, key, &val, NULL);
    free(val);
    if (rc != FT_ENOENT)
      continue;
    rc = FT_OK;
    if (ckpt_commit_busy(s, rn, step))
      continue;
    if (missing++ < GC_NAMED) {
      size_t l = strlen(names);
      snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", keys[i]);
    }
  }
  if (rc)
    return ckpt_err_wrap(rc, "gc stopped, nothing deleted: reading the catalog");
  if (!missing)
    return FT_OK;
  char more[64] = "";
  if (missing > GC_NAMED)
    snprintf(more, sizeof more, " and %zu more", missing - GC_NAMED);
  return ft_err_set(FT_ESTATE,
                    "gc refused, nothing deleted: the store %s holds %zu checkpoint manifest%s "
                    "that its catalog does not list (%s%s); the catalog is incomplete (an "
                    "interrupted rebuild, a lost or older copy, or a commit that crashed "
                    "before recording its checkpoint) and gc would delete chunks those "
                    "checkpoints need. Run 'ckpt rebuild-catalog %s' first (a manifest it "
                    "skips as damaged must be moved out of the store before gc)",
                    s->uri, missing, missing == 1 ? "" : "s", names, more, s->uri);
}

static int gc_pass(ckpt_store *s, const ckpt_retention *ret, int dry_run, ckpt_gc_report *rep,
                   int again);

int ckpt_store_gc(ckpt_store *s, const ckpt_retention *ret, int dry_run, ckpt_gc_report *rep) {
  return gc_pass(s, ret, dry_run, rep, 1);
}

static int gc_pass(ckpt_store *s, const ckpt_retention *ret, int dry_run, ckpt_gc_report *rep,
                   int again) {
  ckpt_gc_report local = {0};
  ckpt_retention r0 = {0};
  if (!rep)
    rep = &local;
  memset(rep, 0, sizeof *rep);
  if (!ret)
    ret = &r0;
  if (s->read_only && !dry_run)
    return ft_err_set(FT_ESTATE, "gc needs the store opened for writing (it is read-only)");
  if (ret->keep_last < 0 || ret->keep_every < 0)
    return ft_err_set(FT_EINVAL, "gc: keep_last and keep_every must be >= 0");
  gc_ctx g = {.s = s, .dry_run = dry_run, .rep = rep};
  ckpt_info *v = NULL;
  size_t n = 0;
  int64_t t0 = 0;
  char key[256];
  int sweep = 1;
  char **mkeys = NULL;
  size_t nmkeys = 0;

  /* G0, before meta_mu: listing a bucket takes requests, and a commit
   * waits on meta_mu */
  int rc = ckpt_tier_manifest_keys(s->tier, &mkeys, &nmkeys);
  if (rc)
    return ckpt_err_wrap(rc, "gc stopped, nothing deleted: listing the store's manifests (to check "
                             "that the catalog lists every checkpoint)");
  int64_t pause_ms; /* failpoint: a test's fault lands between G0 and G0a */
  if (ft_failpoint("gc_pause_ms", &pause_ms) && pause_ms > 0) {
    struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  gc_mark *marks = NULL;
  size_t nmarks = 0;
  if (ret->keep_last > 0 && (rc = read_marks(s, &marks, &nmarks)) != FT_OK) { /* G0a */
    ckpt_keys_free(mkeys, nmkeys);
    return rc;
  }
  pthread_mutex_lock(&s->meta_mu); /* G1 */
  s->gc_epoch++;
  rc = s->read_only ? FT_OK : s->tier->now(s->tier, &t0);
  if (s->read_only)
    t0 = ft_wall_ns();
  check_locked(s, "G1");
  if (rc == FT_OK)
    rc = check_catalog_whole(s, mkeys, nmkeys); /* G1b */
  if (rc)
    goto unlock;
  g.cutoff = t0 - s->gc_grace_s * 1000000000LL;
  rc = ckpt_store_list(s, NULL, &v, &n); /* G2 */
  if (rc == FT_OK && ret->keep_last > 0)
    rc = merge_marks(s, v, n, marks, nmarks, dry_run, &rep->marks_followed); /* G2a */
  if (rc)
    goto unlock;
  keep_set(v, n, ret);
  g.dropped = calloc(n ? n : 1, sizeof *g.dropped);
  if (!g.dropped) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto unlock;
  }
  for (size_t i = 0; i < n; i++)
    if (v[i].state == -1)
      g.dropped[g.ndropped++] = v[i];
  check_decided(&g, t0);
  if (!dry_run && g.ndropped > 0 && (rc = ckpt_catalog_writable(s->cat)) != FT_OK) {
    if (rc != FT_ENOSPC && rc != FT_EIO)
      goto unlock;
    /* the catalog cannot be written (a full disk): drop nothing, but sweep
     * what no checkpoint references, which is what frees the space */
    snprintf(rep->note, sizeof rep->note,
             "retention not applied (the catalog cannot be written: %s); only "
             "unreferenced chunks were swept",
             ft_err_detail());
    rep->sweep_only = 1;
    g.ndropped = 0;
    rc = FT_OK;
  }
  rep->checkpoints_deleted = (int)g.ndropped;
  if (!dry_run && g.ndropped > 0) { /* G3 */
    ckpt_batch *b = ckpt_batch_new();
    if (!b) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      goto unlock;
    }
    for (size_t i = 0; i < g.ndropped; i++) {
      ckpt_objkey_manifest(key, sizeof key, g.dropped[i].run, g.dropped[i].step);
      rc = s->tier->del(s->tier, key);
      if (rc == FT_OK || rc == FT_ENOENT) {
        ckpt_objkey_mark(key, sizeof key, g.dropped[i].run, g.dropped[i].step);
        rc = s->tier->del(s->tier, key);
      }
      if (rc && rc != FT_ENOENT) {
        ckpt_batch_free(b);
        goto unlock;
      }
      ckpt_key_info(key, sizeof key, g.dropped[i].run, g.dropped[i].step);
      ckpt_batch_del(b, key);
      ckpt_key_man(key, sizeof key, g.dropped[i].run, g.dropped[i].step);
      ckpt_batch_del(b, key);
    }
    rc = ckpt_catalog_write(s->cat, b);
    if (rc)
      goto unlock;
    check_dropped_gone(s, &g);
  }
  /* retention only: a later GC sweeps (unless a full disk needs it now) */
  sweep = !ret->no_sweep || rep->sweep_only;
  if (!sweep)
    goto unlock;
  ckpt_key_man_prefix(key, sizeof key);
  rc = ckpt_catalog_scan(s->cat, key, mark_cb, &g); /* G4 */
  if (rc == FT_OK)
    check_marked(s, &g);
unlock:
  pthread_mutex_unlock(&s->meta_mu);
  if (rc == FT_OK && sweep)
    rc = mark_objs(&g); /* G4b */
  if (rc || !sweep)
    goto out;
  check_sweep_ready(&g);
  g.idx = ckpt_batch_new();
  if (!g.idx) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  rc = s->tier->list(s->tier, CKPT_OBJ_CHUNKS, sweep_cb, &g); /* G5 */
  if (rc == FT_OK)
    rc = s->tier->list(s->tier, CKPT_OBJ_SHARDS, sweep_shard_cb, &g);
  if (rc == FT_OK)
    rc = sweep_manifest_tmp(&g, t0);
  if (!dry_run) {
    int rc2 = ckpt_catalog_write(s->cat, g.idx); /* G6 */
    if (rc == FT_OK && !(rep->sweep_only && (rc2 == FT_ENOSPC || rc2 == FT_EIO)))
      rc = rc2; /* sweep-only: stale "first seen" entries only skew new_bytes */
  } else {
    ckpt_batch_free(g.idx);
  }
  g.idx = NULL;
  if (rc == FT_OK && again && rep->sweep_only && ckpt_catalog_writable(s->cat) == FT_OK) {
    /* the sweep made room: apply retention after all */
    ckpt_gc_report r2;
    rc = gc_pass(s, ret, dry_run, &r2, 0);
    if (rc == FT_OK) {
      rep->checkpoints_deleted += r2.checkpoints_deleted;
      rep->chunks_deleted += r2.chunks_deleted;
      rep->bytes_freed += r2.bytes_freed;
      rep->tmp_deleted += r2.tmp_deleted;
      rep->shards_deleted += r2.shards_deleted;
      rep->sweep_only = r2.sweep_only;
      memcpy(rep->note, r2.note, sizeof rep->note);
    }
  }
out:
  ckpt_keys_free(mkeys, nmkeys);
  free(marks);
  ckpt_hashset_release(&g.marked);
  ckpt_hashset_release(&g.shards);
  for (size_t i = 0; i < g.nobjmans; i++)
    ckpt_manifest_free(g.objmans[i]);
  free(g.objmans);
  free(g.dropped);
  free(v);
  return rc;
}

/* Drops run's memory-level records with step >= min_step, or (prune) those
 * keep_set would drop with keep_last 0, which are memory-level ones only. */
static int drop_memory_records(ckpt_store *s, const char *run, int64_t min_step, int prune,
                               int *n) {
  if (n)
    *n = 0;
  if (s->read_only)
    return ft_err_set(FT_ESTATE, "dropping memory checkpoints needs the store opened for writing");
  ckpt_info *v = NULL;
  size_t nv = 0;
  char key[256];
  pthread_mutex_lock(&s->meta_mu); /* no commit in between */
  int rc = ckpt_store_list(s, run, &v, &nv);
  ckpt_batch *b = rc ? NULL : ckpt_batch_new();
  if (!rc && !b)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  if (!rc && prune) {
    ckpt_retention none = {0};
    keep_set(v, nv, &none);
  }
  int k = 0;
  for (size_t i = 0; !rc && i < nv; i++) {
    if (v[i].level != CKPT_LEVEL_MEMORY || (prune ? v[i].state != -1 : v[i].step < min_step))
      continue;
    ckpt_key_info(key, sizeof key, v[i].run, v[i].step);
    ckpt_batch_del(b, key);
    ckpt_key_man(key, sizeof key, v[i].run, v[i].step);
    ckpt_batch_del(b, key);
    k++;
  }
  if (!rc && k)
    rc = ckpt_catalog_write(s->cat, b);
  else
    ckpt_batch_free(b);
  if (!prune) /* even a failed drop: what it meant to drop is not to come back */
    __atomic_add_fetch(&s->mem_drops, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&s->meta_mu);
  free(v);
  if (!rc && n)
    *n = k;
  return rc;
}

int ckpt_store_drop_memory(ckpt_store *s, const char *run, int64_t min_step, int *n) {
  return drop_memory_records(s, run, min_step, 0, n);
}

uint64_t ckpt_store_memory_epoch(ckpt_store *s) { /* without meta_mu: a commit may hold it long */
  return __atomic_load_n(&s->mem_drops, __ATOMIC_SEQ_CST) + 1;
}

int ckpt_store_prune_memory(ckpt_store *s, const char *run, int *n) {
  return drop_memory_records(s, run, 0, 1, n);
}
