/*
 * test_sup_commitq: the commit queue (supervisor/sup_commitq.c) with work
 * and done callbacks of the test's own: each lane reports its jobs in push
 * order on the loop's thread, a store-level job of a step goes after the
 * memory-level one of that step; and its checks (check_lane, check_loop:
 * Q1-Q5) catch a caller that breaks the queue's rules (death tests,
 * test_inv.h).
 */
#include "test_inv.h"

#include "sup_commitq.h"

#include <event2/event.h>
#include <pthread.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_hold;        /* work waits while it is set */
static char g_order[256]; /* "m2 s1 ...": what done saw, in order */
static int g_ndone;
static pthread_t g_loop;

static void work(void *ud, sup_pending_ckpt *p) {
  pthread_mutex_lock(&g_mu);
  while (g_hold)
    pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  p->rc = 0;
}

static void done(void *ud, sup_pending_ckpt *p) {
  assert_true(pthread_equal(pthread_self(), g_loop));
  size_t l = strlen(g_order);
  snprintf(g_order + l, sizeof g_order - l, "%s%c%d", l ? " " : "",
           p->level == CKPT_LEVEL_MEMORY ? 'm' : 's', (int)p->step);
  g_ndone++;
  free(p);
}

static void release(void *ud, sup_pending_ckpt *p) {
  free(p);
}

static sup_pending_ckpt *no_gc(void *ud) {
  return NULL;
}

static sup_pending_ckpt *job(int64_t step, int level) {
  sup_pending_ckpt *p = calloc(1, sizeof *p);
  assert_non_null(p);
  p->step = step;
  p->level = level;
  return p;
}

static sup_commitq *make(struct event_base **base) {
  g_loop = pthread_self();
  g_order[0] = 0;
  g_ndone = 0;
  *base = event_base_new();
  assert_non_null(*base);
  sup_commitq *q = NULL;
  assert_int_equal(sup_commitq_new(*base, work, done, release, no_gc, NULL, &q), 0);
  return q;
}

/* Runs the loop until n jobs were reported. */
static void loop_until(struct event_base *base, int n) {
  while (g_ndone < n)
    event_base_loop(base, EVLOOP_ONCE);
}

static void test_order(void **st) {
  (void)st;
  struct event_base *base;
  sup_commitq *q = make(&base);
  pthread_mutex_lock(&g_mu);
  g_hold = 1; /* everything queues up behind the first jobs */
  pthread_mutex_unlock(&g_mu);
  sup_commitq_push(q, job(1, CKPT_LEVEL_DURABLE));
  sup_commitq_push(q, job(2, CKPT_LEVEL_DURABLE));
  sup_commitq_push(q, job(2, CKPT_LEVEL_MEMORY));
  sup_commitq_push(q, job(3, CKPT_LEVEL_MEMORY));
  sup_commitq_push(q, job(3, CKPT_LEVEL_DURABLE));
  pthread_mutex_lock(&g_mu);
  g_hold = 0;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  loop_until(base, 5);
  sup_commitq_free(q);
  event_base_free(base);
  /* per lane in push order; s3 after m3 (and s2 after m2, unless the store
   * lane had taken s2 before m2 was pushed) */
  const char *s1 = strstr(g_order, "s1"), *s2 = strstr(g_order, "s2"), *s3 = strstr(g_order, "s3"),
             *m2 = strstr(g_order, "m2"), *m3 = strstr(g_order, "m3");
  assert_true(s1 && s2 && s3 && m2 && m3);
  assert_true(s1 < s2 && s2 < s3 && m2 < m3 && m3 < s3);
}

/* Q2: free from a thread other than the loop's. */
static void *free_elsewhere(void *arg) {
  sup_commitq_free(arg);
  return NULL;
}
static void free_elsewhere_body(void) {
  struct event_base *base;
  sup_commitq *q = make(&base);
  sup_commitq_push(q, job(1, CKPT_LEVEL_DURABLE));
  loop_until(base, 1);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, free_elsewhere, q), 0);
  pthread_join(th, NULL);
}
static void test_inv_free_elsewhere(void **st) {
  (void)st;
  assert_inv_broken(free_elsewhere_body, "Q2: sup_commitq_free on a thread other than the loop's");
}

/* Q5: a job pushed again while it is still queued (it would be committed
 * and reported twice, and its next pointer would make the queue a ring). */
static void push_twice_body(void) {
  struct event_base *base;
  sup_commitq *q = make(&base);
  pthread_mutex_lock(&g_mu);
  g_hold = 1; /* the store lane holds step 1, step 2 stays queued */
  pthread_mutex_unlock(&g_mu);
  sup_pending_ckpt *p = job(2, CKPT_LEVEL_DURABLE);
  sup_commitq_push(q, job(1, CKPT_LEVEL_DURABLE));
  sup_commitq_push(q, p);
  sup_commitq_push(q, p);
}
static void test_inv_push_twice(void **st) {
  (void)st;
  assert_inv_broken(push_twice_body,
                    "Q5: the job of step 2 pushed to lane store while queued there");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order),
      cmocka_unit_test(test_inv_free_elsewhere),
      cmocka_unit_test(test_inv_push_twice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
