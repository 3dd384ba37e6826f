/*
 * sup_watch: the watchdog's pure detectors (watchdog/) wired to the
 * supervisor's STEP and FAULT streams (docs/watchdog.md):
 *   - loss spikes: wd_loss over rank 0's STEP losses, in step order, once
 *     per step; a SPIKE/NONFINITE verdict, or a FAULT nan/loss_spike from a
 *     gang worker, is a loss fault -> event "loss_spike", then
 *     sup_recovery_loss_fault (rollback, BAD marking, skip range);
 *   - GOOD checkpoints: a committed checkpoint c becomes GOOD when rank 0
 *     reports step >= c + window with no loss fault since c (the decisions
 *     are sup_rollback_good_*, unit-tested); the mark itself is queued to
 *     the commit queue's store thread (sup_mark_good), never made here;
 *   - damaged checkpoints: FAULT restore_corrupt of the step being restored
 *     -> that checkpoint marked BAD (event "checkpoint_damaged"), at most
 *     SUP_MAX_FALLBACKS between generations that train; a node failing the
 *     hashes of SUP_HASHFAIL_SUSPECT restores is quarantined instead;
 *   - silent data corruption: FAULT sdc from a worker's recomputation
 *     check (the detail names the rank a majority found wrong, or none)
 *     -> event "sdc", then sup_recovery_sdc_fault: a rollback before the
 *     first step no passed check covers, no skip range, and the named
 *     rank's node quarantined (nobody when there was no majority);
 *   - Xid faults: FAULT xid "xid=N action=A pci=P: ..." -> event "xid";
 *     quarantine blames the node, restart restarts the gang in place;
 *   - collective failures: FAULT collective_timeout/other -> blame the
 *     silent workers (sup_recovery_blame_silent); for a timeout, else the
 *     ranks the progress records show behind that collective
 *     (sup_watch_progress_behind: wd_progress_behind), or, for a timeout
 *     in the generation's rendezvous (no collective yet), the ranks that
 *     heartbeat in the generation but never joined it (class rendezvous);
 *   - hangs with live processes: wd_progress over every gang rank's
 *     progress record (HEARTBEAT phase, collective count, step, age), on
 *     the tick while the gang trains (sup_watch_progress): event
 *     "progress_hang"; behind/rendezvous -> "hang" on the culprits' nodes
 *     (quarantine), storage/network/gang -> a restart, nobody blamed.
 *     Before that stop, the stuck workers (the culprits, or the whole
 *     gang) are asked for their training thread's stack, which each
 *     writes to its log, and the event names those logs (hang_evidence);
 *   - storage waits: a worker whose training thread waits on its data's
 *     bucket (phase storage_wait, and why: HEARTBEAT wait, wait_attempt)
 *     for more than a heartbeat interval: event "data_wait" once per
 *     episode, "data_wait_end" when it has been out of the phase for a
 *     heartbeat interval (or its process or generation ended), the
 *     progress line's note, /status (sup_watch_data_waits, on the tick);
 *     the progress watchdog never blames such a rank, and waits for it the
 *     data client's bound (ckpt_s3_read_bound_s) plus a heartbeat timeout;
 *   - stragglers: wd_straggler over every rank's step_ms, once every rank
 *     has reported a step; events "straggler" / "straggler_cleared" (cause
 *     "compute"), report only;
 *   - slow links: a second wd_straggler over each gang node's control-link
 *     round trip (the largest of its workers' HEARTBEAT rtt_us), judged once
 *     per heartbeat interval. A synchronous gang waits for its slowest link,
 *     so step times cannot say whose link is slow (everyone's collectives
 *     stretch alike, and each rank's step_ms leaves them out); the
 *     supervisor's own link to each host is a third vantage point: a host
 *     whose link is rate-limited or congested queues our heartbeats behind
 *     its collective traffic. Round trips under LINK_FLOOR_MS count as that
 *     floor (a LAN's jitter is not a slow host); a node is an outlier at
 *     LINK_RATIO x the median of the others, flagged after LINK_HITS of its
 *     last LINK_WINDOW judgements: events "straggler" / "straggler_cleared"
 *     with cause "link", the node, its host and rtt_ms; report only. A
 *     stall of the supervisor's own loop delays every echo alike, so it
 *     flags nobody. When supervise itself runs on a gang host (SLURMD_NODENAME
 *     under sbatch) and the gang has fewer than 3 nodes, a slow link of its
 *     own host would make the other node look slow: links are not judged.
 *
 * NO DOUBLE FEEDING. Steps re-run after any recovery (a rollback, or a node
 * loss that restores an older checkpoint) must not enter the loss window
 * twice. The supervisor keeps every accepted (step, loss) of the current
 * timeline; when a generation is assigned with restore step r, it drops the
 * values of steps > r, resets the detector and re-pushes the last `window`
 * values of steps <= r: the window is exactly what it was right after step
 * r, with no warm-up to sit through. Only steps > the last fed step are fed.
 * After a supervisor restart the history is gone: the detector warms up
 * again (min_steps steps without judgement); documented, not hidden.
 *
 * on_loss_spike: warn -> the event only. A FAULT nan from a worker is the
 * exception: the worker did not apply the update and waits for STOP, so the
 * run cannot go on without a restart; it rolls back (without a skip) even
 * under warn.
 *
 * A detector (layer 3, sup_int.h): what it finds goes down to the
 * recovery (sup_recovery_*); the recovery reaches it only through the
 * hooks sup_main.c wires (generation, progress_behind); its tick-driven
 * judgements (links, progress) are called by sup_timers.c beside it.
 *
 * Single-threaded (the loop). Failures of the store while marking GOOD are
 * logged and the run goes on (GOOD is advisory; BAD is not: see
 * sup_recovery_loss_fault).
 */
#include "sup_int.h"
#include "sup_commitq.h"

#include "ckpt_s3_read.h"

#include "ft_clock.h"
#include "ft_err.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void links_reset(sup *s);

#define HIST_TRIM 65536 /* history kept beyond the window (steps) */

static int is_s3(const char *glob) {
  return glob && strncmp(glob, "s3://", 5) == 0;
}

/* The progress watchdog's deadline for a rank in storage_wait: the longest
 * one read of the data's S3 client can take under the environment the
 * workers inherit (FT_S3_RETRY_BUDGET_S + 2 x FT_S3_TIMEOUT_S) plus a
 * heartbeat timeout (the worker's exit, or its next beat, must reach us),
 * so the client gives up first: the worker exits 4, restart in place. A
 * collective timeout shorter than that ends such a wait first (the others'
 * collective), judged storage: said once, for s3:// data. */
static void storage_wait_deadline(sup *s) {
  double bound;
  if (ckpt_s3_read_bound_s(&bound))
    fprintf(stderr, "supervise: warning: %s (the data's storage wait: %.0f s)\n", ft_err_detail(),
            bound);
  double hb = s->rf.watchdog.heartbeat_timeout_s, ct = s->rf.watchdog.collective_timeout_s;
  s->watch.prog_cfg.storage_wait_s = bound + hb;
  if ((is_s3(s->rf.data.train) || is_s3(s->rf.data.val)) && ct > 0 && ct < bound)
    fprintf(stderr,
            "supervise: note: a rank waiting on the data's bucket may wait up to %.0f s "
            "(FT_S3_RETRY_BUDGET_S + 2 x FT_S3_TIMEOUT_S); the others' collectives time out "
            "after %.0f s (watchdog.collective_timeout_s), which then ends the wait as a "
            "storage hang (nobody blamed)\n",
            bound, ct);
}

