/*
 * sup_nodes: the recovery's hands on nodes and processes. Launching a
 * node's workers (and its host stand-in), signalling a node, quarantine
 * (with its Slurm drain) and why nodes left (persisted), the logs, what
 * /proc says of a process in D state, and small queries of the pool. It
 * decides nothing: the recovery (sup_recovery.c) and its timers
 * (sup_timers.c) decide and call down here; nothing here calls up (layer 1,
 * sup_int.h).
 *
 * Single-threaded: the loop's.
 */
#include "sup_int.h"

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"
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

cJSON *sup_json_ints(const int *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

/* A frame to node n's agent itself (its connection, not a slot's). */
static void agent_tell(sup *s, int n, ft_msg *m) {
  sup_node *nd = &s->nodes[n];
  if (!nd->agent)
    return;
  snprintf(m->run, sizeof m->run, "%s", s->rf.run);
  m->gen = 0;
  (void)sup_conn_send(nd->agent, m);
}

void sup_agent_stop(sup *s, int n, ft_stop_reason why, const char *detail) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STOP);
  m.stop.reason = why;
  m.stop.detail = detail;
  agent_tell(s, n, &m);
}

void sup_agent_kill(sup *s, int n) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SLOT);
  m.slot.slot = FT_WIRE_AGENT_SLOT;
  m.slot.event = FT_SLOT_SIGNAL;
  m.slot.status = SIGKILL;
  agent_tell(s, n, &m);
}

/* Slot j's worker on node n, through its agent: start a new one, or send
 * it a signal. */
static void agent_slot(sup *s, int n, int j, ft_slot_event ev, int sig) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SLOT);
  m.slot.slot = (uint32_t)j;
  m.slot.event = ev;
  m.slot.status = sig;
  agent_tell(s, n, &m);
}

/* Kernel threads per worker: nodes.threads when set. Otherwise, under the
 * local launcher, the machine's cores shared by the gang's workers (spares
 * idle, so they don't count): each worker spinning its own full-size OpenMP
 * team on shared cores would make every step many times slower. Remote
 * hosts with nodes.threads 0: the worker decides on its host (its cores /
 * nodes.workers_per_node). */
static int local_threads(const sup *s) {
  if (s->command_launcher || s->rf.nodes.threads > 0)
    return s->rf.nodes.threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int active = s->rf.nodes.count * s->G;
  int t = active > 0 ? (int)(cores / active) : 1;
  return t > 0 ? t : 1;
}

/* Starts node n's worker j (the slurm launcher: the node's whole job step,
 * every slot) as the launcher says; *pid: the process we wait for. */
