/*
 * ckpt_s3_client: S3 requests over libcurl. The only file that includes
 * curl/curl.h; nothing outside sees a CURL type or a CURLcode.
 *
 * Each request is signed here with AWS Signature Version 4
 * (ckpt_s3_sigv4, HMAC-SHA256 from OpenSSL), not by libcurl's
 * CURLOPT_AWS_SIGV4: libcurl 7.x signs every header of CURLOPT_HTTPHEADER,
 * including the empty "Expect:" that only tells it not to send one, so the
 * server never saw the headers that were signed and refused every request
 * (403 SignatureDoesNotMatch). Here the request carries exactly the headers
 * it signs, Host included, and the URL path is sent as signed
 * (CURLOPT_PATH_AS_IS). The payload hash header x-amz-content-sha256 is the
 * SHA-256 of the body, so the server checks the body it received against
 * the signed hash: integrity in transit. Keys and query values are encoded
 * by curl_easy_escape (exactly RFC 3986's unreserved set is kept; '/' is
 * kept in paths). S3's XML answers (listings, upload ids, errors) are read
 * with expat. Chunk integrity end to end is the caller's (every chunk read is
 * decoded and re-hashed). Addressing: path style (endpoint/bucket/key) or
 * virtual host (bucket.endpoint/key).
 *
 * Errors: every CURLcode and HTTP status is translated in ONE function,
 * ckpt_s3_client_classify, which also says whether another attempt may
 * help: connection errors, timeouts (connect, or a transfer that moved no
 * byte for timeout_s: a hanging server), 5xx, 429 and S3's 400
 * RequestTimeout are retried; other 4xx never. Retries back off
 * exponentially with full jitter: sleep random(0, min(cap, base * 2^n)),
 * for at most cfg->retries attempts and cfg->retry_budget_s seconds. The
 * detail text names method, bucket, key, status and S3's error code and
 * message, never the credentials (the secret only keys the HMAC, the
 * Authorization header is wiped after use, verbose output is never enabled).
 * 401/403 are final: the detail says where the credentials came from
 * (cfg->cred_source: the environment, or a file and profile).
 *
 * Conditional create: CKPT_S3_CREATE_ONLY sends If-None-Match: * (also on
 * CompleteMultipartUpload); HTTP 412 becomes FT_EEXIST, so a chunk that is
 * in the bucket is never overwritten. Conditional read: a ranged GET may
 * send If-Match with the ETag a listing gave (the data loader's reads of
 * token shards); its 412 becomes FT_ESTATE ("changed since it was
 * listed"), so a shard rewritten under a run is never read as the old one.
 * Listings carry each object's ETag. Objects above multipart_threshold go
 * as a multipart upload (parts of part_size, sent one after the other; an
 * upload that fails is aborted).
 *
 * A retry hook (ckpt_s3_client_on_retry) hears of each attempt that is
 * retried (its cause, status, S3 code, the backoff) and of a retried
 * request's success, on the request's own thread: the data loader's
 * training thread says so while it waits (phase storage_wait).
 *
 * Threads: the client is shared by many threads. Easy handles are pooled
 * (a mutex guards the pool) so connections are reused; each request uses
 * one handle alone. Counters are atomics.
 */
#include "ckpt_s3.h"

#include "ckpt_int.h"
#include "ckpt_s3_read.h"
#include "ft_clock.h"
#include "ft_err.h"

#include <ctype.h>
#include <curl/curl.h>
#include <expat.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 32

struct ckpt_s3_client {
  ckpt_s3_config cfg;
  pthread_mutex_t mu;
  CURL *idle[POOL_MAX];
  int nidle;
  ckpt_s3_stats st;          /* atomics */
  int cancel;                /* atomic: ckpt_s3_client_cancel was called */
  ckpt_s3_retry_fn on_retry; /* set before the client is shared (ckpt_s3_read.h) */
  void *on_retry_ud;
};

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} buf;

