/*
 * ckpt_leaf.h: the store's leaf (ckpt_leaf.c), internal: object keys, an
 * object's text, error wrapping. The names of states, levels and lossy
 * forms it defines are public (ckptstore.h).
 *
 * Any file of the store may include this; ckpt_leaf.c calls nothing in the
 * store, so no call from a lower file closes a circle through the facade
 * (ckpt_store.c). Compiles on its own.
 */
#ifndef CKPT_LEAF_H
#define CKPT_LEAF_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_HASH_LEN 32
#define CKPT_HEX_LEN 64

struct ckpt_tier;

/* ---- object keys (the one place their formats are written) ---------------
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
int ckpt_objkey_shard(char *buf, size_t n, const uint8_t hash[CKPT_HASH_LEN]);
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

/* ---- text and errors -------------------------------------------------------- */

/* A NUL-terminated copy of len bytes (an object's text): malloc'd, NULL
 * (FT_ENOMEM set) when out of memory. */
char *ckpt_text(const void *data, size_t len);
/* The object under key in tier t as text (ckpt_text): *js malloc'd, *len
 * its length; the tier's error (FT_ENOENT if absent) otherwise. */
int ckpt_get_text(struct ckpt_tier *t, const char *key, char **js, size_t *len);
/* Sets the detail to "<fmt...>: <the current detail>" and returns rc.
 * (ft_err_set must not be handed its own buffer, so this copies it first.) */
int ckpt_err_wrap(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