static int spawn_worker(sup *s, int n, int j, pid_t *pid) {
  int once = n < 0; /* nodes.launch_once: every node's agent at once */
  pid_t pgid = once ? 0 : s->nodes[n].pgid;
  sup_worker_args a = {.worker = s->worker_path,
                       .connect = s->connect_addr,
                       .node = n,
                       .slot = s->node_step ? -1 : j,
                       .store = s->store_uri,
                       .runfile = s->runfile_path,
                       .steps = s->steps_override,
                       .sets = s->sets,
                       .nsets = s->nsets,
                       .threads = local_threads(s),
                       .token_stdin = s->ssh_launcher,
                       .agent = s->agent_mode ? s->agent_path : NULL,
                       .slots = s->G,
                       .node_env = !once               ? NULL
                                   : s->slurm_launcher ? "SLURM_NODEID"
                                                       : "FT_NODE"};
  char **argv = sup_worker_argv(&a), **srun = NULL, *cmd = NULL, *hostlist = NULL;
  char log[4200];
  if (once)
    snprintf(log, sizeof log, "%s/logs/agents.log", s->state_dir);
  else
    sup_node_log_path(s, n, j, log, sizeof log);
  if (!argv)
    return ft_err_set(FT_ENOMEM, "out of memory");
  int rc = FT_OK;
  const char *host = once ? "" : n < s->rf.nodes.nhosts ? s->rf.nodes.hosts[n] : "localhost";
  if (once && s->slurm_launcher) { /* every host of the pool, one task each */
    size_t len = 1;
    for (int k = 0; k < s->nnodes && k < s->rf.nodes.nhosts; k++)
      len += strlen(s->rf.nodes.hosts[k]) + 1;
    if (!(hostlist = calloc(1, len))) {
      sup_argv_free(argv);
      return ft_err_set(FT_ENOMEM, "out of memory");
    }
    for (int k = 0; k < s->nnodes && k < s->rf.nodes.nhosts; k++) {
      if (k)
        strcat(hostlist, ",");
      strcat(hostlist, s->rf.nodes.hosts[k]);
    }
    host = hostlist;
  }
  if (s->slurm_launcher) {
    char cwd[PATH_MAX], name[300];
    const char *wd = s->rf.nodes.workdir;
    if (!wd[0])
      wd = getcwd(cwd, sizeof cwd) ? cwd : "/";
    if (once)
      snprintf(name, sizeof name, "ftsup.%s.agents", s->rf.run);
    else
      snprintf(name, sizeof name, "ftsup.%s.node%d", s->rf.run, n);
    sup_srun_args sa = {.host = host,
                        .nnodes = once ? s->nnodes : 1,
                        .ntasks = once            ? s->nnodes
                                  : s->agent_mode ? 1
                                                  : s->G,
                        .workdir = wd,
                        .name = name,
                        .extra = s->rf.nodes.srun_args,
                        .agent = s->agent_mode};
    rc = sup_abs_worker(argv);
    if (!rc && !(srun = sup_srun_argv(&sa, argv)))
      rc = ft_err_set(FT_ENOMEM, "out of memory");
  } else if (s->ssh_launcher) {
    rc = sup_ssh_launch_command(s->rf.nodes.command, host, s->rf.nodes.workdir, argv, &cmd);
  } else if (s->command_launcher) {
    char *text = sup_shell_join(argv), slots[16], nodes[16];
    snprintf(slots, sizeof slots, "%d", s->G);
    snprintf(nodes, sizeof nodes, "%d", s->nnodes);
    cmd = text ? sup_template_expand(s->rf.nodes.command, host, text, s->node_step ? slots : NULL,
                                     once ? nodes : NULL)
               : NULL;
    free(text);
    if (!cmd)
      rc = ft_err_set(FT_ENOMEM, "out of memory");
  }
  if (!rc) {
    /* ssh: the token on stdin, in no environment (sup_launch.h) */
    char tokline[FT_WIRE_TOKEN_HEX + 2];
    snprintf(tokline, sizeof tokline, "%s\n", s->token);
    sup_spawn sp = {.argv = srun ? srun : argv,
                    .cmd = cmd,
                    .token = s->ssh_launcher ? NULL : s->token,
                    .stdin_text = s->ssh_launcher ? tokline : NULL,
                    .log_path = log,
                    .pgid = pgid};
    rc = sup_launch_spawn(&sp, pid);
    explicit_bzero(tokline, sizeof tokline);
  }
  sup_argv_free(argv);
  sup_argv_free(srun);
  free(cmd);
  free(hostlist);
  return rc;
}

/* nodes.launch_once: one process for the whole pool (its agents), started
 * at the first launch of any node; every node's slots stand for it. */
static int spawn_once(sup *s, pid_t *pid) {
  if (s->once_pid > 0) {
    *pid = s->once_pid;
    return FT_OK;
  }
  if (s->once_pid < 0)
    return ft_err_set(FT_EIO, "the pool's launch (nodes.launch_once) has ended: a node without "
                              "its agent cannot be started again");
  int rc = spawn_worker(s, -1, 0, pid);
  if (!rc)
    s->once_pid = *pid;
  return rc;
}

/* The state of a node's slot when a new process starts on it. */
static void slot_reset(sup *s, int n, int j, pid_t pid, const char *role) {
  sup_worker *w = &s->nodes[n].w[j];
  w->pid = pid;
  w->alive = 1;
  w->hello = 0;
  sup_doctor_reset(w);
  w->cfg_fail = 0;
  w->fault_detail[0] = 0;
  w->rank = -1;
  w->gen = 0;
  w->rejoin_from = 0;
  w->rejoined = 0;
  w->dstate_s = 0;
  w->last_msg_s = ft_now_s();
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddNumberToObject(f, "slot", j);
  cJSON_AddNumberToObject(f, "pid", pid);
  cJSON_AddStringToObject(f, "role", role);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, n));
  sup_events_emit(s->ev, "worker_launched", f, "node %d slot %d pid %d (%s)", n, j, (int)pid, role);
}

