/*
 * sup_doctor: the node doctor's verdicts (worker/doctor.h has the checks).
 *
 * With doctor.on_join, every worker process runs the doctor after its HELLO
 * and sends the report (DOCTOR); it may be put into a gang only once its
 * report is cleared here (gang_ready and the spare choice ask
 * sup_doctor_cleared, which reads the verdict in sup_act.c, below the
 * recovery). A report is judged in two parts:
 *
 *   its own checks: a memory or disk failure the node caused (or a training
 *     step with a non-finite loss) refuses the node at once. A disk check
 *     whose folder is unusable (full, read-only, missing) is the storage's
 *     fault: an event, and the node is not refused.
 *   its compute hash, against other nodes' of the same platform (CPU model
 *     and BLAS kernel: the kernels' bits are the same on every healthy node
 *     of one platform). A hash that two or more nodes report, and more
 *     nodes than report any other, becomes the platform's reference for the
 *     rest of the run; a node whose hash differs from it is refused. Until
 *     then a report waits, as long as a worker that has not reported yet is
 *     alive. When nobody else is left to report: a platform with one node
 *     is cleared unverified (nothing to compare with); nodes that all
 *     disagree, with no majority, cannot say which is wrong, so the run
 *     fails rather than train on one of them or burn a healthy one.
 *
 * A refused node is quarantined with the doctor's reason (and drained in
 * Slurm when recovery.drain is on) by sup_recovery_refuse.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ft_err.h"
#include "sup_int.h"

static int doctor_on(const sup *s) {
  return s->rf.doctor.on_join;
}

static int out_of_pool(const sup *s, int n) {
  return s->nodes[n].role == SUP_ROLE_QUARANTINED || s->nodes[n].role == SUP_ROLE_LOST;
}

/* the platform's reference hash, or NULL */
static const char *reference(const sup *s, const char *plat) {
  for (int i = 0; i < s->doctor.nrefs; i++)
    if (!strcmp(s->doctor.refs[i].plat, plat))
      return s->doctor.refs[i].hash;
  return NULL;
}

static void set_reference(sup *s, const char *plat, const char *hash, int nodes) {
  if (s->doctor.nrefs == SUP_DOCTOR_MAX_PLATFORMS)
    return; /* more platforms than that: each judged among its reports only */
  snprintf(s->doctor.refs[s->doctor.nrefs].plat, sizeof s->doctor.refs[0].plat, "%s", plat);
  snprintf(s->doctor.refs[s->doctor.nrefs].hash, sizeof s->doctor.refs[0].hash, "%s", hash);
  s->doctor.nrefs++;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "platform", plat);
  cJSON_AddStringToObject(f, "hash", hash);
  cJSON_AddNumberToObject(f, "nodes", nodes);
  sup_events_emit(s->ev, "doctor_reference", f,
                  "compute reference for %s: %.16s... (%d nodes agree)", plat, hash, nodes);
}

static void verdict(sup *s, int n, const char *what, const char *why) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, n));
  cJSON_AddStringToObject(f, "verdict", what);
  if (why)
    cJSON_AddStringToObject(f, "reason", why);
  sup_events_emit(s->ev, "doctor_verdict", f, "node %d %s%s%s", n, what, why ? ": " : "",
                  why ? why : "");
  snprintf(s->nodes[n].dverdict, sizeof s->nodes[n].dverdict, "%s%s%s", what, why ? ": " : "",
           why ? why : "");
}

/* Every worker of node n refused; the node quarantined (or its gang stopped). */
static void refuse(sup *s, int n, const char *why) {
  for (int j = 0; j < s->G; j++)
    s->nodes[n].w[j].doctor = SUP_DOCTOR_REFUSED;
  verdict(s, n, "refused", why);
  sup_recovery_refuse(s, n, why);
}

/* Clears node n's workers that wait for the comparison; the node's verdict
 * once every worker of it is cleared. */
