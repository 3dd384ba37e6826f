/*
 * sup_act: the supervisor's low layer. Everything here acts (sends a
 * message, stops a worker, writes a record, queues a GOOD mark, asks for a
 * stack) or answers a small question acting needs (a worker's log path,
 * the worker program, whether the doctor cleared a worker, a fault kind's
 * name), and calls nothing above it: the recovery (sup_recovery.c) and the
 * detectors (sup_run.c, sup_watch.c, sup_doctor.c) act through it, and the
 * one answer it must pass up (a record written, which a recovery round may
 * wait for) goes through s->hooks, which sup_main.c wires.
 *
 * Persisted state (catalog key "sup/<run>/state", one synced JSON record):
 * {"gen": G, "status": "running|done|failed", "quarantined": [...],
 *  "restarts": R, "skips": [[first, end], ...]} (skips: global batch
 * ranges never trained on again, sent in every ASSIGN). gen is written
 * BEFORE it is used (its record first, then ASSIGN), so a restarted
 * supervisor never reuses a generation. The record writes the generation
 * to DIR/generation as well (sup_seal.c): a catalog rebuilt from the
 * manifests has no run state, and a start then takes the generation after
 * the file's. Before the loop runs sup_persist writes it
 * at once; on the loop sup_persist_queue queues it on the commit queue's
 * record lane (sup_record_push: numbered, written one at a time in order,
 * beside commits), and the recovery waits for its answer where a message
 * would carry the generation (sup_recovery.c, invariant 1).
 *
 * Single-threaded: the loop's, except the work halves of records and GOOD
 * marks (sup_record_fn work, sup_mark_store), which the commit queue runs
 * on its threads touching only the store, the state directory and the job.
 */
#include "sup_int.h"

#include "ft_bug.h"
#include "ft_err.h"
#include "sup_commitq.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- persisted state ------------------------------------------------------ */

/* The run-state record's text (malloc'd; NULL: out of memory). */
static char *state_text(sup *s, const char *status) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddNumberToObject(o, "gen", (double)s->gen);
  cJSON_AddStringToObject(o, "status", status);
  cJSON *q = cJSON_AddArrayToObject(o, "quarantined");
  for (int n = 0; n < s->nnodes; n++)
    if (s->nodes[n].role == SUP_ROLE_QUARANTINED)
      cJSON_AddItemToArray(q, cJSON_CreateNumber(n));
  cJSON_AddNumberToObject(o, "restarts", s->restarts);
  cJSON *sk = cJSON_AddArrayToObject(o, "skips");
  for (int i = 0; i < s->nskips; i++) {
    cJSON *r = cJSON_CreateArray();
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)s->skips[i].first));
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)s->skips[i].end));
    cJSON_AddItemToArray(sk, r);
  }
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

/* The run state's writes, on whichever thread writes records: the
 * generation also where a rebuilt catalog cannot lose it (sup_seal.c),
 * then the catalog record. */
static int state_write(sup *s, uint64_t gen, const char *key, const char *txt) {
  int rc = sup_gen_floor_write(s, gen);
  return rc == FT_OK ? ckpt_store_put_meta(s->store, key, txt) : rc;
}

int sup_persist(sup *s, const char *status) {
  char key[256];
  snprintf(key, sizeof key, "%s/state", s->rf.run);
  char *txt = state_text(s, status);
  if (!txt)
    return ft_err_set(FT_ENOMEM, "out of memory");
  int rc = state_write(s, s->gen, key, txt);
  free(txt);
  if (rc == FT_OK && s->gen > s->gen_recorded)
    s->gen_recorded = s->gen;
  return rc;
}

/* ---- records: the record lane ----------------------------------------------- */

sup_pending_ckpt *sup_record_new(sup_record_fn work, sup_record_fn then, const char *what) {
  sup_pending_ckpt *p = calloc(1, sizeof *p);
  if (!p) /* a write the recovery waits for cannot be left out */
    FT_BUG("out of memory queueing a record (%s)", what);
  p->rec.work = work;
  p->rec.then = then;
  snprintf(p->rec.what, sizeof p->rec.what, "%s", what);
  return p;
}

/* A record answered, on the loop (in order): its then, then whatever waits. */
void sup_record_answered(sup *s, sup_pending_ckpt *p) {
  if (p->rec.gen > s->gen_recorded)
    s->gen_recorded = p->rec.gen;
  if (p->rec.then)
    p->rec.then(s, p);
  else if (p->rc)
    fprintf(stderr, "supervise: cannot persist %s: %s\n", p->rec.what, p->why);
  if (s->hooks.recorded) /* the recovery, waiting for records (sup_main.c wires it) */
    s->hooks.recorded(s, p->rec.seq);
}

