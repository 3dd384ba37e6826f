/*
 * sup_timers: the recovery's clock and signals, the loop's callbacks that
 * look at the pool and hand what they find to the recovery
 * (sup_recovery.c). A detector (layer 3, sup_int.h): the recovery never
 * calls back into it.
 *
 *   tick (every TICK_S, and at a silence's deadline): a gang worker (looked
 *     at every SILENCE_EVERY_S, or at the soonest deadline) silent
 *     past watchdog.heartbeat_timeout_s (start_timeout_s before its HELLO)
 *     is a hang of its node, unless everyone is silent (the supervisor's
 *     own isolation) or its frames wait unread (we are behind); a silent
 *     warm spare leaves the pool (spares_silent); configuration verdicts
 *     that fell due; slow links and idle spares' doctor checks; the
 *     progress watchdog (sup_watch_progress); a gang member whose doctor
 *     report never came; the step history flushed
 *   SIGCHLD: every exit reaped (workers, host stand-ins, scontrol drains,
 *     processes given up as unkillable) and handed to the recovery
 *   grace: SIGKILL for what was asked to stop and is still there; Slurm
 *     steps that do not end (blame_unanswered); rejoiners judged
 *   teardown: rejoiners that do not move, SIGKILLed processes in D state
 *   coll_timer, rejoin timeout, waitpoll: the recovery's own deadlines
 *   SIGINT/SIGTERM: the gang stopped, the run resumable
 *
 * Each callback runs between sup_rec_enter and sup_rec_leave (the
 * recovery's checked invariants; SUP_EVENT_ENTRY). Single-threaded: the
 * loop's.
 */
#include "sup_int.h"

#include "ft_clock.h"
#include "ft_err.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* WAITING (when_no_spares: wait): plan again every SUP_WAIT_REPLAN_S. */
static void waitpoll_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  if (s->state == SUP_RECOVERING && s->rphase == SUP_RP_WAITING)
    sup_rec_plan_and_launch(s);
}

SUP_EVENT_ENTRY(sup_on_waitpoll, waitpoll_t)

/* The teardown's follow-up (sup_recovery.c, "bounded teardown"): hung
 * rejoiners, SIGKILLed workers still in D state; armed again while either
 * is left to look at. */
static void on_teardown_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  double now = ft_now_s();
  int again = sup_rec_rejoin_hung(s, now);
  for (int n = 0; n < s->nnodes; n++) {
    if (!s->nodes[n].kill_sent)
      continue;
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[n].w[j];
      char wchan[128];
      if (!w->alive)
        continue;
      again = 1;
      /* an agent's workers are on its host, not ours (w->pid there, or its
       * launch's here): its SLOT exited tells */
      if (s->agent_mode || !sup_proc_dstate(w->pid, wchan, sizeof wchan)) {
        w->dstate_s = 0; /* dying, a zombie, or not local (ssh): wait for SIGCHLD */
        continue;
      }
      if (!w->dstate_s)
        w->dstate_s = now;
      else if (now - w->dstate_s >= SUP_UNKILLABLE_S)
        sup_rec_give_up(s, w, wchan, now - w->dstate_s);
    }
  }
  if (again)
    sup_teardown_arm(s);
  if (s->state == SUP_RECOVERING)
    sup_rec_check_stopped(s);
  sup_rec_maybe_finished(s);
}

SUP_EVENT_ENTRY(sup_on_teardown, on_teardown_t)

/* Every exit reaped: a worker's (its node_step process stands for each of
 * its slots), a drain's scontrol, a process given up as unkillable, a
 * host stand-in's; then whether the round can plan, doctor reports that
 * waited for the dead, and whether the run is over. */
