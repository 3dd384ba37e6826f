/*
 * sup_int.h: the supervisor's run state (struct sup) and the calls between
 * its program modules. Not a public header. The modules, in layers; a file
 * calls only into its own layer or lower ones (tests/unit/layering.py
 * checks it on every build's objects), and the few calls that must go up
 * go through s->hooks (sup_hooks), which sup_main.c wires:
 *
 *  5 main       sup_main.c        command line, setup (store, events,
 *                                 listener, timers), the loop, exit codes
 *               sup_doctor_cli.c  `supervise doctor`
 *               sup_status.c      `supervise status|report`, the HTTP client
 *  4 operator   sup_http.c        the port, /status, the dashboard, the
 *                                 operator's POSTs
 *               sup_metrics.c     /metrics, folded from the events
 *  3 detectors  sup_run.c         control messages: HELLO identity, fencing,
 *                                 heartbeats, KV, STEP, SHARD_SAVED -> commit,
 *                                 FAULT; the commit queue's completions
 *               sup_watch.c       the watchdog's detectors on the STEP/FAULT
 *                                 streams: loss spikes and GOOD marks, Xid
 *                                 faults, SDC, stragglers and slow links,
 *                                 progress hangs, damaged checkpoints at a
 *                                 restore
 *               sup_doctor.c      the node doctor's verdicts
 *               sup_timers.c      the recovery's clock and signals: silence
 *                                 on the tick, SIGCHLD, grace, teardown,
 *                                 collective and rejoin timers, SIGINT
 *  2 recovery   sup_recovery.c    the recovery state machine: faults, blame,
 *                                 plans, launches, process exits judged,
 *                                 rollbacks, shutdown; checked invariants
 *  1 act        sup_act.c         send, stop, persist and records, GOOD
 *                                 marks, stacks asked for, log paths
 *               sup_nodes.c       launch and signal nodes, quarantine and
 *                                 Slurm drains, why nodes left, /proc
 *               sup_stall.c       the loop's own stalls, measured
 *               sup_seal.c        the run file's sealed snapshot, the
 *                                 generation floor
 *  0 parts      sup_ckpt_events.c, sup_commitq, sup_shardq, sup_view,
 *               sup_assets, sup_listing (supervise) and the ftsup library: sup_conn,
 *               sup_events, sup_gang, sup_history, sup_kv, sup_launch,
 *               sup_rollback, sup_wake. They know nothing of the run.
 *
 * Threads: struct sup is the loop's alone. Beside the loop run: the commit
 * queue's lane threads (memory, store, record) and its GC thread, which
 * touch only the store, the state directory and the job they were handed
 * (sup_pending_ckpt), and hand it back to the loop to report; the shard
 * reports' parser (sup_shardq); the event log's syncer (sup_events); the
 * first launch's log-file maker (sup_launch, sup_logprep). None of them
 * reads struct sup's loop state, so no write of the store or the state
 * directory, and no parse of a checkpoint's reports, blocks the loop.
 */
#ifndef SUP_INT_H
#define SUP_INT_H

#include "ckptstore.h"
#include "ft_runfile.h"
#include "ft_wire.h"
#include "sup_conn.h"
#include "sup_events.h"
#include "sup_history.h"
#include "sup_gang.h"
#include "sup_kv.h"
#include "sup_doctor.h"
#include "sup_recovery.h"
#include "sup_rollback.h"
#include "sup_run.h"
#include "sup_seal.h"
#include "sup_watch.h"

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

/* Grace periods: how long processes asked to stop (STOP + SIGTERM) get
 * before SIGKILL. A finished run's workers get longer: they may still be
 * flushing their last checkpoint's shards. */
#define SUP_GRACE_STOP_S 2.0 /* recovery rounds, failures, interrupts */
#define SUP_GRACE_DONE_S 5.0 /* the run is done */
/* when_no_spares: wait re-plans this often (seconds). */
#define SUP_WAIT_REPLAN_S 1
/* the longest wait on storage before a restart (storage_backoff_s doubled) */
#define SUP_STORAGE_WAIT_MAX_S 600
/* scontrol drains running at once, at most (one per quarantined node) */
#define SUP_MAX_DRAINS 32
/* Bounded teardown (sup_recovery.c, on_teardown): while something we asked
 * to stop is not gone, it is looked at this often (seconds). A process
 * SIGKILLed and still not reaped, one of whose threads is in
 * uninterruptible sleep (D state: a write to a dead NFS mount or a frozen
 * file system, a wedged driver) at every look for SUP_UNKILLABLE_S, cannot
 * be reaped until that I/O ends: it is reported (worker_unkillable), its
 * node is lost, and nothing waits for it; at most SUP_MAX_UNKILLABLE are
 * tracked until they are reaped. */