typedef struct rq {
  const char *method;   /* GET HEAD PUT POST DELETE */
  const char *key;      /* object key; "" for the bucket */
  const char *query;    /* encoded query ("k=v&k2=v2") or NULL */
  const char *range;    /* "bytes=a-b" or NULL */
  const char *if_match; /* an ETag: If-Match (412 when the object changed) or NULL */
  const uint8_t *body;
  size_t blen, bpos;
  int flags;
  /* response */
  long status;
  buf resp;
  char etag[256];
  char last_modified[64];
  char content_length[32];
} rq;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) {
  global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- helpers ------------------------------------------------------------------- */

static int buf_add(buf *b, const void *p, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1)
      cap *= 2;
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return -1;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

/* "YYYY-MM-DDTHH:MM:SS[.fff]Z" (S3's LastModified) -> ns since the epoch;
 * 0 for anything else, or a time an int64_t of ns cannot hold (after 2262). */
static int64_t iso8601_ns(const char *s) {
  static const int width[6] = {4, 2, 2, 2, 2, 2};
  static const char sep[6] = {'-', '-', 'T', ':', ':', 0};
  int v[6], ms = 0;
  const char *p = s;
  for (int i = 0; i < 6; i++) {
    v[i] = 0;
    for (int k = 0; k < width[i]; k++, p++) {
      if (*p < '0' || *p > '9')
        return 0;
      v[i] = v[i] * 10 + (*p - '0');
    }
    if (sep[i] && *p++ != sep[i])
      return 0;
  }
  if (*p == '.') {
    int k = 0;
    for (p++; k < 3 && *p >= '0' && *p <= '9'; k++, p++)
      ms = ms * 10 + (*p - '0');
    for (; k < 3; k++)
      ms *= 10;
  }
  if (v[0] < 1970 || v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 || v[4] > 59 ||
      v[5] > 60)
    return 0;
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  tm.tm_year = v[0] - 1900;
  tm.tm_mon = v[1] - 1;
  tm.tm_mday = v[2];
  tm.tm_hour = v[3];
  tm.tm_min = v[4];
  tm.tm_sec = v[5];
  time_t t = timegm(&tm);
  if (t < 0 || (int64_t)t >= INT64_MAX / 1000000000LL)
    return 0;
  return ((int64_t)t * 1000 + ms) * 1000000LL;
}

static uint64_t rnd(void) {
  static __thread uint64_t s;
  if (!s) {
    uint64_t t = ft_now_ns();
    s = ((t % 1000000000u) << 20) ^ (t / 1000000000u) ^ ((uint64_t)(uintptr_t)&s) ^
        0x9e3779b97f4a7c15ULL;
  }
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

/* Percent-encodes s the way SigV4 wants (RFC 3986 unreserved kept, every
 * other byte %XX, '/' kept when keep_slash): curl_easy_escape (which keeps
 * exactly A-Z a-z 0-9 - . _ ~) on each '/'-separated segment. */
int ckpt_s3_uri_encode(const char *s, int keep_slash, char *out, size_t n) {
  size_t o = 0;
  if (n == 0)
    return ft_err_set(FT_EINVAL, "S3 key or query too long");
  out[0] = 0;
  for (const char *p = s;;) {
    size_t l = keep_slash ? strcspn(p, "/") : strlen(p);
    if (l > 0) {
      if (l > INT32_MAX)
        return ft_err_set(FT_EINVAL, "S3 key or query too long");
      char *e = curl_easy_escape(NULL, p, (int)l);
      if (!e)
        return ft_err_set(FT_ENOMEM, "out of memory");
      size_t el = strlen(e);
      if (o + el >= n) {
        curl_free(e);
        return ft_err_set(FT_EINVAL, "S3 key or query too long");
      }
      memcpy(out + o, e, el + 1);
      o += el;
      curl_free(e);
    }
    p += l;
    if (!*p)
      break;
    if (o + 2 > n) /* the '/' and the terminator */
      return ft_err_set(FT_EINVAL, "S3 key or query too long");
    out[o++] = '/';
    out[o] = 0;
    p++;
  }
  return FT_OK;
}

int ckpt_s3_client_url(const ckpt_s3_config *cfg, const char *key, const char *query, char *buf,
                       size_t n) {
  char ek[3200];
  int rc = ckpt_s3_uri_encode(key, 1, ek, sizeof ek);
  if (rc)
    return rc;
  const char *q = query && query[0] ? "?" : "";
  const char *qs = query ? query : "";
  int w;
  if (cfg->virtual_host) {
    const char *sep = strstr(cfg->endpoint, "://");
    if (!sep)
      return ft_err_set(FT_ECONFIG, "S3 endpoint '%s' has no scheme", cfg->endpoint);
    w = snprintf(buf, n, "%.*s%s.%s/%s%s%s", (int)(sep + 3 - cfg->endpoint), cfg->endpoint,
                 cfg->bucket, sep + 3, ek, q, qs);
  } else if (key[0]) {
    w = snprintf(buf, n, "%s/%s/%s%s%s", cfg->endpoint, cfg->bucket, ek, q, qs);
  } else {
    w = snprintf(buf, n, "%s/%s%s%s", cfg->endpoint, cfg->bucket, q, qs);
  }
  if (w < 0 || (size_t)w >= n)
    return ft_err_set(FT_EINVAL, "S3 URL too long for key '%s'", key);
  return FT_OK;
}

/* ---- SigV4 ---------------------------------------------------------------------- */

static void hmac256(const void *key, size_t kn, const void *msg, size_t mn, uint8_t out[32]) {
  unsigned int ol = 32;
  HMAC(EVP_sha256(), key, (int)kn, msg, mn, out, &ol);
}

static void wipe(void *p, size_t n) {
  volatile uint8_t *v = p;
  for (size_t i = 0; i < n; i++)
    v[i] = 0;
}

typedef struct qparam {
  const char *k, *v; /* into a copy of the query */
} qparam;

static int qparam_cmp(const void *a, const void *b) {
  const qparam *x = a, *y = b;
  int c = strcmp(x->k, y->k);
  return c ? c : strcmp(x->v, y->v);
}

static int hdr_cmp(const void *a, const void *b) {
  const ckpt_s3_header *x = a, *y = b;
  return strcasecmp(x->name, y->name);
}

/* value with leading/trailing blanks cut and inner runs of blanks as one */
static int add_trimmed(buf *b, const char *v) {
  while (*v == ' ' || *v == '\t')
    v++;
  int blank = 0;
  for (; *v; v++) {
    if (*v == ' ' || *v == '\t') {
      blank = 1;
      continue;
    }
    if (blank && buf_add(b, " ", 1))
      return -1;
    blank = 0;
    if (buf_add(b, v, 1))
      return -1;
  }
  return 0;
}

int ckpt_s3_sigv4(const char *method, const char *uri, const char *query,
                  const ckpt_s3_header *hdrs, size_t nhdrs, const char *payload_hex,
                  const char *amz_date, const char *region, const char *access_key,
                  const char *secret_key, char *auth, size_t n) {
  enum { MAXH = 16, MAXQ = 16 };
  ckpt_s3_header h[MAXH];
  qparam qp[MAXQ];
  char qcopy[16384], date[9], scope[128], names[512] = "";
  buf cr = {0}, sts = {0};
  uint8_t k[32], digest[32];
  char khex[65], sig[65];
  int rc = FT_OK;
  size_t nq = 0, nl = 0;

  if (nhdrs > MAXH || strlen(amz_date) != 16)
    return ft_err_set(FT_EINVAL, "SigV4: %zu headers or date '%s' out of range", nhdrs, amz_date);
  memcpy(h, hdrs, nhdrs * sizeof *h);
  qsort(h, nhdrs, sizeof *h, hdr_cmp);
  memcpy(date, amz_date, 8);
  date[8] = 0;
  snprintf(scope, sizeof scope, "%s/%s/s3/aws4_request", date, region);

  /* the canonical query: parameters sorted by name, then value; "k" is "k=" */
  if (query && query[0]) {
    if (strlen(query) >= sizeof qcopy)
      return ft_err_set(FT_EINVAL, "SigV4: query too long");
    strcpy(qcopy, query);
    for (char *save = NULL, *t = strtok_r(qcopy, "&", &save); t; t = strtok_r(NULL, "&", &save)) {
      if (nq == MAXQ)
        return ft_err_set(FT_EINVAL, "SigV4: too many query parameters");
      char *eq = strchr(t, '=');
      if (eq)
        *eq = 0;
      qp[nq].k = t;
      qp[nq++].v = eq ? eq + 1 : "";
    }
    qsort(qp, nq, sizeof *qp, qparam_cmp);
  }
  int oom = buf_add(&cr, method, strlen(method)) || buf_add(&cr, "\n", 1) ||
            buf_add(&cr, uri, strlen(uri)) || buf_add(&cr, "\n", 1);
  for (size_t i = 0; i < nq && !oom; i++)
    oom = (i && buf_add(&cr, "&", 1)) || buf_add(&cr, qp[i].k, strlen(qp[i].k)) ||
          buf_add(&cr, "=", 1) || buf_add(&cr, qp[i].v, strlen(qp[i].v));
  oom = oom || buf_add(&cr, "\n", 1);
  for (size_t i = 0; i < nhdrs && !oom; i++) {
    size_t l = strlen(h[i].name);
    if (nl + l + 2 > sizeof names) {
      rc = ft_err_set(FT_EINVAL, "SigV4: header names too long");
      goto out;
    }
    if (nl)
      names[nl++] = ';';
    for (size_t j = 0; j < l; j++) {
      char lc = (char)tolower((unsigned char)h[i].name[j]);
      names[nl++] = lc;
      oom = oom || buf_add(&cr, &lc, 1);
    }
    names[nl] = 0;
    oom = oom || buf_add(&cr, ":", 1) || add_trimmed(&cr, h[i].value) || buf_add(&cr, "\n", 1);
  }
  oom = oom || buf_add(&cr, "\n", 1) || buf_add(&cr, names, nl) || buf_add(&cr, "\n", 1) ||
        buf_add(&cr, payload_hex, strlen(payload_hex));
  if (oom) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = ckpt_sha256(cr.p, cr.n, digest)))
    goto out;
  ckpt_hex(digest, khex);
  oom = buf_add(&sts, "AWS4-HMAC-SHA256\n", 17) || buf_add(&sts, amz_date, 16) ||
        buf_add(&sts, "\n", 1) || buf_add(&sts, scope, strlen(scope)) || buf_add(&sts, "\n", 1) ||
        buf_add(&sts, khex, 64);
  if (oom) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  /* the signing key: HMAC chain over date, region, service, terminator */
  char k0[300];
  int kl = snprintf(k0, sizeof k0, "AWS4%s", secret_key);
  if (kl < 0 || (size_t)kl >= sizeof k0) {
    rc = ft_err_set(FT_EINVAL, "SigV4: secret key too long");
    goto out;
  }
  hmac256(k0, (size_t)kl, date, 8, k);
  wipe(k0, sizeof k0);
  hmac256(k, 32, region, strlen(region), k);
  hmac256(k, 32, "s3", 2, k);
  hmac256(k, 32, "aws4_request", 12, k);
  hmac256(k, 32, sts.p, sts.n, digest);
  ckpt_hex(digest, sig);
  int w = snprintf(auth, n, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                   access_key, scope, names, sig);
  if (w < 0 || (size_t)w >= n)
    rc = ft_err_set(FT_EINVAL, "SigV4: Authorization header too long");
out:
  wipe(k, sizeof k);
  free(cr.p);
  free(sts.p);
  return rc;
}

