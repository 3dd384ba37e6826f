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
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h) by
 * check_lane, under mu, whenever a lane's job moves (push, take, finish,
 * report), and check_loop where done runs:
 *   Q1 at most one job per lane is in the store: a lane's taken jobs less
 *      its finished ones is its inflight flag, 0 or 1;
 *   Q2 done runs only on the thread that made the queue (the loop's; free
 *      is called there too);
 *   Q3 push order within a lane: a lane takes, and the loop reports, its
 *      jobs in the order they were pushed (a ring of the last CHECK_RING
 *      pushes per lane, compared at take and at report);
 *   Q4 a store-level job is taken only while no memory-level job of the
 *      same or an earlier step is queued or in flight;
 *   Q5 the queue owns a job from push to done: a job pushed is not already
 *      queued, its lane's queue holds pushed - taken jobs of that lane, and
 *      at free, after the threads are joined, none is in flight.
 * The queue walks are bounded (CHECK_WALK jobs); the queues are short.
 */
#include "sup_commitq.h"
#include "sup_wake.h"

#include "ft_bug.h"
#include "ft_err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LANE_STORE, LANE_MEMORY, LANE_RECORD, NLANES };

/* Q3's ring: the last pushes of a lane, and how far Q5 walks a queue. */
#define CHECK_RING 64
#define CHECK_WALK 64

struct lane {
  struct sup_commitq *q;
  pthread_t th;
  int started;
  int inflight;                          /* its thread holds a job */
  int64_t inflight_step;                 /* that job's step */
  pthread_cond_t cv;                     /* a job was queued, or stop */
  sup_pending_ckpt *queue, **queue_tail; /* waiting for its thread */
#if FT_INVARIANTS_ON
  uint64_t pushed, taken, finished, reported; /* Q1, Q3, Q5: jobs so far */
  const sup_pending_ckpt *ring[CHECK_RING];   /* ring[i % CHECK_RING]: push i */
#endif
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
#if FT_INVARIANTS_ON
  pthread_t loop; /* Q2: the thread that made the queue */
#endif
};

/* The lane a job goes to (its fields never change while it is queued). */
static int lane_of(const sup_pending_ckpt *p) {
  return p->rec.work ? LANE_RECORD : p->level == CKPT_LEVEL_MEMORY ? LANE_MEMORY : LANE_STORE;
}

#if FT_INVARIANTS_ON
static const char *const lane_name[NLANES] = {"store", "memory", "record"};

static const char *lname(const struct lane *l) {
  return lane_name[l - l->q->lane];
}

/* Q1, Q5 for lane l (q->mu held) */
static void check_lane(const sup_commitq *q, const struct lane *l) {
  int i = (int)(l - q->lane);
  FT_ASSERT_INV((l->inflight == 0 || l->inflight == 1) &&
                    l->taken - l->finished == (uint64_t)l->inflight,
                "Q1: lane %s: %" PRIu64 " jobs taken, %" PRIu64 " finished, inflight %d",
                lane_name[i], l->taken, l->finished, l->inflight);
  FT_ASSERT_INV(l->taken <= l->pushed && l->reported <= l->finished,
                "Q5: lane %s: %" PRIu64 " pushed, %" PRIu64 " taken, %" PRIu64 " finished, %" PRIu64
                " reported",
                lane_name[i], l->pushed, l->taken, l->finished, l->reported);
  uint64_t n = 0;
  const sup_pending_ckpt *p = l->queue, *last = NULL;
  for (; p && n < CHECK_WALK; last = p, p = p->next, n++)
    FT_ASSERT_INV(lane_of(p) == i, "Q5: a %s job (step %" PRId64 ") queued in lane %s",
                  lane_name[lane_of(p)], p->step, lane_name[i]);
  if (p)
    return; /* a long queue: walked in part */
  FT_ASSERT_INV(n == l->pushed - l->taken && l->queue_tail == (last ? &last->next : &l->queue),
                "Q5: lane %s queues %" PRIu64 " jobs, %" PRIu64 " pushed and not taken",
                lane_name[i], n, l->pushed - l->taken);
}