#define SUP_TEARDOWN_CHECK_S 0.5
#define SUP_UNKILLABLE_S 1.0
#define SUP_MAX_UNKILLABLE 64

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
  SUP_RP_STOPPING,  /* STOP + SIGTERM sent to the old gang; waiting for reaps */
  SUP_RP_WAITING,   /* when_no_spares: wait; re-planning every second */
  SUP_RP_RECORDING, /* new gang planned; its launch waits for the round's
                       records (generation, quarantines, skips, BAD marks)
                       on the record lane: s->recovery.rec_done reaching rec_wait */
  SUP_RP_FORMING,   /* new gang launched; waiting for every HELLO */
  SUP_RP_ASSIGNED,  /* ASSIGN sent; waiting for the first STEP */
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
  /* sup_recovery.c: exited with FT_EXIT_USAGE/FT_EXIT_DATA (0: no), and the
   * detail of its last FAULT (config/data/storage), for the run's verdict */
  int cfg_fail;
  char fault_detail[256];
  /* its control link's last round trip (HEARTBEAT rtt_us), and when it came */
  double rtt_ms, rtt_at_s;
  /* its training thread's last progress (HEARTBEAT phase, coll_seq, step,
   * prog_age_ms; worker/progress.h): prog_changed_s is the loop time
   * (ft_now_s) the progress last changed (the beat's arrival less its age),
   * prog_beat_s when that beat came, prog_gen its generation; prog_have 0:
   * no beat from this process yet */
  int prog_have;
  int prog_phase; /* ft_phase */
  uint64_t prog_coll;
  int64_t prog_step;
  uint64_t prog_gen;
  double prog_changed_s, prog_beat_s;
  /* in phase storage_wait, why (HEARTBEAT wait: ft_wait_reason, attempt) */
  int prog_wait;
  uint32_t prog_wait_attempt;
  /* sup_watch.c: its storage wait now (events data_wait, data_wait_end):
   * on, said (data_wait emitted), since (its start), last_s (last beat in
   * storage_wait), out_s (when it was first seen out: 0 while in), its
   * rank and generation, the last reason and attempt it gave */
  struct {
    int on, said, rank;
    uint64_t gen;
    double since_s, last_s, out_s;
    int reason;
    uint32_t attempt;
  } dwait;
  /* its last STEP: the step time it measured, and in which generation (the
   * node map shows it for the current one only; 0: none yet) */
  double step_ms;
  uint64_t step_ms_gen;
  /* in-process rejoin (recovery.in_process): the generation it trained in
   * when asked to leave it (0: not asked), so its late frames of that
   * generation are tolerated; rejoined: it said it is out (a frame of the
   * current generation) and waits for ASSIGN */
  uint64_t rejoin_from;
  int rejoined;
  /* bounded teardown: when it was first seen in uninterruptible sleep after
   * its node was SIGKILLed (0: not seen so, or seen otherwise since) */
  double dstate_s;
  /* checkpoint.replicate: its replica server ("" none: not connected, or it
   * serves none), and a hash of the buddy list last sent to it (0: none
   * sent, or to be told again; a list's hash is never 0) */
  char replica[300];
  uint64_t buddies_h;
  /* the node doctor (sup_doctor.c): enum sup_doctor; its report's compute
   * hash and platform once it came */
  int doctor;
  int doctor_again; /* a check the supervisor asked for is on its way */
  double hello_s;   /* ft_now_s when its HELLO was accepted */
  char dhash[65];
  char dplat[200];
} sup_worker;

enum sup_doctor {
  SUP_DOCTOR_NONE = 0,    /* no report from this process yet */
  SUP_DOCTOR_COMPARE = 1, /* its own checks passed; its hash waits for others' */
  SUP_DOCTOR_CLEARED = 2, /* may join a gang */
  SUP_DOCTOR_REFUSED = 3, /* the node is refused */
};

typedef struct sup_node {
  int role;   /* enum sup_role */
  pid_t pgid; /* process group of its workers; 0: none */
  int faulty; /* blamed during the current recovery */
  int term_sent, kill_sent;
  int dump_asked; /* a DUMP went to a worker of it (hang_evidence): the recovery's
                     stop sends it no SIGTERM, the STOP behind the DUMP ends it */
  sup_worker *w;  /* G workers */
  /* blame (sup_recovery.c): failures counted against the node, one per
   * recovery round at most; why it is quarantined (events, persisted) */
  sup_failures fails;
  int counted;            /* a failure of this round is counted */
  int nfailures;          /* failures inside the window when it was last counted */
  char why[256];          /* the reason it is (or will be) quarantined */
  char dverdict[300];     /* the node doctor's last verdict on it ("" none yet) */
  pid_t host_pid;         /* local launcher: the node's host stand-in, leader of pgid */
  int host_alive;         /* host_pid launched and not yet reaped */
  int host_lost;          /* the host died from outside (SIGKILL): node lost */
  int rejoin;             /* its workers were asked to rejoin in process this round */
  int rejoin_told;        /* its workers were sent this round's STOP(rejoin) (it
                             carries the new generation: sent once recorded) */
  double rejoin_told_s;   /* when (ft_now_s): a worker whose training thread has
                             not moved for a grace since is hung (on_teardown) */
  int respawn;            /* a spare that lost the supervisor (exit 6): relaunched
                             as a spare once its last process is reaped */
  sup_failures lost_us;   /* its spare relaunches (SUP_SPARE_RELAUNCHES a window) */
  sup_failures hashfails; /* restores whose chunks failed their hash on it */
  sup_conn *agent;        /* nodes.agent: its agent's connection (NULL: none);
                             its workers' connections are that one's kids */
  double agent_heard_s;   /* when its agent's last HOSTBEAT (or HELLO) came */
} sup_node;

/* The restore fallback's suspect node: sup_watch.h. */
#define SUP_HASHFAIL_SUSPECT 3

/* A warm spare whose worker exits FT_EXIT_LOST (it heard nothing from the
 * supervisor for heartbeat_timeout_s: our own stall, a slow disk under the
 * loop) is relaunched, not lost, and nothing is counted against its node;
 * past this many relaunches within recovery.node_failure_window_s it is the
 * spare's own link that fails, and it leaves the pool. */
#define SUP_SPARE_RELAUNCHES 3

/* What a detector saw, as it hands it down to the recovery
 * (sup_recovery_fault, sup_recovery_loss_fault): the kind of fault, named
 * in events (fault_detected, rollback) by sup_fault_kind_name. */
