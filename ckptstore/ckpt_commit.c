/*
 * ckpt_commit: the commit protocol. A checkpoint becomes visible in one
 * synced RocksDB WriteBatch, after everything it needs is durable.
 *
 * States of one checkpoint (run, step), as the catalog records them:
 *
 *   (absent) --set_state(PENDING)--> PENDING     (optional intent record)
 *   (absent), PENDING or BAD --commit--> COMMITTED (BAD: the step trained
 *                                                   again after a rollback)
 *   COMMITTED --set_state--> GOOD; COMMITTED or GOOD --set_state/verify--> BAD
 *   BAD --set_state--> GOOD (an operator's call)
 * A commit of a step that is COMMITTED or GOOD is refused (FT_EEXIST).
 *
 * Steps of ckpt_store_commit (the function performing each in brackets):
 *   C1 build the manifest from the shards: same (run, step), dtype and shape
 *      agree, every byte of every tensor covered exactly once; refuse
 *      otherwise [ckpt_manifest_build]. Nothing has been written yet.
 *   C3 for every chunk the manifest references, and every chunk in the
 *      chain of a delta (the bases it is decoded against): check it exists
 *      in the tier and freshen its timestamp [tier->exists(freshen=1),
 *      check_chunks]. A missing chunk or base refuses the commit.
 *      Freshening is the commit's half of the GC protocol: a chunk
 *      freshened after a GC took its clock reading is never swept by that
 *      GC. C3 runs before C2, without meta_mu: on an s3 store it is a
 *      request per chunk, and holding meta_mu through it held up every
 *      other commit (a memory-level one that needs no tier at all) for
 *      seconds. Read gc_epoch before it; if a GC took its clock reading
 *      (G1) between then and C2, C3 runs again (twice more without
 *      meta_mu, then under it), so every chunk was freshened after the
 *      clock reading of any GC whose mark (G4) might miss this checkpoint,
 *      as before.
 *   C2 take meta_mu, which serialises commits with each other and with the
 *      GC's decision phase (ckpt_gc.c) inside this process. Refuse if the
 *      catalog already has (run, step) in a state other than PENDING or BAD
 *      (a BAD step is replaced when a run rolled back past it trains it
 *      again: the new record and manifest overwrite the old in C4/C5).
 *   C4 write the manifest object beside the chunks, crash-safely
 *      [tier->put "manifests/<run>/<step>.json"]; when it replaces a record
 *      (BAD, or a pinned PENDING), first its mark object (the state and pin
 *      a catalog rebuild restores) [ckpt_store_put_mark]. A commit that
 *      replaces no record lets meta_mu go for the put (on s3 a request
 *      that may take seconds, which held up every other commit) and takes
 *      it back for C5; if a GC took its clock reading meanwhile, C3 runs
 *      again first. Nothing else can touch (run, step) in between: the
 *      catalog has no record of it, and no other commit of it starts while
 *      this one is under way (busy_enter).
 *   C5 one WriteBatch, written with sync=true [ckpt_catalog_write]:
 *      ckpt/info/<run>/<step> (state COMMITTED), ckpt/man/<run>/<step>, and a
 *      ckpt/chunk/<hash> entry for every chunk seen for the first time (for
 *      "new bytes"; the entry of a delta's base names the record's base
 *      step). This is the commit point.
 *   C6 release meta_mu.
 * Shard objects (format 2). A gang's worker stores its persisted shard as
 * an object, shards/<SHA-256 of its text>, after checking and freshening
 * every chunk it names (ckpt_store_put_shard), and sends a reference: the
 * object's name and the shard's totals. A commit of references builds a
 * manifest that names one object per rank (C1: one per rank of the world,
 * same run and step; the tensors' coverage is checked when the objects are
 * read: a load, a verify, a GC's mark), and its C3 checks those objects
 * rather than every chunk [check_shards]: O(ranks), not O(chunks), with no
 * first-seen entries (the writers counted the new bytes). A host's agent
 * may send one reference for its ranks instead (ckpt_store_put_host: a
 * leaf of the index it wrote): C3 then checks one object per host. Why an
 * object vouches for its chunks, and a leaf for its objects, and when
 * they do not: check_shards.
 * Levels (enum ckpt_level): a memory-level commit (meta->level; the
 * checkpoints between persisted ones, checkpoint.persist_every) has its
 * chunks only in workers' memory, so it skips C3 and C4 and records no
 * chunk entries: C5 writes its record (level "memory", stored bytes 0) and
 * manifest to the catalog only. A later commit of the same step at a
 * persistent level (checkpoint.require: memory, once the chunks reached the
 * store) upgrades that record through C3-C5, keeping its state and pin.
 * Under meta_mu (C2) a memory-level commit whose meta->memory_epoch is older
 * than the handle's (a ckpt_store_drop_memory since its shards were made)
 * is refused (FT_ECANCELED): a drop and a late record cannot cross.
 * Every other commit records the tier's level (durable; local for an s3
 * store whose bucket copy follows in the background).
 * If C4 or C5 fails (a full disk: FT_ENOSPC naming the file), what C4 wrote
 * is undone, best effort: the new manifest object deleted, or the replaced
 * one and its mark put back, so no manifest is newer than the catalog.
 *
 * Invariants:
 *   I1 the catalog lists a checkpoint as COMMITTED/GOOD/BAD only if C5 ran,
 *      hence only if every chunk it references existed at C3 and the manifest
 *      passed C1. No partial checkpoint is ever listed.
 *   I2 a crash before C5 leaves the catalog as it was; what remains is
 *      content-addressed chunks and possibly a manifest object without a
 *      catalog record, both harmless (a rebuild from the folder would find a
 *      whole checkpoint; GC removes unreferenced chunks once old).
 *   I3 a crash after C5 loses nothing: the batch was synced.
 * Chunk files themselves are durable before any job reports done (temp file,
 * fsync, rename, fsync of the folder: ckpt_tier_local.c).
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h):
 * meta_mu is held at C3 (its run under the lock), C4 and C5, and released
 * by this thread at C6 (a C4 that replaces no record lets it go for the
 * put and takes it back, so it is held from C2 to C5 except there); before
 * C4 the manifest covers every byte of every tensor exactly once and its
 * record's totals add up (check_manifest); after C5 the record reads back
 * COMMITTED with the manifest's chunks (I1); after a failed C4/C5 the
 * catalog still holds what it held before the commit (I2).
 */
