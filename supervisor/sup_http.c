/*
 * sup_http: the operator's HTTP port (docs/operate.md): read-only but one request.
 *
 *   GET /           the dashboard (sup_view.h: one page, dygraphs inlined)
 *   GET /view.json  what it draws ([?points=N]: the loss curve thinned to
 *                   about 2N rows, 100-20000, default 1500)
 *   GET /metrics    Prometheus text exposition format (version 0.0.4)
 *   GET /status     the run as JSON (what `supervise status` prints)
 *   POST /doctor    the nodes check themselves again (`supervise doctor`;
 *                   the key in STATE/http.token, mode 0600)
 *
 * Served by libevent's evhttp on the supervisor's own loop. Every answer is
 * built from memory (the sup struct and what this module folded from the
 * event stream through sup_events' hook), so a request never waits on the
 * store, a worker or the disk, and a slow client only holds its own
 * connection (evhttp writes from a buffer).
 * Memory per client is bounded: evhttp answers one request of a connection
 * at a time and stops reading it until the answer is written (pipelined
 * requests wait in the kernel), so a connection holds at most one answer
 * (the largest, /view.json?points=20000, is a few MB); a client that stops
 * reading is closed after HTTP_IDLE_S without progress. And at most
 * HTTP_MAX_CLIENTS connections that asked something are open at once: a
 * request on another one gets 503 "too many HTTP clients" and its
 * connection is closed (counted in ftsup_http_refused_total), so clients
 * that ask and never read hold at most HTTP_MAX_CLIENTS answers. Hostile clients: headers over
 * 8 KiB and bodies over 1 KiB are refused by evhttp, a connection idle for
 * 10 s is closed, anything but GET and HEAD gets 405 (but POST /doctor, which
 * needs the key in STATE/http.token: 403 without), and accept errors (EMFILE
 * under a connection flood) pause the listener for 100 ms instead of
 * spinning, as on the control port.
 *
 * Where: --http HOST:PORT > supervisor.http > loopback, any free port;
 * "off" turns it off. The bound address goes to STATE/http.addr (written
 * whole, renamed in; removed when supervise ends), which `supervise status`
 * reads.
 *
 * Metrics folded from events (one pass, as they are emitted): faults by
 * kind and node, time to detect (rank 0's last step to the detection),
 * recoveries (detection to stopped gang, detection to the new gang's first
 * step: histograms), steps lost, checkpoints committed and failed with
 * commit latency (histogram) and sizes, events by name. Read at scrape
 * time: step, loss, validation loss, tokens/s, step time, generation,
 * restarts, nodes by role, state, ETA (the sup struct); goodput so far
 * (the step history); S3 requests, bytes and upload queue (the store's
 * counters, kept in memory by the store).
 *
 * Single-threaded (the loop).
 */
#include "sup_int.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_version.h"
#include "sup_view.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HTTP_MAX_HEADERS 8192
#define HTTP_MAX_BODY 1024
#define HTTP_IDLE_S 10
#define HTTP_PAUSE_S 0.1
#define HTTP_MAX_CLIENTS 64 /* a few dashboards and scrapers need a handful */
#define KEEP_FAULTS 10      /* the last faults /status lists */
#define KEEP_CKPTS 12       /* the last checkpoints /status lists */

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
} counted;

struct sup_http {
  sup *s;
  struct evhttp *http;
  struct evconnlistener *lis;
  struct event *resume;
  char addr[300];
  char addr_file[4200];
  char token_file[4200]; /* STATE/http.token (0600): POST needs it */
  char token[FT_WIRE_TOKEN_HEX + 1];

  counted faults[128];
  int nfaults;
  counted events[96];
  int nevents;
  hist stop, recover, commit, detect;
  double steps_lost, commits, commit_failed;
  double ckpt_logical, ckpt_stored, run_logical, run_stored; /* the last commit's */
  sup_view *view;                                            /* the dashboard's data */
  cJSON *last_faults; /* array of fault_detected events, newest last */
  cJSON *ckpts;       /* array of {step, state, ts}, newest last */
  double eta_t0, eta_t1;
  int64_t eta_s0, eta_s1;                              /* two "step" events: the pace */
  struct evhttp_connection *clients[HTTP_MAX_CLIENTS]; /* open, have asked */
  int nclients;
  double refused; /* requests refused: too many clients */
};

static void count(counted *a, int *na, int cap, const char *key, int node, double by) {
  for (int i = 0; i < *na; i++)
    if (a[i].node == node && !strcmp(a[i].key, key)) {
      a[i].n += by;
      return;
    }
  if (*na == cap) { /* full (a flood of odd names): the last slot takes the rest */
    snprintf(a[cap - 1].key, sizeof a[cap - 1].key, "other");
    a[cap - 1].node = -1;
    a[cap - 1].n += by;
    return;
  }
  snprintf(a[*na].key, sizeof a[*na].key, "%s", key);
  a[*na].node = node;
  a[(*na)++].n = by;
}

static double num(const cJSON *o, const char *k, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void keep_last(cJSON *arr, cJSON *item, int max) {
  cJSON_AddItemToArray(arr, item);
  while (cJSON_GetArraySize(arr) > max)
    cJSON_DeleteItemFromArray(arr, 0);
}

/* a checkpoint's state changes: the newest entry of that step, else a new one */
static void ckpt_state(struct sup_http *h, double ts, int64_t step, const char *state) {
  cJSON *it;
  cJSON_ArrayForEach(it, h->ckpts) {
    if ((int64_t)num(it, "step", -1) == step) {
      cJSON_ReplaceItemInObject(it, "state", cJSON_CreateString(state));
      return;
    }
  }
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "step", (double)step);
  cJSON_AddStringToObject(c, "state", state);
  cJSON_AddNumberToObject(c, "ts", ts);
  keep_last(h->ckpts, c, KEEP_CKPTS);
}

