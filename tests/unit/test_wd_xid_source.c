/*
 * Tests of wd_xid_source (watchdog/wd_xid_source.c): following a regular
 * file from its end like `tail -f` (partial lines, truncation, rotation,
 * over-long lines, replay from the start), feeding the sample kernel log
 * through the parser, the error codes (missing file, directory, no
 * permission: FT_EBUSY with advice), and /dev/kmsg as far as this machine
 * allows (it may be unreadable here; nothing is ever written to it).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_xid.h"
#include "wd_xid_source.h"

static char dir[64];
static char path[128];

static int setup(void **state) {
  strcpy(dir, "/tmp/test_wd_xid_source.XXXXXX");
  if (!mkdtemp(dir))
    return -1;
  snprintf(path, sizeof path, "%s/kern.log", dir);
  return 0;
}

static int teardown(void **state) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void append(const char *p, const char *text) {
  FILE *f = fopen(p, "a");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void expect_line(wd_xid_source *s, const char *want) {
  const char *line;
  size_t len;
  int rc = wd_xid_source_next_line(s, &line, &len);
  if (rc != 1)
    fail_msg("expected line '%s', got rc %d", want, rc);
  assert_int_equal(len, strlen(want));
  assert_string_equal(line, want);
}

static void expect_none(wd_xid_source *s) {
  const char *line;
  size_t len;
  assert_int_equal(wd_xid_source_next_line(s, &line, &len), 0);
}

static void test_tail_from_end(void **state) {
  unlink(path);
  append(path, "old line 1\nold line 2\n");
  wd_xid_source *s;
  assert_int_equal(wd_xid_source_open(path, 0, &s), FT_OK);
  assert_int_equal(wd_xid_source_is_kmsg(s), 0);
  assert_int_equal(wd_xid_source_pollable(s), 0);
  assert_true(wd_xid_source_fd(s) >= 0);
  expect_none(s); /* existing content is not replayed */
  append(path, "line A\nline B\npart");
  expect_line(s, "line A");
  expect_line(s, "line B");
  expect_none(s); /* "part" waits for its newline */
  append(path, "ial\n\n");
  expect_line(s, "partial");
  expect_line(s, ""); /* an empty line is a line */
  expect_none(s);

  /* truncation (copytruncate rotation): start again at 0 */
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("after truncate\n", f);
  fclose(f);
  expect_line(s, "after truncate");
  expect_none(s);

  /* rotation: the file is renamed away and a new one appears */
  char rotated[160];
  snprintf(rotated, sizeof rotated, "%s.1", path);
  assert_int_equal(rename(path, rotated), 0);
  append(rotated, "late line in the old file\n");
  expect_line(s, "late line in the old file");
  append(path, "first line of the new file\n");
  expect_line(s, "first line of the new file");
  append(path, "second\n");
  expect_line(s, "second");
  expect_none(s);
  wd_xid_source_close(s);
  wd_xid_source_close(NULL);
}

static void test_from_start_and_long_lines(void **state) {
  unlink(path);
  append(path, "one\ntwo\n");
  wd_xid_source *s;
  assert_int_equal(wd_xid_source_open(path, WD_XID_SOURCE_FROM_START, &s), FT_OK);
  expect_line(s, "one");
  expect_line(s, "two");
  expect_none(s);
  /* a line of 20000 bytes is cut to WD_XID_SOURCE_LINE_MAX - 1 */
  char *big = malloc(20002);
  assert_non_null(big);
  memset(big, 'a', 20000);
  big[20000] = '\n';
  big[20001] = '\0';
  append(path, big);
  append(path, "short\n");
  const char *line;
  size_t len;
  assert_int_equal(wd_xid_source_next_line(s, &line, &len), 1);
  assert_int_equal(len, WD_XID_SOURCE_LINE_MAX - 1);
  assert_true(line[0] == 'a' && line[len - 1] == 'a');
  expect_line(s, "short");
  expect_none(s);
  free(big);
  wd_xid_source_close(s);
}

typedef struct counts {
  int lines, xids, quarantine;
  wd_xid_table table;
} counts;

static int on_line(void *arg, const char *line, size_t len) {
  counts *c = arg;
  wd_xid_event ev;
  c->lines++;
  if (wd_xid_parse(line, len, &ev) == FT_OK) {
    c->xids++;
    c->quarantine += wd_xid_classify(&c->table, ev.xid) == WD_ACT_QUARANTINE_NODE;
  }
  return 0;
}

