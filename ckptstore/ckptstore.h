/*
 * ckptstore: content-addressed, asynchronous, incremental checkpoints.
 *
 * A checkpoint is a set of named logical tensors (bytes with a dtype and a
 * shape) plus metadata. Each rank of a run submits the byte ranges it owns
 * (its shard); background threads cut them into chunks of at most chunk_mib,
 * name each chunk by the SHA-256 of its raw bytes, compress it (zstd, with a
 * byte-shuffle filter for float data when that shrinks it) and write it to
 * the store's tiers crash-safely. When every rank's shard is durable, one
 * process commits the checkpoint: its manifest is written as an object beside
 * the chunks and recorded in the catalog (RocksDB) by one synced WriteBatch.
 * Only then is it visible. A step marked BAD (a loss spike the run rolled
 * back past) can be committed again: the re-trained checkpoint replaces it.
 *
 * URIs: "local:DIR" (a directory on this machine) or "s3://bucket/prefix"
 * (the bucket behind a local cache directory, which also holds the
 * catalog). The tier interface is internal (ckpt_tier_int.h).
 *
 * The manifests beside the chunks are the truth; the catalog is an index of
 * them (plus states and pins, also kept as small mark objects beside the
 * manifests) that ckpt_store_rebuild_catalog can rebuild. A damaged catalog,
 * or a missing one in a store that has manifests, is an error (FT_EDB naming
 * it), never an empty store.
 *
 * Ownership: every pointer argument is borrowed for the duration of the call
 * unless the comment says otherwise. Objects returned through **out are owned
 * by the caller and released with the matching _free (x_free(NULL) is a
 * no-op). Strings returned by accessors are valid until the object is freed.
 *
 * Errors: FT_* codes from common/ft_err.h; ft_err_detail() has the detail.
 * No failure aborts the process: a full disk is FT_ENOSPC naming the file
 * (chunk, manifest or catalog); the next write after space is back works
 * without reopening the store, and a failed commit leaves every earlier
 * checkpoint as it was.
 *
 * Threads: a ckpt_store may be used from several threads at once. A
 * submitted job is observed through its ckpt_job handle, not a callback.
 * Three callbacks are declared, each said where it is: ckpt_remote_fn (a
 * chunk from other processes' memory, called from the read threads at
 * once), a progress report and a skipped-record report (both called on
 * the calling thread).
 */
#ifndef CKPTSTORE_H
#define CKPTSTORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_MAX_DIMS 8

typedef struct ckpt_store ckpt_store;
typedef struct ckpt_job ckpt_job;
typedef struct ckpt_shard ckpt_shard;       /* one rank's shard manifest */
typedef struct ckpt_manifest ckpt_manifest; /* one checkpoint's manifest */

enum ckpt_state {
  CKPT_PENDING = 0,   /* shards being written; not restorable */
  CKPT_COMMITTED = 1, /* every shard durable; restorable */
  CKPT_GOOD = 2,      /* committed and passed the loss-spike window */
  CKPT_BAD = 3,       /* inside a spike, or failed verify: never restored */
};
const char *ckpt_state_name(int state); /* "pending", "committed", ... */

/* Where a committed checkpoint's bytes are safe (checkpoint.require,
 * checkpoint.persist_every). The zero value is the strongest, so records
 * written before levels existed read as durable. */
enum ckpt_level {
  CKPT_LEVEL_DURABLE = 0, /* in the store's persistent tier (the bucket, or
                             a local: store's folder) */
  CKPT_LEVEL_LOCAL = 1,   /* in an s3 store's local cache, the upload queued */
  CKPT_LEVEL_MEMORY = 2,  /* only in workers' memory: this host's and a
                             buddy's on another host; no chunk in the store */
};
const char *ckpt_level_name(int level); /* "durable", "local", "memory" */

/* The store's defaults, for the options left at 0 below. */
#define CKPT_DEFAULT_THREADS 2
#define CKPT_DEFAULT_CHUNK_MIB 4
#define CKPT_DEFAULT_ZSTD_LEVEL 1
#define CKPT_DEFAULT_QUEUE_BYTES ((size_t)1 << 30)
/* GC leaves chunks younger than this alone: they may belong to a checkpoint
 * still being written (ckpt_store_set_gc_grace, `ckpt gc --grace`). */