/* ---- S3's XML answers (expat) ------------------------------------------------------- */

#define XML_DEPTH 4         /* element names kept for the first levels */
#define XML_TEXT (64 << 10) /* longest text of one element */

typedef struct xwalk xwalk;
/* called at the end of each element; path[0..depth-1] names it */
typedef int (*xml_end_fn)(xwalk *x, int depth, const char *text, size_t tn);

struct xwalk {
  XML_Parser p;
  int depth;
  char path[XML_DEPTH][64];
  buf text;
  int rc; /* first failure, from the walker or a callback */
  xml_end_fn end;
  void *ud;
};

static const char *local_name(const char *n) {
  const char *s = strrchr(n, '\x01'); /* namespace separator */
  return s ? s + 1 : n;
}

static void XMLCALL x_start(void *ud, const XML_Char *name, const XML_Char **atts) {
  (void)atts;
  xwalk *x = ud;
  if (x->depth < XML_DEPTH)
    snprintf(x->path[x->depth], sizeof x->path[0], "%s", local_name(name));
  x->depth++;
  x->text.n = 0;
  if (x->text.p)
    x->text.p[0] = 0;
}

static void XMLCALL x_chars(void *ud, const XML_Char *s, int len) {
  xwalk *x = ud;
  if (x->rc)
    return;
  if (x->text.n + (size_t)len > XML_TEXT) {
    x->rc = ft_err_set(FT_EPROTO, "S3 answer: an XML value is longer than %d bytes", XML_TEXT);
    XML_StopParser(x->p, XML_FALSE);
  } else if (buf_add(&x->text, s, (size_t)len)) {
    x->rc = ft_err_set(FT_ENOMEM, "out of memory");
    XML_StopParser(x->p, XML_FALSE);
  }
}

static void XMLCALL x_end(void *ud, const XML_Char *name) {
  (void)name;
  xwalk *x = ud;
  if (x->rc)
    return;
  int rc = x->end(x, x->depth, x->text.p ? (const char *)x->text.p : "", x->text.n);
  x->depth--;
  x->text.n = 0;
  if (x->text.p)
    x->text.p[0] = 0;
  if (rc) {
    x->rc = rc;
    XML_StopParser(x->p, XML_FALSE);
  }
}

/* S3 never sends a document type; one is refused (no entity tricks) */
static void XMLCALL x_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                              const XML_Char *pubid, int has_internal_subset) {
  (void)name, (void)sysid, (void)pubid, (void)has_internal_subset;
  xwalk *x = ud;
  x->rc = ft_err_set(FT_EPROTO, "S3 answer: XML with a document type declaration");
  XML_StopParser(x->p, XML_FALSE);
}

/* 1 if the element being closed is path a/b/c... (depth names) */
static int at(const xwalk *x, int depth, int want, const char *a, const char *b, const char *c) {
  if (depth != want)
    return 0;
  const char *w[3] = {a, b, c};
  for (int i = 0; i < want && i < 3; i++)
    if (strcmp(x->path[i], w[i]) != 0)
      return 0;
  return 1;
}

static int xml_walk(const char *xml, size_t n, xml_end_fn end, void *ud) {
  xwalk x = {.end = end, .ud = ud};
  if (n > INT32_MAX)
    return ft_err_set(FT_EPROTO, "S3 answer too large (%zu bytes)", n);
  x.p = XML_ParserCreateNS(NULL, '\x01');
  if (!x.p)
    return ft_err_set(FT_ENOMEM, "out of memory");
  XML_SetUserData(x.p, &x);
  XML_SetElementHandler(x.p, x_start, x_end);
  XML_SetCharacterDataHandler(x.p, x_chars);
  XML_SetStartDoctypeDeclHandler(x.p, x_doctype);
  enum XML_Status st = XML_Parse(x.p, xml, (int)n, 1);
  int rc = x.rc;
  if (!rc && st != XML_STATUS_OK)
    rc = ft_err_set(FT_EPROTO, "S3 answer is not XML (line %lu: %s)",
                    (unsigned long)XML_GetCurrentLineNumber(x.p),
                    XML_ErrorString(XML_GetErrorCode(x.p)));
  XML_ParserFree(x.p);
  free(x.text.p);
  return rc;
}

