/*
 * ctl: the worker's control client (see ctl.h).
 *
 * Threads and locks: `mu` guards everything below it in struct ctl; `send_mu`
 * serialises writes to the socket (a frame is written whole). The reader
 * thread owns the receive buffer. Waiters (ASSIGN, KV replies) sleep on cv.
 *
 * Failure model: the supervisor is the only authority. Anything that makes
 * the connection unusable (EOF, a read error, a malformed frame, silence
 * longer than the heartbeat timeout) ends the process with FT_EXIT_LOST;
 * a STOP ends it with FT_EXIT_OK, on the training thread after a stack
 * dump the supervisor asked for just before (its SIGUSR1, or a DUMP this
 * reader thread turned into one: stackdump_request, stackdump_exit). Exits use
 * _exit after flushing stdio, so no atexit handler races the training
 * thread.
 *
 * The worker's place in the run (recovery.in_process's rejoin), kept in
 * train_gen, abort_gen and waiting, is one of four states (state_of):
 *   IDLE      no ASSIGN taken yet (train_gen 0)
 *   TRAINING  in generation train_gen
 *   LEAVING   a STOP rejoin named a newer generation; the training thread
 *             has not left its own yet (ctl_aborted is 1)
 *   WAITING   out of its gang, the rejoin acknowledged (ctl_rejoin),
 *             waiting for the next ASSIGN
 * Each event leads from a state to one state, or is a bug (ctl_next):
 *   a STOP rejoin heard (reader, a newer generation than any before):
 *     IDLE -> IDLE, TRAINING -> LEAVING, LEAVING -> LEAVING,
 *     WAITING -> WAITING (the acknowledgement goes at once)
 *   an ASSIGN heard (reader): every state to itself
 *   an ASSIGN taken (ctl_wait_assign): IDLE -> TRAINING, WAITING -> TRAINING
 *   left (ctl_rejoin, once the rejoin came): LEAVING -> WAITING
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h) at
 * every event, under mu, by check_step: the transition is ctl_next's (W1),
 * train_gen and abort_gen never go back (W2), and the state's own facts
 * hold (check_ctl_state, W3): heartbeats never name a generation older
 * than the training thread's, a WAITING worker's name the newer one, and
 * a generation taken came from an ASSIGN.
 */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ft_bug.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_file.h"
#include "ft_net.h"
#include "ft_wire.h"
#include "progress.h"
#include "stackdump.h"

typedef struct kv_entry {
  struct kv_entry *next;
  char *key;
  void *val;
  size_t len;
} kv_entry;

struct ctl {
  int fd;
  int inherited; /* --connect fd:K: a socket the agent (ftagent) connected for us */
  char run[FT_WIRE_MAX_RUN + 1];
  uint32_t node, slot;
  double hb_timeout_s;
  uint32_t heartbeat_ms;
  pthread_t reader, beater;
  pthread_mutex_t send_mu;
  ft_buf rx; /* receive buffer: the handshake's leftovers, then the reader's */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t gen;       /* heartbeats' generation */
  uint64_t train_gen; /* the training thread's: of the ASSIGN it took (its STEPs, shards, KV) */
  uint64_t abort_gen; /* the newest STOP rejoin's (0: none): leave every older generation */
  int waiting;        /* out of its gang after a rejoin, waiting for ASSIGN */
  comm *cm;           /* the training thread's comm (ctl_set_comm), aborted by a
                         STOP rejoin so a collective blocked on a peer that
                         neither answers nor closes (a cut link) fails now */
  int64_t committed;  /* the newest COMMITTED step heard (-1: none) */
  int have_assign;
  ctl_assign assign;
  int64_t step;
  uint64_t last_rx_ns;
  uint32_t hb_seq;     /* the last beat sent */
  uint64_t hb_sent_ns; /* when */
  uint32_t rtt_us;     /* the last echoed beat's round trip (0: none yet) */
  uint32_t next_req;
  uint32_t reply_req; /* req of the KV_VALUE in reply_* (0: none) */
  int reply_status;
  ft_msg reply; /* the last KV_VALUE, owned */
  kv_entry *cache;
  char token[FT_WIRE_TOKEN_HEX + 1];   /* the run token (the replica channel proves it too) */
  char buddies[FT_WIRE_MAX_ADDRS + 1]; /* the newest REPLICA list (checkpoint.replicate) */
  uint64_t buddies_ver;                /* REPLICA lists received */
  /* the supervisor asks for the node doctor's checks again (DOCTOR):
   * doctor_fn runs on a thread of its own, one at a time */
  void (*doctor_fn)(void *ud);
  void *doctor_ud;
  int doctor_busy;
};

/* ---- the control state machine (see the top comment) ------------------- */