int sup_watch_init(sup *s) {
  ft_rf_on_spike o = s->rf.recovery.on_loss_spike;
  s->watch.on_spike = o == FT_RF_SPIKE_WARN       ? SUP_SPIKE_WARN
                      : o == FT_RF_SPIKE_ROLLBACK ? SUP_SPIKE_ROLLBACK
                                                  : SUP_SPIKE_ROLLBACK_SKIP;
  wd_loss_cfg c;
  wd_loss_cfg_default(&c);
  c.window = s->rf.watchdog.spike_window;
  c.zscore = s->rf.watchdog.spike_zscore;
  c.min_steps = s->rf.watchdog.spike_min_steps;
  int rc = wd_loss_new(&c, &s->watch.loss);
  if (rc)
    return rc;
  s->watch.loss_fed = -1;
  for (int i = 0; i < SUP_STEPTIME_SLOTS; i++)
    s->watch.steptime[i].step = -1;
  /* the progress watchdog: auto, or the run file's fixed deadline, which only
   * the heartbeat timeout floors (progress is seen a beat at a time) */
  wd_progress_cfg_default(&s->watch.prog_cfg, s->rf.watchdog.heartbeat_timeout_s);
  if (s->rf.watchdog.progress_timeout_s > 0) {
    s->watch.prog_cfg.timeout_s = s->rf.watchdog.progress_timeout_s;
    s->watch.prog_cfg.floor_s = 0;
  }
  s->watch.prog_last_step = -1;
  storage_wait_deadline(s);
  sup_rollback_good_init(&s->watch.good);
  /* after a supervisor restart: every COMMITTED checkpoint is a candidate */
  ckpt_info *list = NULL;
  size_t n = 0;
  if (ckpt_store_list(s->store, s->rf.run, &list, &n) == 0)
    for (size_t i = 0; i < n; i++)
      if (list[i].state == CKPT_COMMITTED)
        sup_rollback_good_add(&s->watch.good, list[i].step);
  free(list);
  return FT_OK;
}

static void steptime_free(sup *s) {
  for (int i = 0; i < SUP_STEPTIME_SLOTS; i++) {
    free(s->watch.steptime[i].ms);
    free(s->watch.steptime[i].have);
    s->watch.steptime[i].ms = NULL;
    s->watch.steptime[i].have = NULL;
    s->watch.steptime[i].step = -1;
  }
  s->watch.steptime_world = 0;
}

void sup_watch_free(sup *s) {
  wd_loss_free(s->watch.loss);
  s->watch.loss = NULL;
  wd_straggler_free(s->watch.strag);
  s->watch.strag = NULL;
  wd_straggler_free(s->watch.linkstrag);
  s->watch.linkstrag = NULL;
  steptime_free(s);
  free(s->watch.prog_ranks);
  s->watch.prog_ranks = NULL;
  s->watch.prog_cap = 0;
  free(s->watch.losshist);
  s->watch.losshist = NULL;
  s->watch.nloss = s->watch.caploss = 0;
}

void sup_watch_generation(sup *s) {
  int64_t r = s->restore_step;
  while (s->watch.nloss && s->watch.losshist[s->watch.nloss - 1].step > r)
    s->watch.nloss--;
  if (s->watch.loss) {
    wd_loss_reset(s->watch.loss);
    size_t w = (size_t)s->rf.watchdog.spike_window;
    for (size_t i = s->watch.nloss > w ? s->watch.nloss - w : 0; i < s->watch.nloss; i++) {
      wd_loss_event ev;
      wd_loss_push(s->watch.loss, s->watch.losshist[i].step, s->watch.losshist[i].loss, 0, &ev);
    }
  }
  s->watch.loss_fed = r;

  links_reset(s);
  wd_straggler_free(s->watch.strag);
  s->watch.strag = NULL;
  steptime_free(s);
  int world = s->ngang * s->G;
  if (world < 2)
    return;
  wd_straggler_cfg sc;
  wd_straggler_cfg_default(&sc, world);
  if (wd_straggler_new(&sc, &s->watch.strag)) {
    fprintf(stderr, "supervise: no straggler detection: %s\n", ft_err_detail());
    return;
  }
  for (int i = 0; i < SUP_STEPTIME_SLOTS; i++) {
    s->watch.steptime[i].ms = calloc((size_t)world, sizeof(double));
    s->watch.steptime[i].have = calloc((size_t)world, 1);
    if (!s->watch.steptime[i].ms || !s->watch.steptime[i].have) {
      steptime_free(s);
      wd_straggler_free(s->watch.strag);
      s->watch.strag = NULL;
      return;
    }
  }
  s->watch.steptime_world = world;
}

/* ---- stragglers --------------------------------------------------------- */

enum { LINK_WINDOW = 8, LINK_HITS = 4 };
#define LINK_RATIO 3.0
#define LINK_FLOOR_MS 20.0

/* Links are judged when the gang has 2+ nodes and supervise is not one of
 * fewer than 3 gang hosts itself (see the header). */
static int links_judged(const sup *s) {
  if (s->ngang < 2)
    return 0;
  const char *me = getenv("SLURMD_NODENAME");
  if (!me || !*me || s->ngang >= 3)
    return 1;
  for (int p = 0; p < s->ngang; p++) {
    const char *h = sup_node_host(s, s->gang[p]);
    if (h && !strcmp(h, me))
      return 0;
  }
  return 1;
}

static void links_reset(sup *s) {
  wd_straggler_free(s->watch.linkstrag);
  s->watch.linkstrag = NULL;
  s->watch.link_round = 0;
  if (!links_judged(s))
    return;
  wd_straggler_cfg lc = {
      .nranks = s->ngang, .ratio = LINK_RATIO, .window = LINK_WINDOW, .min_hits = LINK_HITS};
  if (wd_straggler_new(&lc, &s->watch.linkstrag))
    fprintf(stderr, "supervise: no slow-link detection: %s\n", ft_err_detail());
}

