/*
 * ckpt_s3_read: ckpt_s3_read.h over the store's S3 client. See the header.
 *
 * Why a wrapper and not the client's header: ckpt_s3.h is the store's
 * private one (tiers, upload queues); the data loader needs three reads and
 * a data bucket's own endpoint and keys, nothing else.
 */
#include "ckpt_s3_read.h"

#include "ckpt_s3.h"
#include "ft_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ckpt_s3_reader {
  ckpt_s3_client *c;
  char bucket[256];
  char where[1400];
};

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && v[0] ? v : NULL;
}

static int set(char *dst, size_t n, const char *v, const char *what) {
  if (strlen(v) >= n)
    return ft_err_set(FT_ECONFIG, "%s is too long", what);
  snprintf(dst, n, "%s", v);
  return FT_OK;
}

/* The data bucket's own endpoint, region and keys over the store's. */
static int data_overrides(ckpt_s3_config *c, const char *endpoint) {
  int rc = FT_OK;
  const char *ep = endpoint && endpoint[0] ? endpoint : env("FT_DATA_S3_ENDPOINT");
  if (ep) {
    if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
      return ft_err_set(FT_ECONFIG, "data S3 endpoint '%s' must start with http:// or https://",
                        ep);
    if ((rc = set(c->endpoint, sizeof c->endpoint, ep, "the data S3 endpoint")))
      return rc;
    size_t l = strlen(c->endpoint);
    while (l > 0 && c->endpoint[l - 1] == '/')
      c->endpoint[--l] = 0;
    c->virtual_host = 0; /* as for FT_S3_ENDPOINT: path style on a given endpoint */
  }
  if (env("FT_DATA_AWS_REGION") &&
      (rc = set(c->region, sizeof c->region, env("FT_DATA_AWS_REGION"), "FT_DATA_AWS_REGION")))
    return rc;
  const char *ak = env("FT_DATA_AWS_ACCESS_KEY_ID"), *sk = env("FT_DATA_AWS_SECRET_ACCESS_KEY");
  if (!ak != !sk)
    return ft_err_set(FT_ECONFIG,
                      "FT_DATA_AWS_ACCESS_KEY_ID and FT_DATA_AWS_SECRET_ACCESS_KEY must be set "
                      "together");
  if (!ak)
    return FT_OK;
  ckpt_s3_config_wipe(c);
  const char *tok = env("FT_DATA_AWS_SESSION_TOKEN");
  if ((rc = set(c->access_key, sizeof c->access_key, ak, "FT_DATA_AWS_ACCESS_KEY_ID")) ||
      (rc = set(c->secret_key, sizeof c->secret_key, sk, "FT_DATA_AWS_SECRET_ACCESS_KEY")) ||
      (tok &&
       (rc = set(c->session_token, sizeof c->session_token, tok, "FT_DATA_AWS_SESSION_TOKEN"))))
    return rc;
  snprintf(c->cred_source, sizeof c->cred_source,
           "FT_DATA_AWS_ACCESS_KEY_ID and FT_DATA_AWS_SECRET_ACCESS_KEY from the environment");
  return FT_OK;
}

int ckpt_s3_data_config(const char *uri, const char *endpoint, ckpt_s3_config *cfg) {
  char b[300];
  const char *s = strncmp(uri, "s3://", 5) == 0 ? uri + 5 : "";
  size_t bl = strcspn(s, "/");
  memset(cfg, 0, sizeof *cfg);
  if (!bl || bl >= 256)
    return ft_err_set(FT_EINVAL, "'%s' is not an s3://bucket/... URI", uri);
  snprintf(b, sizeof b, "s3://%.*s", (int)bl, s);
  int rc = ckpt_s3_config_from_uri(b, cfg);
  /* the store's keys may be absent when the data bucket has its own: the
   * parse got that far when the cache directory is known (set before the
   * credentials are read, the last step) */
  if (rc == FT_ECONFIG && env("FT_DATA_AWS_ACCESS_KEY_ID") && cfg->cache_dir[0])
    rc = FT_OK;
  if (!rc)
    rc = data_overrides(cfg, endpoint);
  if (rc)
    ckpt_s3_config_wipe(cfg);
  return rc;
}

