/*
 * snap: the trainer's checkpoints through ckptstore.
 *
 * The complete training state is exposed as named tensors plus metadata:
 *   param/<group>, adam_m/<group>, adam_v/<group>   (fp32, 1-D, one per
 *   ft_gpt2 group: wte, wpe, h.0 .. h.L-1, lnf)
 *   state_json: {"version":1,"step":S,"seq":"N","rng":"N","config_hash":"hex"}
 *   config_json: the run file's model/train/data config (ft_runfile_config_json)
 *
 * snap_take has the engine copy the state into its host staging buffer
 * (the only part training waits for; on a GPU only its enqueueing) and
 * submits it; a committer thread waits for each
 * shard to be durable and commits the checkpoint, in step order. Before a
 * new snapshot reuses the staging buffer, snap_take waits until the store
 * has released the previous one (back-pressure: at most one snapshot in
 * flight per staging buffer).
 */
#ifndef SNAP_H
#define SNAP_H

#include <stdint.h>

#include "engine.h"
#include "ft_runfile.h"

typedef struct snap snap;

/* The scalar part of the training state. */
typedef struct train_state {
  int64_t step;         /* optimizer steps completed */
  uint64_t seq;         /* next global sequence index of the data loader */
  uint64_t rng;         /* generator state (after initialisation) */
  char config_hash[65]; /* SHA-256 hex of the config JSON */
  int nskips;           /* global batch-index ranges [first, end) never */
  int64_t (*skips)[2];  /* trained on (loss-spike recovery); malloc'd */
} train_state;

/* Called from the committer thread when this rank's shard of a checkpoint
 * is durable, instead of committing it (a gang's worker reports the shard
 * to the supervisor, which commits once every rank has). The shard stays
 * owned by snap. */
typedef int (*snap_durable_fn)(void *ud, const ckpt_meta *meta, const ckpt_shard *shard);

/* Opens the store at uri and starts the committer thread. With on_durable
 * NULL the store is opened as the catalog's writer and snap commits each
 * checkpoint itself (standalone, world 1); otherwise it only writes shards
 * and calls on_durable. full_every: checkpoint.full_every (delta chunks,
 * ckpt_store_opts). *out owned by the caller (snap_free). */
int snap_open(const char *uri, const char *run, int chunk_mib, int zstd_level, int full_every,
              snap_durable_fn on_durable, void *ud, snap **out);
/* Waits for every submitted checkpoint to commit, stops the committer and
 * closes the store. NULL is a no-op. */
void snap_free(snap *s);

/* Snapshots this rank's shards (engine e) and st as checkpoint st->step
 * with the given config JSON, loss and metrics JSON; returns once the copy
 * is taken (or, for an engine with a fence, enqueued) and submitted.
 * persist 0: a memory-level checkpoint (checkpoint.persist_every): its
 * chunks are hashed and kept in this process's memory only, nothing is
 * written to the store; on_durable sees meta->level CKPT_LEVEL_MEMORY
 * (needs snap_keep_in_memory and on_durable). */
int snap_take(snap *s, engine *e, int rank, int world, const train_state *st,
              const char *config_json, double loss, const char *metrics_json, int persist);
/* checkpoint.require memory: on = 1 reports each persisted checkpoint's
 * shard twice: at memory level (meta->level CKPT_LEVEL_MEMORY) once it is
 * hashed and in memory, then at the store's level once written. */
void snap_set_memory_first(snap *s, int on);
/* checkpoint.moments: exact (the default), bf16 (both Adam moments rounded
 * to bfloat16) or q8 (first moments block-quantized to 8 bits, second
 * moments to 8 bits on a log scale): the form of the "adam_m/" and
 * "adam_v/" tensors of persisted checkpoints (ckpt_part.lossy); weights are
 * always exact. FT_EINVAL for a value out of the enum. */
int snap_set_moments(snap *s, ft_rf_moments moments);
/* Waits until every submitted checkpoint is committed; returns the first
 * error of any commit (FT_OK if all committed). */
int snap_drain(snap *s);
/* The same wait; returns the error of the checkpoint completed last only
 * (FT_OK: it is durable; else its detail is set on the calling thread), for
 * a caller that skips failed checkpoints. */
int snap_drain_last(snap *s);

/* Called from the committer thread when a checkpoint of step fails (rc, and
 * the detail, which names the file or request and the cause: a full disk,
 * an I/O error, a quota, S3 refusing). A gang's worker reports it to the
 * supervisor as FAULT storage and trains on. */
typedef void (*snap_fault_fn)(void *ud, int64_t step, int rc, const char *detail);
void snap_set_fault(snap *s, snap_fault_fn fn, void *ud);

/* Keeps a copy of the chunks this rank writes in memory (at most
 * max_bytes): a restore in this process (an in-process rejoin) reads them
 * from there, each verified by its hash, before the store. */
int snap_keep_in_memory(snap *s, uint64_t max_bytes);
/* Checkpoint `step` (-1: the newest the catalog knows now; none: FT_OK with
 * nothing read) read into memory (snap_keep_in_memory first), each chunk
 * verified: a warm spare holds it before it is needed. The manifest comes
 * from the store, so a worker whose catalog is a per-host cache's (S3)
 * fetches what the supervisor committed. *bytes: bytes read. Stops early
 * once *cancel is non-zero. */
int snap_prefetch(snap *s, int64_t step, const int *cancel, uint64_t *bytes);
/* The store (for the replica channel, ckpt_replica.h). */
ckpt_store *snap_store(snap *s);
/* The world size that wrote checkpoint `step` (the catalog caught up
 * first). */
int snap_world(snap *s, int64_t step, int *world);
/* Where this process's restores found their chunk bytes so far. */
void snap_read_stats(snap *s, ckpt_read_stats *st);

/* Newest committed step of the run, or FT_ENOENT. */
int snap_latest(snap *s, int64_t *step);
/* Restores this rank's shards of checkpoint `step` (written at any world
 * size) into e, and st. *config_json gets the checkpoint's config JSON
 * (malloc'd; caller frees). */
int snap_restore(snap *s, int64_t step, engine *e, train_state *st, char **config_json);
/* The same from step's manifest given as JSON text (from the supervisor: a
 * memory-level checkpoint is in no catalog this host can read). */
int snap_restore_json(snap *s, int64_t step, const char *manifest_json, engine *e, train_state *st,
                      char **config_json);
/* The state JSON of a checkpoint (malloc'd):
 * {"version":1,"step":S,"seq":"N","rng":"N","config_hash":"hex","skips":[[f,e],...]} */
char *snap_state_json(const train_state *st);

#endif
