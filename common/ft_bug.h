/*
 * ft_bug: states that cannot happen, and invariants checked while running.
 *
 * FT_BUG(fmt, ...) is for a branch the code's own invariants rule out (a
 * switch on an enum that fell off its cases, a state x phase pair the state
 * machine never builds). It prints "file:line: BUG: message" to stderr and
 * abort()s, in every build: carrying on from a state that cannot happen
 * would turn one bug into a wrong checkpoint or a wrong verdict.
 *
 * FT_ASSERT_INV(cond, fmt, ...) checks one numbered invariant of a state
 * machine or store (sup_recovery.c's INVARIANTS, ckpt_commit.c's I1-I3 and
 * C1-C6). It is compiled in where FT_CHECK_INVARIANTS is defined: the root
 * CMakeLists.txt defines it for Debug builds and whenever SANITIZE is set.
 * Elsewhere it is a no-op that still type-checks its arguments and never
 * evaluates them, so a check may be as costly as it needs to be.
 *
 * Like SQLite's assert_pager_state(), each module gathers its checks in one
 * function taking the whole state (check_state) and calls it on entry to
 * and exit from every transition; a failing check is a bug in this project,
 * never a user or environment error, which is why it aborts rather than
 * returning an ft_err code.
 */
#ifndef FT_BUG_H
#define FT_BUG_H

#include <stdio.h>
#include <stdlib.h>

/* The message goes to stderr unbuffered, then the process aborts (a core
 * dump, or the sanitizer's report, follows). */
#define FT_BUG(...)                                                                                \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: BUG: ", __FILE__, __LINE__);                                           \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
    fflush(stderr);                                                                                \
    abort();                                                                                       \
  } while (0)

#ifdef FT_CHECK_INVARIANTS
#define FT_INVARIANTS_ON 1
#define FT_ASSERT_INV(cond, ...)                                                                   \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fflush(stderr);                                                                              \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)
#else
#define FT_INVARIANTS_ON 0
#define FT_ASSERT_INV(cond, ...)                                                                   \
  do {                                                                                             \
    if (0 && (cond)) {                                                                             \
      fprintf(stderr, __VA_ARGS__);                                                                \
    }                                                                                              \
  } while (0)
#endif

#endif
