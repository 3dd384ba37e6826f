/*
 * sup_kv: rendezvous key/value store with waiting gets (see sup_kv.h).
 *
 * Why so plain: a gang's rendezvous is a few keys per rank (Gloo's
 * addresses), so a linear table and a linked list of pending gets are the
 * right size; each set re-checks the pending gets (O(pending x keys)).
 */
#include "sup_kv.h"

#include "ft_err.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_entry {
  char *key;
  uint8_t *val;
  uint32_t len;
} kv_entry;

typedef struct kv_get {
  struct kv_get *next;
  uint64_t owner;
  uint32_t req;
  char **keys;
  uint32_t nkeys;
  void *tag;
} kv_get;

struct sup_kv {
  kv_entry *e;
  size_t n, cap;
  kv_get *pending;
  size_t npending;
  sup_kv_reply_fn reply;
  void *ud;
};

static kv_entry *find(const sup_kv *kv, const char *key) {
  for (size_t i = 0; i < kv->n; i++)
    if (strcmp(kv->e[i].key, key) == 0)
      return &kv->e[i];
  return NULL;
}

static void get_free(kv_get *g) {
  for (uint32_t i = 0; i < g->nkeys; i++)
    free(g->keys[i]);
  free(g->keys);
  free(g);
}

int sup_kv_new(sup_kv_reply_fn reply, void *ud, sup_kv **out) {
  sup_kv *kv = calloc(1, sizeof *kv);
  if (!kv)
    return ft_err_set(FT_ENOMEM, "out of memory");
  kv->reply = reply;
  kv->ud = ud;
  *out = kv;
  return FT_OK;
}

void sup_kv_free(sup_kv *kv) {
  if (!kv)
    return;
  while (kv->pending) {
    kv_get *g = kv->pending;
    kv->pending = g->next;
    kv->reply(kv->ud, g->tag, g->owner, g->req, -1, NULL, 0);
    get_free(g);
  }
  for (size_t i = 0; i < kv->n; i++) {
    free(kv->e[i].key);
    free(kv->e[i].val);
  }
  free(kv->e);
  free(kv);
}

/* Answers g if all its keys exist: 1 answered, 0 not yet, FT_ENOMEM. */
static int try_answer(sup_kv *kv, kv_get *g) {
  ft_wire_blob vals[FT_WIRE_MAX_KEYS];
  if (g->nkeys > FT_WIRE_MAX_KEYS)
    return ft_err_set(FT_EINVAL, "too many keys");
  for (uint32_t i = 0; i < g->nkeys; i++) {
    kv_entry *e = find(kv, g->keys[i]);
    if (!e)
      return 0;
    vals[i].data = e->val;
    vals[i].len = e->len;
  }
  kv->reply(kv->ud, g->tag, g->owner, g->req, FT_KV_OK, vals, g->nkeys);
  return 1;
}

int sup_kv_set(sup_kv *kv, const char *key, const uint8_t *value, uint32_t len) {
  uint8_t *v = malloc(len ? len : 1);
  if (!v)
    return ft_err_set(FT_ENOMEM, "out of memory");
  if (len)
    memcpy(v, value, len);
  kv_entry *e = find(kv, key);
  if (e) {
    free(e->val);
  } else {
    if (kv->n == kv->cap) {
      size_t cap = kv->cap ? 2 * kv->cap : 16;
      kv_entry *ne = realloc(kv->e, cap * sizeof *ne);
      if (!ne) {
        free(v);
        return ft_err_set(FT_ENOMEM, "out of memory");
      }
      kv->e = ne;
      kv->cap = cap;
    }
    char *k = strdup(key);
    if (!k) {
      free(v);
      return ft_err_set(FT_ENOMEM, "out of memory");
    }
    e = &kv->e[kv->n++];
    e->key = k;
  }
  e->val = v;
  e->len = len;
  /* answer the gets this set completes (the reply may not touch kv) */
  kv_get **pp = &kv->pending;
  while (*pp) {
    kv_get *g = *pp;
    int r = try_answer(kv, g);
    if (r == 1) {
      *pp = g->next;
      kv->npending--;
      get_free(g);
    } else {
      pp = &g->next;
    }
  }
  return FT_OK;
}

int sup_kv_get(sup_kv *kv, uint64_t owner, uint32_t req, const char *const *keys, uint32_t nkeys,
               void *tag) {
  if (nkeys == 0 || nkeys > FT_WIRE_MAX_KEYS)
    return ft_err_set(FT_EINVAL, "KV_GET with %u keys", nkeys);
  kv_get *g = calloc(1, sizeof *g);
  if (!g)
    return ft_err_set(FT_ENOMEM, "out of memory");
  g->owner = owner;
  g->req = req;
  g->tag = tag;
  g->keys = calloc(nkeys, sizeof *g->keys);
  if (!g->keys) {
    free(g);
    return ft_err_set(FT_ENOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < nkeys; i++) {
    g->keys[i] = strdup(keys[i]);
    g->nkeys = i + 1;
    if (!g->keys[i]) {
      get_free(g);
      return ft_err_set(FT_ENOMEM, "out of memory");
    }
  }
  int r = try_answer(kv, g);
  if (r == 1) {
    get_free(g);
    return 1;
  }
  g->next = kv->pending;
  kv->pending = g;
  kv->npending++;
  return 0;
}

int sup_kv_timeout(sup_kv *kv, void *tag) {
  for (kv_get **pp = &kv->pending; *pp; pp = &(*pp)->next) {
    kv_get *g = *pp;
    if (g->tag != tag)
      continue;
    *pp = g->next;
    kv->npending--;
    kv->reply(kv->ud, g->tag, g->owner, g->req, FT_KV_TIMEOUT, NULL, 0);
    get_free(g);
    return 1;
  }
  return 0;
}

void sup_kv_drop_owner(sup_kv *kv, uint64_t owner) {
  kv_get **pp = &kv->pending;
  while (*pp) {
    kv_get *g = *pp;
    if (g->owner == owner) {
      *pp = g->next;
      kv->npending--;
      kv->reply(kv->ud, g->tag, g->owner, g->req, -1, NULL, 0);
      get_free(g);
    } else {
      pp = &g->next;
    }
  }
}

size_t sup_kv_nkeys(const sup_kv *kv) {
  return kv->n;
}
size_t sup_kv_npending(const sup_kv *kv) {
  return kv->npending;
}

const uint8_t *sup_kv_lookup(const sup_kv *kv, const char *key, uint32_t *len) {
  kv_entry *e = find(kv, key);
  if (!e)
    return NULL;
  if (len)
    *len = e->len;
  return e->val;
}
