/*
 * agent_ckpt: a host's checkpoint reports made one (see agent_ckpt.h).
 *
 * A job is one checkpoint's frames, one per slot (NULL where a slot sent
 * none), and whether it is whole (every slot's is there: the thread tries
 * to make one of it). Jobs go to the thread in a FIFO (todo) and come back
 * in another (done), the thread's word through a pipe; the loop drains done
 * in order. A frame the agent lets go at once still goes through the FIFO,
 * as a job of its own, so it never overtakes an earlier frame of its slot.
 */
#include "agent_ckpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptstore.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_wire.h"

typedef struct job {
  struct job *next;
  uint64_t gen;
  int64_t step;
  uint8_t **frames; /* per slot, as it came; NULL: none */
  size_t *lens;
  int whole;   /* every slot's report is here */
  char *env;   /* the result: the host's envelope (NULL: relay the frames) */
  uint32_t lo; /* ... and its first rank */
} job;

struct agent_ckpt {
  char *uri;
  uint32_t node, nslots;
  uint64_t hold_ns;
  ckpt_store *store; /* the thread's, opened at its first whole job */
  int store_failed;  /* could not be opened: every report goes as it came
                        (the thread sets it; atomic) */
  job *cur;          /* being gathered */
  uint32_t ncur;
  uint64_t cur_first_ns;
  int queued; /* jobs pushed and not yet drained */
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job *todo, **todo_tail, *done, **done_tail;
  int stop;
  int pipe[2];
};

static void job_free(job *j, uint32_t nslots) {
  if (!j)
    return;
  for (uint32_t k = 0; j->frames && k < nslots; k++)
    free(j->frames[k]);
  free(j->frames);
  free(j->lens);
  free(j->env);
  free(j);
}

static job *job_new(agent_ckpt *c, uint64_t gen, int64_t step) {
  job *j = calloc(1, sizeof *j);
  if (!j)
    return NULL;
  j->gen = gen;
  j->step = step;
  j->frames = calloc(c->nslots, sizeof *j->frames);
  j->lens = calloc(c->nslots, sizeof *j->lens);
  if (!j->frames || !j->lens) {
    job_free(j, c->nslots);
    return NULL;
  }
  return j;
}

/* ---- the thread ---------------------------------------------------------- */

/* Makes one of whole job j: its G references, the host's leaf in the store,
 * the host's envelope (j->env). 0, or -1 with why ("" : nothing to log: a
 * memory-level checkpoint, shards without objects). */
