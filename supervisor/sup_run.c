/*
 * sup_run: what the supervisor does with each control message, and the
 * run state it persists in the catalog.
 *
 * Per message (after sup_conn verified framing, sender type and HELLO):
 *   HELLO       identity = a (node, slot) we launched (pid checked for the
 *               local launcher), not quarantined, not already connected;
 *               WELCOME(heartbeat_ms = heartbeat_timeout_s*1000/4)
 *   any         fenced with ft_wire_check_gen against the current gen:
 *               stale -> STOP(stale_generation) + close
 *   HEARTBEAT   echoed (same gen and step) so the worker sees we are alive
 *   STEP        every rank of the current gen: its step time (stragglers,
 *               sup_watch.c); rank 0 only: progress, "step" event every
 *               supervisor.step_events_every steps (and the final one),
 *               completes a recovery's first step,
 *               the loss detector (sup_watch_loss), the kill_node_at_step
 *               failpoint (or chaos.kill_node_at_step)
 *   SHARD_SAVED parsed off the loop (sup_shardq.c), then collected per
 *               step; when ranks 0..world-1 all reported: commit,
 *               COMMITTED(step) to the gang, retention GC
 *   FAULT       "worker_fault" event, then sup_watch_fault: nan/loss_spike
 *               -> rollback, xid -> per its action, collective_timeout/
 *               other -> blame silent workers (the worker exits 5 next)
 *   KV_SET/GET  the rendezvous store, current gen only; a KV_SET is charged
 *               to (gen, rank) and one past sup_kv's bounds closes the
 *               connection
 *
 * From an agent (nodes.agent; its HELLO names slot FT_WIRE_AGENT_SLOT, and
 * sup_conn makes it a parent whose kids are its slots' virtual
 * connections, each with its own CHALLENGE, HELLO and MAC, so everything
 * above is unchanged for them):
 *   HELLO       the agent of a node we launched, not quarantined, not
 *               connected; its slots' HELLOs are checked as a worker's
 *   HOSTBEAT    echoed (agent_msg); sup_conn has made each slot's beat
 *               that kid's HEARTBEAT, its last_msg_s the beat's age
 *               before now
 *   SLOT        open: sup_conn made the kid and relayed its CHALLENGE;
 *               exited (agent_msg): that worker's exit with its wait
 *               status (sup_rec_exit_status), as SIGCHLD would give it
 *   closed      with workers on it: event agent_closed, the node lost
 *               (every kid closes with its parent)
 *
 * connection_closed carries node, slot, rank (-1 unknown) and peer, and
 * queued_bytes when sup_conn closed it for not reading (its output cap).
 * A gang worker closed for its own misbehaviour (that, or its KV bound) is
 * also a fault, "peer_misbehaved", counted against its node.
 *
 * Commits and the retention GC after them run on sup_commitq's threads for
 * every store, local ones too: a local commit is milliseconds when the disk
 * is well, but a slow fsync or rename (seconds, on a loaded or failing disk)
 * on the loop would stop heartbeats, and the workers would take the
 * supervisor for dead. The loop only reports (cq_done), the retention
 * GC's outcome too: one that failed or that the store refused is event
 * gc_failed (gc_report), and the run goes on. Each commit and GC job also
 * brings the store's list of the run's checkpoints, and a checkpoint the
 * views were told of that is gone from it is event checkpoint_deleted
 * (ckpt_reconcile), so no view offers one the store no longer has.
 *
 * connection_closed events of peers that never said a valid HELLO are rate
 * limited (anyone on the host can cause them at will; each is an fsync'ed
 * line): at most CLOSED_BURST a second, the next one (or sup_run_flush_log)
 * carries how many were left out as "suppressed".
 */
#include "sup_int.h"

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "sup_commitq.h"
#include "sup_listing.h"
#include "sup_shardq.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- KV replies ---------------------------------------------------------- */

typedef struct kv_wait {
  sup *s;
  struct event *timer;
  uint64_t owner;
  sup_worker *w; /* who asked (still it if w->conn is owner's connection) */
} kv_wait;

static sup_worker *worker_by_conn_id(sup *s, uint64_t id) {
  for (int n = 0; n < s->nnodes; n++)
    for (int j = 0; j < s->G; j++)
      if (s->nodes[n].w[j].conn && sup_conn_id(s->nodes[n].w[j].conn) == id)
        return &s->nodes[n].w[j];
  return NULL;
}

static void kv_reply(void *ud, void *tag, uint64_t owner, uint32_t req, int status,
                     const ft_wire_blob *vals, uint32_t nvals) {
  sup *s = ud;
  kv_wait *kw = tag;
  if (status >= 0) {
    /* the asker directly: a search of the pool per reply was O(workers^2)
     * for a gang's rendezvous (tests/scale) */
    sup_worker *w = kw && kw->w && kw->w->conn && sup_conn_id(kw->w->conn) == owner
                        ? kw->w
                        : worker_by_conn_id(s, owner);
    if (w && w->conn) {
      ft_msg m;
      ft_msg_init(&m, FT_MSG_KV_VALUE);
      m.kv_value.req = req;
      m.kv_value.status = (ft_kv_status)status;
      m.kv_value.vals = vals;
      m.kv_value.nvals = nvals;
      sup_send(s, w->conn, &m, s->gen);
    }
  }
  if (kw) {
    if (kw->timer)
      event_free(kw->timer);
    free(kw);
  }
}

static void kv_timer_cb(evutil_socket_t fd, short what, void *arg) {
  kv_wait *kw = arg;
  sup_kv_timeout(kw->s->kv, kw); /* replies TIMEOUT and frees kw */
}

int sup_kv_reply_init(sup *s) {
  return sup_kv_new(kv_reply, s, &s->kv);
}

static void on_kv_get(sup *s, sup_worker *w, const ft_msg *m) {
  kv_wait *kw = calloc(1, sizeof *kw);
  if (!kw)
    return;
  kw->s = s;
  kw->w = w;
  kw->owner = sup_conn_id(w->conn);
  kw->timer = evtimer_new(s->base, kv_timer_cb, kw);
  int r = sup_kv_get(s->kv, kw->owner, m->kv_get.req, m->kv_get.keys, m->kv_get.nkeys, kw);
  if (r == 0) {
    struct timeval tv = {m->kv_get.timeout_ms / 1000, (m->kv_get.timeout_ms % 1000) * 1000};
    if (kw->timer)
      evtimer_add(kw->timer, &tv);
  } else if (r < 0) {
    if (kw->timer)
      event_free(kw->timer);
    free(kw);
  }
}

/* ---- checkpoints --------------------------------------------------------- */

/* The run's checkpoints in the store (*list, *n: the caller frees), their
 * steps also kept in p for the loop (ckpt_reconcile), with the time the
 * list was begun. On a commit queue thread. */
static int list_run(sup *s, sup_pending_ckpt *p, ckpt_info **list, size_t *n) {
  p->listed_at = ft_now_s();
  int rc = ckpt_store_list(s->store, s->rf.run, list, n);
  if (rc)
    return rc;
  p->listed = malloc((*n ? *n : 1) * sizeof *p->listed);
  for (size_t i = 0; p->listed && i < *n; i++)
    p->listed[i] = (*list)[i].step; /* in step order: the list is */
  p->nlisted = p->listed ? *n : 0;
  return FT_OK;
}

