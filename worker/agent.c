/*
 * agent: the per-host agent's connection, workers and relay (see agent.h).
 *
 * One thread, one poll(2) loop over: a signalfd (SIGCHLD, SIGTERM, SIGINT),
 * the supervisor's TCP connection, and the agent's end of each worker's
 * socket pair. Every socket is non-blocking and every write goes through an
 * output queue (outq) flushed on POLLOUT, so a worker slow to read a 16 MiB
 * frame, or a supervisor slow to read ours, never stalls the others. The
 * supervisor's queue is bounded (SUP_TX_MAX: past it the supervisor counts
 * as lost); workers are not read while it is above SUP_TX_HIGH, so a burst
 * of big frames waits in the workers' sockets instead.
 *
 * Frames: from the supervisor, RELAY (inner frame to that slot's worker,
 * unchanged), HOSTBEAT (the echo of ours: its round trip), SLOT closed
 * (close that worker's socket), SLOT start (a new worker on a slot whose
 * last one has exited), SLOT signal (a signal to the slot's worker), STOP
 * (stop the workers, exit 0), and the host frames ASSIGN, COMMITTED and
 * STOP rejoin (ft_wire.h: one for every worker of the host, each slot
 * welcomed given its own copy, ASSIGN's rank slot 0's + the slot);
 * anything else is a protocol error, handled as a lost supervisor. From a
 * worker, HEARTBEAT stays here (kept for the next HOSTBEAT, echoed at once
 * while the supervisor is heard, so a worker notices a lost supervisor
 * through a live agent), except that one whose generation is not its last
 * one's goes at the end of this pass of the loop, in a HOSTBEAT of such
 * beats only (a worker that left its generation in process says so with
 * it, and the recovery waits for it: a host's 8 answers to one STOP rejoin
 * are one frame, not 8 RELAYs); every other frame goes to the supervisor
 * inside RELAY, unchanged and undecoded. The agent outlives its workers: it ends on
 * STOP, a signal, or a lost supervisor, not when its last worker does
 * (the supervisor starts the next ones on it, without a launch).
 *
 * States of the agent, in order (no way back):
 *   RUNNING   the supervisor is connected, workers run
 *   STOPPING  asked to stop (STOP, a signal), the supervisor lost, or an
 *             internal error: every live worker got SIGTERM; the loop goes
 *             on relaying and reporting exits; at STOP_GRACE_NS the rest
 *             get SIGKILL and are reaped. The exit code is fixed when
 *             STOPPING begins (a supervisor that closes its connection
 *             after its STOP does not turn 0 into 6).
 *   DONE      every worker reaped: the supervisor's queue is flushed (for
 *             at most FLUSH_NS), the connection shut down, agent_run returns.
 * Once lost, the supervisor's connection is closed and nothing more is
 * sent: the frames of workers still running are read and dropped.
 *
 * "Heard from the supervisor" (what keeps it from being lost, and what the
 * workers' echoes wait for): any byte received from it, or our own queue
 * for it shrinking after a send had to wait (its receive window opened, so
 * its process reads). The latter matters when a HOSTBEAT waits behind a
 * 16 MiB RELAY on a slow link: no echo can come until it has gone. A
 * supervisor whose kernel acknowledges but whose process no longer reads
 * is not heard: small sends that never wait prove nothing.
 *
 * A worker's exit: SIGCHLD, then waitpid(WNOHANG) until none is left; before
 * its SLOT exited is queued, what is left in its socket is read and relayed
 * (its last FAULT goes before the news of its exit).
 */
#include "agent.h"
#include "agent_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_wire.h"

#define SUP_TX_MAX (64u << 20) /* unsent to the supervisor: lost past it */
#define SUP_TX_HIGH (SUP_TX_MAX - 2u * FT_WIRE_MAX_RELAY_FRAME) /* workers wait above it */
#define SLOT_TX_MAX (64u << 20) /* unsent to one worker: its socket is closed past it */
#define READ_BURST (4u << 20)   /* bytes read from one socket per wake, before the others' turn */
#define LOST_BEATS 4            /* heartbeat intervals of silence: the supervisor is lost */
#define STOP_GRACE_NS (5ull * 1000000000ull) /* SIGTERM, then SIGKILL after this */
#define FLUSH_NS (2ull * 1000000000ull)      /* at exit: the last frames' time to leave */
#define HANDSHAKE_WAIT_S 60                  /* for WELCOME after HELLO */
#define RTT_RING 8                           /* HOSTBEATs whose send times are kept */
#define NO_SLOT UINT32_MAX                   /* a poll entry that is not a worker's */
#define CKPT_SLOT (UINT32_MAX - 1)           /* ... the checkpoint thread's pipe */
#define HOLD_MIN_NS                                                                                \
  (2ull * 1000000000ull) /* a checkpoint waits this (or 2 heartbeat                                \
                            intervals) for its last slot's report */

/* A write queue: data[off .. len) is still to be sent. */
typedef struct outq {
  ft_buf b;
  size_t off;
} outq;

typedef struct agent_slot {
  pid_t pid;        /* the worker's; 0 before it started and once reaped */
  int fd;           /* the agent's end of its socket pair; -1 once closed */
  ft_buf rx;        /* bytes read, not yet a whole frame */
  outq tx;          /* frames for the worker */
  uint64_t nframes; /* frames read from it (its first, HELLO, is capped small) */
  int have_beat;    /* beat holds its latest HEARTBEAT (since it started) */
  int welcomed;     /* the supervisor's WELCOME went to it (relayed): until
                       then its frames, beats too, go as they are, in order */
  ft_wire_beat beat;
  uint64_t beat_ns; /* when that beat came */
  int fresh;        /* that beat is of a new generation: told at the pass's end */
} agent_slot;

