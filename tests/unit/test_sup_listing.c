/*
 * test_sup_listing: the run's s3:// data listing kept with its checkpoints
 * (supervisor/sup_listing.c) against a real local store:
 *  - sup_listing_text: none while the file is absent; the file's JSON
 *    compacted; the cache follows the file when it changes; a file that is
 *    not JSON gives none (the commit goes on without it);
 *  - sup_listing_restore at a resume: the checkpoint's listing written to
 *    a state directory that has none; a file with the same JSON (formatted
 *    otherwise) left alone; a different one replaced, kept as FILE.old,
 *    with a warning; --relist-data moves the file aside and writes nothing;
 *    a checkpoint without a listing, or no checkpoint, leaves the file as
 *    it is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "sup_listing.h"
#include "test_ckpt_util.h"

#include <cjson/cJSON.h>
#include <unistd.h>

typedef struct fx {
  char *dir, *uri;
  ckpt_store *s;
  char path[4200], old[4300];
  sup_listing *l;
  float w[256];
} fx;

static const char *LIST_A = "{\"version\": 1, \"patterns\": {\"s3://b/d/*.bin\": "
                            "{\"objects\": [{\"key\": \"d/a.bin\", \"etag\": \"\\\"1\\\"\"}]}}}";
static const char *LIST_B = "{\"version\": 1, \"patterns\": {\"s3://b/d/*.bin\": "
                            "{\"objects\": [{\"key\": \"d/0.bin\", \"etag\": \"\\\"2\\\"\"}]}}}";

static int setup(void **st) {
  fx *f = calloc(1, sizeof *f);
  ckpt_store_opts o = {.chunk_mib = 1};
  if (!f || tu_store_open(&f->dir, &f->uri, &f->s, &o))
    return -1;
  snprintf(f->path, sizeof f->path, "%s/data_listing.json", f->dir);
  snprintf(f->old, sizeof f->old, "%s.old", f->path);
  tu_fill(f->w, 256, 3);
  if (sup_listing_new(f->path, &f->l))
    return -1;
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fx *f = *st;
  sup_listing_free(f->l);
  tu_store_close(f->dir, f->uri, f->s);
  free(f);
  return 0;
}

static void put_file(const char *path, const char *text) {
  FILE *o = fopen(path, "w");
  assert_non_null(o);
  assert_int_equal(fputs(text, o) >= 0, 1);
  assert_int_equal(fclose(o), 0);
}

/* The whole file, or NULL when it is absent (caller frees). */
static char *get_file(const char *path) {
  FILE *i = fopen(path, "r");
  if (!i)
    return NULL;
  char *t = calloc(1, 1 << 16);
  assert_non_null(t);
  size_t n = fread(t, 1, (1 << 16) - 1, i);
  t[n] = 0;
  fclose(i);
  return t;
}

/* Checkpoint `step` of run "run", carrying data (NULL: no listing). */
static void commit(fx *f, int64_t step, const char *data) {
  ckpt_part p = tu_part("param/t", f->w, 256, 0, 256);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(f->s, "run", step, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  ckpt_meta m = {.run = "run", .step = step, .parent_step = -1, .world = 1, .data_json = data};
  assert_int_equal(ckpt_store_commit(f->s, &m, &sh, 1), FT_OK);
  ckpt_shard_free(sh);
}

/* The JSON of a and b is the same (whatever the formatting). */
static int same(const char *a, const char *b) {
  cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
  int eq = x && y && cJSON_Compare(x, y, 1);
  cJSON_Delete(x);
  cJSON_Delete(y);
  return eq;
}

static void test_text(void **st) {
  fx *f = *st;
  assert_null(sup_listing_text(f->l)); /* no file yet: the commit carries none */
  put_file(f->path, LIST_A);
  char *t = sup_listing_text(f->l);
  assert_non_null(t);
  assert_true(same(t, LIST_A));
  assert_null(strpbrk(t, " \t\n")); /* compact */
  free(t);
  /* a new file (temp + rename, as the workers write it): read again */
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", f->path);
  put_file(tmp, LIST_B);
  assert_int_equal(rename(tmp, f->path), 0);
  t = sup_listing_text(f->l);
  assert_true(t && same(t, LIST_B));
  free(t);
  put_file(f->path, "not json {");
  assert_null(sup_listing_text(f->l));
  unlink(f->path);
  assert_null(sup_listing_text(f->l));
}

static void test_restore(void **st) {
  fx *f = *st;
  FILE *err = tmpfile();
  assert_non_null(err);
  sup_listing_outcome o;
  commit(f, 10, LIST_A);
  commit(f, 20, NULL); /* a checkpoint older than listings (none carried) */

  /* a fresh state directory: the checkpoint's listing is written */
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 10, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "checkpoint");
  assert_int_equal(o.replaced, 0);
  char *t = get_file(f->path);
  assert_true(t && same(t, LIST_A));
  free(t);

  /* the same JSON, formatted otherwise: left as it is */
  put_file(f->path,
           "{\n  \"patterns\": {\"s3://b/d/*.bin\": {\"objects\": [{\"etag\": \"\\\"1\\\"\", "
           "\"key\": \"d/a.bin\"}]}},\n  \"version\": 1\n}\n");
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 10, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "state");
  assert_int_equal(o.replaced, 0);
  assert_int_equal(access(f->old, F_OK), -1);

  /* a different one: the checkpoint's wins, the old kept */
  put_file(f->path, LIST_B);
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 10, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "checkpoint");
  assert_int_equal(o.replaced, 1);
  t = get_file(f->path);
  assert_true(t && same(t, LIST_A));
  free(t);
  t = get_file(f->old);
  assert_true(t && same(t, LIST_B));
  free(t);

  /* --relist-data: moved aside, nothing written */
  unlink(f->old);
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 10, 1, err, &o), FT_OK);
  assert_string_equal(o.source, "relist");
  assert_int_equal(access(f->path, F_OK), -1);
  t = get_file(f->old);
  assert_true(t && same(t, LIST_A));
  free(t);

  /* a checkpoint without a listing, or none to resume from: as it is */
  put_file(f->path, LIST_B);
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 20, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "state");
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", -1, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "state");
  t = get_file(f->path);
  assert_true(t && same(t, LIST_B));
  free(t);
  unlink(f->path);
  assert_int_equal(sup_listing_restore(f->l, f->s, "run", 20, 0, err, &o), FT_OK);
  assert_string_equal(o.source, "none");
  assert_int_equal(access(f->path, F_OK), -1);

  /* what it said: the write and the warning */
  rewind(err);
  char said[8192] = "";
  size_t n = fread(said, 1, sizeof said - 1, err);
  said[n] = 0;
  fclose(err);
  assert_non_null(strstr(said, "data listing of checkpoint 10 written to"));
  assert_non_null(strstr(said, "warning"));
  assert_non_null(strstr(said, "--relist-data"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_text, setup, teardown),
      cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
