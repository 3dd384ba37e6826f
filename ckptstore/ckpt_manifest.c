/*
 * ckpt_manifest: shard and checkpoint manifests, and their JSON forms.
 *
 * A shard manifest lists, for one rank, the byte ranges (parts) it wrote and
 * the chunks of each: (offset, raw length, SHA-256, stored size), offsets
 * absolute in the logical tensor. A checkpoint manifest is the union of its
 * shards, one entry per tensor with its chunks sorted by offset, plus the
 * metadata of ckpt_meta.
 *
 * JSON, versioned ("format" and "version") and checksummed: the last member
 * is "checksum", the SHA-256 (hex) of the text before it (up to, not
 * including, the comma that precedes the member). A reader recomputes it and
 * refuses a mismatch with FT_ECORRUPT, so a damaged manifest is never
 * mistaken for a smaller checkpoint. config/state/metrics (and "data",
 * present only when ckpt_meta.data_json was given) are kept as JSON
 * *strings*, byte for byte as given: the store never re-parses them (a
 * uint64 RNG state would not survive a double).
 *
 * Invariants of a built checkpoint manifest (ckpt_manifest_build):
 *   every tensor's bytes [0, nbytes) are covered by its chunks exactly once;
 *   chunks are sorted by offset; dtype and shape agree across shards.
 * The parsers check them too (a manifest from disk or a bucket is input,
 * checksum or not): every number an integer in its range, a valid run
 * name, a known dtype, nbytes = dtype size x shape (no overflow), chunks
 * tiling the tensor's (or part's) byte range in order, tensors of a
 * checkpoint sorted by name without duplicates. Anything else is FT_EFORMAT.
 * Pure data code, but for ckpt_manifest_read / ckpt_manifest_expand_tier /
 * ckpt_shard_obj_read and the index's functions at the end, which read a
 * format 2 or 3 manifest's shard and index objects from a tier, and write
 * the index (ckpt_index_write: a few threads put one level's objects at
 * once), through its function pointers (below the store's facade, so the
 * tiers may call them); thread-safe as long as objects are not shared
 * mutably.
 */
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_hex.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_FORMAT "ftckpt-shard"
#define SHARD_REF_FORMAT "ftckpt-shard-ref"
#define MAN_FORMAT "ftckpt-manifest"
#define INFO_FORMAT "ftckpt-info"
#define FORMAT_VERSION 1
/* A checkpoint manifest of version 2 names its shard objects instead of
 * listing its tensors (ckpt_manifest_build_refs). */
#define MAN_VERSION_REFS 2
/* Version 3 names the root of an index of its shard objects instead
 * (ckpt_index_write): a manifest of a few hundred bytes at any world. */
#define MAN_VERSION_INDEX 3
#define INDEX_FORMAT "ftckpt-index"

/* ---- small helpers ---------------------------------------------------------- */

int ckpt_run_name_ok(const char *run) {
  if (!run || !run[0] || run[0] == '.' || strlen(run) > 127)
    return 0;
  for (const char *p = run; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
      return 0;
  return 1;
}

uint64_t ckpt_tensor_nbytes(const char *dtype, int ndim, const int64_t *shape) {
  int es = ckpt_dtype_size(dtype);
  if (!es || ndim < 0 || ndim > CKPT_MAX_DIMS)
    return 0;
  uint64_t n = (uint64_t)es;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (shape[i] > 0 && n > UINT64_MAX / (uint64_t)shape[i]))
      return 0;
    n *= (uint64_t)shape[i];
  }
  return n;
}

int ckpt_tensor_add_chunk(ckpt_tensor *t, const ckpt_chunk_ref *c) {
  if (t->nchunks == t->cap) {
    int cap = t->cap ? 2 * t->cap : 8;
    ckpt_chunk_ref *n = realloc(t->chunks, (size_t)cap * sizeof *n);
    if (!n)
      return ft_err_set(FT_ENOMEM, "out of memory");
    t->chunks = n;
    t->cap = cap;
  }
  ckpt_chunk_ref r = *c;
  r.chain = NULL;
  if (c->depth > 0) {
    if (!(r.chain = malloc((size_t)c->depth * CKPT_HASH_LEN)))
      return ft_err_set(FT_ENOMEM, "out of memory");
    memcpy(r.chain, c->chain, (size_t)c->depth * CKPT_HASH_LEN);
  }
  t->chunks[t->nchunks++] = r;
  return FT_OK;
}

void ckpt_tensor_release(ckpt_tensor *t) {
  free(t->name);
  for (int i = 0; t->chunks && i < t->nchunks; i++)
    free(t->chunks[i].chain);
  free(t->chunks);
  memset(t, 0, sizeof *t);
}

static char *xstrdup(const char *s) {
  return strdup(s ? s : "{}");
}

/* Serialises root and appends the checksum member. */
static char *seal(cJSON *root, int formatted) {
  char *body = formatted ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
  if (!body)
    return NULL;
  size_t n = strlen(body);
  while (n > 0 && (body[n - 1] == '}' || isspace((unsigned char)body[n - 1])))
    if (body[--n] == '}')
      break;
  while (n > 0 && isspace((unsigned char)body[n - 1]))
    n--;
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  char *out = malloc(n + 128);
  if (!out || ckpt_sha256(body, n, h)) {
    free(out);
    free(body);
    return NULL;
  }
  ckpt_hex(h, hex);
  memcpy(out, body, n);
  snprintf(out + n, 128, formatted ? ",\n\t\"checksum\":\t\"%s\"\n}\n" : ",\"checksum\":\"%s\"}",
           hex);
  free(body);
  return out;
}

/* Checks the checksum member; FT_ECORRUPT if absent or wrong. */
static int check_seal(const char *text, const char *what) {
  const char *p = NULL, *q = text;
  while ((q = strstr(q, "\"checksum\"")) != NULL)
    p = q++;
  if (!p)
    return ft_err_set(FT_ECORRUPT, "%s: no checksum (truncated or not a manifest)", what);
  const char *comma = p;
  while (comma > text && comma[-1] != ',')
    comma--;
  if (comma == text)
    return ft_err_set(FT_ECORRUPT, "%s: malformed checksum member", what);
  comma--;
  const char *v = strchr(p + 10, '"');
  char want[CKPT_HEX_LEN + 1];
  if (!v || strlen(v + 1) < CKPT_HEX_LEN)
    return ft_err_set(FT_ECORRUPT, "%s: malformed checksum member", what);
  memcpy(want, v + 1, CKPT_HEX_LEN);
  want[CKPT_HEX_LEN] = 0;
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  int rc = ckpt_sha256(text, (size_t)(comma - text), h);
  if (rc)
    return rc;
  ckpt_hex(h, hex);
  if (strcmp(hex, want) != 0)
    return ft_err_set(FT_ECORRUPT,
                      "%s: checksum mismatch (stored %.12s..., computed %.12s...): the "
                      "manifest was damaged or edited",
                      what, want, hex);
  return FT_OK;
}

static int get_num(const cJSON *o, const char *k, double *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  if (cJSON_IsNumber(x)) {
    *v = x->valuedouble;
    return FT_OK;
  }
  if (cJSON_IsNull(x)) {
    *v = NAN;
    return FT_OK;
  }
  return ft_err_set(FT_EFORMAT, "manifest: missing or non-numeric \"%s\"", k);
}

/* Largest integer a double (a JSON number) holds exactly: 2^53. */
#define JSON_INT_MAX 9007199254740992.0

/* v as an integer in [lo, hi]; FT_EFORMAT for NaN, fractions, out of range. */
static int as_int(double v, double lo, double hi, const char *what, const char *k, int64_t *out) {
  if (!(v >= lo && v <= hi) || v != floor(v))
    return ft_err_set(FT_EFORMAT, "%s: \"%s\" is not an integer in [%.0f, %.0f]", what, k, lo, hi);
  *out = (int64_t)v;
  return FT_OK;
}

/* Checks a parsed tensor: known dtype, byte count that fits, chunks that
 * tile [t->offset, t->offset + t->len) in order, each of at least a byte. */
static int check_tensor(const ckpt_tensor *t, int with_range) {
  uint64_t nbytes = ckpt_tensor_nbytes(t->dtype, t->ndim, t->shape);
  int zero = 0;
  for (int i = 0; i < t->ndim; i++)
    zero |= t->shape[i] == 0;
  if (nbytes == 0 && !(zero && ckpt_dtype_size(t->dtype)))
    return ft_err_set(FT_EFORMAT, "manifest: tensor %s: unknown dtype '%s' or shape too large",
                      t->name, t->dtype);
  if (with_range ? t->offset > nbytes || t->len > nbytes - t->offset : t->len != nbytes)
    return ft_err_set(FT_EFORMAT, "manifest: tensor %s: bytes do not match its dtype and shape",
                      t->name);
  uint64_t at = t->offset;
  for (int c = 0; c < t->nchunks; c++) {
    const ckpt_chunk_ref *r = &t->chunks[c];
    if (r->offset != at || r->len == 0 || r->len > t->offset + t->len - at)
      return ft_err_set(FT_EFORMAT,
                        "manifest: tensor %s: chunk %d does not continue at byte %" PRIu64, t->name,
                        c, at);
    at += r->len;
  }
  if (at != t->offset + t->len)
    return ft_err_set(FT_EFORMAT,
                      "manifest: tensor %s: chunks end at byte %" PRIu64 ", not %" PRIu64, t->name,
                      at, t->offset + t->len);
  return FT_OK;
}

