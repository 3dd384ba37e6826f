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

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "ft_wire.h"

typedef struct ctl ctl;

typedef struct ctl_assign {
  uint64_t gen;
  int rank, world;
  int64_t restore_step; /* -1: fresh start */
  char rdzv[256];       /* key prefix for the collectives' rendezvous */
  int nskips;           /* global batch-index ranges never to train on */
  int64_t (*skips)[2];  /* [first, end); valid until the next ASSIGN arrives */
} ctl_assign;

/* Connects to addr ("HOST:PORT": a host name, an IPv4 address, or an
 * IPv6 one in brackets; or "fd:K": the already-connected socket on file
 * descriptor K, inherited from the per-host agent ftagent, worker/agent.h)
 * and completes the handshake as (node, slot) of run. hb_timeout_s: how long without any frame from
 * the supervisor before the worker gives up. */
int ctl_connect(const char *addr, const char *run, const char *token, uint32_t node, uint32_t slot,
                double hb_timeout_s, ctl **out);
/* The environment variable in which ftagent tells a worker connected
 * through fd:K the address of its own connection to the supervisor. */
#define CTL_LOCAL_ADDR_ENV "FT_CTL_LOCAL_ADDR"
/* This host's address on the control connection (the route to the
 * supervisor), without a port, e.g. "10.0.0.2"; through fd:K, the
 * agent's (CTL_LOCAL_ADDR_ENV: a unix socket has no IP address). */
int ctl_local_addr(const ctl *c, char *buf, size_t len);
/* Blocks until the supervisor assigns this worker to a gang: a generation
 * newer than the last one taken and not older than a rejoin's. */
int ctl_wait_assign(ctl *c, ctl_assign *a);
/* In-process rejoin (recovery.in_process; STOP rejoin in ft_wire.h).
 * ctl_aborted: 1 once the supervisor asked this worker to leave the
 * generation it trains in. ctl_rejoin: called by the training thread once
 * out of that generation (comm freed): waits for the request if it has not
 * come yet, acknowledges it (a heartbeat of the new generation) and
 * returns the new generation; ctl_wait_assign then takes its ASSIGN. */
int ctl_aborted(ctl *c);
/* For a thread beside a worker waiting for its ASSIGN (a warm spare): the
 * newest checkpoint step the supervisor said is committed once it is past
 * `after`, or whatever it is after timeout_ms; -2 once *stop is non-zero
 * (set it, then ctl_wake). */
int64_t ctl_wait_committed(ctl *c, int64_t after, int timeout_ms, const int *stop);
/* Wakes every thread waiting in ctl. */
void ctl_wake(ctl *c);
uint64_t ctl_rejoin(ctl *c);
/* The last completed step, carried by heartbeats. */
void ctl_set_step(ctl *c, int64_t step);
/* val_loss: NaN but at train.val_every steps (rank 0). */
int ctl_send_step(ctl *c, int64_t step, double loss, double grad_norm, double tok_s, double ms,
                  double val_loss);
int ctl_send_shard(ctl *c, int64_t step, int rank, const char *manifest_json);
/* The generation the training thread is in (0 before its first ASSIGN). */
uint64_t ctl_train_gen(ctl *c);
/* The comm of the generation the training thread is in (NULL: none, before
 * it is freed): a STOP rejoin aborts it from the reader thread
 * (comm_abort), so a collective blocked on a peer that neither answers nor
 * closes its connection (a cut link) fails at once instead of at
 * watchdog.collective_timeout_s. */
void ctl_set_comm(ctl *c, comm *cm);
/* SHARD_SAVED of a checkpoint taken in generation gen, from another thread
 * (the replica pusher), later: sent only if the worker is still in gen (not
 * rejoining, no newer ASSIGN); otherwise dropped (FT_OK). */
int ctl_send_shard_of(ctl *c, uint64_t gen, int64_t step, int rank, const char *manifest_json);
int ctl_send_fault(ctl *c, int kind, int64_t step, const char *detail);
/* The node doctor's report (JSON text, doctor.h), before the first ASSIGN. */
int ctl_send_doctor(ctl *c, const char *report);
/* fn runs (on a thread of its own, one at a time) each time the supervisor
 * asks for the doctor's checks again (DOCTOR from the supervisor: an idle
 * spare's periodic check); it sends the new report itself. */
void ctl_set_doctor(ctl *c, void (*fn)(void *ud), void *ud);
/* checkpoint.replicate: tells the supervisor where this worker's replica
 * server listens ("HOST:PORT"); ctl_buddies copies the newest list of
 * replica servers the supervisor said to push to (comma-separated, "" none)
 * and returns how many lists have come (0: none yet). */
int ctl_send_replica(ctl *c, const char *addr);
uint64_t ctl_buddies(ctl *c, char *buf, size_t len);
/* The run token this worker proved (for the replica channel). */
const char *ctl_token(const ctl *c);
/* The rendezvous key/value store served by the supervisor, for comm. */
comm_kv ctl_kv(ctl *c);
/* For the per-host agent (worker/agent.h), which dials the supervisor as a
 * worker does. ctl_dial: connects to addr (HOST:PORT) and reads the
 * supervisor's first frame into *m (decoded: release it), waiting 5 s for
 * it and connecting again with backoff for up to 60 s when it does not come
 * (ctl.c says why); *fd is the connection (-1 on failure), rx holds any
 * bytes after that frame. who: the log lines' prefix. ctl_read_frame:
 * reads one whole frame of at most max_len bytes from the blocking socket
 * fd into *m, rx holding the leftovers; FT_ENET with errno EAGAIN when
 * SO_RCVTIMEO passed. */
int ctl_dial(const char *addr, const char *who, int *fd, ft_buf *rx, ft_msg *m);
int ctl_read_frame(int fd, ft_buf *b, size_t max_len, ft_msg *m);
/* Blocks until the supervisor sends STOP (the process then exits), or asks
 * this worker to rejoin (returns). */
void ctl_wait_stop(ctl *c);

#endif