enum { CTL_IDLE, CTL_TRAINING, CTL_LEAVING, CTL_WAITING, CTL_NSTATES };
enum { CTL_EV_REJOIN_HEARD, CTL_EV_ASSIGN_HEARD, CTL_EV_ASSIGN_TAKEN, CTL_EV_LEFT, CTL_NEVENTS };

/* What a transition looked like before it (mu held throughout). */
typedef struct ctl_snap {
  int state;
  uint64_t train_gen, abort_gen;
} ctl_snap;

#if FT_INVARIANTS_ON
static const char *const ctl_state_name[CTL_NSTATES] = {"IDLE", "TRAINING", "LEAVING", "WAITING"};
static const char *const ctl_event_name[CTL_NEVENTS] = {"a STOP rejoin heard", "an ASSIGN heard",
                                                        "an ASSIGN taken", "left (ctl_rejoin)"};
/* The one state each event leads to from each state; -1: only a bug gets
 * there. */
static const signed char ctl_next[CTL_NEVENTS][CTL_NSTATES] = {
    [CTL_EV_REJOIN_HEARD] = {CTL_IDLE, CTL_LEAVING, CTL_LEAVING, CTL_WAITING},
    [CTL_EV_ASSIGN_HEARD] = {CTL_IDLE, CTL_TRAINING, CTL_LEAVING, CTL_WAITING},
    [CTL_EV_ASSIGN_TAKEN] = {CTL_TRAINING, -1, -1, CTL_TRAINING},
    [CTL_EV_LEFT] = {-1, -1, CTL_WAITING, -1},
};

static int state_of(const ctl *c) {
  if (c->waiting)
    return CTL_WAITING;
  if (c->train_gen == 0)
    return CTL_IDLE;
  return c->abort_gen > c->train_gen ? CTL_LEAVING : CTL_TRAINING;
}

static ctl_snap snap_locked(const ctl *c) {
  return (ctl_snap){state_of(c), c->train_gen, c->abort_gen};
}

/* W3 (mu held) */
static void check_ctl_state(const ctl *c) {
  FT_ASSERT_INV(c->gen >= c->train_gen,
                "W3: heartbeats of generation %" PRIu64 " while training in %" PRIu64, c->gen,
                c->train_gen);
  FT_ASSERT_INV(!c->waiting || (c->abort_gen > c->train_gen && c->gen > c->train_gen),
                "W3: WAITING with train_gen %" PRIu64 ", abort_gen %" PRIu64
                ", heartbeats' %" PRIu64,
                c->train_gen, c->abort_gen, c->gen);
  FT_ASSERT_INV(!c->train_gen || (c->have_assign && c->assign.gen >= c->train_gen),
                "W3: generation %" PRIu64 " taken, the newest ASSIGN's %" PRIu64, c->train_gen,
                c->have_assign ? c->assign.gen : 0);
}

/* W1-W3 after event ev moved the state from `from` (mu held) */
static void check_step(const ctl *c, int ev, ctl_snap from) {
  int to = state_of(c), want = ctl_next[ev][from.state];
  FT_ASSERT_INV(want >= 0, "W1: %s in state %s", ctl_event_name[ev], ctl_state_name[from.state]);
  FT_ASSERT_INV(to == want, "W1: %s took %s to %s, not %s", ctl_event_name[ev],
                ctl_state_name[from.state], ctl_state_name[to], ctl_state_name[want]);
  FT_ASSERT_INV(c->train_gen >= from.train_gen && c->abort_gen >= from.abort_gen,
                "W2: %s: train_gen %" PRIu64 " -> %" PRIu64 ", abort_gen %" PRIu64 " -> %" PRIu64,
                ctl_event_name[ev], from.train_gen, c->train_gen, from.abort_gen, c->abort_gen);
  check_ctl_state(c);
}
#else
static ctl_snap snap_locked(const ctl *c) {
  return (ctl_snap){0, 0, 0};
}
static void check_step(const ctl *c, int ev, ctl_snap from) {}
#endif

