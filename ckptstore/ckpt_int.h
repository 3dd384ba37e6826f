/*
 * ckpt_int.h: the store's internal structures, shared by its modules.
 *
 * Modules (one per file; no circle of calls among them: a lower file calls
 * up only through a function pointer, tests/unit/layering_store.py):
 *   ckpt_leaf.c        object keys, names, error wrapping (ckpt_leaf.h):
 *                      calls nothing in the store, any file may call it
 *   ckpt_tier_local.c  the "local:DIR" tier (layout documented there)
 *   ckpt_chunk.c       SHA-256, byte shuffle, zstd: raw bytes <-> chunk object
 *   ckpt_catalog.c     RocksDB (the only file that sees rocksdb/c.h) + the
 *                      writer lock
 *   ckpt_manifest.c    shard and checkpoint manifests, JSON with checksums;
 *                      reading a manifest's shard objects from a tier
 *   ckpt_store.c       the facade: open/close, list/latest/load/read,
 *                      states and pins
 *   ckpt_writer.c      the asynchronous writer (submit, jobs, threads)
 *   ckpt_commit.c      the commit protocol
 *   ckpt_gc.c          retention and garbage collection
 *   ckpt_verify.c      re-hash every chunk of a checkpoint
 *
 * Not a public header: tests may include it to reach the pieces directly.
 */
#ifndef CKPT_INT_H
#define CKPT_INT_H

#include "ckpt_tier_int.h"
#include "ckptstore.h"

#include <pthread.h>
#include <stdint.h>

/* ---- chunks (ckpt_chunk.c) ------------------------------------------------ */

/* SHA-256 of len bytes (OpenSSL EVP). */
int ckpt_sha256(const void *data, size_t len, uint8_t out[CKPT_HASH_LEN]);
/* A hash's name: 64 lowercase hex digits (ft_hex_encode). */
void ckpt_hex(const uint8_t h[CKPT_HASH_LEN], char out[CKPT_HEX_LEN + 1]);
/* Parses exactly 64 lowercase hex digits (ft_hex_decode, FT_HEX_LOWER: a
 * content address has one spelling); FT_EFORMAT otherwise. */
int ckpt_unhex(const char *hex, uint8_t out[CKPT_HASH_LEN]);
/* Element size of a dtype name ("f32" -> 4), 0 if unknown. */
int ckpt_dtype_size(const char *dtype);
/* 1 for the floating dtypes the shuffle filter is tried on. */
int ckpt_dtype_is_float(const char *dtype);

/* Byte shuffle: byte k of element i goes to position k*n + i. len must be a
 * multiple of esize. dst and src must not overlap. */
void ckpt_shuffle(uint8_t *dst, const uint8_t *src, size_t len, int esize);
void ckpt_unshuffle(uint8_t *dst, const uint8_t *src, size_t len, int esize);

/* Longest chain a delta chunk may have (its depth): checkpoint.full_every
 * keeps chains far shorter; this bounds what a damaged object can ask. */
#define CKPT_MAX_CHAIN 64

/* A delta chunk's base: the raw bytes of the same byte range in an earlier
 * checkpoint, and the chain the delta will name (the base's hash, then the
 * base's own chain): depth entries of CKPT_HASH_LEN bytes. */
typedef struct ckpt_chunk_base {
  const uint8_t *raw; /* as long as the chunk */
  const uint8_t *chain;
  int depth; /* 1 + the base's depth */
} ckpt_chunk_base;

/* 1 if a chunk of len bytes of elements of esize bytes can be a delta. */
int ckpt_chunk_delta_ok(size_t len, int esize);
/* Encodes raw bytes into a chunk object (header + payload), trying the
 * shuffle filter when esize > 1, and the delta filter against base when
 * base is not NULL (and esize is 2 or 4), keeping what shrinks the data
 * most. *obj is malloc'd, caller frees. */
int ckpt_chunk_encode(const void *raw, size_t len, int esize, int zstd_level,
                      const ckpt_chunk_base *base, uint8_t **obj, size_t *objlen);
/* Encodes len bytes of f32 values in lossy form kind (enum ckpt_lossy)
 * into a chunk object, and what it decodes to into deq (len bytes: the
 * chunk's bytes, to name it by). *obj NULL (and FT_OK) when a value cannot
 * be held: the caller stores the chunk exactly. */
