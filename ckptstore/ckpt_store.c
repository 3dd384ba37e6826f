/*
 * ckpt_store: the store's facade: opening a store; listing, loading and
 * reading checkpoints; states and pins; rebuilding a catalog.
 *
 * The files below it (the tiers, the catalog, the manifests, the writer)
 * never call back into it: what they share lives below them too, in the
 * leaf (ckpt_leaf.c: object keys, names, error wrapping) and
 * ckpt_manifest.c (reading a manifest's shard objects from a tier). The
 * files above it (commit, GC, verify) call it and it calls none of them.
 * tests/unit/layering_store.py fails on a circle.
 *
 * A store is a tier (where chunks and manifest objects live) plus a catalog
 * (which checkpoints exist and their state). A writer holds the catalog's
 * lock and runs the background writer threads (ckpt_writer.c); a reader
 * (opts->read_only) only reads, and works while a writer is active.
 *
 * Reads trust nothing: every chunk is decoded into private memory and its
 * SHA-256 compared with its name before any byte reaches the caller; a
 * missing or damaged chunk is FT_ECORRUPT naming the chunk and the tensor.
 * Large reads decode chunks on up to opts->threads threads.
 *
 * State transitions done here (commit is in ckpt_commit.c, deletion in
 * ckpt_gc.c), by ckpt_store_set_state:
 *   (none)    -> PENDING     intent record (no manifest yet)
 *   COMMITTED -> GOOD | BAD; GOOD -> BAD; BAD -> GOOD (an operator's call)
 * PENDING -> COMMITTED only through ckpt_store_commit.
 * Checked in Debug and sanitizer builds (FT_ASSERT_INV, common/ft_bug.h):
 * meta_mu is an error-checking mutex there (a second lock by its holder, an
 * unlock by another thread are FT_BUG, not a hang); a change of state or pin
 * is one of the transitions above, made under meta_mu, and the record reads
 * back what was written (check_marked).
 *
 * URIs: "local:DIR" (the local tier) or "s3://bucket/prefix" (the tiered
 * tier of ckpt_s3_tiered.c: a cache directory in front of the bucket; the
 * catalog lives in the cache, <cache>/catalog). An s3:// store whose cache
 * has no catalog yet gets one rebuilt from the bucket's manifests at open
 * (ckpt_store_rebuild_catalog), so a new machine with an empty cache sees
 * every checkpoint the bucket holds.
 */
#include "ckpt_int.h"
#include "ckpt_s3.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ft_bug.h"
#include "ft_err.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*skip_fn)(void *ud, const char *key, const char *why);
static int ckpt_store_rebuild_into(ckpt_tier *tier, ckpt_catalog *cat, skip_fn skipped, void *ud,
                                   int *found, int *added);

typedef struct mkeys {
  char **v;
  size_t n, cap;
} mkeys;

