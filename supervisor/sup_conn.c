/*
 * sup_conn: control connections (see sup_conn.h).
 *
 * Framing: bufferevent input is linearised only up to one frame at a time
 * (evbuffer_pullup of the frame's length), which ft_wire_frame_len_max has
 * bounded first: 4 KiB before HELLO, 16 MiB after.
 * All connections are on one intrusive list (newest first) so shutdown can
 * free the ones still open, and the oldest unauthenticated one can be found
 * for eviction.
 * The HELLO deadline is a per-connection timer armed at accept and deleted
 * when the HELLO is accepted; g_unauth counts connections neither
 * authenticated nor closing.
 * The output cap is checked in sup_conn_send before anything is queued:
 * queued + the part of the frame the kernel did not take > g_max_queued
 * marks the connection (overflowed) and arms `closer`, a zero timer that
 * closes it on the loop's next pass; the frame and every later one are
 * dropped, so the queue never passes the cap.
 *
 * Agents (sup_conn.h): an agent's connection holds kids[slot], virtual
 * connections with no socket of their own (bev NULL, parent set). A kid's
 * output is a RELAY on its parent, its input the frames its parent's
 * RELAYs carry, fed to the same handle_frame; its HELLO deadline, unauth
 * count and reaper are a connection's like any other. The parent's close
 * closes its kids first (after its own on_close, which can still see them)
 * and detaches them (parent NULL), so a kid's late send is dropped and a
 * kid never outlives the pointer it follows.
 */
#include "sup_conn.h"

#include "ft_err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct sup_conn {
  struct sup_conn *next, *prev;
  struct bufferevent *bev;
  struct event *reaper;   /* deferred free */
  struct event *deadline; /* no HELLO in time: close */
  struct event *closer;   /* over the output cap: close on the next pass */
  size_t overflowed;      /* bytes it would have held then; 0: never over */
  uint64_t id;
  const char *run, *token;
  uint8_t nonce[FT_WIRE_NONCE_LEN];
  int authed;
  int closing;
  const sup_conn_ops *ops;
  void *ud, *user;
  char peer[64];
  /* agents: a virtual connection's agent and slot (virt: it has no socket
   * of its own; parent NULL once the agent's connection closed) */
  int virt;
  struct sup_conn *parent;
  uint32_t slot;
  double msg_age_s; /* the message being handed to on_msg: its age (HOSTBEAT) */
  int in_beat;      /* on_msg runs for a HOSTBEAT's beat: no echo is sent */
  /* an agent's connection: its virtual connections by slot, and theirs ops */
  int agent;
  struct sup_conn **kids;
  uint32_t nkids;
  const sup_conn_ops *kid_ops;
  void *kid_ud;
  /* an agent's frames held back in a burst (g_held; send_held) */
  ft_buf held;
  struct event *held_ev;
};

static sup_conn *g_conns;
static int g_nsockets; /* connections on the list with a socket of their own */
static uint64_t g_next_id = 1;
static int g_unauth;
static double g_hello_timeout_s = SUP_CONN_HELLO_TIMEOUT_S;
static int g_max_unauth = SUP_CONN_MAX_UNAUTH;
static size_t g_max_queued = SUP_CONN_MAX_QUEUED;
/* The agent's connection whose frames are being held back (send_held). */
static sup_conn *g_held;
#define HELD_MAX (64u << 10) /* a held burst goes out at this size */

void sup_conn_set_limits(double hello_timeout_s, int max_unauth) {
  g_hello_timeout_s = hello_timeout_s > 0 ? hello_timeout_s : SUP_CONN_HELLO_TIMEOUT_S;
  g_max_unauth = max_unauth > 0 ? max_unauth : SUP_CONN_MAX_UNAUTH;
}

void sup_conn_set_max_queued(size_t bytes) {
  g_max_queued = bytes ? bytes : SUP_CONN_MAX_QUEUED;
}

int sup_conn_unauth_count(void) {
  return g_unauth;
}

int sup_conn_socket_count(void) {
  return g_nsockets;
}