static const char *get_str(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* format and version (1, or up to max_version): *version (may be NULL). */
static int check_header_v(const cJSON *root, const char *format, const char *what, int max_version,
                          int *version) {
  const char *f = get_str(root, "format");
  double v = 0;
  if (!f || strcmp(f, format) != 0)
    return ft_err_set(FT_EFORMAT, "%s: not a %s document", what, format);
  if (get_num(root, "version", &v) || !(v >= FORMAT_VERSION && v <= max_version) || v != floor(v))
    return ft_err_set(FT_EFORMAT, "%s: version %g is not supported (this build reads %d to %d)",
                      what, v, FORMAT_VERSION, max_version);
  if (version)
    *version = (int)v;
  return FT_OK;
}

static int check_header(const cJSON *root, const char *format, const char *what) {
  return check_header_v(root, format, what, FORMAT_VERSION, NULL);
}

/* ---- totals of a stored shard, or of a checkpoint of shard objects ------------ */

static void sum_to_json(cJSON *o, const ckpt_shard_sum *u) {
  cJSON_AddNumberToObject(o, "logical", (double)u->logical);
  cJSON_AddNumberToObject(o, "stored", (double)u->stored);
  cJSON_AddNumberToObject(o, "new", (double)u->new_bytes);
  cJSON_AddNumberToObject(o, "nchunks", u->nchunks);
  cJSON_AddNumberToObject(o, "ntensors", u->ntensors);
  cJSON_AddNumberToObject(o, "depth", u->depth);
  cJSON_AddNumberToObject(o, "lossy", u->lossy);
  cJSON_AddNumberToObject(o, "base", (double)u->base_step);
}

static int sum_from_json(const cJSON *o, const char *what, ckpt_shard_sum *u) {
  static const char *keys[] = {"logical",  "stored", "new",   "nchunks",
                               "ntensors", "depth",  "lossy", "base"};
  const double lo[] = {0, 0, 0, 0, 0, 0, 0, -1};
  const double hi[] = {JSON_INT_MAX, JSON_INT_MAX,   JSON_INT_MAX, INT32_MAX,
                       INT32_MAX,    CKPT_MAX_CHAIN, 65535,        JSON_INT_MAX};
  int64_t v[8];
  if (!cJSON_IsObject(o))
    return ft_err_set(FT_EFORMAT, "%s: no totals", what);
  for (int k = 0; k < 8; k++) {
    double d = 0;
    int rc = get_num(o, keys[k], &d);
    if (rc == FT_OK)
      rc = as_int(d, lo[k], hi[k], what, keys[k], &v[k]);
    if (rc)
      return rc;
  }
  u->logical = (uint64_t)v[0];
  u->stored = (uint64_t)v[1];
  u->new_bytes = (uint64_t)v[2];
  u->nchunks = (int)v[3];
  u->ntensors = (int)v[4];
  u->depth = (int)v[5];
  u->lossy = (int)v[6] & ~1;
  u->base_step = v[7];
  return FT_OK;
}

/* ---- tensors <-> JSON --------------------------------------------------------- */

static cJSON *tensor_to_json(const ckpt_tensor *t, int with_range) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", t->name);
  cJSON_AddStringToObject(o, "dtype", t->dtype);
  cJSON *sh = cJSON_AddArrayToObject(o, "shape");
  for (int i = 0; i < t->ndim; i++)
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[i]));
  if (with_range) {
    cJSON_AddNumberToObject(o, "offset", (double)t->offset);
    cJSON_AddNumberToObject(o, "len", (double)t->len);
  } else {
    cJSON_AddNumberToObject(o, "nbytes", (double)t->len);
  }
  if (t->lossy) /* absent: exact */
    cJSON_AddStringToObject(o, "lossy", ckpt_lossy_name(t->lossy));
  cJSON *ch = cJSON_AddArrayToObject(o, "chunks");
  for (int i = 0; i < t->nchunks; i++) {
    const ckpt_chunk_ref *c = &t->chunks[i];
    char hex[CKPT_HEX_LEN + 1];
    ckpt_hex(c->hash, hex);
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->offset));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->len));
    cJSON_AddItemToArray(a, cJSON_CreateString(hex));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->stored));
    if (c->depth > 0) { /* a delta: its chain, the names run together */
      char *chain = malloc((size_t)c->depth * CKPT_HEX_LEN + 1);
      for (int k = 0; chain && k < c->depth; k++)
        ckpt_hex(c->chain + (size_t)k * CKPT_HASH_LEN, chain + (size_t)k * CKPT_HEX_LEN);
      cJSON_AddItemToArray(a, chain ? cJSON_CreateString(chain) : cJSON_CreateNull());
      free(chain);
    }
    cJSON_AddItemToArray(ch, a);
  }
  return o;
}