int ckpt_chunk_encode_lossy(const void *raw, size_t len, int kind, int zstd_level, uint8_t *deq,
                            uint8_t **obj, size_t *objlen);
/* The chain a chunk object names, without decoding it: *depth 0 (and
 * *chain NULL) for a chunk that stands alone, else *chain points into obj
 * (depth names, its base first). FT_ECORRUPT if the header is damaged. */
int ckpt_chunk_chain(const uint8_t *obj, size_t objlen, int *depth, const uint8_t **chain);
/* Checks an object without anything else: a chunk that stands alone is
 * decoded and hashed; a delta's seal is checked (its bytes need its base:
 * ckpt_chunk_decode). FT_ECORRUPT naming the chunk if damaged. */
int ckpt_chunk_check_alone(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN]);
/* Decodes a chunk object without checking its name: one that stands alone
 * into dst; a delta added onto dst, which holds its base's bytes (element
 * by element, in place). tmp: expect_len bytes of scratch. FT_ECORRUPT if
 * the object is damaged (a wrong base shows only in the hash after). */
int ckpt_chunk_apply(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN],
                     uint8_t *dst, uint8_t *tmp, size_t expect_len);
/* FT_OK if raw hashes to hash, else FT_ECORRUPT naming both. */
int ckpt_chunk_check_hash(const void *raw, size_t len, const uint8_t hash[CKPT_HASH_LEN]);
/* Decodes a chunk object into dst (exactly expect_len bytes) and checks its
 * SHA-256 against hash: FT_ECORRUPT (naming the chunk) if it does not match
 * or the object is damaged. A delta needs base, the raw bytes of the first
 * name in its chain (FT_EINVAL without); base is ignored otherwise. */
int ckpt_chunk_decode(const uint8_t *obj, size_t objlen, const uint8_t hash[CKPT_HASH_LEN],
                      const void *base, void *dst, size_t expect_len);

/* ---- manifests (ckpt_manifest.c) ----------------------------------------- */

typedef struct ckpt_chunk_ref {
  uint64_t offset; /* byte offset in the logical tensor */
  uint64_t len;    /* raw bytes */
  uint64_t stored; /* bytes of the stored object */
  uint8_t hash[CKPT_HASH_LEN];
  int depth;      /* 0: the chunk stands alone; else a delta whose chain (the
                     chunks it needs to be decoded) is chain[0..depth) */
  uint8_t *chain; /* depth * CKPT_HASH_LEN bytes, its base first; owned by
                     the tensor whose chunks array holds the ref */
} ckpt_chunk_ref;

/* One tensor (in a checkpoint) or one part (in a shard). */
typedef struct ckpt_tensor {
  char *name;
  char dtype[8];
  int lossy; /* enum ckpt_lossy it was submitted with */
  int ndim;
  int64_t shape[CKPT_MAX_DIMS];
  uint64_t offset; /* shard parts: first byte; checkpoint tensors: 0 */
  uint64_t len;    /* shard parts: bytes; checkpoint tensors: nbytes */
  ckpt_chunk_ref *chunks;
  int nchunks;
  int cap;
} ckpt_tensor;

/* What a commit needs of a stored shard without reading it: its totals
 * (ckpt_store_put_shard adds them up; the writer counts new_bytes and
 * base_step). */
typedef struct ckpt_shard_sum {
  uint64_t logical, stored, new_bytes; /* new_bytes: chunks this writer put */
  int nchunks, ntensors, depth, lossy; /* ntensors: tensors it has parts of */
  int64_t base_step;                   /* newest step its deltas were made against; -1 */
} ckpt_shard_sum;

struct ckpt_shard {
  char *run;
  int64_t step;
  int rank, world;
  ckpt_tensor *parts; /* NULL in a reference (is_ref) */
  int nparts;
  /* A shard stored as an object of the store (ckpt_store_put_shard), named
   * by the SHA-256 of its JSON text: is_ref 1 for the reference to it that
   * travels to the committing process instead of the parts. */
  int is_ref, has_object;
  uint8_t object[CKPT_HASH_LEN];
  ckpt_shard_sum sum;
  /* A host's reference (ckpt_store_put_host): object names a leaf of the
   * index (level 0) holding the shard objects of ranks [rank, rank +
   * nranks), one host's, and sum adds theirs up; oldest is the tier's
   * time of the oldest of them when the leaf was written (what the commit
   * vouches by). host 0: one rank's (nranks is taken as 1). */
  int host, nranks;
  int64_t oldest;
};

