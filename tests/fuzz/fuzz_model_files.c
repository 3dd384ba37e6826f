/*
 * fuzz_model_files: libFuzzer harness for the model file readers in
 * common/ft_gpt2.c: llm.c model files (ft_gpt2_read_llmc, `worker
 * --init-from`) and safetensors (ft_st_parse_header,
 * ft_gpt2_read_safetensors). Every input goes to all three: the formats are
 * told apart by their first bytes, and one corpus lets each learn from the
 * other's seeds (tests/fuzz/seeds/model_files/: llm.c files and safetensors).
 *
 * Files reach the readers through a memfd; the header parser gets an
 * exact-size copy (an overread is an ASan report). Properties:
 *  - llm.c: FT_OK or FT_EFORMAT only; an accepted file is exactly the
 *    1024-byte header plus the parameters its dims imply, and the parameters
 *    are the file's floats reordered (the sums of their bit patterns agree);
 *  - safetensors header: FT_OK, FT_EFORMAT, or FT_EINVAL (the header runs
 *    past the input); accepted tensors tile the data section in order;
 *  - safetensors model (n_head 1, which divides any width): FT_OK or
 *    FT_EFORMAT; an accepted model's parameters fit in the file.
 */
#include "fuzz_common.h"

#include "ft_err.h"
#include "ft_gpt2.h"

static void llmc(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfd_path(data, size);
  if (!path)
    return;
  ft_gpt2_dims d;
  float *params = NULL;
  int rc = ft_gpt2_read_llmc(path, &d, &params);
  FUZZ_CHECK(rc == FT_OK || rc == FT_EFORMAT);
  if (rc)
    return;
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
}

static void safetensors(const uint8_t *data, size_t size) {
  char *copy = fuzz_copy(data, size);
  if (!copy)
    return;
  ft_st_tensor *ts = NULL;
  int n = -1;
  uint64_t off = 0;
  int rc = ft_st_parse_header("fuzz.safetensors", copy, size, size, &ts, &n, &off);
  FUZZ_CHECK(rc == FT_OK || rc == FT_EFORMAT || rc == FT_EINVAL);
  if (rc == FT_OK) {
    FUZZ_CHECK(off >= 10 && off <= size);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
      FUZZ_CHECK(ts[i].begin == at && ts[i].end >= ts[i].begin);
      FUZZ_CHECK(ts[i].ndim >= 0 && ts[i].ndim <= FT_ST_MAX_DIMS);
      FUZZ_CHECK(memchr(ts[i].name, 0, sizeof ts[i].name) != NULL);
      at = ts[i].end;
    }
    FUZZ_CHECK(at == size - off);
  } else {
    FUZZ_CHECK(ts == NULL && n == 0);
  }
  free(ts);
  free(copy);

  const char *path = fuzz_memfd_path(data, size);
  if (!path)
    return;
  ft_gpt2_dims d;
  float *params = NULL;
  int rrc = ft_gpt2_read_safetensors(path, 1, &d, &params);
  FUZZ_CHECK(rrc == FT_OK || rrc == FT_EFORMAT);
  if (rrc == FT_OK) {
    FUZZ_CHECK(rc == FT_OK);
    size_t np = ft_gpt2_num_params(&d);
    size_t pad = (size_t)(d.padded_vocab_size - d.vocab_size) * (size_t)d.channels;
    FUZZ_CHECK((np - pad) * sizeof(float) <= size);
    free(params);
  } else {
    FUZZ_CHECK(params == NULL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llmc(data, size);
  safetensors(data, size);
  return 0;
}
