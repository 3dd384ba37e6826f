/*
 * test_sdc: the silent-data-corruption check (worker/sdc.c and the CPU
 * engine's hashing, docs/design.md §6).
 *
 *  - the verdict: one bad rank among 3, 4 and 8 (one rank per node, and
 *    2 per node: the recomputer on another node) is named from the hashes
 *    its corruption changes (its own and its recomputation of a
 *    neighbour's); two nodes, or three different answers: no majority;
 *    all equal: nothing differs;
 *  - the hashes cross an all-reduce of doubles exactly (sdc_pack);
 *  - the real CPU engine (world 1): a micro-batch's armed hash equals its
 *    recomputation's for 100 different batches (no false alarm), the
 *    recomputation leaves the step's loss and gradients alone, and a
 *    flipped gradient bit (engine_corrupt, the failpoint's path) changes
 *    the hash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "ft_err.h"
#include "ft_gpt2.h"
#include "sdc.h"

/* The hashes a gang of W ranks (s apart) would see when rank `bad`
 * computes wrong (-1: nobody): own[r] is r's, re1[x] x's recomputation of
 * x - s's, re2[x] of x - 2s's. A healthy rank's answer for rank r's
 * micro-batch is 1000 + r; a bad one's anything else. */
static void gang(int W, int s, int bad, uint64_t *own, uint64_t *re1, uint64_t *re2) {
  for (int x = 0; x < W; x++) {
    own[x] = x == bad ? 7 : 1000 + (uint64_t)x;
    int a1 = (x - s + W) % W, a2 = (x - 2 * s + 2 * W) % W;
    re1[x] = x == bad ? 8 : 1000 + (uint64_t)a1;
    re2[x] = x == bad ? 9 : 1000 + (uint64_t)a2;
  }
}

static void test_names_the_bad_rank(void **state) {
  (void)state;
  const struct { int W, G; } shapes[] = {{3, 1}, {4, 1}, {8, 1}, {6, 2}, {8, 2}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int W = shapes[i].W, s = sdc_stride(W, shapes[i].G);
    assert_int_equal(s, shapes[i].G);
    for (int bad = 0; bad < W; bad++) {
      uint64_t own[8], re1[8], re2[8];
      char d[512];
      gang(W, s, bad, own, re1, re2);
      int first;
      assert_int_equal(sdc_mismatches(own, re1, W, s, &first), 2);
      assert_int_equal(sdc_judge(own, re1, re2, W, s, 9, 0, d, sizeof d), bad);
      char want[32];
      snprintf(want, sizeof want, "rank %d computes wrong", bad);
      assert_true(strncmp(d, want, strlen(want)) == 0);
    }
  }
}

static void test_no_majority(void **state) {
  (void)state;
  uint64_t own[4], re1[4], re2[4];
  char d[512];
  int first;
  /* two nodes: the third recomputer would be the rank itself */
  gang(2, 1, 1, own, re1, re2);
  assert_int_equal(sdc_mismatches(own, re1, 2, 1, &first), 2);
  assert_int_equal(sdc_judge(own, re1, re2, 2, 1, 9, 0, d, sizeof d), -1);
  assert_non_null(strstr(d, "no majority"));
  assert_non_null(strstr(d, "no third rank"));
  /* two nodes of two ranks each: the recomputer is on the other node */
  assert_int_equal(sdc_stride(4, 2), 2);
  gang(4, 2, 3, own, re1, re2);
  assert_int_equal(sdc_judge(own, re1, re2, 4, 2, 9, 0, d, sizeof d), -1);
  /* three different answers for rank 0's micro-batch */
  gang(3, 1, -1, own, re1, re2);
  re1[1] = 5;
  re2[2] = 6;
  assert_int_equal(sdc_mismatches(own, re1, 3, 1, &first), 1);
  assert_int_equal(first, 0);
  assert_int_equal(sdc_judge(own, re1, re2, 3, 1, 9, 0, d, sizeof d), -1);
  /* healthy: nothing differs */
  gang(3, 1, -1, own, re1, re2);
  assert_int_equal(sdc_mismatches(own, re1, 3, 1, &first), 0);
  assert_int_equal(first, -1);
  /* one node (W <= G): the neighbour is the next rank */
  assert_int_equal(sdc_stride(4, 8), 1);
}

