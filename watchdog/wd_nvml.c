/*
 * wd_nvml: NVML Xid events through dlopen. See wd_nvml.h.
 *
 * Only the handful of NVML entry points we need are resolved; their types
 * mirror the public nvml.h. Every NVML return code is translated here and
 * nowhere else.
 */
#include "wd_nvml.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

/* ---- the subset of nvml.h we use --------------------------------------- */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvml_event_data;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvml_pci_info;
#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_TIMEOUT 10
#define NVML_EVENT_XID_CRITICAL 0x8ULL
#define NVML_MAX_GPUS 64

struct wd_nvml {
  void *dl;
  nvmlReturn_t (*init)(void);
  nvmlReturn_t (*shutdown)(void);
  const char *(*error_string)(nvmlReturn_t);
  nvmlReturn_t (*get_count)(unsigned int *);
  nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t *);
  nvmlReturn_t (*get_pci)(nvmlDevice_t, nvml_pci_info *);
  nvmlReturn_t (*set_create)(nvmlEventSet_t *);
  nvmlReturn_t (*set_free)(nvmlEventSet_t);
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
  nvmlReturn_t (*set_wait)(nvmlEventSet_t, nvml_event_data *, unsigned int);
  int inited;
  nvmlEventSet_t set;
  int ndev;
  struct {
    nvmlDevice_t handle;
    int index;
    char pci[WD_PCI_LEN];
  } dev[NVML_MAX_GPUS];
};

static const char *nvml_str(wd_nvml *n, nvmlReturn_t r) {
  const char *s = n->error_string ? n->error_string(r) : NULL;
  return s ? s : "unknown NVML error";
}