#define CKPT_DEFAULT_GC_GRACE_S 3600

typedef struct ckpt_store_opts {
  const char *catalog_dir; /* RocksDB catalog; NULL: <local dir>/catalog */
  int read_only;           /* 1: open the catalog as a reader (works while a
                              writer holds it); writes fail with FT_ESTATE */
  int shard_writer;        /* 1: write chunks (submit) but open the catalog
                              as a reader: a gang's worker, whose shards the
                              supervisor (the catalog's writer) commits */
  int threads;             /* background writer threads; 0: CKPT_DEFAULT_THREADS */
  int chunk_mib;           /* max chunk size; 0: CKPT_DEFAULT_CHUNK_MIB */
  int zstd_level;          /* 0: CKPT_DEFAULT_ZSTD_LEVEL */
  int full_every;          /* delta chunks: a shard of a run and rank is
                              encoded chunk by chunk against the one this
                              handle submitted before it for them (where
                              that is smaller), except every full_every-th
                              (and the first after ckpt_store_delta_reset),
                              which stands alone: chains are at most
                              full_every - 1 long. 0 or 1: no deltas; at
                              most CKPT_MAX_FULL_EVERY. Costs a copy of the
                              last shard's bytes in memory. */
  size_t queue_bytes;      /* bound on bytes submitted but not yet written;
                              0: CKPT_DEFAULT_QUEUE_BYTES. See ckpt_store_submit. */
  int rebuild_catalog;     /* 1 (writers): a missing catalog is created empty
                              and a damaged one moved aside (to
                              <catalog>.damaged.<time>) and replaced by an
                              empty one, for ckpt_store_rebuild_catalog to
                              fill. 0: both are FT_EDB errors naming the
                              catalog (a store with manifests but no catalog
                              is never opened as an empty store). */
} ckpt_store_opts;

/* Opens (creating if needed) the store at uri. A writer takes the catalog's
 * lock: a second writer gets FT_EBUSY with a message naming the holder.
 * A catalog that is damaged, or missing from a store that has manifests, is
 * FT_EDB naming it and saying to run `ckpt rebuild-catalog` (see
 * opts->rebuild_catalog); it is never taken for an empty store. */
int ckpt_store_open(const char *uri, const ckpt_store_opts *opts, ckpt_store **out);
/* Waits for submitted jobs, then closes. NULL is a no-op. */
void ckpt_store_free(ckpt_store *s);
/* The store's folder on this machine, absolute: DIR of local:DIR, or the
 * cache folder of an s3:// store (which holds its catalog). Valid until
 * the store is freed. */
const char *ckpt_store_dir(const ckpt_store *s);

/* ---- writing ------------------------------------------------------------ */

/* A lossy form for a part's f32 values (ckpt_part.lossy), for state the
 * caller can afford to restore approximately (an optimizer's moments,
 * checkpoint.moments), never weights. The checkpoint then holds the values
 * the form decodes to, and its chunks are named by their SHA-256, so every
 * read is still verified. A chunk with a value the form cannot hold (NaN,
 * infinity, a negative one for q8log) is stored exactly instead. */
enum ckpt_lossy {
  CKPT_EXACT = 0,
  CKPT_LOSSY_BF16 = 1,  /* each value rounded to bfloat16 */
  CKPT_LOSSY_Q8 = 2,    /* blocks of 256: a scale (max |x| / 127) and a
                           signed 8-bit code per value (first moments) */
  CKPT_LOSSY_Q8LOG = 3, /* blocks of 256 non-negative values: 8 bits on a
                           log scale of 16 binades below the block's top,
                           4 mantissa bits (second moments) */
};
/* "exact", "bf16", "q8", "q8log" */
const char *ckpt_lossy_name(int lossy);

