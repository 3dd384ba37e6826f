/*
 * sup_conn: one control connection (a worker) on the supervisor's libevent
 * loop: framing and decoding with ft_wire, the HELLO handshake, sends.
 *
 * Life of a connection:
 *   accepted -> CHALLENGE sent (fresh nonce); frames capped at
 *   FT_WIRE_PREAUTH_MAX_FRAME -> exactly one frame, a HELLO whose run and
 *   MAC (ft_wire_hello_verify) are right -> ops.on_hello decides (identity,
 *   generation); on accept it sends WELCOME -> authenticated: frames up to
 *   FT_WIRE_MAX_FRAME, each decoded and handed to ops.on_msg.
 * Any decode error, a type a worker may not send, a bad MAC or a wrong run
 * closes THIS connection only, with the reason handed to ops.on_close
 * (which logs it); nothing a peer sends can stop the supervisor.
 *
 * Unauthenticated connections cost a descriptor each and anyone on the host
 * can open them, so they are bounded (sup_conn_set_limits): one that sends
 * no accepted HELLO within hello_timeout_s is closed ("no HELLO within ..."),
 * and when max_unauth are waiting for their HELLO a new one evicts the
 * oldest ("too many connections without HELLO"). A worker's handshake takes
 * milliseconds, so neither touches a real worker.
 *
 * Output is bounded too: what the kernel does not take waits in the
 * connection's queue, and a send that would make the queue hold more than
 * the cap (SUP_CONN_MAX_QUEUED; sup_conn_set_max_queued) is not queued: the
 * peer is not reading. The connection is then closed from the loop (not
 * inside the send: the sender may be walking a list that on_close edits),
 * with no flush, reason "output queue over its cap: ..." and is_error 1;
 * sends meanwhile are dropped. A gang worker closed so goes through the
 * same on_close as one whose peer hung up: it is that worker's fault.
 * sup_conn_overflowed says how many bytes it was holding.
 *
 * Freeing is deferred to the loop (a zero timeout), so a handler may close
 * the connection it is handling; after sup_conn_close no callback of that
 * connection fires again.
 * Threads: the loop's thread only.
 */
#ifndef SUP_CONN_H
#define SUP_CONN_H

#include "ft_wire.h"

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sup_conn sup_conn;

typedef struct sup_conn_ops {
  /* A verified HELLO (run and MAC right). Return 0 to accept (the handler
   * sends WELCOME), or non-zero: the connection is closed with `reason`
   * (filled by the handler). m is borrowed for the call. */
  int (*on_hello)(void *ud, sup_conn *c, const ft_msg *m, char *reason, size_t rlen);
  /* Every later message (sender type already checked). Borrowed. */
  void (*on_msg)(void *ud, sup_conn *c, const ft_msg *m);
  /* The connection is closing; called once, the user pointer still set.
   * is_error: 1 when the peer broke the protocol (or the handler closed
   * it with a reason), 0 for an orderly end (the peer closed, or we did
   * without a reason). */
  void (*on_close)(void *ud, sup_conn *c, const char *reason, int is_error);
} sup_conn_ops;

/* Takes ownership of fd (closed on failure too). run/token are borrowed
 * and must outlive the connection. */
int sup_conn_new(struct event_base *base, int fd, const char *run, const char *token,
                 const sup_conn_ops *ops, void *ud, sup_conn **out);
/* Encodes and queues m (gen/run filled by the caller). FT_EINVAL on a bad
 * message; sends on a closing connection are dropped (0). */
int sup_conn_send(sup_conn *c, const ft_msg *m);
/* Closes: the reason goes to on_close (non-empty reason = an error); with
 * flush, queued output (a STOP) is written first (bounded by 2 s).
 * Idempotent. */
void sup_conn_close(sup_conn *c, const char *reason, int flush);
/* Limits for connections without an accepted HELLO (process-wide; the
 * defaults are SUP_CONN_HELLO_TIMEOUT_S and SUP_CONN_MAX_UNAUTH). Applies
 * to connections accepted afterwards. */
