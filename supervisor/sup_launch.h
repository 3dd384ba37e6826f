/*
 * sup_launch: starting worker processes, locally (fork/exec) or through a
 * command template (`sh -c TEMPLATE`, e.g. "ssh {host} {argv}").
 *
 * Each node's workers share one process group (the first worker's pid), so
 * "kill the node" is kill(-pgid, SIG). The run token reaches a worker only
 * through its environment (FT_RUN_TOKEN): never argv, never a log line.
 * stdout/stderr of a worker are appended to its log file.
 *
 * The argv builder, shell quoting and template expansion are pure (unit
 * tested); sup_launch_spawn is the only function with side effects.
 * Threads: spawn builds everything it needs (argv, envp, log fd) before
 * fork(), so the child only calls async-signal-safe functions and exec:
 * the supervisor process has RocksDB threads.
 */
#ifndef SUP_LAUNCH_H
#define SUP_LAUNCH_H

#include <sys/types.h>

typedef struct sup_worker_args {
  const char *worker;  /* the worker binary */
  const char *connect; /* "127.0.0.1:PORT" */
  int node, slot;
  const char *store;       /* store URI */
  const char *runfile;     /* run file path */
  long long steps;         /* --steps override; < 0: none */
  const char *const *sets; /* "KEY=VALUE" overrides, forwarded as --set */
  int nsets;
  int threads; /* --threads for the kernels; 0: the worker's default */
} sup_worker_args;

/* The worker's argv: WORKER --connect A --node I --slot J --store URI
 * --runfile PATH [--steps N] [--set KV]... [--threads T]; NULL-terminated, malloc'd
 * (free with sup_argv_free). NULL on allocation failure. */
char **sup_worker_argv(const sup_worker_args *a);
void sup_argv_free(char **argv);

/* s quoted for a POSIX shell: safe characters as they are, anything else in
 * single quotes with ' written as '\''; "" -> ''. malloc'd. */
char *sup_shell_quote(const char *s);
/* argv quoted and joined by spaces. malloc'd. */
char *sup_shell_join(char *const *argv);
/* template with every {host} and {argv} replaced (other text verbatim).
 * malloc'd; NULL on allocation failure. */
char *sup_template_expand(const char *tmpl, const char *host, const char *argv_text);

typedef struct sup_spawn {
  char *const *argv;    /* exec'd directly (PATH searched) when cmd is NULL */
  const char *cmd;      /* else: /bin/sh -c cmd */
  const char *token;    /* FT_RUN_TOKEN for the child's environment */
  const char *log_path; /* stdout+stderr appended here */
  pid_t pgid;           /* join this process group; 0: lead a new one */
} sup_spawn;

/* Forks and execs. *pid: the child. FT_EIO/FT_ENOMEM with the reason; an
 * exec failure in the child shows as exit code 127 (reason in the log). */
int sup_launch_spawn(const sup_spawn *sp, pid_t *pid);

/* The local launcher's stand-in for a node's host: a child that leads a new
 * process group (the node's workers join it) and does nothing until it is
 * signalled or the supervisor dies (PR_SET_PDEATHSIG, and a poll of its
 * parent). Killing one worker leaves it; killing the node's whole process
 * group (kill -9 -PGID, chaos.kill_node_at_step) kills it too, which is how
 * the supervisor tells "a worker crashed on a host that still answers" from
 * "the node is gone". *pid: the child, which is also the group's id. */
int sup_launch_host(pid_t *pid);

#endif