/* One contiguous byte range of a logical tensor, as owned by one rank. */
typedef struct ckpt_part {
  const char *tensor; /* logical tensor name, e.g. "param/wte" */
  const char *dtype;  /* "f32", "bf16", "f16", "i32", "i64", "u8", "u64" */
  int ndim;           /* shape of the whole logical tensor */
  int64_t shape[CKPT_MAX_DIMS];
  uint64_t offset;  /* byte offset of this range in the tensor */
  uint64_t len;     /* bytes in this range */
  const void *data; /* host buffer: borrowed until the job says
                       its buffers are released */
  int lossy;        /* enum ckpt_lossy (f32 only); 0: exact */
} ckpt_part;

#define CKPT_MAX_FULL_EVERY 64

/* The next shard submitted (of any run and rank) stands alone: no chunk of
 * it is a delta against what this handle submitted before. For a process
 * that restored an older checkpoint (a rollback), whose last shard is not
 * what it trains from. */
void ckpt_store_delta_reset(ckpt_store *s);

/* Submits one rank's shard of checkpoint (run, step). Returns at once with a
 * job handle; background threads chunk, hash, compress (a delta, see
 * full_every) and write.
 * Back-pressure: if more than queue_bytes are in flight, submit blocks until
 * enough earlier work is written (it never drops or reorders work).
 * The part array is copied; the data buffers are not, see ckpt_job_released. */
int ckpt_store_submit(ckpt_store *s, const char *run, int64_t step, int rank, int world,
                      const ckpt_part *parts, int nparts, ckpt_job **out);
/* The same, for a checkpoint that lives only in workers' memory
 * (checkpoint.persist_every, commit level CKPT_LEVEL_MEMORY): each chunk is
 * hashed and kept in this process's memory (the store must keep chunks in
 * memory: ckpt_store_keep_in_memory), nothing is compressed or written; the
 * shard's chunks have stored size 0. */
int ckpt_store_submit_memory(ckpt_store *s, const char *run, int64_t step, int rank, int world,
                             const ckpt_part *parts, int nparts, ckpt_job **out);
/* 1 when every data buffer of the job may be reused (all bytes hashed and
 * compressed into the job's own memory or written), else 0. With wait=1,
 * blocks until then and returns 1. */
int ckpt_job_released(ckpt_job *j, int wait);
/* 1 when the shard is durable (or failed), else 0. Non-blocking. */
int ckpt_job_done(ckpt_job *j);
/* Blocks until durable; returns 0 and the shard manifest (owned by the
 * caller) or an FT_E* code (then *shard is NULL). shard may be NULL. */
int ckpt_job_wait(ckpt_job *j, ckpt_shard **shard);
/* Waits for the job if still running, then frees it. NULL is a no-op. */
void ckpt_job_free(ckpt_job *j);

/* Shard manifests travel from workers to the committing process as JSON
 * text (versioned and checksummed). */
char *ckpt_shard_to_json(const ckpt_shard *sh); /* malloc'd, caller frees */
/* The text a worker sends the committing process: a stored shard's
 * reference (ckpt_store_put_shard), else the shard itself. malloc'd. */
char *ckpt_shard_report_to_json(const ckpt_shard *sh);
int ckpt_shard_from_json(const char *json, ckpt_shard **out);
void ckpt_shard_free(ckpt_shard *sh);
int ckpt_shard_rank(const ckpt_shard *sh);
int64_t ckpt_shard_step(const ckpt_shard *sh);

/* Stores a durable shard (from ckpt_job_wait, not a memory-level one) as an
 * object of the store, named by the SHA-256 of its JSON text, after
 * checking that every chunk it names (and every base of its deltas) is in
 * the tier and freshening them: the commit then checks one object per
 * rank, not every chunk (ckpt_commit.c, check_shards). From then on
 * ckpt_shard_report_to_json gives the shard's reference (its object's
 * name and totals, ~400 bytes), which ckpt_store_commit commits from
 * alone.
 * FT_ENOENT naming a chunk that is missing. */