static int tensor_from_json(const cJSON *o, ckpt_tensor *t, int with_range) {
  memset(t, 0, sizeof *t);
  const char *name = get_str(o, "name"), *dtype = get_str(o, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
  const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "chunks");
  if (!name || !dtype || strlen(dtype) >= sizeof t->dtype || !cJSON_IsArray(sh) ||
      !cJSON_IsArray(ch) || cJSON_GetArraySize(sh) > CKPT_MAX_DIMS)
    return ft_err_set(FT_EFORMAT, "manifest: malformed tensor entry");
  if (!(t->name = strdup(name)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
  const char *lossy = get_str(o, "lossy");
  if (cJSON_GetObjectItemCaseSensitive(o, "lossy")) {
    for (t->lossy = CKPT_LOSSY_BF16; lossy && t->lossy <= CKPT_LOSSY_Q8LOG; t->lossy++)
      if (!strcmp(lossy, ckpt_lossy_name(t->lossy)))
        break;
    if (!lossy || t->lossy > CKPT_LOSSY_Q8LOG || strcmp(t->dtype, "f32"))
      return ft_err_set(FT_EFORMAT, "manifest: tensor %s: unknown lossy form", name);
  }
  const cJSON *x;
  int64_t v = 0;
  cJSON_ArrayForEach(x, sh) {
    if (!cJSON_IsNumber(x) || as_int(x->valuedouble, 0, JSON_INT_MAX, name, "shape", &v))
      return ft_err_set(FT_EFORMAT, "manifest: tensor %s: bad shape", name);
    t->shape[t->ndim++] = v;
  }
  double a = 0, b = 0;
  int64_t ia = 0, ib = 0;
  int rc = with_range ? (get_num(o, "offset", &a) ? FT_EFORMAT : get_num(o, "len", &b))
                      : get_num(o, "nbytes", &b);
  if (rc == FT_OK && with_range)
    rc = as_int(a, 0, JSON_INT_MAX, name, "offset", &ia);
  if (rc == FT_OK)
    rc = as_int(b, 0, JSON_INT_MAX, name, with_range ? "len" : "nbytes", &ib);
  if (rc)
    return rc;
  t->offset = (uint64_t)ia;
  t->len = (uint64_t)ib;
  uint8_t chain[CKPT_MAX_CHAIN * CKPT_HASH_LEN];
  cJSON_ArrayForEach(x, ch) {
    ckpt_chunk_ref c = {0};
    int64_t co = 0, cl = 0, cs = 0;
    const cJSON *e0 = cJSON_GetArrayItem(x, 0), *e1 = cJSON_GetArrayItem(x, 1),
                *e2 = cJSON_GetArrayItem(x, 2), *e3 = cJSON_GetArrayItem(x, 3),
                *e4 = cJSON_GetArrayItem(x, 4);
    if (!cJSON_IsNumber(e0) || !cJSON_IsNumber(e1) || !cJSON_IsString(e2) || !cJSON_IsNumber(e3) ||
        strlen(e2->valuestring) != CKPT_HEX_LEN || ckpt_unhex(e2->valuestring, c.hash) ||
        as_int(e0->valuedouble, 0, JSON_INT_MAX, name, "chunk offset", &co) ||
        as_int(e1->valuedouble, 1, JSON_INT_MAX, name, "chunk length", &cl) ||
        as_int(e3->valuedouble, 0, JSON_INT_MAX, name, "chunk stored size", &cs))
      return ft_err_set(FT_EFORMAT, "manifest: tensor %s: malformed chunk entry", name);
    if (e4) { /* a delta's chain: 1..CKPT_MAX_CHAIN names run together */
      size_t n = cJSON_IsString(e4) ? strlen(e4->valuestring) : 0;
      if (n == 0 || n % CKPT_HEX_LEN || n / CKPT_HEX_LEN > CKPT_MAX_CHAIN ||
          ft_hex_decode(e4->valuestring, n / 2, chain, FT_HEX_LOWER))
        return ft_err_set(FT_EFORMAT, "manifest: tensor %s: malformed chain of a delta chunk",
                          name);
      c.depth = (int)(n / CKPT_HEX_LEN);
      c.chain = chain;
    }
    c.offset = (uint64_t)co;
    c.len = (uint64_t)cl;
    c.stored = (uint64_t)cs;
    rc = ckpt_tensor_add_chunk(t, &c);
    if (rc)
      return rc;
  }
  return check_tensor(t, with_range);
}

/* ---- shards ------------------------------------------------------------------ */

/* What both forms of a shard begin with: format, version, run, step,
 * rank, world. */
static cJSON *shard_header(const ckpt_shard *sh, const char *format) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return NULL;
  cJSON_AddStringToObject(root, "format", format);
  cJSON_AddNumberToObject(root, "version", FORMAT_VERSION);
  cJSON_AddStringToObject(root, "run", sh->run);
  cJSON_AddNumberToObject(root, "step", (double)sh->step);
  cJSON_AddNumberToObject(root, "rank", sh->rank);
  cJSON_AddNumberToObject(root, "world", sh->world);
  return root;
}

char *ckpt_shard_report_to_json(const ckpt_shard *sh) {
  return sh->has_object ? ckpt_shard_ref_to_json(sh) : ckpt_shard_to_json(sh);
}

char *ckpt_shard_to_json(const ckpt_shard *sh) {
  if (sh->is_ref) /* a reference has no parts to write */
    return ckpt_shard_ref_to_json(sh);
  cJSON *root = shard_header(sh, SHARD_FORMAT);
  if (!root)
    return NULL;
  cJSON *parts = cJSON_AddArrayToObject(root, "parts");
  for (int i = 0; i < sh->nparts; i++)
    cJSON_AddItemToArray(parts, tensor_to_json(&sh->parts[i], 1));
  char *s = seal(root, 0);
  cJSON_Delete(root);
  return s;
}

char *ckpt_shard_ref_to_json(const ckpt_shard *sh) {
  cJSON *root = shard_header(sh, SHARD_REF_FORMAT);
  if (!root)
    return NULL;
  char hex[CKPT_HEX_LEN + 1];
  ckpt_hex(sh->object, hex);
  cJSON_AddStringToObject(root, "object", hex);
  sum_to_json(cJSON_AddObjectToObject(root, "totals"), &sh->sum);
  if (sh->host) { /* a host's: its leaf's ranks, and when its oldest shard was written */
    cJSON_AddNumberToObject(root, "ranks", sh->nranks);
    cJSON_AddNumberToObject(root, "oldest_ms", (double)(sh->oldest / 1000000)); /* down: older */
  }
  char *s = seal(root, 0);
  cJSON_Delete(root);
  return s;
}

void ckpt_shard_add_up(ckpt_shard *sh) {
  ckpt_shard_sum *u = &sh->sum;
  u->logical = u->stored = 0;
  u->nchunks = u->ntensors = u->depth = u->lossy = 0;
  for (int i = 0; i < sh->nparts; i++) {
    const ckpt_tensor *p = &sh->parts[i];
    u->logical += p->len;
    u->nchunks += p->nchunks;
    u->ntensors += i == 0 || strcmp(sh->parts[i - 1].name, p->name) != 0;
    if (p->lossy)
      u->lossy |= 1 << p->lossy;
    for (int c = 0; c < p->nchunks; c++) {
      u->stored += p->chunks[c].stored;
      if (p->chunks[c].depth > u->depth)
        u->depth = p->chunks[c].depth;
    }
  }
}

int ckpt_shard_nranks(const ckpt_shard *sh) {
  return sh->host ? sh->nranks : 1;
}

int ckpt_shard_is_ref(const ckpt_shard *sh) {
  return sh && sh->is_ref;
}

void ckpt_shard_free(ckpt_shard *sh) {
  if (!sh)
    return;
  for (int i = 0; i < sh->nparts; i++)
    ckpt_tensor_release(&sh->parts[i]);
  free(sh->parts);
  free(sh->run);
  free(sh);
}

int ckpt_shard_from_json(const char *json, ckpt_shard **out) {
  *out = NULL;
  if (!json)
    return ft_err_set(FT_EINVAL, "shard manifest: NULL text");
  int rc = check_seal(json, "shard manifest");
  if (rc)
    return rc;
  cJSON *root = cJSON_Parse(json);
  if (!root)
    return ft_err_set(FT_EFORMAT, "shard manifest: not valid JSON");
  ckpt_shard *sh = calloc(1, sizeof *sh);
  double step = 0, rank = 0, world = 0;
  const cJSON *parts = cJSON_GetObjectItemCaseSensitive(root, "parts");
  const char *run = get_str(root, "run");
  if (!sh) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  const char *fmt = get_str(root, "format");
  int ref = fmt && !strcmp(fmt, SHARD_REF_FORMAT);
  if ((rc = check_header(root, ref ? SHARD_REF_FORMAT : SHARD_FORMAT, "shard manifest")))
    goto out;
  if (ref) { /* a stored shard's reference: its object's name and totals */
    const char *obj = get_str(root, "object");
    if (!obj || strlen(obj) != CKPT_HEX_LEN || ckpt_unhex(obj, sh->object)) {
      rc = ft_err_set(FT_EFORMAT, "shard reference: no valid \"object\" name");
      goto out;
    }
    if ((rc = sum_from_json(cJSON_GetObjectItemCaseSensitive(root, "totals"), "shard reference",
                            &sh->sum)))
      goto out;
    sh->is_ref = sh->has_object = 1;
    parts = NULL;
  }
  double nranks = 1, oldest = 0;
  if (ref && cJSON_GetObjectItemCaseSensitive(root, "ranks")) { /* a host's leaf */
    if (get_num(root, "ranks", &nranks) || get_num(root, "oldest_ms", &oldest)) {
      rc = ft_err_set(FT_EFORMAT, "host reference: \"ranks\" or \"oldest_ms\" is not a number");
      goto out;
    }
    sh->host = 1;
  }
  if (!run || (!ref && !cJSON_IsArray(parts)) || get_num(root, "step", &step) ||
      get_num(root, "rank", &rank) || get_num(root, "world", &world)) {
    rc = ft_err_set(FT_EFORMAT, "shard manifest: missing run, step, rank, world or parts");
    goto out;
  }
  int64_t istep = 0, irank = 0, iworld = 0;
  if ((rc = as_int(step, 0, JSON_INT_MAX, "shard manifest", "step", &istep)) ||
      (rc = as_int(world, 1, 1 << 20, "shard manifest", "world", &iworld)) ||
      (rc = as_int(rank, 0, (double)iworld - 1, "shard manifest", "rank", &irank)))
    goto out;
  int64_t inranks = 1, ioldest = 0;
  if (sh->host &&
      ((rc = as_int(nranks, 1,
                    (double)(iworld - irank) < CKPT_INDEX_FANOUT ? (double)(iworld - irank)
                                                                 : CKPT_INDEX_FANOUT,
                    "host reference", "ranks", &inranks)) ||
       (rc = as_int(oldest, 0, (double)(INT64_MAX / 1000000), "host reference", "oldest_ms",
                    &ioldest))))
    goto out;
  sh->nranks = (int)inranks;
  sh->oldest = ioldest * 1000000;
  if (!ckpt_run_name_ok(run)) {
    rc = ft_err_set(FT_EFORMAT, "shard manifest: bad run name");
    goto out;
  }
  sh->run = strdup(run);
  sh->step = istep;
  sh->rank = (int)irank;
  sh->world = (int)iworld;
  int n = parts ? cJSON_GetArraySize(parts) : 0;
  sh->parts = ref ? NULL : calloc((size_t)(n ? n : 1), sizeof *sh->parts);
  if (!sh->run || (!ref && !sh->parts)) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  const cJSON *p;
  cJSON_ArrayForEach(p, parts) {
    rc = tensor_from_json(p, &sh->parts[sh->nparts++], 1);
    if (rc)
      goto out;
  }
  *out = sh;
  sh = NULL;
out:
  ckpt_shard_free(sh);
  cJSON_Delete(root);
  return rc;
}

int ckpt_shard_rank(const ckpt_shard *sh) {
  return sh->rank;
}
int64_t ckpt_shard_step(const ckpt_shard *sh) {
  return sh->step;
}

/* ---- building a checkpoint manifest ------------------------------------------- */

static int part_cmp(const void *a, const void *b) {
  const ckpt_tensor *x = *(const ckpt_tensor *const *)a, *y = *(const ckpt_tensor *const *)b;
  int c = strcmp(x->name, y->name);
  if (c)
    return c;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int shard_rank_cmp(const void *a, const void *b) {
  const ckpt_shard *x = *(ckpt_shard *const *)a, *y = *(ckpt_shard *const *)b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

static int obj_cmp(const void *a, const void *b) {
  const ckpt_shard_obj *x = a, *y = b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

void ckpt_manifest_free(ckpt_manifest *m) {
  if (!m)
    return;
  for (int i = 0; i < m->ntensors; i++)
    ckpt_tensor_release(&m->tensors[i]);
  free(m->tensors);
  free(m->objs);
  free(m->hosts);
  free(m->nodes);
  free(m->config);
  free(m->state);
  free(m->metrics);
  free(m->data);
  free(m);
}

/* Checks one part: its chunks must tile [offset, offset+len) in order. */
static int check_part(const ckpt_tensor *p) {
  uint64_t at = p->offset;
  for (int i = 0; i < p->nchunks; i++) {
    if (p->chunks[i].offset != at || p->chunks[i].len == 0)
      return ft_err_set(FT_EINVAL,
                        "shard part of %s at byte %" PRIu64 ": its chunks do not tile it", p->name,
                        p->offset);
    at += p->chunks[i].len;
  }
  if (at != p->offset + p->len)
    return ft_err_set(FT_EINVAL,
                      "shard part of %s at byte %" PRIu64 ": chunks cover %" PRIu64 " of %" PRIu64
                      " bytes",
                      p->name, p->offset, at - p->offset, p->len);
  return FT_OK;
}

int ckpt_manifest_build(const ckpt_meta *meta, ckpt_shard *const *shards, int nshards,
                        ckpt_manifest **out) {
  *out = NULL;
  int rc = FT_OK, nparts = 0;
  if (!meta || !meta->run || !ckpt_run_name_ok(meta->run))
    return ft_err_set(FT_EINVAL, "commit: bad run name '%s' (use letters, digits, . _ -)",
                      meta && meta->run ? meta->run : "(null)");
  if (nshards <= 0)
    return ft_err_set(FT_EINVAL, "commit of %s step %" PRId64 ": no shards", meta->run, meta->step);
  for (int s = 0; s < nshards; s++) {
    if (!shards[s])
      return ft_err_set(FT_EINVAL, "commit: shard %d is NULL", s);
    if (strcmp(shards[s]->run, meta->run) != 0 || shards[s]->step != meta->step)
      return ft_err_set(FT_EINVAL,
                        "commit of %s step %" PRId64 ": shard of rank %d is of %s step %" PRId64,
                        meta->run, meta->step, shards[s]->rank, shards[s]->run, shards[s]->step);
    nparts += shards[s]->nparts;
  }
  ckpt_manifest *m = calloc(1, sizeof *m);
  const ckpt_tensor **all = calloc((size_t)(nparts ? nparts : 1), sizeof *all);
  if (!m || !all) {
    free(all);
    free(m);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  int k = 0;
  for (int s = 0; s < nshards; s++)
    for (int i = 0; i < shards[s]->nparts; i++) {
      rc = check_part(&shards[s]->parts[i]);
      if (rc)
        goto out;
      all[k++] = &shards[s]->parts[i];
    }
  qsort(all, (size_t)nparts, sizeof *all, part_cmp);
  m->tensors = calloc((size_t)(nparts ? nparts : 1), sizeof *m->tensors);
  m->config = xstrdup(meta->config_json);
  m->state = xstrdup(meta->state_json);
  m->metrics = xstrdup(meta->metrics_json);
  m->data = meta->data_json ? strdup(meta->data_json) : NULL;
  if (!m->tensors || !m->config || !m->state || !m->metrics || (meta->data_json && !m->data)) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  for (int i = 0; i < nparts;) {
    const ckpt_tensor *p0 = all[i];
    ckpt_tensor *t = &m->tensors[m->ntensors++];
    uint64_t nbytes = ckpt_tensor_nbytes(p0->dtype, p0->ndim, p0->shape);
    if (!(t->name = strdup(p0->name))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      goto out;
    }
    memcpy(t->dtype, p0->dtype, sizeof t->dtype);
    t->ndim = p0->ndim;
    memcpy(t->shape, p0->shape, sizeof t->shape);
    t->len = nbytes;
    t->lossy = p0->lossy;
    if (t->lossy)
      m->info.lossy |= 1 << t->lossy;
    if (nbytes == 0 && p0->ndim > 0) {
      rc = ft_err_set(FT_EINVAL, "commit: tensor %s has an unknown dtype '%s' or a bad shape",
                      p0->name, p0->dtype);
      goto out;
    }
    uint64_t at = 0;
    for (; i < nparts && strcmp(all[i]->name, t->name) == 0; i++) {
      const ckpt_tensor *p = all[i];
      if (strcmp(p->dtype, t->dtype) != 0 || p->ndim != t->ndim ||
          memcmp(p->shape, t->shape, sizeof t->shape) != 0 || p->lossy != t->lossy) {
        rc = ft_err_set(FT_EINVAL, "commit: shards disagree on the dtype, shape or form of %s",
                        t->name);
        goto out;
      }
      if (p->offset > at) {
        rc = ft_err_set(FT_EINVAL,
                        "commit refused: bytes [%" PRIu64 ", %" PRIu64 ") of %s are in no shard",
                        at, p->offset, t->name);
        goto out;
      }
      if (p->offset < at) {
        rc = ft_err_set(FT_EINVAL,
                        "commit refused: bytes [%" PRIu64 ", %" PRIu64 ") of %s are in two shards",
                        p->offset, at, t->name);
        goto out;
      }
      for (int c = 0; c < p->nchunks; c++) {
        rc = ckpt_tensor_add_chunk(t, &p->chunks[c]);
        if (rc)
          goto out;
        t->chunks[t->nchunks - 1].offset = p->chunks[c].offset;
      }
      at = p->offset + p->len;
    }
    if (at != nbytes) {
      rc = ft_err_set(FT_EINVAL,
                      "commit refused: bytes [%" PRIu64 ", %" PRIu64 ") of %s are in no shard%s",
                      at < nbytes ? at : nbytes, at < nbytes ? nbytes : at, t->name,
                      at > nbytes ? " (shards go past the end of the tensor)" : "");
      goto out;
    }
    m->info.logical_bytes += nbytes;
    for (int c = 0; c < t->nchunks; c++) {
      m->info.stored_bytes += t->chunks[c].stored;
      if (t->chunks[c].depth > m->info.depth)
        m->info.depth = t->chunks[c].depth;
    }
    m->info.nchunks += t->nchunks;
  }
  m->info.base_step = -1; /* the commit looks it up (ckpt_commit.c) */
  snprintf(m->info.run, sizeof m->info.run, "%s", meta->run);
  m->info.step = meta->step;
  m->info.parent_step = meta->parent_step;
  m->info.world = meta->world > 0 ? meta->world : shards[0]->world;
  m->info.loss = meta->loss;
  m->info.ntensors = m->ntensors;
  m->info.state = CKPT_COMMITTED;
  *out = m;
  m = NULL;
out:
  free(all);
  ckpt_manifest_free(m);
  return rc;
}

/* Adds the totals u of a shard of step into to (base_step: the newest
 * base before step; to starts with base_step -1). */
static void sum_add(ckpt_shard_sum *to, const ckpt_shard_sum *u, int64_t step) {
  to->logical += u->logical;
  to->stored += u->stored;
  to->new_bytes += u->new_bytes;
  to->nchunks += u->nchunks;
  if (u->ntensors > to->ntensors) /* every rank has a part of every tensor, as FSDP shards */
    to->ntensors = u->ntensors;
  if (u->depth > to->depth)
    to->depth = u->depth;
  to->lossy |= u->lossy;
  if (u->base_step > to->base_step && u->base_step < step)
    to->base_step = u->base_step;
}

static int host_cmp(const void *a, const void *b) {
  const ckpt_host_obj *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

int ckpt_manifest_build_refs(const ckpt_meta *meta, ckpt_shard *const *shards, int nshards,
                             ckpt_manifest **out) {
  *out = NULL;
  if (!meta || !meta->run || !ckpt_run_name_ok(meta->run))
    return ft_err_set(FT_EINVAL, "commit: bad run name '%s' (use letters, digits, . _ -)",
                      meta && meta->run ? meta->run : "(null)");
  int world = meta->world > 0 ? meta->world : nshards > 0 && shards[0] ? shards[0]->world : 0;
  int nranks = 0, nhosts = 0;
  for (int i = 0; i < nshards; i++) {
    int k = shards[i] && shards[i]->host ? shards[i]->nranks : 1;
    nranks += k;
    nhosts += shards[i] && shards[i]->host;
  }
  if (nshards <= 0 || nranks != world)
    return ft_err_set(FT_EINVAL,
                      "commit of %s step %" PRId64 ": shard objects of %d ranks for a world of %d",
                      meta->run, meta->step, nranks, world);
  ckpt_manifest *m = calloc(1, sizeof *m);
  if (!m || !(m->objs = calloc((size_t)(nshards - nhosts + 1), sizeof *m->objs)) ||
      !(m->hosts = calloc((size_t)(nhosts + 1), sizeof *m->hosts)) ||
      !(m->config = xstrdup(meta->config_json)) || !(m->state = xstrdup(meta->state_json)) ||
      !(m->metrics = xstrdup(meta->metrics_json)) ||
      (meta->data_json && !(m->data = strdup(meta->data_json)))) {
    ckpt_manifest_free(m);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  ckpt_info *in = &m->info;
  ckpt_shard_sum tot = {.base_step = -1};
  for (int i = 0; i < nshards; i++) {
    const ckpt_shard *sh = shards[i];
    int rc = FT_OK, hi = sh ? sh->rank + (sh->host ? sh->nranks : 1) : 0;
    if (!sh || !sh->is_ref)
      rc = ft_err_set(FT_EINVAL, "commit: shard %d is not a stored shard's reference", i);
    else if (strcmp(sh->run, meta->run) != 0 || sh->step != meta->step)
      rc = ft_err_set(FT_EINVAL,
                      "commit of %s step %" PRId64 ": shard of rank %d is of %s step %" PRId64,
                      meta->run, meta->step, sh->rank, sh->run, sh->step);
    else if (sh->world != world || sh->rank < 0 || hi > world)
      rc = ft_err_set(
          FT_EINVAL, "commit of %s step %" PRId64 ": shard of rank %d of world %d in a world of %d",
          meta->run, meta->step, sh->rank, sh->world, world);
    if (rc) {
      ckpt_manifest_free(m);
      return rc;
    }
    if (sh->host) {
      ckpt_host_obj *h = &m->hosts[m->nhosts++];
      h->lo = sh->rank;
      h->hi = hi;
      h->oldest = sh->oldest;
      memcpy(h->hash, sh->object, CKPT_HASH_LEN);
    } else {
      m->objs[m->nobjs].rank = sh->rank;
      memcpy(m->objs[m->nobjs++].hash, sh->object, CKPT_HASH_LEN);
    }
    sum_add(&tot, &sh->sum, meta->step);
  }
  qsort(m->objs, (size_t)m->nobjs, sizeof *m->objs, obj_cmp);
  qsort(m->hosts, (size_t)m->nhosts, sizeof *m->hosts, host_cmp);
  /* the single ranks and the hosts' ranges tile [0, world) */
  for (int at = 0, i = 0, j = 0; at < world;) {
    int rank = i < m->nobjs ? m->objs[i].rank : world,
        host = j < m->nhosts ? m->hosts[j].lo : world;
    int next = rank < host ? rank : host;
    if (next != at || (rank == host && rank < world)) {
      int rc =
          ft_err_set(FT_EINVAL, "commit of %s step %" PRId64 ": %s shard of rank %d", meta->run,
                     meta->step, next > at ? "no" : "a second", next > at ? at : next);
      ckpt_manifest_free(m);
      return rc;
    }
    at = rank < host ? (i++, rank + 1) : m->hosts[j++].hi;
  }
  in->logical_bytes = tot.logical;
  in->stored_bytes = tot.stored;
  in->new_bytes = tot.new_bytes;
  in->nchunks = tot.nchunks;
  in->ntensors = tot.ntensors;
  in->depth = tot.depth;
  in->lossy = tot.lossy;
  in->base_step = tot.depth == 0 ? -1 : tot.base_step;
  snprintf(in->run, sizeof in->run, "%s", meta->run);
  in->step = meta->step;
  in->parent_step = meta->parent_step;
  in->world = world;
  in->loss = meta->loss;
  in->state = CKPT_COMMITTED;
  *out = m;
  return FT_OK;
}

int ckpt_manifest_fill(ckpt_manifest *m, ckpt_shard *const *shards, int nshards) {
  if (m->expanded || m->nobjs == 0)
    return FT_OK;
  if (nshards != m->nobjs)
    return ft_err_set(FT_ECORRUPT, "checkpoint %s step %" PRId64 ": %d shards for %d objects",
                      m->info.run, m->info.step, nshards, m->nobjs);
  for (int i = 0; i < nshards; i++) {
    const ckpt_shard *sh = shards[i];
    if (sh->is_ref || strcmp(sh->run, m->info.run) != 0 || sh->step != m->info.step ||
        sh->rank != m->objs[i].rank || sh->world != m->info.world)
      return ft_err_set(FT_ECORRUPT,
                        "checkpoint %s step %" PRId64 ": its shard object of rank %d holds the "
                        "shard of %s step %" PRId64 " rank %d of world %d",
                        m->info.run, m->info.step, m->objs[i].rank, sh->run, sh->step, sh->rank,
                        sh->world);
  }
  ckpt_meta meta = {.run = m->info.run,
                    .step = m->info.step,
                    .parent_step = m->info.parent_step,
                    .world = m->info.world,
                    .loss = m->info.loss,
                    .config_json = m->config,
                    .state_json = m->state,
                    .metrics_json = m->metrics};
  ckpt_manifest *b = NULL;
  int rc = ckpt_manifest_build(&meta, shards, nshards, &b);
  if (rc)
    return ckpt_err_wrap(rc == FT_EINVAL ? FT_ECORRUPT : rc, "checkpoint %s step %" PRId64,
                         m->info.run, m->info.step);
  for (int i = 0; i < m->ntensors; i++)
    ckpt_tensor_release(&m->tensors[i]);
  free(m->tensors);
  m->tensors = b->tensors;
  m->ntensors = b->ntensors;
  b->tensors = NULL;
  b->ntensors = 0;
  m->info.ntensors = b->info.ntensors;
  m->info.logical_bytes = b->info.logical_bytes;
  m->info.stored_bytes = b->info.stored_bytes;
  m->info.nchunks = b->info.nchunks;
  m->info.depth = b->info.depth;
  m->info.lossy = b->info.lossy;
  m->expanded = 1;
  m->partial = 0;
  ckpt_manifest_free(b);
  return FT_OK;
}

/* ---- checkpoint manifest <-> JSON ------------------------------------------------ */

char *ckpt_manifest_to_json(const ckpt_manifest *m) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return NULL;
  const ckpt_info *i = &m->info;
  cJSON_AddStringToObject(root, "format", MAN_FORMAT);
  cJSON_AddNumberToObject(root, "version",
                          m->has_index ? MAN_VERSION_INDEX
                          : m->nobjs   ? MAN_VERSION_REFS
                                       : FORMAT_VERSION);
  cJSON_AddStringToObject(root, "run", i->run);
  cJSON_AddNumberToObject(root, "step", (double)i->step);
  cJSON_AddNumberToObject(root, "parent", (double)i->parent_step);
  cJSON_AddNumberToObject(root, "world", i->world);
  cJSON_AddNumberToObject(root, "time_ms", (double)i->time_ms);
  if (i->base_step >= 0) /* absent: no delta chunks */
    cJSON_AddNumberToObject(root, "base", (double)i->base_step);
  if (isfinite(i->loss))
    cJSON_AddNumberToObject(root, "loss", i->loss);
  else
    cJSON_AddNullToObject(root, "loss");
  cJSON_AddStringToObject(root, "config", m->config);
  cJSON_AddStringToObject(root, "state", m->state);
  cJSON_AddStringToObject(root, "metrics", m->metrics);
  if (m->data) /* absent: none */
    cJSON_AddStringToObject(root, "data", m->data);
  if (m->nobjs || m->has_index) { /* versions 2 and 3: the totals, then the shard objects */
    ckpt_shard_sum u = {.logical = i->logical_bytes,
                        .stored = i->stored_bytes,
                        .new_bytes = i->new_bytes,
                        .nchunks = i->nchunks,
                        .ntensors = i->ntensors,
                        .depth = i->depth,
                        .lossy = i->lossy,
                        .base_step = i->base_step};
    sum_to_json(cJSON_AddObjectToObject(root, "totals"), &u);
    if (m->has_index) { /* version 3: the root of their index */
      char hex[CKPT_HEX_LEN + 1];
      ckpt_hex(m->index_root, hex);
      cJSON *ix = cJSON_AddObjectToObject(root, "index");
      cJSON_AddStringToObject(ix, "root", hex);
      cJSON_AddNumberToObject(ix, "depth", m->index_depth);
    } else { /* version 2: every one, in rank order */
      cJSON *sh = cJSON_AddArrayToObject(root, "shards");
      for (int k = 0; k < m->nobjs; k++) {
        char hex[CKPT_HEX_LEN + 1];
        ckpt_hex(m->objs[k].hash, hex);
        cJSON_AddItemToArray(sh, cJSON_CreateString(hex));
      }
    }
  } else {
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (int k = 0; k < m->ntensors; k++)
      cJSON_AddItemToArray(ts, tensor_to_json(&m->tensors[k], 0));
  }
  char *s = seal(root, m->nobjs || m->has_index ? 0 : 1);
  cJSON_Delete(root);
  return s;
}

int ckpt_manifest_from_json(const char *json, ckpt_manifest **out) {
  *out = NULL;
  int rc = check_seal(json, "checkpoint manifest");
  if (rc)
    return rc;
  cJSON *root = cJSON_Parse(json);
  if (!root)
    return ft_err_set(FT_EFORMAT, "checkpoint manifest: not valid JSON");
  ckpt_manifest *m = calloc(1, sizeof *m);
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
  const char *run = get_str(root, "run"), *cfg = get_str(root, "config"),
             *st = get_str(root, "state"), *me = get_str(root, "metrics");
  double step = 0, parent = 0, world = 0, tms = 0, loss = 0;
  if (!m) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  int version = 0;
  if ((rc = check_header_v(root, MAN_FORMAT, "checkpoint manifest", MAN_VERSION_INDEX, &version)))
    goto out;
  const cJSON *objs = cJSON_GetObjectItemCaseSensitive(root, "shards");
  const cJSON *ix = cJSON_GetObjectItemCaseSensitive(root, "index");
  if (version >= MAN_VERSION_REFS)
    ts = NULL;
  if (version != MAN_VERSION_INDEX)
    ix = NULL;
  if (!run || !cfg || !st || !me ||
      (ts                             ? !cJSON_IsArray(ts)
       : version == MAN_VERSION_INDEX ? !cJSON_IsObject(ix)
                                      : !cJSON_IsArray(objs)) ||
      get_num(root, "step", &step) || get_num(root, "parent", &parent) ||
      get_num(root, "world", &world) || get_num(root, "time_ms", &tms) ||
      get_num(root, "loss", &loss)) {
    rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: missing fields");
    goto out;
  }
  int64_t istep = 0, iparent = 0, iworld = 0, itms = 0;
  if ((rc = as_int(step, 0, JSON_INT_MAX, "checkpoint manifest", "step", &istep)) ||
      (rc = as_int(parent, -1, JSON_INT_MAX, "checkpoint manifest", "parent", &iparent)) ||
      (rc = as_int(world, 1, 1 << 20, "checkpoint manifest", "world", &iworld)) ||
      (rc = as_int(tms, 0, JSON_INT_MAX, "checkpoint manifest", "time_ms", &itms)))
    goto out;
  if (!ckpt_run_name_ok(run)) {
    rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: bad run name");
    goto out;
  }
  snprintf(m->info.run, sizeof m->info.run, "%s", run);
  m->info.step = istep;
  m->info.parent_step = iparent;
  m->info.world = (int)iworld;
  m->info.time_ms = itms;
  m->info.loss = loss;
  m->info.state = CKPT_COMMITTED;
  m->info.base_step = -1;
  double base = -1;
  int64_t ibase = -1;
  if (cJSON_GetObjectItemCaseSensitive(root, "base") &&
      ((rc = get_num(root, "base", &base)) ||
       (rc = as_int(base, -1, JSON_INT_MAX, "checkpoint manifest", "base", &ibase))))
    goto out;
  m->info.base_step = ibase;
  m->config = strdup(cfg);
  m->state = strdup(st);
  m->metrics = strdup(me);
  const cJSON *dj = cJSON_GetObjectItemCaseSensitive(root, "data");
  if (dj && !cJSON_IsString(dj)) {
    rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: \"data\" is not a string");
    goto out;
  }
  if (dj && !(m->data = strdup(dj->valuestring))) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  int n = ts ? cJSON_GetArraySize(ts) : 0;
  m->tensors = calloc((size_t)(n ? n : 1), sizeof *m->tensors);
  if (!m->config || !m->state || !m->metrics || !m->tensors) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  if (!ts) { /* versions 2 and 3: the totals, and the shard objects or their index */
    int no = ix ? m->info.world : cJSON_GetArraySize(objs);
    ckpt_shard_sum u;
    if (ix) { /* version 3: the root of the index, and its depth */
      const char *r = get_str(ix, "root");
      double d = 0;
      int64_t id = 0;
      if (!r || strlen(r) != CKPT_HEX_LEN || ckpt_unhex(r, m->index_root)) {
        rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: the index root is not a name");
        goto out;
      }
      if ((rc = get_num(ix, "depth", &d)) ||
          (rc = as_int(d, 1, 16, "checkpoint manifest", "index depth", &id)))
        goto out;
      m->has_index = 1;
      m->index_depth = (int)id;
      objs = NULL;
    }
    if (no != m->info.world) {
      rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: %d shard objects for a world of %d", no,
                      m->info.world);
      goto out;
    }
    if ((rc = sum_from_json(cJSON_GetObjectItemCaseSensitive(root, "totals"), "checkpoint manifest",
                            &u)))
      goto out;
    if (!ix && !(m->objs = calloc((size_t)no, sizeof *m->objs))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      goto out;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, objs) {
      ckpt_shard_obj *x = &m->objs[m->nobjs];
      if (!cJSON_IsString(o) || strlen(o->valuestring) != CKPT_HEX_LEN ||
          ckpt_unhex(o->valuestring, x->hash)) {
        rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: shard object %d is not a name", m->nobjs);
        goto out;
      }
      x->rank = m->nobjs++;
    }
    m->info.logical_bytes = u.logical;
    m->info.stored_bytes = u.stored;
    m->info.new_bytes = u.new_bytes;
    m->info.nchunks = u.nchunks;
    m->info.ntensors = u.ntensors;
    m->info.depth = u.depth;
    m->info.lossy = u.lossy;
    *out = m;
    m = NULL;
    goto out;
  }
  const cJSON *t;
  cJSON_ArrayForEach(t, ts) {
    ckpt_tensor *x = &m->tensors[m->ntensors++];
    rc = tensor_from_json(t, x, 0);
    if (rc)
      goto out;
    if (m->ntensors > 1 && strcmp(m->tensors[m->ntensors - 2].name, x->name) >= 0) {
      rc = ft_err_set(FT_EFORMAT, "checkpoint manifest: tensors not sorted or repeated (%s)",
                      x->name);
      goto out;
    }
    m->info.logical_bytes += x->len;
    m->info.nchunks += x->nchunks;
    for (int c = 0; c < x->nchunks; c++) {
      m->info.stored_bytes += x->chunks[c].stored;
      if (x->chunks[c].depth > m->info.depth)
        m->info.depth = x->chunks[c].depth;
    }
    if (x->lossy)
      m->info.lossy |= 1 << x->lossy;
  }
  m->info.ntensors = m->ntensors;
  *out = m;
  m = NULL;
out:
  ckpt_manifest_free(m);
  cJSON_Delete(root);
  return rc;
}

/* ---- info record ------------------------------------------------------------------ */

char *ckpt_info_to_json(const ckpt_info *i) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "format", INFO_FORMAT);
  cJSON_AddNumberToObject(o, "version", FORMAT_VERSION);
  cJSON_AddStringToObject(o, "run", i->run);
  cJSON_AddNumberToObject(o, "step", (double)i->step);
  cJSON_AddNumberToObject(o, "parent", (double)i->parent_step);
  cJSON_AddNumberToObject(o, "world", i->world);
  cJSON_AddNumberToObject(o, "state", i->state);
  cJSON_AddNumberToObject(o, "pinned", i->pinned);
  if (isfinite(i->loss))
    cJSON_AddNumberToObject(o, "loss", i->loss);
  else
    cJSON_AddNullToObject(o, "loss");
  cJSON_AddNumberToObject(o, "time_ms", (double)i->time_ms);
  cJSON_AddNumberToObject(o, "logical", (double)i->logical_bytes);
  cJSON_AddNumberToObject(o, "stored", (double)i->stored_bytes);
  cJSON_AddNumberToObject(o, "new", (double)i->new_bytes);
  cJSON_AddNumberToObject(o, "ntensors", i->ntensors);
  cJSON_AddNumberToObject(o, "nchunks", i->nchunks);
  if (i->level != CKPT_LEVEL_DURABLE) /* absent: durable (records older than levels) */
    cJSON_AddStringToObject(o, "level", ckpt_level_name(i->level));
  if (i->lossy) /* absent: exact */
    cJSON_AddNumberToObject(o, "lossy", i->lossy);
  if (i->depth > 0) { /* absent: every chunk stands alone */
    cJSON_AddNumberToObject(o, "depth", i->depth);
    cJSON_AddNumberToObject(o, "base", (double)i->base_step);
  }
  char *s = seal(o, 0);
  cJSON_Delete(o);
  return s;
}

int ckpt_info_from_json(const char *json, ckpt_info *i) {
  memset(i, 0, sizeof *i);
  int rc = check_seal(json, "checkpoint record");
  if (rc)
    return rc;
  cJSON *o = cJSON_Parse(json);
  if (!o)
    return ft_err_set(FT_EFORMAT, "checkpoint record: not valid JSON");
  double v[12];
  const char *keys[] = {"step",    "parent",  "world",  "state", "pinned",   "loss",
                        "time_ms", "logical", "stored", "new",   "ntensors", "nchunks"};
  const char *run = get_str(o, "run");
  rc = check_header(o, INFO_FORMAT, "checkpoint record");
  for (int k = 0; rc == FT_OK && k < 12; k++)
    rc = get_num(o, keys[k], &v[k]);
  if (rc == FT_OK && !ckpt_run_name_ok(run))
    rc = ft_err_set(FT_EFORMAT, "checkpoint record: no run, or a bad run name");
  int level = CKPT_LEVEL_DURABLE;
  cJSON *lv = cJSON_GetObjectItem(o, "level");
  if (rc == FT_OK && lv) {
    if (!cJSON_IsString(lv))
      rc = ft_err_set(FT_EFORMAT, "checkpoint record: level is not a string");
    else if (!strcmp(lv->valuestring, "local"))
      level = CKPT_LEVEL_LOCAL;
    else if (!strcmp(lv->valuestring, "memory"))
      level = CKPT_LEVEL_MEMORY;
    else if (strcmp(lv->valuestring, "durable"))
      rc = ft_err_set(FT_EFORMAT,
                      "checkpoint record: level '%.32s' (expected durable, local "
                      "or memory)",
                      lv->valuestring);
  }
  /* every number but the loss is an integer in its range */
  const double lo[12] = {0, -1, 0, CKPT_PENDING, 0, 0, 0, 0, 0, 0, 0, 0};
  const double hi[12] = {
      JSON_INT_MAX, JSON_INT_MAX, 1 << 20,      CKPT_BAD,     1,         0,
      JSON_INT_MAX, JSON_INT_MAX, JSON_INT_MAX, JSON_INT_MAX, INT32_MAX, INT32_MAX};
  int64_t iv[12] = {0};
  for (int k = 0; rc == FT_OK && k < 12; k++)
    if (k != 5)
      rc = as_int(v[k], lo[k], hi[k], "checkpoint record", keys[k], &iv[k]);
  if (rc == FT_OK) {
    snprintf(i->run, sizeof i->run, "%s", run);
    i->step = iv[0];
    i->parent_step = iv[1];
    i->world = (int)iv[2];
    i->state = (int)iv[3];
    i->pinned = (int)iv[4];
    i->loss = v[5];
    i->time_ms = iv[6];
    i->logical_bytes = (uint64_t)iv[7];
    i->stored_bytes = (uint64_t)iv[8];
    i->new_bytes = (uint64_t)iv[9];
    i->ntensors = (int)iv[10];
    i->nchunks = (int)iv[11];
    i->level = level;
    i->base_step = -1;
  }
  /* delta chunks: the longest chain and the base (absent: none) */
  double dv[3] = {0, -1, 0};
  const char *dk[3] = {"depth", "base", "lossy"};
  const double dlo[3] = {0, -1, 0}, dhi[3] = {CKPT_MAX_CHAIN, JSON_INT_MAX, 15};
  for (int k = 0; rc == FT_OK && k < 3; k++) {
    int64_t x = 0;
    if (cJSON_GetObjectItemCaseSensitive(o, dk[k]) && (rc = get_num(o, dk[k], &dv[k])) == FT_OK &&
        (rc = as_int(dv[k], dlo[k], dhi[k], "checkpoint record", dk[k], &x)) == FT_OK) {
      if (k == 0)
        i->depth = (int)x;
      else if (k == 1)
        i->base_step = x;
      else
        i->lossy = (int)x & ~1;
    }
  }
  cJSON_Delete(o);
  return rc;
}

/* ---- accessors ---------------------------------------------------------------------- */

const ckpt_info *ckpt_manifest_info(const ckpt_manifest *m) {
  return &m->info;
}
const char *ckpt_manifest_config_json(const ckpt_manifest *m) {
  return m->config;
}
const char *ckpt_manifest_state_json(const ckpt_manifest *m) {
  return m->state;
}
const char *ckpt_manifest_metrics_json(const ckpt_manifest *m) {
  return m->metrics;
}
const char *ckpt_manifest_data_json(const ckpt_manifest *m) {
  return m->data;
}
int ckpt_manifest_ntensors(const ckpt_manifest *m) {
  return m->ntensors;
}

int ckpt_manifest_tensor(const ckpt_manifest *m, int i, ckpt_tensor_info *ti) {
  if (!m || i < 0 || i >= m->ntensors)
    return ft_err_set(FT_EINVAL, "tensor index %d out of range (0..%d)", i,
                      m ? m->ntensors - 1 : -1);
  const ckpt_tensor *t = &m->tensors[i];
  memset(ti, 0, sizeof *ti);
  ti->name = t->name;
  ti->dtype = t->dtype;
  ti->ndim = t->ndim;
  memcpy(ti->shape, t->shape, sizeof ti->shape);
  ti->nbytes = t->len;
  ti->nchunks = t->nchunks;
  for (int c = 0; c < t->nchunks; c++) {
    ti->stored_bytes += t->chunks[c].stored;
    ti->delta_chunks += t->chunks[c].depth > 0;
    ti->lossy = t->lossy;
    if (t->chunks[c].depth > ti->depth)
      ti->depth = t->chunks[c].depth;
  }
  return FT_OK;
}

int ckpt_manifest_find(const ckpt_manifest *m, const char *name) {
  int lo = 0, hi = m->ntensors - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(m->tensors[mid].name, name);
    if (c == 0)
      return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* ---- reading a manifest's shard objects from a tier ------------------------ */

int ckpt_shard_obj_read(ckpt_tier *t, ckpt_manifest *m, const ckpt_shard_obj *o, ckpt_shard **out) {
  char key[128];
  uint8_t h[CKPT_HASH_LEN];
  size_t len = 0;
  ckpt_objkey_shard(key, sizeof key, o->hash);
  char *js = NULL;
  int rc = ckpt_get_text(t, key, &js, &len);
  if (rc == FT_ENOENT) /* a committed checkpoint without one of its parts is damaged */
    return ft_err_set(FT_ECORRUPT,
                      "checkpoint %s step %" PRId64 ": shard object %s (rank %d) is missing",
                      m->info.run, m->info.step, key, o->rank);
  if (rc)
    return rc;
  m->meta_read += len;
  rc = ckpt_sha256(js, len, h);
  if (rc == FT_OK && (memchr(js, 0, len) || memcmp(h, o->hash, CKPT_HASH_LEN) != 0))
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": shard object %s (rank %d) is damaged (its "
                    "bytes do not hash to its name)",
                    m->info.run, m->info.step, key, o->rank);
  if (rc == FT_OK && (rc = ckpt_shard_from_json(js, out)) != FT_OK)
    rc = ckpt_err_wrap(rc == FT_ENOMEM ? rc : FT_ECORRUPT, "shard object %s (rank %d)", key,
                       o->rank);
  free(js);
  return rc;
}

int ckpt_manifest_expand_tier(ckpt_tier *t, ckpt_manifest *m) {
  int rc = ckpt_index_load_tier(t, m); /* format 3: its shard objects' names first */
  if (rc || m->nobjs == 0 || m->expanded)
    return rc;
  ckpt_shard **sh = calloc((size_t)m->nobjs, sizeof *sh);
  if (!sh)
    return ft_err_set(FT_ENOMEM, "out of memory");
  for (int i = 0; i < m->nobjs && rc == FT_OK; i++)
    rc = ckpt_shard_obj_read(t, m, &m->objs[i], &sh[i]);
  if (rc == FT_OK)
    rc = ckpt_manifest_fill(m, sh, m->nobjs);
  for (int i = 0; i < m->nobjs; i++)
    ckpt_shard_free(sh[i]);
  free(sh);
  return rc;
}

int ckpt_manifest_read(ckpt_tier *t, const char *json, ckpt_manifest **out) {
  int rc = ckpt_manifest_from_json(json, out);
  if (rc == FT_OK && (rc = ckpt_manifest_expand_tier(t, *out)) != FT_OK) {
    ckpt_manifest_free(*out);
    *out = NULL;
  }
  return rc;
}

/* ---- the index of a checkpoint's shard objects (format 3) -------------------- */

int ckpt_manifest_has_objs(const ckpt_manifest *m) {
  return m->nobjs > 0 || m->has_index;
}

void ckpt_index_node_release(ckpt_index_node *node) {
  free(node->e);
  memset(node, 0, sizeof *node);
}

/* The text of an index node of checkpoint (run, step) of world: level,
 * and entries e[0..n). */
static char *index_node_text(const char *run, int64_t step, int world, int level,
                             const ckpt_index_ent *e, int n) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return NULL;
  cJSON_AddStringToObject(root, "format", INDEX_FORMAT);
  cJSON_AddNumberToObject(root, "version", FORMAT_VERSION);
  cJSON_AddStringToObject(root, "run", run);
  cJSON_AddNumberToObject(root, "step", (double)step);
  cJSON_AddNumberToObject(root, "world", world);
  cJSON_AddNumberToObject(root, "level", level);
  cJSON *a = cJSON_AddArrayToObject(root, "entries");
  for (int i = 0; i < n; i++) {
    char hex[CKPT_HEX_LEN + 1];
    ckpt_hex(e[i].hash, hex);
    cJSON *x = cJSON_CreateArray();
    cJSON_AddItemToArray(x, cJSON_CreateNumber(e[i].lo));
    cJSON_AddItemToArray(x, cJSON_CreateNumber(e[i].hi));
    cJSON_AddItemToArray(x, cJSON_CreateString(hex));
    cJSON_AddItemToArray(a, x);
  }
  char *s = seal(root, 0);
  cJSON_Delete(root);
  return s;
}

/* Index objects of one level put at once, by at most INDEX_PUT_THREADS
 * threads: a local tier syncs every object, and one after another the
 * syncs of 512 leaves (131,072 ranks) would hold a commit up for seconds. */
#define INDEX_PUT_THREADS 8
typedef struct index_puts {
  ckpt_tier *t;
  char **js;                 /* the objects' texts */
  const ckpt_index_ent *ent; /* their names */
  int n, next;               /* next: atomic */
  int rc;                    /* the first error (under mu) */
  char err[600];
  pthread_mutex_t mu;
} index_puts;

static void *index_put_worker(void *arg) {
  index_puts *p = arg;
  for (;;) {
    int k = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
    if (k >= p->n)
      break;
    char key[128];
    ckpt_objkey_shard(key, sizeof key, p->ent[k].hash);
    int rc = p->t->put(p->t, key, p->js[k], strlen(p->js[k]));
    if (rc) {
      pthread_mutex_lock(&p->mu);
      if (!p->rc) {
        p->rc = rc;
        snprintf(p->err, sizeof p->err, "index object %s: %s", key, ft_err_detail());
      }
      pthread_mutex_unlock(&p->mu);
      break;
    }
  }
  return NULL;
}

/* Puts the n objects js[k] named ent[k].hash into t. */
static int index_put_all(ckpt_tier *t, char **js, const ckpt_index_ent *ent, int n) {
  index_puts p = {.t = t, .js = js, .ent = ent, .n = n};
  pthread_mutex_init(&p.mu, NULL);
  pthread_t th[INDEX_PUT_THREADS];
  int started = 0;
  for (int i = 1; i < INDEX_PUT_THREADS && i < n; i++) {
    if (pthread_create(&th[started], NULL, index_put_worker, &p) != 0)
      break;
    started++;
  }
  index_put_worker(&p);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&p.mu);
  return p.rc ? ft_err_set(p.rc, "%s", p.err) : FT_OK;
}

