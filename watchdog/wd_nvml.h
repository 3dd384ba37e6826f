/*
 * wd_nvml: GPU Xid events from NVML, loaded at run time.
 *
 * WHAT: when libnvidia-ml.so.1 can be loaded (dlopen; no NVML header or
 * link-time dependency), initialise NVML, register every GPU for
 * nvmlEventTypeXidCriticalError and hand out Xid events with the GPU's index
 * and normalised PCI bus id. Without the library (a CPU machine, a container
 * without the driver) wd_nvml_open returns FT_ENOENT with the detail "NVML
 * not available: ..."; the caller falls back to the kernel log alone.
 *
 * WHY dlopen: the same binaries run on CPU-only machines; NVML is a second,
 * driver-level Xid source (it sees Xids even where /dev/kmsg is not
 * readable), never a requirement.
 *
 * INVARIANTS: the few NVML types are declared here by hand with the layout of
 * the public nvml.h (nvmlEventData_t with gpuInstanceId/computeInstanceId,
 * read through nvmlEventSetWait_v2; nvmlPciInfo_t of nvmlDeviceGetPciInfo_v3).
 * GPUs that do not support Xid events are skipped; if none does, open fails
 * with FT_ENOENT.
 *
 * THREADING: wd_nvml_wait blocks up to timeout_ms; call it from one thread
 * (a watchdog thread). FAILURE: negative FT_E*; never aborts.
 *
 * TESTED: the absent/failed paths (this project's CI has no GPU); the
 * health query also against a stand-in library with NVML's symbols
 * (tests/unit/fake_nvml.c). The success paths follow NVML's documented API
 * but have not run on a GPU yet.
 */
#ifndef WD_NVML_H
#define WD_NVML_H

#include "wd_xid.h"

typedef struct wd_nvml wd_nvml;

typedef struct wd_nvml_xid {
  int gpu_index;        /* NVML device index, -1 if the device is unknown */
  char pci[WD_PCI_LEN]; /* normalised bus id, "" if unknown */
  int xid;              /* NVML reports 999 for an unknown Xid */
} wd_nvml_xid;

/* lib: NULL for "libnvidia-ml.so.1". FT_ENOENT: not available (library or
 * one of its symbols missing, no GPU supports Xid events); FT_EIO: NVML
 * failed to initialise (detail has NVML's error string). */
int wd_nvml_open(const char *lib, wd_nvml **out);
void wd_nvml_close(wd_nvml *n); /* NULL: no-op */

/* Waits up to timeout_ms for one Xid event: 1 with *ev filled, 0 on timeout,
 * negative FT_E* on error. */
int wd_nvml_wait(wd_nvml *n, unsigned timeout_ms, wd_nvml_xid *ev);

/* GPUs registered for Xid events. */
int wd_nvml_device_count(const wd_nvml *n);

/* What NVML keeps about a GPU's memory health (the node doctor's GPU
 * check): uncorrected ECC errors since the driver loaded (volatile), pages
 * waiting to be retired, rows waiting to be remapped or a remapping that
 * failed. Each -1 where the board does not support it. */
typedef struct wd_nvml_health {
  long long ecc_uncorrected;
  int retired_pending;
  int remap_pending;
  int remap_failed;
} wd_nvml_health;
/* The health of the GPU at PCI bus id pci (as CUDA gives it, e.g.
 * "0000:3B:00.0"); lib as for wd_nvml_open. FT_ENOENT: NVML not available
 * (detail "NVML not available: ...") or no GPU at pci; FT_EIO: NVML failed. */
int wd_nvml_health_of(const char *lib, const char *pci, wd_nvml_health *out);

#endif
