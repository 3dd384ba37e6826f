/*
 * sup_metrics: what /metrics exports (Prometheus text exposition format,
 * version 0.0.4; docs/operate.md lists the series, docs/alerts.yml alerts on
 * them).
 *
 * Folded from events (one pass, as sup_http's event hook hands them on):
 * faults by kind, by node and kind, and the node of each kind's last
 * fault; time to detect (rank 0's last step to the detection), recoveries
 * (detection to stopped gang, detection to the new gang's first step:
 * histograms), steps lost, checkpoints committed, failed and deleted with
 * commit latency (histogram) and sizes, events by name and the node of
 * each name's last event that named one, the pace of the last two step
 * events (the ETA). Read at scrape time: step, loss, validation loss, grad
 * norm, learning rate, tokens trained, tokens/s, step time, generation,
 * restarts, nodes by role, state, ETA (the sup struct); goodput so far (the
 * step history); S3 requests, bytes and upload queue (the store's counters,
 * kept in memory by the store).
 *
 * Counters an alert reads are exported from 0 from the first scrape for
 * every name they can take (fault kinds, event names, deletion reasons):
 * a series that first appears at 1 has no increase() in Prometheus, so the
 * run's first fault would raise nothing. Series per node appear on first
 * use (nodes x kinds up front would be too many for a large gang); they
 * carry the node's host beside its number when the run has hosts.
 *
 * Single-threaded (the loop).
 */
#include "sup_metrics.h"

#include "ft_clock.h"
#include "ft_version.h"
#include "sup_json.h"
#include "sup_view.h"

#include <event2/buffer.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A Prometheus histogram with fixed upper bounds (seconds). */
typedef struct hist {
  const double *le;
  int n;
  double count[16]; /* per bucket, not cumulative */
  double sum, total;
} hist;