typedef enum sup_fault_kind {
  SUP_FAULT_PROCESS_EXIT,
  SUP_FAULT_HANG,
  SUP_FAULT_NODE_LOST,
  SUP_FAULT_NODE_UNREACHABLE,
  SUP_FAULT_LAUNCH_FAILED,
  SUP_FAULT_LOST_SUPERVISOR,
  SUP_FAULT_PEER_MISBEHAVED,
  SUP_FAULT_RESTORE_HASH,
  SUP_FAULT_STORE_ERROR,
  SUP_FAULT_SUPERVISOR_ISOLATED,
  SUP_FAULT_WORKER_UNKILLABLE,
  SUP_FAULT_XID,
  SUP_FAULT_COLLECTIVE_FAILURE,
  SUP_FAULT_DOCTOR,
  SUP_FAULT_STORAGE_HANG,
  SUP_FAULT_NETWORK_HANG,
  SUP_FAULT_GANG_HANG,
  SUP_FAULT_LOSS_SPIKE,
  SUP_FAULT_NAN,
  SUP_FAULT_SDC,
  SUP_FAULT_KINDS
} sup_fault_kind;

/* How a fault is blamed (sup_recovery_fault's `blame`). */
enum sup_blame {
  SUP_BLAME_NONE = 0,  /* nobody: restart the gang in place */
  SUP_BLAME_COUNT = 1, /* a failure counted against the node (quarantined after
                          recovery.node_failures_to_quarantine in the window) */
  SUP_BLAME_NODE = 2,  /* a hardware cause (fatal Xid, host lost, hang): quarantine now */
};

struct sup;
struct sup_pending_ckpt;
/* A record job's two halves (sup_record_new): on the record lane's thread
 * (the store and the job only), then on the loop. */
typedef void (*sup_record_fn)(struct sup *s, struct sup_pending_ckpt *p);

typedef struct sup_pending_ckpt {
  struct sup_pending_ckpt *next;
  int64_t step;
  int world;
  int nhave;
  int level;             /* enum ckpt_level: memory, or the store's */
  uint64_t memory_epoch; /* the store's when the first shard came
                            (ckpt_meta.memory_epoch) */
  int mark_good;         /* not a commit: a GOOD mark of step (made on
                            the queue's thread, never on the loop) */
  int64_t at_step;       /* mark_good: the step that made it due */
  int gc_done;           /* not a commit: the outcome of a retention
                            GC (rc, why), handed to the loop */
  /* not a commit when rec.work is set: a record of the supervisor's
   * (sup_record_new), written on the commit queue's record lane */
  struct {
    sup_record_fn work, then;
    uint64_t seq;     /* its number (s->rec_queued when queued) */
    uint64_t gen;     /* a run-state record: its generation (DIR/generation) */
    char *key, *text; /* a catalog record (put_meta) */
    char what[64];    /* what it records, for a failure's message */
    int64_t restore;  /* BAD marks: every checkpoint after it, or (-2) step */
    int64_t *bad;     /* the steps it marked BAD */
    size_t nbad;
    cJSON *ev; /* the fields of the event then emits (owned) */
  } rec;
  int superseded;                 /* a memory-level commit that found the step
                                     in the store already, or was made before
                                     the run's memory records were dropped:
                                     nothing to say */
  ckpt_shard **shards;            /* [world], by rank */
  int host_refs;                  /* of them, hosts' leaves (an agent's, of 2+ ranks) */
  char *state, *config, *metrics; /* from rank 0's envelope */
  double loss;
  /* the commit's outcome (sup_commitq: set on its thread, read on the loop) */
  int rc;
  double ms;
  char why[1024];
  /* its sizes and the run's in the store after it (0: unknown) */
  uint64_t logical, stored, new_bytes, run_logical, run_stored;
  double done_at; /* ft_now_s once the commit was in the catalog (0: it is not) */
  /* the run's checkpoints in the store after the job (a commit, or a GC),
   * by step, and when the list was begun (ft_now_s): the loop tells the
   * views of those gone since (sup_run.c: ckpt_reconcile). NULL: no list */
  int64_t *listed;
  size_t nlisted;
  double listed_at;
  int gc_deleted; /* a GC job: the checkpoints it deleted */
} sup_pending_ckpt;

/* The few calls that must go up a layer, as function pointers sup_main.c
 * wires (wire_hooks) before anything runs: what the recovery tells the
 * detectors above it, and the record lane's answer, which the low layer
 * hands up to the recovery. Every hook is set while the loop runs. */
typedef struct sup_hooks {
  /* a generation was assigned (restore_step, world known): the detectors'
   * windows start again (sup_watch_generation) */
  void (*generation)(struct sup *s);
  /* w exited timed out in a collective: ranks that never started it are
   * blamed (sup_watch_progress_behind); 1 if it acted */
  int (*progress_behind)(struct sup *s, sup_worker *w, const char *trigger);
  /* the record lane answered records up to seq (sup_recovery_recorded) */
  void (*recorded)(struct sup *s, uint64_t seq);
} sup_hooks;

/* The supervisor. Each group of fields says its owner: the one module that
 * writes them (the others may read, where said). The module states behind
 * their own headers (seal, watch, doctor) are written by their module
 * alone but where their header says otherwise. */
