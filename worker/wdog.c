/*
 * wdog: the worker's Xid watcher thread (see wdog.h). It polls the source
 * every 100 ms (a regular file has no readiness to wait for; /dev/kmsg is
 * non-blocking here too), so a line reaches the supervisor well within the
 * < 1 s the Xid detector promises (docs/watchdog.md).
 */
#include "wdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ft_err.h"
#include "ft_wire.h"
#include "wd_action.h"
#include "wd_nvml.h"
#include "wd_xid.h"
#include "wd_xid_source.h"

struct wdog {
  ctl *c;
  pthread_mutex_t mu; /* guards pci and comm, which wdog_set_gpu changes */
  comm *comm;         /* aborted on an Xid that stops the gang, or NULL */
  wd_xid_source *src; /* the kernel log, or NULL */
  wd_nvml *nvml;      /* NVML's Xid events where the driver is there, or NULL */
  wd_xid_table table;
  char pci[WD_PCI_LEN];
  pthread_t thread;
  volatile int stop;
};

/* Classifies an Xid of this worker's GPU and reports it. */
static void report(wdog *w, int xid, const char *pci, const char *msg) {
  wd_action a = wd_xid_classify(&w->table, xid);
  char detail[512];
  snprintf(detail, sizeof detail, "xid=%d action=%s pci=%s: %s", xid, wd_action_name(a), pci, msg);
  fprintf(stderr, "worker: GPU Xid: %s\n", detail);
  if (a != WD_ACT_IGNORE)
    ctl_send_fault(w->c, FT_FAULT_XID, -1, detail);
  if (a == WD_ACT_QUARANTINE_NODE || a == WD_ACT_RESTART_GANG) {
    pthread_mutex_lock(&w->mu);
    if (w->comm) { /* the collectives on this GPU cannot be trusted to finish */
      fprintf(stderr, "worker: aborting the NCCL communicator after Xid %d\n", xid);
      comm_abort(w->comm);
      w->comm = NULL;
    }
    pthread_mutex_unlock(&w->mu);
  }
}

/* Whether bus id pci is this worker's GPU. */
static int mine(wdog *w, const char *pci) {
  pthread_mutex_lock(&w->mu);
  int yes = strcmp(pci, w->pci) == 0;
  pthread_mutex_unlock(&w->mu);
  return yes;
}

void wdog_set_gpu(wdog *w, const char *pci, comm *c) {
  if (!w)
    return;
  char norm[WD_PCI_LEN];
  pthread_mutex_lock(&w->mu);
  if (pci && wd_xid_pci_normalize(pci, strlen(pci), norm) == FT_OK)
    memcpy(w->pci, norm, sizeof norm);
  w->comm = c;
  pthread_mutex_unlock(&w->mu);
}

static void *wdog_main(void *arg) {
  wdog *w = arg;
  while (!w->stop) {
    const char *line;
    size_t len;
    while (w->src && wd_xid_source_next_line(w->src, &line, &len) == 1) {
      wd_xid_event ev;
      if (wd_xid_parse(line, len, &ev) == FT_OK && mine(w, ev.pci))
        report(w, ev.xid, ev.pci, ev.msg);
    }
    wd_nvml_xid nx;
    if (w->nvml && wd_nvml_wait(w->nvml, 0, &nx) == 1 && mine(w, nx.pci))
      report(w, nx.xid, nx.pci, "reported by NVML");
    usleep(100 * 1000);
  }
  return NULL;
}

int wdog_start(const ft_runfile *rf, ctl *c, uint32_t node, uint32_t slot, wdog **out) {
  *out = NULL;
  wdog *w = calloc(1, sizeof *w);
  if (!w)
    return ft_err_set(FT_ENOMEM, "out of memory");
  w->c = c;
  pthread_mutex_init(&w->mu, NULL);
  wd_xid_table_default(&w->table);
  int rc =
      rf->watchdog.xid_actions[0] ? wd_xid_table_parse(&w->table, rf->watchdog.xid_actions) : FT_OK;
  if (rc) {
    free(w);
    return rc;
  }
  snprintf(w->pci, sizeof w->pci, "0000:%02x:%02x", node & 0xff, slot & 0xff);
  if (rf->watchdog.xid_source[0] &&
      wd_xid_source_open(rf->watchdog.xid_source, 0, &w->src) != FT_OK) {
    fprintf(stderr, "worker: warning: GPU Xid lines will not be seen: %s\n", ft_err_detail());
    w->src = NULL;
  }
  if (wd_nvml_open(NULL, &w->nvml) != FT_OK) /* no driver: the usual case on a CPU node */
    w->nvml = NULL;
  if (!w->src && !w->nvml) {
    free(w);
    return FT_OK;
  }
  if (pthread_create(&w->thread, NULL, wdog_main, w)) {
    wd_xid_source_close(w->src);
    free(w);
    return ft_err_set(FT_ENOMEM, "cannot start the watchdog thread");
  }
  *out = w;
  return FT_OK;
}

void wdog_stop(wdog *w) {
  if (!w)
    return;
  w->stop = 1;
  pthread_join(w->thread, NULL);
  wd_xid_source_close(w->src);
  wd_nvml_close(w->nvml);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
