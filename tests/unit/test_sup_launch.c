/* Unit tests of supervisor/sup_launch.c: argv, shell quoting, templates, the
 * ssh launcher's command (through two real shells, as ssh runs it), and real
 * spawns (process group, environment token, token on stdin, log file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_launch.h"

#include "ft_err.h"

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
  a.token_stdin = 1;
  a.threads = 3;
  v = sup_worker_argv(&a);
  for (n = 0; v[n]; n++)
    ;
  assert_int_equal(n, 14);
  assert_string_equal(v[11], "--threads");
  assert_string_equal(v[12], "3");
  sup_argv_free(v);
  a.slot = -1; /* the slurm launcher's tasks add --slot themselves */
  v = sup_worker_argv(&a);
  for (n = 0; v[n]; n++)
    assert_string_not_equal(v[n], "--slot");
  assert_int_equal(n, 12);
  sup_argv_free(v);
  a.slot = 1;
  v = sup_worker_argv(&a);
  assert_string_equal(v[11], "--threads");
  assert_string_equal(v[12], "3");
  assert_string_equal(v[13], "--token-stdin");
  sup_argv_free(v);
  /* nodes.agent: the node's process is the agent, which dials the
   * supervisor and gives each worker its --connect and --slot; the token
   * on stdin is the agent's to read */
  a.agent = "/b/ftagent";
  a.slots = 8;
  a.slot = -1;
  v = sup_worker_argv(&a);
  const char *agent_want[] = {
      "/b/ftagent", "--connect",      "127.0.0.1:4242", "--node",        "3",         "--slots",
      "8",          "--store",        "local:/s/store", "--token-stdin", "--",        "/b/worker",
      "--store",    "local:/s/store", "--runfile",      "/r/run.yaml",   "--threads", "3"};
  for (n = 0; v[n]; n++) {
    assert_true(n < 18);
    assert_string_equal(v[n], agent_want[n]);
  }
  assert_int_equal(n, 18);
  sup_argv_free(v);
  /* launched once for the pool: each agent finds its node in a variable */
  a.node_env = "SLURM_NODEID";
  v = sup_worker_argv(&a);
  assert_string_equal(v[3], "--node-env");
  assert_string_equal(v[4], "SLURM_NODEID");
  sup_argv_free(v);
}

/* The slurm launcher's srun argv: the step's options, nodes.srun_args split
 * on blanks, and a task command that adds --slot $SLURM_LOCALID (run here
 * through a real /bin/sh, as each task runs it). */