typedef struct sup {
  /* ---- the run's facts: sup_main.c sets them at start; read everywhere */
  ft_runfile rf;
  char runfile_path[4096]; /* the sealed copy, DIR/run.yaml (sup_seal.c sets it) */
  char state_dir[4096];
  char store_uri[4096];
  char worker_path[4096];
  struct sup_listing *listing; /* s3:// data: the listing file the checkpoints carry
                                  (sup_listing.h); NULL: local data */
  long long steps_override;    /* -1: none */
  const char *const *sets;
  int nsets;
  int N, S, G, nnodes;
  int no_spares;        /* enum sup_no_spares */
  int command_launcher; /* workers started by sh -c (command and ssh launchers) */
  int ssh_launcher;     /* ... over ssh, the token on stdin */
  int slurm_launcher;   /* ... one srun job step per node inside a Slurm
                           allocation; rf.nodes.hosts holds its hosts */
  int node_step;        /* one process per node stands for all its slots
                           (its workers carry no --slot from us): the slurm
                           launcher's srun, a command naming {slots}, or
                           the node's agent */
  int agent_mode;       /* nodes.agent: each node is its agent (ftagent),
                           which starts the node's workers and relays them */
  char agent_path[4096];
  pid_t once_pid;     /* nodes.launch_once: the pool's one launch (0: not yet) */
  int alive_hint;     /* sup_any_alive's node found alive last (where it looks first) */
  int64_t final_step; /* train.steps */
  double t_start_s;   /* ft_now_s at start */
  sup_hooks hooks;    /* the calls up a layer (sup_hooks; wire_hooks) */

  /* ---- resources: sup_main.c creates and frees them; the modules use them */
  struct event_base *base;
  struct evconnlistener *lis;
  int port;
  char connect_addr[300]; /* what workers dial (--connect): the advertised HOST:PORT */
  char token[FT_WIRE_TOKEN_HEX + 1];
  ckpt_store *store;
  sup_events *ev;
  sup_kv *kv;                  /* the rendezvous store (sup_run.c serves it) */
  sup_history *hist;           /* STATE/history.bin (sup_history.h); NULL: none */
  struct sup_http *http;       /* the operator's HTTP port (sup_http.c); NULL: off */
  struct sup_commitq *commitq; /* commits, records and GC off the loop (sup_commitq.c) */
  struct sup_shardq *shardq;   /* SHARD_SAVED parsed off the loop (sup_shardq.c) */
  struct sup_logprep *logprep; /* the first launch's log files, created ahead (sup_launch.h) */
  /* timers and signals; their callbacks are sup_timers.c's (launch_ev:
   * sup_recovery.c's) */
  struct event *tick, *grace, *waitpoll, *rejoin_timer, *coll_timer;
  struct event *teardown;      /* after a grace or a SIGKILL: rejoiners that do not
                                  move, processes that cannot be reaped */
  struct event *deadline_tick; /* the tick again when a silence reaches its limit */
  double silence_next_s;       /* the gang's silences are looked at again then (or at
                                  a new generation); sup_timers.c */
  uint64_t silence_gen;        /* ... the generation they were last looked at in */
  struct event *launch_ev;
  struct event *sig_chld, *sig_int, *sig_term;

  /* ---- the pool and the gang: sup_recovery.c's (the plan, launches,
   * roles); sup_run.c writes each worker's connection, HELLO and progress,
   * sup_doctor.c its verdict, sup_nodes.c its launch; read everywhere */
  sup_node *nodes;
  int gang[SUP_MAX_NODES];
  int ngang;

  /* ---- the run state: sup_recovery.c's; read everywhere */
  sup_state state;
  sup_rphase rphase;
  uint64_t gen;
  int restarts;
  int exit_code;
  char fail_reason[512];
  int64_t restore_step; /* of the current generation */
  int chaos_done;       /* the chaos kill fired (sup_run.c sets it; persisted) */
  /* loss faults and rollbacks (persisted with the run state) */
  ft_wire_range skips[FT_WIRE_MAX_SKIPS]; /* batch ranges never trained on */
  int nskips;
  /* the record lane, sup_act.c's (sup_record_push): records numbered as
   * queued (the recovery waits on them: s->recovery.rec_done), and the
   * newest generation whose record was answered (what COMMITTED to spares
   * carries) */
  uint64_t rec_queued;
  uint64_t gen_recorded;

  /* ---- processes beside the workers: sup_nodes.c's (sup_recovery.c adds
   * the unkillable) */
  /* Slurm drains in flight: `scontrol update ... state=drain` processes,
   * reaped like workers; the run ends after them */
  struct sup_drain {
    pid_t pid;
    int node;
    char reason[300];
  } drains[SUP_MAX_DRAINS];
  int ndrains;
  /* processes given up as unkillable (worker_unkillable): no longer their
   * node's workers, reaped with an event whenever their I/O ends; the run
   * does not wait for them */
  struct sup_unkillable {
    pid_t pid;
    int node, slot;
    uint64_t gen;   /* the generation when given up (its round's) */
    double since_s; /* ft_now_s when given up */
  } unkillable[SUP_MAX_UNKILLABLE];
  int nunkillable;

  /* ---- sup_timers.c's */
  int interrupted; /* SIGINT/SIGTERM seen */
  int hist_failed; /* the history's write failure was reported */

  /* ---- sup_stall.c's: the supervisor's own stalls (its loop did not run:
   * a long callback, SIGSTOP, a monotonic clock jump). Silence of a worker
   * that overlaps such a stall is never blamed on the worker. */
  double stall_end_s; /* ft_now_s when the last own stall ended; 0: none */

  /* ---- module states behind their own headers */
  sup_seal_state seal;         /* sup_seal.h: the run file's seal, the generation floor */
  sup_watch_state watch;       /* sup_watch.h: the watchdog's detectors */
  sup_recovery_state recovery; /* sup_recovery.h: the round in progress */
  sup_run_state run;           /* sup_run.h: training as the worker messages show it */
  sup_doctor_state doctor;     /* sup_doctor.h: the node doctor's references */
} sup;

enum sup_on_spike { SUP_SPIKE_WARN = 0, SUP_SPIKE_ROLLBACK = 1, SUP_SPIKE_ROLLBACK_SKIP = 2 };

/* ======== layer 1: acting, measuring, records (calls nothing above) ======== */

/* ---- sup_act.c ---------------------------------------------------------- */
/* Writes {gen, status, quarantined, restarts} under "<run>/state" (synced),
 * and s->gen to DIR/generation. status: "running" | "done" | "failed".
 * Synchronous: before the loop runs (sup_main.c). */
int sup_persist(sup *s, const char *status);
/* On the loop: the same record, queued on the record lane (after every
 * record queued before it); a failure is said on stderr naming what (as
 * "cannot persist WHAT: ..."), and the run goes on. Returns its number. */