static void on_event(void *arg, double ts, const char *name, const cJSON *e) {
  struct sup_http *h = arg;
  count(h->events, &h->nevents, 96, name, -1, 1);
  sup_view_fold(h->view, ts, name, e);
  if (!strcmp(name, "fault_detected")) {
    const char *kind = str(e, "kind");
    count(h->faults, &h->nfaults, 128, kind ? kind : "unknown", (int)num(e, "node", -1), 1);
    keep_last(h->last_faults, cJSON_Duplicate(e, 1), KEEP_FAULTS);
    if (num(e, "stalled_s", -1) >= 0)
      hist_observe(&h->detect, num(e, "stalled_s", 0));
  } else if (!strcmp(name, "recovered")) {
    hist_observe(&h->stop, num(e, "detect_to_stopped_ms", 0) * 1e-3);
    hist_observe(&h->recover, num(e, "detect_to_first_step_ms", 0) * 1e-3);
    h->steps_lost += num(e, "steps_lost", 0);
  } else if (!strcmp(name, "checkpoint_committed")) {
    h->commits++;
    hist_observe(&h->commit, num(e, "commit_ms", 0) * 1e-3);
    if (num(e, "logical_bytes", -1) > 0) {
      h->ckpt_logical = num(e, "logical_bytes", 0);
      h->ckpt_stored = num(e, "stored_bytes", 0);
      h->run_logical = num(e, "run_logical_bytes", 0);
      h->run_stored = num(e, "run_stored_bytes", 0);
    }
    ckpt_state(h, ts, (int64_t)num(e, "step", -1), "committed");
  } else if (!strcmp(name, "checkpoint_failed")) {
    h->commit_failed++;
  } else if (!strcmp(name, "checkpoint_good")) {
    ckpt_state(h, ts, (int64_t)num(e, "step", -1), "good");
  } else if (!strcmp(name, "checkpoint_bad")) {
    ckpt_state(h, ts, (int64_t)num(e, "step", -1), "bad");
  } else if (!strcmp(name, "step")) {
    int64_t k = (int64_t)num(e, "step", -1);
    if (k <= h->eta_s1) /* a rollback or a restore: the pace starts again */
      h->eta_t1 = 0;
    h->eta_t0 = h->eta_t1, h->eta_s0 = h->eta_s1;
    h->eta_t1 = ts, h->eta_s1 = k;
  }
}

/* ---- answers -------------------------------------------------------------- */