#include "ckpt_int.h"

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ref_cmp(const void *a, const void *b) {
  return memcmp(((const ckpt_chunk_ref *)a)->hash, ((const ckpt_chunk_ref *)b)->hash,
                CKPT_HASH_LEN);
}

#if FT_INVARIANTS_ON
/* meta_mu is held (by this commit: it took it at C2; no other thread can
 * release it) */
static void check_locked(ckpt_store *s, const char *step) {
  int rc = pthread_mutex_trylock(&s->meta_mu);
  FT_ASSERT_INV(rc == EBUSY, "%s: meta_mu not held (trylock %d)", step, rc);
}

/* C1's promise, and the totals C3 added up, just before the manifest is
 * written (C4): every tensor's chunks cover [0, nbytes) in order, each byte
 * once; the record counts the tensors, chunks and bytes it lists. */
static void check_manifest(const ckpt_manifest *m, const ckpt_meta *meta) {
  const ckpt_info *in = &m->info;
  FT_ASSERT_INV(!strcmp(in->run, meta->run) && in->step == meta->step,
                "manifest of %s/%" PRId64 " for %s/%" PRId64, in->run, in->step, meta->run,
                meta->step);
  FT_ASSERT_INV(in->state == CKPT_COMMITTED || in->state == CKPT_GOOD, "manifest state %d",
                in->state);
  if (m->nobjs || m->nhosts) { /* formats 2, 3: shard objects and hosts' leaves tile the ranks */
    int at = 0;
    for (int i = 0, j = 0; i < m->nobjs || j < m->nhosts;) {
      int host = j < m->nhosts && (i == m->nobjs || m->hosts[j].lo < m->objs[i].rank);
      int lo = host ? m->hosts[j].lo : m->objs[i].rank;
      FT_ASSERT_INV(lo == at, "shard objects: rank %d next, expected %d", lo, at);
      at = host ? m->hosts[j++].hi : m->objs[i++].rank + 1;
    }
    FT_ASSERT_INV(at == in->world, "shard objects of %d ranks, world %d", at, in->world);
    return;
  }
  FT_ASSERT_INV(in->ntensors == m->ntensors, "ntensors %d != %d", in->ntensors, m->ntensors);
  uint64_t logical = 0, stored = 0;
  int nchunks = 0;
  for (int t = 0; t < m->ntensors; t++) {
    const ckpt_tensor *tt = &m->tensors[t];
    if (t > 0)
      FT_ASSERT_INV(strcmp(m->tensors[t - 1].name, tt->name) < 0, "tensors not sorted at %s",
                    tt->name);
    FT_ASSERT_INV(tt->len == ckpt_tensor_nbytes(tt->dtype, tt->ndim, tt->shape),
                  "tensor %s: %" PRIu64 " bytes for its dtype and shape", tt->name, tt->len);
    uint64_t at = 0;
    for (int c = 0; c < tt->nchunks; c++) {
      const ckpt_chunk_ref *r = &tt->chunks[c];
      FT_ASSERT_INV(r->offset == at && r->len > 0,
                    "tensor %s chunk %d: bytes %" PRIu64 "+%" PRIu64 ", expected from %" PRIu64,
                    tt->name, c, r->offset, r->len, at);
      at += r->len;
      stored += r->stored;
    }
    FT_ASSERT_INV(at == tt->len, "tensor %s: chunks cover %" PRIu64 " of %" PRIu64 " bytes",
                  tt->name, at, tt->len);
    logical += tt->len;
    nchunks += tt->nchunks;
  }
  FT_ASSERT_INV(in->nchunks == nchunks && in->logical_bytes == logical &&
                    in->stored_bytes == stored && in->new_bytes <= stored,
                "record totals: %d chunks, %" PRIu64 " logical, %" PRIu64 " stored, %" PRIu64
                " new; counted %d, %" PRIu64 ", %" PRIu64,
                in->nchunks, in->logical_bytes, in->stored_bytes, in->new_bytes, nchunks, logical,
                stored);
}