uint64_t sup_record_push(sup *s, sup_pending_ckpt *p) {
  uint64_t seq = p->rec.seq = ++s->rec_queued;
  if (s->commitq) {
    sup_commitq_push(s->commitq, p); /* reported by cq_done */
    return seq;
  }
  p->rec.work(s, p); /* no queue: no thread to write it */
  sup_record_answered(s, p);
  sup_pending_free(p);
  return seq;
}

/* A catalog record (put_meta), on the record lane. */
static void meta_work(sup *s, sup_pending_ckpt *p) {
  p->rc = p->rec.gen ? state_write(s, p->rec.gen, p->rec.key, p->rec.text)
                     : ckpt_store_put_meta(s->store, p->rec.key, p->rec.text);
  if (p->rc)
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
}

static uint64_t meta_push(sup *s, const char *key, char *text, uint64_t gen, const char *what) {
  sup_pending_ckpt *p = sup_record_new(meta_work, NULL, what);
  p->rec.key = strdup(key);
  p->rec.text = text;
  p->rec.gen = gen;
  if (!p->rec.key || !text) {
    p->rec.work = NULL; /* said as a write that failed, in order */
    p->rc = FT_ENOMEM;
    snprintf(p->why, sizeof p->why, "out of memory");
    p->rec.seq = ++s->rec_queued;
    sup_record_answered(s, p);
    sup_pending_free(p);
    return s->rec_queued;
  }
  return sup_record_push(s, p);
}

uint64_t sup_record_meta(sup *s, const char *key, const char *text, const char *what) {
  return meta_push(s, key, text ? strdup(text) : NULL, 0, what);
}

uint64_t sup_persist_queue(sup *s, const char *status, const char *what) {
  char key[256];
  snprintf(key, sizeof key, "%s/state", s->rf.run);
  return meta_push(s, key, state_text(s, status), s->gen, what);
}

int sup_persist_load(sup *s, uint64_t *gen, char **status, int *restarts) {
  char key[256], *txt = NULL;
  snprintf(key, sizeof key, "%s/state", s->rf.run);
  *status = NULL;
  int rc = ckpt_store_get_meta(s->store, key, &txt);
  if (rc)
    return rc;
  cJSON *o = cJSON_Parse(txt);
  free(txt);
  if (!o)
    return ft_err_set(FT_EFORMAT, "catalog key sup/%s is not JSON", key);
  cJSON *g = cJSON_GetObjectItem(o, "gen"), *st = cJSON_GetObjectItem(o, "status");
  cJSON *r = cJSON_GetObjectItem(o, "restarts"), *q = cJSON_GetObjectItem(o, "quarantined");
  if (!cJSON_IsNumber(g) || !cJSON_IsString(st) || !cJSON_IsNumber(r)) {
    cJSON_Delete(o);
    return ft_err_set(FT_EFORMAT, "catalog key sup/%s lacks gen/status/restarts", key);
  }
  *gen = (uint64_t)g->valuedouble;
  *restarts = (int)r->valuedouble;
  *status = strdup(st->valuestring);
  cJSON *it;
  cJSON_ArrayForEach(it, q) {
    int n = cJSON_IsNumber(it) ? (int)it->valuedouble : -1;
    if (n >= 0 && n < s->nnodes)
      s->nodes[n].role = SUP_ROLE_QUARANTINED;
  }
  /* skip ranges (absent in states written before rollbacks existed) */
  s->nskips = 0;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "skips")) {
    cJSON *f = cJSON_GetArrayItem(it, 0), *e = cJSON_GetArrayItem(it, 1);
    if (!cJSON_IsNumber(f) || !cJSON_IsNumber(e) ||
        sup_rollback_skips_add(s->skips, &s->nskips, FT_WIRE_MAX_SKIPS, (int64_t)f->valuedouble,
                               (int64_t)e->valuedouble)) {
      cJSON_Delete(o);
      return ft_err_set(FT_EFORMAT, "catalog key sup/%s: bad skip range", key);
    }
  }
  cJSON_Delete(o);
  return *status ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
}

/* ---- sending ---------------------------------------------------------------- */

int sup_send(sup *s, sup_conn *c, ft_msg *m, uint64_t gen) {
  snprintf(m->run, sizeof m->run, "%s", s->rf.run);
  m->gen = gen;
  int rc = sup_conn_send(c, m);
  if (rc)
    fprintf(stderr, "supervise: cannot encode %s: %s\n", ft_msg_type_name(m->type),
            ft_err_detail());
  return rc;
}