/* The leaves of m's index in rank order, into *out (n of them): the
 * hosts' (written by their agents) as they are, and each run of ranks that
 * came one by one cut into leaves of up to CKPT_INDEX_FANOUT, written
 * here. */
static int index_leaves(ckpt_tier *t, ckpt_manifest *m, ckpt_index_ent **out, int *nout) {
  int cap = m->nhosts + m->nobjs / CKPT_INDEX_FANOUT + m->nhosts + 2, n = 0, nw = 0, rc = FT_OK;
  ckpt_index_ent *lv = calloc((size_t)cap, sizeof *lv), *ent = calloc((size_t)cap, sizeof *ent);
  ckpt_index_ent *one = calloc(CKPT_INDEX_FANOUT, sizeof *one);
  char **js = calloc((size_t)cap, sizeof *js);
  if (!lv || !ent || !one || !js)
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  for (int i = 0, j = 0; rc == FT_OK && (i < m->nobjs || j < m->nhosts);) {
    if (j < m->nhosts && (i == m->nobjs || m->hosts[j].lo < m->objs[i].rank)) {
      lv[n].lo = m->hosts[j].lo;
      lv[n].hi = m->hosts[j].hi;
      memcpy(lv[n++].hash, m->hosts[j++].hash, CKPT_HASH_LEN);
      continue;
    }
    /* single ranks up to the next host's, at most a leaf's worth */
    int k = 0, stop = j < m->nhosts ? m->hosts[j].lo : m->info.world;
    while (i < m->nobjs && m->objs[i].rank < stop && k < CKPT_INDEX_FANOUT) {
      one[k].lo = m->objs[i].rank;
      one[k].hi = m->objs[i].rank + 1;
      memcpy(one[k++].hash, m->objs[i++].hash, CKPT_HASH_LEN);
    }
    if (!(js[nw] = index_node_text(m->info.run, m->info.step, m->info.world, 0, one, k))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      break;
    }
    lv[n].lo = one[0].lo;
    lv[n].hi = one[k - 1].hi;
    rc = ckpt_sha256(js[nw], strlen(js[nw]), lv[n].hash);
    ent[nw++] = lv[n++];
  }
  if (rc == FT_OK && nw && (rc = index_put_all(t, js, ent, nw)) != FT_OK)
    rc = ckpt_err_wrap(rc, "index of %s step %" PRId64, m->info.run, m->info.step);
  for (int k = 0; js && k < nw; k++)
    free(js[k]);
  free(js);
  free(one);
  free(ent);
  if (rc) {
    free(lv);
    return rc;
  }
  *out = lv;
  *nout = n;
  return FT_OK;
}

