/*
 * ckpt_s3_write: ckpt_s3_write.h over the store's S3 client. See the header.
 *
 * The one thing added to the client's errors: a PUT or LIST answered 404
 * means the bucket is missing (the client's detail would say "no such
 * object" for a key that is being created), so the detail is rewritten to
 * name the bucket and the endpoint it was looked for at.
 */
#include "ckpt_s3_write.h"

#include "ckpt_s3.h"
#include "ft_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ckpt_s3_writer {
  ckpt_s3_client *c;
  char bucket[256];
  char where[1400];
};

int ckpt_s3_writer_open(const char *uri, const char *endpoint, ckpt_s3_writer **out) {
  *out = NULL;
  ckpt_s3_config cfg;
  int rc = ckpt_s3_data_config(uri, endpoint, &cfg);
  ckpt_s3_writer *w = rc ? NULL : calloc(1, sizeof *w);
  if (!rc && !w)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  if (!rc) {
    snprintf(w->bucket, sizeof w->bucket, "%s", cfg.bucket);
    snprintf(w->where, sizeof w->where, "%.500s (keys: %.800s)",
             cfg.endpoint[0] ? cfg.endpoint : "AWS", cfg.cred_source);
    rc = ckpt_s3_client_new(&cfg, &w->c);
  }
  ckpt_s3_config_wipe(&cfg);
  if (rc) {
    free(w);
    return rc;
  }
  *out = w;
  return FT_OK;
}

void ckpt_s3_writer_free(ckpt_s3_writer *w) {
  if (!w)
    return;
  ckpt_s3_client_free(w->c);
  free(w);
}

const char *ckpt_s3_writer_bucket(const ckpt_s3_writer *w) {
  return w->bucket;
}

const char *ckpt_s3_writer_where(const ckpt_s3_writer *w) {
  return w->where;
}

static int no_bucket(ckpt_s3_writer *w, const char *method, const char *key) {
  return ft_err_set(FT_ENOENT, "S3 %s s3://%s/%s: bucket '%s' does not exist at %s", method,
                    w->bucket, key, w->bucket, w->where);
}

typedef struct list_ud {
  int (*fn)(void *ud, const char *key, uint64_t size);
  void *ud;
} list_ud;

static int on_object(void *ud, const ckpt_s3_object *o) {
  list_ud *l = ud;
  return l->fn(l->ud, o->key, o->size);
}

int ckpt_s3_writer_list(ckpt_s3_writer *w, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size), void *ud) {
  list_ud l = {fn, ud};
  int rc = ckpt_s3_client_list_objects(w->c, prefix, on_object, &l);
  return rc == FT_ENOENT ? no_bucket(w, "LIST", prefix) : rc;
}

int ckpt_s3_writer_put(ckpt_s3_writer *w, const char *key, const void *data, size_t len) {
  int rc = ckpt_s3_client_put(w->c, key, data, len, 0);
  return rc == FT_ENOENT ? no_bucket(w, "PUT", key) : rc;
}

void ckpt_s3_writer_stats_get(ckpt_s3_writer *w, ckpt_s3_writer_stats *st) {
  ckpt_s3_stats s;
  ckpt_s3_client_stats(w->c, &s);
  st->requests = s.requests;
  st->retries = s.retries;
  st->bytes_up = s.bytes_up;
}
