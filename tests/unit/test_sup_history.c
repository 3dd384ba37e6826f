/* Unit tests of supervisor/sup_history.c: STATE/history.bin and the chart
 * data the dashboard draws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ft_err.h"
#include "sup_history.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64], g_path[128];

static int setup(void **st) {
  (void)st;
  snprintf(g_dir, sizeof g_dir, "/tmp/test_sup_history.XXXXXX");
  if (!mkdtemp(g_dir))
    return -1;
  snprintf(g_path, sizeof g_path, "%s/history.bin", g_dir);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  unlink(g_path);
  rmdir(g_dir);
  return 0;
}

static sup_hist_rec rec(double ts, int64_t step, float loss, float val) {
  return (sup_hist_rec){.ts = ts,
                        .step = step,
                        .loss = loss,
                        .val_loss = val,
                        .step_ms = 100,
                        .tokens_per_s = 1000,
                        .grad_norm = 0.5f,
                        .lr = 1e-3f};
}

static off_t size_of(const char *p) {
  struct stat s;
  return stat(p, &s) ? -1 : s.st_size;
}

/* records survive a close and a reopen, bit for bit, 40 bytes each */
static void test_roundtrip(void **st) {
  (void)st;
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  for (int i = 1; i <= 1000; i++) {
    sup_hist_rec r = rec(1e9 + i * 0.1, i, 5.0f / (float)i, i % 100 ? NAN : 1.5f);
    r.grad_norm = (float)i / 7, r.lr = i == 3 ? NAN : 1e-3f / (float)i;
    sup_history_add(h, &r);
  }
  assert_int_equal(sup_history_flush(h), FT_OK);
  sup_history_free(h);
  assert_int_equal(size_of(g_path), 16 + 1000 * 40);
  assert_int_equal(sup_history_open(g_path, 0, 0, &h), FT_OK);
  assert_int_equal(sup_history_version(h), 2);
  assert_int_equal(sup_history_count(h), 1000);
  assert_int_equal(sup_history_total(h), 1000);
  const sup_hist_rec *r = sup_history_recs(h);
  assert_true(r[499].step == 500 && r[499].loss == 5.0f / 500.0f && r[499].ts == 1e9 + 500 * 0.1);
  assert_true(isnan(r[498].val_loss) && r[499].val_loss == 1.5f);
  assert_true(r[499].grad_norm == 500.0f / 7 && r[499].lr == 1e-3f / 500.0f && isnan(r[2].lr));
  sup_history_free(h);
}

/* a torn last record (a crash mid-write) is cut off; a supervisor started
 * again appends */
static void test_torn_and_append(void **st) {
  (void)st;
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  for (int i = 1; i <= 10; i++) {
    sup_hist_rec r = rec(i, i, 1, NAN);
    sup_history_add(h, &r);
  }
  sup_history_free(h);
  int fd = open(g_path, O_WRONLY | O_APPEND);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "0123456789", 10), 10);
  close(fd);
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  assert_int_equal(sup_history_count(h), 10);
  assert_int_equal(size_of(g_path), 16 + 10 * 40);
  sup_hist_rec r = rec(11, 11, 1, NAN);
  sup_history_add(h, &r);
  sup_history_free(h);
  assert_int_equal(sup_history_open(g_path, 0, 0, &h), FT_OK);
  assert_int_equal(sup_history_count(h), 11);
  assert_true(sup_history_recs(h)[10].step == 11);
  sup_history_free(h);
}

/* a file that is not a history is named, never taken for an empty one */
static void test_not_a_history(void **st) {
  (void)st;
  FILE *f = fopen(g_path, "w");
  fputs("{\"ts\": 1, \"event\": \"step\"}\n", f);
  fclose(f);
  sup_history *h = NULL;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_EFORMAT);
  assert_null(h);
  assert_non_null(strstr(ft_err_detail(), g_path));
  assert_int_equal(size_of(g_path), 27); /* untouched */
  unlink(g_path);
  assert_int_equal(sup_history_open(g_path, 0, 0, &h), FT_ENOENT);
}

/* past mem_cap the memory copy keeps every second record (and every
 * validation loss); the file keeps all */
static void test_thinning(void **st) {
  (void)st;
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 64, &h), FT_OK);
  for (int i = 1; i <= 1000; i++) {
    sup_hist_rec r = rec(i, i, 1, i == 333 ? 2.0f : NAN);
    sup_history_add(h, &r);
  }
  assert_true(sup_history_count(h) <= 64);
  assert_int_equal(sup_history_total(h), 1000);
  int val = 0;
  for (size_t i = 0; i < sup_history_count(h); i++) {
    if (i)
      assert_true(sup_history_recs(h)[i].step > sup_history_recs(h)[i - 1].step);
    val += sup_history_recs(h)[i].step == 333;
  }
  assert_int_equal(val, 1);
  sup_history_free(h);
  assert_int_equal(size_of(g_path), 16 + 1000 * 40);
}

/* the chart: steps trained again replace the earlier ones (which become
 * "rolled back"), a spike survives thinning, rows are in step order */
