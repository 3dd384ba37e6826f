/*
 * test_progress: the training thread's progress record (worker/progress.h).
 *
 * 1. The process record's rules: starts idle at step -1; a phase change
 *    moves the change time, the same phase does not; a collective counts
 *    and restores the phase it interrupted (nested too); a device
 *    collective only counts; a generation starts the count at 0; the age
 *    saturates.
 * 2. Never torn: one thread writes records whose four fields all derive
 *    from one counter while another reads as fast as it can; every copy it
 *    gets must be one whole record, and the counter never goes back. The
 *    same with two writers (their CAS on the sequence word excludes each
 *    other) and the reader.
 * 3. The ring of the last changes (progress_ring): newest first, one entry
 *    per change (a write that changes nothing adds none), the last
 *    PROGRESS_RING_LEN kept; read while a thread writes, every entry is
 *    whole and the entries are consecutive changes.
 * 4. From a signal handler on the writer's own thread (what a hung
 *    worker's stack dump does, worker/stackdump.c): the writer is
 *    interrupted thousands of times, mid-write too; the handler's ring
 *    read and try-read never wait (a wait there would never end: the test
 *    would time out), and what they return is whole.
 * 5. Storage waits (progress_wait_*): begin enters storage_wait and keeps
 *    the phase it interrupted, a repeated begin keeps the change time
 *    unless the thread restarts its own request, end restores the phase
 *    and clears the note (a wait inside validation goes back to it); the
 *    note holds the last reason and attempt.
 * FT_PROGRESS_ITERS sets the writes per writer (default 1,000,000).
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "ft_clock.h"
#include "progress.h"

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_process_record(void **state) {
  (void)state;
  progress_rec r, r2;
  progress_read(&r);
  assert_int_equal(r.phase, FT_PHASE_IDLE);
  assert_true(r.step == -1);
  assert_true(r.coll_seq == 0);
  assert_true(r.changed_ns > 0 && r.changed_ns <= ft_now_ns());

  /* a new phase moves the time; the same phase again does not */
  sleep_ms(2);
  progress_phase(FT_PHASE_DATA);
  progress_read(&r2);
  assert_int_equal(r2.phase, FT_PHASE_DATA);
  assert_true(r2.changed_ns > r.changed_ns);
  sleep_ms(2);
  progress_phase(FT_PHASE_DATA);
  progress_read(&r);
  assert_true(r.changed_ns == r2.changed_ns);
  assert_int_equal(progress_phase_get(), FT_PHASE_DATA);

  /* phase_if: only from the named phase */
  progress_phase_if(FT_PHASE_FORWARD, FT_PHASE_BACKWARD);
  assert_int_equal(progress_phase_get(), FT_PHASE_DATA);
  progress_phase(FT_PHASE_FORWARD);
  progress_phase_if(FT_PHASE_FORWARD, FT_PHASE_BACKWARD);
  assert_int_equal(progress_phase_get(), FT_PHASE_BACKWARD);

  /* a collective: counted, phase collective while in it, then back */
  ft_phase before = progress_coll_begin();
  assert_int_equal(before, FT_PHASE_BACKWARD);
  progress_read(&r);
  assert_int_equal(r.phase, FT_PHASE_COLLECTIVE);
  assert_true(r.coll_seq == 1);
  ft_phase inner = progress_coll_begin(); /* nested: a collective made of others */
  assert_int_equal(inner, FT_PHASE_COLLECTIVE);
  progress_coll_end(inner);
  progress_read(&r);
  assert_int_equal(r.phase, FT_PHASE_COLLECTIVE);
  assert_true(r.coll_seq == 2);
  progress_coll_end(before);
  assert_int_equal(progress_phase_get(), FT_PHASE_BACKWARD);

  /* a device collective: counted only; waiting for it is the phase */
  progress_coll_count();
  progress_read(&r);
  assert_true(r.coll_seq == 3);
  assert_int_equal(r.phase, FT_PHASE_BACKWARD);
  before = progress_coll_wait_begin();
  progress_read(&r);
  assert_int_equal(r.phase, FT_PHASE_COLLECTIVE);
  assert_true(r.coll_seq == 3);
  progress_coll_end(before);

  /* a step done: the step and the phase, the time moves */
  progress_read(&r2);
  sleep_ms(2);
  progress_step_done(41, FT_PHASE_OPTIMIZER);
  progress_read(&r);
  assert_true(r.step == 41);
  assert_int_equal(r.phase, FT_PHASE_OPTIMIZER);
  assert_true(r.changed_ns > r2.changed_ns);
  assert_true(r.coll_seq == 3);

  /* a new generation: idle, the count from 0 */
  progress_generation();
  progress_read(&r);
  assert_int_equal(r.phase, FT_PHASE_IDLE);
  assert_true(r.coll_seq == 0 && r.step == -1);
}