static int copy_text(char *out, size_t on, const char *t, size_t tn, const char *what) {
  if (tn >= on)
    return ft_err_set(FT_EPROTO, "S3 answer: %s is %zu bytes (at most %zu)", what, tn, on - 1);
  memcpy(out, t, tn);
  out[tn] = 0;
  return FT_OK;
}

typedef struct list_walk {
  int (*fn)(void *ud, const ckpt_s3_object *o);
  void *ud;
  char key[2048], size[32], mtime[64], etag[256];
  int has_key, truncated;
  char *token;
  size_t token_n;
} list_walk;

static int list_end(xwalk *x, int depth, const char *t, size_t tn) {
  list_walk *l = x->ud;
  if (depth == 1 && strcmp(x->path[0], "ListBucketResult") != 0)
    return ft_err_set(FT_EPROTO, "S3 list answer is <%s>, not <ListBucketResult>", x->path[0]);
  if (at(x, depth, 3, "ListBucketResult", "Contents", "Key")) {
    l->has_key = 1;
    return copy_text(l->key, sizeof l->key, t, tn, "a key");
  }
  if (at(x, depth, 3, "ListBucketResult", "Contents", "Size"))
    return copy_text(l->size, sizeof l->size, t, tn, "a size");
  if (at(x, depth, 3, "ListBucketResult", "Contents", "LastModified"))
    return copy_text(l->mtime, sizeof l->mtime, t, tn, "a date");
  if (at(x, depth, 3, "ListBucketResult", "Contents", "ETag"))
    return copy_text(l->etag, sizeof l->etag, t, tn, "an ETag");
  if (at(x, depth, 2, "ListBucketResult", "Contents", NULL)) {
    int rc = FT_OK;
    ckpt_s3_object o = {l->key, strtoull(l->size, NULL, 10), iso8601_ns(l->mtime), l->etag};
    if (l->has_key && l->fn)
      rc = l->fn(l->ud, &o);
    l->has_key = 0;
    l->key[0] = l->size[0] = l->mtime[0] = l->etag[0] = 0;
    return rc;
  }
  if (at(x, depth, 2, "ListBucketResult", "IsTruncated", NULL)) {
    l->truncated = tn == 4 && memcmp(t, "true", 4) == 0;
    return FT_OK;
  }
  if (at(x, depth, 2, "ListBucketResult", "NextContinuationToken", NULL))
    return copy_text(l->token, l->token_n, t, tn, "NextContinuationToken");
  return FT_OK;
}

int ckpt_s3_xml_list_objects(const char *xml, size_t n,
                             int (*fn)(void *ud, const ckpt_s3_object *o), void *ud, int *truncated,
                             char *token, size_t token_n) {
  list_walk l = {.fn = fn, .ud = ud, .token = token, .token_n = token_n};
  *truncated = 0;
  if (token_n)
    token[0] = 0;
  int rc = xml_walk(xml, n, list_end, &l);
  if (rc) {
    if (token_n)
      token[0] = 0;
    return rc;
  }
  *truncated = l.truncated;
  if (l.truncated && !token[0])
    return ft_err_set(FT_EPROTO, "S3 list answer is truncated but has no NextContinuationToken");
  return FT_OK;
}

/* the older callback shape (key, size, mtime) over the one with the ETag */
typedef struct list_compat {
  int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns);
  void *ud;
} list_compat;

static int list_compat_cb(void *ud, const ckpt_s3_object *o) {
  list_compat *lc = ud;
  return lc->fn ? lc->fn(lc->ud, o->key, o->size, o->mtime_ns) : FT_OK;
}

int ckpt_s3_xml_list(const char *xml, size_t n,
                     int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns),
                     void *ud, int *truncated, char *token, size_t token_n) {
  list_compat lc = {fn, ud};
  return ckpt_s3_xml_list_objects(xml, n, list_compat_cb, &lc, truncated, token, token_n);
}

typedef struct field_walk {
  const char *root, *elem;
  char *out;
  size_t out_n;
  int found, root_ok;
} field_walk;

static int field_end(xwalk *x, int depth, const char *t, size_t tn) {
  field_walk *f = x->ud;
  if (depth == 1)
    f->root_ok = strcmp(x->path[0], f->root) == 0;
  if (at(x, depth, 2, f->root, f->elem, NULL) && !f->found) {
    f->found = 1;
    return copy_text(f->out, f->out_n, t, tn, f->elem);
  }
  return FT_OK;
}

int ckpt_s3_xml_field(const char *xml, size_t n, const char *root, const char *elem, char *out,
                      size_t out_n) {
  field_walk f = {.root = root, .elem = elem, .out = out, .out_n = out_n};
  if (out_n)
    out[0] = 0;
  int rc = xml_walk(xml, n, field_end, &f);
  if (rc || !f.root_ok || !f.found) { /* nothing half-read comes back */
    if (out_n)
      out[0] = 0;
    return rc ? rc : ft_err_set(FT_ENOENT, "S3 answer has no <%s><%s>", root, elem);
  }
  return FT_OK;
}

typedef struct error_walk {
  char *code, *msg;
  size_t code_n, msg_n;
  int is_error;
} error_walk;

/* long texts are cut here (an error message is for people), not refused */
static void cut_text(char *out, size_t on, const char *t, size_t tn) {
  if (!on)
    return;
  size_t l = tn < on - 1 ? tn : on - 1;
  memcpy(out, t, l);
  out[l] = 0;
}

static int error_end(xwalk *x, int depth, const char *t, size_t tn) {
  error_walk *e = x->ud;
  if (depth == 1)
    e->is_error = strcmp(x->path[0], "Error") == 0;
  if (at(x, depth, 2, "Error", "Code", NULL))
    cut_text(e->code, e->code_n, t, tn);
  else if (at(x, depth, 2, "Error", "Message", NULL))
    cut_text(e->msg, e->msg_n, t, tn);
  return FT_OK;
}

