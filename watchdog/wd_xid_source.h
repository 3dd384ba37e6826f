/*
 * wd_xid_source: follows a kernel log for Xid lines (watchdog.xid_source).
 *
 * WHAT: two kinds of source behind one API.
 *   - /dev/kmsg (any character device): opened O_RDONLY|O_NONBLOCK and
 *     positioned at its end (lseek SEEK_END), so only records logged from now
 *     on are seen. Every read(2) returns one record "prio,seq,usec,flags;text"
 *     and possibly continuation lines; the first line of the record is
 *     returned. EPIPE means the ring buffer overwrote records we had not read
 *     yet: they are counted (wd_xid_source_lost) and reading goes on.
 *   - a regular file (kern.log, or a test's file): followed from its end like
 *     `tail -f`; appended complete lines are returned, a partial last line
 *     waits for its newline; truncation restarts at offset 0, and a file
 *     replaced under the same path (log rotation) is reopened from its start.
 *
 * WHY: the < 1 s Xid latency of docs/watchdog.md needs the kernel log itself,
 * not a polling nvidia-smi. The event loop owns the waiting: this module
 * never blocks.
 *
 * USE: open; if wd_xid_source_pollable(), watch wd_xid_source_fd() for
 * readability (libevent EV_READ|EV_PERSIST); otherwise call on a timer
 * (a regular file is always "readable"). On each wake-up call
 * wd_xid_source_next_line() until it returns 0 (or wd_xid_source_read_lines),
 * and give each line to wd_xid_parse().
 *
 * PERMISSIONS: reading /dev/kmsg needs CAP_SYSLOG where kernel.dmesg_restrict
 * is 1. A missing permission is FT_EBUSY (the project has no EACCES code yet)
 * with a detail that says what to do; the caller logs it as a warning and
 * runs without Xid detection. It is never fatal.
 *
 * INVARIANTS: lines never include their '\n'; a line longer than
 * WD_XID_SOURCE_LINE_MAX - 1 bytes is cut to that length (the rest of it is
 * dropped); the pointer from next_line is valid until the next call on the
 * same source or close.
 *
 * THREADING: one owner. FAILURE: negative FT_E* with detail; never aborts.
 */
#ifndef WD_XID_SOURCE_H
#define WD_XID_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#define WD_XID_SOURCE_LINE_MAX 8192
/* Regular files only: return the file's existing lines first (replaying a
 * saved log, tests). Ignored for /dev/kmsg. */
#define WD_XID_SOURCE_FROM_START 1u

typedef struct wd_xid_source wd_xid_source;

/* Opens path (see WHAT). Errors: FT_ENOENT (no such file), FT_EBUSY (no
 * permission; detail says what to do), FT_EINVAL (empty path, a directory),
 * FT_EIO. *out owned by the caller (wd_xid_source_close). */
int wd_xid_source_open(const char *path, unsigned flags, wd_xid_source **out);
void wd_xid_source_close(wd_xid_source *s); /* NULL: no-op */

/* The fd to watch, and whether watching it is meaningful (1: /dev/kmsg;
 * 0: a regular file, call on a timer instead). */
int wd_xid_source_fd(const wd_xid_source *s);
int wd_xid_source_pollable(const wd_xid_source *s);
int wd_xid_source_is_kmsg(const wd_xid_source *s);

/* Next complete line: 1 with *line and *len set (borrowed, valid until the next
 * call), 0 when none is available now, negative FT_E* on a read error. */
int wd_xid_source_next_line(wd_xid_source *s, const char **line, size_t *len);

/* Calls fn for every complete line available now; stops early when fn
 * returns non-zero. Returns the number of lines delivered, or a negative
 * FT_E*. line is borrowed for the duration of the call. */
typedef int (*wd_xid_line_fn)(void *arg, const char *line, size_t len);
int wd_xid_source_read_lines(wd_xid_source *s, wd_xid_line_fn fn, void *arg);

/* /dev/kmsg: number of EPIPE (overwritten records) seen so far. */
uint64_t wd_xid_source_lost(const wd_xid_source *s);

#endif