typedef struct agent {
  const agent_opts *o;
  char run[FT_WIRE_MAX_RUN + 1]; /* from the supervisor's CHALLENGE */
  char local_addr[128];          /* this host's end of the connection (FT_CTL_LOCAL_ADDR) */
  int sup_fd;                    /* -1 once lost */
  ft_buf sup_rx;
  outq sup_tx;
  uint32_t hb_ms;    /* WELCOME's heartbeat interval */
  uint64_t heard_ns; /* the last frame from the supervisor */
  uint64_t next_beat_ns;
  uint32_t hb_seq; /* the last HOSTBEAT's */
  uint32_t rtt_us; /* the last echo's round trip (0: none yet) */
  uint32_t sent_seq[RTT_RING];
  uint64_t sent_ns[RTT_RING];
  ft_wire_beat *beats; /* scratch for a HOSTBEAT, one per slot */
  uint32_t nfresh;     /* slots with a fresh beat */
  ft_buf hostf;        /* scratch: a host frame's copy for one slot */
  int sfd;             /* signalfd */
  sigset_t oldmask;    /* the mask to give the workers */
  agent_slot *slots;
  uint32_t nslots;
  uint32_t live; /* workers started and not yet reaped */
  int stopping;
  uint64_t stop_deadline_ns;
  int exit_code;  /* fixed when stopping begins */
  agent_ckpt *ck; /* the host's checkpoint reports made one (agent_ckpt.h) */
} agent;

/* ---- output queues ------------------------------------------------------- */

static size_t outq_pending(const outq *q) {
  return q->b.len - q->off;
}

/* Sends what it can without blocking: 0, or -1 with errno (EAGAIN is 0). */
static int outq_flush(outq *q, int fd) {
  while (q->off < q->b.len) {
    ssize_t n = send(fd, q->b.data + q->off, q->b.len - q->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n <= 0)
      return -1;
    q->off += (size_t)n;
  }
  if (q->off == q->b.len) {
    ft_buf_reset(&q->b);
    q->off = 0;
  } else if (q->off >= (1u << 20) && q->off >= q->b.len / 2) { /* keep the memmove rare */
    ft_buf_consume(&q->b, q->off);
    q->off = 0;
  }
  return 0;
}

static void outq_release(outq *q) {
  ft_buf_release(&q->b);
  q->off = 0;
}

/* ---- the supervisor's connection ----------------------------------------- */

static void start_stop(agent *a, int code, const char *why);

static void sup_close(agent *a) {
  if (a->sup_fd >= 0)
    close(a->sup_fd);
  a->sup_fd = -1;
  ft_buf_release(&a->sup_rx);
  outq_release(&a->sup_tx);
}

/* The supervisor is gone (or must be treated so): nothing more is sent. */
static void sup_lost(agent *a, const char *why) {
  if (a->sup_fd < 0)
    return;
  fprintf(stderr, "ftagent: node %u: lost the supervisor (%s)\n", a->o->node, why);
  sup_close(a);
  start_stop(a, FT_EXIT_LOST, "the supervisor is lost");
}

/* Queues m (gen and run set here) for the supervisor and sends what it can. */
static void sup_send(agent *a, ft_msg *m) {
  if (a->sup_fd < 0)
    return;
  snprintf(m->run, sizeof m->run, "%s", a->run);
  int rc = ft_wire_encode(m, &a->sup_tx.b);
  if (rc) { /* only a bug of ours gets here: what we send is checked before */
    char why[320];
    snprintf(why, sizeof why, "cannot encode %s: %s", ft_msg_type_name(m->type), ft_err_detail());
    sup_lost(a, why);
    return;
  }
  if (outq_pending(&a->sup_tx) > SUP_TX_MAX) {
    sup_lost(a, "it reads too slowly: 64 MiB unsent");
    return;
  }
  if (outq_flush(&a->sup_tx, a->sup_fd)) {
    char why[160];
    snprintf(why, sizeof why, "send: %s", strerror(errno));
    sup_lost(a, why);
  }
}

static int sup_heard_recently(const agent *a, uint64_t now) {
  return a->sup_fd >= 0 && now - a->heard_ns <= (uint64_t)LOST_BEATS * a->hb_ms * 1000000ull;
}

/* ---- workers ------------------------------------------------------------- */

static void slot_close(agent *a, agent_slot *s, const char *why) {
  if (s->fd < 0)
    return;
  if (why)
    fprintf(stderr, "ftagent: node %u slot %u: %s: closing its socket\n", a->o->node,
            (unsigned)(s - a->slots), why);
  close(s->fd);
  s->fd = -1;
  ft_buf_release(&s->rx);
  outq_release(&s->tx);
}

static void slot_flush(agent *a, agent_slot *s) {
  if (s->fd >= 0 && outq_flush(&s->tx, s->fd))
    slot_close(a, s, errno == EPIPE || errno == ECONNRESET ? NULL : strerror(errno));
}

/* Queues a whole frame for worker s (a RELAY's inner frame, or an echo). */
static void slot_queue(agent *a, agent_slot *s, const uint8_t *f, size_t n) {
  if (s->fd < 0) /* closed: its exit is on its way to the supervisor */
    return;
  if (outq_pending(&s->tx) + n > SLOT_TX_MAX) {
    slot_close(a, s, "it reads too slowly: 64 MiB unsent");
    return;
  }
  if (ft_buf_append(&s->tx.b, f, n)) {
    slot_close(a, s, "out of memory");
    return;
  }
  slot_flush(a, s);
}

/* Worker j's frame f, whole, to the supervisor. */
static void relay_up(agent *a, uint32_t j, const uint8_t *f, size_t n) {
  ft_msg r;
  ft_msg_init(&r, FT_MSG_RELAY);
  r.relay.slot = j;
  r.relay.frame = f;
  r.relay.frame_len = (uint32_t)n;
  sup_send(a, &r);
}