int ckpt_s3_xml_error(const char *xml, size_t n, char *code, size_t code_n, char *msg,
                      size_t msg_n) {
  error_walk e = {.code = code, .msg = msg, .code_n = code_n, .msg_n = msg_n};
  if (code_n)
    code[0] = 0;
  if (msg_n)
    msg[0] = 0;
  int rc = xml_walk(xml, n, error_end, &e);
  if (rc || !e.is_error) { /* nothing half-read comes back */
    if (code_n)
      code[0] = 0;
    if (msg_n)
      msg[0] = 0;
    return rc ? rc : FT_ENOENT;
  }
  return FT_OK;
}

/* ---- the one translation of libcurl and HTTP results --------------------------------- */

int ckpt_s3_client_classify(int curl_code, long status, int *retryable) {
  *retryable = 0;
  if (curl_code != CURLE_OK) {
    switch ((CURLcode)curl_code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_READ_ERROR:
      *retryable = 1;
      return FT_ENET;
    case CURLE_OPERATION_TIMEDOUT:
      *retryable = 1;
      return FT_ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
      return FT_ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_NOT_BUILT_IN:
    case CURLE_UNKNOWN_OPTION:
      return FT_ECONFIG;
    default:
      return FT_EIO;
    }
  }
  if (status >= 200 && status < 300)
    return FT_OK;
  if (status == 404)
    return FT_ENOENT;
  if (status == 412)
    return FT_EEXIST;
  if (status == 401 || status == 403)
    return FT_ECONFIG; /* credentials, clock skew or permissions */
  if (status == 429 || status == 409) {
    *retryable = 1; /* throttling; 409: a conflicting conditional write */
    return FT_EBUSY;
  }
  if (status >= 500) {
    *retryable = 1;
    return FT_EIO;
  }
  if (status == 400 || status == 411 || status == 416)
    return FT_EINVAL;
  return FT_EPROTO;
}

/* ---- one HTTP exchange ------------------------------------------------------------ */

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
  rq *r = ud;
  return buf_add(&r->resp, p, sz * nm) ? 0 : sz * nm;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *ud) {
  rq *r = ud;
  size_t n = sz * nm, left = r->blen - r->bpos;
  if (n > left)
    n = left;
  if (n)
    memcpy(p, r->body + r->bpos, n);
  r->bpos += n;
  return n;
}

static int on_seek(void *ud, curl_off_t off, int origin) {
  rq *r = ud;
  if (origin != SEEK_SET || off < 0 || (size_t)off > r->blen)
    return CURL_SEEKFUNC_CANTSEEK;
  r->bpos = (size_t)off;
  return CURL_SEEKFUNC_OK;
}

static void header_value(const char *h, size_t n, const char *name, char *out, size_t on) {
  size_t l = strlen(name);
  if (n <= l || strncasecmp(h, name, l) != 0 || h[l] != ':')
    return;
  const char *v = h + l + 1, *e = h + n;
  while (v < e && (*v == ' ' || *v == '\t'))
    v++;
  while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
    e--;
  size_t vl = (size_t)(e - v) < on - 1 ? (size_t)(e - v) : on - 1;
  memcpy(out, v, vl);
  out[vl] = 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  rq *r = ud;
  size_t n = sz * nm;
  header_value(p, n, "ETag", r->etag, sizeof r->etag);
  header_value(p, n, "Last-Modified", r->last_modified, sizeof r->last_modified);
  header_value(p, n, "Content-Length", r->content_length, sizeof r->content_length);
  return n;
}

static CURL *handle_get(ckpt_s3_client *c) {
  CURL *h = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->nidle > 0)
    h = c->idle[--c->nidle];
  pthread_mutex_unlock(&c->mu);
  if (h)
    curl_easy_reset(h);
  else
    h = curl_easy_init();
  return h;
}

