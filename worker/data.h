/*
 * data: the token-shard loader (llm.c's .bin format).
 *
 * A shard is a header of 256 int32 (magic 20240520, version 1, token count,
 * the rest zero) followed by `count` uint16 tokens. A glob names the shards;
 * they are read in sorted path order (deterministic) and treated as one
 * concatenated token stream. Sequence i (a global counter, the loader's only
 * state) is the T+1 tokens starting at token (i mod n_seq) * T, where
 * n_seq = (total_tokens - 1) / T: inputs are the first T, targets the last T.
 * So the position in the data is one integer, saved in every checkpoint, and
 * resume needs no replay.
 *
 * Every shard is validated at open: magic, version, file size against the
 * count, every token id < vocab_size. Errors name the file (ft_err_detail).
 * Shards are memory-mapped read-only; the loader is safe to read from
 * several threads.
 *
 * S3: a pattern "s3://bucket/prefix/glob" names objects of a bucket
 * (data_s3.c; docs/data.md): listed once at open (keys in strcmp order,
 * sizes, ETags), every header checked with a ranged GET of its first 1024
 * bytes, or all of that read from a recorded listing (data_listing.c); tokens are read by aligned
 * blocks through a memory cache, prefetch threads and a bounded cache directory shared by the
 * processes of a host; every read sends If-Match with the listed ETag. The stream, and so every
 * sequence, is the same as the same shards' copied locally. Errors of an S3 loader: data faults
 * (the run's data is wrong: stop, blame nobody) are FT_ENOENT (an object listed is gone), FT_ESTATE
 * (it changed since it was listed), FT_EFORMAT (a bad header, a token out of the vocabulary: the
 * detail names the key and the token's index); storage faults (the service: wait and retry) are the
 * others, past the client's retries (data_err_is_storage).
 */
#ifndef DATA_H
#define DATA_H

#include <stdint.h>

#include "ft_runfile.h"

typedef struct data_loader data_loader;

/* How an S3 loader reads (ignored for local files). Each field has an
 * environment variable that, when set, overrides it (an operator tunes a
 * host without editing the run file): FT_DATA_CACHE, FT_DATA_CACHE_BYTES,
 * FT_DATA_BLOCK_BYTES, FT_DATA_PREFETCH_BLOCKS, FT_DATA_S3_ENDPOINT,
 * FT_DATA_LISTING. */
typedef struct data_opts {
  char cache_dir[1024];  /* "": $FT_S3_CACHE/data, else ~/.cache/ftsup/data */
  int64_t cache_bytes;   /* bound of the cache directory; 0: no disk cache */
  int64_t block_bytes;   /* an aligned block of this many bytes (even), the unit of
                            the caches (a run of them is one GET);
                            0: data_block_bytes_auto(window_bytes) */
  int64_t window_bytes;  /* the bytes one host reads per micro-batch (workers_per_node
                            x micro_batch x seq_len x 2, the run file's); 0: unknown */
  int prefetch_blocks;   /* blocks read ahead of the step (data_hint); 0: none */
  char s3_endpoint[512]; /* "": FT_S3_ENDPOINT's (or AWS) */
  char listing[1024];    /* "": none; else the file recording each pattern's
                            listing (docs/data.md, "The listing") */
} data_opts;

#define DATA_CACHE_BYTES_DEFAULT (4LL << 30)
#define DATA_BLOCK_BYTES_DEFAULT (4LL << 20)
#define DATA_BLOCK_AUTO_MIN (64LL << 10)
#define DATA_BLOCK_BYTES_MIN 4096LL
#define DATA_BLOCK_BYTES_MAX (1LL << 30)
#define DATA_PREFETCH_DEFAULT 4
#define DATA_PREFETCH_MAX 64

/* The defaults above. */
void data_opts_default(data_opts *o);
/* The run file's data.cache_dir, .cache_bytes, .block_bytes,
 * .prefetch_blocks and .s3_endpoint. */
void data_opts_from_runfile(const ft_data_cfg *d, data_opts *o);
/* The block size when none is set: the largest power of two <= the bytes a
 * host reads per micro-batch (so a host's window touches two or three
 * blocks and it downloads at most twice what it uses), within
 * DATA_BLOCK_AUTO_MIN..DATA_BLOCK_BYTES_DEFAULT; window_bytes <= 0
 * (unknown: ftdata): DATA_BLOCK_BYTES_DEFAULT. The same for every rank of
 * a run, across restarts and shrinks (the cache files' names hold it). */