int sup_launch_node(sup *s, int n, const char *role) {
  sup_node *nd = &s->nodes[n];
  /* started with the pool's launch: its agent on its way, or already there
   * (its HELLO can come before the launch queue reaches its node: a loop
   * behind its queue at 16,384 hosts aborted here) */
  if (s->agent_mode && s->rf.nodes.launch_once && s->once_pid > 0 && sup_node_alive(s, n) &&
      nd->w[0].pid == s->once_pid)
    return FT_OK;
  nd->term_sent = nd->kill_sent = 0;
  nd->dump_asked = 0;
  nd->rejoin = 0;
  nd->rejoin_told_s = 0;
  nd->faulty = 0;
  nd->host_lost = 0;
  /* the host stand-in is reaped with the node's last worker (sup_rec_host_reap),
   * and only a stopped node is launched */
  if (nd->host_alive || sup_node_alive(s, n))
    FT_BUG("node %d launched while its host %d or a worker is alive", n, (int)nd->host_pid);
  if (s->agent_mode && nd->agent) {
    /* its agent is there: it starts the node's workers again itself, and
     * nothing is launched (no srun, ssh or fork for the node) */
    for (int j = 0; j < s->G; j++) {
      if (nd->w[j].conn)
        sup_conn_close(nd->w[j].conn, "", 0);
      agent_slot(s, n, j, FT_SLOT_START, 0);
      slot_reset(s, n, j, nd->w[j].pid, role);
    }
    return FT_OK;
  }
  nd->pgid = 0;
  nd->host_pid = 0;
  if (s->agent_mode && s->rf.nodes.launch_once) {
    /* the pool's one process starts every node's agent at once: each node
     * of the pool is launched with it (their agents say HELLO before the
     * launch queue reaches them). Later, a node without its agent is
     * either on its way or gone with its host; waiting for its HELLO says
     * which (start_timeout) */
    int first = s->once_pid == 0;
    pid_t pid;
    int rc = spawn_once(s, &pid);
    if (rc)
      return rc;
    for (int k = 0; k < s->nnodes; k++) {
      sup_node *x = &s->nodes[k];
      int pooled = x->role == SUP_ROLE_ACTIVE || x->role == SUP_ROLE_SPARE;
      if (k != n && (!first || !pooled || x->agent || sup_node_alive(s, k)))
        continue;
      x->term_sent = x->kill_sent = 0;
      x->pgid = pid;
      for (int j = 0; j < s->G; j++)
        slot_reset(s, k, j, pid, k == n ? role : x->role == SUP_ROLE_ACTIVE ? "active" : "spare");
    }
    return FT_OK;
  }
  if (!s->command_launcher) {
    /* the host's stand-in leads the node's process group (sup_launch.h) */
    int rc = sup_launch_host(&nd->host_pid);
    if (rc)
      return rc;
    nd->host_alive = 1;
    nd->pgid = nd->host_pid;
  }
  pid_t step_pid = 0; /* node_step: the node's one process, shared by its slots */
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &nd->w[j];
    if (w->conn)
      sup_conn_close(w->conn, "", 0);
    pid_t pid = step_pid;
    if (!pid) {
      int rc = spawn_worker(s, n, j, &pid);
      if (rc)
        return rc;
      if (s->node_step)
        step_pid = pid;
    }
    if (j == 0 && !nd->pgid)
      nd->pgid = pid;
    slot_reset(s, n, j, pid, role);
  }
  return FT_OK;
}

/* Workers only: a node's host stand-in is reaped with its last worker
 * (sup_rec_host_reap). */
int sup_node_alive(const sup *s, int n) {
  for (int j = 0; j < s->G; j++)
    if (s->nodes[n].w[j].alive)
      return 1;
  return 0;
}

