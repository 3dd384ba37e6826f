/* Unit tests of supervisor/sup_conn.c on a real libevent loop over
 * socketpairs: the bounds on connections that have not said HELLO (the
 * HELLO deadline and the cap, oldest evicted; an authenticated connection
 * is touched by neither), and sending: a frame reaches the socket before
 * the loop runs again, frames stay in order when the kernel's buffer
 * fills, and a peer that is gone is reported, not fatal; a peer that
 * reads nothing while answers pile up is closed once its queue would pass
 * the output cap (from the loop, not inside the send), with the bytes it
 * held. A worker that sends a type only the supervisor may send (DUMP,
 * STOP, COMMITTED) is closed with the reason. An agent's connection
 * (version 10): SLOT open makes a virtual connection whose CHALLENGE goes
 * out in a RELAY, a relayed HELLO signed with that nonce is accepted and
 * one with a wrong MAC closes that slot alone (the agent hears SLOT
 * closed), a HOSTBEAT's beat reaches the slot's on_msg as a HEARTBEAT with
 * its age and its echo is not sent, a slot's send is a RELAY, SLOT exited
 * closes the slot, and the agent's close closes every slot; a direct
 * worker may not send RELAY. A burst of frames to agents: the first to
 * each goes out at once, the rest to the same agent when a frame to
 * another agent comes, when the loop turns or when it closes, in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_conn.h"

#include <signal.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RUN "unit-run"
static char g_token[FT_WIRE_TOKEN_HEX + 1];

typedef struct rec {
  int nclosed;
  char reasons[8][192];
  int closed_id[8];
  int is_error[8];
  size_t overflowed[8];
} rec;

static int on_hello(void *ud, sup_conn *c, const ft_msg *m, char *reason, size_t rlen) {
  return 0; /* accept every verified HELLO */
}
static void on_msg(void *ud, sup_conn *c, const ft_msg *m) {}
static void on_close(void *ud, sup_conn *c, const char *reason, int is_error) {
  rec *r = ud;
  if (r->nclosed < 8) {
    snprintf(r->reasons[r->nclosed], sizeof r->reasons[0], "%s", reason);
    r->closed_id[r->nclosed] = (int)sup_conn_id(c);
    r->is_error[r->nclosed] = is_error;
    r->overflowed[r->nclosed] = sup_conn_overflowed(c);
  }
  r->nclosed++;
}
static const sup_conn_ops ops = {.on_hello = on_hello, .on_msg = on_msg, .on_close = on_close};

/* ---- an agent's connection: the kids' ops record what reaches them ---- */
typedef struct arec {
  rec closes; /* kids' closes */
  int hellos; /* kids' HELLOs accepted */
  uint32_t hello_slot;
  int beats;       /* HEARTBEATs handed to kids */
  double beat_age; /* sup_conn_msg_age_s during the last */
  int64_t beat_step;
  uint64_t beat_gen;
  int agent_msgs; /* HOSTBEAT / SLOT handed to the agent's on_msg */
  int slot_exited;
} arec;
static arec *g_arec;

static int kid_hello(void *ud, sup_conn *c, const ft_msg *m, char *reason, size_t rlen) {
  arec *a = ud;
  a->hellos++;
  a->hello_slot = m->hello.slot;
  return 0;
}
static void kid_msg(void *ud, sup_conn *c, const ft_msg *m) {
  arec *a = ud;
  if (m->type == FT_MSG_HEARTBEAT) {
    a->beats++;
    a->beat_age = sup_conn_msg_age_s(c);
    a->beat_step = m->heartbeat.step;
    a->beat_gen = m->gen;
    ft_msg echo; /* what sup_run.c does: dropped for a beat a HOSTBEAT carried */
    ft_msg_init(&echo, FT_MSG_HEARTBEAT);
    snprintf(echo.run, sizeof echo.run, "%s", RUN);
    echo.gen = m->gen;
    assert_int_equal(sup_conn_send(c, &echo), 0);
  }
}
static void kid_close(void *ud, sup_conn *c, const char *reason, int is_error) {
  on_close(&((arec *)ud)->closes, c, reason, is_error);
}
static const sup_conn_ops kid_ops = {
    .on_hello = kid_hello, .on_msg = kid_msg, .on_close = kid_close};