/* storage_wait: begin interrupts the phase (kept by the caller) and
 * restarts the clock only for a new request; end goes back and clears the
 * wait note; the note is any thread's, one word. */
static void test_storage_wait(void **state) {
  (void)state;
  progress_generation();
  progress_phase(FT_PHASE_DATA);
  ft_phase was = FT_PHASE_COUNT;
  progress_wait_end(&was); /* not waiting: nothing */
  assert_int_equal(progress_phase_get(), FT_PHASE_DATA);
  progress_wait_begin(&was, 0);
  assert_int_equal(was, FT_PHASE_DATA);
  progress_rec a, b;
  progress_read(&a);
  assert_int_equal(a.phase, FT_PHASE_STORAGE_WAIT);
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  progress_wait_begin(&was, 0); /* woken, the same wait: the clock runs on */
  progress_read(&b);
  assert_true(b.changed_ns == a.changed_ns);
  progress_wait_begin(&was, 1); /* a request of its own: restarted */
  progress_read(&b);
  assert_true(b.changed_ns > a.changed_ns);
  assert_int_equal(b.phase, FT_PHASE_STORAGE_WAIT);
  assert_int_equal(was, FT_PHASE_DATA);
  ft_wait_reason why;
  uint32_t att;
  progress_wait_get(&why, &att);
  assert_int_equal(why, FT_WAIT_NONE);
  assert_int_equal(att, 0);
  progress_wait_note(FT_WAIT_SLOWDOWN, 3);
  progress_wait_get(&why, &att);
  assert_int_equal(why, FT_WAIT_SLOWDOWN);
  assert_int_equal(att, 3);
  progress_wait_end(&was);
  assert_int_equal(was, FT_PHASE_COUNT);
  assert_int_equal(progress_phase_get(), FT_PHASE_DATA);
  progress_wait_get(&why, &att);
  assert_int_equal(why, FT_WAIT_NONE);
  /* a wait inside validation goes back to validation */
  progress_phase(FT_PHASE_VALIDATION);
  progress_wait_begin(&was, 1);
  progress_wait_end(&was);
  assert_int_equal(progress_phase_get(), FT_PHASE_VALIDATION);
  progress_generation();
}

static void test_age(void **state) {
  (void)state;
  progress_rec r = {.phase = FT_PHASE_DATA, .step = 3, .coll_seq = 9, .changed_ns = 5000000000ull};
  assert_int_equal(progress_age_ms(&r, 5000000000ull), 0);
  assert_int_equal(progress_age_ms(&r, 4000000000ull), 0); /* changed after now: 0 */
  assert_int_equal(progress_age_ms(&r, 5001999999ull), 1);
  assert_int_equal(progress_age_ms(&r, 5000000000ull + 7250000000ull), 7250);
  assert_int_equal(progress_age_ms(&r, UINT64_MAX), UINT32_MAX); /* saturates */
}

/* ---- never torn ------------------------------------------------------------ */

/* record i of writer w: every field a function of (w, i) */
static void make(progress_rec *r, uint64_t w, uint64_t i) {
  r->phase = (ft_phase)(i % FT_PHASE_COUNT);
  r->step = (int64_t)(i * 2 + w);
  r->coll_seq = i * 0x9e3779b97f4a7c15ull ^ w;
  r->changed_ns = ~(i * 3 + w);
}