static void reap_cb(evutil_socket_t fd, short what, void *arg);
static void deadline_cb(evutil_socket_t fd, short what, void *arg);
static void closer_cb(evutil_socket_t fd, short what, void *arg);
static void held_flush(void);

/* A connection's own timers (its reap, HELLO deadline and close); 0, or -1
 * with those made left for timers_free. */
static int timers_new(sup_conn *c, struct event_base *base) {
  c->reaper = evtimer_new(base, reap_cb, c);
  c->deadline = evtimer_new(base, deadline_cb, c);
  c->closer = evtimer_new(base, closer_cb, c);
  return c->reaper && c->deadline && c->closer ? 0 : -1;
}

static void timers_free(sup_conn *c) {
  if (c->reaper)
    event_free(c->reaper);
  if (c->deadline)
    event_free(c->deadline);
  if (c->closer)
    event_free(c->closer);
}

static void conn_unlink_free(sup_conn *c) {
  if (!c->virt)
    g_nsockets--;
  if (c->prev)
    c->prev->next = c->next;
  else
    g_conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  if (!c->authed && !c->closing)
    g_unauth--;
  if (c->parent && c->slot < c->parent->nkids && c->parent->kids[c->slot] == c)
    c->parent->kids[c->slot] = NULL;
  for (uint32_t i = 0; i < c->nkids; i++)
    if (c->kids[i])
      c->kids[i]->parent = NULL;
  free(c->kids);
  if (g_held == c)
    g_held = NULL;
  ft_buf_release(&c->held);
  if (c->held_ev)
    event_free(c->held_ev);
  if (c->bev)
    bufferevent_free(c->bev);
  timers_free(c);
  free(c);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg) {
  conn_unlink_free(arg);
}

void sup_conn_free_all(void) {
  for (sup_conn *c = g_conns; c; c = c->next)
    c->parent = NULL, c->nkids = 0;
  while (g_conns)
    conn_unlink_free(g_conns);
}

uint64_t sup_conn_id(const sup_conn *c) {
  return c->id;
}
void sup_conn_set_user(sup_conn *c, void *user) {
  c->user = user;
}
size_t sup_conn_unread(const sup_conn *c) {
  if (c && c->virt) /* its frames wait in its agent's queue */
    c = c->parent;
  if (!c || !c->bev)
    return 0;
  /* the kernel's queue only: our input buffer may hold the start of a
   * frame whose rest never comes (a peer that hung mid-frame) */
  size_t n = 0;
  int q = 0;
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd >= 0 && ioctl(fd, FIONREAD, &q) == 0 && q > 0)
    n += (size_t)q;
  return n;
}

void *sup_conn_user(const sup_conn *c) {
  return c->user;
}
const char *sup_conn_peer(const sup_conn *c) {
  return c->peer;
}
size_t sup_conn_overflowed(const sup_conn *c) {
  return c->overflowed;
}

static void close_impl(sup_conn *c, const char *reason, int flush, int is_error) {
  if (c->closing)
    return;
  c->closing = 1;
  if (!c->authed)
    g_unauth--;
  if (c->deadline)
    event_del(c->deadline);
  if (c->closer)
    event_del(c->closer);
  if (c->ops->on_close)
    c->ops->on_close(c->ud, c, reason ? reason : "", is_error);
  if (c->agent) { /* its workers' connections end with it */
    char why[600];
    snprintf(why, sizeof why, "its agent's connection closed: %s",
             reason && reason[0] ? reason : "closed");
    for (uint32_t i = 0; i < c->nkids; i++) {
      sup_conn *k = c->kids[i];
      if (!k)
        continue;
      close_impl(k, why, 0, 0);
      k->parent = NULL;
      c->kids[i] = NULL;
    }
  }
  if (c->virt) {
    sup_conn *p = c->parent;
    if (p && !p->closing) { /* the agent closes the worker's socket */
      ft_msg sl;
      ft_msg_init(&sl, FT_MSG_SLOT);
      snprintf(sl.run, sizeof sl.run, "%s", c->run);
      sl.slot.slot = c->slot;
      sl.slot.event = FT_SLOT_CLOSED;
      (void)sup_conn_send(p, &sl);
    }
    if (p && p->kids[c->slot] == c)
      p->kids[c->slot] = NULL;
    c->parent = NULL;
    struct timeval now = {0, 0};
    event_add(c->reaper, &now); /* what it sent went through the agent at once */
    return;
  }
  if (g_held == c)
    held_flush();
  bufferevent_disable(c->bev, EV_READ);
  struct timeval tv = {0, 0};
  if (flush && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
    /* the write callback frees once the output is drained; the reaper is
     * the bound on how long that may take */
    tv.tv_sec = 2;
  }
  event_add(c->reaper, &tv);
}