void sup_watch_links(sup *s, double now) {
  double every = ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  if (!s->watch.linkstrag || now < s->watch.link_next_s)
    return;
  s->watch.link_next_s = now + every;
  int n = s->ngang;
  double rtt[n];
  for (int p = 0; p < n; p++) {
    sup_node *nd = &s->nodes[s->gang[p]];
    rtt[p] = NAN; /* no fresh round trip from every worker: no observation */
    double worst = 0;
    int fresh = 1;
    for (int j = 0; j < s->G && fresh; j++) {
      const sup_worker *w = &nd->w[j];
      fresh = w->gen == s->gen && w->rtt_at_s > now - 2 * every;
      if (w->rtt_ms > worst)
        worst = w->rtt_ms;
    }
    if (fresh)
      rtt[p] = worst > LINK_FLOOR_MS ? worst : LINK_FLOOR_MS;
  }
  wd_strag_event evs[n];
  int ne = wd_straggler_step(s->watch.linkstrag, s->watch.link_round++, rtt, evs, n);
  for (int i = 0; i < ne; i++) {
    int node = s->gang[evs[i].rank], flagged = evs[i].kind == WD_STRAG_FLAGGED;
    double ms = 0;
    for (int j = 0; j < s->G; j++)
      if (s->nodes[node].w[j].rtt_ms > ms)
        ms = s->nodes[node].w[j].rtt_ms;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "cause", "link");
    cJSON_AddNumberToObject(f, "node", node);
    const char *host = sup_node_host(s, node);
    if (host)
      cJSON_AddStringToObject(f, "host", host);
    cJSON_AddNumberToObject(f, "rtt_ms", round(ms * 10) / 10);
    cJSON_AddNumberToObject(f, "ratio", round(evs[i].ratio * 1000) / 1000);
    cJSON_AddNumberToObject(f, "step", (double)s->run.last_step);
    if (flagged)
      cJSON_AddNumberToObject(f, "hits", evs[i].hits);
    sup_events_emit(s->ev, flagged ? "straggler" : "straggler_cleared", f,
                    "node %d%s%s: its link %s (control round trip %.0f ms, %.1fx the others' "
                    "median)",
                    node, host ? ", host " : "", host ? host : "",
                    flagged ? "is slow" : "is no longer slow", ms, evs[i].ratio);
  }
}

void sup_watch_step_time(sup *s, sup_worker *w, const ft_msg *m) {
  int world = s->watch.steptime_world, rank = w->rank;
  int64_t k = m->step.step;
  if (rank == 0) {
    /* rank 0's consecutive STEPs of one generation: a step's wall time, all
     * of it (the gang is synchronous), for the progress watchdog's auto
     * deadline */
    double now = ft_now_s();
    if (s->watch.prog_last_gen == s->gen && s->watch.prog_last_step >= 0 &&
        k == s->watch.prog_last_step + 1) {
      s->watch.prog_step_s[s->watch.prog_stepi] = now - s->watch.prog_last_at;
      s->watch.prog_stepi = (s->watch.prog_stepi + 1) % SUP_PROG_STEPS;
      if (s->watch.prog_nsteps < SUP_PROG_STEPS)
        s->watch.prog_nsteps++;
    }
    s->watch.prog_last_gen = s->gen;
    s->watch.prog_last_step = k;
    s->watch.prog_last_at = now;
  }
  s->watch.trained_gen = s->gen; /* the gang trains: a worker's own error is its node's now */
  s->watch.nfallbacks = 0;       /* its restore worked: a new budget of fallbacks */
  if (!s->watch.strag || rank < 0 || rank >= world || k < 0)
    return;
  sup_steptime *t = &s->watch.steptime[k % SUP_STEPTIME_SLOTS];
  if (t->step != k) { /* a new step (an unfinished older one is dropped) */
    t->step = k;
    t->nhave = 0;
    for (int r = 0; r < world; r++) {
      t->ms[r] = NAN;
      t->have[r] = 0;
    }
  }
  if (t->have[rank])
    return;
  t->have[rank] = 1;
  t->ms[rank] = m->step.step_ms;
  if (++t->nhave < world)
    return;
  t->step = -1; /* judged */
  wd_strag_event evs[world];
  int ne = wd_straggler_step(s->watch.strag, k, t->ms, evs, world);
  for (int i = 0; i < ne; i++) {
    int r = evs[i].rank, node = s->gang[r / s->G], slot = r % s->G;
    int flagged = evs[i].kind == WD_STRAG_FLAGGED;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "cause", "compute");
    cJSON_AddNumberToObject(f, "rank", r);
    cJSON_AddNumberToObject(f, "node", node);
    cJSON_AddNumberToObject(f, "slot", slot);
    const char *host = sup_node_host(s, node);
    if (host)
      cJSON_AddStringToObject(f, "host", host);
    cJSON_AddNumberToObject(f, "ratio", round(evs[i].ratio * 1000) / 1000);
    cJSON_AddNumberToObject(f, "step", (double)k);
    if (flagged)
      cJSON_AddNumberToObject(f, "hits", evs[i].hits);
    sup_events_emit(s->ev, flagged ? "straggler" : "straggler_cleared", f,
                    "rank %d (node %d slot %d%s%s) %s at step %" PRId64
                    " (%.2fx the others' median)",
                    r, node, slot, host ? ", host " : "", host ? host : "",
                    flagged ? "is slow" : "is no longer slow", k, evs[i].ratio);
  }
}

/* ---- loss faults and GOOD ------------------------------------------------ */

static void hist_add(sup *s, int64_t step, double loss) {
  size_t keep = (size_t)s->rf.watchdog.spike_window + HIST_TRIM;
  if (s->watch.nloss >= keep) { /* drop the oldest half of what is beyond the window */
    size_t drop = s->watch.nloss - keep / 2;
    memmove(s->watch.losshist, s->watch.losshist + drop,
            sizeof *s->watch.losshist * (s->watch.nloss - drop));
    s->watch.nloss -= drop;
  }
  if (s->watch.nloss == s->watch.caploss) {
    size_t cap = s->watch.caploss ? s->watch.caploss * 2 : 256;
    sup_loss_pt *p = realloc(s->watch.losshist, cap * sizeof *p);
    if (!p)
      return; /* the window rebuild after a rollback is then shorter */
    s->watch.losshist = p;
    s->watch.caploss = cap;
  }
  s->watch.losshist[s->watch.nloss].step = step;
  s->watch.losshist[s->watch.nloss].loss = loss;
  s->watch.nloss++;
}

/* Queues a GOOD mark for every checkpoint that is now spike_window steps
 * old with no loss fault since. The marks are made on the commit queue's
 * store thread (sup_mark_good), never here: a mark renames a mark
 * object into place and waits for the store's meta lock. */
static void mark_good(sup *s, int64_t k) {
  int64_t due[64];
  int nd = sup_rollback_good_due(&s->watch.good, k, s->rf.watchdog.spike_window, due, 64);
  for (int i = 0; i < nd; i++)
    sup_mark_good(s, due[i], k);
}

static const char *on_spike_name(int mode) {
  return mode == SUP_SPIKE_WARN       ? "warn"
         : mode == SUP_SPIKE_ROLLBACK ? "rollback"
                                      : "rollback_and_skip";
}

static void add_num_or_null(cJSON *f, const char *name, double v) {
  if (isfinite(v))
    cJSON_AddNumberToObject(f, name, v);
  else
    cJSON_AddNullToObject(f, name);
}

