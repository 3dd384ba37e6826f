/*
 * ckpt_s3_read.h: reading the objects of a bucket, for code outside the
 * checkpoint store (the data loader's s3:// token shards, worker/data_s3.c).
 * A narrow face of the store's one S3 client (ckpt_s3_client.c: SigV4,
 * retries with backoff, the classification of every HTTP status), so there
 * is no second client; nothing here writes.
 *
 * Configuration is the store's (ckpt_s3_config_from_uri: FT_S3_ENDPOINT,
 * AWS_REGION, AWS_* credentials or the shared file, FT_S3_TIMEOUT_S,
 * FT_S3_RETRIES, FT_S3_RETRY_BUDGET_S), and a data bucket may have its own:
 * the endpoint argument, else FT_DATA_S3_ENDPOINT, replaces FT_S3_ENDPOINT;
 * FT_DATA_AWS_ACCESS_KEY_ID + FT_DATA_AWS_SECRET_ACCESS_KEY (+
 * FT_DATA_AWS_SESSION_TOKEN) replace the store's keys; FT_DATA_AWS_REGION
 * its region. Secrets never appear in a message.
 *
 * Errors (FT_E*, detail naming method, bucket and key): FT_ENOENT no such
 * object; FT_ESTATE the object is not the version of the ETag given (If-Match
 * failed: it changed since it was listed); FT_ECONFIG refused credentials;
 * FT_EIO / FT_ENET / FT_ETIMEDOUT / FT_EBUSY the service failed, was
 * unreachable, slow or throttling past the retry budget.
 *
 * Retries can be watched (ckpt_s3_reader_on_retry): the data loader's
 * training thread says why it waits (worker/progress.h, phase storage_wait).
 * How long one read can take before it fails is ckpt_s3_read_bound_s: what
 * the supervisor's progress watchdog waits before it calls such a wait a
 * hang (docs/watchdog.md).
 */
#ifndef CKPT_S3_READ_H
#define CKPT_S3_READ_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_s3_reader ckpt_s3_reader;

typedef struct ckpt_s3_reader_stats {
  uint64_t requests;   /* HTTP requests sent (every attempt) */
  uint64_t retries;    /* attempts after the first */
  uint64_t bytes_down; /* response bodies */
} ckpt_s3_reader_stats;

/* uri: "s3://bucket[/anything]" (only the bucket is used); endpoint: NULL or
 * "" for FT_DATA_S3_ENDPOINT / FT_S3_ENDPOINT / AWS. */
int ckpt_s3_reader_open(const char *uri, const char *endpoint, ckpt_s3_reader **out);
void ckpt_s3_reader_free(ckpt_s3_reader *r);
const char *ckpt_s3_reader_bucket(const ckpt_s3_reader *r);
/* "endpoint (credentials' source)", for messages. */
const char *ckpt_s3_reader_where(const ckpt_s3_reader *r);
/* Every object whose key starts with prefix, in the server's key order,
 * with its size and ETag (quotes included, as S3 sends it). fn's non-zero
 * result stops the walk and is returned. */
int ckpt_s3_reader_list(ckpt_s3_reader *r, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size, const char *etag),
                        void *ud);
/* Bytes [off, off + n) of key (fewer at its end), sent with If-Match: etag
 * (NULL: no condition). *data malloc'd, the caller frees it. */
int ckpt_s3_reader_get_range(ckpt_s3_reader *r, const char *key, uint64_t off, uint64_t n,
                             const char *etag, uint8_t **data, size_t *len);
/* From any thread: every request in flight or later fails within about a
 * second with FT_ECANCELED (a loader closing does not wait out retries). */
void ckpt_s3_reader_cancel(ckpt_s3_reader *r);
void ckpt_s3_reader_stats_get(ckpt_s3_reader *r, ckpt_s3_reader_stats *st);

/* What failed in an attempt that is retried. */
typedef enum ckpt_s3_retry_cause {
  CKPT_S3_RETRY_HTTP = 0, /* an HTTP answer: status (5xx, 429, 409, 400 RequestTimeout) */
  CKPT_S3_RETRY_TIMEOUT,  /* no connection, or no byte, within FT_S3_TIMEOUT_S */
  CKPT_S3_RETRY_CONNECT,  /* refused, unresolvable, unreachable */
  CKPT_S3_RETRY_NETWORK,  /* reset, closed without an answer, a broken TLS or HTTP/2 stream */
} ckpt_s3_retry_cause;

/* One call of the retry hook. Pointers valid during the call only. */
typedef struct ckpt_s3_retry {
  int ok;                    /* 0: attempt `attempt` failed and another follows after
                                delay_s; 1: the request succeeded at attempt `attempt`
                                (> 1), its last call (a request that gives up makes none) */
  int attempt;               /* from 1 */
  ckpt_s3_retry_cause cause; /* (ok 0) */
  long status;               /* (ok 0) the HTTP status; 0 without an answer */
  const char *code;          /* (ok 0) S3's error code ("SlowDown"), "" if none */
  double delay_s;            /* (ok 0) the backoff before the next attempt */
  const char *method, *key;
} ckpt_s3_retry;
typedef void (*ckpt_s3_retry_fn)(void *ud, const ckpt_s3_retry *r);

/* fn(ud, ...) is called on the thread of each of r's requests that is
 * retried (fn must be thread-safe; it runs between attempts, so it must be
 * quick and must not call back into r). NULL removes it. Set it before r
 * is shared with another thread. */
void ckpt_s3_reader_on_retry(ckpt_s3_reader *r, ckpt_s3_retry_fn fn, void *ud);

/* The longest one request (a read) can take before it fails, under this
 * process's FT_S3_TIMEOUT_S and FT_S3_RETRY_BUDGET_S (defaults 10 and 120):
 * no attempt starts after the budget, and the last one may take a connect
 * timeout plus a transfer stalled for the timeout, so budget + 2 x timeout
 * (140 s by default). FT_ECONFIG (the variable named) for a bad value. */
int ckpt_s3_read_bound_s(double *out);

#endif
