/*
 * ckpt_meta: small key/value records of other components (the supervisor's
 * run state) kept in the store's catalog, beside the checkpoints.
 *
 * WHY in the catalog: "run state and the checkpoint catalog live under
 * --state DIR", and the catalog already has exactly what run state needs:
 * one writer (its lock), and synced atomic writes. A supervisor that is
 * killed and started again reads back what it last wrote.
 *
 * Keys: every key is stored as "sup/<key>" (the catalog's "ckpt/" space is
 * the store's own), so a caller can't overwrite checkpoint records. A key is
 * 1..512 bytes without NUL; a value is any NUL-free text.
 *
 * Each put is its own WriteBatch written with sync=true: when put returns
 * 0 the value survives a crash of the process or the machine.
 *
 * Threads: as the rest of the store (RocksDB handles are thread-safe).
 */
#include "ckpt_int.h"

#include "ft_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_PREFIX CKPT_META_PREFIX
#define META_KEY_MAX 512

static int meta_key(char *buf, size_t n, const char *key) {
  if (!key || !key[0] || strlen(key) > META_KEY_MAX)
    return ft_err_set(FT_EINVAL, "meta key must be 1..%d bytes", META_KEY_MAX);
  snprintf(buf, n, META_PREFIX "%s", key);
  return FT_OK;
}

int ckpt_store_put_meta(ckpt_store *s, const char *key, const char *value) {
  char k[META_KEY_MAX + sizeof META_PREFIX];
  if (!s || !value)
    return ft_err_set(FT_EINVAL, "ckpt_store_put_meta: NULL argument");
  int rc = meta_key(k, sizeof k, key);
  if (rc)
    return rc;
  if (s->read_only)
    return ft_err_set(FT_ESTATE, "put_meta needs the store opened for writing (it is read-only)");
  ckpt_batch *b = ckpt_batch_new();
  if (!b)
    return ft_err_set(FT_ENOMEM, "out of memory");
  ckpt_batch_put(b, k, value, strlen(value));
  return ckpt_catalog_write(s->cat, b); /* frees b */
}

int ckpt_store_get_meta(ckpt_store *s, const char *key, char **value) {
  char k[META_KEY_MAX + sizeof META_PREFIX];
  if (value)
    *value = NULL;
  if (!s || !value)
    return ft_err_set(FT_EINVAL, "ckpt_store_get_meta: NULL argument");
  int rc = meta_key(k, sizeof k, key);
  if (rc)
    return rc;
  return ckpt_catalog_get(s->cat, k, value, NULL);
}