/* After C5 (I1): the catalog lists the checkpoint COMMITTED, with the
 * manifest's chunks. After a failed C4/C5 (I2): it holds what it held. */
static void check_after(ckpt_store *s, const ckpt_manifest *m, int committed, int had_old,
                        const ckpt_info *old) {
  ckpt_info now;
  int rc = ckpt_store_get_info(s, m->info.run, m->info.step, &now);
  if (committed) {
    FT_ASSERT_INV(rc == FT_OK && now.state == m->info.state && now.nchunks == m->info.nchunks &&
                      now.pinned == m->info.pinned,
                  "%s step %" PRId64 " after C5: rc %d, state %d", m->info.run, m->info.step, rc,
                  rc ? -1 : now.state);
  } else if (rc == FT_OK || rc == FT_ENOENT) { /* a catalog that cannot be read proves nothing */
    FT_ASSERT_INV(had_old ? rc == FT_OK && now.state == old->state : rc == FT_ENOENT,
                  "%s step %" PRId64 " after a failed commit: rc %d, state %d (was %d)",
                  m->info.run, m->info.step, rc, rc ? -1 : now.state, had_old ? old->state : -1);
  }
}
#else
static void check_locked(ckpt_store *s, const char *step) {}
static void check_manifest(const ckpt_manifest *m, const ckpt_meta *meta) {}
static void check_after(ckpt_store *s, const ckpt_manifest *m, int committed, int had_old,
                        const ckpt_info *old) {}
#endif

/* One commit per (run, step) at a time: waits while another is under way
 * (or 16 are: then for any of them to end). */
static void busy_enter(ckpt_store *s, const char *run, int64_t step) {
  pthread_mutex_lock(&s->busy_mu);
  for (;;) {
    int clash = s->nbusy == (int)(sizeof s->busy / sizeof s->busy[0]);
    for (int i = 0; i < s->nbusy && !clash; i++)
      clash = s->busy[i].step == step && strcmp(s->busy[i].run, run) == 0;
    if (!clash)
      break;
    pthread_cond_wait(&s->busy_cv, &s->busy_mu);
  }
  s->busy[s->nbusy].run = run;
  s->busy[s->nbusy].step = step;
  s->nbusy++;
  pthread_mutex_unlock(&s->busy_mu);
}

static void busy_leave(ckpt_store *s, const char *run, int64_t step) {
  pthread_mutex_lock(&s->busy_mu);
  for (int i = 0; i < s->nbusy; i++)
    if (s->busy[i].step == step && s->busy[i].run == run) {
      s->busy[i] = s->busy[--s->nbusy];
      break;
    }
  pthread_cond_broadcast(&s->busy_cv);
  pthread_mutex_unlock(&s->busy_mu);
}