#define RESOLVE(field, sym)                                                                        \
  do {                                                                                             \
    *(void **)(&n->field) = dlsym(n->dl, sym);                                                     \
    if (!n->field) {                                                                               \
      rc = ft_err_set(FT_ENOENT, "NVML not available: %s has no symbol %s", libname, sym);         \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

int wd_nvml_open(const char *lib, wd_nvml **out) {
  if (!out)
    return ft_err_set(FT_EINVAL, "wd_nvml_open: NULL argument");
  *out = NULL;
  const char *libname = lib ? lib : "libnvidia-ml.so.1";
  int rc = FT_OK;
  wd_nvml *n = calloc(1, sizeof *n);
  if (!n)
    return ft_err_set(FT_ENOMEM, "wd_nvml_open: out of memory");
  n->dl = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!n->dl) {
    const char *e = dlerror();
    rc = ft_err_set(FT_ENOENT, "NVML not available: %s", e ? e : libname);
    goto fail;
  }
  RESOLVE(init, "nvmlInit_v2");
  RESOLVE(shutdown, "nvmlShutdown");
  RESOLVE(error_string, "nvmlErrorString");
  RESOLVE(get_count, "nvmlDeviceGetCount_v2");
  RESOLVE(get_handle, "nvmlDeviceGetHandleByIndex_v2");
  RESOLVE(get_pci, "nvmlDeviceGetPciInfo_v3");
  RESOLVE(set_create, "nvmlEventSetCreate");
  RESOLVE(set_free, "nvmlEventSetFree");
  RESOLVE(register_events, "nvmlDeviceRegisterEvents");
  RESOLVE(set_wait, "nvmlEventSetWait_v2");

  nvmlReturn_t r = n->init();
  if (r != NVML_SUCCESS) {
    rc = ft_err_set(FT_EIO, "nvmlInit_v2: %s", nvml_str(n, r));
    goto fail;
  }
  n->inited = 1;
  r = n->set_create(&n->set);
  if (r != NVML_SUCCESS) {
    rc = ft_err_set(FT_EIO, "nvmlEventSetCreate: %s", nvml_str(n, r));
    goto fail;
  }
  unsigned int count = 0;
  r = n->get_count(&count);
  if (r != NVML_SUCCESS) {
    rc = ft_err_set(FT_EIO, "nvmlDeviceGetCount_v2: %s", nvml_str(n, r));
    goto fail;
  }
  for (unsigned int i = 0; i < count && n->ndev < NVML_MAX_GPUS; i++) {
    nvmlDevice_t h;
    if (n->get_handle(i, &h) != NVML_SUCCESS)
      continue;
    r = n->register_events(h, NVML_EVENT_XID_CRITICAL, n->set);
    if (r != NVML_SUCCESS)
      continue; /* NOT_SUPPORTED on some boards: skip that GPU */
    n->dev[n->ndev].handle = h;
    n->dev[n->ndev].index = (int)i;
    nvml_pci_info pi;
    memset(&pi, 0, sizeof pi);
    n->dev[n->ndev].pci[0] = '\0';
    if (n->get_pci(h, &pi) == NVML_SUCCESS) {
      if (pi.domain > 0xffff)
        snprintf(n->dev[n->ndev].pci, WD_PCI_LEN, "%08x:%02x:%02x", pi.domain, pi.bus & 0xff,
                 pi.device & 0xff);
      else
        snprintf(n->dev[n->ndev].pci, WD_PCI_LEN, "%04x:%02x:%02x", pi.domain, pi.bus & 0xff,
                 pi.device & 0xff);
    }
    n->ndev++;
  }
  if (n->ndev == 0) {
    rc = ft_err_set(FT_ENOENT, "NVML not available: none of %u GPUs supports Xid events", count);
    goto fail;
  }
  *out = n;
  return FT_OK;
fail:
  wd_nvml_close(n);
  return rc;
}

void wd_nvml_close(wd_nvml *n) {
  if (!n)
    return;
  if (n->set && n->set_free)
    n->set_free(n->set);
  if (n->inited && n->shutdown)
    n->shutdown();
  if (n->dl)
    dlclose(n->dl);
  free(n);
}

int wd_nvml_wait(wd_nvml *n, unsigned timeout_ms, wd_nvml_xid *ev) {
  if (!n || !ev || !n->set)
    return ft_err_set(FT_EINVAL, "wd_nvml_wait: bad arguments");
  nvml_event_data d;
  memset(&d, 0, sizeof d);
  nvmlReturn_t r = n->set_wait(n->set, &d, timeout_ms);
  if (r == NVML_ERROR_TIMEOUT)
    return 0;
  if (r != NVML_SUCCESS)
    return ft_err_set(FT_EIO, "nvmlEventSetWait_v2: %s", nvml_str(n, r));
  if (!(d.eventType & NVML_EVENT_XID_CRITICAL))
    return 0;
  ev->gpu_index = -1;
  ev->pci[0] = '\0';
  ev->xid = (int)(d.eventData > 0x7fffffffULL ? 0x7fffffff : d.eventData);
  for (int i = 0; i < n->ndev; i++) {
    if (n->dev[i].handle == d.device) {
      ev->gpu_index = n->dev[i].index;
      memcpy(ev->pci, n->dev[i].pci, WD_PCI_LEN);
      break;
    }
  }
  return 1;
}

int wd_nvml_device_count(const wd_nvml *n) {
  return n ? n->ndev : 0;
}

/* ---- health (the node doctor) -------------------------------------------- */

#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0

int wd_nvml_health_of(const char *lib, const char *pci, wd_nvml_health *out) {
  if (!pci || !out)
    return ft_err_set(FT_EINVAL, "wd_nvml_health_of: NULL argument");
  *out = (wd_nvml_health){-1, -1, -1, -1};
  const char *libname = lib ? lib : "libnvidia-ml.so.1";
  void *dl = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    return ft_err_set(FT_ENOENT, "NVML not available: %s", e ? e : libname);
  }
  nvmlReturn_t (*init)(void), (*shutdown)(void);
  const char *(*estr)(nvmlReturn_t);
  nvmlReturn_t (*by_pci)(const char *, nvmlDevice_t *);
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long *);
  nvmlReturn_t (*retired)(nvmlDevice_t, int *);
  nvmlReturn_t (*remap)(nvmlDevice_t, unsigned *, unsigned *, unsigned *, unsigned *);
  *(void **)&init = dlsym(dl, "nvmlInit_v2");
  *(void **)&shutdown = dlsym(dl, "nvmlShutdown");
  *(void **)&estr = dlsym(dl, "nvmlErrorString");
  *(void **)&by_pci = dlsym(dl, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&ecc = dlsym(dl, "nvmlDeviceGetTotalEccErrors");
  *(void **)&retired = dlsym(dl, "nvmlDeviceGetRetiredPagesPendingStatus");
  *(void **)&remap = dlsym(dl, "nvmlDeviceGetRemappedRows"); /* Ampere and later */
  int rc = FT_OK;
  if (!init || !shutdown || !by_pci || !ecc || !retired) {
    dlclose(dl);
    return ft_err_set(FT_ENOENT, "NVML not available: %s lacks the health queries", libname);
  }
  nvmlReturn_t r = init();
  if (r != NVML_SUCCESS) {
    rc = ft_err_set(FT_EIO, "nvmlInit_v2: %s", estr ? estr(r) : "failed");
    dlclose(dl);
    return rc;
  }
  nvmlDevice_t dev;
  r = by_pci(pci, &dev);
  if (r != NVML_SUCCESS) {
    rc = ft_err_set(FT_ENOENT, "NVML knows no GPU at %s: %s", pci, estr ? estr(r) : "error");
  } else {
    unsigned long long n = 0;
    int pending = 0;
    unsigned corr = 0, unc = 0, rp = 0, rf = 0;
    if (ecc(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS)
      out->ecc_uncorrected = n > (unsigned long long)LLONG_MAX ? LLONG_MAX : (long long)n;
    if (retired(dev, &pending) == NVML_SUCCESS)
      out->retired_pending = pending != 0;
    if (remap && remap(dev, &corr, &unc, &rp, &rf) == NVML_SUCCESS) {
      out->remap_pending = rp != 0;
      out->remap_failed = rf != 0;
    }
  }
  shutdown();
  dlclose(dl);
  return rc;
}
