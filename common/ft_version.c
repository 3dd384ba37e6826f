/* ft_version: see ft_version.h. FT_VERSION comes from CMake, FT_GIT_REVISION
 * from the header cmake/ft_revision.cmake writes at build time. */
#include "ft_version.h"

#include "ft_revision.h"

#include <stdio.h>

#ifndef FT_VERSION
#define FT_VERSION "0.0.0"
#endif

const char *ft_version(void) {
  return FT_VERSION;
}

const char *ft_version_revision(void) {
  return FT_GIT_REVISION;
}

void ft_version_print(const char *prog) {
  printf("%s (ftsup) %s (git %s)\n", prog, FT_VERSION, FT_GIT_REVISION);
}
