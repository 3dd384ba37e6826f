/*
 * test_hex: the hex codec (common/ft_hex.h).
 *
 * Every byte value encodes to its two lowercase digits and decodes back;
 * decoding takes either case, or only lowercase with FT_HEX_LOWER (chunk
 * names); it stops with FT_EFORMAT at a bad character, a NUL included, and
 * never reads past it (each input sits in its own exact-size malloc block, so
 * ASan sees a read past the end); ft_hex_digit on all 256 chars agrees with
 * an independent table.
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
#include "ft_hex.h"

/* A malloc'd copy of s with exactly strlen(s) + 1 bytes. */
static char *exact(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  assert_non_null(p);
  memcpy(p, s, n);
  return p;
}

static void test_encode_known(void **state) {
  (void)state;
  const uint8_t in[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff};
  char out[2 * sizeof in + 1];
  memset(out, 'x', sizeof out);
  ft_hex_encode(in, sizeof in, out);
  assert_string_equal(out, "00017f80abcdefff");
  char empty[1] = {'x'};
  ft_hex_encode(in, 0, empty);
  assert_int_equal(empty[0], 0);
}

static void test_round_trip_every_byte(void **state) {
  (void)state;
  uint8_t all[256], back[256];
  char hex[513], want[3];
  for (int i = 0; i < 256; i++)
    all[i] = (uint8_t)i;
  ft_hex_encode(all, sizeof all, hex);
  for (int i = 0; i < 256; i++) {
    snprintf(want, sizeof want, "%02x", i);
    assert_memory_equal(hex + 2 * i, want, 2);
  }
  assert_int_equal(ft_hex_decode(hex, 256, back, FT_HEX_LOWER), FT_OK);
  assert_memory_equal(back, all, sizeof all);
}

static void test_case(void **state) {
  (void)state;
  uint8_t out[4];
  char *up = exact("DEADbeef");
  assert_int_equal(ft_hex_decode(up, 4, out, FT_HEX_ANY_CASE), FT_OK);
  const uint8_t want[] = {0xde, 0xad, 0xbe, 0xef};
  assert_memory_equal(out, want, 4);
  assert_int_equal(ft_hex_decode(up, 4, out, FT_HEX_LOWER), FT_EFORMAT);
  free(up);
}

static void test_bad_and_short(void **state) {
  (void)state;
  uint8_t out[8];
  const char *bad[] = {"0g", "g0", " 0", "0 ", "-1", "+1", "0x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *s = exact(bad[i]);
    assert_int_equal(ft_hex_decode(s, 1, out, FT_HEX_ANY_CASE), FT_EFORMAT);
    free(s);
  }
  /* Shorter than asked: stops at the NUL without reading past it. */
  const char *shorts[] = {"", "a", "ab", "abc", "abcd0"};
  for (size_t i = 0; i < sizeof shorts / sizeof shorts[0]; i++) {
    char *s = exact(shorts[i]);
    assert_int_equal(ft_hex_decode(s, 8, out, FT_HEX_ANY_CASE), FT_EFORMAT);
    free(s);
  }
  /* Nothing asked: nothing read. */
  assert_int_equal(ft_hex_decode("", 0, out, FT_HEX_LOWER), FT_OK);
}

static void test_digit_table(void **state) {
  (void)state;
  const char *lower = "0123456789abcdef", *upper = "0123456789ABCDEF";
  for (int c = 0; c < 256; c++) {
    int want_any = -1, want_lower = -1;
    for (int v = 0; v < 16; v++) {
      if (c == lower[v])
        want_any = want_lower = v;
      if (c == upper[v])
        want_any = v;
    }
    assert_int_equal(ft_hex_digit((char)c, FT_HEX_ANY_CASE), want_any);
    assert_int_equal(ft_hex_digit((char)c, FT_HEX_LOWER), want_lower);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_known), cmocka_unit_test(test_round_trip_every_byte),
      cmocka_unit_test(test_case),         cmocka_unit_test(test_bad_and_short),
      cmocka_unit_test(test_digit_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