static void handle_put(ckpt_s3_client *c, CURL *h) {
  pthread_mutex_lock(&c->mu);
  if (c->nidle < POOL_MAX) {
    c->idle[c->nidle++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  if (h)
    curl_easy_cleanup(h);
}

/* The host[:port] of an URL (what curl would send as Host, which is sent
 * explicitly so that the signed value is the one on the wire). */
static void url_host(const char *url, char *out, size_t n) {
  const char *h = strstr(url, "://");
  h = h ? h + 3 : url;
  size_t l = strcspn(h, "/?");
  int w = snprintf(out, n, "%.*s", (int)l, h);
  size_t ol = w < 0 ? 0 : (size_t)w < n ? (size_t)w : n - 1;
  /* the default port is left out, as curl leaves it out */
  const char *def = strncmp(url, "https://", 8) == 0 ? ":443" : ":80";
  size_t dl = strlen(def);
  if (ol > dl && strcmp(out + ol - dl, def) == 0)
    out[ol - dl] = 0;
}

/* One attempt. Returns the CURLcode; r->status is the HTTP status. The
 * request carries exactly the headers it signs (plus Content-Length, Accept
 * and curl's defaults, which SigV4 does not need signed); "Expect:" only
 * removes curl's "Expect: 100-continue" and is neither sent nor signed. */
/* libcurl calls this at least once a second during a transfer, idle or
 * not: non-zero aborts it (CURLE_ABORTED_BY_CALLBACK). */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  return __atomic_load_n(&((ckpt_s3_client *)ud)->cancel, __ATOMIC_RELAXED);
}

static int perform_once(ckpt_s3_client *c, rq *r, const char *payload_hex) {
  char url[4096], host[600], amz_date[20], path[4096];
  char auth[1024], hdr[4200];
  int rc = ckpt_s3_client_url(&c->cfg, r->key, r->query, url, sizeof url);
  if (rc)
    return CURLE_URL_MALFORMAT;
  url_host(url, host, sizeof host);
  /* the path as sent: after the host, before '?' */
  const char *ps = strstr(url, "://");
  ps = ps ? ps + 3 : url;
  ps += strcspn(ps, "/?");
  snprintf(path, sizeof path, "%.*s", (int)strcspn(ps, "?"), ps);
  if (!path[0])
    snprintf(path, sizeof path, "/");
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);

  ckpt_s3_header sh[8];
  size_t nh = 0;
  if (!strcmp(r->method, "POST"))
    sh[nh++] = (ckpt_s3_header){"content-type", "application/xml"};
  else if (!strcmp(r->method, "PUT"))
    sh[nh++] = (ckpt_s3_header){"content-type", "application/octet-stream"};
  sh[nh++] = (ckpt_s3_header){"host", host};
  if (r->flags & CKPT_S3_CREATE_ONLY)
    sh[nh++] = (ckpt_s3_header){"if-none-match", "*"};
  if (r->if_match)
    sh[nh++] = (ckpt_s3_header){"if-match", r->if_match};
  if (r->range)
    sh[nh++] = (ckpt_s3_header){"range", r->range};
  sh[nh++] = (ckpt_s3_header){"x-amz-content-sha256", payload_hex};
  sh[nh++] = (ckpt_s3_header){"x-amz-date", amz_date};
  if (c->cfg.session_token[0])
    sh[nh++] = (ckpt_s3_header){"x-amz-security-token", c->cfg.session_token};
  if (ckpt_s3_sigv4(r->method, path, r->query, sh, nh, payload_hex, amz_date, c->cfg.region,
                    c->cfg.access_key, c->cfg.secret_key, auth, sizeof auth))
    return CURLE_URL_MALFORMAT;

  CURL *h = handle_get(c);
  if (!h) {
    wipe(auth, sizeof auth);
    return CURLE_OUT_OF_MEMORY;
  }
  struct curl_slist *hl = NULL, *t;
  int oom = 0;
  for (size_t i = 0; i < nh; i++) {
    snprintf(hdr, sizeof hdr, "%s: %s", sh[i].name, sh[i].value);
    oom |= !(t = curl_slist_append(hl, hdr));
    hl = t ? t : hl;
  }
  snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
  oom |= !(t = curl_slist_append(hl, hdr));
  hl = t ? t : hl;
  oom |= !(t = curl_slist_append(hl, "Expect:"));
  hl = t ? t : hl;
  wipe(hdr, sizeof hdr);
  wipe(auth, sizeof auth);
  if (oom) {
    curl_slist_free_all(hl);
    handle_put(c, h);
    return CURLE_OUT_OF_MEMORY;
  }

  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L); /* the path signed is the path sent */
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->cfg.timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->cfg.timeout_s);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
  if (!strcmp(r->method, "HEAD")) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (!strcmp(r->method, "PUT")) {
    r->bpos = 0;
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, r);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->blen);
  } else if (!strcmp(r->method, "POST")) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->blen);
  } else if (!strcmp(r->method, "DELETE")) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  CURLcode cc = curl_easy_perform(h);
  r->status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  curl_slist_free_all(hl);
  handle_put(c, h);
  if (cc == CURLE_WRITE_ERROR && r->resp.oom)
    cc = CURLE_OUT_OF_MEMORY;
  return (int)cc;
}

static void reset_resp(rq *r) {
  free(r->resp.p);
  memset(&r->resp, 0, sizeof r->resp);
  r->etag[0] = r->last_modified[0] = r->content_length[0] = 0;
  r->status = 0;
}