int sup_any_alive(sup *s) {
  int h = s->alive_hint >= 0 && s->alive_hint < s->nnodes ? s->alive_hint : 0;
  for (int k = 0; k < s->nnodes; k++) {
    int n = (h + k) % s->nnodes;
    if (sup_node_alive(s, n)) {
      s->alive_hint = n;
      return 1;
    }
  }
  return 0;
}

/* The teardown's follow-up (on_teardown) looks again in SUP_TEARDOWN_CHECK_S. */
void sup_teardown_arm(sup *s) {
  if (!s->teardown || evtimer_pending(s->teardown, NULL))
    return;
  double d = SUP_TEARDOWN_CHECK_S;
  struct timeval tv = {(long)d, (long)((d - (double)(long)d) * 1e6)};
  evtimer_add(s->teardown, &tv);
}

void sup_signal_node(sup *s, int n, int sig) {
  sup_node *nd = &s->nodes[n];
  if (!sup_node_alive(s, n))
    return;
  if (sig == SIGKILL) /* is it gone? (a process in D state is not) */
    sup_teardown_arm(s);
  if (s->agent_mode && nd->agent) {
    /* through the agent, which outlives its workers (the next ones start
     * on it). A SIGKILL that finds the agent not answering (a second one,
     * or its HOSTBEATs stopped: the host is silent) goes further: its
     * process group (launched per node), or, launched once for the pool,
     * its connection is dropped and its workers are gone for us (no reap
     * will come; the caller's teardown looks at the gang again) */
    double quiet = ft_now_s() - nd->agent_heard_s;
    int deaf = sig == SIGKILL &&
               (nd->kill_sent ||
                quiet > 2 * ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s));
    if (sig == SIGTERM)
      nd->term_sent = 1;
    if (sig == SIGKILL)
      nd->kill_sent = 1;
    for (int j = 0; j < s->G; j++)
      if (nd->w[j].alive)
        agent_slot(s, n, j, FT_SLOT_SIGNAL, sig);
    if (!deaf)
      return;
    if (s->rf.nodes.launch_once) {
      for (int j = 0; j < s->G; j++) {
        nd->w[j].alive = 0;
        if (nd->w[j].conn)
          sup_conn_close(nd->w[j].conn, "", 0);
      }
      sup_conn_close(nd->agent, "its agent does not answer a SIGKILL", 0);
      return;
    }
  } else if (s->agent_mode && s->rf.nodes.launch_once) {
    if (sig == SIGTERM)
      nd->term_sent = 1;
    if (sig == SIGKILL)
      nd->kill_sent = 1;
    return; /* no agent to ask, and the launch's process is every node's */
  }
  if (s->slurm_launcher) {
    /* srun turns SIGTERM into SIGKILL of every task of its step, through
     * slurmstepd on the node (a SIGKILL of srun itself would leave them
     * running). A kill after an earlier SIGTERM finds srun still there:
     * its node does not answer (cut off, lost), so srun goes itself; what
     * is left on such a host stops when it loses us (FT_EXIT_LOST). */
    int again = sig == SIGKILL && (nd->kill_sent || nd->term_sent);
    if (sig == SIGTERM)
      nd->term_sent = 1;
    if (sig == SIGKILL)
      nd->kill_sent = 1;
    if (nd->pgid > 0)
      kill(-nd->pgid, again ? SIGKILL : SIGTERM);
    return;
  }
  if (sig == SIGTERM)
    nd->term_sent = 1;
  if (sig == SIGKILL)
    nd->kill_sent = 1;
  if (nd->pgid > 0)
    kill(-nd->pgid, sig);
  for (int j = 0; j < s->G; j++)
    if (nd->w[j].alive && nd->w[j].pid > 0)
      kill(nd->w[j].pid, sig);
}

/* ---- why nodes left, persisted ------------------------------------------------
 *
 * Catalog key "<run>/recovery", beside sup_persist's "<run>/state":
 * {"nodes": [{"node": N, "reason": "...", "failures": K}, ...],
 *  "chaos_fired": true|false}
 * nodes: each quarantined node and why (the failures counted in the window
 * when it left); chaos_fired: the run file's chaos fault already fired in
 * this run, so a resumed run does not inject it again. */