/* The agent's own connection: its HELLO (slot FT_WIRE_AGENT_SLOT) makes it
 * an agent's with 4 slots. */
static int agent_hello(void *ud, sup_conn *c, const ft_msg *m, char *reason, size_t rlen) {
  if (m->hello.slot != FT_WIRE_AGENT_SLOT)
    return 0;
  return sup_conn_make_agent(c, 4, &kid_ops, g_arec);
}
static void agent_msg(void *ud, sup_conn *c, const ft_msg *m) {
  g_arec->agent_msgs++;
  if (m->type == FT_MSG_SLOT && m->slot.event == FT_SLOT_EXITED)
    g_arec->slot_exited++;
}
static const sup_conn_ops agent_ops = {
    .on_hello = agent_hello, .on_msg = agent_msg, .on_close = on_close};

/* A connection on one end of a socketpair; *peer gets the other end. */
static sup_conn *conn(struct event_base *base, rec *r, int *peer) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  sup_conn *c = NULL;
  assert_int_equal(sup_conn_new(base, sv[0], RUN, g_token, &ops, r, &c), 0);
  *peer = sv[1];
  return c;
}

static void run_for(struct event_base *base, double s) {
  struct timeval tv = {(long)s, (long)((s - (long)s) * 1e6)};
  event_base_loopexit(base, &tv);
  event_base_dispatch(base);
}

/* Reads the CHALLENGE on peer and answers with a signed HELLO. */
static void say_hello(struct event_base *base, int peer) {
  run_for(base, 0.05); /* the CHALLENGE goes out */
  uint8_t buf[4096];
  ssize_t n = read(peer, buf, sizeof buf);
  assert_true(n > 0);
  size_t flen = 0;
  assert_int_equal(ft_wire_frame_len_max(buf, (size_t)n, sizeof buf, &flen), 1);
  ft_msg ch;
  assert_int_equal(ft_wire_decode(buf, flen, &ch), 0);
  assert_int_equal(ch.type, FT_MSG_CHALLENGE);
  ft_msg h;
  ft_msg_init(&h, FT_MSG_HELLO);
  snprintf(h.run, sizeof h.run, "%s", RUN);
  assert_int_equal(ft_wire_hello_sign(&h, g_token, ch.challenge.nonce), 0);
  ft_msg_release(&ch);
  ft_buf b;
  ft_buf_init(&b);
  assert_int_equal(ft_wire_encode(&h, &b), 0);
  assert_int_equal(write(peer, b.data, b.len), (ssize_t)b.len);
  ft_buf_release(&b);
  run_for(base, 0.05); /* the HELLO is read and accepted */
}

