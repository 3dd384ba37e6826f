/*
 * ckpt_tier_int.h: the storage-tier interface (internal).
 *
 * A tier stores immutable objects under string keys: chunks ("chunks/<hex>")
 * and manifests ("manifests/<run>/<step>.json"). Callers never see how: the
 * local directory tier (ckpt_tier_local.c) maps keys to files; an S3 tier
 * would map them to objects. Every operation returns FT_* codes and sets the
 * detail text.
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
 */
#ifndef CKPT_TIER_INT_H
#define CKPT_TIER_INT_H

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

/* ---- object keys (ckpt_store.c: the one place their formats are written) --
 *   chunks/<hex>                          a chunk object (64 hex digits)
 *   manifests/<run>/<step %020lld>.json   a checkpoint manifest
 *   manifests/<run>/<step %020lld>.mark   its GOOD/BAD mark and pin
 *   shards/<hex>                          a shard object (JSON, named by
 *                                         its SHA-256)
 * (and "<key>.tmp.<pid>.<tid>.<n>" temp files of the local tier's writes).
 * The makers return the length written (as snprintf) or -1 if it did not
 * fit in n. */
#define CKPT_OBJ_CHUNKS "chunks/"
#define CKPT_OBJ_MANIFESTS "manifests/"
#define CKPT_OBJ_SHARDS "shards/"
/* "shards/<hex>": a shard object (a rank's shard manifest, JSON). */
int ckpt_objkey_shard(char *buf, size_t n, const uint8_t hash[32]);
/* The <hex> part of "shards/<hex>", or NULL if key is not under shards/. */
const char *ckpt_objkey_shard_name(const char *key);
int ckpt_objkey_chunk(char *buf, size_t n, const char *hex);
int ckpt_objkey_manifest(char *buf, size_t n, const char *run, int64_t step);
int ckpt_objkey_mark(char *buf, size_t n, const char *run, int64_t step);
/* "manifests/<run>/" (run NULL: "manifests/"). */
int ckpt_objkey_manifest_dir(char *buf, size_t n, const char *run);
/* The <hex> part of "chunks/<hex>", or NULL if key is not under chunks/. */
const char *ckpt_objkey_chunk_name(const char *key);
/* 1 if key is under manifests/ (manifests, marks, temp files), else 0. */
int ckpt_objkey_in_manifests(const char *key);
/* Parses a checkpoint manifest's key or file name ("<...>/<20 digits>.json")
 * into *step (may be NULL); 0 on success, -1 if it is not one. */
int ckpt_objkey_manifest_step(const char *key, int64_t *step);

#endif
