/*
 * ckpt_tier_int.h: the storage-tier interface (internal).
 *
 * A tier stores immutable objects under string keys: chunks ("chunks/<hex>")
 * and manifests ("manifests/<run>/<step>.json"). Callers never see how: the
 * local directory tier (ckpt_tier_local.c) maps keys to files; the S3 tier
 * (ckpt_tier_s3.c) maps them to objects of a bucket, and the tiered store
 * (ckpt_s3_tiered.c) puts a local tier in front of it, uploading behind.
 * Every operation returns FT_* codes and sets the detail text.
 *
 * Contract every tier keeps:
 *   put      durable when it returns (local: temp file, fsync, rename, fsync
 *            of the directory); atomic: readers see the old or the whole new.
 *   exists   with freshen=1 also renews the object's timestamp; this is how a
 *            writer that reuses an existing chunk protects it from a GC that
 *            is running at the same time (see ckpt_gc.c).
 *   del_if_older  deletes the object only if its timestamp is older than
 *            cutoff, atomically with respect to a concurrent freshen (local:
 *            rename aside, re-check, then unlink or rename back).
 *   now      the tier's own clock, in the unit of its timestamps.
 * A tier is safe to use from several threads at once.
 *
 * The object keys' formats and makers are in ckpt_leaf.h (included here):
 * a tier calls them, and they call nothing in the store.
 */
#ifndef CKPT_TIER_INT_H
#define CKPT_TIER_INT_H

#include "ckpt_leaf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_tier ckpt_tier;
struct ckpt_tier {
  const char *name; /* "local" */
  int (*put)(ckpt_tier *t, const char *key, const void *data, size_t len);
  /* *data malloc'd, caller frees. FT_ENOENT if absent. */
  int (*get)(ckpt_tier *t, const char *key, uint8_t **data, size_t *len);
  /* 0 exists (*size, *mtime_ns set when not NULL), FT_ENOENT absent. */
  int (*exists)(ckpt_tier *t, const char *key, int freshen, uint64_t *size, int64_t *mtime_ns);
  int (*del)(ckpt_tier *t, const char *key);
  /* 0 deleted, FT_EEXIST kept (too recent), FT_ENOENT gone already. */
  int (*del_if_older)(ckpt_tier *t, const char *key, int64_t cutoff_ns, uint64_t *freed);
  /* Calls fn for every key under prefix ("chunks/", "manifests/"); includes
   * leftovers of interrupted writes (keys that are not a valid name). */
  int (*list)(ckpt_tier *t, const char *prefix, int (*fn)(void *ud, const char *key), void *ud);
  int (*now)(ckpt_tier *t, int64_t *now_ns);
  /* Optional (NULL: nothing to do): makes the object put (or found) under
   * key durable where every process that commits may look for it. The S3
   * tier with a cache on each host (FT_S3_CACHE_PER_HOST=1) uploads it to
   * the bucket now, or waits for its upload; the writer calls it before a
   * chunk counts as durable. */
  int (*sync)(ckpt_tier *t, const char *key);
  void (*free)(ckpt_tier *t);
  const char *desc; /* e.g. the directory, for messages */
  /* 1: checkpoints are committed through other hosts' caches (the S3 tier
   * with FT_S3_CACHE_PER_HOST=1): this process's catalog may lack a
   * committed checkpoint whose manifest object is in the bucket */
  int foreign_commits;
  /* enum ckpt_level of a checkpoint committed through this tier: durable,
   * or local (the S3 tier with FT_S3_REQUIRE=local: the bucket's copy
   * follows in the background) */
  int commit_level;
};

/* Opens "local:DIR", creating DIR and its folders if create is set. */
int ckpt_tier_local_open(const char *dir, int create, ckpt_tier **out);

#endif