/* A checkpoint's shard object, as its manifest (or its index) names it. */
typedef struct ckpt_shard_obj {
  int rank;
  uint8_t hash[CKPT_HASH_LEN];
} ckpt_shard_obj;

/* A host's leaf of a checkpoint's index, as a commit of host references
 * gets it: ranks [lo, hi), its name, and the oldest of its shard objects
 * (ckpt_shard.oldest). */
typedef struct ckpt_host_obj {
  int lo, hi;
  uint8_t hash[CKPT_HASH_LEN];
  int64_t oldest;
} ckpt_host_obj;

/* The index of a checkpoint of shard objects (format 3, ckpt_manifest.c):
 * a tree of index objects, stored as shard objects are (shards/<SHA-256
 * of the text>) and read as they are (checked against their name and that
 * they belong to the checkpoint). A node of level 0 names up to
 * CKPT_INDEX_FANOUT shard objects, each with the ranks [lo, hi) it holds;
 * a node of level L > 0 names up to CKPT_INDEX_FANOUT nodes of level L-1
 * with the ranks each covers. The entries of a node tile its ranks in
 * order; the root covers [0, world). A leaf is either written by the
 * commit (up to CKPT_INDEX_FANOUT ranks in a row that came as single
 * references) or by a host's agent for its own ranks
 * (ckpt_store_put_host), so a commit of hosts' references writes only the
 * levels above the leaves; a leaf's entries are one rank each either way. */
#define CKPT_INDEX_FANOUT 256
typedef struct ckpt_index_ent {
  int lo, hi; /* ranks [lo, hi) */
  uint8_t hash[CKPT_HASH_LEN];
} ckpt_index_ent;
typedef struct ckpt_index_node {
  uint8_t hash[CKPT_HASH_LEN];
  int level, n;
  ckpt_index_ent *e;
} ckpt_index_node;

struct ckpt_manifest {
  ckpt_info info;
  char *config, *state, *metrics;
  char *data;           /* ckpt_meta.data_json verbatim; NULL: none (older manifests) */
  ckpt_tensor *tensors; /* sorted by name */
  int ntensors;
  /* Manifest of format 2: the shard objects it is made of (sorted by rank,
   * one per rank of the world). tensors is empty until they are read
   * (ckpt_manifest_expand); expanded == 1 after. */
  ckpt_shard_obj *objs;
  int nobjs;
  int expanded;
  /* A commit of host references (ckpt_manifest_build_refs): the hosts'
   * leaves, sorted by rank; objs then holds the ranks that came one by
   * one, and the two tile the world. Only the commit has them. */
  ckpt_host_obj *hosts;
  int nhosts;
  /* Format 3: the manifest names the root of its index instead of every
   * shard object (has_index 1; depth: levels of the tree). objs is empty
   * until the whole index is read (ckpt_index_load_tier); nodes then holds
   * the names of the index objects read, children before their parent. */
  int has_index, index_depth;
  uint8_t index_root[CKPT_HASH_LEN];
  uint8_t (*nodes)[CKPT_HASH_LEN];
  int nnodes;
  /* A manifest of only the chunks some ranges need
   * (ckpt_store_load_for_ranges): its tensors hold those chunks alone. */
  int partial;
  /* Bytes of index and shard objects read into this manifest (for
   * ckpt_read_stats.meta_bytes). */
  uint64_t meta_read;
};

/* 1 for a manifest of shard objects (format 2 or 3). */
int ckpt_manifest_has_objs(const ckpt_manifest *m);

/* Logical bytes of a tensor from dtype and shape; 0 if the dtype is unknown
 * or the shape invalid. */
uint64_t ckpt_tensor_nbytes(const char *dtype, int ndim, const int64_t *shape);
/* Appends a copy of c (its chain copied too). */
int ckpt_tensor_add_chunk(ckpt_tensor *t, const ckpt_chunk_ref *c);
void ckpt_tensor_release(ckpt_tensor *t);

