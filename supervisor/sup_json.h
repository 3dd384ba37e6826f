/*
 * sup_json: reading the event stream's JSON objects (cJSON) without a NULL
 * check at every use: a number or its default, a string or NULL, an array
 * kept to its newest max items, and the checkpoints list folded from the
 * checkpoint events. Static inline: the files that fold
 * events (sup_http, sup_metrics, sup_status) share them without a call
 * between layers.
 */
#ifndef SUP_JSON_H
#define SUP_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

static inline double sup_jnum(const cJSON *o, const char *k, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static inline const char *sup_jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* item appended to arr (which takes it), the oldest dropped past max */
static inline void sup_jkeep_last(cJSON *arr, cJSON *item, int max) {
  cJSON_AddItemToArray(arr, item);
  while (cJSON_GetArraySize(arr) > max)
    cJSON_DeleteItemFromArray(arr, 0);
}

/* The checkpoints list of /status and `supervise status` ([{step, state,
 * ts}], newest last, at most keep), folded from one event: committed,
 * good, bad and failed set a step's state (a new entry when the list has
 * none for it); deleted takes it out, so no view offers a checkpoint the
 * store no longer has. */
static inline void sup_jckpt_fold(cJSON *ckpts, double ts, const char *name, const cJSON *e,
                                  int keep) {
  static const char *const states[][2] = {{"checkpoint_committed", "committed"},
                                          {"checkpoint_good", "good"},
                                          {"checkpoint_bad", "bad"},
                                          {"checkpoint_failed", "failed"}};
  int64_t step = (int64_t)sup_jnum(e, "step", -1);
  cJSON *it;
  if (!strcmp(name, "checkpoint_deleted")) {
    for (int i = cJSON_GetArraySize(ckpts) - 1; i >= 0; i--)
      if ((int64_t)sup_jnum(cJSON_GetArrayItem(ckpts, i), "step", -1) == step)
        cJSON_DeleteItemFromArray(ckpts, i);
    return;
  }
  for (size_t k = 0; k < sizeof states / sizeof states[0]; k++) {
    if (strcmp(name, states[k][0]) != 0)
      continue;
    cJSON_ArrayForEach(it, ckpts) {
      if ((int64_t)sup_jnum(it, "step", -1) == step) {
        cJSON_ReplaceItemInObject(it, "state", cJSON_CreateString(states[k][1]));
        return;
      }
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "step", (double)step);
    cJSON_AddStringToObject(c, "state", states[k][1]);
    cJSON_AddNumberToObject(c, "ts", ts);
    sup_jkeep_last(ckpts, c, keep);
    return;
  }
}

#endif
