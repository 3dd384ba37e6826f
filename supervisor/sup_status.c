/*
 * sup_status: the commands that read a run from outside: `supervise status`
 * and `supervise report`, and the HTTP client they and `supervise doctor`
 * use (sup_http_call). They ask the running supervisor's port (its address
 * in STATE/http.addr) and fall back to STATE's files, read only.
 */
#include "sup_int.h"

#include "ft_err.h"
#include "ft_file.h"
#include "ft_net.h"
#include "sup_json.h"
#include "sup_view.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_FAULTS 10 /* the last faults the offline status lists */
#define KEEP_CKPTS 12  /* and checkpoints (as /status) */

/* ---- supervise status ------------------------------------------------------ */

/*
 * `supervise status STATE [--json]`: asks the supervisor running on STATE
 * (its HTTP address in STATE/http.addr) for /status; when none answers, it
 * reads STATE/events.jsonl (read only, no lock: the catalog stays free) and
 * says how the run last ended. Exit 0: running; 3: not running (as
 * `systemctl status`); 2: usage, or no such state directory. A large
 * gang's /status has no per-worker entries (sup_http.c): the progress
 * lines come from its "stalest", and past PRINT_NODES_MAX nodes the nodes
 * line counts them by role. One caveat: a supervisor whose port sheds the
 * request (descriptors low) reads as not running.
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
    evhttp_add_header(hd, "Host", addr); /* HOST:PORT, as a browser sends it */
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

/* What the last supervise saved as it ended (STATE/status.json, written
 * by sup_http_save_status) into o, when it is that run's (saved after its
 * run_started at started_ts): the nodes and their roles, which the event
 * log alone does not give, and the figures of its last step. The event
 * log's account of how it ended (state, reason, step) stays. */
static void add_saved(cJSON *o, const char *dir, double started_ts) {
  static const char *const keys[] = {"nodes", "launcher", "tokens_per_s", "restarts", "gen"};
  char path[4200];
  snprintf(path, sizeof path, "%s/status.json", dir);
  FILE *fp = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  cJSON *saved = fp && getline(&line, &cap, fp) > 0 ? cJSON_Parse(line) : NULL;
  free(line);
  if (fp)
    fclose(fp);
  if (saved && sup_jnum(saved, "saved_ts", 0) >= started_ts)
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(saved, keys[k]);
      if (v && cJSON_GetObjectItemCaseSensitive(o, keys[k]))
        cJSON_ReplaceItemInObjectCaseSensitive(o, keys[k], v);
      else if (v)
        cJSON_AddItemToObject(o, keys[k], v);
    }
  if (!cJSON_GetObjectItemCaseSensitive(o, "nodes"))
    cJSON_AddArrayToObject(o, "nodes"); /* none known: an empty list, never null */
  cJSON_Delete(saved);
}

