/*
 * sup_recovery: the supervisor's state machine: launching the gang,
 * judging faults (process exits, hangs, silent peers of a collective
 * failure), rolling back after loss faults, stopping the gang, swapping in
 * spares and starting the next generation; finishing and failing.
 *
 * Layer 2 of the supervisor (sup_int.h). Every transition is here, named
 * in TRANSITIONS below. What drives them from above: the detectors
 * (sup_run.c's messages, sup_watch.c, sup_doctor.c) and the recovery's own
 * clock and signals (sup_timers.c: the tick's silence checks, SIGCHLD,
 * grace, teardown, the collective and rejoin timers, SIGINT/SIGTERM). What
 * it acts through, below: sup_nodes.c (launch, signal, quarantine and
 * drains, why nodes left, /proc), sup_act.c (send, stop, persist, records).
 * Up to the detectors it goes only through s->hooks (a new generation, the
 * ranks behind a timed-out collective).
 *
 * STATES (sup->state, and sup->rphase inside RECOVERING)
 *
 *      STARTING --all HELLO, ASSIGN--> RUNNING --final ckpt committed--> FINISHING --> DONE
 *         |                             |   ^                               ^
 *         | fault           fault, or   |   | first STEP of the new gen     |
 *         |                 loss fault  |   |                               |
 *         v                 (rollback)  v   |                               |
 *      RECOVERING: STOPPING --all reaped--> (plan) --> RECORDING --records--> FORMING
 *                                                     --all HELLO--> ASSIGNED
 *                      |                      |  \--WAIT--> WAITING (re-plan every 1 s;
 *                      |                      |      after a storage hang first its backoff)
 *                      |                      \--FAIL--> FINISHING (exit 1) --> FAILED
 *      any state --SIGINT/SIGTERM--> FINISHING (exit 130)
 *      STARTING/FORMING/ASSIGNED --every gang worker exits alike with a
 *        configuration/data error--> FINISHING (exit 1, cause config/data)
 *      RUNNING --a worker gave up on the final checkpoint (exit 4)-->
 *        FINISHING (exit 4, cause store)
 *
 * WHO IS TO BLAME (invariant 6 below has the rules)
 *  - a worker's crash or own exit code on a host that still answers: its
 *    node's failure, counted; restart in place until the count reaches
 *    recovery.node_failures_to_quarantine within node_failure_window_s;
 *  - the node lost (its process group killed), a hang, a fatal Xid: the
 *    node's, quarantined at once;
 *  - FT_EXIT_GANG / FT_EXIT_LOST (lost the supervisor, e.g. during our own
 *    stall) / FT_EXIT_STORE: nobody's (restart in place);
 *  - FT_EXIT_USAGE / FT_EXIT_DATA before the gang trains: the run's if every
 *    gang worker reports it alike within a heartbeat timeout (the run fails
 *    with the workers' message), else the node's, counted;
 *  - FT_EXIT_DATA once the gang trains: the run's at once, nobody blamed
 *    (data read later that went bad: an S3 shard changed or gone);
 *  - storage faults (FAULT storage: a shard the store refused) are events
 *    only (sup_watch.c): the checkpoint is skipped, the last committed one
 *    stays the restore point; a final checkpoint the workers cannot write
 *    within their retries ends the run with exit 4;
 *  - silence is measured from max(last frame, the end of the supervisor's
 *    own stall): our stall is never a worker's hang;
 *  - no progress although every worker heartbeats (sup_watch_progress,
 *    wd_progress; from the tick): ranks behind the others or that never
 *    joined the rendezvous: their nodes' ("hang", quarantined at once);
 *    every rank in a data read or checkpoint write, in one collective, or
 *    stuck alike: nobody's (storage_hang, network_hang, gang_hang); after a
 *    storage hang the plan waits on storage first (storage_wait, doubled
 *    for each one in a row);
 *  - a collective timeout with nobody silent: the ranks the progress
 *    records show behind that collective (sup_watch_progress_behind), if
 *    any, are blamed as "hang"; else nobody;
 *  - every worker, spares included, silent at once on two or more nodes:
 *    our own isolation (sup_rec_isolated()), nobody's; a warm spare silent while
 *    the gang is heard: that spare's node (spares_silent());
 *  - slurm launcher: a step that does not end when srun is told to kill
 *    it: its node's (node_unreachable), unless every node's is late
 *    (steps_unanswered, nobody's); a step that could not start while no
 *    other node's did: nobody's (launch_failed);
 *  - a worker SIGKILLed that stays in uninterruptible sleep (D state, a
 *    dead mount, a wedged driver): its node's, lost (node_lost,
 *    quarantined at once; "bounded teardown" below);
 *  - a survivor asked to rejoin in process whose training thread does not
 *    move in the grace after the request: nobody's (hung, restarted as a
 *    process; its own hang is the hang detector's to blame).
 *
 * A loss fault is a fault with nobody blamed, preceded by the rollback
 * bookkeeping: every gang node is restarted in place, spares are untouched,
 * and the new generation restores the newest COMMITTED/GOOD checkpoint
 * before the faulty step. Loss faults act only while RUNNING or ASSIGNED
 * (a gang that trains); in any other state they are events only. Silent
 * data corruption found by the workers' recomputation check takes the same
 * rollback (no skip range) but blames the node the majority named: it is
 * quarantined and a spare takes its place.
 *
 * INVARIANTS
 *  1. gen only grows, and is persisted before any message carries it: a
 *     restarted supervisor never reuses one. The records (run state,
 *     DIR/generation, why nodes left, BAD marks) are written on the commit
 *     queue's record lane, never on the loop, one at a time in the order
 *     queued (numbered: s->rec_queued; answered: s->recovery.rec_done). fault_t
 *     queues the new gen's record (s->recovery.gen_rec) and stops the old gang at
 *     once (its messages carry its own gen); STOP(rejoin), which carries
 *     the new gen, waits for that record (rejoin_tell); the plan queues
 *     the run state and waits in RECORDING until it is answered, so ASSIGN
 *     follows every record of the round (sup_recovery_recorded). The
 *     run's final status is written before supervise exits (the lane
 *     writes what is queued when it is freed).
 *  2. Only the current gen's gang may STEP, SHARD_SAVED or KV (sup_run.c
 *     fences everything else), so no old worker commits into a new gen.
 *  3. One recovery at a time. A fault while STOPPING/WAITING is recorded
 *     (event, node marked faulty) and joins the recovery in progress; a
 *     fault while FORMING/ASSIGNED (a relaunched worker died before the
 *     new gen trained) starts a new round (gen++, restarts++). Every round,
 *     rollbacks included, counts against recovery.max_restarts.
 *  4. A quarantined node is never launched or assigned again in this run
 *     (its role is persisted with the run state).
 *  5. Every process we launched is reaped before the loop ends, or given
 *     up as unkillable (SIGKILLed and in D state for SUP_UNKILLABLE_S,
 *     sup_rec_give_up): then it is no worker of its node (checked), the round and
 *     the run's end do not wait for it, it is reaped whenever its I/O ends
 *     (sup_unkillable_reaped), and a run that ends first leaves it to init
 *     (unkillable_left). So nothing a round stops holds it for long after
 *     the grace: a rejoiner whose progress shows it hung is killed too
 *     (bounded teardown, below).
 *  6. Blame (enum sup_blame): an exit is held against its node only if it
 *     is a signal we did not send or an exit code other than FT_EXIT_OK,
 *     FT_EXIT_GANG (collective failure: the peer is at fault) and
 *     FT_EXIT_LOST (it lost us: restart in place, nobody blamed). Such a
 *     failure on a host that still answers is COUNTED: the gang restarts in
 *     place (same nodes, last committed checkpoint; "node_restarted"), and
 *     the node is quarantined only at recovery.node_failures_to_quarantine
 *     failures within recovery.node_failure_window_s (one per node per
 *     round). A hardware cause quarantines at once: a fatal Xid, a hang we
 *     had to SIGKILL, or the node lost: under the local launcher each node's
 *     process group is led by a host stand-in (sup_launch_host); killed from
 *     outside (kill -9 -PGID, chaos.kill_node_at_step) it means the whole
 *     node is gone. "node_quarantined" and the catalog key <run>/recovery
 *     say why each node left. On a collective failure (exit 5, FAULT
 *     collective_timeout/other) every gang worker silent for more than 2
 *     heartbeat intervals is blamed as "hang" (a SIGSTOPped worker sends
 *     nothing); if none is, nobody is blamed.
 *  7. Rollback: before the round's ASSIGN (its BAD marks are queued on the
 *     record lane ahead of the round's records), every checkpoint with step >
 *     restore_step is BAD in the catalog (a checkpoint that cannot be marked
 *     fails the run rather than being restored later), and a new skip range
 *     is in the persisted skip list, so ASSIGN (which restores the newest
 *     non-BAD checkpoint and sends the whole skip list) restores restore_step
 *     and no skipped batch is ever trained on again, also after a
 *     supervisor restart.
 *
 * TRANSITIONS (function performing each)
 *  launch + STARTING ........................ sup_recovery_start
 *  STARTING/FORMING -> RUNNING/ASSIGNED ..... sup_recovery_hello -> assign
 *  ASSIGNED -> RUNNING ("recovered") ........ sup_recovery_first_step
 *  RUNNING/... -> RECOVERING.STOPPING ....... sup_recovery_fault
 *  RUNNING/ASSIGNED -> (BAD marks, skip) ->
 *    RECOVERING.STOPPING (loss fault) ....... sup_recovery_loss_fault
 *    (silent data corruption) ............... sup_recovery_sdc_fault
 *                                             -> rollback_t: BAD marks queued, fault_t
 *  RUNNING/... -> STOPPING (silent peers) ... sup_recovery_blame_silent
 *                                             -> sup_recovery_fault
 *  STOPPING -> plan -> RECORDING|WAITING|fail sup_rec_check_stopped -> sup_rec_plan_and_launch
 *  STOPPING: a hung rejoiner -> a process ... sup_rec_rejoin_hung (sup_timers.c: grace,
 *                                             teardown)
 *  a SIGKILLed worker in D -> given up ....... sup_rec_give_up (sup_timers.c: teardown)
 *  a process exit -> blame, a fault ......... sup_rec_exit_status (sup_timers.c: SIGCHLD)
 *  a silent worker -> a hang ................ sup_timers.c tick -> sup_recovery_fault
 *  RECORDING -> FORMING (records answered) .. sup_recovery_recorded
 *  RUNNING -> FINISHING (done) .............. sup_recovery_done
 *  any -> FINISHING (failed) ................ sup_recovery_fail
 *  FINISHING -> DONE/FAILED (loop ends) ..... sup_rec_maybe_finished
 *
 * when_no_spares: wait re-plans every second; on one machine no new spare
 * ever appears (spares are launched only at start), so a run in WAITING
 * waits until it is interrupted. That is the honest behaviour of "wait"
 * here; on a cluster a restarted supervisor with more nodes would resume.
 *
 * AGENTS (nodes.agent: one ftagent per host holds its node's one
 * connection; sup_conn's kids are its slots). The state machine is the
 * same; what changes is where exits come from and how processes go:
 *  - a worker's exit is its agent's SLOT exited with the true wait status
 *    (sup_rec_exit_status, as SIGCHLD gives it), blamed as above;
 *  - the agent's own end: its exit codes 0/6/2 are each slot's exit with
 *    that code (sup_rec_agent_exit); anything else, or its connection lost
 *    with workers on it, is the host lost (node_lost, quarantined at once);
 *  - a restart in place starts the node's workers through its agent (SLOT
 *    start), nothing is launched; signals go through it (SLOT signal), and a
 *    SIGKILL it does not answer goes to its process group, or, launched
 *    once for the pool (nodes.launch_once), drops its connection;
 *  - the run's end and a spare lost or quarantined STOP the agent itself.
 *
 * A rolled-back timeline re-trains steps whose old checkpoints were marked
 * BAD; ckpt_store_commit replaces a BAD step (ckptstore/ckpt_commit.c), so
 * the re-trained checkpoints commit under the same step numbers and become
 * the restore point of any later recovery (tests/integration/sup_loss.sh).
 */
#include "sup_int.h"

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "sup_launch.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double wall_s(void) {
  return (double)ft_wall_ns() * 1e-9;
}

/* ---- checked invariants -----------------------------------------------------
 *
 * check_state() asserts what the INVARIANTS and the STATES above say and the
 * struct can show (as SQLite's assert_pager_state). Every transition in the
 * TRANSITIONS table, and each libevent callback that drives them, calls it
 * on entry and on exit (ENTER/LEAVE). A transition may call another one
 * half-way (sup_rec_plan_and_launch quarantines the old gang's nodes, then fails the
 * run): only the outermost call checks, so the checks see the state between
 * two transitions, never a half-made one. Compiled in where
 * FT_CHECK_INVARIANTS is (Debug and sanitizer builds; common/ft_bug.h).
 * Each transition X's body is X_t(); X() is X_t() between sup_rec_enter() and
 * sup_rec_leave(). */

