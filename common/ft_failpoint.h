/*
 * ft_failpoint: named fault points, compiled in, off by default.
 *
 * Enabled only through the environment variable FT_FAILPOINTS, a comma
 * separated list of NAME or NAME=ARG, e.g.
 *   FT_FAILPOINTS=hang_at_step=15,crash_at_step=30
 * Cheap when off: the variable is parsed once, and a disabled check is one
 * branch on a cached flag. The catalogue of names lives in docs/failpoints.md.
 */
#ifndef FT_FAILPOINT_H
#define FT_FAILPOINT_H

#include <stdint.h>

/* 1 if NAME is enabled; *arg (may be NULL) gets its integer argument (0 if none). */
int ft_failpoint(const char *name, int64_t *arg);

/* 1 if NAME is enabled with argument equal to value (e.g. the current step). */
int ft_failpoint_at(const char *name, int64_t value);

#endif