static int make_one(agent_ckpt *c, job *j, char *why, size_t whylen) {
  uint32_t n = c->nslots;
  ckpt_shard **refs = calloc(n, sizeof *refs);
  cJSON *lo_env = NULL;
  int lo = -1, rc = -1;
  why[0] = 0;
  for (uint32_t k = 0; refs && k < n; k++) {
    ft_msg m;
    if (ft_wire_decode(j->frames[k], j->lens[k], &m)) {
      snprintf(why, whylen, "slot %u: %s", (unsigned)k, ft_err_detail());
      goto out;
    }
    cJSON *e = m.shard_saved.manifest ? cJSON_Parse(m.shard_saved.manifest) : NULL;
    int rank = (int)m.shard_saved.rank;
    ft_msg_release(&m);
    cJSON *lv = e ? cJSON_GetObjectItem(e, "level") : NULL;
    cJSON *sh = e ? cJSON_GetObjectItem(e, "shard") : NULL;
    if (cJSON_IsString(lv) && !strcmp(lv->valuestring, "memory")) {
      cJSON_Delete(e); /* in memory only: no shard object to name */
      goto out;
    }
    if (!cJSON_IsString(sh) || ckpt_shard_from_json(sh->valuestring, &refs[k])) {
      snprintf(why, whylen, "slot %u: its report holds no shard manifest%s%s", (unsigned)k,
               cJSON_IsString(sh) ? ": " : "", cJSON_IsString(sh) ? ft_err_detail() : "");
      cJSON_Delete(e);
      goto out;
    }
    if (!ckpt_shard_is_ref(refs[k]) || ckpt_shard_nranks(refs[k]) != 1) {
      cJSON_Delete(e); /* the shard itself, not a stored object's name */
      goto out;
    }
    if (ckpt_shard_rank(refs[k]) != rank || ckpt_shard_step(refs[k]) != j->step) {
      snprintf(why, whylen, "slot %u: a report of rank %d step %" PRId64 " holds rank %d's",
               (unsigned)k, rank, j->step, ckpt_shard_rank(refs[k]));
      cJSON_Delete(e);
      goto out;
    }
    if (lo < 0 || rank < lo) {
      cJSON_Delete(lo_env);
      lo_env = e, lo = rank;
    } else {
      cJSON_Delete(e);
    }
  }
  if (!refs) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  if (!c->store && !c->store_failed) {
    ckpt_store_opts o = {.shard_writer = 1, .threads = 1};
    if (ckpt_store_open(c->uri, &o, &c->store)) {
      __atomic_store_n(&c->store_failed, 1, __ATOMIC_RELAXED);
      snprintf(why, whylen,
               "cannot open the store %s: %s; its reports go to the supervisor "
               "one by one from now on",
               c->uri, ft_err_detail());
      goto out;
    }
  }
  if (!c->store)
    goto out;
  ckpt_shard *h = NULL;
  int64_t fp_node;
  if (ft_failpoint("agent_host_ref_fail", &fp_node) && fp_node == (int64_t)c->node) {
    snprintf(why, whylen, "failpoint agent_host_ref_fail");
    goto out;
  }
  if (ckpt_store_put_host(c->store, refs, (int)n, &h)) {
    snprintf(why, whylen, "%s", ft_err_detail());
    goto out;
  }
  char *ref = ckpt_shard_report_to_json(h);
  j->lo = (uint32_t)ckpt_shard_rank(h);
  ckpt_shard_free(h);
  cJSON *s = ref ? cJSON_CreateString(ref) : NULL;
  free(ref);
  if (!s || !cJSON_ReplaceItemInObject(lo_env, "shard", s)) {
    cJSON_Delete(s);
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  j->env = cJSON_PrintUnformatted(lo_env);
  if (!j->env || strlen(j->env) > FT_WIRE_MAX_MANIFEST) {
    snprintf(why, whylen, j->env ? "the host's report is larger than a frame" : "out of memory");
    free(j->env);
    j->env = NULL;
    goto out;
  }
  rc = 0;
out:
  for (uint32_t k = 0; refs && k < n; k++)
    ckpt_shard_free(refs[k]);
  free(refs);
  cJSON_Delete(lo_env);
  return rc;
}

static void *thread_main(void *arg) {
  agent_ckpt *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && !c->todo)
      pthread_cond_wait(&c->cv, &c->mu);
    if (c->stop)
      break;
    job *j = c->todo;
    c->todo = j->next;
    if (!c->todo)
      c->todo_tail = &c->todo;
    j->next = NULL;
    pthread_mutex_unlock(&c->mu);
    char why[1024];
    if (j->whole && make_one(c, j, why, sizeof why) && why[0])
      fprintf(stderr,
              "ftagent: node %u: the checkpoint of step %" PRId64
              " goes to the supervisor rank by rank: %s\n",
              c->node, j->step, why);
    pthread_mutex_lock(&c->mu);
    *c->done_tail = j;
    c->done_tail = &j->next;
    char b = 1;
    while (write(c->pipe[1], &b, 1) < 0 && errno == EINTR)
      ; /* EAGAIN: the pipe is full, a wake is pending anyway */
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- the loop's side ----------------------------------------------------- */

int agent_ckpt_new(const char *store, uint32_t node, uint32_t nslots, uint64_t hold_ns,
                   agent_ckpt **out) {
  *out = NULL;
  agent_ckpt *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "out of memory");
  c->node = node;
  c->nslots = nslots;
  c->hold_ns = hold_ns;
  c->pipe[0] = c->pipe[1] = -1;
  c->todo_tail = &c->todo;
  c->done_tail = &c->done;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (store && !(c->uri = strdup(store))) {
    agent_ckpt_free(c);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  if (pipe2(c->pipe, O_CLOEXEC | O_NONBLOCK)) {
    int e = errno;
    agent_ckpt_free(c);
    return ft_err_set(FT_EIO, "pipe: %s", strerror(e));
  }
  /* the thread (and the store's, started from it) takes no signal: the
   * agent reads its SIGCHLD and SIGTERM from a signalfd, and a thread
   * with them unblocked would swallow them (a worker never reaped) */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int bad = c->uri && pthread_create(&c->th, NULL, thread_main, c);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (bad) {
    agent_ckpt_free(c);
    return ft_err_set(FT_ENOMEM, "cannot start the agent's checkpoint thread");
  }
  c->started = c->uri != NULL;
  *out = c;
  return FT_OK;
}

void agent_ckpt_free(agent_ckpt *c) {
  if (!c)
    return;
  if (c->started) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
  }
  for (job *j = c->todo, *nx; j; j = nx) {
    nx = j->next;
    job_free(j, c->nslots);
  }
  for (job *j = c->done, *nx; j; j = nx) {
    nx = j->next;
    job_free(j, c->nslots);
  }
  job_free(c->cur, c->nslots);
  ckpt_store_free(c->store);
  for (int k = 0; k < 2; k++)
    if (c->pipe[k] >= 0)
      close(c->pipe[k]);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->uri);
  free(c);
}

