/*
 * test_adamw_runs: the one AdamW walk (worker/gpt2.h gpt2_adamw_runs) that
 * the CPU trainer, FSDP and the CUDA engine share.
 *
 * Whole model: the runs tile [0, nparams) in order, with decay on the
 * embeddings (wte, wpe) and none on the final LayerNorm. Sharded, at world
 * sizes 1 to 5 and for every rank: the runs lie inside the rank's shard, in
 * order, without overlap; mapped back to the model (through shardmap's own
 * range of each group) every parameter is updated by exactly one rank and
 * with the same decay as in the whole-model walk. A callback's error stops
 * the walk at once and is returned.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ft_err.h"
#include "ft_gpt2.h"
#include "gpt2.h"
#include "shardmap.h"

static const ft_gpt2_dims D = {.max_seq_len = 8,
                               .vocab_size = 10,
                               .padded_vocab_size = 128,
                               .n_layer = 3,
                               .n_head = 2,
                               .channels = 6};
static const float WD = 0.25f;

typedef struct run {
  size_t off, n;
  float wd;
} run;

typedef struct runs {
  run *v;
  size_t n, cap;
  int stop_after; /* > 0: return FT_EIO from that call on */
} runs;

static int record(void *ud, size_t off, size_t n, float wd) {
  runs *r = ud;
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    r->v = realloc(r->v, r->cap * sizeof *r->v);
    assert_non_null(r->v);
  }
  r->v[r->n++] = (run){off, n, wd};
  return r->stop_after && (int)r->n >= r->stop_after ? FT_EIO : FT_OK;
}

/* Decay per parameter from the whole-model walk: 1 decayed, 0 not. */
static signed char *whole_model(size_t *np) {
  size_t n = ft_gpt2_num_params(&D);
  runs r = {0};
  assert_int_equal(gpt2_adamw_runs(&D, NULL, WD, record, &r), FT_OK);
  signed char *dec = malloc(n);
  assert_non_null(dec);
  size_t at = 0;
  for (size_t i = 0; i < r.n; i++) {
    assert_int_equal(r.v[i].off, at); /* contiguous, in order */
    assert_true(r.v[i].n > 0);
    assert_true(r.v[i].wd == WD || r.v[i].wd == 0.0f);
    memset(dec + at, r.v[i].wd == WD, r.v[i].n);
    at += r.v[i].n;
  }
  assert_int_equal(at, n);
  free(r.v);
  *np = n;
  return dec;
}

static void test_whole_model(void **state) {
  (void)state;
  size_t n;
  signed char *dec = whole_model(&n);
  int ng = ft_gpt2_ngroups(&D);
  for (int g = 0; g < ng; g++) {
    size_t o = ft_gpt2_group_offset(&D, g), k = ft_gpt2_group_numel(&D, g);
    for (size_t i = 0; i < k; i++) {
      if (g < 2) /* wte, wpe */
        assert_int_equal(dec[o + i], 1);
      if (g == ng - 1) /* lnf */
        assert_int_equal(dec[o + i], 0);
    }
  }
  free(dec);
}

static void test_sharded(void **state) {
  (void)state;
  size_t n;
  signed char *dec = whole_model(&n);
  for (int world = 1; world <= 5; world++) {
    int *hits = calloc(n, sizeof *hits);
    assert_non_null(hits);
    for (int rank = 0; rank < world; rank++) {
      shardmap sm;
      assert_int_equal(shardmap_init(&sm, &D, rank, world), FT_OK);
      runs r = {0};
      assert_int_equal(gpt2_adamw_runs(&D, &sm, WD, record, &r), FT_OK);
      size_t end = 0;
      for (size_t i = 0; i < r.n; i++) {
        const run *x = &r.v[i];
        assert_true(x->n > 0);
        assert_true(x->off >= end); /* in order, no overlap */
        end = x->off + x->n;
        assert_true(end <= sm.shard_n);
        int g = 0; /* the group whose shard slice holds x */
        while (g + 1 < sm.ngroups && sm.shoff[g + 1] <= x->off)
          g++;
        assert_true(x->off + x->n <= sm.shoff[g] + shardmap_own_count(&sm, g));
        size_t first =
            ft_gpt2_group_offset(&D, g) + shardmap_own_begin(&sm, g) + (x->off - sm.shoff[g]);
        for (size_t j = 0; j < x->n; j++) {
          hits[first + j]++;
          assert_int_equal(x->wd == WD, dec[first + j]);
        }
      }
      free(r.v);
      shardmap_release(&sm);
    }
    for (size_t i = 0; i < n; i++)
      assert_int_equal(hits[i], 1);
    free(hits);
  }
  free(dec);
}

static void test_stops_on_error(void **state) {
  (void)state;
  runs r = {.stop_after = 3};
  assert_int_equal(gpt2_adamw_runs(&D, NULL, WD, record, &r), FT_EIO);
  assert_int_equal(r.n, 3);
  free(r.v);
  shardmap sm;
  assert_int_equal(shardmap_init(&sm, &D, 1, 2), FT_OK);
  runs s = {.stop_after = 2};
  assert_int_equal(gpt2_adamw_runs(&D, &sm, WD, record, &s), FT_EIO);
  assert_int_equal(s.n, 2);
  free(s.v);
  shardmap_release(&sm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whole_model),
      cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_stops_on_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
