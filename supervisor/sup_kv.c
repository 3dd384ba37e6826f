/*
 * sup_kv: rendezvous key/value store with waiting gets (see sup_kv.h).
 *
 * Why so plain: a gang's rendezvous is a few keys per rank (Gloo's
 * addresses), so a linear table and a linked list of pending gets are the
 * right size; each set re-checks the pending gets (O(pending x keys)).
 * Accounts (what each peer stores) are an open-addressing table keyed by
 * the caller's uint64, grown at half full: a set at 16,384 ranks must not
 * search a list of them. An entry remembers the account it is charged to.
 *
 * Checked (FT_ASSERT_INV, Debug and sanitizer builds; common/ft_bug.h), by
 * check_kv on entry to and exit from every call that changes the store,
 * and check_account after each charged set:
 *   K1 one thread: every call on the thread that made the store, and none
 *      from inside its own reply callback (which may not touch kv);
 *   K2 an account holds exactly the keys and bytes of the entries charged
 *      to it, and a set never takes it past its bounds;
 *   K3 npending is the length of the pending list; each pending get names
 *      1..FT_WIRE_MAX_KEYS keys, a tag no other pending get has, and a key
 *      that is missing (else it would have been answered: each get reaches
 *      the reply exactly once);
 *   K4 keys are unique; the account table is at most half full.
 * The walks are bounded (CHECK_KV_WALK gets; K2 for every account and K4's
 * uniqueness only while the store is that small): a call already costs
 * O(keys) in find, and a rendezvous at 16,384 ranks has as many gets.
 */
#include "sup_kv.h"

#include "ft_bug.h"
#include "ft_err.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_entry {
  char *key;
  uint8_t *val;
  uint32_t len;
  int charged; /* to account `who` (0: the supervisor's own key) */
  uint64_t who;
} kv_entry;

typedef struct kv_account {
  uint64_t who;
  int used;
  size_t bytes, keys;
} kv_account;

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
  kv_account *acct; /* open addressing, acap a power of two */
  size_t nacct, acap;
  size_t max_bytes, max_keys;
#if FT_INVARIANTS_ON
  pthread_t owner; /* K1: the thread that made it */
  int in_reply;    /* K1: inside the reply callback */
#endif
};

static kv_entry *find(const sup_kv *kv, const char *key) {
  for (size_t i = 0; i < kv->n; i++)
    if (strcmp(kv->e[i].key, key) == 0)
      return &kv->e[i];
  return NULL;
}

/* Every answer goes through here: K1 sees a reply that calls back. */
static void reply(sup_kv *kv, kv_get *g, int status, const ft_wire_blob *vals, uint32_t nvals) {
#if FT_INVARIANTS_ON
  kv->in_reply = 1;
#endif
  kv->reply(kv->ud, g->tag, g->owner, g->req, status, vals, nvals);
#if FT_INVARIANTS_ON
  kv->in_reply = 0;
#endif
}

static void get_free(kv_get *g) {
  for (uint32_t i = 0; i < g->nkeys; i++)
    free(g->keys[i]);
  free(g->keys);
  free(g);
}

/* The slot of account who: its own, or the free one where it would go;
 * NULL only when the table is empty. */
static kv_account *acct_slot(const sup_kv *kv, uint64_t who) {
  if (!kv->acap)
    return NULL;
  uint64_t h = who * 0x9e3779b97f4a7c15ull;
  for (size_t i = (size_t)(h >> 32) & (kv->acap - 1);; i = (i + 1) & (kv->acap - 1))
    if (!kv->acct[i].used || kv->acct[i].who == who)
      return &kv->acct[i];
}

#if FT_INVARIANTS_ON
/* How far a check walks the pending gets, and how small the store must be
 * for K2 over every account and K4's uniqueness (both O(keys^2) at most). */
#define CHECK_KV_WALK 64
/* How many pending gets K3 looks up (each O(keys)). */
#define CHECK_KV_MISSING 8

