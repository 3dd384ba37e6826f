/*
 * ckpt_s3.h: the S3 tier's private pieces (not a public header).
 *
 *   ckpt_s3_config.c  "s3://bucket/prefix" + environment -> ckpt_s3_config;
 *                     credentials from AWS_* variables or the shared file
 *   ckpt_s3_client.c  the ONLY file that sees libcurl: signed requests
 *                     (SigV4), retries, multipart upload, listing; every
 *                     CURLcode and HTTP status becomes an FT_E* there
 *   ckpt_tier_s3.c    a ckpt_tier over the client (bucket layout = the local
 *                     tier's: chunks/ab/<sha>, manifests/<run>/<step>.json)
 *   ckpt_s3_tiered.c  the "s3://" store's tier: the local cache directory as
 *                     fast tier + the bucket, background uploads, repair
 *
 * Secrets: the access key, secret key and session token live only in
 * ckpt_s3_config and the client; no message, log or detail text ever
 * contains them (details name the method, bucket, key and HTTP status).
 */
#ifndef CKPT_S3_H
#define CKPT_S3_H

#include "ckpt_tier_int.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* ---- configuration (ckpt_s3_config.c) -------------------------------------- */

typedef struct ckpt_s3_config {
  char endpoint[512]; /* "scheme://host[:port]", no trailing '/' */
  char region[64];
  char bucket[256];
  char prefix[512];     /* "" or "a/b" (no leading or trailing '/') */
  int virtual_host;     /* 1: bucket.host/key; 0: host/bucket/key */
  char access_key[256]; /* secret material: never printed */
  char secret_key[256];
  char session_token[4096];
  char cred_source[PATH_MAX + 300]; /* where the keys came from, for messages */
  int timeout_s;                    /* connect timeout; a transfer stalled this long fails */
  int retries;                      /* attempts per request (>= 1) */
  int retry_base_ms;                /* backoff: random(0, min(cap, base * 2^n)) */
  int retry_cap_ms;
  int retry_budget_s;         /* no new attempt after this long */
  size_t multipart_threshold; /* objects larger than this go multipart */
  size_t part_size;           /* >= 5 MiB (S3's minimum) */
  char cache_dir[PATH_MAX];   /* fast tier + catalog */
  int require_both;           /* commit durable on local AND S3 */
  int cache_per_host;         /* FT_S3_CACHE_PER_HOST=1: each host its own cache
                                 (node-local disk); see ckpt_s3_tiered.c */
  int upload_threads;
  int drain_s;       /* at close, wait this long for background uploads */
  int list_max_keys; /* ListObjectsV2 page size; 0: the server's (1000) */
} ckpt_s3_config;

/* FT_S3_TIMEOUT_S's and FT_S3_RETRY_BUDGET_S's defaults (ckpt_s3_read_bound_s
 * reads them too). */
#define CKPT_S3_TIMEOUT_S_DEFAULT 10
#define CKPT_S3_RETRY_BUDGET_S_DEFAULT 120

/* Parses "s3://bucket[/prefix]" and the environment (FT_S3_ENDPOINT,
 * AWS_REGION / AWS_DEFAULT_REGION, FT_S3_ADDRESSING, FT_S3_CACHE,
 * FT_S3_REQUIRE, FT_S3_CACHE_PER_HOST, FT_S3_TIMEOUT_S, FT_S3_RETRIES, FT_S3_RETRY_BUDGET_S,
 * FT_S3_MULTIPART_MIB, FT_S3_PART_MIB, FT_S3_UPLOAD_THREADS, FT_S3_DRAIN_S)
 * and the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN; else the shared credentials file, else the config
 * file, profile AWS_PROFILE; the config file's region when no variable sets
 * one). FT_ECONFIG with a message naming the variable or file (never a
 * secret value); c->cred_source says where the keys came from. */
int ckpt_s3_config_from_uri(const char *uri, ckpt_s3_config *c);
/* Reads [profile] of a shared credentials file into c (FT_ENOENT if the file
 * or the profile is absent; FT_ECONFIG if it is not a valid INI file). The
 * file is parsed with inih; "[profile NAME]" (the config file's spelling)
 * also names profile NAME. Exposed for tests. */
int ckpt_s3_config_read_credentials(const char *path, const char *profile, ckpt_s3_config *c);
/* A data bucket's configuration (ckpt_s3_read.c; the reader's and the
 * writer's, ckpt_s3_read.h and ckpt_s3_write.h): the store's for the
 * bucket of uri ("s3://bucket[/anything]"), then endpoint (NULL or "": else
 * FT_DATA_S3_ENDPOINT) over FT_S3_ENDPOINT and FT_DATA_AWS_* over the store's
 * region and keys (the store's keys may then be absent). Wiped on failure. */
