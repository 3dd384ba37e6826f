/*
 * sup_json: reading the event stream's JSON objects (cJSON) without a NULL
 * check at every use: a number or its default, a string or NULL, and an
 * array kept to its newest max items. Static inline: the files that fold
 * events (sup_http, sup_metrics, sup_status) share them without a call
 * between layers.
 */
#ifndef SUP_JSON_H
#define SUP_JSON_H

#include <cjson/cJSON.h>

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

#endif
