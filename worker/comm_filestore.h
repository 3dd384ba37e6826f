/*
 * comm_filestore: a comm_kv rendezvous store over a shared directory, for
 * tests and for standalone multi-process runs without a supervisor.
 *
 * Each key is one file whose name is the key, percent-encoded (every byte
 * outside [A-Za-z0-9_-] becomes %XX, so no key can name a path outside the
 * directory, nor a temporary file, which begins with '.'). set writes a
 * temporary file and renames it into place, so a reader sees a value whole or
 * not at all. wait polls for the files every few milliseconds.
 *
 * All processes of one run must see the same directory (a local path or a
 * shared file system with atomic rename). Nothing is ever deleted: use a fresh
 * directory, or a fresh prefix, per generation.
 */
#ifndef FT_COMM_FILESTORE_H
#define FT_COMM_FILESTORE_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *kv with a store over dir (which must exist; its path is copied).
 * Errors: FT_EINVAL, FT_ENOENT (no such directory), FT_ENOMEM. */
int comm_filestore_init(comm_kv *kv, const char *dir);
/* Frees what init allocated; kv may be zeroed or already released. */
void comm_filestore_release(comm_kv *kv);

#ifdef __cplusplus
}
#endif

#endif
