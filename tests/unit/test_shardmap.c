/*
 * test_shardmap: FSDP shard geometry and its checkpoint parts
 * (worker/shardmap.c), shared by the CPU and CUDA engines.
 *
 * For world sizes 1..7 on a small GPT-2 whose groups are not multiples of
 * most of them: the ranks' ranges of each group are disjoint, in rank order
 * and cover it exactly; a shard taken from a full array holds exactly the
 * owned elements (padding zero); the parts describe those bytes at the
 * right logical offsets (so reassembling every rank's parts gives the full
 * array back); shardmap_clip of any segment, summed over ranks, is the
 * segment, and points at the same elements as the shard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"
#include "ft_gpt2.h"
#include "shardmap.h"

static const ft_gpt2_dims D = {.max_seq_len = 8,
                               .vocab_size = 10,
                               .padded_vocab_size = 128,
                               .n_layer = 3,
                               .n_head = 2,
                               .channels = 6};

static float *full_array(size_t *n) {
  *n = ft_gpt2_num_params(&D);
  float *x = malloc(*n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < *n; i++)
    x[i] = (float)(i + 1); /* every value distinct and non-zero */
  return x;
}

static void test_ranges_cover(void **state) {
  (void)state;
  for (int W = 1; W <= 7; W++) {
    shardmap sm[7];
    for (int r = 0; r < W; r++)
      assert_int_equal(shardmap_init(&sm[r], &D, r, W), FT_OK);
    for (int g = 0; g < sm[0].ngroups; g++) {
      size_t next = 0;
      for (int r = 0; r < W; r++) {
        size_t b = shardmap_own_begin(&sm[r], g), c = shardmap_own_count(&sm[r], g);
        assert_true(c <= sm[r].S[g]);
        if (c)
          assert_int_equal(b, next);
        next += c;
      }
      assert_int_equal(next, ft_gpt2_group_numel(&D, g));
    }
    for (int r = 0; r < W; r++)
      shardmap_release(&sm[r]);
  }
}

static void test_take_and_parts(void **state) {
  (void)state;
  size_t n;
  float *full = full_array(&n);
  for (int W = 1; W <= 7; W++) {
    float *back = calloc(n, sizeof *back);
    assert_non_null(back);
    for (int r = 0; r < W; r++) {
      shardmap sm;
      assert_int_equal(shardmap_init(&sm, &D, r, W), FT_OK);
      float *sh = malloc(sm.shard_n * sizeof *sh);
      assert_non_null(sh);
      shardmap_take(&sm, full, sh);
      size_t owned = 0;
      for (int g = 0; g < sm.ngroups; g++) {
        size_t c = shardmap_own_count(&sm, g);
        for (size_t i = 0; i < sm.S[g]; i++) /* padding slots are zero */
          if (i >= c)
            assert_true(sh[sm.shoff[g] + i] == 0.0f);
        owned += c;
      }
      int np = shardmap_nparts(&sm);
      ckpt_part *parts = calloc((size_t)np + 1, sizeof *parts);
      char(*names)[64] = calloc((size_t)np + 1, sizeof *names);
      assert_non_null(parts);
      assert_non_null(names);
      const float *const src[3] = {sh, sh, sh};
      assert_int_equal(shardmap_parts(&sm, src, parts, names), np);
      size_t bytes = 0;
      for (int k = 0; k < np; k++) {
        int g = -1;
        char gname[32];
        for (int gg = 0; gg < sm.ngroups; gg++)
          if (strstr(parts[k].tensor, ft_gpt2_group_name(&D, gg, gname, sizeof gname)) &&
              strchr(parts[k].tensor, '/') && strcmp(strchr(parts[k].tensor, '/') + 1, gname) == 0)
            g = gg;
        assert_true(g >= 0);
        assert_int_equal(parts[k].shape[0], (int64_t)ft_gpt2_group_numel(&D, g));
        assert_int_equal(parts[k].offset % sizeof(float), 0);
        if (strncmp(parts[k].tensor, "param/", 6) == 0) /* reassemble the params */
          memcpy(back + ft_gpt2_group_offset(&D, g) + parts[k].offset / sizeof(float),
                 parts[k].data, parts[k].len);
        bytes += parts[k].len;
      }
      assert_int_equal(bytes, 3 * owned * sizeof(float));
      free(parts);
      free(names);
      free(sh);
      shardmap_release(&sm);
    }
    assert_memory_equal(back, full, n * sizeof *full);
    free(back);
  }
  free(full);
}

static void test_clip(void **state) {
  (void)state;
  size_t n;
  float *full = full_array(&n);
  for (int W = 1; W <= 7; W++) {
    for (int g = 0; g < ft_gpt2_ngroups(&D); g++) {
      size_t numel = ft_gpt2_group_numel(&D, g);
      /* a few segments, including empty ones and ones at both ends */
      size_t segs[][2] = {{0, numel}, {0, 1}, {numel - 1, 1}, {3, numel / 2}, {numel / 3, 0}};
      for (size_t s = 0; s < sizeof segs / sizeof segs[0]; s++) {
        size_t off = segs[s][0], len = segs[s][1], total = 0;
        for (int r = 0; r < W; r++) {
          shardmap sm;
          assert_int_equal(shardmap_init(&sm, &D, r, W), FT_OK);
          float *sh = malloc(sm.shard_n * sizeof *sh);
          assert_non_null(sh);
          shardmap_take(&sm, full, sh);
          size_t o, c = shardmap_clip(&sm, g, off, len, &o);
          for (size_t i = 0; i < c; i++) { /* the clipped run is inside the segment */
            float v = sh[o + i];
            size_t idx = (size_t)v - 1 - ft_gpt2_group_offset(&D, g);
            assert_true(idx >= off && idx < off + len);
          }
          total += c;
          free(sh);
          shardmap_release(&sm);
        }
        assert_int_equal(total, len);
      }
    }
  }
  free(full);
}

static void test_bad_rank(void **state) {
  (void)state;
  shardmap sm;
  assert_int_equal(shardmap_init(&sm, &D, 2, 2), FT_EINVAL);
  assert_int_equal(shardmap_init(&sm, &D, -1, 2), FT_EINVAL);
  assert_int_equal(shardmap_init(&sm, &D, 0, 0), FT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranges_cover),
      cmocka_unit_test(test_take_and_parts),
      cmocka_unit_test(test_clip),
      cmocka_unit_test(test_bad_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