static void test_cap_evicts_oldest_then_deadline(void **st) {
  struct event_base *base = event_base_new();
  rec r = {0};
  int p[4];
  sup_conn_set_limits(1.0, 2);
  sup_conn *authed = conn(base, &r, &p[0]);
  say_hello(base, p[0]);
  assert_int_equal(r.nclosed, 0);
  assert_int_equal(sup_conn_unauth_count(), 0);
  sup_conn *a = conn(base, &r, &p[1]);
  conn(base, &r, &p[2]);
  assert_int_equal(sup_conn_unauth_count(), 2);
  int a_id = (int)sup_conn_id(a);
  conn(base, &r, &p[3]); /* over the cap: the oldest without HELLO goes */
  assert_int_equal(r.nclosed, 1);
  assert_int_equal(r.closed_id[0], a_id);
  assert_non_null(strstr(r.reasons[0], "too many connections without HELLO"));
  assert_int_equal(sup_conn_unauth_count(), 2);
  run_for(base, 1.5); /* past the HELLO deadline */
  assert_int_equal(r.nclosed, 3);
  assert_non_null(strstr(r.reasons[1], "no HELLO within"));
  assert_non_null(strstr(r.reasons[2], "no HELLO within"));
  assert_int_equal(sup_conn_unauth_count(), 0);
  /* the authenticated one is still open: its peer reads no EOF */
  char c;
  assert_int_equal(recv(p[0], &c, 1, MSG_DONTWAIT), -1);
  (void)authed;
  sup_conn_free_all();
  for (int i = 0; i < 4; i++)
    close(p[i]);
  event_base_free(base);
  sup_conn_set_limits(SUP_CONN_HELLO_TIMEOUT_S, SUP_CONN_MAX_UNAUTH);
}

/* A frame only the supervisor sends, from an authenticated worker: the
 * connection is closed with the reason (DUMP as STOP and COMMITTED). */
static void test_supervisor_types_from_worker_refused(void **st) {
  (void)st;
  int types[] = {FT_MSG_DUMP, FT_MSG_STOP, FT_MSG_COMMITTED};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    struct event_base *base = event_base_new();
    rec r = {0};
    int peer;
    conn(base, &r, &peer);
    say_hello(base, peer);
    assert_int_equal(r.nclosed, 0);
    ft_msg m;
    ft_msg_init(&m, (ft_msg_type)types[i]);
    snprintf(m.run, sizeof m.run, "%s", RUN);
    m.gen = 1;
    ft_buf b;
    ft_buf_init(&b);
    assert_int_equal(ft_wire_encode(&m, &b), 0);
    assert_int_equal(write(peer, b.data, b.len), (ssize_t)b.len);
    ft_buf_release(&b);
    run_for(base, 0.05);
    assert_int_equal(r.nclosed, 1);
    char want[64];
    snprintf(want, sizeof want, "a worker may not send %s", ft_msg_type_name(types[i]));
    assert_non_null(strstr(r.reasons[0], want));
    assert_int_equal(r.is_error[0], 1);
    sup_conn_free_all();
    close(peer);
    event_base_free(base);
  }
}

static void send_beat(sup_conn *c, uint32_t seq) {
  ft_msg hb;
  ft_msg_init(&hb, FT_MSG_HEARTBEAT);
  snprintf(hb.run, sizeof hb.run, "%s", RUN);
  hb.gen = 7;
  hb.heartbeat.seq = seq;
  assert_int_equal(sup_conn_send(c, &hb), 0);
}

/* Decodes the frames at the start of buf[0..*len): checks each is the
 * HEARTBEAT numbered *next, counts it, and keeps the incomplete tail. */
static void take_beats(uint8_t *buf, size_t *len, uint32_t *next) {
  size_t off = 0, flen = 0;
  while (ft_wire_frame_len_max(buf + off, *len - off, 1 << 20, &flen) == 1 && *len - off >= flen) {
    ft_msg m;
    assert_int_equal(ft_wire_decode(buf + off, flen, &m), 0);
    assert_int_equal(m.type, FT_MSG_HEARTBEAT);
    if (m.heartbeat.seq != *next)
      fail_msg("frame %u arrived where %u was due", m.heartbeat.seq, *next);
    (*next)++;
    ft_msg_release(&m);
    off += flen;
  }
  memmove(buf, buf + off, *len - off);
  *len -= off;
}

/* Reads what peer holds now (without running the loop) into buf after
 * *len and takes the whole frames; returns the bytes read, -1 if none. */
static ssize_t read_beats(int peer, uint8_t *buf, size_t cap, size_t *len, uint32_t *next) {
  ssize_t n, got = -1;
  while ((n = recv(peer, buf + *len, cap - *len, MSG_DONTWAIT)) > 0) {
    got = (got < 0 ? 0 : got) + n;
    *len += (size_t)n;
    take_beats(buf, len, next);
  }
  return got;
}