void sup_conn_close(sup_conn *c, const char *reason, int flush) {
  close_impl(c, reason, flush, reason && reason[0]);
}

/* The peer does not read: the queue would pass the cap. Closed from the
 * loop (closer_cb), never here: the caller may be inside a walk (the KV's
 * pending gets) that on_close changes. */
static void overflow(sup_conn *c, size_t would_hold) {
  c->overflowed = would_hold;
  struct timeval tv = {0, 0};
  event_add(c->closer, &tv);
}

static void closer_cb(evutil_socket_t fd, short what, void *arg) {
  sup_conn *c = arg;
  char reason[256];
  snprintf(reason, sizeof reason,
           "output queue over its cap: %zu bytes would wait for a peer that does not read "
           "(cap %zu)",
           c->overflowed, g_max_queued);
  close_impl(c, reason, 0, 1); /* no flush: it would not be read */
}

/* A virtual connection's frame: a RELAY on its agent's connection. The
 * echo of a beat a HOSTBEAT carried is not sent: the agent echoed it. */
static int send_virtual(sup_conn *c, const ft_msg *m) {
  if (!c->parent || (c->in_beat && m->type == FT_MSG_HEARTBEAT))
    return FT_OK;
  ft_buf b;
  ft_buf_init(&b);
  int rc = ft_wire_encode(m, &b);
  if (!rc) {
    ft_msg r;
    ft_msg_init(&r, FT_MSG_RELAY);
    snprintf(r.run, sizeof r.run, "%s", c->run);
    r.relay.slot = c->slot;
    r.relay.frame = b.data;
    r.relay.frame_len = (uint32_t)b.len;
    rc = sup_conn_send(c->parent, &r);
  }
  ft_buf_release(&b);
  return rc;
}

/* Bytes to c's socket. Write-through: with nothing queued before it, the
 * frame goes to the socket now, and only what the kernel does not take is
 * queued. The bufferevent would send it on a later pass of the loop, after
 * an epoll_ctl to watch for writability and before another to stop: a
 * fault handler that queues 16,384 STOPs sent the first only once it had
 * queued the last, and an echoed heartbeat cost three system calls instead
 * of one. An error (the peer gone) queues the bytes whole, so the
 * bufferevent meets the error and reports it as before. */
static int write_out(sup_conn *c, const uint8_t *p, size_t len) {
  size_t sent = 0;
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd >= 0 && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
    ssize_t n;
    do
      n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0)
      sent = (size_t)n;
  }
  size_t queued = evbuffer_get_length(bufferevent_get_output(c->bev));
  if (sent < len && queued + (len - sent) > g_max_queued)
    overflow(c, queued + (len - sent));
  else if (sent < len && bufferevent_write(c->bev, p + sent, len - sent) != 0)
    return ft_err_set(FT_ENOMEM, "bufferevent_write failed");
  return FT_OK;
}

/* What g_held holds goes out now. */
static void held_flush(void) {
  sup_conn *c = g_held;
  g_held = NULL;
  if (c && c->held.len) {
    if (!c->overflowed)
      (void)write_out(c, c->held.data, c->held.len);
    ft_buf_release(&c->held); /* not kept: 16,384 agents' bursts would stay resident */
  }
}

