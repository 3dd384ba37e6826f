/*
 * fuzz_llmc_model: libFuzzer harness for the llm.c model file reader
 * (ft_gpt2_read_llmc in common/ft_gpt2.c, `worker --init-from`).
 *
 * The input is one model file (through a memfd). Properties: FT_OK or
 * FT_EFORMAT only; an accepted file's dims pass the layout's own checks and
 * its size is exactly the header plus the parameters they imply, and the
 * parameters are the file's floats reordered (the sums of their bit
 * patterns agree).
 */
#include "fuzz_common.h"

#include "ft_err.h"
#include "ft_gpt2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfd_path(data, size);
  if (!path)
    return 0;
  ft_gpt2_dims d;
  float *params = NULL;
  int rc = ft_gpt2_read_llmc(path, &d, &params);
  FUZZ_CHECK(rc == FT_OK || rc == FT_EFORMAT);
  if (rc)
    return 0;
  FUZZ_CHECK(params != NULL);
  size_t n = ft_gpt2_num_params(&d);
  FUZZ_CHECK(size == 1024 + n * sizeof(float));
  /* the parameters are the file's bytes after the header, reordered only
   * within llm.c's tensor order: the sum of all bits must match */
  uint64_t a = 0, b = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &params[i], 4);
    a += u;
    memcpy(&u, data + 1024 + 4 * i, 4);
    b += u;
  }
  FUZZ_CHECK(a == b);
  free(params);
  return 0;
}