static void test_srun_argv(void **st) {
  char *worker[] = {"/bin/echo", "--node", "2", "x y", NULL};
  sup_srun_args a = {.host = "h3",
                     .ntasks = 4,
                     .workdir = "/w d",
                     .name = "ftsup-r1-node2",
                     .extra = "  --mpi=none\t--cpu-bind=none "};
  char **v = sup_srun_argv(&a, worker);
  assert_non_null(v);
  const char *want[] = {"srun",
                        "--nodes=1",
                        "--ntasks=4",
                        "--nodelist=h3",
                        "--overlap",
                        "--export=ALL",
                        "--kill-on-bad-exit=0",
                        "--input=none",
                        "--label",
                        "--job-name=ftsup-r1-node2",
                        "--chdir=/w d",
                        "--mpi=none",
                        "--cpu-bind=none",
                        "/bin/sh",
                        "-c",
                        SUP_SRUN_SLOT_SH,
                        "/bin/echo",
                        "--node",
                        "2",
                        "x y"};
  int n = 0;
  for (; v[n]; n++) {
    assert_true(n < 20);
    assert_string_equal(v[n], want[n]);
  }
  assert_int_equal(n, 20);
  /* the task's command, as slurmstepd runs it with SLURM_LOCALID=3 */
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t c = fork();
  if (c == 0) {
    dup2(p[1], 1);
    setenv("SLURM_LOCALID", "3", 1);
    execv(v[13], v + 13);
    _exit(127);
  }
  close(p[1]);
  char out[256] = {0};
  ssize_t got = 0, r;
  while ((r = read(p[0], out + got, sizeof out - 1 - (size_t)got)) > 0)
    got += r;
  close(p[0]);
  int status;
  assert_int_equal(waitpid(c, &status, 0), c);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_string_equal(out, "--node 2 x y --slot 3\n");
  sup_argv_free(v);
  a.extra = "";
  v = sup_srun_argv(&a, worker);
  for (n = 0; v[n]; n++)
    ;
  assert_int_equal(n, 18);
  sup_argv_free(v);
  /* an agent's step: one task, its argv as it is (no --slot wrapper) */
  a.agent = 1;
  a.ntasks = 1;
  v = sup_srun_argv(&a, worker);
  for (n = 0; v[n]; n++)
    assert_string_not_equal(v[n], "/bin/sh");
  assert_int_equal(n, 15);
  assert_string_equal(v[2], "--ntasks=1");
  assert_string_equal(v[11], "/bin/echo");
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

/* A command a shell would only split into words runs without the shell; the
 * words are the shell's own (sup_shell_join's output splits back into its
 * argv); anything more is left to /bin/sh. */
static void test_split_simple(void **st) {
  (void)st;
  char *args[] = {"/x/ftswarm_attach",
                  "/tmp/s.sock",
                  "8",
                  "a b",
                  "it's",
                  "$HOME",
                  "`x`",
                  "\"q\"",
                  "back\\slash",
                  "",
                  "x=1",
                  "l1\nl2",
                  NULL};
  char *joined = sup_shell_join(args);
  char **w = sup_shell_split_simple(joined);
  assert_non_null(w);
  int i = 0;
  for (; args[i]; i++) {
    assert_non_null(w[i]);
    assert_string_equal(w[i], args[i]);
  }
  assert_null(w[i]);
  sup_argv_free(w);
  free(joined);
  w = sup_shell_split_simple("  prog\t a\\ b   c ");
  assert_non_null(w);
  assert_string_equal(w[0], "prog");
  assert_string_equal(w[1], "a b");
  assert_string_equal(w[2], "c");
  assert_null(w[3]);
  sup_argv_free(w);
  const char *shell[] = {"a | b",     "a; b",     "echo $HOME", "a > f",   "x=1 prog",
                         "exec prog", "cd /tmp",  "a \"b\"",    "a 'open", "",
                         "   ",       "ls *.log", "~/bin/w",    "a # c",   "a &",
                         "a\\",       "(a)",      "a `b`",      ". ./env", "ulimit -n 9"};
  for (size_t k = 0; k < sizeof shell / sizeof shell[0]; k++) {
    w = sup_shell_split_simple(shell[k]);
    if (w)
      fail_msg("'%s' split without a shell into '%s'...", shell[k], w[0]);
  }
  /* sup_launch_spawn runs such a command itself: its child is the program
   * from the start (through /bin/sh it would be "/bin/sh -c 'sleep 30'") */
  char log[] = "/tmp/test_split.XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  sup_spawn sp = {.cmd = "sleep 30", .log_path = log};
  pid_t pid;
  assert_int_equal(sup_launch_spawn(&sp, &pid), 0);
  char path[64], cmdline[64] = {0};
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
  size_t n = 0;
  for (int i = 0; i < 1000 && n == 0; i++) { /* empty until the exec has set up its stack */
    FILE *f = fopen(path, "r");
    n = f ? fread(cmdline, 1, sizeof cmdline - 1, f) : 0;
    if (f)
      fclose(f);
    if (!n)
      usleep(1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  unlink(log);
  assert_true(n > 0);
  assert_string_equal(cmdline, "sleep"); /* argv[0], up to its NUL */
}

static void test_template(void **st) {
  char *t =
      sup_template_expand("ssh {host} {argv} # {host}{other}", "n1", "w --node 1", NULL, NULL);
  assert_string_equal(t, "ssh n1 w --node 1 # n1{other}");
  free(t);
  t = sup_template_expand("env {argv}", "", "x", NULL, NULL);
  assert_string_equal(t, "env x");
  free(t);
  /* {slots} only for a command that starts a node's workers itself */
  t = sup_template_expand("run -n {slots} {argv} {slots}", "h", "w", "8", NULL);
  assert_string_equal(t, "run -n 8 w 8");
  free(t);
  t = sup_template_expand("run {slots} {nodes}", "h", "w", NULL, NULL);
  assert_string_equal(t, "run {slots} {nodes}");
  free(t);
  /* {nodes}: one command for the pool's agents (nodes.launch_once) */
  t = sup_template_expand("all -N {nodes} -G {slots} {argv}", "", "a", "8", "2050");
  assert_string_equal(t, "all -N 2050 -G 8 a");
  free(t);
}

static void test_ssh_command(void **st) {
  char *argv[] = {"/b/worker", "--node", "1", "--token-stdin", NULL};
  char *c = sup_ssh_command("ssh -T {host}", "h1", "/w", argv);
  assert_string_equal(c, "ssh -T h1 'cd /w && exec /b/worker --node 1 --token-stdin'");
  free(c);
  /* no {host}: appended; odd host and workdir quoted for their shells */
  c = sup_ssh_command("ssh -F cfg", "a b", "/w d", argv);
  assert_string_equal(c, "ssh -F cfg 'a b' 'cd '\\''/w d'\\'' && exec /b/worker --node 1 "
                         "--token-stdin'");
  free(c);
}

/* As ssh runs it: the local shell runs the ssh part, whose last word the
 * "remote" shell runs (here sh -c "$2" stands for ssh HOST WORD). The
 * remote side's cwd is the workdir, and every argument arrives as it was. */
static void test_ssh_roundtrip(void **st) {
  char dir[] = "/tmp/test_sup_ssh it's $HOME.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char *argv[] = {"sh", "-c", "pwd; printf '%s|' \"$@\"", "x", "a b", "it's", "$HOME", "`x`",
                  "",   NULL};
  char *c = sup_ssh_command("sh -c 'exec sh -c \"$2\"' fakessh {host}", "h1", dir, argv);
  assert_non_null(c);
  char *outer = sup_shell_quote(c);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "sh -c %s", outer);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[1024] = {0};
  size_t n = fread(out, 1, sizeof out - 1, p);
  assert_int_equal(pclose(p), 0);
  out[n] = 0;
  char want[1024];
  snprintf(want, sizeof want, "%s\na b|it's|$HOME|`x`||", dir);
  assert_string_equal(out, want);
  free(outer);
  free(c);
  rmdir(dir);
}

/* The ssh launcher's spawn: the text on stdin, then end of file (cat
 * ends), and no FT_RUN_TOKEN in the environment, not even the parent's. */
static void test_spawn_stdin(void **st) {
  char log[] = "/tmp/test_sup_launch_stdin.XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  setenv("FT_RUN_TOKEN", "stale-token-from-parent", 1);
  sup_spawn sp = {.cmd = "read l; echo got=$l; cat; echo eof env=${FT_RUN_TOKEN-unset}",
                  .stdin_text = "abc\nmore\n",
                  .log_path = log};
  pid_t pid;
  int status;
  assert_int_equal(sup_launch_spawn(&sp, &pid), 0);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FILE *f = fopen(log, "r");
  char buf[4096] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  assert_string_equal(buf, "got=abc\nmore\neof env=unset\n");
  /* more than a pipe takes at once: refused, nothing started */
  static char big[70000];
  memset(big, 'x', sizeof big - 1);
  sp.stdin_text = big;
  assert_int_equal(sup_launch_spawn(&sp, &pid), FT_EINVAL);
  unlink(log);
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

/* The log files of a first launch, created on a thread ahead of the
 * launches: every path exists afterwards, in a directory that exists, and a
 * file that already holds a log (a launch came first) keeps it. */
static void test_logprep(void **st) {
  (void)st;
  char dir[] = "/tmp/test_logprep.XXXXXX";
  assert_non_null(mkdtemp(dir));
  enum { N = 300 };
  char **paths = calloc(N, sizeof *paths);
  assert_non_null(paths);
  for (int i = 0; i < N; i++) {
    char p[256];
    snprintf(p, sizeof p, "%s/node%d.log", dir, i);
    paths[i] = strdup(p);
  }
  char first[300];
  snprintf(first, sizeof first, "%s", paths[7]);
  FILE *f = fopen(first, "w");
  fputs("launched already\n", f);
  fclose(f);
  sup_logprep *lp = NULL;
  assert_int_equal(sup_logprep_start(paths, N, &lp), FT_OK);
  assert_non_null(lp);
  sup_logprep *again = NULL; /* a second one over the same files: harmless */
  char **p2 = calloc(1, sizeof *p2);
  p2[0] = strdup(first);
  assert_int_equal(sup_logprep_start(p2, 1, &again), FT_OK);
  sup_logprep_stop(again);
  /* ready(i): paths[0..i] exist (the first gang's launches wait on it) */
  assert_int_equal(sup_logprep_ready(NULL, 5), 1);
  for (int i = 0; i < 5000 && !sup_logprep_ready(lp, N - 1); i++)
    usleep(1000);
  assert_int_equal(sup_logprep_ready(lp, N - 1), 1);
  for (int i = 0; i < N; i++) {
    char p[300];
    snprintf(p, sizeof p, "%s/node%d.log", dir, i);
    if (access(p, F_OK))
      fail_msg("%s: ready says created, but it is not there", p);
  }
  sup_logprep_stop(lp);
  char buf[64] = {0};
  f = fopen(first, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "launched already\n"); /* not truncated */
  for (int i = 0; i < N; i++) {
    char p[300];
    snprintf(p, sizeof p, "%s/node%d.log", dir, i);
    assert_int_equal(access(p, W_OK), 0);
    unlink(p);
  }
  sup_logprep_stop(NULL);
  /* stopped at once: joins without creating the rest, frees what it holds */
  char **p3 = calloc(2, sizeof *p3);
  p3[0] = strdup("/nonexistent/dir/a.log");
  p3[1] = strdup("/nonexistent/dir/b.log");
  sup_logprep *bad = NULL;
  assert_int_equal(sup_logprep_start(p3, 2, &bad), FT_OK); /* errors are the launch's */
  sup_logprep_stop(bad);
  rmdir(dir);
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
      cmocka_unit_test(test_split_simple),
      cmocka_unit_test(test_template),
      cmocka_unit_test(test_ssh_command),
      cmocka_unit_test(test_srun_argv),
      cmocka_unit_test(test_ssh_roundtrip),
      cmocka_unit_test(test_spawn_stdin),
      cmocka_unit_test(test_spawn),
      cmocka_unit_test(test_logprep),
      cmocka_unit_test(test_host),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