/* One whole frame from worker s. */
static void slot_frame(agent *a, agent_slot *s, const uint8_t *f, size_t n, uint64_t now) {
  uint32_t j = (uint32_t)(s - a->slots);
  if (f[5] == FT_MSG_SHARD_SAVED && s->welcomed && agent_ckpt_offer(a->ck, j, f, n, now))
    return; /* held: the host's report, or it goes on later as it came */
  if (f[5] == FT_MSG_FAULT)
    agent_ckpt_release(a->ck); /* its checkpoint may never be whole now */
  if (f[5] != FT_MSG_HEARTBEAT || !s->welcomed) {
    relay_up(a, j, f, n);
    return;
  }
  ft_msg m;
  if (ft_wire_decode(f, n, &m)) {
    char why[320];
    snprintf(why, sizeof why, "a bad HEARTBEAT: %s", ft_err_detail());
    slot_close(a, s, why);
    return;
  }
  /* a beat of a new generation is told at the end of this pass (fresh);
   * the others wait for the HOSTBEAT */
  if (s->have_beat && m.gen != s->beat.gen && !s->fresh) {
    s->fresh = 1;
    a->nfresh++;
  }
  s->have_beat = 1;
  s->beat_ns = now;
  s->beat = (ft_wire_beat){.slot = j,
                           .gen = m.gen,
                           .step = m.heartbeat.step,
                           .seq = m.heartbeat.seq,
                           .phase = m.heartbeat.phase,
                           .coll_seq = m.heartbeat.coll_seq,
                           .prog_age_ms = m.heartbeat.prog_age_ms,
                           .wait = m.heartbeat.wait,
                           .wait_attempt = m.heartbeat.wait_attempt};
  if (sup_heard_recently(a, now)) { /* the echo the supervisor would send (sup_run.c) */
    ft_msg e;
    ft_msg_init(&e, FT_MSG_HEARTBEAT);
    snprintf(e.run, sizeof e.run, "%s", m.run);
    e.gen = m.gen;
    e.heartbeat.step = m.heartbeat.step;
    e.heartbeat.seq = m.heartbeat.seq;
    if (ft_wire_encode(&e, &s->tx.b))
      slot_close(a, s, "out of memory");
    else
      slot_flush(a, s);
  }
  ft_msg_release(&m);
}

/* Reads what worker s sent and handles its whole frames. drain: until
 * nothing is left (it has exited), else at most READ_BURST bytes. */
static void slot_read(agent *a, agent_slot *s, int drain) {
  size_t got = 0;
  while (s->fd >= 0 && (drain || got < READ_BURST)) {
    if (ft_buf_reserve(&s->rx, 65536)) {
      slot_close(a, s, "out of memory");
      return;
    }
    ssize_t n = recv(s->fd, s->rx.data + s->rx.len, s->rx.cap - s->rx.len, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n < 0) {
      slot_close(a, s, errno == ECONNRESET ? NULL : strerror(errno));
      return;
    }
    if (n == 0) { /* it closed: its exit comes by SIGCHLD */
      slot_close(a, s, NULL);
      return;
    }
    s->rx.len += (size_t)n;
    got += (size_t)n;
    uint64_t now = ft_now_ns();
    size_t p = 0;
    while (s->fd >= 0) {
      size_t flen;
      size_t max = s->nframes ? FT_WIRE_MAX_FRAME : FT_WIRE_PREAUTH_MAX_FRAME;
      int r = ft_wire_frame_len_max(s->rx.data + p, s->rx.len - p, max, &flen);
      if (r < 0) {
        char why[320];
        snprintf(why, sizeof why, "a bad frame: %s", ft_err_detail());
        slot_close(a, s, why);
        return;
      }
      if (r == 0)
        break;
      if (flen < FT_WIRE_HDR_LEN) { /* a length field of 2..5 holds no type */
        slot_close(a, s, "a frame shorter than its header");
        return;
      }
      s->nframes++;
      slot_frame(a, s, s->rx.data + p, flen, now);
      p += flen;
    }
    if (s->fd >= 0)
      ft_buf_consume(&s->rx, p);
  }
}

static agent_slot *slot_of_pid(agent *a, pid_t pid) {
  for (uint32_t j = 0; j < a->nslots; j++)
    if (a->slots[j].pid == pid)
      return &a->slots[j];
  return NULL;
}

/* A worker was reaped with wait status st: its last frames, then SLOT exited. */
static void slot_exited(agent *a, agent_slot *s, int st) {
  uint32_t j = (uint32_t)(s - a->slots);
  pid_t pid = s->pid;
  slot_read(a, s, 1);
  slot_close(a, s, NULL);
  agent_ckpt_release(a->ck); /* no more of its reports come */
  if (WIFSIGNALED(st))
    fprintf(stderr, "ftagent: node %u slot %u: worker %ld killed by signal %d\n", a->o->node,
            (unsigned)j, (long)pid, WTERMSIG(st));
  else
    fprintf(stderr, "ftagent: node %u slot %u: worker %ld exited with code %d\n", a->o->node,
            (unsigned)j, (long)pid, WEXITSTATUS(st));
  s->pid = 0;
  s->have_beat = 0;
  a->live--;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SLOT);
  m.slot.slot = j;
  m.slot.event = FT_SLOT_EXITED;
  m.slot.status = st;
  m.slot.pid = (uint32_t)pid;
  sup_send(a, &m);
}

static void reap(agent *a) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid <= 0)
      return;
    agent_slot *s = slot_of_pid(a, pid);
    if (s)
      slot_exited(a, s, st);
  }
}

/* The command for slot j: the worker's own, then --connect fd:K --node N
 * --slot J. argv points into bufs; returns the array (malloc'd) or NULL. */
static char **worker_argv(const agent_opts *o, int k, uint32_t j, char bufs[3][32]) {
  size_t n = 0;
  while (o->argv[n])
    n++;
  char **v = calloc(n + 7, sizeof *v);
  if (!v)
    return NULL;
  memcpy(v, o->argv, n * sizeof *v);
  snprintf(bufs[0], 32, "fd:%d", k);
  snprintf(bufs[1], 32, "%u", (unsigned)j);
  snprintf(bufs[2], 32, "%u", (unsigned)o->node);
  v[n] = "--connect";
  v[n + 1] = bufs[0];
  v[n + 2] = "--node";
  v[n + 3] = bufs[2];
  v[n + 4] = "--slot";
  v[n + 5] = bufs[1];
  return v;
}