uint64_t sup_persist_queue(sup *s, const char *status, const char *what);
/* A record job (never NULL: out of memory is a bug report and an abort):
 * work on the record lane's thread, then on the loop once it was written
 * or failed (p->rc, p->why). */
sup_pending_ckpt *sup_record_new(sup_record_fn work, sup_record_fn then, const char *what);
/* Queues p (the queue owns it) and returns its number. Records are written
 * one at a time, in this order, beside commits (never behind one); each
 * one's then runs before the next one's, and s->hooks.recorded after. */
uint64_t sup_record_push(sup *s, sup_pending_ckpt *p);
/* A record answered (written or failed), on the loop, in order: its then,
 * s->gen_recorded, then s->hooks.recorded. The commit queue's completion
 * (sup_run.c) calls it; p is still the caller's to free. */
void sup_record_answered(sup *s, sup_pending_ckpt *p);
/* A record job writing text under catalog key (both copied). */
uint64_t sup_record_meta(sup *s, const char *key, const char *text, const char *what);
/* Reads it back; FT_ENOENT if this run has none. *status: malloc'd. */
int sup_persist_load(sup *s, uint64_t *gen, char **status, int *restarts);
/* Sends a message of type t from the supervisor (run/gen filled). */
int sup_send(sup *s, sup_conn *c, ft_msg *m, uint64_t gen);
/* nodes.agent: node n's agent connection when each of its G workers'
 * connections is an open kid of it, so that a frame meant for all of them
 * alike (ASSIGN with slot 0's rank, COMMITTED, STOP rejoin) can go once, a
 * host frame (ft_wire.h, version 12); NULL: the caller sends slot by slot. */
sup_conn *sup_host_conn(const sup *s, int n);
void sup_stop_worker(sup *s, sup_worker *w, ft_stop_reason why, const char *detail);
/* checkpoint.replicate: sends each gang worker its buddies (the replica
 * servers of the next gang node's worker of the same slot and of every
 * warm spare's) where they changed since it was last told. */
void sup_send_buddies(sup *s);
/* A pending checkpoint or job: its shard manifests only, or all of it. */
void sup_pending_free_shards(sup_pending_ckpt *p);
void sup_pending_free(sup_pending_ckpt *p);
void sup_pending_clear(sup *s); /* every checkpoint still collecting reports */
/* Marks checkpoint step GOOD (at_step: the step that made it due) on the
 * commit queue's store thread; the loop reports it (checkpoint_good, or
 * checkpoint_mark_failed). A step no longer COMMITTED (a rollback marked it
 * BAD meanwhile, its commit failed) is left as it is, silently. Its two
 * halves, which the commit queue's callbacks (sup_run.c) run: */
void sup_mark_good(sup *s, int64_t step, int64_t at_step);
void sup_mark_store(sup *s, sup_pending_ckpt *p);        /* the queue's thread */
void sup_mark_report(sup *s, const sup_pending_ckpt *p); /* the loop */
/* Asks worker w for its training thread's stack, written to its log:
 * SIGUSR1 to its main thread (the local launcher), else a DUMP over its
 * connection (its node marked dump_asked). Never blocks. 1 if asked. */
int sup_ask_stack(sup *s, sup_worker *w);
/* The log node n's worker j writes to, STATE/logs/... (with one process
 * per node, the slurm and command launchers', the node's). */
void sup_node_log_path(const sup *s, int n, int j, char *buf, size_t size);
/* The worker program beside this supervise binary ("worker" if unknown). */
void sup_default_worker(char *out, size_t n);
/* A fault kind's name in events ("hang", "process_exit", ...). */
const char *sup_fault_kind_name(sup_fault_kind k);
/* 1 when w may be put into a gang: doctor.on_join is off, or its report was
 * cleared (the verdict is sup_doctor.c's; the gang's choice reads it). */
int sup_doctor_cleared(const sup *s, const sup_worker *w);
/* w was (re)launched: its old verdict does not hold for the new process. */
void sup_doctor_reset(sup_worker *w);

/* ---- sup_stall.c -------------------------------------------------------- */
#define SUP_STALL_PERIOD_S 0.1 /* the loop-stall timer's period (sup_main.c) */
/* Checks whether the loop went without running since the last check:
 * sets s->stall_end_s and emits supervisor_stall if so. Runs first in
 * every loop iteration by itself (sup_main.c's timer); a hang check may
 * call it first too, to see a stall that ended inside the same iteration. */
void sup_loop_stall_check(sup *s);
/* The next check measures from now (the loop starts; a launch before it). */
void sup_stall_restart(void);

/* ---- sup_seal.c ---------------------------------------------------------- */
/* At start: reads runfile (a real path) once, compares it with DIR's seal
 * (refused, with a message on stderr naming the keys that differ, unless
 * accept), copies it to DIR/run.yaml, points s->runfile_path there and
 * seals the copy. FT_OK, or an error already reported on stderr. */
int sup_seal_snapshot(sup *s, const char *runfile, int accept);
/* Before a launch round: FT_OK if the copy still matches its seal; else
 * event runfile_changed, the reason the run must fail in why (naming the
 * file, the keys and how to apply a change), and FT_ECONFIG. */
int sup_seal_check(sup *s, char *why, size_t whylen);
void sup_seal_release(sup *s);
/* DIR/generation: the highest generation persisted (0: none; FT_EFORMAT
 * naming the file when it holds no number). Also sets s->seal.gen_filed. */
int sup_gen_floor_read(sup *s, uint64_t *gen);
/* Writes gen there if it grew (written whole, renamed in); sup_persist. Its
 * s->seal.gen_filed is the record lane's once the loop runs. */
int sup_gen_floor_write(sup *s, uint64_t gen);

