/*
 * fuzz_common.h: helpers shared by the libFuzzer harnesses in tests/fuzz/.
 *
 * Decoders that take a path (the run file loader, the shard loader, the
 * model file readers) are fed through one memfd per process: its contents
 * are replaced by each input and the decoder opens /proc/self/fd/N, so the
 * real open/stat/mmap/read paths run without touching the disk.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data into this process's memfd and returns its path, or NULL. */
static inline const char *fuzz_memfd_path(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz-input", 0);
    if (fd < 0)
      return NULL;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0)
    return NULL;
  size_t off = 0;
  while (off < size) {
    ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
    if (w <= 0)
      return NULL;
    off += (size_t)w;
  }
  return path;
}

/* An exact-size heap copy of the input, so that ASan sees any overread. */
static inline char *fuzz_copy(const uint8_t *data, size_t size) {
  char *c = malloc(size ? size : 1);
  if (c && size)
    memcpy(c, data, size);
  return c;
}

/* Aborts (a crash libFuzzer reports, with the input) when cond is false. */
#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond);                  \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#endif
