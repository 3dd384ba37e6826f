/*
 * sup_launch: worker processes (see sup_launch.h).
 *
 * Why build envp and open the log before fork: after fork() in a process
 * that has other threads (RocksDB's), only async-signal-safe calls are
 * allowed in the child; so the child only does setpgid, dup2, close,
 * sigprocmask and exec. The parent also calls setpgid(child, pgid), the
 * usual fix for the race in which the parent signals the group before the
 * child has joined it.
 *
 * Signals: the supervisor's handlers (libevent's) write the signal number
 * into a socket pair its event loop reads, and a forked child shares that
 * pair until it execs. A SIGTERM meant for a node's process group that
 * reached a child in that window would run the inherited handler and be
 * read by the supervisor as its own SIGTERM (it stopped a whole run once,
 * in tests/integration/sup_memckpt.sh). So every signal is blocked in the
 * parent around fork (fork_quiet); the child resets every handler to the
 * default while they are blocked, then unblocks them: a signal that arrived
 * meanwhile acts on the child alone.
 *
 * The ssh launcher's stdin text (the token) goes into a fresh pipe before
 * fork: a pipe holds at least PIPE_BUF (4096) bytes, so writing the 65 bytes
 * of "TOKEN\n" to an empty one completes at once; the write end is also
 * O_NONBLOCK, so a short or failed write is an error, never a stalled event
 * loop. The write end is closed before the child runs anything, so ssh sees
 * the text and then end of file.
 */
#include "sup_launch.h"

#include "ft_err.h"
#include "ft_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

/* fork with every signal blocked in the calling thread across it; the
 * parent's mask is restored before this returns in the parent. The child
 * must call child_signals_default before anything else. */
static pid_t fork_quiet(sigset_t *saved) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, saved);
  pid_t c = fork();
  int err = errno;
  if (c != 0)
    pthread_sigmask(SIG_SETMASK, saved, NULL);
  errno = err;
  return c;
}

/* In a fork_quiet child (async-signal-safe): every handler back to the
 * default, then nothing blocked. */
static void child_signals_default(void) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

void sup_argv_free(char **argv) {
  if (!argv)
    return;
  for (char **p = argv; *p; p++)
    free(*p);
  free(argv);
}

char **sup_worker_argv(const sup_worker_args *a) {
  int max = 28 + 2 * a->nsets, n = 0;
  char **v = calloc((size_t)max, sizeof *v);
  if (!v)
    return NULL;
  char num[32];
#define PUSH(s)                                                                                    \
  do {                                                                                             \
    if (!(v[n++] = strdup(s)))                                                                     \
      goto fail;                                                                                   \
  } while (0)
  if (a->agent) {
    PUSH(a->agent);
    PUSH("--connect");
    PUSH(a->connect);
    if (a->node_env) {
      PUSH("--node-env");
      PUSH(a->node_env);
    } else {
      PUSH("--node");
      snprintf(num, sizeof num, "%d", a->node);
      PUSH(num);
    }
    PUSH("--slots");
    snprintf(num, sizeof num, "%d", a->slots);
    PUSH(num);
    PUSH("--store"); /* the host's checkpoint reports made one (worker/agent_ckpt.h) */
    PUSH(a->store);
    if (a->token_stdin)
      PUSH("--token-stdin");
    PUSH("--");
  }
  PUSH(a->worker);
  if (!a->agent) {
    PUSH("--connect");
    PUSH(a->connect);
    PUSH("--node");
    snprintf(num, sizeof num, "%d", a->node);
    PUSH(num);
  }
  if (a->slot >= 0) {
    PUSH("--slot");
    snprintf(num, sizeof num, "%d", a->slot);
    PUSH(num);
  }
  PUSH("--store");
  PUSH(a->store);
  PUSH("--runfile");
  PUSH(a->runfile);
  if (a->steps >= 0) {
    PUSH("--steps");
    snprintf(num, sizeof num, "%lld", a->steps);
    PUSH(num);
  }
  for (int i = 0; i < a->nsets; i++) {
    PUSH("--set");
    PUSH(a->sets[i]);
  }
  if (a->threads > 0) {
    PUSH("--threads");
    snprintf(num, sizeof num, "%d", a->threads);
    PUSH(num);
  }
  if (a->token_stdin && !a->agent)
    PUSH("--token-stdin");
#undef PUSH
  return v;
fail:
  sup_argv_free(v);
  return NULL;
}

static int shell_safe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("_-./:=,+@%", c) != NULL;
}