int ckpt_index_write(ckpt_tier *t, ckpt_manifest *m) {
  int n = 0, level = 1, rc = FT_OK;
  if (m->nobjs + m->nhosts <= 0)
    return ft_err_set(FT_EINVAL, "index of %s step %" PRId64 ": no shard objects", m->info.run,
                      m->info.step);
  ckpt_index_ent *cur = NULL;
  if ((rc = index_leaves(t, m, &cur, &n)) != FT_OK)
    return rc;
  /* one level at a time above the leaves, until a level is one node: the
   * root (a single leaf is the root itself) */
  while (rc == FT_OK && n > 1) {
    int nn = (n + CKPT_INDEX_FANOUT - 1) / CKPT_INDEX_FANOUT;
    ckpt_index_ent *up = calloc((size_t)nn, sizeof *up);
    char **js = calloc((size_t)nn, sizeof *js);
    if (!up || !js)
      rc = ft_err_set(FT_ENOMEM, "out of memory");
    for (int k = 0; k < nn && rc == FT_OK; k++) {
      int a = k * CKPT_INDEX_FANOUT, b = a + CKPT_INDEX_FANOUT < n ? a + CKPT_INDEX_FANOUT : n;
      if (!(js[k] =
                index_node_text(m->info.run, m->info.step, m->info.world, level, cur + a, b - a))) {
        rc = ft_err_set(FT_ENOMEM, "out of memory");
        break;
      }
      up[k].lo = cur[a].lo;
      up[k].hi = cur[b - 1].hi;
      rc = ckpt_sha256(js[k], strlen(js[k]), up[k].hash);
    }
    if (rc == FT_OK && (rc = index_put_all(t, js, up, nn)) != FT_OK)
      rc = ckpt_err_wrap(rc, "index of %s step %" PRId64, m->info.run, m->info.step);
    for (int k = 0; js && k < nn; k++)
      free(js[k]);
    free(js);
    free(cur);
    cur = up;
    n = nn;
    level++;
  }
  if (rc == FT_OK) {
    memcpy(m->index_root, cur[0].hash, CKPT_HASH_LEN);
    m->index_depth = level;
    m->has_index = 1;
  }
  free(cur);
  return rc;
}

