/*
 * ft_version: what `PROGRAM --version` prints, the same for every program:
 *   "supervise (ftsup) 0.1.0 (git 4a9d2c8e0f1b)"
 * The version is the CMake project's; the revision is `git describe` at
 * build time ("unknown" outside a checkout, "-dirty" with local changes).
 */
#ifndef FT_VERSION_H
#define FT_VERSION_H

/* The version alone, e.g. "0.1.0". Static. */
const char *ft_version(void);
/* The git revision the program was built from. Static. */
const char *ft_version_revision(void);
/* Prints "<prog> (ftsup) <version> (git <revision>)" and a newline to stdout. */
void ft_version_print(const char *prog);

#endif