sup_conn *sup_host_conn(const sup *s, int n) {
  const sup_node *nd = &s->nodes[n];
  if (!nd->agent)
    return NULL;
  for (int j = 0; j < s->G; j++)
    if (!sup_conn_kid_open(nd->agent, nd->w[j].conn, (uint32_t)j))
      return NULL;
  return nd->agent;
}

void sup_stop_worker(sup *s, sup_worker *w, ft_stop_reason why, const char *detail) {
  if (!w->conn)
    return;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STOP);
  m.stop.reason = why;
  m.stop.detail = detail;
  sup_send(s, w->conn, &m, w->gen);
  sup_conn *c = w->conn;
  sup_conn_close(c, "", 1); /* orderly: on_close clears w->conn */
}

/* Its shard manifests (~1.7 million chunk references at 16,384 ranks: a
 * few hundred ms to free). */
void sup_pending_free_shards(sup_pending_ckpt *p) {
  for (int r = 0; p->shards && r < p->world; r++)
    ckpt_shard_free(p->shards[r]);
  free(p->shards);
  p->shards = NULL;
}

void sup_pending_free(sup_pending_ckpt *p) {
  sup_pending_free_shards(p);
  free(p->rec.key);
  free(p->rec.text);
  free(p->rec.bad);
  free(p->listed);
  cJSON_Delete(p->rec.ev);
  free(p->state);
  free(p->config);
  free(p->metrics);
  free(p);
}

void sup_pending_clear(sup *s) {
  while (s->run.pending) {
    sup_pending_ckpt *p = s->run.pending;
    s->run.pending = p->next;
    sup_pending_free(p);
  }
}

/* A GOOD mark (mark_good job), on the store lane's thread. */
void sup_mark_store(sup *s, sup_pending_ckpt *p) {
  p->rc = ckpt_store_set_state_from(s->store, s->rf.run, p->step, CKPT_COMMITTED, CKPT_GOOD);
  if (p->rc == FT_ESTATE || p->rc == FT_ENOENT) {
    p->superseded = 1; /* BAD meanwhile, GOOD already, or never committed */
    p->rc = FT_OK;
  } else if (p->rc) {
    snprintf(p->why, sizeof p->why, "%s", ft_err_detail());
  }
}

void sup_mark_report(sup *s, const sup_pending_ckpt *p) {
  if (p->superseded)
    return;
  if (p->rc) {
    sup_event_mark_failed(s, p->step, "GOOD", p->why);
    return;
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)p->step);
  cJSON_AddNumberToObject(f, "at_step", (double)p->at_step);
  sup_events_emit(s->ev, "checkpoint_good", f,
                  "step %" PRId64 ": no loss fault in the %d steps after it", p->step,
                  s->rf.watchdog.spike_window);
}

void sup_mark_good(sup *s, int64_t step, int64_t at_step) {
  sup_pending_ckpt *p = calloc(1, sizeof *p);
  if (!p) {
    fprintf(stderr, "supervise: out of memory marking step %" PRId64 " GOOD\n", step);
    return;
  }
  p->mark_good = 1;
  p->step = step;
  p->at_step = at_step;
  p->level = CKPT_LEVEL_DURABLE; /* the store lane, behind its step's commit */
  if (s->commitq) {
    sup_commitq_push(s->commitq, p);
    return;
  }
  sup_mark_store(s, p);
  sup_mark_report(s, p);
  sup_pending_free(p);
}

static void add_addr(char *list, size_t cap, const char *addr) {
  size_t n = strlen(list);
  if (!addr[0] || n + strlen(addr) + 2 > cap)
    return;
  snprintf(list + n, cap - n, "%s%s", n ? "," : "", addr);
}

/* FNV-1a of a buddy list, never 0 (0: nothing sent yet). */
static uint64_t list_hash(const char *list) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)list; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return h | 1;
}

void sup_send_buddies(sup *s) {
  for (int p = 0; p < s->ngang; p++)
    for (int j = 0; j < s->G; j++) {
      sup_worker *w = &s->nodes[s->gang[p]].w[j];
      if (!w->conn || w->gen != s->gen || !w->replica[0])
        continue;
      char list[FT_WIRE_MAX_ADDRS + 1] = "";
      if (s->ngang > 1) {
        const sup_worker *next = &s->nodes[s->gang[(p + 1) % s->ngang]].w[j];
        if (next->conn)
          add_addr(list, sizeof list, next->replica);
      }
      for (int n = 0; n < s->nnodes; n++) {
        const sup_worker *sp = &s->nodes[n].w[j];
        if (s->nodes[n].role == SUP_ROLE_SPARE && sp->conn && sp->hello)
          add_addr(list, sizeof list, sp->replica);
      }
      uint64_t h = list_hash(list);
      if (h == w->buddies_h)
        continue;
      ft_msg m;
      ft_msg_init(&m, FT_MSG_REPLICA);
      m.replica.addrs = list;
      if (sup_send(s, w->conn, &m, s->gen) == 0)
        w->buddies_h = h;
    }
}