static int mkeys_cb(void *ud, const char *key) {
  mkeys *k = ud;
  if (k->n == k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 64;
    char **n = realloc(k->v, cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    k->v = n;
    k->cap = cap;
  }
  if (!(k->v[k->n] = strdup(key)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  k->n++;
  return FT_OK;
}

/* 1 if the tier holds at least one checkpoint manifest, 0 if none, <0 error. */
static int any_manifest_cb(void *ud, const char *key) {
  int64_t step;
  if (ckpt_objkey_manifest_step(key, &step) == 0) {
    *(int *)ud = 1;
    return 1; /* stop listing */
  }
  return FT_OK;
}

static int run_dir_cb(void *ud, const char *key) {
  mkeys *k = ud;
  return strstr(key, ".tmp.") ? FT_OK : mkeys_cb(k, key);
}

static int has_manifests(ckpt_tier *tier) {
  mkeys runs = {0};
  int found = 0;
  int rc = tier->list(tier, CKPT_OBJ_MANIFESTS, run_dir_cb, &runs);
  for (size_t i = 0; rc == FT_OK && !found && i < runs.n; i++) {
    if (any_manifest_cb(&found, runs.v[i]) == 1)
      break; /* a bucket lists whole keys */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/", runs.v[i]);
    rc = tier->list(tier, sub, any_manifest_cb, &found);
    if (rc == 1)
      rc = FT_OK;
  }
  for (size_t i = 0; i < runs.n; i++)
    free(runs.v[i]);
  free(runs.v);
  return rc < 0 ? rc : found;
}

/* Moves a damaged catalog folder aside (kept for a post-mortem) so a new
 * one can be built in its place. */
static int set_catalog_aside(ckpt_store *s, const char *catdir) {
  char *aside = s->catalog_aside;
  size_t n = sizeof s->catalog_aside;
  if (snprintf(aside, n, "%s.damaged.%lld", catdir, (long long)time(NULL)) >= (int)n)
    return ft_err_set(FT_EINVAL, "catalog path %s too long", catdir);
  if (rename(catdir, aside) != 0) {
    aside[0] = 0;
    return ft_err_set(ft_err_from_errno(errno), "moving the damaged catalog %s aside: %s", catdir,
                      strerror(errno));
  }
  return FT_OK;
}

/* Writes the incomplete marker (CKPT_KEY_INCOMPLETE) into cat: the first
 * write of any rebuild, so one that stops midway leaves a catalog that
 * says so. */
static int mark_incomplete(ckpt_catalog *cat, const char *from) {
  char v[1400];
  int n = snprintf(v, sizeof v,
                   "a rebuild from the manifests of %s (started at %lld by pid %d) did not finish",
                   from, (long long)time(NULL), (int)getpid());
  ckpt_batch *b = ckpt_batch_new();
  if (b)
    ckpt_batch_put(b, CKPT_KEY_INCOMPLETE, v, (size_t)(n < (int)sizeof v ? n : (int)sizeof v - 1));
  return ckpt_catalog_write(cat, b);
}

/* FT_EDB if the open catalog carries the incomplete marker: it may lack
 * checkpoints the store has, so it is never listed from, restored from or
 * collected; only a rebuild opens it. One read, no listing of the store. */
static int check_complete(ckpt_store *s, const char *catdir) {
  char *why = NULL;
  int rc = ckpt_catalog_get(s->cat, CKPT_KEY_INCOMPLETE, &why, NULL);
  if (rc == FT_ENOENT)
    return FT_OK;
  if (rc)
    return rc;
  rc = ft_err_set(FT_EDB,
                  "the catalog %s is incomplete: %s, so it may lack checkpoints the store has; "
                  "it is not used until 'ckpt rebuild-catalog %s' completes",
                  catdir, why, s->uri);
  free(why);
  return rc;
}

/* Makes the catalog of catdir beside it, at <catdir>.rebuilding, and
 * renames it into place only when whole, so an interrupted build leaves
 * nothing at catdir that looks like a catalog (the next open builds again).
 * fill: records every manifest of the store (what an s3:// cache without a
 * catalog gets); 0: an empty catalog that carries the incomplete marker
 * from its first moment, which an explicit rebuild then fills in place.
 * FT_EBUSY while another process builds it. */
static int build_aside(ckpt_store *s, const char *catdir, int fill) {
  char aside[PATH_MAX + 64], cur[PATH_MAX + 64];
  if (snprintf(aside, sizeof aside, "%s.rebuilding", catdir) >= (int)sizeof aside)
    return ft_err_set(FT_EINVAL, "catalog path %s too long", catdir);
  snprintf(cur, sizeof cur, "%s/CURRENT", catdir);
  ckpt_catalog *cat = NULL;
  int rc = ckpt_catalog_open(aside, CKPT_CAT_CREATE, &cat);
  if (rc == FT_EDB) { /* a build that a crash cut short and damaged: start again */
    rc = ckpt_catalog_destroy(aside);
    if (rc == FT_OK)
      rc = ckpt_catalog_open(aside, CKPT_CAT_CREATE, &cat);
  }
  if (rc == FT_EBUSY)
    return ckpt_err_wrap(
        rc, "another process is building the catalog %s; try again when it is done", catdir);
  if (rc)
    return rc;
  /* a folder left by an interrupted build still carries the marker: the
   * rebuild goes on from what it holds (each record is whole) */
  rc = fill ? ckpt_store_rebuild_into(s->tier, cat, NULL, NULL, NULL, NULL)
            : mark_incomplete(cat, s->tier->desc);
  ckpt_catalog_close(cat);
  if (rc)
    return rc;
  struct stat st;
  for (int tries = 0; rename(aside, catdir) != 0; tries++) {
    int e = errno;
    if ((e == ENOTEMPTY || e == EEXIST) && stat(cur, &st) == 0)
      return ckpt_catalog_destroy(aside); /* another process built it first: theirs is used */
    if ((e == ENOTEMPTY || e == EEXIST) && tries == 0 && (rc = set_catalog_aside(s, catdir)) == 0)
      continue; /* something that is no catalog was in the way: kept aside */
    return rc ? rc
              : ft_err_set(ft_err_from_errno(e), "renaming the built catalog %s to %s: %s", aside,
                           catdir, strerror(e));
  }
  char lock[PATH_MAX + 80];
  snprintf(lock, sizeof lock, "%s.lock", aside);
  unlink(lock);
  char *slash = strrchr(aside, '/');
  if (slash && slash != aside) { /* the rename survives a power loss */
    *slash = 0;
    int fd = open(aside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
  }
  return FT_OK;
}

/* Opens the catalog of a store. A catalog is created in place only where
 * the store has no manifests yet (a new store); where it has some, a
 * missing catalog is damage: FT_EDB naming it and saying to run `ckpt
 * rebuild-catalog`, never an empty store. o->rebuild_catalog (writers): a
 * missing catalog, or a damaged one (moved aside), is replaced by an empty
 * one that carries the incomplete marker (build_aside), for
 * ckpt_store_rebuild_catalog to fill. An s3:// cache without a catalog
 * gets one built from the bucket here (the bucket is the store; a new
 * cache is only an empty copy), beside it and renamed in when whole. Every
 * open but a rebuild's refuses a catalog with the marker (check_complete). */
static int open_catalog(ckpt_store *s, const char *catdir, int is_s3, const ckpt_store_opts *o) {
  char cur[PATH_MAX + 32];
  struct stat st;
  snprintf(cur, sizeof cur, "%s/CURRENT", catdir);
  int missing = stat(cur, &st) != 0;
  int rebuild = o->rebuild_catalog && !s->read_only;
  int rc;
  if (missing && !is_s3 && !rebuild) {
    rc = has_manifests(s->tier);
    if (rc < 0)
      return ckpt_err_wrap(rc, "looking for manifests in the store %s", s->tier->desc);
    if (rc == 1)
      return ft_err_set(FT_EDB,
                        "the store %s has checkpoint manifests but its catalog %s is missing "
                        "(deleted or lost); run 'ckpt rebuild-catalog %s' to rebuild it "
                        "from the manifests",
                        s->tier->desc, catdir, s->uri);
  }
  if (!missing && rebuild) {
    rc = ckpt_catalog_open(catdir, CKPT_CAT_WRITE, &s->cat);
    if (rc != FT_EDB)
      return rc;
    rc = set_catalog_aside(s, catdir);
    if (rc)
      return rc;
    missing = 1;
  }
  if (missing && (is_s3 || rebuild)) {
    rc = build_aside(s, catdir, !rebuild);
    if (rc && !rebuild)
      return ckpt_err_wrap(rc,
                           "building the catalog %s from the bucket (nothing was put in its "
                           "place; the next use tries again)",
                           catdir);
    if (rc)
      return rc;
    missing = 0;
  }
  int mode = s->read_only ? CKPT_CAT_READ : missing ? CKPT_CAT_CREATE : CKPT_CAT_WRITE;
  rc = ckpt_catalog_open(catdir, mode, &s->cat);
  if (rc == FT_OK && !rebuild)
    rc = check_complete(s, catdir);
  if (rc == FT_OK && s->catalog_aside[0]) {
    /* other components' records (the supervisor's run state) are in no
     * manifest: keep what still reads of them */
    int src = ckpt_catalog_salvage(s->catalog_aside, s->cat, CKPT_META_PREFIX, &s->salvaged_meta);
    if (src)
      snprintf(s->salvage_error, sizeof s->salvage_error, "%s", ft_err_detail());
  }
  return rc;
}

int ckpt_store_open(const char *uri, const ckpt_store_opts *opts, ckpt_store **out) {
  ckpt_store_opts o = {0};
  if (opts)
    o = *opts;
  *out = NULL;
  if (!uri || !uri[0])
    return ft_err_set(FT_EINVAL, "no store given (a URI like local:/path/to/store)");
  const char *dir = NULL;
  ckpt_s3_config *s3 = NULL;
  if (strncmp(uri, "local:", 6) == 0) {
    dir = uri + 6;
  } else if (uri[0] == '/' || uri[0] == '.') {
    dir = uri;
  } else if (strncmp(uri, "s3://", 5) == 0) {
    if (!(s3 = calloc(1, sizeof *s3)))
      return ft_err_set(FT_ENOMEM, "out of memory");
    int rc = ckpt_s3_config_from_uri(uri, s3);
    if (rc) {
      ckpt_s3_config_wipe(s3);
      free(s3);
      return rc;
    }
    dir = s3->cache_dir;
  } else {
    return ft_err_set(FT_EINVAL,
                      "store URI '%s' is not supported: use local:DIR or s3://bucket/prefix", uri);
  }
  if (!dir[0])
    return ft_err_set(FT_EINVAL, "store URI '%s' names no folder (local:DIR)", uri);
  /* A relative folder is taken from the current directory, made absolute
   * once here so every path below has a parent to fsync. */
  char absdir[PATH_MAX];
  if (dir[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) ||
        snprintf(absdir, sizeof absdir, "%s/%s", cwd, dir) >= (int)sizeof absdir) {
      if (s3)
        ckpt_s3_config_wipe(s3);
      free(s3);
      return ft_err_set(FT_EINVAL, "store folder '%s': path too long", dir);
    }
    dir = absdir;
  }
  if (o.threads < 0 || o.chunk_mib < 0 || o.chunk_mib > 1024 || o.zstd_level < 0 ||
      o.zstd_level > 22 || o.full_every < 0 || o.full_every > CKPT_MAX_FULL_EVERY) {
    if (s3)
      ckpt_s3_config_wipe(s3);
    free(s3);
    return ft_err_set(FT_EINVAL,
                      "store options out of range (threads %d, chunk_mib %d, "
                      "zstd_level %d, full_every %d)",
                      o.threads, o.chunk_mib, o.zstd_level, o.full_every);
  }
  ckpt_store *s = calloc(1, sizeof *s);
  if (!s || !(s->uri = strdup(uri))) {
    free(s);
    if (s3)
      ckpt_s3_config_wipe(s3);
    free(s3);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  s->read_only = o.read_only || o.shard_writer;
  s->shard_writer = o.shard_writer;
  s->threads = o.threads ? o.threads : CKPT_DEFAULT_THREADS;
  s->chunk_mib = o.chunk_mib ? o.chunk_mib : CKPT_DEFAULT_CHUNK_MIB;
  s->zstd_level = o.zstd_level ? o.zstd_level : CKPT_DEFAULT_ZSTD_LEVEL;
  s->queue_bytes = o.queue_bytes ? o.queue_bytes : CKPT_DEFAULT_QUEUE_BYTES;
  s->gc_grace_s = CKPT_DEFAULT_GC_GRACE_S;
  s->full_every = o.full_every;
  pthread_mutex_init(&s->delta_mu, NULL);
#if FT_INVARIANTS_ON
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(&s->meta_mu, &ma);
  pthread_mutexattr_destroy(&ma);
#else
  pthread_mutex_init(&s->meta_mu, NULL);
#endif
  pthread_mutex_init(&s->busy_mu, NULL);
  pthread_cond_init(&s->busy_cv, NULL);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_space, NULL);
  pthread_cond_init(&s->cv_jobs, NULL);

  char catdir[PATH_MAX + 16];
  int rc;
  if (s3) {
    if (dir != s3->cache_dir)
      snprintf(s3->cache_dir, sizeof s3->cache_dir, "%s", dir);
    dir = s3->cache_dir;
    rc = ckpt_s3_tiered_open(s3, !o.read_only, &s->tier);
    if (rc)
      goto fail;
  } else {
    rc = ckpt_tier_local_open(dir, !o.read_only, &s->tier);
    if (rc) {
      if (rc == FT_ENOENT)
        ft_err_set(FT_ENOENT, "no store at %s (check --store / CKPT_STORE)", dir);
      goto fail;
    }
  }
  if (!(s->dir = strdup(dir))) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto fail;
  }
  if (o.catalog_dir)
    snprintf(catdir, sizeof catdir, "%s", o.catalog_dir);
  else
    snprintf(catdir, sizeof catdir, "%s/catalog", dir);
  rc = open_catalog(s, catdir, s3 != NULL, &o);
  if (rc)
    goto fail;
  if (!o.read_only) {
    rc = ckpt_writer_start(s);
    if (rc)
      goto fail;
  }
  if (s3) {
    ckpt_s3_config_wipe(s3);
    free(s3);
  }
  *out = s;
  return FT_OK;
fail:
  if (s3) {
    ckpt_s3_config_wipe(s3);
    free(s3);
  }
  ckpt_store_free(s);
  return rc;
}

void ckpt_store_free(ckpt_store *s) {
  if (!s)
    return;
  ckpt_writer_stop(s);
  ckpt_delta_free(s);
  pthread_mutex_destroy(&s->delta_mu);
  ckpt_mem_free(s->mem);
  ckpt_catalog_close(s->cat);
  if (s->tier)
    s->tier->free(s->tier);
  pthread_mutex_destroy(&s->meta_mu);
  pthread_mutex_destroy(&s->busy_mu);
  pthread_cond_destroy(&s->busy_cv);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_space);
  pthread_cond_destroy(&s->cv_jobs);
  free(s->pool);
  free(s->uri);
  free(s->dir);
  free(s);
}

const char *ckpt_store_dir(const ckpt_store *s) {
  return s->dir;
}

int ckpt_store_set_gc_grace(ckpt_store *s, int64_t seconds) {
  if (seconds < 0)
    return ft_err_set(FT_EINVAL, "gc grace period must be >= 0 seconds");
  s->gc_grace_s = seconds;
  return FT_OK;
}

/* ---- info records ------------------------------------------------------------ */

int ckpt_store_get_info(ckpt_store *s, const char *run, int64_t step, ckpt_info *info) {
  char key[256], *val = NULL;
  ckpt_key_info(key, sizeof key, run, step);
  int rc = ckpt_catalog_get(s->cat, key, &val, NULL);
  if (rc == FT_ENOENT)
    return ft_err_set(
        FT_ENOENT, "no checkpoint of run '%s' at step %" PRId64 " (ckpt ls lists the checkpoints)",
        run, step);
  if (rc)
    return rc;
  rc = ckpt_info_from_json(val, info);
  free(val);
  return rc;
}

int ckpt_store_put_info(ckpt_store *s, const ckpt_info *info) {
  char key[256];
  char *js = ckpt_info_to_json(info);
  if (!js)
    return ft_err_set(FT_ENOMEM, "out of memory");
  ckpt_key_info(key, sizeof key, info->run, info->step);
  ckpt_batch *b = ckpt_batch_new();
  if (b)
    ckpt_batch_put(b, key, js, strlen(js));
  free(js);
  return ckpt_catalog_write(s->cat, b);
}

static int writable(ckpt_store *s, const char *what) {
  if (s->read_only)
    return ft_err_set(FT_ESTATE, "%s needs the store opened for writing (it is read-only)", what);
  return FT_OK;
}

/* ---- listing --------------------------------------------------------------------- */

typedef struct list_acc {
  ckpt_info *v;
  size_t n, cap;
} list_acc;

static int list_cb(void *ud, const char *key, const char *val, size_t vlen) {
  list_acc *a = ud;
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 16;
    ckpt_info *n = realloc(a->v, cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    a->v = n;
    a->cap = cap;
  }
  int rc = ckpt_info_from_json(val, &a->v[a->n]);
  if (rc)
    return ckpt_err_wrap(rc, "catalog record %s", key);
  a->n++;
  return FT_OK;
}

static int info_cmp(const void *a, const void *b) {
  const ckpt_info *x = a, *y = b;
  int c = strcmp(x->run, y->run);
  if (c)
    return c;
  return x->step < y->step ? -1 : x->step > y->step;
}

int ckpt_store_list(ckpt_store *s, const char *run, ckpt_info **out, size_t *n) {
  char prefix[256];
  list_acc a = {0};
  *out = NULL;
  *n = 0;
  ckpt_key_info_prefix(prefix, sizeof prefix, run);
  int rc = ckpt_catalog_scan(s->cat, prefix, list_cb, &a);
  if (rc) {
    free(a.v);
    return rc;
  }
  if (a.n > 1)
    qsort(a.v, a.n, sizeof *a.v, info_cmp);
  *out = a.v;
  *n = a.n;
  return FT_OK;
}

int ckpt_store_keep_in_memory(ckpt_store *s, uint64_t max_bytes) {
  if (s->mem)
    return FT_OK;
  return ckpt_mem_new(max_bytes, &s->mem);
}

void ckpt_store_read_stats(ckpt_store *s, ckpt_read_stats *st) {
  st->memory_bytes = __atomic_load_n(&s->rd_mem_bytes, __ATOMIC_RELAXED);
  st->store_bytes = __atomic_load_n(&s->rd_tier_bytes, __ATOMIC_RELAXED);
  st->memory_rejected = __atomic_load_n(&s->rd_mem_rejected, __ATOMIC_RELAXED);
  st->remote_bytes = __atomic_load_n(&s->rd_remote_bytes, __ATOMIC_RELAXED);
  st->remote_rejected = __atomic_load_n(&s->rd_remote_rejected, __ATOMIC_RELAXED);
  st->meta_bytes = __atomic_load_n(&s->rd_meta_bytes, __ATOMIC_RELAXED);
}

void ckpt_store_set_remote(ckpt_store *s, ckpt_remote_fn fn, void *ud) {
  s->remote = fn;
  s->remote_ud = ud;
}

int ckpt_store_refresh(ckpt_store *s) {
  return ckpt_catalog_refresh(s->cat);
}

int ckpt_store_latest(ckpt_store *s, const char *run, int64_t max_step, int64_t *step) {
  return ckpt_store_latest_at(s, run, max_step, CKPT_LEVEL_MEMORY, step);
}

int ckpt_store_latest_at(ckpt_store *s, const char *run, int64_t max_step, int max_level,
                         int64_t *step) {
  ckpt_info *v = NULL;
  size_t n = 0;
  int rc = ckpt_store_list(s, run, &v, &n);
  if (rc)
    return rc;
  rc = ft_err_set(FT_ENOENT,
                  "run '%s' has no committed or good checkpoint%s at or before step %" PRId64, run,
                  max_level < CKPT_LEVEL_MEMORY ? " in the store" : "", max_step);
  for (size_t i = n; i-- > 0;) {
    if (v[i].step <= max_step && (v[i].state == CKPT_COMMITTED || v[i].state == CKPT_GOOD) &&
        v[i].level <= max_level) {
      *step = v[i].step;
      rc = FT_OK;
      break;
    }
  }
  free(v);
  return rc;
}

/* ---- loading --------------------------------------------------------------------- */

/* ---- shard objects ------------------------------------------------------------------ */

int ckpt_freshen_shard(ckpt_tier *t, const ckpt_shard *sh) {
  int rc = FT_OK;
  for (int p = 0; rc == FT_OK && p < sh->nparts; p++)
    for (int c = 0; rc == FT_OK && c < sh->parts[p].nchunks; c++) {
      const ckpt_chunk_ref *r = &sh->parts[p].chunks[c];
      for (int d = -1; rc == FT_OK && d < r->depth; d++) { /* the chunk, then its chain */
        char hex[CKPT_HEX_LEN + 1], key[128];
        ckpt_hex(d < 0 ? r->hash : r->chain + (size_t)d * CKPT_HASH_LEN, hex);
        ckpt_objkey_chunk(key, sizeof key, hex);
        rc = t->exists(t, key, 1, NULL, NULL);
        if (rc == FT_ENOENT)
          rc = ft_err_set(FT_ENOENT,
                          "chunk %s (%s%s bytes %" PRIu64 "..%" PRIu64
                          ", rank %d) is not in the store",
                          hex, d < 0 ? "" : "a base of the delta of ", sh->parts[p].name, r->offset,
                          r->offset + r->len, sh->rank);
      }
    }
  return rc;
}

int ckpt_store_put_shard(ckpt_store *s, ckpt_shard *sh) {
  if (!sh || sh->is_ref)
    return ft_err_set(FT_EINVAL, "put_shard: not a shard with parts");
  /* every chunk and base is in the tier, freshened: the commit checks only
   * the shard object, which is written after (its time then says when its
   * chunks were last freshened, ckpt_commit.c) */
  char key[256];
  int rc = ckpt_freshen_shard(s->tier, sh);
  if (rc)
    return ckpt_err_wrap(rc, "shard of %s step %" PRId64 " rank %d", sh->run, sh->step, sh->rank);
  ckpt_shard_add_up(sh);
  char *js = ckpt_shard_to_json(sh);
  if (!js)
    return ft_err_set(FT_ENOMEM, "out of memory");
  size_t n = strlen(js);
  rc = ckpt_sha256(js, n, sh->object);
  ckpt_objkey_shard(key, sizeof key, sh->object);
  if (rc == FT_OK)
    rc = s->tier->put(s->tier, key, js, n);
  if (rc == FT_OK && s->tier->sync)
    rc = s->tier->sync(s->tier, key);
  free(js);
  if (rc)
    return ckpt_err_wrap(rc, "shard of %s step %" PRId64 " rank %d", sh->run, sh->step, sh->rank);
  sh->has_object = 1;
  return FT_OK;
}

int ckpt_store_put_host(ckpt_store *s, ckpt_shard *const *refs, int n, ckpt_shard **out) {
  *out = NULL;
  char *leaf = NULL, key[128];
  ckpt_shard *h = NULL;
  int rc = ckpt_host_ref_build(refs, n, &leaf, &h);
  /* each shard object is there, and the oldest one's time goes with the
   * leaf: the commit vouches for them by it (ckpt_commit.c, check_shards) */
  for (int i = 0; rc == FT_OK && i < n; i++) {
    int64_t mtime = 0;
    ckpt_objkey_shard(key, sizeof key, refs[i]->object);
    rc = s->tier->exists(s->tier, key, 0, NULL, &mtime);
    if (rc == FT_ENOENT)
      rc = ft_err_set(FT_ENOENT,
                      "host reference of %s step %" PRId64 ": the shard object of "
                      "rank %d (%s) is not in the store",
                      refs[i]->run, refs[i]->step, refs[i]->rank, key);
    if (rc == FT_OK && (i == 0 || mtime < h->oldest))
      h->oldest = mtime;
  }
  if (rc == FT_OK) {
    ckpt_objkey_shard(key, sizeof key, h->object);
    rc = s->tier->put(s->tier, key, leaf, strlen(leaf));
    if (rc == FT_OK && s->tier->sync)
      rc = s->tier->sync(s->tier, key);
    if (rc)
      rc = ckpt_err_wrap(rc, "host leaf of %s step %" PRId64 " ranks %d..%d", h->run, h->step,
                         h->rank, h->rank + n - 1);
  }
  free(leaf);
  if (rc) {
    ckpt_shard_free(h);
    return rc;
  }
  *out = h;
  return FT_OK;
}

int ckpt_manifest_expand(ckpt_store *s, ckpt_manifest *m) {
  return ckpt_manifest_expand_tier(s->tier, m);
}

/* A checkpoint this process's catalog does not know, read from its
 * manifest object (foreign_commits: another host's process committed it;
 * B1 of ckpt_s3_tiered.c: a manifest reaches the bucket only after every
 * chunk it names). The manifest checks its own trailing hash. */
static int load_foreign(ckpt_store *s, const char *run, int64_t step, int lazy,
                        ckpt_manifest **out) {
  char key[256], *js = NULL;
  size_t len = 0;
  ckpt_objkey_manifest(key, sizeof key, run, step);
  int rc = ckpt_get_text(s->tier, key, &js, &len);
  if (rc == FT_ENOENT)
    return ft_err_set(FT_ENOENT,
                      "no checkpoint of run '%s' at step %" PRId64
                      " (neither in this host's catalog nor as %s in the bucket)",
                      run, step, key);
  if (rc)
    return rc;
  ckpt_manifest *m = NULL;
  rc = lazy ? ckpt_manifest_from_json(js, &m) : ckpt_manifest_read(s->tier, js, &m);
  free(js);
  if (rc)
    return ckpt_err_wrap(rc, "%s", key);
  __atomic_add_fetch(&s->rd_meta_bytes, len + m->meta_read, __ATOMIC_RELAXED);
  m->meta_read = 0;
  m->info.state = CKPT_COMMITTED;
  *out = m;
  return FT_OK;
}

/* ckpt_store_load (lazy 0) and ckpt_store_load_lazy (1). */
static int load(ckpt_store *s, const char *run, int64_t step, int lazy, ckpt_manifest **out) {
  *out = NULL;
  ckpt_info info;
  int rc = ckpt_store_get_info(s, run, step, &info);
  if (rc == FT_ENOENT && s->tier->foreign_commits)
    return load_foreign(s, run, step, lazy, out);
  if (rc)
    return rc;
  if (info.state == CKPT_PENDING)
    return ft_err_set(FT_ENOENT, "checkpoint %s step %" PRId64 " is pending (not committed)", run,
                      step);
  char key[256], *val = NULL;
  size_t vlen = 0;
  ckpt_key_man(key, sizeof key, run, step);
  rc = ckpt_catalog_get(s->cat, key, &val, &vlen);
  if (rc == FT_ENOENT)
    return ft_err_set(FT_ECORRUPT, "catalog: checkpoint %s step %" PRId64 " has no manifest", run,
                      step);
  if (rc)
    return rc;
  ckpt_manifest *m = NULL;
  rc = lazy ? ckpt_manifest_from_json(val, &m) : ckpt_manifest_read(s->tier, val, &m);
  free(val);
  if (rc)
    return ckpt_err_wrap(rc, "checkpoint %s step %" PRId64, run, step);
  __atomic_add_fetch(&s->rd_meta_bytes, vlen + m->meta_read, __ATOMIC_RELAXED);
  m->meta_read = 0;
  m->info.state = info.state;
  m->info.pinned = info.pinned;
  m->info.new_bytes = info.new_bytes;
  m->info.time_ms = info.time_ms;
  m->info.level = info.level;
  *out = m;
  return FT_OK;
}

int ckpt_store_load(ckpt_store *s, const char *run, int64_t step, ckpt_manifest **out) {
  return load(s, run, step, 0, out);
}

int ckpt_store_load_lazy(ckpt_store *s, const char *run, int64_t step, ckpt_manifest **out) {
  return load(s, run, step, 1, out);
}

int ckpt_store_load_data(ckpt_store *s, const char *run, int64_t step, char **data) {
  *data = NULL;
  ckpt_info info;
  char key[256], *val = NULL;
  size_t len = 0;
  int rc = ckpt_store_get_info(s, run, step, &info);
  if (rc == FT_ENOENT && s->tier->foreign_commits) {
    ckpt_objkey_manifest(key, sizeof key, run, step);
    rc = ckpt_get_text(s->tier, key, &val, &len);
  } else if (rc == FT_OK && info.state == CKPT_PENDING) {
    rc = ft_err_set(FT_ENOENT, "checkpoint %s step %" PRId64 " is pending (not committed)", run,
                    step);
  } else if (rc == FT_OK) {
    ckpt_key_man(key, sizeof key, run, step);
    if ((rc = ckpt_catalog_get(s->cat, key, &val, NULL)) == FT_ENOENT)
      rc = ft_err_set(FT_ECORRUPT, "catalog: checkpoint %s step %" PRId64 " has no manifest", run,
                      step);
  }
  ckpt_manifest *m = NULL;
  if (rc == FT_OK && (rc = ckpt_manifest_from_json(val, &m)) != FT_OK)
    rc = ckpt_err_wrap(rc, "checkpoint %s step %" PRId64, run, step);
  if (rc == FT_OK && m->data && !(*data = strdup(m->data)))
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  ckpt_manifest_free(m);
  free(val);
  return rc;
}

/* ---- reading ranges ------------------------------------------------------------------ */

typedef struct read_job {
  ckpt_store *s;
  const ckpt_tensor *t;
  int first, last; /* chunk indices, inclusive */
  uint64_t offset, len;
  uint8_t *dst;
  int next; /* atomic */
  int rc;   /* first error (under mu) */
  char err[512];
  pthread_mutex_t mu;
} read_job;

/* The chunk's bytes from memory, if kept there and still hashing to its
 * name: 1, else 0 (a mismatch is counted; the tier is read instead). */
static int read_memory(ckpt_store *s, const uint8_t *hash, uint64_t len, uint8_t *buf) {
  if (!ckpt_mem_get(s->mem, hash, buf, len))
    return 0;
  uint8_t h[CKPT_HASH_LEN];
  if (ckpt_sha256(buf, len, h) == FT_OK && memcmp(h, hash, CKPT_HASH_LEN) == 0) {
    __atomic_add_fetch(&s->rd_mem_bytes, len, __ATOMIC_RELAXED);
    return 1;
  }
  __atomic_add_fetch(&s->rd_mem_rejected, 1, __ATOMIC_RELAXED);
  return 0;
}

/* The chunk's bytes from the remote source (another process's memory), if
 * it has them and they hash to the chunk's name: 1 (and the chunk is kept
 * in memory), else 0 (a mismatch is counted; the tier is read instead). */
static int read_remote(ckpt_store *s, const uint8_t *hash, uint64_t len, uint8_t *buf) {
  if (!s->remote || !s->remote(s->remote_ud, hash, len, buf))
    return 0;
  uint8_t h[CKPT_HASH_LEN];
  if (ckpt_sha256(buf, len, h) == FT_OK && memcmp(h, hash, CKPT_HASH_LEN) == 0) {
    __atomic_add_fetch(&s->rd_remote_bytes, len, __ATOMIC_RELAXED);
    ckpt_mem_put(s->mem, hash, buf, len);
    return 1;
  }
  __atomic_add_fetch(&s->rd_remote_rejected, 1, __ATOMIC_RELAXED);
  return 0;
}

/* Decodes the chain objs[n-1] .. objs[0] (names[k] the name of objs[k];
 * objs[k + 1] its base, and for the last one the bytes in dst when it is
 * a delta) into dst: each delta added onto the bytes below it. check:
 * each level's hash (*level: the one that failed), else only the top's
 * (the caller's). */
static int apply_chain(uint8_t **objs, const size_t *lens, uint8_t (*names)[CKPT_HASH_LEN], int n,
                       uint8_t *dst, uint8_t *tmp, uint64_t len, int check, int *level) {
  for (int k = n - 1; k >= 0; k--) {
    *level = k;
    int rc = ckpt_chunk_apply(objs[k], lens[k], names[k], dst, tmp, len);
    if (rc == FT_OK && check)
      rc = ckpt_chunk_check_hash(dst, len, names[k]);
    if (rc)
      return rc;
  }
  return FT_OK;
}

/* The chunk's bytes from the tier, decoded and verified. A delta: the
 * objects of its chain are read down to one that stands alone (or to a
 * base found in memory), then decoded bottom up, each delta added onto the
 * bytes below it in place, and only the result is hashed; when that does
 * not match, the chain is decoded again checking every level, to name the
 * damaged chunk. */
static int read_tier(ckpt_store *s, const uint8_t *hash, uint64_t len, uint8_t *dst, int flags) {
  uint8_t *objs[CKPT_MAX_CHAIN + 1] = {0}, *tmp = NULL;
  size_t lens[CKPT_MAX_CHAIN + 1];
  uint8_t names[CKPT_MAX_CHAIN + 1][CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1], top[CKPT_HEX_LEN + 1], key[128];
  int n = 0, from_dst = 0, rc = FT_OK;
  memcpy(names[0], hash, CKPT_HASH_LEN);
  ckpt_hex(hash, top);
  for (;;) {
    ckpt_hex(names[n], hex);
    ckpt_objkey_chunk(key, sizeof key, hex);
    rc = s->tier->get(s->tier, key, &objs[n], &lens[n]);
    if (rc == FT_ENOENT)
      rc = n ? ft_err_set(FT_ENOENT,
                          "chunk %s, a base chunk %s is a delta against, is missing from the "
                          "store",
                          hex, top)
             : ft_err_set(FT_ENOENT, "chunk %s is missing from the store", hex);
    if (rc)
      goto out;
    int depth = 0;
    const uint8_t *chain = NULL;
    rc = ckpt_chunk_chain(objs[n], lens[n], &depth, &chain);
    n++;
    if (rc) {
      rc = ckpt_err_wrap(rc, "chunk %s", hex);
      goto out;
    }
    if (depth == 0)
      break; /* the bottom: it stands alone */
    if (n > CKPT_MAX_CHAIN) {
      rc = ft_err_set(FT_ECORRUPT, "chunk %s: its chain of bases is longer than %d", top,
                      CKPT_MAX_CHAIN);
      goto out;
    }
    memcpy(names[n], chain, CKPT_HASH_LEN);
    if (!(flags & CKPT_FETCH_TIER) &&
        (read_memory(s, names[n], len, dst) || read_remote(s, names[n], len, dst))) {
      from_dst = 1; /* the base's bytes, verified, are in dst already */
      break;
    }
  }
  if (!(tmp = malloc(len ? len : 1))) {
    rc = ft_err_set(FT_ENOMEM, "out of memory reading chunk %s", top);
    goto out;
  }
  int level = 0;
  rc = apply_chain(objs, lens, names, n, dst, tmp, len, 0, &level);
  if (rc == FT_OK)
    rc = ckpt_chunk_check_hash(dst, len, hash);
  if (rc == FT_ECORRUPT && n > 1) { /* which level is damaged? */
    if (from_dst && !read_memory(s, names[n], len, dst) && !read_remote(s, names[n], len, dst))
      goto out; /* the base in memory went away: the error stands */
    rc = apply_chain(objs, lens, names, n, dst, tmp, len, 1, &level);
    if (rc && level > 0)
      rc = ckpt_err_wrap(rc, "chunk %s is a delta and a chunk of its chain is damaged", top);
  }
out:
  for (int k = 0; k < n; k++)
    free(objs[k]);
  free(tmp);
  if (rc == FT_OK && !(flags & CKPT_FETCH_NOSTATS))
    __atomic_add_fetch(&s->rd_tier_bytes, len, __ATOMIC_RELAXED);
  return rc;
}

int ckpt_store_fetch(ckpt_store *s, const uint8_t hash[CKPT_HASH_LEN], uint64_t len, uint8_t *dst,
                     int flags) {
  if (!(flags & CKPT_FETCH_TIER) &&
      (read_memory(s, hash, len, dst) || read_remote(s, hash, len, dst)))
    return FT_OK;
  return read_tier(s, hash, len, dst, flags);
}

/* Chunk ci into the job's destination: from memory if it is kept there
 * and verifies, else from the remote source if it has it and it verifies,
 * else from the tier. */
static int read_one(read_job *j, int ci, uint8_t **buf, size_t *cap) {
  const ckpt_chunk_ref *c = &j->t->chunks[ci];
  if (*cap < c->len) {
    free(*buf);
    *buf = malloc(c->len);
    *cap = *buf ? c->len : 0;
    if (!*buf)
      return ft_err_set(FT_ENOMEM, "out of memory reading a chunk");
  }
  int rc = ckpt_store_fetch(j->s, c->hash, c->len, *buf, 0);
  if (rc)
    return ckpt_err_wrap(rc == FT_ENOENT ? FT_ECORRUPT : rc,
                         "refusing to use a chunk of %s (bytes %" PRIu64 "..%" PRIu64 ")",
                         j->t->name, c->offset, c->offset + c->len);
  uint64_t a = c->offset > j->offset ? c->offset : j->offset;
  uint64_t b = c->offset + c->len < j->offset + j->len ? c->offset + c->len : j->offset + j->len;
  memcpy(j->dst + (a - j->offset), *buf + (a - c->offset), b - a);
  return FT_OK;
}

static void *read_worker(void *arg) {
  read_job *j = arg;
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (;;) {
    int ci = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (ci > j->last)
      break;
    pthread_mutex_lock(&j->mu);
    int failed = j->rc != 0;
    pthread_mutex_unlock(&j->mu);
    if (failed)
      break;
    int rc = read_one(j, ci, &buf, &cap);
    if (rc) {
      pthread_mutex_lock(&j->mu);
      if (!j->rc) {
        j->rc = rc;
        snprintf(j->err, sizeof j->err, "%s", ft_err_detail());
      }
      pthread_mutex_unlock(&j->mu);
      break;
    }
  }
  free(buf);
  return NULL;
}

int ckpt_store_read(ckpt_store *s, const ckpt_manifest *m, const char *tensor, uint64_t offset,
                    uint64_t len, void *dst) {
  int ti = ckpt_manifest_find(m, tensor);
  if (ti < 0)
    return ft_err_set(FT_ENOENT, "checkpoint %s step %" PRId64 " has no tensor '%s'", m->info.run,
                      m->info.step, tensor);
  const ckpt_tensor *t = &m->tensors[ti];
  if (offset > t->len || len > t->len - offset)
    return ft_err_set(FT_EINVAL,
                      "read of %s: bytes [%" PRIu64 ", %" PRIu64 ") are outside [0, %" PRIu64 ")",
                      tensor, offset, offset + len, t->len);
  if (len == 0)
    return FT_OK;
  /* first chunk whose end is past offset */
  int lo = 0, hi = t->nchunks - 1, first = t->nchunks;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (t->chunks[mid].offset + t->chunks[mid].len > offset) {
      first = mid;
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  int last = first;
  while (last + 1 < t->nchunks && t->chunks[last + 1].offset < offset + len)
    last++;
  if (first >= t->nchunks && !m->partial)
    return ft_err_set(FT_ECORRUPT, "manifest of %s has no chunk at byte %" PRIu64, tensor, offset);
  /* a manifest of some ranges (ckpt_store_load_for_ranges) has the chunks
   * of those alone: these must tile the bytes asked for */
  if (m->partial) {
    int ok = first < t->nchunks && t->chunks[first].offset <= offset &&
             t->chunks[last].offset + t->chunks[last].len >= offset + len;
    for (int c = first + 1; ok && c <= last; c++)
      ok = t->chunks[c].offset == t->chunks[c - 1].offset + t->chunks[c - 1].len;
    if (!ok)
      return ft_err_set(FT_EINVAL,
                        "read of %s: bytes [%" PRIu64 ", %" PRIu64
                        ") are not all among the ranges this manifest was loaded for",
                        tensor, offset, offset + len);
  }
  read_job j = {.s = s,
                .t = t,
                .first = first,
                .last = last,
                .offset = offset,
                .len = len,
                .dst = dst,
                .next = first};
  pthread_mutex_init(&j.mu, NULL);
  int nth = s->threads;
  if (nth > last - first + 1)
    nth = last - first + 1;
  if (nth > 16)
    nth = 16;
  pthread_t th[16];
  int started = 0;
  for (int i = 1; i < nth; i++) {
    if (pthread_create(&th[started], NULL, read_worker, &j) != 0)
      break;
    started++;
  }
  read_worker(&j);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.mu);
  if (j.rc)
    return ft_err_set(j.rc, "%s", j.err);
  return FT_OK;
}

int ckpt_store_prefetch(ckpt_store *s, const char *run, int64_t step, const int *cancel,
                        uint64_t *fetched) {
  if (fetched)
    *fetched = 0;
  if (!s->mem)
    return ft_err_set(FT_EINVAL, "prefetch: the store keeps nothing in memory");
  ckpt_manifest *m = NULL;
  int rc = ckpt_store_load(s, run, step, &m);
  if (rc)
    return rc;
  read_job j = {.s = s};
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int ti = 0; ti < m->ntensors && rc == FT_OK; ti++) {
    j.t = &m->tensors[ti];
    for (int ci = 0; ci < j.t->nchunks; ci++) {
      const ckpt_chunk_ref *c = &j.t->chunks[ci];
      if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
        goto out;
      if (ckpt_mem_has(s->mem, c->hash, c->len))
        continue;
      if (cap < c->len) {
        free(buf);
        buf = malloc(c->len);
        cap = buf ? c->len : 0;
        if (!buf) {
          rc = ft_err_set(FT_ENOMEM, "out of memory prefetching a chunk");
          break;
        }
      }
      if ((rc = ckpt_store_fetch(s, c->hash, c->len, buf, CKPT_FETCH_TIER | CKPT_FETCH_NOSTATS))) {
        rc = ckpt_err_wrap(rc == FT_ENOENT ? FT_ECORRUPT : rc,
                           "prefetch of a chunk of %s (bytes %" PRIu64 "..%" PRIu64 ")", j.t->name,
                           c->offset, c->offset + c->len);
        break;
      }
      ckpt_mem_put(s->mem, c->hash, buf, c->len);
      if (fetched)
        *fetched += c->len;
    }
  }
out:
  free(buf);
  ckpt_manifest_free(m);
  return rc;
}

