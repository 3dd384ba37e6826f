/*
 * ckpt_s3_client: S3 requests over libcurl. The only file that includes
 * curl/curl.h; nothing outside sees a CURL type or a CURLcode.
 *
 * Each request is signed with AWS Signature Version 4 by libcurl
 * (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3"); the payload hash header
 * x-amz-content-sha256 is computed here (SHA-256 of the body), so the
 * server checks the body it received against the signed hash: integrity in
 * transit. Chunk integrity end to end is the caller's (every chunk read is
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
 * message, never the credentials (libcurl gets them via CURLOPT_USERPWD and
 * verbose output is never enabled).
 *
 * Conditional create: CKPT_S3_CREATE_ONLY sends If-None-Match: * (also on
 * CompleteMultipartUpload); HTTP 412 becomes FT_EEXIST, so a chunk that is
 * in the bucket is never overwritten. Objects above multipart_threshold go
 * as a multipart upload (parts of part_size, sent one after the other; an
 * upload that fails is aborted).
 *
 * Threads: the client is shared by many threads. Easy handles are pooled
 * (a mutex guards the pool) so connections are reused; each request uses
 * one handle alone. Counters are atomics.
 */
#include "ckpt_s3.h"

#include "ckpt_int.h"
#include "ft_err.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 32

struct ckpt_s3_client {
  ckpt_s3_config cfg;
  char userpwd[sizeof(((ckpt_s3_config *)0)->access_key) +
               sizeof(((ckpt_s3_config *)0)->secret_key) + 2];
  char sigv4[128];
  pthread_mutex_t mu;
  CURL *idle[POOL_MAX];
  int nidle;
  ckpt_s3_stats st; /* atomics */
};

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} buf;

typedef struct rq {
  const char *method; /* GET HEAD PUT POST DELETE */
  const char *key;    /* object key; "" for the bucket */
  const char *query;  /* canonical query (sorted, encoded) or NULL */
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

/* Percent-encodes s (RFC 3986 unreserved kept; '/' kept if keep_slash). */
static int uri_encode(const char *s, int keep_slash, char *out, size_t n) {
  static const char hx[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
    if (o + 4 >= n)
      return ft_err_set(FT_EINVAL, "S3 key or query too long");
    if (plain) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hx[*p >> 4];
      out[o++] = hx[*p & 15];
    }
  }
  out[o] = 0;
  return FT_OK;
}

