/* ft_clock: thin wrappers over clock_gettime. */
#include "ft_clock.h"

#include <time.h>

uint64_t ft_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double ft_now_s(void) {
  return (double)ft_now_ns() * 1e-9;
}

int64_t ft_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