int64_t data_block_bytes_auto(int64_t window_bytes);

/* I/O counters of a loader (all 0 for local files). */
typedef struct data_io_stats {
  uint64_t block_gets;     /* ranged GETs of token blocks (attempts not counted) */
  uint64_t blocks_fetched; /* the blocks those GETs brought (one GET may bring a run) */
  uint64_t header_gets;    /* ranged GETs of shard headers at open */
  uint64_t requests;       /* every HTTP request (LIST, retries included) */
  uint64_t retries;        /* attempts after a failed one (5xx, throttling, timeouts) */
  uint64_t bytes_down;     /* bytes of every response body */
  uint64_t disk_hits;      /* blocks read from the cache directory */
  uint64_t evictions;      /* cache files this process removed to keep the bound */
} data_io_stats;

#define DATA_MAGIC 20240520
#define DATA_VERSION 1
#define DATA_HEADER_INTS 256

/* Opens every shard matching glob. FT_ENOENT if the glob matches nothing,
 * FT_EFORMAT for a bad shard, FT_EIO if a file can't be read; the detail
 * names the file and says what is wrong. *out owned by the caller. */
int data_open(const char *glob, int vocab_size, data_loader **out);
/* The same with an S3 loader's options (o NULL: the defaults). */
int data_open_opts(const char *glob, int vocab_size, const data_opts *o, data_loader **out);
/* An S3 loader prints its I/O counters (data_io_stats) on one line of
 * stderr when freed. */
void data_free(data_loader *dl);
/* 1 if glob names objects of a bucket ("s3://..."). */
int data_is_s3(const char *glob);
/* 1 if an error of an S3 loader is the storage service's (unavailable,
 * throttling, slow, refusing the keys: wait and retry, FT_EXIT_STORE), 0
 * if it is the data's (FT_EXIT_DATA). */
int data_err_is_storage(int rc);
void data_io_stats_get(const data_loader *dl, data_io_stats *st);

uint64_t data_num_tokens(const data_loader *dl);
int data_num_shards(const data_loader *dl);
/* Number of distinct sequences of length T (T+1 tokens each, stride T). */
uint64_t data_num_sequences(const data_loader *dl, int T);
/* Copies sequence i (wrapping modulo data_num_sequences) into inp[T] and
 * tgt[T]. Returns 0, or FT_EINVAL if the data holds fewer than T+1 tokens;
 * an S3 loader also any error of its reads (above). */
int data_sequence(const data_loader *dl, uint64_t i, int T, int32_t *inp, int32_t *tgt);

/* What the trainer reads next, for an S3 loader's prefetcher (worker/
 * train.c's fill_batch layout): from sequence `seq` on, a step every
 * `stride` sequences (the global batch), each step `windows` windows (the
 * micro-batches) [step + first + m * gap, + count) for m < windows, in that
 * order. The trainer names its host's windows (its ranks are consecutive):
 * first = the host's first rank x micro_batch, gap = world x micro_batch,
 * count = the host's ranks x micro_batch. Sequences of T tokens (+1), as
 * data_sequence's. */
typedef struct data_reads {
  int T;
  uint64_t seq, stride, first, gap, count;
  int windows;
} data_reads;

/* Tells the loader what is read from sequence r->seq on (r is copied; the
 * trainer: the steps after the one it reads now). The prefetch threads then
 * bring the blocks those windows overlap, whole windows while they fit in
 * prefetch_blocks, in the order they will be read, and no others, a run of
 * consecutive blocks with one GET; a later call replaces it (a block only
 * an older one wanted may go). Without a hint the prefetcher reads the
 * next blocks of the stream after each read. A local loader, or one
 * without prefetch, ignores it. Advisory: what data_sequence returns never
 * depends on it. */
void data_hint(data_loader *dl, const data_reads *r);

/* Writes one shard crash-safely (temp file, fsync, rename). */
int data_write_shard(const char *path, const uint16_t *tokens, uint64_t n);

#endif