static void clear(sup *s, int n, const char *what, const char *why) {
  int all = 1, changed = 0;
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &s->nodes[n].w[j];
    if (w->doctor == SUP_DOCTOR_COMPARE) {
      w->doctor = SUP_DOCTOR_CLEARED;
      changed = 1;
    }
    all &= w->doctor == SUP_DOCTOR_CLEARED;
  }
  if (!changed)
    return;
  int again = 0;
  for (int j = 0; j < s->G; j++) {
    again |= s->nodes[n].w[j].doctor_again;
    s->nodes[n].w[j].doctor_again = 0;
  }
  if (all)
    verdict(s, n, again && !strcmp(what, "admitted") ? "passed again" : what, why);
  for (int j = 0; j < s->G; j++)
    if (s->nodes[n].w[j].doctor == SUP_DOCTOR_CLEARED)
      sup_recovery_hello(s, &s->nodes[n].w[j]); /* a gang waiting for it may start */
}

/* Node n's worker w against its platform's reference ref: admitted, or
 * the node refused. */
static void judge_one(sup *s, int n, const sup_worker *w, const char *ref) {
  if (!strcmp(ref, w->dhash)) {
    clear(s, n, "admitted", NULL);
    return;
  }
  char why[400];
  snprintf(why, sizeof why,
           "compute check: slot %d's result (hash %.16s...) differs from the one the "
           "other nodes of its platform agree on (%.16s...): it computes wrong numbers",
           w->slot, w->dhash, ref);
  refuse(s, n, why);
}

/* Judges every report waiting for the comparison. */
static void judge(sup *s) {
  for (int again = 1; again;) {
    again = 0;
    for (int n = 0; n < s->nnodes && !again; n++)
      for (int j = 0; j < s->G && !again; j++) {
        sup_worker *w = &s->nodes[n].w[j];
        if (w->doctor != SUP_DOCTOR_COMPARE || out_of_pool(s, n))
          continue;
        const char *ref = reference(s, w->dplat);
        if (ref) {
          judge_one(s, n, w, ref);
          again = 1; /* the pool changed: start over */
          continue;
        }
        /* no reference yet: count the nodes behind each hash of the platform */
        const char *hs[SUP_MAX_NODES];
        int cnt[SUP_MAX_NODES], nh = 0, nodes = 0, waiting = 0;
        for (int a = 0; a < s->nnodes; a++) {
          if (out_of_pool(s, a))
            continue;
          for (int b = 0; b < s->G; b++)
            if (s->nodes[a].w[b].doctor == SUP_DOCTOR_NONE && s->nodes[a].w[b].alive)
              waiting = 1;
          const sup_worker *x = &s->nodes[a].w[0];
          if ((x->doctor != SUP_DOCTOR_COMPARE && x->doctor != SUP_DOCTOR_CLEARED) ||
              strcmp(x->dplat, w->dplat) != 0)
            continue;
          nodes++;
          int k = 0;
          while (k < nh && strcmp(hs[k], x->dhash) != 0)
            k++;
          if (k == nh) {
            hs[nh] = x->dhash;
            cnt[nh++] = 0;
          }
          cnt[k]++;
        }
        int best = 0, second = 0, bestk = -1;
        for (int k = 0; k < nh; k++)
          if (cnt[k] > best) {
            second = best;
            best = cnt[k];
            bestk = k;
          } else if (cnt[k] > second) {
            second = cnt[k];
          }
        if (best >= 2 && best > second) {
          set_reference(s, w->dplat, hs[bestk], best);
          again = 1;
        } else if (!waiting && nodes == 1) {
          clear(s, n, "unverified",
                "the only node of its platform: no other compute result to compare with");
          again = 1;
        } else if (!waiting) {
          char why[600];
          snprintf(why, sizeof why,
                   "the node doctor: %d nodes of platform %s computed different results and no "
                   "majority says which are wrong (add a node, or set doctor.on_join: false)",
                   nodes, w->dplat);
          sup_recovery_fail(s, why);
          return;
        }
      }
  }
}