/* Runs r with retries. On failure the detail names the request and why. */
static int execute(ckpt_s3_client *c, rq *r) {
  uint8_t h[CKPT_HASH_LEN];
  char hex[CKPT_HEX_LEN + 1];
  int rc = ckpt_sha256(r->body ? (const void *)r->body : "", r->blen, h);
  if (rc)
    return rc;
  ckpt_hex(h, hex);
  int attempts = (r->flags & CKPT_S3_FAST) ? 1 : c->cfg.retries;
  double deadline = ft_now_s() + c->cfg.retry_budget_s;
  for (int a = 0;; a++) {
    if (__atomic_load_n(&c->cancel, __ATOMIC_RELAXED))
      return ft_err_set(FT_ECANCELED, "S3 %s s3://%s/%s: cancelled (the store is closing)",
                        r->method, c->cfg.bucket, r->key);
    reset_resp(r);
    int cc = perform_once(c, r, hex);
    __atomic_add_fetch(&c->st.requests, 1, __ATOMIC_RELAXED);
    if (a > 0)
      __atomic_add_fetch(&c->st.retries, 1, __ATOMIC_RELAXED);
    if (cc == CURLE_OK) {
      if (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST"))
        __atomic_add_fetch(&c->st.bytes_up, r->blen, __ATOMIC_RELAXED);
      __atomic_add_fetch(&c->st.bytes_down, r->resp.n, __ATOMIC_RELAXED);
    }
    int retry = 0;
    rc = ckpt_s3_client_classify(cc, r->status, &retry);
    char code[128] = "", msg[256] = "";
    /* an error's body (any status but 2xx; or a POST's 200 that is an
     * <Error>: CompleteMultipartUpload fails that way); an object's bytes
     * are never looked at */
    if (cc == CURLE_OK && r->resp.n && (rc != FT_OK || !strcmp(r->method, "POST"))) {
      int xr =
          ckpt_s3_xml_error((const char *)r->resp.p, r->resp.n, code, sizeof code, msg, sizeof msg);
      if (rc == FT_OK && xr == FT_OK) {
        rc = FT_EIO;
        retry = 1;
      }
    }
    if (rc == FT_EINVAL && !strcmp(code, "RequestTimeout"))
      retry = 1;
    if (rc == FT_OK) {
      if (a > 0 && c->on_retry) {
        ckpt_s3_retry ri = {
            .ok = 1, .attempt = a + 1, .code = "", .method = r->method, .key = r->key};
        c->on_retry(c->on_retry_ud, &ri);
      }
      return FT_OK;
    }
    char what[512];
    if (cc != CURLE_OK)
      snprintf(what, sizeof what, "%s", curl_easy_strerror((CURLcode)cc));
    else
      snprintf(what, sizeof what, "HTTP %ld%s%s%s%s", r->status, code[0] ? " " : "", code,
               msg[0] ? ": " : "", msg);
    double delay = 0;
    if (retry && a + 1 < attempts) {
      double cap = (double)c->cfg.retry_base_ms * (double)(1u << (a < 16 ? a : 16));
      if (cap > c->cfg.retry_cap_ms)
        cap = c->cfg.retry_cap_ms;
      delay = (double)(rnd() % 1000000) / 1e6 * cap / 1000.0;
    }
    if (!retry || a + 1 >= attempts || ft_now_s() + delay > deadline) {
      char hint[sizeof c->cfg.cred_source + sizeof c->cfg.region + 200] = "";
      if (rc == FT_ECONFIG && cc == CURLE_OK) /* 401/403: final, never retried */
        snprintf(hint, sizeof hint,
                 "; the server refused the request: check the credentials (%s), the region "
                 "(%s), the clock and the key's permissions",
                 c->cfg.cred_source[0] ? c->cfg.cred_source : "given by the caller", c->cfg.region);
      if (rc == FT_ENOENT && r->key[0])
        return ft_err_set(rc, "S3 %s s3://%s/%s: no such object", r->method, c->cfg.bucket, r->key);
      if (rc == FT_ENOENT)
        return ft_err_set(rc, "S3 %s s3://%s: no such bucket (%s)", r->method, c->cfg.bucket, what);
      return ft_err_set(rc, "S3 %s s3://%s/%s%s%s at %s: %s (%d attempt%s)%s", r->method,
                        c->cfg.bucket, r->key, r->query ? "?" : "", r->query ? r->query : "",
                        c->cfg.endpoint, what, a + 1, a ? "s" : "", hint);
    }
    if (c->on_retry) {
      ckpt_s3_retry ri = {.attempt = a + 1,
                          .cause = cc == CURLE_OK       ? CKPT_S3_RETRY_HTTP
                                   : rc == FT_ETIMEDOUT ? CKPT_S3_RETRY_TIMEOUT
                                   : cc == CURLE_COULDNT_CONNECT ||
                                           cc == CURLE_COULDNT_RESOLVE_HOST ||
                                           cc == CURLE_COULDNT_RESOLVE_PROXY
                                       ? CKPT_S3_RETRY_CONNECT
                                       : CKPT_S3_RETRY_NETWORK,
                          .status = cc == CURLE_OK ? r->status : 0,
                          .code = code,
                          .delay_s = delay,
                          .method = r->method,
                          .key = r->key};
      c->on_retry(c->on_retry_ud, &ri);
    }
    struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* ---- public operations -------------------------------------------------------------- */

int ckpt_s3_client_new(const ckpt_s3_config *cfg, ckpt_s3_client **out) {
  *out = NULL;
  pthread_once(&global_once, global_init);
  if (global_rc != CURLE_OK)
    return ft_err_set(FT_ENET, "libcurl initialisation failed: %s", curl_easy_strerror(global_rc));
  ckpt_s3_client *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "out of memory");
  c->cfg = *cfg;
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return FT_OK;
}

void ckpt_s3_client_cancel(ckpt_s3_client *c) {
  __atomic_store_n(&c->cancel, 1, __ATOMIC_RELAXED);
}

void ckpt_s3_client_on_retry(ckpt_s3_client *c, ckpt_s3_retry_fn fn, void *ud) {
  c->on_retry = fn;
  c->on_retry_ud = ud;
}

void ckpt_s3_client_free(ckpt_s3_client *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nidle; i++)
    curl_easy_cleanup(c->idle[i]);
  pthread_mutex_destroy(&c->mu);
  ckpt_s3_config_wipe(&c->cfg);
  free(c);
}

const ckpt_s3_config *ckpt_s3_client_config(const ckpt_s3_client *c) {
  return &c->cfg;
}

void ckpt_s3_client_stats(ckpt_s3_client *c, ckpt_s3_stats *st) {
  st->requests = __atomic_load_n(&c->st.requests, __ATOMIC_RELAXED);
  st->retries = __atomic_load_n(&c->st.retries, __ATOMIC_RELAXED);
  st->bytes_up = __atomic_load_n(&c->st.bytes_up, __ATOMIC_RELAXED);
  st->bytes_down = __atomic_load_n(&c->st.bytes_down, __ATOMIC_RELAXED);
}

static int put_multipart(ckpt_s3_client *c, const char *key, const uint8_t *data, size_t len,
                         int flags) {
  rq r = {.method = "POST", .key = key, .query = "uploads=", .flags = flags & CKPT_S3_FAST};
  char upload_id[1024], enc_id[3200], q[3400];
  buf xml = {0};
  int rc = execute(c, &r);
  if (rc)
    goto out;
  if (ckpt_s3_xml_field((const char *)r.resp.p, r.resp.n, "InitiateMultipartUploadResult",
                        "UploadId", upload_id, sizeof upload_id) ||
      !upload_id[0]) {
    rc = ft_err_set(FT_EPROTO, "S3 CreateMultipartUpload s3://%s/%s: no UploadId in the answer",
                    c->cfg.bucket, key);
    goto out;
  }
  if ((rc = ckpt_s3_uri_encode(upload_id, 0, enc_id, sizeof enc_id)))
    goto out;
  const char *head = "<CompleteMultipartUpload>";
  if (buf_add(&xml, head, strlen(head))) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto abort;
  }
  size_t part = c->cfg.part_size;
  for (size_t off = 0, pn = 1; off < len; off += part, pn++) {
    rq p = {.method = "PUT",
            .key = key,
            .query = q,
            .body = data + off,
            .blen = len - off < part ? len - off : part,
            .flags = flags & CKPT_S3_FAST};
    snprintf(q, sizeof q, "partNumber=%zu&uploadId=%s", pn, enc_id);
    rc = execute(c, &p);
    char line[512];
    snprintf(line, sizeof line, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", pn,
             p.etag);
    int noetag = rc == FT_OK && !p.etag[0];
    free(p.resp.p);
    if (rc)
      goto abort;
    if (noetag) {
      rc = ft_err_set(FT_EPROTO, "S3 UploadPart s3://%s/%s part %zu: no ETag in the answer",
                      c->cfg.bucket, key, pn);
      goto abort;
    }
    if (buf_add(&xml, line, strlen(line))) {
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      goto abort;
    }
  }
  if (buf_add(&xml, "</CompleteMultipartUpload>", 26)) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto abort;
  }
  snprintf(q, sizeof q, "uploadId=%s", enc_id);
  rq done = {
      .method = "POST", .key = key, .query = q, .body = xml.p, .blen = xml.n, .flags = flags};
  rc = execute(c, &done);
  free(done.resp.p);
  if (rc == FT_OK)
    goto out;
abort : {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", ft_err_detail());
  snprintf(q, sizeof q, "uploadId=%s", enc_id);
  rq ab = {.method = "DELETE", .key = key, .query = q, .flags = CKPT_S3_FAST};
  execute(c, &ab);
  free(ab.resp.p);
  ft_err_set(rc, "%s", saved);
}
out:
  free(xml.p);
  free(r.resp.p);
  return rc;
}

