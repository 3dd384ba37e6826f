/*
 * ckpt_s3_write.h: writing whole objects to a data bucket, for code outside
 * the checkpoint store (`ftdata encode|synth --out s3://...`,
 * worker/ftdata_main.c). The write face of the store's one S3 client
 * (ckpt_s3_client.c), beside ckpt_s3_read.h's read face: the same
 * configuration (ckpt_s3_data_config: the store's, then FT_DATA_S3_ENDPOINT,
 * FT_DATA_AWS_* over it), the same SigV4, retries and classification.
 *
 * Atomicity: an object is sent whole, one PUT (or, above
 * FT_S3_MULTIPART_MIB, a multipart upload that S3 shows only once it is
 * completed, and aborts when a part fails), so a listing never shows a
 * part of one: a failed put leaves the key as it was.
 *
 * Errors (FT_E*, the detail naming the method, bucket and key): FT_ENOENT
 * no such bucket (the detail says so and where it was looked for);
 * FT_ECONFIG refused credentials (the detail says where the keys came
 * from); FT_EIO / FT_ENET / FT_ETIMEDOUT / FT_EBUSY the service failed, was
 * unreachable, slow or throttling past the retry budget. Secrets never
 * appear in a message.
 */
#ifndef CKPT_S3_WRITE_H
#define CKPT_S3_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_s3_writer ckpt_s3_writer;

typedef struct ckpt_s3_writer_stats {
  uint64_t requests; /* HTTP requests sent (every attempt) */
  uint64_t retries;  /* attempts after the first */
  uint64_t bytes_up; /* request bodies */
} ckpt_s3_writer_stats;

/* uri: "s3://bucket[/anything]" (only the bucket is used); endpoint: NULL or
 * "" for FT_DATA_S3_ENDPOINT / FT_S3_ENDPOINT / AWS. Sends nothing. */
int ckpt_s3_writer_open(const char *uri, const char *endpoint, ckpt_s3_writer **out);
void ckpt_s3_writer_free(ckpt_s3_writer *w);
/* Borrowed, valid until the writer is freed. */
const char *ckpt_s3_writer_bucket(const ckpt_s3_writer *w);
/* "endpoint (keys: where they came from)", for messages. */
const char *ckpt_s3_writer_where(const ckpt_s3_writer *w);
/* The keys under prefix, in the server's order (fn's non-zero result stops
 * the walk and is returned). Also the cheap check before a long job that
 * the bucket exists and takes the keys (FT_ENOENT / FT_ECONFIG). */
int ckpt_s3_writer_list(ckpt_s3_writer *w, const char *prefix,
                        int (*fn)(void *ud, const char *key, uint64_t size), void *ud);
/* Stores data[0, len) as key, replacing any object there; borrowed data. */
int ckpt_s3_writer_put(ckpt_s3_writer *w, const char *key, const void *data, size_t len);
void ckpt_s3_writer_stats_get(ckpt_s3_writer *w, ckpt_s3_writer_stats *st);

#endif
