/*
 * sup_launch: starting worker processes, locally (fork/exec), through a
 * command template (`sh -c TEMPLATE`, e.g. "ip netns exec {host} {argv}"),
 * or over ssh (`sh -c "SSH_PART 'cd WORKDIR && exec WORKER ARGS
 * --token-stdin'"`).
 *
 * Each node's workers share one process group (the first worker's pid), so
 * "kill the node" is kill(-pgid, SIG). The run token never appears in an
 * argv or a log line. The local and command launchers put it in the
 * worker's environment (FT_RUN_TOKEN). The ssh launcher cannot: ssh passes
 * an environment variable only with SendEnv/AcceptEnv, and a variable put
 * on the remote command line is argv on both hosts. So the token goes on
 * ssh's stdin (a pipe the supervisor writes "TOKEN\n" to and closes), ssh
 * forwards it to the remote command's stdin, and the worker reads it there
 * (--token-stdin); ssh's own environment carries no token either.
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
  const char *worker;      /* the worker binary */
  const char *connect;     /* HOST:PORT workers dial: the advertised address */
  int node, slot;          /* slot < 0: no --slot (the slurm launcher's tasks add it) */
  const char *store;       /* store URI */
  const char *runfile;     /* run file path */
  long long steps;         /* --steps override; < 0: none */
  const char *const *sets; /* "KEY=VALUE" overrides, forwarded as --set */
  int nsets;
  int threads;          /* --threads for the kernels; 0: the worker's default */
  int token_stdin;      /* add --token-stdin: the token comes on stdin */
  const char *agent;    /* nodes.agent: the agent program; NULL: none */
  int slots;            /* with agent: the node's workers */
  const char *node_env; /* with agent: the agent learns its node from this
                           variable (nodes.launch_once); NULL: --node */
} sup_worker_args;

/* The worker's argv: WORKER --connect A --node I --slot J --store URI
 * --runfile PATH [--steps N] [--set KV]... [--threads T] [--token-stdin];
 * NULL-terminated, malloc'd
 * (free with sup_argv_free). NULL on allocation failure.
 * With an agent, the node's one process is the agent, which dials A and
 * starts SLOTS workers, adding each one's --connect, --node and --slot:
 *   AGENT --connect A (--node I | --node-env VAR) --slots SLOTS --store URI
 *         [--token-stdin] -- WORKER --store URI --runfile PATH [--steps N]
 *         [--set KV]... [--threads T] */
char **sup_worker_argv(const sup_worker_args *a);
void sup_argv_free(char **argv);

/* s quoted for a POSIX shell: safe characters as they are, anything else in
 * single quotes with ' written as '\''; "" -> ''. malloc'd. */
char *sup_shell_quote(const char *s);
/* argv quoted and joined by spaces. malloc'd. */
char *sup_shell_join(char *const *argv);
/* The words of cmd when a shell would do nothing with it but split it into
 * words and run the first as a program: words of safe characters (as
 * sup_shell_quote leaves them), single-quoted text and backslash escapes,
 * separated by blanks, and a first word that assigns nothing and is no
 * shell builtin or keyword. NULL when it needs a shell (any other character
 * outside quotes: $, ;, |, &, <, >, ", *, ...), or on allocation failure.
 * sup_launch_spawn runs such a command without /bin/sh (GNU make does the
 * same): one process start less per node (2,048 at 16,384 ranks). */
char **sup_shell_split_simple(const char *cmd);
/* template with every {host} and {argv} replaced, and every {slots} and
 * {nodes} when slots or nodes is not NULL (other text verbatim). malloc'd;
 * NULL on allocation failure. */
char *sup_template_expand(const char *tmpl, const char *host, const char *argv_text,
                          const char *slots, const char *nodes);

/* The ssh launcher's ssh part when nodes.command is empty. */
#define SUP_SSH_DEFAULT "ssh -T -o BatchMode=yes {host}"

/* The ssh launcher's command for one worker, for /bin/sh -c: ssh_part with
 * every {host} replaced by host (quoted for the local shell; appended
 * after ssh_part when it has no {host}), then one word quoted for the local
 * shell that ssh hands to the remote shell: "cd WORKDIR && exec ARGV...",
 * WORKDIR and each word of argv quoted for the remote shell. malloc'd; NULL
 * on allocation failure. Pure. */
char *sup_ssh_command(const char *ssh_part, const char *host, const char *workdir,
                      char *const *argv);

/* sup_ssh_command with the run file's defaults filled in: ssh_part ""
 * means SUP_SSH_DEFAULT, workdir "" this process's working directory, and
 * a relative argv[0] with a '/' in it is made absolute (argv[0] is
 * replaced). FT_EIO/FT_ENOMEM with the reason. */
int sup_ssh_launch_command(const char *ssh_part, const char *host, const char *workdir, char **argv,
                           char **cmd);