char *sup_shell_quote(const char *s) {
  size_t n = strlen(s), i;
  int safe = n > 0;
  for (i = 0; i < n && safe; i++)
    safe = shell_safe(s[i]);
  if (safe)
    return strdup(s);
  char *q = malloc(4 * n + 3), *o = q;
  if (!q)
    return NULL;
  *o++ = '\'';
  for (i = 0; i < n; i++) {
    if (s[i] == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = s[i];
    }
  }
  *o++ = '\'';
  *o = 0;
  return q;
}

char *sup_shell_join(char *const *argv) {
  size_t cap = 1, len = 0;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  out[0] = 0;
  for (int i = 0; argv[i]; i++) {
    char *q = sup_shell_quote(argv[i]);
    if (!q) {
      free(out);
      return NULL;
    }
    size_t ql = strlen(q);
    char *no = realloc(out, cap + ql + 1);
    if (!no) {
      free(q);
      free(out);
      return NULL;
    }
    out = no;
    cap += ql + 1;
    if (i)
      out[len++] = ' ';
    memcpy(out + len, q, ql);
    len += ql;
    out[len] = 0;
    free(q);
  }
  return out;
}

/* builtins and keywords of a POSIX shell (no program does what they do) */
static int shell_builtin(const char *w) {
  static const char *const names[] = {
      ".",      "alias", "bg",    "break",    "case",     "cd",      "command", "continue",
      "do",     "done",  "elif",  "else",     "esac",     "eval",    "exec",    "exit",
      "export", "fc",    "fg",    "fi",       "for",      "getopts", "hash",    "if",
      "in",     "jobs",  "local", "read",     "readonly", "return",  "set",     "shift",
      "then",   "times", "trap",  "type",     "ulimit",   "umask",   "unalias", "unset",
      "until",  "wait",  "while", "function", "select",   "time",    "source"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(w, names[i]))
      return 1;
  return 0;
}

char **sup_shell_split_simple(const char *cmd) {
  size_t n = strlen(cmd), nw = 0;
  char **v = calloc(n / 2 + 2, sizeof *v); /* words are separated: at most (n+1)/2 */
  char *buf = malloc(n + 1);
  if (!v || !buf)
    goto fail;
  const char *p = cmd;
  while (*p) {
    if (*p == ' ' || *p == '\t') {
      p++;
      continue;
    }
    size_t len = 0;
    int assigns = 0, quoted = 0; /* an unquoted '=' in the first word: VAR=value */
    while (*p && *p != ' ' && *p != '\t') {
      if (*p == '\'') {
        const char *e = strchr(p + 1, '\'');
        if (!e)
          goto fail;
        memcpy(buf + len, p + 1, (size_t)(e - p - 1));
        len += (size_t)(e - p - 1);
        p = e + 1;
        quoted = 1;
      } else if (*p == '\\') {
        if (!p[1] || p[1] == '\n')
          goto fail;
        buf[len++] = p[1];
        p += 2;
        quoted = 1;
      } else if (shell_safe(*p)) {
        if (*p == '=' && !quoted)
          assigns = 1;
        buf[len++] = *p++;
      } else {
        goto fail; /* $ ; | & < > " * ? [ ~ # ( ) { } ` newline ...: the shell's */
      }
    }
    buf[len] = 0;
    if (nw == 0 && (assigns || shell_builtin(buf)))
      goto fail;
    if (!(v[nw++] = strdup(buf)))
      goto fail;
  }
  if (!nw)
    goto fail;
  free(buf);
  return v;
fail:
  free(buf);
  sup_argv_free(v);
  return NULL;
}

char *sup_template_expand(const char *tmpl, const char *host, const char *argv_text,
                          const char *slots, const char *nodes) {
  const char *names[4] = {"{host}", "{argv}", "{slots}", "{nodes}"},
             *vals[4] = {host, argv_text, slots, nodes};
  size_t cap = strlen(tmpl) + 1, vl[4];
  for (int k = 0; k < 4; k++)
    vl[k] = vals[k] ? strlen(vals[k]) : 0;
  /* upper bound: every '{' starts a replacement */
  for (const char *p = tmpl; *p; p++)
    if (*p == '{')
      cap += vl[0] + vl[1] + vl[2] + vl[3];
  char *out = malloc(cap), *o = out;
  if (!out)
    return NULL;
  for (const char *p = tmpl; *p;) {
    int k = 0;
    while (k < 4 && !(vals[k] && !strncmp(p, names[k], strlen(names[k]))))
      k++;
    if (k < 4) {
      memcpy(o, vals[k], vl[k]);
      o += vl[k];
      p += strlen(names[k]);
    } else {
      *o++ = *p++;
    }
  }
  *o = 0;
  return out;
}

