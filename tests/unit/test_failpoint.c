/*
 * test_failpoint: FT_FAILPOINTS's parser (common/ft_failpoint.h).
 *
 * Strict: every catalogue name with a whole integer (or, hang_in, one of its
 * words) parses; trailing text (hang_at_step=40@node1, the old parser's
 * silent 40), an empty or signed-with-plus or overflowing number, a word
 * not among hang_in's, an unknown name, more than 16 entries and a modifier
 * without what it modifies are errors naming the failpoint and the text.
 * The process's own variable: an invalid one enables nothing (checked in a
 * child with FT_FAILPOINTS=hang_at_step=40@node1); a valid one gives its
 * integers and words, and the hang stalls only the targeted node and rank,
 * only at its place (a child that must stay stalled, and one that must
 * return); hang_in=rendezvous in a generation that is to train step S;
 * hang_in=cuda taken once by a caller that stalls its own way.
 */
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
#include <time.h>
#include <unistd.h>

#include "ft_failpoint.h"

static void test_valid(void **state) {
  (void)state;
  const char *ok[] = {"",
                      "hang_at_step=40",
                      "hang_at_step=0",
                      "doctor_flip_bit=-1",
                      "chaos_kill_spares",
                      "chaos_kill_spares=1",
                      "min_step_ms=60,",
                      "min_step_ms=60,,slow_rank=1",
                      "hang_at_step=3,hang_node=1",
                      "hang_rank=2,hang_at_step=3",
                      "hang_at_step=3,hang_node=1,hang_rank=0,hang_in=compute",
                      "hang_at_step=3,hang_in=data",
                      "hang_at_step=3,hang_in=collective",
                      "hang_at_step=3,hang_in=checkpoint",
                      "hang_at_step=3,hang_in=rendezvous",
                      "hang_at_step=3,hang_in=cuda",
                      "sdc_corrupt_node=1,sdc_corrupt_from=6",
                      "kill_node_at_step=15,kill_after_commit=10,kill_gang_position=0",
                      "crash_at_step=9223372036854775807"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char err[256] = "";
    if (ft_failpoint_parse(ok[i], err, sizeof err) != 0)
      fail_msg("'%s' refused: %s", ok[i], err);
  }
  assert_int_equal(ft_failpoint_parse(NULL, NULL, 0), 0);
}

/* spec is refused, and the message holds both words. */
static void refused(const char *spec, const char *w1, const char *w2) {
  char err[512] = "";
  if (ft_failpoint_parse(spec, err, sizeof err) == 0)
    fail_msg("'%s' was accepted", spec);
  if (!strstr(err, w1) || (w2 && !strstr(err, w2)))
    fail_msg("'%s': the error does not name '%s'%s%s: %s", spec, w1, w2 ? " and " : "",
             w2 ? w2 : "", err);
  assert_int_equal(ft_failpoint_parse(spec, NULL, 0), -1); /* no buffer: still refused */
}

static void test_not_whole_integers(void **state) {
  (void)state;
  refused("hang_at_step=40@node1", "hang_at_step", "'40@node1'");
  refused("hang_at_step=40 ", "hang_at_step", "'40 '");
  refused("min_step_ms=1e3", "min_step_ms", "'1e3'");
  refused("min_step_ms=1.5", "min_step_ms", "'1.5'");
  refused("slow_rank=", "slow_rank", "''");
  refused("slow_rank= 1", "slow_rank", "' 1'");
  refused("slow_rank=+1", "slow_rank", "'+1'");
  refused("slow_rank=-", "slow_rank", "'-'");
  refused("slow_rank=0x10", "slow_rank", "'0x10'");
  refused("crash_at_step=99999999999999999999", "crash_at_step", "99999999999999999999");
  refused("min_step_ms=60,hang_at_step=four", "hang_at_step", "'four'");
}

static void test_words_names_modifiers(void **state) {
  (void)state;
  refused("hang_at_step=3,hang_in=gpu", "hang_in", "'gpu'");
  refused("hang_at_step=3,hang_in", "hang_in", "compute|data|collective|checkpoint");
  refused("hang_at_step=3,hang_in=Data", "hang_in", "'Data'");
  refused("hang_at_stp=3", "hang_at_stp", NULL);
  refused("hang_node@1=3", "hang_node@1", NULL);
  refused("=3", "unknown failpoint ''", NULL);
  refused("hang_node=1", "hang_node", "needs hang_at_step");
  refused("hang_gen=1", "hang_gen", "needs hang_at_step");
  refused("hang_rank=0", "hang_rank", "needs hang_at_step");
  refused("hang_in=data", "hang_in", "needs hang_at_step");
  refused("sdc_corrupt_from=6", "sdc_corrupt_from", "needs sdc_corrupt_node");
  char many[1024] = "";
  for (int i = 0; i < FT_FAILPOINT_MAX; i++)
    strcat(many, "slow_rank=1,");
  assert_int_equal(ft_failpoint_parse(many, NULL, 0), 0);
  strcat(many, "min_step_ms=5");
  refused(many, "too many", "min_step_ms");
}

/* Runs fn in a child with FT_FAILPOINTS=spec: its exit status, or -1 if it
 * is still running after wait_ms (then it is killed). */