void sup_persist_notes(sup *s) {
  char key[256];
  snprintf(key, sizeof key, "%s/recovery", s->rf.run);
  cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "nodes");
  for (int n = 0; n < s->nnodes; n++) {
    if (s->nodes[n].role != SUP_ROLE_QUARANTINED)
      continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "node", n);
    cJSON_AddStringToObject(e, "reason", s->nodes[n].why);
    cJSON_AddNumberToObject(e, "failures", s->nodes[n].nfailures);
    cJSON_AddItemToArray(a, e);
  }
  cJSON_AddBoolToObject(o, "chaos_fired", s->chaos_done != 0);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  /* on the record lane; a failure is said there, and the run goes on */
  sup_record_meta(s, key, txt, "why nodes left");
  free(txt);
}

/* A resumed run: why its quarantined nodes left, and whether the chaos
 * fault fired. Nothing persisted: nothing to do. */
void sup_load_notes(sup *s) {
  char key[256], *txt = NULL;
  snprintf(key, sizeof key, "%s/recovery", s->rf.run);
  if (ckpt_store_get_meta(s->store, key, &txt))
    return;
  cJSON *o = cJSON_Parse(txt), *it;
  free(txt);
  if (!o)
    return;
  if (cJSON_IsTrue(cJSON_GetObjectItem(o, "chaos_fired")))
    s->chaos_done = 1;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "nodes")) {
    cJSON *n = cJSON_GetObjectItem(it, "node"), *r = cJSON_GetObjectItem(it, "reason");
    cJSON *k = cJSON_GetObjectItem(it, "failures");
    if (!cJSON_IsNumber(n) || n->valueint < 0 || n->valueint >= s->nnodes)
      continue;
    sup_node *nd = &s->nodes[n->valueint];
    if (nd->role != SUP_ROLE_QUARANTINED)
      continue; /* taken out of quarantine (--unquarantine): a clean slate */
    if (cJSON_IsString(r))
      snprintf(nd->why, sizeof nd->why, "%s", r->valuestring);
    if (cJSON_IsNumber(k))
      nd->nfailures = k->valueint;
  }
  cJSON_Delete(o);
}

/* ---- Slurm drains ----------------------------------------------------------
 *
 * A node quarantined under the slurm launcher (recovery.drain: true) is
 * drained, so no later job lands on it either:
 *   scontrol update nodename=HOST state=drain reason="ftsup: WHY at step S, run R"
 * Only node faults quarantine (storage, configuration, loss faults and the
 * supervisor's own isolation never do), so only they drain. scontrol runs as
 * a child of the loop, never waited for in place: its end is reaped with the
 * workers' (on_sigchld) and told as node_drained {node, host, reason} or
 * drain_failed {node, host, reason, detail}. The run ends only after every
 * drain it started ended. An operator undoes one with
 *   scontrol update nodename=HOST state=resume */

static void drain_event(sup *s, const struct sup_drain *d, int status) {
  const char *host = sup_node_host(s, d->node);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", d->node);
  cJSON_AddStringToObject(f, "host", host);
  cJSON_AddStringToObject(f, "reason", d->reason);
  if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    sup_events_emit(s->ev, "node_drained", f, "node %d: Slurm node %s drained (%s)", d->node, host,
                    d->reason);
    return;
  }
  char detail[600], path[4200], line[480] = "";
  snprintf(path, sizeof path, "%s/logs/drain.node%d.log", s->state_dir, d->node);
  FILE *lf = fopen(path, "r");
  if (lf) {
    char buf[480];
    while (fgets(buf, sizeof buf, lf))
      if (buf[0] != '\n')
        snprintf(line, sizeof line, "%.*s", (int)strcspn(buf, "\n"), buf);
    fclose(lf);
  }
  if (status < 0)
    snprintf(detail, sizeof detail, "%s", ft_err_detail());
  else if (WIFEXITED(status))
    snprintf(detail, sizeof detail, "scontrol exit code %d%s%s", WEXITSTATUS(status),
             line[0] ? ": " : "", line);
  else
    snprintf(detail, sizeof detail, "scontrol signal %d",
             WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cJSON_AddStringToObject(f, "detail", detail);
  sup_events_emit(s->ev, "drain_failed", f, "node %d: Slurm node %s not drained: %s", d->node, host,
                  detail);
}