/* Builds the checkpoint manifest from shards: same (run, step), consistent
 * dtype/shape per tensor, every byte covered exactly once (FT_EINVAL naming
 * the first gap or overlap otherwise). info.state/time are left to the caller. */
int ckpt_manifest_build(const ckpt_meta *meta, ckpt_shard *const *shards, int nshards,
                        ckpt_manifest **out);
/* ckpt_manifest_to_json, ckpt_manifest_from_json: ckptstore.h. A manifest
 * with shard objects (nobjs > 0) is written in format 2: the shard objects
 * and totals, no tensors. */
/* Builds a format 2 manifest from shard references (every shard is_ref):
 * one per rank of the world, same (run, step); the totals added up. The
 * coverage of the tensors is checked when the shards are read
 * (ckpt_manifest_expand), not here. */
int ckpt_manifest_build_refs(const ckpt_meta *meta, ckpt_shard *const *shards, int nshards,
                             ckpt_manifest **out);
/* Fills the tensors of a format 2 manifest from its shards (read by the
 * caller, in m->objs' order), checking them as ckpt_manifest_build does.
 * The shards stay the caller's. */
int ckpt_manifest_fill(ckpt_manifest *m, ckpt_shard *const *shards, int nshards);
/* The reference form of a stored shard (is_ref / has_object): run, step,
 * rank, world, object name and totals; checksummed like the others.
 * ckpt_shard_report_to_json writes it for a shard with has_object set;
 * ckpt_shard_from_json reads both forms. */
char *ckpt_shard_ref_to_json(const ckpt_shard *sh);
/* Totals of a shard's parts (logical, stored, nchunks, ntensors, depth,
 * lossy) into sh->sum; new_bytes and base_step are kept. */
void ckpt_shard_add_up(ckpt_shard *sh);
/* Small per-checkpoint record kept in the catalog beside the manifest. */
char *ckpt_info_to_json(const ckpt_info *i);
int ckpt_info_from_json(const char *json, ckpt_info *i);
/* Valid run name: 1..127 of [A-Za-z0-9._-], not starting with '.'. */
int ckpt_run_name_ok(const char *run);
/* A format 2 manifest's tensors from a tier (a store's or the bucket behind
 * a cache): reads its shard objects (each checked against its name, and
 * that it is the shard the manifest says) and fills its tensors; a no-op
 * for a manifest that has them. FT_ECORRUPT naming the shard object that
 * is missing or damaged. ckpt_manifest_expand: the same from a store. */
int ckpt_manifest_expand_tier(ckpt_tier *t, ckpt_manifest *m);
/* Reads shard object o of m from t: FT_ECORRUPT naming it if it is
 * missing, its bytes do not hash to its name or it is not a shard. */
int ckpt_shard_obj_read(ckpt_tier *t, ckpt_manifest *m, const ckpt_shard_obj *o, ckpt_shard **out);
/* ckpt_manifest_from_json, then ckpt_manifest_expand_tier. */
int ckpt_manifest_read(ckpt_tier *t, const char *json, ckpt_manifest **out);

/* Writes the index of m's shard objects (m->objs, and the leaves of
 * m->hosts already in t) into t: its nodes, leaves first, each
 * content-addressed; sets m->has_index, index_root and index_depth, so m
 * is written in format 3. */
int ckpt_index_write(ckpt_tier *t, ckpt_manifest *m);
/* ckpt_host_ref_build: ckptstore.h. */
/* Reads the whole index of a format 3 manifest: fills m->objs (one per
 * rank) and m->nodes; a no-op when objs are there. FT_ECORRUPT naming the
 * index object that is missing, damaged or not of this checkpoint. */
int ckpt_index_load_tier(ckpt_tier *t, ckpt_manifest *m);
/* Reads index node hash of m, expected at level with ranks [lo, hi):
 * checked against its name, its checkpoint, level and ranks (FT_ECORRUPT
 * naming it otherwise). *node: free with ckpt_index_node_release. */
int ckpt_index_node_read(ckpt_tier *t, ckpt_manifest *m, const uint8_t hash[CKPT_HASH_LEN],
                         int level, int lo, int hi, ckpt_index_node *node);
