/*
 * sup_stall: the supervisor knows when it did not run. A timer of period
 * SUP_STALL_PERIOD_S at the loop's highest priority measures the gap since it
 * last ran: more than the period plus a threshold (an eighth of the
 * heartbeat timeout, at least 0.25 s) means the loop did not run (SIGSTOP,
 * a long callback, an overloaded host: cause "loop_blocked"); CLOCK_BOOTTIME
 * running ahead of CLOCK_MONOTONIC means the machine was suspended (cause
 * "suspend"). Either sets s->stall_end_s, which the hang checks use never
 * to blame a worker for silence that overlaps the stall, and emits
 * supervisor_stall {seconds, cause}. Being first in the loop's order, it
 * runs before any read or timer callback that was waiting behind the stall
 * (the timer is sup_main.c's; sup_recovery.c's hang checks call the check
 * first too, to see a stall that ended inside the same iteration).
 *
 * It measures and records (s->stall_end_s, the event) and decides nothing:
 * a low-layer file, callable from the recovery and the detectors alike.
 * Single-threaded: the loop's.
 */
#include "sup_int.h"

#include "ft_clock.h"

#include <math.h>
#include <time.h>

static struct {
  double last_s;   /* ft_now_s at the last check */
  double boot_off; /* CLOCK_BOOTTIME - CLOCK_MONOTONIC then */
} g_stall;

static double stall_threshold_s(const sup *s) {
  double th = s->rf.watchdog.heartbeat_timeout_s / 8.0;
  return th < 0.25 ? 0.25 : th;
}

void sup_loop_stall_check(sup *s) {
  double now = ft_now_s(), off = ft_boot_minus_mono_s();
  double gap = now - g_stall.last_s, slept = off - g_stall.boot_off, th = stall_threshold_s(s);
  const char *cause = NULL;
  double secs = 0;
  if (slept > th) {
    cause = "suspend";
    secs = slept + gap;
  } else if (gap - SUP_STALL_PERIOD_S > th) {
    cause = "loop_blocked";
    secs = gap;
  }
  g_stall.last_s = now;
  g_stall.boot_off = off;
  if (!cause)
    return;
  s->stall_end_s = now;
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "seconds", round(secs * 1000) / 1000);
  cJSON_AddStringToObject(f, "cause", cause);
  cJSON_AddNumberToObject(f, "gen", (double)s->gen);
  cJSON_AddNumberToObject(f, "last_step", (double)s->run.last_step);
  sup_events_emit(s->ev, "supervisor_stall", f,
                  "the supervisor did not run for %.1f s (%s); silence of workers during it is "
                  "not held against them",
                  secs, cause);
}

void sup_stall_restart(void) {
  g_stall.last_s = ft_now_s();
  g_stall.boot_off = ft_boot_minus_mono_s();
}