/* The store's part of a commit (on sup_commitq's thread: touches only the
 * store and the run file, both safe there). */
static void commit_store(sup *s, sup_pending_ckpt *p) {
  int64_t parent = -1;
  if (p->step > 0 && ckpt_store_latest(s->store, s->rf.run, p->step - 1, &parent) != 0)
    parent = -1;
  /* s3:// data: the listing its position counts in. Not for memory-level
   * ones: no later start resumes from them (open_store drops them), and the
   * persistent commit of the same step, which replaces the record, carries it */
  char *data = p->level == CKPT_LEVEL_MEMORY ? NULL : sup_listing_text(s->listing);
  ckpt_meta meta = {.run = s->rf.run,
                    .step = p->step,
                    .parent_step = parent,
                    .world = p->world,
                    .loss = p->loss,
                    .config_json = p->config,
                    .state_json = p->state,
                    .metrics_json = p->metrics,
                    .data_json = data,
                    .level = p->level,
                    .memory_epoch = p->memory_epoch};
  /* the references, in rank order: a host's stands for its ranks */
  int nref = 0;
  p->host_refs = 0;
  for (int r = 0; r < p->world; r++)
    if (p->shards[r]) {
      p->host_refs += ckpt_shard_nranks(p->shards[r]) > 1;
      p->shards[nref++] = p->shards[r];
    }
  for (int r = nref; r < p->world; r++)
    p->shards[r] = NULL;
  double t0 = ft_now_s();
  p->rc = ckpt_store_commit(s->store, &meta, p->shards, nref);
  free(data);
  p->done_at = ft_now_s();
  p->ms = (p->done_at - t0) * 1e3;
  p->why[0] = 0;
  if (p->rc == FT_EEXIST && p->level == CKPT_LEVEL_MEMORY) { /* in the store already */
    p->superseded = 1;
    p->rc = FT_OK;
    return;
  }
  if (p->rc == FT_ECANCELED && p->level == CKPT_LEVEL_MEMORY) {
    /* queued before the run's memory records were dropped (checkpoint_lost):
     * its memory went with them, so it is not recorded, and not a failure */
    fprintf(stderr, "supervise: %s\n", ft_err_detail());
    p->superseded = 1;
    p->rc = FT_OK;
    return;
  }
  if (p->rc) {
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
    return;
  }
  /* memory-level records are pruned here, in the catalog only; the full
   * retention GC (sup_commitq) runs after store-level commits alone */
  if (p->level == CKPT_LEVEL_MEMORY && ckpt_store_prune_memory(s->store, s->rf.run, NULL))
    fprintf(stderr, "supervise: cannot prune memory-level checkpoints (the run goes on): %s\n",
            ft_err_detail());
  /* sizes for the operator's view: this checkpoint's, and the run's (what
   * its checkpoints hold, and what their chunks take once each) */
  ckpt_info *list = NULL;
  size_t n = 0;
  if (list_run(s, p, &list, &n) == 0)
    for (size_t i = 0; i < n; i++) {
      p->run_logical += list[i].logical_bytes;
      p->run_stored += list[i].new_bytes;
      if (list[i].step == p->step) {
        p->logical = list[i].logical_bytes;
        p->stored = list[i].stored_bytes;
        p->new_bytes = list[i].new_bytes;
      }
    }
  free(list);
}

/* How often the retention GC also sweeps: marking reads every kept
 * checkpoint (16,384 shard objects each at that many ranks: seconds of a
 * core), and the sweep spares every chunk younger than the GC grace (an
 * hour) anyway, so sweeping after every commit frees nothing more. */
#define SUP_SWEEP_EVERY_S 600.0

/* On the GC thread: the job that carries its outcome to the loop
 * (gc_report), or NULL when the run keeps every checkpoint (no GC). */
static sup_pending_ckpt *retention_gc(sup *s) {
  double now = ft_now_s();
  int sweep = s->run.gc_swept_at == 0 || now - s->run.gc_swept_at >= SUP_SWEEP_EVERY_S;
  ckpt_retention ret = {.keep_last = s->rf.checkpoint.keep_last,
                        .keep_every = s->rf.checkpoint.keep_every,
                        .no_sweep = !sweep};
  if (sweep)
    s->run.gc_swept_at = now;
  /* memory-level checkpoints (persist_every, require memory) are pruned
   * whatever keep_last says: their memory is overwritten by newer ones */
  int memory =
      s->rf.checkpoint.persist_every > 1 || s->rf.checkpoint.require == FT_RF_REQUIRE_MEMORY;
  if (!(ret.keep_last > 0 || ret.keep_every > 0 || memory))
    return NULL;
  ckpt_gc_report rep = {0};
  int rc = ckpt_store_gc(s->store, &ret, 0, &rep);
  sup_pending_ckpt *p = calloc(1, sizeof *p);
  if (!p) {
    if (rc)
      fprintf(stderr, "supervise: retention GC failed (the run goes on): %s\n", ft_err_detail());
    return NULL;
  }
  p->gc_done = 1;
  p->rc = rc;
  p->gc_deleted = rep.checkpoints_deleted;
  if (rc)
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
  ckpt_info *list = NULL;
  size_t n = 0;
  if (list_run(s, p, &list, &n) == 0) /* what the GC left, for the views */
    free(list);
  return p;
}

/* The retention GC's outcome, on the loop. A GC that failed, or that the
 * store refused (FT_ESTATE: it holds manifests its catalog does not list,
 * and deletes nothing until 'ckpt rebuild-catalog'), is event gc_failed
 * {reason, refused}; nobody is blamed and the run goes on (its checkpoints
 * are all kept meanwhile). The GC runs after every commit, so the same
 * reason is told once, until a GC succeeds or the reason changes. */
static void gc_report(sup *s, const sup_pending_ckpt *p) {
  if (!p->rc) {
    s->run.gc_failed[0] = 0;
    return;
  }
  if (!strcmp(s->run.gc_failed, p->why))
    return;
  snprintf(s->run.gc_failed, sizeof s->run.gc_failed, "%s", p->why);
  int refused = p->rc == FT_ESTATE;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "reason", p->why);
  cJSON_AddBoolToObject(f, "refused", refused);
  sup_events_emit(s->ev, "gc_failed", f,
                  "retention GC %s; training goes on and no checkpoint is deleted until a GC "
                  "succeeds%s: %s",
                  refused ? "refused" : "failed", refused ? " (the reason says what to run)" : "",
                  p->why);
}

/* ---- the checkpoints the views know ---------------------------------------
 * Every view (the dashboard, /status, the report, `supervise status`)
 * lists checkpoints from the event stream, so a checkpoint the store
 * deletes (retention after a commit, a memory-level one replaced by a
 * newer one, or another program's `ckpt gc`/`ckpt rm`) is told as an event
 * too: checkpoint_deleted {step, level, reason}. The loop keeps the steps
 * it told of (committed here, or in the store when this process began);
 * each commit and GC job brings the store's list from its thread, and a
 * known step absent from a list begun after that step was in the catalog
 * is gone. (A list begun before a commit finished may lack it without its
 * being deleted: done_at < listed_at rules those out.) */