/* K1 */
static void check_caller(const sup_kv *kv, const char *op) {
  FT_ASSERT_INV(pthread_equal(pthread_self(), kv->owner),
                "K1: %s on a thread other than the store's (it is single-threaded)", op);
  FT_ASSERT_INV(!kv->in_reply, "K1: %s from inside the reply callback (it may not touch kv)", op);
}

/* K2 for account a: what its entries hold (O(keys)); bounds: and within
 * them (after a set charged to it). */
static void check_account(const sup_kv *kv, const kv_account *a, int bounds) {
  size_t bytes = 0, keys = 0;
  for (size_t i = 0; i < kv->n; i++)
    if (kv->e[i].charged && kv->e[i].who == a->who) {
      bytes += strlen(kv->e[i].key) + kv->e[i].len;
      keys++;
    }
  FT_ASSERT_INV(a->bytes == bytes && a->keys == keys,
                "K2: account %#" PRIx64 " holds %zu bytes in %zu keys; its entries, %zu in %zu",
                a->who, a->bytes, a->keys, bytes, keys);
  FT_ASSERT_INV(!bounds || (a->bytes <= kv->max_bytes && a->keys <= kv->max_keys),
                "K2: account %#" PRIx64 " past its bounds: %zu bytes (at most %zu), %zu keys (at "
                "most %zu)",
                a->who, a->bytes, kv->max_bytes, a->keys, kv->max_keys);
}

/* K3: the pending list, bounded */
static void check_pending(const sup_kv *kv) {
  size_t walked = 0;
  const kv_get *g = kv->pending;
  for (; g && walked < CHECK_KV_WALK; g = g->next, walked++) {
    FT_ASSERT_INV(g->nkeys >= 1 && g->nkeys <= FT_WIRE_MAX_KEYS, "K3: a pending get of %u keys",
                  g->nkeys);
    for (const kv_get *h = kv->pending; h != g; h = h->next)
      FT_ASSERT_INV(h->tag != g->tag,
                    "K3: two pending gets share one tag (owner %" PRIu64 " req %u, owner %" PRIu64
                    " req %u): it would be answered twice",
                    h->owner, h->req, g->owner, g->req);
    int missing = walked >= CHECK_KV_MISSING;
    for (uint32_t i = 0; i < g->nkeys && !missing; i++)
      missing = !find(kv, g->keys[i]);
    FT_ASSERT_INV(missing, "K3: a get (owner %" PRIu64 ", req %u) waits for keys that all exist",
                  g->owner, g->req);
  }
  FT_ASSERT_INV(g || walked == kv->npending, "K3: npending %zu, %zu gets pending", kv->npending,
                walked);
}

/* K1-K4, on entry to and exit from a call named op */
static void check_kv(const sup_kv *kv, const char *op) {
  check_caller(kv, op);
  check_pending(kv);
  FT_ASSERT_INV(kv->n <= kv->cap, "K4: %zu keys in a table of %zu", kv->n, kv->cap);
  FT_ASSERT_INV(!kv->acap || (!(kv->acap & (kv->acap - 1)) && 2 * kv->nacct <= kv->acap),
                "K4: %zu accounts in a table of %zu", kv->nacct, kv->acap);
  if (kv->n > CHECK_KV_WALK || kv->acap > 4 * CHECK_KV_WALK)
    return;
  for (size_t i = 0; i < kv->n; i++)
    for (size_t j = 0; j < i; j++)
      FT_ASSERT_INV(strcmp(kv->e[i].key, kv->e[j].key) != 0, "K4: key '%s' stored twice",
                    kv->e[i].key);
  size_t used = 0;
  for (size_t i = 0; i < kv->acap; i++)
    if (kv->acct[i].used) {
      used++;
      check_account(kv, &kv->acct[i], 0);
    }
  FT_ASSERT_INV(used == kv->nacct, "K4: %zu accounts counted, %zu used", kv->nacct, used);
  for (size_t i = 0; i < kv->n; i++) {
    const kv_account *a = kv->e[i].charged ? acct_slot(kv, kv->e[i].who) : NULL;
    FT_ASSERT_INV(!kv->e[i].charged || (a && a->used), "K2: key '%s' charged to no account",
                  kv->e[i].key);
  }
}
#else
static void check_caller(const sup_kv *kv, const char *op) {}
static void check_account(const sup_kv *kv, const kv_account *a, int bounds) {}
static void check_kv(const sup_kv *kv, const char *op) {}
#endif