/* ---- sup_ckpt_events.c -------------------------------------------------- */
/* checkpoint_failed {step, rank (>= 0), missing (>= 0), cause, reason}:
 * checkpoint step will not be committed. cause: "report" (a shard report
 * bad or missing), "storage" (a worker could not write its shard). */
void sup_event_checkpoint_failed(sup *s, int64_t step, int rank, int missing, const char *cause,
                                 const char *why);
/* checkpoint_mark_failed {step, mark, reason}: the store refused to mark
 * committed checkpoint step (mark: "GOOD", "BAD"); also on stderr. Call it on
 * the loop (a thread hands the failure to the loop first). */
void sup_event_mark_failed(sup *s, int64_t step, const char *mark, const char *why);

/* ---- sup_nodes.c -------------------------------------------------------- */
/* Launches node n's workers (and under the local launcher its host
 * stand-in, the leader of its process group); role names it in the
 * worker_launched events. */
int sup_launch_node(sup *s, int n, const char *role);
int sup_node_alive(const sup *s, int n); /* a worker of n not yet reaped */
/* a worker of any node not yet reaped; looks first where it found one
 * last (finishing, every exit asks: 131,072 of them) */
int sup_any_alive(sup *s);
/* sig to node n's processes (SIGTERM: asked; SIGKILL: the teardown's
 * follow-up is armed); under Slurm srun's way (sup_nodes.c). */
void sup_signal_node(sup *s, int n, int sig);
/* nodes.agent: STOP to node n's agent itself (it ends, its workers with it);
 * nothing when it is not connected. */
void sup_agent_stop(sup *s, int n, ft_stop_reason why, const char *detail);
/* nodes.agent: node n's agent told to SIGKILL its workers and itself (the
 * chaos kill of a pool launched once); nothing when it is not connected. */
void sup_agent_kill(sup *s, int n);
void sup_teardown_arm(sup *s); /* the teardown's follow-up looks again soon */
/* Node n leaves the pool for good (its nd->why; a Slurm drain under
 * recovery.drain); persisted with the run state. */
void sup_quarantine(sup *s, int n);
/* Why nodes left, under catalog key <run>/recovery (on the record lane);
 * read back at start (a resumed run keeps its quarantines' reasons). */
void sup_persist_notes(sup *s);
void sup_load_notes(sup *s);
/* An scontrol drain ended (0 if pid was none): node_drained/drain_failed. */
int sup_drain_reaped(sup *s, pid_t pid, int status);
/* The first launch's log files, created on a thread ahead of it. */
void sup_prepare_logs(sup *s);
sup_worker *sup_worker_by_pid(sup *s, pid_t pid);
/* The last line w wrote to its log (its error message), "" if none. */
void sup_log_last_line(const sup *s, const sup_worker *w, char *out, size_t n);
/* 1 while pid (our child) has a signal pending or is still there. */
int sup_kill_pending(pid_t pid);
/* 1 if pid is in uninterruptible sleep (D), its wchan in wchan. */
int sup_proc_dstate(pid_t pid, char *wchan, size_t n);
/* 1 if a SIGKILLed worker of another node than n is in D state too. */
int sup_dstate_elsewhere(const sup *s, int n);
/* pid was given up as unkillable: its I/O ended at last. 0 if not one. */
int sup_unkillable_reaped(sup *s, pid_t pid, int status);
/* RUNNING, or a new generation before its first step (ASSIGNED). */
int sup_gang_trains(const sup *s);
cJSON *sup_json_ints(const int *v, int n); /* a JSON array of v[0..n) */

/* ======== layer 2: the recovery (decides; acts through layer 1) ======== */

/* ---- sup_recovery.c ----------------------------------------------------- */
/* Launches every node, forms the first gang (STARTING). */
int sup_recovery_start(sup *s);
/* Called when a worker's HELLO was accepted / its first STEP came. */
void sup_recovery_hello(sup *s, sup_worker *w);
void sup_recovery_first_step(sup *s, int64_t step);
/* Every STEP: a step past the last storage hang's ends its streak. */
void sup_recovery_step_done(sup *s, int64_t step);
/* A fault. node -1: no node blamed; blame: enum sup_blame. */
void sup_recovery_fault(sup *s, sup_fault_kind kind, int node, int slot, pid_t pid,
                        const char *detail, enum sup_blame blame);
/* A loss fault (spike, NaN/Inf) at step spike_step: rolls back (on_spike
 * rollback / rollback_and_skip, or `force`: the workers stopped training)
 * to the newest COMMITTED/GOOD checkpoint before it, marks the newer ones
 * BAD, adds a skip range (rollback_and_skip), then starts a recovery round
 * with no node blamed. Returns 1 if a rollback started. */
int sup_recovery_loss_fault(sup *s, int64_t spike_step, sup_fault_kind kind, const char *detail,
                            int force);
/* Silent data corruption that may have begun at first_step: rolls back as
 * a loss fault does (no skip: the data was not at fault) and blames node
 * (quarantine, a spare); node -1 (no majority): nobody. */
void sup_recovery_sdc_fault(sup *s, int64_t first_step, int node, int slot, pid_t pid,
                            const char *detail);
/* Blames as "hang" every gang worker silent for more than 2 heartbeat
 * intervals (SIGKILLs its node); returns how many. why: the trigger. */
int sup_recovery_blame_silent(sup *s, const char *why);
/* The final checkpoint is committed. */
void sup_recovery_done(sup *s);
/* The run cannot go on. */
void sup_recovery_fail(sup *s, const char *reason);
/* The record lane answered records up to number seq (s->recovery.rec_done): a
 * round waiting for them goes on (RECORDING -> FORMING; the STOP(rejoin)
 * of a recorded generation). */
void sup_recovery_recorded(sup *s, uint64_t seq);
/* The run cannot end because the store refuses its final checkpoint: exit
 * SUP_EXIT_STORE ("run_failed" cause "store"), no node blamed. */
