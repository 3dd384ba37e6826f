/*
 * buddy: this worker's side of checkpoint.replicate (docs/design.md §6).
 *
 * It serves a replica server (ckptstore/ckpt_replica.h) on the worker's
 * own address, so other ranks can push their shards into this process's
 * memory, and tells the supervisor where; and it pushes every shard this
 * rank saves to the buddies the supervisor names (REPLICA), from a thread
 * of its own: training never waits for it. Only the newest shard is
 * pending: a push still running when the next shard is saved finishes,
 * and the one after goes next (the ones between are skipped). A buddy that
 * fails is reported once (and once more when it works again); a restore
 * then reads what the buddy lacks from the store.
 */
#ifndef BUDDY_H
#define BUDDY_H

#include <stdint.h>

#include "ckptstore.h"
#include "ctl.h"
#include "snap.h"

typedef struct buddy buddy;

/* Starts the replica server on host (an address of this host) over sn's
 * store (which keeps its chunks in memory), sends its address to the
 * supervisor, and starts the pushing thread. */
int buddy_start(snap *sn, ctl *c, const char *host, const char *run, uint32_t node, uint32_t slot,
                buddy **out);
/* Queues a copy of shard for the buddies, replacing one not yet pushed
 * (only the newest matters). report (malloc'd, taken; may be NULL): the
 * SHARD_SAVED text of a memory-level checkpoint, sent to the supervisor once
 * at least one buddy holds every chunk, and dropped if a newer shard
 * replaces this one first. NULL b: frees report, nothing else. */
void buddy_offer(buddy *b, const ckpt_shard *shard, char *report);
/* Waits until the shard offered last is pushed (and its report sent) or
 * dropped, at most 15 s. NULL b is a no-op. */
void buddy_flush(buddy *b);
/* Stops both (a push in flight is cut short). NULL is a no-op. */
void buddy_stop(buddy *b);

#endif
