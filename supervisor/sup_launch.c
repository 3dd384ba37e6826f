/*
 * sup_launch: worker processes (see sup_launch.h).
 *
 * Why build envp and open the log before fork: after fork() in a process
 * that has other threads (RocksDB's), only async-signal-safe calls are
 * allowed in the child; so the child only does setpgid, dup2, close,
 * sigprocmask and exec. The parent also calls setpgid(child, pgid), the
 * usual fix for the race in which the parent signals the group before the
 * child has joined it.
 */
#include "sup_launch.h"

#include "ft_err.h"
#include "ft_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

void sup_argv_free(char **argv) {
  if (!argv)
    return;
  for (char **p = argv; *p; p++)
    free(*p);
  free(argv);
}

char **sup_worker_argv(const sup_worker_args *a) {
  int max = 16 + 2 * a->nsets, n = 0;
  char **v = calloc((size_t)max, sizeof *v);
  if (!v)
    return NULL;
  char num[32];
#define PUSH(s)                                                                                    \
  do {                                                                                             \
    if (!(v[n++] = strdup(s)))                                                                     \
      goto fail;                                                                                   \
  } while (0)
  PUSH(a->worker);
  PUSH("--connect");
  PUSH(a->connect);
  PUSH("--node");
  snprintf(num, sizeof num, "%d", a->node);
  PUSH(num);
  PUSH("--slot");
  snprintf(num, sizeof num, "%d", a->slot);
  PUSH(num);
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

char *sup_template_expand(const char *tmpl, const char *host, const char *argv_text) {
  size_t hl = strlen(host), al = strlen(argv_text), cap = strlen(tmpl) + 1;
  /* upper bound: every '{' starts a replacement */
  for (const char *p = tmpl; *p; p++)
    if (*p == '{')
      cap += hl + al;
  char *out = malloc(cap), *o = out;
  if (!out)
    return NULL;
  for (const char *p = tmpl; *p;) {
    if (!strncmp(p, "{host}", 6)) {
      memcpy(o, host, hl);
      o += hl;
      p += 6;
    } else if (!strncmp(p, "{argv}", 6)) {
      memcpy(o, argv_text, al);
      o += al;
      p += 6;
    } else {
      *o++ = *p++;
    }
  }
  *o = 0;
  return out;
}

/* environ without any FT_RUN_TOKEN, plus FT_RUN_TOKEN=token. */
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

int sup_launch_spawn(const sup_spawn *sp, pid_t *pid) {
  int rc = FT_OK, logfd = -1, nullfd = -1;
  char *tokvar = NULL;
  char **env = make_env(sp->token, &tokvar);
  if (!env)
    return ft_err_set(FT_ENOMEM, "out of memory");
  logfd = open(sp->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (logfd < 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "open %s: %s", sp->log_path, strerror(errno));
    goto out;
  }
  nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nullfd < 0) {
    rc = ft_err_set(FT_EIO, "open /dev/null: %s", strerror(errno));
    goto out;
  }
  char *shargv[] = {"/bin/sh", "-c", (char *)sp->cmd, NULL};
  char *const *argv = sp->cmd ? shargv : sp->argv;
  pid_t c = fork();
  if (c < 0) {
    rc = ft_err_set(FT_EIO, "fork: %s", strerror(errno));
    goto out;
  }
  if (c == 0) {
    /* child: async-signal-safe calls only */
    if (setpgid(0, sp->pgid) != 0)
      setpgid(0, 0); /* the group is gone (its leader died): lead our own */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(nullfd, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    for (int fd = 3; fd < 1024; fd++) /* nothing of ours leaks (catalog lock!) */
      close(fd);
    if (sp->cmd)
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
  if (nullfd >= 0)
    close(nullfd);
  free(tokvar);
  free(env);
  return rc;
}

int sup_launch_host(pid_t *pid) {
  pid_t parent = getpid();
  pid_t c = fork();
  if (c < 0)
    return ft_err_set(FT_EIO, "fork: %s", strerror(errno));
  if (c == 0) {
    /* child: async-signal-safe calls only; the supervisor's handlers and
     * descriptors are not ours */
    setpgid(0, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
      sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int fd = 3; fd < 1024; fd++) /* nothing of ours leaks (catalog lock!) */
      close(fd);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    while (getppid() == parent)
      sleep(1);
    _exit(0);
  }
  setpgid(c, c);
  *pid = c;
  return FT_OK;
}
