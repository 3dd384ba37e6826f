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
 * (the largest, /view.json?points=20000, is a few MB), and at most
 * HTTP_MAX_ANSWERING answers are being written at once (503 "too many HTTP
 * clients" beyond, counted in ftsup_http_refused_total); a client that
 * stops reading is closed after HTTP_IDLE_S without progress.
 *
 * The port cannot starve the run (issue 39): it may never take the
 * descriptors a checkpoint or the gang needs, nor the loop's time.
 *  - Every connection is counted from its accept (evhttp_set_bevcb hands
 *    us each new one; libevent 2.1 has no connection limit of its own):
 *    at most HTTP_MAX_CONNS are open, idle ones included; at the cap a new
 *    one evicts the connection idle the longest (ftsup_http_evicted_total),
 *    or is closed when every one is being answered.
 *  - A whole request (headers and body) must arrive within HTTP_REQUEST_S
 *    of the accept or of the previous answer, however slowly it dribbles
 *    in (slowloris; ftsup_http_expired_total); evhttp's own timeout only
 *    counts silence.
 *  - A connection whose descriptor falls within the reserve of
 *    RLIMIT_NOFILE (HTTP_FD_RESERVE, and room for the control connections
 *    not open yet: fds_low) is closed at once and the listener pauses
 *    (ftsup_http_shed_total): the accepted descriptor is the lowest free
 *    one, so the ones left above it are all the process has.
 *  - Accept errors (EMFILE when the process ran out anyway) pause the
 *    listener for HTTP_PAUSE_S instead of spinning; it is enabled again
 *    after (the error callback gets evhttp's argument, not ours: the port
 *    is found by its evhttp, see accept_error).
 *  - /view.json is built once per (history records, events folded,
 *    points) and at most every HTTP_VIEW_MAX_AGE_S, then served from a copy
 *    of its text; /status is small.
 * Hostile clients: headers over 8 KiB and bodies over 1 KiB are refused by
 * evhttp, anything but GET and HEAD gets 405 (but POST /doctor, which
 * needs the key in STATE/http.token: 403 without), and a Host header that
 * is not one of this port's names gets 421 (a web page whose name was
 * rebound to this address must not read the run: DNS rebinding). The
 * names: the bound address, localhost, 127.0.0.1 and [::1]; bound to a
 * wildcard or a non-loopback address, any IP literal and this machine's
 * hostname too; each with this port or none.
 *
 * Where: --http HOST:PORT > supervisor.http > loopback, any free port;
 * "off" turns it off. The bound address goes to STATE/http.addr (written
 * whole, renamed in; removed when supervise ends), which `supervise status`
 * reads.
 *
 * What it folds from events itself: the last faults and the checkpoints'
 * states (/status); the metrics are sup_metrics.c's, the dashboard's data
 * sup_view.c's. The commands that read the port from outside (supervise
 * status, report, doctor) are in sup_status.c.
 *
 * Single-threaded (the loop).
 */
#include "sup_int.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_version.h"
#include "sup_json.h"
#include "sup_metrics.h"
#include "sup_view.h"

#include <errno.h>
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HTTP_MAX_HEADERS 8192
#define HTTP_MAX_BODY 1024
#define HTTP_IDLE_S 10    /* no progress at all: evhttp closes */
#define HTTP_REQUEST_S 10 /* a whole request, from the accept or the answer before */
#define HTTP_PAUSE_S 0.1
#define HTTP_MAX_CONNS 256    /* open at once, idle ones included */
#define HTTP_MAX_ANSWERING 64 /* answers being written at once */
#define HTTP_NEW_MAX 16       /* accepted, not yet adopted (see on_new_bev) */
#define HTTP_BACKLOG                                                                               \
  4096 /* a flood of connects waits in the kernel (somaxconn caps it), not in 1 s SYN retries */
/* Descriptors HTTP leaves free: RocksDB's catalog keeps up to 64 files open
 * (ckpt_catalog.c) plus its log and manifest, a commit opens a few more
 * (the manifest, its directory, the lock), and every worker of the gang and
 * every spare holds a control connection and may open a KV or replica one:
 * 256, plus 4 per control connection not open yet (fds_low). */