static void *doctor_main(void *arg) {
  ctl *c = arg;
  c->doctor_fn(c->doctor_ud);
  pthread_mutex_lock(&c->mu);
  c->doctor_busy = 0;
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void ctl_set_doctor(ctl *c, void (*fn)(void *ud), void *ud) {
  pthread_mutex_lock(&c->mu);
  c->doctor_fn = fn;
  c->doctor_ud = ud;
  pthread_mutex_unlock(&c->mu);
}

static void die_lost(const char *why) {
  fprintf(stderr, "worker: supervisor lost (%s): exiting\n", why);
  fflush(NULL);
  _exit(FT_EXIT_LOST);
}

static int send_msg(ctl *c, ft_msg *m) {
  ft_buf b;
  ft_buf_init(&b);
  snprintf(m->run, sizeof m->run, "%s", c->run);
  int rc = ft_wire_encode(m, &b);
  if (rc == FT_OK) {
    pthread_mutex_lock(&c->send_mu);
    rc = ft_send_all(c->fd, b.data, b.len, "supervisor");
    pthread_mutex_unlock(&c->send_mu);
  }
  ft_buf_release(&b);
  return rc;
}

/* Reads one whole frame into b (which may hold leftover bytes) and decodes
 * it. Returns FT_OK, FT_EPROTO or FT_ENET (closed). */
static int read_msg(int fd, ft_buf *b, size_t max_len, ft_msg *m) {
  for (;;) {
    size_t flen;
    int r = ft_wire_frame_len_max(b->data, b->len, max_len, &flen);
    if (r < 0)
      return r;
    if (r == 1) {
      r = ft_wire_decode(b->data, flen, m);
      ft_buf_consume(b, flen);
      return r;
    }
    if (ft_buf_reserve(b, 65536))
      return ft_err_set(FT_ENOMEM, "out of memory");
    ssize_t n = recv(fd, b->data + b->len, b->cap - b->len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n == 0 ? 0 : errno; /* kept for the caller (EAGAIN: SO_RCVTIMEO passed) */
      int rc = ft_err_set(FT_ENET, "%s", n == 0 ? "connection closed" : strerror(e));
      errno = e;
      return rc;
    }
    b->len += (size_t)n;
  }
}

static void cache_put(ctl *c, const char *key, const void *val, size_t len) {
  kv_entry *e = calloc(1, sizeof *e);
  if (!e)
    return;
  e->key = strdup(key);
  e->val = malloc(len ? len : 1);
  if (!e->key || !e->val) {
    free(e->key);
    free(e->val);
    free(e);
    return;
  }
  memcpy(e->val, val, len);
  e->len = len;
  e->next = c->cache;
  c->cache = e;
}

/* A heartbeat now, under mu (the beater's, or a rejoin's acknowledgement). */
static ft_msg beat_locked(ctl *c) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_HEARTBEAT);
  m.gen = c->gen;
  m.heartbeat.step = c->step;
  uint64_t now = ft_now_ns();
  if (c->hb_sent_ns) { /* the last beat is still unanswered: its round trip is at least this */
    uint64_t us = (now - c->hb_sent_ns) / 1000u;
    c->rtt_us = us > UINT32_MAX ? UINT32_MAX : us > c->rtt_us ? (uint32_t)us : c->rtt_us;
  }
  m.heartbeat.seq = ++c->hb_seq;
  m.heartbeat.rtt_us = c->rtt_us;
  progress_rec pr; /* the training thread's progress: what tells a hang from a live process */
  progress_read(&pr);
  m.heartbeat.phase = pr.phase;
  m.heartbeat.coll_seq = pr.coll_seq;
  m.heartbeat.prog_age_ms = progress_age_ms(&pr, now);
  if (pr.phase == FT_PHASE_STORAGE_WAIT) /* why it waits: its read's last retry */
    progress_wait_get(&m.heartbeat.wait, &m.heartbeat.wait_attempt);
  c->hb_sent_ns = now;
  return m;
}

/* STOP rejoin (ft_wire.h): remembered for the training thread, which leaves
 * its generation at its next collective, step or wait; if it is already
 * out (waiting), the acknowledgement goes now in the new generation. */
static void on_rejoin_locked(ctl *c, uint64_t gen) {
  if (gen <= c->abort_gen)
    return;
  ctl_snap from = snap_locked(c);
  c->abort_gen = gen;
  fprintf(stderr, "worker: node %u slot %u: rejoin in generation %" PRIu64 " (in process)\n",
          c->node, c->slot, gen);
  if (c->cm && !c->waiting) { /* its collectives fail at once; it leaves at the next */
    comm_abort(c->cm);
    c->cm = NULL;
  }
  if (c->waiting) {
    c->gen = gen;
    ft_msg b = beat_locked(c);
    if (send_msg(c, &b))
      die_lost(ft_err_detail());
  }
  check_step(c, CTL_EV_REJOIN_HEARD, from);
  pthread_cond_broadcast(&c->cv);
}