void sup_doctor_judge(sup *s) {
  if (doctor_on(s) && s->state < SUP_FINISHING)
    judge(s);
}

static const char *check_figures(const cJSON *checks, char *buf, size_t len) {
  static const char *const fig[][3] = {{"compute", "gemm_gflops", "GEMM %.1f GFLOP/s"},
                                       {"memory", "gb_s", "memory %.2f GB/s"},
                                       {"disk", "write_mb_s", "disk write %.0f MB/s"}};
  size_t o = 0;
  buf[0] = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, checks) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    for (size_t i = 0; name && i < sizeof fig / sizeof fig[0] && o < len; i++) {
      const cJSON *v = cJSON_GetObjectItem(c, fig[i][1]);
      if (strcmp(name, fig[i][0]) != 0 || !cJSON_IsNumber(v))
        continue;
      o += (size_t)snprintf(buf + o, len - o, "%s", o ? ", " : "");
      if (o < len)
        o += (size_t)snprintf(buf + o, len - o, fig[i][2], v->valuedouble);
    }
  }
  return buf;
}

/* The node of the current gang's rank q; -1 if none. */
static int node_of_rank(const sup *s, int q) {
  for (int p = 0; p < s->ngang; p++)
    for (int j = 0; j < s->G; j++)
      if (s->nodes[s->gang[p]].w[j].rank == q)
        return s->gang[p];
  return -1;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* {node, host?, best_mb_s} of node n */
static cJSON *node_fields(const sup *s, int n, double best) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "node", n);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(e, "host", sup_node_host(s, n));
  cJSON_AddNumberToObject(e, "best_mb_s", best);
  return e;
}

/* Rank 0's link check (doctor_links): each node's best link (the fastest
 * of those it sends or receives on) beside the gang's median; a node whose
 * best is below doctor.link_min_frac of the median is named. With two
 * nodes both share every link: nothing can be named. A report, never a
 * quarantine (as a link straggler). */
static void links_report(sup *s, const sup_worker *w, const cJSON *r) {
  if (w->rank != 0 || w->gen != s->gen)
    return; /* an old generation's */
  double best[SUP_MAX_NODES];
  for (int n = 0; n < s->nnodes; n++)
    best[n] = -1;
  const cJSON *l;
  cJSON_ArrayForEach(l, cJSON_GetObjectItem(r, "links")) {
    int a = node_of_rank(s, (int)cJSON_GetNumberValue(cJSON_GetObjectItem(l, "from")));
    int b = node_of_rank(s, (int)cJSON_GetNumberValue(cJSON_GetObjectItem(l, "to")));
    double v = cJSON_GetNumberValue(cJSON_GetObjectItem(l, "mb_s"));
    if (a < 0 || b < 0 || v != v)
      continue;
    if (v > best[a])
      best[a] = v;
    if (v > best[b])
      best[b] = v;
  }
  double sorted[SUP_MAX_NODES];
  int k = 0;
  for (int p = 0; p < s->ngang; p++)
    if (best[s->gang[p]] >= 0)
      sorted[k++] = best[s->gang[p]];
  if (!k)
    return;
  qsort(sorted, (size_t)k, sizeof sorted[0], cmp_dbl);
  double median = k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
  int ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "allreduce_ok"));
  cJSON *f = cJSON_CreateObject(), *nodes = cJSON_CreateArray();
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "bytes", cJSON_GetNumberValue(cJSON_GetObjectItem(r, "bytes")));
  cJSON_AddBoolToObject(f, "allreduce_ok", ok);
  cJSON_AddNumberToObject(f, "median_mb_s", median);
  char slow[400] = "";
  size_t so = 0;
  int is_slow[SUP_MAX_NODES] = {0};
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    if (best[n] < 0)
      continue;
    is_slow[n] = k > 2 && best[n] < s->rf.doctor.link_min_frac * median;
    cJSON *e = node_fields(s, n, best[n]);
    cJSON_AddBoolToObject(e, "slow", is_slow[n]);
    cJSON_AddItemToArray(nodes, e);
    if (is_slow[n] && so < sizeof slow)
      so += (size_t)snprintf(slow + so, sizeof slow - so, "%snode %d%s%s (%.1f MB/s)",
                             so ? ", " : "", n, sup_node_host(s, n) ? " on " : "",
                             sup_node_host(s, n) ? sup_node_host(s, n) : "", best[n]);
  }
  cJSON_AddItemToObject(f, "nodes", nodes);
  cJSON_AddItemReferenceToObject(f, "links", cJSON_GetObjectItem(r, "links"));
  sup_events_emit(s->ev, "doctor_links", f,
                  "links before the first step: median %.1f MB/s per node's best link%s%s%s",
                  median, slow[0] ? "; slow: " : "", slow,
                  ok ? "" : "; the all-reduce returned WRONG data");
  for (int p = 0; p < s->ngang; p++) {
    int n = s->gang[p];
    if (!is_slow[n])
      continue;
    cJSON *g = node_fields(s, n, best[n]);
    cJSON_AddNumberToObject(g, "median_mb_s", median);
    sup_events_emit(s->ev, "doctor_slow_link", g,
                    "node %d%s%s: its fastest link moves %.1f MB/s, the gang's median %.1f MB/s "
                    "(below doctor.link_min_frac %.2f; a report: it trains)",
                    n, sup_node_host(s, n) ? " on " : "",
                    sup_node_host(s, n) ? sup_node_host(s, n) : "", best[n], median,
                    s->rf.doctor.link_min_frac);
  }
}