#define HTTP_FD_RESERVE 256
#define HTTP_FD_PER_WORKER 4
#define HTTP_VIEW_SLOTS 4       /* cached /view.json texts, one per points */
#define HTTP_VIEW_MAX_AGE_S 1.0 /* the status inside (heartbeat ages) stays fresh */
#define KEEP_FAULTS 10          /* the last faults /status lists */
#define KEEP_CKPTS 12           /* the last checkpoints /status lists */

/* An open connection, from its accept on. */
typedef struct {
  struct evhttp_connection *evcon;
  double
      since; /* accept, or the last answer written: its next request's deadline counts from here */
  int answering; /* a whole request came; its answer is not written yet */
} http_conn;

/* A cached /view.json text. */
typedef struct {
  char *txt;
  size_t len;
  uint64_t records, events;
  int points;
  double built_s;
} http_view;

struct sup_http {
  sup *s;
  struct evhttp *http;
  struct evconnlistener *lis;
  struct event *resume;
  struct event *adopt;        /* made active by on_new_bev */
  struct event *sweep;        /* every second: request deadlines */
  struct sup_http *next_port; /* ports, to find one by its evhttp */
  char addr[300];
  char addr_file[4200];
  char token_file[4200]; /* STATE/http.token (0600): POST needs it */
  char token[FT_WIRE_TOKEN_HEX + 1];
  char host[256]; /* the bound address without its port, no brackets */
  int port;
  int any_host; /* bound to a wildcard or non-loopback address */

  sup_metrics *metrics; /* /metrics */
  sup_view *view;       /* the dashboard's data */
  cJSON *last_faults;   /* array of fault_detected events, newest last */
  cJSON *ckpts;         /* array of {step, state, ts}, newest last */
  http_conn conns[HTTP_MAX_CONNS];
  int nconns, nanswering;
  struct bufferevent *fresh[HTTP_NEW_MAX]; /* accepted, not adopted yet */
  int nfresh;
  uint64_t events; /* folded (the /view.json cache's key) */
  http_view views[HTTP_VIEW_SLOTS];
  double refused;     /* requests refused: too many answers at once */
  double evicted;     /* idle connections closed for a new one at the cap */
  double expired;     /* requests not whole by their deadline */
  double shed;        /* connections closed at once: descriptors low, or the cap full of answers */
  double misdirected; /* requests whose Host is not this port's */
};

static struct sup_http *ports; /* open ports (one per supervisor), for accept_error */

static void on_event(void *arg, double ts, const char *name, const cJSON *e) {
  struct sup_http *h = arg;
  sup_metrics_fold(h->metrics, ts, name, e);
  sup_view_fold(h->view, ts, name, e);
  if (!strcmp(name, "fault_detected"))
    sup_jkeep_last(h->last_faults, cJSON_Duplicate(e, 1), KEEP_FAULTS);
  sup_jckpt_fold(h->ckpts, ts, name, e, KEEP_CKPTS);
}

/* ---- answers -------------------------------------------------------------- */

/* w's own last step time (its STEP: compute, without the wait for the
 * others), for the node map; NAN before its first step in this
 * generation. */
static double step_ms_of(const sup *s, const sup_worker *w) {
  return w->step_ms_gen == s->gen && s->gen > 0 && isfinite(w->step_ms) ? w->step_ms : NAN;
}