#if FT_INVARIANTS_ON
static int check_depth;
static const sup *check_last_sup;
static uint64_t check_last_gen;

static void check_state(const sup *s) {
  /* state x rphase: the combinations of the STATES diagram */
  switch (s->state) {
  case SUP_STARTING: /* NONE before sup_recovery_start, FORMING after */
    FT_ASSERT_INV(s->rphase == SUP_RP_NONE || s->rphase == SUP_RP_FORMING, "STARTING, rphase %d",
                  s->rphase);
    break;
  case SUP_RUNNING:
  case SUP_FINISHING:
  case SUP_DONE:
  case SUP_FAILED:
    FT_ASSERT_INV(s->rphase == SUP_RP_NONE, "state %d, rphase %d", s->state, s->rphase);
    break;
  case SUP_RECOVERING:
    FT_ASSERT_INV(s->rphase != SUP_RP_NONE, "RECOVERING without a phase");
    break;
  default:
    FT_BUG("supervisor state %d", (int)s->state);
  }
  FT_ASSERT_INV(s->rphase >= SUP_RP_NONE && s->rphase <= SUP_RP_ASSIGNED, "rphase %d", s->rphase);
  /* 1: RECORDING waits for a record of this generation not yet answered
   * (its launch follows that record's answer, sup_recovery_recorded) */
  if (s->rphase == SUP_RP_RECORDING)
    FT_ASSERT_INV(s->recovery.rec_done < s->recovery.rec_wait &&
                      s->recovery.rec_wait <= s->rec_queued && s->recovery.rec_wait_gen == s->gen,
                  "RECORDING: records %" PRIu64 " of %" PRIu64 " answered, waits for %" PRIu64
                  " (gen %" PRIu64 ", current %" PRIu64 ")",
                  s->recovery.rec_done, s->rec_queued, s->recovery.rec_wait,
                  s->recovery.rec_wait_gen, s->gen);
  /* 1: nothing carries s->gen before its record: the gang has it only
   * once it was answered (ASSIGN follows RECORDING) */
  if (s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED))
    FT_ASSERT_INV(s->recovery.rec_done >= s->recovery.gen_rec,
                  "gen %" PRIu64 " assigned before its record", s->gen);
  /* 1: gen only grows (within this process) */
  if (check_last_sup == s)
    FT_ASSERT_INV(s->gen >= check_last_gen, "gen went back from %" PRIu64 " to %" PRIu64,
                  check_last_gen, s->gen);
  check_last_sup = s;
  check_last_gen = s->gen;
  /* 3: every round counts; one past max_restarts ends the run */
  if (s->state < SUP_FINISHING)
    FT_ASSERT_INV(s->restarts <= s->rf.recovery.max_restarts, "restarts %d > max_restarts %d",
                  s->restarts, s->rf.recovery.max_restarts);
  if (s->state == SUP_DONE)
    FT_ASSERT_INV(s->exit_code == SUP_EXIT_DONE, "DONE with exit code %d", s->exit_code);
  if (s->state == SUP_FAILED)
    FT_ASSERT_INV(s->exit_code == SUP_EXIT_FAILED, "FAILED with exit code %d", s->exit_code);
  /* the wait timer runs only while WAITING (FINISHING has none pending) */
  if (s->waitpoll && evtimer_pending(s->waitpoll, NULL))
    FT_ASSERT_INV(s->state == SUP_RECOVERING && s->rphase == SUP_RP_WAITING,
                  "waitpoll pending in state %d rphase %d", s->state, s->rphase);
  /* the gang: distinct nodes of the pool */
  FT_ASSERT_INV(s->ngang >= 0 && s->ngang <= s->nnodes, "ngang %d of %d nodes", s->ngang,
                s->nnodes);
  unsigned char seen[SUP_MAX_NODES] = {0};
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    FT_ASSERT_INV(n >= 0 && n < s->nnodes && !seen[n], "gang[%d] = %d", p, n);
    seen[n] = 1;
  }
  /* 5: a process given up as unkillable is no worker of its node any more */
  for (int i = 0; i < s->nunkillable; i++)
    for (int n = 0; n < s->nnodes; n++)
      for (int j = 0; j < s->G; j++)
        FT_ASSERT_INV(!s->nodes[n].w[j].alive || s->nodes[n].w[j].pid != s->unkillable[i].pid,
                      "node %d slot %d is pid %d, given up as unkillable", n, j,
                      (int)s->unkillable[i].pid);
  int started = !(s->state == SUP_STARTING && s->rphase == SUP_RP_NONE);
  if (s->state >= SUP_FINISHING || !started)
    return;
  FT_ASSERT_INV(s->ngang > 0, "state %d with an empty gang", s->state);
  /* the gang between plans (STARTING, RUNNING, FORMING, ASSIGNED) is ACTIVE
   * nodes; while STOPPING/WAITING the old gang may hold nodes the failed
   * plan quarantined (dead: the plan runs once the gang stopped) */
  int replanning =
      s->state == SUP_RECOVERING && (s->rphase == SUP_RP_STOPPING || s->rphase == SUP_RP_WAITING);
  for (int n = 0; n < s->nnodes; n++) {
    const sup_node *nd = &s->nodes[n];
    if (seen[n])
      FT_ASSERT_INV(nd->role == SUP_ROLE_ACTIVE ||
                        (replanning && nd->role == SUP_ROLE_QUARANTINED && !sup_node_alive(s, n)),
                    "gang node %d has role %s", n, sup_role_name(nd->role));
    else
      FT_ASSERT_INV(nd->role != SUP_ROLE_ACTIVE, "node %d is ACTIVE outside the gang", n);
    /* 4: a quarantined node is never launched again; one still alive is
     * being killed (an Xid on a spare) */
    if (nd->role == SUP_ROLE_QUARANTINED)
      FT_ASSERT_INV(!sup_node_alive(s, n) || nd->kill_sent, "quarantined node %d alive", n);
    if (nd->role == SUP_ROLE_IDLE || nd->role == SUP_ROLE_LOST)
      FT_ASSERT_INV(!nd->faulty, "node %d (%s) marked faulty", n, sup_role_name(nd->role));
  }
  /* 2 and the ranks: a gang that trains (RUNNING, ASSIGNED) was assigned in
   * this gen, world = ngang*G, rank = position*G + slot */
  if (s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED)) {
    /* the step timing was sized for this gen's world (0: none kept) */
    FT_ASSERT_INV(s->watch.steptime_world == 0 || s->watch.steptime_world == s->ngang * s->G,
                  "step times for world %d, gang world %d", s->watch.steptime_world,
                  s->ngang * s->G);
    for (int p = 0; p < s->ngang; p++)
      for (int j = 0; j < s->G; j++) {
        const sup_worker *w = &s->nodes[s->gang[p]].w[j];
        FT_ASSERT_INV(w->gen == s->gen && w->rank == sup_gang_rank(p, j, s->G) &&
                          w->rank < s->ngang * s->G,
                      "node %d slot %d: gen %" PRIu64 " rank %d in gen %" PRIu64 " world %d",
                      s->gang[p], j, w->gen, w->rank, s->gen, s->ngang * s->G);
      }
  }
  /* RECORDING, FORMING: the new gang's workers are not assigned yet */
  if (s->rphase == SUP_RP_RECORDING || s->rphase == SUP_RP_FORMING)
    for (int p = 0; p < s->ngang; p++)
      for (int j = 0; j < s->G; j++) {
        const sup_worker *w = &s->nodes[s->gang[p]].w[j];
        FT_ASSERT_INV(w->gen != s->gen, "node %d slot %d assigned while FORMING", s->gang[p], j);
      }
}

void sup_rec_enter(const sup *s) {
  if (check_depth++ == 0)
    check_state(s);
}

void sup_rec_leave(const sup *s) {
  if (--check_depth == 0)
    check_state(s);
}
#else
void sup_rec_enter(const sup *s) {
  (void)s;
}
void sup_rec_leave(const sup *s) {
  (void)s;
}
#endif

/* ---- launching ------------------------------------------------------------ */

static void cfg_blame_nodes(sup *s);
static int launch_slice(sup *s);
static void launch_more_t(sup *s);

/* ---- in-process rejoin (recovery.in_process) ------------------------------------
 *
 * On a fault, a gang node none of whose workers is blamed, all alive,
 * connected and in the gang, is not stopped: each worker gets STOP rejoin
 * with the new generation (ft_wire.h), leaves its collectives and answers
 * with a frame of that generation (sup_recovery_rejoined). Such a node
 * counts as stopped once all its workers have answered, is not relaunched
 * by the plan, and gets the new generation's ASSIGN like a fresh one. A
 * worker of it that exits, a blame that lands on it, or
 * recovery.rejoin_timeout_s without an answer: the node falls back to a
 * process restart (SIGTERM, the grace timer's SIGKILL, a relaunch). */

static int rejoin_eligible(const sup *s, int n) {
  const sup_node *nd = &s->nodes[n];
  if (!s->rf.recovery.in_process || nd->role != SUP_ROLE_ACTIVE || nd->faulty || nd->counted ||
      nd->host_lost || nd->term_sent || nd->kill_sent)
    return 0;
  for (int j = 0; j < s->G; j++) {
    const sup_worker *w = &nd->w[j];
    if (!w->alive || !w->conn || !w->hello || w->rank < 0)
      return 0;
  }
  return 1;
}

int sup_rec_node_rejoined(const sup *s, int n) {
  const sup_node *nd = &s->nodes[n];
  if (!nd->rejoin)
    return 0;
  for (int j = 0; j < s->G; j++)
    if (!nd->w[j].alive || !nd->w[j].rejoined)
      return 0;
  return 1;
}

/* Sends node n's workers the STOP(rejoin) of this round, which carries
 * s->gen: only once its record was answered (invariant 1); until then
 * their frames of the old generation are tolerated (rejoin_from), and
 * sup_recovery_recorded sends it. */
static void rejoin_tell(sup *s, int n) {
  sup_node *nd = &s->nodes[n];
  if (!nd->rejoin || nd->rejoin_told || s->recovery.rec_done < s->recovery.gen_rec)
    return;
  nd->rejoin_told = 1;
  nd->rejoin_told_s = ft_now_s();
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STOP);
  m.stop.reason = FT_STOP_REJOIN;
  m.stop.detail = "a fault elsewhere: rejoin the next generation in process";
  sup_conn *host = sup_host_conn(s, n); /* once for the host, its agent tells each */
  if (host) {
    sup_send(s, host, &m, s->gen);
    return;
  }
  for (int j = 0; j < s->G; j++)
    if (nd->w[j].conn)
      sup_send(s, nd->w[j].conn, &m, s->gen);
}

/* Asks node n's workers to leave generation s->gen - 1 (or older) in process. */
static void rejoin_request(sup *s, int n) {
  sup_node *nd = &s->nodes[n];
  nd->rejoin = 1;
  nd->rejoin_told = 0;
  nd->rejoin_told_s = 0;
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &nd->w[j];
    /* the oldest generation its late frames may carry: the one it trains in,
     * or (asked again before its ASSIGN) the one it answered in */
    if (!w->rejoin_from)
      w->rejoin_from = w->gen;
    w->rejoined = 0;
  }
  rejoin_tell(s, n);
}

/* Node n leaves the in-process path: its workers are stopped as processes. */
void sup_rec_rejoin_fallback(sup *s, int n, const char *why) {
  sup_node *nd = &s->nodes[n];
  if (!nd->rejoin)
    return;
  nd->rejoin = 0;
  for (int j = 0; j < s->G; j++) {
    nd->w[j].rejoin_from = 0;
    nd->w[j].rejoined = 0;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddStringToObject(f, "reason", why);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  sup_events_emit(s->ev, "rejoin_fallback", f, "node %d is restarted as a process: %s", n, why);
  for (int j = 0; j < s->G; j++)
    sup_stop_worker(s, &nd->w[j], FT_STOP_RECOVERING, "gang stopped for recovery");
  sup_signal_node(s, n, SIGTERM);
  if (!evtimer_pending(s->grace, NULL)) {
    struct timeval tv = {(long)SUP_GRACE_STOP_S, 0};
    evtimer_add(s->grace, &tv);
  }
}

/* ---- finishing ------------------------------------------------------------ */

static void maybe_finished_t(sup *s) {
  if (s->state != SUP_FINISHING || sup_any_alive(s) || s->ndrains)
    return;
  if (s->exit_code == SUP_EXIT_DONE) {
    cJSON *f = cJSON_CreateObject();
    double wall = ft_now_s() - s->t_start_s;
    cJSON_AddNumberToObject(f, "steps", (double)s->final_step);
    cJSON_AddNumberToObject(f, "restarts", s->restarts);
    cJSON_AddNumberToObject(f, "wall_s", (double)(long long)(wall * 1000) / 1000);
    cJSON_AddNumberToObject(f, "gen", (double)s->gen);
    sup_events_emit(s->ev, "run_done", f, "%" PRId64 " steps, %d restart(s), %.1f s", s->final_step,
                    s->restarts, wall);
    /* on the record lane, which writes it before supervise exits (sup_commitq_free) */
    sup_persist_queue(s, "done", "the run's status");
    s->state = SUP_DONE;
  } else if (s->exit_code == SUP_EXIT_FAILED) {
    s->state = SUP_FAILED;
  }
  if (s->nunkillable) { /* never waited for (bounded teardown): init reaps them */
    int pids[SUP_MAX_UNKILLABLE], nodes[SUP_MAX_UNKILLABLE];
    for (int i = 0; i < s->nunkillable; i++) {
      pids[i] = (int)s->unkillable[i].pid;
      nodes[i] = s->unkillable[i].node;
    }
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "pids", sup_json_ints(pids, s->nunkillable));
    cJSON_AddItemToObject(f, "nodes", sup_json_ints(nodes, s->nunkillable));
    sup_events_emit(s->ev, "unkillable_left", f,
                    "%d process(es) given up as unkillable still in uninterruptible sleep: left "
                    "to init, which reaps them when their I/O ends",
                    s->nunkillable);
    s->nunkillable = 0;
  }
  for (int n = 0; s->agent_mode && n < s->nnodes; n++) /* the agents end with the run */
    sup_agent_stop(s, n, s->exit_code == SUP_EXIT_DONE ? FT_STOP_DONE : FT_STOP_SHUTDOWN,
                   "the run is over");
  event_base_loopbreak(s->base);
}