static int in_child(const char *spec, void (*fn)(void), int wait_ms) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("FT_FAILPOINTS", spec, 1);
    fn();
    _exit(0);
  }
  int st;
  for (int i = 0; i < wait_ms / 10; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

/* An invalid variable enables nothing: the old parser took 40. */
static void child_invalid(void) {
  char err[256] = "";
  int64_t a = -7;
  if (ft_failpoint("hang_at_step", &a) || a != -7)
    _exit(1);
  if (ft_failpoint_check(err, sizeof err) == 0 || !strstr(err, "40@node1"))
    _exit(2);
}

static void test_invalid_env_enables_nothing(void **state) {
  (void)state;
  assert_int_equal(in_child("hang_at_step=40@node1", child_invalid, 5000), 0);
}

static void child_valid(void) {
  int64_t a = 0;
  if (ft_failpoint_check(NULL, 0) != 0)
    _exit(1);
  if (!ft_failpoint("hang_at_step", &a) || a != 5 || !ft_failpoint_at("hang_node", 1))
    _exit(2);
  const char *w = ft_failpoint_word("hang_in");
  if (!w || strcmp(w, "data") != 0 || ft_failpoint_word("hang_rank") != NULL)
    _exit(3);
  if (!ft_failpoint("hang_in", &a) || a != 0)
    _exit(4);
}

static void test_valid_env(void **state) {
  (void)state;
  assert_int_equal(in_child("hang_at_step=5,hang_node=1,hang_in=data", child_valid, 5000), 0);
}

/* hang_at_step=5,hang_node=1,hang_in=data: another node, another step,
 * another place return; node 1 at step 5 in the data loader stalls. */
static void child_not_targeted(void) {
  ft_failpoint_hang_arm(0, 1, 1, 5); /* node 0 */
  ft_failpoint_hang_here(FT_HANG_DATA);
  ft_failpoint_hang_arm(1, 1, 1, 4); /* step 4 */
  ft_failpoint_hang_here(FT_HANG_DATA);
  ft_failpoint_hang_arm(1, 1, 1, 6); /* step 6 */
  ft_failpoint_hang_here(FT_HANG_DATA);
  ft_failpoint_hang_arm(1, 1, 1, 5);
  ft_failpoint_hang_here(FT_HANG_AFTER); /* another place */
  ft_failpoint_hang_here(FT_HANG_COMPUTE);
}

static void child_targeted(void) {
  ft_failpoint_hang_arm(1, 3, 1, 5);
  ft_failpoint_hang_here(FT_HANG_DATA);
  _exit(9); /* must not get here */
}

static void child_rank(void) { /* rank 1 of node 0 at step 5, after the step */
  ft_failpoint_hang_arm(0, 1, 1, 5);
  ft_failpoint_hang_here(FT_HANG_AFTER);
  _exit(9);
}

static void child_checkpoint(void) { /* the first checkpoint at or after S */
  ft_failpoint_hang_arm(0, 0, 1, 2);
  ft_failpoint_hang_here(FT_HANG_CHECKPOINT);
  ft_failpoint_hang_arm(0, 0, 1, 4);
  ft_failpoint_hang_here(FT_HANG_CHECKPOINT);
  _exit(9);
}

/* rendezvous: a generation whose first step is S or earlier (arm's step) */
static void child_rendezvous(void) {
  ft_failpoint_hang_arm(0, 0, 2, 4); /* a generation resuming after S: trains on */
  ft_failpoint_hang_here(FT_HANG_RENDEZVOUS);
  ft_failpoint_hang_arm(0, 0, 1, 1); /* the run's start */
  ft_failpoint_hang_here(FT_HANG_AFTER);
  ft_failpoint_hang_here(FT_HANG_RENDEZVOUS);
  _exit(9);
}

/* cuda: the caller stalls its own way; taken once, then disarmed */
static void child_take(void) {
  ft_failpoint_hang_arm(0, 0, 1, 4);
  if (ft_failpoint_hang_take(FT_HANG_CUDA))
    _exit(1); /* step 4: not armed */
  ft_failpoint_hang_arm(0, 0, 1, 5);
  if (ft_failpoint_hang_take(FT_HANG_COMPUTE))
    _exit(2); /* another place */
  if (!ft_failpoint_hang_take(FT_HANG_CUDA))
    _exit(3);
  if (ft_failpoint_hang_take(FT_HANG_CUDA))
    _exit(4);                           /* taken already */
  ft_failpoint_hang_here(FT_HANG_CUDA); /* disarmed: returns */
}

static void test_hang_targets(void **state) {
  (void)state;
  const char *fp = "hang_at_step=5,hang_node=1,hang_in=data";
  assert_int_equal(in_child(fp, child_not_targeted, 5000), 0);
  assert_int_equal(in_child(fp, child_targeted, 500), -1);                       /* stalled */
  assert_int_equal(in_child("hang_at_step=5,hang_rank=2", child_rank, 5000), 9); /* not it */
  assert_int_equal(in_child("hang_at_step=5,hang_rank=1", child_rank, 500), -1);
  assert_int_equal(in_child("hang_at_step=5,hang_rank=1,hang_node=1", child_rank, 5000), 9);
  assert_int_equal(in_child("hang_at_step=3,hang_in=checkpoint", child_checkpoint, 500), -1);
  /* hang_gen: only in that generation (child_rank arms in generation 1) */
  assert_int_equal(in_child("hang_at_step=5,hang_rank=1,hang_gen=2", child_rank, 5000), 9);
  assert_int_equal(in_child("hang_at_step=5,hang_rank=1,hang_gen=1", child_rank, 500), -1);
  assert_int_equal(in_child("hang_at_step=3,hang_in=rendezvous", child_rendezvous, 500), -1);
  assert_int_equal(in_child("hang_at_step=0,hang_in=rendezvous", child_rendezvous, 5000), 9);
  assert_int_equal(in_child("hang_at_step=5,hang_in=cuda", child_take, 5000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_not_whole_integers),
      cmocka_unit_test(test_words_names_modifiers),
      cmocka_unit_test(test_invalid_env_enables_nothing),
      cmocka_unit_test(test_valid_env),
      cmocka_unit_test(test_hang_targets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