/* A worker's progress entry (add_progress says what it holds). */
static cJSON *worker_json(const sup *s, const sup_worker *w, double now) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "slot", w->slot);
  cJSON_AddNumberToObject(o, "rank", w->rank);
  cJSON_AddNumberToObject(o, "gen", (double)w->prog_gen);
  cJSON_AddNumberToObject(o, "step", (double)w->prog_step);
  cJSON_AddStringToObject(o, "phase", ft_phase_name(w->prog_phase));
  cJSON_AddNumberToObject(o, "coll_seq", (double)w->prog_coll);
  double age = now - w->prog_changed_s, hb = now - w->prog_beat_s;
  cJSON_AddNumberToObject(o, "progress_age_s", round((age > 0 ? age : 0) * 10) / 10);
  cJSON_AddNumberToObject(o, "heartbeat_age_s", round((hb > 0 ? hb : 0) * 10) / 10);
  if (w->prog_phase == FT_PHASE_STORAGE_WAIT) { /* why: its read's last retry */
    cJSON_AddStringToObject(o, "wait", ft_wait_reason_name(w->prog_wait));
    cJSON_AddNumberToObject(o, "wait_attempt", w->prog_wait_attempt);
  }
  double ms = step_ms_of(s, w);
  if (isfinite(ms))
    cJSON_AddNumberToObject(o, "step_ms", round(ms * 10) / 10);
  else
    cJSON_AddNullToObject(o, "step_ms");
  return o;
}

/* A node's workers' progress (their last HEARTBEAT's, worker/progress.h)
 * into its /status entry as "workers": [{slot, rank, gen, step, phase,
 * coll_seq, progress_age_s, heartbeat_age_s; in storage_wait also wait
 * (ft_wait_reason's name) and wait_attempt}]: what each training thread is
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
    cJSON_AddItemToArray(ws, worker_json(s, w, now));
  }
}

/* Past SUP_STATUS_WORKERS_MAX ranks /status leaves out each node's
 * "workers" (at 131,072 ranks they were ~20 MB of JSON and 0.7 s of the
 * loop per request) unless asked (?workers=1): each node has "step_ms"
 * and "progress_age_s", its slowest worker's, and the top level
 * "stalest", the STATUS_STALEST workers longest without progress (each as
 * in "workers", with its "node"), which is what `supervise status` prints. */
#define SUP_STATUS_WORKERS_MAX 4096
#define STATUS_STALEST 8

static void add_summary(const sup *s, int n, cJSON *x, const sup_worker **stale, int *nstale) {
  double now = ft_now_s(), ms = NAN, age = -1;
  for (int j = 0; j < s->G; j++) {
    const sup_worker *w = &s->nodes[n].w[j];
    if (!w->conn || !w->prog_have)
      continue;
    double m = step_ms_of(s, w);
    if (isfinite(m) && (!isfinite(ms) || m > ms))
      ms = m;
    double a = now - w->prog_changed_s;
    if (a > age)
      age = a;
    if (w->rank < 0)
      continue;
    /* into the stalest, kept sorted by progress age (oldest first) */
    int k = *nstale < STATUS_STALEST ? (*nstale)++ : STATUS_STALEST;
    while (k > 0 && stale[k - 1]->prog_changed_s > w->prog_changed_s) {
      if (k < STATUS_STALEST)
        stale[k] = stale[k - 1];
      k--;
    }
    if (k < STATUS_STALEST)
      stale[k] = w;
  }
  if (isfinite(ms))
    cJSON_AddNumberToObject(x, "step_ms", round(ms * 10) / 10);
  if (age >= 0)
    cJSON_AddNumberToObject(x, "progress_age_s", round(age * 10) / 10);
}

/* "waiting_on_data_storage" {ranks, longest_s, rank, node, slot, reason,
 * attempt}: the workers whose storage wait has been said (sup_watch.c,
 * event data_wait) and goes on; the longest one named. Absent when none. */
static void data_waits_json(const sup *s, cJSON *o) {
  const sup_worker *l = NULL;
  int nw = 0;
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++) {
      const sup_worker *w = &s->nodes[n].w[j];
      if (!w->dwait.on || !w->dwait.said || w->dwait.out_s)
        continue;
      nw++;
      if (!l || w->dwait.since_s < l->dwait.since_s)
        l = w;
    }
  if (!l)
    return;
  cJSON *x = cJSON_AddObjectToObject(o, "waiting_on_data_storage");
  double secs = ft_now_s() - l->dwait.since_s;
  cJSON_AddNumberToObject(x, "ranks", nw);
  cJSON_AddNumberToObject(x, "longest_s", round((secs > 0 ? secs : 0) * 10) / 10);
  cJSON_AddNumberToObject(x, "rank", l->dwait.rank);
  cJSON_AddNumberToObject(x, "node", l->node);
  cJSON_AddNumberToObject(x, "slot", l->slot);
  cJSON_AddStringToObject(x, "reason", ft_wait_reason_name(l->dwait.reason));
  cJSON_AddNumberToObject(x, "attempt", l->dwait.attempt);
}