static void test_pack_sums_exactly(void **state) {
  (void)state;
  const uint64_t h[3] = {0xffffffffffffffffull, 0x8000000000000001ull, SDC_HASH_INIT};
  double sum[6] = {0};
  for (int r = 0; r < 3; r++) { /* each rank adds its slot, zeros elsewhere */
    double v[6] = {0};
    sdc_pack(v, r, h[r]);
    for (int i = 0; i < 6; i++)
      sum[i] += v[i];
  }
  for (int r = 0; r < 3; r++)
    assert_true(sdc_unpack(sum, r) == h[r]);
  assert_true(sdc_due(100, 2, 200) && !sdc_due(100, 1, 200) && !sdc_due(0, 4, 100) &&
              !sdc_due(100, 4, 150));
  for (int64_t k = 1; k < 50; k++) {
    int m = sdc_micro(1337, k, 4);
    assert_true(m >= 0 && m < 4 && m == sdc_micro(1337, k, 4));
  }
  assert_int_equal(sdc_micro(1337, 7, 1), 0);
}

enum { B = 2, T = 16 };
static const ft_gpt2_dims D = {.max_seq_len = T,
                               .vocab_size = 50,
                               .padded_vocab_size = 64,
                               .n_layer = 2,
                               .n_head = 2,
                               .channels = 32};

static void batch(unsigned seed, int32_t *inp, int32_t *tgt) {
  for (int i = 0; i < B * T; i++) {
    seed = seed * 1103515245u + 12345u;
    inp[i] = (int32_t)((seed >> 16) % 50);
    tgt[i] = (int32_t)((seed >> 8) % 50);
  }
}

static void test_engine_recomputes_alike(void **state) {
  (void)state;
  engine *e = NULL;
  assert_int_equal(engine_new("cpu", &D, B, T, NULL, 0, 1, 0, &e), FT_OK);
  size_t n = ft_gpt2_num_params(&D);
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++)
    p[i] = 0.02f * (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
  assert_int_equal(engine_set_params(e, p), FT_OK);
  int32_t inp[B * T], tgt[B * T];
  for (unsigned round = 0; round < 100; round++) {
    batch(round + 1, inp, tgt);
    engine_zero_grad(e);
    uint64_t own = SDC_HASH_INIT, re = SDC_HASH_INIT;
    assert_int_equal(engine_grad_check(e, &own), FT_OK);
    assert_int_equal(engine_micro(e, inp, tgt, 1.0f), FT_OK);
    assert_int_equal(engine_grad_check(e, NULL), FT_OK);
    double loss0, loss1;
    float norm0, norm1;
    assert_int_equal(engine_loss(e, &loss0), FT_OK);
    assert_int_equal(engine_grad_norm(e, &norm0), FT_OK);
    assert_int_equal(engine_recompute(e, inp, tgt, 1.0f, &re), FT_OK);
    assert_true(own != SDC_HASH_INIT);
    if (own != re)
      fail_msg("round %u: own %016llx, recomputed %016llx", round, (unsigned long long)own,
               (unsigned long long)re);
    assert_int_equal(engine_loss(e, &loss1), FT_OK);
    assert_int_equal(engine_grad_norm(e, &norm1), FT_OK);
    assert_true(loss0 == loss1 && norm0 == norm1); /* the step's state untouched */
  }
  uint64_t good = SDC_HASH_INIT, bad = SDC_HASH_INIT;
  assert_int_equal(engine_recompute(e, inp, tgt, 1.0f, &good), FT_OK);
  engine_corrupt(e, 1);
  assert_int_equal(engine_recompute(e, inp, tgt, 1.0f, &bad), FT_OK);
  engine_corrupt(e, 0);
  assert_true(good != bad);
  free(p);
  engine_free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_the_bad_rank),
      cmocka_unit_test(test_no_majority),
      cmocka_unit_test(test_pack_sums_exactly),
      cmocka_unit_test(test_engine_recomputes_alike),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
