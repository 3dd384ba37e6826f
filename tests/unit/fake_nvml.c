/*
 * fake_nvml: a stand-in for libnvidia-ml.so.1 with the few symbols the node
 * doctor's health query resolves (wd_nvml_health_of), for machines without
 * a GPU or a driver. Values from the environment:
 *   FAKE_NVML_PCI      the one bus id it knows (any when unset)
 *   FAKE_NVML_ECC      uncorrected volatile ECC errors (0)
 *   FAKE_NVML_RETIRED  1: pages pending retirement (0)
 *   FAKE_NVML_REMAP    "pending" or "failed" (none)
 *   FAKE_NVML_INIT     an NVML error code nvmlInit_v2 returns (0)
 * The real library's behaviour is NVML's documentation; this only lets the
 * caller's handling of each answer be tested.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

static int env(const char *k, int d) {
  const char *v = getenv(k);
  return v && *v ? atoi(v) : d;
}

nvmlReturn_t nvmlInit_v2(void) {
  return env("FAKE_NVML_INIT", 0);
}
nvmlReturn_t nvmlShutdown(void) {
  return 0;
}
const char *nvmlErrorString(nvmlReturn_t r) {
  return r == 6 ? "Not Found" : r ? "Unknown Error (fake)" : "Success";
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *dev) {
  const char *known = getenv("FAKE_NVML_PCI");
  if (known && *known && strcasecmp(known, pci) != 0)
    return 6; /* NVML_ERROR_NOT_FOUND */
  *dev = (nvmlDevice_t)(uintptr_t)0x1;
  return 0;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int type, int counter,
                                         unsigned long long *n) {
  (void)dev;
  if (type != 1 || counter != 0)
    return 2; /* only uncorrected, volatile is asked for */
  *n = (unsigned long long)env("FAKE_NVML_ECC", 0);
  return 0;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending) {
  (void)dev;
  *pending = env("FAKE_NVML_RETIRED", 0);
  return 0;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned *corr, unsigned *unc,
                                       unsigned *pending, unsigned *failed) {
  (void)dev;
  const char *r = getenv("FAKE_NVML_REMAP");
  *corr = *unc = 0;
  *pending = r && !strcmp(r, "pending");
  *failed = r && !strcmp(r, "failed");
  return 0;
}