static size_t known_find(const sup *s, int64_t step) {
  size_t lo = 0, hi = s->run.nknown;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->run.known[mid].step < step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void known_add(sup *s, int64_t step, int level, double done_at) {
  size_t i = known_find(s, step);
  if (i < s->run.nknown && s->run.known[i].step == step) {
    s->run.known[i].level = level, s->run.known[i].done_at = done_at;
    return;
  }
  if (s->run.nknown == s->run.capknown) {
    size_t cap = s->run.capknown ? 2 * s->run.capknown : 64;
    struct sup_known_ckpt *k = realloc(s->run.known, cap * sizeof *k);
    if (!k)
      return; /* not told of: it is never reported deleted, nothing worse */
    s->run.known = k, s->run.capknown = cap;
  }
  memmove(&s->run.known[i + 1], &s->run.known[i], (s->run.nknown - i) * sizeof *s->run.known);
  s->run.known[i] = (struct sup_known_ckpt){step, level, done_at};
  s->run.nknown++;
}

void sup_run_known_free(sup *s) {
  free(s->run.known);
  s->run.known = NULL;
  s->run.nknown = s->run.capknown = 0;
}

static int listed_has(const sup_pending_ckpt *p, int64_t step) {
  size_t lo = 0, hi = p->nlisted;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (p->listed[mid] < step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < p->nlisted && p->listed[lo] == step;
}

static void ckpt_reconcile(sup *s, const sup_pending_ckpt *p) {
  if (!p->listed)
    return;
  int retention = s->rf.checkpoint.keep_last > 0 || s->rf.checkpoint.keep_every > 0;
  size_t w = 0;
  for (size_t i = 0; i < s->run.nknown; i++) {
    struct sup_known_ckpt k = s->run.known[i];
    if (k.done_at >= p->listed_at || listed_has(p, k.step)) {
      s->run.known[w++] = k;
      continue;
    }
    int mem = k.level == CKPT_LEVEL_MEMORY;
    const char *why = mem ? "memory" : retention ? "retention" : "removed";
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "step", (double)k.step);
    cJSON_AddStringToObject(f, "level", mem ? "memory" : "store");
    cJSON_AddStringToObject(f, "reason", why);
    sup_events_emit(s->ev, "checkpoint_deleted", f, "step %" PRId64 " (%s)", k.step,
                    mem         ? "in memory, replaced by a newer one"
                    : retention ? "retention: checkpoint.keep_last/keep_every"
                                : "no longer in the store: removed by another program");
  }
  s->run.nknown = w;
}

/* The checkpoints in the store when this process begins: known to the
 * views from the event log of earlier processes (the report folds it). */
static void known_seed(sup *s) {
  ckpt_info *list = NULL;
  size_t n = 0;
  if (!s->store || ckpt_store_list(s->store, s->rf.run, &list, &n))
    return;
  for (size_t i = 0; i < n; i++)
    known_add(s, list[i].step, list[i].level, 0);
  free(list);
}

/* The loop's part: events, COMMITTED to the gang, the end of the run. */
/* COMMITTED m to node n's workers that are to hear it (a gang node's in
 * the current generation, a spare's once it said HELLO), in generation gen:
 * once, to its agent, when that is all of them and all its open kids (a
 * host frame, ft_wire.h), else slot by slot. */
static int committed_due(const sup *s, const sup_node *nd, const sup_worker *w) {
  return w->conn && (nd->role == SUP_ROLE_SPARE ? w->hello : w->gen == s->gen);
}

static void committed_tell(sup *s, int n, ft_msg *m, uint64_t gen) {
  const sup_node *nd = &s->nodes[n];
  int all = 1;
  for (int j = 0; j < s->G && all; j++)
    all = committed_due(s, nd, &nd->w[j]);
  sup_conn *host = all ? sup_host_conn(s, n) : NULL;
  if (host) {
    sup_send(s, host, m, gen);
    return;
  }
  for (int j = 0; j < s->G; j++)
    if (committed_due(s, nd, &nd->w[j]))
      sup_send(s, nd->w[j].conn, m, gen);
}

static void commit_report(sup *s, sup_pending_ckpt *p) {
  if (p->superseded)
    return;
  if (p->rc) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "step", (double)p->step);
    cJSON_AddStringToObject(f, "reason", p->why);
    sup_events_emit(s->ev, "checkpoint_failed", f, "step %" PRId64 ": %s (training goes on)",
                    p->step, p->why);
    return;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)p->step);
  cJSON_AddNumberToObject(f, "world", p->world);
  cJSON_AddNumberToObject(f, "commit_ms", round(p->ms * 1000) / 1000);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddStringToObject(f, "level", p->level == CKPT_LEVEL_MEMORY ? "memory" : "store");
  cJSON_AddNumberToObject(f, "host_refs", p->host_refs); /* agents' leaves, each its host's ranks */
  if (p->logical) {
    cJSON_AddNumberToObject(f, "logical_bytes", (double)p->logical);
    cJSON_AddNumberToObject(f, "stored_bytes", (double)p->stored);
    cJSON_AddNumberToObject(f, "new_bytes", (double)p->new_bytes);
    cJSON_AddNumberToObject(f, "run_logical_bytes", (double)p->run_logical);
    cJSON_AddNumberToObject(f, "run_stored_bytes", (double)p->run_stored);
  }
  sup_events_emit(s->ev, "checkpoint_committed", f, "step %" PRId64 " (world %d%s) in %.1f ms",
                  p->step, p->world, p->level == CKPT_LEVEL_MEMORY ? ", in memory" : "", p->ms);
  known_add(s, p->step, p->level, p->done_at);
  ckpt_reconcile(s, p);
  sup_watch_committed(s, p->step);
  if (p->step > s->run.newest_committed)
    s->run.newest_committed = p->step;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_COMMITTED);
  m.committed.step = p->step;
  for (int i = 0; i < s->ngang; i++)
    committed_tell(s, s->gang[i], &m, s->gen);
  /* warm spares too: with recovery.in_process they fetch it into memory.
   * In the newest recorded generation: s->gen may not be recorded yet */
  for (int n = 0; n < s->nnodes; n++)
    if (s->nodes[n].role == SUP_ROLE_SPARE)
      committed_tell(s, n, &m, s->gen_recorded);
}

/* ---- sup_commitq callbacks ---- */

static void cq_work(void *ud, sup_pending_ckpt *p) {
  if (p->rec.work) {
    p->rec.work(ud, p);
    return;
  }
  if (p->mark_good) {
    sup_mark_store(ud, p);
    return;
  }
  commit_store(ud, p);
  /* the loop needs none of the manifests after the commit: freed here,
   * not on the loop (tests/scale: a loop stall after every commit) */
  sup_pending_free_shards(p);
}

static sup_pending_ckpt *cq_gc(void *ud) {
  return retention_gc(ud);
}