int ckpt_s3_client_url(const ckpt_s3_config *cfg, const char *key, const char *query, char *buf,
                       size_t n) {
  char ek[2048];
  int rc = uri_encode(key, 1, ek, sizeof ek);
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

/* Text of <tag>...</tag> in [s, end) starting the search at s; entities
 * decoded into out. Returns a pointer past the closing tag, or NULL. */
static const char *xml_tag(const char *s, const char *end, const char *tag, char *out, size_t n) {
  char open[64], close[64];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  const char *a = memmem(s, (size_t)(end - s), open, strlen(open));
  if (!a)
    return NULL;
  a += strlen(open);
  const char *b = memmem(a, (size_t)(end - a), close, strlen(close));
  if (!b)
    return NULL;
  size_t o = 0;
  for (const char *p = a; p < b && o + 1 < n;) {
    if (*p == '&') {
      static const struct {
        const char *e;
        char c;
      } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      int done = 0;
      for (size_t k = 0; k < sizeof ents / sizeof ents[0]; k++) {
        size_t l = strlen(ents[k].e);
        if ((size_t)(b - p) >= l && memcmp(p, ents[k].e, l) == 0) {
          out[o++] = ents[k].c;
          p += l;
          done = 1;
          break;
        }
      }
      if (!done && p + 2 < b && p[1] == '#') {
        char *e2;
        long v = strtol(p + 2, &e2, 10);
        if (*e2 == ';' && v > 0 && v < 128) {
          out[o++] = (char)v;
          p = e2 + 1;
          done = 1;
        }
      }
      if (!done)
        out[o++] = *p++;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = 0;
  return b + strlen(close);
}

static int64_t iso8601_ns(const char *s) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  int ms = 0;
  if (sscanf(s, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec) != 6)
    return 0;
  const char *dot = strchr(s, '.');
  if (dot)
    ms = atoi(dot + 1) % 1000;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return ((int64_t)timegm(&tm) * 1000 + ms) * 1000000LL;
}

static uint64_t rnd(void) {
  static __thread uint64_t s;
  if (!s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)(uintptr_t)&s) ^
        0x9e3779b97f4a7c15ULL;
  }
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

/* One attempt. Returns the CURLcode; r->status is the HTTP status. */
static int perform_once(ckpt_s3_client *c, rq *r, const char *payload_hex) {
  char url[4096], hdr[4200];
  int rc = ckpt_s3_client_url(&c->cfg, r->key, r->query, url, sizeof url);
  if (rc)
    return CURLE_URL_MALFORMAT;
  CURL *h = handle_get(c);
  if (!h)
    return CURLE_OUT_OF_MEMORY;
  struct curl_slist *hl = NULL, *t;
  snprintf(hdr, sizeof hdr, "x-amz-content-sha256: %s", payload_hex);
  hl = curl_slist_append(hl, hdr);
  if (r->flags & CKPT_S3_CREATE_ONLY)
    hl = (t = curl_slist_append(hl, "If-None-Match: *")) ? t : hl;
  if (c->cfg.session_token[0]) {
    snprintf(hdr, sizeof hdr, "x-amz-security-token: %s", c->cfg.session_token);
    hl = (t = curl_slist_append(hl, hdr)) ? t : hl;
    memset(hdr, 0, sizeof hdr);
  }
  hl = (t = curl_slist_append(hl, "Expect:")) ? t : hl;
  if (!strcmp(r->method, "POST"))
    hl = (t = curl_slist_append(hl, "Content-Type: application/xml")) ? t : hl;
  else if (!strcmp(r->method, "PUT"))
    hl = (t = curl_slist_append(hl, "Content-Type: application/octet-stream")) ? t : hl;

  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, c->sigv4);
  curl_easy_setopt(h, CURLOPT_USERPWD, c->userpwd);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->cfg.timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->cfg.timeout_s);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
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
  double deadline = now_s() + c->cfg.retry_budget_s;
  for (int a = 0;; a++) {
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
    if (cc == CURLE_OK && r->resp.n) {
      const char *s = (const char *)r->resp.p, *e = s + r->resp.n;
      xml_tag(s, e, "Code", code, sizeof code);
      xml_tag(s, e, "Message", msg, sizeof msg);
      if (rc == FT_OK && !strcmp(r->method, "POST") && memmem(s, r->resp.n, "<Error>", 7)) {
        rc = FT_EIO; /* CompleteMultipartUpload: 200 with an error body */
        retry = 1;
      }
    }
    if (rc == FT_EINVAL && !strcmp(code, "RequestTimeout"))
      retry = 1;
    if (rc == FT_OK)
      return FT_OK;
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
    if (!retry || a + 1 >= attempts || now_s() + delay > deadline) {
      const char *hint = rc == FT_ECONFIG ? " (check the credentials, region and clock)" : "";
      if (rc == FT_ENOENT && r->key[0])
        return ft_err_set(rc, "S3 %s s3://%s/%s: no such object", r->method, c->cfg.bucket, r->key);
      if (rc == FT_ENOENT)
        return ft_err_set(rc, "S3 %s s3://%s: no such bucket (%s)", r->method, c->cfg.bucket, what);
      return ft_err_set(rc, "S3 %s s3://%s/%s%s%s at %s: %s (%d attempt%s)%s", r->method,
                        c->cfg.bucket, r->key, r->query ? "?" : "", r->query ? r->query : "",
                        c->cfg.endpoint, what, a + 1, a ? "s" : "", hint);
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
  curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
  if (vi->version_num < 0x074b00)
    return ft_err_set(FT_ECONFIG, "libcurl %s is too old for SigV4 signing (7.75 or later)",
                      vi->version);
  ckpt_s3_client *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "out of memory");
  c->cfg = *cfg;
  snprintf(c->userpwd, sizeof c->userpwd, "%s:%s", cfg->access_key, cfg->secret_key);
  snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", cfg->region);
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return FT_OK;
}

