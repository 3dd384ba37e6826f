/*
 * test_stackdump: a worker's training thread writes its stack on SIGUSR1
 * (worker/stackdump.h), with real threads, processes and signals.
 *
 * 1. Forwarded: a thread of this process that is not the main one plays
 *    the training thread (stackdump_init on it) and stalls in
 *    test_stuck_training_fn; the process gets SIGUSR1 from kill(2), which
 *    the kernel usually hands to the main thread (it is running). What
 *    lands on stderr must be the stalled thread's stack: the header with
 *    node, slot, rank and phase, a frame naming test_stuck_training_fn,
 *    its last progress, the end line; and none of the main thread's frames
 *    (cmocka's).
 * 2. A stop right behind the request: child processes whose main thread
 *    trains, as the worker's does, beside another thread, get SIGUSR1 and
 *    SIGTERM back to back (what the supervisor does to a hung worker);
 *    each must die by SIGTERM, as without the handler, and leave its whole
 *    dump in its log, end line included. 20 rounds, since which thread
 *    takes which signal varies (a version that let the SIGTERM's thread
 *    decide alone lost the dump in 1 of 8 rounds).
 * 3. The same with the STOP path instead of SIGTERM: the other thread
 *    calls stackdump_exit(7) right after the SIGUSR1; exit code 7, dump
 *    whole.
 * 4. The DUMP path (a worker the supervisor cannot signal: ctl.c's reader
 *    thread gets DUMP, then STOP): nobody signals the child from outside;
 *    its other thread calls stackdump_request() and at once
 *    stackdump_exit(7); exit code 7, dump whole.
 * The executable is linked with -rdynamic (tests/worker.cmake), as the
 * worker is, so that its functions have names in the stack.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"
#include "stackdump.h"

static volatile int g_release; /* the stalled thread may return */
static volatile int g_ready;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The stall the stack must show: a named, never inlined function. */
__attribute__((noinline)) void test_stuck_training_fn(void) {
  __atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&g_release, __ATOMIC_ACQUIRE))
    sleep_ms(5);
}

static void *training(void *arg) {
  (void)arg;
  assert_int_equal(stackdump_init(3, 1), 0);
  stackdump_set_rank(5);
  progress_generation();
  progress_step_done(6, FT_PHASE_DATA);
  progress_phase(FT_PHASE_FORWARD);
  progress_phase(FT_PHASE_BACKWARD);
  test_stuck_training_fn();
  return NULL;
}

/* stderr (fd 2) into a fresh temporary file; returns its fd (for reading)
 * and the saved stderr in *saved. */
static int capture_stderr(int *saved) {
  char path[] = "/tmp/test_stackdump.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  fflush(stderr);
  *saved = dup(STDERR_FILENO);
  assert_true(*saved >= 0);
  assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  return fd;
}

/* The file's text (malloc'ed, NUL-terminated). */
static char *slurp(int fd) {
  off_t n = lseek(fd, 0, SEEK_END);
  assert_true(n >= 0);
  char *b = calloc(1, (size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(pread(fd, b, (size_t)n, 0), n);
  return b;
}

static const char *const END = "worker: end of the training thread's stack";

static void check_dump(const char *out) {
  assert_non_null(strstr(out, "worker: stack of the training thread (node 3 slot 1, rank 5, "
                              "step 6, phase backward, collective 0, no progress for "));
  assert_non_null(strstr(out, "test_stuck_training_fn"));
  const char *ring = strstr(out, "worker: the training thread's last progress (newest first):");
  assert_non_null(ring);
  /* newest first: backward, then forward, then data after step 6 */
  const char *b = strstr(ring, "step 6, phase backward");
  const char *f = strstr(ring, "step 6, phase forward");
  const char *d = strstr(ring, "step 6, phase data");
  assert_true(b && f && d && b < f && f < d);
  assert_non_null(strstr(out, END));
}

static void test_forwarded(void **state) {
  (void)state;
  int saved, fd = capture_stderr(&saved);
  g_release = g_ready = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, training, NULL), 0);
  while (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))
    sleep_ms(1);
  assert_int_equal(kill(getpid(), SIGUSR1), 0);
  char *out = NULL;
  for (int i = 0; i < 2000; i++) { /* a guard against a hang, not a time limit */
    free(out);
    out = slurp(fd);
    if (strstr(out, END))
      break;
    sleep_ms(5);
  }
  __atomic_store_n(&g_release, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  print_message("%s", out);
  check_dump(out);
  assert_null(strstr(out, "cmocka")); /* not the main thread's stack */
  free(out);
}