void sup_rec_maybe_finished(sup *s) {
  sup_rec_enter(s);
  maybe_finished_t(s);
  sup_rec_leave(s);
}

/* Stops every process: STOP(why) to the connected, SIGTERM to all, SIGKILL
 * after grace_s. */
void sup_rec_stop_everyone(sup *s, ft_stop_reason why, const char *detail, double grace_s) {
  s->state = SUP_FINISHING;
  s->rphase = SUP_RP_NONE;
  if (s->waitpoll)
    event_del(s->waitpoll);
  for (int n = 0; n < s->nnodes; n++) {
    for (int j = 0; j < s->G; j++)
      sup_stop_worker(s, &s->nodes[n].w[j], why, detail);
    /* done: a STOP'ed worker exits 0 by itself; SIGTERM only the unconnected.
     * Otherwise SIGTERM at once. */
    if (why != FT_STOP_DONE)
      sup_signal_node(s, n, SIGTERM);
  }
  struct timeval tv = {(long)grace_s, (long)((grace_s - (long)grace_s) * 1e6)};
  evtimer_add(s->grace, &tv);
  sup_rec_maybe_finished(s);
}

static void done_t(sup *s) {
  if (s->state >= SUP_FINISHING)
    return;
  s->exit_code = SUP_EXIT_DONE;
  sup_rec_stop_everyone(s, FT_STOP_DONE, "run done", SUP_GRACE_DONE_S);
  /* workers that never connected get no STOP: terminate them */
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++)
      if (s->nodes[n].w[j].alive && !s->nodes[n].w[j].hello)
        sup_signal_node(s, n, SIGTERM);
}

void sup_recovery_done(sup *s) {
  sup_rec_enter(s);
  done_t(s);
  sup_rec_leave(s);
}

/* Ends the run: exit_code (SUP_EXIT_FAILED, SUP_EXIT_STORE), "run_failed"
 * with its cause: "recovery" (no nodes, max_restarts, ...), "config",
 * "data" (every worker failed alike) or "store". */
static void fail_run_t(sup *s, int exit_code, const char *cause, const char *reason) {
  if (s->state >= SUP_FINISHING)
    return;
  snprintf(s->fail_reason, sizeof s->fail_reason, "%s", reason);
  s->exit_code = exit_code;
  s->recovery.cfg_deadline_s = 0;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "reason", reason);
  cJSON_AddStringToObject(f, "cause", cause);
  cJSON_AddNumberToObject(f, "restarts", s->restarts);
  cJSON_AddNumberToObject(f, "last_step", (double)s->run.last_step);
  sup_events_emit(s->ev, "run_failed", f, "%s", reason);
  sup_persist_queue(s, "failed", "the run's status");
  sup_rec_stop_everyone(s, FT_STOP_SHUTDOWN, reason, SUP_GRACE_STOP_S);
}

static void fail_run(sup *s, int exit_code, const char *cause, const char *reason) {
  sup_rec_enter(s);
  fail_run_t(s, exit_code, cause, reason);
  sup_rec_leave(s);
}

void sup_recovery_fail(sup *s, const char *reason) {
  fail_run(s, SUP_EXIT_FAILED, "recovery", reason);
}

void sup_recovery_store_failed(sup *s, const char *reason) {
  fail_run(s, SUP_EXIT_STORE, "store", reason);
}

/* ---- forming a gang ------------------------------------------------------- */

/* The restore step, when it is a memory-level checkpoint, is in no catalog
 * a worker on another host reads (an s3 store's catalog is each host's
 * cache): its manifest goes into the generation's KV under prefix
 * (FT_KV_RESTORE_MANIFEST), where the workers look for it first. Failing
 * that, they look in their store as always. */
static void publish_restore_manifest(sup *s, int64_t restore, const char *prefix) {
  /* the record says the level: the manifest (tens of MB at thousands of
   * ranks, a second of the loop's time to parse) is read only when it is
   * published */
  ckpt_info info;
  if (restore < 0 || ckpt_store_get_info(s->store, s->rf.run, restore, &info) ||
      info.level != CKPT_LEVEL_MEMORY)
    return;
  ckpt_manifest *m = NULL;
  if (ckpt_store_load(s->store, s->rf.run, restore, &m))
    return;
  char *js = ckpt_manifest_to_json(m);
  ckpt_manifest_free(m);
  if (!js)
    return;
  size_t len = strlen(js), part = FT_WIRE_MAX_VALUE;
  int n = (int)((len + part - 1) / part);
  char key[FT_WIRE_MAX_KEY + 1], num[32];
  for (int i = 0; i < n; i++) {
    size_t off = (size_t)i * part, l = len - off < part ? len - off : part;
    snprintf(key, sizeof key, "%s" FT_KV_RESTORE_MANIFEST "/%d", prefix, i);
    sup_kv_set(s->kv, key, (const uint8_t *)js + off, (uint32_t)l);
  }
  snprintf(key, sizeof key, "%s" FT_KV_RESTORE_MANIFEST, prefix);
  snprintf(num, sizeof num, "%d", n);
  sup_kv_set(s->kv, key, (const uint8_t *)num, (uint32_t)strlen(num)); /* last: all parts are in */
  free(js);
}

static void assign_t(sup *s) {
  int64_t restore = -1;
  if (ckpt_store_latest(s->store, s->rf.run, INT64_MAX, &restore) != 0)
    restore = -1;
  s->restore_step = restore;
  int world = s->ngang * s->G;
  s->hooks.generation(s); /* the detectors' windows start again (sup_watch.c) */
  char rdzv[64];
  int rl = snprintf(rdzv, sizeof rdzv, "g%" PRIu64 "/", s->gen);
  publish_restore_manifest(s, restore, rdzv);
  sup_pending_clear(s);
  double now = ft_now_s();
  for (int p = 0; p < s->ngang; p++) {
    sup_node *nd = &s->nodes[s->gang[p]];
    /* a host frame: its agent gives slot j rank + j (ft_wire.h) */
    sup_conn *host = sup_host_conn(s, s->gang[p]);
    ft_msg m;
    ft_msg_init(&m, FT_MSG_ASSIGN);
    m.assign.world = (uint32_t)world;
    m.assign.restore_step = restore;
    m.assign.rdzv = (const uint8_t *)rdzv;
    m.assign.rdzv_len = (uint32_t)rl;
    m.assign.skips = s->skips;
    m.assign.nskips = (uint32_t)s->nskips;
    nd->rejoin = 0;
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &nd->w[j];
      w->rejoin_from = 0;
      w->rejoined = 0;
      w->rank = sup_gang_rank(p, j, s->G);
      w->gen = s->gen;
      w->last_msg_s = now;
      m.assign.rank = (uint32_t)w->rank;
      if (w->conn && !host)
        sup_send(s, w->conn, &m, s->gen);
      w->buddies_h = 0; /* told again, even "" */
    }
    if (host) {
      m.assign.rank = (uint32_t)sup_gang_rank(p, 0, s->G);
      sup_send(s, host, &m, s->gen);
    }
  }
  sup_send_buddies(s);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "world", world);
  cJSON_AddItemToObject(f, "nodes", sup_json_ints(s->gang, s->ngang));
  cJSON_AddNumberToObject(f, "restore_step", (double)restore);
  cJSON *sk = cJSON_AddArrayToObject(f, "skips");
  for (int i = 0; i < s->nskips; i++) {
    cJSON *r = cJSON_CreateArray();
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)s->skips[i].first));
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)s->skips[i].end));
    cJSON_AddItemToArray(sk, r);
  }
  sup_events_emit(s->ev, "generation_started", f,
                  "gen %" PRIu64 ": world %d, restore step %" PRId64, s->gen, world, restore);
  if (s->state == SUP_STARTING) {
    s->state = SUP_RUNNING;
    s->rphase = SUP_RP_NONE;
  } else {
    s->rphase = SUP_RP_ASSIGNED;
  }
}

static void assign(sup *s) {
  sup_rec_enter(s);
  assign_t(s);
  sup_rec_leave(s);
}

/* Every gang worker launched, connected and cleared, and no node left to
 * launch. Called at every HELLO and doctor verdict while a gang forms: it
 * starts at the first worker it found not ready the last time (workers get
 * ready, they rarely stop being ready while a gang forms), and says yes
 * only after a whole pass found every one ready: O(workers) per gang
 * rather than per HELLO (tests/scale: 16,384 HELLOs). */
static int worker_ready(const sup *s, int i) {
  const sup_worker *w = &s->nodes[s->gang[i / s->G]].w[i % s->G];
  return w->alive && w->hello && w->conn && sup_doctor_cleared(s, w);
}

static int gang_ready(sup *s) {
  int total = s->ngang * s->G;
  if (s->recovery.launch_qi < s->recovery.nlaunch_q)
    return 0;
  if (s->recovery.ready_cursor < 0 || s->recovery.ready_cursor >= total)
    s->recovery.ready_cursor = 0;
  for (int i = s->recovery.ready_cursor; i < total; i++)
    if (!worker_ready(s, i)) {
      s->recovery.ready_cursor = i;
      return 0;
    }
  for (int i = 0; i < s->recovery.ready_cursor; i++)
    if (!worker_ready(s, i)) {
      s->recovery.ready_cursor = i;
      return 0;
    }
  return 1;
}

static void hello_t(sup *s, sup_worker *w) {
  int forming =
      s->state == SUP_STARTING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_FORMING);
  if (forming && gang_ready(s))
    assign(s);
}

void sup_recovery_hello(sup *s, sup_worker *w) {
  sup_rec_enter(s);
  hello_t(s, w);
  sup_rec_leave(s);
}

static void first_step_t(sup *s, int64_t step) {
  double now = ft_now_s();
  int64_t lost = s->recovery.fault_last_step - (s->restore_step < 0 ? 0 : s->restore_step);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(
      f, "detect_to_stopped_ms",
      (double)(long long)((s->recovery.t_stopped_s - s->recovery.t_detect_s) * 1e3));
  cJSON_AddNumberToObject(f, "detect_to_first_step_ms",
                          (double)(long long)((now - s->recovery.t_detect_s) * 1e3));
  cJSON_AddNumberToObject(f, "steps_lost", (double)(lost < 0 ? 0 : lost));
  cJSON_AddNumberToObject(f, "restore_step", (double)s->restore_step);
  cJSON_AddNumberToObject(f, "first_step", (double)step);
  cJSON_AddNumberToObject(f, "rejoined_in_process", s->recovery.rejoined_nodes);
  sup_events_emit(s->ev, "recovered", f,
                  "gen %" PRIu64 " trains again at step %" PRId64
                  " (%.0f ms after detection, %" PRId64 " step(s) lost)",
                  s->gen, step, (now - s->recovery.t_detect_s) * 1e3, lost < 0 ? 0 : lost);
  s->state = SUP_RUNNING;
  s->rphase = SUP_RP_NONE;
}

void sup_recovery_first_step(sup *s, int64_t step) {
  sup_rec_enter(s);
  first_step_t(s, step);
  sup_rec_leave(s);
}

/* ---- recovery -------------------------------------------------------------- */

/* ---- waiting on storage ------------------------------------------------------
 *
 * A storage hang (every rank stuck in a data read or a checkpoint write,
 * fault storage_hang, nobody blamed) is the store's or the data path's, not
 * the nodes': a gang relaunched at once would stall in the same read. So
 * the plan after it waits first (WAITING; event waiting_on_storage {attempt,
 * wait_s, step}; /status "waiting_on_storage", metric
 * ftsup_waiting_on_storage), watchdog.storage_backoff_s for the first,
 * doubled for each consecutive one (at most SUP_STORAGE_WAIT_MAX_S), then
 * relaunches (storage_retry {attempt, waited_s}). A step past the one the
 * last hang stalled at ends the streak (sup_recovery_step_done). Each
 * storage hang is still a round: recovery.max_restarts bounds them. */

