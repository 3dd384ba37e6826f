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
 * FT_PROGRESS_ITERS sets the writes per writer (default 1,000,000).
 */
#include <pthread.h>
#include <setjmp.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_process_record),
      cmocka_unit_test(test_age),
      cmocka_unit_test(test_never_torn_one_writer),
      cmocka_unit_test(test_never_torn_two_writers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