/* A child's other thread: says the training thread is in place, then, for
 * the STOP path (go_r >= 0), waits for a byte and ends the process as the
 * control thread does on STOP, with stackdump_exit(7); a 'd' first asks
 * for the dump itself, as the control thread does on DUMP. */
typedef struct helper_args {
  int ready_w, go_r;
} helper_args;

static void *helper(void *arg) {
  helper_args *h = arg;
  while (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))
    sleep_ms(1);
  if (write(h->ready_w, "r", 1) != 1)
    _exit(91);
  char c;
  if (h->go_r >= 0 && read(h->go_r, &c, 1) == 1) {
    if (c == 'd' && stackdump_request())
      _exit(93);
    stackdump_exit(7);
  }
  for (;;)
    pause();
  return NULL;
}

/* A child: its main thread trains, as the worker's does (the kernel
 * hands a process's signal to its main thread when it can), beside a
 * helper thread. */
static void child(int logfd, int ready_w, int go_r) {
  dup2(logfd, STDERR_FILENO);
  g_release = g_ready = 0;
  static helper_args h;
  h = (helper_args){ready_w, go_r};
  pthread_t th;
  if (pthread_create(&th, NULL, helper, &h))
    _exit(90);
  training(NULL);
  _exit(92);
}

enum { BY_SIGTERM, BY_STOP, BY_DUMP_STOP };

/* Rounds of: a child set up, SIGUSR1, then at once SIGTERM (BY_SIGTERM)
 * or the STOP path (BY_STOP); or DUMP and STOP from its own other thread
 * (BY_DUMP_STOP). The child must end as the stop says, its dump whole. */
static void stop_rounds(int how) {
  int stop = how != BY_SIGTERM;
  for (int round = 0; round < 20; round++) {
    char path[] = "/tmp/test_stackdump.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int p[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(p[0]);
      close(go[1]);
      child(fd, p[1], stop ? go[0] : -1);
    }
    close(p[1]);
    close(go[0]);
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    /* as the supervisor asks: to the main thread (tgkill), where the
     * worker trains */
    if (how != BY_DUMP_STOP)
      assert_int_equal(syscall(SYS_tgkill, pid, pid, SIGUSR1), 0);
    if (stop)
      assert_int_equal(write(go[1], how == BY_DUMP_STOP ? "d" : "g", 1), 1);
    else
      assert_int_equal(kill(pid, SIGTERM), 0);
    close(go[1]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *out = slurp(fd);
    close(fd);
    int as_said =
        stop ? WIFEXITED(st) && WEXITSTATUS(st) == 7 : WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM;
    if (!as_said || !strstr(out, END))
      print_message("round %d: status %#x, log:\n%s", round, st, out);
    assert_true(as_said);
    check_dump(out);
    free(out);
  }
}

static void test_sigterm_waits(void **state) {
  (void)state;
  stop_rounds(BY_SIGTERM);
}

static void test_stop_waits(void **state) {
  (void)state;
  stop_rounds(BY_STOP);
}

static void test_dump_then_stop(void **state) {
  (void)state;
  stop_rounds(BY_DUMP_STOP);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forwarded),
      cmocka_unit_test(test_sigterm_waits),
      cmocka_unit_test(test_stop_waits),
      cmocka_unit_test(test_dump_then_stop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