static void *reader_main(void *arg) {
  ctl *c = arg;
  for (;;) {
    ft_msg m;
    int rc = read_msg(c->fd, &c->rx, FT_WIRE_MAX_FRAME, &m);
    if (rc)
      die_lost(ft_err_detail());
    pthread_mutex_lock(&c->mu);
    c->last_rx_ns = ft_now_ns();
    switch (m.type) {
    case FT_MSG_ASSIGN:
      /* one per generation; a later one replaces it (in-process rejoin) */
      if (!c->have_assign || m.gen > c->assign.gen) {
        ctl_snap from = snap_locked(c);
        c->have_assign = 1;
        free(c->assign.skips);
        c->gen = m.gen;
        c->assign.gen = m.gen;
        c->assign.rank = (int)m.assign.rank;
        c->assign.world = (int)m.assign.world;
        c->assign.restore_step = m.assign.restore_step;
        size_t n = m.assign.rdzv_len < sizeof c->assign.rdzv - 1 ? m.assign.rdzv_len
                                                                 : sizeof c->assign.rdzv - 1;
        memcpy(c->assign.rdzv, m.assign.rdzv, n);
        c->assign.rdzv[n] = 0;
        c->assign.nskips = 0;
        c->assign.skips = m.assign.nskips ? calloc(m.assign.nskips, sizeof *c->assign.skips) : NULL;
        for (uint32_t i = 0; c->assign.skips && i < m.assign.nskips; i++) {
          c->assign.skips[i][0] = m.assign.skips[i].first;
          c->assign.skips[i][1] = m.assign.skips[i].end;
          c->assign.nskips++;
        }
        check_step(c, CTL_EV_ASSIGN_HEARD, from);
        pthread_cond_broadcast(&c->cv);
      }
      break;
    case FT_MSG_KV_VALUE:
      ft_msg_release(&c->reply);
      c->reply = m; /* ownership moves to c->reply */
      c->reply_req = m.kv_value.req;
      c->reply_status = m.kv_value.status;
      memset(&m, 0, sizeof m);
      pthread_cond_broadcast(&c->cv);
      break;
    case FT_MSG_STOP:
      if (m.stop.reason == FT_STOP_REJOIN) {
        on_rejoin_locked(c, m.gen);
        break;
      }
      fprintf(stderr, "worker: node %u slot %u: STOP (%s%s%s): exiting\n", c->node, c->slot,
              ft_stop_reason_name(m.stop.reason), m.stop.detail && *m.stop.detail ? ": " : "",
              m.stop.detail ? m.stop.detail : "");
      fflush(NULL);
      /* after a hung worker's stack, asked for just before (stackdump.h) */
      stackdump_exit(FT_EXIT_OK);
    case FT_MSG_HEARTBEAT: /* the echo of our last beat times the control link */
      if (m.heartbeat.seq == c->hb_seq && c->hb_sent_ns) {
        uint64_t us = (c->last_rx_ns - c->hb_sent_ns) / 1000u;
        c->rtt_us = us == 0 ? 1 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
        c->hb_sent_ns = 0;
      }
      break;
    case FT_MSG_REPLICA: /* where to push this rank's shards from now on */
      snprintf(c->buddies, sizeof c->buddies, "%s", m.replica.addrs ? m.replica.addrs : "");
      c->buddies_ver++;
      break;
    case FT_MSG_DOCTOR: /* check again (an idle spare) */
      if (c->doctor_fn && !c->doctor_busy) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        c->doctor_busy = pthread_create(&th, &at, doctor_main, c) == 0;
        pthread_attr_destroy(&at);
      }
      break;
    case FT_MSG_DUMP:
      /* a hung worker's stack (ft_wire.h): SIGUSR1 queued on the training
       * thread now, before this thread can take a STOP behind it */
      if (stackdump_request())
        fprintf(stderr, "worker: node %u slot %u: a stack dump was asked for: %s\n", c->node,
                c->slot, strerror(errno));
      break;
    case FT_MSG_COMMITTED:
      if (m.committed.step > c->committed) {
        c->committed = m.committed.step;
        pthread_cond_broadcast(&c->cv);
      }
      break;
    default:
      break;
    }
    pthread_mutex_unlock(&c->mu);
    ft_msg_release(&m);
  }
  return NULL;
}

static void *beater_main(void *arg) {
  ctl *c = arg;
  for (;;) {
    usleep(c->heartbeat_ms * 1000u);
    pthread_mutex_lock(&c->mu);
    double silent = (double)(ft_now_ns() - c->last_rx_ns) * 1e-9;
    if (silent > c->hb_timeout_s) {
      char why[96];
      snprintf(why, sizeof why, "nothing heard for %.1f s", silent);
      die_lost(why);
    }
    /* sent under mu: frames leave in the order their generations were set,
     * so none of an old generation follows a rejoin's acknowledgement */
    ft_msg m = beat_locked(c);
    if (send_msg(c, &m))
      die_lost(ft_err_detail());
    pthread_mutex_unlock(&c->mu);
  }
  return NULL;
}

