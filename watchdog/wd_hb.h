/*
 * wd_hb: heartbeat tracker (the "hang" detector of docs/watchdog.md).
 *
 * WHAT: N members (index 0..N-1: workers, or nodes) each heartbeat now and
 * then; wd_hb_check(t) lists those silent for longer than timeout_s, with the
 * time they were last seen. Each silent member is reported once; it is
 * reported again only after it has been seen again and then gone silent again.
 *
 * WHY pure: time is passed in by the caller (seconds as a double, from any
 * monotonic clock, e.g. ft_now_s()), so the supervisor's event loop drives it
 * from real heartbeats and the tests drive it with exact numbers.
 *
 * INVARIANTS: last_seen[i] only grows (a heartbeat stamped earlier than the
 * last one is ignored); a member is "silent" iff t - last_seen > timeout_s
 * (strictly); every member counts as seen at the t0 given to wd_hb_new (or
 * wd_hb_reset), so a member that never heartbeats is reported timeout_s
 * after the start.
 *
 * THREADING: none; one owner (the supervisor's loop). FAILURE: FT_EINVAL for
 * bad arguments, FT_ENOMEM; never aborts.
 */
#ifndef WD_HB_H
#define WD_HB_H

typedef struct wd_hb wd_hb;

typedef struct wd_hb_silent {
  int member;       /* 0..N-1 */
  double last_seen; /* time of last sight (t0 if never seen) */
  double silent_s;  /* t - last_seen at the check */
} wd_hb_silent;

/* Creates a tracker of n >= 1 members with timeout_s > 0; all members count
 * as seen at t0. *out is owned by the caller (wd_hb_free). */
int wd_hb_new(int n, double timeout_s, double t0, wd_hb **out);
void wd_hb_free(wd_hb *hb); /* NULL: no-op */

/* Forgets all sightings and reports; every member counts as seen at t0
 * (a new generation). */
void wd_hb_reset(wd_hb *hb, double t0);

/* Member i heartbeat at time t. FT_EINVAL when i is out of range. Re-arms
 * the member's report unless t is older than its last sight. */
int wd_hb_seen(wd_hb *hb, double t, int i);

/* Members newly silent at time t, in index order, written to out[0..cap).
 * Returns how many were written (>= 0) or a negative FT_E*. Members beyond
 * cap are not marked reported and come out of the next call. */
int wd_hb_check(wd_hb *hb, double t, wd_hb_silent *out, int cap);

/* Time member i was last seen (t0 if never); NAN if i is out of range. */
double wd_hb_last_seen(const wd_hb *hb, int i);

int wd_hb_count(const wd_hb *hb);
double wd_hb_timeout(const wd_hb *hb);

#endif