int ckpt_store_put_shard(ckpt_store *s, ckpt_shard *sh);
/* One host's references in one (ckpt_shard_report_to_json gives its text,
 * as for a rank's): the references refs[0..n) of one checkpoint's ranks
 * lo..lo+n-1 in a row (n <= 256, any order) become a leaf of the
 * checkpoint's index, an object like theirs naming their shard objects,
 * and *out names that leaf with the ranks it holds and their totals added
 * up. A commit of hosts' references checks one object per host, not per
 * rank, and writes only the index above the leaves. Written by the agent
 * of a host (worker/agent.c): first each shard object is checked to be in
 * the tier (FT_ENOENT naming the first that is not), and the oldest one's
 * time goes into *out, then the leaf is put and synced. The refs stay the
 * caller's. */
int ckpt_store_put_host(ckpt_store *s, ckpt_shard *const *refs, int n, ckpt_shard **out);
/* The leaf's text (*leaf, malloc'd) and the host reference to it without
 * writing anything or checking the tier (oldest 0): for a caller that puts
 * the object itself (tests/scale). */
int ckpt_host_ref_build(ckpt_shard *const *refs, int n, char **leaf, ckpt_shard **out);
/* The ranks a reference holds: 1, or a host's (ckpt_store_put_host). */
int ckpt_shard_nranks(const ckpt_shard *sh);
/* 1 if sh is a reference to a stored shard (its parts are in the store). */
int ckpt_shard_is_ref(const ckpt_shard *sh);

/* What a checkpoint records beside its tensors. JSON texts are opaque to the
 * store (it keeps them verbatim); NULL means "{}". */
typedef struct ckpt_meta {
  const char *run;
  int64_t step;
  int64_t parent_step;      /* -1: none */
  int world;                /* world size that wrote it */
  double loss;              /* loss at the step (NaN if unknown) */
  const char *config_json;  /* model and train config */
  const char *state_json;   /* data-loader position, RNG state, ... */
  const char *metrics_json; /* metrics at the step */
  /* What the run's data was (the supervisor's recorded s3:// listing,
   * docs/data.md "The listing"): opaque JSON text kept verbatim under the
   * manifest's "data" key. NULL: none (the key is absent, as in manifests
   * older than it); unlike the three above, never "{}". */
  const char *data_json;
  int level;             /* enum ckpt_level: CKPT_LEVEL_MEMORY commits a
                            checkpoint whose chunks are only in workers'
                            memory (no chunk checked or written in the
                            store); otherwise the store's own level */
  uint64_t memory_epoch; /* memory level: ckpt_store_memory_epoch when its
                            shards were made; a ckpt_store_drop_memory on
                            this handle since then refuses the commit
                            (FT_ECANCELED). 0: no such check */
} ckpt_meta;

/* Commits a checkpoint: checks that the shards are of (run, step), cover
 * every tensor's bytes exactly once, and that every chunk is durable; writes
 * the manifest object; then records it in the catalog with one synced
 * WriteBatch (state CKPT_COMMITTED). Shards stay owned by the caller.
 * (run, step) already COMMITTED or GOOD: FT_EEXIST. PENDING or BAD: replaced
 * (the re-trained step after a rollback), keeping its pin. A memory-level
 * record is upgraded by a commit of the same step at a persistent level
 * (its state and pin kept). On failure
 * (FT_ENOSPC, ...) nothing of it remains and earlier checkpoints are whole. */
int ckpt_store_commit(ckpt_store *s, const ckpt_meta *meta, ckpt_shard *const *shards, int nshards);

/* ---- reading ------------------------------------------------------------ */

typedef struct ckpt_info {
  char run[128];
  int64_t step;
  int64_t parent_step;
  int world;
  int state; /* enum ckpt_state */
  int pinned;
  double loss;
  int64_t time_ms;        /* commit time, Unix ms */
  uint64_t logical_bytes; /* sum of tensor sizes */
  uint64_t stored_bytes;  /* sum of stored (compressed) chunk sizes referenced */
  uint64_t new_bytes;     /* stored bytes of chunks first referenced here */
  int ntensors;
  int nchunks;
  int level; /* enum ckpt_level */
  /* Delta chunks (checkpoint.full_every): 0 when every chunk stands alone,
   * else the longest chain of earlier chunks one of its chunks needs. */
  int depth;
  int64_t base_step; /* the checkpoint its deltas were made against (the
                        newest one, if several); -1: none or unknown */
  int lossy;         /* bit (1 << enum ckpt_lossy) for every lossy form one
                        of its tensors was stored in; 0: exact */
} ckpt_info;