/* A relative argv[0] with a '/' in it is made absolute (argv[0] replaced):
 * the worker runs in another directory or on another host. */
int sup_abs_worker(char **argv);

/* The slurm launcher: one job step per node, G tasks, each running
 *   /bin/sh -c SUP_SRUN_SLOT_SH WORKER ARGS...
 * so task i is the node's slot SLURM_LOCALID (the worker argv has no
 * --slot). srun's argv:
 *   srun --nodes=1 --ntasks=G --nodelist=HOST --overlap --export=ALL
 *        --kill-on-bad-exit=0 --input=none --label --job-name=NAME --chdir=WORKDIR
 *        [EXTRA words] /bin/sh -c SUP_SRUN_SLOT_SH WORKER_ARGV...
 * --overlap: a relaunched node's step may start while its old one is still
 * ending, and the step of `supervise` itself (sbatch) holds the first
 * node's CPUs. --kill-on-bad-exit=0: one task's failure is reported by the
 * supervisor's own blame (its exit code), not turned into SIGKILLs of its
 * siblings that would hide it. --label: the node's one log tells its tasks
 * apart. --export=ALL: the token (FT_RUN_TOKEN) and
 * FT_ and AWS_ settings travel in the environment, never in an argv.
 * EXTRA (nodes.srun_args) is split on blanks (no quoting). malloc'd, NULL
 * on allocation failure. Pure. */
#define SUP_SRUN_SLOT_SH "exec \"$0\" \"$@\" --slot \"$SLURM_LOCALID\""
typedef struct sup_srun_args {
  const char *host;    /* the Slurm node name (a comma-separated list with nnodes > 1) */
  int nnodes;          /* --nodes (0 or 1: one) */
  int ntasks;          /* workers per node */
  const char *workdir; /* --chdir */
  const char *name;    /* --job-name of the step */
  const char *extra;   /* nodes.srun_args */
  int agent;           /* worker_argv is the node's agent's: one task, run as
                          it is (the agent gives each worker its --slot) */
} sup_srun_args;
char **sup_srun_argv(const sup_srun_args *a, char *const *worker_argv);

typedef struct sup_spawn {
  char *const *argv;      /* exec'd directly (PATH searched) when cmd is NULL */
  const char *cmd;        /* else: /bin/sh -c cmd (exec'd directly when
                             sup_shell_split_simple splits it) */
  const char *token;      /* FT_RUN_TOKEN for the child's environment; NULL:
                             none (any FT_RUN_TOKEN of ours is removed) */
  const char *stdin_text; /* the child's stdin: a pipe holding this text,
                             then end of file; NULL: /dev/null. At most
                             PIPE_BUF bytes (written whole without blocking) */
  const char *log_path;   /* stdout+stderr appended here */
  pid_t pgid;             /* join this process group; 0: lead a new one */
} sup_spawn;

/* Forks and execs. *pid: the child. FT_EIO/FT_ENOMEM/FT_EINVAL with the reason; an
 * exec failure in the child shows as exit code 127 (reason in the log). */
int sup_launch_spawn(const sup_spawn *sp, pid_t *pid);

/* Creating a node's log file is the costly part of a launch where the
 * filesystem must search for a free inode (ext4 without a journal skips
 * inodes freed in the last minutes, reading each one's block): 2,051 logs
 * created on the loop took 1.9 s of a 16,384-rank gang's formation
 * (tests/scale). sup_logprep_start creates the files paths[0..n) on a thread
 * of its own, in order, ahead of the launches that open them (O_APPEND: a
 * launch that comes first creates its file itself, and neither truncates;
 * the first gang's launches wait for the thread instead, sup_logprep_ready).
 * Takes paths and each string (malloc'd). sup_logprep_stop (NULL is fine)
 * stops it at the next file, joins and frees. FT_OK, or FT_ENOMEM/FT_EIO
 * (the caller goes on without it). */
typedef struct sup_logprep sup_logprep;
int sup_logprep_start(char **paths, int n, sup_logprep **out);
void sup_logprep_stop(sup_logprep *p);
/* 1 once paths[i] has been created (or the thread has ended); p NULL: 1.
 * The first launch waits for it rather than create the file on the loop. */
int sup_logprep_ready(sup_logprep *p, int i);

/* The local launcher's stand-in for a node's host: a child that leads a new
 * process group (the node's workers join it) and does nothing until it is
 * signalled or the supervisor dies (PR_SET_PDEATHSIG, and a poll of its
 * parent). Killing one worker leaves it; killing the node's whole process
 * group (kill -9 -PGID, chaos.kill_node_at_step) kills it too, which is how
 * the supervisor tells "a worker crashed on a host that still answers" from
 * "the node is gone". *pid: the child, which is also the group's id. */
int sup_launch_host(pid_t *pid);

#endif
