/*
 * ckpt_leaf: the store's leaf: object keys, names of states, levels and
 * lossy forms, an object's text, and error wrapping.
 *
 * Every other file of the store may call these, and these call nothing in
 * the store (only ftcommon and libc; a tier is reached through its function
 * pointers). That is why they live here and not in ckpt_store.c, the facade:
 * lower files (the tiers, the manifests, the catalog, the writer) calling
 * back into the facade made the store's files one circle of calls (issue
 * 40); tests/unit/layering_store.py fails if one comes back.
 *
 * Object keys: this is the one place their formats are written
 * (ckpt_leaf.h lists them). Pure functions, thread-safe.
 */
#include "ckpt_leaf.h"
#include "ckpt_tier_int.h"

#include "ckptstore.h"
#include "ft_err.h"
#include "ft_hex.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- object keys ------------------------------------------------------------ */

int ckpt_objkey_chunk(char *buf, size_t n, const char *hex) {
  int w = snprintf(buf, n, CKPT_OBJ_CHUNKS "%s", hex);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

int ckpt_objkey_manifest(char *buf, size_t n, const char *run, int64_t step) {
  int w = snprintf(buf, n, CKPT_OBJ_MANIFESTS "%s/%020" PRId64 ".json", run, step);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

int ckpt_objkey_mark(char *buf, size_t n, const char *run, int64_t step) {
  int w = snprintf(buf, n, CKPT_OBJ_MANIFESTS "%s/%020" PRId64 ".mark", run, step);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

int ckpt_objkey_manifest_dir(char *buf, size_t n, const char *run) {
  int w =
      run ? snprintf(buf, n, CKPT_OBJ_MANIFESTS "%s/", run) : snprintf(buf, n, CKPT_OBJ_MANIFESTS);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

const char *ckpt_objkey_chunk_name(const char *key) {
  size_t p = strlen(CKPT_OBJ_CHUNKS);
  return strncmp(key, CKPT_OBJ_CHUNKS, p) == 0 ? key + p : NULL;
}

int ckpt_objkey_shard(char *buf, size_t n, const uint8_t hash[CKPT_HASH_LEN]) {
  char hex[CKPT_HEX_LEN + 1];
  ft_hex_encode(hash, CKPT_HASH_LEN, hex);
  int w = snprintf(buf, n, CKPT_OBJ_SHARDS "%s", hex);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

const char *ckpt_objkey_shard_name(const char *key) {
  size_t p = strlen(CKPT_OBJ_SHARDS);
  return strncmp(key, CKPT_OBJ_SHARDS, p) == 0 ? key + p : NULL;
}

int ckpt_objkey_in_manifests(const char *key) {
  return strncmp(key, CKPT_OBJ_MANIFESTS, strlen(CKPT_OBJ_MANIFESTS)) == 0;
}

int ckpt_objkey_manifest_step(const char *key, int64_t *step) {
  const char *base = strrchr(key, '/');
  base = base ? base + 1 : key;
  if (strlen(base) != 20 + 5 || strcmp(base + 20, ".json") != 0)
    return -1;
  int64_t v = 0;
  for (int i = 0; i < 20; i++) {
    if (base[i] < '0' || base[i] > '9' || v > (INT64_MAX - 9) / 10)
      return -1;
    v = v * 10 + (base[i] - '0');
  }
  if (step)
    *step = v;
  return 0;
}

/* ---- names (ckptstore.h) ----------------------------------------------------- */

const char *ckpt_state_name(int state) {
  switch (state) {
  case CKPT_PENDING:
    return "pending";
  case CKPT_COMMITTED:
    return "committed";
  case CKPT_GOOD:
    return "good";
  case CKPT_BAD:
    return "bad";
  }
  return "unknown";
}

const char *ckpt_lossy_name(int lossy) {
  static const char *n[] = {"exact", "bf16", "q8", "q8log"};
  return lossy >= 0 && lossy <= CKPT_LOSSY_Q8LOG ? n[lossy] : "?";
}

const char *ckpt_level_name(int level) {
  switch (level) {
  case CKPT_LEVEL_DURABLE:
    return "durable";
  case CKPT_LEVEL_LOCAL:
    return "local";
  case CKPT_LEVEL_MEMORY:
    return "memory";
  }
  return "unknown";
}

/* ---- text and errors ---------------------------------------------------------- */

int ckpt_get_text(ckpt_tier *t, const char *key, char **js, size_t *len) {
  uint8_t *data = NULL;
  *js = NULL;
  int rc = t->get(t, key, &data, len);
  if (rc)
    return rc;
  *js = ckpt_text(data, *len);
  free(data);
  return *js ? FT_OK : FT_ENOMEM;
}

char *ckpt_text(const void *data, size_t len) {
  char *t = malloc(len + 1);
  if (!t) {
    ft_err_set(FT_ENOMEM, "out of memory");
    return NULL;
  }
  memcpy(t, data, len);
  t[len] = 0;
  return t;
}

int ckpt_err_wrap(int rc, const char *fmt, ...) {
  char saved[1024], ctx[512];
  snprintf(saved, sizeof saved, "%s", ft_err_detail());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  return ft_err_set(rc, "%s: %s", ctx, saved);
}