/* One checkpoint's catalog record, without its manifest (which at
 * thousands of ranks is tens of MB to read and parse); FT_ENOENT if the
 * catalog has none. */
int ckpt_store_get_info(ckpt_store *s, const char *run, int64_t step, ckpt_info *info);

/* Lists checkpoints (run NULL: all runs), ordered by run then step.
 * *out is malloc'd (caller frees), *n its length. */
int ckpt_store_list(ckpt_store *s, const char *run, ckpt_info **out, size_t *n);
/* Newest checkpoint of run whose state is COMMITTED or GOOD (never BAD or
 * PENDING) and whose step <= max_step (INT64_MAX: any). FT_ENOENT if none. */
int ckpt_store_latest(ckpt_store *s, const char *run, int64_t max_step, int64_t *step);
/* The same among the checkpoints whose level is at most max_level (enum
 * ckpt_level: CKPT_LEVEL_LOCAL skips those only in workers' memory). */
int ckpt_store_latest_at(ckpt_store *s, const char *run, int64_t max_step, int max_level,
                         int64_t *step);
/* Drops the catalog records of run's memory-level checkpoints with step >=
 * min_step (their memory is gone: the workers that held them were
 * relaunched, or a restore found a chunk in no one's memory); *n (may be
 * NULL) says how many. Nothing in the tier is touched (they have nothing
 * there). */
int ckpt_store_drop_memory(ckpt_store *s, const char *run, int64_t min_step, int *n);
/* This handle's memory epoch (1 + its ckpt_store_drop_memory calls so far),
 * for ckpt_meta.memory_epoch: a memory-level checkpoint whose shards were
 * reported before a drop is not recorded after it, even when its commit
 * was already queued (the drop and the commit's record are serialised). */
uint64_t ckpt_store_memory_epoch(ckpt_store *s);
/* Retention of run's memory-level checkpoints alone, as ckpt_store_gc
 * applies it (one is kept while newer than the newest persisted
 * restorable one, the newest two at most; pinned and PENDING ones stay),
 * in the catalog only: no tier request, no sweep, so it costs little after
 * every memory-level commit. *n (may be NULL): how many were dropped. */
int ckpt_store_prune_memory(ckpt_store *s, const char *run, int *n);
/* A store whose catalog was opened as a reader (read_only, shard_writer)
 * sees it as of its open: this catches up with what the writer has
 * committed since (a long-lived worker before a restore). A no-op for the
 * writer. */
int ckpt_store_refresh(ckpt_store *s);

/* Keeps a copy of every chunk this process writes in its memory, at most
 * max_bytes (the chunks written longest ago are dropped first; twice a
 * snapshot keeps the newest one whole). ckpt_store_read then takes a chunk
 * from memory when it is there and still hashes to its name, else from
 * the tiers. */
int ckpt_store_keep_in_memory(ckpt_store *s, uint64_t max_bytes);
/* A source of chunks between this process's memory and the tiers (the
 * memory of other processes: ckpt_replica.h): fn copies chunk (hash, len)
 * into buf and returns 1, or 0 when no such source has it. The store
 * verifies the hash (a mismatch is counted, and the tiers are read), and
 * keeps the chunk in memory. fn is called from the read threads at once.
 * NULL fn: none. */
typedef int (*ckpt_remote_fn)(void *ud, const uint8_t *hash, uint64_t len, void *buf);
void ckpt_store_set_remote(ckpt_store *s, ckpt_remote_fn fn, void *ud);
/* Where this process's reads found their chunk bytes since the open. */
typedef struct ckpt_read_stats {
  uint64_t memory_bytes;    /* from memory (verified) */
  uint64_t remote_bytes;    /* from the remote source (verified) */
  uint64_t store_bytes;     /* from the tiers (verified) */
  uint64_t memory_rejected; /* chunks in memory that failed their hash */
  uint64_t remote_rejected; /* chunks from the remote source that failed it */
  uint64_t meta_bytes;      /* manifests, index and shard objects the loads read */
} ckpt_read_stats;
void ckpt_store_read_stats(ckpt_store *s, ckpt_read_stats *st);
/* Reads every chunk of checkpoint (run, step) that is not in memory yet
 * from the tiers into memory (ckpt_store_keep_in_memory first), each
 * verified by its hash: a warm spare holding the newest checkpoint before
 * it is needed. Stops early, with FT_OK, once *cancel (read atomically;
 * NULL: never) is non-zero. *fetched (may be NULL): bytes read. */