/* An authenticated connection for a sending test, and its peer. */
typedef struct sending {
  struct event_base *base;
  rec r;
  sup_conn *c;
  int peer;
} sending;

static int sending_setup(void **st) {
  sending *t = calloc(1, sizeof *t);
  t->base = event_base_new();
  t->c = conn(t->base, &t->r, &t->peer);
  say_hello(t->base, t->peer);
  *st = t;
  return 0;
}

static int sending_teardown(void **st) {
  sending *t = *st;
  sup_conn_free_all();
  if (t->peer >= 0)
    close(t->peer);
  event_base_free(t->base);
  free(t);
  return 0;
}

/* A frame sent with nothing queued before it is in the peer's socket at
 * once, not on the loop's next pass (a fault's STOPs to thousands of
 * workers went out only after the last was queued). */
static void test_send_reaches_socket_before_loop(void **st) {
  sending *t = *st;
  send_beat(t->c, 0);
  uint8_t buf[4096];
  size_t len = 0;
  uint32_t next = 0;
  if (read_beats(t->peer, buf, sizeof buf, &len, &next) < 0) /* the loop has not run */
    fail_msg("the frame was not on the socket before the loop ran");
  assert_int_equal(next, 1);
  assert_int_equal(len, 0);
  assert_int_equal(t->r.nclosed, 0);
}

/* More than the socket buffer holds, sent while the peer reads nothing:
 * what the kernel does not take is queued and follows on the loop, every
 * frame once and in order (a frame written straight to the socket while
 * earlier ones wait in the queue would overtake them). */
static void test_send_keeps_order_past_full_buffer(void **st) {
  sending *t = *st;
  enum { N = 40000 }; /* ~1.7 MB of heartbeats: several socket buffers */
  static uint8_t buf[1 << 16];
  size_t len = 0;
  uint32_t next = 0, i = 0;
  for (; i < N / 2; i++)
    send_beat(t->c, i);
  /* the peer takes what the socket holds while the rest is still queued;
   * the frames sent next must wait behind the queue, not take the room */
  read_beats(t->peer, buf, sizeof buf, &len, &next);
  assert_true(next > 0 && next < N / 2);
  for (; i < N; i++)
    send_beat(t->c, i);
  for (int round = 0; round < 2000 && next < N; round++) {
    run_for(t->base, 0.002);
    read_beats(t->peer, buf, sizeof buf, &len, &next);
  }
  assert_int_equal(next, N);
  assert_int_equal(len, 0);
  assert_int_equal(t->r.nclosed, 0);
}

/* A peer that is gone: the send does not fail the caller, and the loop
 * reports the connection closed (SIGPIPE ignored, as supervise does). */
static void test_send_to_gone_peer_is_reported(void **st) {
  sending *t = *st;
  close(t->peer);
  t->peer = -1;
  send_beat(t->c, 0);
  send_beat(t->c, 1);
  run_for(t->base, 0.05);
  assert_int_equal(t->r.nclosed, 1);
}

/* A peer that asks and never reads (the KV_GET flood of issue 41: 1.5 GB
 * of answers queued, nothing closed): the queue stops at the cap, the
 * connection is closed on the loop's next pass with the reason and the
 * bytes it would have held, and the peer then reads EOF. */