/* ---- stacks, logs, the worker program ----------------------------------------- */

/* How a stack is asked for: a worker we launched ourselves (the local
 * launcher: its HELLO's pid is the process we started) gets SIGUSR1 on its
 * main thread, which is its training thread (tgkill(pid, pid):
 * worker/stackdump.c says why not to the process). With the command, ssh
 * and slurm launchers the pid is sh's, ssh's or srun's, on which SIGUSR1
 * would be fatal: such a worker gets a DUMP message on its connection
 * instead, which its reader thread turns into the same tgkill from inside;
 * its node is marked dump_asked, so the recovery's stop sends it no SIGTERM
 * (ssh would die at once and take the log's pipe with it, srun would
 * SIGKILL the task): the STOP behind the DUMP on the same connection ends
 * the worker after its dump, and the grace timer's SIGKILL is the
 * backstop. Neither a signal nor a send blocks the loop (sup_conn_send
 * queues what the socket does not take). */
int sup_ask_stack(sup *s, sup_worker *w) {
  if (!w->alive || !w->hello)
    return 0;
  if (!s->command_launcher && !s->agent_mode) /* under an agent, w->pid is the agent's */
    return w->pid > 0 && syscall(SYS_tgkill, w->pid, w->pid, SIGUSR1) == 0;
  if (!w->conn)
    return 0;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_DUMP);
  if (sup_send(s, w->conn, &m, w->gen) != FT_OK)
    return 0;
  s->nodes[w->node].dump_asked = 1;
  return 1;
}

void sup_node_log_path(const sup *s, int n, int j, char *buf, size_t size) {
  if (s->node_step)
    snprintf(buf, size, "%s/logs/node%d.log", s->state_dir, n);
  else
    snprintf(buf, size, "%s/logs/node%d.slot%d.log", s->state_dir, n, j);
}

void sup_default_worker(char *out, size_t n) {
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) {
    snprintf(out, n, "worker");
    return;
  }
  exe[k] = 0;
  snprintf(out, n, "%s/worker", dirname(exe));
}

/* ---- the doctor's verdict, as the gang's choice reads it ----------------------- */

int sup_doctor_cleared(const sup *s, const sup_worker *w) {
  return !s->rf.doctor.on_join || w->doctor == SUP_DOCTOR_CLEARED;
}

void sup_doctor_reset(sup_worker *w) {
  w->doctor = SUP_DOCTOR_NONE;
  w->doctor_again = 0;
  w->dhash[0] = w->dplat[0] = 0;
}

/* ---- names -------------------------------------------------------------------- */

const char *sup_fault_kind_name(sup_fault_kind k) {
  static const char *const names[SUP_FAULT_KINDS] = {
      [SUP_FAULT_PROCESS_EXIT] = "process_exit",
      [SUP_FAULT_HANG] = "hang",
      [SUP_FAULT_NODE_LOST] = "node_lost",
      [SUP_FAULT_NODE_UNREACHABLE] = "node_unreachable",
      [SUP_FAULT_LAUNCH_FAILED] = "launch_failed",
      [SUP_FAULT_LOST_SUPERVISOR] = "lost_supervisor",
      [SUP_FAULT_PEER_MISBEHAVED] = "peer_misbehaved",
      [SUP_FAULT_RESTORE_HASH] = "restore_hash",
      [SUP_FAULT_STORE_ERROR] = "store_error",
      [SUP_FAULT_SUPERVISOR_ISOLATED] = "supervisor_isolated",
      [SUP_FAULT_WORKER_UNKILLABLE] = "worker_unkillable",
      [SUP_FAULT_XID] = "xid",
      [SUP_FAULT_COLLECTIVE_FAILURE] = "collective_failure",
      [SUP_FAULT_DOCTOR] = "doctor",
      [SUP_FAULT_STORAGE_HANG] = "storage_hang",
      [SUP_FAULT_NETWORK_HANG] = "network_hang",
      [SUP_FAULT_GANG_HANG] = "gang_hang",
      [SUP_FAULT_LOSS_SPIKE] = "loss_spike",
      [SUP_FAULT_NAN] = "nan",
      [SUP_FAULT_SDC] = "sdc",
  };
  return k >= 0 && k < SUP_FAULT_KINDS && names[k] ? names[k] : "unknown";
}
