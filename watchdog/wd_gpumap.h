/*
 * wd_gpumap: which local GPU index a PCI bus id is (to turn an Xid line's
 * "PCI:0000:3b:00" into "GPU 2 of this node", and so into a rank).
 *
 * WHAT: a small table (index, normalised bus id) read from text in the form
 * `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` prints:
 *
 *     0, 00000000:18:00.0
 *     1, 00000000:3B:00.0
 *
 * (a comma or spaces between the two fields; blank lines and '#' comments
 * are skipped), from a file of that form, or by running nvidia-smi when it
 * is on PATH. Running nvidia-smi is optional: nothing requires it.
 *
 * INVARIANTS: indexes and bus ids are unique within a map; bus ids are stored
 * normalised (wd_xid_pci_normalize), so lookups match whatever form the
 * kernel log uses.
 *
 * THREADING: plain data; the nvidia-smi helper forks a shell (popen), so call
 * it at start-up, not from a signal handler or a latency-critical path.
 */
#ifndef WD_GPUMAP_H
#define WD_GPUMAP_H

#include <stddef.h>

#include "wd_xid.h"

#define WD_GPUMAP_MAX 64

typedef struct wd_gpumap {
  int n;
  struct {
    int index;
    char pci[WD_PCI_LEN];
  } gpu[WD_GPUMAP_MAX];
} wd_gpumap;

/* Parses text (len bytes). FT_EFORMAT with the line number on a bad line or
 * a duplicate; FT_ENOSPC beyond WD_GPUMAP_MAX GPUs. *m is replaced. */
int wd_gpumap_parse(const char *text, size_t len, wd_gpumap *m);

/* Reads and parses a file (at most 64 KiB). FT_ENOENT, FT_EIO, parse errors. */
int wd_gpumap_load(const char *path, wd_gpumap *m);

/* Runs `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` when
 * an executable nvidia-smi is on PATH. FT_ENOENT (detail "not available")
 * when it is not; FT_EIO when it fails. */
int wd_gpumap_from_nvidia_smi(wd_gpumap *m);

/* The GPU index for a bus id in any accepted form; -1 when unknown or not a
 * bus id. */
int wd_gpumap_index(const wd_gpumap *m, const char *pci);

#endif