void sup_recovery_store_failed(sup *s, const char *reason);
/* In process (recovery.in_process), a worker of the current generation
 * reported a failed collective and nobody is silent: its peers stay in
 * their processes, so no exit will start the recovery. If 2 heartbeat
 * intervals later the generation still trains and still nobody is silent
 * (a partition between workers, a collective timeout), a round starts with
 * nobody blamed ("collective_failure"; sup_timers.c, on_coll_timer). */
void sup_recovery_collective_failed(sup *s, sup_worker *w, const char *detail);
/* Worker w (asked to rejoin in process) is out of its old generation. */
void sup_recovery_rejoined(sup *s, sup_worker *w);
/* The node doctor refused node n (why: its reason): a spare is quarantined
 * and stopped; a node of the gang being formed is blamed (BLAME_NODE), so
 * the round re-plans with a spare. */
void sup_recovery_refuse(sup *s, int n, const char *why);
/* libevent callback: the next slice of a gang's launches (launch_ev) */
void sup_recovery_launch_more(evutil_socket_t fd, short what, void *arg);

/* The recovery's checked invariants (check_state, compiled in where
 * FT_CHECK_INVARIANTS is): every transition, and every libevent callback
 * that drives one, runs between sup_rec_enter and sup_rec_leave; only the
 * outermost pair checks. SUP_EVENT_ENTRY(name, body) defines the callback
 * name as body(fd, what, arg) between them. */
void sup_rec_enter(const sup *s);
void sup_rec_leave(const sup *s);
#define SUP_EVENT_ENTRY(name, body)                                                                \
  void name(evutil_socket_t fd, short what, void *arg) {                                           \
    sup_rec_enter(arg);                                                                            \
    body(fd, what, arg);                                                                           \
    sup_rec_leave(arg);                                                                            \
  }

/* The transitions the recovery's timers (sup_timers.c) drive. Each is
 * called between sup_rec_enter and sup_rec_leave. */
/* WAITING: plan again (the next gang, or wait more, or fail). */
void sup_rec_plan_and_launch(sup *s);
/* STOPPING: once the old gang is gone (rejoiners out of their generation
 * count as gone), the plan. */
void sup_rec_check_stopped(sup *s);
/* FINISHING with nothing left alive (drains included): the loop ends. */
void sup_rec_maybe_finished(sup *s);
/* Everyone asked to stop (STOP why + SIGTERM, SIGKILL after grace_s). */
void sup_rec_stop_everyone(sup *s, ft_stop_reason why, const char *detail, double grace_s);
/* A reaped worker's exit status: blame by invariant 6, then a round. */
void sup_rec_exit_status(sup *s, sup_worker *w, int status);
void sup_rec_agent_exit(sup *s, int n, pid_t pid, int status);
/* Node n's host stand-in exited (we_killed: by us): unless we killed it,
 * the node is lost (node_lost, quarantined). */
void sup_rec_host_exit(sup *s, int n, int status, int we_killed);
/* Node n has no worker left: its host stand-in is killed and reaped. */
void sup_rec_host_reap(sup *s, int n);
/* A spare whose worker lost us (exit 6) is relaunched as a spare. */
void sup_rec_respawn_spare(sup *s, int n);
/* w, SIGKILLed, stayed in D state for secs (in wchan): given up
 * (worker_unkillable); its node lost unless several are (the storage's). */
void sup_rec_give_up(sup *s, sup_worker *w, const char *wchan, double secs);
/* STOPPING: survivors asked to rejoin whose thread has not moved a grace
 * after the request fall back to a restart as processes. 1 while one is
 * still to be judged. */
int sup_rec_rejoin_hung(sup *s, double now);
/* Node n asked to rejoin goes as a process after all (why: the reason). */
void sup_rec_rejoin_fallback(sup *s, int n, const char *why);
/* Every worker of node n asked to rejoin is out of its old generation. */
int sup_rec_node_rejoined(const sup *s, int n);
/* Configuration/data exits before the gang trained: the verdict (the
 * run's if every gang worker failed alike, else the nodes'), once due. */
void sup_rec_cfg_verdict(sup *s, int deadline_passed);
/* Everyone silent at once (quiet: this worker's silence): the
 * supervisor's own isolation, a round with nobody blamed. 1 if so. */
int sup_rec_isolated(sup *s, double now, double quiet);

/* ======== layer 3: the detectors (what they see goes down to the recovery) ======== */

/* ---- sup_timers.c ------------------------------------------------------- */
/* libevent callbacks (sup_main.c wires them): the tick's silence checks,
 * SIGCHLD, the grace, the teardown's follow-up (SUP_TEARDOWN_CHECK_S:
 * rejoiners that do not move, SIGKILLed processes stuck in D state), the
 * collective-failure timer, recovery.rejoin_timeout_s, the wait's re-plan,
 * SIGINT/SIGTERM. */
void sup_on_tick(evutil_socket_t fd, short what, void *arg);
void sup_on_sigchld(evutil_socket_t fd, short what, void *arg);
void sup_on_grace(evutil_socket_t fd, short what, void *arg);
void sup_on_teardown(evutil_socket_t fd, short what, void *arg);
void sup_on_coll_timer(evutil_socket_t fd, short what, void *arg);
void sup_on_rejoin_timeout(evutil_socket_t fd, short what, void *arg);
void sup_on_waitpoll(evutil_socket_t fd, short what, void *arg);
void sup_on_signal(evutil_socket_t fd, short what, void *arg);

/* ---- sup_run.c ---------------------------------------------------------- */
/* The worker connections' handler: every control message (sup_conn_ops). */
extern const sup_conn_ops sup_run_conn_ops;
int sup_kv_reply_init(sup *s); /* creates s->kv with its libevent reply */
/* Starts the threads that commit (and GC) off the loop (sup_commitq); every
 * store uses them. Their completions are reported here (cq_done). */
