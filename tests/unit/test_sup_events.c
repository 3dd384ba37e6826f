/* Unit tests of supervisor/sup_events.c: events.jsonl lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_events.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_format(void **st) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "node", 1);
  cJSON_AddStringToObject(f, "kind", "process_exit \"quoted\"\n");
  cJSON_AddStringToObject(f, "event", "must not override");
  char *line = sup_events_format(1700000000.1234, "fault_detected", f);
  cJSON_Delete(f);
  assert_non_null(line);
  size_t n = strlen(line);
  assert_true(n > 2 && line[n - 1] == '\n');
  assert_null(memchr(line, '\n', n - 1)); /* one line */
  cJSON *o = cJSON_Parse(line);
  assert_non_null(o);
  assert_string_equal(cJSON_GetObjectItem(o, "event")->valuestring, "fault_detected");
  double ts = cJSON_GetObjectItem(o, "ts")->valuedouble;
  assert_true(ts > 1700000000.122 && ts < 1700000000.124);
  assert_int_equal(cJSON_GetObjectItem(o, "node")->valueint, 1);
  assert_string_equal(cJSON_GetObjectItem(o, "kind")->valuestring, "process_exit \"quoted\"\n");
  assert_true(strncmp(line, "{\"ts\":", 6) == 0); /* ts first, then event */
  cJSON_Delete(o);
  free(line);
}

static void test_emit_appends(void **st) {
  char dir[] = "/tmp/test_sup_events.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/events.jsonl", dir);
  FILE *human = tmpfile();
  sup_events *ev;
  assert_int_equal(sup_events_open(path, human, &ev), 0);
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", 25);
  assert_int_equal(sup_events_emit(ev, "checkpoint_committed", f, "step %d", 25), 0);
  assert_int_equal(sup_events_emit(ev, "run_done", NULL, NULL), 0);
  sup_events_free(ev);
  /* reopen: appends, never truncates */
  assert_int_equal(sup_events_open(path, NULL, &ev), 0);
  assert_int_equal(sup_events_emit(ev, "run_started", cJSON_CreateObject(), NULL), 0);
  sup_events_free(ev);

  FILE *fp = fopen(path, "r");
  assert_non_null(fp);
  char buf[1024];
  const char *want[] = {"checkpoint_committed", "run_done", "run_started"};
  int k = 0;
  while (fgets(buf, sizeof buf, fp)) {
    assert_true(k < 3);
    cJSON *o = cJSON_Parse(buf);
    assert_non_null(o);
    assert_string_equal(cJSON_GetObjectItem(o, "event")->valuestring, want[k]);
    if (k == 0)
      assert_int_equal(cJSON_GetObjectItem(o, "step")->valueint, 25);
    cJSON_Delete(o);
    k++;
  }
  assert_int_equal(k, 3);
  fclose(fp);
  rewind(human);
  assert_non_null(fgets(buf, sizeof buf, human));
  assert_non_null(strstr(buf, "checkpoint_committed: step 25"));
  assert_true(buf[0] == '[');
  fclose(human);
  unlink(path);
  rmdir(dir);
}

static void test_open_fails_cleanly(void **st) {
  sup_events *ev = (sup_events *)1;
  assert_true(sup_events_open("/nonexistent-dir/x/events.jsonl", NULL, &ev) < 0);
  assert_null(ev);
  sup_events_free(NULL);
}

/* A flood of 1000 lines in one second writes `burst` of them; the next
 * line allowed (or the flush after the window) carries the count left out. */
static void test_ratelimit(void **st) {
  sup_ratelimit rl = {.window_s = 1.0, .burst = 3};
  long sup = -1;
  int allowed = 0;
  for (int i = 0; i < 1000; i++) {
    allowed += sup_ratelimit_allow(&rl, 10.0 + i * 1e-4, &sup);
    if (i < 3)
      assert_int_equal(sup, 0);
  }
  assert_int_equal(allowed, 3);
  assert_int_equal(sup_ratelimit_flush(&rl, 10.5), 0); /* window not over */
  assert_true(sup_ratelimit_allow(&rl, 11.2, &sup));
  assert_int_equal(sup, 997);
  /* the count goes out once, by flush when no line follows */
  for (int i = 0; i < 10; i++)
    sup_ratelimit_allow(&rl, 11.3, &sup);
  assert_int_equal(sup_ratelimit_flush(&rl, 12.0), 0); /* 11.2's window is not over */
  assert_int_equal(sup_ratelimit_flush(&rl, 12.3), 8);
  assert_int_equal(sup_ratelimit_flush(&rl, 14.0), 0);
  /* the flushed line used the new window's first slot */
  assert_true(sup_ratelimit_allow(&rl, 12.4, &sup));
  assert_true(sup_ratelimit_allow(&rl, 12.5, &sup));
  assert_false(sup_ratelimit_allow(&rl, 12.6, &sup));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format),
      cmocka_unit_test(test_emit_appends),
      cmocka_unit_test(test_open_fails_cleanly),
      cmocka_unit_test(test_ratelimit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
