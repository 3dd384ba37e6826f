/*
 * sup_view: the dashboard's and the report's data and page (sup_view.h).
 */
#include "sup_view.h"

#include "ft_clock.h"
#include "ft_runfile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* compiled in by cmake/ft_embed.cmake (supervisor/CMakeLists.txt) */
extern const unsigned char sup_asset_page[], sup_asset_dygraph_js[], sup_asset_dygraph_css[];
extern const unsigned long sup_asset_page_len, sup_asset_dygraph_js_len, sup_asset_dygraph_css_len;

struct sup_view {
  cJSON *events; /* notable events, oldest first */
  cJSON *ckpts;  /* {step, state, ts[, reason]}, oldest first */
  int nevents, nckpts;
  cJSON *config;         /* the run's sizes (run_config), NULL: unknown */
  double started, ended; /* the first run_started's ts; the end after the last (0: none) */
};

static const char *const NOTABLE[] = {"run_started",
                                      "generation_started",
                                      "fault_detected",
                                      "recovered",
                                      "rollback",
                                      "loss_spike",
                                      "node_quarantined",
                                      "node_restarted",
                                      "node_rejoined",
                                      "rejoin_fallback",
                                      "worker_unkillable",
                                      "node_drained",
                                      "drain_failed",
                                      "spare_promoted",
                                      "spare_lost",
                                      "gang_shrunk",
                                      "spare_lost_supervisor",
                                      "checkpoint_damaged",
                                      "restore_hash_failure",
                                      "checkpoint_mark_failed",
                                      "gc_failed",
                                      "waiting_for_spare",
                                      "progress_hang",
                                      "waiting_on_storage",
                                      "storage_retry",
                                      "checkpoint_failed",
                                      "storage_fault",
                                      "supervisor_stall",
                                      "straggler",
                                      "xid",
                                      "chaos_kill",
                                      "run_done",
                                      "run_failed",
                                      "run_interrupted"};

int sup_view_notable(const char *name) {
  for (size_t i = 0; i < sizeof NOTABLE / sizeof *NOTABLE; i++)
    if (!strcmp(name, NOTABLE[i]))
      return 1;
  return 0;
}

sup_view *sup_view_new(void) {
  sup_view *v = calloc(1, sizeof *v);
  if (!v)
    return NULL;
  v->events = cJSON_CreateArray();
  v->ckpts = cJSON_CreateArray();
  if (!v->events || !v->ckpts) {
    sup_view_free(v);
    return NULL;
  }
  return v;
}

void sup_view_free(sup_view *v) {
  if (!v)
    return;
  cJSON_Delete(v->events);
  cJSON_Delete(v->ckpts);
  cJSON_Delete(v->config);
  free(v);
}

static double num(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* a checkpoint's state changes: the newest entry of that step (searched
 * from the end: states follow commits closely), else a new one */
static void ckpt_state(sup_view *v, double ts, double step, const char *state) {
  int seen = 0;
  for (cJSON *it = v->ckpts->child ? v->ckpts->child->prev : NULL; it && seen < 64;
       it = it == v->ckpts->child ? NULL : it->prev, seen++)
    if (num(it, "step") == step) {
      cJSON_ReplaceItemInObjectCaseSensitive(it, "state", cJSON_CreateString(state));
      return;
    }
  if (strcmp(state, "committed") && strcmp(state, "failed"))
    return; /* good/bad of a checkpoint no longer listed */
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "step", step);
  cJSON_AddStringToObject(c, "state", state);
  cJSON_AddNumberToObject(c, "ts", ts);
  cJSON_AddItemToArray(v->ckpts, c);
  if (++v->nckpts > SUP_VIEW_CKPTS) {
    cJSON_DeleteItemFromArray(v->ckpts, 0);
    v->nckpts--;
  }
}

/* a checkpoint the store deleted (retention, gc) leaves the list: the view
 * never offers a step that cannot be restored. Deletions take the oldest:
 * searched from the start. */
static void ckpt_deleted(sup_view *v, double step) {
  int i = 0;
  for (cJSON *it = v->ckpts->child; it; it = it->next, i++)
    if (num(it, "step") == step) {
      cJSON_DeleteItemFromArray(v->ckpts, i);
      v->nckpts--;
      return;
    }
}

/* checkpoint_failed: the step shown failed, with why (a step that was
 * committed before, then failed again later, turns failed too) */
static void ckpt_failed(sup_view *v, double ts, const cJSON *e) {
  double step = num(e, "step");
  ckpt_state(v, ts, step, "failed");
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(e, "reason");
  cJSON *last = v->ckpts->child ? v->ckpts->child->prev : NULL;
  if (last && num(last, "step") == step && cJSON_IsString(why)) {
    cJSON_DeleteItemFromObjectCaseSensitive(last, "reason");
    cJSON_AddStringToObject(last, "reason", why->valuestring);
  }
}