void ckpt_s3_client_free(ckpt_s3_client *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nidle; i++)
    curl_easy_cleanup(c->idle[i]);
  pthread_mutex_destroy(&c->mu);
  ckpt_s3_config_wipe(&c->cfg);
  volatile char *p = c->userpwd;
  for (size_t i = 0; i < sizeof c->userpwd; i++)
    p[i] = 0;
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
  if (!xml_tag((const char *)r.resp.p, (const char *)r.resp.p + r.resp.n, "UploadId", upload_id,
               sizeof upload_id) ||
      !upload_id[0]) {
    rc = ft_err_set(FT_EPROTO, "S3 CreateMultipartUpload s3://%s/%s: no UploadId in the answer",
                    c->cfg.bucket, key);
    goto out;
  }
  if ((rc = uri_encode(upload_id, 0, enc_id, sizeof enc_id)))
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
  char code[128] = "";
  if (r.resp.n)
    xml_tag((const char *)r.resp.p, (const char *)r.resp.p + r.resp.n, "Code", code, sizeof code);
  free(r.resp.p);
  if (rc && !strcmp(code, "BucketAlreadyOwnedByYou"))
    rc = FT_OK;
  return rc;
}

int ckpt_s3_client_list(ckpt_s3_client *c, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns),
                        void *ud) {
  char eprefix[2048], token[2048] = "", etoken[4096], q[6400];
  int rc = uri_encode(prefix, 0, eprefix, sizeof eprefix);
  if (rc)
    return rc;
  for (;;) {
    if (token[0]) {
      if ((rc = uri_encode(token, 0, etoken, sizeof etoken)))
        return rc;
      snprintf(q, sizeof q, "continuation-token=%s&list-type=2&prefix=%s", etoken, eprefix);
    } else {
      snprintf(q, sizeof q, "list-type=2&prefix=%s", eprefix);
    }
    rq r = {.method = "GET", .key = "", .query = q};
    rc = execute(c, &r);
    if (rc) {
      free(r.resp.p);
      return rc;
    }
    const char *s = (const char *)r.resp.p, *e = s + r.resp.n;
    char key[2048], num[64], lm[64], trunc[16] = "";
    const char *p = s;
    while (rc == FT_OK && p && p < e) {
      const char *a = memmem(p, (size_t)(e - p), "<Contents>", 10);
      if (!a)
        break;
      const char *b = memmem(a, (size_t)(e - a), "</Contents>", 11);
      if (!b)
        break;
      key[0] = num[0] = lm[0] = 0;
      xml_tag(a, b, "Key", key, sizeof key);
      xml_tag(a, b, "Size", num, sizeof num);
      xml_tag(a, b, "LastModified", lm, sizeof lm);
      if (key[0])
        rc = fn(ud, key, strtoull(num, NULL, 10), iso8601_ns(lm));
      p = b + 11;
    }
    /* IsTruncated / NextContinuationToken sit outside the Contents */
    xml_tag(s, e, "IsTruncated", trunc, sizeof trunc);
    token[0] = 0;
    if (rc == FT_OK && !strcmp(trunc, "true"))
      xml_tag(s, e, "NextContinuationToken", token, sizeof token);
    free(r.resp.p);
    if (rc)
      return rc;
    if (!token[0])
      return FT_OK;
  }
}
