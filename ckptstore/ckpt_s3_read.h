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

#endif
