/* Unit tests of supervisor/sup_conn.c's bounds on connections that have
 * not said HELLO: the HELLO deadline and the cap (oldest evicted), on a
 * real libevent loop over socketpairs; an authenticated connection is
 * touched by neither. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_conn.h"

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
  char reasons[8][128];
  int closed_id[8];
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

int main(void) {
  if (ft_wire_token_new(g_token))
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cap_evicts_oldest_then_deadline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
