/*
 * ft_hex: the project's one hex codec.
 *
 * Hex appears wherever bytes become names or text: chunk names (SHA-256,
 * lowercase, the store's content addresses), the run token, the config hash
 * in a checkpoint, PCI fields in kernel log lines. Encoding always writes
 * lowercase. Decoding accepts either case unless the caller asks for
 * FT_HEX_LOWER: a content address has exactly one spelling, so an uppercase
 * chunk name is not the same name.
 */
#ifndef FT_HEX_H
#define FT_HEX_H

#include <stddef.h>

/* Decoding flags. */
enum { FT_HEX_ANY_CASE = 0, FT_HEX_LOWER = 1 };

/* The value of one hex digit (0-9, a-f, and A-F unless FT_HEX_LOWER), or -1. */
int ft_hex_digit(char c, int flags);

/* Writes the 2n lowercase hex digits of in[0..n) and a NUL into out[2n + 1]. */
void ft_hex_encode(const void *in, size_t n, char *out);

/* Decodes the first 2n characters of hex into out[n]. FT_EFORMAT (no detail
 * set: the caller names what it decoded) at the first character that is not a
 * hex digit, a NUL included, which stops the read there; out may then hold
 * some decoded bytes. It does not check what follows the 2n digits. */
int ft_hex_decode(const char *hex, size_t n, void *out, int flags);

#endif
