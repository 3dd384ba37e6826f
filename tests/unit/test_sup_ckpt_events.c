/* Unit tests of supervisor/sup_ckpt_events.c: the events that say a
 * checkpoint failed or was not marked, as events.jsonl lines and human
 * lines (real sup_events in a temp dir). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sup_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs emit on a fresh log; returns the one line written, parsed, and the
 * human line in human (size n). */
static cJSON *one_event(void (*emit)(sup *), char *human, size_t n) {
  char dir[] = "/tmp/test_sup_ckpt_events.XXXXXX", path[256], line[2048];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/events.jsonl", dir);
  FILE *hf = tmpfile();
  assert_non_null(hf);
  sup *s = calloc(1, sizeof *s);
  assert_non_null(s);
  assert_int_equal(sup_events_open(path, hf, &s->ev), 0);
  emit(s);
  sup_events_free(s->ev);
  free(s);
  rewind(hf);
  assert_non_null(fgets(human, (int)n, hf));
  fclose(hf);
  FILE *fp = fopen(path, "r");
  assert_non_null(fp);
  assert_non_null(fgets(line, sizeof line, fp));
  assert_null(fgets(line + 1024, 1024, fp)); /* exactly one */
  fclose(fp);
  unlink(path);
  rmdir(dir);
  cJSON *o = cJSON_Parse(line);
  assert_non_null(o);
  return o;
}

static void emit_mark(sup *s) {
  sup_event_mark_failed(s, 150, "GOOD", "rename manifests/r/150.mark: Input/output error");
}

static void test_mark_failed(void **st) {
  char human[1024];
  cJSON *o = one_event(emit_mark, human, sizeof human);
  assert_string_equal(cJSON_GetObjectItem(o, "event")->valuestring, "checkpoint_mark_failed");
  assert_int_equal(cJSON_GetObjectItem(o, "step")->valueint, 150);
  assert_string_equal(cJSON_GetObjectItem(o, "mark")->valuestring, "GOOD");
  assert_string_equal(cJSON_GetObjectItem(o, "reason")->valuestring,
                      "rename manifests/r/150.mark: Input/output error");
  assert_non_null(strstr(human, "checkpoint_mark_failed: step 150 could not be marked GOOD"));
  cJSON_Delete(o);
}

static void emit_storage(sup *s) {
  sup_event_checkpoint_failed(s, 40, 1, -1, "storage", "/st/store/chunks/ab: No space left");
}

static void test_checkpoint_failed(void **st) {
  char human[1024];
  cJSON *o = one_event(emit_storage, human, sizeof human);
  assert_string_equal(cJSON_GetObjectItem(o, "event")->valuestring, "checkpoint_failed");
  assert_int_equal(cJSON_GetObjectItem(o, "step")->valueint, 40);
  assert_int_equal(cJSON_GetObjectItem(o, "rank")->valueint, 1);
  assert_null(cJSON_GetObjectItem(o, "missing")); /* only when ranks never reported */
  assert_string_equal(cJSON_GetObjectItem(o, "cause")->valuestring, "storage");
  assert_non_null(strstr(human, "checkpoint_failed: step 40 rank 1: /st/store/chunks/ab"));
  cJSON_Delete(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mark_failed),
      cmocka_unit_test(test_checkpoint_failed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
