/*
 * wd_action: the fault taxonomy's default actions (docs/watchdog.md).
 *
 * WHAT: maps each fault kind of the wire protocol (ft_fault_kind, common/
 * ft_wire.h) to the action the supervisor takes by default, and gives every
 * action a stable name for logs, metrics and the run file.
 *
 * WHY a table here and not in the supervisor: the detectors and the
 * supervisor must agree on what a fault means; keeping the table beside the
 * detectors makes it one place to read (docs/watchdog.md repeats it for
 * operators). The supervisor may override a default (recovery.on_loss_spike,
 * the Xid table of wd_xid.h); this module only states the defaults.
 *
 * INVARIANTS: every ft_fault_kind has exactly one default action; names are
 * lowercase ASCII and never change once shipped (they appear in event logs).
 *
 * THREADING: pure functions over constant tables; reentrant.
 */
#ifndef WD_ACTION_H
#define WD_ACTION_H

/* What the supervisor does about a fault. Order is by severity (a caller that
 * merges several faults of one incident may take the maximum). */
#define WD_ACTIONS(X)                                                                              \
  X(WD_ACT_IGNORE, 0, "ignore")                       /* drop it (overrides only) */               \
  X(WD_ACT_REPORT, 1, "report")                       /* log an event, keep running */             \
  X(WD_ACT_ROLLBACK_AND_SKIP, 2, "rollback_and_skip") /* restore before the spike, skip */         \
  X(WD_ACT_RESTART_GANG, 3, "restart")                /* stop the gang, restart in place */        \
  X(WD_ACT_QUARANTINE_NODE, 4, "quarantine")          /* stop, quarantine node, swap a spare */

typedef enum wd_action {
#define WD_ACTION_ENUM_(name, val, str) name = val,
  WD_ACTIONS(WD_ACTION_ENUM_)
#undef WD_ACTION_ENUM_
} wd_action;
#define WD_ACTION_COUNT 5

/* Stable name of an action ("quarantine", ...); "unknown" when out of range.
 * Static storage, never NULL. */
const char *wd_action_name(int action);

/* Parses an action name. Accepts the names above and the aliases
 * "quarantine_node", "restart_gang", "warn" (= report) and "rollback" (=
 * rollback_and_skip; the supervisor decides the skip count). Case-sensitive.
 * FT_EINVAL (with detail) when unknown. */
int wd_action_from_name(const char *name, wd_action *out);

/* The default action for a fault kind (an ft_fault_kind value); an unknown
 * kind gets WD_ACT_RESTART_GANG (fail safe: a fault nobody understands stops
 * the gang). For FT_FAULT_XID the answer is the action for an unclassified
 * Xid as a whole (quarantine); the per-Xid answer comes from wd_xid_classify. */
wd_action wd_action_for(int fault_kind);

/* One line of prose for a fault kind, for logs and docs ("no heartbeat within
 * watchdog.heartbeat_timeout_s"). Static storage, never NULL. */
const char *wd_action_fault_summary(int fault_kind);

#endif