static const double LE_RECOVERY[] = {0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};
static const double LE_COMMIT[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double LE_DETECT[] = {0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 600};

static void hist_observe(hist *h, double v) {
  int i = 0;
  while (i < h->n && v > h->le[i])
    i++;
  h->count[i]++; /* i == n: only +Inf */
  h->sum += v;
  h->total++;
}

typedef struct counted {
  char key[64];
  int node; /* -1: no node label */
  double n;
  int last_node; /* the node its last event named; -1: none */
} counted;

/* Every event the supervisor writes to events.jsonl (docs/operate.md), so
 * that ftsup_events_total has each from 0. An event not listed here is
 * still counted, from its first occurrence (at 1); tests/alerts/
 * alerts_rules.sh fails when one the supervisor writes is missing. */
static const char *const EVENTS[] = {"chaos_kill",
                                     "checkpoint_bad",
                                     "checkpoint_committed",
                                     "checkpoint_damaged",
                                     "checkpoint_deleted",
                                     "checkpoint_failed",
                                     "checkpoint_good",
                                     "checkpoint_lost",
                                     "checkpoint_mark_failed",
                                     "connection_closed",
                                     "agent_closed",
                                     "data_wait",
                                     "data_wait_end",
                                     "doctor_links",
                                     "doctor_recheck",
                                     "doctor_reference",
                                     "doctor_report",
                                     "doctor_slow_link",
                                     "doctor_storage",
                                     "doctor_verdict",
                                     "drain_failed",
                                     "fault_detected",
                                     "gang_shrunk",
                                     "gang_stopped",
                                     "gc_failed",
                                     "generation_started",
                                     "history_failed",
                                     "loss_spike",
                                     "node_drained",
                                     "node_quarantined",
                                     "node_rejoined",
                                     "node_restarted",
                                     "progress_hang",
                                     "recovered",
                                     "rejoin_fallback",
                                     "restore_hash_failure",
                                     "rollback",
                                     "run_done",
                                     "run_failed",
                                     "run_interrupted",
                                     "run_started",
                                     "runfile_change_accepted",
                                     "runfile_changed",
                                     "sdc",
                                     "spare_lost",
                                     "spare_lost_supervisor",
                                     "spare_promoted",
                                     "step",
                                     "steps_unanswered",
                                     "storage_fault",
                                     "storage_retry",
                                     "straggler",
                                     "straggler_cleared",
                                     "supervisor_stall",
                                     "unkillable_left",
                                     "unkillable_reaped",
                                     "waiting_for_spare",
                                     "waiting_on_storage",
                                     "worker_fault",
                                     "worker_launched",
                                     "worker_unkillable",
                                     "xid"};
#define NEVENTS_KNOWN (int)(sizeof EVENTS / sizeof *EVENTS)

/* checkpoint_deleted's reasons (sup_run.c: ckpt_reconcile): retention
 * (checkpoint.keep_last/keep_every), memory (a memory-level checkpoint a
 * newer one replaced), removed (gone otherwise: ckpt gc or rm by hand) */
static const char *const DELETE_REASONS[] = {"retention", "memory", "removed"};
#define NREASONS (int)(sizeof DELETE_REASONS / sizeof *DELETE_REASONS)

#define MAX_KINDS 48
#define MAX_NODE_FAULTS 256
#define MAX_EVENTS 128

struct sup_metrics {
  counted kinds[MAX_KINDS]; /* ftsup_faults_total{kind}: every sup_fault_kind from 0 */
  int nkinds;
  counted faults[MAX_NODE_FAULTS]; /* ftsup_node_faults_total{kind,node}: on first use */
  int nfaults;
  counted events[MAX_EVENTS]; /* ftsup_events_total{event}: EVENTS from 0 */
  int nevents;
  double deleted[NREASONS + 1]; /* ftsup_checkpoints_deleted_total; the last: another reason */
  hist stop, recover, commit, detect;
  double steps_lost, commits, commit_failed;
  double ckpt_logical, ckpt_stored, run_logical, run_stored; /* the last commit's */
  double eta_t0, eta_t1;
  int64_t eta_s0, eta_s1; /* two "step" events: the pace */
};

/* the entry of (key, node), made at 0 on first use; when a is full (a
 * flood of odd names), the last slot, "other", takes the rest */
static counted *entry(counted *a, int *na, int cap, const char *key, int node) {
  for (int i = 0; i < *na; i++)
    if (a[i].node == node && !strcmp(a[i].key, key))
      return &a[i];
  if (*na == cap) {
    snprintf(a[cap - 1].key, sizeof a[cap - 1].key, "other");
    a[cap - 1].node = -1;
    return &a[cap - 1];
  }
  counted *c = &a[(*na)++];
  snprintf(c->key, sizeof c->key, "%s", key);
  c->node = node;
  c->n = 0;
  c->last_node = -1;
  return c;
}

sup_metrics *sup_metrics_new(void) {
  sup_metrics *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->stop = (hist){.le = LE_RECOVERY, .n = sizeof LE_RECOVERY / sizeof *LE_RECOVERY};
  m->recover = m->stop;
  m->commit = (hist){.le = LE_COMMIT, .n = sizeof LE_COMMIT / sizeof *LE_COMMIT};
  m->detect = (hist){.le = LE_DETECT, .n = sizeof LE_DETECT / sizeof *LE_DETECT};
  for (int k = 0; k < SUP_FAULT_KINDS; k++)
    entry(m->kinds, &m->nkinds, MAX_KINDS, sup_fault_kind_name((sup_fault_kind)k), -1);
  for (int i = 0; i < NEVENTS_KNOWN; i++)
    entry(m->events, &m->nevents, MAX_EVENTS, EVENTS[i], -1);
  return m;
}

void sup_metrics_free(sup_metrics *m) {
  free(m);
}

static void fold_deleted(sup_metrics *m, const cJSON *e) {
  const char *why = sup_jstr(e, "reason");
  int r = 0;
  while (r < NREASONS && !(why && !strcmp(why, DELETE_REASONS[r])))
    r++;
  m->deleted[r]++; /* r == NREASONS: another reason */
}

void sup_metrics_fold(sup_metrics *m, double ts, const char *name, const cJSON *e) {
  int node = (int)sup_jnum(e, "node", -1);
  counted *ev = entry(m->events, &m->nevents, MAX_EVENTS, name, -1);
  ev->n++;
  ev->last_node = node;
  if (!strcmp(name, "fault_detected")) {
    const char *kind = sup_jstr(e, "kind");
    counted *k = entry(m->kinds, &m->nkinds, MAX_KINDS, kind ? kind : "unknown", -1);
    k->n++;
    k->last_node = node;
    if (node >= 0)
      entry(m->faults, &m->nfaults, MAX_NODE_FAULTS, k->key, node)->n++;
    if (sup_jnum(e, "stalled_s", -1) >= 0)
      hist_observe(&m->detect, sup_jnum(e, "stalled_s", 0));
  } else if (!strcmp(name, "recovered")) {
    hist_observe(&m->stop, sup_jnum(e, "detect_to_stopped_ms", 0) * 1e-3);
    hist_observe(&m->recover, sup_jnum(e, "detect_to_first_step_ms", 0) * 1e-3);
    m->steps_lost += sup_jnum(e, "steps_lost", 0);
  } else if (!strcmp(name, "checkpoint_committed")) {
    m->commits++;
    hist_observe(&m->commit, sup_jnum(e, "commit_ms", 0) * 1e-3);
    if (sup_jnum(e, "logical_bytes", -1) > 0) {
      m->ckpt_logical = sup_jnum(e, "logical_bytes", 0);
      m->ckpt_stored = sup_jnum(e, "stored_bytes", 0);
      m->run_logical = sup_jnum(e, "run_logical_bytes", 0);
      m->run_stored = sup_jnum(e, "run_stored_bytes", 0);
    }
  } else if (!strcmp(name, "checkpoint_failed")) {
    m->commit_failed++;
  } else if (!strcmp(name, "checkpoint_deleted")) {
    fold_deleted(m, e);
  } else if (!strcmp(name, "step")) {
    int64_t k = (int64_t)sup_jnum(e, "step", -1);
    if (k <= m->eta_s1) /* a rollback or a restore: the pace starts again */
      m->eta_t1 = 0;
    m->eta_t0 = m->eta_t1, m->eta_s0 = m->eta_s1;
    m->eta_t1 = ts, m->eta_s1 = k;
  }
}

const char *sup_state_name(sup_state st) {
  switch (st) {
  case SUP_STARTING:
    return "starting";
  case SUP_RUNNING:
    return "running";
  case SUP_RECOVERING:
    return "recovering";
  case SUP_FINISHING:
    return "finishing";
  default:
    return "done";
  }
}

double sup_metrics_eta_s(const sup_metrics *m, const sup *s) {
  if (!m->eta_t0 || m->eta_s1 <= m->eta_s0 || m->eta_t1 <= m->eta_t0)
    return NAN;
  double rate = (double)(m->eta_s1 - m->eta_s0) / (m->eta_t1 - m->eta_t0);
  int64_t left = s->final_step - (s->run.last_step > m->eta_s1 ? s->run.last_step : m->eta_s1);
  return left <= 0 ? 0 : (double)left / rate;
}

static void metric(struct evbuffer *b, const char *name, const char *type, const char *help) {
  evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* a value as Prometheus writes it (NaN, +Inf) */
static void value(struct evbuffer *b, double v) {
  if (isnan(v))
    evbuffer_add_printf(b, " NaN\n");
  else if (isinf(v))
    evbuffer_add_printf(b, v > 0 ? " +Inf\n" : " -Inf\n");
  else
    evbuffer_add_printf(b, " %.17g\n", v);
}

static void gauge(struct evbuffer *b, const char *name, const char *type, const char *help,
                  double v) {
  metric(b, name, type, help);
  evbuffer_add_printf(b, "%s", name);
  value(b, v);
}

static void histogram(struct evbuffer *b, const char *name, const char *help, const hist *h) {
  metric(b, name, "histogram", help);
  double cum = 0;
  for (int i = 0; i < h->n; i++) {
    cum += h->count[i];
    evbuffer_add_printf(b, "%s_bucket{le=\"%g\"} %.0f\n", name, h->le[i], cum);
  }
  evbuffer_add_printf(b, "%s_bucket{le=\"+Inf\"} %.0f\n", name, h->total);
  evbuffer_add_printf(b, "%s_sum", name);
  value(b, h->sum);
  evbuffer_add_printf(b, "%s_count %.0f\n", name, h->total);
}

/* a label value as the exposition format wants it (\\, \", \n escaped) */
static void label(struct evbuffer *b, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      evbuffer_add_printf(b, "\\%c", *v);
    else if (*v == '\n')
      evbuffer_add(b, "\\n", 2);
    else
      evbuffer_add(b, v, 1);
  }
}

/* ,node="N" and ,host="H" when the run has hosts */
static void node_labels(struct evbuffer *b, const sup *s, int node) {
  evbuffer_add_printf(b, ",node=\"%d\"", node);
  const char *host = sup_node_host(s, node);
  if (host) {
    evbuffer_add_printf(b, ",host=\"");
    label(b, host);
    evbuffer_add(b, "\"", 1);
  }
}

/* NAME{KEYLABEL="key"[,node,host]} n for each entry; every=0: only those
 * whose last event named a node, as 1 (an info series: alerts take the
 * node and host from it with group_left) */
static void counted_series(struct evbuffer *b, const sup *s, const char *name, const char *keylabel,
                           const counted *a, int n, int info) {
  for (int i = 0; i < n; i++) {
    int node = info ? a[i].last_node : a[i].node;
    if (info && node < 0)
      continue;
    evbuffer_add_printf(b, "%s{%s=\"", name, keylabel);
    label(b, a[i].key);
    evbuffer_add(b, "\"", 1);
    if (node >= 0)
      node_labels(b, s, node);
    evbuffer_add_printf(b, "} %.0f\n", info ? 1 : a[i].n);
  }
}

/* faults and events: the series docs/alerts.yml reads */
static void write_faults(const sup_metrics *m, const sup *s, struct evbuffer *b) {
  metric(b, "ftsup_faults_total", "counter",
         "Faults detected, by kind (every kind from 0, so the first one has an increase).");
  counted_series(b, s, "ftsup_faults_total", "kind", m->kinds, m->nkinds, 0);
  metric(b, "ftsup_node_faults_total", "counter",
         "Faults detected on a node, by kind and node (from a node's first fault).");
  counted_series(b, s, "ftsup_node_faults_total", "kind", m->faults, m->nfaults, 0);
  metric(b, "ftsup_fault_last_info", "gauge",
         "1, labelled with the node (and host) of the last fault of each kind that was a node's.");
  counted_series(b, s, "ftsup_fault_last_info", "kind", m->kinds, m->nkinds, 1);
}

static void write_events(const sup_metrics *m, const sup *s, struct evbuffer *b) {
  metric(b, "ftsup_events_total", "counter",
         "Events written to events.jsonl, by name (every event the supervisor writes from 0).");
  counted_series(b, s, "ftsup_events_total", "event", m->events, m->nevents, 0);
  metric(b, "ftsup_event_last_info", "gauge",
         "1, labelled with the node (and host) of the last event of each name that named one.");
  counted_series(b, s, "ftsup_event_last_info", "event", m->events, m->nevents, 1);
}

void sup_metrics_write(const sup_metrics *m, sup *s, struct evbuffer *b) {
  metric(b, "ftsup_info", "gauge", "The run, its launcher and the supervisor's version.");
  evbuffer_add_printf(b, "ftsup_info{run=\"");
  label(b, s->rf.run);
  evbuffer_add_printf(b, "\",launcher=\"");
  label(b, ft_rf_launcher_name(s->rf.nodes.launcher));
  evbuffer_add_printf(b, "\",version=\"");
  label(b, ft_version());
  evbuffer_add_printf(b, "\"} 1\n");
  metric(b, "ftsup_state", "gauge", "1 for the supervisor's current state.");
  for (int st = SUP_STARTING; st <= SUP_FINISHING; st++)
    evbuffer_add_printf(b, "ftsup_state{state=\"%s\"} %d\n", sup_state_name((sup_state)st),
                        s->state == (sup_state)st);
  gauge(b, "ftsup_uptime_seconds", "gauge", "Seconds since supervise started.",
        ft_now_s() - s->t_start_s);
  gauge(b, "ftsup_step", "gauge", "The last step rank 0 reported.", (double)s->run.last_step);
  gauge(b, "ftsup_final_step", "gauge", "train.steps: the run's last step.", (double)s->final_step);
  gauge(b, "ftsup_eta_seconds", "gauge",
        "Seconds to the last step at the pace of the last checkpoint interval.",
        sup_metrics_eta_s(m, s));
  int stepped = s->run.last_step_ms > 0; /* a STEP was heard in this process */
  gauge(b, "ftsup_loss", "gauge", "Rank 0's training loss at the last step.",
        stepped ? s->run.last_loss : NAN);
  gauge(b, "ftsup_val_loss", "gauge",
        "The last validation loss (train.val_every; NaN before the first).", s->run.last_val_loss);
  gauge(b, "ftsup_tokens_per_second", "gauge", "Training throughput at the last step.",
        stepped ? s->run.last_tps : NAN);
  gauge(b, "ftsup_tokens_total", "counter",
        "Tokens trained by this supervisor (global batch x sequence length per step; steps "
        "later rolled back included): rate() it for the throughput.",
        s->run.tokens_total);
  gauge(b, "ftsup_grad_norm", "gauge",
        "The global gradient norm (before clipping) at the last step (NaN before the first).",
        stepped ? s->run.last_grad_norm : NAN);
  gauge(b, "ftsup_learning_rate", "gauge",
        "The learning rate of the last step, by the run file's schedule (NaN before the first).",
        stepped ? s->run.last_lr : NAN);
  gauge(b, "ftsup_goodput_ratio", "gauge",
        "Share of the time since the first step spent on steps that survive (not rolled back, "
        "not lost to a fault), from the step history.",
        sup_view_goodput(s->hist));
  gauge(b, "ftsup_history_steps_total", "counter", "Step records in STATE/history.bin.",
        (double)sup_history_total(s->hist));
  gauge(b, "ftsup_step_seconds", "gauge", "Rank 0's time for the last step.",
        s->run.last_step_ms * 1e-3);
  gauge(b, "ftsup_generation", "gauge", "The current gang generation.", (double)s->gen);
  gauge(b, "ftsup_restarts_total", "counter", "Recoveries (gang restarts) so far.", s->restarts);
  gauge(b, "ftsup_waiting_on_storage", "gauge",
        "1 while a storage hang's restart waits (watchdog.storage_backoff_s), else 0.",
        s->recovery.storage_wait_until_s > 0);
  gauge(b, "ftsup_storage_hangs", "gauge",
        "Storage hangs in a row (a step past the last one's resets it).",
        s->recovery.storage_hangs);
  metric(b, "ftsup_nodes", "gauge", "Nodes of the pool by role.");
  int roles[5] = {0};
  for (int n = 0; n < s->nnodes; n++)
    if (s->nodes[n].role >= 0 && s->nodes[n].role < 5)
      roles[s->nodes[n].role]++;
  for (int r = 0; r < 5; r++)
    evbuffer_add_printf(b, "ftsup_nodes{role=\"%s\"} %d\n", sup_role_name(r), roles[r]);
  metric(b, "ftsup_doctor_nodes", "gauge",
         "Nodes by the node doctor's state (pending, comparing, cleared, refused; off).");
  static const char *const dstates[] = {"pending", "comparing", "checking",
                                        "cleared", "refused",   "off"};
  for (size_t k = 0; k < sizeof dstates / sizeof dstates[0]; k++) {
    int c = 0;
    for (int n = 0; n < s->nnodes; n++)
      c += !strcmp(sup_doctor_node_state(s, n), dstates[k]);
    evbuffer_add_printf(b, "ftsup_doctor_nodes{state=\"%s\"} %d\n", dstates[k], c);
  }
  write_faults(m, s, b);
  histogram(b, "ftsup_detect_seconds",
            "From rank 0's last step to a fault's detection: training time the fault cost "
            "before it was known.",
            &m->detect);
  histogram(b, "ftsup_recovery_stop_seconds",
            "From a fault's detection to the old gang stopped, per recovery.", &m->stop);
  histogram(b, "ftsup_recovery_seconds",
            "From a fault's detection to the new gang's first step, per recovery.", &m->recover);
  gauge(b, "ftsup_steps_lost_total", "counter", "Steps trained again after recoveries.",
        m->steps_lost);
  gauge(b, "ftsup_checkpoints_committed_total", "counter", "Checkpoints committed.", m->commits);
  gauge(b, "ftsup_checkpoints_failed_total", "counter", "Checkpoints that could not be committed.",
        m->commit_failed);
  metric(b, "ftsup_checkpoints_deleted_total", "counter",
         "Checkpoints the store deleted (checkpoint_deleted), by reason: retention, gc.");
  for (int r = 0; r <= NREASONS; r++)
    if (r < NREASONS || m->deleted[r] > 0)
      evbuffer_add_printf(b, "ftsup_checkpoints_deleted_total{reason=\"%s\"} %.0f\n",
                          r < NREASONS ? DELETE_REASONS[r] : "other", m->deleted[r]);
  histogram(b, "ftsup_checkpoint_commit_seconds",
            "From the last shard's report to the checkpoint's commit.", &m->commit);
  gauge(b, "ftsup_checkpoint_logical_bytes", "gauge",
        "The last committed checkpoint's tensors, uncompressed.", m->ckpt_logical);
  gauge(b, "ftsup_checkpoint_stored_bytes", "gauge",
        "The last committed checkpoint's chunks as stored (compressed; shared chunks counted).",
        m->ckpt_stored);
  gauge(b, "ftsup_store_logical_bytes", "gauge",
        "The run's checkpoints in the store, uncompressed (at the last commit).", m->run_logical);
  gauge(b, "ftsup_store_stored_bytes", "gauge",
        "Stored bytes of the chunks the run's checkpoints first referenced (at the last commit; "
        "what deduplication and compression leave).",
        m->run_stored);
  ckpt_tier_stats ts;
  if (s->store && ckpt_store_tier_stats(s->store, &ts) == 0 && ts.has_remote) {
    gauge(b, "ftsup_s3_requests_total", "counter", "S3 requests of the supervisor's store.",
          (double)ts.requests);
    gauge(b, "ftsup_s3_retries_total", "counter", "S3 attempts after a first one failed.",
          (double)ts.retries);
    gauge(b, "ftsup_s3_sent_bytes_total", "counter", "S3 request bodies sent.",
          (double)ts.bytes_up);
    gauge(b, "ftsup_s3_received_bytes_total", "counter", "S3 response bodies received.",
          (double)ts.bytes_down);
    gauge(b, "ftsup_s3_uploads_pending", "gauge", "Uploads to the bucket queued or in flight.",
          (double)ts.uploads_pending);
    gauge(b, "ftsup_s3_uploads_failed_total", "counter",
          "Background uploads that failed (and were retried).", (double)ts.uploads_failed);
  }
  write_events(m, s, b);
}
