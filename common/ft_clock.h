/*
 * ft_clock: the project's clocks, in the units it reports and waits in.
 *
 * Monotonic time for durations, timeouts and polling deadlines (never jumps
 * with the wall clock); wall time for what is stored or shown (event times,
 * a store's "now" for garbage collection) and for the absolute deadlines
 * pthread_cond_timedwait wants (its condition variables use CLOCK_REALTIME
 * unless set up otherwise). Every clock_gettime of the project's code goes
 * through here (worker/stackdump.c's signal handlers included: the
 * monotonic read is async-signal-safe), so a fake clock or a change of
 * clock has one place to go.
 */
#ifndef FT_CLOCK_H
#define FT_CLOCK_H
#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t ft_now_ns(void);
/* Monotonic time in milliseconds. */
int64_t ft_now_ms(void);
/* Monotonic time in seconds, as a double. */
double ft_now_s(void);
/* Wall-clock time in milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t ft_wall_ms(void);
/* Wall-clock time in nanoseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t ft_wall_ns(void);
/* The CLOCK_REALTIME instant ms milliseconds from now (ms < 0 counts as 0),
 * normalised, for pthread_cond_timedwait on a default condition variable. */
struct timespec ft_wall_deadline(int64_t ms);
/* CLOCK_BOOTTIME - CLOCK_MONOTONIC in seconds (0 if either fails): grows by
 * the time the machine was suspended (supervisor/sup_stall.c). */
double ft_boot_minus_mono_s(void);

#endif
