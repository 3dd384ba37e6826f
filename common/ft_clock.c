/* ft_clock: thin wrappers over clock_gettime (see ft_clock.h). */
#include "ft_clock.h"

uint64_t ft_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t ft_now_ms(void) {
  return (int64_t)(ft_now_ns() / 1000000u);
}

double ft_now_s(void) {
  return (double)ft_now_ns() * 1e-9;
}

int64_t ft_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ft_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct timespec ft_wall_deadline(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (ms < 0)
    ms = 0;
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

double ft_boot_minus_mono_s(void) {
  struct timespec b, m;
  if (clock_gettime(CLOCK_BOOTTIME, &b) || clock_gettime(CLOCK_MONOTONIC, &m))
    return 0;
  return (double)(b.tv_sec - m.tv_sec) + (double)(b.tv_nsec - m.tv_nsec) * 1e-9;
}
