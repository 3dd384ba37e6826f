/*
 * test_ranks: the multi-rank fork harness of the collectives tests
 * (test_comm.c on Gloo, test_comm_nccl.c on NCCL): fork the rank processes
 * around a fresh rendezvous directory, give each its comm_filestore and
 * comm_opts, and wait for them so that a rank that hangs is a failure with a
 * status, never a stuck test. Header-only, for tests; include it after
 * cmocka.h.
 */
#ifndef TEST_RANKS_H
#define TEST_RANKS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "comm_filestore.h"
#include "ft_clock.h"
#include "ft_err.h"

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
  long long deadline = ft_now_ms() + deadline_s * 1000LL;
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
    if (left > 0 && ft_now_ms() > deadline) {
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

/* A group of rank processes, as a test asks for it. */
typedef struct test_group {
  int world;      /* ranks in the comm */
  int spawn;      /* ranks actually started (0..spawn-1); 0 means world */
  int timeout_ms; /* comm_opts.timeout_ms */
  int connect_timeout_ms;
  const char *scratch; /* a directory shared by the ranks (NULL: a fresh one; Gloo test only) */
  int straggler;       /* > 0: rank straggler-1 is SIGKILLed once all others exited */
} test_group;

/* In rank `rank` of group g: its rendezvous store over kvdir and its
 * comm_opts (key prefix "gen1/"). A store that cannot be opened ends the
 * rank process with RX_SETUP. */
static void test_ranks_setup(const char *kvdir, int rank, const test_group *g,
                             const char *bind_addr, comm_kv *kv, comm_opts *o) {
  if (comm_filestore_init(kv, kvdir) != FT_OK) {
    fprintf(stderr, "rank %d: filestore: %s\n", rank, ft_err_detail());
    _exit(RX_SETUP);
  }
  *o = (comm_opts){.rank = rank,
                   .world = g->world,
                   .bind_addr = bind_addr,
                   .prefix = "gen1/",
                   .timeout_ms = g->timeout_ms,
                   .connect_timeout_ms = g->connect_timeout_ms};
}

/* What a rank process gets: its group, the group's scratch directory (or
 * NULL), and the test's scenario function (cast back to its own type by the
 * test) with its argument. */
typedef struct test_rank_ctx {
  const test_group *g;
  const char *scratch;
  void (*fn)(void);
  void *arg;
} test_rank_ctx;

/* The body of a rank process: never returns (it exits with its RX_ code). */
typedef void (*test_rank_main)(const char *kvdir, int rank, const test_rank_ctx *ctx);

/* Forks the group's ranks (g->spawn, or g->world), each running rank_main
 * around a fresh rendezvous directory ($TMPDIR/ft_test_<tag>_kv.XXXXXX),
 * reaps them as test_ranks_reap does (status[r]: exit code, 128+signal, or
 * HUNG after deadline_s), then removes the directory. */
static void test_ranks_run(const char *tag, const test_group *g, const char *scratch,
                           int deadline_s, test_rank_main rank_main, void (*fn)(void), void *arg,
                           int *status) {
  char kvdir[256];
  pid_t pid[64];
  int spawn = g->spawn ? g->spawn : g->world;
  test_rank_ctx ctx = {g, scratch, fn, arg};
  assert_true(spawn > 0 && spawn <= 64);
  snprintf(kvdir, sizeof kvdir, "%s/ft_test_%s_kv.XXXXXX", test_ranks_tmpbase(), tag);
  assert_non_null(mkdtemp(kvdir));
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < spawn; r++) {
    pid[r] = fork();
    assert_true(pid[r] >= 0);
    if (pid[r] == 0) {
      rank_main(kvdir, r, &ctx);
      _exit(RX_SETUP); /* rank_main must exit */
    }
  }
  test_ranks_reap(pid, spawn, g->straggler, deadline_s, HUNG, status);
  test_ranks_rm_tree(kvdir);
}

/* Every one of ranks 0..n-1 exited with RX_OK (the others are printed). */
static void test_ranks_expect_ok(int n, const int *status) {
  for (int r = 0; r < n; r++) {
    if (status[r] != RX_OK)
      fprintf(stderr, "rank %d exited with %d\n", r, status[r]);
    assert_int_equal(status[r], RX_OK);
  }
}

#endif