/* ---- states and pins -------------------------------------------------------------------- */

/* Records a changed mark: the mark object first, then the catalog; if the
 * catalog write fails, the old mark object is put back (best effort), so a
 * rebuild sees what the catalog last held. */
/* Locks and unlocks meta_mu for set_state and pin: FT_BUG if the mutex says
 * this thread holds it already or does not hold it (error-checking in
 * checked builds; always 0 otherwise). */
static void meta_lock(ckpt_store *s) {
  int rc = pthread_mutex_lock(&s->meta_mu);
  if (rc)
    FT_BUG("meta_mu: lock failed (%d): this thread holds it already", rc);
}

static void meta_unlock(ckpt_store *s) {
  int rc = pthread_mutex_unlock(&s->meta_mu);
  if (rc)
    FT_BUG("meta_mu: unlock failed (%d): this thread does not hold it", rc);
}

#if FT_INVARIANTS_ON
/* A change of a record (put_marked): under meta_mu, one of the transitions
 * in the header (or a pin alone), and, once written, what reads back. */
static void check_marked(ckpt_store *s, const ckpt_info *old, const ckpt_info *now, int written) {
  int rc = pthread_mutex_trylock(&s->meta_mu);
  FT_ASSERT_INV(rc == EBUSY, "record change without meta_mu (trylock %d)", rc);
  FT_ASSERT_INV(!strcmp(old->run, now->run) && old->step == now->step,
                "%s/%" PRId64 " became %s/%" PRId64, old->run, old->step, now->run, now->step);
  if (old->state != now->state)
    FT_ASSERT_INV(old->state != CKPT_PENDING && (now->state == CKPT_GOOD || now->state == CKPT_BAD),
                  "%s step %" PRId64 ": %s -> %s is no transition", now->run, now->step,
                  ckpt_state_name(old->state), ckpt_state_name(now->state));
  if (!written)
    return;
  ckpt_info back;
  rc = ckpt_store_get_info(s, now->run, now->step, &back);
  FT_ASSERT_INV(rc == FT_OK && back.state == now->state && back.pinned == now->pinned,
                "%s step %" PRId64 " reads back rc %d state %d pinned %d, wrote %d %d", now->run,
                now->step, rc, rc ? -1 : back.state, rc ? -1 : back.pinned, now->state,
                now->pinned);
}
#else
static void check_marked(ckpt_store *s, const ckpt_info *old, const ckpt_info *now, int written) {}
#endif