static void cq_done(void *ud, sup_pending_ckpt *p) {
  sup *s = ud;
  if (p->gc_done) {
    ckpt_reconcile(s, p);
    gc_report(s, p);
    sup_pending_free(p);
    return;
  }
  if (p->rec.work) {
    sup_record_answered(s, p);
    sup_pending_free(p);
    return;
  }
  if (p->mark_good) {
    sup_mark_report(s, p);
    sup_pending_free(p);
    return;
  }
  commit_report(s, p);
  /* the end waits for the final checkpoint in the store, not its memory copy */
  if (p->step >= s->final_step && p->level != CKPT_LEVEL_MEMORY && s->state < SUP_FINISHING) {
    if (!p->rc)
      sup_recovery_done(s);
    else {
      /* the workers have nothing left to train: waiting would never end */
      char why[1200];
      snprintf(why, sizeof why, "the store refused the final checkpoint (step %" PRId64 "): %s",
               p->step, p->why);
      sup_recovery_store_failed(s, why);
    }
  }
  sup_pending_free(p);
}

static void cq_release(void *ud, sup_pending_ckpt *p) {
  (void)ud;
  sup_pending_free(p);
}

static void on_shard_parsed(void *ud, sup_shard_job *j);

int sup_run_commitq_start(sup *s) {
  known_seed(s);
  int rc = sup_shardq_new(s->base, on_shard_parsed, s, &s->shardq);
  if (rc)
    return rc;
  return sup_commitq_new(s->base, cq_work, cq_done, cq_release, cq_gc, s, &s->commitq);
}

/* Checkpoint done is complete: an older one of its level still missing
 * reports never will be (each rank reports its checkpoints in order, so
 * every rank that reported done passed the older one without reporting
 * it). Each is dropped with a checkpoint_failed naming the ranks it
 * lacked; kept, they grew the supervisor's memory by a checkpoint's
 * manifests each (tests/scale: tens of MB at 4,096 ranks). */
static void abandon_older(sup *s, const sup_pending_ckpt *done) {
  sup_pending_ckpt **pp = &s->run.pending;
  while (*pp) {
    sup_pending_ckpt *p = *pp;
    if (p->level != done->level || p->step >= done->step) {
      pp = &p->next;
      continue;
    }
    *pp = p->next;
    int first = -1;
    for (int r = 0; r < p->world && first < 0; r++)
      if (!p->shards[r])
        first = r;
      else
        r += ckpt_shard_nranks(p->shards[r]) - 1; /* a host's covers its ranks */
    char why[256];
    snprintf(why, sizeof why,
             "%d of %d ranks never reported it (the first: rank %d) before step %" PRId64
             " was complete",
             p->world - p->nhave, p->world, first, done->step);
    sup_event_checkpoint_failed(s, p->step, first, p->world - p->nhave, "report", why);
    sup_pending_free(p);
  }
}

/* A parsed SHARD_SAVED (sup_shardq, on the loop, in arrival order): filed
 * into its checkpoint, which goes to the commit queue once every rank's is
 * in. One of a generation that has ended is dropped: its checkpoints went
 * with it (sup_pending_clear). */
static void on_shard_parsed(void *ud, sup_shard_job *j) {
  sup *s = ud;
  int world = s->ngang * s->G;
  if (j->gen != s->gen || j->rank < 0 || j->rank >= world)
    goto out;
  int n = j->why[0] ? 0 : ckpt_shard_nranks(j->sh);
  if (!j->why[0] && j->node < 0 && n != 1)
    snprintf(j->why, sizeof j->why,
             "rank %d reported a host's reference of %d ranks (only its agent may)", j->rank, n);
  else if (!j->why[0] && j->node >= 0 &&
           (n != s->G || j->rank % s->G || s->gang[j->rank / s->G] != j->node))
    snprintf(j->why, sizeof j->why,
             "node %d's agent reported ranks %d..%d, which are not its host's", j->node, j->rank,
             j->rank + n - 1);
  if (j->why[0]) {
    sup_event_checkpoint_failed(s, j->step, j->rank, -1, "report", j->why);
    goto out;
  }
  sup_pending_ckpt *p = s->run.pending;
  while (p && (p->step != j->step || p->level != j->level))
    p = p->next;
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p || !(p->shards = calloc((size_t)world, sizeof *p->shards))) {
      free(p);
      goto out;
    }
    p->step = j->step;
    p->world = world;
    p->level = j->level;
    p->memory_epoch = ckpt_store_memory_epoch(s->store);
    p->loss = NAN;
    p->next = s->run.pending;
    s->run.pending = p;
  }
  /* a repeat keeps the newest: a rank's own reference after its host's
   * (or the host's after its ranks') replaces what it covers. A host's
   * sits at its first rank, its other ranks' places empty. */
  int host_lo = j->rank - j->rank % s->G;
  if (host_lo != j->rank && p->shards[host_lo] &&
      ckpt_shard_nranks(p->shards[host_lo]) > j->rank - host_lo) {
    p->nhave -= ckpt_shard_nranks(p->shards[host_lo]);
    ckpt_shard_free(p->shards[host_lo]);
    p->shards[host_lo] = NULL;
  }
  for (int r = j->rank; r < j->rank + n && r < world; r++)
    if (p->shards[r]) {
      p->nhave -= ckpt_shard_nranks(p->shards[r]);
      ckpt_shard_free(p->shards[r]);
      p->shards[r] = NULL;
    }
  p->shards[j->rank] = j->sh;
  j->sh = NULL;
  p->nhave += n;
  if (j->rank == 0) {
    free(p->state);
    free(p->config);
    free(p->metrics);
    p->state = j->state, p->config = j->config, p->metrics = j->metrics;
    j->state = j->config = j->metrics = NULL;
    p->loss = j->loss;
  }
  if (p->nhave == p->world) {
    /* unlink, commit, free */
    sup_pending_ckpt **pp = &s->run.pending;
    while (*pp != p)
      pp = &(*pp)->next;
    *pp = p->next;
    abandon_older(s, p);
    sup_commitq_push(s->commitq, p); /* reported by cq_done */
  }
out:
  sup_shard_job_free(j);
}

/* Queues a report's text for the parse thread (sup_shardq.c); node: the
 * agent's that sent a host reference, -1 for a worker's own. */
static void shard_job_push(sup *s, int64_t step, int rank, int node, const char *text) {
  sup_shard_job *j = calloc(1, sizeof *j);
  if (!j)
    return;
  j->gen = s->gen;
  j->step = step;
  j->rank = rank;
  j->node = node;
  j->text = strdup(text ? text : "");
  if (!j->text) {
    sup_shard_job_free(j);
    return;
  }
  sup_shardq_push(s->shardq, j);
}

/* A SHARD_SAVED: its text goes to the parse thread (sup_shardq.c); the
 * result comes back to on_shard_parsed. */
static void on_shard_saved(sup *s, sup_worker *w, const ft_msg *m) {
  int64_t step = m->shard_saved.step;
  int rank = (int)m->shard_saved.rank;
  if (rank != w->rank) {
    char why[128];
    snprintf(why, sizeof why, "SHARD_SAVED for rank %d from rank %d", rank, w->rank);
    sup_event_checkpoint_failed(s, step, rank, -1, "report", why);
    return;
  }
  shard_job_push(s, step, rank, -1, m->shard_saved.manifest);
}