/* Starts the worker of slot j on one end of a new socket pair. */
static int slot_start(agent *a, uint32_t j) {
  agent_slot *s = &a->slots[j];
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
    return ft_err_set(FT_EIO, "socketpair: %s", strerror(errno));
  char bufs[3][32];
  char **argv = worker_argv(a->o, sv[1], j, bufs);
  if (!argv) {
    close(sv[0]);
    close(sv[1]);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  pid_t self = getpid();
  fflush(NULL); /* nothing buffered is written twice */
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    free(argv);
    close(sv[0]);
    close(sv[1]);
    return ft_err_set(FT_EIO, "fork: %s", strerror(e));
  }
  if (pid == 0) { /* the worker (the agent has one thread: setenv is safe here) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self) /* the agent died before the line above */
      _exit(127);
    fcntl(sv[1], F_SETFD, 0); /* its end, and only its end, survives exec */
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0 && sv[1] != 0) /* stdin: not the agent's (the ssh channel of its token) */
      dup2(null, 0);
    setenv(FT_WIRE_TOKEN_ENV, a->o->token, 1);
    setenv(CTL_LOCAL_ADDR_ENV, a->local_addr, 1);
    sigprocmask(SIG_SETMASK, &a->oldmask, NULL);
    execvp(argv[0], argv);
    dprintf(2, "ftagent: node %u slot %u: cannot run %s: %s\n", a->o->node, (unsigned)j, argv[0],
            strerror(errno));
    _exit(127);
  }
  free(argv);
  close(sv[1]);
  if (fcntl(sv[0], F_SETFL, O_NONBLOCK)) /* never: a new socket takes the flag */
    fprintf(stderr, "ftagent: node %u slot %u: O_NONBLOCK: %s\n", a->o->node, (unsigned)j,
            strerror(errno));
  s->pid = pid;
  s->fd = sv[0];
  s->nframes = 0;
  s->have_beat = 0;
  s->welcomed = 0;
  a->live++;
  fprintf(stderr, "ftagent: node %u slot %u: worker %ld started\n", a->o->node, (unsigned)j,
          (long)pid);
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SLOT);
  m.slot.slot = j;
  m.slot.event = FT_SLOT_OPEN;
  m.slot.pid = (uint32_t)pid;
  sup_send(a, &m);
  return FT_OK;
}

/* ---- stopping ------------------------------------------------------------ */

static void start_stop(agent *a, int code, const char *why) {
  if (a->stopping)
    return;
  a->stopping = 1;
  a->exit_code = code;
  a->stop_deadline_ns = ft_now_ns() + STOP_GRACE_NS;
  if (a->live)
    fprintf(stderr, "ftagent: node %u: %s: stopping %u worker%s\n", a->o->node, why, a->live,
            a->live == 1 ? "" : "s");
  else
    fprintf(stderr, "ftagent: node %u: %s\n", a->o->node, why);
  for (uint32_t j = 0; j < a->nslots; j++)
    if (a->slots[j].pid > 0)
      kill(a->slots[j].pid, SIGTERM);
}

/* The grace period is over: SIGKILL for the rest, each reaped and reported. */
static void kill_rest(agent *a) {
  if (a->live)
    fprintf(stderr, "ftagent: node %u: %u worker%s still running after %llu s: SIGKILL\n",
            a->o->node, a->live, a->live == 1 ? "" : "s", STOP_GRACE_NS / 1000000000ull);
  for (uint32_t j = 0; j < a->nslots; j++)
    if (a->slots[j].pid > 0)
      kill(a->slots[j].pid, SIGKILL);
  for (uint32_t j = 0; j < a->nslots; j++) {
    agent_slot *s = &a->slots[j];
    while (s->pid > 0) {
      int st;
      pid_t r = waitpid(s->pid, &st, 0);
      if (r == s->pid)
        slot_exited(a, s, st);
      else if (r < 0 && errno != EINTR) { /* not ours any more: nothing to wait for */
        s->pid = 0;
        a->live--;
      }
    }
  }
}