int ckpt_store_prefetch(ckpt_store *s, const char *run, int64_t step, const int *cancel,
                        uint64_t *fetched);

int ckpt_store_load(ckpt_store *s, const char *run, int64_t step, ckpt_manifest **out);
/* ckpt_store_load without reading the shard objects of a checkpoint made
 * of them (nor the index that names them): its record, config, state and
 * metrics only, no tensors. For ckpt_store_load_for_ranges, or to learn a
 * checkpoint's world. Other manifests come whole, as from ckpt_store_load. */
int ckpt_store_load_lazy(ckpt_store *s, const char *run, int64_t step, ckpt_manifest **out);

/* A byte range of a logical tensor that a reader needs. */
typedef struct ckpt_range {
  const char *tensor;
  uint64_t offset, len;
} ckpt_range;
/* What reading ranges r[0..n) of checkpoint m needs, in *part (a new
 * manifest, caller frees): the tensors the ranges name (each listed even
 * when its range is empty, with its dtype and shape) holding the chunks
 * that overlap them, for ckpt_store_read of those ranges. For m made of
 * shard objects and not yet read (ckpt_store_load_lazy), only the shard
 * objects that hold the ranges are read, and of a format 3 index only the
 * objects on the way to them: when every tensor is split evenly over the
 * world (rank k of W holding elements [k*S, (k+1)*S), S = ceil(n/W), as
 * FSDP shards), that is a few objects whatever the world. Another layout
 * is found out (the shards read do not tile the ranges) and the whole
 * checkpoint is read instead. FT_ENOENT naming a tensor the checkpoint
 * lacks; FT_ECORRUPT naming a missing or damaged object. */
int ckpt_store_load_for_ranges(ckpt_store *s, const ckpt_manifest *m, const ckpt_range *r, int n,
                               ckpt_manifest **part);
/* The ckpt_meta.data_json a committed checkpoint carries, without reading
 * its shard objects (what ckpt_store_load does for a manifest of many
 * ranks): *data malloc'd (caller frees), NULL when it carries none. */
int ckpt_store_load_data(ckpt_store *s, const char *run, int64_t step, char **data);
/* Manifest <-> JSON text (versioned; last member "checksum" = SHA-256 of the
 * text before it), as the catalog and the tier keep it: to hand a manifest
 * to a process that cannot load it from its store (a memory-level one, in
 * the supervisor's catalog only, to a worker on another host). to_json:
 * malloc'd, NULL when out of memory; from_json returns FT_ECORRUPT on a
 * checksum mismatch. */
char *ckpt_manifest_to_json(const ckpt_manifest *m);
int ckpt_manifest_from_json(const char *json, ckpt_manifest **out);
void ckpt_manifest_free(ckpt_manifest *m);
const ckpt_info *ckpt_manifest_info(const ckpt_manifest *m);
const char *ckpt_manifest_config_json(const ckpt_manifest *m);
const char *ckpt_manifest_state_json(const ckpt_manifest *m);
const char *ckpt_manifest_metrics_json(const ckpt_manifest *m);
/* ckpt_meta.data_json as committed, valid while m lives; NULL: none. */
const char *ckpt_manifest_data_json(const ckpt_manifest *m);
int ckpt_manifest_ntensors(const ckpt_manifest *m);
typedef struct ckpt_tensor_info {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t shape[CKPT_MAX_DIMS];
  uint64_t nbytes;       /* logical bytes */
  uint64_t stored_bytes; /* compressed bytes of its chunks */
  int nchunks;
  int lossy;        /* enum ckpt_lossy it was submitted with */
  int delta_chunks; /* how many of them are deltas against an earlier chunk */
  int depth;        /* the longest chain among them (0: all stand alone) */
} ckpt_tensor_info;
/* Fills *ti for tensor i (0 <= i < ntensors); FT_EINVAL if out of range. */
int ckpt_manifest_tensor(const ckpt_manifest *m, int i, ckpt_tensor_info *ti);
/* Index of the named tensor, or -1. */
int ckpt_manifest_find(const ckpt_manifest *m, const char *name);