/* addr: HOST:PORT, the host a name, an IPv4 address or [an IPv6 one]
 * (ft_net_parse); every address the name resolves to is tried in turn. */
static int tcp_connect(const char *addr, int *fd_out) {
  ft_hostport hp;
  if (ft_net_parse(addr, &hp) || !hp.host[0] || hp.port <= 0)
    return ft_err_set(FT_EINVAL, "--connect wants HOST:PORT (a name or an address), got '%s'",
                      addr);
  char port[16];
  snprintf(port, sizeof port, "%d", hp.port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int e = getaddrinfo(hp.host, port, &hints, &res);
  if (e)
    return ft_err_set(FT_ENET, "resolve %s: %s", addr, gai_strerror(e));
  int fd = -1, rc = FT_ENET;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      rc = FT_OK;
      break;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (rc)
    return ft_err_set(FT_ENET, "connect to supervisor at %s: %s", addr, strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *fd_out = fd;
  return FT_OK;
}

int ctl_local_addr(const ctl *c, char *buf, size_t len) {
  if (c->inherited) { /* a unix socket to the agent: its own TCP connection's address */
    const char *env = getenv(CTL_LOCAL_ADDR_ENV);
    if (!env || !*env)
      return ft_err_set(FT_ENET,
                        "the control connection is an inherited socket (--connect fd:K) and %s "
                        "is not set: no address on the route to the supervisor",
                        CTL_LOCAL_ADDR_ENV);
    snprintf(buf, len, "%s", env);
    return FT_OK;
  }
  ft_sockaddr a;
  a.len = sizeof a.ss;
  if (getsockname(c->fd, (struct sockaddr *)&a.ss, &a.len))
    return ft_err_set(FT_ENET, "getsockname of the control connection: %s", strerror(errno));
  ft_net_format(&a, 0, buf, len);
  return FT_OK;
}

#define CTL_CHALLENGE_WAIT_S 5
#define CTL_CONNECT_TOTAL_S 60

/* --connect fd:K (under ftagent): the control connection is the socket
 * already open on fd K, a unix socket to the agent, which relays every
 * frame to the supervisor. Nothing to connect again: its CHALLENGE not
 * coming within CTL_CHALLENGE_WAIT_S is an error. */
static int inherited_challenge(ctl *c, const char *addr, ft_msg *m) {
  char *end;
  errno = 0;
  long k = strtol(addr + 3, &end, 10);
  if (addr[3] < '0' || addr[3] > '9' || *end || errno || k < 0 || k > INT32_MAX)
    return ft_err_set(FT_EINVAL, "--connect fd:K wants a file descriptor number, got '%s'", addr);
  struct stat st;
  if (fstat((int)k, &st))
    return ft_err_set(FT_EINVAL, "--connect %s: %s", addr, strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return ft_err_set(FT_EINVAL, "--connect %s: fd %ld is not a socket", addr, k);
  c->fd = (int)k;
  c->inherited = 1;
  fcntl(c->fd, F_SETFD, FD_CLOEXEC); /* not for whatever this worker starts */
  struct timeval tv = {CTL_CHALLENGE_WAIT_S, 0}, none = {0, 0};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  errno = 0;
  int rc = read_msg(c->fd, &c->rx, FT_WIRE_PREAUTH_MAX_FRAME, m);
  if (rc == FT_ENET && (errno == EAGAIN || errno == EWOULDBLOCK))
    rc = ft_err_set(FT_ENET, "no CHALLENGE on %s within %d s", addr, CTL_CHALLENGE_WAIT_S);
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  return rc;
}

/* ctl_dial (ctl.h) connects and reads the supervisor's first frame (its
 * CHALLENGE) into *m, trying again when it does not come. A connection can
 * be established on our side and unknown to the supervisor: when thousands
 * of workers connect at once, its accept queue overflows, and a SYN cookie
 * completes our handshake while the kernel drops the final ACK; nobody ever
 * speaks on it. So the CHALLENGE is waited for CTL_CHALLENGE_WAIT_S at
 * most, then the worker (or agent) reconnects (backing off from 0.1 s,
 * doubling to 2 s, with jitter) until CTL_CONNECT_TOTAL_S have passed since
 * the first try (tests/scale found this: before it, such a worker waited
 * forever, and its node was blamed for a hang). */
int ctl_dial(const char *addr, const char *who, int *fd, ft_buf *rx, ft_msg *m) {
  double until = ft_now_s() + CTL_CONNECT_TOTAL_S, backoff = 0.1;
  unsigned seed = (unsigned)getpid() * 2654435761u;
  *fd = -1;
  for (int attempt = 1;; attempt++) {
    int rc = tcp_connect(addr, fd);
    if (rc) /* refused, unreachable: no supervisor there, nothing to wait for */
      return rc;
    struct timeval tv = {CTL_CHALLENGE_WAIT_S, 0}, none = {0, 0};
    setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    errno = 0;
    rc = read_msg(*fd, rx, FT_WIRE_PREAUTH_MAX_FRAME, m);
    int timed_out = rc == FT_ENET && (errno == EAGAIN || errno == EWOULDBLOCK);
    setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    if (rc == FT_OK)
      return rc;
    if (!timed_out || ft_now_s() + backoff > until) {
      close(*fd);
      *fd = -1;
      return rc;
    }
    close(*fd);
    *fd = -1;
    ft_buf_reset(rx);
    fprintf(stderr, "%s: no CHALLENGE from %s (%s, try %d): connecting again\n", who, addr,
            ft_err_detail(), attempt);
    seed = seed * 1103515245u + 12345u;
    double wait = backoff * (0.5 + (double)(seed >> 16 & 0x7fff) / 32768.0);
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
    backoff = backoff * 2 > 2 ? 2 : backoff * 2;
  }
}

int ctl_read_frame(int fd, ft_buf *b, size_t max_len, ft_msg *m) {
  return read_msg(fd, b, max_len, m);
}

static int challenge(ctl *c, const char *addr, ft_msg *m) {
  if (strncmp(addr, "fd:", 3) == 0)
    return inherited_challenge(c, addr, m);
  char who[64];
  snprintf(who, sizeof who, "worker: node %u slot %u", c->node, c->slot);
  return ctl_dial(addr, who, &c->fd, &c->rx, m);
}

int ctl_connect(const char *addr, const char *run, const char *token, uint32_t node, uint32_t slot,
                double hb_timeout_s, ctl **out) {
  *out = NULL;
  if (!token || ft_wire_token_check(token))
    return ft_err_set(FT_EINVAL, "the run token (%s) is missing or malformed", FT_WIRE_TOKEN_ENV);
  ctl *c = calloc(1, sizeof *c);
  if (!c)
    return ft_err_set(FT_ENOMEM, "out of memory");
  c->fd = -1;
  snprintf(c->run, sizeof c->run, "%s", run);
  snprintf(c->token, sizeof c->token, "%s", token);
  c->node = node;
  c->slot = slot;
  c->hb_timeout_s = hb_timeout_s;
  c->step = -1;
  c->committed = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->send_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  ft_buf *b = &c->rx;
  ft_buf_init(b);
  ft_msg m;
  memset(&m, 0, sizeof m);
  int rc = challenge(c, addr, &m);
  if (rc)
    goto fail;
  if (m.type != FT_MSG_CHALLENGE || strcmp(m.run, run) != 0) {
    rc = ft_err_set(FT_EPROTO, "expected CHALLENGE for run '%s', got %s for run '%s'", run,
                    ft_msg_type_name(m.type), m.run);
    goto fail;
  }
  uint8_t nonce[FT_WIRE_NONCE_LEN];
  memcpy(nonce, m.challenge.nonce, sizeof nonce);
  ft_msg_release(&m);
  ft_msg_init(&m, FT_MSG_HELLO);
  snprintf(m.run, sizeof m.run, "%s", run);
  m.gen = 0;
  m.hello.node = node;
  m.hello.slot = slot;
  m.hello.pid = (uint32_t)getpid();
  rc = ft_wire_hello_sign(&m, token, nonce);
  if (rc == FT_OK)
    rc = send_msg(c, &m);
  if (rc)
    goto fail;
  rc = read_msg(c->fd, b, FT_WIRE_MAX_FRAME, &m);
  if (rc)
    goto fail;
  if (m.type == FT_MSG_STOP) {
    rc = ft_err_set(FT_EPROTO, "the supervisor refused this worker: %s",
                    ft_stop_reason_name(m.stop.reason));
    goto fail;
  }
  if (m.type != FT_MSG_WELCOME) {
    rc = ft_err_set(FT_EPROTO, "expected WELCOME, got %s", ft_msg_type_name(m.type));
    goto fail;
  }
  c->heartbeat_ms = m.welcome.heartbeat_ms ? m.welcome.heartbeat_ms : 1000;
  ft_msg_release(&m);
  /* b may already hold the next frames (ASSIGN often follows WELCOME at
   * once): the reader thread goes on from them. */
  c->last_rx_ns = ft_now_ns();
  if (pthread_create(&c->reader, NULL, reader_main, c) ||
      pthread_create(&c->beater, NULL, beater_main, c)) {
    rc = ft_err_set(FT_ENOMEM, "cannot start the control threads");
    goto fail;
  }
  *out = c;
  return FT_OK;
fail:
  ft_msg_release(&m);
  ft_buf_release(b);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
  return rc;
}

int ctl_wait_assign(ctl *c, ctl_assign *a) {
  pthread_mutex_lock(&c->mu);
  /* a generation newer than the one taken, and not one left already */
  while (!c->have_assign || c->assign.gen <= c->train_gen || c->assign.gen < c->abort_gen)
    pthread_cond_wait(&c->cv, &c->mu);
  ctl_snap from = snap_locked(c);
  *a = c->assign;
  c->train_gen = c->assign.gen;
  c->waiting = 0;
  check_step(c, CTL_EV_ASSIGN_TAKEN, from);
  pthread_mutex_unlock(&c->mu);
  return FT_OK;
}

void ctl_wake(ctl *c) {
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int64_t ctl_wait_committed(ctl *c, int64_t after, int timeout_ms, const int *stop) {
  struct timespec until = ft_wall_deadline(timeout_ms);
  pthread_mutex_lock(&c->mu);
  int64_t r;
  for (;;) {
    if (__atomic_load_n(stop, __ATOMIC_RELAXED)) {
      r = -2;
      break;
    }
    if (c->committed > after) {
      r = c->committed;
      break;
    }
    if (pthread_cond_timedwait(&c->cv, &c->mu, &until)) {
      r = c->committed;
      break;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return r;
}

void ctl_set_comm(ctl *c, comm *cm) {
  pthread_mutex_lock(&c->mu);
  c->cm = cm;
  pthread_mutex_unlock(&c->mu);
}

int ctl_aborted(ctl *c) {
  pthread_mutex_lock(&c->mu);
  int r = c->abort_gen > c->train_gen;
  pthread_mutex_unlock(&c->mu);
  return r;
}

uint64_t ctl_rejoin(ctl *c) {
  pthread_mutex_lock(&c->mu);
  while (c->abort_gen <= c->train_gen)
    pthread_cond_wait(&c->cv, &c->mu);
  ctl_snap from = snap_locked(c);
  c->gen = c->abort_gen;
  c->waiting = 1;
  check_step(c, CTL_EV_LEFT, from);
  ft_msg b = beat_locked(c); /* the acknowledgement: a frame of the new generation */
  uint64_t g = c->gen;
  int rc = send_msg(c, &b);
  pthread_mutex_unlock(&c->mu);
  if (rc)
    die_lost(ft_err_detail());
  return g;
}

void ctl_set_step(ctl *c, int64_t step) {
  pthread_mutex_lock(&c->mu);
  c->step = step;
  pthread_mutex_unlock(&c->mu);
}

/* The training thread's generation (0 before its first ASSIGN). */
static uint64_t cur_gen(ctl *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t g = c->train_gen;
  pthread_mutex_unlock(&c->mu);
  return g;
}

int ctl_send_step(ctl *c, int64_t step, double loss, double grad_norm, double tok_s, double ms,
                  double val_loss) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STEP);
  m.gen = cur_gen(c);
  m.step.step = step;
  m.step.loss = loss;
  m.step.grad_norm = grad_norm;
  m.step.tokens_per_s = tok_s;
  m.step.step_ms = ms;
  m.step.val_loss = val_loss;
  return send_msg(c, &m);
}

int ctl_send_shard(ctl *c, int64_t step, int rank, const char *manifest_json) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SHARD_SAVED);
  m.gen = cur_gen(c);
  m.shard_saved.step = step;
  m.shard_saved.rank = (uint32_t)rank;
  m.shard_saved.manifest = manifest_json;
  return send_msg(c, &m);
}

uint64_t ctl_train_gen(ctl *c) {
  return cur_gen(c);
}

int ctl_send_shard_of(ctl *c, uint64_t gen, int64_t step, int rank, const char *manifest_json) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SHARD_SAVED);
  m.gen = gen;
  m.shard_saved.step = step;
  m.shard_saved.rank = (uint32_t)rank;
  m.shard_saved.manifest = manifest_json;
  /* checked and sent under mu, as ctl_rejoin moves to the next generation:
   * once out of gen (rejoining, or trained past it) the report is dropped,
   * never sent as a stale frame the supervisor would close us for */
  pthread_mutex_lock(&c->mu);
  int rc = c->waiting || c->gen != gen || c->train_gen != gen ? FT_OK : send_msg(c, &m);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int ctl_send_replica(ctl *c, const char *addr) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_REPLICA);
  m.gen = cur_gen(c);
  m.replica.addrs = addr;
  return send_msg(c, &m);
}

