/*
 * ckpt_tier_s3: a bucket (and a prefix in it) as a ckpt_tier.
 *
 * Layout mirrors the local tier, under the URI's prefix P:
 *   P/chunks/ab/abcdef...          chunk objects (two-hex-digit fan-out)
 *   P/manifests/<run>/<step>.json  checkpoint manifests
 * so `ckpt rebuild-catalog` can list P/manifests/ and a bucket alone is a
 * whole store.
 *
 * Contract differences from the local tier, and why they are safe here:
 *   put      chunks are created with If-None-Match: * (a chunk in the bucket
 *            is never overwritten; 412 means "already there" and is success,
 *            chunks being content-addressed); other keys are overwritten. A
 *            PUT is atomic in S3 (readers see the old or the whole new).
 *   exists   freshen is not done in the bucket (S3 has no cheap touch): the
 *            GC protocol's timestamps are the cache tier's (ckpt_s3_tiered.c).
 *   del_if_older  HEAD then DELETE: not atomic against a concurrent reuse;
 *            the tiered tier only uses it for chunks the cache does not have.
 *   now      this machine's wall clock (S3 LastModified is wall time).
 * Threads: the client is thread-safe; the tier holds no other state.
 */
#include "ckpt_s3.h"

#include "ft_clock.h"
#include "ft_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct s3_tier {
  ckpt_tier t;
  ckpt_s3_client *c;
  char desc[2048];
} s3_tier;

int ckpt_tier_s3_object_key(const ckpt_s3_config *cfg, const char *key, char *buf, size_t n) {
  if (strstr(key, "..") || key[0] == '/')
    return ft_err_set(FT_EINVAL, "s3 tier: bad key '%s'", key);
  const char *sep = cfg->prefix[0] ? "/" : "";
  int w;
  const char *hex = ckpt_objkey_chunk_name(key);
  if (hex && strlen(hex) >= 2)
    w = snprintf(buf, n, "%s%s" CKPT_OBJ_CHUNKS "%.2s/%s", cfg->prefix, sep, hex, hex);
  else
    w = snprintf(buf, n, "%s%s%s", cfg->prefix, sep, key);
  if (w < 0 || (size_t)w >= n)
    return ft_err_set(FT_EINVAL, "s3 tier: key too long '%s'", key);
  return FT_OK;
}

static const ckpt_s3_config *cfg_of(s3_tier *st) {
  return ckpt_s3_client_config(st->c);
}

int ckpt_tier_s3_put_flags(ckpt_tier *t, const char *key, const void *data, size_t len, int flags) {
  s3_tier *st = (s3_tier *)t;
  char ok[2048];
  int rc = ckpt_tier_s3_object_key(cfg_of(st), key, ok, sizeof ok);
  if (rc)
    return rc;
  return ckpt_s3_client_put(st->c, ok, data, len, flags);
}

static int s3_put(ckpt_tier *t, const char *key, const void *data, size_t len) {
  int chunk = ckpt_objkey_chunk_name(key) != NULL;
  int rc = ckpt_tier_s3_put_flags(t, key, data, len, chunk ? CKPT_S3_CREATE_ONLY : 0);
  return rc == FT_EEXIST && chunk ? FT_OK : rc;
}

int ckpt_tier_s3_get_flags(ckpt_tier *t, const char *key, uint8_t **data, size_t *len, int flags) {
  s3_tier *st = (s3_tier *)t;
  char ok[2048];
  *data = NULL;
  *len = 0;
  int rc = ckpt_tier_s3_object_key(cfg_of(st), key, ok, sizeof ok);
  if (rc)
    return rc;
  return ckpt_s3_client_get(st->c, ok, data, len, flags);
}

static int s3_get(ckpt_tier *t, const char *key, uint8_t **data, size_t *len) {
  return ckpt_tier_s3_get_flags(t, key, data, len, 0);
}