static int put_marked(ckpt_store *s, const ckpt_info *old, const ckpt_info *now) {
  check_marked(s, old, now, 0);
  int rc = ckpt_store_put_mark(s, now);
  if (rc)
    return ckpt_err_wrap(rc, "recording the mark of %s step %" PRId64, now->run, now->step);
  rc = ckpt_store_put_info(s, now);
  if (rc) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ft_err_detail());
    ckpt_store_put_mark(s, old);
    ft_err_set(rc, "%s", saved);
  } else {
    check_marked(s, old, now, 1);
  }
  return rc;
}

int ckpt_store_set_state(ckpt_store *s, const char *run, int64_t step, int state) {
  return ckpt_store_set_state_from(s, run, step, -1, state);
}

int ckpt_store_set_state_from(ckpt_store *s, const char *run, int64_t step, int from, int state) {
  int rc = writable(s, "changing a checkpoint's state");
  if (rc)
    return rc;
  if (state < CKPT_PENDING || state > CKPT_BAD || !ckpt_run_name_ok(run))
    return ft_err_set(FT_EINVAL, "set_state: bad state %d or run name '%s'", state,
                      run ? run : "(null)");
  meta_lock(s);
  ckpt_info info;
  rc = ckpt_store_get_info(s, run, step, &info);
  if (rc == FT_ENOENT && state == CKPT_PENDING) {
    memset(&info, 0, sizeof info);
    snprintf(info.run, sizeof info.run, "%s", run);
    info.step = step;
    info.parent_step = -1;
    info.base_step = -1;
    info.loss = NAN;
    info.state = CKPT_PENDING;
    info.time_ms = 0;
    rc = ckpt_store_put_info(s, &info);
    goto out;
  }
  if (rc)
    goto out;
  if (info.state == state) {
    /* the catalog agrees, but the store's mark object may not (a catalog
     * older than the marks, one put back from a copy): write it again, so
     * a rebuilt catalog and gc (which reads the marks) see this state */
    rc = ckpt_store_put_mark(s, &info);
    goto out;
  }
  if (from >= 0 && info.state != from) {
    rc = ft_err_set(FT_ESTATE, "checkpoint %s step %" PRId64 " is %s, not %s: left as it is", run,
                    step, ckpt_state_name(info.state), ckpt_state_name(from));
    goto out;
  }
  if (state == CKPT_PENDING || info.state == CKPT_PENDING || state == CKPT_COMMITTED) {
    rc = ft_err_set(FT_ESTATE, "checkpoint %s step %" PRId64 " is %s; it cannot become %s%s", run,
                    step, ckpt_state_name(info.state), ckpt_state_name(state),
                    info.state == CKPT_PENDING ? " except by a commit" : "");
    goto out;
  }
  ckpt_info now = info;
  now.state = state;
  rc = put_marked(s, &info, &now);
out:
  meta_unlock(s);
  return rc;
}

