/* Unit tests of supervisor/sup_conn.c on a real libevent loop over
 * socketpairs: the bounds on connections that have not said HELLO (the
 * HELLO deadline and the cap, oldest evicted; an authenticated connection
 * is touched by neither), and sending: a frame reaches the socket before
 * the loop runs again, frames stay in order when the kernel's buffer
 * fills, and a peer that is gone is reported, not fatal; a peer that
 * reads nothing while answers pile up is closed once its queue would pass
 * the output cap (from the loop, not inside the send), with the bytes it
 * held. A worker that sends a type only the supervisor may send (DUMP,
 * STOP, COMMITTED) is closed with the reason. */
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