/* An agent's SHARD_SAVED: its host's reference (ckpt_store_put_host), one
 * for the host's G ranks, rank its first. Of an ended generation: dropped,
 * as its workers' are; of a node not in the gang: refused. */
static void on_host_saved(sup *s, int node, const ft_msg *m) {
  int64_t step = m->shard_saved.step;
  int rank = (int)m->shard_saved.rank;
  if (m->gen != s->gen)
    return;
  int g = 0;
  while (g < s->ngang && s->gang[g] != node)
    g++;
  if (g == s->ngang || rank != g * s->G) {
    char why[160];
    snprintf(why, sizeof why, "node %d's agent reported ranks from %d, %s", node, rank,
             g == s->ngang ? "but the node is not in the gang" : "which are not its host's");
    sup_event_checkpoint_failed(s, step, rank, -1, "report", why);
    return;
  }
  shard_job_push(s, step, rank, node, m->shard_saved.manifest);
}

/* ---- STEP ------------------------------------------------------------------ */

/* The progress line on a terminal (sup_events_progress), at most 5 times a
 * second: step/total, %, ETA at the pace of the last few seconds, loss,
 * tokens/s, generation, spares left. */
static void progress(sup *s, int64_t step) {
  double now = ft_now_s();
  if (step < s->run.pace_step || !s->run.pace_t) { /* the first step, a rollback or a restore */
    s->run.pace_t = now, s->run.pace_step = step, s->run.pace_rate = 0;
  } else if (now - s->run.pace_t >= 2.0) {
    s->run.pace_rate = (double)(step - s->run.pace_step) / (now - s->run.pace_t);
    s->run.pace_t = now, s->run.pace_step = step;
  }
  if (now < s->run.progress_next_s)
    return;
  s->run.progress_next_s = now + 0.2;
  int spares = 0;
  for (int n = 0; n < s->nnodes; n++)
    spares += s->nodes[n].role == SUP_ROLE_SPARE;
  char eta[32] = "?";
  if (s->run.pace_rate > 0) {
    long left = (long)((double)(s->final_step - step) / s->run.pace_rate + 0.5);
    if (left >= 3600)
      snprintf(eta, sizeof eta, "%ldh%02ldm", left / 3600, left / 60 % 60);
    else
      snprintf(eta, sizeof eta, "%ldm%02lds", left / 60, left % 60);
  }
  char line[256];
  snprintf(line, sizeof line,
           "step %" PRId64 "/%" PRId64 " (%.1f%%) | ETA %s | loss %.4f | %.1fk tok/s | gen %" PRIu64
           " | spares %d",
           step, s->final_step,
           s->final_step > 0 ? 100.0 * (double)step / (double)s->final_step : 0, eta,
           s->run.last_loss, s->run.last_tps / 1e3, s->gen, spares);
  sup_events_progress(s->ev, line);
}

/* The chaos kill: node n's process group and workers SIGKILLed, as the
 * event chaos_kill says (what: "node", "spare node"). */
static void chaos_kill(sup *s, int n, int64_t step, const char *what) {
  sup_node *nd = &s->nodes[n];
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddNumberToObject(f, "step", (double)step);
  sup_events_emit(s->ev, "chaos_kill", f, "SIGKILL %s %d at step %" PRId64, what, n, step);
  if (s->agent_mode && s->rf.nodes.launch_once) {
    /* the pool's one launch process is every node's: the node's agent is
     * told to SIGKILL its workers and itself (its connection resets) */
    sup_agent_kill(s, n);
    return;
  }
  if (nd->pgid > 0)
    kill(-nd->pgid, SIGKILL);
  for (int j = 0; j < s->G; j++)
    if (nd->w[j].alive)
      kill(nd->w[j].pid, SIGKILL);
}

static void on_step(sup *s, const ft_msg *m) {
  int64_t step = m->step.step;
  s->run.last_step = step;
  sup_recovery_step_done(s, step);
  s->run.last_loss = m->step.loss;
  s->run.last_tps = m->step.tokens_per_s;
  s->run.last_step_ms = m->step.step_ms;
  s->run.last_step_at_s = ft_now_s();
  if (isfinite(m->step.val_loss))
    s->run.last_val_loss = m->step.val_loss;
  s->run.last_grad_norm = m->step.grad_norm;
  s->run.last_lr = step > 0 ? ft_train_lr(&s->rf.train, step - 1) : NAN;
  s->run.tokens_total += (double)s->rf.train.global_batch * s->rf.model.seq_len;
  if (s->hist) {
    sup_hist_rec r = {.ts = (double)ft_wall_ns() * 1e-9,
                      .step = step,
                      .loss = (float)m->step.loss,
                      .val_loss = (float)m->step.val_loss,
                      .step_ms = (float)m->step.step_ms,
                      .tokens_per_s = (float)m->step.tokens_per_s,
                      .grad_norm = (float)s->run.last_grad_norm,
                      .lr = (float)s->run.last_lr};
    sup_history_add(s->hist, &r);
  }
  progress(s, step);
  /* the step events' own cadence (supervisor.step_events_every), and the
   * final step always: not the checkpoints' */
  int64_t every = s->rf.supervisor.step_events_every;
  if (every > 0 && (step % every == 0 || step == s->final_step)) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "step", (double)step);
    if (isfinite(m->step.loss))
      cJSON_AddNumberToObject(f, "loss", m->step.loss);
    else
      cJSON_AddNullToObject(f, "loss");
    cJSON_AddNumberToObject(f, "tokens_per_s", isfinite(s->run.last_tps) ? s->run.last_tps : 0);
    cJSON_AddNumberToObject(f, "step_ms", isfinite(m->step.step_ms) ? m->step.step_ms : 0);
    cJSON_AddNumberToObject(f, "gen", (double)s->gen);
    if (isfinite(s->run.last_val_loss))
      cJSON_AddNumberToObject(f, "val_loss", s->run.last_val_loss);
    sup_events_emit(s->ev, "step", f, "step %" PRId64 " loss %.4f (%.0f tok/s)", step, m->step.loss,
                    s->run.last_tps);
  }
  if (s->state == SUP_RECOVERING && s->rphase == SUP_RP_ASSIGNED)
    sup_recovery_first_step(s, step);
  if (sup_watch_loss(s, m))
    return; /* a loss fault: the gang is being stopped */
  /* A fault asked for on purpose: the run file's chaos.kill_node_at_step
   * (the demo's) or the kill_node_at_step failpoint (tests). */
  int64_t at = s->rf.chaos.kill_node_at_step;
  int armed = ft_failpoint("kill_node_at_step", &at) || at > 0; /* the failpoint wins */
  /* failpoint kill_after_commit=C: not before checkpoint C has committed, so
   * that a test knows what the spare restores however fast the steps run */
  int64_t need = -1;
  if (ft_failpoint("kill_after_commit", &need) && s->run.newest_committed < need)
    armed = 0;
  if (!s->chaos_done && s->state == SUP_RUNNING && armed && step >= at && s->ngang > 0) {
    s->chaos_done = 1;
    int64_t pos = s->ngang - 1; /* the last node; failpoint kill_gang_position=P: P's */
    if (ft_failpoint("kill_gang_position", &pos) && (pos < 0 || pos >= s->ngang))
      pos = s->ngang - 1;
    chaos_kill(s, s->gang[pos], step, "node");
    /* failpoint chaos_kill_spares: every spare dies at the same moment (a
     * lost host and every buddy that held copies of its shards) */
    int64_t all = 0;
    for (int n = 0; ft_failpoint("chaos_kill_spares", &all) && n < s->nnodes; n++)
      if (s->nodes[n].role == SUP_ROLE_SPARE)
        chaos_kill(s, n, step, "spare node");
  }
}