/* DONE: the last frames leave (FLUSH_NS at most), then an orderly close. */
static void finish(agent *a) {
  if (a->sup_fd < 0)
    return;
  uint64_t until = ft_now_ns() + FLUSH_NS;
  while (outq_pending(&a->sup_tx) && ft_now_ns() < until) {
    struct pollfd p = {.fd = a->sup_fd, .events = POLLOUT};
    if (poll(&p, 1, 100) < 0 && errno != EINTR)
      break;
    if (outq_flush(&a->sup_tx, a->sup_fd))
      break;
  }
  /* shut down and read to its end: closing with unread bytes would reset
   * the connection, and a reset can drop what was sent last */
  shutdown(a->sup_fd, SHUT_WR);
  char buf[65536];
  while (ft_now_ns() < until) {
    struct pollfd p = {.fd = a->sup_fd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r < 0 && errno != EINTR)
      break;
    if (r <= 0)
      continue;
    ssize_t n = recv(a->sup_fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      break;
  }
  sup_close(a);
}

/* ---- the supervisor's frames --------------------------------------------- */

/* A host frame m (ft_wire.h): a copy to each slot whose worker had its
 * WELCOME, as the RELAY it stands for would have brought it (ASSIGN: slot
 * j's rank is slot 0's + j). why: set when the frame cannot be (a rank
 * past the world: the supervisor is then lost). */
static void host_frame(agent *a, ft_msg *m, char *why, size_t wn) {
  uint32_t rank0 = m->type == FT_MSG_ASSIGN ? m->assign.rank : 0;
  for (uint32_t j = 0; j < a->nslots; j++) {
    agent_slot *s = &a->slots[j];
    if (s->fd < 0 || !s->welcomed)
      continue;
    if (m->type == FT_MSG_ASSIGN) {
      if ((uint64_t)rank0 + j >= m->assign.world) {
        snprintf(why, wn, "ASSIGN of rank %u for slot %u: past its world of %u", (unsigned)rank0,
                 (unsigned)j, (unsigned)m->assign.world);
        return;
      }
      m->assign.rank = rank0 + j;
    }
    ft_buf_reset(&a->hostf);
    if (ft_wire_encode(m, &a->hostf)) {
      snprintf(why, wn, "cannot give its %s to slot %u: %s", ft_msg_type_name(m->type), (unsigned)j,
               ft_err_detail());
      return;
    }
    slot_queue(a, s, a->hostf.data, a->hostf.len);
  }
}

/* One whole frame from the supervisor; 0, or -1 once it is lost. */
static int sup_frame(agent *a, const uint8_t *f, size_t n, uint64_t now) {
  ft_msg m;
  char why[400];
  if (ft_wire_decode(f, n, &m)) {
    snprintf(why, sizeof why, "a bad frame: %s", ft_err_detail());
    sup_lost(a, why);
    return -1;
  }
  a->heard_ns = now;
  why[0] = 0;
  switch (m.type) {
  case FT_MSG_RELAY:
    if (m.relay.slot >= a->nslots)
      snprintf(why, sizeof why, "RELAY for slot %u of %u", (unsigned)m.relay.slot,
               (unsigned)a->nslots);
    else {
      agent_slot *s = &a->slots[m.relay.slot];
      if (m.relay.frame_len > 5 && m.relay.frame[5] == FT_MSG_WELCOME)
        s->welcomed = 1;
      slot_queue(a, s, m.relay.frame, m.relay.frame_len);
    }
    break;
  case FT_MSG_HOSTBEAT: {
    unsigned i = m.hostbeat.seq % RTT_RING;
    if (a->sent_seq[i] == m.hostbeat.seq && a->sent_ns[i]) {
      uint64_t us = (now - a->sent_ns[i]) / 1000u;
      a->rtt_us = us == 0 ? 1 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
      a->sent_ns[i] = 0;
    }
    break;
  }
  case FT_MSG_SLOT: {
    agent_slot *s = m.slot.slot < a->nslots ? &a->slots[m.slot.slot] : NULL;
    int sig = m.slot.status;
    if (m.slot.slot == FT_WIRE_AGENT_SLOT && sig >= 1 && sig <= 64) {
      /* the whole host: its workers, then the agent (a SIGKILL: as if the
       * host lost power; the supervisor's chaos kill of a pool) */
      fprintf(stderr, "ftagent: node %u: signal %d to the host from the supervisor\n", a->o->node,
              sig);
      for (unsigned j = 0; j < a->nslots; j++)
        if (a->slots[j].pid > 0)
          kill(a->slots[j].pid, sig);
      raise(sig);
      break;
    }
    if (!s || m.slot.event == FT_SLOT_OPEN || m.slot.event == FT_SLOT_EXITED ||
        (m.slot.event == FT_SLOT_SIGNAL && (sig < 1 || sig > 64)))
      snprintf(why, sizeof why, "SLOT %s (%d) for slot %u of %u", ft_slot_event_name(m.slot.event),
               sig, (unsigned)m.slot.slot, (unsigned)a->nslots);
    else if (m.slot.event == FT_SLOT_CLOSED)
      slot_close(a, s, "the supervisor closed the slot");
    else if (m.slot.event == FT_SLOT_SIGNAL && s->pid > 0)
      kill(s->pid, sig); /* its exit comes by SIGCHLD */
    else if (m.slot.event == FT_SLOT_START && (s->pid > 0 || a->stopping))
      /* its worker's exit is on its way (the supervisor asks once it has
       * heard it), or we are ending: nothing to start */
      fprintf(stderr, "ftagent: node %u slot %u: start refused: %s\n", a->o->node,
              (unsigned)m.slot.slot, a->stopping ? "the agent is stopping" : "its worker runs");
    else if (m.slot.event == FT_SLOT_START && slot_start(a, m.slot.slot))
      fprintf(stderr, "ftagent: node %u slot %u: %s\n", a->o->node, (unsigned)m.slot.slot,
              ft_err_detail()); /* the supervisor waits for its HELLO, then blames the node */
    break;
  }
  case FT_MSG_ASSIGN:
  case FT_MSG_COMMITTED:
    host_frame(a, &m, why, sizeof why);
    break;
  case FT_MSG_STOP: {
    if (m.stop.reason == FT_STOP_REJOIN) { /* a host frame: the agent goes on */
      host_frame(a, &m, why, sizeof why);
      break;
    }
    char what[FT_WIRE_MAX_DETAIL + 128];
    snprintf(what, sizeof what, "STOP (%s%s%s) from the supervisor",
             ft_stop_reason_name(m.stop.reason), m.stop.detail && *m.stop.detail ? ": " : "",
             m.stop.detail ? m.stop.detail : "");
    start_stop(a, FT_EXIT_OK, what);
    break;
  }
  default:
    snprintf(why, sizeof why, "it sent %s, which an agent does not take", ft_msg_type_name(m.type));
    break;
  }
  ft_msg_release(&m);
  if (why[0]) {
    sup_lost(a, why);
    return -1;
  }
  return 0;
}

/* Handles the whole frames in sup_rx; 0, or -1 once the supervisor is lost. */
static int sup_parse(agent *a, uint64_t now) {
  size_t p = 0;
  for (;;) {
    size_t flen;
    int r = ft_wire_frame_len_max(a->sup_rx.data + p, a->sup_rx.len - p, FT_WIRE_MAX_RELAY_FRAME,
                                  &flen);
    if (r < 0) {
      char why[320];
      snprintf(why, sizeof why, "a bad frame: %s", ft_err_detail());
      sup_lost(a, why);
      return -1;
    }
    if (r == 0)
      break;
    if (sup_frame(a, a->sup_rx.data + p, flen, now))
      return -1;
    p += flen;
  }
  ft_buf_consume(&a->sup_rx, p);
  return 0;
}

static void sup_read(agent *a) {
  size_t got = 0;
  while (a->sup_fd >= 0 && got < READ_BURST) {
    if (ft_buf_reserve(&a->sup_rx, 262144)) {
      sup_lost(a, "out of memory");
      return;
    }
    ssize_t n = recv(a->sup_fd, a->sup_rx.data + a->sup_rx.len, a->sup_rx.cap - a->sup_rx.len,
                     MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      sup_lost(a, n == 0 ? "connection closed" : strerror(errno));
      return;
    }
    a->sup_rx.len += (size_t)n;
    got += (size_t)n;
    a->heard_ns = ft_now_ns(); /* any byte: a big frame may take a while to come whole */
    if (sup_parse(a, a->heard_ns))
      return;
  }
}

/* One HOSTBEAT: a beat per live slot heard from since it started, or
 * (fresh_only) per slot whose last beat is of a new generation. */
static void send_hostbeat(agent *a, uint64_t now, int fresh_only) {
  uint32_t n = 0;
  for (uint32_t j = 0; j < a->nslots; j++) {
    agent_slot *s = &a->slots[j];
    int fresh = s->fresh;
    s->fresh = 0;
    if (s->pid <= 0 || !s->have_beat || (fresh_only && !fresh))
      continue;
    a->beats[n] = s->beat;
    uint64_t age = (now - s->beat_ns) / 1000000u;
    a->beats[n].age_ms = age > UINT32_MAX ? UINT32_MAX : (uint32_t)age;
    n++;
  }
  ft_msg m;
  ft_msg_init(&m, FT_MSG_HOSTBEAT);
  m.hostbeat.seq = ++a->hb_seq;
  m.hostbeat.rtt_us = a->rtt_us;
  m.hostbeat.beats = a->beats;
  m.hostbeat.nbeats = n;
  a->nfresh = 0;
  a->sent_seq[a->hb_seq % RTT_RING] = a->hb_seq;
  a->sent_ns[a->hb_seq % RTT_RING] = now;
  sup_send(a, &m);
}

/* ---- signals ------------------------------------------------------------- */

static void on_signals(agent *a) {
  struct signalfd_siginfo si[16];
  ssize_t n = read(a->sfd, si, sizeof si);
  int chld = 0;
  for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof si[0]; i++) {
    if (si[i].ssi_signo == SIGCHLD) {
      chld = 1;
    } else if (si[i].ssi_signo == SIGUSR1) {
      /* a worker's stack dump is asked over the wire (DUMP): a stray
       * SIGUSR1 must not end the host's agent */
    } else {
      start_stop(a, FT_EXIT_OK, strsignal((int)si[i].ssi_signo));
    }
  }
  if (chld)
    reap(a);
}

