/*
 * data: the token-shard loader (llm.c's .bin format).
 *
 * A shard is a header of 256 int32 (magic 20240520, version 1, token count,
 * the rest zero) followed by `count` uint16 tokens. A glob names the shards;
 * they are read in sorted path order (deterministic) and treated as one
 * concatenated token stream. Sequence i (a global counter, the loader's only
 * state) is the T+1 tokens starting at token (i mod n_seq) * T, where
 * n_seq = (total_tokens - 1) / T: inputs are the first T, targets the last T.
 * So the position in the data is one integer, saved in every checkpoint, and
 * resume needs no replay.
 *
 * Every shard is validated at open: magic, version, file size against the
 * count, every token id < vocab_size. Errors name the file (ft_err_detail).
 * Shards are memory-mapped read-only; the loader is safe to read from
 * several threads.
 */
#ifndef DATA_H
#define DATA_H

#include <stdint.h>

typedef struct data_loader data_loader;

#define DATA_MAGIC 20240520
#define DATA_VERSION 1
#define DATA_HEADER_INTS 256

/* Opens every shard matching glob. FT_ENOENT if the glob matches nothing,
 * FT_EFORMAT for a bad shard, FT_EIO if a file can't be read; the detail
 * names the file and says what is wrong. *out owned by the caller. */
int data_open(const char *glob, int vocab_size, data_loader **out);
void data_free(data_loader *dl);

uint64_t data_num_tokens(const data_loader *dl);
int data_num_shards(const data_loader *dl);
/* Number of distinct sequences of length T (T+1 tokens each, stride T). */
uint64_t data_num_sequences(const data_loader *dl, int T);
/* Copies sequence i (wrapping modulo data_num_sequences) into inp[T] and
 * tgt[T]. Returns 0, or FT_EINVAL if the data holds fewer than T+1 tokens. */
int data_sequence(const data_loader *dl, uint64_t i, int T, int32_t *inp, int32_t *tgt);

/* Writes one shard crash-safely (temp file, fsync, rename). */
int data_write_shard(const char *path, const uint16_t *tokens, uint64_t n);

#endif