static void on_sigchld_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      break;
    if (s->once_pid > 0 && pid == s->once_pid) {
      /* nodes.launch_once: the pool's launch ended (srun returns once
       * every agent has): each node still on it ends with it */
      s->once_pid = -1;
      for (int n = 0; n < s->nnodes; n++)
        if (s->nodes[n].w[0].pid == pid) {
          sup_rec_agent_exit(s, n, pid, status);
          sup_rec_respawn_spare(s, n);
        }
      continue;
    }
    sup_worker *w = sup_worker_by_pid(s, pid);
    if (w) {
      int n = w->node;
      /* a node_step process (srun) stands for every slot of its node */
      if (s->agent_mode)
        sup_rec_agent_exit(s, n, pid, status);
      else
        for (int j = w->slot; j < s->G; j++)
          if (s->nodes[n].w[j].alive && s->nodes[n].w[j].pid == pid)
            sup_rec_exit_status(s, &s->nodes[n].w[j], status);
      sup_rec_host_reap(s, n);
      sup_rec_respawn_spare(s, n);
      continue;
    }
    if (sup_drain_reaped(s, pid, status))
      continue;
    if (sup_unkillable_reaped(s, pid, status))
      continue;
    for (int n = 0; n < s->nnodes; n++)
      if (s->nodes[n].host_alive && s->nodes[n].host_pid == pid) {
        sup_rec_host_exit(s, n, status, 0);
        sup_rec_respawn_spare(s, n);
        break;
      }
  }
  if (s->state == SUP_RECOVERING)
    sup_rec_check_stopped(s);
  sup_doctor_judge(s); /* doctor reports that waited for one that exited */
  sup_rec_maybe_finished(s);
}

SUP_EVENT_ENTRY(sup_on_sigchld, on_sigchld_t)

/* A warm spare whose workers went silent (its host lost power or was cut
 * off; spares heartbeat like everyone) leaves the pool now, quarantined
 * (and drained under Slurm), rather than being found out when it is
 * promoted. Only while some gang worker is still heard (within 2
 * heartbeat intervals): when nobody is, the silence is the supervisor's
 * own isolation (sup_rec_isolated()), not the spare's. */
static void spares_silent(sup *s, double now, double limit) {
  /* heard: a worker that said HELLO spoke within 2 heartbeat intervals
   * (a freshly launched one has said nothing yet) */
  double thr = 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  int heard = 0;
  for (int p = 0; p < s->ngang && !heard; p++)
    for (int j = 0; j < s->G; j++) {
      const sup_worker *w = &s->nodes[s->gang[p]].w[j];
      if (w->alive && w->hello && sup_silence_s(now, w->last_msg_s, s->stall_end_s) <= thr)
        heard = 1;
    }
  if (!heard)
    return;
  for (int n = 0; n < s->nnodes; n++) {
    sup_node *nd = &s->nodes[n];
    if (nd->role != SUP_ROLE_SPARE)
      continue;
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &nd->w[j];
      double quiet = sup_silence_s(now, w->last_msg_s, s->stall_end_s);
      double lim = !w->hello && s->rf.watchdog.start_timeout_s > limit
                       ? s->rf.watchdog.start_timeout_s /* still starting */
                       : limit;
      if (!w->alive || quiet <= lim)
        continue;
      sup_signal_node(s, n, SIGKILL);
      if (w->last_msg_s <= s->recovery.isolated_s) {
        /* silent since our own isolation: it lost us, as the gang did,
         * and is out of the pool; not its fault */
        nd->role = SUP_ROLE_LOST;
        sup_agent_stop(s, n, FT_STOP_EVICTED, "the spare leaves the pool");
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "node", n);
        cJSON_AddNumberToObject(f, "slot", j);
        cJSON_AddStringToObject(f, "detail", "silent since the supervisor's own isolation");
        sup_events_emit(s->ev, "spare_lost", f,
                        "spare node %d (slot %d) silent since the supervisor's own isolation "
                        "leaves the pool",
                        n, j);
        break;
      }
      snprintf(nd->why, sizeof nd->why,
               w->hello ? "hang: spare slot %d silent for %.1f s (heartbeat_timeout_s %.1f)"
                        : "hang: spare slot %d: no HELLO %.1f s after its launch "
                          "(watchdog.start_timeout_s %.1f)",
               j, quiet, lim);
      sup_quarantine(s, n);
      sup_persist_notes(s);
      break;
    }
  }
}

