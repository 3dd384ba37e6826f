/*
 * test_ft_bug: FT_BUG and FT_ASSERT_INV (common/ft_bug.h), in a child
 * process each, since both end it.
 *
 * FT_BUG aborts (SIGABRT) in every build, after "file:line: BUG: message"
 * on stderr. FT_ASSERT_INV with a false condition does the same ("invariant
 * broken: <condition>: message") where FT_CHECK_INVARIANTS is defined (Debug
 * and sanitizer builds: the root CMakeLists.txt); elsewhere it never aborts
 * and never even evaluates its condition. A true condition never aborts.
 */
#include "test_inv.h" /* inv_run_child; cmocka and ft_bug.h */

static int evaluated;
static int cond_seen(int v) {
  evaluated++;
  return v;
}

static void bug_body(void) {
  FT_BUG("node %d in state %s", 3, "nowhere");
}
static void inv_false_body(void) {
  int gen = 2;
  FT_ASSERT_INV(cond_seen(gen == 1), "gen %d", gen);
  _exit(evaluated ? 10 : 0); /* 10: evaluated, yet did not abort */
}
static void inv_true_body(void) {
  FT_ASSERT_INV(cond_seen(1), "never printed");
}

static void test_bug_aborts(void **state) {
  (void)state;
  char err[1024];
  int st = inv_run_child(bug_body, err, sizeof err);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGABRT);
  assert_non_null(strstr(err, "test_ft_bug.c:"));
  assert_non_null(strstr(err, ": BUG: node 3 in state nowhere\n"));
}

static void test_assert_false(void **state) {
  (void)state;
  char err[1024];
  int st = inv_run_child(inv_false_body, err, sizeof err);
#ifdef FT_CHECK_INVARIANTS
  assert_int_equal(FT_INVARIANTS_ON, 1);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGABRT);
  assert_non_null(strstr(err, "test_ft_bug.c:"));
  assert_non_null(strstr(err, "invariant broken: cond_seen(gen == 1): gen 2\n"));
#else
  assert_int_equal(FT_INVARIANTS_ON, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0); /* not aborted, condition not evaluated */
  assert_string_equal(err, "");
#endif
}

static void test_assert_true(void **state) {
  (void)state;
  char err[1024];
  int st = inv_run_child(inv_true_body, err, sizeof err);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_string_equal(err, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bug_aborts),
      cmocka_unit_test(test_assert_false),
      cmocka_unit_test(test_assert_true),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