void ckpt_index_node_release(ckpt_index_node *node);

/* ---- catalog (ckpt_catalog.c) ---------------------------------------------- */

typedef struct ckpt_catalog ckpt_catalog;
typedef struct ckpt_batch ckpt_batch;

/* CKPT_CAT_READ opens read-only (works while a writer holds it). The others
 * take <dir>.lock (FT_EBUSY naming the holder), then open the database;
 * CKPT_CAT_CREATE also creates it if missing. FT_ENOENT if there is no
 * catalog (and it was not to be created); FT_EDB (naming it, saying to run
 * `ckpt rebuild-catalog`) if it is damaged; FT_ENOSPC / FT_EIO if it cannot
 * be written. */
enum { CKPT_CAT_READ = 0, CKPT_CAT_WRITE = 1, CKPT_CAT_CREATE = 2 };
int ckpt_catalog_open(const char *dir, int mode, ckpt_catalog **out);
void ckpt_catalog_close(ckpt_catalog *c);
/* *val malloc'd (NUL-terminated), FT_ENOENT if absent. */
int ckpt_catalog_get(ckpt_catalog *c, const char *key, char **val, size_t *len);
/* Calls fn for every key starting with prefix, in key order; a non-zero
 * return from fn stops the scan and is returned. */
int ckpt_catalog_scan(ckpt_catalog *c, const char *prefix,
                      int (*fn)(void *ud, const char *key, const char *val, size_t vlen), void *ud);
ckpt_batch *ckpt_batch_new(void);
void ckpt_batch_put(ckpt_batch *b, const char *key, const char *val, size_t vlen);
void ckpt_batch_del(ckpt_batch *b, const char *key);
/* FT_OK if a write can be tried now (reopening the database after an
 * earlier write error if needed), else the error (FT_ENOSPC on a full disk:
 * the catalog then stays readable). */
int ckpt_catalog_writable(ckpt_catalog *c);
/* A reader's view catches up with the writer's (what it has synced by
 * now): the read-only database is reopened. A no-op for the writer. */
int ckpt_catalog_refresh(ckpt_catalog *c);
/* Copies the keys under prefix that still read from the damaged catalog at
 * from (opened read-only, as leniently as RocksDB allows) into into, in one
 * batch; *copied: how many. FT_OK if every key was read, else the error
 * that stopped the scan (what was read before it is copied anyway). */
int ckpt_catalog_salvage(const char *from, ckpt_catalog *into, const char *prefix, int *copied);
/* Deletes the catalog at dir (closed, its lock not held by anyone): its
 * files, its lock file and the folder. */
int ckpt_catalog_destroy(const char *dir);
/* Writes the batch atomically with sync=true. Frees the batch either way.
 * A failure (FT_ENOSPC / FT_EIO naming the file) leaves the catalog as it
 * was; the next write reopens the database first. */
int ckpt_catalog_write(ckpt_catalog *c, ckpt_batch *b);
void ckpt_batch_free(ckpt_batch *b);

/* Catalog keys, all under "ckpt/" so other components can add theirs:
 *   ckpt/info/<run>/<step %020lld>  ckpt_info JSON (state, pin, sizes)
 *   ckpt/man/<run>/<step %020lld>   checkpoint manifest JSON (immutable)
 *   ckpt/chunk/<hex>                first checkpoint that referenced a chunk
 *                                   ("<run>/<step>"), for "new bytes" */
void ckpt_key_info(char *buf, size_t n, const char *run, int64_t step);
void ckpt_key_man(char *buf, size_t n, const char *run, int64_t step);
void ckpt_key_chunk(char *buf, size_t n, const char hex[CKPT_HEX_LEN + 1]);
/* A rebuild from the manifests under way, or interrupted
 * (ckpt_store.c): written before the rebuild records anything and deleted
 * by the batch after its last one. A catalog that holds it may lack
 * checkpoints the store has: every open but a rebuild's refuses it. */
#define CKPT_KEY_INCOMPLETE "ckpt/incomplete"
/* Other components' records (ckpt_meta.c) are "sup/<key>". */
#define CKPT_META_PREFIX "sup/"
/* Scan prefixes: "ckpt/info/<run>/" (run NULL: every run's), "ckpt/man/". */
void ckpt_key_info_prefix(char *buf, size_t n, const char *run);
void ckpt_key_man_prefix(char *buf, size_t n);

