/*
 * sup_ckpt_events: the events that say a checkpoint did not happen, or did
 * not get its mark, written the same way from wherever that is found out:
 *  - checkpoint_failed {step, rank, missing, cause, reason}: a shard report
 *    was bad or never came (sup_run.c, cause "report"), or a worker could
 *    not write its shard (sup_watch.c on_storage, cause "storage"). A
 *    commit the store refused is reported by sup_run.c commit_report
 *    (reason only). The last committed checkpoint stays the restore point.
 *  - checkpoint_mark_failed {step, mark, reason}: the store refused to mark
 *    a committed checkpoint GOOD (or BAD); the checkpoint keeps its state.
 *    GOOD is advisory: the run goes on.
 * Each event also prints its human line on stderr (sup_events).
 *
 * Single-threaded: the loop (the event log is the loop's).
 */
#include "sup_int.h"

#include <inttypes.h>

void sup_event_checkpoint_failed(sup *s, int64_t step, int rank, int missing, const char *cause,
                                 const char *why) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)step);
  cJSON_AddNumberToObject(f, "rank", rank);
  if (missing >= 0)
    cJSON_AddNumberToObject(f, "missing", missing);
  cJSON_AddStringToObject(f, "cause", cause);
  cJSON_AddStringToObject(f, "reason", why);
  sup_events_emit(s->ev, "checkpoint_failed", f, "step %" PRId64 " rank %d: %s", step, rank, why);
}

void sup_event_mark_failed(sup *s, int64_t step, const char *mark, const char *why) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "step", (double)step);
  cJSON_AddStringToObject(f, "mark", mark);
  cJSON_AddStringToObject(f, "reason", why);
  sup_events_emit(s->ev, "checkpoint_mark_failed", f,
                  "step %" PRId64 " could not be marked %s (it keeps its state): %s", step, mark,
                  why);
}
