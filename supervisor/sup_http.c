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
#include "ft_file.h"
#include "ft_net.h"
#include "ft_version.h"
#include "sup_json.h"
#include "sup_metrics.h"
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
struct sup_http {
  sup *s;
  struct evhttp *http;
  struct evconnlistener *lis;
  struct event *resume;
  char addr[300];
  char addr_file[4200];
  char token_file[4200]; /* STATE/http.token (0600): POST needs it */
  char token[FT_WIRE_TOKEN_HEX + 1];

  sup_metrics *metrics; /* /metrics */
  sup_view *view;       /* the dashboard's data */
  cJSON *last_faults;   /* array of fault_detected events, newest last */
  cJSON *ckpts;         /* array of {step, state, ts}, newest last */
  struct evhttp_connection *clients[HTTP_MAX_CLIENTS]; /* open, have asked */
  int nclients;
  double refused; /* requests refused: too many clients */
};

static void on_event(void *arg, double ts, const char *name, const cJSON *e) {
  struct sup_http *h = arg;
  sup_metrics_fold(h->metrics, ts, name, e);
  sup_view_fold(h->view, ts, name, e);
  if (!strcmp(name, "fault_detected"))
    sup_jkeep_last(h->last_faults, cJSON_Duplicate(e, 1), KEEP_FAULTS);
  sup_jckpt_fold(h->ckpts, ts, name, e, KEEP_CKPTS);
}

/* ---- answers -------------------------------------------------------------- */

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
    /* the rank's own last step time (its STEP: compute, without the wait
     * for the others), for the node map; null before its first step in
     * this generation */
    if (w->step_ms_gen == s->gen && s->gen > 0 && isfinite(w->step_ms))
      cJSON_AddNumberToObject(o, "step_ms", round(w->step_ms * 10) / 10);
    else
      cJSON_AddNullToObject(o, "step_ms");
    cJSON_AddItemToArray(ws, o);
  }
}

static cJSON *status_json(struct sup_http *h) {
  sup *s = h->s;
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
    sup_metrics_write(h->metrics, h->s, b);
    evbuffer_add_printf(b,
                        "# HELP ftsup_http_refused_total HTTP requests refused with 503: too "
                        "many clients had asked already.\n# TYPE ftsup_http_refused_total "
                        "counter\nftsup_http_refused_total %.0f\n",
                        h->refused);
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
  h->metrics = sup_metrics_new();
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
      !h->metrics || !evhttp_bind_listener(h->http, h->lis)) {
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

int sup_http_save_status(sup *s) {
  struct sup_http *h = s->http;
  if (!h)
    return FT_OK;
  cJSON *o = status_json(h);
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
  cJSON_Delete(h->last_faults);
  cJSON_Delete(h->ckpts);
  sup_view_free(h->view);
  sup_metrics_free(h->metrics);
  free(h);
  s->http = NULL;
}