static const char *state_name(sup_state st) {
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

static const char *role_name(int role) {
  static const char *const names[] = {"active", "spare", "quarantined", "lost", "idle"};
  return role >= 0 && role < 5 ? names[role] : "unknown";
}

static double eta_s(const struct sup_http *h) {
  const sup *s = h->s;
  if (!h->eta_t0 || h->eta_s1 <= h->eta_s0 || h->eta_t1 <= h->eta_t0)
    return NAN;
  double rate = (double)(h->eta_s1 - h->eta_s0) / (h->eta_t1 - h->eta_t0);
  int64_t left = s->final_step - (s->run.last_step > h->eta_s1 ? s->run.last_step : h->eta_s1);
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

static void metrics_body(struct sup_http *h, struct evbuffer *b) {
  sup *s = h->s;
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
    evbuffer_add_printf(b, "ftsup_state{state=\"%s\"} %d\n", state_name((sup_state)st),
                        s->state == (sup_state)st);
  gauge(b, "ftsup_uptime_seconds", "gauge", "Seconds since supervise started.",
        ft_now_s() - s->t_start_s);
  gauge(b, "ftsup_step", "gauge", "The last step rank 0 reported.", (double)s->run.last_step);
  gauge(b, "ftsup_final_step", "gauge", "train.steps: the run's last step.", (double)s->final_step);
  gauge(b, "ftsup_eta_seconds", "gauge",
        "Seconds to the last step at the pace of the last checkpoint interval.", eta_s(h));
  int stepped = s->run.last_step_ms > 0; /* a STEP was heard in this process */
  gauge(b, "ftsup_loss", "gauge", "Rank 0's training loss at the last step.",
        stepped ? s->run.last_loss : NAN);
  gauge(b, "ftsup_val_loss", "gauge",
        "The last validation loss (train.val_every; NaN before the first).", s->run.last_val_loss);
  gauge(b, "ftsup_tokens_per_second", "gauge", "Training throughput at the last step.",
        stepped ? s->run.last_tps : NAN);
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
    evbuffer_add_printf(b, "ftsup_nodes{role=\"%s\"} %d\n", role_name(r), roles[r]);
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
  metric(b, "ftsup_faults_total", "counter", "Faults detected, by kind and node.");
  for (int i = 0; i < h->nfaults; i++) {
    evbuffer_add_printf(b, "ftsup_faults_total{kind=\"");
    label(b, h->faults[i].key);
    if (h->faults[i].node >= 0)
      evbuffer_add_printf(b, "\",node=\"%d", h->faults[i].node);
    evbuffer_add_printf(b, "\"} %.0f\n", h->faults[i].n);
  }
  histogram(b, "ftsup_detect_seconds",
            "From rank 0's last step to a fault's detection: training time the fault cost "
            "before it was known.",
            &h->detect);
  histogram(b, "ftsup_recovery_stop_seconds",
            "From a fault's detection to the old gang stopped, per recovery.", &h->stop);
  histogram(b, "ftsup_recovery_seconds",
            "From a fault's detection to the new gang's first step, per recovery.", &h->recover);
  gauge(b, "ftsup_steps_lost_total", "counter", "Steps trained again after recoveries.",
        h->steps_lost);
  gauge(b, "ftsup_checkpoints_committed_total", "counter", "Checkpoints committed.", h->commits);
  gauge(b, "ftsup_checkpoints_failed_total", "counter", "Checkpoints that could not be committed.",
        h->commit_failed);
  histogram(b, "ftsup_checkpoint_commit_seconds",
            "From the last shard's report to the checkpoint's commit.", &h->commit);
  gauge(b, "ftsup_checkpoint_logical_bytes", "gauge",
        "The last committed checkpoint's tensors, uncompressed.", h->ckpt_logical);
  gauge(b, "ftsup_checkpoint_stored_bytes", "gauge",
        "The last committed checkpoint's chunks as stored (compressed; shared chunks counted).",
        h->ckpt_stored);
  gauge(b, "ftsup_store_logical_bytes", "gauge",
        "The run's checkpoints in the store, uncompressed (at the last commit).", h->run_logical);
  gauge(b, "ftsup_store_stored_bytes", "gauge",
        "Stored bytes of the chunks the run's checkpoints first referenced (at the last commit; "
        "what deduplication and compression leave).",
        h->run_stored);
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
  gauge(b, "ftsup_http_refused_total", "counter",
        "HTTP requests refused with 503: too many clients (HTTP_MAX_CLIENTS) had asked already.",
        h->refused);
  metric(b, "ftsup_events_total", "counter", "Events written to events.jsonl, by name.");
  for (int i = 0; i < h->nevents; i++)
    evbuffer_add_printf(b, "ftsup_events_total{event=\"%s\"} %.0f\n", h->events[i].key,
                        h->events[i].n);
}

/* A node's workers' progress (their last HEARTBEAT's, worker/progress.h)
 * into its /status entry as "workers": [{slot, rank, gen, step, phase,
 * coll_seq, progress_age_s, heartbeat_age_s}]: what each training thread is
 * doing and how long since it last moved, which heartbeats alone cannot
 * tell. Only connected workers that have sent one. */
static void add_progress(const sup *s, int n, cJSON *x) {
  cJSON *ws = NULL;
  double now = ft_now_s();
  for (int j = 0; j < s->G; j++) {
    const sup_worker *w = &s->nodes[n].w[j];
    if (!w->conn || !w->prog_have)
      continue;
    if (!ws)
      ws = cJSON_AddArrayToObject(x, "workers");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "slot", j);
    cJSON_AddNumberToObject(o, "rank", w->rank);
    cJSON_AddNumberToObject(o, "gen", (double)w->prog_gen);
    cJSON_AddNumberToObject(o, "step", (double)w->prog_step);
    cJSON_AddStringToObject(o, "phase", ft_phase_name(w->prog_phase));
    cJSON_AddNumberToObject(o, "coll_seq", (double)w->prog_coll);
    double age = now - w->prog_changed_s, hb = now - w->prog_beat_s;
    cJSON_AddNumberToObject(o, "progress_age_s", round((age > 0 ? age : 0) * 10) / 10);
    cJSON_AddNumberToObject(o, "heartbeat_age_s", round((hb > 0 ? hb : 0) * 10) / 10);
    cJSON_AddItemToArray(ws, o);
  }
}

static cJSON *status_json(struct sup_http *h) {
  sup *s = h->s;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "run", s->rf.run);
  cJSON_AddBoolToObject(o, "running", 1);
  cJSON_AddStringToObject(o, "state", state_name(s->state));
  cJSON_AddNumberToObject(o, "pid", (double)getpid());
  cJSON_AddStringToObject(o, "launcher", ft_rf_launcher_name(s->rf.nodes.launcher));
  cJSON_AddNumberToObject(o, "uptime_s", round((ft_now_s() - s->t_start_s) * 10) / 10);
  cJSON_AddNumberToObject(o, "gen", (double)s->gen);
  cJSON_AddNumberToObject(o, "step", (double)s->run.last_step);
  cJSON_AddNumberToObject(o, "final_step", (double)s->final_step);
  double eta = eta_s(h);
  if (isfinite(eta))
    cJSON_AddNumberToObject(o, "eta_s", round(eta));
  else
    cJSON_AddNullToObject(o, "eta_s");
  if (s->run.last_step_ms > 0 && isfinite(s->run.last_loss))
    cJSON_AddNumberToObject(o, "loss", s->run.last_loss);
  else
    cJSON_AddNullToObject(o, "loss");
  if (isfinite(s->run.last_val_loss))
    cJSON_AddNumberToObject(o, "val_loss", s->run.last_val_loss);
  else
    cJSON_AddNullToObject(o, "val_loss");
  cJSON_AddNumberToObject(o, "tokens_per_s",
                          isfinite(s->run.last_tps) ? round(s->run.last_tps) : 0);
  cJSON_AddNumberToObject(o, "restarts", s->restarts);
  if (s->recovery.storage_wait_until_s > 0) { /* a storage hang's wait before the restart */
    cJSON *w = cJSON_AddObjectToObject(o, "waiting_on_storage");
    cJSON_AddNumberToObject(w, "attempt", s->recovery.storage_hangs);
    cJSON_AddNumberToObject(w, "wait_s", s->recovery.storage_wait_s);
    double left = s->recovery.storage_wait_until_s - ft_now_s();
    cJSON_AddNumberToObject(w, "retry_in_s", left > 0 ? round(left * 10) / 10 : 0);
    cJSON_AddNumberToObject(w, "step", (double)s->recovery.storage_hang_step);
  }
  cJSON *nodes = cJSON_AddArrayToObject(o, "nodes");
  for (int n = 0; n < s->nnodes; n++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "node", n);
    cJSON_AddStringToObject(x, "role", role_name(s->nodes[n].role));
    const char *host = sup_node_host(s, n);
    if (host)
      cJSON_AddStringToObject(x, "host", host);
    if (s->nodes[n].role == SUP_ROLE_QUARANTINED && s->nodes[n].why[0])
      cJSON_AddStringToObject(x, "why", s->nodes[n].why);
    cJSON_AddStringToObject(x, "doctor", sup_doctor_node_state(s, n));
    if (s->nodes[n].dverdict[0])
      cJSON_AddStringToObject(x, "doctor_verdict", s->nodes[n].dverdict);
    add_progress(s, n, x);
    cJSON_AddItemToArray(nodes, x);
  }
  cJSON_AddItemToObject(o, "checkpoints", cJSON_Duplicate(h->ckpts, 1));
  cJSON_AddItemToObject(o, "faults", cJSON_Duplicate(h->last_faults, 1));
  return o;
}

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type,
                  struct evbuffer *b) {
  struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
  evhttp_add_header(hd, "Content-Type", type);
  evhttp_add_header(hd, "Cache-Control", "no-store");
  evhttp_send_reply(req, code, reason, b);
}

