/*
 * test_inv.h: a death test for an invariant check (FT_ASSERT_INV,
 * common/ft_bug.h). The body breaks one invariant on purpose (drives the
 * module into a state only a bug could produce) in a child process, which
 * must then abort with "invariant broken: ..." and the invariant's own
 * words on stderr. Where checks are compiled out (a RelWithDebInfo build)
 * the test is skipped: nothing would catch the bug there, by design.
 */
#ifndef TEST_INV_H
#define TEST_INV_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ft_bug.h"

/* Runs body in a child with stderr into a pipe; returns its wait status
 * and what it wrote (up to n-1 bytes) in out. */
static inline int inv_run_child(void (*body)(void), char *out, size_t n) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    dup2(p[1], 2);
    signal(SIGABRT, SIG_DFL);
    body();
    _exit(0);
  }
  close(p[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < n && (r = read(p[0], out + got, n - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = 0;
  close(p[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

/* body must abort naming the invariant: want is a piece of its message. */
#define assert_inv_broken(body, want)                                                              \
  do {                                                                                             \
    if (!FT_INVARIANTS_ON)                                                                         \
      skip();                                                                                      \
    char err_[8192];                                                                               \
    int st_ = inv_run_child(body, err_, sizeof err_);                                              \
    fprintf(stderr, "%s", err_); /* the check's own words, in the test's log */                    \
    if (!WIFSIGNALED(st_) || WTERMSIG(st_) != SIGABRT || !strstr(err_, "invariant broken: ") ||    \
        !strstr(err_, want))                                                                       \
      fail_msg("expected an abort naming \"%s\"; status %#x, stderr:\n%s", want, st_, err_);       \
  } while (0)

#endif