static void held_cb(evutil_socket_t fd, short what, void *arg) {
  if (g_held == arg)
    held_flush();
}

/* An agent's connection: the first frame of a burst is written through;
 * the ones after it to the same agent (its other slots' STOP, ASSIGN,
 * COMMITTED: a gang-wide send is a run of 8 frames per agent) are held and
 * go out in one send when the next agent's first frame comes, or at the end
 * of this pass of the loop (held_ev), so each agent's first frame is as
 * prompt as before and a burst to 131,072 ranks costs one send per agent
 * and frame kind, not one per rank (they were a third of the supervisor's
 * time in a recovery). */
static int send_held(sup_conn *c, const uint8_t *p, size_t len) {
  if (g_held == c) {
    if (ft_buf_append(&c->held, p, len))
      return ft_err_set(FT_ENOMEM, "out of memory");
    if (c->held.len >= HELD_MAX)
      held_flush();
    return FT_OK;
  }
  held_flush();
  int rc = write_out(c, p, len);
  if (!c->held_ev)
    c->held_ev = event_new(bufferevent_get_base(c->bev), -1, 0, held_cb, c);
  if (rc == FT_OK && c->held_ev && !c->closing) {
    g_held = c;
    event_active(c->held_ev, EV_TIMEOUT, 1);
  }
  return rc;
}

int sup_conn_send(sup_conn *c, const ft_msg *m) {
  if (c->overflowed || (c->closing && !(m->type == FT_MSG_STOP)))
    return FT_OK;
  if (c->virt)
    return send_virtual(c, m);
  ft_buf b;
  ft_buf_init(&b);
  int rc = ft_wire_encode(m, &b);
  if (!rc)
    rc = c->agent ? send_held(c, b.data, b.len) : write_out(c, b.data, b.len);
  ft_buf_release(&b);
  return rc;
}

static void fail(sup_conn *c, const char *what) {
  char reason[512];
  snprintf(reason, sizeof reason, "%s", what);
  close_impl(c, reason, 1, 1);
}

static void handle_frame(sup_conn *c, const uint8_t *frame, size_t len);

static int kid_new(sup_conn *agent, uint32_t slot);

/* One beat of a HOSTBEAT, handed to its slot's connection as the HEARTBEAT
 * its worker sent the agent, dated by its age. */
static void kid_beat(sup_conn *agent, const ft_msg *hb, const ft_wire_beat *b) {
  sup_conn *k = b->slot < agent->nkids ? agent->kids[b->slot] : NULL;
  if (!k || k->closing || !k->authed)
    return;
  ft_msg m;
  ft_msg_init(&m, FT_MSG_HEARTBEAT);
  /* not snprintf: once per rank a second, a fiftieth of the supervisor's
   * CPU at 131,072 ranks */
  size_t rl = strnlen(hb->run, sizeof m.run - 1);
  memcpy(m.run, hb->run, rl);
  m.gen = b->gen;
  m.heartbeat.step = b->step;
  m.heartbeat.seq = b->seq;
  m.heartbeat.rtt_us = hb->hostbeat.rtt_us;
  m.heartbeat.phase = b->phase;
  m.heartbeat.coll_seq = b->coll_seq;
  m.heartbeat.prog_age_ms = b->prog_age_ms;
  m.heartbeat.wait = b->wait;
  m.heartbeat.wait_attempt = b->wait_attempt;
  k->msg_age_s = b->age_ms * 1e-3;
  k->in_beat = 1;
  k->ops->on_msg(k->ud, k, &m);
  k->in_beat = 0;
  k->msg_age_s = 0;
}