static int stop_after_one(void *arg, const char *line, size_t len) {
  return 1;
}

static void test_sample_log_through_parser(void **state) {
  const char *src = getenv("FT_SRC");
  if (!src)
    skip();
  char sample[4096];
  snprintf(sample, sizeof sample, "%s/tests/data/xid/kern.log", src);
  FILE *in = fopen(sample, "r");
  assert_non_null(in);
  unlink(path);
  append(path, "");
  wd_xid_source *s;
  assert_int_equal(wd_xid_source_open(path, 0, &s), FT_OK);
  char buf[4096];
  while (fgets(buf, sizeof buf, in))
    append(path, buf);
  fclose(in);
  counts c;
  memset(&c, 0, sizeof c);
  wd_xid_table_default(&c.table);
  assert_int_equal(wd_xid_source_read_lines(s, on_line, &c), 11);
  assert_int_equal(c.lines, 11);
  assert_int_equal(c.xids, 7);
  assert_int_equal(c.quarantine, 4); /* 79, 48, 94, 119 */
  assert_int_equal(wd_xid_source_read_lines(s, on_line, &c), 0);
  append(path, "x\ny\n");
  assert_int_equal(wd_xid_source_read_lines(s, stop_after_one, NULL), 1);
  expect_line(s, "y");
  assert_int_equal(wd_xid_source_read_lines(s, NULL, NULL), FT_EINVAL);
  wd_xid_source_close(s);
}

static void test_open_errors(void **state) {
  wd_xid_source *s = (wd_xid_source *)0x1;
  char missing[160];
  snprintf(missing, sizeof missing, "%s/nope.log", dir);
  assert_int_equal(wd_xid_source_open(missing, 0, &s), FT_ENOENT);
  assert_null(s);
  assert_non_null(strstr(ft_err_detail(), "watchdog.xid_source"));
  assert_int_equal(wd_xid_source_open("", 0, &s), FT_EINVAL);
  assert_int_equal(wd_xid_source_open(dir, 0, &s), FT_EINVAL);
}

/* No read permission: FT_EBUSY with advice. As root, permission checks do
 * not apply, so the check runs in a child that drops to uid/gid 65534. */
static void test_no_permission(void **state) {
  char secret[160];
  snprintf(secret, sizeof secret, "%s/secret.log", dir);
  append(secret, "x\n");
  assert_int_equal(chmod(secret, 0000), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      _exit(77);
    if (geteuid() == 0)
      _exit(77);
    wd_xid_source *s = NULL;
    int rc = wd_xid_source_open(secret, 0, &s);
    if (rc != FT_EBUSY || s)
      _exit(1);
    if (!strstr(ft_err_detail(), "Xid detection is OFF") || !strstr(ft_err_detail(), "CAP_SYSLOG"))
      _exit(2);
    _exit(0);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77)
    skip();
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* /dev/kmsg: where it opens, it is a pollable record source whose lines
 * have no newline and reading never fails; where it does not, the error is
 * one of the documented ones. Nothing is written to the kernel log. */
static void test_kmsg(void **state) {
  wd_xid_source *s = NULL;
  int rc = wd_xid_source_open("/dev/kmsg", 0, &s);
  if (rc == FT_ENOENT || rc == FT_EBUSY) {
    assert_null(s);
    assert_true(strlen(ft_err_detail()) > 0);
    skip();
  }
  assert_int_equal(rc, FT_OK);
  assert_int_equal(wd_xid_source_is_kmsg(s), 1);
  assert_int_equal(wd_xid_source_pollable(s), 1);
  assert_true(wd_xid_source_fd(s) >= 0);
  for (int i = 0; i < 1000; i++) {
    const char *line;
    size_t len;
    rc = wd_xid_source_next_line(s, &line, &len);
    assert_true(rc == 0 || rc == 1);
    if (rc == 0)
      break;
    assert_null(memchr(line, '\n', len));
    assert_int_equal(strlen(line), len);
  }
  wd_xid_source_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tail_from_end),
      cmocka_unit_test(test_from_start_and_long_lines),
      cmocka_unit_test(test_sample_log_through_parser),
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_no_permission),
      cmocka_unit_test(test_kmsg),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
