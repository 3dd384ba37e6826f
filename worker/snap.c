/*
 * snap: the trainer's checkpoints through ckptstore (see snap.h).
 *
 * Threads: the training thread calls snap_take/snap_drain/snap_restore; one
 * committer thread waits for submitted shards to become durable and commits
 * them in submission (= step) order. They share a FIFO of pending
 * checkpoints under one mutex.
 *
 * Staging: the engine's staging buffer holds this rank's shards of params,
 * adam_m and adam_v (engine_snapshot). It is in use from snap_take until
 * the committer has seen the shard durable; a snap_take that finds it in
 * use waits (back-pressure). With checkpoints K steps apart the previous one
 * is long durable by then, so in practice training waits only for its own
 * copy. When the engine's copy is still in flight (the CUDA engine copies
 * device -> pinned host on its own stream), snap_take does not wait for it:
 * the committer thread waits on the engine's fence, then submits the shard
 * to the store, so training goes on as soon as the copy is enqueued.
 */
#include "snap.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptstore.h"
#include "ft_err.h"
#include "ft_failpoint.h"

typedef struct pending {
  struct pending *next;
  ckpt_job *job;      /* NULL until submitted (after the fence) */
  engine_fence fence; /* when the staging bytes are in place */
  ckpt_part *parts;   /* kept for a submit from the committer */
  char (*names)[64];
  int nparts, rank, world;
  int memory_first; /* a persisted checkpoint reported at memory level first */
  ckpt_meta meta;   /* strings below are owned by this struct */
  char *run, *config, *state, *metrics;
} pending;

struct snap {
  ckpt_store *store;
  char run[128];
  snap_durable_fn on_durable; /* NULL: commit here */
  void *ud;
  int staging_busy;

  pthread_t committer;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pending *head, *tail;
  int inflight; /* submitted, not yet committed or failed */
  int stopping;
  int first_err;
  int last_err;           /* of the checkpoint completed last (FT_OK: it is durable) */
  char last_detail[512];  /* and its detail */
  snap_fault_fn on_fault; /* a failed checkpoint (NULL: printed only) */
  void *fault_ud;
  int memory_first;     /* snap_set_memory_first */
  int lossy_m, lossy_v; /* snap_set_moments: enum ckpt_lossy of each moment */
};

static int submit(snap *s, pending *p, int memory) {
  return memory ? ckpt_store_submit_memory(s->store, s->run, p->meta.step, p->rank, p->world,
                                           p->parts, p->nparts, &p->job)
                : ckpt_store_submit(s->store, s->run, p->meta.step, p->rank, p->world, p->parts,
                                    p->nparts, &p->job);
}

/* checkpoint.require memory: a persisted checkpoint's memory-level report,
 * before its write (p->job: the memory-only job, done here and replaced by
 * the write's). */
static int report_memory_first(snap *s, pending *p) {
  ckpt_shard *shard = NULL;
  int rc = ckpt_job_wait(p->job, &shard);
  if (rc == FT_OK) {
    ckpt_meta m = p->meta;
    m.level = CKPT_LEVEL_MEMORY;
    int r = s->on_durable(s->ud, &m, shard);
    if (r)
      fprintf(stderr, "worker: checkpoint at step %" PRId64 " (memory level): %s: %s\n",
              p->meta.step, ft_strerror(r), ft_err_detail());
  }
  ckpt_shard_free(shard);
  ckpt_job_free(p->job);
  p->job = NULL;
  return rc == FT_OK ? submit(s, p, 0) : rc;
}

static void pending_free(pending *p) {
  if (!p)
    return;
  ckpt_job_free(p->job);
  free(p->parts);
  free(p->names);
  free(p->run);
  free(p->config);
  free(p->state);
  free(p->metrics);
  free(p);
}