/* The tick's period (sup_main.c); a silence about to pass its limit within
 * one gets a tick of its own at that moment (deadline_tick). */
#define TICK_S 0.05
/* ... and the gang's silences are looked at at least this often (on_tick_t) */
#define SILENCE_EVERY_S 0.25

static void on_tick_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  if (s->recovery.cfg_deadline_s && ft_now_s() >= s->recovery.cfg_deadline_s)
    sup_rec_cfg_verdict(s, 1);
  if (s->state != SUP_STARTING && s->state != SUP_RUNNING &&
      !(s->state == SUP_RECOVERING &&
        (s->rphase == SUP_RP_FORMING || s->rphase == SUP_RP_ASSIGNED)))
    return;
  sup_loop_stall_check(s); /* our own stall is never a worker's silence */
  double now = ft_now_s(), limit = s->rf.watchdog.heartbeat_timeout_s;
  spares_silent(s, now, limit);
  if (s->state == SUP_RUNNING) {
    sup_watch_links(s, now);
    sup_doctor_tick(s, now); /* idle spares check themselves again */
  }
  /* The gang's silences are looked at every SILENCE_EVERY_S, or sooner
   * when one can pass its limit sooner (at that moment: deadline_tick),
   * not on every tick: at 131,072 ranks the look at each worker 20 times a
   * second was a seventh of the supervisor's CPU. A silence only grows
   * between looks: a message makes it shorter, and a worker whose silence
   * starts anew (a launch, an ASSIGN) starts at 0 against a limit of at
   * least the soonest one seen; a new generation (a new gang, a promoted
   * spare that heartbeats on its own clock) is looked at at once. The one
   * exception: a beat an agent carries is dated by its age and can date a
   * worker's last message back (behind a later frame of its own); that
   * worker is named up to SILENCE_EVERY_S late, not up to a tick. */
  double first = INFINITY; /* the soonest a worker heard from can pass its limit */
  int look = now >= s->silence_next_s || s->silence_gen != s->gen ||
             s->silence_next_s - now > SILENCE_EVERY_S; /* a clock that went back */
  for (int p = 0; look && p < s->ngang; p++) {
    int n = s->gang[p];
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[n].w[j];
      double quiet = sup_silence_s(now, w->last_msg_s, s->stall_end_s);
      /* not yet heard since its launch: a start, judged on start_timeout_s */
      double lim = !w->hello && s->rf.watchdog.start_timeout_s > limit
                       ? s->rf.watchdog.start_timeout_s
                       : limit;
      if (!w->alive)
        continue;
      if (quiet <= lim) {
        if (lim - quiet < first)
          first = lim - quiet;
        continue;
      }
      if (sup_conn_unread(w->conn)) {
        /* its frames wait for us (a loop busy with thousands of others'
         * checkpoint reports): we are behind, it is not silent */
        w->last_msg_s = now;
        continue;
      }
      if (w->hello && sup_rec_isolated(s, now, quiet))
        return;
      char detail[160];
      if (w->hello)
        snprintf(detail, sizeof detail, "no message for %.1f s (heartbeat_timeout_s %.1f)", quiet,
                 limit);
      else
        snprintf(detail, sizeof detail,
                 "no HELLO %.1f s after its launch (watchdog.start_timeout_s %.1f)", quiet, lim);
      sup_signal_node(s, n, SIGKILL);
      sup_recovery_fault(s, SUP_FAULT_HANG, n, j, w->pid, detail, SUP_BLAME_NODE);
      return; /* the state changed; the next tick looks again */
    }
  }
  /* every worker heard: are they making progress? (hangs with live
   * processes: sup_watch_progress; the own stall is handled there too) */
  if (sup_watch_progress(s, now))
    return;
  /* a silence that ends before the next tick is looked at when it ends, not
   * up to a tick later (detection within the timeout, not timeout + tick) */
  if (look) {
    s->silence_gen = s->gen;
    s->silence_next_s = now + (first < SILENCE_EVERY_S ? first : SILENCE_EVERY_S);
    if (first < SILENCE_EVERY_S && s->deadline_tick) {
      struct timeval tv = {0, (long)((first > 0 ? first : 0) * 1e6) + 1000};
      event_add(s->deadline_tick, &tv);
    }
  }
  /* a gang being formed waits for its members' doctor reports: one that has
   * not come within start_timeout_s of its HELLO (its checks hang: a disk
   * that never answers) is a hang of that node */
  if (s->state == SUP_STARTING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_FORMING))
    for (int p = 0; p < s->ngang; p++)
      for (int j = 0; j < s->G; j++) {
        sup_worker *w = &s->nodes[s->gang[p]].w[j];
        double waited = now - w->hello_s;
        if (!w->alive || !w->hello || w->doctor != SUP_DOCTOR_NONE || sup_doctor_cleared(s, w) ||
            waited <= s->rf.watchdog.start_timeout_s)
          continue;
        char detail[200];
        snprintf(detail, sizeof detail,
                 "no node doctor report %.1f s after its HELLO (watchdog.start_timeout_s %.1f)",
                 waited, s->rf.watchdog.start_timeout_s);
        sup_signal_node(s, s->gang[p], SIGKILL);
        sup_recovery_fault(s, SUP_FAULT_HANG, s->gang[p], j, w->pid, detail, SUP_BLAME_NODE);
        return;
      }
}

