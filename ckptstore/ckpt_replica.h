/*
 * ckpt_replica: a checkpoint's chunks copied into the memory of a process
 * on another host (a buddy), so that losing a host loses no snapshot that
 * is still in some other host's memory (docs/design.md §6).
 *
 * A replica server runs in every worker that keeps chunks in memory
 * (ckpt_store_keep_in_memory): it takes chunks other workers push into
 * that same memory, where ckpt_store_read finds them first. So a warm
 * spare that was pushed a rank's shard and is then promoted into that
 * rank restores it without reading the store, each chunk verified by its
 * hash (a damaged copy is refused on arrival and again on use).
 *
 * The channel (TCP; integers big-endian):
 *   server -> client  "FTREPL01", nonce (32 random bytes, new per connection)
 *   client -> server  mac (32) = ft_wire_hmac_label(token, "ftsup-replica-v1",
 *                     nonce, run): the run token proves the client is of
 *                     this run (a wrong MAC: the server closes)
 *   server -> client  'K'
 *   then requests, each: op (1 byte), hash (32), len u64, where op is
 *   'P' (push):
 *     server -> client  'H' (has it: nothing follows), 'W' (wants it), or
 *                       'R' (len over CKPT_REPLICA_MAX_CHUNK: it closes)
 *     client -> server  on 'W': len bytes
 *     server -> client  'K' kept, or 'X' the bytes do not hash to their
 *                       name (dropped)
 *   'G' (get: a restore whose own memory lacks the chunk):
 *     server -> client  'Y' and len bytes, or 'N' (not held); the client
 *                       verifies the hash before using them
 *   any other op: the server closes.
 * Every read and write has a deadline (CKPT_REPLICA_IO_TIMEOUT_S): a silent
 * or slow peer is dropped, never waited on. The server holds at most
 * CKPT_REPLICA_MAX_CONN connections; the memory it fills is the store's
 * (bounded by ckpt_store_keep_in_memory's max_bytes, oldest chunks first).
 * Not covered: the frames after the MAC are not authenticated one by one
 * (the network is the cluster's own, as for the control protocol), but a
 * chunk is only ever used when its bytes hash to its name.
 */
#ifndef CKPT_REPLICA_H
#define CKPT_REPLICA_H

#include <stdint.h>

#ifndef CKPT_HASH_LEN
#define CKPT_HASH_LEN 32
#endif

#include "ckptstore.h"

#define CKPT_REPLICA_MAX_CHUNK (256ull << 20)
#define CKPT_REPLICA_MAX_CONN 64
#define CKPT_REPLICA_IO_TIMEOUT_S 10

typedef struct ckpt_replica ckpt_replica;

typedef struct ckpt_replica_stats {
  uint64_t chunks_kept;     /* taken into memory */
  uint64_t bytes_kept;      /* their bytes */
  uint64_t chunks_had;      /* offered, already in memory */
  uint64_t chunks_rejected; /* bytes that did not hash to their name */
  uint64_t chunks_served;   /* sent to a restore ('G') */
  uint64_t conns_refused;   /* a wrong MAC, a malformed frame, too many */
} ckpt_replica_stats;

/* Starts a replica server for store s (which must keep chunks in memory)
 * on host (an address of this host; port 0: the kernel picks). token: the
 * run token (64 hex digits); run: the run id. */
int ckpt_replica_serve(ckpt_store *s, const char *host, const char *token, const char *run,
                       ckpt_replica **out);
/* "HOST:PORT" (an IPv6 host in brackets) that peers dial. */
const char *ckpt_replica_addr(const ckpt_replica *r);
void ckpt_replica_stats_get(ckpt_replica *r, ckpt_replica_stats *st);
/* Stops accepting, drops every connection, waits for its threads. NULL is
 * a no-op. */
void ckpt_replica_stop(ckpt_replica *r);

typedef struct ckpt_push_stats {
  uint64_t chunks_sent, bytes_sent; /* the buddy took them */
  uint64_t chunks_had;              /* the buddy had them already */
  uint64_t chunks_absent;           /* not in this process's memory: not sent */
} ckpt_push_stats;

/* Pushes every chunk of shard that is in s's memory to the replica server
 * at addr, proving token for run. Stops early (FT_OK) once *cancel (may be
 * NULL) is non-zero. Errors: FT_ENET (no connection, a deadline passed,
 * the peer closed), FT_EPROTO (not a replica server, or it refused the
 * MAC or a chunk), FT_ECORRUPT (the buddy found a chunk damaged). *st
 * (may be NULL) is added to. */
int ckpt_replica_push(ckpt_store *s, const ckpt_shard *shard, const char *addr, const char *token,
                      const char *run, const int *cancel, ckpt_push_stats *st);

/* One chunk (hash, len bytes) from the memory of the replica server at
 * addr into buf: FT_OK (the caller verifies its hash), FT_ENOENT (not
 * held), or the errors of ckpt_replica_push. */
int ckpt_replica_fetch(const char *addr, const char *token, const char *run,
                       const uint8_t hash[CKPT_HASH_LEN], uint64_t len, void *buf);

#endif