/* "a" + "b" + "c" with NULL for a failed part; frees what it is given. */
static char *cat3(char *a, const char *b, char *c) {
  char *out = NULL;
  if (a && b && c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    out = malloc(la + lb + lc + 1);
    if (out) {
      memcpy(out, a, la);
      memcpy(out + la, b, lb);
      memcpy(out + la + lb, c, lc + 1);
    }
  }
  free(a);
  free(c);
  return out;
}

char *sup_ssh_command(const char *ssh_part, const char *host, const char *workdir,
                      char *const *argv) {
  /* the remote shell's command line */
  char *remote = cat3(strdup("cd "), "", sup_shell_quote(workdir));
  remote = cat3(remote, " && exec ", sup_shell_join(argv));
  /* the local shell's: ssh's options, the host, and the remote command as
   * one word */
  char *qhost = sup_shell_quote(host);
  char *local = NULL;
  if (qhost && strstr(ssh_part, "{host}"))
    local = sup_template_expand(ssh_part, qhost, "", NULL, NULL);
  else if (qhost)
    local = cat3(strdup(ssh_part), " ", strdup(qhost));
  free(qhost);
  char *qremote = remote ? sup_shell_quote(remote) : NULL;
  free(remote);
  return cat3(local, " ", qremote);
}

int sup_abs_worker(char **argv) {
  if (argv[0][0] != '/' && strchr(argv[0], '/')) {
    char *abs = realpath(argv[0], NULL);
    if (!abs)
      return ft_err_set(FT_EIO, "the worker %s: %s", argv[0], strerror(errno));
    free(argv[0]);
    argv[0] = abs;
  }
  return FT_OK;
}

int sup_ssh_launch_command(const char *ssh_part, const char *host, const char *workdir, char **argv,
                           char **cmd) {
  char cwd[PATH_MAX];
  if (!workdir[0]) {
    if (!getcwd(cwd, sizeof cwd))
      return ft_err_set(FT_EIO, "getcwd: %s", strerror(errno));
    workdir = cwd;
  }
  int rc = sup_abs_worker(argv);
  if (rc)
    return rc;
  *cmd = sup_ssh_command(ssh_part[0] ? ssh_part : SUP_SSH_DEFAULT, host, workdir, argv);
  return *cmd ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
}

char **sup_srun_argv(const sup_srun_args *a, char *const *worker_argv) {
  int nw = 0, nx = 0;
  while (worker_argv[nw])
    nw++;
  for (const char *p = a->extra; *p;) { /* words of extra: an upper bound */
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p)
      nx++;
    while (*p && *p != ' ' && *p != '\t')
      p++;
  }
  int max = 16 + nx + nw, n = 0;
  char **v = calloc((size_t)max, sizeof *v);
  if (!v)
    return NULL;
  char opt[1200];
#define PUSHF(...)                                                                                 \
  do {                                                                                             \
    snprintf(opt, sizeof opt, __VA_ARGS__);                                                        \
    if (!(v[n++] = strdup(opt)))                                                                   \
      goto fail;                                                                                   \
  } while (0)
  PUSHF("srun");
  PUSHF("--nodes=%d", a->nnodes > 1 ? a->nnodes : 1);
  PUSHF("--ntasks=%d", a->ntasks);
  /* the pool's hosts can be many more than opt holds */
  if (!(v[n] = malloc(strlen(a->host) + sizeof "--nodelist=")))
    goto fail;
  strcat(strcpy(v[n++], "--nodelist="), a->host);
  PUSHF("--overlap");
  PUSHF("--export=ALL");
  PUSHF("--kill-on-bad-exit=0");
  PUSHF("--input=none");
  PUSHF("--label");
  PUSHF("--job-name=%s", a->name);
  PUSHF("--chdir=%s", a->workdir);
  for (const char *p = a->extra; *p;) {
    while (*p == ' ' || *p == '\t')
      p++;
    const char *b = p;
    while (*p && *p != ' ' && *p != '\t')
      p++;
    if (p > b)
      PUSHF("%.*s", (int)(p - b), b);
  }
  if (!a->agent) {
    PUSHF("/bin/sh");
    PUSHF("-c");
    PUSHF("%s", SUP_SRUN_SLOT_SH);
  }
  for (int i = 0; i < nw; i++)
    if (!(v[n++] = strdup(worker_argv[i])))
      goto fail;
#undef PUSHF
  return v;
fail:
  sup_argv_free(v);
  return NULL;
}

/* environ without any FT_RUN_TOKEN, plus FT_RUN_TOKEN=token unless token is
 * NULL. */
