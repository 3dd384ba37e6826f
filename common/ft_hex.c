/*
 * ft_hex: lowercase hex encoding, hex decoding (see ft_hex.h).
 */
#include "ft_hex.h"

#include <stdint.h>

#include "ft_err.h"

int ft_hex_digit(char c, int flags) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (!(flags & FT_HEX_LOWER) && c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

void ft_hex_encode(const void *in, size_t n, char *out) {
  static const char dig[] = "0123456789abcdef";
  const uint8_t *p = in;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = dig[p[i] >> 4];
    out[2 * i + 1] = dig[p[i] & 15];
  }
  out[2 * n] = 0;
}

int ft_hex_decode(const char *hex, size_t n, void *out, int flags) {
  uint8_t *o = out;
  for (size_t i = 0; i < n; i++) {
    int hi = ft_hex_digit(hex[2 * i], flags);
    if (hi < 0)
      return FT_EFORMAT;
    int lo = ft_hex_digit(hex[2 * i + 1], flags);
    if (lo < 0)
      return FT_EFORMAT;
    o[i] = (uint8_t)(hi << 4 | lo);
  }
  return FT_OK;
}