static void storage_hang_noted(sup *s) {
  double base = s->rf.watchdog.storage_backoff_s;
  s->recovery.storage_hangs++;
  s->recovery.storage_hang_step = s->run.last_step;
  if (base <= 0)
    return;
  double cap = base > SUP_STORAGE_WAIT_MAX_S ? base : SUP_STORAGE_WAIT_MAX_S, w = base;
  for (int k = 1; k < s->recovery.storage_hangs && w < cap; k++)
    w *= 2;
  s->recovery.storage_wait_s = w < cap ? w : cap;
  s->recovery.storage_wait_until_s = 0;
}

/* 1: the plan waits (WAITING, the waitpoll timer set); 0: go on. */
static int storage_wait(sup *s) {
  if (s->recovery.storage_wait_s <= 0)
    return 0;
  double now = ft_now_s();
  if (s->recovery.storage_wait_until_s <= 0) {
    s->recovery.storage_wait_until_s = now + s->recovery.storage_wait_s;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "attempt", s->recovery.storage_hangs);
    cJSON_AddNumberToObject(f, "wait_s", s->recovery.storage_wait_s);
    cJSON_AddNumberToObject(f, "step", (double)s->recovery.storage_hang_step);
    sup_events_emit(s->ev, "waiting_on_storage", f,
                    "storage hang %d in a row (at step %" PRId64
                    "): waiting %.0f s before the restart (watchdog.storage_backoff_s, doubled "
                    "each time)",
                    s->recovery.storage_hangs, s->recovery.storage_hang_step,
                    s->recovery.storage_wait_s);
  }
  double left = s->recovery.storage_wait_until_s - now;
  if (left <= 0) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "attempt", s->recovery.storage_hangs);
    cJSON_AddNumberToObject(f, "waited_s", s->recovery.storage_wait_s);
    sup_events_emit(s->ev, "storage_retry", f, "waited %.0f s on storage: restarting (attempt %d)",
                    s->recovery.storage_wait_s, s->recovery.storage_hangs);
    s->recovery.storage_wait_s = 0;
    s->recovery.storage_wait_until_s = 0;
    return 0;
  }
  s->rphase = SUP_RP_WAITING;
  struct timeval tv = {(long)left, (long)((left - (double)(long)left) * 1e6)};
  evtimer_add(s->waitpoll, &tv);
  return 1;
}

void sup_recovery_step_done(sup *s, int64_t step) {
  if (s->recovery.storage_hangs && step > s->recovery.storage_hang_step)
    s->recovery.storage_hangs = 0;
}

static void plan_and_launch_t(sup *s) {
  if (storage_wait(s))
    return;
  int faulty[SUP_MAX_NODES] = {0}, spares[SUP_MAX_NODES], nsp = 0;
  for (int n = 0; n < s->nnodes; n++)
    faulty[n] = s->nodes[n].faulty;
  /* connected spares first, then spares still starting */
  for (int pass = 0; pass < 2; pass++)
    for (int n = 0; n < s->nnodes; n++) {
      if (s->nodes[n].role != SUP_ROLE_SPARE)
        continue;
      int alive = 1, conn = 1;
      for (int j = 0; j < s->G; j++) {
        alive &= s->nodes[n].w[j].alive;
        /* "connected": and cleared by the doctor (else it is still starting) */
        conn &= s->nodes[n].w[j].conn != NULL && sup_doctor_cleared(s, &s->nodes[n].w[j]);
      }
      if (alive && (pass == 0 ? conn : !conn))
        spares[nsp++] = n;
    }
  sup_plan plan;
  sup_gang_plan(s->gang, s->ngang, faulty, spares, nsp, s->G, s->rf.train.global_batch,
                s->no_spares, &plan);
  if (plan.verdict == SUP_PLAN_FAIL) {
    for (int i = 0; i < plan.nquarantine; i++)
      sup_quarantine(s, plan.quarantine[i]);
    if (plan.nquarantine)
      sup_persist_notes(s);
    sup_recovery_fail(s, plan.reason);
    return;
  }
  if (plan.verdict == SUP_PLAN_WAIT) {
    if (s->rphase != SUP_RP_WAITING) {
      cJSON *f = cJSON_CreateObject();
      cJSON_AddStringToObject(f, "reason", plan.reason);
      sup_events_emit(s->ev, "waiting_for_spare", f, "%s", plan.reason);
    }
    s->rphase = SUP_RP_WAITING;
    struct timeval tv = {SUP_WAIT_REPLAN_S, 0};
    evtimer_add(s->waitpoll, &tv);
    return;
  }
  if (plan.verdict != SUP_PLAN_OK)
    FT_BUG("sup_gang_plan verdict %d", plan.verdict);
  for (int i = 0; i < plan.nquarantine; i++)
    sup_quarantine(s, plan.quarantine[i]);
  /* nodes that failed on a host that still answers: restarted in place */
  for (int i = 0; i < plan.nrestart; i++) {
    sup_node *nd = &s->nodes[plan.restart[i]];
    if (!nd->counted)
      continue;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "node", plan.restart[i]);
    cJSON_AddNumberToObject(f, "failures", nd->nfailures);
    cJSON_AddNumberToObject(f, "failures_to_quarantine",
                            s->rf.recovery.node_failures_to_quarantine);
    cJSON_AddNumberToObject(f, "window_s", s->rf.recovery.node_failure_window_s);
    sup_events_emit(s->ev, "node_restarted", f,
                    "node %d restarted in place (failure %d of %d within %.0f s)", plan.restart[i],
                    nd->nfailures, s->rf.recovery.node_failures_to_quarantine,
                    s->rf.recovery.node_failure_window_s);
  }
  if (plan.nquarantine)
    sup_persist_notes(s);
  char why[4700];
  if (sup_seal_check(s, why, sizeof why)) { /* the run file's copy, once per round (sup_seal.c) */
    sup_recovery_fail(s, why);
    return;
  }
  for (int i = 0; i < plan.npromote; i++) {
    int sp = plan.promote_spare[i];
    s->nodes[sp].role = SUP_ROLE_ACTIVE;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "spare_node", sp);
    cJSON_AddNumberToObject(f, "replaces", plan.promote_for[i]);
    sup_events_emit(s->ev, "spare_promoted", f, "node %d replaces node %d", sp,
                    plan.promote_for[i]);
  }
  if (plan.shrunk) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "world_before", plan.world_before);
    cJSON_AddNumberToObject(f, "world_after", plan.world_after);
    sup_events_emit(s->ev, "gang_shrunk", f, "world %d -> %d (no spare left)", plan.world_before,
                    plan.world_after);
  }
  memcpy(s->gang, plan.gang, sizeof(int) * (size_t)plan.ngang);
  s->ngang = plan.ngang;
  for (int n = 0; n < s->nnodes; n++)
    s->nodes[n].faulty = s->nodes[n].counted = 0;
  s->recovery.rejoined_nodes = 0;
  s->recovery.nlaunch_q = s->recovery.launch_qi = 0;
  for (int i = 0; i < plan.nrestart; i++) {
    if (sup_rec_node_rejoined(s, plan.restart[i])) { /* in process: it waits for ASSIGN */
      s->recovery.rejoined_nodes++;
      continue;
    }
    s->recovery.launch_q[s->recovery.nlaunch_q++] = plan.restart[i];
  }
  /* the run state with this plan's quarantines, on the record lane; the
   * launch (then ASSIGN) waits in RECORDING for it, and so for every
   * record queued before it: the generation, a rollback's BAD marks */
  s->rphase = SUP_RP_RECORDING;
  s->recovery.rec_wait = s->rec_queued + 1;
  s->recovery.rec_wait_gen = s->gen;
  sup_persist_queue(s, "running", "the run state");
}

/* RECORDING -> FORMING: the round's records are answered (written, or a
 * failure said on stderr, after which the round goes on as it always
 * did): the planned gang is launched. */
static void recorded_launch_t(sup *s) {
  s->rphase = SUP_RP_FORMING;
  sup_logprep_stop(s->logprep); /* its files were the first gang's queue's */
  s->logprep = NULL;
  launch_more_t(s);
}

void sup_recovery_recorded(sup *s, uint64_t seq) {
  sup_rec_enter(s);
  s->recovery.rec_done = seq;
  if (s->state == SUP_RECOVERING) {
    /* STOP(rejoin) carries s->gen: sent once its record is answered */
    for (int p = 0; p < s->ngang; p++)
      rejoin_tell(s, s->gang[p]);
    /* the record this round waits for, of the generation still current (a
     * fault since would have started another round: STOPPING) */
    if (s->rphase == SUP_RP_RECORDING && s->recovery.rec_wait_gen == s->gen &&
        s->recovery.rec_done >= s->recovery.rec_wait)
      recorded_launch_t(s);
  }
  sup_rec_leave(s);
}

void sup_rec_plan_and_launch(sup *s) {
  sup_rec_enter(s);
  plan_and_launch_t(s);
  sup_rec_leave(s);
}

/* The slurm launcher: node n is blamed for a hardware cause (it will be
 * quarantined) and srun was told to end its job step. The round does not
 * wait for that step: a host that lost power or its link never answers
 * slurmstepd, so srun would keep it for the whole grace; a host that does
 * answer ends it in milliseconds anyway. Nothing of it can join the new
 * generation (fenced, never launched again); the grace timer still kills
 * what is left of it (on_grace_t). */
static int node_left_behind(const sup *s, int n) {
  const sup_node *nd = &s->nodes[n];
  return s->slurm_launcher && nd->faulty && (nd->term_sent || nd->kill_sent);
}

/* Is gang position p still to stop (alive, not rejoined, not left behind)? */
static int stop_pending(sup *s, int p) {
  int n = s->gang[p];
  return sup_node_alive(s, n) && !sup_rec_node_rejoined(s, n) && !node_left_behind(s, n);
}

/* Called at every node's exit or rejoin: a scan of the whole gang each
 * time was quadratic (16,384 nodes rejoining took seconds of the loop), so
 * the scan goes on from the first position found pending last time, and
 * only a whole scan from the start (positions before the cursor can be
 * pending again: a rejoined worker that died) declares the gang stopped. */
static void check_stopped_t(sup *s) {
  if (s->state != SUP_RECOVERING || s->rphase != SUP_RP_STOPPING)
    return;
  int *cur = &s->recovery.stop_cursor;
  if (*cur < 0 || *cur > s->ngang)
    *cur = 0;
  for (; *cur < s->ngang; ++*cur)
    if (stop_pending(s, *cur))
      return;
  int behind[SUP_MAX_NODES], nb = 0;
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    if (!sup_node_alive(s, n) || sup_rec_node_rejoined(s, n))
      continue;
    if (!node_left_behind(s, n)) {
      *cur = p;
      return;
    }
    behind[nb++] = n;
  }
  *cur = 0; /* the next round starts from the start */
  if (!nb)  /* else the grace timer kills what is left behind */
    evtimer_del(s->grace);
  evtimer_del(s->rejoin_timer);
  s->recovery.t_stopped_s = ft_now_s();
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(
      f, "ms", (double)(long long)((s->recovery.t_stopped_s - s->recovery.t_detect_s) * 1e3));
  cJSON_AddItemToObject(f, "left_behind", sup_json_ints(behind, nb));
  sup_events_emit(s->ev, "gang_stopped", f, "%.0f ms after detection%s",
                  (s->recovery.t_stopped_s - s->recovery.t_detect_s) * 1e3,
                  nb ? " (the job step of a blamed node left behind: its host does not answer)"
                     : "");
  sup_rec_plan_and_launch(s);
}

void sup_rec_check_stopped(sup *s) {
  sup_rec_enter(s);
  check_stopped_t(s);
  sup_rec_leave(s);
}