/* The step history's buffered records go out once a tick; a write that
 * fails is reported once (the history then lives in memory only). */
static void flush_history(sup *s) {
  if (!s->hist || sup_history_flush(s->hist) == FT_OK || s->hist_failed)
    return;
  s->hist_failed = 1;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "reason", sup_history_error(s->hist));
  sup_events_emit(s->ev, "history_failed", f, "%s (the run goes on; the dashboard keeps its copy)",
                  sup_history_error(s->hist));
}

void sup_on_tick(evutil_socket_t fd, short what, void *arg) {
  sup_rec_enter(arg);
  flush_history(arg);
  on_tick_t(fd, what, arg);
  sup_rec_leave(arg);
}

/* The slurm launcher, at the end of a recovery's grace: a gang node whose
 * job step has not ended although srun was told to kill it does not answer
 * Slurm either (its slurmstepd is gone or cut off: the host lost power or
 * its link is down). That is the node's fault, found here even when its
 * workers were not yet silent long enough to count as a hang (a dead
 * host's connections close at once; its peers fail their collective). If
 * every node of a gang of two or more does not answer, the cause is on our
 * side (the supervisor's host cut off): nobody is blamed. */
static void blame_unanswered(sup *s) {
  int late[SUP_MAX_NODES], nl = 0, asked = 0;
  for (int p = 0; p < s->ngang; p++) {
    if (s->nodes[s->gang[p]].rejoin) /* kept on purpose (in process): not told to end */
      continue;
    asked++;
    if (sup_node_alive(s, s->gang[p]))
      late[nl++] = s->gang[p];
  }
  if (!nl)
    return;
  double grace = ft_now_s() - s->recovery.t_detect_s;
  if (nl == asked && nl >= 2) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "nodes", sup_json_ints(late, nl));
    cJSON_AddNumberToObject(f, "seconds", (double)(long long)(grace * 10) / 10);
    sup_events_emit(s->ev, "steps_unanswered", f,
                    "no job step of the gang's %d nodes ended %.1f s after srun was told to kill "
                    "it: the supervisor's side does not reach Slurm's nodes; no node blamed",
                    nl, grace);
    return;
  }
  for (int i = 0; i < nl; i++) {
    sup_node *nd = &s->nodes[late[i]];
    if (nd->faulty)
      continue;
    char detail[256];
    snprintf(detail, sizeof detail,
             "its Slurm job step on %s did not end %.1f s after srun was told to kill it: the "
             "host does not answer",
             s->rf.nodes.hosts[late[i]], grace);
    sup_recovery_fault(s, SUP_FAULT_NODE_UNREACHABLE, late[i], -1, nd->w[0].pid, detail,
                       SUP_BLAME_NODE);
  }
}

