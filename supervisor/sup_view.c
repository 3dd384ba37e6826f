/*
 * sup_view: the dashboard's and the report's data and page (sup_view.h).
 */
#include "sup_view.h"

#include "ft_clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* compiled in by cmake/ft_embed.cmake (supervisor/CMakeLists.txt) */
extern const unsigned char sup_asset_page[], sup_asset_dygraph_js[], sup_asset_dygraph_css[];
extern const unsigned long sup_asset_page_len, sup_asset_dygraph_js_len, sup_asset_dygraph_css_len;

struct sup_view {
  cJSON *events; /* notable events, oldest first */
  cJSON *ckpts;  /* {step, state, ts}, oldest first */
  int nevents, nckpts;
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
  if (strcmp(state, "committed"))
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

void sup_view_fold(sup_view *v, double ts, const char *name, const cJSON *e) {
  if (!v || !name)
    return;
  if (!strcmp(name, "checkpoint_committed"))
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
