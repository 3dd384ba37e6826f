/*
 * sup_commitq: checkpoint commits (and the retention GC after each) on a
 * thread of their own, for every store: an s3:// commit may wait on the
 * network (with FT_S3_REQUIRE=both until the chunks are in the bucket, and
 * GC lists the bucket in either mode), and a local one on a slow disk (an
 * fsync or a rename that takes seconds).
 *
 * Why: supervise is one libevent loop. A commit that blocks it for the
 * length of an S3 outage or a disk stall stops heartbeats and COMMITTED
 * messages; the workers then decide the supervisor is lost and exit, so a
 * slow store would stop training. With this queue the loop keeps serving
 * the workers while the store is slow, and a commit lands (or fails,
 * reported as checkpoint_failed) when the store returns.
 *
 * Model: jobs are sup_pending_ckpt, in three lanes: memory-level commits
 * (checkpoint.persist_every, require memory: a catalog record, no tier
 * request), the others (the store's level), and records (the supervisor's
 * own: run state, DIR/generation, why nodes left, BAD marks; rec.work set).
 * Each lane runs its jobs strictly in push order on a thread of its own
 * (work callback), so a memory-level commit never waits behind a store-
 * level one that checks its chunks in a slow bucket, nor a record (a
 * generation the next ASSIGN waits for) behind either; the store serialises
 * their catalog writes (meta_mu). The other way round, a store-level job
 * waits while a memory-level one of the same or an earlier step is queued
 * or in flight, so a step committed at both levels (checkpoint.require
 * memory) is committed and reported in memory first, as the workers sent
 * it. A finished job is handed back to the loop thread (done callback,
 * through a pipe), which emits the events and owns the job from then on.
 * The queue owns a job from push to done. Invariants: at most one job per
 * lane is in the store at a time; done runs only on the loop thread (or in
 * sup_commitq_free, on the caller's thread, which is the loop's), in push
 * order within a lane. Free waits for the jobs in flight, writes the
 * records still queued, reports finished jobs through done, and hands
 * unstarted commits to release (they were never committed). Retention GC
 * runs on a thread of its own after each successful store-level commit,
 * coalesced (gc_main), so a GC that lists a bucket which is down does not
 * hold up the commits behind it (memory-level records are pruned by the
 * work callback itself, in the catalog only). Its outcome (a job with
 * gc_done set, or none) goes back to the loop through done like a finished
 * job, so that a GC that fails or is refused becomes an event (events are
 * the loop's). GOOD marks are jobs of the store lane too (mark_good): a
 * mark writes a mark object (a rename, an upload) and waits for the store's
 * meta lock, which a commit may hold for as long as the bucket is away; on
 * the loop either stopped heartbeats (a 4.5 s rename made the workers and
 * spares give the supervisor up). In the store lane a mark follows the
 * commit of its step, and triggers no GC.
 */
#include "sup_commitq.h"
#include "sup_wake.h"

#include "ft_err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LANE_STORE, LANE_MEMORY, LANE_RECORD, NLANES };

struct lane {
  struct sup_commitq *q;
  pthread_t th;
  int started;
  int inflight;                          /* its thread holds a job */
  int64_t inflight_step;                 /* that job's step */
  pthread_cond_t cv;                     /* a job was queued, or stop */
  sup_pending_ckpt *queue, **queue_tail; /* waiting for its thread */
};

struct sup_commitq {
  struct lane lane[NLANES];
  pthread_t gc_th;
  int gc_started;
  int gc_wanted, gc_running;
  pthread_cond_t gc_cv;
  pthread_mutex_t mu;
  sup_pending_ckpt *done, **done_tail; /* finished, waiting for the loop */
  int stop;
  sup_wake wake; /* the threads' word to the loop: jobs finished */
  sup_commitq_fn work, done_fn, release;
  sup_commitq_gc gc;
  void *ud;
};

/* Retention GC, coalesced: one run per request burst, never two at once. It
 * runs beside commits (the store serialises its catalog phase with them;
 * its sweep, which lists the bucket, does not hold them up). */
static void *gc_main(void *arg) {
  sup_commitq *q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->gc_wanted && !q->stop)
      pthread_cond_wait(&q->gc_cv, &q->mu);
    if (q->stop)
      break;
    q->gc_wanted = 0;
    q->gc_running = 1;
    pthread_mutex_unlock(&q->mu);
    sup_pending_ckpt *r = q->gc(q->ud);
    pthread_mutex_lock(&q->mu);
    q->gc_running = 0;
    if (r) { /* its outcome, to the loop as a finished job's */
      r->next = NULL;
      *q->done_tail = r;
      q->done_tail = &r->next;
      sup_wake_signal(&q->wake);
    }
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* A memory-level job of a step <= step is queued or in flight (q->mu held). */
static int memory_first(const sup_commitq *q, int64_t step) {
  const struct lane *m = &q->lane[LANE_MEMORY];
  if (m->inflight && m->inflight_step <= step)
    return 1;
  for (const sup_pending_ckpt *p = m->queue; p; p = p->next)
    if (p->step <= step)
      return 1;
  return 0;
}