int ckpt_host_ref_build(ckpt_shard *const *refs, int n, char **leaf, ckpt_shard **out) {
  *leaf = NULL;
  *out = NULL;
  if (n < 1 || n > CKPT_INDEX_FANOUT)
    return ft_err_set(FT_EINVAL, "host reference of %d shards (1..%d)", n, CKPT_INDEX_FANOUT);
  ckpt_shard **v = malloc((size_t)n * sizeof *v);
  ckpt_index_ent *e = calloc((size_t)n, sizeof *e);
  ckpt_shard *h = calloc(1, sizeof *h);
  int rc = v && e && h ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
  if (rc == FT_OK) {
    memcpy(v, refs, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, shard_rank_cmp);
    h->sum.base_step = -1;
  }
  for (int i = 0; i < n && rc == FT_OK; i++) {
    const ckpt_shard *sh = v[i];
    if (!sh || !sh->is_ref || sh->host)
      rc = ft_err_set(FT_EINVAL, "host reference: shard %d is not one rank's reference", i);
    else if (strcmp(sh->run, v[0]->run) != 0 || sh->step != v[0]->step ||
             sh->world != v[0]->world || sh->rank != v[0]->rank + i)
      rc = ft_err_set(FT_EINVAL,
                      "host reference: the shard of %s step %" PRId64 " rank %d does not follow "
                      "%s step %" PRId64 " ranks %d..%d",
                      sh->run, sh->step, sh->rank, v[0]->run, v[0]->step, v[0]->rank,
                      v[0]->rank + i - 1);
    if (rc)
      break;
    e[i].lo = sh->rank;
    e[i].hi = sh->rank + 1;
    memcpy(e[i].hash, sh->object, CKPT_HASH_LEN);
    sum_add(&h->sum, &sh->sum, sh->step);
  }
  if (rc == FT_OK && (!(*leaf = index_node_text(v[0]->run, v[0]->step, v[0]->world, 0, e, n)) ||
                      !(h->run = strdup(v[0]->run))))
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  if (rc == FT_OK && (rc = ckpt_sha256(*leaf, strlen(*leaf), h->object)) == FT_OK) {
    h->step = v[0]->step;
    h->rank = v[0]->rank;
    h->world = v[0]->world;
    h->is_ref = h->has_object = h->host = 1;
    h->nranks = n;
    *out = h;
    h = NULL;
  }
  if (rc) {
    free(*leaf);
    *leaf = NULL;
  }
  ckpt_shard_free(h);
  free(e);
  free(v);
  return rc;
}

