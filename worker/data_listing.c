/*
 * data_listing: the recorded listing of s3:// patterns (data_int.h,
 * docs/data.md "The listing").
 *
 * Why: a bucket may gain or lose objects under a glob while a run lives;
 * every rank, restart and resume must still read the same stream. The first
 * open of a pattern lists the bucket and records the result (keys, sizes,
 * ETags, token counts) here; every later open reads it back and lists
 * nothing (nor reads headers). An object rewritten or deleted since still
 * fails its reads (If-Match), loudly.
 *
 * The file (JSON, one object for all the run's patterns):
 *   {"version": 1, "patterns": {"s3://b/d/PATTERN": {"endpoint": "...",
 *     "objects": [{"key": "d/a.bin", "size": 2048, "etag": "\"..\"",
 *                  "tokens": 512}, ...]}}}
 * Written whole (ft_afile: temp, fsync, rename). Ranks opening at once are
 * serialised by an flock on "<file>.lock": the first lists and records, the
 * others read its record.
 */
#include "data_int.h"

#include "ft_err.h"
#include "ft_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LISTING_MAX (256 << 20) /* a listing of millions of shards still fits */

int data_listing_lock(const char *path) {
  char lp[1100];
  snprintf(lp, sizeof lp, "%s.lock", path);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    return ft_err_set(FT_EIO, "%s: cannot open the listing's lock file: %s", lp, strerror(errno));
  if (flock(fd, LOCK_EX) != 0) {
    int e = errno;
    close(fd);
    return ft_err_set(FT_EIO, "%s: flock: %s", lp, strerror(e));
  }
  return fd;
}

void data_objs_free(data_obj *ob, int n) {
  for (int i = 0; i < n; i++) {
    free(ob[i].key);
    free(ob[i].etag);
  }
  free(ob);
}

/* The file's JSON; *root NULL if the file does not exist. */
static int read_root(const char *path, cJSON **root) {
  *root = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return errno == ENOENT
               ? FT_OK
               : ft_err_set(FT_EIO, "%s: cannot read the data listing: %s", path, strerror(errno));
  struct stat st;
  char *text = NULL;
  int rc = FT_OK;
  if (fstat(fileno(f), &st) != 0 || st.st_size > LISTING_MAX)
    rc = ft_err_set(FT_EFORMAT, "%s: not a data listing (unreadable or over %d bytes)", path,
                    LISTING_MAX);
  else if (!(text = malloc((size_t)st.st_size + 1)))
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  else if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
    rc = ft_err_set(FT_EIO, "%s: short read", path);
  fclose(f);
  if (!rc) {
    text[st.st_size] = 0;
    *root = cJSON_Parse(text);
    cJSON *v = *root ? cJSON_GetObjectItemCaseSensitive(*root, "version") : NULL;
    if (!cJSON_IsNumber(v) || v->valuedouble != 1 ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(*root, "patterns"))) {
      cJSON_Delete(*root);
      *root = NULL;
      rc = ft_err_set(FT_EFORMAT,
                      "%s: not a data listing (expected {\"version\": 1, \"patterns\": {...}}); "
                      "remove it to list the bucket again",
                      path);
    }
  }
  free(text);
  return rc;
}

static int obj_from_json(const cJSON *j, data_obj *o) {
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "key");
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "etag");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "size");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
  if (!cJSON_IsString(k) || !cJSON_IsString(e) || !cJSON_IsNumber(s) || !cJSON_IsNumber(t) ||
      s->valuedouble < 0 || t->valuedouble < 0)
    return FT_EFORMAT;
  o->key = strdup(k->valuestring);
  o->etag = strdup(e->valuestring);
  o->size = (uint64_t)s->valuedouble;
  o->tokens = (uint64_t)t->valuedouble;
  return o->key && o->etag ? FT_OK : FT_ENOMEM;
}

int data_listing_load(const char *path, const char *uri, data_obj **ob, int *n, int *found) {
  *ob = NULL;
  *n = *found = 0;
  cJSON *root;
  int rc = read_root(path, &root);
  if (rc || !root)
    return rc;
  cJSON *p =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "patterns"), uri);
  cJSON *objs = p ? cJSON_GetObjectItemCaseSensitive(p, "objects") : NULL;
  if (p && (!cJSON_IsArray(objs) || cJSON_GetArraySize(objs) == 0))
    rc = ft_err_set(FT_EFORMAT, "%s: the entry of %s has no objects", path, uri);
  int m = p && !rc ? cJSON_GetArraySize(objs) : 0;
  data_obj *o = m ? calloc((size_t)m, sizeof *o) : NULL;
  if (m && !o)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  for (int i = 0; i < m && !rc; i++)
    if ((rc = obj_from_json(cJSON_GetArrayItem(objs, i), &o[i])))
      rc = ft_err_set(rc, "%s: object %d of %s is not {key, size, etag, tokens}", path, i, uri);
  cJSON_Delete(root);
  if (rc) {
    data_objs_free(o, m);
    return rc;
  }
  *ob = o;
  *n = m;
  *found = p != NULL;
  return FT_OK;
}

static cJSON *entry_json(const char *where, const data_obj *ob, int n) {
  cJSON *e = cJSON_CreateObject(), *a = e ? cJSON_AddArrayToObject(e, "objects") : NULL;
  if (!a || !cJSON_AddStringToObject(e, "endpoint", where)) {
    cJSON_Delete(e);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "key", ob[i].key) ||
        !cJSON_AddNumberToObject(o, "size", (double)ob[i].size) ||
        !cJSON_AddStringToObject(o, "etag", ob[i].etag) ||
        !cJSON_AddNumberToObject(o, "tokens", (double)ob[i].tokens)) {
      cJSON_Delete(o);
      cJSON_Delete(e);
      return NULL;
    }
    cJSON_AddItemToArray(a, o);
  }
  return e;
}

int data_listing_save(const char *path, const char *uri, const char *where, const data_obj *ob,
                      int n) {
  cJSON *root;
  int rc = read_root(path, &root);
  if (rc)
    return rc;
  if (!root) {
    root = cJSON_CreateObject();
    if (!root || !cJSON_AddNumberToObject(root, "version", 1) ||
        !cJSON_AddObjectToObject(root, "patterns")) {
      cJSON_Delete(root);
      return ft_err_set(FT_ENOMEM, "out of memory");
    }
  }
  cJSON *pats = cJSON_GetObjectItemCaseSensitive(root, "patterns"), *e = entry_json(where, ob, n);
  char *text = NULL;
  if (e) {
    cJSON_DeleteItemFromObjectCaseSensitive(pats, uri);
    cJSON_AddItemToObject(pats, uri, e);
    text = cJSON_Print(root);
  }
  cJSON_Delete(root);
  if (!text)
    return ft_err_set(FT_ENOMEM, "out of memory");
  ft_afile f;
  rc = ft_afile_open(&f, path);
  if (!rc && (rc = ft_afile_write(&f, text, strlen(text))))
    ft_afile_abort(&f);
  else if (!rc)
    rc = ft_afile_commit(&f);
  free(text);
  return rc;
}