int ckpt_s3_client_put(ckpt_s3_client *c, const char *key, const void *data, size_t len,
                       int flags) {
  if (len > c->cfg.multipart_threshold)
    return put_multipart(c, key, data, len, flags);
  rq r = {.method = "PUT", .key = key, .body = data, .blen = len, .flags = flags};
  int rc = execute(c, &r);
  free(r.resp.p);
  return rc;
}

int ckpt_s3_client_get(ckpt_s3_client *c, const char *key, uint8_t **data, size_t *len, int flags) {
  rq r = {.method = "GET", .key = key, .flags = flags};
  *data = NULL;
  *len = 0;
  int rc = execute(c, &r);
  if (rc) {
    free(r.resp.p);
    return rc;
  }
  if (!r.resp.p && !(r.resp.p = malloc(1)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  *data = r.resp.p;
  *len = r.resp.n;
  return FT_OK;
}

int ckpt_s3_client_get_range(ckpt_s3_client *c, const char *key, uint64_t off, uint64_t n,
                             uint8_t **data, size_t *len, int flags) {
  return ckpt_s3_client_get_range_if(c, key, off, n, NULL, data, len, flags);
}

int ckpt_s3_client_get_range_if(ckpt_s3_client *c, const char *key, uint64_t off, uint64_t n,
                                const char *etag, uint8_t **data, size_t *len, int flags) {
  char range[64];
  *data = NULL;
  *len = 0;
  if (n == 0 || off + n < off)
    return ft_err_set(FT_EINVAL, "S3 GET s3://%s/%s: empty or overflowing range", c->cfg.bucket,
                      key);
  snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, off, off + n - 1);
  rq r = {.method = "GET", .key = key, .range = range, .if_match = etag, .flags = flags};
  int rc = execute(c, &r);
  if (rc == FT_EEXIST && etag) /* 412: If-Match failed, the object is not the one listed */
    rc = ft_err_set(FT_ESTATE,
                    "S3 GET s3://%s/%s: the object changed since it was listed (If-Match %s "
                    "failed: HTTP 412)",
                    c->cfg.bucket, key, etag);
  if (rc == FT_OK && r.status != 206 && r.resp.n > n) {
    /* a server that ignored Range sent it all: keep the part asked for */
    size_t keep = off < r.resp.n ? (size_t)(r.resp.n - off < n ? r.resp.n - off : n) : 0;
    memmove(r.resp.p, r.resp.p + (off < r.resp.n ? off : 0), keep);
    r.resp.n = keep;
  }
  if (rc) {
    free(r.resp.p);
    return rc;
  }
  if (!r.resp.p && !(r.resp.p = malloc(1)))
    return ft_err_set(FT_ENOMEM, "out of memory");
  *data = r.resp.p;
  *len = r.resp.n;
  return FT_OK;
}

int ckpt_s3_client_head(ckpt_s3_client *c, const char *key, uint64_t *size, int64_t *mtime_ns,
                        int flags) {
  rq r = {.method = "HEAD", .key = key, .flags = flags};
  int rc = execute(c, &r);
  if (rc == FT_OK) {
    if (mtime_ns)
      *mtime_ns =
          r.last_modified[0] ? (int64_t)curl_getdate(r.last_modified, NULL) * 1000000000LL : 0;
    if (size)
      *size = strtoull(r.content_length, NULL, 10);
  }
  free(r.resp.p);
  return rc;
}

int ckpt_s3_client_delete(ckpt_s3_client *c, const char *key) {
  rq r = {.method = "DELETE", .key = key};
  int rc = execute(c, &r);
  free(r.resp.p);
  return rc;
}

int ckpt_s3_client_create_bucket(ckpt_s3_client *c) {
  char body[256] = "";
  if (strcmp(c->cfg.region, "us-east-1") != 0)
    snprintf(body, sizeof body,
             "<CreateBucketConfiguration><LocationConstraint>%s</LocationConstraint>"
             "</CreateBucketConfiguration>",
             c->cfg.region);
  rq r = {.method = "PUT",
          .key = "",
          .body = (const uint8_t *)body,
          .blen = strlen(body),
          .flags = CKPT_S3_FAST};
  int rc = execute(c, &r);
  char code[128] = "", msg[8];
  if (rc && r.resp.n)
    ckpt_s3_xml_error((const char *)r.resp.p, r.resp.n, code, sizeof code, msg, sizeof msg);
  free(r.resp.p);
  if (rc && !strcmp(code, "BucketAlreadyOwnedByYou"))
    rc = FT_OK;
  return rc;
}

int ckpt_s3_client_list(ckpt_s3_client *c, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns),
                        void *ud) {
  list_compat lc = {fn, ud};
  return ckpt_s3_client_list_objects(c, prefix, list_compat_cb, &lc);
}

int ckpt_s3_client_list_objects(ckpt_s3_client *c, const char *prefix,
                                int (*fn)(void *ud, const ckpt_s3_object *o), void *ud) {
  char eprefix[3200], token[2048] = "", etoken[6200], q[9600], maxk[48] = "";
  int rc = ckpt_s3_uri_encode(prefix, 0, eprefix, sizeof eprefix);
  if (rc)
    return rc;
  if (c->cfg.list_max_keys > 0)
    snprintf(maxk, sizeof maxk, "&max-keys=%d", c->cfg.list_max_keys);
  for (;;) {
    if (token[0]) {
      if ((rc = ckpt_s3_uri_encode(token, 0, etoken, sizeof etoken)))
        return rc;
      snprintf(q, sizeof q, "continuation-token=%s&list-type=2%s&prefix=%s", etoken, maxk, eprefix);
    } else {
      snprintf(q, sizeof q, "list-type=2%s&prefix=%s", maxk, eprefix);
    }
    rq r = {.method = "GET", .key = "", .query = q};
    rc = execute(c, &r);
    int truncated = 0;
    if (rc == FT_OK) {
      rc = ckpt_s3_xml_list_objects((const char *)r.resp.p, r.resp.n, fn, ud, &truncated, token,
                                    sizeof token);
      if (rc == FT_EPROTO) {
        char why[512];
        snprintf(why, sizeof why, "%s", ft_err_detail());
        rc = ft_err_set(FT_EPROTO, "S3 list s3://%s/%s: %s", c->cfg.bucket, prefix, why);
      }
    }
    free(r.resp.p);
    if (rc)
      return rc;
    if (!truncated)
      return FT_OK;
  }
}
