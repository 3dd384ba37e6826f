/*
 * test_ranks: waiting for the forked rank processes of a collectives test
 * (test_comm.c on Gloo, test_comm_nccl.c on NCCL), so that a rank that hangs
 * is a failure with a status, never a stuck test. Header-only, for tests.
 */
#ifndef TEST_RANKS_H
#define TEST_RANKS_H

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exit codes of a rank process, and the status of one that hung. */
enum {
  RX_OK = 0,
  RX_SETUP = 1,
  RX_WRONG = 2,
  RX_COMM = 3,
  RX_NOFAIL = 4,
  RX_SLOW = 5,
  RX_NOMEM = 6
};
enum { RX_DIED_ECOMM = 10, RX_DIED_ETIMEDOUT = 11 };
#define HUNG (-1)

/* In a rank function (with `int rank` in scope): a call of the code under
 * test that must succeed, and a check of its results. */
#define CALL(expr)                                                                                 \
  do {                                                                                             \
    int rc_ = (expr);                                                                              \
    if (rc_) {                                                                                     \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #expr, ft_strerror(rc_), ft_err_detail());    \
      return RX_COMM;                                                                              \
    }                                                                                              \
  } while (0)

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: check failed: %s: ", rank, #cond);                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      return RX_WRONG;                                                                             \
    }                                                                                              \
  } while (0)

static long long test_ranks_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* $TMPDIR, or /tmp. */
static const char *test_ranks_tmpbase(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

static int test_ranks_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* Removes a directory tree (the rendezvous and scratch folders). */
static void test_ranks_rm_tree(const char *dir) {
  nftw(dir, test_ranks_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Reaps pid[0..n-1]: status[r] = exit code, 128+signal, or hung_code for a
 * rank still running deadline_s from now (it is then killed). straggler > 0:
 * rank straggler-1 is SIGKILLed when it is the only one left (the test's
 * deliberately stuck peer). */
static void test_ranks_reap(const pid_t *pid, int n, int straggler, int deadline_s, int hung_code,
                            int *status) {
  int done[64] = {0};
  long long deadline = test_ranks_now_ms() + deadline_s * 1000LL;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; r++) {
      int st;
      if (done[r] || waitpid(pid[r], &st, WNOHANG) != pid[r])
        continue;
      done[r] = 1;
      left--;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (left == 1 && straggler > 0 && !done[straggler - 1]) {
      kill(pid[straggler - 1], SIGKILL);
      continue;
    }
    if (left > 0 && test_ranks_now_ms() > deadline) {
      for (int r = 0; r < n; r++) {
        if (done[r])
          continue;
        fprintf(stderr, "rank %d hung: killing it\n", r);
        kill(pid[r], SIGKILL);
        waitpid(pid[r], NULL, 0);
        status[r] = hung_code;
      }
      break;
    }
    if (left > 0)
      usleep(10 * 1000);
  }
}

#endif