static void test_peer_not_reading_closed_at_cap(void **st) {
  sending *t = *st;
  enum { CAP = 256 << 10, VAL = 64 << 10, N = 200 }; /* 12.8 MB of answers */
  sup_conn_set_max_queued(CAP);
  static uint8_t val[VAL];
  ft_wire_blob blob = {.data = val, .len = VAL};
  for (uint32_t i = 0; i < N; i++) {
    ft_msg m;
    ft_msg_init(&m, FT_MSG_KV_VALUE);
    snprintf(m.run, sizeof m.run, "%s", RUN);
    m.gen = 7;
    m.kv_value.req = i;
    m.kv_value.status = FT_KV_OK;
    m.kv_value.vals = &blob;
    m.kv_value.nvals = 1;
    assert_int_equal(sup_conn_send(t->c, &m), 0); /* the caller is not failed */
  }
  /* not closed inside a send: the sender may be walking a list on_close edits */
  assert_int_equal(t->r.nclosed, 0);
  run_for(t->base, 0.05);
  assert_int_equal(t->r.nclosed, 1);
  assert_non_null(strstr(t->r.reasons[0], "output queue over its cap"));
  assert_int_equal(t->r.is_error[0], 1);
  assert_true(t->r.overflowed[0] > CAP);
  assert_true(t->r.overflowed[0] <= CAP + VAL + 64);
  run_for(t->base, 0.05); /* freed */
  /* what reached the socket was the first frames; then EOF, no more */
  static uint8_t buf[1 << 16];
  size_t total = 0;
  ssize_t n;
  while ((n = read(t->peer, buf, sizeof buf)) > 0)
    total += (size_t)n;
  assert_int_equal(n, 0);
  assert_true(total < (size_t)N * VAL / 4);
  sup_conn_set_max_queued(0);
}

/* ---- agents --------------------------------------------------------------- */

static void put_frame(int fd, const ft_msg *m) {
  ft_buf b;
  ft_buf_init(&b);
  assert_int_equal(ft_wire_encode(m, &b), 0);
  assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
  ft_buf_release(&b);
}

/* Every whole frame the peer holds now, decoded into out[] (at most n). */
static int get_frames(int fd, ft_msg *out, int n) {
  static uint8_t buf[1 << 16];
  size_t len = 0;
  ssize_t k;
  while ((k = recv(fd, buf + len, sizeof buf - len, MSG_DONTWAIT)) > 0)
    len += (size_t)k;
  int got = 0;
  size_t off = 0, flen = 0;
  while (got < n &&
         ft_wire_frame_len_max(buf + off, len - off, FT_WIRE_MAX_RELAY_FRAME, &flen) == 1) {
    assert_int_equal(ft_wire_decode(buf + off, flen, &out[got]), 0);
    got++;
    off += flen;
  }
  return got;
}

static void release_all(ft_msg *m, int n) {
  for (int i = 0; i < n; i++)
    ft_msg_release(&m[i]);
}

/* A frame of a worker's, inside a RELAY for slot. */
static void relay(int fd, uint32_t slot, const ft_msg *inner) {
  ft_buf b;
  ft_buf_init(&b);
  assert_int_equal(ft_wire_encode(inner, &b), 0);
  ft_msg r;
  ft_msg_init(&r, FT_MSG_RELAY);
  snprintf(r.run, sizeof r.run, "%s", RUN);
  r.relay.slot = slot;
  r.relay.frame = b.data;
  r.relay.frame_len = (uint32_t)b.len;
  put_frame(fd, &r);
  ft_buf_release(&b);
}

static void slot_event(int fd, uint32_t slot, ft_slot_event ev, int32_t status) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_SLOT);
  snprintf(m.run, sizeof m.run, "%s", RUN);
  m.slot.slot = slot;
  m.slot.event = ev;
  m.slot.status = status;
  put_frame(fd, &m);
}

/* The CHALLENGE of slot, as a RELAY the agent got; its nonce. */
static void relayed_challenge(int fd, uint32_t slot, uint8_t nonce[FT_WIRE_NONCE_LEN]) {
  ft_msg f[4];
  int n = get_frames(fd, f, 4);
  assert_int_equal(n, 1);
  assert_int_equal(f[0].type, FT_MSG_RELAY);
  assert_int_equal(f[0].relay.slot, slot);
  ft_msg ch;
  assert_int_equal(ft_wire_decode(f[0].relay.frame, f[0].relay.frame_len, &ch), 0);
  assert_int_equal(ch.type, FT_MSG_CHALLENGE);
  memcpy(nonce, ch.challenge.nonce, FT_WIRE_NONCE_LEN);
  ft_msg_release(&ch);
  release_all(f, n);
}