/* ---- the store (ckpt_store.c) --------------------------------------------- */

/* ckpt_text, ckpt_get_text, ckpt_err_wrap: ckpt_leaf.h. */

typedef struct ckpt_task ckpt_task;

typedef struct ckpt_mem ckpt_mem;
typedef struct ckpt_dbase ckpt_dbase;
typedef struct ckpt_dseq ckpt_dseq;

struct ckpt_store {
  char *uri;
  char *dir; /* absolute: DIR of local:DIR, or an s3:// store's cache */
  ckpt_tier *tier;
  ckpt_catalog *cat;
  int read_only;    /* the catalog is read-only (also for a shard writer) */
  int shard_writer; /* chunks may be written (submit), the catalog not */
  int threads, chunk_mib, zstd_level;
  size_t queue_bytes;
  int64_t gc_grace_s;
  char catalog_aside[4200]; /* where opts->rebuild_catalog moved a damaged
                               catalog; "" if it did not */
  int salvaged_meta;        /* "sup/" records copied from it */
  char salvage_error[512];  /* why not all of them ("" if all) */

  /* Commit and the GC decision are serialised by this mutex (ckpt_gc.c). */
  pthread_mutex_t meta_mu;
  /* GC runs that took their clock reading (G1), under meta_mu: a commit
   * that checked its chunks (C3) before taking meta_mu checks them again if
   * this moved meanwhile (ckpt_commit.c). */
  uint64_t gc_epoch;
  /* ckpt_store_drop_memory calls on this handle (atomic; raised under
   * meta_mu): a memory-level commit whose meta names an older memory epoch
   * is refused under meta_mu (ckpt_store_memory_epoch). */
  uint64_t mem_drops;
  /* The checkpoints being committed (ckpt_commit.c): one commit of a
   * (run, step) at a time, since a commit lets meta_mu go while it writes
   * its manifest object. run: borrowed from the commit's meta. */
  pthread_mutex_t busy_mu;
  pthread_cond_t busy_cv;
  struct {
    const char *run;
    int64_t step;
  } busy[16];
  int nbusy;

  /* Writer pool (ckpt_writer.c). */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* tasks queued, or stopping */
  pthread_cond_t cv_space; /* inflight_bytes went down */
  ckpt_task *head, *tail;
  size_t inflight_bytes;
  int stopping;
  int nthreads_started;
  pthread_t *pool;
  int njobs_live;
  pthread_cond_t cv_jobs;

  /* Delta bases (ckpt_writer.c), under delta_mu: what this handle last
   * wrote for each (run, rank, tensor, byte range), the raw bytes a later
   * shard's chunk there is encoded against, and how many shards of each
   * (run, rank) were submitted since the last reset. */
  int full_every;
  pthread_mutex_t delta_mu;
  ckpt_dbase **dbase; /* CKPT_DBASE_BUCKETS chains; NULL: none yet */
  ckpt_dseq *dseq;
  uint64_t delta_gen; /* ckpt_store_delta_reset calls */

  /* Chunks kept in memory (NULL: none), and where reads found their bytes
   * (ckpt_store_read_stats; atomics). */
  ckpt_mem *mem;
  uint64_t rd_mem_bytes, rd_tier_bytes, rd_mem_rejected;
  /* the remote source (ckpt_store_set_remote; NULL: none), and its reads */
  ckpt_remote_fn remote;
  void *remote_ud;
  uint64_t rd_remote_bytes, rd_remote_rejected;
  /* manifest, index and shard object bytes read by loads (atomic) */
  uint64_t rd_meta_bytes;
};

/* ckpt_memory.c: chunks kept in memory, by hash (ckpt_store_keep_in_memory). */
int ckpt_mem_new(uint64_t max_bytes, ckpt_mem **out);
void ckpt_mem_free(ckpt_mem *m);
/* Keeps a copy of the chunk named hash (a no-op with m NULL, for bytes
 * already kept, or when out of memory). */