int ckpt_store_pin(ckpt_store *s, const char *run, int64_t step, int pinned) {
  int rc = writable(s, "pinning");
  if (rc)
    return rc;
  meta_lock(s);
  ckpt_info info;
  rc = ckpt_store_get_info(s, run, step, &info);
  if (rc == FT_OK && info.pinned != !!pinned) {
    ckpt_info now = info;
    now.pinned = !!pinned;
    rc = put_marked(s, &info, &now);
  } else if (rc == FT_OK) {
    /* the catalog says so already; the mark object may not (see
     * ckpt_store_set_state_from): a pin that exits 0 is in the store */
    rc = ckpt_store_put_mark(s, &info);
  }
  meta_unlock(s);
  return rc;
}

/* ---- tiers: rebuild, flush, stats, scrub -------------------------------------------------- */

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Reads the mark object of (run, step) into *state / *pinned; FT_ENOENT
 * when none was written (COMMITTED, unpinned). */
int ckpt_tier_get_mark(ckpt_tier *tier, const char *run, int64_t step, int *state, int *pinned) {
  char key[300];
  uint8_t *data = NULL;
  size_t len = 0;
  ckpt_objkey_mark(key, sizeof key, run, step);
  int rc = tier->get(tier, key, &data, &len);
  if (rc)
    return rc;
  cJSON *o = cJSON_ParseWithLength((const char *)data, len);
  free(data);
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "state");
  const cJSON *pn = cJSON_GetObjectItemCaseSensitive(o, "pinned");
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "step");
  rc = ft_err_set(FT_EFORMAT, "mark object %s is damaged", key);
  if (cJSON_IsString(st) && cJSON_IsBool(pn) && cJSON_IsNumber(sp) && sp->valuedouble == step) {
    for (int k = CKPT_COMMITTED; k <= CKPT_BAD; k++)
      if (strcmp(st->valuestring, ckpt_state_name(k)) == 0) {
        *state = k;
        *pinned = cJSON_IsTrue(pn);
        rc = FT_OK;
      }
  }
  cJSON_Delete(o);
  return rc;
}

