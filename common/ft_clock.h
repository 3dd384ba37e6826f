/* ft_clock: monotonic and wall clocks in the units the project reports. */
#ifndef FT_CLOCK_H
#define FT_CLOCK_H
#include <stdint.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t ft_now_ns(void);
/* Monotonic time in seconds, as a double. */
double ft_now_s(void);
/* Wall-clock time in milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t ft_wall_ms(void);

#endif