/* ---- connection callbacks ------------------------------------------------ */

static uint32_t welcome_heartbeat_ms(const sup *s) {
  double hb = ft_wire_heartbeat_interval_s(s->rf.watchdog.heartbeat_timeout_s) * 1000.0;
  return hb < 1 ? 1 : hb > FT_WIRE_MAX_HEARTBEAT_MS ? FT_WIRE_MAX_HEARTBEAT_MS : (uint32_t)hb;
}

/* A HELLO (what: "HELLO", "agent HELLO") refused whoever sends it: the run
 * is finishing, or node nd is out of the pool (told so: STOP evicted). */
static int hello_refused(sup *s, sup_conn *c, const ft_msg *m, const sup_node *nd, const char *what,
                         char *reason, size_t rlen) {
  if (s->state >= SUP_FINISHING) {
    snprintf(reason, rlen, "the run is finishing");
    return 1;
  }
  if (nd->role != SUP_ROLE_QUARANTINED && nd->role != SUP_ROLE_LOST)
    return 0;
  ft_msg st;
  ft_msg_init(&st, FT_MSG_STOP);
  st.stop.reason = FT_STOP_EVICTED;
  st.stop.detail = "node is out of the pool";
  sup_send(s, c, &st, m->gen);
  snprintf(reason, rlen, "%s from node %d, which is %s", what, (int)(nd - s->nodes),
           sup_role_name(nd->role));
  return 1;
}

static void welcome(sup *s, sup_conn *c, const ft_msg *m) {
  ft_msg wm;
  ft_msg_init(&wm, FT_MSG_WELCOME);
  wm.welcome.heartbeat_ms = welcome_heartbeat_ms(s);
  sup_send(s, c, &wm, m->gen);
}

/* An agent's HELLO (slot FT_WIRE_AGENT_SLOT): node n's one process, which
 * we launched; its connection becomes the agent's, its slots' connections
 * its kids, handled by these same ops. */
static int agent_hello(sup *s, sup_conn *c, const ft_msg *m, char *reason, size_t rlen) {
  uint32_t node = m->hello.node;
  if (!s->agent_mode) {
    snprintf(reason, rlen, "an agent's HELLO (node %u), but this run has no agents (nodes.agent)",
             node);
    return 1;
  }
  if (node >= (uint32_t)s->nnodes) {
    snprintf(reason, rlen, "agent HELLO from node %u: no such node (%d nodes)", node, s->nnodes);
    return 1;
  }
  sup_node *nd = &s->nodes[node];
  if (hello_refused(s, c, m, nd, "agent HELLO", reason, rlen))
    return 1;
  if (!nd->w[0].alive || (!s->command_launcher && (pid_t)m->hello.pid != nd->w[0].pid)) {
    snprintf(reason, rlen, "agent HELLO from node %u pid %u: not a process we launched", node,
             m->hello.pid);
    return 1;
  }
  if (nd->agent) {
    snprintf(reason, rlen, "agent HELLO from node %u: its agent is already connected", node);
    return 1;
  }
  if (sup_conn_make_agent(c, (uint32_t)s->G, &sup_run_conn_ops, s)) {
    snprintf(reason, rlen, "agent HELLO from node %u: %s", node, ft_err_detail());
    return 1;
  }
  nd->agent = c;
  nd->agent_heard_s = ft_now_s();
  sup_conn_set_user(c, nd);
  welcome(s, c, m);
  return 0;
}

static int on_hello(void *ud, sup_conn *c, const ft_msg *m, char *reason, size_t rlen) {
  sup *s = ud;
  if (m->hello.slot == FT_WIRE_AGENT_SLOT && !sup_conn_parent(c))
    return agent_hello(s, c, m, reason, rlen);
  int g = ft_wire_check_gen(m, s->gen);
  if (g == 1) {
    ft_msg st;
    ft_msg_init(&st, FT_MSG_STOP);
    st.stop.reason = FT_STOP_STALE_GENERATION;
    st.stop.detail = "stale generation";
    sup_send(s, c, &st, m->gen);
    snprintf(reason, rlen, "HELLO of stale generation %" PRIu64 " (current %" PRIu64 ")", m->gen,
             s->gen);
    return 1;
  }
  if (g < 0) {
    snprintf(reason, rlen, "HELLO: %s", ft_err_detail());
    return 1;
  }
  uint32_t node = m->hello.node, slot = m->hello.slot;
  if (node >= (uint32_t)s->nnodes || slot >= (uint32_t)s->G) {
    snprintf(reason, rlen, "HELLO from node %u slot %u: no such worker (%d nodes x %d)", node, slot,
             s->nnodes, s->G);
    return 1;
  }
  sup_node *nd = &s->nodes[node];
  sup_worker *w = &nd->w[slot];
  sup_conn *agent = sup_conn_parent(c);
  if (agent && (sup_conn_user(agent) != nd || sup_conn_slot(c) != slot)) {
    snprintf(reason, rlen, "HELLO from node %u slot %u through the agent of node %d slot %u", node,
             slot, (int)((sup_node *)sup_conn_user(agent) - s->nodes), (unsigned)sup_conn_slot(c));
    return 1;
  }
  if (s->agent_mode && !agent) {
    snprintf(reason, rlen, "HELLO from node %u slot %u not through its agent (nodes.agent)", node,
             slot);
    return 1;
  }
  if (hello_refused(s, c, m, nd, "HELLO", reason, rlen))
    return 1;
  /* under an agent w->pid is the agent's: the agent vouches for its workers */
  if (!w->alive || (!s->command_launcher && !agent && (pid_t)m->hello.pid != w->pid)) {
    snprintf(reason, rlen, "HELLO from node %u slot %u pid %u: not a process we launched", node,
             slot, m->hello.pid);
    return 1;
  }
  if (w->conn) {
    snprintf(reason, rlen, "HELLO from node %u slot %u: already connected", node, slot);
    return 1;
  }
  w->conn = c;
  w->hello = 1;
  w->hello_s = ft_now_s();
  w->prog_have = 0; /* a new process: no progress heard yet */
  w->last_msg_s = ft_now_s();
  sup_conn_set_user(c, w);
  welcome(s, c, m);
  sup_recovery_hello(s, w);
  return 0;
}

/* The echo of a HEARTBEAT (same gen, step and seq): the worker times its
 * control link by it and knows we live. */