void ckpt_mem_put(ckpt_mem *m, const uint8_t *hash, const void *data, uint64_t len);
/* A buffer of len bytes to fill and hand to ckpt_mem_adopt (or back with
 * ckpt_mem_release): one an evicted chunk left, else malloc'd. NULL: out of
 * memory. m may be NULL (malloc). */
uint8_t *ckpt_mem_buffer(ckpt_mem *m, uint64_t len);
void ckpt_mem_release(ckpt_mem *m, uint8_t *buf, uint64_t len);
/* ckpt_mem_put of a buffer from ckpt_mem_buffer, taken without a copy. */
void ckpt_mem_adopt(ckpt_mem *m, const uint8_t *hash, uint8_t *buf, uint64_t len);
/* Copies the chunk named hash of len bytes into dst: 1, or 0 if not kept.
 * The caller verifies the hash. */
int ckpt_mem_get(ckpt_mem *m, const uint8_t *hash, void *dst, uint64_t len);
int ckpt_mem_has(ckpt_mem *m, const uint8_t *hash, uint64_t len);
/* ckpt_mem_get for a copy that is not a restore's (a push to a buddy):
 * the failpoint corrupt_memory_chunk leaves it alone. */
int ckpt_mem_copy(ckpt_mem *m, const uint8_t *hash, void *dst, uint64_t len);

/* ckpt_commit.c: 1 while a commit of (run, step) is under way in this
 * handle (between its C3 and C6: its manifest object may be in the tier
 * before its catalog record). */
int ckpt_commit_busy(ckpt_store *s, const char *run, int64_t step);

int ckpt_writer_start(ckpt_store *s);
void ckpt_writer_stop(ckpt_store *s);
/* Frees the delta bases (at close, the writer stopped). */
void ckpt_delta_free(ckpt_store *s);

/* The raw bytes of chunk (hash, len) into dst, verified against its name:
 * from this process's memory or the remote source when they have it,
 * else from the tier; a delta is decoded with its chain of bases (a base
 * found in memory ends the walk down the chain). FT_ENOENT (naming the
 * chunk) when its object or a base's is missing, FT_ECORRUPT (naming the
 * damaged one) when one is damaged. */
enum {
  CKPT_FETCH_TIER = 1,   /* the tier only (verify, prefetch) */
  CKPT_FETCH_NOSTATS = 2 /* not a read of ckpt_store_read_stats */
};
int ckpt_store_fetch(ckpt_store *s, const uint8_t hash[CKPT_HASH_LEN], uint64_t len, uint8_t *dst,
                     int flags);
/* Reads the shard objects of a format 2 manifest (each checked against its
 * name, and that it is the shard the manifest says) and fills its tensors;
 * a no-op for a manifest that has them. FT_ECORRUPT naming the shard
 * object that is missing or damaged. */
int ckpt_manifest_expand(ckpt_store *s, ckpt_manifest *m);
/* The same from a tier: ckpt_manifest_expand_tier (ckpt_manifest.c). */
/* Every chunk of sh's parts and every base of its deltas exists in t,
 * freshened (exists with freshen=1): FT_ENOENT naming the first missing. */
int ckpt_freshen_shard(ckpt_tier *t, const ckpt_shard *sh);
/* The keys of every checkpoint manifest object in t (manifests/<run>/
 * <step %020lld>.json; not marks or temp files), sorted, each once (a
 * cache and its bucket are both listed): *keys malloc'd, ckpt_keys_free. */
int ckpt_tier_manifest_keys(ckpt_tier *t, char ***keys, size_t *n);
void ckpt_keys_free(char **keys, size_t n);
/* ckpt_store_get_info: ckptstore.h */
int ckpt_store_put_info(ckpt_store *s, const ckpt_info *info);
/* Writes (or, for a plain unpinned COMMITTED record, deletes) the mark
 * object of info's checkpoint: its state and pin, for a catalog rebuild. */
int ckpt_store_put_mark(ckpt_store *s, const ckpt_info *info);
/* Reads the mark object of (run, step) from t: its state (COMMITTED, GOOD
 * or BAD) and pin; FT_ENOENT when it has none (COMMITTED, unpinned),
 * FT_EFORMAT when it is damaged. */
int ckpt_tier_get_mark(ckpt_tier *t, const char *run, int64_t step, int *state, int *pinned);

#endif