static int s3_exists(ckpt_tier *t, const char *key, int freshen, uint64_t *size, int64_t *mtime) {
  s3_tier *st = (s3_tier *)t;
  char ok[2048];
  int rc = ckpt_tier_s3_object_key(cfg_of(st), key, ok, sizeof ok);
  if (rc)
    return rc;
  return ckpt_s3_client_head(st->c, ok, size, mtime, 0);
}

static int s3_del(ckpt_tier *t, const char *key) {
  s3_tier *st = (s3_tier *)t;
  char ok[2048];
  int rc = ckpt_tier_s3_object_key(cfg_of(st), key, ok, sizeof ok);
  if (rc)
    return rc;
  return ckpt_s3_client_delete(st->c, ok);
}

static int s3_del_if_older(ckpt_tier *t, const char *key, int64_t cutoff_ns, uint64_t *freed) {
  uint64_t size = 0;
  int64_t mtime = 0;
  if (freed)
    *freed = 0;
  int rc = s3_exists(t, key, 0, &size, &mtime);
  if (rc)
    return rc;
  if (mtime >= cutoff_ns)
    return FT_EEXIST;
  rc = s3_del(t, key);
  if (rc == FT_OK && freed)
    *freed = size;
  return rc;
}

typedef struct list_ctx {
  size_t strip; /* bytes of "prefix/" to drop */
  int (*fn)(void *ud, const char *key);
  void *ud;
} list_ctx;

static int list_cb(void *ud, const char *okey, uint64_t size, int64_t mtime) {
  list_ctx *l = ud;
  const char *k = okey + l->strip;
  char key[2048];
  /* chunks/ab/<hex> -> chunks/<hex> */
  const char *fan = ckpt_objkey_chunk_name(k);
  if (fan && strlen(fan) > 3 && fan[2] == '/')
    ckpt_objkey_chunk(key, sizeof key, fan + 3);
  else
    snprintf(key, sizeof key, "%s", k);
  return l->fn(l->ud, key);
}

static int s3_list(ckpt_tier *t, const char *prefix, int (*fn)(void *ud, const char *key),
                   void *ud) {
  s3_tier *st = (s3_tier *)t;
  const ckpt_s3_config *cfg = cfg_of(st);
  char op[2048];
  snprintf(op, sizeof op, "%s%s%s", cfg->prefix, cfg->prefix[0] ? "/" : "", prefix);
  list_ctx l = {.strip = strlen(cfg->prefix) + (cfg->prefix[0] ? 1 : 0), .fn = fn, .ud = ud};
  return ckpt_s3_client_list(st->c, op, list_cb, &l);
}

static int s3_now(ckpt_tier *t, int64_t *now_ns) {
  *now_ns = ft_wall_ns();
  return FT_OK;
}

static void s3_free(ckpt_tier *t) {
  s3_tier *st = (s3_tier *)t;
  if (!st)
    return;
  ckpt_s3_client_free(st->c);
  free(st);
}

ckpt_s3_client *ckpt_tier_s3_client(ckpt_tier *t) {
  return ((s3_tier *)t)->c;
}

int ckpt_tier_s3_open(ckpt_s3_client *client, ckpt_tier **out) {
  *out = NULL;
  s3_tier *st = calloc(1, sizeof *st);
  if (!st) {
    ckpt_s3_client_free(client);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  st->c = client;
  const ckpt_s3_config *cfg = ckpt_s3_client_config(client);
  snprintf(st->desc, sizeof st->desc, "s3://%s/%s (%s)", cfg->bucket, cfg->prefix, cfg->endpoint);
  st->t = (ckpt_tier){.name = "s3",
                      .put = s3_put,
                      .get = s3_get,
                      .exists = s3_exists,
                      .del = s3_del,
                      .del_if_older = s3_del_if_older,
                      .list = s3_list,
                      .now = s3_now,
                      .free = s3_free,
                      .desc = st->desc};
  *out = &st->t;
  return FT_OK;
}
