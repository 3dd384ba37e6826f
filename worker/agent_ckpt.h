/*
 * agent_ckpt: a host's checkpoint reports made one (worker/agent.c).
 *
 * WHY: every rank reports its saved shard (SHARD_SAVED, ~1-21 KB of JSON),
 * and the supervisor's commit checks that each rank's shard object is in
 * the store: at 131,072 ranks that is 131,072 reports to parse and file and
 * 131,072 objects to check per checkpoint, the largest part of the
 * supervisor's steady CPU. The agent sees its host's G reports first. When
 * all G have come for one checkpoint, it writes the host's leaf of the
 * checkpoint's index (ckpt_store_put_host: the G shard objects' names) and
 * sends one SHARD_SAVED of its own for the host, rank its first rank, the
 * host reference in the lowest rank's envelope. The supervisor files one
 * report per host and its commit checks one leaf per host (ckptstore).
 *
 * Nothing depends on it: every report the agent cannot make one of goes to
 * the supervisor as it came (the fallback), and the supervisor takes a mix
 * of host and rank references. Let go as they came: a memory-level
 * checkpoint's reports (no shard objects), reports without a stored shard
 * object, a checkpoint some slot has not reported within hold_ns of the
 * first report (its write failed; it is slow), one a slot left (a FAULT,
 * an exit, a report of a later checkpoint first), and all of them when the
 * store cannot be opened or the leaf cannot be written (logged).
 *
 * Model: the loop offers each SHARD_SAVED frame of a welcomed slot; the
 * checkpoint being gathered holds one frame per slot. Once whole (or let
 * go) it becomes a job; one thread does the jobs in order (parses the G
 * envelopes, opens the store the first time, writes the leaf) and hands
 * each back through a pipe, so the loop gets them in the order the
 * checkpoints were gathered: a host's reports reach the supervisor in each
 * rank's order (the supervisor's abandon_older relies on it).
 *
 * THREADING: every function but the thread's own runs on the agent's loop.
 */
#ifndef AGENT_CKPT_H
#define AGENT_CKPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct agent_ckpt agent_ckpt;

/* store: the checkpoint store's URI (NULL: every report goes as it came);
 * nslots: the host's G; hold_ns: how long a checkpoint waits for its last
 * slot's report. */
int agent_ckpt_new(const char *store, uint32_t node, uint32_t nslots, uint64_t hold_ns,
                   agent_ckpt **out);
/* Stops the thread after its job (a job then undone is dropped: the agent
 * is ending) and frees everything. NULL is a no-op. */
void agent_ckpt_free(agent_ckpt *c);

/* The pipe the loop polls (POLLIN): results to drain. */
int agent_ckpt_fd(const agent_ckpt *c);

/* Slot j's SHARD_SAVED frame f (whole, n bytes), of a welcomed slot. 1: the
 * agent holds it (copied; it goes on later, as it came or made one); 0: it
 * goes to the supervisor now, as it came. */
int agent_ckpt_offer(agent_ckpt *c, uint32_t slot, const uint8_t *f, size_t n, uint64_t now_ns);
/* Lets the checkpoint being gathered go as it came (a slot's FAULT, exit). */
void agent_ckpt_release(agent_ckpt *c);
/* When the checkpoint being gathered is let go unless whole (UINT64_MAX:
 * none); tick lets it go once that time has come. */
uint64_t agent_ckpt_deadline(const agent_ckpt *c);
void agent_ckpt_tick(agent_ckpt *c, uint64_t now_ns);

/* What the loop sends for a finished job: the frames as they came (relay),
 * or the host's own SHARD_SAVED (host: gen, step, its first rank, the
 * envelope text). */
typedef struct agent_ckpt_out {
  void (*relay)(void *ud, uint32_t slot, const uint8_t *f, size_t n);
  void (*host)(void *ud, uint64_t gen, int64_t step, uint32_t rank, const char *envelope);
  void *ud;
} agent_ckpt_out;
/* Hands every finished job to out, in order (on the fd's POLLIN). */
void agent_ckpt_drain(agent_ckpt *c, const agent_ckpt_out *out);
/* Jobs not yet drained, and whether a checkpoint is being gathered. */
int agent_ckpt_busy(const agent_ckpt *c);

#endif