static void test_series(void **st) {
  (void)st;
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  double t = 0;
  for (int i = 1; i <= 5000; i++) { /* a spike at 4321, rolled back to 4000 */
    sup_hist_rec r = rec(t += 0.1, i, i == 4321 ? 50.0f : 2.0f, i % 1000 ? NAN : 1.9f);
    sup_history_add(h, &r);
    if (i == 4321)
      break;
  }
  for (int i = 4001; i <= 5000; i++) {
    sup_hist_rec r = rec(t += 0.1, i, 1.5f, i % 1000 ? NAN : 1.4f);
    sup_history_add(h, &r);
  }
  cJSON *o = sup_history_series(h, 100);
  cJSON *rows = cJSON_GetObjectItem(o, "rows");
  int n = cJSON_GetArraySize(rows);
  assert_true(n > 50 && n <= 2 * 100 * 2 + 101);
  assert_int_equal(cJSON_GetObjectItem(o, "total")->valueint, 4321 + 1000);
  double prev = -1, spike = 0, after = 0;
  int vals = 0;
  cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    double step = cJSON_GetArrayItem(row, 0)->valuedouble;
    assert_true(step > prev);
    prev = step;
    cJSON *loss = cJSON_GetArrayItem(row, 1), *val = cJSON_GetArrayItem(row, 2);
    cJSON *rolled = cJSON_GetArrayItem(row, 3);
    if (cJSON_IsNumber(rolled) && rolled->valuedouble == 50)
      spike = step;
    if (step > 4000 && cJSON_IsNumber(loss))
      after += loss->valuedouble == 1.5 ? 0 : 1; /* the surviving timeline's */
    if (cJSON_IsNumber(val))
      vals++;
    /* the surviving loss is never the spike */
    assert_false(cJSON_IsNumber(loss) && loss->valuedouble == 50);
  }
  assert_true(spike == 4321);
  assert_true(after == 0);
  assert_int_equal(vals, 5); /* 1000, 2000, 3000, 4000 and the new 5000 */
  cJSON_Delete(o);
  sup_history_free(h);
}

/* a version 1 file (32-byte records, written before the grad norm and the
 * lr were kept) opens, charts with those columns null, and takes appended
 * records in its own format */
static void test_version1(void **st) {
  (void)st;
  uint8_t b[16 + 3 * 32] = {'F', 'T', 'H', 'I', 'S', 'T', 0, 0, 1, 0, 0, 0, 32, 0, 0, 0};
  for (int i = 0; i < 3; i++) {
    uint8_t *p = b + 16 + 32 * i;
    double ts = 1000 + i;
    int64_t step = i + 1;
    float f[4] = {2.0f - 0.1f * (float)i, NAN, 100, 1000};
    memcpy(p, &ts, 8), memcpy(p + 8, &step, 8), memcpy(p + 16, f, 16); /* little-endian host */
  }
  FILE *fp = fopen(g_path, "wb");
  assert_int_equal(fwrite(b, 1, sizeof b, fp), sizeof b);
  fclose(fp);
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  assert_int_equal(sup_history_version(h), 1);
  assert_int_equal(sup_history_count(h), 3);
  const sup_hist_rec *r = sup_history_recs(h);
  assert_true(r[2].step == 3 && r[2].loss == 1.8f && r[2].ts == 1002);
  assert_true(isnan(r[2].grad_norm) && isnan(r[2].lr));
  sup_hist_rec n = rec(1003, 4, 1.7f, NAN);
  sup_history_add(h, &n);
  sup_history_free(h);
  assert_int_equal(size_of(g_path), 16 + 4 * 32);
  assert_int_equal(sup_history_open(g_path, 0, 0, &h), FT_OK);
  assert_int_equal(sup_history_count(h), 4);
  cJSON *o = sup_history_series(h, 100);
  cJSON *rows = cJSON_GetObjectItem(o, "rows");
  assert_int_equal(cJSON_GetArraySize(rows), 4);
  cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    assert_int_equal(cJSON_GetArraySize(row), 9);
    assert_true(cJSON_IsNumber(cJSON_GetArrayItem(row, 1)));
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(row, 6)) &&
                cJSON_IsNull(cJSON_GetArrayItem(row, 7)));
    assert_true(cJSON_IsNumber(cJSON_GetArrayItem(row, 8))); /* ts */
  }
  assert_true(cJSON_GetArrayItem(cJSON_GetArrayItem(rows, 3), 4)->valuedouble == 1000); /* 1 s */
  cJSON_Delete(o);
  sup_history_free(h);
}

/* the chart rows carry each surviving step's grad norm, lr and time */
static void test_series_norm_lr(void **st) {
  (void)st;
  sup_history *h;
  assert_int_equal(sup_history_open(g_path, 1, 0, &h), FT_OK);
  for (int i = 1; i <= 10; i++) {
    sup_hist_rec r = rec(500 + i, i, 2, NAN);
    r.grad_norm = (float)i, r.lr = 0.25f * (float)i;
    sup_history_add(h, &r);
  }
  cJSON *o = sup_history_series(h, 100);
  cJSON *r5 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "rows"), 4);
  assert_true(cJSON_GetArrayItem(r5, 0)->valuedouble == 5);
  assert_true(cJSON_GetArrayItem(r5, 6)->valuedouble == 5);
  assert_true(cJSON_GetArrayItem(r5, 7)->valuedouble == 1.25);
  assert_true(cJSON_GetArrayItem(r5, 8)->valuedouble == 505);
  cJSON_Delete(o);
  sup_history_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torn_and_append, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_a_history, setup, teardown),
      cmocka_unit_test_setup_teardown(test_thinning, setup, teardown),
      cmocka_unit_test_setup_teardown(test_series, setup, teardown),
      cmocka_unit_test_setup_teardown(test_version1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_series_norm_lr, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