#define SUP_CONN_HELLO_TIMEOUT_S 5.0
#define SUP_CONN_MAX_UNAUTH 64
void sup_conn_set_limits(double hello_timeout_s, int max_unauth);
/* The cap on one connection's queued output (bytes the kernel has not
 * taken). Sized for the largest burst a healthy worker can be owed: a
 * worker has at most one KV_GET in flight (worker/ctl.c waits for each
 * answer), so at most one KV_VALUE, itself at most one frame
 * (FT_WIRE_MAX_FRAME, 16 MiB; the restore manifest, tens of MB at 16,384
 * ranks, is published in 1 MiB parts and fetched one part per request),
 * plus small frames (heartbeat echoes, ASSIGN <= 21 KiB, STOP, BUDDIES
 * <= 4 KiB, DOCTOR). Twice the largest frame leaves 16 MiB for those. The
 * kernel's own buffer (several MB) comes on top. */
#define SUP_CONN_MAX_QUEUED ((size_t)2 * FT_WIRE_MAX_FRAME)
/* Sets the cap for every connection (process-wide; 0: the default). */
void sup_conn_set_max_queued(size_t bytes);
/* How many connections are waiting for their HELLO now. */
int sup_conn_unauth_count(void);
/* How many connections with a socket of their own are open (an agent's
 * slots are not: they are virtual). */
int sup_conn_socket_count(void);
/* Frees every connection still open at shutdown (no callbacks). */
void sup_conn_free_all(void);

/* ---- agents -------------------------------------------------------------
 *
 * A per-host agent (ftagent) says HELLO on a connection of its own, with
 * slot FT_WIRE_AGENT_SLOT. The HELLO's handler (on_hello) makes it an
 * agent's: from then on it may send only RELAY, HOSTBEAT and SLOT, and each
 * of its slots is a virtual connection ("kid") that the rest of the
 * supervisor sees as a worker's connection like any other: the same ops
 * (kid_ops), its own CHALLENGE, HELLO and MAC, sends, close and limits.
 *   SLOT open      a kid is made for the slot; its CHALLENGE goes out
 *   RELAY          the frame inside is the kid's, handled as a socket's
 *                  would be (4 KiB before its HELLO, 16 MiB after)
 *   HOSTBEAT       each beat is handed to its kid's on_msg as a HEARTBEAT
 *                  (sup_conn_msg_age_s tells its age; the echo a handler
 *                  sends for it is dropped: the agent echoed it), then the
 *                  HOSTBEAT itself to the agent's on_msg (which echoes it)
 *   SLOT exited    to the agent's on_msg (the exit status), then the kid
 *                  closes as if its peer had hung up
 * A kid's sends are RELAYs on the agent's connection (its output cap is the
 * agent's); a kid closed by us sends the agent SLOT closed. The agent's
 * connection closing (its on_close first) closes every kid, with reason
 * "its agent's connection closed: ..." and is_error 0. */
int sup_conn_make_agent(sup_conn *c, uint32_t nslots, const sup_conn_ops *kid_ops, void *kid_ud);
int sup_conn_is_agent(const sup_conn *c);
/* A kid's agent connection; NULL for a connection of its own (or a kid
 * whose agent is gone). */
sup_conn *sup_conn_parent(const sup_conn *c);
uint32_t sup_conn_slot(const sup_conn *c);
/* The age of the message on_msg is handed now: a HOSTBEAT beat's (the
 * agent's age_ms), 0 for any other. */
double sup_conn_msg_age_s(const sup_conn *c);
/* An agent's kids that are open. */
size_t sup_conn_kids(const sup_conn *c);
/* Is k agent's open, authenticated kid on slot (and agent itself open), so
 * that a host frame (ft_wire.h) sent on agent reaches k's worker as k's own
 * frame would? */
int sup_conn_kid_open(const sup_conn *agent, const sup_conn *k, uint32_t slot);

uint64_t sup_conn_id(const sup_conn *c);
/* Bytes the peer sent that the loop has not read yet (the kernel's receive
 * queue): a busy loop's backlog, not the peer's silence. */
size_t sup_conn_unread(const sup_conn *c);
void sup_conn_set_user(sup_conn *c, void *user);
void *sup_conn_user(const sup_conn *c);
const char *sup_conn_peer(const sup_conn *c);
/* For a connection closed for going over the output cap: the bytes it
 * would have held (queued plus the frame that did not fit); else 0. */
size_t sup_conn_overflowed(const sup_conn *c);

#endif
