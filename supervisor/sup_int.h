/*
 * sup_int.h: the supervisor's run state, shared by its program modules:
 *   sup_main.c      command line, setup (store, events, listener), exit codes
 *   sup_run.c       control messages: HELLO identity, fencing, heartbeats,
 *                   KV, STEP, SHARD_SAVED -> commit, FAULT; persisted state
 *   sup_recovery.c  the recovery state machine, launching, process exits,
 *                   hang checks, shutdown
 * and the pure modules sup_kv, sup_gang, sup_launch, sup_events, sup_conn.
 * Not a public header. Single-threaded: everything runs on the loop.
 */
#ifndef SUP_INT_H
#define SUP_INT_H

#include "ckptstore.h"
#include "ft_runfile.h"
#include "ft_wire.h"
#include "sup_conn.h"
#include "sup_events.h"
#include "sup_gang.h"
#include "sup_kv.h"

#include <event2/event.h>
#include <event2/listener.h>
#include <stdint.h>
#include <sys/types.h>

/* Exit codes of supervise (documented in --help). */
#define SUP_EXIT_DONE 0
#define SUP_EXIT_FAILED 1
#define SUP_EXIT_USAGE 2
#define SUP_EXIT_STORE 4
#define SUP_EXIT_INTERRUPTED 130

typedef enum sup_state {
  SUP_STARTING = 0, /* first gang launched, not yet assigned */
  SUP_RUNNING,      /* the gang trains */
  SUP_RECOVERING,   /* see sup_rphase */
  SUP_FINISHING,    /* STOP(done|shutdown) sent; waiting for every process */
  SUP_DONE,
  SUP_FAILED,
} sup_state;

typedef enum sup_rphase {
  SUP_RP_NONE = 0,
  SUP_RP_STOPPING, /* STOP + SIGTERM sent to the old gang; waiting for reaps */
  SUP_RP_WAITING,  /* when_no_spares: wait; re-planning every second */
  SUP_RP_FORMING,  /* new gang launched; waiting for every HELLO */
  SUP_RP_ASSIGNED, /* ASSIGN sent; waiting for the first STEP */
} sup_rphase;

typedef struct sup_worker {
  int node, slot;
  pid_t pid;         /* last launched process; 0: none */
  int alive;         /* launched and not yet reaped */
  sup_conn *conn;    /* NULL when not connected */
  int hello;         /* HELLO accepted for the current process */
  double last_msg_s; /* ft_now_s of the last frame (or of the launch) */
  int rank;          /* in the current gang; -1 otherwise */
  uint64_t gen;      /* generation assigned (0: none / spare) */
} sup_worker;

typedef struct sup_node {
  int role;   /* enum sup_role */
  pid_t pgid; /* process group of its workers; 0: none */
  int faulty; /* blamed during the current recovery */
  int term_sent, kill_sent;
  sup_worker *w; /* G workers */
} sup_node;

typedef struct sup_pending_ckpt {
  struct sup_pending_ckpt *next;
  int64_t step;
  int world;
  int nhave;
  ckpt_shard **shards;            /* [world], by rank */
  char *state, *config, *metrics; /* from rank 0's envelope */
  double loss;
} sup_pending_ckpt;

typedef struct sup {
  /* configuration */
  ft_runfile rf;
  char runfile_path[4096];
  char state_dir[4096];
  char store_uri[4096];
  char worker_path[4096];
  long long steps_override; /* -1: none */
  const char *const *sets;
  int nsets;
  int N, S, G, nnodes;
  int no_spares; /* enum sup_no_spares */
  int command_launcher;

  /* resources */
  struct event_base *base;
  struct evconnlistener *lis;
  int port;
  char connect_addr[64];
  char token[FT_WIRE_TOKEN_HEX + 1];
  ckpt_store *store;
  sup_events *ev;
  sup_kv *kv;
  struct event *tick, *grace, *waitpoll;
  struct event *sig_chld, *sig_int, *sig_term;

  /* the pool and the gang */
  sup_node *nodes;
  int gang[SUP_MAX_NODES];
  int ngang;

  /* run state */
  sup_state state;
  sup_rphase rphase;
  uint64_t gen;
  int restarts;
  int exit_code;
  char fail_reason[512];
  double t_start_s;  /* ft_now_s at start */
  int64_t last_step; /* last step rank 0 reported in this process */
  double last_loss, last_tps;
  int64_t restore_step; /* of the current generation */
  int chaos_done;
  int64_t final_step; /* train.steps */
  sup_pending_ckpt *pending;

  /* the recovery in progress */
  double t_detect_s, t_stopped_s;
  int64_t fault_last_step;
  int interrupted; /* SIGINT/SIGTERM seen */
} sup;

/* ---- sup_run.c ---------------------------------------------------------- */
extern const sup_conn_ops sup_run_conn_ops;
int sup_kv_reply_init(sup *s); /* creates s->kv with its libevent reply */
/* Writes {gen, status, quarantined, restarts} under "<run>/state" (synced).
 * status: "running" | "done" | "failed". */
int sup_persist(sup *s, const char *status);
/* Reads it back; FT_ENOENT if this run has none. *status: malloc'd. */
int sup_persist_load(sup *s, uint64_t *gen, char **status, int *restarts);
/* Sends a message of type t from the supervisor (run/gen filled). */
int sup_send(sup *s, sup_conn *c, ft_msg *m, uint64_t gen);
void sup_stop_worker(sup *s, sup_worker *w, ft_stop_reason why, const char *detail);
void sup_pending_clear(sup *s);

/* ---- sup_recovery.c ----------------------------------------------------- */
/* Launches every node, forms the first gang (STARTING). */
int sup_recovery_start(sup *s);
/* Called when a worker's HELLO was accepted / its first STEP came. */
void sup_recovery_hello(sup *s, sup_worker *w);
void sup_recovery_first_step(sup *s, int64_t step);
/* A fault. node -1: no node blamed. */
void sup_recovery_fault(sup *s, const char *kind, int node, int slot, pid_t pid, const char *detail,
                        int blame);
/* The final checkpoint is committed. */
void sup_recovery_done(sup *s);
/* The run cannot go on. */
void sup_recovery_fail(sup *s, const char *reason);
/* libevent callbacks */
void sup_recovery_on_sigchld(evutil_socket_t fd, short what, void *arg);
void sup_recovery_on_signal(evutil_socket_t fd, short what, void *arg);
void sup_recovery_on_tick(evutil_socket_t fd, short what, void *arg);
void sup_recovery_on_grace(evutil_socket_t fd, short what, void *arg);
void sup_recovery_waitpoll(evutil_socket_t fd, short what, void *arg);

static inline int sup_in_gang(const sup *s, int node) {
  for (int i = 0; i < s->ngang; i++)
    if (s->gang[i] == node)
      return 1;
  return 0;
}

#endif
