/* Unit tests of supervisor/sup_shardq.c: SHARD_SAVED envelopes parsed off
 * the loop, handed back to it in arrival order, each checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt_int.h"
#include "sup_shardq.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rank rank's envelope at step (a shard of one 16-byte part), as the worker
 * sends it; level "memory" if memory. */
static char *envelope(int64_t step, int rank, int memory, double loss) {
  ckpt_chunk_ref c = {.offset = (uint64_t)rank * 16, .len = 16, .stored = 16};
  memset(c.hash, 0x5a, sizeof c.hash);
  char name[] = "param/x";
  ckpt_tensor t = {.name = name, .ndim = 1, .offset = (uint64_t)rank * 16, .len = 16};
  snprintf(t.dtype, sizeof t.dtype, "f32");
  t.shape[0] = 64;
  t.chunks = &c;
  t.nchunks = t.cap = 1;
  char run[] = "r";
  ckpt_shard sh = {.run = run, .step = step, .rank = rank, .world = 4, .parts = &t, .nparts = 1};
  char *sj = ckpt_shard_to_json(&sh);
  assert_non_null(sj);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "shard", sj);
  if (memory)
    cJSON_AddStringToObject(o, "level", "memory");
  cJSON_AddStringToObject(o, "state", "{\"step\":7}");
  cJSON_AddNumberToObject(o, "loss", loss);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  free(sj);
  return txt;
}

static sup_shard_job *job(int64_t step, int rank, char *text) {
  sup_shard_job *j = calloc(1, sizeof *j);
  assert_non_null(j);
  j->gen = 3;
  j->step = step;
  j->rank = rank;
  j->text = text;
  return j;
}

static void test_parse_good(void **st) {
  (void)st;
  sup_shard_job *j = job(7, 2, envelope(7, 2, 1, 2.5));
  sup_shard_parse(j);
  assert_string_equal(j->why, "");
  assert_non_null(j->sh);
  assert_int_equal(ckpt_shard_rank(j->sh), 2);
  assert_int_equal(ckpt_shard_step(j->sh), 7);
  assert_int_equal(j->level, CKPT_LEVEL_MEMORY);
  assert_string_equal(j->state, "{\"step\":7}");
  assert_null(j->config);
  assert_true(j->loss == 2.5);
  assert_null(j->text); /* freed once parsed */
  sup_shard_job_free(j);
}

/* A manifest of another step or rank, no shard, or text that is not JSON:
 * each named, and no shard kept. */
static void test_parse_bad(void **st) {
  (void)st;
  struct {
    int64_t step;
    int rank;
    char *text;
    const char *why;
  } cases[] = {
      {8, 2, envelope(7, 2, 0, 1), "shard manifest is of step 7 rank 2"},
      {7, 1, envelope(7, 2, 0, 1), "shard manifest is of step 7 rank 2"},
      {7, 2, strdup("{\"state\":\"{}\"}"), "without a \"shard\""},
      {7, 2, strdup("{\"shard\":\"{not json\"}"), "bad shard manifest"},
      {7, 2, strdup("\x01\x02"), "without a \"shard\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sup_shard_job *j = job(cases[i].step, cases[i].rank, cases[i].text);
    sup_shard_parse(j);
    if (!strstr(j->why, cases[i].why))
      fail_msg("case %zu: '%s', wanted '%s'", i, j->why, cases[i].why);
    assert_null(j->sh);
    assert_int_equal(j->level, CKPT_LEVEL_DURABLE);
    assert_true(isnan(j->loss));
    sup_shard_job_free(j);
  }
}

typedef struct seen {
  struct event_base *base;
  int n, want;
  int rank[64];
  int ok[64];
} seen;

static void on_done(void *ud, sup_shard_job *j) {
  seen *s = ud;
  assert_true(s->n < 64);
  assert_null(j->text);
  s->rank[s->n] = j->rank;
  s->ok[s->n] = j->why[0] == 0 && j->sh != NULL;
  s->n++;
  sup_shard_job_free(j);
  if (s->n == s->want)
    event_base_loopbreak(s->base);
}

/* Forty reports, every fifth bad: all come back on the loop, parsed, in
 * the order they were pushed. */
static void test_queue_order(void **st) {
  (void)st;
  seen s = {.base = event_base_new(), .want = 40};
  assert_non_null(s.base);
  sup_shardq *q = NULL;
  assert_int_equal(sup_shardq_new(s.base, on_done, &s, &q), 0);
  for (int i = 0; i < s.want; i++) {
    int rank = i % 4;
    char *t = i % 5 == 4 ? strdup("{}") : envelope(i, rank, 0, 1.0);
    sup_shardq_push(q, job(i, rank, t));
  }
  struct timeval limit = {30, 0};
  event_base_loopexit(s.base, &limit);
  event_base_dispatch(s.base);
  assert_int_equal(s.n, s.want);
  for (int i = 0; i < s.want; i++) {
    assert_int_equal(s.rank[i], i % 4);
    assert_int_equal(s.ok[i], i % 5 != 4);
  }
  assert_int_equal(sup_shardq_len(q), 0);
  sup_shardq_free(q);
  event_base_free(s.base);
}

/* Freed with reports still queued: they are dropped, nothing is reported
 * after free, and nothing leaks (the sanitizer build checks). */
static void test_free_with_queued(void **st) {
  (void)st;
  seen s = {.base = event_base_new(), .want = 1000};
  sup_shardq *q = NULL;
  assert_int_equal(sup_shardq_new(s.base, on_done, &s, &q), 0);
  for (int i = 0; i < 200; i++)
    sup_shardq_push(q, job(i, 0, envelope(i, 0, 0, 1.0)));
  assert_true(sup_shardq_len(q) > 0);
  sup_shardq_free(q);
  assert_int_equal(s.n, 0);
  event_base_free(s.base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_good),
      cmocka_unit_test(test_parse_bad),
      cmocka_unit_test(test_queue_order),
      cmocka_unit_test(test_free_with_queued),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