int ckpt_commit_busy(ckpt_store *s, const char *run, int64_t step) {
  pthread_mutex_lock(&s->busy_mu);
  int busy = 0;
  for (int i = 0; i < s->nbusy && !busy; i++)
    busy = s->busy[i].step == step && strcmp(s->busy[i].run, run) == 0;
  pthread_mutex_unlock(&s->busy_mu);
  return busy;
}

/* C3: every chunk of m exists in the tier (freshened), into refs (k of
 * them) with its stored size; a memory-level commit only lists them. */
static int check_chunks(ckpt_store *s, const ckpt_meta *meta, ckpt_manifest *m, int memory,
                        ckpt_chunk_ref *refs, int *k) {
  char key[256];
  *k = 0;
  m->info.stored_bytes = 0;
  for (int t = 0; t < m->ntensors; t++) {
    ckpt_tensor *tt = &m->tensors[t];
    for (int c = 0; c < tt->nchunks; c++) {
      if (memory) { /* in workers' memory only: nothing to check */
        tt->chunks[c].stored = 0;
        refs[(*k)++] = tt->chunks[c];
        continue;
      }
      const ckpt_chunk_ref *r = &tt->chunks[c];
      uint64_t size = 0;
      for (int d = -1; d < r->depth; d++) { /* the chunk, then its chain */
        char hex[CKPT_HEX_LEN + 1];
        ckpt_hex(d < 0 ? r->hash : r->chain + (size_t)d * CKPT_HASH_LEN, hex);
        ckpt_objkey_chunk(key, sizeof key, hex);
        int rc = s->tier->exists(s->tier, key, 1, d < 0 ? &size : NULL, NULL);
        if (rc == FT_ENOENT)
          return ft_err_set(FT_ENOENT,
                            "commit of %s step %" PRId64 " refused: chunk %s (%s%s bytes %" PRIu64
                            "..%" PRIu64 ") is not in the store",
                            meta->run, meta->step, hex, d < 0 ? "" : "a base of the delta of ",
                            tt->name, r->offset, r->offset + r->len);
        if (rc)
          return rc;
      }
      tt->chunks[c].stored = size;
      m->info.stored_bytes += size;
      refs[(*k)++] = tt->chunks[c];
    }
  }
  return FT_OK;
}

/* C3 of a checkpoint made of shard objects (format 2): each exists in the
 * tier. ckpt_store_put_shard freshened a shard's chunks just before it
 * wrote the object, so an object younger than half the GC grace vouches
 * for its chunks: its mtime W is at least now - grace/2, now is after the
 * clock reading T0 of any GC whose mark misses this checkpoint (as for
 * C3 above), so the chunks' timestamps are >= W > T0 - grace, the cutoff
 * below which that GC sweeps (ckpt_gc.c), and the object itself is as
 * safe. An older object (a shard committed long after it was saved) is
 * read and its chunks checked and freshened one by one, as check_chunks
 * does, then it is freshened too. The commit never freshens an object
 * without its chunks, so an object's time always vouches for them.
 * A host's leaf (ckpt_store_put_host) vouches for its shard objects the
 * same way, one level up: it is checked to exist, and when it and the
 * oldest of its shard objects (the time its agent saw) are both younger
 * than half the grace, every object under it is, so all are safe as
 * above; otherwise the leaf is read and each of its shard objects checked
 * as a rank's is, then the leaf freshened. So a commit of hosts' leaves
 * asks the tier about one object per host. */
static int check_one(ckpt_store *s, const ckpt_meta *meta, ckpt_manifest *m,
                     const ckpt_shard_obj *o, int64_t young) {
  char key[128];
  int64_t mtime = 0;
  ckpt_objkey_shard(key, sizeof key, o->hash);
  int rc = s->tier->exists(s->tier, key, 0, NULL, &mtime);
  if (rc == FT_ENOENT)
    return ft_err_set(FT_ENOENT,
                      "commit of %s step %" PRId64 " refused: the shard object of rank %d (%s) "
                      "is not in the store",
                      meta->run, meta->step, o->rank, key);
  if (rc || mtime >= young)
    return rc;
  ckpt_shard *sh = NULL;
  if ((rc = ckpt_shard_obj_read(s->tier, m, o, &sh)) == FT_OK)
    rc = ckpt_freshen_shard(s->tier, sh);
  ckpt_shard_free(sh);
  if (rc)
    return ckpt_err_wrap(rc, "commit of %s step %" PRId64 " refused", meta->run, meta->step);
  return s->tier->exists(s->tier, key, 1, NULL, NULL);
}