static void kid_hello_frame(uint32_t slot, const uint8_t nonce[FT_WIRE_NONCE_LEN], ft_msg *h) {
  ft_msg_init(h, FT_MSG_HELLO);
  snprintf(h->run, sizeof h->run, "%s", RUN);
  h->hello.node = 3;
  h->hello.slot = slot;
  h->hello.pid = 4000 + slot;
  assert_int_equal(ft_wire_hello_sign(h, g_token, nonce), 0);
}

/* An agent's connection through its own handshake (node 3); *peer: the
 * agent's end. */
static sup_conn *agent_open(struct event_base *base, rec *r, int *peer) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  sup_conn *c = NULL;
  assert_int_equal(sup_conn_new(base, sv[0], RUN, g_token, &agent_ops, r, &c), 0);
  *peer = sv[1];
  run_for(base, 0.05);
  ft_msg f[8];
  int n = get_frames(*peer, f, 8);
  assert_int_equal(n, 1);
  ft_msg h;
  ft_msg_init(&h, FT_MSG_HELLO);
  snprintf(h.run, sizeof h.run, "%s", RUN);
  h.hello.node = 3;
  h.hello.slot = FT_WIRE_AGENT_SLOT;
  h.hello.pid = 999;
  assert_int_equal(ft_wire_hello_sign(&h, g_token, f[0].challenge.nonce), 0);
  release_all(f, n);
  put_frame(*peer, &h);
  run_for(base, 0.05);
  assert_true(sup_conn_is_agent(c));
  assert_int_equal(sup_conn_unauth_count(), 0);
  return c;
}