static void echo_beat(sup *s, sup_conn *c, const ft_msg *m) {
  ft_msg hb;
  ft_msg_init(&hb, FT_MSG_HEARTBEAT);
  hb.heartbeat.step = m->heartbeat.step;
  hb.heartbeat.seq = m->heartbeat.seq;
  sup_send(s, c, &hb, m->gen);
}

/* The worker_fault event of a FAULT frame. left: from a worker leaving its
 * generation in process (the fault is the collective the rejoin broke; the
 * event says which generation, and it is not judged further). */
static void worker_fault_event(sup *s, const sup_worker *w, const ft_msg *m, int left) {
  const char *detail = m->fault.detail ? m->fault.detail : "";
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", w->node);
  cJSON_AddNumberToObject(f, "slot", w->slot);
  if (left)
    cJSON_AddNumberToObject(f, "gen", (double)m->gen);
  else
    cJSON_AddNumberToObject(f, "rank", w->rank);
  cJSON_AddStringToObject(f, "kind", ft_fault_kind_name(m->fault.kind));
  cJSON_AddNumberToObject(f, "step", (double)m->fault.step);
  cJSON_AddStringToObject(f, "detail", detail);
  if (left)
    sup_events_emit(
        s->ev, "worker_fault", f,
        "node %d slot %d %s at step %" PRId64 " (generation %" PRIu64 ", left in process): %s",
        w->node, w->slot, ft_fault_kind_name(m->fault.kind), m->fault.step, m->gen, detail);
  else
    sup_events_emit(s->ev, "worker_fault", f, "node %d slot %d %s at step %" PRId64 ": %s", w->node,
                    w->slot, ft_fault_kind_name(m->fault.kind), m->fault.step, detail);
}

/* A gang worker closed for its own misbehaviour (it stopped reading past
 * its output cap, or stored past its KV bound): a fault counted against
 * its node, as its crash would be. Its exit that follows (it lost us)
 * joins this recovery instead of being blamed on nobody. */
static void peer_misbehaved(sup *s, sup_worker *w, const char *reason) {
  if (w->gen == s->gen && w->rank >= 0 && sup_in_gang(s, w->node))
    sup_recovery_fault(s, SUP_FAULT_PEER_MISBEHAVED, w->node, w->slot, w->pid, reason,
                       SUP_BLAME_COUNT);
}

/* A HEARTBEAT's progress into its worker's record (sup_int.h). */
void sup_progress_beat(sup_worker *w, const ft_msg *m, double now_s) {
  w->prog_have = 1;
  w->prog_phase = m->heartbeat.phase;
  w->prog_coll = m->heartbeat.coll_seq;
  w->prog_step = m->heartbeat.step;
  w->prog_gen = m->gen;
  w->prog_beat_s = now_s;
  w->prog_changed_s = now_s - m->heartbeat.prog_age_ms * 1e-3;
  w->prog_wait = m->heartbeat.wait;
  w->prog_wait_attempt = m->heartbeat.wait_attempt;
}

/* An agent's own frames (sup_conn.h: the rest are its kids'): its
 * HOSTBEAT is echoed, a worker's exit is judged as a reaped one's. */
static void agent_msg(sup *s, sup_node *nd, sup_conn *c, const ft_msg *m) {
  if (m->type == FT_MSG_SHARD_SAVED) {
    on_host_saved(s, (int)(nd - s->nodes), m);
    return;
  }
  if (m->type == FT_MSG_HOSTBEAT) {
    nd->agent_heard_s = ft_now_s();
    ft_msg hb;
    ft_msg_init(&hb, FT_MSG_HOSTBEAT);
    hb.hostbeat.seq = m->hostbeat.seq;
    sup_send(s, c, &hb, 0);
    return;
  }
  if (m->type == FT_MSG_SLOT && m->slot.event == FT_SLOT_EXITED && m->slot.slot < (uint32_t)s->G) {
    sup_worker *w = &nd->w[m->slot.slot];
    int n = (int)(nd - s->nodes);
    if (!w->alive)
      return;
    /* as on_sigchld does for a process it reaps (sup_timers.c) */
    sup_rec_exit_status(s, w, m->slot.status);
    sup_rec_host_reap(s, n);
    sup_rec_respawn_spare(s, n);
    if (s->state == SUP_RECOVERING)
      sup_rec_check_stopped(s);
    sup_doctor_judge(s);
    sup_rec_maybe_finished(s);
  }
}

static void on_msg(void *ud, sup_conn *c, const ft_msg *m) {
  sup *s = ud;
  sup_worker *w = sup_conn_user(c);
  char reason[256];
  if (!w)
    return;
  if (sup_conn_is_agent(c)) {
    agent_msg(s, (sup_node *)w, c, m);
    return;
  }
  /* a beat an agent carried came when the agent got it */
  w->last_msg_s = ft_now_s() - sup_conn_msg_age_s(c);
  int g = ft_wire_check_gen(m, s->gen);
  if (g == 1 && w->rejoin_from && m->gen >= w->rejoin_from) {
    /* a survivor asked to rejoin in process, not out of its old generation
     * yet: its heartbeats are answered, its FAULT (the collective the
     * rejoin broke) is logged, the rest is dropped */
    if (m->type == FT_MSG_HEARTBEAT) {
      echo_beat(s, c, m);
      sup_progress_beat(w, m, w->last_msg_s);
    } else if (m->type == FT_MSG_FAULT) {
      worker_fault_event(s, w, m, 1);
    }
    return;
  }
  if (g == 0 && w->rejoin_from && !w->rejoined && m->gen == s->gen) {
    /* its first frame of the new generation: it is out of the old one
     * (rejoin_from stays until its ASSIGN: a frame of the old generation
     * may still be on its way) */
    w->rejoined = 1;
    sup_recovery_rejoined(s, w);
    if (m->type == FT_MSG_HEARTBEAT) {
      echo_beat(s, c, m);
      sup_progress_beat(w, m, w->last_msg_s);
    }
    return;
  }
  if (g == 1) {
    snprintf(reason, sizeof reason, "stale generation %" PRIu64 " (current %" PRIu64 ")", m->gen,
             s->gen);
    ft_msg st;
    ft_msg_init(&st, FT_MSG_STOP);
    st.stop.reason = FT_STOP_STALE_GENERATION;
    st.stop.detail = reason;
    sup_send(s, c, &st, m->gen);
    sup_conn_close(c, reason, 1);
    return;
  }
  if (g < 0 || (m->gen != 0 && m->gen != w->gen && !(w->rejoined && m->gen == s->gen))) {
    snprintf(reason, sizeof reason,
             "%s with generation %" PRIu64 ", but node %d slot %d has %" PRIu64,
             ft_msg_type_name(m->type), m->gen, w->node, w->slot, w->gen);
    sup_conn_close(c, reason, 1);
    return;
  }
  int current = m->gen == s->gen && w->rank >= 0;
  switch (m->type) {
  case FT_MSG_HEARTBEAT: {
    echo_beat(s, c, m);
    if (m->heartbeat.rtt_us) {
      w->rtt_ms = m->heartbeat.rtt_us * 1e-3;
      w->rtt_at_s = ft_now_s();
    }
    sup_progress_beat(w, m, w->last_msg_s);
    break;
  }
  case FT_MSG_STEP:
    /* every rank reports its step time; only rank 0's STEP moves progress,
     * the loss window and recovery */
    if (current) {
      sup_watch_step_time(s, w, m);
      w->step_ms = m->step.step_ms; /* the node map's per-rank step time */
      w->step_ms_gen = s->gen;
    }
    if (current && w->rank == 0)
      on_step(s, m);
    break;
  case FT_MSG_SHARD_SAVED:
    if (current)
      on_shard_saved(s, w, m);
    break;
  case FT_MSG_FAULT:
    worker_fault_event(s, w, m, 0);
    sup_watch_fault(s, w, m);
    break;
  case FT_MSG_KV_SET:
    /* charged to this rank in this generation (sup_kv.h: the bounds); a
     * set past them closes the connection, the reason in its event */
    if (current && sup_kv_set_by(s->kv, m->gen << 32 | (uint32_t)w->rank, m->kv_set.key,
                                 m->kv_set.value, m->kv_set.value_len) == FT_EPROTO) {
      snprintf(reason, sizeof reason, "%s", ft_err_detail());
      sup_conn_close(c, reason, 1);
      peer_misbehaved(s, w, reason);
    }
    break;
  case FT_MSG_KV_GET:
    if (current)
      on_kv_get(s, w, m);
    break;
  case FT_MSG_DOCTOR: /* the node doctor's report: judged before it may join */
    sup_doctor_report(s, w, m->doctor.report);
    break;
  case FT_MSG_REPLICA: /* where its replica server listens */
    snprintf(w->replica, sizeof w->replica, "%s", m->replica.addrs);
    sup_send_buddies(s);
    break;
  default:
    break;
  }
}