int sup_run_commitq_start(sup *s);
/* The checkpoints the views were told of, forgotten (at the end). */
void sup_run_known_free(sup *s);
/* Emits the count of rate-limited connection_closed events once their
 * window is over (called by a periodic timer). */
void sup_run_flush_log(sup *s);

/* ---- sup_doctor.c ------------------------------------------------------- */
/* A worker's DOCTOR report (JSON text). */
void sup_doctor_report(sup *s, sup_worker *w, const char *report);
/* Judges reports that wait for others' (a worker that exited or a node
 * that left the pool may have been what they waited for). */
void sup_doctor_judge(sup *s);
/* From the tick: every doctor.spare_every_s, idle spares cleared before are
 * asked to check again. */
void sup_doctor_tick(sup *s, double now);
/* Asks the idle spares (and with gang_too the gang's nodes, which check on
 * a thread beside their training) whose workers are all cleared to check
 * again; event doctor_recheck with why. Returns how many nodes. */
int sup_doctor_ask(sup *s, int gang_too, const char *why);
/* Node n's doctor state for operators: "off" (doctor.on_join false),
 * "pending" (a report has not come), "comparing", "checking" (asked to
 * check again, the report not in), "cleared", "refused". */
const char *sup_doctor_node_state(const sup *s, int n);

/* ---- sup_watch.c -------------------------------------------------------- */
int sup_watch_init(sup *s);
void sup_watch_free(sup *s);
/* A generation was assigned (restore_step, world known): rebuilds the loss
 * window from the values before the restore point, resets step timing. */
void sup_watch_generation(sup *s);
/* STEP of the current gen from any rank (step times); rank 0 also feeds the
 * loss detector and GOOD marking (returns 1 if a loss fault was acted on). */
void sup_watch_step_time(sup *s, sup_worker *w, const ft_msg *m);
/* sup_run.c: a HEARTBEAT's progress (phase, coll_seq, step, age) into
 * w's record, received at loop time now_s. */
void sup_progress_beat(sup_worker *w, const ft_msg *m, double now_s);
int sup_watch_loss(sup *s, const ft_msg *m);
/* A FAULT from a worker (after its worker_fault event). */
void sup_watch_fault(sup *s, sup_worker *w, const ft_msg *m);
/* Worker w of the gang waited in a collective until it timed out (its FAULT
 * collective_timeout, or its exit code 5): if the progress records name
 * ranks that never started that collective (wd_progress_behind), or, when
 * w had started none (its rendezvous timed out), ranks that heartbeat in
 * the generation but never joined it, emits progress_hang (class behind or
 * rendezvous) and blames their nodes ("hang"). Returns 1 if it acted. */
int sup_watch_progress_behind(sup *s, sup_worker *w, const char *trigger);

void sup_watch_committed(sup *s, int64_t step);
/* From the tick: judges the gang's control-link round trips (slow links),
 * at most once per heartbeat interval. */
void sup_watch_links(sup *s, double now);
/* From the tick, while the gang trains (RUNNING, or ASSIGNED: a new
 * generation before its first step): judges every rank's progress
 * (wd_progress); on a hang verdict emits progress_hang and starts the
 * recovery its class calls for. Returns 1 if it acted. */
int sup_watch_progress(sup *s, double now);
/* On the tick (from sup_watch_progress): each worker's storage wait (phase
 * storage_wait for more than a heartbeat interval): events data_wait and
 * data_wait_end, the progress line's note. */
void sup_watch_data_waits(sup *s, double now);

/* ======== layer 4: the operator's port; layer 5: the programs' mains ======== */

/* ---- sup_http.c --------------------------------------------------------- */
/* The operator's HTTP port (/metrics, /status) on spec ("" = loopback, any
 * free port; "off": none; from names where spec came from, for errors);
 * its address in STATE/http.addr. */
int sup_http_open(sup *s, const char *spec, const char *from);
const char *sup_http_addr(const sup *s); /* "HOST:PORT", or NULL when off */
void sup_http_free(sup *s);
/* /status as the run ends, into STATE/status.json ("running": false,
 * "saved_ts"): what `supervise status` shows of a run that is over (its
 * nodes, restarts, checkpoints), beside what events.jsonl says. */
int sup_http_save_status(sup *s);
/* `supervise status STATE [--json]` (argv[0] is "status"; sup_status.c, as the two below). */
int sup_status_main(int argc, char **argv);
/* `supervise doctor STATE` (argv[0] is "doctor"; sup_doctor_cli.c). */
int sup_doctor_main(int argc, char **argv);
/* One HTTP request to ADDR (HOST:PORT) for path, GET or POST (empty body),
 * with "Authorization: Bearer bearer" unless NULL; *code: the status (0:
 * nobody answered). The body (malloc'd) or NULL. */
char *sup_http_call(const char *addr, int post, const char *path, const char *bearer, int *code);
/* The first line of STATE/name (http.addr, http.token) into out; -1 if
 * there is none. */
int sup_http_state_file(const char *dir, const char *name, char *out, size_t len);
/* `supervise report STATE --out FILE` (argv[0] is "report"). */
int sup_report_main(int argc, char **argv);

/* Node n's host (nodes.hosts, or the Slurm allocation's), for events and
 * messages; NULL when the run has no host list (local launcher, or a
 * command/ssh run on localhost). */
static inline const char *sup_node_host(const sup *s, int n) {
  return n >= 0 && n < s->rf.nodes.nhosts ? s->rf.nodes.hosts[n] : NULL;
}

static inline int sup_in_gang(const sup *s, int node) {
  for (int i = 0; i < s->ngang; i++)
    if (s->gang[i] == node)
      return 1;
  return 0;
}

#endif
