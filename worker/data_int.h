/*
 * data_int.h: the loader's insides, shared by data.c (local files, the
 * stream and its sequences) and data_s3.c (token shards in a bucket).
 * Not for other callers: data.h is the loader's interface.
 */
#ifndef DATA_INT_H
#define DATA_INT_H

#include "data.h"

#include <stddef.h>
#include <stdint.h>

#define DATA_HEADER_BYTES (DATA_HEADER_INTS * sizeof(int32_t))

typedef struct data_s3 data_s3;

typedef struct data_shard {
  char *path; /* a local path, or "s3://bucket/key" */
  void *map;  /* local: the whole file, read-only; s3: NULL */
  size_t map_len;
  const uint16_t *tok; /* local: map + header; s3: NULL (read by blocks) */
  uint64_t n;          /* tokens in this shard */
  uint64_t start;      /* index of tok[0] in the concatenated stream */
} data_shard;

struct data_loader {
  int nshards;
  data_shard *sh;
  uint64_t total;
  data_s3 *s3; /* non-NULL: the shards are objects of a bucket */
};

/* The shard holding stream position pos (< total). */
int data_find_shard(const data_loader *dl, uint64_t pos);
/* " (this is an llm.c model file ...)": what a bad header looks like. */
const char *data_magic_hint(const unsigned char *p, size_t len);
/* Checks a shard's 1024-byte header h against the object's size in bytes:
 * magic, version, count >= 0, size == header + 2 * count. *n: the count.
 * FT_EFORMAT with a detail naming `name`. */
int data_check_header(const char *name, const int32_t *h, uint64_t size, uint64_t *n);

/* One shard object of a listing: key, size in bytes, ETag (quotes kept),
 * token count (the header's; 0 until read). */
typedef struct data_obj {
  char *key;
  char *etag;
  uint64_t size;
  uint64_t tokens;
} data_obj;

/* data_listing.c: the listing of each s3:// pattern, recorded in one JSON
 * file (FT_DATA_LISTING) so that every later open of the pattern reads the
 * same objects. load: *found 0 if the file or the pattern is absent (FT_OK);
 * FT_EFORMAT for a file that is not a listing. save: adds (or replaces) the
 * pattern's entry, the others kept; crash-safe. The caller holds the lock. */
int data_listing_lock(const char *path);
int data_listing_load(const char *path, const char *uri, data_obj **ob, int *n, int *found);
int data_listing_save(const char *path, const char *uri, const char *where, const data_obj *ob,
                      int n);
void data_objs_free(data_obj *ob, int n);

/* data_s3.c: fills dl (shards, total, s3) from "s3://bucket/glob". */
int data_s3_open(const char *uri, int vocab_size, const data_opts *o, data_loader *dl);
void data_s3_free(data_s3 *s);
/* Tokens [pos, pos + n) of the stream (pos + n <= total) into out. */
int data_s3_tokens(const data_loader *dl, uint64_t pos, uint64_t n, uint16_t *out);
void data_s3_stats(const data_loader *dl, data_io_stats *st);
void data_s3_hint(const data_loader *dl, const data_reads *r);

/* Exposed for unit tests. The literal part of a key glob (what the listing
 * asks for): its length, up to the first of * ? [ \. */
size_t data_s3_glob_prefix(const char *keyglob);
/* 1 if key matches keyglob (fnmatch, FNM_PATHNAME: a wildcard never
 * matches '/'). */
int data_s3_key_matches(const char *keyglob, const char *key);
/* The cache directory's eviction: removes its least recently used *.blk
 * files (oldest mtime first) until `need` more bytes fit under bound, and
 * temp files (*.blk.tmp.*) older than 10 minutes; live temp files count
 * but stay. Returns the bytes it holds after; *evicted (may be NULL) is
 * increased by the files removed. Other files are left alone. */
uint64_t data_cache_make_room(const char *dir, uint64_t bound, uint64_t need, uint64_t *evicted);

#endif