static void test_agent_relays_slots(void **st) {
  (void)st;
  struct event_base *base = event_base_new();
  arec a = {0};
  g_arec = &a;
  rec r = {0};
  int peer;
  sup_conn *c = agent_open(base, &r, &peer);
  ft_msg f[8], h;
  int n;

  /* slot 1 opens: its CHALLENGE comes in a RELAY, its HELLO goes back in one */
  uint8_t nonce[FT_WIRE_NONCE_LEN];
  slot_event(peer, 1, FT_SLOT_OPEN, 0);
  run_for(base, 0.05);
  relayed_challenge(peer, 1, nonce);
  assert_int_equal(sup_conn_kids(c), 1);
  assert_int_equal(sup_conn_unauth_count(), 1);
  kid_hello_frame(1, nonce, &h);
  relay(peer, 1, &h);
  run_for(base, 0.05);
  assert_int_equal(a.hellos, 1);
  assert_int_equal(a.hello_slot, 1);
  assert_int_equal(sup_conn_unauth_count(), 0);

  /* slot 2's HELLO signed with slot 1's nonce: slot 2 alone is closed, and
   * the agent is told */
  slot_event(peer, 2, FT_SLOT_OPEN, 0);
  run_for(base, 0.05);
  uint8_t nonce2[FT_WIRE_NONCE_LEN];
  relayed_challenge(peer, 2, nonce2);
  kid_hello_frame(2, nonce, &h);
  relay(peer, 2, &h);
  run_for(base, 0.05);
  assert_int_equal(a.hellos, 1);
  assert_int_equal(a.closes.nclosed, 1);
  assert_non_null(strstr(a.closes.reasons[0], "HELLO rejected"));
  n = get_frames(peer, f, 8);
  assert_int_equal(n, 1);
  assert_int_equal(f[0].type, FT_MSG_SLOT);
  assert_int_equal(f[0].slot.slot, 2);
  assert_int_equal(f[0].slot.event, FT_SLOT_CLOSED);
  release_all(f, n);
  assert_int_equal(sup_conn_kids(c), 1);

  /* a HOSTBEAT: slot 1's beat reaches it as a HEARTBEAT with its age, a
   * beat for a slot not open is dropped, and no echo goes to slot 1 (the
   * agent echoed it); the agent's on_msg gets the HOSTBEAT */
  ft_wire_beat beats[2] = {{.slot = 1, .gen = 5, .age_ms = 250, .step = 42, .seq = 3},
                           {.slot = 3, .gen = 5, .age_ms = 1, .step = 42, .seq = 3}};
  ft_msg hb;
  ft_msg_init(&hb, FT_MSG_HOSTBEAT);
  snprintf(hb.run, sizeof hb.run, "%s", RUN);
  hb.hostbeat.seq = 1;
  hb.hostbeat.beats = beats;
  hb.hostbeat.nbeats = 2;
  put_frame(peer, &hb);
  run_for(base, 0.05);
  assert_int_equal(a.beats, 1);
  assert_true(a.beat_age > 0.249 && a.beat_age < 0.251);
  assert_true(a.beat_step == 42 && a.beat_gen == 5);
  assert_int_equal(a.agent_msgs, 1);
  assert_int_equal(get_frames(peer, f, 8), 0);

  /* a send on slot 1 is a RELAY of its frame: a HEARTBEAT relayed whole
   * (not in a HOSTBEAT) is handed over with age 0, and its echo goes out */
  ft_msg beat;
  ft_msg_init(&beat, FT_MSG_HEARTBEAT);
  snprintf(beat.run, sizeof beat.run, "%s", RUN);
  beat.gen = 5;
  beat.heartbeat.seq = 9;
  relay(peer, 1, &beat);
  run_for(base, 0.05);
  assert_int_equal(a.beats, 2);
  assert_true(a.beat_age == 0);
  n = get_frames(peer, f, 8);
  assert_int_equal(n, 1);
  assert_int_equal(f[0].type, FT_MSG_RELAY);
  assert_int_equal(f[0].relay.slot, 1);
  ft_msg in;
  assert_int_equal(ft_wire_decode(f[0].relay.frame, f[0].relay.frame_len, &in), 0);
  assert_int_equal(in.type, FT_MSG_HEARTBEAT);
  ft_msg_release(&in);
  release_all(f, n);

  /* SLOT exited: the agent's on_msg hears it, then slot 1 closes as if its
   * peer hung up (no SLOT closed back: the agent knows) */
  slot_event(peer, 1, FT_SLOT_EXITED, 9);
  run_for(base, 0.05);
  assert_int_equal(a.slot_exited, 1);
  assert_int_equal(a.closes.nclosed, 2);
  assert_int_equal(a.closes.is_error[1], 0);
  assert_int_equal(sup_conn_kids(c), 0);
  assert_int_equal(get_frames(peer, f, 8), 0);

  /* the agent's connection closes: its open slots close with it */
  slot_event(peer, 0, FT_SLOT_OPEN, 0);
  run_for(base, 0.05);
  relayed_challenge(peer, 0, nonce);
  kid_hello_frame(0, nonce, &h);
  relay(peer, 0, &h);
  run_for(base, 0.05);
  assert_int_equal(a.hellos, 2);
  close(peer);
  run_for(base, 0.05);
  assert_int_equal(r.nclosed, 1);
  assert_int_equal(a.closes.nclosed, 3);
  assert_non_null(strstr(a.closes.reasons[2], "its agent's connection closed"));
  sup_conn_free_all();
  event_base_free(base);
}

/* A burst to one agent (a gang-wide send: each slot's frame): the first
 * frame goes out at once, the rest when the loop turns, or when a frame to
 * another agent comes, or when the connection closes; every frame arrives,
 * in the order sent. */