int sup_watch_loss(sup *s, const ft_msg *m) {
  int64_t k = m->step.step;
  if (!s->watch.loss || k <= s->watch.loss_fed)
    return 0; /* judged already (a repeat) */
  s->watch.loss_fed = k;
  wd_loss_event ev;
  if (wd_loss_push(s->watch.loss, k, m->step.loss, m->step.grad_norm, &ev))
    return 0;
  if (ev.verdict == WD_LOSS_OK || ev.verdict == WD_LOSS_WARMUP) {
    hist_add(s, k, m->step.loss);
    mark_good(s, k);
    return 0;
  }
  int spike = ev.verdict == WD_LOSS_SPIKE;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)k);
  add_num_or_null(f, "loss", m->step.loss);
  add_num_or_null(f, "median", ev.median);
  add_num_or_null(f, "mad", ev.mad);
  add_num_or_null(f, "z", ev.z);
  cJSON_AddStringToObject(f, "verdict", wd_loss_verdict_name(ev.verdict));
  cJSON_AddStringToObject(f, "source", "step");
  cJSON_AddStringToObject(f, "action", on_spike_name(s->watch.on_spike));
  sup_events_emit(s->ev, "loss_spike", f, "step %" PRId64 " loss %g (median %g, z %.1f): %s -> %s",
                  k, m->step.loss, ev.median, ev.z, wd_loss_verdict_name(ev.verdict),
                  on_spike_name(s->watch.on_spike));
  char detail[256];
  snprintf(detail, sizeof detail, "step %" PRId64 " loss %g (median %g, z %.1f, %s)", k,
           m->step.loss, ev.median, ev.z, wd_loss_verdict_name(ev.verdict));
  return sup_recovery_loss_fault(s, k, spike ? SUP_FAULT_LOSS_SPIKE : SUP_FAULT_NAN, detail, 0);
}

/* ---- FAULT ---------------------------------------------------------------- */

/* "xid=N action=A pci=P: message" -> N, A, P; 0 when it is not that form. */
static int parse_xid(const char *d, int *xid, char *action, size_t alen, char *pci, size_t plen) {
  const char *x = strstr(d, "xid="), *a = strstr(d, "action="), *p = strstr(d, "pci=");
  if (!x || !a || !p)
    return 0;
  char *end;
  long v = strtol(x + 4, &end, 10);
  if (end == x + 4 || v < 0 || v > 1000000)
    return 0;
  *xid = (int)v;
  size_t n = strcspn(a + 7, " :");
  snprintf(action, alen, "%.*s", (int)n, a + 7);
  n = strcspn(p + 4, " ");
  if (n && p[4 + n - 1] == ':')
    n--; /* "pci=0000:01:00: message" */
  snprintf(pci, plen, "%.*s", (int)n, p + 4);
  return 1;
}

static void quarantine_spare(sup *s, int n, const char *why) {
  sup_node *nd = &s->nodes[n];
  nd->role = SUP_ROLE_QUARANTINED;
  snprintf(nd->why, sizeof nd->why, "%s (spare)", why);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddStringToObject(f, "reason", why);
  sup_events_emit(s->ev, "node_quarantined", f, "spare node %d is not used in this run (%s)", n,
                  why);
  sup_persist_queue(s, "running", "the run state"); /* on the record lane */
  nd->kill_sent = 1;
  if (nd->pgid > 0)
    kill(-nd->pgid, SIGKILL);
  for (int j = 0; j < s->G; j++)
    if (nd->w[j].alive && nd->w[j].pid > 0)
      kill(nd->w[j].pid, SIGKILL);
}

static void on_xid(sup *s, sup_worker *w, const char *detail) {
  int xid = -1;
  char action[32] = "report", pci[32] = "";
  parse_xid(detail, &xid, action, sizeof action, pci, sizeof pci);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  cJSON_AddNumberToObject(f, "xid", xid);
  cJSON_AddStringToObject(f, "action", action);
  cJSON_AddStringToObject(f, "pci", pci);
  cJSON_AddStringToObject(f, "detail", detail);
  sup_events_emit(s->ev, "xid", f, "node %d slot %d: Xid %d on %s -> %s", w->node, w->slot, xid,
                  pci, action);
  int quarantine = !strcmp(action, "quarantine"), restart = !strcmp(action, "restart");
  if (!quarantine && !restart)
    return; /* report / ignore: the event only */
  if (sup_in_gang(s, w->node) && s->nodes[w->node].role == SUP_ROLE_ACTIVE)
    sup_recovery_fault(s, SUP_FAULT_XID, w->node, w->slot, w->pid, detail,
                       quarantine ? SUP_BLAME_NODE : SUP_BLAME_NONE);
  else if (quarantine && s->nodes[w->node].role == SUP_ROLE_SPARE && s->state < SUP_FINISHING)
    quarantine_spare(s, w->node, "Xid");
}

/* The errno name a storage error's text carries ("ENOSPC"), or NULL. */
static const char *storage_errno(const char *d) {
  static const struct {
    const char *text, *name;
  } known[] = {
      {"no space left on device", "ENOSPC"}, {"quota exceeded", "EDQUOT"},
      {"input/output error", "EIO"},         {"read-only file system", "EROFS"},
      {"permission denied", "EACCES"},       {"timed out", "ETIMEDOUT"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcasestr(d, known[i].text))
      return known[i].name;
  return NULL;
}

/* A worker could not write its shard of a checkpoint: the store's fault,
 * never the node's. The checkpoint is skipped (the last committed one stays
 * the restore point), training goes on, the next checkpoint tries again. */
static void on_storage(sup *s, sup_worker *w, int64_t step, const char *detail) {
  char path[256] = ""; /* the first absolute path in the detail (a word starting with '/') */
  for (const char *p = detail; *p; p++)
    if (*p == '/' && (p == detail || strchr(" '\"(", p[-1]))) {
      snprintf(path, sizeof path, "%.*s", (int)strcspn(p, ": ,)'\""), p);
      break;
    }
  const char *en = storage_errno(detail);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  cJSON_AddNumberToObject(f, "rank", w->rank);
  cJSON_AddNumberToObject(f, "step", (double)step);
  cJSON_AddStringToObject(f, "path", path);
  if (en)
    cJSON_AddStringToObject(f, "errno", en);
  else
    cJSON_AddNullToObject(f, "errno");
  cJSON_AddStringToObject(f, "detail", detail);
  int final = step >= s->final_step;
  sup_events_emit(s->ev, "storage_fault", f,
                  "node %d slot %d cannot write its shard of step %" PRId64 " (%s%s%s): %s",
                  w->node, w->slot, step, en ? en : "store error", path[0] ? " on " : "", path,
                  final ? "the final checkpoint: the worker retries it, no node blamed"
                        : "checkpoint skipped, training goes on, no node blamed");
  if (!final) /* the final one is retried: it fails only if the run does */
    sup_event_checkpoint_failed(s, step, w->rank, -1, "storage", detail);
}

/* A worker's recomputation check found bits that differ (FAULT sdc): the
 * detail starts "rank R " when a majority named R, "no majority" when none
 * did; step is the first step no passed check covers. The named rank's
 * node is blamed (quarantine, a spare); either way the run rolls back to
 * the newest checkpoint before that step. */
static void on_sdc(sup *s, const sup_worker *from, int64_t step, const char *detail) {
  int rank = -1, node = -1, slot = -1;
  pid_t pid = 0;
  if (sscanf(detail, "rank %d ", &rank) != 1 || rank < 0 || rank / s->G >= s->ngang)
    rank = -1;
  if (rank >= 0) {
    node = s->gang[rank / s->G];
    const sup_worker *w = &s->nodes[node].w[rank % s->G];
    slot = w->slot;
    pid = w->pid;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "first_step", (double)step);
  add_num_or_null(f, "rank", rank >= 0 ? rank : NAN);
  add_num_or_null(f, "node", node >= 0 ? node : NAN);
  cJSON_AddStringToObject(f, "verdict", node >= 0 ? "named" : "no_majority");
  cJSON_AddNumberToObject(f, "reporter", from->node);
  cJSON_AddStringToObject(f, "detail", detail);
  if (node >= 0)
    sup_events_emit(s->ev, "sdc", f,
                    "node %d (rank %d) computes wrong bits, found by recomputation -> "
                    "quarantine, roll back before step %" PRId64,
                    node, rank, step);
  else
    sup_events_emit(s->ev, "sdc", f,
                    "recomputed bits differ, no node named -> roll back before step %" PRId64,
                    step);
  sup_recovery_sdc_fault(s, step, node, slot, pid, detail);
}

/* The BAD mark of a damaged checkpoint (p->step), on the record lane. */
static void mark_damaged_work(sup *s, sup_pending_ckpt *p) {
  p->rc = ckpt_store_set_state(s->store, s->rf.run, p->step, CKPT_BAD);
  if (p->rc)
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
}

/* ... answered, on the loop: checkpoint_damaged (its fields in p->rec.ev),
 * or the run fails: a checkpoint that cannot be restored nor marked would
 * be restored again. */
static void damaged_marked(sup *s, sup_pending_ckpt *p) {
  cJSON *f = p->rec.ev;
  const char *detail = cJSON_GetStringValue(cJSON_GetObjectItem(f, "detail"));
  if (p->rc) {
    char why[FT_WIRE_MAX_DETAIL + 1280];
    snprintf(why, sizeof why,
             "checkpoint %" PRId64 " cannot be restored (%s) and cannot be marked BAD (%s)",
             p->step, detail, p->why);
    sup_recovery_fail(s, why);
    return;
  }
  int fallback = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(f, "fallback"));
  p->rec.ev = NULL; /* the event owns f now */
  sup_events_emit(s->ev, "checkpoint_damaged", f,
                  "checkpoint %" PRId64 " cannot be restored (%s): marked BAD; the next generation "
                  "restores the next older one (fallback %d of at most %d)",
                  p->step, detail, fallback, SUP_MAX_FALLBACKS);
}