/* ---- the loop ------------------------------------------------------------ */

static int poll_ms(uint64_t now, uint64_t until) {
  if (until <= now)
    return 0;
  uint64_t ms = (until - now + 999999u) / 1000000u;
  return ms > 60000 ? 60000 : (int)ms;
}

/* A finished checkpoint job (agent_ckpt_drain): its frames as they came, */
static void ckpt_relay(void *ud, uint32_t slot, const uint8_t *f, size_t n) {
  relay_up(ud, slot, f, n);
}

/* ... or the host's own SHARD_SAVED. */
static void ckpt_host(void *ud, uint64_t gen, int64_t step, uint32_t rank, const char *env) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SHARD_SAVED);
  m.gen = gen;
  m.shard_saved.step = step;
  m.shard_saved.rank = rank;
  m.shard_saved.manifest = (char *)env;
  sup_send(ud, &m);
}

static int loop(agent *a) {
  struct pollfd *pf = calloc(a->nslots + 3, sizeof *pf);
  uint32_t *pslot = calloc(a->nslots + 3, sizeof *pslot);
  if (!pf || !pslot) {
    free(pf);
    free(pslot);
    fprintf(stderr, "ftagent: node %u: out of memory\n", a->o->node);
    start_stop(a, FT_EXIT_FAIL, "out of memory");
    kill_rest(a);
    return a->exit_code;
  }
  for (;;) {
    uint64_t now = ft_now_ns();
    uint64_t lost_ns = (uint64_t)LOST_BEATS * a->hb_ms * 1000000ull;
    if (a->sup_fd >= 0 && now - a->heard_ns > lost_ns) {
      char why[96];
      snprintf(why, sizeof why, "nothing heard for %.1f s", (double)(now - a->heard_ns) * 1e-9);
      sup_lost(a, why);
    }
    if (a->sup_fd >= 0 && now >= a->next_beat_ns) {
      send_hostbeat(a, now, 0);
      a->next_beat_ns += (uint64_t)a->hb_ms * 1000000ull;
      if (a->next_beat_ns <= now) /* a late wake: no burst of beats */
        a->next_beat_ns = now + (uint64_t)a->hb_ms * 1000000ull;
    }
    if (a->stopping && a->live && now >= a->stop_deadline_ns)
      kill_rest(a);
    agent_ckpt_tick(a->ck, now);
    if (a->live == 0 && a->stopping) /* every worker reaped and reported: */
      agent_ckpt_release(a->ck);
    if (a->live == 0 && a->stopping && /* ... and their last reports sent */
        (!agent_ckpt_busy(a->ck) || a->sup_fd < 0 || now >= a->stop_deadline_ns + FLUSH_NS))
      break;

    /* entries: the signals, the supervisor (while connected), each open
     * worker socket; pslot[i] names the slot (NO_SLOT for the first two) */
    nfds_t n = 0;
    pslot[n] = NO_SLOT;
    pf[n++] = (struct pollfd){.fd = a->sfd, .events = POLLIN};
    pslot[n] = CKPT_SLOT;
    pf[n++] = (struct pollfd){.fd = agent_ckpt_fd(a->ck), .events = POLLIN};
    if (a->sup_fd >= 0) {
      pslot[n] = NO_SLOT;
      pf[n++] = (struct pollfd){.fd = a->sup_fd,
                                .events = POLLIN | (outq_pending(&a->sup_tx) ? POLLOUT : 0)};
    }
    int backlog = a->sup_fd >= 0 && outq_pending(&a->sup_tx) > SUP_TX_HIGH;
    for (uint32_t j = 0; j < a->nslots; j++) {
      agent_slot *s = &a->slots[j];
      if (s->fd < 0)
        continue;
      pslot[n] = j;
      pf[n++] = (struct pollfd){
          .fd = s->fd,
          .events = (short)((backlog ? 0 : POLLIN) | (outq_pending(&s->tx) ? POLLOUT : 0))};
    }
    uint64_t until = now + 60000000000ull;
    if (a->sup_fd >= 0) {
      if (a->next_beat_ns < until)
        until = a->next_beat_ns;
      if (a->heard_ns + lost_ns + 1 < until)
        until = a->heard_ns + lost_ns + 1;
    }
    if (a->stopping && a->stop_deadline_ns < until)
      until = a->stop_deadline_ns;
    if (agent_ckpt_deadline(a->ck) < until)
      until = agent_ckpt_deadline(a->ck);
    if (a->stopping && !a->live && agent_ckpt_busy(a->ck) &&
        a->stop_deadline_ns + FLUSH_NS < until) /* the last reports' time is up then */
      until = a->stop_deadline_ns + FLUSH_NS;
    int r = poll(pf, n, poll_ms(now, until));
    if (r < 0 && errno != EINTR) {
      fprintf(stderr, "ftagent: node %u: poll: %s\n", a->o->node, strerror(errno));
      start_stop(a, FT_EXIT_FAIL, "internal error");
      kill_rest(a);
      break;
    }
    if (r <= 0)
      continue;
    for (nfds_t i = 0; i < n; i++) {
      short re = pf[i].revents;
      if (!re)
        continue;
      if (i == 0) {
        on_signals(a);
      } else if (pslot[i] == CKPT_SLOT) {
        agent_ckpt_out out = {.relay = ckpt_relay, .host = ckpt_host, .ud = a};
        agent_ckpt_drain(a->ck, &out);
      } else if (pslot[i] == NO_SLOT) { /* the supervisor */
        if (pf[i].fd != a->sup_fd)      /* lost meanwhile */
          continue;
        size_t before = outq_pending(&a->sup_tx);
        if (re & POLLOUT && outq_flush(&a->sup_tx, a->sup_fd)) {
          char why[160];
          snprintf(why, sizeof why, "send: %s", strerror(errno));
          sup_lost(a, why);
        } else if (re & POLLOUT && outq_pending(&a->sup_tx) < before) {
          /* its receive window opened: the supervisor's process reads what
           * we send (a HOSTBEAT behind a big RELAY has no echo yet) */
          a->heard_ns = ft_now_ns();
        }
        if (re & (POLLIN | POLLHUP | POLLERR) && a->sup_fd >= 0)
          sup_read(a);
      } else {
        agent_slot *s = &a->slots[pslot[i]];
        if (s->fd != pf[i].fd) /* closed meanwhile */
          continue;
        if (re & POLLOUT)
          slot_flush(a, s);
        /* POLLHUP and POLLERR come unasked: read to the end, even in a backlog */
        if (re & (POLLIN | POLLHUP | POLLERR) && s->fd >= 0)
          slot_read(a, s, 0);
      }
    }
    if (a->nfresh) /* this pass's beats of a new generation, in one frame */
      send_hostbeat(a, ft_now_ns(), 1);
  }
  free(pf);
  free(pslot);
  finish(a);
  return a->exit_code;
}

