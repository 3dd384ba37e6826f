/* sup_wake: the threads' wake-up pipe to the loop (see sup_wake.h). */
#include "sup_wake.h"

#include "ft_err.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int sup_wake_open(sup_wake *w, struct event_base *base, event_callback_fn cb, void *arg,
                  const char *what) {
  w->fd[0] = w->fd[1] = -1;
  w->ev = NULL;
  if (pipe2(w->fd, O_CLOEXEC | O_NONBLOCK))
    return ft_err_set(FT_EIO, "%s: pipe: %s", what, strerror(errno));
  w->ev = event_new(base, w->fd[0], EV_READ | EV_PERSIST, cb, arg);
  if (!w->ev || event_add(w->ev, NULL))
    return ft_err_set(FT_ENOMEM, "%s: cannot add its event", what);
  return FT_OK;
}

void sup_wake_signal(sup_wake *w) {
  char b = 1;
  while (write(w->fd[1], &b, 1) < 0 && errno == EINTR)
    ;
}

void sup_wake_drain(evutil_socket_t fd) {
  char buf[256];
  while (read(fd, buf, sizeof buf) > 0)
    ;
}

void sup_wake_close(sup_wake *w) {
  if (w->ev)
    event_free(w->ev);
  w->ev = NULL;
  for (int i = 0; i < 2; i++) {
    if (w->fd[i] >= 0)
      close(w->fd[i]);
    w->fd[i] = -1;
  }
}