static char **make_env(const char *token, char **tokvar) {
  size_t n = 0;
  for (char **e = environ; *e; e++)
    n++;
  char **env = calloc(n + 2, sizeof *env);
  if (!env)
    return NULL;
  size_t k = 0, plen = strlen(FT_WIRE_TOKEN_ENV);
  for (char **e = environ; *e; e++)
    if (!(strncmp(*e, FT_WIRE_TOKEN_ENV, plen) == 0 && (*e)[plen] == '='))
      env[k++] = *e;
  *tokvar = NULL;
  if (!token) {
    env[k] = NULL;
    return env;
  }
  size_t tl = plen + 1 + strlen(token) + 1;
  *tokvar = malloc(tl);
  if (!*tokvar) {
    free(env);
    return NULL;
  }
  snprintf(*tokvar, tl, "%s=%s", FT_WIRE_TOKEN_ENV, token);
  env[k++] = *tokvar;
  env[k] = NULL;
  return env;
}

/* A pipe holding text and then end of file: *rfd the read end (O_CLOEXEC;
 * the child dup2s it). */
static int text_pipe(const char *text, int *rfd) {
  size_t n = strlen(text);
  int p[2];
  if (n > PIPE_BUF)
    return ft_err_set(FT_EINVAL, "stdin text of %zu bytes is more than a pipe takes at once", n);
  if (pipe2(p, O_CLOEXEC) != 0)
    return ft_err_set(FT_EIO, "pipe: %s", strerror(errno));
  ssize_t w = -1;
  if (fcntl(p[1], F_SETFL, O_NONBLOCK) == 0) {
    do
      w = write(p[1], text, n);
    while (w < 0 && errno == EINTR);
  }
  int err = errno;
  close(p[1]);
  if (w != (ssize_t)n) {
    close(p[0]);
    return ft_err_set(FT_EIO, "write to the stdin pipe: %s", w < 0 ? strerror(err) : "short write");
  }
  *rfd = p[0];
  return FT_OK;
}

/* Closes every descriptor from lo up (async-signal-safe): close_range, or
 * one by one up to the descriptor limit (connections of a large gang are
 * numbered far above 1024). */
static void close_from(int lo) {
  if (syscall(SYS_close_range, (unsigned)lo, ~0u, 0) == 0)
    return;
  struct rlimit rl;
  long hi = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur
                                                                               : 65536;
  for (long fd = lo; fd < hi; fd++)
    close((int)fd);
}

/* posix_spawn (glibc: clone(CLONE_VM | CLONE_VFORK), no copy of our page
 * tables): a fork of a supervisor holding thousands of connections and a
 * RocksDB catalog took milliseconds per node, so launching 2,048 nodes took
 * a minute (tests/scale). The child gets what the fork path gives it:
 * process group pgid (its own when 0, or when pgid's group is gone),
 * default handlers, nothing blocked, stdin/stdout/stderr, nothing else
 * open. Non-zero: not spawned (the caller forks instead, whose exec
 * failure is the documented exit code 127). */
static int spawn_fast(const sup_spawn *sp, int via_sh, char *const *argv, char **env, int infd,
                      int logfd, pid_t *pid) {
  posix_spawnattr_t at;
  posix_spawn_file_actions_t fa;
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  int rc = -1;
  for (int attempt = 0; attempt < 2 && rc != 0; attempt++) {
    pid_t pgid = attempt ? 0 : sp->pgid;
    if (attempt && !sp->pgid)
      break;
    if (posix_spawnattr_init(&at))
      return -1;
    if (posix_spawn_file_actions_init(&fa)) {
      posix_spawnattr_destroy(&at);
      return -1;
    }
    int bad = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                POSIX_SPAWN_SETSIGMASK) ||
              posix_spawnattr_setpgroup(&at, pgid) || posix_spawnattr_setsigdefault(&at, &all) ||
              posix_spawnattr_setsigmask(&at, &none) ||
              posix_spawn_file_actions_adddup2(&fa, infd, 0) ||
              posix_spawn_file_actions_adddup2(&fa, logfd, 1) ||
              posix_spawn_file_actions_adddup2(&fa, logfd, 2) ||
              posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!bad)
      rc = via_sh ? posix_spawn(pid, "/bin/sh", &fa, &at, argv, env)
                  : posix_spawnp(pid, argv[0], &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (bad)
      return -1;
    if (rc && rc != EPERM && rc != ESRCH) /* not the group: exec failed, say it as fork does */
      return rc;
  }
  return rc;
}