int agent_ckpt_fd(const agent_ckpt *c) {
  return c->pipe[0];
}

static void push(agent_ckpt *c, job *j) {
  c->queued++;
  pthread_mutex_lock(&c->mu);
  *c->todo_tail = j;
  c->todo_tail = &j->next;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void agent_ckpt_release(agent_ckpt *c) {
  if (!c->cur)
    return;
  push(c, c->cur);
  c->cur = NULL;
  c->ncur = 0;
}

/* Frame f of slot j on its own, behind what is queued (so it overtakes no
 * earlier frame of its slot). 0: nothing queued or held, or out of memory:
 * the caller relays it now. */
static int pass_on(agent_ckpt *c, uint32_t slot, const uint8_t *f, size_t n) {
  agent_ckpt_release(c);
  if (!c->queued)
    return 0;
  job *j = job_new(c, 0, -1);
  uint8_t *copy = j ? malloc(n) : NULL;
  if (!copy) {
    job_free(j, c->nslots);
    return 0;
  }
  memcpy(copy, f, n);
  j->frames[slot] = copy;
  j->lens[slot] = n;
  push(c, j);
  return 1;
}

int agent_ckpt_offer(agent_ckpt *c, uint32_t slot, const uint8_t *f, size_t n, uint64_t now_ns) {
  if (!c->started || slot >= c->nslots)
    return 0;
  ft_msg m;
  if (__atomic_load_n(&c->store_failed, __ATOMIC_RELAXED) || ft_wire_decode(f, n, &m))
    return pass_on(c, slot, f, n); /* a bad one: the supervisor says what is wrong */
  uint64_t gen = m.gen;
  int64_t step = m.shard_saved.step;
  ft_msg_release(&m);
  if (c->cur && (c->cur->gen != gen || c->cur->step != step || c->cur->frames[slot]))
    agent_ckpt_release(c); /* a slot went on without it (or sent it again) */
  if (!c->cur && !(c->cur = job_new(c, gen, step)))
    return pass_on(c, slot, f, n);
  uint8_t *copy = malloc(n);
  if (!copy)
    return pass_on(c, slot, f, n);
  memcpy(copy, f, n);
  if (!c->ncur)
    c->cur_first_ns = now_ns;
  c->cur->frames[slot] = copy;
  c->cur->lens[slot] = n;
  if (++c->ncur == c->nslots) {
    c->cur->whole = 1;
    agent_ckpt_release(c);
  }
  return 1;
}

uint64_t agent_ckpt_deadline(const agent_ckpt *c) {
  return c->cur ? c->cur_first_ns + c->hold_ns : UINT64_MAX;
}

void agent_ckpt_tick(agent_ckpt *c, uint64_t now_ns) {
  if (c->cur && now_ns >= c->cur_first_ns + c->hold_ns)
    agent_ckpt_release(c);
}

void agent_ckpt_drain(agent_ckpt *c, const agent_ckpt_out *out) {
  char buf[256];
  while (read(c->pipe[0], buf, sizeof buf) > 0)
    ;
  pthread_mutex_lock(&c->mu);
  job *list = c->done;
  c->done = NULL;
  c->done_tail = &c->done;
  pthread_mutex_unlock(&c->mu);
  while (list) {
    job *j = list;
    list = j->next;
    c->queued--;
    if (j->env)
      out->host(out->ud, j->gen, j->step, j->lo, j->env);
    else
      for (uint32_t k = 0; k < c->nslots; k++)
        if (j->frames[k])
          out->relay(out->ud, k, j->frames[k], j->lens[k]);
    job_free(j, c->nslots);
  }
}

int agent_ckpt_busy(const agent_ckpt *c) {
  return c->queued > 0 || c->cur != NULL;
}
