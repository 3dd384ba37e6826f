/*
 * agent: the per-host agent, ftagent (common/ft_wire.h, "AGENTS").
 *
 * WHY: a node with G GPUs used to hold G control connections to the
 * supervisor, each with its own heartbeat. The agent holds one for the
 * whole host: it starts the host's G workers itself, each on one end of a
 * unix socket pair (worker --connect fd:K), and relays their frames inside
 * RELAY unchanged, so every worker still proves the run token to the
 * supervisor end to end. Their heartbeats stop at the agent, which echoes
 * them (while it hears the supervisor) and sends one HOSTBEAT per interval
 * for the host; it reports each worker's start and exit (SLOT) with the
 * wait status waitpid gave, which the supervisor cannot see for itself on
 * a remote host. With the checkpoint store's URI (--store) it makes its
 * host's G checkpoint reports one: the host's leaf of the checkpoint's
 * index in the store, one SHARD_SAVED for the host (agent_ckpt.h).
 *
 * Process model: single-threaded, one poll loop (agent.c). Workers share
 * the agent's process group, stdout and stderr (the node's log); each dies
 * with the agent (PR_SET_PDEATHSIG), so killing the agent or its process
 * group leaves none behind.
 */
#ifndef AGENT_H
#define AGENT_H

#include <stdint.h>

typedef struct agent_opts {
  const char *connect; /* the supervisor's control port, "HOST:PORT" (borrowed) */
  uint32_t node;       /* this host's node index in the pool */
  uint32_t slots;      /* G: workers on slots 0..G-1, 1..FT_WIRE_MAX_SLOTS */
  const char *token;   /* the run token (borrowed; never logged, never on argv) */
  const char *store;   /* the checkpoint store's URI (borrowed; NULL: none): the
                          host's checkpoint reports are made one there
                          (agent_ckpt.h) */
  char *const *argv;   /* the worker's command, NULL-terminated (borrowed); the
                          agent appends --connect fd:K --node N --slot J for
                          each worker */
} agent_opts;

/* Connects, says HELLO as the node's agent, starts the workers and relays
 * for them until the run no longer needs them. Returns the exit code for
 * the process (FT_EXIT_* of ft_wire.h):
 *   FT_EXIT_OK    stopped (the supervisor's STOP, SIGTERM, SIGINT); it
 *                 outlives its workers otherwise (the supervisor starts
 *                 new ones on it: SLOT start)
 *   FT_EXIT_FAIL  refused by the supervisor (STOP instead of WELCOME),
 *                 a protocol error in the handshake, an internal error
 *   FT_EXIT_USAGE a malformed token, bad options
 *   FT_EXIT_LOST  the supervisor was lost (not reachable, its connection
 *                 closed, or silent for 4 heartbeat intervals)
 * Before it returns, every worker it started has exited and been reaped
 * (SIGTERM, then SIGKILL after 5 s). Writes its log lines to stderr. */
int agent_run(const agent_opts *o);

#endif
