/*
 * sup_wake: a worker thread tells the loop "look at your queue": a
 * non-blocking pipe whose read end is a persistent libevent read event.
 * The thread calls sup_wake_signal (async-signal-safe, never blocks: a
 * full pipe already holds a wake-up); the loop's callback calls
 * sup_wake_drain and then takes whatever the thread queued.
 */
#ifndef SUP_WAKE_H
#define SUP_WAKE_H

#include <event2/event.h>

typedef struct sup_wake {
  int fd[2];
  struct event *ev;
} sup_wake;

/* what names the queue in the error message. */
int sup_wake_open(sup_wake *w, struct event_base *base, event_callback_fn cb, void *arg,
                  const char *what);
void sup_wake_signal(sup_wake *w);
void sup_wake_drain(evutil_socket_t fd);
/* Safe on a zeroed sup_wake after a failed or no open: fd must be -1. */
void sup_wake_close(sup_wake *w);

#endif