static void to_evbuffer(void *ud, const void *p, size_t n) {
  evbuffer_add(ud, p, n);
}

/* ?points=N of /view.json (100-20000; default 1500) */
static int points_of(struct evhttp_request *req) {
  const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
  struct evkeyvalq kv;
  int pts = 1500;
  if (q && evhttp_parse_query_str(q, &kv) == 0) {
    const char *v = evhttp_find_header(&kv, "points");
    if (v) {
      pts = atoi(v);
      pts = pts < 100 ? 100 : pts > 20000 ? 20000 : pts;
    }
    evhttp_clear_headers(&kv);
  }
  return pts;
}

static void reply_json(struct evhttp_request *req, struct evbuffer *b, cJSON *o) {
  char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (txt) {
    evbuffer_add_printf(b, "%s\n", txt);
    reply(req, 200, "OK", "application/json", b);
  } else
    evhttp_send_error(req, 503, "out of memory");
  free(txt);
}

/* POST /doctor[?spares=1] with "Authorization: Bearer KEY" (STATE/http.token):
 * the cleared nodes, the gang's too unless spares=1, check again; the
 * answer lists them ({"asked": [node...]}); `supervise doctor` then follows
 * /status until their verdicts are in. 403 without the key. */
static void post_doctor(struct sup_http *h, struct evhttp_request *req, struct evbuffer *b) {
  const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
  size_t tl = strlen(h->token);
  if (!tl || !auth || strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != tl ||
      CRYPTO_memcmp(auth + 7, h->token, tl) != 0) {
    evbuffer_add_printf(b, "forbidden: POST /doctor needs \"Authorization: Bearer\" with the key "
                           "in the state directory's http.token (supervise doctor STATE sends "
                           "it)\n");
    reply(req, 403, "Forbidden", "text/plain; charset=utf-8", b);
    return;
  }
  const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
  int spares_only = q && strstr(q, "spares=1") != NULL;
  sup *s = h->s;
  cJSON *o = cJSON_CreateObject(), *asked = cJSON_AddArrayToObject(o, "asked");
  if (!s->rf.doctor.on_join)
    cJSON_AddStringToObject(o, "error", "the node doctor is off (doctor.on_join: false)");
  else if (s->state >= SUP_FINISHING)
    cJSON_AddStringToObject(o, "error", "the run is ending");
  else if (sup_doctor_ask(s, !spares_only, "asked by an operator"))
    for (int n = 0; n < s->nnodes; n++)
      if (!strcmp(sup_doctor_node_state(s, n), "checking"))
        cJSON_AddItemToArray(asked, cJSON_CreateNumber(n));
  reply_json(req, b, o);
}

static void client_closed(struct evhttp_connection *evcon, void *arg) {
  struct sup_http *h = arg;
  for (int i = 0; i < h->nclients; i++)
    if (h->clients[i] == evcon) {
      h->clients[i] = h->clients[--h->nclients];
      return;
    }
}

/* 1 when evcon may be answered: already a client, or one more fits. */
static int client_admit(struct sup_http *h, struct evhttp_connection *evcon) {
  if (!evcon)
    return 1;
  for (int i = 0; i < h->nclients; i++)
    if (h->clients[i] == evcon)
      return 1;
  if (h->nclients == HTTP_MAX_CLIENTS)
    return 0;
  h->clients[h->nclients++] = evcon;
  evhttp_connection_set_closecb(evcon, client_closed, h);
  return 1;
}

static void on_request(struct evhttp_request *req, void *arg) {
  struct sup_http *h = arg;
  if (!client_admit(h, evhttp_request_get_connection(req))) {
    h->refused++;
    evhttp_send_error(req, 503, "too many HTTP clients"); /* and closes it */
    return;
  }
  const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, 503, "out of memory");
    return;
  }
  enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
  if (cmd == EVHTTP_REQ_POST && path && !strcmp(path, "/doctor")) {
    post_doctor(h, req, b);
  } else if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) { /* read-only */
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    evbuffer_add_printf(b, "read-only: GET or HEAD (POST /doctor with the run's key)\n");
    reply(req, 405, "Method Not Allowed", "text/plain; charset=utf-8", b);
  } else if (path && !strcmp(path, "/metrics")) {
    metrics_body(h, b);
    reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", b);
  } else if (path && !strcmp(path, "/status")) {
    reply_json(req, b, status_json(h));
  } else if (path && !strcmp(path, "/view.json")) {
    reply_json(req, b, sup_view_json(h->view, h->s->hist, status_json(h), 1, points_of(req)));
  } else if (path && (!strcmp(path, "/") || !strcmp(path, "/index.html"))) {
    sup_view_page(to_evbuffer, b, NULL);
    reply(req, 200, "OK", "text/html; charset=utf-8", b);
  } else {
    evbuffer_add_printf(b, "not found: this supervisor serves /, /view.json, /metrics and "
                           "/status\n");
    reply(req, 404, "Not Found", "text/plain; charset=utf-8", b);
  }
  evbuffer_free(b);
}

