/*
 * ft_wire: the supervisor <-> worker control protocol (docs/design.md §3),
 * as a pure codec: no sockets, no event loop, no threads of its own. Both the
 * supervisor (libevent) and the worker's control client link it.
 *
 * WHY a hand-written binary codec: the supervisor must survive anything a
 * broken, stale or hostile peer sends. Every length, count and enum is checked
 * against a hard limit before it is used; the reader never reads past the end
 * of the frame; a frame that is not exactly well formed (including trailing
 * bytes) is rejected with FT_EPROTO and a precise reason in ft_err_detail().
 * The caller then closes the connection and logs that reason.
 * Encoding is canonical: for every frame F that ft_wire_decode() accepts,
 * ft_wire_encode(ft_wire_decode(F)) == F byte for byte.
 *
 * ---------------------------------------------------------------------------
 * FRAME
 *
 *   +----------------+---------+------+---------------------+
 *   | length  u32 BE | version | type | payload             |
 *   | (bytes after   |  u8 = 1 |  u8  | (length - 2 bytes)  |
 *   |  this field)   |         |      |                     |
 *   +----------------+---------+------+---------------------+
 *
 *   2 <= length <= FT_WIRE_MAX_FRAME (16 MiB). Before a connection has
 *   authenticated, the server should cap it at FT_WIRE_PREAUTH_MAX_FRAME
 *   (ft_wire_frame_len_max), so an unauthenticated peer can't make it buffer
 *   16 MiB.
 *
 * FIELD ENCODINGS (all integers big-endian, no padding, no alignment)
 *   u8/u32/u64   fixed width; i64 is the two's complement u64
 *   f64          the IEEE-754 bits as a u64 (NaN payloads and -0.0 survive)
 *   str          u32 byte length, then the bytes; no NUL on the wire and no
 *                NUL byte allowed inside; each field has its own cap
 *   blob         u32 byte length, then the bytes (any values); capped
 *   raw32        exactly 32 bytes, no length
 *
 * Every payload starts with the same header:
 *   run   str  1..FT_WIRE_MAX_RUN bytes: the run id
 *   gen   u64  the generation (see GENERATIONS below)
 *
 * MESSAGES (payload after the header, fields in order; S = supervisor,
 * W = worker; "->" is the direction)
 *
 *   1  CHALLENGE    S->W  nonce raw32              fresh random per connection
 *   2  HELLO        W->S  node u32, slot u32, pid u32, mac raw32
 *                         gen = the generation the worker was launched for
 *                         (0: an idle spare, not yet in any gang)
 *   3  WELCOME      S->W  heartbeat_ms u32         1..FT_WIRE_MAX_HEARTBEAT_MS
 *   4  ASSIGN       S->W  rank u32, world u32, restore_step i64,
 *                         rdzv blob (<= FT_WIRE_MAX_RDZV, opaque to the codec:
 *                         rendezvous data, e.g. the KV-store prefix),
 *                         nskips u32 (<= FT_WIRE_MAX_SKIPS),
 *                         nskips x { first i64, end i64 }
 *                         1 <= world <= FT_WIRE_MAX_WORLD, rank < world,
 *                         restore_step >= -1 (-1: fresh start),
 *                         skips are GLOBAL BATCH INDEX ranges [first, end), 0 <= first < end
 *   5  HEARTBEAT    W->S  step i64 (>= -1: last completed step, -1 none),
 *                         seq u32 (this beat's number), rtt_us u32 (the
 *                         last beat's round trip in us, 0: none measured),
 *                         then the training thread's progress (worker/
 *                         progress.h): phase u8 (ft_phase, < FT_PHASE_COUNT),
 *                         coll_seq u64 (collectives this generation's comm
 *                         has started; in phase collective the one it is
 *                         in), prog_age_ms u32 (ms since the progress last
 *                         changed, saturating), then (version 9) why
 *                         the training thread waits in phase storage_wait:
 *                         wait u8 (ft_wait_reason, < FT_WAIT_REASON_COUNT:
 *                         the last retry of the data read it waits for;
 *                         none outside storage_wait or before a retry),
 *                         wait_attempt u32 (that retry's attempt number,
 *                         from 1; 0 with none)
 *                   S->W  (the supervisor echoes step and seq, so a worker
 *                         notices a lost supervisor and times the round
 *                         trip of its control link; rtt_us 0, phase idle,
 *                         coll_seq 0, prog_age_ms 0, wait none, attempt 0)
 *   6  STEP         W->S  step i64 (>= 0), loss f64, grad_norm f64,
 *                         tokens_per_s f64, step_ms f64, val_loss f64 (NaN
 *                         but at train.val_every steps) (any bits, NaN too:
 *                         judging them is the watchdog's job)
 *   7  SHARD_SAVED  W->S  step i64 (>= 0), rank u32 (< FT_WIRE_MAX_WORLD),
 *                         manifest str (JSON text, <= FT_WIRE_MAX_MANIFEST)
 *                   A->S  (version 11) the same for a host: an agent's own,
 *                         rank its host's first, the shard a host reference
 *                         (ckpt_store_put_host) standing for all G ranks
 *   8  COMMITTED    S->W  step i64 (>= 0): the checkpoint of this step is
 *                         committed in the catalog
 *   9  FAULT        W->S  kind u8 (ft_fault_kind), step i64 (>= -1),
 *                         detail str (<= FT_WIRE_MAX_DETAIL)
 *  10  STOP         S->W  reason u8 (ft_stop_reason), detail str
 *                         (<= FT_WIRE_MAX_DETAIL); the worker exits
 *  11  KV_SET       W->S  key str (1..FT_WIRE_MAX_KEY), value blob
 *                         (<= FT_WIRE_MAX_VALUE); no reply
 *  12  KV_GET       W->S  req u32, timeout_ms u32 (<= FT_WIRE_MAX_KV_TIMEOUT_MS),
 *                         nkeys u32 (1..FT_WIRE_MAX_KEYS), nkeys x key str
 *                         The supervisor answers with one KV_VALUE when all
 *                         keys exist, or when timeout_ms has passed.
 *  13  KV_VALUE     S->W  req u32 (echoes KV_GET's), status u8 (ft_kv_status),
 *                         nvals u32, nvals x value blob
 *                         status OK: nvals = number of keys asked for
 *                         (1..FT_WIRE_MAX_KEYS), values in the keys' order;
 *                         status TIMEOUT: nvals = 0
 *  14  REPLICA      W->S  addrs str (<= FT_WIRE_MAX_ADDRS): "HOST:PORT", where
 *                         this worker's replica server (ckpt_replica.h)
 *                         takes other workers' chunks into its memory
 *                   S->W  addrs str: the replica servers this worker pushes
 *                         its saved shards to (its buddies), comma-separated;
 *                         "" = none. Sent after ASSIGN and whenever the set
 *                         changes. Generation 0 allowed (spares serve too).
 *  15  DOCTOR       W->S  report str (JSON text, <= FT_WIRE_MAX_REPORT): the
 *                         node doctor's verdict and figures (worker/doctor.h),
 *                         sent after WELCOME, before the worker can be put
 *                         into a gang, and again when asked; or rank 0's
 *                         link check ("kind": "links") before the first step
 *                   S->W  report "": run the checks again and send the report
 *                         (an idle spare, doctor.spare_every_s).
 *                         Generation 0 allowed.
 *  16  DUMP         S->W  (nothing after the header): write the training
 *                         thread's stack and last progress to the log
 *                         (worker/stackdump.h), as SIGUSR1 does; sent when
 *                         a hang is declared, before the STOP, to a worker
 *                         the supervisor cannot signal itself (a command,
 *                         ssh or Slurm launcher). Generation 0 allowed.
 *
 * AGENTS (version 10; worker/agent.c). A per-host agent holds one connection
 * for its host's workers. It says HELLO like a worker, with slot
 * FT_WIRE_AGENT_SLOT and its own pid (the MAC binds both); after WELCOME it
 * may send only the three types below and (version 11) SHARD_SAVED for its
 * host, and the supervisor answers it with the three and (version 12) the
 * host frames below. Each worker keeps its own end-to-end handshake: its
 * frames travel inside RELAY, so the supervisor sees one virtual connection
 * per slot with its own CHALLENGE, HELLO and MAC, and the agent cannot pose
 * as a worker it has not started (it has the token anyway: it is trusted as
 * much).
 *  17  RELAY        A<->S slot u32 (< FT_WIRE_MAX_SLOTS), frame blob: one
 *                         whole frame of that slot's worker (its length
 *                         field included, FT_WIRE_HDR_LEN..FT_WIRE_MAX_FRAME
 *                         + 4 bytes; decoded by the receiver, not by the
 *                         codec of RELAY). The only frame that may be longer
 *                         than FT_WIRE_MAX_FRAME: up to FT_WIRE_MAX_RELAY_FRAME.
 *  18  HOSTBEAT     A->S  seq u32, rtt_us u32 (the last echo's round trip,
 *                         0: none), nbeats u32 (<= FT_WIRE_MAX_SLOTS), then
 *                         per slot heard from: slot u32, gen u64 (its
 *                         beat's), age_ms u32 (ms since the agent got that
 *                         beat), step i64, seq u32, phase u8, coll_seq u64,
 *                         prog_age_ms u32, wait u8, wait_attempt u32 (as in
 *                         HEARTBEAT). One frame per heartbeat interval for
 *                         the whole host: the workers' beats end at the
 *                         agent, which echoes them while it hears the
 *                         supervisor (and, version 12, one more for the
 *                         beats of a new generation: host frames, below).
 *                   S->A  the echo: seq, rtt_us 0, nbeats 0.
 *  19  SLOT         A->S  slot u32, event u8 (ft_slot_event), status i32,
 *                         pid u32: open (a worker started on that slot: the
 *                         supervisor opens its virtual connection and sends
 *                         its CHALLENGE through RELAY; status 0) or exited
 *                         (status: the wait status waitpid gave; pid the
 *                         worker's)
 *                   S->A  slot, event closed: the supervisor closed that
 *                         virtual connection (the agent closes the worker's
 *                         socket); status 0, pid 0. Event start: start a
 *                         new worker on the slot (its last one has exited;
 *                         the agent answers SLOT open). Event signal:
 *                         send signal `status` (SIGTERM, SIGKILL) to the
 *                         slot's worker; slot FT_WIRE_AGENT_SLOT: to every
 *                         worker of the host and then the agent itself (a
 *                         SIGKILL so sent is a host lost on purpose: the
 *                         chaos kill of a pool launched once).
 *                   S->A  STOP (not in a RELAY): the agent ends: it stops
 *                         its workers (SIGTERM, then SIGKILL), reports
 *                         their exits and exits 0. An agent outlives its
 *                         workers otherwise: the supervisor starts new ones
 *                         on it (event start) without a launch.
 *                         Generation 0 in all four.
 *
 * HOST FRAMES (version 12). A frame the supervisor would send every worker
 * of a host alike goes once, to the agent, not in a RELAY, when each of the
 * host's slots is an open virtual connection: the agent gives each slot
 * whose worker it relayed a WELCOME to the same frame (run and gen as they
 * came), as if it had come in a RELAY. Three types, on top of the above:
 *   ASSIGN     rank is slot 0's; slot j's worker gets rank + j (the gang's
 *              ranks are host-major: sup_gang_rank)
 *   COMMITTED  as it is
 *   STOP       reason rejoin only (any other reason is the agent's own
 *              STOP, above): every worker is told to leave its generation
 *              in process. Their answers, beats of the new generation, go
 *              in one HOSTBEAT at the end of the agent's pass over its
 *              sockets (only those beats in it), not one RELAY each.
 * At 131,072 ranks on 16,384 hosts a recovery's STOP and ASSIGN are 16,384
 * frames each instead of 131,072, and so is a checkpoint's COMMITTED.
 *
 * HANDSHAKE (the token is proven before anything else is accepted)
 *
 *   W connects.
 *   S -> CHALLENGE(run, gen, nonce)     nonce: 32 bytes from RAND_bytes, new
 *                                       for every connection (ft_wire_nonce_new)
 *   W checks run == its own run id (else it closes: wrong supervisor).
 *   W -> HELLO(run, gen, node, slot, pid, mac)
 *        mac = ft_wire_hmac(token, nonce, run, gen, node, slot, pid)
 *   S accepts exactly one frame now, and only a HELLO: any other type, a wrong
 *   run id, a bad MAC (ft_wire_hello_verify, constant time) -> close, logged.
 *   Then S checks the generation (ft_wire_check_gen): stale -> STOP(stale
 *   generation) and close.
 *   S -> WELCOME(run, gen, heartbeat_ms)
 *   From here on either side may send its messages; S sends ASSIGN when it
 *   puts the worker into a gang (an idle spare just heartbeats with gen 0).
 *
 *   What the MAC covers: HMAC-SHA256 keyed with the token's 32 raw bytes over
 *     "ftsup-hello-v1" 0x00 | nonce_len u32 | nonce | run_len u32 | run |
 *     gen u64 | node u32 | slot u32 | pid u32
 *   (all big-endian, lengths prefixed so no two inputs share an encoding).
 *   The per-connection nonce stops a recorded HELLO from being replayed on any
 *   other connection; the run id stops it from being used against another run
 *   (each run also has its own token); node/slot/pid/gen bind the identity the
 *   worker claims, so the proof can't be moved to another worker's identity.
 *   The token itself never crosses the wire: it reaches workers through the
 *   environment variable FT_WIRE_TOKEN_ENV, or, under the ssh launcher
 *   (whose remote command gets no environment of ours), as the first line
 *   of the worker's stdin (worker --token-stdin); never argv, never a log
 *   line.
 *   Not covered: the supervisor does not prove itself to the worker, and the
 *   frames after HELLO are not MACed; the transport is loopback or a trusted
 *   cluster network (docs/design.md §3).
 *
 * GENERATIONS
 *   Generations start at 1 and only grow; 0 means "not in any gang" and is
 *   allowed only in CHALLENGE, HELLO, WELCOME, HEARTBEAT, FAULT, STOP, REPLICA,
 *   DOCTOR and DUMP.
 *   ASSIGN, STEP, SHARD_SAVED, COMMITTED and the KV messages must carry
 *   gen >= 1 (decode rejects 0). The receiver of a fenced message calls
 *   ft_wire_check_gen(): older than current -> drop it and send STOP(stale
 *   generation); newer than current -> protocol error (no peer can know a
 *   future generation). A worker learns its generation from ASSIGN, so it
 *   does not fence ASSIGN itself.
 *
 * THREADING: every function is reentrant; the only shared state is the
 * thread-local ft_err detail. FAILURE: functions return 0 or a negative FT_E*
 * and never abort on input; decode/encode leave no allocation behind on
 * failure.
 */
