/*
 * ckpt_hashset: the store's one set of keys, each with a small int value.
 *
 * Keys are byte strings of any length (a 32-byte chunk hash for garbage
 * collection's mark set, an object key for the S3 tier's upload queue and
 * its "known in the bucket" cache, the names a merged listing has already
 * given). A chained hash table (FNV-1a), doubled when it holds as many keys
 * as buckets, so put, find and del take constant time on average and memory
 * grows with the distinct keys, not with how often a key is added.
 *
 * Zero-initialise a ckpt_hashset to get an empty one; release it with
 * ckpt_hashset_release. Not thread-safe: the caller locks.
 */
#ifndef CKPT_HASHSET_H
#define CKPT_HASHSET_H

#include <stddef.h>

typedef struct ckpt_hashent ckpt_hashent;

typedef struct ckpt_hashset {
  ckpt_hashent **b;
  size_t nb; /* buckets */
  size_t n;  /* keys */
} ckpt_hashset;

/* Adds key with val, or sets the value of a key already there.
 * FT_ENOMEM (the set is unchanged). */
int ckpt_hashset_put(ckpt_hashset *s, const void *key, size_t len, int val);
/* The value of key, to read or change in place; NULL if absent. */
int *ckpt_hashset_get(const ckpt_hashset *s, const void *key, size_t len);
/* 1 if key is in the set. */
int ckpt_hashset_has(const ckpt_hashset *s, const void *key, size_t len);
/* Removes key if it is there. */
void ckpt_hashset_del(ckpt_hashset *s, const void *key, size_t len);
/* Frees everything; the set is empty (and usable) afterwards. */
void ckpt_hashset_release(ckpt_hashset *s);

#endif