/* The run's sizes, from its sealed run file (run_started's "runfile"): what
 * the page needs for tokens (global_batch x seq_len per step) and MFU:
 * params N (the position embeddings left out; the tied head counted once)
 * and flops_per_token = 6N + 12 x n_layer x n_embd x seq_len (attention),
 * as nanoGPT's and PaLM's MFU count them. NULL when the file cannot be read
 * (a report of a state directory moved elsewhere). */
static cJSON *run_config(const char *path, double world) {
  ft_runfile *rf = malloc(sizeof *rf);
  char err[512];
  if (!rf || ft_runfile_load(path, rf, err, sizeof err)) {
    free(rf);
    return NULL;
  }
  const ft_model_cfg *m = &rf->model;
  double L = m->n_layer, d = m->n_embd, T = m->seq_len;
  double params = 12 * L * d * d + 13 * L * d + 2 * d + (double)m->vocab_size * d;
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "global_batch", rf->train.global_batch);
  cJSON_AddNumberToObject(c, "seq_len", m->seq_len);
  cJSON_AddNumberToObject(c, "tokens_per_step", (double)rf->train.global_batch * T);
  cJSON_AddNumberToObject(c, "n_layer", m->n_layer);
  cJSON_AddNumberToObject(c, "n_embd", m->n_embd);
  cJSON_AddNumberToObject(c, "vocab_size", m->vocab_size);
  cJSON_AddNumberToObject(c, "params", params);
  cJSON_AddNumberToObject(c, "flops_per_token", 6 * params + 12 * L * d * T);
  cJSON_AddNumberToObject(c, "world", world);
  cJSON_AddStringToObject(c, "device", ft_rf_device_name(rf->nodes.device));
  if (rf->nodes.peak_tflops > 0) /* the gang's: per worker x the world */
    cJSON_AddNumberToObject(c, "peak_flops", rf->nodes.peak_tflops * 1e12 * world);
  else
    cJSON_AddNullToObject(c, "peak_flops");
  free(rf);
  return c;
}

static void run_started(sup_view *v, double ts, const cJSON *e) {
  if (v->started <= 0)
    v->started = ts;
  v->ended = 0;
  const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "runfile");
  cJSON *c = cJSON_IsString(path) ? run_config(path->valuestring, num(e, "world")) : NULL;
  if (c) {
    cJSON_Delete(v->config);
    v->config = c;
  }
}

void sup_view_fold(sup_view *v, double ts, const char *name, const cJSON *e) {
  if (!v || !name)
    return;
  if (!strcmp(name, "run_started"))
    run_started(v, ts, e);
  else if (!strcmp(name, "run_done") || !strcmp(name, "run_failed") ||
           !strcmp(name, "run_interrupted"))
    v->ended = ts;
  else if (!strcmp(name, "checkpoint_deleted"))
    ckpt_deleted(v, num(e, "step"));
  else if (!strcmp(name, "checkpoint_failed"))
    ckpt_failed(v, ts, e);
  else if (!strcmp(name, "checkpoint_committed"))
    ckpt_state(v, ts, num(e, "step"), "committed");
  else if (!strcmp(name, "checkpoint_good"))
    ckpt_state(v, ts, num(e, "step"), "good");
  else if (!strcmp(name, "checkpoint_bad"))
    ckpt_state(v, ts, num(e, "step"), "bad");
  if (!sup_view_notable(name))
    return;
  cJSON *d = cJSON_Duplicate(e, 1);
  if (!d)
    return;
  cJSON_AddItemToArray(v->events, d);
  /* run_started stays: the node map starts from it */
  if (++v->nevents > SUP_VIEW_EVENTS) {
    cJSON *first = v->events->child;
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(first, "event");
    int at = cJSON_IsString(ev) && !strcmp(ev->valuestring, "run_started") ? 1 : 0;
    cJSON_DeleteItemFromArray(v->events, at);
    v->nevents--;
  }
}

