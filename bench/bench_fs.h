/*
 * bench_fs.h: what the store benchmarks share: dropping files from the page
 * cache, so a restore is timed from the disk, not from memory.
 */
#ifndef BENCH_FS_H
#define BENCH_FS_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void bench_drop_cache_file(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd >= 0) {
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

/* Every file under dir. */
static inline void bench_drop_cache_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char p[4096];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p)
      continue; /* too long to name: left in the cache */
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
      bench_drop_cache_tree(p);
    else
      bench_drop_cache_file(p);
  }
  closedir(d);
}

#endif
