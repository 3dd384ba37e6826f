/*
 * wd_action: the default action for each fault kind (see wd_action.h and
 * docs/watchdog.md). Two constant tables; nothing else.
 */
#include "wd_action.h"

#include <string.h>

#include "ft_err.h"
#include "ft_wire.h"

static const char *const action_names[WD_ACTION_COUNT] = {
#define WD_ACTION_NAME_(name, val, str) [val] = str,
    WD_ACTIONS(WD_ACTION_NAME_)
#undef WD_ACTION_NAME_
};

/* Indexed by ft_fault_kind. Keep in step with docs/watchdog.md and
 * docs/watchdog.md. */
static const struct {
  wd_action action;
  const char *summary;
} fault_table[FT_FAULT_KIND_COUNT] = {
    [FT_FAULT_PROCESS_EXIT] = {WD_ACT_RESTART_GANG,
                               "a worker process exited; restart the gang (the supervisor marks a "
                               "node faulty after repeated exits)"},
    [FT_FAULT_HANG] = {WD_ACT_QUARANTINE_NODE,
                       "no heartbeat within watchdog.heartbeat_timeout_s; kill the gang, swap the "
                       "node"},
    [FT_FAULT_COLLECTIVE_TIMEOUT] = {WD_ACT_RESTART_GANG,
                                     "a collective older than watchdog.collective_timeout_s or an "
                                     "async communicator error; abort, kill the gang"},
    [FT_FAULT_XID] = {WD_ACT_QUARANTINE_NODE,
                      "a GPU Xid error in the kernel log or from NVML; the action per Xid comes "
                      "from the Xid table"},
    [FT_FAULT_LOSS_SPIKE] = {WD_ACT_ROLLBACK_AND_SKIP,
                             "loss above the rolling robust z-score threshold; roll back and skip "
                             "the spike's batches"},
    [FT_FAULT_NAN] = {WD_ACT_ROLLBACK_AND_SKIP,
                      "NaN or Inf loss or gradient norm; roll back and skip the batches"},
    [FT_FAULT_OOM] = {WD_ACT_REPORT, "out of device memory; the worker halves its micro-batch "
                                     "itself, the supervisor records it"},
    [FT_FAULT_STRAGGLER] = {WD_ACT_REPORT,
                            "a rank's step time stays an outlier; report (a swap is optional)"},
    [FT_FAULT_OTHER] = {WD_ACT_RESTART_GANG, "an unclassified fault; restart the gang"},
    [FT_FAULT_STORAGE] = {WD_ACT_REPORT,
                          "a checkpoint write failed (disk full, I/O error, quota, S3 refused); "
                          "the store's fault, never the node's: report, training goes on"},
    [FT_FAULT_CONFIG] = {WD_ACT_REPORT,
                         "the run file or a model file is wrong; reported by every worker it "
                         "fails the run with the worker's message, nobody is quarantined"},
    [FT_FAULT_DATA] = {WD_ACT_REPORT,
                       "the data cannot be read; every worker: the run fails with the worker's "
                       "message; one worker: its node's failure, counted"},
    [FT_FAULT_SDC] = {WD_ACT_QUARANTINE_NODE,
                      "a rank's micro-batch recomputed on other nodes gave other bits (silent data "
                      "corruption); quarantine the node the majority names, roll back to the last "
                      "checkpoint before the first unchecked step"},
    [FT_FAULT_RESTORE_CORRUPT] = {WD_ACT_REPORT,
                                  "a chunk of the checkpoint being restored failed its hash from "
                                  "every source; the supervisor marks that checkpoint BAD and the "
                                  "next generation restores the next older one (at most 3 a "
                                  "recovery; a node that fails hashes on 3 restores is suspect)"},
};

const char *wd_action_name(int action) {
  if (action < 0 || action >= WD_ACTION_COUNT)
    return "unknown";
  return action_names[action];
}

int wd_action_from_name(const char *name, wd_action *out) {
  static const struct {
    const char *name;
    wd_action action;
  } aliases[] = {
      {"quarantine_node", WD_ACT_QUARANTINE_NODE},
      {"restart_gang", WD_ACT_RESTART_GANG},
      {"warn", WD_ACT_REPORT},
      {"rollback", WD_ACT_ROLLBACK_AND_SKIP},
  };
  if (!name || !out)
    return ft_err_set(FT_EINVAL, "wd_action_from_name: NULL argument");
  for (int i = 0; i < WD_ACTION_COUNT; i++) {
    if (strcmp(name, action_names[i]) == 0) {
      *out = (wd_action)i;
      return FT_OK;
    }
  }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    if (strcmp(name, aliases[i].name) == 0) {
      *out = aliases[i].action;
      return FT_OK;
    }
  }
  return ft_err_set(FT_EINVAL,
                    "unknown watchdog action '%s' (expected quarantine, restart, "
                    "rollback_and_skip, report or ignore)",
                    name);
}

wd_action wd_action_for(int fault_kind) {
  if (fault_kind < 0 || fault_kind >= FT_FAULT_KIND_COUNT)
    return WD_ACT_RESTART_GANG;
  return fault_table[fault_kind].action;
}

const char *wd_action_fault_summary(int fault_kind) {
  if (fault_kind < 0 || fault_kind >= FT_FAULT_KIND_COUNT)
    return "unknown fault kind; restart the gang";
  return fault_table[fault_kind].summary;
}