int sup_kv_new(sup_kv_reply_fn reply, void *ud, sup_kv **out) {
  sup_kv *kv = calloc(1, sizeof *kv);
  if (!kv)
    return ft_err_set(FT_ENOMEM, "out of memory");
  kv->reply = reply;
  kv->ud = ud;
  kv->max_bytes = SUP_KV_MAX_PEER_BYTES;
  kv->max_keys = SUP_KV_MAX_PEER_KEYS;
#if FT_INVARIANTS_ON
  kv->owner = pthread_self();
#endif
  *out = kv;
  return FT_OK;
}

void sup_kv_free(sup_kv *kv) {
  if (!kv)
    return;
  check_kv(kv, "sup_kv_free");
  while (kv->pending) {
    kv_get *g = kv->pending;
    kv->pending = g->next;
    reply(kv, g, -1, NULL, 0);
    get_free(g);
  }
  for (size_t i = 0; i < kv->n; i++) {
    free(kv->e[i].key);
    free(kv->e[i].val);
  }
  free(kv->e);
  free(kv->acct);
  free(kv);
}

void sup_kv_set_limits(sup_kv *kv, size_t max_bytes, size_t max_keys) {
  check_caller(kv, "sup_kv_set_limits");
  kv->max_bytes = max_bytes ? max_bytes : SUP_KV_MAX_PEER_BYTES;
  kv->max_keys = max_keys ? max_keys : SUP_KV_MAX_PEER_KEYS;
}

/* Account who, created empty if new; NULL: out of memory. */
static kv_account *acct_get(sup_kv *kv, uint64_t who) {
  kv_account *a = acct_slot(kv, who);
  if (a && a->used)
    return a;
  if (2 * (kv->nacct + 1) > kv->acap) {
    size_t cap = kv->acap ? 2 * kv->acap : 64;
    kv_account *old = kv->acct, *na = calloc(cap, sizeof *na);
    if (!na)
      return NULL;
    size_t ocap = kv->acap;
    kv->acct = na;
    kv->acap = cap;
    for (size_t i = 0; i < ocap; i++)
      if (old[i].used)
        *acct_slot(kv, old[i].who) = old[i];
    free(old);
  }
  a = acct_slot(kv, who);
  *a = (kv_account){.who = who, .used = 1};
  kv->nacct++;
  return a;
}

void sup_kv_account(const sup_kv *kv, uint64_t who, size_t *bytes, size_t *keys) {
  const kv_account *a = acct_slot(kv, who);
  *bytes = a && a->used ? a->bytes : 0;
  *keys = a && a->used ? a->keys : 0;
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
  reply(kv, g, FT_KV_OK, vals, g->nkeys);
  return 1;
}

/* Whether account a may store key = len bytes (e: the key's entry if it
 * exists; an overwrite of a's own key replaces its charge): FT_EPROTO
 * naming the bound it would pass. Changes nothing. */
