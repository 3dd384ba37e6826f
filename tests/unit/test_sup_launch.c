/* Unit tests of supervisor/sup_launch.c: argv, shell quoting, templates, and
 * one real spawn (process group, environment token, log file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_launch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_argv(void **st) {
  const char *sets[] = {"train.lr=1e-3", "data.train=/d/x y*.bin"};
  sup_worker_args a = {.worker = "/b/worker",
                       .connect = "127.0.0.1:4242",
                       .node = 3,
                       .slot = 1,
                       .store = "local:/s/store",
                       .runfile = "/r/run.yaml",
                       .steps = 40,
                       .sets = sets,
                       .nsets = 2};
  char **v = sup_worker_argv(&a);
  assert_non_null(v);
  const char *want[] = {"/b/worker",
                        "--connect",
                        "127.0.0.1:4242",
                        "--node",
                        "3",
                        "--slot",
                        "1",
                        "--store",
                        "local:/s/store",
                        "--runfile",
                        "/r/run.yaml",
                        "--steps",
                        "40",
                        "--set",
                        "train.lr=1e-3",
                        "--set",
                        "data.train=/d/x y*.bin"};
  int n = 0;
  for (; v[n]; n++) {
    assert_true(n < 17);
    assert_string_equal(v[n], want[n]);
  }
  assert_int_equal(n, 17);
  sup_argv_free(v);
  a.steps = -1;
  a.nsets = 0;
  v = sup_worker_argv(&a);
  for (n = 0; v[n]; n++)
    assert_string_not_equal(v[n], "--steps");
  assert_int_equal(n, 11);
  sup_argv_free(v);
}

static void check_quote(const char *in, const char *want) {
  char *q = sup_shell_quote(in);
  assert_non_null(q);
  assert_string_equal(q, want);
  free(q);
}

static void test_quote(void **st) {
  check_quote("plain-1.0/x:y=z", "plain-1.0/x:y=z");
  check_quote("", "''");
  check_quote("a b", "'a b'");
  check_quote("it's", "'it'\\''s'");
  check_quote("$(rm -rf /)", "'$(rm -rf /)'");
  check_quote("*.bin", "'*.bin'");
}

/* The round trip through a real shell: sh -c 'printf %s\\n ARGS' prints
 * each argument on its own line exactly. */
static void test_quote_roundtrip(void **st) {
  char *args[] = {"printf", "%s|", "a b", "it's", "$HOME", "`x`", "\"q\"", "back\\slash", "", NULL};
  char *joined = sup_shell_join(args);
  assert_non_null(joined);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "sh -c %s", joined);
  char *outer = sup_shell_quote(joined);
  snprintf(cmd, sizeof cmd, "sh -c %s", outer);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[512] = {0};
  size_t n = fread(out, 1, sizeof out - 1, p);
  pclose(p);
  out[n] = 0;
  assert_string_equal(out, "a b|it's|$HOME|`x`|\"q\"|back\\slash||");
  free(outer);
  free(joined);
}

static void test_template(void **st) {
  char *t = sup_template_expand("ssh {host} {argv} # {host}{other}", "n1", "w --node 1");
  assert_string_equal(t, "ssh n1 w --node 1 # n1{other}");
  free(t);
  t = sup_template_expand("env {argv}", "", "x");
  assert_string_equal(t, "env x");
  free(t);
}

static void test_spawn(void **st) {
  char log[] = "/tmp/test_sup_launch.XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  setenv("FT_RUN_TOKEN", "stale-token-from-parent", 1);
  const char *tok = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  sup_spawn sp = {.cmd = "echo token=$FT_RUN_TOKEN; echo pgid=$(ps -o pgid= -p $$ | tr -d ' ')",
                  .token = tok,
                  .log_path = log,
                  .pgid = 0};
  pid_t pid;
  assert_int_equal(sup_launch_spawn(&sp, &pid), 0);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* a second process joins the first's group (now gone: it leads its own) and an exec
   * failure shows as 127 */
  char *bad[] = {"/nonexistent/worker", NULL};
  sup_spawn sp2 = {.argv = bad, .token = tok, .log_path = log, .pgid = 0};
  assert_int_equal(sup_launch_spawn(&sp2, &pid), 0);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 127);
  FILE *f = fopen(log, "r");
  char buf[4096] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char want[128];
  snprintf(want, sizeof want, "token=%s\n", tok);
  assert_non_null(strstr(buf, want));
  assert_null(strstr(buf, "stale-token"));
  char *pg = strstr(buf, "pgid=");
  assert_non_null(pg);
  assert_true(atoi(pg + 5) != getpgrp()); /* its own process group */
  assert_non_null(strstr(buf, "exec of the worker failed"));
  unlink(log);
}

/* The host stand-in leads its own process group, which a worker joins; a
 * worker killed alone leaves it running; killing the group kills it (that
 * is how the supervisor tells a crash from a lost node). */
static void test_host(void **st) {
  pid_t host, w;
  assert_int_equal(sup_launch_host(&host), 0);
  assert_int_equal(getpgid(host), host);
  char log[] = "/tmp/test_sup_launch_host.XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  sup_spawn sp = {.cmd = "sleep 30", .token = "t", .log_path = log, .pgid = host};
  assert_int_equal(sup_launch_spawn(&sp, &w), 0);
  for (int i = 0; i < 100 && getpgid(w) != host; i++)
    usleep(10000);
  assert_int_equal(getpgid(w), host);
  int status;
  /* one worker killed: the host lives on */
  assert_int_equal(kill(w, SIGKILL), 0);
  assert_int_equal(waitpid(w, &status, 0), w);
  usleep(50000);
  assert_int_equal(waitpid(host, &status, WNOHANG), 0);
  /* the whole group killed: the host dies of that signal */
  assert_int_equal(kill(-host, SIGKILL), 0);
  assert_int_equal(waitpid(host, &status, 0), host);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  unlink(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_argv),
      cmocka_unit_test(test_quote),
      cmocka_unit_test(test_quote_roundtrip),
      cmocka_unit_test(test_template),
      cmocka_unit_test(test_spawn),
      cmocka_unit_test(test_host),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
