/*
 * ckpt_hashset: a chained hash set of byte-string keys with int values
 * (see ckpt_hashset.h). Each entry is one allocation: its link, value,
 * length and the key bytes.
 */
#include "ckpt_hashset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ft_err.h"

struct ckpt_hashent {
  ckpt_hashent *next;
  int val;
  size_t len;
  unsigned char key[];
};

static uint64_t fnv1a(const void *key, size_t len) {
  const unsigned char *p = key;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static ckpt_hashent **slot(const ckpt_hashset *s, const void *key, size_t len) {
  ckpt_hashent **p = &s->b[fnv1a(key, len) % s->nb];
  for (; *p; p = &(*p)->next)
    if ((*p)->len == len && memcmp((*p)->key, key, len) == 0)
      break;
  return p;
}

static int grow(ckpt_hashset *s) {
  size_t nb = s->nb ? s->nb * 2 : 1024;
  ckpt_hashent **b = calloc(nb, sizeof *b);
  if (!b)
    return ft_err_set(FT_ENOMEM, "out of memory");
  for (size_t i = 0; i < s->nb; i++)
    for (ckpt_hashent *e = s->b[i], *n; e; e = n) {
      n = e->next;
      size_t k = fnv1a(e->key, e->len) % nb;
      e->next = b[k];
      b[k] = e;
    }
  free(s->b);
  s->b = b;
  s->nb = nb;
  return FT_OK;
}

int ckpt_hashset_put(ckpt_hashset *s, const void *key, size_t len, int val) {
  int *v = ckpt_hashset_get(s, key, len);
  if (v) {
    *v = val;
    return FT_OK;
  }
  if (s->n + 1 > s->nb) {
    int rc = grow(s);
    if (rc)
      return rc;
  }
  ckpt_hashent *e = malloc(sizeof *e + len);
  if (!e)
    return ft_err_set(FT_ENOMEM, "out of memory");
  e->val = val;
  e->len = len;
  if (len)
    memcpy(e->key, key, len);
  ckpt_hashent **head = &s->b[fnv1a(key, len) % s->nb];
  e->next = *head;
  *head = e;
  s->n++;
  return FT_OK;
}

int *ckpt_hashset_get(const ckpt_hashset *s, const void *key, size_t len) {
  if (!s->nb)
    return NULL;
  ckpt_hashent *e = *slot(s, key, len);
  return e ? &e->val : NULL;
}

int ckpt_hashset_has(const ckpt_hashset *s, const void *key, size_t len) {
  return ckpt_hashset_get(s, key, len) != NULL;
}

void ckpt_hashset_del(ckpt_hashset *s, const void *key, size_t len) {
  if (!s->nb)
    return;
  ckpt_hashent **p = slot(s, key, len), *e = *p;
  if (!e)
    return;
  *p = e->next;
  free(e);
  s->n--;
}

void ckpt_hashset_release(ckpt_hashset *s) {
  for (size_t i = 0; i < s->nb; i++)
    for (ckpt_hashent *e = s->b[i], *n; e; e = n) {
      n = e->next;
      free(e);
    }
  free(s->b);
  memset(s, 0, sizeof *s);
}
