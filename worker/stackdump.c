/*
 * stackdump: the training thread's stack and last progress into the
 * worker's log, on SIGUSR1 (see stackdump.h).
 *
 * One request moves a small state word: IDLE -> ASKED (a handler on
 * another thread forwarded the signal to the training thread) -> DUMPING
 * (the training thread's handler writes) -> IDLE.
 *
 * WHY THE REQUEST AND EVERY STOP GO THROUGH THE TRAINING THREAD. The
 * supervisor asks, then sends STOP and SIGTERM, within microseconds.
 * Between the moment a thread takes SIGUSR1 from the kernel and the first
 * store of its handler, nothing another thread can see says a dump is
 * coming; on a loaded machine that window is long (a first version, which
 * let the thread that got SIGTERM look at the state word and sigpending,
 * lost the dump in 1 of 8 tries; one where the kernel could still hand
 * SIGUSR1 to another thread, which forwarded it, in about 1 of 300). The
 * training thread orders it itself, though: its SIGUSR1 handler blocks
 * SIGTERM, and the kernel delivers a thread's pending signals lowest
 * first (SIGUSR1 10 before SIGTERM 15; its own queue before the
 * process's, and a signal taken while another is being set up nests
 * inside it and runs first). So:
 *   - the supervisor sends SIGUSR1 to the training thread itself, the
 *     worker's main thread (tgkill(pid, pid)): no other thread can take it;
 *   - a SIGTERM taken by any other thread is passed on to the training
 *     thread (tgkill), and the process ends in that thread's handler,
 *     after any dump it took or had pending; a STOP (stackdump_exit) does
 *     the same with its exit code. The thread that passed it on waits, and
 *     ends the process itself if the training thread never does
 *     (uninterruptible sleep in the kernel).
 * The supervisor's DUMP (a worker it cannot signal itself: ctl.c's
 * reader thread, stackdump_request) is the same tgkill to the training
 * thread, from the thread that reads the connection; the STOP behind it
 * on that connection is handled by that thread only after the tgkill
 * returned, so SIGUSR1 is pending on the training thread before the stop's
 * SIGTERM is sent, exactly as with the supervisor's own tgkill.
 * A process-directed SIGUSR1 (`kill -USR1`) that lands on another thread
 * is forwarded to the training thread; a stop right behind such a one can
 * still miss the window above.
 *
 * Everything a handler calls is async-signal-safe (stackdump.h lists
 * them); text is built in a buffer on the stack, one write(2) per line,
 * so lines from other threads' stdio never split one of ours (the log is
 * opened O_APPEND).
 */
#include "stackdump.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "ft_clock.h"
#include "ft_wire.h"
#include "progress.h"

#define MAX_FRAMES 64

enum { IDLE = 0, ASKED = 1, DUMPING = 2 };

static _Atomic int g_tid; /* the training thread's id (0: stackdump_init not called) */
static _Atomic int g_state;
static _Atomic int g_node = -1, g_slot = -1, g_rank = -1;
static _Atomic int g_term;           /* on_term is SIGTERM's handler */
static _Atomic int g_exit_code = -1; /* stackdump_exit's code (-1: die by SIGTERM) */

static int my_tid(void) {
  return (int)syscall(SYS_gettid);
}

/* ---- lines, formatted without stdio ---------------------------------------- */

typedef struct line {
  char b[512];
  size_t n;
} line;

static void l_str(line *l, const char *s) {
  while (*s && l->n < sizeof l->b - 1)
    l->b[l->n++] = *s++;
}