/* ---- the port ------------------------------------------------------------- */

static void resume_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  evconnlistener_enable(((struct sup_http *)arg)->lis);
}

static void accept_error(struct evconnlistener *l, void *arg) {
  struct sup_http *h = arg;
  evconnlistener_disable(l);
  struct timeval tv = {0, (long)(HTTP_PAUSE_S * 1e6)};
  evtimer_add(h->resume, &tv);
}

int sup_http_open(sup *s, const char *spec, const char *from) {
  if (!strcmp(spec, "off"))
    return 0;
  ft_hostport hp = {.port = 0};
  ft_sockaddr sa, bound;
  if (spec[0] && ft_net_parse(spec, &hp))
    return ft_err_set(FT_EINVAL, "%s: %s", from, ft_err_detail());
  int port = hp.port < 0 ? 0 : hp.port;
  if (hp.host[0]) {
    if (ft_net_resolve(hp.host, port, 1, &sa))
      return ft_err_set(FT_EINVAL, "%s: %s", from, ft_err_detail());
  } else
    ft_net_loopback(port, &sa);
  char a[320];
  ft_net_format(&sa, 1, a, sizeof a);
  int one = 1, fd = socket(sa.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)&sa.ss, sa.len) || listen(fd, 64)) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return ft_err_set(FT_EINVAL, "cannot serve HTTP on %s (from %s): %s", a, from, strerror(e));
  }
  struct sup_http *h = calloc(1, sizeof *h);
  if (!h) {
    close(fd);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  h->s = s;
  h->stop = (hist){.le = LE_RECOVERY, .n = sizeof LE_RECOVERY / sizeof *LE_RECOVERY};
  h->recover = h->stop;
  h->commit = (hist){.le = LE_COMMIT, .n = sizeof LE_COMMIT / sizeof *LE_COMMIT};
  h->detect = (hist){.le = LE_DETECT, .n = sizeof LE_DETECT / sizeof *LE_DETECT};
  h->view = sup_view_new();
  h->last_faults = cJSON_CreateArray();
  h->ckpts = cJSON_CreateArray();
  h->http = evhttp_new(s->base);
  h->lis = evconnlistener_new(s->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
                              fd); /* listening already (0: libevent leaves it so) */
  h->resume = evtimer_new(s->base, resume_cb, h);
  s->http = h;
  if (!h->lis)
    close(fd);
  if (!h->http || !h->lis || !h->resume || !h->last_faults || !h->ckpts || !h->view ||
      !evhttp_bind_listener(h->http, h->lis)) {
    if (h->lis)
      evconnlistener_free(h->lis); /* not bound: still ours */
    h->lis = NULL;
    sup_http_free(s);
    return ft_err_set(FT_ENOMEM, "cannot set up the HTTP port");
  }
  evconnlistener_set_error_cb(h->lis, accept_error);
  evhttp_set_max_headers_size(h->http, HTTP_MAX_HEADERS);
  evhttp_set_max_body_size(h->http, HTTP_MAX_BODY);
  evhttp_set_timeout(h->http, HTTP_IDLE_S);
  /* others get 405 from on_request (libevent's own refusal says 501) */
  evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                          EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                          EVHTTP_REQ_PATCH);
  evhttp_set_gencb(h->http, on_request, h);
  bound.len = sizeof bound.ss;
  getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len);
  ft_net_format(&bound, 1, h->addr, sizeof h->addr);
  sup_events_set_hook(s->ev, on_event, h);

  char line[340];
  ft_afile af;
  int n = snprintf(line, sizeof line, "%s\n", h->addr);
  snprintf(h->addr_file, sizeof h->addr_file, "%s/http.addr", s->state_dir);
  if (ft_afile_open(&af, h->addr_file) || ft_afile_write(&af, line, (size_t)n) ||
      ft_afile_commit(&af)) {
    h->addr_file[0] = 0;
    return -1;
  }
  /* the operator's key for the few requests that act (POST /doctor): a
   * file only its owner reads, so reaching the port is not enough */
  snprintf(h->token_file, sizeof h->token_file, "%s/http.token", s->state_dir);
  if (ft_wire_token_new(h->token) ||
      (n = snprintf(line, sizeof line, "%s\n", h->token), ft_afile_open(&af, h->token_file)) ||
      fchmod(af.fd, 0600) || ft_afile_write(&af, line, (size_t)n) || ft_afile_commit(&af)) {
    h->token_file[0] = h->token[0] = 0; /* no key: every POST is refused */
    return -1;
  }
  return 0;
}

const char *sup_http_addr(const sup *s) {
  return s->http ? s->http->addr : NULL;
}

void sup_http_free(sup *s) {
  struct sup_http *h = s->http;
  if (!h)
    return;
  if (s->ev)
    sup_events_set_hook(s->ev, NULL, NULL);
  if (h->addr_file[0])
    unlink(h->addr_file);
  if (h->token_file[0])
    unlink(h->token_file);
  if (h->http)
    evhttp_free(h->http); /* frees the bound listener too */
  if (h->resume)
    event_free(h->resume);
  cJSON_Delete(h->last_faults);
  cJSON_Delete(h->ckpts);
  sup_view_free(h->view);
  free(h);
  s->http = NULL;
}

/* ---- supervise status ------------------------------------------------------ */

/*
 * `supervise status STATE [--json]`: asks the supervisor running on STATE
 * (its HTTP address in STATE/http.addr) for /status; when none answers, it
 * reads STATE/events.jsonl (read only, no lock: the catalog stays free) and
 * says how the run last ended. Exit 0: running; 3: not running (as
 * `systemctl status`); 2: usage, or no such state directory.
 */