/* Q3: job p, the nth of its lane at take or report, is the nth pushed */
static void check_order(const struct lane *l, const sup_pending_ckpt *p, uint64_t nth,
                        const char *what) {
  if (l->pushed - nth <= CHECK_RING)
    FT_ASSERT_INV(l->ring[nth % CHECK_RING] == p,
                  "Q3: lane %s %s job %" PRIu64 " (step %" PRId64 ") out of push order", lname(l),
                  what, nth, p->step);
}

/* Q2 */
static void check_loop(const sup_commitq *q, const char *op) {
  FT_ASSERT_INV(pthread_equal(pthread_self(), q->loop),
                "Q2: %s on a thread other than the loop's (the one that made the queue)", op);
}

/* Q5: p is not in l's queue already (bounded) */
static void check_not_queued(const struct lane *l, const sup_pending_ckpt *p) {
  int n = 0;
  for (const sup_pending_ckpt *x = l->queue; x && n < CHECK_WALK; x = x->next, n++)
    FT_ASSERT_INV(x != p, "Q5: the job of step %" PRId64 " pushed to lane %s while queued there",
                  p->step, lname(l));
}
#else
static void check_lane(const sup_commitq *q, const struct lane *l) {}
static void check_loop(const sup_commitq *q, const char *op) {}
static void check_not_queued(const struct lane *l, const sup_pending_ckpt *p) {}
#endif

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
    check_lane(q, l);
    sup_pending_ckpt *p = l->queue;
    FT_ASSERT_INV(!store || !memory_first(q, p->step),
                  "Q4: store-level job of step %" PRId64
                  " taken while a memory-level one of a step <= it waits",
                  p->step);
    l->queue = p->next;
    if (!l->queue)
      l->queue_tail = &l->queue;
    p->next = NULL;
    l->inflight = 1;
    l->inflight_step = p->step;
#if FT_INVARIANTS_ON
    check_order(l, p, l->taken++, "took");
#endif
    check_lane(q, l);
    pthread_mutex_unlock(&q->mu);
    q->work(q->ud, p);
    pthread_mutex_lock(&q->mu);
    l->inflight = 0;
#if FT_INVARIANTS_ON
    l->finished++;
#endif
    check_lane(q, l);
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
  check_loop(q, "done");
  for (;;) {
    pthread_mutex_lock(&q->mu);
    sup_pending_ckpt *p = q->done;
    if (p) {
      q->done = p->next;
      if (!q->done)
        q->done_tail = &q->done;
      p->next = NULL;
    }
#if FT_INVARIANTS_ON
    if (p && !p->gc_done) { /* a GC's outcome is no lane's */
      struct lane *l = &q->lane[lane_of(p)];
      check_order(l, p, l->reported++, "reported");
      check_lane(q, l);
    }
#endif
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
#if FT_INVARIANTS_ON
  q->loop = pthread_self();
#endif
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
  struct lane *l = &q->lane[lane_of(p)];
  pthread_mutex_lock(&q->mu);
  check_lane(q, l);
  check_not_queued(l, p);
  p->next = NULL;
  *l->queue_tail = p;
  l->queue_tail = &p->next;
#if FT_INVARIANTS_ON
  l->ring[l->pushed++ % CHECK_RING] = p;
#endif
  check_lane(q, l);
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&q->mu);
}

void sup_commitq_free(sup_commitq *q) {
  if (!q)
    return;
  check_loop(q, "sup_commitq_free");
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
  for (int i = 0; i < NLANES; i++)       /* Q5: every job is queued, or finished */
    FT_ASSERT_INV(!q->lane[i].inflight, "Q5: lane %d still in the store after its join", i);
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
