/*
 * test_ctl: the worker's control client (worker/ctl.c) against a fake
 * supervisor on loopback that speaks the real protocol (CHALLENGE, HELLO,
 * WELCOME, ASSIGN, STOP rejoin): the in-process rejoin goes IDLE ->
 * TRAINING -> LEAVING -> WAITING -> TRAINING through ctl's state machine,
 * its checks (check_step: W1-W3) passing at each event; and a training
 * thread that calls ctl_rejoin twice without taking the next ASSIGN (a bug
 * in train.c's loop) is caught by W1 (a death test, test_inv.h).
 *
 * ctl has no free: its reader ends the process when the connection goes.
 * So every case runs in a child (inv_run_child), the fake supervisor on a
 * thread of that child, holding the connection open until it exits.
 */
#include "test_inv.h"

#include "ctl.h"
#include "ft_err.h"
#include "ft_file.h"
#include "ft_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#define RUN "ctl-test"

static int g_lfd, g_port;
static int g_go[2]; /* the test's word to the fake supervisor: send the next message */

static void send_frame(int fd, ft_msg *m) {
  ft_buf b;
  ft_buf_init(&b);
  snprintf(m->run, sizeof m->run, "%s", RUN);
  if (ft_wire_encode(m, &b) || ft_send_all(fd, b.data, b.len, "worker"))
    abort();
  ft_buf_release(&b);
}

/* Reads and drops one frame (HELLO). */
static void read_frame(int fd) {
  ft_buf b;
  ft_buf_init(&b);
  for (;;) {
    size_t flen;
    int r = ft_wire_frame_len_max(b.data, b.len, FT_WIRE_MAX_FRAME, &flen);
    if (r == 1)
      break;
    if (r < 0 || ft_buf_reserve(&b, 4096))
      abort();
    ssize_t n = recv(fd, b.data + b.len, b.cap - b.len, 0);
    if (n <= 0)
      abort();
    b.len += (size_t)n;
  }
  ft_buf_release(&b);
}

static void send_assign(int fd, uint64_t gen) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_ASSIGN);
  m.gen = gen;
  m.assign.world = 1;
  m.assign.restore_step = -1;
  m.assign.rdzv = (const uint8_t *)"g";
  m.assign.rdzv_len = 1;
  send_frame(fd, &m);
}

static void send_rejoin(int fd, uint64_t gen) {
  ft_msg m;
  ft_msg_init(&m, FT_MSG_STOP);
  m.gen = gen;
  m.stop.reason = FT_STOP_REJOIN;
  send_frame(fd, &m);
}

/* The supervisor: the handshake, ASSIGN 1, then on each word from the test
 * STOP rejoin 2, then ASSIGN 2; then it holds the connection (the worker's
 * heartbeats pile up in the socket, unread). */
static void *fake_sup(void *arg) {
  int fd = accept(g_lfd, NULL, NULL);
  if (fd < 0)
    abort();
  ft_msg m;
  ft_msg_init(&m, FT_MSG_CHALLENGE);
  send_frame(fd, &m);
  read_frame(fd); /* HELLO, not checked: this is not the supervisor's test */
  ft_msg_init(&m, FT_MSG_WELCOME);
  m.welcome.heartbeat_ms = 1000;
  send_frame(fd, &m);
  send_assign(fd, 1);
  char c;
  if (read(g_go[0], &c, 1) == 1)
    send_rejoin(fd, 2);
  if (read(g_go[0], &c, 1) == 1)
    send_assign(fd, 2);
  for (;;)
    pause();
  return NULL;
}

static ctl *connect_to_fake(void) {
  g_lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (g_lfd < 0 || bind(g_lfd, (struct sockaddr *)&a, sizeof a) || listen(g_lfd, 1) ||
      getsockname(g_lfd, (struct sockaddr *)&a, &al) || pipe(g_go))
    abort();
  g_port = ntohs(a.sin_port);
  pthread_t th;
  if (pthread_create(&th, NULL, fake_sup, NULL))
    abort();
  char addr[64], token[FT_WIRE_TOKEN_HEX + 1];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
  memset(token, 'a', FT_WIRE_TOKEN_HEX);
  token[FT_WIRE_TOKEN_HEX] = 0;
  ctl *c = NULL;
  if (ctl_connect(addr, RUN, token, 0, 0, 60, &c)) {
    fprintf(stderr, "ctl_connect: %s\n", ft_err_detail());
    abort();
  }
  return c;
}

static void go(void) {
  if (write(g_go[1], "x", 1) != 1)
    abort();
}

/* Exit codes: the case's own verdict (0: as expected). */
static void rejoin_body(void) {
  ctl *c = connect_to_fake();
  ctl_assign a;
  ctl_wait_assign(c, &a); /* IDLE -> TRAINING */
  if (a.gen != 1 || ctl_train_gen(c) != 1)
    _exit(10);
  go();                       /* STOP rejoin 2: TRAINING -> LEAVING */
  uint64_t g = ctl_rejoin(c); /* waits for it; LEAVING -> WAITING */
  if (g != 2 || !ctl_aborted(c))
    _exit(11);
  go();                   /* ASSIGN 2 */
  ctl_wait_assign(c, &a); /* WAITING -> TRAINING */
  if (a.gen != 2 || ctl_aborted(c))
    _exit(12);
}

static void test_rejoin(void **st) {
  (void)st;
  char err[8192];
  int status = inv_run_child(rejoin_body, err, sizeof err);
  fprintf(stderr, "%s", err);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_null(strstr(err, "invariant broken"));
}

/* W1: left twice for one rejoin (WAITING has no way out but an ASSIGN). */
static void rejoin_twice_body(void) {
  ctl *c = connect_to_fake();
  ctl_assign a;
  ctl_wait_assign(c, &a);
  go();
  ctl_rejoin(c);
  ctl_rejoin(c);
}

static void test_inv_rejoin_twice(void **st) {
  (void)st;
  assert_inv_broken(rejoin_twice_body, "W1: left (ctl_rejoin) in state WAITING");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rejoin),
      cmocka_unit_test(test_inv_rejoin_twice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