int ckpt_s3_reader_open(const char *uri, const char *endpoint, ckpt_s3_reader **out) {
  *out = NULL;
  ckpt_s3_config cfg;
  int rc = ckpt_s3_data_config(uri, endpoint, &cfg);
  ckpt_s3_reader *r = rc ? NULL : calloc(1, sizeof *r);
  if (!rc && !r)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  if (!rc) {
    snprintf(r->bucket, sizeof r->bucket, "%s", cfg.bucket);
    snprintf(r->where, sizeof r->where, "%.500s (keys: %.800s)",
             cfg.endpoint[0] ? cfg.endpoint : "AWS", cfg.cred_source);
    rc = ckpt_s3_client_new(&cfg, &r->c);
  }
  ckpt_s3_config_wipe(&cfg);
  if (rc) {
    free(r);
    return rc;
  }
  *out = r;
  return FT_OK;
}

void ckpt_s3_reader_free(ckpt_s3_reader *r) {
  if (!r)
    return;
  ckpt_s3_client_free(r->c);
  free(r);
}

const char *ckpt_s3_reader_bucket(const ckpt_s3_reader *r) {
  return r->bucket;
}

const char *ckpt_s3_reader_where(const ckpt_s3_reader *r) {
  return r->where;
}

typedef struct list_ud {
  int (*fn)(void *ud, const char *key, uint64_t size, const char *etag);
  void *ud;
} list_ud;

static int on_object(void *ud, const ckpt_s3_object *o) {
  list_ud *l = ud;
  return l->fn(l->ud, o->key, o->size, o->etag);
}

int ckpt_s3_reader_list(ckpt_s3_reader *r, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size, const char *etag),
                        void *ud) {
  list_ud l = {fn, ud};
  return ckpt_s3_client_list_objects(r->c, prefix, on_object, &l);
}

int ckpt_s3_reader_get_range(ckpt_s3_reader *r, const char *key, uint64_t off, uint64_t n,
                             const char *etag, uint8_t **data, size_t *len) {
  return ckpt_s3_client_get_range_if(r->c, key, off, n, etag, data, len, 0);
}

void ckpt_s3_reader_cancel(ckpt_s3_reader *r) {
  ckpt_s3_client_cancel(r->c);
}

void ckpt_s3_reader_stats_get(ckpt_s3_reader *r, ckpt_s3_reader_stats *st) {
  ckpt_s3_stats s;
  ckpt_s3_client_stats(r->c, &s);
  st->requests = s.requests;
  st->retries = s.retries;
  st->bytes_down = s.bytes_down;
}

void ckpt_s3_reader_on_retry(ckpt_s3_reader *r, ckpt_s3_retry_fn fn, void *ud) {
  ckpt_s3_client_on_retry(r->c, fn, ud);
}

/* name's value in lo..hi, else def when unset (ckpt_s3_config.c's rule) */
static int env_num(const char *name, long def, long lo, long hi, long *v) {
  const char *s = env(name);
  *v = def;
  if (!s)
    return FT_OK;
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return ft_err_set(FT_ECONFIG, "%s='%s': expected an integer in %ld..%ld", name, s, lo, hi);
  *v = x;
  return FT_OK;
}

int ckpt_s3_read_bound_s(double *out) {
  long t, b;
  int rc = env_num("FT_S3_TIMEOUT_S", CKPT_S3_TIMEOUT_S_DEFAULT, 1, 3600, &t);
  if (!rc)
    rc = env_num("FT_S3_RETRY_BUDGET_S", CKPT_S3_RETRY_BUDGET_S_DEFAULT, 1, 86400, &b);
  *out = rc ? (double)CKPT_S3_RETRY_BUDGET_S_DEFAULT + 2.0 * CKPT_S3_TIMEOUT_S_DEFAULT
            : (double)b + 2.0 * (double)t;
  return rc;
}