/* The state directory's event log, read: how its last supervise ended. */
static cJSON *offline_status(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/events.jsonl", dir);
  FILE *fp = fopen(path, "r");
  if (!fp)
    return NULL;
  cJSON *o = cJSON_CreateObject(), *start = NULL, *end = NULL, *step = NULL, *gen = NULL;
  cJSON *faults = cJSON_CreateArray(), *ckpts = cJSON_CreateArray();
  double restarts = 0, val_loss = NAN;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, fp) > 0) {
    cJSON *e = cJSON_Parse(line);
    const char *name = e ? sup_jstr(e, "event") : NULL;
    cJSON **slot = NULL;
    if (name) {
      sup_jckpt_fold(ckpts, sup_jnum(e, "ts", 0), name, e, KEEP_CKPTS);
      restarts += !strcmp(name, "recovered");
      if (!strcmp(name, "step") && isfinite(sup_jnum(e, "val_loss", NAN)))
        val_loss = sup_jnum(e, "val_loss", NAN);
    }
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
      sup_jkeep_last(faults, e, KEEP_FAULTS);
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
  const char *ev = end ? sup_jstr(end, "event") : NULL;
  const char *state = !start                      ? "never started"
                      : !ev                       ? "stopped without a last word"
                      : !strcmp(ev, "run_done")   ? "done"
                      : !strcmp(ev, "run_failed") ? "failed"
                                                  : "interrupted";
  cJSON_AddStringToObject(o, "run", start && sup_jstr(start, "run") ? sup_jstr(start, "run") : "");
  cJSON_AddBoolToObject(o, "running", 0);
  cJSON_AddStringToObject(o, "state", state);
  if (end && sup_jstr(end, "reason"))
    cJSON_AddStringToObject(o, "reason", sup_jstr(end, "reason"));
  cJSON_AddNumberToObject(o, "gen", gen ? sup_jnum(gen, "gen", 0) : 0);
  double last = end && sup_jnum(end, "steps", -1) >= 0       ? sup_jnum(end, "steps", -1)
                : end && sup_jnum(end, "last_step", -1) >= 0 ? sup_jnum(end, "last_step", -1)
                : step                                       ? sup_jnum(step, "step", 0)
                                                             : 0;
  cJSON_AddNumberToObject(o, "step", last);
  cJSON_AddNumberToObject(o, "final_step", start ? sup_jnum(start, "steps", 0) : 0);
  if (step && isfinite(sup_jnum(step, "loss", NAN)))
    cJSON_AddNumberToObject(o, "loss", sup_jnum(step, "loss", NAN));
  if (end)
    cJSON_AddNumberToObject(o, "ended_ts", sup_jnum(end, "ts", 0));
  if (isfinite(val_loss))
    cJSON_AddNumberToObject(o, "val_loss", val_loss);
  else
    cJSON_AddNullToObject(o, "val_loss");
  cJSON_AddNumberToObject(o, "restarts", restarts);
  cJSON_AddItemToObject(o, "checkpoints", ckpts);
  cJSON_AddItemToObject(o, "faults", faults);
  add_saved(o, dir, start ? sup_jnum(start, "ts", 0) : 0);
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

static void print_rank(const cJSON *w, double node) {
  const char *wait = sup_jstr(w, "wait");
  printf("    rank %.0f (node %.0f slot %.0f): %s%s%s%s, collective %.0f, step %.0f, no "
         "progress for %.1f s\n",
         sup_jnum(w, "rank", -1), node, sup_jnum(w, "slot", -1),
         sup_jstr(w, "phase") ? sup_jstr(w, "phase") : "?", wait ? " (" : "", wait ? wait : "",
         wait ? ")" : "", sup_jnum(w, "coll_seq", 0), sup_jnum(w, "step", -1),
         sup_jnum(w, "progress_age_s", 0));
}

static void print_progress(const cJSON *o) {
  const cJSON *nd, *w;
  int total = 0;
  const cJSON *st = cJSON_GetObjectItem(o, "stalest");
  if (cJSON_IsArray(st)) { /* a large gang: the supervisor picked them */
    if (cJSON_GetArraySize(st) > 0)
      printf("  progress (oldest first):\n");
    cJSON_ArrayForEach(w, st) print_rank(w, sup_jnum(w, "node", -1));
    return;
  }
  cJSON_ArrayForEach(nd, cJSON_GetObjectItem(o, "nodes")) {
    total += cJSON_GetArraySize(cJSON_GetObjectItem(nd, "workers"));
  }
  prog_line *l = total ? calloc((size_t)total, sizeof *l) : NULL;
  if (!l)
    return;
  int n = 0;
  cJSON_ArrayForEach(nd, cJSON_GetObjectItem(o, "nodes")) {
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(nd, "workers")) {
      if (sup_jnum(w, "rank", -1) >= 0 && n < total)
        l[n++] = (prog_line){w, sup_jnum(nd, "node", -1), sup_jnum(w, "progress_age_s", 0)};
    }
  }
  qsort(l, (size_t)n, sizeof *l, by_age_desc);
  if (n)
    printf("  progress (oldest first):\n");
  for (int i = 0; i < n && i < PRINT_PROGRESS_MAX; i++)
    print_rank(l[i].w, l[i].node);
  if (n > PRINT_PROGRESS_MAX)
    printf("    (%d more)\n", n - PRINT_PROGRESS_MAX);
  free(l);
}

/* Past PRINT_NODES_MAX nodes, the nodes line counts them by role and names
 * only those out of the pool or not cleared by their doctor (the first
 * PRINT_NODES_MAX of them). */
#define PRINT_NODES_MAX 64
static void print_roles(const cJSON *o) {
  static const char *const ROLES[] = {"active", "spare", "quarantined", "lost", "drained"};
  int count[6] = {0}, named = 0, more = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "nodes")) {
    const char *r = sup_jstr(it, "role");
    int k = 0;
    while (k < 5 && !(r && !strcmp(r, ROLES[k])))
      k++;
    count[k]++;
  }
  printf("  nodes:");
  for (int k = 0; k < 6; k++)
    if (count[k])
      printf(" %d %s", count[k], k < 5 ? ROLES[k] : "other");
  printf("\n");
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "nodes")) {
    const char *r = sup_jstr(it, "role"), *doc = sup_jstr(it, "doctor");
    int out = r && strcmp(r, "active") && strcmp(r, "spare");
    int sick = doc && strcmp(doc, "cleared") && strcmp(doc, "off");
    if (!out && !sick)
      continue;
    if (named >= PRINT_NODES_MAX) {
      more++;
      continue;
    }
    named++;
    const char *host = sup_jstr(it, "host"), *why = sup_jstr(it, "why");
    printf("    node %.0f %s%s%s%s%s%s%s%s\n", sup_jnum(it, "node", 0), r ? r : "?",
           host ? "@" : "", host ? host : "", sick ? " (doctor: " : "", sick ? doc : "",
           sick ? ")" : "", why ? ": " : "", why ? why : "");
  }
  if (more)
    printf("    (%d more)\n", more);
}