/* A frame on an agent's connection once it is authenticated. */
static void agent_frame(sup_conn *c, const ft_msg *m) {
  char reason[512];
  switch (m->type) {
  case FT_MSG_RELAY: {
    sup_conn *k = m->relay.slot < c->nkids ? c->kids[m->relay.slot] : NULL;
    if (!k || k->closing)
      return; /* closed by us a moment ago: its late frames go nowhere */
    size_t flen = 0;
    size_t max = k->authed ? FT_WIRE_MAX_FRAME : FT_WIRE_PREAUTH_MAX_FRAME;
    int r = ft_wire_frame_len_max(m->relay.frame, m->relay.frame_len, max, &flen);
    if (r != 1 || flen != m->relay.frame_len) {
      snprintf(reason, sizeof reason, "bad relayed frame: %s",
               r < 0 ? ft_err_detail() : "not one whole frame");
      fail(k, reason);
      return;
    }
    handle_frame(k, m->relay.frame, m->relay.frame_len);
    return;
  }
  case FT_MSG_HOSTBEAT:
    for (uint32_t i = 0; i < m->hostbeat.nbeats && !c->closing; i++)
      kid_beat(c, m, &m->hostbeat.beats[i]);
    if (!c->closing)
      c->ops->on_msg(c->ud, c, m);
    return;
  case FT_MSG_SLOT:
    if (m->slot.slot >= c->nkids) {
      snprintf(reason, sizeof reason, "SLOT %u: the agent has %u slots", (unsigned)m->slot.slot,
               (unsigned)c->nkids);
      fail(c, reason);
      return;
    }
    if (m->slot.event == FT_SLOT_OPEN) {
      sup_conn *old = c->kids[m->slot.slot];
      if (old) { /* detached first: the agent must not hear this slot closed */
        c->kids[m->slot.slot] = NULL;
        old->parent = NULL;
        close_impl(old, "its slot was opened again by the agent", 0, 1);
      }
      if (kid_new(c, m->slot.slot))
        fail(c, "out of memory");
      return;
    }
    if (m->slot.event == FT_SLOT_EXITED) {
      c->ops->on_msg(c->ud, c, m); /* the exit status first: it says why */
      sup_conn *k = c->kids[m->slot.slot];
      if (k) { /* detached first: the agent knows, and needs no SLOT closed */
        c->kids[m->slot.slot] = NULL;
        k->parent = NULL;
        close_impl(k, "", 0, 0);
      }
      return;
    }
    snprintf(reason, sizeof reason, "an agent may not send SLOT %s",
             ft_slot_event_name(m->slot.event));
    fail(c, reason);
    return;
  case FT_MSG_SHARD_SAVED: /* its host's reference (ft_wire.h) */
    c->ops->on_msg(c->ud, c, m);
    return;
  default:
    snprintf(reason, sizeof reason, "an agent may not send %s", ft_msg_type_name(m->type));
    fail(c, reason);
  }
}

static void handle_frame(sup_conn *c, const uint8_t *frame, size_t len) {
  ft_msg m;
  char reason[512];
  int rc = ft_wire_decode(frame, len, &m);
  if (rc) {
    snprintf(reason, sizeof reason, "bad frame: %s", ft_err_detail());
    fail(c, reason);
    return;
  }
  if (c->agent && c->authed) {
    agent_frame(c, &m);
    goto out;
  }
  if (!(ft_wire_sender(m.type) & FT_WIRE_FROM_WORKER)) {
    snprintf(reason, sizeof reason, "a worker may not send %s", ft_msg_type_name(m.type));
    fail(c, reason);
    goto out;
  }
  if (!c->authed) {
    if (m.type != FT_MSG_HELLO) {
      snprintf(reason, sizeof reason, "expected HELLO, got %s", ft_msg_type_name(m.type));
      fail(c, reason);
      goto out;
    }
    if (strcmp(m.run, c->run) != 0) {
      snprintf(reason, sizeof reason, "HELLO for another run");
      fail(c, reason);
      goto out;
    }
    rc = ft_wire_hello_verify(&m, c->token, c->nonce);
    if (rc) {
      snprintf(reason, sizeof reason, "HELLO rejected: %s", ft_err_detail());
      fail(c, reason);
      goto out;
    }
    reason[0] = 0;
    if (c->ops->on_hello(c->ud, c, &m, reason, sizeof reason)) {
      fail(c, reason[0] ? reason : "HELLO refused");
      goto out;
    }
    c->authed = 1;
    g_unauth--;
    event_del(c->deadline);
    goto out;
  }
  if (m.type == FT_MSG_HELLO) {
    fail(c, "second HELLO");
    goto out;
  }
  c->ops->on_msg(c->ud, c, &m);
out:
  ft_msg_release(&m);
}