/* Reads bytes [offset, offset+len) of a logical tensor into dst, from the
 * chunks that cover it, verifying each chunk's SHA-256. A chunk whose hash
 * does not match is never copied out: FT_ECORRUPT naming the chunk. This is
 * what restores at any world size. Of a manifest from
 * ckpt_store_load_for_ranges, only bytes of its ranges (FT_EINVAL else). */
int ckpt_store_read(ckpt_store *s, const ckpt_manifest *m, const char *tensor, uint64_t offset,
                    uint64_t len, void *dst);

/* ---- operations --------------------------------------------------------- */

int ckpt_store_set_state(ckpt_store *s, const char *run, int64_t step, int state);
/* The same, only if the checkpoint is in state from now (checked and changed
 * under the store's meta lock, so no other change can come between): else
 * FT_ESTATE and nothing changes. from = -1: any state, as set_state. How a
 * background thread marks GOOD without undoing a BAD mark made meanwhile. */
int ckpt_store_set_state_from(ckpt_store *s, const char *run, int64_t step, int from, int state);
int ckpt_store_pin(ckpt_store *s, const char *run, int64_t step, int pinned);

typedef struct ckpt_verify_report {
  int chunks_checked;
  int chunks_corrupt;
  int chunks_missing;
  char first_problem[512]; /* human-readable; "" when none */
  int dependants_bad;      /* other checkpoints of the run marked BAD because
                              they need a chunk that failed (delta chains) */
  int manifest_bad;        /* its manifest object is no manifest or differs
                              from the catalog's copy */
} ckpt_verify_report;
/* Re-hashes every chunk of (run, step) (a delta decoded with its chain),
 * and checks that its manifest object in the store holds the catalog's
 * copy of the manifest byte for byte where it exists (one overwritten or
 * cut short would make a catalog rebuild lose the checkpoint). On a bad manifest
 * object or any corrupt or missing chunk the checkpoint is marked
 * CKPT_BAD (unless read-only), and so is every other checkpoint of the run
 * that needs one of the chunks that failed (rep->dependants_bad), and
 * FT_ECORRUPT is returned; rep is filled either way. progress may be NULL; it is called
 * with (done, total) chunk counts. */
int ckpt_store_verify(ckpt_store *s, const char *run, int64_t step, ckpt_verify_report *rep,
                      void (*progress)(void *ud, uint64_t done, uint64_t total), void *ud);

typedef struct ckpt_retention {
  int keep_last;  /* newest N of each run; 0: keep all */
  int keep_every; /* also every step that is a multiple of M; 0: none */
  int no_sweep;   /* 1: drop what retention drops from the catalog, sweep
                     nothing (a later GC sweeps their chunks: marking reads
                     every kept checkpoint, seconds at thousands of ranks) */
} ckpt_retention;
typedef struct ckpt_gc_report {
  int checkpoints_deleted;
  uint64_t chunks_deleted;
  uint64_t bytes_freed;
  int tmp_deleted;         /* temp files of crashed manifest writes removed */
  uint64_t shards_deleted; /* shard objects no kept checkpoint names */
  int sweep_only;          /* 1: the catalog could not be written (a full disk):
                              retention was not applied, only chunks no checkpoint
                              references were deleted; note says why */
  int marks_followed;      /* catalog records whose pin or state lagged the
                              store's mark objects: retention followed the
                              marks (and the catalog was updated, unless dry) */
  char note[512];
} ckpt_gc_report;
/* Applies retention (pinned checkpoints are always kept), then deletes the
 * chunks that no kept manifest references, and temp files of manifest writes
 * a crash left (older than a minute, their process gone). Safe against a
 * concurrent commit; the protocol is documented in ckpt_gc.c. dry_run:
 * report only. On a full disk (the catalog cannot be written) it still
 * sweeps unreferenced chunks and says so in rep (sweep_only, note). */
