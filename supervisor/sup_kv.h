/*
 * sup_kv: the rendezvous key/value store the supervisor serves to a gang's
 * workers (KV_SET / KV_GET / KV_VALUE in common/ft_wire.h), with gets that
 * wait until every key they name exists.
 *
 * Pure: no sockets, no timers. A waiting get is answered through the reply
 * callback, either at once (from sup_kv_get), when a later sup_kv_set makes
 * its key set complete, or with FT_KV_TIMEOUT when the caller's timer calls
 * sup_kv_timeout. The caller owns the timers; `tag` is the caller's handle
 * for one pending get (its timer), given back in the reply, which is the
 * last time the store mentions that get: the caller frees the tag there.
 *
 * Keys are set once per generation (they carry the "g<gen>/" prefix); a
 * second set overwrites. All keys are kept (they are tiny).
 *
 * What a peer stores is bounded: sup_kv_set_by charges each key and its
 * value to an account (the caller's choice: the supervisor uses one per
 * rank and generation) and refuses a set that would take the account past
 * SUP_KV_MAX_PEER_BYTES or SUP_KV_MAX_PEER_KEYS (sup_kv_set_limits), with
 * FT_EPROTO and a detail naming the bound; nothing is stored then. An
 * overwrite charges the new size and credits the key's previous account.
 * The supervisor's own keys (sup_kv_set: the restore manifest) are charged
 * to no one.
 *
 * Invariants: every get reaches the reply callback exactly once: OK,
 * TIMEOUT, or status -1 when sup_kv_drop_owner / sup_kv_free drops it (send
 * nothing then, only free the tag).
 * Threads: single-threaded.
 */
#ifndef SUP_KV_H
#define SUP_KV_H

#include "ft_wire.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sup_kv sup_kv;

/* status: FT_KV_OK (vals/nvals are the values in key order, borrowed for the
 * call), FT_KV_TIMEOUT (nvals 0), or -1: the get was dropped (its owner went
 * away): send nothing, just free tag. */
typedef void (*sup_kv_reply_fn)(void *ud, void *tag, uint64_t owner, uint32_t req, int status,
                                const ft_wire_blob *vals, uint32_t nvals);

int sup_kv_new(sup_kv_reply_fn reply, void *ud, sup_kv **out);
/* Frees the store; pending gets are dropped (reply with status -1). */
void sup_kv_free(sup_kv *kv);

/* Stores key = value (copied), then answers every pending get it completes. */
int sup_kv_set(sup_kv *kv, const char *key, const uint8_t *value, uint32_t len);
/* The same for a peer: charged to account `who` (key bytes + value bytes,
 * one key). FT_EPROTO when the account would pass a bound (nothing is
 * stored), FT_ENOMEM. */
int sup_kv_set_by(sup_kv *kv, uint64_t who, const char *key, const uint8_t *value, uint32_t len);
/* Bounds per account. A healthy rank stores a few keys a generation: Gloo's
 * full-mesh rendezvous one key of its pairs' addresses (at most one value,
 * FT_WIRE_MAX_VALUE = 1 MiB, the wire's own cap), NCCL's unique id 128
 * bytes, once per communicator. 16 MiB and 1,024 keys are sixteen times
 * the largest legitimate value and hundreds of communicators. */
#define SUP_KV_MAX_PEER_BYTES ((size_t)16 << 20)
#define SUP_KV_MAX_PEER_KEYS 1024
/* 0 keeps the default. */
void sup_kv_set_limits(sup_kv *kv, size_t max_bytes, size_t max_keys);
/* What account who holds now (for tests and /status). */
void sup_kv_account(const sup_kv *kv, uint64_t who, size_t *bytes, size_t *keys);
/* A get of nkeys keys for (owner, req). Answers at once if every key
 * exists (returns 1), else queues it (returns 0); FT_ENOMEM. tag is handed
 * back in the reply either way. Keys are copied. */
int sup_kv_get(sup_kv *kv, uint64_t owner, uint32_t req, const char *const *keys, uint32_t nkeys,
               void *tag);
/* The caller's timer for (owner, req, tag) expired: answers TIMEOUT if that
 * get is still pending (returns 1), else 0. */
int sup_kv_timeout(sup_kv *kv, void *tag);
/* Drops every pending get of owner (a closed connection). */
void sup_kv_drop_owner(sup_kv *kv, uint64_t owner);
/* Number of keys stored / gets pending (for tests and /status). */
size_t sup_kv_nkeys(const sup_kv *kv);
size_t sup_kv_npending(const sup_kv *kv);
/* A value by key, borrowed until the next set; NULL if absent. */
const uint8_t *sup_kv_lookup(const sup_kv *kv, const char *key, uint32_t *len);

#endif
