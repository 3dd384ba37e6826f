/*
 * ft_opts: what every program's command line shares.
 *
 * getopt_long accepts any unambiguous prefix of a long option, so a typo
 * such as `--spare 2` is silently taken as `--spares 2`, and `--val` as
 * whichever option it happens to begin. Our programs take exact names only:
 * ft_opts_check looks at every "--name" the user typed before getopt_long
 * runs and refuses one that is not exactly in the table, naming the closest
 * ("did you mean --spares?"). ft_edit_distance is the one string distance
 * the project's suggestions use (run-file keys too).
 */
#ifndef FT_OPTS_H
#define FT_OPTS_H

#include <getopt.h>
#include <stddef.h>

/* Optimal-string-alignment distance (Levenshtein plus adjacent swaps) of
 * a[0..la) and b[0..lb); INT_MAX when they are too far apart in length for
 * the distance to be below 3, or longer than 63 bytes: callers only want
 * near matches. */
int ft_edit_distance(const char *a, size_t la, const char *b, size_t lb);

/* Refuses any "--name" or "--name=value" in argv[1..argc) (up to a lone
 * "--") that is not exactly an option of opts (terminated by a zero entry).
 * The value after an option that takes one is skipped. Returns 0, or -1
 * with one line in err: "unknown option '--spare', did you mean --spares?"
 * (the closest option: one the typed name is a prefix of, or that is a
 * prefix of it, or within 2 edits), or "unknown option '--x'". */
int ft_opts_check(int argc, char *const *argv, const struct option *opts, char *err, size_t errlen);

#endif