void sup_doctor_report(sup *s, sup_worker *w, const char *text) {
  int n = w->node;
  cJSON *r = cJSON_Parse(text);
  const char *kind = r ? cJSON_GetStringValue(cJSON_GetObjectItem(r, "kind")) : NULL;
  if (kind && !strcmp(kind, "links")) {
    links_report(s, w, r);
    cJSON_Delete(r);
    return;
  }
  const cJSON *checks = r ? cJSON_GetObjectItem(r, "checks") : NULL;
  const char *plat = r ? cJSON_GetStringValue(cJSON_GetObjectItem(r, "platform")) : NULL;
  const char *hash = NULL, *fail = NULL, *storage = NULL;
  char failbuf[600];
  const cJSON *c;
  cJSON_ArrayForEach(c, checks) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *det = cJSON_GetStringValue(cJSON_GetObjectItem(c, "detail"));
    const char *bl = cJSON_GetStringValue(cJSON_GetObjectItem(c, "blame"));
    if (name && !strcmp(name, "compute"))
      hash = cJSON_GetStringValue(cJSON_GetObjectItem(c, "hash"));
    if (cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")))
      continue;
    if (bl && !strcmp(bl, "storage")) {
      if (!storage)
        storage = det ? det : "the disk check's folder is unusable";
    } else if (!fail) {
      snprintf(failbuf, sizeof failbuf, "%s check: %s", name ? name : "a", det ? det : "failed");
      fail = failbuf;
    }
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  if (sup_node_host(s, n))
    cJSON_AddStringToObject(f, "host", sup_node_host(s, n));
  if (r)
    cJSON_AddItemReferenceToObject(f, "report", r);
  char figs[200];
  check_figures(checks, figs, sizeof figs);
  sup_events_emit(s->ev, "doctor_report", f, "node %d slot %d: %s%s%s%s", n, w->slot,
                  fail ? "FAILED: " : "passed its own checks",
                  fail      ? fail
                  : figs[0] ? " ("
                            : "",
                  fail || !figs[0] ? "" : figs, fail || !figs[0] ? "" : ")");
  if (!doctor_on(s) || out_of_pool(s, n)) {
    cJSON_Delete(r);
    return;
  }
  if (!r || !plat || (!hash && !fail)) {
    fail = "its report is not a doctor's report (no platform or compute hash)";
  }
  if (storage) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "node", n);
    cJSON_AddStringToObject(g, "detail", storage);
    sup_events_emit(s->ev, "doctor_storage", g,
                    "node %d: %s (the storage's fault, not the node's: it is not refused)", n,
                    storage);
  }
  if (fail) {
    char why[700];
    snprintf(why, sizeof why, "slot %d: %s", w->slot, fail);
    cJSON_Delete(r);
    refuse(s, n, why);
    return;
  }
  snprintf(w->dhash, sizeof w->dhash, "%s", hash);
  snprintf(w->dplat, sizeof w->dplat, "%s", plat);
  w->doctor = SUP_DOCTOR_COMPARE;
  cJSON_Delete(r);
  /* with its platform's reference known, this report alone is judged: a
   * scan of the pool per report was O(workers^2) for a gang forming
   * (tests/scale: 16,384 reports) */
  const char *ref = reference(s, w->dplat);
  if (ref && !out_of_pool(s, n))
    judge_one(s, n, w, ref);
  else
    judge(s);
}