static void drain_start(sup *s, int n) {
  struct sup_drain d = {.node = n};
  char arg_node[200], arg_reason[320], log[4200];
  /* one line of at most ~250 characters in sinfo -R */
  snprintf(d.reason, sizeof d.reason, "ftsup: %.160s at step %" PRId64 ", run %.48s",
           s->nodes[n].why, s->run.last_step, s->rf.run);
  for (char *c = d.reason; *c; c++)
    if (*c == '\n' || *c == '\r')
      *c = ' ';
  snprintf(arg_node, sizeof arg_node, "nodename=%s", s->rf.nodes.hosts[n]);
  snprintf(arg_reason, sizeof arg_reason, "reason=%s", d.reason);
  snprintf(log, sizeof log, "%s/logs/drain.node%d.log", s->state_dir, n);
  char *argv[] = {"scontrol", "update", arg_node, "state=drain", arg_reason, NULL};
  if (s->ndrains == SUP_MAX_DRAINS) {
    ft_err_set(FT_EINVAL, "%d drains already running", SUP_MAX_DRAINS);
    drain_event(s, &d, -1);
    return;
  }
  sup_spawn sp = {.argv = argv, .log_path = log};
  if (sup_launch_spawn(&sp, &d.pid)) {
    drain_event(s, &d, -1);
    return;
  }
  s->drains[s->ndrains++] = d;
}

/* pid was a drain's scontrol: tells how it went. 0 if it was not one. */
int sup_drain_reaped(sup *s, pid_t pid, int status) {
  for (int i = 0; i < s->ndrains; i++)
    if (s->drains[i].pid == pid) {
      struct sup_drain d = s->drains[i];
      s->drains[i] = s->drains[--s->ndrains];
      drain_event(s, &d, status);
      return 1;
    }
  return 0;
}

/* Takes node n out of the pool, saying why (node_quarantined). */
void sup_quarantine(sup *s, int n) {
  sup_node *nd = &s->nodes[n];
  nd->role = SUP_ROLE_QUARANTINED;
  sup_agent_stop(s, n, FT_STOP_EVICTED, "the node is quarantined");
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, n));
  cJSON_AddStringToObject(f, "reason", nd->why);
  cJSON_AddNumberToObject(f, "failures", nd->nfailures);
  sup_events_emit(s->ev, "node_quarantined", f, "node %d is not used again in this run: %s", n,
                  nd->why);
  if (s->slurm_launcher && s->rf.recovery.drain)
    drain_start(s, n);
}

/* The log files of the queued launches, created on a thread ahead of them
 * (sup_logprep_start); without it (out of memory) each launch creates its
 * own. */
void sup_prepare_logs(sup *s) {
  int per = s->node_step ? 1 : s->G, n = s->recovery.nlaunch_q * per, k = 0;
  char **paths = n ? calloc((size_t)n, sizeof *paths) : NULL;
  if (!paths)
    return;
  for (int i = 0; i < s->recovery.nlaunch_q; i++)
    for (int j = 0; j < per; j++, k++) {
      char log[4200];
      sup_node_log_path(s, s->recovery.launch_q[i], j, log, sizeof log);
      if (!(paths[k] = strdup(log))) { /* all or none: launch i waits for path i */
        while (k--)
          free(paths[k]);
        free(paths);
        return;
      }
    }
  sup_logprep_stop(s->logprep);
  s->logprep = NULL;
  (void)sup_logprep_start(paths, n, &s->logprep); /* failing: each launch creates its own */
}

/* ---- processes ------------------------------------------------------------- */

sup_worker *sup_worker_by_pid(sup *s, pid_t pid) {
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++)
      if (s->nodes[n].w[j].alive && s->nodes[n].w[j].pid == pid)
        return &s->nodes[n].w[j];
  return NULL;
}

