/*
 * ckpt_cli.h: what the `ckpt` program's files share (not a library API).
 */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include "ckptstore.h"

/* Exit codes of `ckpt`, as documented in `ckpt --help`. */
enum {
  CKPT_EXIT_OK = 0,
  CKPT_EXIT_PROBLEM = 1, /* verify found a problem, or restore met a bad chunk */
  CKPT_EXIT_USAGE = 2,
  CKPT_EXIT_NOTFOUND = 3,
  CKPT_EXIT_STORE = 4,
  CKPT_EXIT_LOCKED = 5,
};

/* Maps an FT_* code to an exit code. */
int ckpt_cli_exit_code(int rc);

/* Progress line on stderr when it is a terminal; no-op otherwise. */
void ckpt_cli_progress(const char *what, uint64_t done, uint64_t total);

/* `ckpt restore`: world == 0 writes the GPT-2 model as safetensors at path
 * (and its config.json at config unless that is NULL or ""); world > 0
 * writes rank's raw FSDP shard of every tensor. Returns an FT_* code. */
int ckpt_cli_restore(ckpt_store *s, const ckpt_manifest *m, const char *path, const char *config,
                     int world, int rank);
/* The files `restore --to TO` writes: out = TO, or a file in it if TO is a
 * folder (existing, or ending in '/'); config = the model's config.json in
 * that folder, or "" (a shard, or a file target). FT_EINVAL (saying what it
 * is) if a path exists and is not a regular file: restore never replaces a
 * device, FIFO or link. */
/* FT_OK unless --to TO lies inside the store's folder dir (after symbolic
 * links and '..' are resolved; for a path that does not exist yet, its
 * nearest existing parent): then FT_EINVAL naming both. A restore never
 * writes into the store, where it would replace a manifest, a chunk or
 * the catalog. */
int ckpt_cli_restore_outside(const char *to, const char *dir);
int ckpt_cli_restore_target(const char *to, int world, int rank, char *out, size_t n, char *config,
                            size_t config_len);

#endif