int ckpt_s3_data_config(const char *uri, const char *endpoint, ckpt_s3_config *cfg);
/* Overwrites the secrets with zeros. */
void ckpt_s3_config_wipe(ckpt_s3_config *c);

/* ---- the HTTP client (ckpt_s3_client.c) ------------------------------------- */

/* One object of a listing (pointers valid during the callback only). etag:
 * as S3 sends it, quotes included ("" if the listing had none). */
typedef struct ckpt_s3_object {
  const char *key;
  uint64_t size;
  int64_t mtime_ns;
  const char *etag;
} ckpt_s3_object;

typedef struct ckpt_s3_client ckpt_s3_client;

typedef struct ckpt_s3_stats {
  uint64_t requests;   /* HTTP requests sent (every attempt counts) */
  uint64_t retries;    /* attempts after the first */
  uint64_t bytes_up;   /* request bodies */
  uint64_t bytes_down; /* response bodies */
} ckpt_s3_stats;

/* flags of a request */
#define CKPT_S3_CREATE_ONLY 1 /* If-None-Match: *; FT_EEXIST when it exists */
#define CKPT_S3_FAST 2        /* one attempt, no retries */

/* The config is copied. */
int ckpt_s3_client_new(const ckpt_s3_config *cfg, ckpt_s3_client **out);
void ckpt_s3_client_free(ckpt_s3_client *c);
/* From any thread: every request of c in flight is abandoned within about
 * a second and fails, as does every later one, with FT_ECANCELED (a
 * closing store does not wait out retries against a server that hangs). */
void ckpt_s3_client_cancel(ckpt_s3_client *c);
/* The retry hook (ckpt_s3_read.h's ckpt_s3_reader_on_retry); set before c
 * is shared. */
struct ckpt_s3_retry;
void ckpt_s3_client_on_retry(ckpt_s3_client *c, void (*fn)(void *ud, const struct ckpt_s3_retry *r),
                             void *ud);
/* Keys below are full object keys in the bucket (the caller adds the
 * prefix). put: multipart above cfg->multipart_threshold. */
int ckpt_s3_client_put(ckpt_s3_client *c, const char *key, const void *data, size_t len, int flags);
/* *data malloc'd (caller frees); FT_ENOENT if absent. */
int ckpt_s3_client_get(ckpt_s3_client *c, const char *key, uint8_t **data, size_t *len, int flags);
/* Bytes [off, off + n) of the object (fewer at its end); *data malloc'd.
 * FT_EINVAL when off is past the end (HTTP 416). */
int ckpt_s3_client_get_range(ckpt_s3_client *c, const char *key, uint64_t off, uint64_t n,
                             uint8_t **data, size_t *len, int flags);
/* The same, sent with If-Match: etag (NULL: none). An object that is no
 * longer that version (HTTP 412) is FT_ESTATE, the detail naming the key
 * and "changed since it was listed"; one deleted since is FT_ENOENT. */
int ckpt_s3_client_get_range_if(ckpt_s3_client *c, const char *key, uint64_t off, uint64_t n,
                                const char *etag, uint8_t **data, size_t *len, int flags);
int ckpt_s3_client_head(ckpt_s3_client *c, const char *key, uint64_t *size, int64_t *mtime_ns,
                        int flags);
int ckpt_s3_client_delete(ckpt_s3_client *c, const char *key);
/* Every object whose key starts with prefix, in key order (all pages). */
int ckpt_s3_client_list(ckpt_s3_client *c, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns),
                        void *ud);
/* The same with each object's ETag. */
int ckpt_s3_client_list_objects(ckpt_s3_client *c, const char *prefix,
                                int (*fn)(void *ud, const ckpt_s3_object *o), void *ud);
/* PUT bucket (FT_OK also when this owner already has it). */
int ckpt_s3_client_create_bucket(ckpt_s3_client *c);
void ckpt_s3_client_stats(ckpt_s3_client *c, ckpt_s3_stats *st);
const ckpt_s3_config *ckpt_s3_client_config(const ckpt_s3_client *c);

/* Exposed for unit tests: the FT_E* code for a libcurl result and an HTTP
 * status, and whether the failure is worth another attempt. curl_code is a
 * CURLcode value (0 = the transfer worked; then status decides). */
int ckpt_s3_client_classify(int curl_code, long status, int *retryable);
/* Exposed for unit tests: the object URL of key for cfg ("" key: bucket). */
int ckpt_s3_client_url(const ckpt_s3_config *cfg, const char *key, const char *query, char *buf,
                       size_t n);

/* Exposed for unit tests: S3's URI encoding (RFC 3986: all but A-Z a-z 0-9
 * - . _ ~ become %XX; '/' kept if keep_slash), by curl_easy_escape. */
int ckpt_s3_uri_encode(const char *s, int keep_slash, char *out, size_t n);

