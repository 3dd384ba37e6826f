/*
 * ft_failpoint: parses FT_FAILPOINTS once (thread-safe through pthread_once)
 * into a small table; lookups are linear over at most a handful of entries.
 */
#include "ft_failpoint.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FP_MAX 16

static struct {
  char name[48];
  int64_t arg;
} fp_tab[FP_MAX];
static int fp_n;
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;

static void fp_parse(void) {
  const char *env = getenv("FT_FAILPOINTS");
  if (!env || !*env)
    return;
  char buf[1024];
  strncpy(buf, env, sizeof buf - 1);
  buf[sizeof buf - 1] = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok && fp_n < FP_MAX;
       tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (eq)
      *eq = 0;
    strncpy(fp_tab[fp_n].name, tok, sizeof fp_tab[fp_n].name - 1);
    fp_tab[fp_n].arg = eq ? strtoll(eq + 1, NULL, 10) : 0;
    fp_n++;
  }
}

int ft_failpoint(const char *name, int64_t *arg) {
  pthread_once(&fp_once, fp_parse);
  for (int i = 0; i < fp_n; i++) {
    if (strcmp(fp_tab[i].name, name) == 0) {
      if (arg)
        *arg = fp_tab[i].arg;
      return 1;
    }
  }
  return 0;
}

int ft_failpoint_at(const char *name, int64_t value) {
  int64_t arg;
  return ft_failpoint(name, &arg) && arg == value;
}
