/*
 * wdog: the worker's watchdog thread for GPU Xid errors (docs/watchdog.md).
 *
 * Follows the node's kernel log (watchdog.xid_source: /dev/kmsg, or a file
 * for drills and tests) from its end, parses each line with wd_xid, keeps
 * the lines about this worker's GPU, classifies the Xid with the run file's
 * table (watchdog.xid_actions over the defaults) and reports it to the
 * supervisor as FAULT(xid, "xid=N action=A pci=P: message"). The supervisor
 * decides (quarantine the node, restart in place, or just record it).
 *
 * A second source, where the NVIDIA driver is present: NVML's Xid events
 * (libnvidia-ml loaded at run time by wd_nvml; no build dependency).
 *
 * This worker's GPU: its PCI bus id. On the CPU backend there is no GPU;
 * for drills, worker (node N, slot S) answers to the synthetic bus id
 * 0000:NN:SS (two hex digits each). The CUDA worker sets its device's bus
 * id (wdog_set_gpu).
 *
 * Abort hook: on a CUDA worker, an Xid whose action stops the gang
 * (quarantine or restart) also aborts the NCCL communicator, so a training
 * thread blocked in a collective or a stream wait fails at once rather than
 * at watchdog.collective_timeout_s.
 *
 * A log that can't be opened (no permission on /dev/kmsg) is one clear
 * warning on stderr, and the thread does nothing: never a crash.
 */
#ifndef WDOG_H
#define WDOG_H

#include <stdint.h>

#include "ctl.h"
#include "ft_runfile.h"

typedef struct wdog wdog;

/* Starts the thread; *out is NULL (and FT_OK returned) when there is no
 * source to follow (no readable log, no NVML). c is borrowed and must outlive the wdog. */
int wdog_start(const ft_runfile *rf, ctl *c, uint32_t node, uint32_t slot, wdog **out);
void wdog_stop(wdog *w); /* NULL: no-op */
/* This worker's GPU is the one with PCI bus id pci (any of the usual forms,
 * e.g. cudaDeviceGetPCIBusId's "0000:3B:00.0"), and c (a device comm, or
 * NULL) is aborted on an Xid that stops the gang. c is borrowed: set NULL
 * again before freeing it. NULL w: no-op. Thread-safe. */
void wdog_set_gpu(wdog *w, const char *pci, comm *c);

#endif
