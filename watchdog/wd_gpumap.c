/*
 * wd_gpumap: PCI bus id -> local GPU index. See wd_gpumap.h.
 */
#include "wd_gpumap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ft_err.h"

#define GPUMAP_TEXT_MAX (64 * 1024)

static int parse_line(const char *a, const char *b, int lineno, wd_gpumap *m) {
  while (a < b && (*a == ' ' || *a == '\t' || *a == '\r'))
    a++;
  while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
    b--;
  if (a == b || *a == '#')
    return FT_OK;
  long idx = 0;
  int digits = 0;
  while (a < b && *a >= '0' && *a <= '9') {
    if (++digits > 4)
      return ft_err_set(FT_EFORMAT, "GPU map line %d: index too large", lineno);
    idx = idx * 10 + (*a++ - '0');
  }
  if (!digits)
    return ft_err_set(FT_EFORMAT, "GPU map line %d: expected 'INDEX, PCI_BUS_ID'", lineno);
  int sep = 0;
  while (a < b && (*a == ' ' || *a == '\t' || *a == ',')) {
    sep = 1;
    a++;
  }
  if (!sep || a == b)
    return ft_err_set(FT_EFORMAT, "GPU map line %d: expected 'INDEX, PCI_BUS_ID'", lineno);
  char pci[WD_PCI_LEN];
  if (wd_xid_pci_normalize(a, (size_t)(b - a), pci))
    return ft_err_set(FT_EFORMAT, "GPU map line %d: '%.*s' is not a PCI bus id", lineno,
                      (int)(b - a > 40 ? 40 : b - a), a);
  for (int i = 0; i < m->n; i++) {
    if (m->gpu[i].index == (int)idx || strcmp(m->gpu[i].pci, pci) == 0)
      return ft_err_set(FT_EFORMAT, "GPU map line %d: GPU %ld or bus id %s listed twice", lineno,
                        idx, pci);
  }
  if (m->n >= WD_GPUMAP_MAX)
    return ft_err_set(FT_ENOSPC, "GPU map line %d: more than %d GPUs", lineno, WD_GPUMAP_MAX);
  m->gpu[m->n].index = (int)idx;
  memcpy(m->gpu[m->n].pci, pci, sizeof pci);
  m->n++;
  return FT_OK;
}

int wd_gpumap_parse(const char *text, size_t len, wd_gpumap *m) {
  if (!text || !m)
    return ft_err_set(FT_EINVAL, "wd_gpumap_parse: NULL argument");
  wd_gpumap tmp;
  memset(&tmp, 0, sizeof tmp);
  const char *p = text, *end = text + len;
  int lineno = 0;
  while (p < end) {
    lineno++;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    int rc = parse_line(p, e, lineno, &tmp);
    if (rc)
      return rc;
    p = nl ? nl + 1 : end;
  }
  *m = tmp;
  return FT_OK;
}

/* Reads at most GPUMAP_TEXT_MAX bytes of f into a new buffer. */
static int slurp(FILE *f, const char *what, char **out, size_t *len) {
  char *buf = malloc(GPUMAP_TEXT_MAX);
  if (!buf)
    return ft_err_set(FT_ENOMEM, "%s: out of memory", what);
  size_t n = fread(buf, 1, GPUMAP_TEXT_MAX, f);
  if (ferror(f)) {
    free(buf);
    return ft_err_set(FT_EIO, "read %s failed", what);
  }
  if (n == GPUMAP_TEXT_MAX) {
    free(buf);
    return ft_err_set(FT_EFORMAT, "%s: more than %d bytes", what, GPUMAP_TEXT_MAX);
  }
  *out = buf;
  *len = n;
  return FT_OK;
}

int wd_gpumap_load(const char *path, wd_gpumap *m) {
  if (!path || !m)
    return ft_err_set(FT_EINVAL, "wd_gpumap_load: NULL argument");
  FILE *f = fopen(path, "r");
  if (!f)
    return ft_err_set(errno == ENOENT ? FT_ENOENT : FT_EIO, "open GPU map %s: %s", path,
                      strerror(errno));
  char *buf = NULL;
  size_t len = 0;
  int rc = slurp(f, path, &buf, &len);
  fclose(f);
  if (rc)
    return rc;
  rc = wd_gpumap_parse(buf, len, m);
  free(buf);
  return rc;
}

/* 1 when an executable named `name` is in one of PATH's directories. */
static int on_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path || !*path)
    return 0;
  char dir[4096];
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    if (n > 0 && n + strlen(name) + 2 < sizeof dir) {
      memcpy(dir, path, n);
      dir[n] = '/';
      strcpy(dir + n + 1, name);
      if (access(dir, X_OK) == 0)
        return 1;
    }
    if (!colon)
      break;
    path = colon + 1;
  }
  return 0;
}

int wd_gpumap_from_nvidia_smi(wd_gpumap *m) {
  if (!m)
    return ft_err_set(FT_EINVAL, "wd_gpumap_from_nvidia_smi: NULL argument");
  if (!on_path("nvidia-smi"))
    return ft_err_set(FT_ENOENT, "nvidia-smi not available (not on PATH)");
  FILE *f = popen("nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader 2>/dev/null", "r");
  if (!f)
    return ft_err_set(FT_EIO, "popen nvidia-smi: %s", strerror(errno));
  char *buf = NULL;
  size_t len = 0;
  int rc = slurp(f, "nvidia-smi output", &buf, &len);
  int st = pclose(f);
  if (rc)
    goto out;
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    rc = ft_err_set(FT_EIO, "nvidia-smi failed (status %d)",
                    st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    goto out;
  }
  rc = wd_gpumap_parse(buf, len, m);
out:
  free(buf);
  return rc;
}

int wd_gpumap_index(const wd_gpumap *m, const char *pci) {
  if (!m || !pci)
    return -1;
  char norm[WD_PCI_LEN];
  if (wd_xid_pci_normalize(pci, strlen(pci), norm))
    return -1;
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->gpu[i].pci, norm) == 0)
      return m->gpu[i].index;
  return -1;
}