typedef struct fetch {
  struct event_base *base;
  int code;
  char *body;
} fetch;

static void fetch_done(struct evhttp_request *req, void *arg) {
  fetch *f = arg;
  if (req) {
    f->code = evhttp_request_get_response_code(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    f->body = malloc(n + 1);
    if (f->body) {
      evbuffer_remove(in, f->body, n);
      f->body[n] = 0;
    }
  }
  event_base_loopexit(f->base, NULL);
}

char *sup_http_call(const char *addr, int post, const char *path, const char *bearer, int *code) {
  ft_hostport hp;
  *code = 0;
  if (ft_net_parse(addr, &hp) || !hp.host[0] || hp.port <= 0)
    return NULL;
  fetch f = {.base = event_base_new()};
  struct evhttp_connection *c =
      f.base ? evhttp_connection_base_new(f.base, NULL, hp.host, (unsigned short)hp.port) : NULL;
  struct evhttp_request *req = c ? evhttp_request_new(fetch_done, &f) : NULL;
  if (req) {
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    evhttp_connection_set_timeout(c, 5);
    evhttp_add_header(hd, "Host", hp.host);
    char auth[FT_WIRE_TOKEN_HEX + 16];
    if (bearer) {
      snprintf(auth, sizeof auth, "Bearer %s", bearer);
      evhttp_add_header(hd, "Authorization", auth);
    }
    if (evhttp_make_request(c, req, post ? EVHTTP_REQ_POST : EVHTTP_REQ_GET, path) == 0)
      event_base_dispatch(f.base);
  }
  if (c)
    evhttp_connection_free(c);
  if (f.base)
    event_base_free(f.base);
  *code = f.code;
  return f.body;
}

/* GET http://ADDR/status; the body (malloc'd) or NULL when nobody answers. */
static char *get_status(const char *addr) {
  int code;
  char *body = sup_http_call(addr, 0, "/status", NULL, &code);
  if (code != 200) {
    free(body);
    return NULL;
  }
  return body;
}

int sup_http_state_file(const char *dir, const char *name, char *out, size_t len) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *fp = fopen(path, "r");
  out[0] = 0;
  if (!fp)
    return -1;
  if (!fgets(out, (int)len, fp))
    out[0] = 0;
  out[strcspn(out, "\r\n")] = 0;
  fclose(fp);
  return out[0] ? 0 : -1;
}

/* The state directory's event log, read: how its last supervise ended. */
static cJSON *offline_status(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/events.jsonl", dir);
  FILE *fp = fopen(path, "r");
  if (!fp)
    return NULL;
  cJSON *o = cJSON_CreateObject(), *start = NULL, *end = NULL, *step = NULL, *gen = NULL;
  cJSON *faults = cJSON_CreateArray();
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, fp) > 0) {
    cJSON *e = cJSON_Parse(line);
    const char *name = e ? str(e, "event") : NULL;
    cJSON **slot = NULL;
    if (!name)
      ;
    else if (!strcmp(name, "run_started")) {
      slot = &start;
      cJSON_Delete(end), end = NULL;
    } else if (!strcmp(name, "run_done") || !strcmp(name, "run_failed") ||
               !strcmp(name, "run_interrupted"))
      slot = &end;
    else if (!strcmp(name, "step"))
      slot = &step;
    else if (!strcmp(name, "generation_started"))
      slot = &gen;
    else if (!strcmp(name, "fault_detected")) {
      keep_last(faults, e, KEEP_FAULTS);
      e = NULL;
    }
    if (slot) {
      cJSON_Delete(*slot);
      *slot = e;
      e = NULL;
    }
    cJSON_Delete(e);
  }
  free(line);
  fclose(fp);
  const char *ev = end ? str(end, "event") : NULL;
  const char *state = !start                      ? "never started"
                      : !ev                       ? "stopped without a last word"
                      : !strcmp(ev, "run_done")   ? "done"
                      : !strcmp(ev, "run_failed") ? "failed"
                                                  : "interrupted";
  cJSON_AddStringToObject(o, "run", start && str(start, "run") ? str(start, "run") : "");
  cJSON_AddBoolToObject(o, "running", 0);
  cJSON_AddStringToObject(o, "state", state);
  if (end && str(end, "reason"))
    cJSON_AddStringToObject(o, "reason", str(end, "reason"));
  cJSON_AddNumberToObject(o, "gen", gen ? num(gen, "gen", 0) : 0);
  double last = end && num(end, "steps", -1) >= 0       ? num(end, "steps", -1)
                : end && num(end, "last_step", -1) >= 0 ? num(end, "last_step", -1)
                : step                                  ? num(step, "step", 0)
                                                        : 0;
  cJSON_AddNumberToObject(o, "step", last);
  cJSON_AddNumberToObject(o, "final_step", start ? num(start, "steps", 0) : 0);
  if (step && isfinite(num(step, "loss", NAN)))
    cJSON_AddNumberToObject(o, "loss", num(step, "loss", NAN));
  if (end)
    cJSON_AddNumberToObject(o, "ended_ts", num(end, "ts", 0));
  cJSON_AddItemToObject(o, "faults", faults);
  cJSON_Delete(start);
  cJSON_Delete(end);
  cJSON_Delete(step);
  cJSON_Delete(gen);
  return o;
}

/* The status of the run on dir: the running supervisor's /status (its
 * address in dir/http.addr), else what the event log says; NULL when
 * neither. A stale http.addr (supervise was killed) may name a port someone
 * else has now: only a JSON object that says "running" counts. */