static void *committer_main(void *arg) {
  snap *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stopping)
      pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head)
      break;
    pending *p = s->head;
    pthread_mutex_unlock(&s->mu);

    ckpt_shard *shard = NULL;
    int rc = FT_OK;
    if (!p->job) { /* the engine's copy was in flight at snap_take */
      rc = p->fence.fn(p->fence.ud);
      if (rc == FT_OK)
        rc = submit(s, p, p->meta.level == CKPT_LEVEL_MEMORY || p->memory_first);
    }
    if (rc == FT_OK && p->memory_first)
      rc = report_memory_first(s, p);
    if (rc == FT_OK)
      rc = ckpt_job_wait(p->job, &shard);
    pthread_mutex_lock(&s->mu);
    s->staging_busy = 0; /* durable (or failed): the buffer is free */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    int written = rc == FT_OK; /* a failed write is the store's fault */
    char fail_detail[512] = "";
    /* a gang's persisted shard goes into the store as an object, and its
     * reference to the supervisor: the commit checks one object per rank */
    if (rc == FT_OK && s->on_durable && p->meta.level != CKPT_LEVEL_MEMORY &&
        (rc = ckpt_store_put_shard(s->store, shard)) != FT_OK)
      written = 0;
    if (rc == FT_OK)
      rc = s->on_durable ? s->on_durable(s->ud, &p->meta, shard)
                         : ckpt_store_commit(s->store, &p->meta, &shard, 1);
    if (rc) {
      fprintf(stderr, "worker: checkpoint at step %" PRId64 " failed: %s: %s\n", p->meta.step,
              ft_strerror(rc), ft_err_detail());
      snprintf(fail_detail, sizeof fail_detail, "%s", ft_err_detail());
      if (s->on_fault && !written)
        s->on_fault(s->fault_ud, p->meta.step, rc, ft_err_detail());
    }
    ckpt_shard_free(shard);

    pthread_mutex_lock(&s->mu);
    s->head = p->next;
    if (!s->head)
      s->tail = NULL;
    s->inflight--;
    if (rc && !s->first_err)
      s->first_err = rc;
    s->last_err = rc;
    snprintf(s->last_detail, sizeof s->last_detail, "%s", rc ? fail_detail : "");
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pending_free(p);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int snap_open(const char *uri, const char *run, int chunk_mib, int zstd_level, int full_every,
              snap_durable_fn on_durable, void *ud, snap **out) {
  *out = NULL;
  snap *s = calloc(1, sizeof *s);
  if (!s)
    return ft_err_set(FT_ENOMEM, "snap: out of memory");
  s->on_durable = on_durable;
  s->ud = ud;
  /* A gang's worker only writes chunks; the supervisor owns the catalog. */
  ckpt_store_opts o = {.chunk_mib = chunk_mib,
                       .zstd_level = zstd_level,
                       .full_every = full_every,
                       .shard_writer = on_durable != NULL};
  int rc = ckpt_store_open(uri, &o, &s->store);
  if (rc) {
    free(s);
    return rc;
  }
  snprintf(s->run, sizeof s->run, "%s", run);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->committer, NULL, committer_main, s)) {
    ckpt_store_free(s->store);
    free(s);
    return ft_err_set(FT_ENOMEM, "snap: cannot start the committer thread");
  }
  *out = s;
  return FT_OK;
}

int snap_set_moments(snap *s, ft_rf_moments moments) {
  switch (moments) {
  case FT_RF_MOMENTS_EXACT:
    s->lossy_m = s->lossy_v = CKPT_EXACT;
    return FT_OK;
  case FT_RF_MOMENTS_BF16:
    s->lossy_m = s->lossy_v = CKPT_LOSSY_BF16;
    return FT_OK;
  case FT_RF_MOMENTS_Q8:
    s->lossy_m = CKPT_LOSSY_Q8, s->lossy_v = CKPT_LOSSY_Q8LOG;
    return FT_OK;
  }
  return ft_err_set(FT_EINVAL, "checkpoint.moments: %d is not exact, bf16 or q8", (int)moments);
}

void snap_set_fault(snap *s, snap_fault_fn fn, void *ud) {
  pthread_mutex_lock(&s->mu);
  s->on_fault = fn;
  s->fault_ud = ud;
  pthread_mutex_unlock(&s->mu);
}

int snap_drain_last(snap *s) {
  pthread_mutex_lock(&s->mu);
  while (s->inflight > 0)
    pthread_cond_wait(&s->cv, &s->mu);
  int rc = s->last_err;
  if (rc)
    ft_err_set(rc, "%s", s->last_detail); /* on the caller's thread */
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int snap_drain(snap *s) {
  pthread_mutex_lock(&s->mu);
  while (s->inflight > 0)
    pthread_cond_wait(&s->cv, &s->mu);
  int rc = s->first_err;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void snap_free(snap *s) {
  if (!s)
    return;
  snap_drain(s);
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->committer, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  ckpt_store_free(s->store);
  free(s);
}

char *snap_state_json(const train_state *st) {
  char seq[24], rng[24];
  snprintf(seq, sizeof seq, "%" PRIu64, st->seq);
  snprintf(rng, sizeof rng, "%" PRIu64, st->rng);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "version", 1);
  cJSON_AddNumberToObject(o, "step", (double)st->step);
  cJSON_AddStringToObject(o, "seq", seq);
  cJSON_AddStringToObject(o, "rng", rng);
  cJSON_AddStringToObject(o, "config_hash", st->config_hash);
  cJSON *sk = cJSON_AddArrayToObject(o, "skips");
  for (int i = 0; i < st->nskips; i++) {
    cJSON *r = cJSON_CreateArray();
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)st->skips[i][0]));
    cJSON_AddItemToArray(r, cJSON_CreateNumber((double)st->skips[i][1]));
    cJSON_AddItemToArray(sk, r);
  }
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