static void fault_t(sup *s, sup_fault_kind kind, int node, int slot, pid_t pid, const char *detail,
                    enum sup_blame blame) {
  const char *kname = sup_fault_kind_name(kind);
  if (s->state >= SUP_FINISHING)
    return;
  int joining =
      s->state == SUP_RECOVERING && (s->rphase == SUP_RP_STOPPING || s->rphase == SUP_RP_WAITING);
  sup_node *nd = node >= 0 && blame != SUP_BLAME_NONE ? &s->nodes[node] : NULL;
  if (nd && blame == SUP_BLAME_NODE && !nd->faulty) {
    nd->faulty = 1;
    if (!nd->host_lost) /* a lost host wrote its own reason */
      snprintf(nd->why, sizeof nd->why, "%s: %s", kname, detail);
  }
  if (nd && blame == SUP_BLAME_COUNT && !nd->counted) {
    /* one failure per node per round, however many of its workers exit */
    nd->counted = 1;
    nd->nfailures = sup_failures_add(&nd->fails, ft_now_s(), s->rf.recovery.node_failure_window_s);
    if (!nd->faulty &&
        sup_failures_quarantine(nd->nfailures, s->rf.recovery.node_failures_to_quarantine)) {
      nd->faulty = 1;
      snprintf(nd->why, sizeof nd->why,
               "%d failures within %.0f s (recovery.node_failures_to_quarantine %d); the last: "
               "%s: %s",
               nd->nfailures, s->rf.recovery.node_failure_window_s,
               s->rf.recovery.node_failures_to_quarantine, kname, detail);
    }
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "kind", kname);
  cJSON_AddNumberToObject(f, "node", node);
  if (sup_node_host(s, node))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, node));
  cJSON_AddNumberToObject(f, "slot", slot);
  cJSON_AddNumberToObject(f, "pid", pid);
  cJSON_AddNumberToObject(f, "step", (double)s->run.last_step);
  cJSON_AddStringToObject(f, "detail", detail);
  cJSON_AddNumberToObject(f, "detected_at", (double)(long long)(wall_s() * 1000) / 1000);
  /* training made no progress from rank 0's last STEP to here: the time
   * the fault cost before it was known (null before the gang's first) */
  if (s->run.last_step_at_s > 0)
    cJSON_AddNumberToObject(f, "stalled_s",
                            round((ft_now_s() - s->run.last_step_at_s) * 1000) / 1000);
  else
    cJSON_AddNullToObject(f, "stalled_s");
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddBoolToObject(f, "blamed", nd != NULL);
  cJSON_AddNumberToObject(f, "failures", nd ? nd->nfailures : 0);
  cJSON_AddBoolToObject(f, "quarantine", nd && nd->faulty);
  cJSON_AddBoolToObject(f, "during_recovery", joining);
  sup_events_emit(s->ev, "fault_detected", f, "node %d %s (%s) at step %" PRId64 "%s%s", node,
                  kname, detail, s->run.last_step,
                  !nd          ? ""
                  : nd->faulty ? " -> quarantine"
                               : " -> restart in place",
                  joining ? " [joins the recovery in progress]" : "");
  if (s->chaos_done)
    sup_persist_notes(s); /* the chaos fault fired: never again in this run */
  if (nd && (nd->faulty || nd->counted))
    sup_rec_rejoin_fallback(s, node, "blamed for a fault while rejoining");
  if (kind == SUP_FAULT_STORAGE_HANG)
    storage_hang_noted(s);
  if (joining)
    return;

  s->restarts++;
  if (s->restarts > s->rf.recovery.max_restarts) {
    char why[256];
    snprintf(why, sizeof why, "recovery.max_restarts (%d) exceeded", s->rf.recovery.max_restarts);
    if (nd && nd->faulty) {
      sup_quarantine(s, node);
      sup_persist_notes(s);
    }
    sup_recovery_fail(s, why);
    return;
  }
  s->recovery.t_detect_s = ft_now_s();
  s->recovery.fault_last_step = s->run.last_step;
  s->gen++; /* fence the old gang; recorded before any message carries it */
  s->state = SUP_RECOVERING;
  s->rphase = SUP_RP_STOPPING;
  /* on the record lane: the old gang is stopped meanwhile (its messages
   * carry its own generation); STOP(rejoin) waits for it (rejoin_tell),
   * and ASSIGN for the plan's record behind it (RECORDING) */
  char what[64];
  snprintf(what, sizeof what, "generation %" PRIu64, s->gen);
  s->recovery.gen_rec = s->rec_queued + 1;
  sup_persist_queue(s, "running", what);
  sup_pending_clear(s);
  int rejoining = 0;
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    if (rejoin_eligible(s, n)) {
      rejoin_request(s, n);
      rejoining++;
      continue;
    }
    sup_rec_rejoin_fallback(s, n, "not eligible this round"); /* asked in an earlier round */
    for (int j = 0; j < s->G; j++)
      sup_stop_worker(s, &s->nodes[n].w[j], FT_STOP_RECOVERING, "gang stopped for recovery");
    /* a node asked for its stacks over the wire (hang_evidence) is ended
     * by the STOP just queued behind the DUMP, once its dump is written: a
     * SIGTERM of its ssh or srun now would end it before the DUMP arrives;
     * the grace timer's SIGKILL below ends it if the STOP does not */
    if (!s->nodes[n].dump_asked)
      sup_signal_node(s, n, SIGTERM);
  }
  for (int n = 0; n < s->nnodes; n++)
    s->nodes[n].dump_asked = 0;
  struct timeval tv = {(long)SUP_GRACE_STOP_S, 0};
  evtimer_add(s->grace, &tv);
  if (rejoining) {
    double d = s->rf.recovery.rejoin_timeout_s;
    struct timeval rt = {(long)d, (long)((d - (double)(long)d) * 1e6)};
    evtimer_add(s->rejoin_timer, &rt);
  }
  /* configuration/data exits still waiting for a verdict: their nodes' */
  if (s->recovery.cfg_deadline_s)
    cfg_blame_nodes(s);
  /* nodes with no worker left: their hosts tell whether they are lost
   * before the plan is made */
  for (int p = 0; p < s->ngang; p++)
    sup_rec_host_reap(s, s->gang[p]);
  sup_rec_check_stopped(s);
}

void sup_recovery_fault(sup *s, sup_fault_kind kind, int node, int slot, pid_t pid,
                        const char *detail, enum sup_blame blame) {
  sup_rec_enter(s);
  fault_t(s, kind, node, slot, pid, detail, blame);
  sup_rec_leave(s);
}

static void refuse_t(sup *s, int n, const char *why) {
  sup_node *nd = &s->nodes[n];
  if (nd->role == SUP_ROLE_QUARANTINED || nd->role == SUP_ROLE_LOST || s->state >= SUP_FINISHING)
    return;
  if (sup_in_gang(s, n)) { /* the gang being formed: a round without it */
    fault_t(s, SUP_FAULT_DOCTOR, n, 0, nd->w[0].pid, why, SUP_BLAME_NODE);
    return;
  }
  snprintf(nd->why, sizeof nd->why, "doctor: %s", why);
  sup_quarantine(s, n);
  sup_persist_notes(s);
  for (int j = 0; j < s->G; j++)
    sup_stop_worker(s, &nd->w[j], FT_STOP_EVICTED, "the node doctor refused this node");
  sup_signal_node(s, n, SIGKILL);
}

void sup_recovery_refuse(sup *s, int n, const char *why) {
  sup_rec_enter(s);
  refuse_t(s, n, why);
  sup_rec_leave(s);
}

/* A rollback's BAD marks, on the record lane: every checkpoint of the run
 * with step > p->rec.restore (COMMITTED or GOOD: a PENDING one is a commit
 * under way, a BAD one is marked) is marked BAD, its step kept in
 * p->rec.bad. One that cannot be marked would be restored later: p->rc. */
static void mark_bad_after_work(sup *s, sup_pending_ckpt *p) {
  ckpt_info *list = NULL;
  size_t n = 0;
  p->rc = ckpt_store_list(s->store, s->rf.run, &list, &n);
  if (!p->rc && n && !(p->rec.bad = calloc(n, sizeof *p->rec.bad)))
    p->rc = ft_err_set(FT_ENOMEM, "out of memory");
  for (size_t i = 0; i < n && !p->rc; i++) {
    if (list[i].step <= p->rec.restore || list[i].state == CKPT_BAD ||
        list[i].state == CKPT_PENDING)
      continue;
    p->rc = ckpt_store_set_state(s->store, s->rf.run, list[i].step, CKPT_BAD);
    if (p->rc == FT_ENOENT) { /* deleted by retention meanwhile: nothing to restore */
      p->rc = FT_OK;
      continue;
    }
    if (!p->rc)
      p->rec.bad[p->rec.nbad++] = list[i].step;
  }
  if (p->rc)
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
  free(list);
}

/* The marks answered, on the loop: "checkpoint_bad" for each, then the
 * "rollback" event (its fields in p->rec.ev); a mark that failed fails the
 * run (invariant 7). Whatever round is current now: the marks are in the
 * catalog, and every later ASSIGN waits for them (the record lane's order). */
static void rollback_marked(sup *s, sup_pending_ckpt *p) {
  cJSON *f = p->rec.ev;
  int64_t spike = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(f, "spike_step"));
  int64_t restore = p->rec.restore;
  for (size_t i = 0; i < p->rec.nbad; i++) {
    char reason[160];
    snprintf(reason, sizeof reason, "may hold the fault begun at step %" PRId64, spike);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "step", (double)p->rec.bad[i]);
    cJSON_AddStringToObject(b, "reason", reason);
    sup_events_emit(s->ev, "checkpoint_bad", b, "step %" PRId64 ": %s", p->rec.bad[i], reason);
  }
  if (p->rc) {
    char why[1200];
    snprintf(why, sizeof why,
             "cannot mark the checkpoints after step %" PRId64 " bad (a restart would restore "
             "one): %s",
             restore, p->why);
    sup_recovery_fail(s, why);
    return;
  }
  cJSON *bad = cJSON_AddArrayToObject(f, "bad_steps");
  for (size_t i = 0; i < p->rec.nbad; i++)
    cJSON_AddItemToArray(bad, cJSON_CreateNumber((double)p->rec.bad[i]));
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(f, "kind"));
  cJSON *first = cJSON_GetObjectItem(f, "skip_first"), *end = cJSON_GetObjectItem(f, "skip_end");
  p->rec.ev = NULL; /* the event owns f now */
  if (cJSON_IsNumber(first))
    sup_events_emit(s->ev, "rollback", f,
                    "%s at step %" PRId64 ": back to step %" PRId64 ", skipping batches [%" PRId64
                    ", %" PRId64 ")",
                    kind, spike, restore, (int64_t)first->valuedouble, (int64_t)end->valuedouble);
  else
    sup_events_emit(s->ev, "rollback", f, "%s at step %" PRId64 ": back to step %" PRId64, kind,
                    spike, restore);
}

/* Rolls back before step `first` (the first step the fault may have
 * touched): the newest committed checkpoint before it becomes the restore
 * point, the newer ones BAD, a skip range under rollback_and_skip; then a
 * recovery round blaming `node` (-1: nobody; the gang restarts in place).
 * The marks go to the record lane first, then the round starts at once
 * (the old gang must stop training); its generation's record and the
 * plan's follow the marks in the lane, so the next ASSIGN (RECORDING)
 * comes after them. */
static void rollback_t(sup *s, int64_t first_step, sup_fault_kind kind, const char *detail,
                       int mode, int node, int slot, pid_t pid) {
  int64_t restore = -1;
  if (first_step <= 0 || ckpt_store_latest(s->store, s->rf.run, first_step - 1, &restore) != 0)
    restore = -1;
  int64_t first = -1, end = -1;
  char why[512];
  if (mode == SUP_SPIKE_ROLLBACK_SKIP) {
    sup_rollback_skip_range(s->skips, s->nskips, restore, first_step, s->rf.recovery.skip_batches,
                            &first, &end);
    if (sup_rollback_skips_add(s->skips, &s->nskips, FT_WIRE_MAX_SKIPS, first, end)) {
      snprintf(why, sizeof why, "cannot skip batches [%" PRId64 ", %" PRId64 "): %s", first, end,
               ft_err_detail());
      sup_recovery_fail(s, why);
      return;
    }
  }
  sup_rollback_good_fault(&s->watch.good, first_step, 1, restore);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "spike_step", (double)first_step);
  cJSON_AddNumberToObject(f, "restore_step", (double)restore);
  cJSON_AddStringToObject(f, "kind", sup_fault_kind_name(kind));
  if (first >= 0) {
    cJSON_AddNumberToObject(f, "skip_first", (double)first);
    cJSON_AddNumberToObject(f, "skip_end", (double)end);
  } else {
    cJSON_AddNullToObject(f, "skip_first");
    cJSON_AddNullToObject(f, "skip_end");
  }
  sup_pending_ckpt *p = sup_record_new(mark_bad_after_work, rollback_marked, "the BAD marks");
  p->rec.restore = restore;
  p->rec.ev = f;
  sup_record_push(s, p);
  /* the recovery round; it records gen with the new skip list before the
   * next ASSIGN */
  fault_t(s, kind, node, slot, pid, detail, node >= 0 ? SUP_BLAME_NODE : SUP_BLAME_NONE);
}

static int loss_fault_t(sup *s, int64_t spike_step, sup_fault_kind kind, const char *detail,
                        int force) {
  /* only a gang that trains: RUNNING, or a new gen before its first STEP */
  if (!(s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED)))
    return 0;
  int mode = s->watch.on_spike;
  if (mode == SUP_SPIKE_WARN && !force) {
    sup_rollback_good_fault(&s->watch.good, spike_step, 0, -1);
    return 0;
  }
  if (mode == SUP_SPIKE_WARN)
    mode = SUP_SPIKE_ROLLBACK; /* the workers stopped training: roll back anyway */
  rollback_t(s, spike_step, kind, detail, mode, -1, -1, 0);
  return 1;
}

