/*
 * wd_xid: GPU Xid kernel-log lines: parse, and classify into an action
 * (docs/watchdog.md, "GPU Xid").
 *
 * WHAT: wd_xid_parse() recognises the NVIDIA driver's Xid report anywhere in
 * one log line, in every form we know of:
 *
 *   NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
 *   6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>',
 *       name=<unknown>, GPU has fallen off the bus.         (/dev/kmsg record)
 *   [ 1234.5678] NVRM: Xid (0000:3b:00): 13, Graphics Exception ...  (older)
 *   Jan  2 03:04:05 host kernel: [..] NVRM: Xid (PCI:0000:3b:00): 31, ...
 *
 * and extracts the PCI bus id (normalised to "0000:3b:00": lowercase, 4-digit
 * domain, no function), the Xid number, the pid (-1 when absent or
 * '<unknown>'), the process name ("" when absent) and the message text.
 * wd_xid_classify() maps an Xid number to an action through a table whose
 * defaults follow docs/watchdog.md and which the run file can override.
 *
 * WHY: Xid lines are the earliest and cheapest signal of a dying GPU (< 1 s,
 * no NVML needed); the parser is the part that meets arbitrary bytes, so it
 * is written to be fuzzed.
 *
 * INVARIANTS: the parser reads only [line, line + len) (the line need not be
 * NUL-terminated and may contain NULs); output strings are always
 * NUL-terminated and truncated to their buffers; control bytes in the message
 * are replaced by '?'. Default table: 48 63 64 74 79 92 94 95 119 120 ->
 * quarantine; 13 31 43 -> restart; everything else -> report.
 *
 * THREADING: reentrant; a table is plain data owned by the caller.
 */
#ifndef WD_XID_H
#define WD_XID_H

#include <stddef.h>
#include <stdint.h>

#include "wd_action.h"

#define WD_PCI_LEN 20          /* "0000:3b:00" + NUL, room for an 8-digit domain */
#define WD_XID_MSG_MAX 256     /* message text incl. NUL */
#define WD_XID_NAME_MAX 64     /* process name incl. NUL */
#define WD_XID_TABLE_SIZE 1024 /* Xids 0..1023 have table entries */

typedef struct wd_xid_event {
  char pci[WD_PCI_LEN]; /* "0000:3b:00" */
  int xid;              /* >= 0 */
  int pid;              /* -1 when absent or unknown */
  char name[WD_XID_NAME_MAX];
  char msg[WD_XID_MSG_MAX];
} wd_xid_event;

/* Parses one line (len bytes; a trailing newline is fine). FT_OK and *ev
 * filled; FT_ENOENT when the line holds no "NVRM: Xid" (the common case: not
 * an error worth logging); FT_EFORMAT (with detail) when it does but is
 * malformed. Never reads outside [line, line + len). */
int wd_xid_parse(const char *line, size_t len, wd_xid_event *ev);

/* Normalises a PCI bus id: accepts an optional "PCI:" prefix, an optional
 * domain of 1..8 hex digits, bus and device of 1..2 hex digits, an optional
 * ".function", either case: "PCI:0000:3B:00", "00000000:3B:00.0", "3b:00".
 * Writes "dddd:bb:dd" (domain printed with 8 digits only when > 0xffff).
 * FT_EFORMAT when it is not a bus id. */
int wd_xid_pci_normalize(const char *s, size_t len, char out[WD_PCI_LEN]);

typedef struct wd_xid_table {
  uint8_t action[WD_XID_TABLE_SIZE]; /* wd_action values */
  uint8_t other;                     /* action for Xids >= WD_XID_TABLE_SIZE */
} wd_xid_table;

/* Fills the default table (see INVARIANTS). */
void wd_xid_table_default(wd_xid_table *t);

/* Sets the action for one Xid (0..WD_XID_TABLE_SIZE-1). Allowed actions:
 * ignore, report, restart, quarantine (rollback_and_skip is not an Xid
 * action: FT_EINVAL). */
int wd_xid_table_set(wd_xid_table *t, int xid, wd_action action);

/* Applies an override string "79:quarantine,13:restart,45:ignore" (items
 * separated by ',', spaces allowed around items, action names as
 * wd_action_from_name). All or nothing: on error the table is unchanged and
 * FT_ECONFIG's detail names the bad item. "" changes nothing. */
int wd_xid_table_parse(wd_xid_table *t, const char *spec);

/* The action for an Xid (report for a negative one). */
wd_action wd_xid_classify(const wd_xid_table *t, int xid);

#endif