static int state_from_json(const char *txt, train_state *st) {
  cJSON *o = cJSON_Parse(txt);
  int rc = FT_OK;
  const cJSON *v = cJSON_GetObjectItem(o, "version"), *step = cJSON_GetObjectItem(o, "step");
  const cJSON *seq = cJSON_GetObjectItem(o, "seq"), *rng = cJSON_GetObjectItem(o, "rng");
  const cJSON *h = cJSON_GetObjectItem(o, "config_hash");
  if (!o || !cJSON_IsNumber(v) || v->valueint != 1 || !cJSON_IsNumber(step) ||
      !cJSON_IsString(seq) || !cJSON_IsString(rng) || !cJSON_IsString(h)) {
    rc = ft_err_set(FT_EFORMAT, "checkpoint state is not a version-1 trainer state: %.200s",
                    txt ? txt : "(none)");
    goto out;
  }
  st->step = (int64_t)step->valuedouble;
  st->seq = strtoull(seq->valuestring, NULL, 10);
  const cJSON *sk = cJSON_GetObjectItem(o, "skips"); /* absent in older states */
  int n = cJSON_IsArray(sk) ? cJSON_GetArraySize(sk) : 0;
  free(st->skips);
  st->skips = n ? calloc((size_t)n, sizeof *st->skips) : NULL;
  st->nskips = 0;
  for (int i = 0; i < n && st->skips; i++) {
    const cJSON *r = cJSON_GetArrayItem(sk, i);
    if (cJSON_GetArraySize(r) != 2)
      continue;
    st->skips[st->nskips][0] = (int64_t)cJSON_GetArrayItem(r, 0)->valuedouble;
    st->skips[st->nskips][1] = (int64_t)cJSON_GetArrayItem(r, 1)->valuedouble;
    st->nskips++;
  }
  st->rng = strtoull(rng->valuestring, NULL, 10);
  snprintf(st->config_hash, sizeof st->config_hash, "%s", h->valuestring);
out:
  cJSON_Delete(o);
  return rc;
}

static char *xstrdup(const char *x) {
  return x ? strdup(x) : NULL;
}