static void l_u64(line *l, uint64_t v) {
  char t[24];
  int i = 0;
  do {
    t[i++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (i > 0 && l->n < sizeof l->b - 1)
    l->b[l->n++] = t[--i];
}

static void l_i64(line *l, int64_t v) {
  if (v < 0) {
    l_str(l, "-");
    l_u64(l, (uint64_t)0 - (uint64_t)v);
  } else {
    l_u64(l, (uint64_t)v);
  }
}

/* ns as seconds with `dec` decimals (1..3), truncated */
static void l_secs(line *l, uint64_t ns, int dec) {
  uint64_t unit = dec == 1 ? 100000000u : dec == 2 ? 10000000u : 1000000u;
  l_u64(l, ns / 1000000000u);
  l_str(l, ".");
  uint64_t frac = ns % 1000000000u / unit;
  for (uint64_t d = dec == 1 ? 1 : dec == 2 ? 10 : 100; d > 0; d /= 10) {
    char c[2] = {(char)('0' + frac / d % 10), 0};
    l_str(l, c);
  }
}

static void l_write(line *l) {
  l->b[l->n++] = '\n'; /* room kept: the appenders stop one short */
  const char *p = l->b;
  size_t left = l->n;
  while (left > 0) {
    ssize_t w = write(STDERR_FILENO, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    p += w;
    left -= (size_t)w;
  }
  l->n = 0;
}

static void say(const char *s) {
  line l = {.n = 0};
  l_str(&l, s);
  l_write(&l);
}

static void l_rec(line *l, const progress_rec *r) {
  l_str(l, "step ");
  l_i64(l, r->step);
  l_str(l, ", phase ");
  l_str(l, ft_phase_name((int)r->phase));
  l_str(l, ", collective ");
  l_u64(l, r->coll_seq);
}

/* ---- the dump (on the training thread, in its handler) --------------------- */

/* The program counter the signal interrupted (0: unknown here). */
static uintptr_t interrupted_pc(const void *ucv) {
#if defined(__x86_64__)
  return (uintptr_t)((const ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  return (uintptr_t)((const ucontext_t *)ucv)->uc_mcontext.pc;
#else
  (void)ucv;
  return 0;
#endif
}

static void dump(const void *uc) {
  uint64_t now = ft_now_ns();
  progress_rec ring[PROGRESS_RING_LEN], r;
  int nring = progress_ring(ring, PROGRESS_RING_LEN);
  /* this thread may have been interrupted inside a write of its record:
   * then the ring's newest whole entry is the latest state */
  int have = progress_try_read(&r) == 0;
  if (!have && nring > 0) {
    r = ring[0];
    have = 1;
  }
  line l = {.n = 0};
  l_str(&l, "worker: stack of the training thread (");
  int node = atomic_load(&g_node), slot = atomic_load(&g_slot), rank = atomic_load(&g_rank);
  if (node >= 0) {
    l_str(&l, "node ");
    l_i64(&l, node);
    l_str(&l, " slot ");
    l_i64(&l, slot);
    l_str(&l, ", ");
  }
  if (rank >= 0) {
    l_str(&l, "rank ");
    l_i64(&l, rank);
    l_str(&l, ", ");
  }
  if (have) {
    l_rec(&l, &r);
    l_str(&l, ", no progress for ");
    l_secs(&l, now > r.changed_ns ? now - r.changed_ns : 0, 1);
    l_str(&l, " s");
  } else {
    l_str(&l, "no progress record");
  }
  l_str(&l, "):");
  l_write(&l);

  /* from the interrupted frame down: the handler's own frames and the
   * signal trampoline above it say nothing about the hang */
  void *fr[MAX_FRAMES];
  int n = backtrace(fr, MAX_FRAMES);
  int from = 0;
  uintptr_t pc = interrupted_pc(uc);
  for (int i = 0; pc && i < n; i++)
    if ((uintptr_t)fr[i] == pc) {
      from = i;
      break;
    }
  if (n > from)
    backtrace_symbols_fd(fr + from, n - from, STDERR_FILENO);
  if (n == MAX_FRAMES)
    say("worker: (deeper frames left out)");

  say("worker: the training thread's last progress (newest first):");
  for (int i = 0; i < nring; i++) {
    l_str(&l, "worker:   ");
    l_secs(&l, now > ring[i].changed_ns ? now - ring[i].changed_ns : 0, 3);
    l_str(&l, " s ago: ");
    l_rec(&l, &ring[i]);
    l_write(&l);
  }
  say("worker: end of the training thread's stack");
}

/* ---- handlers ---------------------------------------------------------------- */

static void on_usr1(int sig, siginfo_t *si, void *uc) {
  (void)si;
  int saved = errno;
  int t = atomic_load(&g_tid);
  if (t > 0 && my_tid() != t) {
    /* another thread took the process's signal: the training thread's
     * stack is wanted, so it gets the signal itself (unless it is dumping
     * already: then this one adds nothing) */
    int cur = atomic_load(&g_state);
    while (cur != DUMPING && !atomic_compare_exchange_weak(&g_state, &cur, ASKED))
      ;
    if (cur != DUMPING && syscall(SYS_tgkill, (int)getpid(), t, sig) != 0) {
      atomic_store(&g_state, IDLE);
      say("worker: a stack dump was asked for, but the training thread is gone");
    }
  } else if (t > 0) {
    atomic_store(&g_state, DUMPING);
    dump(uc);
    atomic_store(&g_state, IDLE);
  }
  errno = saved;
}

/* Waits, at most STACKDUMP_WAIT_MS, while a dump is asked for (forwarded,
 * or SIGUSR1 pending for the process) or under way. */
static void wait_dump(void) {
  uint64_t end = ft_now_ns() + (uint64_t)STACKDUMP_WAIT_MS * 1000000u;
  for (;;) {
    int asked = atomic_load(&g_state) != IDLE;
    sigset_t pend;
    if (!asked && sigpending(&pend) == 0 && sigismember(&pend, SIGUSR1) == 1)
      asked = 1;
    if (!asked)
      return;
    if (ft_now_ns() >= end) {
      say("worker: the training thread's stack did not come in time; stopping without it");
      return;
    }
    struct timespec ts = {0, 5000000}; /* 5 ms */
    nanosleep(&ts, NULL);
  }
}

/* Sleeps ms (the process is meant to end meanwhile, on another thread). */
static void linger(int ms) {
  uint64_t end = ft_now_ns() + (uint64_t)ms * 1000000u;
  while (ft_now_ns() < end) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
}

/* SIGTERM. On another thread: passed on to the training thread, which
 * ends the process (see the top of this file), while this one waits; it
 * ends the process itself only if the training thread never does. On the
 * training thread: after a dump forwarded to it, with stackdump_exit's
 * code if that is what sent it, else by SIGTERM as without a handler (the
 * supervisor tells signals from exit codes). */
static void on_term(int sig) {
  int t = atomic_load(&g_tid);
  if (t > 0 && my_tid() != t) {
    if (syscall(SYS_tgkill, (int)getpid(), t, SIGTERM) == 0) {
      linger(STACKDUMP_WAIT_MS + 500);
      say("worker: the training thread did not take SIGTERM; stopping without it");
    }
  } else {
    wait_dump();
  }
  int code = atomic_load(&g_exit_code);
  if (code >= 0)
    _exit(code);
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  raise(sig); /* blocked until this handler returns, then fatal */
}

void stackdump_exit(int code) {
  int t = atomic_load(&g_tid);
  if (t > 0 && atomic_load(&g_term) && my_tid() != t) {
    atomic_store(&g_exit_code, code);
    if (syscall(SYS_tgkill, (int)getpid(), t, SIGTERM) == 0)
      linger(STACKDUMP_WAIT_MS + 500);
  } else if (t > 0) {
    wait_dump();
  }
  _exit(code);
}

int stackdump_init(int node, int slot) {
  void *fr[2];
  backtrace(fr, 2); /* loads libgcc_s now: the handler must not dlopen */
  atomic_store(&g_node, node);
  atomic_store(&g_slot, slot);
  atomic_store(&g_tid, my_tid());

  struct sigaction sa = {.sa_sigaction = on_usr1, .sa_flags = SA_SIGINFO | SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM); /* a SIGTERM meanwhile goes to a thread that waits */
  if (sigaction(SIGUSR1, &sa, NULL))
    return -1;
  struct sigaction old;
  if (sigaction(SIGTERM, NULL, &old))
    return -1;
  if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) { /* an ignored one stays so */
    struct sigaction st = {.sa_handler = on_term, .sa_flags = SA_RESTART};
    sigemptyset(&st.sa_mask); /* not SIGUSR1: the dump may have to run inside this wait */
    if (sigaction(SIGTERM, &st, NULL))
      return -1;
    atomic_store(&g_term, 1);
  }
  /* a launcher's blocked mask would send every request elsewhere; the
   * threads started from here on inherit this one */
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGUSR1);
  sigaddset(&both, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &both, NULL);
  return 0;
}

int stackdump_request(void) {
  int t = atomic_load(&g_tid);
  if (t <= 0) {
    errno = ESRCH;
    return -1;
  }
  return syscall(SYS_tgkill, (int)getpid(), t, SIGUSR1) == 0 ? 0 : -1;
}

void stackdump_set_rank(int rank) {
  atomic_store(&g_rank, rank);
}