/* The last non-empty line of a worker's log, into out. */
void sup_log_last_line(const sup *s, const sup_worker *w, char *out, size_t n) {
  char path[4200], line[512];
  sup_node_log_path(s, w->node, w->slot, path, sizeof path); /* node_step: slots labelled */
  out[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  if (fseek(f, -4096, SEEK_END))
    rewind(f);
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (line[0])
      snprintf(out, n, "%.*s", (int)(n - 1), line);
  }
  fclose(f);
}

/* 1 if a signal that kills (SIGKILL) is pending for pid: it is dying. */
int sup_kill_pending(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int pending = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long mask;
    if ((sscanf(line, "SigPnd: %llx", &mask) == 1 || sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
        (mask & (1ull << (SIGKILL - 1))))
      pending = 1;
  }
  fclose(f);
  return pending;
}

/* ---- /proc: what the teardown looks at (sup_recovery.c, "bounded
 * teardown") ---- */

/* Reads at most n - 1 bytes of a small file, NUL-terminated, the trailing
 * newline dropped. Returns the length, -1 if it cannot be read. */
static int read_small(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t k = read(fd, buf, n - 1);
  close(fd);
  if (k < 0)
    return -1;
  buf[k] = 0;
  if (k > 0 && buf[k - 1] == '\n')
    buf[--k] = 0;
  return (int)k;
}

/* 1 if a thread of process pid is in uninterruptible sleep (state D); the
 * kernel function it sleeps in into wchan ("" where the kernel hides it).
 * Every thread is read: once SIGKILL is pending the others exit and the
 * leader shows Z (zombie) while the process cannot be reaped. */
int sup_proc_dstate(pid_t pid, char *wchan, size_t n) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    int tid = atoi(e->d_name);
    if (tid <= 0)
      continue;
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, tid);
    /* "tid (comm) S ...": comm may hold spaces and ')', the state follows the last ')' */
    char *rp = read_small(path, buf, sizeof buf) > 0 ? strrchr(buf, ')') : NULL;
    if (!rp || rp[1] != ' ' || rp[2] != 'D')
      continue;
    found = 1;
    snprintf(path, sizeof path, "/proc/%d/task/%d/wchan", (int)pid, tid);
    if (read_small(path, wchan, n) <= 0 || !strcmp(wchan, "0"))
      wchan[0] = 0;
  }
  closedir(d);
  return found;
}

/* 1 if a worker of another node than n is in D state too: now (killed or
 * not: /proc says), or given up in this round. Then the cause is common to
 * the nodes (a shared file system frozen or dead, the store's), not n's
 * own. Read only when a worker is given up (rare): one /proc look per
 * live worker. */
int sup_dstate_elsewhere(const sup *s, int n) {
  char wchan[128];
  for (int m = 0; m < s->nnodes; m++)
    for (int j = 0; m != n && j < s->G; j++) {
      const sup_worker *x = &s->nodes[m].w[j];
      if (x->alive && x->pid > 0 &&
          (x->dstate_s > 0 || sup_proc_dstate(x->pid, wchan, sizeof wchan)))
        return 1;
    }
  for (int i = 0; i < s->nunkillable; i++)
    if (s->unkillable[i].node != n && s->unkillable[i].gen == s->gen)
      return 1;
  return 0;
}

/* pid was given up as unkillable: its I/O ended at last. 0 if it was not one. */
int sup_unkillable_reaped(sup *s, pid_t pid, int status) {
  for (int i = 0; i < s->nunkillable; i++) {
    if (s->unkillable[i].pid != pid)
      continue;
    struct sup_unkillable u = s->unkillable[i];
    s->unkillable[i] = s->unkillable[--s->nunkillable];
    double after = ft_now_s() - u.since_s;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "node", u.node);
    cJSON_AddNumberToObject(f, "slot", u.slot);
    cJSON_AddNumberToObject(f, "pid", pid);
    cJSON_AddNumberToObject(f, "signal", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    cJSON_AddNumberToObject(f, "exit_code", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    cJSON_AddNumberToObject(f, "seconds", round(after * 10) / 10);
    sup_events_emit(s->ev, "unkillable_reaped", f,
                    "node %d slot %d: pid %d, given up as unkillable, ended %.1f s later", u.node,
                    u.slot, (int)pid, after);
    return 1;
  }
  return 0;
}

int sup_gang_trains(const sup *s) {
  return s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED);
}