double sup_view_goodput(const sup_history *h) {
  size_t n = sup_history_count(h);
  const sup_hist_rec *r = sup_history_recs(h);
  if (n < 2)
    return NAN;
  /* walking back, a record survives if its step is below every later
   * one's; a surviving step took the time since the record before it when
   * that one is its predecessor (the same gang training on: a step or, in a
   * thinned memory copy, a few steps earlier), else its own step time */
  double live_s = 0;
  int64_t min_later = INT64_MAX, gap = (int64_t)(2 * sup_history_total(h) / n + 1);
  for (size_t i = n; i-- > 0;) {
    if (r[i].step >= min_later)
      continue;
    min_later = r[i].step;
    double own = isfinite(r[i].step_ms) && r[i].step_ms > 0 ? r[i].step_ms * 1e-3 : 0;
    if (i > 0 && r[i - 1].step < r[i].step && r[i].step - r[i - 1].step <= gap &&
        r[i].ts >= r[i - 1].ts)
      live_s += r[i].ts - r[i - 1].ts;
    else
      live_s += own;
  }
  double first = isfinite(r[0].step_ms) && r[0].step_ms > 0 ? r[0].step_ms * 1e-3 : 0;
  double wall = r[n - 1].ts - r[0].ts + first;
  if (wall <= 0)
    return NAN;
  double g = live_s / wall;
  return g > 1 ? 1 : g;
}

cJSON *sup_view_json(const sup_view *v, const sup_history *h, cJSON *status, int live, int points) {
  cJSON *o = cJSON_CreateObject();
  if (!o) {
    cJSON_Delete(status);
    return NULL;
  }
  const cJSON *run = status ? cJSON_GetObjectItemCaseSensitive(status, "run") : NULL;
  cJSON_AddStringToObject(o, "run", cJSON_IsString(run) ? run->valuestring : "");
  cJSON_AddBoolToObject(o, "live", live);
  cJSON_AddNumberToObject(o, "now", (double)ft_wall_ns() * 1e-9);
  cJSON_AddItemToObject(o, "status", status ? status : cJSON_CreateObject());
  double g = sup_view_goodput(h);
  if (isfinite(g))
    cJSON_AddNumberToObject(o, "goodput", round(g * 10000) / 10000);
  else
    cJSON_AddNullToObject(o, "goodput");
  cJSON_AddItemToObject(o, "history", sup_history_series(h, points));
  cJSON_AddItemToObject(o, "events", v ? cJSON_Duplicate(v->events, 1) : cJSON_CreateArray());
  cJSON_AddItemToObject(o, "checkpoints", v ? cJSON_Duplicate(v->ckpts, 1) : cJSON_CreateArray());
  cJSON_AddItemToObject(o, "config",
                        v && v->config ? cJSON_Duplicate(v->config, 1) : cJSON_CreateNull());
  if (v && v->started > 0)
    cJSON_AddNumberToObject(o, "started", v->started);
  else
    cJSON_AddNullToObject(o, "started");
  if (v && v->ended > 0)
    cJSON_AddNumberToObject(o, "ended", v->ended);
  else
    cJSON_AddNullToObject(o, "ended");
  return o;
}

/* ---- the page ------------------------------------------------------------- */

static void put(sup_view_writer w, void *ud, const char *s) {
  w(ud, s, strlen(s));
}

/* text with every "</" written "<\/" (inside a <script>: JSON stays JSON) */
static void put_script_safe(sup_view_writer w, void *ud, const char *s) {
  const char *p;
  while ((p = strstr(s, "</"))) {
    w(ud, s, (size_t)(p - s));
    put(w, ud, "<\\/");
    s = p + 2;
  }
  put(w, ud, s);
}

/* the template with its three slots filled: FT_STYLE (dygraph.css),
 * FT_SCRIPT (dygraph.js) and FT_DATA (the report's view) */
void sup_view_page(sup_view_writer w, void *ud, const cJSON *view) {
  const char *page = (const char *)sup_asset_page;
  size_t len = sup_asset_page_len;
  const char *end = page + len;
  static const char *const slots[] = {"<!--FT_STYLE-->", "<!--FT_SCRIPT-->", "<!--FT_DATA-->"};
  while (page < end) {
    const char *next = NULL;
    int which = -1;
    for (int i = 0; i < 3; i++) {
      const char *p = strstr(page, slots[i]);
      if (p && p < end && (!next || p < next))
        next = p, which = i;
    }
    if (!next) {
      w(ud, page, (size_t)(end - page));
      break;
    }
    w(ud, page, (size_t)(next - page));
    page = next + strlen(slots[which]);
    if (which == 0) {
      put(w, ud, "<style>");
      w(ud, sup_asset_dygraph_css, sup_asset_dygraph_css_len);
      put(w, ud, "</style>");
    } else if (which == 1) {
      put(w, ud, "<script>");
      w(ud, sup_asset_dygraph_js, sup_asset_dygraph_js_len);
      put(w, ud, "\n</script>");
    } else if (view) {
      char *txt = cJSON_PrintUnformatted(view);
      put(w, ud, "<script>window.FT_VIEW = ");
      put_script_safe(w, ud, txt ? txt : "null");
      put(w, ud, ";</script>");
      free(txt);
    }
  }
}