int ckpt_store_gc(ckpt_store *s, const ckpt_retention *ret, int dry_run, ckpt_gc_report *rep);
/* GC leaves unreferenced chunks younger than this alone (default 3600 s),
 * since they may belong to a checkpoint still being written by another
 * process. 0 suits a store nobody else writes (tests, offline). */
int ckpt_store_set_gc_grace(ckpt_store *s, int64_t seconds);

/* ---- other components' records (ckpt_meta.c) ----------------------------- */

/* Small text records of other components (the supervisor's run state) in the
 * catalog, under the key "sup/<key>" (key: 1..512 bytes), apart from the
 * checkpoints' own keys. put writes one synced batch (durable on return;
 * FT_ESTATE on a read-only store). get: *value is malloc'd (caller frees),
 * FT_ENOENT if the key was never put. */
int ckpt_store_put_meta(ckpt_store *s, const char *key, const char *value);
int ckpt_store_get_meta(ckpt_store *s, const char *key, char **value);

/* ---- tiers: the S3 bucket behind a local cache (ckpt_store.c, ckpt_s3_*.c) --
 *
 * "s3://bucket/prefix" stores keep chunks in a cache directory (FT_S3_CACHE)
 * and upload them in the background; see ckpt_s3_tiered.c. The functions
 * below are no-ops (FT_OK, zero stats) on a local: store. */

typedef struct ckpt_tier_stats {
  int has_remote;           /* 1 for an s3:// store */
  uint64_t requests;        /* HTTP requests sent, retries included */
  uint64_t retries;         /* attempts after a first one failed */
  uint64_t bytes_up;        /* request bodies sent */
  uint64_t bytes_down;      /* response bodies received */
  uint64_t uploads_done;    /* objects made durable in the bucket */
  uint64_t uploads_failed;  /* background uploads that failed (retried) */
  uint64_t uploads_pending; /* queued or in flight now */
  uint64_t repaired_local;  /* cache copies replaced from the bucket */
  uint64_t repaired_remote; /* bucket copies replaced from the cache */
} ckpt_tier_stats;
/* Counters since the store was opened. */
int ckpt_store_tier_stats(ckpt_store *s, ckpt_tier_stats *st);
/* Waits until every background upload is done: FT_ETIMEDOUT (naming the
 * last error) when some are still pending after timeout_s (< 0: forever). */
int ckpt_store_flush(ckpt_store *s, int timeout_s);
/* on = 1: reads (and so ckpt_store_verify) also check the bucket's copy of
 * each chunk, re-uploading it from a good cache copy when it is missing or
 * damaged. Off by default (it doubles the traffic of a read). */
void ckpt_store_set_scrub(ckpt_store *s, int on);
/* Records in the catalog every checkpoint whose manifest object is in the
 * store's tiers (for s3://: the bucket and the cache) and that the catalog
 * lacks, with the GOOD/BAD mark and pin last set on it (kept as a small
 * object beside its manifest; COMMITTED where none was set). Needs a
 * writable store. *found: manifest objects seen; *added: checkpoints
 * recorded (either may be NULL). */
int ckpt_store_rebuild_catalog(ckpt_store *s, int *found, int *added);
/* The same, calling skipped(ud, key, why) for every manifest object it did
 * not record (damaged, unreadable, not a manifest); skipped may be NULL. */
int ckpt_store_rebuild_catalog_report(ckpt_store *s,
                                      void (*skipped)(void *ud, const char *key, const char *why),
                                      void *ud, int *found, int *added);

/* 1 if this run has a manifest (local dir or bucket) whose step is newer
 * than the newest checkpoint the catalog knows for it, else 0; *newest
 * gets the newest manifest step (-1: none). <0: error. */
int ckpt_store_catalog_behind(ckpt_store *st, const char *run, int64_t *newest);

#ifdef __cplusplus
}
#endif
#endif