static ft_msg stop_frame(const char *detail) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STOP);
  snprintf(m.run, sizeof m.run, "%s", RUN);
  m.stop.reason = FT_STOP_RECOVERING;
  m.stop.detail = detail;
  return m;
}

static void test_agent_burst_held(void **st) {
  (void)st;
  struct event_base *base = event_base_new();
  arec a = {0};
  g_arec = &a;
  rec r = {0}, r2 = {0};
  int peer, peer2;
  sup_conn *c = agent_open(base, &r, &peer), *c2 = agent_open(base, &r2, &peer2);
  static const char *const D[4] = {"one", "two", "three", "four"};
  for (int i = 0; i < 3; i++) {
    ft_msg m = stop_frame(D[i]);
    assert_int_equal(sup_conn_send(c, &m), 0);
  }
  ft_msg f[8];
  int n = get_frames(peer, f, 8);
  assert_int_equal(n, 1); /* the first at once, two held */
  assert_string_equal(f[0].stop.detail, "one");
  release_all(f, n);
  ft_msg m = stop_frame("other");
  assert_int_equal(sup_conn_send(c2, &m), 0); /* another agent: the held go */
  n = get_frames(peer, f, 8);
  assert_int_equal(n, 2);
  assert_string_equal(f[0].stop.detail, "two");
  assert_string_equal(f[1].stop.detail, "three");
  release_all(f, n);
  m = stop_frame("four");
  assert_int_equal(sup_conn_send(c2, &m), 0); /* held behind "other" */
  run_for(base, 0.05);                        /* the loop's turn sends it */
  n = get_frames(peer2, f, 8);
  assert_int_equal(n, 2);
  assert_string_equal(f[0].stop.detail, "other");
  assert_string_equal(f[1].stop.detail, "four");
  release_all(f, n);
  /* held, then closed with a flush: it still goes */
  m = stop_frame("one");
  assert_int_equal(sup_conn_send(c, &m), 0);
  m = stop_frame("two");
  assert_int_equal(sup_conn_send(c, &m), 0);
  sup_conn_close(c, "", 1);
  n = get_frames(peer, f, 8);
  assert_int_equal(n, 2);
  assert_string_equal(f[1].stop.detail, "two");
  release_all(f, n);
  sup_conn_free_all();
  close(peer);
  close(peer2);
  event_base_free(base);
}

/* RELAY, HOSTBEAT and SLOT are an agent's: a worker's connection that
 * sends one is closed. */
static void test_agent_types_from_worker_refused(void **st) {
  (void)st;
  struct event_base *base = event_base_new();
  rec r = {0};
  int peer;
  conn(base, &r, &peer);
  say_hello(base, peer);
  slot_event(peer, 0, FT_SLOT_OPEN, 0);
  run_for(base, 0.05);
  assert_int_equal(r.nclosed, 1);
  assert_non_null(strstr(r.reasons[0], "a worker may not send SLOT"));
  sup_conn_free_all();
  close(peer);
  event_base_free(base);
}

int main(void) {
  if (ft_wire_token_new(g_token))
    return 1;
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cap_evicts_oldest_then_deadline),
      cmocka_unit_test(test_supervisor_types_from_worker_refused),
      cmocka_unit_test_setup_teardown(test_send_reaches_socket_before_loop, sending_setup,
                                      sending_teardown),
      cmocka_unit_test_setup_teardown(test_send_keeps_order_past_full_buffer, sending_setup,
                                      sending_teardown),
      cmocka_unit_test_setup_teardown(test_send_to_gone_peer_is_reported, sending_setup,
                                      sending_teardown),
      cmocka_unit_test_setup_teardown(test_peer_not_reading_closed_at_cap, sending_setup,
                                      sending_teardown),
      cmocka_unit_test(test_agent_relays_slots),
      cmocka_unit_test(test_agent_burst_held),
      cmocka_unit_test(test_agent_types_from_worker_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