int sup_launch_spawn(const sup_spawn *sp, pid_t *pid) {
  int rc = FT_OK, logfd = -1, infd = -1;
  char *tokvar = NULL, **words = NULL;
  char **env = make_env(sp->token, &tokvar);
  if (!env)
    return ft_err_set(FT_ENOMEM, "out of memory");
  logfd = open(sp->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (logfd < 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "open %s: %s", sp->log_path, strerror(errno));
    goto out;
  }
  if (sp->stdin_text) {
    rc = text_pipe(sp->stdin_text, &infd);
    if (rc)
      goto out;
  } else {
    infd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (infd < 0) {
      rc = ft_err_set(FT_EIO, "open /dev/null: %s", strerror(errno));
      goto out;
    }
  }
  char *shargv[] = {"/bin/sh", "-c", (char *)sp->cmd, NULL};
  words = sp->cmd ? sup_shell_split_simple(sp->cmd) : NULL;
  int via_sh = sp->cmd && !words;
  char *const *argv = words ? words : via_sh ? shargv : sp->argv;
  pid_t c;
  if (spawn_fast(sp, via_sh, argv, env, infd, logfd, &c) == 0) {
    *pid = c;
    goto out;
  }
  sigset_t saved;
  c = fork_quiet(&saved);
  if (c < 0) {
    rc = ft_err_set(FT_EIO, "fork: %s", strerror(errno));
    goto out;
  }
  if (c == 0) {
    /* child: async-signal-safe calls only */
    if (setpgid(0, sp->pgid) != 0)
      setpgid(0, 0); /* the group is gone (its leader died): lead our own */
    child_signals_default();
    dup2(infd, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    close_from(3); /* nothing of ours leaks (catalog lock, other workers' sockets) */
    if (via_sh)
      execve("/bin/sh", argv, env);
    else
      execvpe(argv[0], argv, env);
    static const char msg[] = "supervise: exec of the worker failed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
  }
  setpgid(c, sp->pgid ? sp->pgid : c); /* may fail if the child already exec'd: fine */
  *pid = c;
out:
  if (logfd >= 0)
    close(logfd);
  if (infd >= 0)
    close(infd);
  free(tokvar);
  free(env);
  sup_argv_free(words);
  return rc;
}

struct sup_logprep {
  pthread_t th;
  char **paths;
  int n;
  atomic_int stop;
  atomic_int done; /* paths[0..done) are created (or failed: the launch reports it) */
};

static void *logprep_main(void *arg) {
  sup_logprep *p = arg;
  for (int i = 0; i < p->n && !atomic_load(&p->stop); i++) {
    int fd = open(p->paths[i], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) /* an error is the launch's to report, when it opens the file */
      close(fd);
    atomic_store(&p->done, i + 1);
  }
  atomic_store(&p->done, p->n); /* stopped: nothing more to wait for */
  return NULL;
}

int sup_logprep_ready(sup_logprep *p, int i) {
  return !p || i < atomic_load(&p->done);
}

static void logprep_free_paths(char **paths, int n) {
  for (int i = 0; i < n; i++)
    free(paths[i]);
  free(paths);
}

int sup_logprep_start(char **paths, int n, sup_logprep **out) {
  *out = NULL;
  sup_logprep *p = calloc(1, sizeof *p);
  if (!p) {
    logprep_free_paths(paths, n);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  p->paths = paths;
  p->n = n;
  atomic_init(&p->stop, 0);
  atomic_init(&p->done, 0);
  int e = pthread_create(&p->th, NULL, logprep_main, p);
  if (e) {
    logprep_free_paths(paths, n);
    free(p);
    return ft_err_set(FT_EIO, "pthread_create: %s", strerror(e));
  }
  *out = p;
  return FT_OK;
}

void sup_logprep_stop(sup_logprep *p) {
  if (!p)
    return;
  atomic_store(&p->stop, 1);
  pthread_join(p->th, NULL);
  logprep_free_paths(p->paths, p->n);
  free(p);
}

int sup_launch_host(pid_t *pid) {
  pid_t parent = getpid();
  sigset_t saved;
  pid_t c = fork_quiet(&saved);
  if (c < 0)
    return ft_err_set(FT_EIO, "fork: %s", strerror(errno));
  if (c == 0) {
    /* child: async-signal-safe calls only; the supervisor's handlers and
     * descriptors are not ours */
    setpgid(0, 0);
    child_signals_default();
    close_from(3); /* nothing of ours leaks (catalog lock, workers' sockets) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    while (getppid() == parent)
      sleep(1);
    _exit(0);
  }
  setpgid(c, c);
  *pid = c;
  return FT_OK;
}
