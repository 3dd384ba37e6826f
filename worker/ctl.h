/*
 * ctl: the worker's control client (docs/design.md §3, common/ft_wire.h).
 *
 * Connects to the supervisor, proves the run token (read from the
 * environment, never argv), and keeps two threads: a reader that decodes
 * every frame (ASSIGN is queued for the training thread, KV_VALUE wakes the
 * waiting rendezvous call, STOP and the supervisor's disappearance end the
 * process) and a heartbeat thread. Sends are serialised by a mutex, so any
 * thread may send.
 *
 * Process exits decided here (documented in worker --help):
 *   FT_EXIT_OK on STOP from the supervisor; FT_EXIT_LOST when the supervisor is lost (the
 *   connection closes, or no heartbeat echo for heartbeat_timeout_s): no
 *   worker trains without a supervisor, so there is never a split brain.
 */
#ifndef CTL_H
#define CTL_H

#include <stdint.h>

#include "comm.h"

typedef struct ctl ctl;

typedef struct ctl_assign {
  uint64_t gen;
  int rank, world;
  int64_t restore_step; /* -1: fresh start */
  char rdzv[256];       /* key prefix for the collectives' rendezvous */
  int nskips;           /* global batch-index ranges never to train on */
  int64_t (*skips)[2];  /* [first, end); valid for the process's lifetime */
} ctl_assign;

/* Connects to addr ("HOST:PORT") and completes the handshake as (node,
 * slot) of run. hb_timeout_s: how long without any frame from the
 * supervisor before the worker gives up. */
int ctl_connect(const char *addr, const char *run, const char *token, uint32_t node, uint32_t slot,
                double hb_timeout_s, ctl **out);
/* Blocks until the supervisor assigns this worker to a gang. */
int ctl_wait_assign(ctl *c, ctl_assign *a);
/* The last completed step, carried by heartbeats. */
void ctl_set_step(ctl *c, int64_t step);
int ctl_send_step(ctl *c, int64_t step, double loss, double grad_norm, double tok_s, double ms);
int ctl_send_shard(ctl *c, int64_t step, int rank, const char *manifest_json);
int ctl_send_fault(ctl *c, int kind, int64_t step, const char *detail);
/* The rendezvous key/value store served by the supervisor, for comm. */
comm_kv ctl_kv(ctl *c);
/* Blocks until the supervisor sends STOP (the process then exits). */
void ctl_wait_stop(ctl *c);

#endif