int sup_recovery_loss_fault(sup *s, int64_t spike_step, sup_fault_kind kind, const char *detail,
                            int force) {
  sup_rec_enter(s);
  int rc = loss_fault_t(s, spike_step, kind, detail, force);
  sup_rec_leave(s);
  return rc;
}

void sup_recovery_sdc_fault(sup *s, int64_t first_step, int node, int slot, pid_t pid,
                            const char *detail) {
  sup_rec_enter(s);
  if (s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED))
    rollback_t(s, first_step, SUP_FAULT_SDC, detail, SUP_SPIKE_ROLLBACK, node, slot, pid);
  sup_rec_leave(s);
}

/* ---- the supervisor's own isolation ----------------------------------------
 *
 * When the supervisor's host is cut off (its link down, a partition on its
 * side), every worker goes silent at once: blaming each as a "hang" would
 * quarantine (and drain) every healthy node. So before a silence is blamed
 * on a node: if every live worker we know of, the gang's and the warm
 * spares' alike, has been silent for more than 2 heartbeat intervals
 * (healthy workers heartbeat every interval, even inside a collective),
 * and they are on at least 2 nodes, the silence is on our side. The event
 * is a fault of kind "supervisor_isolated" with nobody blamed: the gang is
 * restarted in place, and its workers, which have lost us too, stop by
 * themselves (FT_EXIT_LOST) and commit nothing (the generation is fenced).
 * One node alone (no spare) cannot be told from its own hang: it stays a
 * hang. Returns 1 if it acted (the caller blames nobody). quiet: the
 * silence that triggered the check. */
int sup_rec_isolated(sup *s, double now, double quiet) {
  double thr = 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  int nworkers = 0, nnodes = 0;
  for (int n = 0; n < s->nnodes; n++) {
    const sup_node *nd = &s->nodes[n];
    int in = sup_in_gang(s, n);
    if (!in && nd->role != SUP_ROLE_SPARE)
      continue;
    int counted = 0;
    for (int j = 0; j < s->G; j++) {
      const sup_worker *w = &nd->w[j];
      if (!w->alive || !w->hello) /* never heard: a slow start says nothing of us */
        continue;
      if (sup_silence_s(now, w->last_msg_s, s->stall_end_s) <= thr)
        return 0; /* someone is still heard: not us */
      nworkers++;
      counted = 1;
    }
    nnodes += counted;
  }
  if (nnodes < 2)
    return 0;
  char detail[256];
  snprintf(detail, sizeof detail,
           "all %d workers on %d nodes (spares included) silent at once, the longest for %.1f s: "
           "the supervisor's side of the network, not the nodes; nobody blamed",
           nworkers, nnodes, quiet);
  s->recovery.isolated_s = now;
  for (int p = 0; p < s->ngang; p++)
    sup_signal_node(s, s->gang[p], SIGKILL); /* whatever still runs there stops */
  sup_recovery_fault(s, SUP_FAULT_SUPERVISOR_ISOLATED, -1, -1, 0, detail, SUP_BLAME_NONE);
  return 1;
}

static int blame_silent_t(sup *s, const char *why) {
  if (s->state != SUP_RUNNING && !(s->state == SUP_RECOVERING &&
                                   (s->rphase == SUP_RP_FORMING || s->rphase == SUP_RP_ASSIGNED)))
    return 0;
  sup_loop_stall_check(s); /* a stall that ended in this very iteration */
  double limit = 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  double now = ft_now_s();
  sup_worker *silent[s->ngang * s->G + 1];
  int ns = 0;
  for (int p = 0; p < s->ngang; p++)
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[s->gang[p]].w[j];
      if (w->alive && w->rank >= 0 && w->gen == s->gen &&
          sup_silence_s(now, w->last_msg_s, s->stall_end_s) > limit)
        silent[ns++] = w;
    }
  if (ns && sup_rec_isolated(s, now, sup_silence_s(now, silent[0]->last_msg_s, s->stall_end_s)))
    return ns;
  for (int i = 0; i < ns; i++) {
    sup_worker *w = silent[i];
    char detail[256];
    snprintf(detail, sizeof detail, "%s; silent for %.1f s (> 2 heartbeat intervals, %.1f s)", why,
             sup_silence_s(now, w->last_msg_s, s->stall_end_s), limit);
    sup_signal_node(s, w->node, SIGKILL); /* a stopped process ignores SIGTERM */
    sup_recovery_fault(s, SUP_FAULT_HANG, w->node, w->slot, w->pid, detail, SUP_BLAME_NODE);
  }
  return ns;
}

int sup_recovery_blame_silent(sup *s, const char *why) {
  sup_rec_enter(s);
  int rc = blame_silent_t(s, why);
  sup_rec_leave(s);
  return rc;
}

static int start_t(sup *s) {
  sup_load_notes(s);
  sup_plan plan;
  int roles[SUP_MAX_NODES];
  for (int n = 0; n < s->nnodes; n++)
    roles[n] = s->nodes[n].role;
  sup_gang_initial(roles, s->nnodes, s->N, s->G, s->rf.train.global_batch, s->no_spares, &plan);
  for (int n = 0; n < s->nnodes; n++)
    s->nodes[n].role = roles[n];
  if (plan.verdict != SUP_PLAN_OK) {
    sup_recovery_fail(s, plan.reason);
    return FT_OK;
  }
  memcpy(s->gang, plan.gang, sizeof(int) * (size_t)plan.ngang);
  s->ngang = plan.ngang;
  if (plan.shrunk) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "world_before", plan.world_before);
    cJSON_AddNumberToObject(f, "world_after", plan.world_after);
    sup_events_emit(s->ev, "gang_shrunk", f, "world %d -> %d (quarantined nodes)",
                    plan.world_before, plan.world_after);
  }
  s->state = SUP_STARTING;
  s->rphase = SUP_RP_FORMING;
  s->recovery.nlaunch_q = s->recovery.launch_qi = 0;
  for (int n = 0; n < s->nnodes; n++) {
    int role = s->nodes[n].role;
    if (role == SUP_ROLE_ACTIVE || role == SUP_ROLE_SPARE)
      s->recovery.launch_q[s->recovery.nlaunch_q++] = n;
  }
  sup_prepare_logs(s);
  /* the first slice now (a launch error is the start's), the rest from the
   * loop */
  return launch_slice(s);
}

int sup_recovery_start(sup *s) {
  sup_rec_enter(s);
  int rc = start_t(s);
  sup_rec_leave(s);
  return rc;
}

/* ---- launching a gang, a slice at a time ----------------------------------
 *
 * Launching a node is a posix_spawn and a few events, milliseconds each on a
 * loaded machine: a gang of 2,048 nodes launched in one callback kept the
 * loop from accepting connections and answering heartbeats for seconds
 * (tests/scale: the accept queue overflowed, workers had to connect again,
 * the loop's own stall was reported). So nodes are launched from the queue
 * launch_q for at most LAUNCH_SLICE_S per loop turn; the gang is not ready
 * (gang_ready) while the queue holds nodes. A new plan (or the end of the
 * run) replaces the queue; a node in it is not alive, so stopping a gang
 * being launched has nothing to stop there. */
#define LAUNCH_SLICE_S 0.05

/* Launches queued nodes for up to LAUNCH_SLICE_S; schedules the rest. */
static int launch_slice(sup *s) {
  double until = ft_now_s() + LAUNCH_SLICE_S;
  int per = s->node_step ? 1 : s->G;
  struct timeval later = {0, 0};
  /* failpoint launch_slice_ms=N: one node a slice, N ms apart (a loop
   * that falls behind its launch queue, as a stalled one at 16,384 hosts) */
  int64_t slow_ms = 0;
  if (ft_failpoint("launch_slice_ms", &slow_ms) && slow_ms > 0) {
    until = 0;
    later.tv_sec = (long)(slow_ms / 1000);
    later.tv_usec = (long)(slow_ms % 1000) * 1000;
  }
  for (int launched = 0; s->recovery.launch_qi < s->recovery.nlaunch_q;) {
    if (s->state >= SUP_FINISHING || (launched && ft_now_s() > until))
      break;
    /* the first gang's queue is the one whose log files the thread creates
     * (sup_prepare_logs): a node whose files are not there yet waits a
     * millisecond rather than have the loop create them */
    if (s->state == SUP_STARTING &&
        !sup_logprep_ready(s->logprep, (s->recovery.launch_qi + 1) * per - 1)) {
      later.tv_usec = 1000;
      break;
    }
    int n = s->recovery.launch_q[s->recovery.launch_qi++], role = s->nodes[n].role;
    if (role != SUP_ROLE_ACTIVE && role != SUP_ROLE_SPARE)
      continue;
    int rc = sup_launch_node(s, n, role == SUP_ROLE_ACTIVE ? "active" : "spare");
    if (rc) {
      s->recovery.nlaunch_q = s->recovery.launch_qi = 0;
      return rc;
    }
    launched++;
  }
  if (s->state >= SUP_FINISHING)
    s->recovery.nlaunch_q = s->recovery.launch_qi = 0;
  if (s->recovery.launch_qi < s->recovery.nlaunch_q)
    event_add(s->launch_ev, &later);
  return FT_OK;
}

static void launch_more_t(sup *s) {
  int rc = launch_slice(s);
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "cannot launch a node: %s", ft_err_detail());
    sup_recovery_fail(s, why);
    return;
  }
  int forming =
      s->state == SUP_STARTING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_FORMING);
  if (forming && gang_ready(s))
    assign(s);
}

static void launch_more_cb_t(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  launch_more_t(arg);
}

SUP_EVENT_ENTRY(sup_recovery_launch_more, launch_more_cb_t)

/* ---- configuration and data errors ------------------------------------------
 *
 * A worker that exits FT_EXIT_USAGE or FT_EXIT_DATA before its gang trains
 * may see a problem of the run (a bad run file, a data glob that matches
 * nothing) or of its node (a bad local disk). Every gang worker failing the
 * same way within one heartbeat timeout is the run's: it fails at once with
 * the workers' own message (their FAULT detail, else the last line of the
 * first one's log), cause "config"/"data", nobody quarantined, no spare
 * spent. Otherwise it is that node's failure, counted like any other
 * (invariant 6). Once the gang trains, FT_EXIT_DATA is the run's at once
 * (data that went bad after the open: an S3 object changed or gone), and
 * FT_EXIT_USAGE the node's. */

/* The gang's workers that exited with a configuration/data error count
 * against their nodes; the verdict is over. */
static void cfg_blame_nodes(sup *s) {
  s->recovery.cfg_deadline_s = 0;
  for (int p = 0; p < s->ngang; p++)
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[s->gang[p]].w[j];
      if (!w->cfg_fail)
        continue;
      char detail[512];
      char msg[256];
      sup_log_last_line(s, w, msg, sizeof msg);
      snprintf(detail, sizeof detail, "exit code %d (%s): %s", w->cfg_fail,
               ft_exit_code_name(w->cfg_fail), msg[0] ? msg : w->fault_detail);
      w->cfg_fail = 0;
      sup_recovery_fault(s, SUP_FAULT_PROCESS_EXIT, w->node, w->slot, w->pid, detail,
                         SUP_BLAME_COUNT);
    }
}

/* Decides when every gang worker exited with the same configuration/data
 * error (the run fails), or the deadline passed (their nodes' failures). */
void sup_rec_cfg_verdict(sup *s, int deadline_passed) {
  if (!s->recovery.cfg_deadline_s || s->state >= SUP_FINISHING)
    return;
  int code = 0, alike = 1;
  sup_worker *first = NULL;
  for (int p = 0; p < s->ngang && alike; p++)
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[s->gang[p]].w[j];
      if (!w->cfg_fail || (code && w->cfg_fail != code)) {
        alike = 0;
        break;
      }
      code = w->cfg_fail;
      if (!first)
        first = w;
    }
  if (alike && first) {
    char msg[256], reason[4608];
    sup_log_last_line(s, first, msg, sizeof msg); /* the worker's own words, with their context */
    if (!msg[0])
      snprintf(msg, sizeof msg, "%s", first->fault_detail);
    const char *cause = code == FT_EXIT_DATA ? "data" : "config";
    snprintf(reason, sizeof reason,
             "every worker failed alike (exit code %d, %s error): %s (node %d slot %d; logs in "
             "%s/logs/)",
             code, cause, msg[0] ? msg : "no message", first->node, first->slot, s->state_dir);
    fail_run(s, SUP_EXIT_FAILED, cause, reason);
    return;
  }
  if (deadline_passed)
    cfg_blame_nodes(s);
}

/* 1 if a gang node other than n has a worker that said HELLO since it was
 * launched: launching works on some node. */
static int other_hello(const sup *s, int n) {
  for (int p = 0; p < s->ngang; p++)
    if (s->gang[p] != n)
      for (int j = 0; j < s->G; j++)
        if (s->nodes[s->gang[p]].w[j].hello)
          return 1;
  return 0;
}