/* FAULT restore_corrupt: a chunk of the checkpoint this generation
 * restores failed its hash from every source the worker has (its memory,
 * buddies, the store). Persisted checkpoints only: a memory-level one that
 * cannot be restored is dropped by the recovery (drop_lost_memory). The
 * worker exits FT_EXIT_STORE next (nobody's fault: a restart in place),
 * and that generation's ASSIGN restores the newest checkpoint not BAD.
 * The mark goes to the record lane (a mark waits for the store's meta
 * lock, and renames a mark object): the next round's records follow it
 * there, and its ASSIGN waits for them (RECORDING), so the mark is in the
 * catalog first. Counted at once: another rank's report of the same step
 * (before the mark is in) is the same fallback. */
static void on_restore_corrupt(sup *s, sup_worker *w, int64_t step, const char *detail) {
  sup_node *nd = &s->nodes[w->node];
  if (step < 0 || step != s->restore_step || s->state >= SUP_FINISHING)
    return;
  for (int i = 0; i < s->watch.nfallbacks; i++)
    if (s->watch.fallback_steps[i] == step)
      return; /* being marked for another rank's report */
  ckpt_info info;
  if (ckpt_store_get_info(s->store, s->rf.run, step, &info) || info.level == CKPT_LEVEL_MEMORY ||
      info.state == CKPT_BAD)
    return; /* a memory-level one, or marked by another rank's report */
  int nfail = sup_failures_add(&nd->hashfails, ft_now_s(), s->rf.recovery.node_failure_window_s);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)step);
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  cJSON_AddNumberToObject(f, "rank", w->rank);
  cJSON_AddNumberToObject(f, "node_hash_failures", nfail);
  cJSON_AddStringToObject(f, "detail", detail);
  if (nfail >= SUP_HASHFAIL_SUSPECT) {
    cJSON_AddStringToObject(f, "verdict", "node_suspect");
    sup_events_emit(s->ev, "restore_hash_failure", f,
                    "node %d failed the hashes of %d restores within %.0f s: its memory or disk "
                    "is suspect, not checkpoint %" PRId64 " (%s)",
                    w->node, nfail, s->rf.recovery.node_failure_window_s, step, detail);
    char why[FT_WIRE_MAX_DETAIL + 128];
    snprintf(why, sizeof why, "%d restores failed their hashes on this node: %s", nfail, detail);
    snprintf(nd->why, sizeof nd->why,
             "restore_hash: %d restores failed their hashes on this node within %.0f s", nfail,
             s->rf.recovery.node_failure_window_s);
    sup_recovery_fault(s, SUP_FAULT_RESTORE_HASH, w->node, w->slot, w->pid, why, SUP_BLAME_NODE);
    return;
  }
  if (s->watch.nfallbacks >= SUP_MAX_FALLBACKS) {
    char steps[128] = "";
    for (int i = 0, o = 0; i < s->watch.nfallbacks && o < (int)sizeof steps; i++)
      o += snprintf(steps + o, sizeof steps - (size_t)o, "%s%" PRId64, i ? ", " : "",
                    s->watch.fallback_steps[i]);
    cJSON_AddStringToObject(f, "verdict", "too_many_fallbacks");
    sup_events_emit(s->ev, "restore_hash_failure", f,
                    "checkpoint %" PRId64 " failed its hash too (%s)", step, detail);
    char why[FT_WIRE_MAX_DETAIL + 384];
    snprintf(why, sizeof why,
             "checkpoint %" PRId64 " cannot be restored (%s), and neither could %s before it: "
             "stopped after %d fallbacks; check the store with 'ckpt verify'",
             step, detail, steps, SUP_MAX_FALLBACKS);
    sup_recovery_fail(s, why);
    return;
  }
  s->watch.fallback_steps[s->watch.nfallbacks++] = step;
  cJSON_AddStringToObject(f, "verdict", "checkpoint_bad");
  cJSON_AddNumberToObject(f, "fallback", s->watch.nfallbacks);
  sup_pending_ckpt *p = sup_record_new(mark_damaged_work, damaged_marked, "a BAD mark");
  p->step = step;
  p->rec.ev = f;
  sup_record_push(s, p);
}