#ifndef FT_WIRE_H
#define FT_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* 2: HEARTBEAT seq, rtt_us; STEP val_loss; 3: STOP rejoin; 4: REPLICA; 5: DOCTOR; 6: FAULT sdc;
 * 7: HEARTBEAT phase, coll_seq, prog_age_ms (the training thread's progress), and FAULT
 *    kind 13 restore_corrupt (added without a bump of its own: a version-6 peer refuses it);
 * 8: DUMP (the supervisor asks a hung worker for its training thread's stack over the wire);
 * 9: phase storage_wait, HEARTBEAT wait, wait_attempt (why the step waits on data storage);
 * 10: per-host agents (RELAY, HOSTBEAT, SLOT; HELLO slot FT_WIRE_AGENT_SLOT);
 * 11: an agent's SHARD_SAVED: its host's checkpoint reports made one;
 * 12: host frames (ASSIGN, COMMITTED, STOP rejoin to an agent for all its workers) */
#define FT_WIRE_VERSION 12

/* ---- limits (bytes unless stated) -------------------------------------- */
#define FT_WIRE_MAX_FRAME (16u << 20)   /* the frame's length field */
#define FT_WIRE_PREAUTH_MAX_FRAME 4096u /* before HELLO is verified */
#define FT_WIRE_HDR_LEN 6u              /* length u32 + version + type */
#define FT_WIRE_MAX_RUN 127u            /* run id (ft_runfile.run is char[128]) */
#define FT_WIRE_MAX_DETAIL 1023u        /* FAULT/STOP detail */
#define FT_WIRE_MAX_MANIFEST ((16u << 20) - 4096u)
#define FT_WIRE_MAX_RDZV 4096u         /* ASSIGN rendezvous blob */
#define FT_WIRE_MAX_SKIPS 1024u        /* ASSIGN skip ranges */
#define FT_WIRE_MAX_WORLD 262144u      /* ranks */
#define FT_WIRE_MAX_SLOTS 4096u        /* an agent's slots (RELAY, HOSTBEAT, SLOT) */
#define FT_WIRE_AGENT_SLOT 0xffffffffu /* HELLO.slot of an agent */
/* RELAY: an inner frame of FT_WIRE_MAX_FRAME plus its length field and
 * RELAY's own header, run, gen, slot and blob length */
#define FT_WIRE_MAX_RELAY_FRAME (FT_WIRE_MAX_FRAME + 4u + 512u)
#define FT_WIRE_MAX_KEY 512u               /* KV key */
#define FT_WIRE_MAX_VALUE (1u << 20)       /* KV value */
#define FT_WIRE_MAX_KEYS 64u               /* keys per KV_GET / values per KV_VALUE */
#define FT_WIRE_MAX_KV_TIMEOUT_MS 3600000u /* one hour */
/* The supervisor's own KV keys, after a generation's rendezvous prefix:
 * the restore step's manifest when it is a memory-level checkpoint (in the
 * supervisor's catalog only): FT_KV_RESTORE_MANIFEST holds the number of
 * parts in decimal, FT_KV_RESTORE_MANIFEST "/<i>" part i (each at most
 * FT_WIRE_MAX_VALUE bytes) of the manifest's JSON text. */
#define FT_KV_RESTORE_MANIFEST "restore_manifest"
#define FT_WIRE_MAX_HEARTBEAT_MS 3600000u
#define FT_WIRE_MAX_ADDRS 4096u   /* REPLICA addrs */
#define FT_WIRE_MAX_REPORT 65536u /* DOCTOR report */
#define FT_WIRE_NONCE_LEN 32u
#define FT_WIRE_MAC_LEN 32u
#define FT_WIRE_TOKEN_HEX 64u /* token: 32 random bytes as hex */

/* The environment variable that carries the run's token to workers. */
#define FT_WIRE_TOKEN_ENV "FT_RUN_TOKEN"

/* ---- the worker's exit codes --------------------------------------------
 *
 * The contract between the worker (worker/train.c, ctl.c, worker_main.c,
 * documented in worker --help) and the supervisor's blame rules
 * (supervisor/sup_recovery.c): named here once, used on both sides.
 *   OK     done, or STOP from the supervisor
 *   FAIL   this rank failed (non-finite loss, internal error): its node's fault
 *   USAGE  bad command line, run file or model file: a configuration error
 *          (every worker of a generation reports it: nobody's node is at fault)
 *   DATA   bad or missing data (all workers: the run's data; one worker: its
 *          node's local disk)
 *   STORE  checkpoint store error (locked, corrupt, full): never the node's fault
 *   GANG   a collective failed: a peer died or hung (not this rank's fault)
 *   LOST   lost the supervisor (closed, or silent for heartbeat_timeout_s)
 */
enum ft_exit_code {
  FT_EXIT_OK = 0,
  FT_EXIT_FAIL = 1,
  FT_EXIT_USAGE = 2,
  FT_EXIT_DATA = 3,
  FT_EXIT_STORE = 4,
  FT_EXIT_GANG = 5,
  FT_EXIT_LOST = 6,
};
/* "ok", "fail", "usage", "data", "store", "gang", "lost"; "?" otherwise. */
const char *ft_exit_code_name(int code);

/* The heartbeat interval for a heartbeat timeout (WELCOME's heartbeat_ms is
 * this in ms): four heartbeats fit in one timeout, so one or two lost or
 * late heartbeats never look like a dead peer. */
static inline double ft_wire_heartbeat_interval_s(double heartbeat_timeout_s) {
  return heartbeat_timeout_s / 4.0;
}

/* ---- enumerations (values are wire values: never renumber) ------------- */
#define FT_MSG_TYPES(X)                                                                            \
  X(FT_MSG_CHALLENGE, 1, "CHALLENGE")                                                              \
  X(FT_MSG_HELLO, 2, "HELLO")                                                                      \
  X(FT_MSG_WELCOME, 3, "WELCOME")                                                                  \
  X(FT_MSG_ASSIGN, 4, "ASSIGN")                                                                    \
  X(FT_MSG_HEARTBEAT, 5, "HEARTBEAT")                                                              \
  X(FT_MSG_STEP, 6, "STEP")                                                                        \
  X(FT_MSG_SHARD_SAVED, 7, "SHARD_SAVED")                                                          \
  X(FT_MSG_COMMITTED, 8, "COMMITTED")                                                              \
  X(FT_MSG_FAULT, 9, "FAULT")                                                                      \
  X(FT_MSG_STOP, 10, "STOP")                                                                       \
  X(FT_MSG_KV_SET, 11, "KV_SET")                                                                   \
  X(FT_MSG_KV_GET, 12, "KV_GET")                                                                   \
  X(FT_MSG_KV_VALUE, 13, "KV_VALUE")                                                               \
  X(FT_MSG_REPLICA, 14, "REPLICA")                                                                 \
  X(FT_MSG_DOCTOR, 15, "DOCTOR")                                                                   \
  X(FT_MSG_DUMP, 16, "DUMP")                                                                       \
  X(FT_MSG_RELAY, 17, "RELAY")                                                                     \
  X(FT_MSG_HOSTBEAT, 18, "HOSTBEAT")                                                               \
  X(FT_MSG_SLOT, 19, "SLOT")

typedef enum ft_msg_type {
#define FT_WIRE_ENUM_(name, val, str) name = val,
  FT_MSG_TYPES(FT_WIRE_ENUM_)
#undef FT_WIRE_ENUM_
} ft_msg_type;
#define FT_MSG_TYPE_MIN 1
#define FT_MSG_TYPE_MAX 19

/* The fault taxonomy shared with the watchdog and the supervisor. */
#define FT_FAULT_KINDS(X)                                                                          \
  X(FT_FAULT_PROCESS_EXIT, 0, "process_exit")                                                      \
  X(FT_FAULT_HANG, 1, "hang")                                                                      \
  X(FT_FAULT_COLLECTIVE_TIMEOUT, 2, "collective_timeout")                                          \
  X(FT_FAULT_XID, 3, "xid")                                                                        \
  X(FT_FAULT_LOSS_SPIKE, 4, "loss_spike")                                                          \
  X(FT_FAULT_NAN, 5, "nan")                                                                        \
  X(FT_FAULT_OOM, 6, "oom")                                                                        \
  X(FT_FAULT_STRAGGLER, 7, "straggler")                                                            \
  X(FT_FAULT_OTHER, 8, "other")                                                                    \
  X(FT_FAULT_STORAGE, 9, "storage") /* a checkpoint write failed: detail "path: errno E (..)" */   \
  X(FT_FAULT_CONFIG, 10, "config")  /* run file / model file error (this worker's view) */         \
  X(FT_FAULT_DATA, 11, "data")      /* the data could not be read */                               \
  X(FT_FAULT_SDC, 12, "sdc") /* recomputed bits differ: detail "rank R ..." names the wrong one */ \
  X(FT_FAULT_RESTORE_CORRUPT, 13,                                                                  \
    "restore_corrupt") /* step's chunk failed its hash from every source: detail names it */

typedef enum ft_fault_kind {
#define FT_WIRE_ENUM_(name, val, str) name = val,
  FT_FAULT_KINDS(FT_WIRE_ENUM_)
#undef FT_WIRE_ENUM_
} ft_fault_kind;
#define FT_FAULT_KIND_COUNT 14

/* What a worker's training thread is doing: worker/progress.h publishes it,
 * HEARTBEAT.phase carries it, watchdog/wd_progress.h judges it. */
#define FT_PHASES(X)                                                                               \
  X(FT_PHASE_IDLE, 0, "idle")             /* not training: waiting for ASSIGN or STOP */           \
  X(FT_PHASE_DATA, 1, "data")             /* reading a micro-batch's tokens */                     \
  X(FT_PHASE_FORWARD, 2, "forward")       /* forward (and, in one call, backward) compute */       \
  X(FT_PHASE_BACKWARD, 3, "backward")     /* backward compute, where the engine separates it */    \
  X(FT_PHASE_COLLECTIVE, 4, "collective") /* inside collective coll_seq */                         \
  X(FT_PHASE_OPTIMIZER, 5, "optimizer")   /* loss, norm, clipping, AdamW, the step's reports */    \
  X(FT_PHASE_SNAPSHOT, 6, "snapshot")     /* a checkpoint's shard copied out (training waits) */   \
  X(FT_PHASE_CKPT_WRITE, 7, "checkpoint_write") /* waiting for shards to be durable */             \
  X(FT_PHASE_VALIDATION, 8, "validation")       /* the validation loss */                          \
  X(FT_PHASE_SDC, 9, "sdc_recompute")           /* recomputing a peer's micro-batch (SDC check) */ \
  X(FT_PHASE_RESTORE, 10, "restore") /* after the rendezvous: engine built, checkpoint read */     \
  X(FT_PHASE_RENDEZVOUS, 11, "rendezvous")     /* forming the generation's communicator */         \
  X(FT_PHASE_STORAGE_WAIT, 12, "storage_wait") /* waiting on a block of s3:// data (its GET) */

typedef enum ft_phase {
#define FT_WIRE_ENUM_(name, val, str) name = val,
  FT_PHASES(FT_WIRE_ENUM_)
#undef FT_WIRE_ENUM_
} ft_phase;
#define FT_PHASE_COUNT 13

/* Why a training thread in storage_wait waits: its data read's last retry
 * (ckpt_s3_read.h's retry hook, mapped by worker/data_wait.c). */
#define FT_WAIT_REASONS(X)                                                                         \
  X(FT_WAIT_NONE, 0, "none")           /* no retry yet (the first attempt is in flight) */         \
  X(FT_WAIT_SLOWDOWN, 1, "slowdown")   /* HTTP 503 (S3's SlowDown: reduce the request rate) */     \
  X(FT_WAIT_THROTTLED, 2, "throttled") /* HTTP 429 */                                              \
  X(FT_WAIT_SERVER, 3, "server_error") /* another 5xx (500 InternalError, 502, 504) */             \
  X(FT_WAIT_TIMEOUT, 4, "timeout")     /* no byte for FT_S3_TIMEOUT_S (or no connection) */        \
  X(FT_WAIT_REFUSED, 5, "refused")     /* the connection refused or the host unreachable */        \
  X(FT_WAIT_NETWORK, 6, "network")     /* the connection reset, or closed without an answer */     \
  X(FT_WAIT_OTHER, 7, "other")         /* 400 RequestTimeout, 409, a 200 carrying an error */

typedef enum ft_wait_reason {
#define FT_WIRE_ENUM_(name, val, str) name = val,
  FT_WAIT_REASONS(FT_WIRE_ENUM_)
#undef FT_WIRE_ENUM_
} ft_wait_reason;
#define FT_WAIT_REASON_COUNT 8

#define FT_STOP_REASONS(X)                                                                         \
  X(FT_STOP_DONE, 0, "done")                         /* the run finished */                        \
  X(FT_STOP_STALE_GENERATION, 1, "stale_generation") /* fenced: exit now */                        \
  X(FT_STOP_RECOVERING, 2, "recovering")             /* gang stopped for recovery */               \
  X(FT_STOP_SHUTDOWN, 3, "shutdown")                 /* supervisor is exiting */                   \
  X(FT_STOP_EVICTED, 4, "evicted")                   /* node quarantined or not needed */          \
  X(FT_STOP_PROTOCOL_ERROR, 5, "protocol_error")     /* peer sent something bad */                 \
  X(FT_STOP_REJOIN, 6, "rejoin") /* leave this generation, keep the process: see below */

typedef enum ft_stop_reason {
#define FT_WIRE_ENUM_(name, val, str) name = val,
  FT_STOP_REASONS(FT_WIRE_ENUM_)
#undef FT_WIRE_ENUM_
} ft_stop_reason;
#define FT_STOP_REASON_COUNT 7
/* STOP rejoin (recovery.in_process) carries the NEW generation and does not
 * end the process: the worker leaves its collectives, frees its comm, and
 * once out says so with a HEARTBEAT of that generation (until then its
 * frames carry the old one, which the supervisor tolerates from it alone);
 * then it waits for that generation's ASSIGN. A worker built before
 * version 3 would exit on it, which is the process restart it falls back
 * to. */

/* SLOT.event */
typedef enum ft_slot_event {
  FT_SLOT_OPEN = 0,   /* A->S: a worker started on the slot */
  FT_SLOT_EXITED = 1, /* A->S: it exited (status: its wait status) */
  FT_SLOT_CLOSED = 2, /* S->A: the supervisor closed the slot's connection */
  FT_SLOT_START = 3,  /* S->A: start a new worker on the slot */
  FT_SLOT_SIGNAL = 4, /* S->A: send signal `status` to the slot's worker */
} ft_slot_event;
#define FT_SLOT_EVENT_COUNT 5

typedef enum ft_kv_status {
  FT_KV_OK = 0,      /* every key exists; values follow in the keys' order */
  FT_KV_TIMEOUT = 1, /* timeout_ms passed first; no values */
} ft_kv_status;
#define FT_KV_STATUS_COUNT 2

/* Names for logs; never NULL ("?" for a value out of range). Static strings. */
const char *ft_msg_type_name(int type);
const char *ft_fault_kind_name(int kind);
const char *ft_stop_reason_name(int reason);
const char *ft_kv_status_name(int status);
const char *ft_phase_name(int phase);
const char *ft_wait_reason_name(int reason);
const char *ft_slot_event_name(int event);
/* Parses a phase name ("forward", ...); FT_EINVAL if unknown. */
int ft_phase_from_name(const char *name, ft_phase *out);
/* Parses a fault kind name ("xid", ...); FT_EINVAL if unknown. */
int ft_fault_kind_from_name(const char *name, ft_fault_kind *out);

/* Which side may send a type: a bit set of these (0 for an unknown type).
 * The receiver should reject a type its peer is not allowed to send. */
#define FT_WIRE_FROM_SUPERVISOR 1
#define FT_WIRE_FROM_WORKER 2
#define FT_WIRE_FROM_AGENT 4 /* RELAY, HOSTBEAT, SLOT (and HELLO, as a worker) */
int ft_wire_sender(int type);

/* ---- messages ------------------------------------------------------------
 *
 * One tagged struct for all types: `type`, the common header (run, gen), and
 * an anonymous union with one member per type (m.step.loss, m.assign.rank).
 *
 * Ownership. To SEND, fill a message with ft_msg_init() and set fields; the
 * pointer fields (strings, blobs, arrays) are BORROWED by ft_wire_encode for
 * the duration of the call (a NULL string encodes as ""). Such a message owns
 * nothing, and ft_msg_release() on it is a harmless no-op.
 * On RECEIVE, ft_wire_decode() copies every string, blob and array into
 * malloc'd memory owned by the message (strings NUL-terminated); it stays
 * valid until ft_msg_release(). The run id is a fixed array in both cases.
 */
typedef struct ft_wire_range {
  int64_t first; /* first global batch index skipped */
  int64_t end;   /* one past the last batch index skipped */
} ft_wire_range;

typedef struct ft_wire_blob {
  const uint8_t *data;
  uint32_t len;
} ft_wire_blob;

/* One slot's beat in a HOSTBEAT (the fields of its worker's HEARTBEAT). */
typedef struct ft_wire_beat {
  uint32_t slot;
  uint64_t gen;    /* the beat's generation */
  uint32_t age_ms; /* ms since the agent got it */
  int64_t step;
  uint32_t seq;
  ft_phase phase;
  uint64_t coll_seq;
  uint32_t prog_age_ms;
  ft_wait_reason wait;
  uint32_t wait_attempt;
} ft_wire_beat;

typedef struct ft_msg {
  ft_msg_type type;
  char run[FT_WIRE_MAX_RUN + 1]; /* NUL-terminated run id */
  uint64_t gen;
  union {
    struct {
      uint8_t nonce[FT_WIRE_NONCE_LEN];
    } challenge;
    struct {
      uint32_t node; /* node index in the pool */
      uint32_t slot; /* worker index on that node (GPU index) */
      uint32_t pid;
      uint8_t mac[FT_WIRE_MAC_LEN];
    } hello;
    struct {
      uint32_t heartbeat_ms;
    } welcome;
    struct {
      uint32_t rank, world;
      int64_t restore_step; /* -1: start fresh */
      const uint8_t *rdzv;
      uint32_t rdzv_len;
      const ft_wire_range *skips;
      uint32_t nskips;
    } assign;
    struct {
      int64_t step;
      uint32_t seq;          /* the beat's number; the echo carries it back */
      uint32_t rtt_us;       /* W->S: the last echoed beat's round trip; 0: none */
      ft_phase phase;        /* W->S: the training thread's phase */
      uint64_t coll_seq;     /* W->S: its collectives started this generation */
      uint32_t prog_age_ms;  /* W->S: ms since its progress last changed */
      ft_wait_reason wait;   /* W->S: in storage_wait, its read's last retry */
      uint32_t wait_attempt; /* W->S: that retry's attempt (from 1; 0: none) */
    } heartbeat;
    struct {
      int64_t step;
      double loss, grad_norm, tokens_per_s, step_ms;
      double val_loss; /* NaN: none this step */
    } step;
    struct {
      int64_t step;
      uint32_t rank;
      const char *manifest; /* JSON text */
    } shard_saved;
    struct {
      int64_t step;
    } committed;
    struct {
      ft_fault_kind kind;
      int64_t step; /* -1: unknown */
      const char *detail;
    } fault;
    struct {
      ft_stop_reason reason;
      const char *detail;
    } stop;
    struct {
      const char *key;
      const uint8_t *value;
      uint32_t value_len;
    } kv_set;
    struct {
      uint32_t req;
      uint32_t timeout_ms;
      const char *const *keys;
      uint32_t nkeys;
    } kv_get;
    struct {
      uint32_t req;
      ft_kv_status status;
      const ft_wire_blob *vals;
      uint32_t nvals;
    } kv_value;
    struct {
      const char *addrs;
    } replica;
    struct {
      const char *report;
    } doctor;
    struct {
      uint32_t slot;
      const uint8_t *frame; /* one whole frame, its length field included */
      uint32_t frame_len;
    } relay;
    struct {
      uint32_t seq;
      uint32_t rtt_us;
      const ft_wire_beat *beats;
      uint32_t nbeats;
    } hostbeat;
    struct {
      uint32_t slot;
      ft_slot_event event;
      int32_t status; /* EXITED: the wait status */
      uint32_t pid;
    } slot;
  };
  void *owned_[2]; /* decode's allocations; private */
} ft_msg;

/* Zeroes *m and sets its type. Use before filling a message to send. */
void ft_msg_init(ft_msg *m, ft_msg_type type);

/* Frees what ft_wire_decode allocated and zeroes *m. NULL is a no-op. */
void ft_msg_release(ft_msg *m);

/* ---- growable output buffer -------------------------------------------- */
typedef struct ft_buf {
  uint8_t *data; /* owned; NULL while cap == 0 */
  size_t len;    /* bytes in use */
  size_t cap;
} ft_buf;

void ft_buf_init(ft_buf *b);
void ft_buf_release(ft_buf *b); /* frees data; b is empty and reusable */
void ft_buf_reset(ft_buf *b);   /* len = 0, keeps the memory */
/* Ensures room for `extra` more bytes. FT_ENOMEM on overflow/allocation failure. */
int ft_buf_reserve(ft_buf *b, size_t extra);
int ft_buf_append(ft_buf *b, const void *p, size_t n);
/* Drops the first n bytes (n > len drops all): a receive buffer's consumer. */
void ft_buf_consume(ft_buf *b, size_t n);

/* ---- codec --------------------------------------------------------------- */

/* Streaming helper for a receive buffer holding `avail` bytes:
 *   0          more bytes are needed to know or to hold the whole frame;
 *   1          a whole frame is at buf[0 .. *frame_len); decode it, consume it;
 *   FT_EPROTO  the length field or version byte is bad: close the connection
 *              (reason in ft_err_detail()).
 * Reads only buf[0 .. min(avail, 5)). _max applies a smaller length cap
 * (e.g. FT_WIRE_PREAUTH_MAX_FRAME before HELLO is verified). */
int ft_wire_frame_len(const uint8_t *buf, size_t avail, size_t *frame_len);
int ft_wire_frame_len_max(const uint8_t *buf, size_t avail, size_t max_len, size_t *frame_len);

/* Appends one frame for *m to out. Validates *m exactly as decode would
 * (lengths, counts, enums, generation-0 rule): FT_EINVAL with the reason if
 * not; FT_ENOMEM. On failure out->len is unchanged. */
int ft_wire_encode(const ft_msg *m, ft_buf *out);

/* Decodes one whole frame (length prefix included: exactly what
 * ft_wire_frame_len reported) into *m, which need not be initialised and is
 * overwritten (release an older decoded message first). Returns 0, FT_EPROTO
 * (reason in ft_err_detail(); *m is left empty) or FT_ENOMEM. Never reads
 * outside frame[0 .. len). On success release *m with ft_msg_release(). */
int ft_wire_decode(const uint8_t *frame, size_t len, ft_msg *m);

/* Generation fencing for a received message against the receiver's current
 * generation: 0 accept; 1 stale (drop it; tell the sender to exit with
 * STOP(stale_generation)); FT_EPROTO a generation from the future. gen 0
 * ("not in a gang") is accepted where it is allowed (see GENERATIONS). */
int ft_wire_check_gen(const ft_msg *m, uint64_t current_gen);

/* ---- authentication -------------------------------------------------------- */

/* A new run token: 32 bytes from RAND_bytes as 64 lowercase hex characters
 * and a NUL. FT_EIO if the random generator fails. */
int ft_wire_token_new(char out[FT_WIRE_TOKEN_HEX + 1]);
/* 0 if token is exactly 64 hex digits, else FT_EINVAL (never echoes it). */
int ft_wire_token_check(const char *token);
/* A per-connection challenge nonce from RAND_bytes. FT_EIO on failure. */
int ft_wire_nonce_new(uint8_t nonce[FT_WIRE_NONCE_LEN]);

/* HMAC-SHA256 over the fields listed under "What the MAC covers" above.
 * nonce_len <= 64, run 1..FT_WIRE_MAX_RUN bytes; FT_EINVAL otherwise or for a
 * malformed token; FT_EIO if OpenSSL fails. */
int ft_wire_hmac(const char *token, const uint8_t *nonce, size_t nonce_len, const char *run,
                 uint64_t gen, uint32_t node, uint32_t slot, uint32_t pid,
                 uint8_t mac[FT_WIRE_MAC_LEN]);
/* The same construction for another protocol that proves the run token
 * (the checkpoint replica channel, ckpt_replica.h): HMAC-SHA256 keyed with
 * the token over label 0x00 | nonce_len u32 | nonce | run_len u32 | run.
 * The label keeps a MAC of one protocol from being accepted by another;
 * HELLO's own label is refused (FT_EINVAL). */
int ft_wire_hmac_label(const char *token, const char *label, const uint8_t *nonce, size_t nonce_len,
                       const char *run, uint8_t mac[FT_WIRE_MAC_LEN]);
/* Sets hello->hello.mac from hello's own fields (type must be HELLO). */
int ft_wire_hello_sign(ft_msg *hello, const char *token, const uint8_t nonce[FT_WIRE_NONCE_LEN]);
/* 0 if hello's MAC is right for this token and nonce; FT_EPROTO ("HELLO MAC
 * mismatch") if not; FT_EINVAL for a malformed token or a non-HELLO message. */
int ft_wire_hello_verify(const ft_msg *hello, const char *token,
                         const uint8_t nonce[FT_WIRE_NONCE_LEN]);
/* Constant-time comparison (CRYPTO_memcmp): 1 if equal, 0 if not. */
int ft_wire_mac_equal(const uint8_t a[FT_WIRE_MAC_LEN], const uint8_t b[FT_WIRE_MAC_LEN]);

#endif