static cJSON *status_of(const char *dir) {
  char addr[340];
  sup_http_state_file(dir, "http.addr", addr, sizeof addr);
  char *body = addr[0] ? get_status(addr) : NULL;
  cJSON *o = body ? cJSON_Parse(body) : NULL;
  free(body);
  if (o && !cJSON_IsTrue(cJSON_GetObjectItem(o, "running"))) {
    cJSON_Delete(o);
    o = NULL;
  }
  return o ? o : offline_status(dir);
}

/* The gang's ranks, the longest without progress first (at most 8 lines):
 * "rank R (node N slot J): PHASE, collective C, step S, no progress for X s". */
#define PRINT_PROGRESS_MAX 8
typedef struct prog_line {
  const cJSON *w;
  double node, age;
} prog_line;

static int by_age_desc(const void *a, const void *b) {
  double x = ((const prog_line *)a)->age, y = ((const prog_line *)b)->age;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void print_progress(const cJSON *o) {
  const cJSON *nd, *w;
  int total = 0;
  cJSON_ArrayForEach(nd, cJSON_GetObjectItem(o, "nodes")) {
    total += cJSON_GetArraySize(cJSON_GetObjectItem(nd, "workers"));
  }
  prog_line *l = total ? calloc((size_t)total, sizeof *l) : NULL;
  if (!l)
    return;
  int n = 0;
  cJSON_ArrayForEach(nd, cJSON_GetObjectItem(o, "nodes")) {
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(nd, "workers")) {
      if (num(w, "rank", -1) >= 0 && n < total)
        l[n++] = (prog_line){w, num(nd, "node", -1), num(w, "progress_age_s", 0)};
    }
  }
  qsort(l, (size_t)n, sizeof *l, by_age_desc);
  if (n)
    printf("  progress (oldest first):\n");
  for (int i = 0; i < n && i < PRINT_PROGRESS_MAX; i++)
    printf("    rank %.0f (node %.0f slot %.0f): %s, collective %.0f, step %.0f, no progress for "
           "%.1f s\n",
           num(l[i].w, "rank", -1), l[i].node, num(l[i].w, "slot", -1),
           str(l[i].w, "phase") ? str(l[i].w, "phase") : "?", num(l[i].w, "coll_seq", 0),
           num(l[i].w, "step", -1), l[i].age);
  if (n > PRINT_PROGRESS_MAX)
    printf("    (%d more)\n", n - PRINT_PROGRESS_MAX);
  free(l);
}

static void print_human(const cJSON *o) {
  int running = cJSON_IsTrue(cJSON_GetObjectItem(o, "running"));
  double step = num(o, "step", 0), fin = num(o, "final_step", 0);
  printf("run %s: %s%s, generation %.0f, step %.0f/%.0f", str(o, "run") ? str(o, "run") : "?",
         running ? "" : "not running: ", str(o, "state") ? str(o, "state") : "?", num(o, "gen", 0),
         step, fin);
  if (fin > 0)
    printf(" (%.0f%%)", 100 * step / fin);
  if (running && num(o, "eta_s", -1) >= 0)
    printf(", ETA %.0f s", num(o, "eta_s", 0));
  printf("\n");
  if (str(o, "reason"))
    printf("  reason: %s\n", str(o, "reason"));
  if (isfinite(num(o, "loss", NAN)))
    printf("  loss %.4f", num(o, "loss", 0));
  if (running)
    printf("%s%.0f tok/s, %.0f restart(s)", isfinite(num(o, "loss", NAN)) ? ", " : "  ",
           num(o, "tokens_per_s", 0), num(o, "restarts", 0));
  if (running || isfinite(num(o, "loss", NAN)))
    printf("\n");
  const cJSON *ws = cJSON_GetObjectItem(o, "waiting_on_storage");
  if (cJSON_IsObject(ws))
    printf("  waiting on storage: hang %.0f in a row at step %.0f; restarting in %.0f s (waits "
           "%.0f s)\n",
           num(ws, "attempt", 0), num(ws, "step", 0), num(ws, "retry_in_s", 0),
           num(ws, "wait_s", 0));
  const cJSON *it;
  if (cJSON_GetArraySize(cJSON_GetObjectItem(o, "nodes")) > 0) {
    printf("  nodes:");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "nodes")) {
      const char *doc = str(it, "doctor");
      int say = doc && strcmp(doc, "cleared") != 0 && strcmp(doc, "off") != 0;
      printf(" %.0f %s%s%s%s%s", num(it, "node", 0), str(it, "role") ? str(it, "role") : "?",
             str(it, "host") ? "@" : "", str(it, "host") ? str(it, "host") : "",
             say ? " (doctor: " : "", say ? doc : "");
      if (say)
        printf(")");
    }
    printf("\n");
  }
  print_progress(o);
  if (cJSON_GetArraySize(cJSON_GetObjectItem(o, "checkpoints")) > 0) {
    printf("  checkpoints:");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "checkpoints")) {
      printf(" %.0f %s", num(it, "step", 0), str(it, "state") ? str(it, "state") : "?");
    }
    printf("\n");
  }
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "faults")) {
    printf("  fault at step %.0f: %s, node %.0f%s%s\n", num(it, "step", -1),
           str(it, "kind") ? str(it, "kind") : "?", num(it, "node", -1), str(it, "host") ? " " : "",
           str(it, "host") ? str(it, "host") : "");
  }
}

