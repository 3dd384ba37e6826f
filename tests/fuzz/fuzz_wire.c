/*
 * fuzz_wire: libFuzzer harness for the control-protocol decoder.
 *
 * Feeds arbitrary bytes to ft_wire_frame_len and ft_wire_decode (from an
 * exact-size copy, so ASan sees any overread). Properties checked: no crash,
 * only 0/1/FT_EPROTO from frame_len, only 0/FT_EPROTO/FT_ENOMEM from decode,
 * and every accepted frame re-encodes to exactly the same bytes (the codec is
 * canonical). Built only with clang; not part of the CTest run:
 *   build/tests/fuzz_wire -max_total_time=60 [corpus_dir]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"
#include "ft_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *c = malloc(size ? size : 1);
  if (!c)
    return 0;
  if (size)
    memcpy(c, data, size);
  size_t fl = 0;
  int frc = ft_wire_frame_len(c, size, &fl);
  if (frc != 0 && frc != 1 && frc != FT_EPROTO)
    abort();
  if (frc == 1 && fl > size)
    abort();
  ft_msg m;
  int rc = ft_wire_decode(c, size, &m);
  if (rc == 0) {
    ft_buf b;
    ft_buf_init(&b);
    if (frc != 1 || fl != size)
      abort();
    if (ft_wire_encode(&m, &b) != 0 || b.len != size || memcmp(b.data, c, size) != 0)
      abort();
    ft_buf_release(&b);
    ft_msg_release(&m);
  } else if (rc != FT_EPROTO && rc != FT_ENOMEM) {
    abort();
  }
  free(c);
  return 0;
}