/* Asks node n's workers to check again (DOCTOR ""), if every one of them is
 * connected, cleared and not already checking; 1 if asked. */
static int ask(sup *s, int n) {
  for (int j = 0; j < s->G; j++) {
    const sup_worker *w = &s->nodes[n].w[j];
    if (!(w->alive && w->conn && w->doctor == SUP_DOCTOR_CLEARED && !w->doctor_again))
      return 0;
  }
  int sent = 0;
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &s->nodes[n].w[j];
    ft_msg m;
    ft_msg_init(&m, FT_MSG_DOCTOR);
    m.doctor.report = "";
    if (sup_send(s, w->conn, &m, 0) == FT_OK) {
      w->doctor_again = 1;
      sent = 1;
    }
  }
  return sent;
}

int sup_doctor_ask(sup *s, int gang_too, const char *why) {
  if (!doctor_on(s) || s->state >= SUP_FINISHING)
    return 0;
  cJSON *f = cJSON_CreateObject(), *nodes = cJSON_CreateArray();
  int asked = 0;
  for (int n = 0; n < s->nnodes; n++) {
    int role = s->nodes[n].role;
    if ((role == SUP_ROLE_SPARE || (gang_too && sup_in_gang(s, n))) && ask(s, n)) {
      cJSON_AddItemToArray(nodes, cJSON_CreateNumber(n));
      asked++;
    }
  }
  cJSON_AddItemToObject(f, "nodes", nodes);
  cJSON_AddStringToObject(f, "why", why);
  if (asked)
    sup_events_emit(s->ev, "doctor_recheck", f, "%d %s asked to check again (%s)", asked,
                    gang_too ? (asked == 1 ? "node" : "nodes")
                             : (asked == 1 ? "idle spare" : "idle spares"),
                    why);
  else
    cJSON_Delete(f);
  return asked;
}

void sup_doctor_tick(sup *s, double now) {
  double every = s->rf.doctor.spare_every_s;
  if (!doctor_on(s) || every <= 0 || s->state >= SUP_FINISHING)
    return;
  if (!s->doctor.next_s)
    s->doctor.next_s = now + every;
  if (now < s->doctor.next_s)
    return;
  s->doctor.next_s = now + every;
  sup_doctor_ask(s, 0, "doctor.spare_every_s");
}

const char *sup_doctor_node_state(const sup *s, int n) {
  if (!doctor_on(s))
    return "off";
  int none = 0, compare = 0;
  for (int j = 0; j < s->G; j++) {
    int d = s->nodes[n].w[j].doctor;
    if (d == SUP_DOCTOR_REFUSED)
      return "refused";
    none |= d == SUP_DOCTOR_NONE;
    compare |= d == SUP_DOCTOR_COMPARE;
  }
  int again = 0;
  for (int j = 0; j < s->G; j++)
    again |= s->nodes[n].w[j].doctor_again;
  return none ? "pending" : compare ? "comparing" : again ? "checking" : "cleared";
}