/* ---- the handshake ------------------------------------------------------- */

/* CHALLENGE, HELLO as the node's agent, WELCOME. FT_EXIT_* on failure. */
static int handshake(agent *a) {
  char who[64];
  snprintf(who, sizeof who, "ftagent: node %u", a->o->node);
  ft_msg m;
  memset(&m, 0, sizeof m);
  int rc = ctl_dial(a->o->connect, who, &a->sup_fd, &a->sup_rx, &m);
  if (rc) {
    fprintf(stderr, "%s: %s\n", who, ft_err_detail());
    return FT_EXIT_LOST;
  }
  if (m.type != FT_MSG_CHALLENGE) {
    fprintf(stderr, "%s: expected CHALLENGE, got %s\n", who, ft_msg_type_name(m.type));
    ft_msg_release(&m);
    return FT_EXIT_FAIL;
  }
  snprintf(a->run, sizeof a->run, "%s", m.run);
  uint8_t nonce[FT_WIRE_NONCE_LEN];
  memcpy(nonce, m.challenge.nonce, sizeof nonce);
  ft_msg_release(&m);

  ft_sockaddr la;
  la.len = sizeof la.ss;
  if (getsockname(a->sup_fd, (struct sockaddr *)&la.ss, &la.len)) {
    fprintf(stderr, "%s: getsockname: %s\n", who, strerror(errno));
    return FT_EXIT_FAIL;
  }
  ft_net_format(&la, 0, a->local_addr, sizeof a->local_addr);

  ft_msg_init(&m, FT_MSG_HELLO);
  snprintf(m.run, sizeof m.run, "%s", a->run);
  m.hello.node = a->o->node;
  m.hello.slot = FT_WIRE_AGENT_SLOT;
  m.hello.pid = (uint32_t)getpid();
  ft_buf b;
  ft_buf_init(&b);
  rc = ft_wire_hello_sign(&m, a->o->token, nonce);
  if (rc == FT_OK)
    rc = ft_wire_encode(&m, &b);
  if (rc == FT_OK)
    rc = ft_send_all(a->sup_fd, b.data, b.len, "supervisor");
  ft_buf_release(&b);
  if (rc) {
    fprintf(stderr, "%s: HELLO: %s\n", who, ft_err_detail());
    return rc == FT_ENET ? FT_EXIT_LOST : FT_EXIT_FAIL;
  }

  struct timeval tv = {HANDSHAKE_WAIT_S, 0}, none = {0, 0};
  setsockopt(a->sup_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  errno = 0;
  rc = ctl_read_frame(a->sup_fd, &a->sup_rx, FT_WIRE_PREAUTH_MAX_FRAME, &m);
  int timed_out = rc == FT_ENET && (errno == EAGAIN || errno == EWOULDBLOCK);
  setsockopt(a->sup_fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  if (rc) {
    fprintf(stderr, "%s: waiting for WELCOME: %s\n", who,
            timed_out ? "nothing within 60 s" : ft_err_detail());
    return rc == FT_ENET ? FT_EXIT_LOST : FT_EXIT_FAIL;
  }
  if (m.type == FT_MSG_STOP) {
    fprintf(stderr, "%s: the supervisor refused this agent: STOP (%s%s%s)\n", who,
            ft_stop_reason_name(m.stop.reason), m.stop.detail && *m.stop.detail ? ": " : "",
            m.stop.detail ? m.stop.detail : "");
    ft_msg_release(&m);
    return FT_EXIT_FAIL;
  }
  if (m.type != FT_MSG_WELCOME) {
    fprintf(stderr, "%s: expected WELCOME, got %s\n", who, ft_msg_type_name(m.type));
    ft_msg_release(&m);
    return FT_EXIT_FAIL;
  }
  a->hb_ms = m.welcome.heartbeat_ms ? m.welcome.heartbeat_ms : 1000;
  ft_msg_release(&m);
  if (fcntl(a->sup_fd, F_SETFL, fcntl(a->sup_fd, F_GETFL) | O_NONBLOCK)) {
    fprintf(stderr, "%s: O_NONBLOCK: %s\n", who, strerror(errno));
    return FT_EXIT_FAIL;
  }
  fprintf(stderr, "%s: connected to %s as run %s's agent (heartbeat %u ms): starting %u workers\n",
          who, a->o->connect, a->run, (unsigned)a->hb_ms, (unsigned)a->o->slots);
  return FT_EXIT_OK;
}

/* ---- agent_run ----------------------------------------------------------- */

int agent_run(const agent_opts *o) {
  if (!o->token || ft_wire_token_check(o->token)) {
    fprintf(stderr, "ftagent: the run token (%s) is missing or malformed\n", FT_WIRE_TOKEN_ENV);
    return FT_EXIT_USAGE;
  }
  if (o->slots < 1 || o->slots > FT_WIRE_MAX_SLOTS || !o->argv || !o->argv[0]) {
    fprintf(stderr, "ftagent: 1..%u slots and a worker command are needed\n", FT_WIRE_MAX_SLOTS);
    return FT_EXIT_USAGE;
  }
  agent a;
  memset(&a, 0, sizeof a);
  a.o = o;
  a.sup_fd = -1;
  a.sfd = -1;
  ft_buf_init(&a.sup_rx);
  ft_buf_init(&a.sup_tx.b);
  ft_buf_init(&a.hostf);
  a.nslots = o->slots;
  a.slots = calloc(o->slots, sizeof *a.slots);
  a.beats = calloc(o->slots, sizeof *a.beats);
  if (!a.slots || !a.beats) {
    free(a.slots);
    free(a.beats);
    fprintf(stderr, "ftagent: out of memory\n");
    return FT_EXIT_FAIL;
  }
  for (uint32_t j = 0; j < a.nslots; j++) {
    a.slots[j].fd = -1;
    ft_buf_init(&a.slots[j].rx);
    ft_buf_init(&a.slots[j].tx.b);
  }

  int rc = handshake(&a);
  if (rc)
    goto out;
  uint64_t hold = 2ull * a.hb_ms * 1000000ull;
  if (agent_ckpt_new(o->store, o->node, o->slots, hold > HOLD_MIN_NS ? hold : HOLD_MIN_NS, &a.ck)) {
    fprintf(stderr, "ftagent: node %u: %s\n", o->node, ft_err_detail());
    rc = FT_EXIT_FAIL;
    goto out;
  }
  /* signals as events of the loop, from before the first worker can exit
   * (until here, SIGTERM ends a hung handshake as it would any process) */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  if (sigprocmask(SIG_BLOCK, &set, &a.oldmask) ||
      (a.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
    fprintf(stderr, "ftagent: signalfd: %s\n", strerror(errno));
    rc = FT_EXIT_FAIL;
    goto out;
  }
  a.heard_ns = ft_now_ns();
  a.next_beat_ns = a.heard_ns + (uint64_t)a.hb_ms * 1000000ull;
  for (uint32_t j = 0; j < a.nslots && !a.stopping; j++) {
    if (slot_start(&a, j)) {
      fprintf(stderr, "ftagent: node %u slot %u: %s\n", o->node, (unsigned)j, ft_err_detail());
      start_stop(&a, FT_EXIT_FAIL, "a worker could not be started");
    }
  }
  sup_parse(&a, ft_now_ns()); /* frames that came with WELCOME */
  rc = loop(&a);
out:
  sup_close(&a);
  for (uint32_t j = 0; j < a.nslots; j++)
    slot_close(&a, &a.slots[j], NULL);
  if (a.sfd >= 0) {
    close(a.sfd);
    sigprocmask(SIG_SETMASK, &a.oldmask, NULL);
  }
  agent_ckpt_free(a.ck);
  ft_buf_release(&a.hostf);
  free(a.slots);
  free(a.beats);
  return rc;
}