void sup_watch_fault(sup *s, sup_worker *w, const ft_msg *m) {
  const char *detail = m->fault.detail ? m->fault.detail : "";
  int current = m->gen == s->gen && w->gen == s->gen && w->rank >= 0 && sup_in_gang(s, w->node);
  switch (m->fault.kind) {
  case FT_FAULT_NAN:
  case FT_FAULT_LOSS_SPIKE: {
    /* every rank reports the same NaN: the first one acts, the others find
     * the gang stopping */
    if (!current ||
        !(s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED)))
      return;
    int nan = m->fault.kind == FT_FAULT_NAN;
    int64_t k = m->fault.step >= 0 ? m->fault.step : s->run.last_step + 1;
    double med = NAN, mad = NAN;
    if (s->watch.loss)
      wd_loss_stats(s->watch.loss, &med, &mad);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "step", (double)k);
    cJSON_AddNullToObject(f, "loss");
    add_num_or_null(f, "median", med);
    add_num_or_null(f, "mad", mad);
    cJSON_AddNullToObject(f, "z");
    cJSON_AddStringToObject(f, "verdict", nan ? "nonfinite" : "spike");
    cJSON_AddStringToObject(f, "source", "worker_fault");
    cJSON_AddNumberToObject(f, "node", w->node);
    cJSON_AddNumberToObject(f, "slot", w->slot);
    cJSON_AddNumberToObject(f, "rank", w->rank);
    int force = nan; /* the worker waits for STOP: it cannot go on */
    const char *act = s->watch.on_spike == SUP_SPIKE_WARN && force
                          ? "rollback"
                          : on_spike_name(s->watch.on_spike);
    cJSON_AddStringToObject(f, "action", act);
    sup_events_emit(s->ev, "loss_spike", f, "rank %d reports %s at step %" PRId64 ": %s -> %s",
                    w->rank, nan ? "a non-finite loss" : "a loss spike", k, detail, act);
    sup_recovery_loss_fault(s, k, nan ? SUP_FAULT_NAN : SUP_FAULT_LOSS_SPIKE, detail, force);
    return;
  }
  case FT_FAULT_XID:
    on_xid(s, w, detail);
    return;
  case FT_FAULT_SDC:
    if (current)
      on_sdc(s, w, m->fault.step, detail);
    return;
  case FT_FAULT_STORAGE:
    on_storage(s, w, m->fault.step, detail);
    return;
  case FT_FAULT_RESTORE_CORRUPT:
    if (m->gen == s->gen && w->gen == s->gen && sup_in_gang(s, w->node))
      on_restore_corrupt(s, w, m->fault.step, detail);
    return;
  case FT_FAULT_CONFIG:
  case FT_FAULT_DATA:
    /* the worker exits FT_EXIT_USAGE/FT_EXIT_DATA next; its message is the
     * run's verdict if every worker says the same (sup_recovery.c) */
    snprintf(w->fault_detail, sizeof w->fault_detail, "%s", detail);
    return;
  case FT_FAULT_COLLECTIVE_TIMEOUT:
  case FT_FAULT_OTHER: {
    if (!current)
      return;
    char why[160];
    snprintf(why, sizeof why, "node %d slot %d reported %s", w->node, w->slot,
             ft_fault_kind_name(m->fault.kind));
    if (sup_recovery_blame_silent(s, why))
      return;
    /* nobody silent: a rank that heartbeats but never started the collective
     * this worker waited in (stuck in compute, a read) is the cause */
    if (m->fault.kind == FT_FAULT_COLLECTIVE_TIMEOUT &&
        sup_watch_progress_behind(s, w, "collective_timeout"))
      return;
    sup_recovery_collective_failed(s, w, detail);
    return;
  }
  default:
    return;
  }
}

void sup_watch_committed(sup *s, int64_t step) {
  sup_rollback_good_add(&s->watch.good, step);
}

/* ---- progress: hangs with live processes (issue 36) ------------------------ */

/* A worker's rendezvous waits max(watchdog.collective_timeout_s, this) for
 * its peers (worker/comm.h, connect_timeout_ms 0) */
#define RDZV_MIN_TIMEOUT_S 60.0

static int gang_trains(const sup *s) {
  return s->ngang > 0 &&
         (s->state == SUP_RUNNING || (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED));
}

/* The gang's progress records as wd_progress's input (index = rank);
 * returns the world, 0 if none (or out of memory: nothing judged). A rank is
 * in the generation when its process said HELLO (and lives, with `alive`:
 * after a collective failure a peer that exited still tells where it was),
 * was assigned this generation and its last beat carries it. Its stuck
 * time, like the heartbeat detector's silence (sup_silence_s), never counts
 * the supervisor's own stall: it starts no earlier than the stall's end. */
static int prog_input(sup *s, double now, int alive) {
  int n = s->ngang * s->G;
  if (n < 1)
    return 0;
  if (n > s->watch.prog_cap) {
    wd_prog_rank *p = realloc(s->watch.prog_ranks, (size_t)n * sizeof *p);
    if (!p)
      return 0;
    s->watch.prog_ranks = p;
    s->watch.prog_cap = n;
  }
  for (int p = 0; p < s->ngang; p++)
    for (int j = 0; j < s->G; j++) {
      const sup_worker *w = &s->nodes[s->gang[p]].w[j];
      wd_prog_rank *r = &s->watch.prog_ranks[p * s->G + j];
      r->node = s->gang[p];
      r->in_gen = (w->alive || !alive) && w->hello && w->prog_have && w->rank == p * s->G + j &&
                  w->gen == s->gen && w->prog_gen == s->gen;
      r->phase = w->prog_phase;
      r->coll_seq = w->prog_coll;
      r->step = w->prog_step;
      r->stuck_s = r->in_gen ? sup_silence_s(now, w->prog_changed_s, s->stall_end_s) : 0;
    }
  return n;
}

static double round3(double x) {
  return isfinite(x) ? round(x * 1000) / 1000 : -1;
}

#define HANG_LOGS_MAX 64 /* log paths in one progress_hang event */

/* Evidence for the operator, before the recovery stops the hung workers:
 * adds to f the logs of the ranks[0..nr) ("logs", the first
 * HANG_LOGS_MAX, then "logs_omitted"), and asks each such worker for its
 * training thread's stack, which it writes to that log ("stacks_asked":
 * how many were asked; sup_ask_stack says how). The worker ends its dump
 * before it obeys the STOP and SIGTERM that follow. Returns the number of
 * logs, the first one's path in first, the number asked in *asked_out. */
static int hang_evidence(sup *s, const int *ranks, int nr, cJSON *f, char *first, size_t flen,
                         int *asked_out) {
  const wd_prog_rank *rk = s->watch.prog_ranks;
  cJSON *logs = cJSON_AddArrayToObject(f, "logs");
  int nlogs = 0, omitted = 0, asked = 0;
  char path[4200], last[4200] = "";
  first[0] = 0;
  for (int i = 0; i < nr; i++) {
    int r = ranks[i], node = rk[r].node, slot = r % s->G;
    sup_worker *w = &s->nodes[node].w[slot];
    sup_node_log_path(s, node, slot, path, sizeof path);
    if (strcmp(path, last)) { /* one process per node: its slots share a log */
      snprintf(last, sizeof last, "%s", path);
      if (nlogs < HANG_LOGS_MAX) {
        cJSON_AddItemToArray(logs, cJSON_CreateString(path));
        if (!nlogs++)
          snprintf(first, flen, "%s", path);
      } else {
        omitted++;
      }
    }
    asked += sup_ask_stack(s, w);
  }
  if (omitted)
    cJSON_AddNumberToObject(f, "logs_omitted", omitted);
  cJSON_AddNumberToObject(f, "stacks_asked", asked);
  *asked_out = asked;
  return nlogs + omitted;
}