/* AWS Signature Version 4 for S3, done here (not by libcurl) so that the
 * headers signed are exactly the headers sent. */
typedef struct ckpt_s3_header {
  const char *name; /* any case; signed lowercased */
  const char *value;
} ckpt_s3_header;
/* The Authorization header's value for a request. uri: the encoded path as
 * sent; query: "k=v&k2=v2" encoded, any order, or NULL; amz_date:
 * "YYYYMMDDTHHMMSSZ" (also sent as x-amz-date, which must be among hdrs);
 * every header in hdrs is signed. */
int ckpt_s3_sigv4(const char *method, const char *uri, const char *query,
                  const ckpt_s3_header *hdrs, size_t nhdrs, const char *payload_hex,
                  const char *amz_date, const char *region, const char *access_key,
                  const char *secret_key, char *auth, size_t n);

/* S3's XML answers, parsed with expat. FT_EPROTO for a body that is not
 * well-formed XML, not the document expected, or holds a value too long. */
/* ListObjectsV2 (ListBucketResult): fn for each object in document order
 * (its result stops the walk and is returned); *truncated and the
 * NextContinuationToken (token, "" if none). */
int ckpt_s3_xml_list(const char *xml, size_t n,
                     int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime_ns),
                     void *ud, int *truncated, char *token, size_t token_n);
/* The same with each object's ETag (ckpt_s3_object). */
int ckpt_s3_xml_list_objects(const char *xml, size_t n,
                             int (*fn)(void *ud, const ckpt_s3_object *o), void *ud, int *truncated,
                             char *token, size_t token_n);
/* An <Error> document: its Code and Message (either may be ""). FT_ENOENT
 * when the body is XML but not an <Error>. */
int ckpt_s3_xml_error(const char *xml, size_t n, char *code, size_t code_n, char *msg,
                      size_t msg_n);
/* The text of <root><elem> (InitiateMultipartUploadResult/UploadId);
 * FT_ENOENT when the root is another element or elem is absent. */
int ckpt_s3_xml_field(const char *xml, size_t n, const char *root, const char *elem, char *out,
                      size_t out_n);

/* ---- the bucket as a tier (ckpt_tier_s3.c) ----------------------------------- */

/* Takes ownership of client (freed by the tier, even on failure). */
int ckpt_tier_s3_open(ckpt_s3_client *client, ckpt_tier **out);
/* The client under an S3 tier (borrowed). */
ckpt_s3_client *ckpt_tier_s3_client(ckpt_tier *t);
/* put with explicit flags (CKPT_S3_CREATE_ONLY / 0 to overwrite a bad copy) */
int ckpt_tier_s3_put_flags(ckpt_tier *t, const char *key, const void *data, size_t len, int flags);
/* get with flags (CKPT_S3_FAST) */
int ckpt_tier_s3_get_flags(ckpt_tier *t, const char *key, uint8_t **data, size_t *len, int flags);
/* The object key of a tier key (prefix + chunk fan-out). */
int ckpt_tier_s3_object_key(const ckpt_s3_config *cfg, const char *key, char *buf, size_t n);

/* ---- local cache + bucket (ckpt_s3_tiered.c) ---------------------------------- */

typedef struct ckpt_s3_tiered_stats {
  ckpt_s3_stats http;
  uint64_t uploads_done;    /* objects put to the bucket (or found there) */
  uint64_t uploads_failed;  /* background attempts that gave up (retried later) */
  uint64_t uploads_pending; /* queued or in flight now */
  uint64_t repaired_local;  /* chunks re-fetched from the bucket into the cache */
  uint64_t repaired_remote; /* chunks re-uploaded over a missing/bad bucket copy */
} ckpt_s3_tiered_stats;

/* Opens the two tiers of cfg. writable: start the background uploaders and
 * re-queue the uploads a previous process left in <cache>/uploads. cfg is
 * copied (and its secrets wiped by the caller when it likes). */
int ckpt_s3_tiered_open(const ckpt_s3_config *cfg, int writable, ckpt_tier **out);
/* 1 if t is a tier made by ckpt_s3_tiered_open. */
int ckpt_s3_tiered_is(const ckpt_tier *t);
void ckpt_s3_tiered_stats_get(ckpt_tier *t, ckpt_s3_tiered_stats *st);
/* Waits until no upload is queued or in flight (FT_ETIMEDOUT after
 * timeout_s, < 0: forever); FT_EIO if a manifest upload is still failing. */
int ckpt_s3_tiered_flush(ckpt_tier *t, int timeout_s);
/* scrub 1: reads of chunks also check (and repair) the bucket's copy. */
void ckpt_s3_tiered_set_scrub(ckpt_tier *t, int on);
/* The bucket tier (borrowed), for listing manifests. */
ckpt_tier *ckpt_s3_tiered_remote(ckpt_tier *t);

#endif