int ckpt_index_node_read(ckpt_tier *t, ckpt_manifest *m, const uint8_t hash[CKPT_HASH_LEN],
                         int level, int lo, int hi, ckpt_index_node *node) {
  char key[128], *js = NULL;
  uint8_t h[CKPT_HASH_LEN];
  size_t len = 0;
  memset(node, 0, sizeof *node);
  ckpt_objkey_shard(key, sizeof key, hash);
  int rc = ckpt_get_text(t, key, &js, &len);
  if (rc == FT_ENOENT) /* as for a shard object: the checkpoint is damaged */
    return ft_err_set(FT_ECORRUPT,
                      "checkpoint %s step %" PRId64 ": index object %s (ranks %d..%d) is missing",
                      m->info.run, m->info.step, key, lo, hi - 1);
  if (rc)
    return rc;
  m->meta_read += len;
  rc = ckpt_sha256(js, len, h);
  if (rc == FT_OK && (memchr(js, 0, len) || memcmp(h, hash, CKPT_HASH_LEN) != 0))
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": index object %s (ranks %d..%d) is damaged "
                    "(its bytes do not hash to its name)",
                    m->info.run, m->info.step, key, lo, hi - 1);
  cJSON *root = rc == FT_OK ? cJSON_Parse(js) : NULL;
  free(js);
  if (rc)
    return rc;
  const cJSON *es = root ? cJSON_GetObjectItemCaseSensitive(root, "entries") : NULL;
  const char *run = root ? get_str(root, "run") : NULL;
  double step = 0, world = 0, lv = 0;
  int n = cJSON_IsArray(es) ? cJSON_GetArraySize(es) : 0;
  if (!root || check_header(root, INDEX_FORMAT, "index object") || !run ||
      get_num(root, "step", &step) || get_num(root, "world", &world) ||
      get_num(root, "level", &lv) || n < 1 || n > CKPT_INDEX_FANOUT) {
    rc = FT_EFORMAT;
  } else if (strcmp(run, m->info.run) != 0 || step != (double)m->info.step ||
             world != (double)m->info.world || lv != (double)level) {
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": index object %s is of %s step %.0f world "
                    "%.0f level %.0f, not level %d of this checkpoint",
                    m->info.run, m->info.step, key, run, step, world, lv, level);
  } else if (!(node->e = calloc((size_t)n, sizeof *node->e))) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
  }
  /* the entries tile [lo, hi) in order; a leaf's hold one rank each */
  const cJSON *x;
  int at = lo;
  if (rc == FT_OK)
    cJSON_ArrayForEach(x, es) {
      ckpt_index_ent *e = &node->e[node->n];
      const cJSON *a = cJSON_GetArrayItem(x, 0), *b = cJSON_GetArrayItem(x, 1),
                  *c = cJSON_GetArrayItem(x, 2);
      if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !cJSON_IsString(c) || a->valuedouble != at ||
          !(b->valuedouble > at && b->valuedouble <= hi) ||
          b->valuedouble != floor(b->valuedouble) || (level == 0 && b->valuedouble != at + 1) ||
          strlen(c->valuestring) != CKPT_HEX_LEN || ckpt_unhex(c->valuestring, e->hash)) {
        rc = FT_EFORMAT;
        break;
      }
      e->lo = at;
      e->hi = at = (int)b->valuedouble;
      node->n++;
    }
  if (rc == FT_OK && at != hi)
    rc = FT_EFORMAT;
  if (rc == FT_EFORMAT)
    rc = ft_err_set(FT_ECORRUPT,
                    "checkpoint %s step %" PRId64 ": index object %s (ranks %d..%d, level %d) is "
                    "malformed",
                    m->info.run, m->info.step, key, lo, hi - 1, level);
  cJSON_Delete(root);
  if (rc == FT_OK) {
    memcpy(node->hash, hash, CKPT_HASH_LEN);
    node->level = level;
  } else {
    ckpt_index_node_release(node);
  }
  return rc;
}

