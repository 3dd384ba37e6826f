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
 * Model: jobs are sup_pending_ckpt, committed strictly in push order by one
 * thread (work callback), then handed back to the loop thread (done
 * callback, through a pipe), which emits the events and owns the job from
 * then on. The queue owns a job from push to done. Invariants: at most one
 * job is in the store at a time; done runs only on the loop thread (or in
 * sup_commitq_free, on the caller's thread, which is the loop's), in push
 * order. Free waits for the job in flight, reports finished jobs through
 * done, and hands unstarted ones to release (they were never committed).
 * Retention GC runs on a second thread after each successful commit,
 * coalesced (gc_main), so a GC that lists a bucket which is down does not
 * hold up the commits behind it. sup_commitq_busy says whether the store
 * may be inside a commit or GC (which hold the store's meta lock, possibly
 * for an outage): the loop defers its own state changes (GOOD marks) then.
 */
#include "sup_commitq.h"

#include "ft_err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sup_commitq {
  pthread_t th, gc_th;
  int started, gc_started;
  int inflight; /* the commit thread holds a job */
  int gc_wanted, gc_running;
  pthread_cond_t gc_cv;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sup_pending_ckpt *queue, **queue_tail; /* waiting for the thread */
  sup_pending_ckpt *done, **done_tail;   /* finished, waiting for the loop */
  int stop;
  int fd[2]; /* the thread writes a byte to fd[1] per finished job */
  struct event *ev;
  sup_commitq_fn work, done_fn, release;
  void (*gc)(void *ud);
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
    q->gc(q->ud);
    pthread_mutex_lock(&q->mu);
    q->gc_running = 0;
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static void *thread_main(void *arg) {
  sup_commitq *q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->queue && !q->stop)
      pthread_cond_wait(&q->cv, &q->mu);
    if (q->stop)
      break;
    sup_pending_ckpt *p = q->queue;
    q->queue = p->next;
    if (!q->queue)
      q->queue_tail = &q->queue;
    p->next = NULL;
    q->inflight = 1;
    pthread_mutex_unlock(&q->mu);
    q->work(q->ud, p);
    pthread_mutex_lock(&q->mu);
    q->inflight = 0;
    if (!p->rc) {
      q->gc_wanted = 1;
      pthread_cond_signal(&q->gc_cv);
    }
    *q->done_tail = p;
    q->done_tail = &p->next;
    char b = 1;
    while (write(q->fd[1], &b, 1) < 0 && errno == EINTR)
      ;
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
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0)
    ;
  drain_done(q);
}

int sup_commitq_new(struct event_base *base, sup_commitq_fn work, sup_commitq_fn done,
                    sup_commitq_fn release, void (*gc)(void *ud), void *ud, sup_commitq **out) {
  *out = NULL;
  sup_commitq *q = calloc(1, sizeof *q);
  if (!q)
    return ft_err_set(FT_ENOMEM, "out of memory");
  q->fd[0] = q->fd[1] = -1;
  q->queue_tail = &q->queue;
  q->done_tail = &q->done;
  q->work = work;
  q->done_fn = done;
  q->release = release;
  q->gc = gc;
  q->ud = ud;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  pthread_cond_init(&q->gc_cv, NULL);
  int rc = FT_OK;
  if (pipe2(q->fd, O_CLOEXEC | O_NONBLOCK)) {
    rc = ft_err_set(FT_EIO, "commit queue: pipe: %s", strerror(errno));
    goto fail;
  }
  q->ev = event_new(base, q->fd[0], EV_READ | EV_PERSIST, on_pipe, q);
  if (!q->ev || event_add(q->ev, NULL)) {
    rc = ft_err_set(FT_ENOMEM, "commit queue: cannot add its event");
    goto fail;
  }
  if (pthread_create(&q->th, NULL, thread_main, q)) {
    rc = ft_err_set(FT_EIO, "commit queue: cannot start its thread");
    goto fail;
  }
  q->started = 1;
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
  p->next = NULL;
  pthread_mutex_lock(&q->mu);
  *q->queue_tail = p;
  q->queue_tail = &p->next;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

int sup_commitq_busy(sup_commitq *q) {
  pthread_mutex_lock(&q->mu);
  int busy = q->queue || q->inflight || q->gc_wanted || q->gc_running;
  pthread_mutex_unlock(&q->mu);
  return busy;
}

void sup_commitq_free(sup_commitq *q) {
  if (!q)
    return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  pthread_cond_signal(&q->cv);
  pthread_cond_signal(&q->gc_cv);
  pthread_mutex_unlock(&q->mu);
  if (q->gc_started)
    pthread_join(q->gc_th, NULL); /* waits for a GC under way */
  if (q->started) {
    pthread_join(q->th, NULL); /* waits for the job in flight */
    drain_done(q);
  }
  while (q->queue) {
    sup_pending_ckpt *p = q->queue;
    q->queue = p->next;
    q->release(q->ud, p);
  }
  if (q->ev)
    event_free(q->ev);
  if (q->fd[0] >= 0)
    close(q->fd[0]);
  if (q->fd[1] >= 0)
    close(q->fd[1]);
  pthread_cond_destroy(&q->cv);
  pthread_cond_destroy(&q->gc_cv);
  pthread_mutex_destroy(&q->mu);
  free(q);
}
