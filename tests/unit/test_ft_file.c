/*
 * test_ft_file: the write-every-byte loops of common/ft_file.h.
 *
 * ft_write_all into a pipe whose reader drains it slowly while a timer
 * interrupts the writer every 200 us (a handler installed without
 * SA_RESTART): the writes come back short or fail with EINTR, and every byte
 * must still arrive in order. ft_write_all into /dev/full: FT_ENOSPC with
 * the name in the detail and errno kept. ft_send_all over a socketpair, the
 * same interrupted stream, then to a peer that has closed: FT_ENET, and the
 * process is not killed by SIGPIPE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ft_err.h"
#include "ft_file.h"

enum { TOTAL = 4 << 20 };

static volatile sig_atomic_t g_alarms;
static void on_alarm(int sig) {
  (void)sig;
  g_alarms++;
}

typedef struct {
  int fd;
  uint8_t *got;
  size_t n;
} reader;

/* Reads up to TOTAL bytes in small pieces with pauses, so the writer blocks. */
static void *slow_reader(void *arg) {
  reader *r = arg;
  while (r->n < TOTAL) {
    size_t want = TOTAL - r->n < 3000 ? TOTAL - r->n : 3000;
    ssize_t k = read(r->fd, r->got + r->n, want);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    r->n += (size_t)k;
    if ((r->n / 3000) % 16 == 0)
      usleep(50);
  }
  return NULL;
}

static uint8_t *pattern(void) {
  uint8_t *p = malloc(TOTAL);
  assert_non_null(p);
  for (size_t i = 0; i < TOTAL; i++)
    p[i] = (uint8_t)(i * 131 + (i >> 12));
  return p;
}

/* Streams TOTAL bytes through fds[1] -> fds[0] under a 200 us timer. */
static void interrupted_stream(int fds[2], int use_send) {
  uint8_t *src = pattern();
  reader r = {.fd = fds[0], .got = calloc(TOTAL, 1)};
  assert_non_null(r.got);

  struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
  sigset_t alrm, old;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  /* The reader thread never takes the signal: only the writer is interrupted. */
  pthread_sigmask(SIG_BLOCK, &alrm, &old);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, slow_reader, &r), 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);

  g_alarms = 0;
  struct itimerval it = {.it_interval = {0, 200}, .it_value = {0, 200}};
  setitimer(ITIMER_REAL, &it, NULL);
  int rc =
      use_send ? ft_send_all(fds[1], src, TOTAL, "peer") : ft_write_all(fds[1], src, TOTAL, "pipe");
  struct itimerval off = {0};
  setitimer(ITIMER_REAL, &off, NULL);
  assert_int_equal(rc, FT_OK);
  pthread_join(th, NULL);

  assert_true(g_alarms > 0); /* the writer really was interrupted */
  assert_int_equal(r.n, TOTAL);
  assert_memory_equal(r.got, src, TOTAL);
  free(r.got);
  free(src);
  signal(SIGALRM, SIG_DFL);
}

static void test_write_all_survives_signals(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  interrupted_stream(fds, 0);
  close(fds[0]);
  close(fds[1]);
}

static void test_write_all_full_disk(void **state) {
  (void)state;
  int fd = open("/dev/full", O_WRONLY);
  if (fd < 0)
    skip();
  char buf[100] = {1};
  errno = 0;
  assert_int_equal(ft_write_all(fd, buf, sizeof buf, "/dev/full"), FT_ENOSPC);
  assert_int_equal(errno, ENOSPC);
  assert_non_null(strstr(ft_err_detail(), "/dev/full: write: "));
  close(fd);
}

static void test_write_all_bad_fd(void **state) {
  (void)state;
  char buf[8] = {0};
  assert_int_equal(ft_write_all(-1, buf, sizeof buf, "nothing"), FT_EIO);
  assert_int_equal(errno, EBADF);
  /* Nothing to write is success, whatever the fd. */
  assert_int_equal(ft_write_all(-1, buf, 0, "nothing"), FT_OK);
}

static void test_send_all_survives_signals(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int fds[2] = {sv[0], sv[1]};
  interrupted_stream(fds, 1);
  close(sv[0]);
  close(sv[1]);
}

static void test_send_all_peer_gone(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  close(sv[0]);
  /* SIGPIPE left at its default: without MSG_NOSIGNAL this kills the test. */
  signal(SIGPIPE, SIG_DFL);
  char buf[64] = {0};
  assert_int_equal(ft_send_all(sv[1], buf, sizeof buf, "supervisor"), FT_ENET);
  assert_int_equal(errno, EPIPE);
  assert_non_null(strstr(ft_err_detail(), "send to supervisor: "));
  close(sv[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_all_survives_signals),
      cmocka_unit_test(test_write_all_full_disk),
      cmocka_unit_test(test_write_all_bad_fd),
      cmocka_unit_test(test_send_all_survives_signals),
      cmocka_unit_test(test_send_all_peer_gone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
