/*
 * fuzz_shard: libFuzzer harness for the llm.c token-shard reader
 * (worker/data.c: header, size and token checks at data_open, then the
 * sequence reader).
 *
 * The input is one shard file (through a memfd). Properties: data_open
 * returns FT_OK or FT_EFORMAT; an opened shard has exactly the token count
 * its size implies, every sequence read stays inside it (ASan) and every
 * token is < vocab_size. The vocabulary alternates between 65536 and 256 so
 * that both the accept and the token-range refusal paths run.
 */
#include "fuzz_common.h"

#include "data.h"
#include "ft_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned calls;
  const char *path = fuzz_memfd_path(data, size);
  if (!path)
    return 0;
  int vocab = (++calls & 1) ? 65536 : 256;
  data_loader *dl = NULL;
  int rc = data_open(path, vocab, &dl);
  FUZZ_CHECK(rc == FT_OK || rc == FT_EFORMAT);
  if (rc)
    return 0;
  FUZZ_CHECK(data_num_shards(dl) == 1);
  FUZZ_CHECK(size == 1024 + 2 * data_num_tokens(dl));
  int32_t inp[17], tgt[17];
  for (int T = 1; T <= 16; T *= 2) {
    uint64_t nseq = data_num_sequences(dl, T);
    for (uint64_t i = 0; i < 3; i++) {
      int src = data_sequence(dl, i * 7919, T, inp, tgt);
      FUZZ_CHECK(src == (nseq ? FT_OK : FT_EINVAL));
      if (src)
        continue;
      for (int j = 0; j < T; j++)
        FUZZ_CHECK(inp[j] >= 0 && inp[j] < vocab && tgt[j] >= 0 && tgt[j] < vocab);
      for (int j = 1; j < T; j++)
        FUZZ_CHECK(inp[j] == tgt[j - 1]);
    }
  }
  data_free(dl);
  return 0;
}