/* The slurm launcher: a step that could not start because the allocation
 * itself is gone (Slurm ended the job: a node failed and the job was not
 * submitted with --no-kill, its time limit, scancel). Nothing can be
 * launched any more, so relaunching until max_restarts only hides that:
 * the run fails at once, naming it, nobody blamed. Read from srun's own
 * message (its last line in STATE/logs/nodeN.log). Returns 1 if so. */
static int allocation_gone(sup *s, const sup_worker *w) {
  static const char *const gone[] = {"Expired or invalid job", "Invalid job id",
                                     "already completing or completed", "has been revoked",
                                     "Job has been cancelled"};
  char msg[480];
  sup_log_last_line(s, w, msg, sizeof msg);
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
    if (!strstr(msg, gone[i]))
      continue;
    const char *job = getenv("SLURM_JOB_ID");
    char reason[768];
    snprintf(reason, sizeof reason,
             "the Slurm allocation (job %s) has ended, nothing more can be launched (node %d: "
             "%s); Slurm ends a job when one of its nodes fails unless it was submitted with "
             "--no-kill (sbatch/salloc -k): resume with the same --state in a new allocation",
             job ? job : "?", w->node, msg);
    fail_run_t(s, SUP_EXIT_FAILED, "allocation", reason);
    return 1;
  }
  return 0;
}

/* A worker of this generation failed its restore (FT_EXIT_STORE before the
 * gang trained) from a checkpoint that lived only in memory: some chunk was
 * in no one's memory any more (the host and its buddy both lost, or evicted
 * by newer snapshots). Every memory-level checkpoint of the run is dropped
 * from the catalog (the older ones lived in the same hosts' memory, or were
 * evicted before it), so the next generation restores the newest one in the
 * store rather than trying them one restart at a time. */
static void drop_lost_memory(sup *s, const sup_worker *w, const char *detail) {
  if (s->restore_step < 0 || s->watch.trained_gen == s->gen)
    return;
  ckpt_info *v = NULL;
  size_t nv = 0;
  int memory = 0;
  if (ckpt_store_list(s->store, s->rf.run, &v, &nv) == FT_OK)
    for (size_t i = 0; i < nv; i++)
      if (v[i].step == s->restore_step)
        memory = v[i].level == CKPT_LEVEL_MEMORY;
  free(v);
  if (!memory)
    return;
  int n = 0;
  if (ckpt_store_drop_memory(s->store, s->rf.run, 0, &n)) {
    fprintf(stderr, "supervise: cannot drop the lost checkpoint %" PRId64 ": %s\n", s->restore_step,
            ft_err_detail());
    return;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)s->restore_step);
  cJSON_AddNumberToObject(f, "dropped", n);
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddStringToObject(f, "detail", detail);
  sup_events_emit(s->ev, "checkpoint_lost", f,
                  "step %" PRId64 " lived only in memory and node %d could not restore it (%s): "
                  "dropped with the run's %d other memory-level checkpoint(s); the next "
                  "generation restores the newest one in the store",
                  s->restore_step, w->node, detail, n - 1);
}

void sup_rec_exit_status(sup *s, sup_worker *w, int status) {
  sup_node *nd = &s->nodes[w->node];
  char detail[128];
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (sig)
    snprintf(detail, sizeof detail, "signal %d", sig);
  else
    snprintf(detail, sizeof detail, "exit code %d", code);
  w->alive = 0;
  if (w->conn)
    sup_conn_close(w->conn, "", 0);
  if (s->state >= SUP_FINISHING)
    return;
  if (nd->rejoin)
    sup_rec_rejoin_fallback(s, w->node, "a worker exited while rejoining");
  if (nd->role == SUP_ROLE_SPARE) {
    nd->role = SUP_ROLE_LOST;
    int lost_us = code == FT_EXIT_LOST &&
                  sup_failures_add(&nd->lost_us, ft_now_s(),
                                   s->rf.recovery.node_failure_window_s) <= SUP_SPARE_RELAUNCHES;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "node", w->node);
    cJSON_AddNumberToObject(f, "slot", w->slot);
    cJSON_AddNumberToObject(f, "pid", w->pid);
    cJSON_AddStringToObject(f, "detail", detail);
    if (lost_us) { /* not the spare's fault: relaunched when its node is down */
      nd->respawn = 1;
      sup_events_emit(s->ev, "spare_lost_supervisor", f,
                      "spare node %d (slot %d) lost the supervisor (%s): relaunched as a spare, "
                      "nothing counted against it",
                      w->node, w->slot, detail);
    } else {
      sup_events_emit(s->ev, "spare_lost", f, "spare node %d (slot %d %s) leaves the pool", w->node,
                      w->slot, detail);
      sup_agent_stop(s, w->node, FT_STOP_EVICTED, "the spare leaves the pool");
    }
    sup_signal_node(s, w->node, SIGKILL);
    return;
  }
  if (!sup_in_gang(s, w->node))
    return;
  int ours = (sig == SIGTERM && nd->term_sent) || (sig == SIGKILL && nd->kill_sent);
  /* srun (or a node's command) exits with its tasks' codes, whatever we
   * sent; ssh turns our SIGTERM into exit code 255, and so may any program a
   * command template runs (run without /bin/sh when it needs none:
   * sup_shell_split_simple): once we signalled the node, its end is ours */
  if (s->node_step || s->ssh_launcher || s->command_launcher)
    ours = nd->term_sent || nd->kill_sent;
  int stopping =
      s->state == SUP_RECOVERING && (s->rphase == SUP_RP_STOPPING || s->rphase == SUP_RP_WAITING);
  if (stopping) { /* on_sigchld checks whether the gang stopped */
    if (!(ours || code == FT_EXIT_OK || code == FT_EXIT_GANG || code == FT_EXIT_LOST ||
          code == FT_EXIT_STORE))
      sup_recovery_fault(s, SUP_FAULT_PROCESS_EXIT, w->node, w->slot, w->pid, detail,
                         SUP_BLAME_COUNT);
    return;
  }
  if (code == 0 || ours)
    return; /* orderly (or ours: the fault that caused it is already known) */
  if (code == FT_EXIT_DATA && s->watch.trained_gen == s->gen) {
    /* the data went bad under a training gang (an S3 shard changed or
     * deleted since it was listed, a token out of the vocabulary in a block
     * read later): the run's, nobody blamed; no restart reads better data */
    char msg[480], reason[1200];
    sup_log_last_line(s, w, msg, sizeof msg);
    snprintf(reason, sizeof reason, "the training data is wrong: %s (node %d slot %d)",
             w->fault_detail[0] ? w->fault_detail
             : msg[0]           ? msg
                                : "data error",
             w->node, w->slot);
    fail_run(s, SUP_EXIT_FAILED, "data", reason);
    return;
  }
  if ((code == FT_EXIT_USAGE || code == FT_EXIT_DATA) && s->watch.trained_gen != s->gen) {
    /* before the gang trains: the run's error or this node's? */
    w->cfg_fail = code;
    if (!s->recovery.cfg_deadline_s)
      s->recovery.cfg_deadline_s = ft_now_s() + s->rf.watchdog.heartbeat_timeout_s;
    sup_rec_cfg_verdict(s, 0);
    return;
  }
  if (code == FT_EXIT_GANG) {
    /* the peer is at fault: a silent (stopped, hung) one if there is one */
    if (!sup_recovery_blame_silent(s, "a collective failed (worker exit code 5)") &&
        !s->hooks.progress_behind(s, w, "collective_failure"))
      sup_recovery_fault(s, SUP_FAULT_COLLECTIVE_FAILURE, w->node, w->slot, w->pid, detail,
                         SUP_BLAME_NONE);
  } else if (code == FT_EXIT_STORE) {
    /* the store's fault, never the node's */
    char msg[480];
    sup_log_last_line(s, w, msg, sizeof msg);
    if (s->run.last_step >= s->final_step) {
      char reason[1024];
      snprintf(reason, sizeof reason,
               "the final checkpoint (step %" PRId64 ") could not be written: %s (node %d slot %d)",
               s->final_step, msg[0] ? msg : "store error", w->node, w->slot);
      sup_recovery_store_failed(s, reason);
    } else {
      char d[640];
      snprintf(d, sizeof d, "%s: %s", detail, msg[0] ? msg : "store error");
      drop_lost_memory(s, w, d);
      sup_recovery_fault(s, SUP_FAULT_STORE_ERROR, w->node, w->slot, w->pid, d, SUP_BLAME_NONE);
    }
  } else if (code == FT_EXIT_LOST) {
    /* it lost us (our own stall, a network blip): nobody's node is at fault */
    sup_recovery_fault(s, SUP_FAULT_LOST_SUPERVISOR, w->node, w->slot, w->pid, detail,
                       SUP_BLAME_NONE);
  } else if (s->slurm_launcher && !w->hello && allocation_gone(s, w)) {
    return;
  } else if (s->slurm_launcher && !w->hello && !other_hello(s, w->node)) {
    /* srun could not start the step ("Communication connection failure")
     * and no other node's step has started either: we may be the ones cut
     * off (see sup_rec_isolated()), so nobody is blamed; a node that alone cannot
     * be reached is found by the next round (hang, node_unreachable) */
    char msg[480], d[640];
    sup_log_last_line(s, w, msg, sizeof msg);
    snprintf(d, sizeof d, "%s before its workers said HELLO: %s", detail,
             msg[0] ? msg : "(no output)");
    sup_recovery_fault(s, SUP_FAULT_LAUNCH_FAILED, w->node, w->slot, w->pid, d, SUP_BLAME_NONE);
  } else
    sup_recovery_fault(s, SUP_FAULT_PROCESS_EXIT, w->node, w->slot, w->pid, detail,
                       SUP_BLAME_COUNT);
}

/* nodes.agent: node n's agent process (pid, every slot's w->pid) ended
 * with status, some of its slots' exits not reported. One that ended by
 * itself says why (ftagent's exit codes): 0 its workers ended, FT_EXIT_LOST
 * it lost us, FT_EXIT_USAGE its command line; those, and any end of ours,
 * are each remaining slot's exit, as srun's is. Any other end (a signal
 * from outside, a crash) is the host lost: its workers die with it
 * (PR_SET_PDEATHSIG), and the node is quarantined, as when its host
 * stand-in is killed. Its connection closing may have said so first
 * (sup_run.c), and then the node is ours to kill already. */
void sup_rec_agent_exit(sup *s, int n, pid_t pid, int status) {
  sup_node *nd = &s->nodes[n];
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  int own = !sig && (code == FT_EXIT_OK || code == FT_EXIT_LOST || code == FT_EXIT_USAGE);
  if (own || nd->term_sent || nd->kill_sent || s->state >= SUP_FINISHING ||
      nd->role != SUP_ROLE_ACTIVE || !sup_in_gang(s, n)) {
    for (int j = 0; j < s->G; j++)
      if (nd->w[j].alive && nd->w[j].pid == pid)
        sup_rec_exit_status(s, &nd->w[j], status);
    return;
  }
  char detail[160];
  if (sig)
    snprintf(detail, sizeof detail, "its agent (pid %d) was killed (signal %d)", (int)pid, sig);
  else
    snprintf(detail, sizeof detail, "its agent (pid %d) ended with exit code %d", (int)pid, code);
  sup_signal_node(s, n, SIGKILL); /* whatever is left of it */
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &nd->w[j];
    if (!w->alive || w->pid != pid)
      continue;
    w->alive = 0;
    if (w->conn)
      sup_conn_close(w->conn, "", 0);
  }
  nd->host_lost = 1;
  snprintf(nd->why, sizeof nd->why, "node lost: %s", detail);
  sup_recovery_fault(s, SUP_FAULT_NODE_LOST, n, -1, pid, detail, SUP_BLAME_NODE);
}

/* A node's host stand-in (sup_launch_host) ended with status. Killed by
 * anyone but us: the node's whole process group was killed, the node is
 * lost (quarantined at once, whatever its failure count). */