static void print_human(const cJSON *o) {
  int running = cJSON_IsTrue(cJSON_GetObjectItem(o, "running"));
  double step = sup_jnum(o, "step", 0), fin = sup_jnum(o, "final_step", 0);
  printf("run %s: %s%s, generation %.0f, step %.0f/%.0f",
         sup_jstr(o, "run") ? sup_jstr(o, "run") : "?",
         running ? "" : "not running: ", sup_jstr(o, "state") ? sup_jstr(o, "state") : "?",
         sup_jnum(o, "gen", 0), step, fin);
  if (fin > 0)
    printf(" (%.0f%%)", 100 * step / fin);
  if (running && sup_jnum(o, "eta_s", -1) >= 0)
    printf(", ETA %.0f s", sup_jnum(o, "eta_s", 0));
  printf("\n");
  if (sup_jstr(o, "reason"))
    printf("  reason: %s\n", sup_jstr(o, "reason"));
  if (isfinite(sup_jnum(o, "loss", NAN)))
    printf("  loss %.4f", sup_jnum(o, "loss", 0));
  if (running)
    printf("%s%.0f tok/s, %.0f restart(s)", isfinite(sup_jnum(o, "loss", NAN)) ? ", " : "  ",
           sup_jnum(o, "tokens_per_s", 0), sup_jnum(o, "restarts", 0));
  if (running || isfinite(sup_jnum(o, "loss", NAN)))
    printf("\n");
  const cJSON *ws = cJSON_GetObjectItem(o, "waiting_on_storage");
  if (cJSON_IsObject(ws))
    printf("  waiting on storage: hang %.0f in a row at step %.0f; restarting in %.0f s (waits "
           "%.0f s)\n",
           sup_jnum(ws, "attempt", 0), sup_jnum(ws, "step", 0), sup_jnum(ws, "retry_in_s", 0),
           sup_jnum(ws, "wait_s", 0));
  const cJSON *dw = cJSON_GetObjectItem(o, "waiting_on_data_storage");
  if (cJSON_IsObject(dw))
    printf("  waiting on data storage: %.0f rank(s); rank %.0f (node %.0f slot %.0f) for %.1f s "
           "(%s, attempt %.0f)\n",
           sup_jnum(dw, "ranks", 0), sup_jnum(dw, "rank", -1), sup_jnum(dw, "node", -1),
           sup_jnum(dw, "slot", -1), sup_jnum(dw, "longest_s", 0),
           sup_jstr(dw, "reason") ? sup_jstr(dw, "reason") : "?", sup_jnum(dw, "attempt", 0));
  const cJSON *it;
  int nnodes = cJSON_GetArraySize(cJSON_GetObjectItem(o, "nodes"));
  if (nnodes > PRINT_NODES_MAX) {
    print_roles(o);
  } else if (nnodes > 0) {
    printf("  nodes:");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "nodes")) {
      const char *doc = sup_jstr(it, "doctor");
      int say = doc && strcmp(doc, "cleared") != 0 && strcmp(doc, "off") != 0;
      printf(" %.0f %s%s%s%s%s", sup_jnum(it, "node", 0),
             sup_jstr(it, "role") ? sup_jstr(it, "role") : "?", sup_jstr(it, "host") ? "@" : "",
             sup_jstr(it, "host") ? sup_jstr(it, "host") : "", say ? " (doctor: " : "",
             say ? doc : "");
      if (say)
        printf(")");
    }
    printf("\n");
  }
  print_progress(o);
  if (cJSON_GetArraySize(cJSON_GetObjectItem(o, "checkpoints")) > 0) {
    printf("  checkpoints:");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "checkpoints")) {
      printf(" %.0f %s", sup_jnum(it, "step", 0),
             sup_jstr(it, "state") ? sup_jstr(it, "state") : "?");
    }
    printf("\n");
  }
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "faults")) {
    printf("  fault at step %.0f: %s, node %.0f%s%s\n", sup_jnum(it, "step", -1),
           sup_jstr(it, "kind") ? sup_jstr(it, "kind") : "?", sup_jnum(it, "node", -1),
           sup_jstr(it, "host") ? " " : "", sup_jstr(it, "host") ? sup_jstr(it, "host") : "");
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
    if (e && sup_jstr(e, "event")) {
      sup_view_fold(v, sup_jnum(e, "ts", 0), sup_jstr(e, "event"), e);
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
