/*
 * sup_shardq: the workers' SHARD_SAVED envelopes parsed off the loop.
 *
 * Why: each rank's report carries its shard manifest as JSON, ~21 KB per
 * rank for a 7B-parameter model, so a checkpoint of 16,384 ranks is ~350 MB
 * of JSON. Parsed on the loop as the reports came (tests/scale), that was
 * seconds of loop time per checkpoint during which no heartbeat was read,
 * no STOP sent and no silent rank detected: detection slipped by the length
 * of the parse. Here the loop only copies the text; one thread parses the
 * reports in arrival order and hands each result back through a pipe, and
 * the loop files it into its checkpoint (sup_run.c, on_shard_parsed) as it
 * filed the message before.
 *
 * Model: a FIFO of sup_shard_job waiting for the thread, the thread's
 * current job, and a FIFO of parsed jobs (done) that the loop drains on
 * the pipe's event (sup_wake), so
 * results reach the loop in push order. A result carries the generation its
 * report came in; the loop drops those of a generation that has ended (its
 * pending checkpoints were cleared with it). free stops the thread after
 * the job in flight and frees whatever was not handed to the loop.
 */
#include "sup_shardq.h"
#include "sup_wake.h"

#include "ft_err.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sup_shardq {
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sup_shard_job *waiting, **waiting_tail;
  sup_shard_job *done, **done_tail;
  int n; /* jobs queued, in flight or parsed, not yet handed to done */
  int stop;
  sup_wake wake; /* the thread's word to the loop: jobs parsed */
  sup_shardq_fn done_fn;
  void *ud;
};

void sup_shard_job_free(sup_shard_job *j) {
  if (!j)
    return;
  free(j->text);
  ckpt_shard_free(j->sh);
  free(j->state);
  free(j->config);
  free(j->metrics);
  free(j);
}

/* A member as text: a string's value, anything else (not null) printed. */
static char *member_text(cJSON *o, const char *name) {
  cJSON *v = cJSON_GetObjectItem(o, name);
  if (cJSON_IsString(v))
    return strdup(v->valuestring);
  if (v && !cJSON_IsNull(v))
    return cJSON_PrintUnformatted(v);
  return NULL;
}

void sup_shard_parse(sup_shard_job *j) {
  j->loss = NAN;
  j->level = CKPT_LEVEL_DURABLE;
  j->why[0] = 0;
  cJSON *env = j->text ? cJSON_Parse(j->text) : NULL;
  char *shtxt = env ? member_text(env, "shard") : NULL;
  if (!shtxt) {
    snprintf(j->why, sizeof j->why, "SHARD_SAVED envelope without a \"shard\"");
    goto out;
  }
  int rc = ckpt_shard_from_json(shtxt, &j->sh);
  free(shtxt);
  if (rc) {
    snprintf(j->why, sizeof j->why, "bad shard manifest: %s", ft_err_detail());
    goto out;
  }
  if (ckpt_shard_step(j->sh) != j->step || ckpt_shard_rank(j->sh) != j->rank) {
    snprintf(j->why, sizeof j->why, "shard manifest is of step %" PRId64 " rank %d",
             ckpt_shard_step(j->sh), ckpt_shard_rank(j->sh));
    ckpt_shard_free(j->sh);
    j->sh = NULL;
    goto out;
  }
  cJSON *lv = cJSON_GetObjectItem(env, "level");
  if (cJSON_IsString(lv) && !strcmp(lv->valuestring, "memory"))
    j->level = CKPT_LEVEL_MEMORY;
  j->state = member_text(env, "state");
  j->config = member_text(env, "config");
  j->metrics = member_text(env, "metrics");
  cJSON *l = cJSON_GetObjectItem(env, "loss");
  if (cJSON_IsNumber(l))
    j->loss = l->valuedouble;
out:
  cJSON_Delete(env);
  free(j->text);
  j->text = NULL;
}

static void *thread_main(void *arg) {
  sup_shardq *q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->stop && !q->waiting)
      pthread_cond_wait(&q->cv, &q->mu);
    if (q->stop)
      break;
    sup_shard_job *j = q->waiting;
    q->waiting = j->next;
    if (!q->waiting)
      q->waiting_tail = &q->waiting;
    j->next = NULL;
    pthread_mutex_unlock(&q->mu);
    sup_shard_parse(j);
    pthread_mutex_lock(&q->mu);
    *q->done_tail = j;
    q->done_tail = &j->next;
    sup_wake_signal(&q->wake);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* The loop: every parsed job to done_fn, in order. */
static void on_parsed(evutil_socket_t fd, short what, void *arg) {
  (void)what;
  sup_shardq *q = arg;
  sup_wake_drain(fd);
  pthread_mutex_lock(&q->mu);
  sup_shard_job *list = q->done;
  q->done = NULL;
  q->done_tail = &q->done;
  pthread_mutex_unlock(&q->mu);
  while (list) {
    sup_shard_job *j = list;
    list = j->next;
    j->next = NULL;
    pthread_mutex_lock(&q->mu);
    q->n--;
    pthread_mutex_unlock(&q->mu);
    q->done_fn(q->ud, j);
  }
}

int sup_shardq_new(struct event_base *base, sup_shardq_fn done, void *ud, sup_shardq **out) {
  *out = NULL;
  sup_shardq *q = calloc(1, sizeof *q);
  if (!q)
    return ft_err_set(FT_ENOMEM, "out of memory");
  q->wake.fd[0] = q->wake.fd[1] = -1;
  q->waiting_tail = &q->waiting;
  q->done_tail = &q->done;
  q->done_fn = done;
  q->ud = ud;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  int rc = sup_wake_open(&q->wake, base, on_parsed, q, "shard queue");
  if (rc)
    goto fail;
  if (pthread_create(&q->th, NULL, thread_main, q)) {
    rc = ft_err_set(FT_EIO, "shard queue: cannot start its thread");
    goto fail;
  }
  q->started = 1;
  *out = q;
  return FT_OK;
fail:
  sup_shardq_free(q);
  return rc;
}

void sup_shardq_push(sup_shardq *q, sup_shard_job *j) {
  j->next = NULL;
  pthread_mutex_lock(&q->mu);
  *q->waiting_tail = j;
  q->waiting_tail = &j->next;
  q->n++;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

int sup_shardq_len(sup_shardq *q) {
  pthread_mutex_lock(&q->mu);
  int n = q->n;
  pthread_mutex_unlock(&q->mu);
  return n;
}

static void free_list(sup_shard_job *j) {
  while (j) {
    sup_shard_job *next = j->next;
    sup_shard_job_free(j);
    j = next;
  }
}

void sup_shardq_free(sup_shardq *q) {
  if (!q)
    return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (q->started)
    pthread_join(q->th, NULL);
  free_list(q->waiting);
  free_list(q->done);
  sup_wake_close(&q->wake);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  free(q);
}