static void *thread_main(void *arg) {
  struct lane *l = arg;
  sup_commitq *q = l->q;
  int store = l == &q->lane[LANE_STORE];
  /* records are never dropped: at free the record lane writes the ones
   * still queued (the run's final status among them) before it stops */
  int finish = l == &q->lane[LANE_RECORD];
  pthread_mutex_lock(&q->mu);
  for (;;) {
    /* the store lane lets the memory lane's earlier steps go first: a
     * step's memory-level commit (checkpoint.require memory) is reported
     * before its upgrade, as the workers sent them */
    while (!q->stop && (!l->queue || (store && memory_first(q, l->queue->step))))
      pthread_cond_wait(&l->cv, &q->mu);
    if (q->stop && !(finish && l->queue))
      break;
    sup_pending_ckpt *p = l->queue;
    l->queue = p->next;
    if (!l->queue)
      l->queue_tail = &l->queue;
    p->next = NULL;
    l->inflight = 1;
    l->inflight_step = p->step;
    pthread_mutex_unlock(&q->mu);
    q->work(q->ud, p);
    pthread_mutex_lock(&q->mu);
    l->inflight = 0;
    if (!store)
      pthread_cond_signal(&q->lane[LANE_STORE].cv);
    if (!p->rc && l == &q->lane[LANE_STORE] && !p->mark_good) {
      q->gc_wanted = 1;
      pthread_cond_signal(&q->gc_cv);
    }
    *q->done_tail = p;
    q->done_tail = &p->next;
    sup_wake_signal(&q->wake);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* Hands every finished job to done, in order (loop thread). */
static void drain_done(sup_commitq *q) {
  for (;;) {
    pthread_mutex_lock(&q->mu);
    sup_pending_ckpt *p = q->done;
    if (p) {
      q->done = p->next;
      if (!q->done)
        q->done_tail = &q->done;
      p->next = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    if (!p)
      return;
    q->done_fn(q->ud, p);
  }
}

static void on_pipe(evutil_socket_t fd, short what, void *arg) {
  sup_commitq *q = arg;
  sup_wake_drain(fd);
  drain_done(q);
}

int sup_commitq_new(struct event_base *base, sup_commitq_fn work, sup_commitq_fn done,
                    sup_commitq_fn release, sup_commitq_gc gc, void *ud, sup_commitq **out) {
  *out = NULL;
  sup_commitq *q = calloc(1, sizeof *q);
  if (!q)
    return ft_err_set(FT_ENOMEM, "out of memory");
  q->wake.fd[0] = q->wake.fd[1] = -1;
  q->done_tail = &q->done;
  q->work = work;
  q->done_fn = done;
  q->release = release;
  q->gc = gc;
  q->ud = ud;
  pthread_mutex_init(&q->mu, NULL);
  for (int i = 0; i < NLANES; i++) {
    q->lane[i].q = q;
    q->lane[i].queue_tail = &q->lane[i].queue;
    pthread_cond_init(&q->lane[i].cv, NULL);
  }
  pthread_cond_init(&q->gc_cv, NULL);
  int rc = sup_wake_open(&q->wake, base, on_pipe, q, "commit queue");
  if (rc)
    goto fail;
  for (int i = 0; i < NLANES; i++) {
    if (pthread_create(&q->lane[i].th, NULL, thread_main, &q->lane[i])) {
      rc = ft_err_set(FT_EIO, "commit queue: cannot start its threads");
      goto fail;
    }
    q->lane[i].started = 1;
  }
  if (pthread_create(&q->gc_th, NULL, gc_main, q)) {
    rc = ft_err_set(FT_EIO, "commit queue: cannot start its GC thread");
    goto fail;
  }
  q->gc_started = 1;
  *out = q;
  return FT_OK;
fail:
  sup_commitq_free(q);
  return rc;
}

void sup_commitq_push(sup_commitq *q, sup_pending_ckpt *p) {
  struct lane *l = &q->lane[p->rec.work                     ? LANE_RECORD
                            : p->level == CKPT_LEVEL_MEMORY ? LANE_MEMORY
                                                            : LANE_STORE];
  p->next = NULL;
  pthread_mutex_lock(&q->mu);
  *l->queue_tail = p;
  l->queue_tail = &p->next;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&q->mu);
}

void sup_commitq_free(sup_commitq *q) {
  if (!q)
    return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  for (int i = 0; i < NLANES; i++)
    pthread_cond_signal(&q->lane[i].cv);
  pthread_cond_signal(&q->gc_cv);
  pthread_mutex_unlock(&q->mu);
  if (q->gc_started)
    pthread_join(q->gc_th, NULL); /* waits for a GC under way */
  for (int i = 0; i < NLANES; i++)
    if (q->lane[i].started)
      pthread_join(q->lane[i].th, NULL); /* waits for the job in flight */
  if (q->lane[LANE_STORE].started || q->lane[LANE_MEMORY].started || q->lane[LANE_RECORD].started)
    drain_done(q);
  for (int i = 0; i < NLANES; i++)
    while (q->lane[i].queue) {
      sup_pending_ckpt *p = q->lane[i].queue;
      q->lane[i].queue = p->next;
      q->release(q->ud, p);
    }
  sup_wake_close(&q->wake);
  for (int i = 0; i < NLANES; i++)
    pthread_cond_destroy(&q->lane[i].cv);
  pthread_cond_destroy(&q->gc_cv);
  pthread_mutex_destroy(&q->mu);
  free(q);
}