/* detail: each node's "workers" (else past SUP_STATUS_WORKERS_MAX ranks
 * the summary; add_summary) */
static cJSON *status_json(struct sup_http *h, int detail) {
  sup *s = h->s;
  int64_t max = SUP_STATUS_WORKERS_MAX;
  (void)ft_failpoint("status_workers_max", &max);
  int all = detail || (int64_t)s->nnodes * s->G <= max;
  const sup_worker *stale[STATUS_STALEST];
  int nstale = 0;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "run", s->rf.run);
  cJSON_AddBoolToObject(o, "running", 1);
  cJSON_AddStringToObject(o, "state", sup_state_name(s->state));
  cJSON_AddNumberToObject(o, "pid", (double)getpid());
  cJSON_AddStringToObject(o, "launcher", ft_rf_launcher_name(s->rf.nodes.launcher));
  cJSON_AddNumberToObject(o, "uptime_s", round((ft_now_s() - s->t_start_s) * 10) / 10);
  cJSON_AddNumberToObject(o, "gen", (double)s->gen);
  cJSON_AddNumberToObject(o, "step", (double)s->run.last_step);
  cJSON_AddNumberToObject(o, "final_step", (double)s->final_step);
  double eta = sup_metrics_eta_s(h->metrics, s);
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
  data_waits_json(s, o);
  cJSON *nodes = cJSON_AddArrayToObject(o, "nodes");
  for (int n = 0; n < s->nnodes; n++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "node", n);
    cJSON_AddStringToObject(x, "role", sup_role_name(s->nodes[n].role));
    const char *host = sup_node_host(s, n);
    if (host)
      cJSON_AddStringToObject(x, "host", host);
    if (s->nodes[n].role == SUP_ROLE_QUARANTINED && s->nodes[n].why[0])
      cJSON_AddStringToObject(x, "why", s->nodes[n].why);
    cJSON_AddStringToObject(x, "doctor", sup_doctor_node_state(s, n));
    if (s->nodes[n].dverdict[0])
      cJSON_AddStringToObject(x, "doctor_verdict", s->nodes[n].dverdict);
    if (all)
      add_progress(s, n, x);
    else
      add_summary(s, n, x, stale, &nstale);
    cJSON_AddItemToArray(nodes, x);
  }
  if (!all) {
    cJSON *st = cJSON_AddArrayToObject(o, "stalest");
    double now = ft_now_s();
    for (int i = 0; i < nstale; i++) {
      cJSON *w = worker_json(s, stale[i], now);
      cJSON_AddNumberToObject(w, "node", stale[i]->node);
      cJSON_AddItemToArray(st, w);
    }
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

/* ?NAME=1 */
static int query_flag(struct evhttp_request *req, const char *name) {
  const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
  struct evkeyvalq kv;
  int on = 0;
  if (q && evhttp_parse_query_str(q, &kv) == 0) {
    const char *v = evhttp_find_header(&kv, name);
    on = v && !strcmp(v, "1");
    evhttp_clear_headers(&kv);
  }
  return on;
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

/* ---- connections ---------------------------------------------------------- */

static http_conn *conn_of(struct sup_http *h, struct evhttp_connection *evcon) {
  for (int i = 0; i < h->nconns; i++)
    if (h->conns[i].evcon == evcon)
      return &h->conns[i];
  return NULL;
}

/* evhttp's close callback: runs whoever closes it (client, evhttp, us) */
static void conn_closed(struct evhttp_connection *evcon, void *arg) {
  struct sup_http *h = arg;
  http_conn *c = conn_of(h, evcon);
  if (!c)
    return;
  h->nanswering -= c->answering;
  *c = h->conns[--h->nconns];
}

/* the connection idle (not being answered) the longest; NULL when none */
static http_conn *oldest_idle(struct sup_http *h) {
  http_conn *o = NULL;
  for (int i = 0; i < h->nconns; i++)
    if (!h->conns[i].answering && (!o || h->conns[i].since < o->since))
      o = &h->conns[i];
  return o;
}

/* evhttp's bufferevent for each new connection, on accept: ours, so that
 * on_adopt finds the connection (its callback argument) and its
 * descriptor. The listener would accept a whole backlog in one go, past
 * the cap and the reserve: it stops after HTTP_NEW_MAX until on_adopt
 * (later in this loop iteration) has counted them; so the cap and the
 * reserve may be passed by HTTP_NEW_MAX - 1 for that long. */
static struct bufferevent *on_new_bev(struct event_base *base, void *arg) {
  struct sup_http *h = arg;
  event_active(h->adopt, EV_TIMEOUT, 0);
  if (h->nfresh == HTTP_NEW_MAX)
    return NULL; /* cannot happen (the listener stopped): evhttp makes its own, uncounted */
  struct bufferevent *bev = bufferevent_socket_new(base, -1, 0); /* evhttp closes the fd */
  if (!bev)
    return NULL;           /* evhttp makes its own (it will not either): uncounted */
  bufferevent_incref(bev); /* on_adopt's: evhttp may free it first */
  h->fresh[h->nfresh++] = bev;
  if (h->nfresh == HTTP_NEW_MAX)
    evconnlistener_disable(h->lis);
  return bev;
}

/* 1 when the descriptors above fd are within the reserve: the store's and
 * those of the control connections still to come (one per worker, or per
 * node's agent; a worker's or agent's that is open is below fd already).
 * It counted every worker's four times over, open or not: 16,384 workers
 * (or 131,072 behind agents) put every HTTP connection in the reserve,
 * and `supervise status` said a running supervisor had stopped. */
static int fds_low(const struct sup_http *h, int fd) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
    return 0;
  long want = (long)h->s->nnodes * (h->s->agent_mode ? 1 : h->s->G);
  long open = sup_conn_socket_count(), missing = want > open ? want - open : 0;
  rlim_t reserve = HTTP_FD_RESERVE + HTTP_NEW_MAX + (rlim_t)HTTP_FD_PER_WORKER * (rlim_t)missing;
  return (rlim_t)fd + reserve >= rl.rlim_cur;
}

static void pause_listener(struct sup_http *h) {
  struct timeval tv = {0, (long)(HTTP_PAUSE_S * 1e6)};
  evconnlistener_disable(h->lis);
  evtimer_add(h->resume, &tv);
}

/* one accepted connection: shed, counted in (evicting one at the cap) */
static int adopt_one(struct sup_http *h, struct bufferevent *bev) {
  void *arg = NULL;
  bufferevent_getcb(bev, NULL, NULL, NULL, &arg);
  struct evhttp_connection *evcon = arg; /* NULL: evhttp freed it already */
  int fd = (int)bufferevent_getfd(bev);
  bufferevent_decref(bev);
  if (!evcon || fd < 0 || evhttp_connection_get_bufferevent(evcon) != bev)
    return 0;
  if (fds_low(h, fd)) {
    h->shed++;
    evhttp_connection_free(evcon);
    return -1;
  }
  if (h->nconns == HTTP_MAX_CONNS) {
    http_conn *o = oldest_idle(h);
    if (!o) { /* every one is being answered: the newcomer waits its turn elsewhere */
      h->shed++;
      evhttp_connection_free(evcon);
      return 0;
    }
    h->evicted++;
    evhttp_connection_free(o->evcon); /* conn_closed frees its slot */
  }
  h->conns[h->nconns++] = (http_conn){.evcon = evcon, .since = ft_now_s()};
  evhttp_connection_set_closecb(evcon, conn_closed, h);
  return 0;
}

static void on_adopt(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct sup_http *h = arg;
  int low = 0;
  for (int i = 0; i < h->nfresh; i++)
    low |= adopt_one(h, h->fresh[i]) < 0;
  h->nfresh = 0;
  if (low)
    pause_listener(h);
  else if (!evtimer_pending(h->resume, NULL))
    evconnlistener_enable(h->lis);
}

/* every second: requests not whole by their deadline are closed */
static void on_sweep(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct sup_http *h = arg;
  double now = ft_now_s();
  for (int i = h->nconns - 1; i >= 0; i--) /* conn_closed moves the last into i */
    if (!h->conns[i].answering && now - h->conns[i].since > HTTP_REQUEST_S) {
      h->expired++;
      evhttp_connection_free(h->conns[i].evcon);
    }
}

/* an answer written: the connection waits for its next request */
static void answered(struct evhttp_request *req, void *arg) {
  struct sup_http *h = arg;
  http_conn *c = conn_of(h, evhttp_request_get_connection(req));
  if (c && c->answering) {
    c->answering = 0;
    h->nanswering--;
    c->since = ft_now_s();
  }
}

/* 1 when this request may be answered now (it then counts as answering) */
static int admit(struct sup_http *h, struct evhttp_request *req) {
  http_conn *c = conn_of(h, evhttp_request_get_connection(req));
  if (!c)
    return 1; /* not counted (on_new_bev could not make its bufferevent) */
  if (h->nanswering >= HTTP_MAX_ANSWERING)
    return 0;
  c->answering = 1;
  h->nanswering++;
  evhttp_request_set_on_complete_cb(req, answered, h);
  return 1;
}

/* ---- the Host header (DNS rebinding) --------------------------------------- */

/* 1 when s is an IP literal (v6 without brackets) */
static int ip_literal(const char *s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* 1 when the Host header names this port (none at all: HTTP/1.0, no browser) */
static int host_ok(const struct sup_http *h, const char *host) {
  if (!host)
    return 1;
  ft_hostport hp;
  if (ft_net_parse(host, &hp) || !hp.host[0] || (hp.port >= 0 && hp.port != h->port))
    return 0;
  if (!strcasecmp(hp.host, h->host) || !strcasecmp(hp.host, "localhost") ||
      !strcmp(hp.host, "127.0.0.1") || !strcmp(hp.host, "::1"))
    return 1;
  if (!h->any_host)
    return 0;
  char me[256];
  if (ip_literal(hp.host))
    return 1;
  if (gethostname(me, sizeof me - 1) == 0) {
    me[sizeof me - 1] = 0;
    size_t n = strlen(me);
    if (!strcasecmp(hp.host, me) || (!strncasecmp(hp.host, me, n) && hp.host[n] == '.'))
      return 1; /* the hostname, or a name under it (its FQDN) */
  }
  return 0;
}

static void misdirected(struct sup_http *h, struct evhttp_request *req, struct evbuffer *b,
                        const char *host) {
  h->misdirected++;
  evbuffer_add_printf(b,
                      "misdirected: Host \"%.200s\" is not this supervisor's address (%s, or "
                      "localhost with its port); a page served under another name may not "
                      "read the run (DNS rebinding)\n",
                      host, h->addr);
  reply(req, 421, "Misdirected Request", "text/plain; charset=utf-8", b);
}

/* ---- /view.json, cached ----------------------------------------------------- */

/* the cached text for points, built when the history or the events moved,
 * or when it is older than HTTP_VIEW_MAX_AGE_S; NULL: out of memory */
static const http_view *view_text(struct sup_http *h, int points) {
  uint64_t records = sup_history_total(h->s->hist);
  double now = ft_now_s();
  http_view *v = NULL;
  for (int i = 0; i < HTTP_VIEW_SLOTS && !v; i++)
    if (h->views[i].txt && h->views[i].points == points)
      v = &h->views[i];
  if (v && v->records == records && v->events == h->events &&
      now - v->built_s < HTTP_VIEW_MAX_AGE_S)
    return v;
  if (!v) { /* a free slot, else the oldest */
    v = &h->views[0];
    for (int i = 0; i < HTTP_VIEW_SLOTS; i++)
      if (!h->views[i].txt || h->views[i].built_s < v->built_s)
        v = &h->views[i];
  }
  free(v->txt);
  cJSON *o = sup_view_json(h->view, h->s->hist, status_json(h, 0), 1, points);
  v->txt = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!v->txt)
    return NULL;
  *v = (http_view){v->txt, strlen(v->txt), records, h->events, points, now};
  return v;
}

/* ---- requests ------------------------------------------------------------- */

static void metrics_page(struct sup_http *h, struct evbuffer *b) {
  sup_metrics_write(h->metrics, h->s, b);
  evbuffer_add_printf(
      b,
      "# HELP ftsup_http_refused_total HTTP requests refused with 503: too many answers were "
      "being written already.\n# TYPE ftsup_http_refused_total counter\n"
      "ftsup_http_refused_total %.0f\n"
      "# HELP ftsup_http_evicted_total Idle HTTP connections closed to make room for a new one "
      "(the connection cap).\n# TYPE ftsup_http_evicted_total counter\n"
      "ftsup_http_evicted_total %.0f\n"
      "# HELP ftsup_http_expired_total HTTP connections closed because a request was not whole "
      "by its deadline (slow clients).\n# TYPE ftsup_http_expired_total counter\n"
      "ftsup_http_expired_total %.0f\n"
      "# HELP ftsup_http_shed_total HTTP connections closed on accept: descriptors kept for the "
      "run were at stake, or every open connection was being answered.\n"
      "# TYPE ftsup_http_shed_total counter\nftsup_http_shed_total %.0f\n"
      "# HELP ftsup_http_misdirected_total HTTP requests refused with 421: their Host is not "
      "this port's.\n# TYPE ftsup_http_misdirected_total counter\n"
      "ftsup_http_misdirected_total %.0f\n"
      "# HELP ftsup_http_connections HTTP connections open now.\n"
      "# TYPE ftsup_http_connections gauge\nftsup_http_connections %d\n",
      h->refused, h->evicted, h->expired, h->shed, h->misdirected, h->nconns);
}

static void on_request(struct evhttp_request *req, void *arg) {
  struct sup_http *h = arg;
  if (!admit(h, req)) {
    h->refused++;
    evhttp_send_error(req, 503, "too many HTTP clients"); /* and closes it */
    return;
  }
  const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
  const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, 503, "out of memory");
    return;
  }
  enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
  if (!host_ok(h, host)) {
    misdirected(h, req, b, host);
  } else if (cmd == EVHTTP_REQ_POST && path && !strcmp(path, "/doctor")) {
    post_doctor(h, req, b);
  } else if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) { /* read-only */
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    evbuffer_add_printf(b, "read-only: GET or HEAD (POST /doctor with the run's key)\n");
    reply(req, 405, "Method Not Allowed", "text/plain; charset=utf-8", b);
  } else if (path && !strcmp(path, "/metrics")) {
    metrics_page(h, b);
    reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", b);
  } else if (path && !strcmp(path, "/status")) {
    reply_json(req, b, status_json(h, query_flag(req, "workers")));
  } else if (path && !strcmp(path, "/view.json")) {
    const http_view *v = view_text(h, points_of(req));
    if (v && !evbuffer_add(b, v->txt, v->len) && !evbuffer_add(b, "\n", 1))
      reply(req, 200, "OK", "application/json", b);
    else
      evhttp_send_error(req, 503, "out of memory");
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

/* Accept failed (EMFILE, ENFILE, ENOBUFS): pause, then listen again. arg
 * is not ours: evhttp_bind_listener made the listener's argument its
 * evhttp, which the error callback gets too. Taking it for the port (as
 * this did) added a timer that was not one ("event has no event_base
 * set") and left the listener disabled for good: the port never answered
 * again after a descriptor flood (issue 39). */
static void accept_error(struct evconnlistener *l, void *arg) {
  for (struct sup_http *h = ports; h; h = h->next_port)
    if ((void *)h->http == arg) {
      pause_listener(h);
      return;
    }
  evconnlistener_disable(l); /* cannot happen; at least do not spin */
}

/* every event through the hook: counted (the view cache's key), folded */
static void on_event_counted(void *arg, double ts, const char *name, const cJSON *e) {
  ((struct sup_http *)arg)->events++;
  on_event(arg, ts, name, e);
}

/* what the Host header may name (host_ok) */
static void bound_names(struct sup_http *h, const ft_sockaddr *bound) {
  ft_net_format(bound, 0, h->host, sizeof h->host);
  size_t n = strlen(h->host);
  if (n > 1 && h->host[0] == '[') { /* [v6] */
    memmove(h->host, h->host + 1, n - 2);
    h->host[n - 2] = 0;
  }
  h->port = ft_net_port(bound);
  int loop = !strcmp(h->host, "::1") || !strncmp(h->host, "127.", 4);
  h->any_host = !loop;
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
      bind(fd, (struct sockaddr *)&sa.ss, sa.len) || listen(fd, HTTP_BACKLOG)) {
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
  h->metrics = sup_metrics_new();
  h->view = sup_view_new();
  h->last_faults = cJSON_CreateArray();
  h->ckpts = cJSON_CreateArray();
  h->http = evhttp_new(s->base);
  h->lis = evconnlistener_new(s->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
                              fd); /* listening already (0: libevent leaves it so) */
  h->resume = evtimer_new(s->base, resume_cb, h);
  h->adopt = event_new(s->base, -1, 0, on_adopt, h);
  h->sweep = event_new(s->base, -1, EV_PERSIST, on_sweep, h);
  s->http = h;
  h->next_port = ports;
  ports = h;
  if (!h->lis)
    close(fd);
  if (!h->http || !h->lis || !h->resume || !h->adopt || !h->sweep || !h->last_faults || !h->ckpts ||
      !h->view || !h->metrics || !evhttp_bind_listener(h->http, h->lis)) {
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
  evhttp_set_bevcb(h->http, on_new_bev, h);
  struct timeval second = {1, 0};
  evtimer_add(h->sweep, &second);
  bound.len = sizeof bound.ss;
  getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len);
  ft_net_format(&bound, 1, h->addr, sizeof h->addr);
  bound_names(h, &bound);
  sup_events_set_hook(s->ev, on_event_counted, h);

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

int sup_http_save_status(sup *s) {
  struct sup_http *h = s->http;
  if (!h)
    return FT_OK;
  cJSON *o = status_json(h, 0);
  if (o) {
    cJSON_ReplaceItemInObject(o, "running", cJSON_CreateFalse());
    cJSON_AddNumberToObject(o, "saved_ts", (double)ft_wall_ns() * 1e-9);
  }
  char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!txt)
    return ft_err_set(FT_ENOMEM, "out of memory");
  char path[4200];
  snprintf(path, sizeof path, "%s/status.json", s->state_dir);
  ft_afile af;
  int rc = ft_afile_open(&af, path);
  if (!rc) {
    rc = ft_afile_write(&af, txt, strlen(txt));
    if (!rc)
      rc = ft_afile_write(&af, "\n", 1);
    if (!rc)
      rc = ft_afile_commit(&af);
    else
      ft_afile_abort(&af);
  }
  free(txt);
  return rc;
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
  if (h->adopt)
    event_free(h->adopt);
  if (h->sweep)
    event_free(h->sweep);
  for (int i = 0; i < h->nfresh; i++)
    bufferevent_decref(h->fresh[i]);
  for (int i = 0; i < HTTP_VIEW_SLOTS; i++)
    free(h->views[i].txt);
  for (struct sup_http **p = &ports; *p; p = &(*p)->next_port)
    if (*p == h) {
      *p = h->next_port;
      break;
    }
  cJSON_Delete(h->last_faults);
  cJSON_Delete(h->ckpts);
  sup_view_free(h->view);
  sup_metrics_free(h->metrics);
  free(h);
  s->http = NULL;
}