int ckpt_store_put_mark(ckpt_store *s, const ckpt_info *info) {
  char key[300];
  if (ckpt_objkey_mark(key, sizeof key, info->run, info->step) < 0)
    return ft_err_set(FT_EINVAL, "run name too long");
  if (info->state == CKPT_PENDING || (info->state == CKPT_COMMITTED && !info->pinned)) {
    int rc = s->tier->del(s->tier, key);
    return rc == FT_ENOENT ? FT_OK : rc;
  }
  char js[400];
  int n = snprintf(
      js, sizeof js, "{\"run\":\"%s\",\"step\":%" PRId64 ",\"state\":\"%s\",\"pinned\":%s}\n",
      info->run, info->step, ckpt_state_name(info->state), info->pinned ? "true" : "false");
  return s->tier->put(s->tier, key, js, (size_t)n);
}

/* Records one manifest object in the catalog unless it is there already,
 * with the state and pin of its mark object (COMMITTED, unpinned where it
 * has none). FT_ECORRUPT / FT_EFORMAT / FT_EINVAL: a damaged manifest. */
static int rebuild_one(ckpt_tier *tier, ckpt_catalog *cat, const char *objkey, const char *json,
                       int *added) {
  ckpt_manifest *m = NULL;
  int rc = ckpt_manifest_from_json(json, &m);
  if (rc)
    return rc;
  char key[256], *val = NULL, first[200];
  int64_t kstep;
  if (ckpt_objkey_manifest_step(objkey, &kstep) != 0 || kstep != m->info.step ||
      (ckpt_objkey_manifest(key, sizeof key, m->info.run, m->info.step) >= 0 &&
       strcmp(key, objkey) != 0)) {
    rc = ft_err_set(FT_EFORMAT, "it holds the manifest of %s step %" PRId64 ", not of its name",
                    m->info.run, m->info.step);
    ckpt_manifest_free(m);
    return rc;
  }
  ckpt_key_info(key, sizeof key, m->info.run, m->info.step);
  rc = ckpt_catalog_get(cat, key, &val, NULL);
  free(val);
  if (rc != FT_ENOENT) {
    ckpt_manifest_free(m);
    return rc;
  }
  int state = CKPT_COMMITTED, pinned = 0;
  rc = ckpt_tier_get_mark(tier, m->info.run, m->info.step, &state, &pinned);
  if (rc != FT_OK && rc != FT_ENOENT) {
    ckpt_manifest_free(m);
    return ckpt_err_wrap(rc, "reading the mark of %s step %" PRId64, m->info.run, m->info.step);
  }
  ckpt_batch *b = ckpt_batch_new();
  if (!b) {
    ckpt_manifest_free(m);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  snprintf(first, sizeof first, "%s/%020" PRId64, m->info.run, m->info.step);
  m->info.state = state;
  m->info.pinned = pinned;
  if (!ckpt_manifest_has_objs(m)) /* formats 2, 3 keep their new bytes; their chunks are in no
                                      first-seen index */
    m->info.new_bytes = 0;
  rc = FT_OK;
  for (int t = 0; t < m->ntensors && rc == FT_OK; t++)
    for (int c = 0; c < m->tensors[t].nchunks && rc == FT_OK; c++) {
      char hex[CKPT_HEX_LEN + 1];
      ckpt_hex(m->tensors[t].chunks[c].hash, hex);
      ckpt_key_chunk(key, sizeof key, hex);
      rc = ckpt_catalog_get(cat, key, &val, NULL);
      free(val);
      val = NULL;
      if (rc == FT_ENOENT) {
        m->info.new_bytes += m->tensors[t].chunks[c].stored;
        ckpt_batch_put(b, key, first, strlen(first));
        rc = FT_OK;
      }
    }
  char *ijs = rc ? NULL : ckpt_info_to_json(&m->info);
  if (!ijs) {
    ckpt_batch_free(b);
    ckpt_manifest_free(m);
    return rc ? rc : ft_err_set(FT_ENOMEM, "out of memory");
  }
  ckpt_key_info(key, sizeof key, m->info.run, m->info.step);
  ckpt_batch_put(b, key, ijs, strlen(ijs));
  ckpt_key_man(key, sizeof key, m->info.run, m->info.step);
  ckpt_batch_put(b, key, json, strlen(json));
  free(ijs);
  ckpt_manifest_free(m);
  rc = ckpt_catalog_write(cat, b);
  if (rc == FT_OK && added)
    (*added)++;
  return rc;
}

int ckpt_tier_manifest_keys(ckpt_tier *tier, char ***keys, size_t *n) {
  mkeys k = {0}, all = {0};
  *keys = NULL;
  *n = 0;
  int rc = tier->list(tier, CKPT_OBJ_MANIFESTS, mkeys_cb, &k);
  for (size_t i = 0; rc == FT_OK && i < k.n; i++) {
    if (ckpt_objkey_manifest_step(k.v[i], NULL) == 0) {
      rc = mkeys_cb(&all, k.v[i]);
    } else if (!strstr(k.v[i], ".tmp.") && !ends_with(k.v[i], ".mark")) {
      char sub[600];
      snprintf(sub, sizeof sub, "%s/", k.v[i]);
      mkeys inner = {0};
      rc = tier->list(tier, sub, mkeys_cb, &inner);
      for (size_t j = 0; j < inner.n; j++) {
        if (rc == FT_OK && ckpt_objkey_manifest_step(inner.v[j], NULL) == 0)
          rc = mkeys_cb(&all, inner.v[j]);
        free(inner.v[j]);
      }
      free(inner.v);
    }
  }
  ckpt_keys_free(k.v, k.n);
  if (all.n > 1)
    qsort(all.v, all.n, sizeof *all.v, str_cmp);
  size_t w = 0; /* a cache and its bucket may both list a key */
  for (size_t i = 0; i < all.n; i++) {
    if (w > 0 && strcmp(all.v[i], all.v[w - 1]) == 0)
      free(all.v[i]);
    else
      all.v[w++] = all.v[i];
  }
  if (rc) {
    ckpt_keys_free(all.v, w);
    return rc;
  }
  *keys = all.v;
  *n = w;
  return FT_OK;
}

void ckpt_keys_free(char **keys, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(keys[i]);
  free(keys);
}

/* Records every manifest of the tier (ckpt_tier_manifest_keys) in cat,
 * between the incomplete marker, written first, and the batch that deletes
 * it, written only when every manifest was handled. A manifest object
 * that cannot be used is skipped (counted in found, not in added) and
 * reported through skipped with the reason. */
static int ckpt_store_rebuild_into(ckpt_tier *tier, ckpt_catalog *cat, skip_fn skipped, void *ud,
                                   int *found, int *added) {
  mkeys all = {0};
  int rc = mark_incomplete(cat, tier->desc);
  if (rc == FT_OK)
    rc = ckpt_tier_manifest_keys(tier, &all.v, &all.n);
  int nfound = 0, nadded = 0;
  for (size_t i = 0; rc == FT_OK && i < all.n; i++) {
    nfound++;
    uint8_t *data = NULL;
    size_t len = 0;
    rc = tier->get(tier, all.v[i], &data, &len);
    if (rc == FT_ENOENT) { /* deleted meanwhile (gc) */
      rc = FT_OK;
      continue;
    }
    /* a damaged object is skipped (named); the bucket failing to answer
     * (5xx, EIO) is no verdict on it: the rebuild stops, unfinished */
    if (rc == FT_ECORRUPT || (rc == FT_EIO && !ckpt_s3_tiered_is(tier))) {
      if (skipped)
        skipped(ud, all.v[i], ft_err_detail());
      rc = FT_OK;
      continue;
    }
    if (rc)
      break;
    char *js = ckpt_text(data, len);
    free(data);
    if (!js) {
      rc = FT_ENOMEM;
      break;
    }
    if (strlen(js) != len)
      rc = ft_err_set(FT_EFORMAT, "it is not JSON text (it holds a NUL byte)");
    else
      rc = rebuild_one(tier, cat, all.v[i], js, &nadded);
    free(js);
    if (rc == FT_ECORRUPT || rc == FT_EFORMAT || rc == FT_EINVAL) {
      /* a damaged manifest object: not a checkpoint we can list */
      if (skipped)
        skipped(ud, all.v[i], ft_err_detail());
      rc = FT_OK;
    }
  }
  ckpt_keys_free(all.v, all.n);
  if (rc == FT_OK) { /* whole: the last batch says so */
    ckpt_batch *b = ckpt_batch_new();
    if (b)
      ckpt_batch_del(b, CKPT_KEY_INCOMPLETE);
    rc = ckpt_catalog_write(cat, b);
  }
  if (found)
    *found = nfound;
  if (added)
    *added = nadded;
  return rc;
}

int ckpt_store_rebuild_catalog_report(ckpt_store *s,
                                      void (*skipped)(void *ud, const char *key, const char *why),
                                      void *ud, int *found, int *added) {
  int rc = writable(s, "rebuild-catalog");
  if (rc)
    return rc;
  pthread_mutex_lock(&s->meta_mu);
  rc = ckpt_store_rebuild_into(s->tier, s->cat, skipped, ud, found, added);
  pthread_mutex_unlock(&s->meta_mu);
  return rc;
}

int ckpt_store_rebuild_catalog(ckpt_store *s, int *found, int *added) {
  return ckpt_store_rebuild_catalog_report(s, NULL, NULL, found, added);
}

int ckpt_store_flush(ckpt_store *s, int timeout_s) {
  if (!ckpt_s3_tiered_is(s->tier))
    return FT_OK;
  return ckpt_s3_tiered_flush(s->tier, timeout_s);
}

void ckpt_store_set_scrub(ckpt_store *s, int on) {
  if (ckpt_s3_tiered_is(s->tier))
    ckpt_s3_tiered_set_scrub(s->tier, on);
}

int ckpt_store_tier_stats(ckpt_store *s, ckpt_tier_stats *st) {
  memset(st, 0, sizeof *st);
  if (!ckpt_s3_tiered_is(s->tier))
    return FT_OK;
  ckpt_s3_tiered_stats ts;
  ckpt_s3_tiered_stats_get(s->tier, &ts);
  st->has_remote = 1;
  st->requests = ts.http.requests;
  st->retries = ts.http.retries;
  st->bytes_up = ts.http.bytes_up;
  st->bytes_down = ts.http.bytes_down;
  st->uploads_done = ts.uploads_done;
  st->uploads_failed = ts.uploads_failed;
  st->uploads_pending = ts.uploads_pending;
  st->repaired_local = ts.repaired_local;
  st->repaired_remote = ts.repaired_remote;
  return FT_OK;
}

/* ---- is the catalog behind the manifests? ------------------------------------------------ */

typedef struct behind_acc {
  int64_t newest;
} behind_acc;

static int behind_cb(void *ud, const char *key) {
  behind_acc *a = ud;
  int64_t step;
  if (ckpt_objkey_manifest_step(key, &step) == 0 && step > a->newest)
    a->newest = step;
  return FT_OK;
}

int ckpt_store_catalog_behind(ckpt_store *st, const char *run, int64_t *newest) {
  if (newest)
    *newest = -1;
  if (!run || !ckpt_run_name_ok(run))
    return ft_err_set(FT_EINVAL, "catalog_behind: bad run name '%s'", run ? run : "(null)");
  char prefix[256];
  if (ckpt_objkey_manifest_dir(prefix, sizeof prefix, run) < 0)
    return ft_err_set(FT_EINVAL, "catalog_behind: run name too long");
  behind_acc a = {.newest = -1};
  int rc = st->tier->list(st->tier, prefix, behind_cb, &a);
  if (rc)
    return ckpt_err_wrap(rc, "listing the manifests of run %s", run);
  if (newest)
    *newest = a.newest;
  if (a.newest < 0)
    return 0;
  /* the newest step the catalog records as committed (in any later state) */
  ckpt_info *v = NULL;
  size_t n = 0;
  rc = ckpt_store_list(st, run, &v, &n);
  if (rc)
    return rc;
  int64_t known = -1;
  for (size_t i = 0; i < n; i++)
    if (v[i].state != CKPT_PENDING && v[i].step > known)
      known = v[i].step;
  free(v);
  return a.newest > known ? 1 : 0;
}

/* ---- loading what some ranges need ---------------------------------------------------- */

/* What ckpt_store_load_for_ranges gathers: the manifest it builds (its
 * reads counted in p->meta_read), the index and shard objects read so far,
 * and the tensors of the ranges with the chunks they need. */
typedef struct ranges_ctx {
  ckpt_store *s;
  ckpt_manifest *p;
  ckpt_index_node *nodes;
  int nnodes, capnodes;
  ckpt_shard **sh;
  int nsh, capsh;
  ckpt_tensor *ts;
  int nts, capts;
} ranges_ctx;

/* A ranges_ctx result for a layout the even split does not describe: the
 * whole checkpoint is read instead (never returned to a caller). */
#define NOT_EVEN 1

/* m's record, config, state, metrics and data, and the names of its shard
 * objects or the root of their index; no tensors. */
static int head_copy(const ckpt_manifest *m, ckpt_manifest **out) {
  ckpt_manifest *p = calloc(1, sizeof *p);
  *out = NULL;
  if (!p)
    return ft_err_set(FT_ENOMEM, "out of memory");
  p->info = m->info;
  p->config = strdup(m->config);
  p->state = strdup(m->state);
  p->metrics = strdup(m->metrics);
  p->data = m->data ? strdup(m->data) : NULL;
  p->has_index = m->has_index;
  p->index_depth = m->index_depth;
  memcpy(p->index_root, m->index_root, CKPT_HASH_LEN);
  if (m->nobjs && (p->objs = malloc((size_t)m->nobjs * sizeof *p->objs)) != NULL) {
    memcpy(p->objs, m->objs, (size_t)m->nobjs * sizeof *p->objs);
    p->nobjs = m->nobjs;
  }
  if (!p->config || !p->state || !p->metrics || (m->data && !p->data) || (m->nobjs && !p->objs)) {
    ckpt_manifest_free(p);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  *out = p;
  return FT_OK;
}

/* The tensor named like q in c->ts (q's dtype, shape and form, nbytes
 * bytes), added without chunks if absent. */
static int ctx_tensor(ranges_ctx *c, const ckpt_tensor *q, uint64_t nbytes, ckpt_tensor **out) {
  for (int i = 0; i < c->nts; i++)
    if (!strcmp(c->ts[i].name, q->name)) {
      *out = &c->ts[i];
      return FT_OK;
    }
  if (c->nts == c->capts) {
    int cap = c->capts ? 2 * c->capts : 16;
    ckpt_tensor *n = realloc(c->ts, (size_t)cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    c->ts = n;
    c->capts = cap;
  }
  ckpt_tensor *t = &c->ts[c->nts];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(q->name)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  memcpy(t->dtype, q->dtype, sizeof t->dtype);
  t->lossy = q->lossy;
  t->ndim = q->ndim;
  memcpy(t->shape, q->shape, sizeof t->shape);
  t->len = nbytes;
  c->nts++;
  *out = t;
  return FT_OK;
}

/* Adds to t the chunks of q that overlap bytes [a, a + len). */
static int add_overlapping(ckpt_tensor *t, const ckpt_tensor *q, uint64_t a, uint64_t len) {
  for (int k = 0; k < q->nchunks; k++) {
    const ckpt_chunk_ref *r = &q->chunks[k];
    if (r->offset < a + len && r->offset + r->len > a) {
      int rc = ckpt_tensor_add_chunk(t, r);
      if (rc)
        return rc;
    }
  }
  return FT_OK;
}

/* The first part of tensor name in sh, or NULL. */
static const ckpt_tensor *part_of(const ckpt_shard *sh, const char *name) {
  for (int i = 0; i < sh->nparts; i++)
    if (!strcmp(sh->parts[i].name, name))
      return &sh->parts[i];
  return NULL;
}

/* The name of rank k's shard object: from the manifest (format 2), or down
 * the index from its root (format 3), each index object read once. */
static int shard_name(ranges_ctx *c, int k, uint8_t out[CKPT_HASH_LEN]) {
  ckpt_manifest *p = c->p;
  if (p->objs) { /* in rank order, one per rank (ckpt_manifest_from_json) */
    memcpy(out, p->objs[k].hash, CKPT_HASH_LEN);
    return FT_OK;
  }
  const uint8_t *h = p->index_root;
  int level = p->index_depth - 1, lo = 0, hi = p->info.world;
  for (;;) {
    ckpt_index_node *nd = NULL;
    for (int i = 0; i < c->nnodes && !nd; i++)
      if (!memcmp(c->nodes[i].hash, h, CKPT_HASH_LEN))
        nd = &c->nodes[i];
    if (!nd) {
      if (c->nnodes == c->capnodes) {
        int cap = c->capnodes ? 2 * c->capnodes : 8;
        ckpt_index_node *n = realloc(c->nodes, (size_t)cap * sizeof *n);
        if (!n)
          return ft_err_set(FT_ENOMEM, "out of memory");
        c->nodes = n;
        c->capnodes = cap;
      }
      int rc = ckpt_index_node_read(c->s->tier, p, h, level, lo, hi, &c->nodes[c->nnodes]);
      if (rc)
        return rc;
      nd = &c->nodes[c->nnodes++];
    }
    int a = 0, b = nd->n - 1; /* the entry whose ranks hold k */
    while (a < b) {
      int mid = (a + b + 1) / 2;
      if (nd->e[mid].lo <= k)
        a = mid;
      else
        b = mid - 1;
    }
    const ckpt_index_ent *e = &nd->e[a];
    if (level == 0) {
      memcpy(out, e->hash, CKPT_HASH_LEN);
      return FT_OK;
    }
    h = e->hash;
    lo = e->lo;
    hi = e->hi;
    level--;
  }
}

/* Rank k's shard, read once: checked against its name and that it is the
 * shard of this checkpoint's rank k. */
static int get_shard(ranges_ctx *c, int k, const ckpt_shard **out) {
  for (int i = 0; i < c->nsh; i++)
    if (c->sh[i]->rank == k) {
      *out = c->sh[i];
      return FT_OK;
    }
  if (c->nsh == c->capsh) {
    int cap = c->capsh ? 2 * c->capsh : 8;
    ckpt_shard **n = realloc(c->sh, (size_t)cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    c->sh = n;
    c->capsh = cap;
  }
  ckpt_shard_obj o = {.rank = k};
  ckpt_shard *sh = NULL;
  const ckpt_info *in = &c->p->info;
  int rc = shard_name(c, k, o.hash);
  if (rc == FT_OK)
    rc = ckpt_shard_obj_read(c->s->tier, c->p, &o, &sh);
  if (rc == FT_OK && (sh->is_ref || strcmp(sh->run, in->run) != 0 || sh->step != in->step ||
                      sh->rank != k || sh->world != in->world))
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": its shard object of rank %d holds the "
                    "shard of %s step %" PRId64 " rank %d of world %d",
                    in->run, in->step, k, sh->run, sh->step, sh->rank, sh->world);
  if (rc) {
    ckpt_shard_free(sh);
    return rc;
  }
  c->sh[c->nsh++] = sh;
  *out = sh;
  return FT_OK;
}

/* The ranges from the shard objects that hold them, found by the even
 * split: rank 0's shard gives each tensor's dtype and shape (under the
 * split every tensor of at least one element has a part there), and the
 * ranks whose parts overlap a range follow from its bytes. NOT_EVEN when
 * a part read is not where the split puts it. */
static int from_shards(ranges_ctx *c, const ckpt_range *r, int n) {
  const ckpt_shard *s0 = NULL;
  uint64_t w = (uint64_t)c->p->info.world;
  int rc = get_shard(c, 0, &s0);
  for (int i = 0; i < n && rc == FT_OK; i++) {
    const ckpt_tensor *q0 = part_of(s0, r[i].tensor);
    if (!q0)
      return NOT_EVEN;
    uint64_t nb = ckpt_tensor_nbytes(q0->dtype, q0->ndim, q0->shape);
    uint64_t es = (uint64_t)ckpt_dtype_size(q0->dtype), per = (nb / es + w - 1) / w * es;
    if (q0->offset != 0 || q0->len != (per < nb ? per : nb))
      return NOT_EVEN;
    if (r[i].offset > nb || r[i].len > nb - r[i].offset)
      return ft_err_set(FT_EINVAL,
                        "read of %s: bytes [%" PRIu64 ", %" PRIu64 ") are outside [0, %" PRIu64 ")",
                        r[i].tensor, r[i].offset, r[i].offset + r[i].len, nb);
    ckpt_tensor *t = NULL;
    if ((rc = ctx_tensor(c, q0, nb, &t)) || r[i].len == 0)
      continue;
    uint64_t k0 = r[i].offset / per, k1 = (r[i].offset + r[i].len - 1) / per;
    for (uint64_t k = k0; k <= k1 && rc == FT_OK; k++) {
      const ckpt_shard *sh = NULL;
      if ((rc = get_shard(c, (int)k, &sh)))
        break;
      const ckpt_tensor *q = part_of(sh, r[i].tensor);
      uint64_t at = k * per;
      if (!q || strcmp(q->dtype, q0->dtype) || q->ndim != q0->ndim ||
          memcmp(q->shape, q0->shape, sizeof q->shape) || q->lossy != q0->lossy ||
          q->offset != at || q->len != (nb - at < per ? nb - at : per))
        return NOT_EVEN;
      rc = add_overlapping(t, q, r[i].offset, r[i].len);
    }
  }
  return rc;
}

/* The ranges from a manifest that lists its tensors. */
static int from_tensors(ranges_ctx *c, const ckpt_manifest *m, const ckpt_range *r, int n) {
  int rc = FT_OK;
  for (int i = 0; i < n && rc == FT_OK; i++) {
    int ti = ckpt_manifest_find(m, r[i].tensor);
    if (ti < 0)
      return ft_err_set(FT_ENOENT, "checkpoint %s step %" PRId64 " has no tensor '%s'", m->info.run,
                        m->info.step, r[i].tensor);
    const ckpt_tensor *q = &m->tensors[ti];
    if (r[i].offset > q->len || r[i].len > q->len - r[i].offset)
      return ft_err_set(FT_EINVAL,
                        "read of %s: bytes [%" PRIu64 ", %" PRIu64 ") are outside [0, %" PRIu64 ")",
                        r[i].tensor, r[i].offset, r[i].offset + r[i].len, q->len);
    ckpt_tensor *t = NULL;
    if ((rc = ctx_tensor(c, q, q->len, &t)) == FT_OK && r[i].len)
      rc = add_overlapping(t, q, r[i].offset, r[i].len);
  }
  return rc;
}

static int tensor_name_cmp(const void *a, const void *b) {
  return strcmp(((const ckpt_tensor *)a)->name, ((const ckpt_tensor *)b)->name);
}

static int chunk_offset_cmp(const void *a, const void *b) {
  const ckpt_chunk_ref *x = a, *y = b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

/* c->ts into c->p: tensors sorted by name, chunks by offset, each once
 * (two ranges may need the same chunk). */
static void ctx_finish(ranges_ctx *c) {
  if (c->nts > 1) /* qsort of none may be handed NULL: undefined */
    qsort(c->ts, (size_t)c->nts, sizeof *c->ts, tensor_name_cmp);
  for (int i = 0; i < c->nts; i++) {
    ckpt_tensor *t = &c->ts[i];
    if (t->nchunks > 1)
      qsort(t->chunks, (size_t)t->nchunks, sizeof *t->chunks, chunk_offset_cmp);
    int k = 0;
    for (int j = 0; j < t->nchunks; j++) {
      if (k > 0 && t->chunks[j].offset == t->chunks[k - 1].offset) {
        free(t->chunks[j].chain);
        continue;
      }
      t->chunks[k++] = t->chunks[j];
    }
    t->nchunks = k;
  }
  c->p->tensors = c->ts;
  c->p->ntensors = c->nts;
  c->ts = NULL;
  c->nts = c->capts = 0;
}

static void ctx_release(ranges_ctx *c) {
  for (int i = 0; i < c->nnodes; i++)
    ckpt_index_node_release(&c->nodes[i]);
  free(c->nodes);
  for (int i = 0; i < c->nsh; i++)
    ckpt_shard_free(c->sh[i]);
  free(c->sh);
  for (int i = 0; i < c->nts; i++)
    ckpt_tensor_release(&c->ts[i]);
  free(c->ts);
  memset(c, 0, sizeof *c);
}

int ckpt_store_load_for_ranges(ckpt_store *s, const ckpt_manifest *m, const ckpt_range *r, int n,
                               ckpt_manifest **part) {
  ckpt_manifest *p = NULL;
  *part = NULL;
  if (n < 0 || (n > 0 && !r))
    return ft_err_set(FT_EINVAL, "load_for_ranges: no ranges");
  int rc = head_copy(m, &p);
  if (rc)
    return rc;
  ranges_ctx c = {.s = s, .p = p};
  if (!ckpt_manifest_has_objs(m) || m->expanded) {
    rc = from_tensors(&c, m, r, n);
  } else if ((rc = from_shards(&c, r, n)) == NOT_EVEN) {
    /* another layout: every shard object, then the ranges from the whole */
    ctx_release(&c);
    c = (ranges_ctx){.s = s, .p = p};
    rc = ckpt_manifest_expand_tier(s->tier, p);
    ckpt_manifest *whole = p;
    if (rc == FT_OK && (rc = head_copy(whole, &p)) == FT_OK) {
      c.p = p;
      rc = from_tensors(&c, whole, r, n);
      p->meta_read = whole->meta_read;
    } else {
      p = NULL;
    }
    ckpt_manifest_free(whole);
  }
  if (rc == FT_OK) {
    ctx_finish(&c);
    p->partial = 1;
  }
  if (p)
    __atomic_add_fetch(&s->rd_meta_bytes, p->meta_read, __ATOMIC_RELAXED);
  ctx_release(&c);
  if (rc) {
    ckpt_manifest_free(p);
    return rc;
  }
  p->meta_read = 0;
  *part = p;
  return FT_OK;
}