static void read_cb(struct bufferevent *bev, void *arg) {
  sup_conn *c = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  /* over the output cap: its further requests would only be answered into
   * a queue that drops them */
  while (!c->closing && !c->overflowed) {
    size_t avail = evbuffer_get_length(in), flen = 0;
    uint8_t hdr[FT_WIRE_HDR_LEN];
    size_t hn = avail < sizeof hdr ? avail : sizeof hdr;
    if (hn == 0)
      return;
    evbuffer_copyout(in, hdr, hn);
    size_t max = !c->authed ? FT_WIRE_PREAUTH_MAX_FRAME
                 : c->agent ? FT_WIRE_MAX_RELAY_FRAME
                            : FT_WIRE_MAX_FRAME;
    /* reads only hdr[0 .. min(avail, 5)); avail tells it whether the whole
     * frame is there */
    int r = ft_wire_frame_len_max(hdr, avail, max, &flen);
    if (r < 0) {
      char reason[512];
      snprintf(reason, sizeof reason, "bad frame header: %s", ft_err_detail());
      fail(c, reason);
      return;
    }
    if (r == 0) {
      /* wait for more bytes */
      return;
    }
    if (avail < flen)
      return;
    uint8_t *frame = evbuffer_pullup(in, (ev_ssize_t)flen);
    if (!frame) {
      fail(c, "out of memory");
      return;
    }
    handle_frame(c, frame, flen);
    evbuffer_drain(in, flen);
  }
}

static void write_cb(struct bufferevent *bev, void *arg) {
  sup_conn *c = arg;
  if (c->closing) {
    /* drained: free now instead of waiting for the reaper's bound */
    struct timeval tv = {0, 0};
    event_add(c->reaper, &tv);
  }
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
  sup_conn *c = arg;
  if (what & BEV_EVENT_EOF)
    close_impl(c, c->authed ? "peer closed the connection" : "peer closed before HELLO", 0,
               !c->authed);
  else if (what & BEV_EVENT_ERROR)
    close_impl(c, "socket error", 0, !c->authed);
  if (c->closing) {
    struct timeval tv = {0, 0};
    event_add(c->reaper, &tv);
  }
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg) {
  sup_conn *c = arg;
  char reason[64];
  snprintf(reason, sizeof reason, "no HELLO within %.1f s", g_hello_timeout_s);
  close_impl(c, reason, 0, 1);
}

/* At the cap: the oldest connection still waiting for its HELLO goes. */
static int evict_oldest_unauth(void) {
  sup_conn *old = NULL;
  for (sup_conn *c = g_conns; c; c = c->next)
    if (!c->authed && !c->closing)
      old = c;
  if (!old)
    return 0;
  close_impl(old, "too many connections without HELLO: the oldest is closed", 0, 1);
  return 1;
}

/* What every connection, real or virtual, starts with: on the list, counted
 * as waiting for its HELLO, its timers armed, its CHALLENGE sent. */
static int conn_start(sup_conn *c) {
  while (g_unauth >= g_max_unauth && evict_oldest_unauth())
    ;
  c->next = g_conns;
  if (g_conns)
    g_conns->prev = c;
  g_conns = c;
  g_unauth++;
  g_nsockets += !c->virt;
  struct timeval dl = {(long)g_hello_timeout_s,
                       (long)((g_hello_timeout_s - (long)g_hello_timeout_s) * 1e6)};
  evtimer_add(c->deadline, &dl);
  int rc = ft_wire_nonce_new(c->nonce);
  if (!rc) {
    ft_msg ch;
    ft_msg_init(&ch, FT_MSG_CHALLENGE);
    snprintf(ch.run, sizeof ch.run, "%s", c->run);
    ch.gen = 0;
    memcpy(ch.challenge.nonce, c->nonce, FT_WIRE_NONCE_LEN);
    rc = sup_conn_send(c, &ch);
  }
  return rc;
}