static int charge_check(const sup_kv *kv, const kv_account *a, const kv_entry *e, const char *key,
                        uint32_t len) {
  size_t bytes = a->bytes + strlen(key) + len, keys = a->keys + 1;
  if (e && e->charged && e->who == a->who) {
    bytes -= strlen(e->key) + e->len;
    keys--;
  }
  if (keys > kv->max_keys)
    return ft_err_set(FT_EPROTO,
                      "KV_SET '%s' refused: this peer would store %zu keys (at most %zu)", key,
                      keys, kv->max_keys);
  if (bytes > kv->max_bytes)
    return ft_err_set(FT_EPROTO,
                      "KV_SET '%s' refused: this peer would store %zu bytes (at most %zu)", key,
                      bytes, kv->max_bytes);
  return FT_OK;
}

/* Lifts e's charge from its account (before its value is replaced). */
static void uncharge(sup_kv *kv, kv_entry *e) {
  if (!e->charged)
    return;
  kv_account *p = acct_slot(kv, e->who);
  p->bytes -= strlen(e->key) + e->len;
  p->keys--;
  e->charged = 0;
}

static int set_impl(sup_kv *kv, kv_account *a, const char *key, const uint8_t *value,
                    uint32_t len) {
  kv_entry *e = find(kv, key);
  int rc = a ? charge_check(kv, a, e, key, len) : FT_OK;
  if (rc)
    return rc;
  uint8_t *v = malloc(len ? len : 1);
  if (!v)
    return ft_err_set(FT_ENOMEM, "out of memory");
  if (len)
    memcpy(v, value, len);
  if (e) {
    uncharge(kv, e);
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
    e->charged = 0;
  }
  e->val = v;
  e->len = len;
  if (a) {
    a->bytes += strlen(key) + len;
    a->keys++;
    e->charged = 1;
    e->who = a->who;
  }
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

int sup_kv_set(sup_kv *kv, const char *key, const uint8_t *value, uint32_t len) {
  check_kv(kv, "sup_kv_set");
  int rc = set_impl(kv, NULL, key, value, len);
  check_kv(kv, "sup_kv_set");
  return rc;
}

int sup_kv_set_by(sup_kv *kv, uint64_t who, const char *key, const uint8_t *value, uint32_t len) {
  check_kv(kv, "sup_kv_set_by");
  kv_account *a = acct_get(kv, who);
  if (!a)
    return ft_err_set(FT_ENOMEM, "out of memory");
  int rc = set_impl(kv, a, key, value, len);
  check_account(kv, a, rc == FT_OK);
  check_kv(kv, "sup_kv_set_by");
  return rc;
}

static int get_impl(sup_kv *kv, uint64_t owner, uint32_t req, const char *const *keys,
                    uint32_t nkeys, void *tag) {
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

int sup_kv_get(sup_kv *kv, uint64_t owner, uint32_t req, const char *const *keys, uint32_t nkeys,
               void *tag) {
  check_kv(kv, "sup_kv_get");
  int r = get_impl(kv, owner, req, keys, nkeys, tag);
  check_kv(kv, "sup_kv_get");
  return r;
}

static int timeout_impl(sup_kv *kv, void *tag) {
  for (kv_get **pp = &kv->pending; *pp; pp = &(*pp)->next) {
    kv_get *g = *pp;
    if (g->tag != tag)
      continue;
    *pp = g->next;
    kv->npending--;
    reply(kv, g, FT_KV_TIMEOUT, NULL, 0);
    get_free(g);
    return 1;
  }
  return 0;
}

int sup_kv_timeout(sup_kv *kv, void *tag) {
  check_kv(kv, "sup_kv_timeout");
  int r = timeout_impl(kv, tag);
  check_kv(kv, "sup_kv_timeout");
  return r;
}

void sup_kv_drop_owner(sup_kv *kv, uint64_t owner) {
  check_kv(kv, "sup_kv_drop_owner");
  kv_get **pp = &kv->pending;
  while (*pp) {
    kv_get *g = *pp;
    if (g->owner == owner) {
      *pp = g->next;
      kv->npending--;
      reply(kv, g, -1, NULL, 0);
      get_free(g);
    } else {
      pp = &g->next;
    }
  }
  check_kv(kv, "sup_kv_drop_owner");
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