int snap_take(snap *s, engine *e, int rank, int world, const train_state *st,
              const char *config_json, double loss, const char *metrics_json, int persist) {
  int rc = FT_OK, np = engine_nparts(e);
  if (!persist && !s->on_durable)
    return ft_err_set(FT_EINVAL, "snap: a memory-level checkpoint needs a gang (on_durable)");
  pthread_mutex_lock(&s->mu);
  while (s->staging_busy)
    pthread_cond_wait(&s->cv, &s->mu);
  s->staging_busy = 1;
  pthread_mutex_unlock(&s->mu);

  pending *p = calloc(1, sizeof *p);
  if (p) {
    p->parts = calloc((size_t)np, sizeof *p->parts);
    p->names = calloc((size_t)np, sizeof *p->names);
  }
  if (!p || !p->parts || !p->names) {
    rc = ft_err_set(FT_ENOMEM, "snap: out of memory");
    goto fail;
  }
  /* The copy training waits for (or, with a fence, only its enqueueing). */
  rc = engine_snapshot(e, p->parts, p->names, &p->fence);
  if (rc)
    goto fail;
  /* failpoint hang_in=checkpoint: the training thread stalls in the checkpoint */
  ft_failpoint_hang_here(FT_HANG_CHECKPOINT);
  for (int i = 0; persist && i < np; i++) /* the moments' form (checkpoint.moments) */
    if (!strncmp(p->parts[i].tensor, "adam_m/", 7))
      p->parts[i].lossy = s->lossy_m;
    else if (!strncmp(p->parts[i].tensor, "adam_v/", 7))
      p->parts[i].lossy = s->lossy_v;
  p->nparts = np;
  p->rank = rank;
  p->world = world;
  p->run = xstrdup(s->run);
  p->config = xstrdup(config_json);
  p->state = snap_state_json(st);
  p->metrics = xstrdup(metrics_json);
  p->meta = (ckpt_meta){.run = p->run,
                        .step = st->step,
                        .parent_step = -1,
                        .world = world,
                        .loss = loss,
                        .config_json = p->config,
                        .state_json = p->state,
                        .metrics_json = p->metrics,
                        .level = persist ? CKPT_LEVEL_DURABLE : CKPT_LEVEL_MEMORY};
  /* the parent, for a commit made here (standalone); in a gang the
   * supervisor commits and finds it itself, and this catalog listing on
   * every checkpoint (every step with persist_every) would be wasted */
  int64_t prev;
  if (!s->on_durable && ckpt_store_latest(s->store, s->run, st->step - 1, &prev) == FT_OK)
    p->meta.parent_step = prev;
  p->memory_first = persist && s->memory_first;
  if (!p->fence.fn) {
    rc = submit(s, p, !persist || p->memory_first);
    if (rc)
      goto fail;
  }

  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = p;
  else
    s->head = p;
  s->tail = p;
  s->inflight++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return FT_OK;

fail:
  if (p && p->fence.fn)
    p->fence.fn(p->fence.ud); /* never leave a copy running into freed state */
  pending_free(p);
  pthread_mutex_lock(&s->mu);
  s->staging_busy = 0;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void snap_set_memory_first(snap *s, int on) {
  s->memory_first = on && s->on_durable;
}

ckpt_store *snap_store(snap *s) {
  return s->store;
}

int snap_keep_in_memory(snap *s, uint64_t max_bytes) {
  return ckpt_store_keep_in_memory(s->store, max_bytes);
}

int snap_prefetch(snap *s, int64_t step, const int *cancel, uint64_t *bytes) {
  *bytes = 0;
  int rc = ckpt_store_refresh(s->store);
  if (rc == FT_OK && step < 0) { /* the newest the catalog knows (a resumed run) */
    rc = ckpt_store_latest(s->store, s->run, INT64_MAX, &step);
    if (rc == FT_ENOENT)
      return FT_OK;
  }
  return rc ? rc : ckpt_store_prefetch(s->store, s->run, step, cancel, bytes);
}

int snap_world(snap *s, int64_t step, int *world) {
  ckpt_manifest *man = NULL;
  int rc = ckpt_store_refresh(s->store);
  if (rc == FT_OK) /* the record alone: no shard object is read */
    rc = ckpt_store_load_lazy(s->store, s->run, step, &man);
  if (rc == FT_OK)
    *world = ckpt_manifest_info(man)->world;
  ckpt_manifest_free(man);
  return rc;
}

void snap_read_stats(snap *s, ckpt_read_stats *st) {
  ckpt_store_read_stats(s->store, st);
}

int snap_latest(snap *s, int64_t *step) {
  return ckpt_store_latest(s->store, s->run, INT64_MAX, step);
}

static int restore_from(snap *s, ckpt_manifest *man, engine *e, train_state *st,
                        char **config_json) {
  /* training goes on from this checkpoint, not from the last shard this
   * process wrote (a rollback): the next checkpoint stands alone */
  ckpt_store_delta_reset(s->store);
  const ckpt_info *in = ckpt_manifest_info(man);
  if (in->lossy)
    fprintf(stderr,
            "worker: step %" PRId64 " was stored with lossy optimizer moments "
            "(checkpoint.moments): training goes on from it, but not bit-exactly\n",
            in->step);
  int rc = state_from_json(ckpt_manifest_state_json(man), st);
  if (rc == FT_OK)
    rc = engine_restore(e, s->store, man);
  if (rc == FT_OK)
    *config_json = xstrdup(ckpt_manifest_config_json(man));
  ckpt_manifest_free(man);
  return rc;
}

int snap_restore(snap *s, int64_t step, engine *e, train_state *st, char **config_json) {
  ckpt_manifest *man = NULL;
  *config_json = NULL;
  /* a worker that lives on from an older generation (in-process rejoin)
   * sees the catalog as of its open: catch up with the supervisor's commits */
  int rc = ckpt_store_refresh(s->store);
  /* the manifest without its shard objects: the engine reads those that
   * hold its ranges (shardmap_restore) */
  if (rc == FT_OK)
    rc = ckpt_store_load_lazy(s->store, s->run, step, &man);
  if (rc)
    return rc;
  return restore_from(s, man, e, st, config_json);
}

int snap_restore_json(snap *s, int64_t step, const char *manifest_json, engine *e, train_state *st,
                      char **config_json) {
  ckpt_manifest *man = NULL;
  *config_json = NULL;
  int rc = ckpt_manifest_from_json(manifest_json, &man);
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "%s", ft_err_detail());
    return ft_err_set(rc, "the manifest of step %" PRId64 " from the supervisor: %s", step, why);
  }
  const ckpt_info *in = ckpt_manifest_info(man);
  if (in->step != step || strcmp(in->run, s->run) != 0) {
    rc = ft_err_set(FT_EINVAL,
                    "the supervisor's manifest is of %s step %" PRId64 ", not %s step %" PRId64,
                    in->run, in->step, s->run, step);
    ckpt_manifest_free(man);
    return rc;
  }
  return restore_from(s, man, e, st, config_json);
}