static int kid_new(sup_conn *agent, uint32_t slot) {
  struct event_base *base = bufferevent_get_base(agent->bev);
  sup_conn *c = calloc(1, sizeof *c);
  if (!c)
    return FT_ENOMEM;
  c->id = g_next_id++;
  c->run = agent->run;
  c->token = agent->token;
  c->ops = agent->kid_ops;
  c->ud = agent->kid_ud;
  c->virt = 1;
  c->parent = agent;
  c->slot = slot;
  snprintf(c->peer, sizeof c->peer, "%.40s/slot%u", agent->peer, (unsigned)slot);
  if (timers_new(c, base)) {
    timers_free(c);
    free(c);
    return FT_ENOMEM;
  }
  agent->kids[slot] = c;
  if (conn_start(c)) {
    close_impl(c, "", 0, 0);
    return FT_OK; /* the agent hears its slot closed */
  }
  return FT_OK;
}

int sup_conn_make_agent(sup_conn *c, uint32_t nslots, const sup_conn_ops *kid_ops, void *kid_ud) {
  if (c->virt || c->agent || nslots == 0 || nslots > FT_WIRE_MAX_SLOTS)
    return ft_err_set(FT_EINVAL, "not a connection that can be an agent's (%u slots)",
                      (unsigned)nslots);
  c->kids = calloc(nslots, sizeof *c->kids);
  if (!c->kids)
    return ft_err_set(FT_ENOMEM, "out of memory");
  c->nkids = nslots;
  c->kid_ops = kid_ops;
  c->kid_ud = kid_ud;
  c->agent = 1;
  return FT_OK;
}

int sup_conn_is_agent(const sup_conn *c) {
  return c->agent;
}
sup_conn *sup_conn_parent(const sup_conn *c) {
  return c->virt ? c->parent : NULL;
}
int sup_conn_kid_open(const sup_conn *agent, const sup_conn *k, uint32_t slot) {
  return agent && agent->agent && !agent->closing && !agent->overflowed && k && k->virt &&
         k->parent == agent && k->slot == slot && k->authed && !k->closing && !k->overflowed;
}
uint32_t sup_conn_slot(const sup_conn *c) {
  return c->slot;
}
double sup_conn_msg_age_s(const sup_conn *c) {
  return c->msg_age_s;
}
size_t sup_conn_kids(const sup_conn *c) {
  size_t n = 0;
  for (uint32_t i = 0; i < c->nkids; i++)
    n += c->kids[i] && !c->kids[i]->closing;
  return n;
}

int sup_conn_new(struct event_base *base, int fd, const char *run, const char *token,
                 const sup_conn_ops *ops, void *ud, sup_conn **out) {
  int rc = FT_OK;
  sup_conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  c->id = g_next_id++;
  c->run = run;
  c->token = token;
  c->ops = ops;
  c->ud = ud;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  snprintf(c->peer, sizeof c->peer, "?");
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET) {
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    char a[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sin->sin_addr, a, sizeof a);
    snprintf(c->peer, sizeof c->peer, "%s:%u", a, ntohs(sin->sin_port));
  }
  evutil_make_socket_nonblocking(fd);
  evutil_make_socket_closeonexec(fd);
  /* Frames to a worker are small and each is awaited (STOP, ASSIGN, an
   * echo): with Nagle on, a frame queued while the previous one still waits
   * for the worker's delayed ACK (40-200 ms on Linux, since the worker sends
   * nothing until its next heartbeat) is held until that ACK comes. */
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
  if (timers_new(c, base) || !c->bev) {
    if (!c->bev)
      close(fd);
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto fail;
  }
  bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
  rc = conn_start(c);
  if (rc) {
    conn_unlink_free(c);
    return rc;
  }
  *out = c;
  return FT_OK;
fail:
  if (c->bev)
    bufferevent_free(c->bev);
  timers_free(c);
  free(c);
  return rc;
}