static int check_host(ckpt_store *s, const ckpt_meta *meta, ckpt_manifest *m,
                      const ckpt_host_obj *h, int64_t young) {
  char key[128];
  int64_t mtime = 0;
  ckpt_objkey_shard(key, sizeof key, h->hash);
  int rc = s->tier->exists(s->tier, key, 0, NULL, &mtime);
  if (rc == FT_ENOENT)
    return ft_err_set(FT_ENOENT,
                      "commit of %s step %" PRId64 " refused: the index leaf of ranks %d..%d "
                      "(%s, its host's) is not in the store",
                      meta->run, meta->step, h->lo, h->hi - 1, key);
  if (rc || (mtime >= young && h->oldest >= young))
    return rc;
  ckpt_index_node nd;
  if ((rc = ckpt_index_node_read(s->tier, m, h->hash, 0, h->lo, h->hi, &nd)) != FT_OK)
    return ckpt_err_wrap(rc, "commit of %s step %" PRId64 " refused", meta->run, meta->step);
  for (int i = 0; i < nd.n && rc == FT_OK; i++) {
    ckpt_shard_obj o = {.rank = nd.e[i].lo};
    memcpy(o.hash, nd.e[i].hash, CKPT_HASH_LEN);
    rc = check_one(s, meta, m, &o, young);
  }
  ckpt_index_node_release(&nd);
  return rc ? rc : s->tier->exists(s->tier, key, 1, NULL, NULL);
}

static int check_shards(ckpt_store *s, const ckpt_meta *meta, ckpt_manifest *m) {
  int64_t now = 0;
  int rc = s->tier->now(s->tier, &now);
  int64_t young = now - s->gc_grace_s * 500000000LL;
  for (int i = 0; rc == FT_OK && i < m->nobjs; i++)
    rc = check_one(s, meta, m, &m->objs[i], young);
  for (int i = 0; rc == FT_OK && i < m->nhosts; i++)
    rc = check_host(s, meta, m, &m->hosts[i], young);
  return rc;
}

/* Raises *base to the step of run that first recorded chunk hash (the
 * catalog's first-seen index), if it is an earlier step of the same run. */
static void note_base(ckpt_store *s, const ckpt_meta *meta, const uint8_t *hash, int64_t *base) {
  char hex[CKPT_HEX_LEN + 1], key[256], *val = NULL;
  ckpt_hex(hash, hex);
  ckpt_key_chunk(key, sizeof key, hex);
  if (ckpt_catalog_get(s->cat, key, &val, NULL) != FT_OK)
    return;
  const char *slash = strrchr(val, '/');
  long long st = slash ? strtoll(slash + 1, NULL, 10) : -1;
  if (slash && (size_t)(slash - val) == strlen(meta->run) &&
      !strncmp(val, meta->run, (size_t)(slash - val)) && st > *base && st < meta->step)
    *base = st;
  free(val);
}