/* grace timer: SIGKILL whatever was asked to stop and is still there. A
 * survivor asked to rejoin in process was not asked to exit: it is judged
 * from its progress once a grace has passed since its request (sup_rec_rejoin_hung,
 * on the teardown's timer); what the SIGKILL does not end is looked at
 * there too (a process in D state). */
static void on_grace_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  int stopping = s->state == SUP_RECOVERING && s->rphase == SUP_RP_STOPPING;
  if (stopping && s->slurm_launcher)
    blame_unanswered(s);
  if (sup_rec_rejoin_hung(s, ft_now_s()))
    sup_teardown_arm(s);
  for (int n = 0; n < s->nnodes; n++)
    if (s->state == SUP_FINISHING || (stopping && sup_in_gang(s, n) && !s->nodes[n].rejoin) ||
        s->nodes[n].role == SUP_ROLE_QUARANTINED) /* left behind (node_left_behind) */
      sup_signal_node(s, n, SIGKILL);
}

SUP_EVENT_ENTRY(sup_on_grace, on_grace_t)

/* 2 heartbeat intervals after an in-process collective failure nobody's
 * silence explained (sup_recovery_collective_failed): still nobody silent
 * and the same generation training: a round, nobody blamed. */
static void on_coll_timer_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  if (s->gen != s->recovery.coll.gen || !sup_gang_trains(s))
    return; /* a round started meanwhile: the failure was its */
  if (sup_recovery_blame_silent(s, "a collective failed"))
    return;
  char detail[400];
  snprintf(detail, sizeof detail, "node %d slot %d: %s; every worker still answers",
           s->recovery.coll.node, s->recovery.coll.slot, s->recovery.coll.detail);
  sup_recovery_fault(s, SUP_FAULT_COLLECTIVE_FAILURE, s->recovery.coll.node, s->recovery.coll.slot,
                     s->recovery.coll.pid, detail, SUP_BLAME_NONE);
}

SUP_EVENT_ENTRY(sup_on_coll_timer, on_coll_timer_t)

/* rejoin timer: survivors still in their old generation go as processes */
static void on_rejoin_timeout_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  if (s->state != SUP_RECOVERING || s->rphase != SUP_RP_STOPPING)
    return;
  char why[128];
  snprintf(why, sizeof why,
           "not out of its old generation after %.1f s (recovery.rejoin_timeout_s)",
           s->rf.recovery.rejoin_timeout_s);
  for (int p = 0; p < s->ngang; p++)
    if (s->nodes[s->gang[p]].rejoin && !sup_rec_node_rejoined(s, s->gang[p]))
      sup_rec_rejoin_fallback(s, s->gang[p], why);
  sup_rec_check_stopped(s);
}

SUP_EVENT_ENTRY(sup_on_rejoin_timeout, on_rejoin_timeout_t)

/* SIGINT/SIGTERM: the gang stopped (resumable: exit 130); a second one
 * SIGKILLs everything. */
static void on_signal_t(evutil_socket_t fd, short what, void *arg) {
  sup *s = arg;
  int sig = (int)fd;
  if (s->interrupted) {
    /* second signal: no more patience */
    for (int n = 0; n < s->nnodes; n++)
      sup_signal_node(s, n, SIGKILL);
    return;
  }
  s->interrupted = 1;
  if (s->state >= SUP_FINISHING) {
    s->exit_code = SUP_EXIT_INTERRUPTED;
    return;
  }
  s->exit_code = SUP_EXIT_INTERRUPTED;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "signal", sig);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "last_step", (double)s->run.last_step);
  sup_events_emit(s->ev, "run_interrupted", f, "signal %d: stopping the gang; run again to resume",
                  sig);
  sup_rec_stop_everyone(s, FT_STOP_SHUTDOWN, "supervisor interrupted", SUP_GRACE_STOP_S);
}

SUP_EVENT_ENTRY(sup_on_signal, on_signal_t)
