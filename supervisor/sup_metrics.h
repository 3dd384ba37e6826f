/*
 * sup_metrics: the /metrics page's counters and histograms, folded from the
 * event stream, and the page itself (sup_metrics.c says what is in it).
 */
#ifndef SUP_METRICS_H
#define SUP_METRICS_H

#include "sup_int.h"

struct evbuffer;
typedef struct sup_metrics sup_metrics;

sup_metrics *sup_metrics_new(void); /* NULL: out of memory */
void sup_metrics_free(sup_metrics *m);
/* one event (name, its ts and object) into the counters */
void sup_metrics_fold(sup_metrics *m, double ts, const char *name, const cJSON *e);
/* seconds to the run's last step at the pace of the last two step events;
 * NaN before there is a pace */
double sup_metrics_eta_s(const sup_metrics *m, const sup *s);
/* the page, appended to b */
void sup_metrics_write(const sup_metrics *m, sup *s, struct evbuffer *b);
const char *sup_state_name(sup_state st); /* "starting", "running", ... */

#endif