int ckpt_store_commit(ckpt_store *s, const ckpt_meta *meta, ckpt_shard *const *shards,
                      int nshards) {
  if (s->read_only)
    return ft_err_set(FT_ESTATE, "commit: the store is open read-only");
  ckpt_manifest *m = NULL;
  ckpt_chunk_ref *refs = NULL;
  char *mjs = NULL, *ijs = NULL, *oldman = NULL;
  ckpt_batch *b = NULL;
  char key[256], okey[256];
  /* C1; shard references: a manifest of shard objects (format 2) */
  int objs = nshards > 0 && shards[0] && shards[0]->is_ref;
  int memory = meta->level == CKPT_LEVEL_MEMORY;
  if (objs && memory)
    return ft_err_set(FT_EINVAL,
                      "commit of %s step %" PRId64
                      ": a memory-level checkpoint cannot be made of stored shards",
                      meta->run, meta->step);
  int rc = objs ? ckpt_manifest_build_refs(meta, shards, nshards, &m)
                : ckpt_manifest_build(meta, shards, nshards, &m);
  /* and the index of its shard objects (format 3), written before C3: its
   * objects are younger than any GC's cutoff until the commit records
   * them, and one left by a failed commit is swept as an unnamed shard
   * object is */
  if (rc == FT_OK && objs && (rc = ckpt_index_write(s->tier, m)) != FT_OK) {
    ckpt_manifest_free(m);
    return ckpt_err_wrap(rc, "commit of %s step %" PRId64, meta->run, meta->step);
  }
  if (rc)
    return rc;
  int nrefs = objs ? 0 : m->info.nchunks, k = 0;
  refs = malloc((size_t)(nrefs ? nrefs : 1) * sizeof *refs);
  if (!refs) {
    ckpt_manifest_free(m);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  busy_enter(s, meta->run, meta->step);
  uint64_t epoch;
  int checked;
  char why[600] = "";
  for (int tries = 0;; tries++) {
    /* C3 first, without meta_mu (see above) */
    pthread_mutex_lock(&s->meta_mu);
    epoch = s->gc_epoch;
    pthread_mutex_unlock(&s->meta_mu);
    checked = objs ? check_shards(s, meta, m) : check_chunks(s, meta, m, memory, refs, &k);
    if (checked) /* the catalog reads below may set another error */
      snprintf(why, sizeof why, "%s", ft_err_detail());
    pthread_mutex_lock(&s->meta_mu); /* C2 */
    /* a GC took its clock reading meanwhile: C3 again, still without
     * meta_mu, twice; then under it (below) */
    if (s->gc_epoch == epoch || checked || tries == 2)
      break;
    pthread_mutex_unlock(&s->meta_mu);
  }
  ckpt_info old;
  memset(&old, 0, sizeof old);
  rc = ckpt_store_get_info(s, meta->run, meta->step, &old);
  /* a memory-level record, upgraded now that its chunks reached the store */
  int upgrade = rc == FT_OK && old.level == CKPT_LEVEL_MEMORY && !memory &&
                (old.state == CKPT_COMMITTED || old.state == CKPT_GOOD);
  if (rc == FT_OK && old.state != CKPT_PENDING && old.state != CKPT_BAD && !upgrade) {
    rc = ft_err_set(FT_EEXIST, "checkpoint %s step %" PRId64 " is already %s", meta->run,
                    meta->step, ckpt_state_name(old.state));
    goto out;
  }
  if (rc != FT_OK && rc != FT_ENOENT)
    goto out;
  /* a pin set on the PENDING record survives; a BAD one being replaced by a
   * retrained step (after a loss-spike rollback) keeps its pin too */
  int was_pinned = rc == FT_OK && old.pinned;
  int had_old = rc == FT_OK;
  int old_in_tier = had_old && old.level != CKPT_LEVEL_MEMORY; /* a manifest object */

  check_locked(s, "C3");
  if (checked) {
    rc = ft_err_set(checked, "%s", why);
    goto out;
  }
  if (memory && meta->memory_epoch &&
      meta->memory_epoch != __atomic_load_n(&s->mem_drops, __ATOMIC_SEQ_CST) + 1) {
    rc = ft_err_set(FT_ECANCELED,
                    "memory-level checkpoint %s step %" PRId64
                    " was made before the run's memory records were dropped: not recorded",
                    meta->run, meta->step);
    goto out;
  }
  /* a GC took its clock reading since C3 ran: the chunks again, under
   * meta_mu */
  if (s->gc_epoch != epoch &&
      (rc = objs ? check_shards(s, meta, m) : check_chunks(s, meta, m, memory, refs, &k)))
    goto out;
  m->info.time_ms = ft_wall_ms();
  m->info.state = upgrade && old.state == CKPT_GOOD ? CKPT_GOOD : CKPT_COMMITTED;
  m->info.pinned = was_pinned;
  m->info.level = memory ? CKPT_LEVEL_MEMORY : s->tier->commit_level;

  /* New bytes: chunks that no earlier commit recorded (each counted once). */
  b = ckpt_batch_new();
  if (!b) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  qsort(refs, (size_t)k, sizeof *refs, ref_cmp);
  char first[200];
  snprintf(first, sizeof first, "%s/%020" PRId64, meta->run, meta->step);
  if (!objs) { /* format 2: the writers counted them (ckpt_shard_sum) */
    m->info.new_bytes = 0;
    m->info.base_step = -1;
  }
  for (int i = 0; i < k && !memory; i++) {
    if (i > 0 && memcmp(refs[i].hash, refs[i - 1].hash, CKPT_HASH_LEN) == 0)
      continue;
    char hex[CKPT_HEX_LEN + 1], *val = NULL;
    ckpt_hex(refs[i].hash, hex);
    ckpt_key_chunk(key, sizeof key, hex);
    rc = ckpt_catalog_get(s->cat, key, &val, NULL);
    free(val);
    if (rc == FT_ENOENT) {
      m->info.new_bytes += refs[i].stored;
      ckpt_batch_put(b, key, first, strlen(first));
    } else if (rc) {
      goto out;
    }
    if (refs[i].depth > 0) /* the base: the step that first had a delta's base */
      note_base(s, meta, refs[i].chain, &m->info.base_step);
  }

  mjs = ckpt_manifest_to_json(m);
  ijs = ckpt_info_to_json(&m->info);
  if (!mjs || !ijs) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  if (ckpt_objkey_manifest(okey, sizeof okey, meta->run, meta->step) < 0) {
    rc = ft_err_set(FT_EINVAL, "run name '%s' too long", meta->run);
    goto out;
  }
  if (old_in_tier && !memory) {
    /* replacing a BAD (or pinned PENDING) record: keep what it replaces, to
     * put back if the commit fails, and make its mark say what it will be
     * (a memory-level commit leaves the tier alone: the old object and its
     * mark stay what they were) */
    ckpt_key_man(key, sizeof key, meta->run, meta->step);
    if (ckpt_catalog_get(s->cat, key, &oldman, NULL) != FT_OK)
      oldman = NULL;
    rc = ckpt_store_put_mark(s, &m->info);
    if (rc)
      goto out;
  }
  check_manifest(m, meta);
  check_locked(s, "C4");
  if (!memory) {
    int unlocked = !had_old; /* nothing to put back: meta_mu goes meanwhile */
    if (unlocked) {
      epoch = s->gc_epoch;
      pthread_mutex_unlock(&s->meta_mu);
    }
    rc = s->tier->put(s->tier, okey, mjs, strlen(mjs)); /* C4 */
    if (unlocked) {
      pthread_mutex_lock(&s->meta_mu);
      if (rc == FT_OK && s->gc_epoch != epoch) /* a GC took its clock reading */
        rc = objs ? check_shards(s, meta, m) : check_chunks(s, meta, m, memory, refs, &k);
    }
    if (rc)
      goto undo;
  }
  ckpt_key_info(key, sizeof key, meta->run, meta->step);
  ckpt_batch_put(b, key, ijs, strlen(ijs));
  ckpt_key_man(key, sizeof key, meta->run, meta->step);
  ckpt_batch_put(b, key, mjs, strlen(mjs));
  check_locked(s, "C5");
  rc = ckpt_catalog_write(s->cat, b); /* C5: the commit point */
  b = NULL;
  if (rc == FT_OK) {
    check_after(s, m, 1, had_old, &old);
    goto out;
  }
undo:
  /* C4 or C5 failed (a full disk, an I/O error): the catalog is as it was;
   * leave the tier as it was too, so no manifest object looks newer than
   * the catalog (ckpt_store_catalog_behind). Best effort: the error that
   * stopped the commit is the one returned. */
  {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ft_err_detail());
    if (memory)
      ; /* the tier was not touched */
    else if (oldman)
      s->tier->put(s->tier, okey, oldman, strlen(oldman));
    else if (!old_in_tier)
      s->tier->del(s->tier, okey);
    if (old_in_tier && !memory)
      ckpt_store_put_mark(s, &old);
    check_after(s, m, 0, had_old, &old);
    ft_err_set(rc, "commit of %s step %" PRId64 " failed, earlier checkpoints are untouched: %s",
               meta->run, meta->step, saved);
  }
out:
  if (pthread_mutex_unlock(&s->meta_mu)) /* C6 (an error-checking mutex in checked builds) */
    FT_BUG("commit of %s step %" PRId64 ": meta_mu was not held by this thread", meta->run,
           meta->step);
  busy_leave(s, meta->run, meta->step);
  ckpt_batch_free(b);
  free(mjs);
  free(ijs);
  free(oldman);
  free(refs);
  ckpt_manifest_free(m);
  return rc;
}
