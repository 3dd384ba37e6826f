/*
 * test_ckpt_hashset: the store's key set (ckptstore/ckpt_hashset.h), used by
 * garbage collection's mark set (32-byte chunk hashes) and the S3 tier's
 * upload states and listings (object keys).
 *
 * Keys are whole byte strings: embedded NULs count, a prefix is a different
 * key, the empty key is a key. put of a present key sets its value; get
 * gives a value that can be changed in place; del removes one key and no
 * other. Keys that differ only in their last bytes, many in one bucket,
 * keep their own values. Then 300000 random operations on 50000 binary keys
 * that share long prefixes (through several doublings of the table) against
 * a plain reference array, and the count stays exact. Release empties the
 * set, which is usable again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ckpt_hashset.h"
#include "ft_err.h"

static void test_basic(void **state) {
  (void)state;
  ckpt_hashset s = {0};
  assert_false(ckpt_hashset_has(&s, "a", 1));
  assert_null(ckpt_hashset_get(&s, "a", 1));
  ckpt_hashset_del(&s, "a", 1); /* on an empty set: nothing */

  assert_int_equal(ckpt_hashset_put(&s, "chunks/ab", 9, 1), FT_OK);
  assert_int_equal(ckpt_hashset_put(&s, "chunks/abc", 10, 2), FT_OK);
  assert_int_equal(ckpt_hashset_put(&s, "", 0, 3), FT_OK);
  assert_int_equal(ckpt_hashset_put(&s, "x\0y", 3, 4), FT_OK);
  assert_int_equal(ckpt_hashset_put(&s, "x\0z", 3, 5), FT_OK);
  assert_int_equal(s.n, 5);
  assert_int_equal(*ckpt_hashset_get(&s, "chunks/ab", 9), 1);
  assert_int_equal(*ckpt_hashset_get(&s, "chunks/abc", 10), 2);
  assert_int_equal(*ckpt_hashset_get(&s, "", 0), 3);
  assert_int_equal(*ckpt_hashset_get(&s, "x\0y", 3), 4);
  assert_int_equal(*ckpt_hashset_get(&s, "x\0z", 3), 5);
  assert_false(ckpt_hashset_has(&s, "chunks/a", 8));
  assert_false(ckpt_hashset_has(&s, "x", 1));

  /* put again: same key, new value, no new entry */
  assert_int_equal(ckpt_hashset_put(&s, "chunks/ab", 9, 7), FT_OK);
  assert_int_equal(s.n, 5);
  assert_int_equal(*ckpt_hashset_get(&s, "chunks/ab", 9), 7);
  /* in place */
  *ckpt_hashset_get(&s, "chunks/abc", 10) = 9;
  assert_int_equal(*ckpt_hashset_get(&s, "chunks/abc", 10), 9);

  ckpt_hashset_del(&s, "chunks/ab", 9);
  assert_false(ckpt_hashset_has(&s, "chunks/ab", 9));
  assert_true(ckpt_hashset_has(&s, "chunks/abc", 10));
  ckpt_hashset_del(&s, "chunks/ab", 9); /* absent: nothing */
  assert_int_equal(s.n, 4);

  ckpt_hashset_release(&s);
  assert_int_equal(s.n, 0);
  assert_false(ckpt_hashset_has(&s, "chunks/abc", 10));
  assert_int_equal(ckpt_hashset_put(&s, "again", 5, 1), FT_OK);
  assert_true(ckpt_hashset_has(&s, "again", 5));
  ckpt_hashset_release(&s);
}

enum { NKEYS = 50010, OPS = 300000, KLEN = 32, PREFIX = 16, FAMILY = 15 };

static uint64_t rng = 0x243f6a8885a308d3ULL;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static void test_random_against_reference(void **state) {
  (void)state;
  /* Like object keys, every key starts with the same 16 bytes; then two
   * bytes number the key's family, then random bytes, many of them zero. The
   * 15 keys of a family (lengths 18..32) are each a prefix of the longer
   * ones. All keys differ; whenever two share a bucket the set must still
   * compare them whole, length included. */
  uint8_t(*keys)[KLEN] = calloc(NKEYS, KLEN);
  size_t *lens = malloc(NKEYS * sizeof *lens);
  int *ref = malloc(NKEYS * sizeof *ref); /* 0: absent, else the value */
  assert_non_null(keys);
  assert_non_null(lens);
  assert_non_null(ref);
  for (int i = 0; i < NKEYS; i++) {
    memcpy(keys[i], "chunks/ab/000000", PREFIX);
    if (i % FAMILY == 0) {
      keys[i][PREFIX] = (uint8_t)(i / FAMILY);
      keys[i][PREFIX + 1] = (uint8_t)(i / FAMILY >> 8);
      for (int b = PREFIX + 2; b < KLEN; b++)
        keys[i][b] = (uint8_t)(next() % 3 == 0 ? 0 : next());
    } else {
      memcpy(keys[i], keys[i - 1], KLEN);
    }
    lens[i] = PREFIX + 2 + (size_t)(i % FAMILY);
    ref[i] = 0;
  }
  ckpt_hashset s = {0};
  size_t present = 0;
  for (int op = 0; op < OPS; op++) {
    int i = (int)(next() % NKEYS);
    switch (next() % 4) {
    case 0:
    case 1: {
      int v = (int)(next() % 1000) + 1;
      assert_int_equal(ckpt_hashset_put(&s, keys[i], lens[i], v), FT_OK);
      present += ref[i] == 0;
      ref[i] = v;
      break;
    }
    case 2:
      ckpt_hashset_del(&s, keys[i], lens[i]);
      present -= ref[i] != 0;
      ref[i] = 0;
      break;
    default: {
      int *v = ckpt_hashset_get(&s, keys[i], lens[i]);
      if (ref[i])
        assert_true(v && *v == ref[i]);
      else
        assert_null(v);
    }
    }
    assert_int_equal(s.n, present);
  }
  for (int i = 0; i < NKEYS; i++) {
    int *v = ckpt_hashset_get(&s, keys[i], lens[i]);
    if (ref[i])
      assert_true(v && *v == ref[i]);
    else
      assert_null(v);
  }
  assert_true(s.nb >= s.n); /* it grew */
  ckpt_hashset_release(&s);
  free(keys);
  free(lens);
  free(ref);
}

/* 1000 keys of 32 bytes that differ only in their last 8 bytes, in a table
 * of 1024 buckets: many share a bucket. Each must keep its own value, and
 * 1000 absent keys of the same shape must not be found. */
static void test_shared_prefix(void **state) {
  (void)state;
  enum { K = 1000 };
  ckpt_hashset s = {0};
  uint8_t key[32];
  memset(key, 'p', 24);
  for (uint64_t i = 0; i < K; i++) {
    uint64_t v = i * 2; /* even tails present, odd ones absent */
    memcpy(key + 24, &v, 8);
    assert_int_equal(ckpt_hashset_put(&s, key, sizeof key, (int)i + 1), FT_OK);
  }
  assert_int_equal(s.n, K);
  for (uint64_t i = 0; i < K; i++) {
    uint64_t v = i * 2;
    memcpy(key + 24, &v, 8);
    int *got = ckpt_hashset_get(&s, key, sizeof key);
    assert_non_null(got);
    assert_int_equal(*got, (int)i + 1);
    v = i * 2 + 1;
    memcpy(key + 24, &v, 8);
    assert_false(ckpt_hashset_has(&s, key, sizeof key));
  }
  ckpt_hashset_release(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic),
      cmocka_unit_test(test_shared_prefix),
      cmocka_unit_test(test_random_against_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