void sup_rec_host_exit(sup *s, int n, int status, int we_killed) {
  sup_node *nd = &s->nodes[n];
  nd->host_alive = 0;
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  int ours = we_killed || (sig == SIGTERM && nd->term_sent) || (sig == SIGKILL && nd->kill_sent);
  if (ours || s->state >= SUP_FINISHING || nd->role != SUP_ROLE_ACTIVE || !sup_in_gang(s, n))
    return;
  char detail[160];
  if (sig)
    snprintf(detail, sizeof detail, "the node's process group was killed (signal %d)", sig);
  else
    snprintf(detail, sizeof detail, "the node's host process ended (exit code %d)",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  nd->host_lost = 1;
  snprintf(nd->why, sizeof nd->why, "node lost: %s", detail);
  sup_signal_node(s, n, SIGKILL); /* whatever is left of it */
  sup_recovery_fault(s, SUP_FAULT_NODE_LOST, n, -1, nd->host_pid, detail, SUP_BLAME_NODE);
}

/* The node's last worker was reaped: reap its host stand-in now, so no
 * process outlives its node's workers. Dead already, or dying of a SIGKILL
 * from outside (the whole group was killed): that decides "node lost".
 * Alive: the host still answers; we end it ourselves. Never blocks long:
 * it is a sleeping process, and SIGKILL ends even a stopped one. */
void sup_rec_host_reap(sup *s, int n) {
  sup_node *nd = &s->nodes[n];
  if (!nd->host_alive || sup_node_alive(s, n))
    return;
  int status = 0, we_killed = 0;
  pid_t r = waitpid(nd->host_pid, &status, WNOHANG);
  if (r == 0) {
    we_killed = !sup_kill_pending(nd->host_pid);
    kill(nd->host_pid, SIGKILL);
    r = waitpid(nd->host_pid, &status, 0);
  }
  if (r != nd->host_pid) { /* reaped elsewhere: nothing to learn */
    nd->host_alive = 0;
    return;
  }
  sup_rec_host_exit(s, n, status, we_killed);
}

/* A spare that lost the supervisor (nd->respawn), once every process of
 * its node is reaped: launched again as a spare. */
void sup_rec_respawn_spare(sup *s, int n) {
  sup_node *nd = &s->nodes[n];
  if (!nd->respawn || nd->host_alive || sup_node_alive(s, n))
    return;
  nd->respawn = 0;
  if (s->state >= SUP_FINISHING || nd->role != SUP_ROLE_LOST)
    return;
  nd->role = SUP_ROLE_SPARE;
  if (sup_launch_node(s, n, "spare") == FT_OK)
    return;
  nd->role = SUP_ROLE_LOST;
  sup_signal_node(s, n, SIGKILL);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddStringToObject(f, "detail", ft_err_detail());
  sup_events_emit(s->ev, "spare_lost", f,
                  "spare node %d cannot be relaunched (%s): leaves the pool", n, ft_err_detail());
}

/* ---- bounded teardown ---------------------------------------------------------
 *
 * A round plans only once every process of the old gang is reaped or out of
 * its generation in process (sup_rec_check_stopped), and the run ends only once
 * every process is reaped (sup_rec_maybe_finished). Two things could hold either
 * for ever; neither may:
 *
 *  - A survivor asked to rejoin in process whose own training thread is
 *    hung. The grace does not kill it (it was asked to stay), and its
 *    deadline, recovery.rejoin_timeout_s, is made for a slow but healthy
 *    survivor (a checkpoint in flight to release first). What tells the two
 *    apart is its heartbeats' progress record: a survivor that leaves moves
 *    (its collective aborts, it frees its comm: progress_generation), a hung
 *    one does not. A grace after its STOP(rejoin), a worker in a phase that
 *    leaves within moments (phase_leaves_promptly: compute, data, a
 *    collective, the optimizer) whose progress has not changed since the
 *    request (a heartbeat that came after the grace says so), or one that
 *    sent no frame for 2 heartbeat intervals, is hung (sup_rec_rejoin_hung): its
 *    node falls back to a process restart and is SIGKILLed at once, as the
 *    others were at their grace (under Slurm the fallback's SIGTERM is
 *    srun's kill, and the grace's SIGKILL follows). A survivor waiting for
 *    the store, validating, restoring or in a rendezvous keeps its deadline.
 *
 *  - A process SIGKILLed and never reaped: one of its threads sleeps
 *    uninterruptibly (D state: a write to a dead NFS mount or a frozen file
 *    system, a wedged driver), and the kernel acts on the SIGKILL only when
 *    that sleep ends, which may be never. A worker of a node we SIGKILLed
 *    that is seen with a thread in D at every look for SUP_UNKILLABLE_S is
 *    given up (sup_rec_give_up): event worker_unkillable (node, slot, pid, the
 *    thread's state and wchan), it stops being a worker of its node (so
 *    the round and the run's end no longer wait for it, and it cannot count
 *    in a new generation), it is kept in s->unkillable and reaped
 *    (sup_unkillable_reaped) whenever its I/O ends, and its node is lost: a
 *    node fault (node_lost), quarantined, a spare in its place; unless a
 *    worker of another node is in D too (sup_dstate_elsewhere): a common cause
 *    (a shared file system), nobody blamed, the node restarts in place. At the
 *    run's end the ones still there are named (unkillable_left) and left
 *    to init.
 *
 * One timer looks at both (s->teardown, every SUP_TEARDOWN_CHECK_S), armed
 * by the grace and by every SIGKILL we send, and stopping itself when
 * nothing is left to look at. It reads only /proc (the kernel's view of
 * the process, never blocked by the process's own I/O), never waits. */

/* Worker w, SIGKILLed, in D state for `secs`: no longer a worker of its
 * node; its node is lost (see above), unless workers of other nodes are in
 * D state too (sup_dstate_elsewhere): a common cause, nobody's, the node
 * restarts in place like the others (a storage error never costs a node). */
void sup_rec_give_up(sup *s, sup_worker *w, const char *wchan, double secs) {
  int n = w->node, slot = w->slot;
  pid_t pid = w->pid;
  sup_node *nd = &s->nodes[n];
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, n));
  cJSON_AddNumberToObject(f, "slot", slot);
  cJSON_AddNumberToObject(f, "pid", pid);
  cJSON_AddStringToObject(f, "state", "D");
  cJSON_AddStringToObject(f, "wchan", wchan);
  cJSON_AddNumberToObject(f, "seconds", round(secs * 10) / 10);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  int common = sup_dstate_elsewhere(s, n);
  cJSON_AddBoolToObject(f, "common", common);
  sup_events_emit(s->ev, "worker_unkillable", f,
                  "node %d slot %d: pid %d is in uninterruptible sleep (D%s%s) %.1f s after "
                  "SIGKILL: it cannot be reaped until its I/O ends; nothing waits for it; %s",
                  n, slot, (int)pid, wchan[0] ? ", in " : "", wchan, secs,
                  common ? "other nodes' workers are stuck alike (a shared file system?): no "
                           "node blamed"
                         : "its node is lost");
  if (s->nunkillable < SUP_MAX_UNKILLABLE)
    s->unkillable[s->nunkillable++] = (struct sup_unkillable){
        .pid = pid, .node = n, .slot = slot, .gen = s->gen, .since_s = ft_now_s()};
  /* a node_step process (srun) stands for every slot of its node */
  for (int j = 0; j < s->G; j++) {
    sup_worker *x = &nd->w[j];
    if (!x->alive || x->pid != pid)
      continue;
    x->alive = 0;
    x->dstate_s = 0;
    if (x->conn)
      sup_conn_close(x->conn, "", 0);
  }
  char detail[256];
  snprintf(detail, sizeof detail,
           "worker pid %d (slot %d) in uninterruptible sleep (D%s%s) %.1f s after SIGKILL",
           (int)pid, slot, wchan[0] ? ", in " : "", wchan, secs);
  if (common) { /* nobody's: the node restarts in place with the others */
    if (s->state < SUP_FINISHING && sup_in_gang(s, n) && nd->role == SUP_ROLE_ACTIVE)
      sup_recovery_fault(s, SUP_FAULT_WORKER_UNKILLABLE, n, slot, pid, detail, SUP_BLAME_NONE);
    sup_rec_host_reap(s, n);
    return;
  }
  nd->respawn = 0; /* never relaunched beside it */
  if (s->state < SUP_FINISHING && sup_in_gang(s, n) && nd->role == SUP_ROLE_ACTIVE) {
    if (!nd->faulty) /* joins the round that stopped it (a fault of its own otherwise) */
      sup_recovery_fault(s, SUP_FAULT_NODE_LOST, n, slot, pid, detail, SUP_BLAME_NODE);
  } else if (s->state < SUP_FINISHING && nd->role != SUP_ROLE_QUARANTINED &&
             nd->role != SUP_ROLE_LOST) {
    snprintf(nd->why, sizeof nd->why, "node lost: %.200s", detail);
    sup_quarantine(s, n);
    sup_persist_notes(s);
  }
  sup_rec_host_reap(s, n); /* its last worker is gone as far as the node goes */
}

/* Phases a training thread leaves within moments of a STOP(rejoin): it
 * looks for the request at its next collective, step or wait, and these
 * reach one quickly (the rejoin aborts the comm, so a collective returns).
 * A snapshot or checkpoint write waiting for the store, a validation pass
 * (its collectives come at its end), a restore or a rendezvous may go on
 * for long without a change: those keep recovery.rejoin_timeout_s. */
static int phase_leaves_promptly(int phase) {
  switch (phase) {
  case FT_PHASE_IDLE:
  case FT_PHASE_DATA:
  case FT_PHASE_FORWARD:
  case FT_PHASE_BACKWARD:
  case FT_PHASE_COLLECTIVE:
  case FT_PHASE_OPTIMIZER:
  case FT_PHASE_SDC:
    return 1;
  default:
    return 0;
  }
}

/* A grace after its STOP(rejoin), is a survivor still in its old generation
 * hung (see above)? Its node falls back and is killed. Returns 1 while a
 * survivor is still to be judged. */
int sup_rec_rejoin_hung(sup *s, double now) {
  if (s->state != SUP_RECOVERING || s->rphase != SUP_RP_STOPPING)
    return 0;
  double grace = SUP_GRACE_STOP_S;
  double quiet_max = 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  int pending = 0;
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    sup_node *nd = &s->nodes[n];
    if (!nd->rejoin || sup_rec_node_rejoined(s, n))
      continue;
    /* not told yet (its generation's record is not answered): not its fault */
    if (!nd->rejoin_told || now - nd->rejoin_told_s < grace) {
      pending = 1;
      continue;
    }
    char why[256] = "";
    for (int j = 0; j < s->G && !why[0]; j++) {
      const sup_worker *w = &nd->w[j];
      double quiet = sup_silence_s(now, w->last_msg_s, s->stall_end_s);
      if (!w->alive || w->rejoined)
        continue;
      if (quiet > quiet_max)
        snprintf(why, sizeof why,
                 "hung: slot %d sent nothing for %.1f s, %.1f s after it was asked to leave its "
                 "generation",
                 j, quiet, now - nd->rejoin_told_s);
      else if (w->prog_have && phase_leaves_promptly(w->prog_phase) &&
               w->prog_beat_s - nd->rejoin_told_s >= grace &&
               w->prog_changed_s <= nd->rejoin_told_s)
        snprintf(why, sizeof why,
                 "hung: slot %d's training thread has not moved in the %.1f s since it was asked "
                 "to leave its generation (phase %s, step %" PRId64 ")",
                 j, w->prog_beat_s - nd->rejoin_told_s, ft_phase_name(w->prog_phase), w->prog_step);
    }
    if (!why[0]) { /* moving, or no heartbeat since the grace yet: its deadline holds */
      pending = 1;
      continue;
    }
    /* evidence first: the hung slots' stacks into their logs, which the
     * fallback's STOP and SIGTERM wait for (worker/stackdump.h) */
    int asked = 0;
    for (int j = 0; j < s->G; j++)
      asked += sup_ask_stack(s, &nd->w[j]);
    sup_rec_rejoin_fallback(s, n, why);
    if (asked) { /* a grace from now, SIGKILL (on_grace_t) if still there */
      struct timeval tv = {(long)SUP_GRACE_STOP_S, 0};
      evtimer_add(s->grace, &tv);
    } else if (!s->slurm_launcher) { /* its grace is over: killed like the others (srun's
                                        SIGTERM is a kill) */
      sup_signal_node(s, n, SIGKILL);
    }
  }
  return pending;
}

static void collective_failed_t(sup *s, sup_worker *w, const char *detail) {
  if (!s->rf.recovery.in_process || !sup_gang_trains(s) || evtimer_pending(s->coll_timer, NULL))
    return;
  s->recovery.coll.gen = s->gen;
  s->recovery.coll.node = w->node;
  s->recovery.coll.slot = w->slot;
  s->recovery.coll.pid = w->pid;
  snprintf(s->recovery.coll.detail, sizeof s->recovery.coll.detail, "%s", detail);
  double d = 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  struct timeval tv = {(long)d, (long)((d - (double)(long)d) * 1e6)};
  evtimer_add(s->coll_timer, &tv);
}

void sup_recovery_collective_failed(sup *s, sup_worker *w, const char *detail) {
  sup_rec_enter(s);
  collective_failed_t(s, w, detail);
  sup_rec_leave(s);
}

static void rejoined_t(sup *s, sup_worker *w) {
  int n = w->node;
  if (!sup_rec_node_rejoined(s, n))
    return;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "ms",
                          (double)(long long)((ft_now_s() - s->recovery.t_detect_s) * 1e3));
  sup_events_emit(s->ev, "node_rejoined", f,
                  "node %d left its generation in process (%.0f ms after detection)", n,
                  (ft_now_s() - s->recovery.t_detect_s) * 1e3);
  sup_rec_check_stopped(s);
}

void sup_recovery_rejoined(sup *s, sup_worker *w) {
  sup_rec_enter(s);
  rejoined_t(s, w);
  sup_rec_leave(s);
}