/* 1 if r is record (w, i) of some writer w < nw; *w, *i set */
static int whole(const progress_rec *r, int nw, uint64_t *w, uint64_t *i) {
  if (r->step < 0)
    return 0;
  *w = (uint64_t)r->step % 2;
  *i = (uint64_t)r->step / 2;
  if (*w >= (uint64_t)nw)
    return 0;
  progress_rec e;
  make(&e, *w, *i);
  return e.phase == r->phase && e.step == r->step && e.coll_seq == r->coll_seq &&
         e.changed_ns == r->changed_ns;
}

typedef struct race {
  progress_store *p;
  long iters;
  int nwriters;
  int done; /* writers finished (atomic) */
} race;

typedef struct wargs {
  race *x;
  uint64_t w;
} wargs;

static void *writer(void *arg) {
  race *x = ((wargs *)arg)->x;
  uint64_t w = ((wargs *)arg)->w;
  progress_rec r;
  for (long i = 1; i <= x->iters; i++) {
    make(&r, w, (uint64_t)i);
    progress_store_write(x->p, &r);
    /* a pause of 0..63 spins now and then, as a real writer has between
     * phases: the reader gets whole records mid-run, not only retries */
    for (volatile int spin = 0; spin < (int)(i % 64); spin++)
      ;
  }
  __atomic_add_fetch(&x->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void run_race(int nwriters) {
  const char *env = getenv("FT_PROGRESS_ITERS");
  race x = {.p = progress_store_new(), .iters = env ? atol(env) : 1000000, .nwriters = nwriters};
  assert_non_null(x.p);
  progress_rec r;
  make(&r, 0, 0);
  progress_store_write(x.p, &r);
  pthread_t th[2];
  wargs args[2];
  for (int w = 0; w < nwriters; w++) {
    args[w] = (wargs){&x, (uint64_t)w};
    assert_int_equal(pthread_create(&th[w], NULL, writer, &args[w]), 0);
  }
  uint64_t reads = 0, last[2] = {0, 0}, changes = 0;
  for (;;) {
    int finished = __atomic_load_n(&x.done, __ATOMIC_ACQUIRE) == nwriters;
    progress_store_read(x.p, &r);
    uint64_t w, i;
    if (!whole(&r, nwriters, &w, &i))
      fail_msg("torn record after %llu reads: phase %d step %lld seq %llx ns %llx",
               (unsigned long long)reads, r.phase, (long long)r.step,
               (unsigned long long)r.coll_seq, (unsigned long long)r.changed_ns);
    if (i < last[w]) /* a writer's records never go back */
      fail_msg("writer %llu went back from %llu to %llu", (unsigned long long)w,
               (unsigned long long)last[w], (unsigned long long)i);
    changes += i != last[w];
    last[w] = i;
    reads++;
    if (finished)
      break;
  }
  for (int w = 0; w < nwriters; w++)
    pthread_join(th[w], NULL);
  progress_store_read(x.p, &r);
  uint64_t w, i;
  assert_true(whole(&r, nwriters, &w, &i));
  assert_true(i == (uint64_t)x.iters); /* the last write of some writer */
  print_message("%d writer(s): %llu reads saw %llu different records, %llu retries\n", nwriters,
                (unsigned long long)reads, (unsigned long long)changes,
                (unsigned long long)progress_store_retries(x.p));
  assert_true(changes > 1); /* it read records while the writers wrote */
  progress_store_free(x.p);
}

static void test_never_torn_one_writer(void **state) {
  (void)state;
  run_race(1);
}

static void test_never_torn_two_writers(void **state) {
  (void)state;
  run_race(2);
}

/* ---- the ring ----------------------------------------------------------------- */

static void test_ring(void **state) {
  (void)state;
  progress_store *p = progress_store_new(); /* its first change: the initial record */
  assert_non_null(p);
  progress_rec out[PROGRESS_RING_LEN + 4], r;
  assert_int_equal(progress_store_ring(p, out, PROGRESS_RING_LEN), 1);
  assert_true(out[0].step == -1 && out[0].phase == FT_PHASE_IDLE);
  for (uint64_t i = 1; i <= 3; i++) {
    make(&r, 0, i);
    progress_store_write(p, &r);
  }
  assert_int_equal(progress_store_ring(p, out, 2), 2); /* max respected */
  assert_int_equal(progress_store_ring(p, out, PROGRESS_RING_LEN), 4);
  uint64_t w, i;
  for (int k = 0; k < 3; k++) /* newest first */
    assert_true(whole(&out[k], 1, &w, &i) && i == (uint64_t)(3 - k));
  for (uint64_t j = 4; j <= 100; j++) {
    make(&r, 0, j);
    progress_store_write(p, &r);
  }
  assert_int_equal(progress_store_ring(p, out, PROGRESS_RING_LEN + 4), PROGRESS_RING_LEN);
  for (int k = 0; k < PROGRESS_RING_LEN; k++)
    assert_true(whole(&out[k], 1, &w, &i) && i == (uint64_t)(100 - k));
  assert_int_equal(progress_store_try_read(p, &r), 0);
  assert_true(whole(&r, 1, &w, &i) && i == 100);
  progress_store_free(p);

  /* the process record: one entry per change, none for a write that
   * changes nothing */
  progress_generation();
  progress_phase(FT_PHASE_DATA);
  progress_phase(FT_PHASE_DATA);
  progress_phase_if(FT_PHASE_FORWARD, FT_PHASE_BACKWARD); /* not in forward: no change */
  progress_step_done(7, FT_PHASE_OPTIMIZER);
  ft_phase before = progress_coll_begin();
  progress_coll_end(before);
  int n = progress_ring(out, 5);
  assert_int_equal(n, 5);
  ft_phase want[5] = {FT_PHASE_OPTIMIZER, FT_PHASE_COLLECTIVE, FT_PHASE_OPTIMIZER, FT_PHASE_DATA,
                      FT_PHASE_IDLE};
  int64_t steps[5] = {7, 7, 7, -1, -1};
  uint64_t colls[5] = {1, 1, 0, 0, 0};
  for (int k = 0; k < 5; k++) {
    assert_int_equal(out[k].phase, want[k]);
    assert_true(out[k].step == steps[k] && out[k].coll_seq == colls[k]);
    assert_true(k == 0 || out[k].changed_ns <= out[k - 1].changed_ns);
  }
  progress_read(&r);
  assert_int_equal(progress_try_read(&r), 0);
  assert_true(r.phase == out[0].phase && r.changed_ns == out[0].changed_ns);
}

typedef struct ring_race {
  progress_store *p;
  long iters;
  int stop; /* atomic: stop before iters */
  int done; /* atomic */
} ring_race;

static void *ring_writer(void *arg) {
  ring_race *x = arg;
  progress_rec r;
  for (long i = 1; i <= x->iters && !__atomic_load_n(&x->stop, __ATOMIC_RELAXED); i++) {
    make(&r, 0, (uint64_t)i);
    progress_store_write(x->p, &r);
    for (volatile int spin = 0; spin < (int)(i % 64); spin++) /* as a real writer pauses */
      ;
  }
  __atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* n entries newest first: each whole, consecutive changes (the oldest may
 * be the store's first record, step -1, before change 1); 0 or -1 */
static int ring_ok(const progress_rec *out, int n) {
  uint64_t w, i, first = 0;
  for (int k = 0; k < n; k++) {
    if (k == n - 1 && out[k].step == -1 && out[k].phase == FT_PHASE_IDLE && first == (uint64_t)k)
      return 0;
    if (!whole(&out[k], 1, &w, &i))
      return -1;
    if (k == 0)
      first = i;
    else if (i != first - (uint64_t)k)
      return -1;
  }
  return 0;
}

static void test_ring_never_torn(void **state) {
  (void)state;
  /* the writer writes until the reader has seen enough of it: a loaded
   * machine may keep the two apart for a while, which only takes longer */
  ring_race x = {.p = progress_store_new(), .iters = 1L << 62};
  assert_non_null(x.p);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ring_writer, &x), 0);
  progress_rec out[PROGRESS_RING_LEN];
  uint64_t reads = 0, entries = 0, multi = 0, w, newest = 0, moved = 0;
  while (multi < 10000 || moved < 10000) {
    int n = progress_store_ring(x.p, out, PROGRESS_RING_LEN);
    if (ring_ok(out, n)) {
      for (int k = 0; k < n; k++)
        print_message("  %d: phase %d step %lld coll %llx ns %llx\n", k, out[k].phase,
                      (long long)out[k].step, (unsigned long long)out[k].coll_seq,
                      (unsigned long long)out[k].changed_ns);
      fail_msg("a torn or out-of-order ring after %llu reads", (unsigned long long)reads);
    }
    uint64_t i = 0;
    if (n > 0 && out[0].step >= 0 && whole(&out[0], 1, &w, &i) && i != newest) {
      moved++; /* a read that saw the writer move */
      newest = i;
    }
    reads++;
    entries += (uint64_t)n;
    multi += n >= 2;
  }
  __atomic_store_n(&x.stop, 1, __ATOMIC_RELAXED);
  pthread_join(th, NULL);
  print_message("ring: %llu reads, %llu entries, %llu with several, %llu saw a new one\n",
                (unsigned long long)reads, (unsigned long long)entries, (unsigned long long)multi,
                (unsigned long long)moved);
  progress_store_free(x.p);
}

/* ---- reads in a signal handler on the writer's own thread -------------------- */

static progress_store *g_sig_store;
static long g_sig_runs, g_sig_bad, g_sig_busy, g_sig_entries; /* atomic */

#define SIG_ADD(v, n) __atomic_add_fetch(&(v), (n), __ATOMIC_RELAXED)
#define SIG_GET(v) __atomic_load_n(&(v), __ATOMIC_RELAXED)

static void on_sig(int sig) {
  (void)sig;
  progress_rec out[PROGRESS_RING_LEN], r;
  int n = progress_store_ring(g_sig_store, out, PROGRESS_RING_LEN);
  uint64_t w, i;
  if (ring_ok(out, n))
    SIG_ADD(g_sig_bad, 1);
  if (progress_store_try_read(g_sig_store, &r))
    SIG_ADD(g_sig_busy, 1);                       /* interrupted mid-write: nothing whole to give */
  else if (r.step != -1 && !whole(&r, 1, &w, &i)) /* -1: the store's first record */
    SIG_ADD(g_sig_bad, 1);
  SIG_ADD(g_sig_entries, n);
  SIG_ADD(g_sig_runs, 1);
}

static void test_ring_in_handler(void **state) {
  (void)state;
  ring_race x = {.p = progress_store_new(), .iters = 1L << 62};
  assert_non_null(x.p);
  g_sig_store = x.p;
  struct sigaction sa = {.sa_handler = on_sig};
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ring_writer, &x), 0);
  for (int k = 0; k < 20000; k++) {
    assert_int_equal(pthread_kill(th, SIGUSR2), 0);
    if (k % 16 == 0)
      sleep_ms(0); /* let it write between some of them */
  }
  while (SIG_GET(g_sig_runs) == 0) /* pending signals merge: at least one ran */
    sleep_ms(1);
  __atomic_store_n(&x.stop, 1, __ATOMIC_RELAXED);
  pthread_join(th, NULL);
  signal(SIGUSR2, SIG_DFL);
  print_message("handler: %ld runs, %ld mid-write, %ld entries\n", SIG_GET(g_sig_runs),
                SIG_GET(g_sig_busy), SIG_GET(g_sig_entries));
  assert_int_equal(SIG_GET(g_sig_bad), 0);
  progress_store_free(x.p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_process_record),         cmocka_unit_test(test_age),
      cmocka_unit_test(test_storage_wait),           cmocka_unit_test(test_never_torn_one_writer),
      cmocka_unit_test(test_never_torn_two_writers), cmocka_unit_test(test_ring),
      cmocka_unit_test(test_ring_never_torn),        cmocka_unit_test(test_ring_in_handler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