/* Reads the subtree of node hash (level, ranks [lo, hi)) into m->objs and
 * m->nodes (its children first). */
static int index_load_sub(ckpt_tier *t, ckpt_manifest *m, const uint8_t *hash, int level, int lo,
                          int hi) {
  ckpt_index_node nd;
  int rc = ckpt_index_node_read(t, m, hash, level, lo, hi, &nd);
  for (int i = 0; rc == FT_OK && i < nd.n; i++) {
    if (level > 0) {
      rc = index_load_sub(t, m, nd.e[i].hash, level - 1, nd.e[i].lo, nd.e[i].hi);
    } else {
      m->objs[m->nobjs].rank = nd.e[i].lo;
      memcpy(m->objs[m->nobjs++].hash, nd.e[i].hash, CKPT_HASH_LEN);
    }
  }
  if (rc == FT_OK) {
    if (!(m->nnodes & (m->nnodes - 1))) { /* grown at powers of two */
      void *p = realloc(m->nodes, (size_t)(m->nnodes ? 2 * m->nnodes : 1) * sizeof *m->nodes);
      if (!p)
        rc = ft_err_set(FT_ENOMEM, "out of memory");
      else
        m->nodes = p;
    }
    if (rc == FT_OK)
      memcpy(m->nodes[m->nnodes++], hash, CKPT_HASH_LEN);
  }
  ckpt_index_node_release(&nd);
  return rc;
}

int ckpt_index_load_tier(ckpt_tier *t, ckpt_manifest *m) {
  if (!m->has_index || m->objs)
    return FT_OK;
  if (!(m->objs = calloc((size_t)m->info.world, sizeof *m->objs)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  m->nobjs = 0;
  int rc = index_load_sub(t, m, m->index_root, m->index_depth - 1, 0, m->info.world);
  if (rc == FT_OK && m->nobjs != m->info.world)
    rc = ft_err_set(FT_ECORRUPT, "checkpoint %s step %" PRId64 ": its index names %d of %d ranks",
                    m->info.run, m->info.step, m->nobjs, m->info.world);
  if (rc) {
    free(m->objs);
    free(m->nodes);
    m->objs = NULL;
    m->nodes = NULL;
    m->nobjs = m->nnodes = 0;
  }
  return rc;
}