int sup_status_main(int argc, char **argv) {
  const char *dir = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: supervise status STATE_DIR [--json]\n"
             "  Asks the supervisor running on STATE_DIR (its HTTP port, recorded in\n"
             "  STATE_DIR/http.addr) what it is doing: state, generation, step and ETA,\n"
             "  loss, throughput, nodes and their roles, the last checkpoints and faults.\n"
             "  When none is running, reads STATE_DIR/events.jsonl and says how the run\n"
             "  last ended (done, failed and why, interrupted).\n"
             "  --json  one JSON object (the supervisor's /status, or the same keys\n"
             "          with \"running\": false)\n"
             "Exit: 0 running, 3 not running, 2 usage or no such state directory.\n");
      return 0;
    } else if (argv[i][0] == '-' || dir) {
      fprintf(stderr, "supervise status: unexpected '%s' (supervise status --help)\n", argv[i]);
      return 2;
    } else
      dir = argv[i];
  }
  if (!dir) {
    fprintf(stderr, "supervise status: which state directory? (supervise status --help)\n");
    return 2;
  }
  cJSON *o = status_of(dir);
  if (!o) {
    fprintf(stderr, "supervise status: %s: no supervisor answers and no events.jsonl: %s\n", dir,
            strerror(errno));
    return 2;
  }
  int running = cJSON_IsTrue(cJSON_GetObjectItem(o, "running"));
  if (json) {
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t ? t : "{}");
    free(t);
  } else
    print_human(o);
  cJSON_Delete(o);
  return running ? 0 : 3;
}

/* ---- supervise report ------------------------------------------------------ */

/*
 * `supervise report STATE --out FILE`: the dashboard as one self-contained
 * HTML file (sup_view.h), from STATE's events.jsonl and history.bin (read
 * only), with the running supervisor's /status when one answers, else the
 * status the event log gives. Written whole (temporary file, renamed in).
 */
typedef struct report_out {
  ft_afile af;
  FILE *fp; /* --out -: stdout */
  int rc;
} report_out;

static void report_write(void *ud, const void *p, size_t n) {
  report_out *o = ud;
  if (o->rc)
    return;
  if (o->fp)
    o->rc = fwrite(p, 1, n, o->fp) == n ? 0 : ft_err_set(FT_EIO, "stdout: %s", strerror(errno));
  else
    o->rc = ft_afile_write(&o->af, p, n);
}

static int report_usage(FILE *f) {
  fprintf(f, "usage: supervise report STATE_DIR --out FILE [--points N]\n"
             "  Writes the run's dashboard as one HTML file that needs nothing else (no\n"
             "  network, no other file): the loss and validation loss with faults,\n"
             "  recoveries, rollbacks and checkpoints marked; step time and throughput;\n"
             "  goodput; the node map; the checkpoints; the event timeline. From\n"
             "  STATE_DIR/events.jsonl and STATE_DIR/history.bin, read only: it works\n"
             "  while the run goes on, and after it.\n"
             "  --out FILE   where (- for standard output)\n"
             "  --points N   the loss curve thinned to about 2N rows (default 4000;\n"
             "               every step's spike is kept)\n"
             "Exit: 0 written, 1 cannot write FILE, 2 usage or no such state directory.\n");
  return f == stdout ? 0 : 2;
}

int sup_report_main(int argc, char **argv) {
  const char *dir = NULL, *out = NULL;
  int points = 4000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
      return report_usage(stdout);
    if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--points") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 100 || v > 1000000) {
        fprintf(stderr, "supervise report: --points %s: a number from 100 to 1000000\n", argv[i]);
        return 2;
      }
      points = (int)v;
    } else if ((argv[i][0] == '-' && argv[i][1]) || dir) {
      fprintf(stderr, "supervise report: unexpected '%s' (supervise report --help)\n", argv[i]);
      return 2;
    } else
      dir = argv[i];
  }
  if (!dir || !out) {
    fprintf(stderr, "supervise report: %s (supervise report --help)\n",
            !dir ? "which state directory?" : "where to? --out FILE is needed");
    return 2;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/events.jsonl", dir);
  FILE *ev = fopen(path, "r");
  if (!ev) {
    fprintf(stderr, "supervise report: %s: %s\n", path, strerror(errno));
    return 2;
  }
  sup_view *v = sup_view_new();
  char *line = NULL;
  size_t cap = 0, nev = 0;
  while (v && getline(&line, &cap, ev) > 0) {
    cJSON *e = cJSON_Parse(line);
    if (e && str(e, "event")) {
      sup_view_fold(v, num(e, "ts", 0), str(e, "event"), e);
      nev++;
    }
    cJSON_Delete(e);
  }
  free(line);
  fclose(ev);
  snprintf(path, sizeof path, "%s/history.bin", dir);
  sup_history *h = NULL;
  int rc = sup_history_open(path, 0, 0, &h);
  if (rc && rc != FT_ENOENT) {
    fprintf(stderr, "supervise report: %s\n", ft_err_detail());
    sup_view_free(v);
    return 1;
  }
  if (rc)
    fprintf(stderr,
            "supervise report: no %s (a run from before the step history): the report "
            "has the events only\n",
            path);
  cJSON *st = status_of(dir);
  cJSON *view = v ? sup_view_json(v, h, st, 0, points) : NULL;
  if (!view) {
    fprintf(stderr, "supervise report: out of memory\n");
    sup_view_free(v);
    sup_history_free(h);
    return 1;
  }
  report_out o = {.fp = strcmp(out, "-") ? NULL : stdout};
  int opened = 0;
  if (!o.fp)
    opened = !(o.rc = ft_afile_open(&o.af, out));
  sup_view_page(report_write, &o, view);
  if (opened && !o.rc)
    o.rc = ft_afile_commit(&o.af);
  else if (opened)
    ft_afile_abort(&o.af);
  if (o.fp && !o.rc && fflush(o.fp))
    o.rc = ft_err_set(FT_EIO, "stdout: %s", strerror(errno));
  if (o.rc)
    fprintf(stderr, "supervise report: %s\n", ft_err_detail());
  else if (!o.fp)
    fprintf(stderr, "supervise report: wrote %s (%llu steps recorded, %zu events)\n", out,
            (unsigned long long)sup_history_total(h), nev);
  cJSON_Delete(view);
  sup_view_free(v);
  sup_history_free(h);
  return o.rc ? 1 : 0;
}