uint64_t ctl_buddies(ctl *c, char *buf, size_t len) {
  pthread_mutex_lock(&c->mu);
  snprintf(buf, len, "%s", c->buddies);
  uint64_t v = c->buddies_ver;
  pthread_mutex_unlock(&c->mu);
  return v;
}

const char *ctl_token(const ctl *c) {
  return c->token;
}

int ctl_send_fault(ctl *c, int kind, int64_t step, const char *detail) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_FAULT);
  m.gen = cur_gen(c);
  m.fault.kind = (ft_fault_kind)kind;
  m.fault.step = step;
  m.fault.detail = detail;
  return send_msg(c, &m);
}

int ctl_send_doctor(ctl *c, const char *report) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_DOCTOR);
  m.gen = cur_gen(c);
  m.doctor.report = report;
  return send_msg(c, &m);
}

/* ---- the rendezvous store over the control connection ------------------ */

static int kv_set(void *ud, const char *key, const void *val, size_t len) {
  ctl *c = ud;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_KV_SET);
  m.gen = cur_gen(c);
  m.kv_set.key = key;
  m.kv_set.value = val;
  m.kv_set.value_len = (uint32_t)len;
  return send_msg(c, &m);
}

/* Sends KV_GET for keys and waits for its KV_VALUE; caches the values. */
static int kv_query(ctl *c, const char *const *keys, int nkeys, uint32_t timeout_ms) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_KV_GET);
  pthread_mutex_lock(&c->mu);
  uint32_t req = ++c->next_req;
  uint64_t gen = c->train_gen;
  m.gen = gen;
  pthread_mutex_unlock(&c->mu);
  m.kv_get.req = req;
  m.kv_get.timeout_ms = timeout_ms;
  m.kv_get.keys = keys;
  m.kv_get.nkeys = (uint32_t)nkeys;
  int rc = send_msg(c, &m);
  if (rc)
    return rc;
  pthread_mutex_lock(&c->mu);
  /* a rejoin ends the wait: the supervisor answers no older generation */
  while (c->reply_req != req && c->abort_gen <= gen)
    pthread_cond_wait(&c->cv, &c->mu);
  if (c->reply_req != req) {
    rc = ft_err_set(FT_ECOMM, "rendezvous of generation %" PRIu64 " abandoned: rejoin in %" PRIu64,
                    gen, c->abort_gen);
    pthread_mutex_unlock(&c->mu);
    return rc;
  }
  if (c->reply_status != FT_KV_OK) {
    rc = ft_err_set(FT_ETIMEDOUT, "rendezvous: key '%s'%s not published within %u ms", keys[0],
                    nkeys > 1 ? " (and others)" : "", timeout_ms);
  } else {
    for (uint32_t i = 0; i < c->reply.kv_value.nvals && i < (uint32_t)nkeys; i++)
      cache_put(c, keys[i], c->reply.kv_value.vals[i].data, c->reply.kv_value.vals[i].len);
  }
  c->reply_req = 0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static int kv_wait(void *ud, const char *const *keys, int nkeys, int timeout_ms) {
  ctl *c = ud;
  uint32_t t = timeout_ms < 0 ? FT_WIRE_MAX_KV_TIMEOUT_MS : (uint32_t)timeout_ms;
  for (int i = 0; i < nkeys; i += (int)FT_WIRE_MAX_KEYS) {
    int n = nkeys - i < (int)FT_WIRE_MAX_KEYS ? nkeys - i : (int)FT_WIRE_MAX_KEYS;
    int rc = kv_query(c, keys + i, n, t);
    if (rc)
      return rc;
  }
  return FT_OK;
}

static int kv_get(void *ud, const char *key, void **val, size_t *len) {
  ctl *c = ud;
  for (int pass = 0; pass < 2; pass++) {
    pthread_mutex_lock(&c->mu);
    for (kv_entry *e = c->cache; e; e = e->next) {
      if (strcmp(e->key, key) == 0) {
        *val = malloc(e->len ? e->len : 1);
        if (*val)
          memcpy(*val, e->val, e->len);
        *len = e->len;
        pthread_mutex_unlock(&c->mu);
        return *val ? FT_OK : ft_err_set(FT_ENOMEM, "out of memory");
      }
    }
    pthread_mutex_unlock(&c->mu);
    if (pass == 0 && kv_query(c, &key, 1, 0) != FT_OK)
      break;
  }
  return ft_err_set(FT_ENOENT, "rendezvous: no key '%s'", key);
}

comm_kv ctl_kv(ctl *c) {
  return (comm_kv){.ud = c, .set = kv_set, .wait = kv_wait, .get = kv_get};
}

void ctl_wait_stop(ctl *c) {
  /* the reader thread exits the process on STOP or loss; a rejoin returns */
  pthread_mutex_lock(&c->mu);
  while (c->abort_gen <= c->train_gen)
    pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
}
