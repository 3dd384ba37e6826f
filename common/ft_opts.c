/* ft_opts: exact long options and the project's edit distance (ft_opts.h). */
#include "ft_opts.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int ft_edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  enum { M = 64, FAR = 3 }; /* callers only want distances below FAR */
  if (la >= M || lb >= M || la + FAR <= lb || lb + FAR <= la)
    return INT_MAX; /* the distance is at least the difference in length */
  int d[M][M];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v)
        v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v)
        v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

int ft_opts_check(int argc, char *const *argv, const struct option *opts, char *err,
                  size_t errlen) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--"))
      break;
    if (strncmp(a, "--", 2) != 0)
      continue;
    const char *name = a + 2;
    size_t n = strcspn(name, "=");
    const struct option *hit = NULL, *near = NULL;
    int best = 3;
    for (const struct option *o = opts; o->name; o++) {
      size_t on = strlen(o->name);
      if (on == n && !strncmp(o->name, name, n)) {
        hit = o;
        break;
      }
      int d = ft_edit_distance(name, n, o->name, on);
      if (n && (!strncmp(o->name, name, n < on ? n : on)))
        d = 1; /* one is a prefix of the other: "--spare", "--sparess" */
      if (d < best) {
        best = d;
        near = o;
      }
    }
    if (!hit) {
      if (near)
        snprintf(err, errlen, "unknown option '--%.*s', did you mean --%s?", (int)n, name,
                 near->name);
      else
        snprintf(err, errlen, "unknown option '--%.*s'", (int)n, name);
      return -1;
    }
    if (hit->has_arg == required_argument && !name[n])
      i++; /* "--name VALUE": skip the value */
  }
  return 0;
}