/* Event progress_hang {class, phase, trigger, deadline_s, stuck_s, coll_seq,
 * culprits [{rank, node, slot}], nodes, action, why, gen, step, ranks
 * [{rank, node, slot, in_gen, phase, coll_seq, step, stuck_s}] (the first
 * 64), logs, stacks_asked (hang_evidence: the culprits', or with nobody
 * named every gang rank's)}, then the recovery the class calls for:
 * behind and rendezvous -> fault "hang" on each culprit node
 * (SUP_BLAME_NODE: quarantined, a spare takes its place); storage,
 * network, gang -> a restart in place with nobody blamed (fault
 * storage_hang / network_hang / gang_hang), as the
 * store's own errors are (store_error). */
static void progress_hang(sup *s, const wd_prog_verdict *v, int n, const char *trigger) {
  const wd_prog_rank *rk = s->watch.prog_ranks;
  uint64_t gen = s->gen; /* the first fault below starts the next one */
  int named = v->cls == WD_PROG_BEHIND || v->cls == WD_PROG_RENDEZVOUS;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "class", wd_prog_class_name(v->cls));
  cJSON_AddStringToObject(f, "phase", v->phase >= 0 ? ft_phase_name(v->phase) : "");
  cJSON_AddStringToObject(f, "trigger", trigger);
  cJSON_AddNumberToObject(f, "deadline_s", round3(v->deadline_s));
  cJSON_AddNumberToObject(f, "stuck_s", round3(v->stuck_s));
  cJSON_AddNumberToObject(f, "coll_seq", (double)v->coll_seq);
  cJSON *cu = cJSON_AddArrayToObject(f, "culprits");
  int shown = v->nculprits < WD_PROG_MAX_CULPRITS ? v->nculprits : WD_PROG_MAX_CULPRITS;
  for (int i = 0; i < shown; i++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "rank", v->culprits[i]);
    cJSON_AddNumberToObject(c, "node", rk[v->culprits[i]].node);
    cJSON_AddNumberToObject(c, "slot", v->culprits[i] % s->G);
    cJSON_AddItemToArray(cu, c);
  }
  cJSON *nodes = cJSON_AddArrayToObject(f, "nodes");
  for (int i = 0; i < v->nnodes; i++)
    cJSON_AddItemToArray(nodes, cJSON_CreateNumber(v->nodes[i]));
  cJSON_AddStringToObject(f, "action", named ? "quarantine" : "restart");
  cJSON_AddStringToObject(f, "why", v->why);
  cJSON_AddNumberToObject(f, "gen", (double)gen);
  cJSON_AddNumberToObject(f, "step", (double)s->run.last_step);
  cJSON *ra = cJSON_AddArrayToObject(f, "ranks");
  for (int r = 0; r < n && r < 64; r++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "rank", r);
    cJSON_AddNumberToObject(c, "node", rk[r].node);
    cJSON_AddNumberToObject(c, "slot", r % s->G);
    cJSON_AddBoolToObject(c, "in_gen", rk[r].in_gen);
    cJSON_AddStringToObject(c, "phase", ft_phase_name(rk[r].phase));
    cJSON_AddNumberToObject(c, "coll_seq", (double)rk[r].coll_seq);
    cJSON_AddNumberToObject(c, "step", (double)rk[r].step);
    cJSON_AddNumberToObject(c, "stuck_s", round3(rk[r].stuck_s));
    cJSON_AddItemToArray(ra, c);
  }
  if (n > 64)
    cJSON_AddNumberToObject(f, "ranks_omitted", n - 64);
  /* the stuck ranks: the culprits, or every rank when the class names none */
  int *stuck = malloc((size_t)(named ? shown : n) * sizeof *stuck + 1);
  int nstuck = 0;
  for (int i = 0; stuck && i < (named ? shown : n); i++)
    stuck[nstuck++] = named ? v->culprits[i] : i;
  char first[4200], logs[4300] = "";
  int asked;
  int nlogs = hang_evidence(s, stuck, nstuck, f, first, sizeof first, &asked);
  free(stuck);
  if (nlogs > 0)
    snprintf(logs, sizeof logs, "; %s %s%s",
             asked ? "the stuck training threads' stacks in" : "logs:", first,
             nlogs > 1 ? " and the others in \"logs\"" : "");
  sup_events_emit(s->ev, "progress_hang", f, "no progress (%s): %s -> %s%s",
                  wd_prog_class_name(v->cls), v->why,
                  named ? "quarantine the culprits' nodes" : "restart, nobody blamed", logs);
  if (!named) {
    sup_fault_kind kind = v->cls == WD_PROG_STORAGE   ? SUP_FAULT_STORAGE_HANG
                          : v->cls == WD_PROG_NETWORK ? SUP_FAULT_NETWORK_HANG
                                                      : SUP_FAULT_GANG_HANG;
    sup_recovery_fault(s, kind, -1, -1, 0, v->why, SUP_BLAME_NONE);
    return;
  }
  /* one fault per culprit node (its first culprit rank named); the first
   * starts the round, the others join it */
  for (int i = 0; i < v->nnodes; i++) {
    int r = -1;
    for (int k = 0; k < shown && r < 0; k++)
      if (rk[v->culprits[k]].node == v->nodes[i])
        r = v->culprits[k];
    if (r < 0)
      continue;
    const sup_worker *w = &s->nodes[v->nodes[i]].w[r % s->G];
    char detail[256];
    if (v->cls == WD_PROG_RENDEZVOUS)
      snprintf(detail, sizeof detail,
               "no progress: rank %d never joined generation %" PRIu64
               "'s rendezvous; the others stuck for %.0f s (deadline %.0f s)",
               r, gen, v->stuck_s, v->deadline_s);
    else
      snprintf(detail, sizeof detail,
               "no progress: rank %d in %s at step %" PRId64 " (collective %" PRIu64
               ") for %.0f s while others wait in collective %" PRIu64 " (%s %.0f s)",
               r, ft_phase_name(rk[r].phase), rk[r].step, rk[r].coll_seq, rk[r].stuck_s,
               v->coll_seq, strcmp(trigger, "deadline") ? "collective timeout" : "deadline",
               v->deadline_s);
    sup_recovery_fault(s, SUP_FAULT_HANG, v->nodes[i], r % s->G, w->pid, detail, SUP_BLAME_NODE);
  }
}

/* ---- storage waits --------------------------------------------------------- */

static double round1(double x) {
  return isfinite(x) && x > 0 ? round(x * 10) / 10 : 0;
}

static void dwait_fields(cJSON *f, const sup *s, const sup_worker *w, double secs) {
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  cJSON_AddNumberToObject(f, "rank", w->dwait.rank);
  cJSON_AddNumberToObject(f, "gen", (double)w->dwait.gen);
  cJSON_AddNumberToObject(f, "step", (double)s->run.last_step);
  cJSON_AddNumberToObject(f, "seconds", round1(secs));
  cJSON_AddStringToObject(f, "reason", ft_wait_reason_name(w->dwait.reason));
  cJSON_AddNumberToObject(f, "attempt", w->dwait.attempt);
}

/* " (HTTP 503 SlowDown, attempt 3)"-like, of the last retry reported */
static void dwait_why(const sup_worker *w, char *buf, size_t n) {
  if (w->dwait.reason == FT_WAIT_NONE)
    snprintf(buf, n, " (no retry yet: its first request is in flight)");
  else
    snprintf(buf, n, " (%s, attempt %u)", ft_wait_reason_name(w->dwait.reason),
             (unsigned)w->dwait.attempt);
}