#define CLOSED_BURST 10
static sup_ratelimit g_closed_rl = {.window_s = 1.0, .burst = CLOSED_BURST};

/* nodes.launch_once: node n's slots end with its agent's connection (no
 * process of the node's own is ours to reap), as a reap would end them. */
static void slots_gone(sup *s, int n) {
  for (int j = 0; j < s->G; j++) {
    sup_worker *w = &s->nodes[n].w[j];
    w->alive = 0;
    if (w->conn)
      sup_conn_close(w->conn, "", 0);
  }
  if (s->state == SUP_RECOVERING)
    sup_rec_check_stopped(s);
  sup_rec_maybe_finished(s);
}

/* An agent's connection closed. With workers of ours still on it, the
 * host is lost unless we are ending it: its agent died (its workers with
 * it: PR_SET_PDEATHSIG), the host went down, or its link broke. The node
 * is killed first, so the exits that follow are ours. */
static void agent_closed(sup *s, sup_node *nd, sup_conn *c, const char *reason) {
  int n = (int)(nd - s->nodes);
  if (nd->agent == c)
    nd->agent = NULL;
  /* nodes.launch_once: no exit of the node's own will come (the pool's one
   * launch stands for every node): its workers are gone for us now */
  int gone_now = s->rf.nodes.launch_once && sup_node_alive(s, n);
  /* its workers all ended (their exits came first), or we are ending it:
   * nothing to say */
  if (!sup_node_alive(s, n) || s->state >= SUP_FINISHING || nd->term_sent || nd->kill_sent) {
    if (gone_now)
      slots_gone(s, n);
    return;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", n);
  cJSON_AddStringToObject(f, "reason", reason[0] ? reason : "closed");
  cJSON_AddStringToObject(f, "peer", sup_conn_peer(c));
  cJSON_AddNumberToObject(f, "workers", (double)sup_conn_kids(c));
  sup_events_emit(s->ev, "agent_closed", f,
                  "node %d: its agent's connection closed with %zu worker(s) on it (%s)", n,
                  sup_conn_kids(c), reason[0] ? reason : "closed");
  char detail[400];
  snprintf(detail, sizeof detail, "its agent's connection closed: %s",
           reason[0] ? reason : "closed by the agent");
  sup_signal_node(s, n, SIGKILL); /* whatever is left of it */
  if (nd->role == SUP_ROLE_ACTIVE && sup_in_gang(s, n)) {
    nd->host_lost = 1;
    snprintf(nd->why, sizeof nd->why, "node lost: %.200s", detail);
    sup_recovery_fault(s, SUP_FAULT_NODE_LOST, n, -1, nd->w[0].pid, detail, SUP_BLAME_NODE);
  }
  if (gone_now)
    slots_gone(s, n);
}

static void on_close(void *ud, sup_conn *c, const char *reason, int is_error) {
  sup *s = ud;
  sup_worker *w = sup_conn_user(c);
  if (w && sup_conn_is_agent(c)) {
    agent_closed(s, (sup_node *)w, c, reason);
    return;
  }
  if (w) {
    sup_kv_drop_owner(s->kv, sup_conn_id(c));
    w->conn = NULL;
    w->buddies_h = 0;
    if (w->replica[0]) { /* no more pushes to it */
      w->replica[0] = 0;
      sup_send_buddies(s);
    }
  }
  if (is_error) {
    long suppressed = 0;
    if (!w && !sup_ratelimit_allow(&g_closed_rl, ft_now_s(), &suppressed))
      return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "reason", reason);
    if (suppressed)
      cJSON_AddNumberToObject(f, "suppressed", (double)suppressed);
    cJSON_AddStringToObject(f, "peer", sup_conn_peer(c));
    cJSON_AddNumberToObject(f, "node", w ? w->node : -1);
    cJSON_AddNumberToObject(f, "slot", w ? w->slot : -1);
    cJSON_AddNumberToObject(f, "rank", w ? w->rank : -1);
    if (sup_conn_overflowed(c)) /* closed for not reading: what it held */
      cJSON_AddNumberToObject(f, "queued_bytes", (double)sup_conn_overflowed(c));
    if (w)
      sup_events_emit(s->ev, "connection_closed", f, "node %d slot %d: %s", w->node, w->slot,
                      reason);
    else if (suppressed)
      sup_events_emit(s->ev, "connection_closed", f,
                      "%s: %s (and %ld before it not logged: rate limited)", sup_conn_peer(c),
                      reason, suppressed);
    else
      sup_events_emit(s->ev, "connection_closed", f, "%s: %s", sup_conn_peer(c), reason);
    if (w && sup_conn_overflowed(c))
      peer_misbehaved(s, w, reason);
  }
}

void sup_run_flush_log(sup *s) {
  long k = sup_ratelimit_flush(&g_closed_rl, ft_now_s());
  if (!k)
    return;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "reason", "rate limited");
  cJSON_AddNumberToObject(f, "suppressed", (double)k);
  cJSON_AddNumberToObject(f, "node", -1);
  cJSON_AddNumberToObject(f, "slot", -1);
  sup_events_emit(s->ev, "connection_closed", f,
                  "%ld more connection(s) without a valid HELLO closed (rate limited)", k);
}

const sup_conn_ops sup_run_conn_ops = {
    .on_hello = on_hello, .on_msg = on_msg, .on_close = on_close};
