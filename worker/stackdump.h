/*
 * stackdump: the evidence a hung worker leaves in its log before it is
 * killed (issue 36): the training thread's stack and its last progress.
 *
 * When the supervisor declares a hang with live processes (the progress
 * watchdog, docs/watchdog.md), it sends SIGUSR1 to the hung workers' main
 * thread, which is their training thread (worker_main.c), just before it
 * stops them; an operator can do the same (`kill -USR1 PID`). A worker
 * the supervisor did not start itself (a command, ssh or Slurm launcher:
 * the pid it knows is sh's, ssh's or srun's) is asked with a DUMP message
 * instead (ft_wire.h), on which ctl.c's reader thread calls
 * stackdump_request: the same signal, sent to the training thread from
 * inside the process. The stack
 * wanted is the TRAINING thread's (the stuck one), whatever thread the
 * kernel hands a process-directed signal to: the handler on any other
 * thread forwards the signal to the training thread (tgkill), whose
 * handler writes to stderr (the worker's log, STATE/logs/):
 *
 *   worker: stack of the training thread (node 1 slot 0, rank 1, step 7,
 *           phase backward, collective 41, no progress for 5.2 s):
 *   ./worker(ft_failpoint_hang_here+0x8b)[0x55d0c1a2b3c4]
 *   ...                                     (backtrace_symbols_fd, from the
 *                                            interrupted frame down)
 *   worker: the training thread's last progress (newest first):
 *   worker:   5.214 s ago: step 7, phase backward, collective 41
 *   ...
 *   worker: end of the training thread's stack
 *
 * Only async-signal-safe calls in the handlers: write(2), clock_gettime,
 * tgkill, nanosleep, sigpending, and glibc's backtrace (its one unsafe
 * part, loading libgcc_s, is done by stackdump_init) and
 * backtrace_symbols_fd (glibc documents it AS-safe); numbers are
 * formatted by hand, the progress comes from the lock-free readers of
 * progress.h. The worker is linked with -rdynamic so that frames of the
 * program itself have names.
 *
 * A stop right after the request must not cut the dump short: the
 * supervisor's STOP (ctl.c's reader thread, stackdump_exit) and SIGTERM (a
 * handler installed here) both end the process on the training thread,
 * which takes them only after a dump it has begun or has pending; the
 * process then exits as before (STOP: its code; SIGTERM: killed by it).
 * The thread that passes the stop on waits at most STACKDUMP_WAIT_MS +
 * 0.5 s for that, then ends the process itself: a training thread that
 * cannot run a handler (uninterruptible sleep in the kernel: a dead NFS
 * server) leaves no stack. stackdump.c says why no other thread can tell
 * a dump is coming.
 *
 * Threading: stackdump_init once, on the training thread (the worker's
 * main thread, for the supervisor's tgkill), before any other thread
 * starts (the handlers are the process's); the rest from any thread.
 */
#ifndef FT_STACKDUMP_H
#define FT_STACKDUMP_H

/* The longest a stop waits for a dump asked for or under way (on the
 * training thread). */
#define STACKDUMP_WAIT_MS 1500

/* The calling thread is the training thread; installs the SIGUSR1 handler
 * (and SIGTERM's, unless SIGTERM is ignored) and loads what backtrace
 * needs. node, slot: this worker's (-1: standalone), for the header line.
 * Returns 0, or -1 if a handler cannot be installed (errno). */
int stackdump_init(int node, int slot);

/* Asks for a dump, as the supervisor's DUMP does: SIGUSR1 queued on the
 * training thread (tgkill(getpid(), its tid)), from any thread. A STOP
 * that the same thread handles afterwards (stackdump_exit) then waits for
 * that dump: the signal is already pending on the training thread before
 * the stop's SIGTERM is sent to it, so it is delivered first (stackdump.c).
 * Returns 0, or -1 (errno; ESRCH: stackdump_init was never called). */
int stackdump_request(void);

/* The training thread's rank from now on (-1: none yet), for the header. */
void stackdump_set_rank(int rank);

/* Ends the process with exit code `code` (_exit: stdio is the caller's to
 * flush), after any dump asked for: on the training thread, as described
 * above. Async-signal-safe; never returns. */
_Noreturn void stackdump_exit(int code);

#endif