static void dwait_end(sup *s, sup_worker *w, double end_s, const char *how) {
  if (w->dwait.said) {
    double secs = end_s - w->dwait.since_s;
    char why[96];
    dwait_why(w, why, sizeof why);
    cJSON *f = cJSON_CreateObject();
    dwait_fields(f, s, w, secs);
    cJSON_AddStringToObject(f, "how", how);
    sup_events_emit(s->ev, "data_wait_end", f,
                    "rank %d (node %d slot %d) %s after waiting %.1f s on data storage; last "
                    "retry%s",
                    w->dwait.rank, w->node, w->slot, strcmp(how, "resumed") ? "stopped" : "resumed",
                    secs, why);
  }
  memset(&w->dwait, 0, sizeof w->dwait);
}

void sup_watch_data_waits(sup *s, double now) {
  double limit = ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s);
  int trains = gang_trains(s), nwait = 0;
  const sup_worker *longest = NULL;
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[n].w[j];
      int cur = trains && w->alive && w->hello && w->prog_have && w->rank >= 0 &&
                w->gen == s->gen && w->prog_gen == s->gen;
      int in = cur && w->prog_phase == FT_PHASE_STORAGE_WAIT;
      if (!in && !w->dwait.on)
        continue;
      if (in) {
        if (w->dwait.on && w->dwait.gen != s->gen)
          dwait_end(s, w, w->dwait.last_s, "stopped");
        /* a new wait; or, not said yet, one after it left (each read
         * of a healthy bucket is a short wait of its own) */
        if (!w->dwait.on || (!w->dwait.said && w->dwait.out_s)) {
          memset(&w->dwait, 0, sizeof w->dwait);
          w->dwait.on = 1;
          w->dwait.rank = w->rank;
          w->dwait.gen = s->gen;
          w->dwait.since_s = w->prog_changed_s < now ? w->prog_changed_s : now;
        }
        w->dwait.last_s = w->prog_beat_s;
        w->dwait.out_s = 0;
        if (w->prog_wait != FT_WAIT_NONE) {
          w->dwait.reason = w->prog_wait;
          w->dwait.attempt = w->prog_wait_attempt;
        }
        /* said when a beat shows it still waiting a heartbeat interval
         * after it began (the beat's own evidence: between beats the last
         * one's phase stands, which says nothing of a short read) */
        double waited = w->dwait.last_s - w->dwait.since_s;
        if (!w->dwait.said && waited > limit) {
          char why[96];
          dwait_why(w, why, sizeof why);
          cJSON *f = cJSON_CreateObject();
          dwait_fields(f, s, w, waited);
          sup_events_emit(s->ev, "data_wait", f,
                          "rank %d (node %d slot %d) waits on data storage: %.1f s so far%s",
                          w->rank, w->node, w->slot, waited, why);
          w->dwait.said = 1;
        }
        if (w->dwait.said && (!longest || w->dwait.since_s < longest->dwait.since_s))
          longest = w;
        nwait += w->dwait.said;
        continue;
      }
      /* out of storage_wait: over when out for a heartbeat interval (a
       * wait per block, with compute between, is one episode), or at once
       * when its process or generation ended */
      if (!cur) {
        dwait_end(s, w, w->dwait.last_s, "stopped");
        continue;
      }
      if (!w->dwait.out_s)
        w->dwait.out_s = w->prog_changed_s > w->dwait.last_s ? w->prog_changed_s : w->dwait.last_s;
      if (!w->dwait.said || now - w->dwait.out_s >= limit)
        dwait_end(s, w, w->dwait.out_s, "resumed"); /* silent when not said */
    }
  char note[200] = "";
  if (longest) {
    char why[96];
    dwait_why(longest, why, sizeof why);
    /* whole seconds: the line is redrawn when the note changes */
    snprintf(note, sizeof note, "waiting on data storage: %d rank%s, %.0f s%s", nwait,
             nwait > 1 ? "s" : "", floor(now - longest->dwait.since_s), why);
  }
  sup_events_progress_note(s->ev, note);
}

/* The progress records and data waits are judged every SUP_PROGRESS_EVERY_S,
 * not on each 50 ms tick: their deadlines are seconds (the heartbeat
 * timeout at least), and each look reads every rank's record (at 131,072
 * ranks, 20 a second of them took a quarter of the supervisor's CPU). Past
 * SUP_PROGRESS_BIG ranks every twice that: 4 a second still took 8% there. */
#define SUP_PROGRESS_EVERY_S 0.25
#define SUP_PROGRESS_BIG 16384

int sup_watch_progress(sup *s, double now) {
  double every =
      (long)s->ngang * s->G > SUP_PROGRESS_BIG ? 2 * SUP_PROGRESS_EVERY_S : SUP_PROGRESS_EVERY_S;
  if (now >= s->watch.prog_judged_s && now - s->watch.prog_judged_s < every)
    return 0;
  s->watch.prog_judged_s = now;
  sup_watch_data_waits(s, now);
  if (!gang_trains(s))
    return 0;
  /* a tick that finds a new stall of our own loop does not judge: beats may
   * wait unread behind it; the stuck times then start at its end */
  if (s->stall_end_s != s->watch.prog_stall_seen) {
    s->watch.prog_stall_seen = s->stall_end_s;
    return 0;
  }
  int n = prog_input(s, now, 1);
  if (!n)
    return 0;
  wd_prog_verdict v;
  if (wd_progress_judge(&s->watch.prog_cfg, s->watch.prog_ranks, n, s->watch.prog_step_s,
                        s->watch.prog_nsteps, s->watch.trained_gen != s->gen, &v) ||
      v.cls == WD_PROG_NONE)
    return 0;
  progress_hang(s, &v, n, "deadline");
  return 1;
}

int sup_watch_progress_behind(sup *s, sup_worker *w, const char *trigger) {
  if (!gang_trains(s) || !w->prog_have || w->prog_gen != s->gen || w->gen != s->gen || w->rank < 0)
    return 0;
  int n = prog_input(s, ft_now_s(), 0);
  if (!n)
    return 0;
  /* the collective timeout is the deadline: a rank behind must not have
   * moved for half of it (one that moved since crashed or is slow). A
   * reporter with no collective yet timed out in its rendezvous, whose
   * timeout is the collective timeout but at least RDZV_MIN_TIMEOUT_S:
   * the ranks that never joined it are named (class rendezvous). */
  wd_prog_verdict v;
  if (wd_progress_behind(s->watch.prog_ranks, n, w->prog_coll,
                         s->rf.watchdog.collective_timeout_s / 2, &v) ||
      v.cls == WD_PROG_NONE)
    return 0;
  v.deadline_s = s->rf.watchdog.collective_timeout_s;
  if (v.cls == WD_PROG_RENDEZVOUS && v.deadline_s < RDZV_MIN_TIMEOUT_S)
    v.deadline_s = RDZV_MIN_TIMEOUT_S;
  progress_hang(s, &v, n, trigger);
  return 1;
}
