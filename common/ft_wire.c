/*
 * ft_wire: codec of the control protocol. The protocol itself (frame, every
 * message, handshake, limits) is described at the top of ft_wire.h.
 *
 * How decoding stays safe: a reader (struct rd) holds the payload bounds and
 * a sticky error. Every read first checks that enough bytes remain; once one
 * read fails, later reads return zeros and touch nothing, and the first
 * reason is the one reported. Counts are checked against their caps before
 * anything is allocated, and lengths against both their caps and the bytes
 * actually left, so a hostile length can't cause a large allocation. After
 * the fields: trailing bytes are an error, then the same semantic check
 * (check_msg) that the encoder runs on what it is asked to send.
 *
 * Strings and blobs are first read as views into the frame, then copied into
 * at most two malloc'd blocks that the message owns (ft_msg.owned_).
 */
#include "ft_wire.h"

#include "ft_err.h"
#include "ft_hex.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* ---- names ---------------------------------------------------------------- */

const char *ft_msg_type_name(int type) {
  switch (type) {
#define FT_WIRE_CASE_(name, val, str)                                                              \
  case val:                                                                                        \
    return str;
    FT_MSG_TYPES(FT_WIRE_CASE_)
  }
  return "?";
}

const char *ft_fault_kind_name(int kind) {
  switch (kind) { FT_FAULT_KINDS(FT_WIRE_CASE_) }
  return "?";
}

const char *ft_stop_reason_name(int reason) {
  switch (reason) { FT_STOP_REASONS(FT_WIRE_CASE_) }
  return "?";
}

const char *ft_phase_name(int phase) {
  switch (phase) { FT_PHASES(FT_WIRE_CASE_) }
  return "?";
}

const char *ft_wait_reason_name(int reason) {
  switch (reason) { FT_WAIT_REASONS(FT_WIRE_CASE_) }
  return "?";
#undef FT_WIRE_CASE_
}

const char *ft_slot_event_name(int event) {
  switch (event) {
  case FT_SLOT_OPEN:
    return "open";
  case FT_SLOT_EXITED:
    return "exited";
  case FT_SLOT_CLOSED:
    return "closed";
  case FT_SLOT_START:
    return "start";
  case FT_SLOT_SIGNAL:
    return "signal";
  }
  return "?";
}

int ft_phase_from_name(const char *name, ft_phase *out) {
  for (int k = 0; name && k < FT_PHASE_COUNT; k++) {
    if (strcmp(name, ft_phase_name(k)) == 0) {
      *out = (ft_phase)k;
      return 0;
    }
  }
  return ft_err_set(FT_EINVAL, "unknown phase '%s'", name ? name : "(null)");
}

const char *ft_exit_code_name(int code) {
  switch (code) {
  case FT_EXIT_OK:
    return "ok";
  case FT_EXIT_FAIL:
    return "fail";
  case FT_EXIT_USAGE:
    return "usage";
  case FT_EXIT_DATA:
    return "data";
  case FT_EXIT_STORE:
    return "store";
  case FT_EXIT_GANG:
    return "gang";
  case FT_EXIT_LOST:
    return "lost";
  }
  return "?";
}

const char *ft_kv_status_name(int status) {
  switch (status) {
  case FT_KV_OK:
    return "ok";
  case FT_KV_TIMEOUT:
    return "timeout";
  }
  return "?";
}

int ft_fault_kind_from_name(const char *name, ft_fault_kind *out) {
  for (int k = 0; name && k < FT_FAULT_KIND_COUNT; k++) {
    if (strcmp(name, ft_fault_kind_name(k)) == 0) {
      *out = (ft_fault_kind)k;
      return 0;
    }
  }
  return ft_err_set(FT_EINVAL, "unknown fault kind '%s'", name ? name : "(null)");
}

int ft_wire_sender(int type) {
  switch (type) {
  case FT_MSG_CHALLENGE:
  case FT_MSG_WELCOME:
  case FT_MSG_ASSIGN:
  case FT_MSG_COMMITTED:
  case FT_MSG_STOP:
  case FT_MSG_KV_VALUE:
  case FT_MSG_DUMP:
    return FT_WIRE_FROM_SUPERVISOR;
  case FT_MSG_HELLO:
  case FT_MSG_STEP:
  case FT_MSG_SHARD_SAVED:
  case FT_MSG_FAULT:
  case FT_MSG_KV_SET:
  case FT_MSG_KV_GET:
    return FT_WIRE_FROM_WORKER;
  case FT_MSG_HEARTBEAT:
  case FT_MSG_REPLICA:
  case FT_MSG_DOCTOR:
    return FT_WIRE_FROM_SUPERVISOR | FT_WIRE_FROM_WORKER;
  case FT_MSG_RELAY:
  case FT_MSG_HOSTBEAT:
  case FT_MSG_SLOT:
    return FT_WIRE_FROM_SUPERVISOR | FT_WIRE_FROM_AGENT;
  }
  return 0;
}

/* ---- ft_buf ---------------------------------------------------------------- */

void ft_buf_init(ft_buf *b) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void ft_buf_release(ft_buf *b) {
  if (!b)
    return;
  free(b->data);
  ft_buf_init(b);
}

void ft_buf_reset(ft_buf *b) {
  b->len = 0;
}

int ft_buf_reserve(ft_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len)
    return ft_err_set(FT_ENOMEM, "ft_buf: size overflow");
  size_t need = b->len + extra;
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  uint8_t *p = realloc(b->data, cap);
  if (!p)
    return ft_err_set(FT_ENOMEM, "ft_buf: cannot grow to %zu bytes", cap);
  b->data = p;
  b->cap = cap;
  return 0;
}

int ft_buf_append(ft_buf *b, const void *p, size_t n) {
  int rc = ft_buf_reserve(b, n);
  if (rc)
    return rc;
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void ft_buf_consume(ft_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}

/* ---- messages ---------------------------------------------------------------- */

void ft_msg_init(ft_msg *m, ft_msg_type type) {
  memset(m, 0, sizeof *m);
  m->type = type;
}

void ft_msg_release(ft_msg *m) {
  if (!m)
    return;
  free(m->owned_[0]);
  free(m->owned_[1]);
  memset(m, 0, sizeof *m);
}

/* ---- big-endian helpers ------------------------------------------------------ */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t be64(const uint8_t *p) {
  return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}

/* Two's complement without implementation-defined conversions. */
static int64_t u64_to_i64(uint64_t u) {
  return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* ---- frame length ------------------------------------------------------------ */

int ft_wire_frame_len_max(const uint8_t *buf, size_t avail, size_t max_len, size_t *frame_len) {
  if (avail < 4)
    return 0;
  uint32_t len = be32(buf);
  if (len < 2)
    return ft_err_set(FT_EPROTO, "frame: length field %u is shorter than version and type",
                      (unsigned)len);
  if (len > max_len || len > FT_WIRE_MAX_RELAY_FRAME)
    return ft_err_set(FT_EPROTO, "frame: length field %u exceeds the limit of %zu", (unsigned)len,
                      max_len < FT_WIRE_MAX_RELAY_FRAME ? max_len
                                                        : (size_t)FT_WIRE_MAX_RELAY_FRAME);
  if (avail >= 5 && buf[4] != FT_WIRE_VERSION)
    return ft_err_set(FT_EPROTO, "frame: version %u, expected %u", buf[4], FT_WIRE_VERSION);
  if (avail - 4 < len)
    return 0;
  *frame_len = (size_t)len + 4;
  return 1;
}

int ft_wire_frame_len(const uint8_t *buf, size_t avail, size_t *frame_len) {
  return ft_wire_frame_len_max(buf, avail, FT_WIRE_MAX_FRAME, frame_len);
}

/* ---- semantic checks shared by encode (FT_EINVAL) and decode (FT_EPROTO) --- */

static int gen_zero_allowed(int type) {
  switch (type) {
  case FT_MSG_CHALLENGE:
  case FT_MSG_HELLO:
  case FT_MSG_WELCOME:
  case FT_MSG_HEARTBEAT:
  case FT_MSG_FAULT:
  case FT_MSG_STOP:
  case FT_MSG_REPLICA:
  case FT_MSG_DOCTOR:
  case FT_MSG_DUMP:
  case FT_MSG_RELAY:
  case FT_MSG_HOSTBEAT:
  case FT_MSG_SLOT:
    return 1;
  }
  return 0;
}

/* Returns 0, or err with the reason set. */
static int check_msg(const ft_msg *m, int err) {
  const char *t = ft_msg_type_name(m->type);
  if (m->gen == 0 && !gen_zero_allowed(m->type))
    return ft_err_set(err, "%s.gen: generation 0 is not allowed in %s", t, t);
  switch (m->type) {
  case FT_MSG_CHALLENGE:
  case FT_MSG_HELLO:
    return 0;
  case FT_MSG_WELCOME:
    if (m->welcome.heartbeat_ms < 1 || m->welcome.heartbeat_ms > FT_WIRE_MAX_HEARTBEAT_MS)
      return ft_err_set(err, "WELCOME.heartbeat_ms: %u out of range 1..%u",
                        (unsigned)m->welcome.heartbeat_ms, FT_WIRE_MAX_HEARTBEAT_MS);
    return 0;
  case FT_MSG_ASSIGN:
    if (m->assign.world < 1 || m->assign.world > FT_WIRE_MAX_WORLD)
      return ft_err_set(err, "ASSIGN.world: %u out of range 1..%u", (unsigned)m->assign.world,
                        FT_WIRE_MAX_WORLD);
    if (m->assign.rank >= m->assign.world)
      return ft_err_set(err, "ASSIGN.rank: %u not below world %u", (unsigned)m->assign.rank,
                        (unsigned)m->assign.world);
    if (m->assign.restore_step < -1)
      return ft_err_set(err, "ASSIGN.restore_step: %lld below -1",
                        (long long)m->assign.restore_step);
    if (m->assign.nskips > FT_WIRE_MAX_SKIPS)
      return ft_err_set(err, "ASSIGN.nskips: %u exceeds %u", (unsigned)m->assign.nskips,
                        FT_WIRE_MAX_SKIPS);
    if (m->assign.nskips && !m->assign.skips)
      return ft_err_set(err, "ASSIGN.skips: NULL with nskips %u", (unsigned)m->assign.nskips);
    for (uint32_t i = 0; i < m->assign.nskips; i++) {
      const ft_wire_range *s = &m->assign.skips[i];
      if (s->first < 0 || s->end <= s->first)
        return ft_err_set(err, "ASSIGN.skips[%u]: [%lld, %lld) is not a range of steps",
                          (unsigned)i, (long long)s->first, (long long)s->end);
    }
    return 0;
  case FT_MSG_HEARTBEAT:
    if (m->heartbeat.step < -1)
      return ft_err_set(err, "HEARTBEAT.step: %lld below -1", (long long)m->heartbeat.step);
    if ((unsigned)m->heartbeat.phase >= FT_PHASE_COUNT)
      return ft_err_set(err, "HEARTBEAT.phase: %u out of range 0..%d", (unsigned)m->heartbeat.phase,
                        FT_PHASE_COUNT - 1);
    if ((unsigned)m->heartbeat.wait >= FT_WAIT_REASON_COUNT)
      return ft_err_set(err, "HEARTBEAT.wait: %u out of range 0..%d", (unsigned)m->heartbeat.wait,
                        FT_WAIT_REASON_COUNT - 1);
    return 0;
  case FT_MSG_STEP:
    if (m->step.step < 0)
      return ft_err_set(err, "STEP.step: %lld is negative", (long long)m->step.step);
    return 0;
  case FT_MSG_SHARD_SAVED:
    if (m->shard_saved.step < 0)
      return ft_err_set(err, "SHARD_SAVED.step: %lld is negative", (long long)m->shard_saved.step);
    if (m->shard_saved.rank >= FT_WIRE_MAX_WORLD)
      return ft_err_set(err, "SHARD_SAVED.rank: %u exceeds %u", (unsigned)m->shard_saved.rank,
                        FT_WIRE_MAX_WORLD - 1);
    return 0;
  case FT_MSG_COMMITTED:
    if (m->committed.step < 0)
      return ft_err_set(err, "COMMITTED.step: %lld is negative", (long long)m->committed.step);
    return 0;
  case FT_MSG_FAULT:
    if ((unsigned)m->fault.kind >= FT_FAULT_KIND_COUNT)
      return ft_err_set(err, "FAULT.kind: %u out of range 0..%d", (unsigned)m->fault.kind,
                        FT_FAULT_KIND_COUNT - 1);
    if (m->fault.step < -1)
      return ft_err_set(err, "FAULT.step: %lld below -1", (long long)m->fault.step);
    return 0;
  case FT_MSG_STOP:
    if ((unsigned)m->stop.reason >= FT_STOP_REASON_COUNT)
      return ft_err_set(err, "STOP.reason: %u out of range 0..%d", (unsigned)m->stop.reason,
                        FT_STOP_REASON_COUNT - 1);
    return 0;
  case FT_MSG_KV_SET:
  case FT_MSG_REPLICA:
  case FT_MSG_DOCTOR:
  case FT_MSG_DUMP:
    return 0;
  case FT_MSG_KV_GET:
    if (m->kv_get.timeout_ms > FT_WIRE_MAX_KV_TIMEOUT_MS)
      return ft_err_set(err, "KV_GET.timeout_ms: %u exceeds %u", (unsigned)m->kv_get.timeout_ms,
                        FT_WIRE_MAX_KV_TIMEOUT_MS);
    if (m->kv_get.nkeys < 1 || m->kv_get.nkeys > FT_WIRE_MAX_KEYS)
      return ft_err_set(err, "KV_GET.nkeys: %u out of range 1..%u", (unsigned)m->kv_get.nkeys,
                        FT_WIRE_MAX_KEYS);
    return 0;
  case FT_MSG_KV_VALUE:
    if ((unsigned)m->kv_value.status >= FT_KV_STATUS_COUNT)
      return ft_err_set(err, "KV_VALUE.status: %u out of range 0..%d", (unsigned)m->kv_value.status,
                        FT_KV_STATUS_COUNT - 1);
    if (m->kv_value.status == FT_KV_OK &&
        (m->kv_value.nvals < 1 || m->kv_value.nvals > FT_WIRE_MAX_KEYS))
      return ft_err_set(err, "KV_VALUE.nvals: %u out of range 1..%u for status ok",
                        (unsigned)m->kv_value.nvals, FT_WIRE_MAX_KEYS);
    if (m->kv_value.status == FT_KV_TIMEOUT && m->kv_value.nvals != 0)
      return ft_err_set(err, "KV_VALUE.nvals: %u values with status timeout",
                        (unsigned)m->kv_value.nvals);
    return 0;
  case FT_MSG_RELAY:
    if (m->relay.slot >= FT_WIRE_MAX_SLOTS)
      return ft_err_set(err, "RELAY.slot: %u exceeds %u", (unsigned)m->relay.slot,
                        FT_WIRE_MAX_SLOTS - 1);
    if (m->relay.frame_len < FT_WIRE_HDR_LEN || m->relay.frame_len > FT_WIRE_MAX_FRAME + 4u)
      return ft_err_set(err, "RELAY.frame: %u bytes out of range %u..%u",
                        (unsigned)m->relay.frame_len, FT_WIRE_HDR_LEN, FT_WIRE_MAX_FRAME + 4u);
    if (!m->relay.frame)
      return ft_err_set(err, "RELAY.frame: NULL");
    return 0;
  case FT_MSG_HOSTBEAT:
    if (m->hostbeat.nbeats > FT_WIRE_MAX_SLOTS)
      return ft_err_set(err, "HOSTBEAT.nbeats: %u exceeds %u", (unsigned)m->hostbeat.nbeats,
                        FT_WIRE_MAX_SLOTS);
    if (m->hostbeat.nbeats && !m->hostbeat.beats)
      return ft_err_set(err, "HOSTBEAT.beats: NULL with nbeats %u", (unsigned)m->hostbeat.nbeats);
    for (uint32_t i = 0; i < m->hostbeat.nbeats; i++) {
      const ft_wire_beat *b = &m->hostbeat.beats[i];
      if (b->slot >= FT_WIRE_MAX_SLOTS)
        return ft_err_set(err, "HOSTBEAT.beats[%u].slot: %u exceeds %u", (unsigned)i,
                          (unsigned)b->slot, FT_WIRE_MAX_SLOTS - 1);
      if (b->step < -1)
        return ft_err_set(err, "HOSTBEAT.beats[%u].step: %lld below -1", (unsigned)i,
                          (long long)b->step);
      if ((unsigned)b->phase >= FT_PHASE_COUNT)
        return ft_err_set(err, "HOSTBEAT.beats[%u].phase: %u out of range 0..%d", (unsigned)i,
                          (unsigned)b->phase, FT_PHASE_COUNT - 1);
      if ((unsigned)b->wait >= FT_WAIT_REASON_COUNT)
        return ft_err_set(err, "HOSTBEAT.beats[%u].wait: %u out of range 0..%d", (unsigned)i,
                          (unsigned)b->wait, FT_WAIT_REASON_COUNT - 1);
    }
    return 0;
  case FT_MSG_SLOT:
    if ((unsigned)m->slot.event >= FT_SLOT_EVENT_COUNT)
      return ft_err_set(err, "SLOT.event: %u out of range 0..%d", (unsigned)m->slot.event,
                        FT_SLOT_EVENT_COUNT - 1);
    /* signal may name the agent itself (FT_WIRE_AGENT_SLOT) */
    if (m->slot.slot >= FT_WIRE_MAX_SLOTS &&
        !(m->slot.slot == FT_WIRE_AGENT_SLOT && m->slot.event == FT_SLOT_SIGNAL))
      return ft_err_set(err, "SLOT.slot: %u exceeds %u", (unsigned)m->slot.slot,
                        FT_WIRE_MAX_SLOTS - 1);
    return 0;
  }
  return ft_err_set(err, "message type %d is unknown", (int)m->type);
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct wr {
  ft_buf *b;
  int err; /* sticky: first failure wins */
  const char *t;
} wr;

static void w_bytes(wr *w, const void *p, size_t n) {
  if (!w->err)
    w->err = ft_buf_append(w->b, p, n);
}

static void w_u8(wr *w, uint8_t v) {
  w_bytes(w, &v, 1);
}

static void w_u32(wr *w, uint32_t v) {
  uint8_t p[4];
  put32(p, v);
  w_bytes(w, p, 4);
}

static void w_u64(wr *w, uint64_t v) {
  uint8_t p[8];
  put64(p, v);
  w_bytes(w, p, 8);
}

static void w_i64(wr *w, int64_t v) {
  w_u64(w, (uint64_t)v);
}

static void w_f64(wr *w, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  w_u64(w, u);
}

static void w_fail(wr *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(wr *w, const char *fmt, ...) {
  if (w->err)
    return;
  va_list ap;
  va_start(ap, fmt);
  w->err = ft_err_setv(FT_EINVAL, fmt, ap);
  va_end(ap);
}

static void w_blob(wr *w, const void *p, size_t n, size_t max, const char *field) {
  if (w->err)
    return;
  if (n > max) {
    w_fail(w, "%s.%s: %zu bytes exceed the limit of %zu", w->t, field, n, max);
    return;
  }
  if (n && !p) {
    w_fail(w, "%s.%s: NULL data with length %zu", w->t, field, n);
    return;
  }
  w_u32(w, (uint32_t)n);
  w_bytes(w, p, n);
}

static void w_str(wr *w, const char *s, size_t min, size_t max, const char *field) {
  if (w->err)
    return;
  if (!s)
    s = "";
  size_t n = strnlen(s, max + 1);
  if (n < min) {
    w_fail(w, "%s.%s: must not be empty", w->t, field);
    return;
  }
  w_blob(w, s, n, max, field);
}

int ft_wire_encode(const ft_msg *m, ft_buf *out) {
  int rc = check_msg(m, FT_EINVAL);
  if (rc)
    return rc;
  size_t start = out->len;
  wr w = {.b = out, .err = 0, .t = ft_msg_type_name(m->type)};
  w_u32(&w, 0); /* length, patched below */
  w_u8(&w, FT_WIRE_VERSION);
  w_u8(&w, (uint8_t)m->type);
  w_str(&w, m->run, 1, FT_WIRE_MAX_RUN, "run");
  w_u64(&w, m->gen);
  switch (m->type) {
  case FT_MSG_CHALLENGE:
    w_bytes(&w, m->challenge.nonce, FT_WIRE_NONCE_LEN);
    break;
  case FT_MSG_HELLO:
    w_u32(&w, m->hello.node);
    w_u32(&w, m->hello.slot);
    w_u32(&w, m->hello.pid);
    w_bytes(&w, m->hello.mac, FT_WIRE_MAC_LEN);
    break;
  case FT_MSG_WELCOME:
    w_u32(&w, m->welcome.heartbeat_ms);
    break;
  case FT_MSG_ASSIGN:
    w_u32(&w, m->assign.rank);
    w_u32(&w, m->assign.world);
    w_i64(&w, m->assign.restore_step);
    w_blob(&w, m->assign.rdzv, m->assign.rdzv_len, FT_WIRE_MAX_RDZV, "rdzv");
    w_u32(&w, m->assign.nskips);
    for (uint32_t i = 0; i < m->assign.nskips && !w.err; i++) {
      w_i64(&w, m->assign.skips[i].first);
      w_i64(&w, m->assign.skips[i].end);
    }
    break;
  case FT_MSG_HEARTBEAT:
    w_i64(&w, m->heartbeat.step);
    w_u32(&w, m->heartbeat.seq);
    w_u32(&w, m->heartbeat.rtt_us);
    w_u8(&w, (uint8_t)m->heartbeat.phase);
    w_u64(&w, m->heartbeat.coll_seq);
    w_u32(&w, m->heartbeat.prog_age_ms);
    w_u8(&w, (uint8_t)m->heartbeat.wait);
    w_u32(&w, m->heartbeat.wait_attempt);
    break;
  case FT_MSG_STEP:
    w_i64(&w, m->step.step);
    w_f64(&w, m->step.loss);
    w_f64(&w, m->step.grad_norm);
    w_f64(&w, m->step.tokens_per_s);
    w_f64(&w, m->step.step_ms);
    w_f64(&w, m->step.val_loss);
    break;
  case FT_MSG_SHARD_SAVED:
    w_i64(&w, m->shard_saved.step);
    w_u32(&w, m->shard_saved.rank);
    w_str(&w, m->shard_saved.manifest, 0, FT_WIRE_MAX_MANIFEST, "manifest");
    break;
  case FT_MSG_COMMITTED:
    w_i64(&w, m->committed.step);
    break;
  case FT_MSG_FAULT:
    w_u8(&w, (uint8_t)m->fault.kind);
    w_i64(&w, m->fault.step);
    w_str(&w, m->fault.detail, 0, FT_WIRE_MAX_DETAIL, "detail");
    break;
  case FT_MSG_STOP:
    w_u8(&w, (uint8_t)m->stop.reason);
    w_str(&w, m->stop.detail, 0, FT_WIRE_MAX_DETAIL, "detail");
    break;
  case FT_MSG_KV_SET:
    w_str(&w, m->kv_set.key, 1, FT_WIRE_MAX_KEY, "key");
    w_blob(&w, m->kv_set.value, m->kv_set.value_len, FT_WIRE_MAX_VALUE, "value");
    break;
  case FT_MSG_KV_GET:
    w_u32(&w, m->kv_get.req);
    w_u32(&w, m->kv_get.timeout_ms);
    if (!m->kv_get.keys)
      w_fail(&w, "KV_GET.keys: NULL with nkeys %u", (unsigned)m->kv_get.nkeys);
    w_u32(&w, m->kv_get.nkeys);
    for (uint32_t i = 0; i < m->kv_get.nkeys && !w.err; i++)
      w_str(&w, m->kv_get.keys[i], 1, FT_WIRE_MAX_KEY, "keys[]");
    break;
  case FT_MSG_KV_VALUE:
    w_u32(&w, m->kv_value.req);
    w_u8(&w, (uint8_t)m->kv_value.status);
    if (m->kv_value.nvals && !m->kv_value.vals)
      w_fail(&w, "KV_VALUE.vals: NULL with nvals %u", (unsigned)m->kv_value.nvals);
    w_u32(&w, m->kv_value.nvals);
    for (uint32_t i = 0; i < m->kv_value.nvals && !w.err; i++)
      w_blob(&w, m->kv_value.vals[i].data, m->kv_value.vals[i].len, FT_WIRE_MAX_VALUE, "vals[]");
    break;
  case FT_MSG_REPLICA:
    w_str(&w, m->replica.addrs, 0, FT_WIRE_MAX_ADDRS, "addrs");
    break;
  case FT_MSG_DOCTOR:
    w_str(&w, m->doctor.report, 0, FT_WIRE_MAX_REPORT, "report");
    break;
  case FT_MSG_DUMP: /* the header only */
    break;
  case FT_MSG_RELAY:
    w_u32(&w, m->relay.slot);
    w_blob(&w, m->relay.frame, m->relay.frame_len, FT_WIRE_MAX_FRAME + 4u, "frame");
    break;
  case FT_MSG_HOSTBEAT:
    w_u32(&w, m->hostbeat.seq);
    w_u32(&w, m->hostbeat.rtt_us);
    w_u32(&w, m->hostbeat.nbeats);
    for (uint32_t i = 0; i < m->hostbeat.nbeats && !w.err; i++) {
      const ft_wire_beat *b = &m->hostbeat.beats[i];
      w_u32(&w, b->slot);
      w_u64(&w, b->gen);
      w_u32(&w, b->age_ms);
      w_i64(&w, b->step);
      w_u32(&w, b->seq);
      w_u8(&w, (uint8_t)b->phase);
      w_u64(&w, b->coll_seq);
      w_u32(&w, b->prog_age_ms);
      w_u8(&w, (uint8_t)b->wait);
      w_u32(&w, b->wait_attempt);
    }
    break;
  case FT_MSG_SLOT:
    w_u32(&w, m->slot.slot);
    w_u8(&w, (uint8_t)m->slot.event);
    w_u32(&w, (uint32_t)m->slot.status);
    w_u32(&w, m->slot.pid);
    break;
  }
  size_t cap = m->type == FT_MSG_RELAY ? FT_WIRE_MAX_RELAY_FRAME : FT_WIRE_MAX_FRAME;
  if (!w.err && out->len - start - 4 > cap)
    w_fail(&w, "%s: frame of %zu bytes exceeds the limit of %zu", w.t, out->len - start - 4, cap);
  if (w.err) {
    out->len = start;
    return w.err;
  }
  put32(out->data + start, (uint32_t)(out->len - start - 4));
  return 0;
}

/* ---- reader ------------------------------------------------------------------ */

typedef struct rd {
  const uint8_t *p;
  size_t len, off;
  int err; /* sticky: first failure wins, later reads are no-ops */
  const char *t;
} rd;

static void r_fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void r_fail(rd *r, const char *fmt, ...) {
  if (r->err)
    return;
  va_list ap;
  va_start(ap, fmt);
  r->err = ft_err_setv(FT_EPROTO, fmt, ap);
  va_end(ap);
}

/* Non-NULL view of n bytes, or NULL (error set) if fewer remain. */
static const uint8_t *r_take(rd *r, size_t n, const char *field) {
  if (r->err)
    return NULL;
  if (r->len - r->off < n) {
    r_fail(r, "%s.%s: truncated: needs %zu bytes, %zu left", r->t, field, n, r->len - r->off);
    return NULL;
  }
  const uint8_t *p = r->p + r->off;
  r->off += n;
  return p;
}

static uint8_t r_u8(rd *r, const char *field) {
  const uint8_t *p = r_take(r, 1, field);
  return p ? p[0] : 0;
}

static uint32_t r_u32(rd *r, const char *field) {
  const uint8_t *p = r_take(r, 4, field);
  return p ? be32(p) : 0;
}

static uint64_t r_u64(rd *r, const char *field) {
  const uint8_t *p = r_take(r, 8, field);
  return p ? be64(p) : 0;
}

static int64_t r_i64(rd *r, const char *field) {
  return u64_to_i64(r_u64(r, field));
}

static double r_f64(rd *r, const char *field) {
  uint64_t u = r_u64(r, field);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static void r_raw(rd *r, void *dst, size_t n, const char *field) {
  const uint8_t *p = r_take(r, n, field);
  if (p)
    memcpy(dst, p, n);
}

/* A count in min..max, checked before anything is sized by it. */
static uint32_t r_count(rd *r, uint32_t min, uint32_t max, const char *field) {
  uint32_t n = r_u32(r, field);
  if (!r->err && (n < min || n > max)) {
    r_fail(r, "%s.%s: count %u out of range %u..%u", r->t, field, (unsigned)n, (unsigned)min,
           (unsigned)max);
    return 0;
  }
  return r->err ? 0 : n;
}

typedef struct view {
  const uint8_t *p;
  uint32_t n;
} view;

/* A length-prefixed field as a view into the frame. is_str: no NUL inside. */
static view r_view(rd *r, uint32_t min, uint32_t max, int is_str, const char *field) {
  view v = {NULL, 0};
  uint32_t n = r_u32(r, field);
  if (r->err)
    return v;
  if (n > max) {
    r_fail(r, "%s.%s: length %u exceeds the limit of %u", r->t, field, (unsigned)n, (unsigned)max);
    return v;
  }
  if (n < min) {
    r_fail(r, "%s.%s: length %u is below the minimum of %u", r->t, field, (unsigned)n,
           (unsigned)min);
    return v;
  }
  const uint8_t *p = r_take(r, n, field);
  if (!p)
    return v;
  if (is_str && memchr(p, 0, n)) {
    r_fail(r, "%s.%s: NUL byte inside a string", r->t, field);
    return v;
  }
  v.p = p;
  v.n = n;
  return v;
}

/* malloc that records its result in the message; sets FT_ENOMEM. */
static void *r_alloc(rd *r, ft_msg *m, int slot, size_t n) {
  if (r->err)
    return NULL;
  void *p = malloc(n ? n : 1);
  if (!p) {
    r->err = ft_err_set(FT_ENOMEM, "%s: cannot allocate %zu bytes", r->t, n);
    return NULL;
  }
  m->owned_[slot] = p;
  return p;
}

/* Copies a string view into owned memory (NUL-terminated). */
static const char *r_strdup(rd *r, ft_msg *m, int slot, view v) {
  char *s = r_alloc(r, m, slot, (size_t)v.n + 1);
  if (!s)
    return "";
  if (v.n)
    memcpy(s, v.p, v.n);
  s[v.n] = 0;
  return s;
}

static void decode_payload(rd *r, ft_msg *m) {
  view v;
  switch (m->type) {
  case FT_MSG_CHALLENGE:
    r_raw(r, m->challenge.nonce, FT_WIRE_NONCE_LEN, "nonce");
    break;
  case FT_MSG_HELLO:
    m->hello.node = r_u32(r, "node");
    m->hello.slot = r_u32(r, "slot");
    m->hello.pid = r_u32(r, "pid");
    r_raw(r, m->hello.mac, FT_WIRE_MAC_LEN, "mac");
    break;
  case FT_MSG_WELCOME:
    m->welcome.heartbeat_ms = r_u32(r, "heartbeat_ms");
    break;
  case FT_MSG_ASSIGN: {
    m->assign.rank = r_u32(r, "rank");
    m->assign.world = r_u32(r, "world");
    m->assign.restore_step = r_i64(r, "restore_step");
    v = r_view(r, 0, FT_WIRE_MAX_RDZV, 0, "rdzv");
    if (!r->err && v.n) {
      uint8_t *d = r_alloc(r, m, 0, v.n);
      if (d)
        memcpy(d, v.p, v.n);
      m->assign.rdzv = d;
      m->assign.rdzv_len = d ? v.n : 0;
    }
    uint32_t n = r_count(r, 0, FT_WIRE_MAX_SKIPS, "nskips");
    if (!r->err && (size_t)n * 16 > r->len - r->off) {
      r_fail(r, "ASSIGN.skips: truncated: %u ranges need %zu bytes, %zu left", (unsigned)n,
             (size_t)n * 16, r->len - r->off);
    }
    if (!r->err && n) {
      ft_wire_range *s = r_alloc(r, m, 1, (size_t)n * sizeof *s);
      for (uint32_t i = 0; s && i < n; i++) {
        s[i].first = r_i64(r, "skips[].first");
        s[i].end = r_i64(r, "skips[].end");
      }
      m->assign.skips = s;
      m->assign.nskips = s ? n : 0;
    }
    break;
  }
  case FT_MSG_HEARTBEAT:
    m->heartbeat.step = r_i64(r, "step");
    m->heartbeat.seq = r_u32(r, "seq");
    m->heartbeat.rtt_us = r_u32(r, "rtt_us");
    m->heartbeat.phase = (ft_phase)r_u8(r, "phase");
    m->heartbeat.coll_seq = r_u64(r, "coll_seq");
    m->heartbeat.prog_age_ms = r_u32(r, "prog_age_ms");
    m->heartbeat.wait = (ft_wait_reason)r_u8(r, "wait");
    m->heartbeat.wait_attempt = r_u32(r, "wait_attempt");
    break;
  case FT_MSG_STEP:
    m->step.step = r_i64(r, "step");
    m->step.loss = r_f64(r, "loss");
    m->step.grad_norm = r_f64(r, "grad_norm");
    m->step.tokens_per_s = r_f64(r, "tokens_per_s");
    m->step.step_ms = r_f64(r, "step_ms");
    m->step.val_loss = r_f64(r, "val_loss");
    break;
  case FT_MSG_SHARD_SAVED:
    m->shard_saved.step = r_i64(r, "step");
    m->shard_saved.rank = r_u32(r, "rank");
    v = r_view(r, 0, FT_WIRE_MAX_MANIFEST, 1, "manifest");
    m->shard_saved.manifest = r->err ? "" : r_strdup(r, m, 0, v);
    break;
  case FT_MSG_COMMITTED:
    m->committed.step = r_i64(r, "step");
    break;
  case FT_MSG_FAULT: {
    uint8_t kind = r_u8(r, "kind");
    if (!r->err && kind >= FT_FAULT_KIND_COUNT)
      r_fail(r, "FAULT.kind: %u out of range 0..%d", kind, FT_FAULT_KIND_COUNT - 1);
    m->fault.kind = (ft_fault_kind)kind;
    m->fault.step = r_i64(r, "step");
    v = r_view(r, 0, FT_WIRE_MAX_DETAIL, 1, "detail");
    m->fault.detail = r->err ? "" : r_strdup(r, m, 0, v);
    break;
  }
  case FT_MSG_STOP: {
    uint8_t reason = r_u8(r, "reason");
    if (!r->err && reason >= FT_STOP_REASON_COUNT)
      r_fail(r, "STOP.reason: %u out of range 0..%d", reason, FT_STOP_REASON_COUNT - 1);
    m->stop.reason = (ft_stop_reason)reason;
    v = r_view(r, 0, FT_WIRE_MAX_DETAIL, 1, "detail");
    m->stop.detail = r->err ? "" : r_strdup(r, m, 0, v);
    break;
  }
  case FT_MSG_KV_SET: {
    view k = r_view(r, 1, FT_WIRE_MAX_KEY, 1, "key");
    view val = r_view(r, 0, FT_WIRE_MAX_VALUE, 0, "value");
    /* One block: value bytes, then the key and its NUL. */
    uint8_t *d = r_alloc(r, m, 0, (size_t)val.n + k.n + 1);
    if (d) {
      if (val.n)
        memcpy(d, val.p, val.n);
      memcpy(d + val.n, k.p, k.n);
      d[val.n + k.n] = 0;
      m->kv_set.value = val.n ? d : NULL;
      m->kv_set.value_len = val.n;
      m->kv_set.key = (const char *)d + val.n;
    }
    break;
  }
  case FT_MSG_KV_GET: {
    m->kv_get.req = r_u32(r, "req");
    m->kv_get.timeout_ms = r_u32(r, "timeout_ms");
    uint32_t n = r_count(r, 1, FT_WIRE_MAX_KEYS, "nkeys");
    view keys[FT_WIRE_MAX_KEYS];
    size_t total = 0;
    for (uint32_t i = 0; i < n && !r->err; i++) {
      keys[i] = r_view(r, 1, FT_WIRE_MAX_KEY, 1, "keys[]");
      total += keys[i].n + 1;
    }
    /* One block: the pointer array, then the NUL-terminated keys. */
    const char **ptrs = r_alloc(r, m, 0, n * sizeof *ptrs + total);
    if (ptrs) {
      char *s = (char *)(ptrs + n);
      for (uint32_t i = 0; i < n; i++) {
        memcpy(s, keys[i].p, keys[i].n);
        s[keys[i].n] = 0;
        ptrs[i] = s;
        s += keys[i].n + 1;
      }
      m->kv_get.keys = ptrs;
      m->kv_get.nkeys = n;
    }
    break;
  }
  case FT_MSG_KV_VALUE: {
    m->kv_value.req = r_u32(r, "req");
    uint8_t status = r_u8(r, "status");
    if (!r->err && status >= FT_KV_STATUS_COUNT)
      r_fail(r, "KV_VALUE.status: %u out of range 0..%d", status, FT_KV_STATUS_COUNT - 1);
    m->kv_value.status = (ft_kv_status)status;
    uint32_t n = r_count(r, 0, FT_WIRE_MAX_KEYS, "nvals");
    view vals[FT_WIRE_MAX_KEYS];
    size_t total = 0;
    for (uint32_t i = 0; i < n && !r->err; i++) {
      vals[i] = r_view(r, 0, FT_WIRE_MAX_VALUE, 0, "vals[]");
      total += vals[i].n;
    }
    if (!r->err && n) {
      ft_wire_blob *b = r_alloc(r, m, 0, n * sizeof *b + total);
      if (b) {
        uint8_t *d = (uint8_t *)(b + n);
        for (uint32_t i = 0; i < n; i++) {
          b[i].len = vals[i].n;
          b[i].data = vals[i].n ? d : NULL;
          if (vals[i].n)
            memcpy(d, vals[i].p, vals[i].n);
          d += vals[i].n;
        }
        m->kv_value.vals = b;
        m->kv_value.nvals = n;
      }
    }
    break;
  }
  case FT_MSG_REPLICA:
    v = r_view(r, 0, FT_WIRE_MAX_ADDRS, 1, "addrs");
    m->replica.addrs = r->err ? "" : r_strdup(r, m, 0, v);
    break;
  case FT_MSG_DOCTOR:
    v = r_view(r, 0, FT_WIRE_MAX_REPORT, 1, "report");
    m->doctor.report = r->err ? "" : r_strdup(r, m, 0, v);
    break;
  case FT_MSG_DUMP: /* the header only: any byte after it is trailing */
    break;
  case FT_MSG_RELAY:
    m->relay.slot = r_u32(r, "slot");
    v = r_view(r, FT_WIRE_HDR_LEN, FT_WIRE_MAX_FRAME + 4u, 0, "frame");
    if (!r->err) {
      uint8_t *d = r_alloc(r, m, 0, v.n);
      if (d)
        memcpy(d, v.p, v.n);
      m->relay.frame = d;
      m->relay.frame_len = d ? v.n : 0;
    }
    break;
  case FT_MSG_HOSTBEAT: {
    m->hostbeat.seq = r_u32(r, "seq");
    m->hostbeat.rtt_us = r_u32(r, "rtt_us");
    uint32_t n = r_count(r, 0, FT_WIRE_MAX_SLOTS, "nbeats");
    /* 46 bytes a beat: checked before anything is sized by n */
    if (!r->err && (size_t)n * 46 > r->len - r->off)
      r_fail(r, "HOSTBEAT.beats: truncated: %u beats need %zu bytes, %zu left", (unsigned)n,
             (size_t)n * 46, r->len - r->off);
    if (!r->err && n) {
      ft_wire_beat *b = r_alloc(r, m, 0, (size_t)n * sizeof *b);
      for (uint32_t i = 0; b && i < n; i++) {
        b[i].slot = r_u32(r, "beats[].slot");
        b[i].gen = r_u64(r, "beats[].gen");
        b[i].age_ms = r_u32(r, "beats[].age_ms");
        b[i].step = r_i64(r, "beats[].step");
        b[i].seq = r_u32(r, "beats[].seq");
        b[i].phase = (ft_phase)r_u8(r, "beats[].phase");
        b[i].coll_seq = r_u64(r, "beats[].coll_seq");
        b[i].prog_age_ms = r_u32(r, "beats[].prog_age_ms");
        b[i].wait = (ft_wait_reason)r_u8(r, "beats[].wait");
        b[i].wait_attempt = r_u32(r, "beats[].wait_attempt");
      }
      m->hostbeat.beats = b;
      m->hostbeat.nbeats = b ? n : 0;
    }
    break;
  }
  case FT_MSG_SLOT: {
    m->slot.slot = r_u32(r, "slot");
    uint8_t ev = r_u8(r, "event");
    if (!r->err && ev >= FT_SLOT_EVENT_COUNT)
      r_fail(r, "SLOT.event: %u out of range 0..%d", ev, FT_SLOT_EVENT_COUNT - 1);
    m->slot.event = (ft_slot_event)ev;
    m->slot.status = (int32_t)r_u32(r, "status");
    m->slot.pid = r_u32(r, "pid");
    break;
  }
  }
}

int ft_wire_decode(const uint8_t *frame, size_t len, ft_msg *m) {
  memset(m, 0, sizeof *m);
  if (!frame || len < FT_WIRE_HDR_LEN)
    return ft_err_set(FT_EPROTO, "frame: %zu bytes, shorter than the %u-byte header", len,
                      FT_WIRE_HDR_LEN);
  uint32_t flen = be32(frame);
  uint32_t cap = frame[5] == FT_MSG_RELAY ? FT_WIRE_MAX_RELAY_FRAME : FT_WIRE_MAX_FRAME;
  if (flen > cap)
    return ft_err_set(FT_EPROTO, "frame: length field %u exceeds the limit of %u", (unsigned)flen,
                      (unsigned)cap);
  if ((size_t)flen != len - 4)
    return ft_err_set(FT_EPROTO, "frame: length field %u but %zu bytes follow it", (unsigned)flen,
                      len - 4);
  if (frame[4] != FT_WIRE_VERSION)
    return ft_err_set(FT_EPROTO, "frame: version %u, expected %u", frame[4], FT_WIRE_VERSION);
  uint8_t type = frame[5];
  if (type < FT_MSG_TYPE_MIN || type > FT_MSG_TYPE_MAX)
    return ft_err_set(FT_EPROTO, "frame: unknown message type %u", type);

  m->type = (ft_msg_type)type;
  rd r = {.p = frame + FT_WIRE_HDR_LEN,
          .len = len - FT_WIRE_HDR_LEN,
          .off = 0,
          .err = 0,
          .t = ft_msg_type_name(type)};
  view run = r_view(&r, 1, FT_WIRE_MAX_RUN, 1, "run");
  if (!r.err) {
    memcpy(m->run, run.p, run.n);
    m->run[run.n] = 0;
  }
  m->gen = r_u64(&r, "gen");
  decode_payload(&r, m);
  if (!r.err && r.off != r.len)
    r_fail(&r, "%s: %zu trailing bytes after the payload", r.t, r.len - r.off);
  int rc = r.err ? r.err : check_msg(m, FT_EPROTO);
  if (rc)
    ft_msg_release(m);
  return rc;
}

/* ---- generation fencing ---------------------------------------------------------- */

int ft_wire_check_gen(const ft_msg *m, uint64_t current_gen) {
  switch (m->type) {
  case FT_MSG_CHALLENGE:
  case FT_MSG_WELCOME:
  case FT_MSG_ASSIGN:
  case FT_MSG_STOP:
    return 0; /* these announce or set the generation; STOP is always obeyed */
  default:
    break;
  }
  if (m->gen == 0 && gen_zero_allowed(m->type))
    return 0; /* not in a gang: an idle spare, or a worker not yet assigned */
  if (m->gen < current_gen)
    return 1;
  if (m->gen > current_gen)
    return ft_err_set(FT_EPROTO, "%s: generation %llu is from the future (current %llu)",
                      ft_msg_type_name(m->type), (unsigned long long)m->gen,
                      (unsigned long long)current_gen);
  return 0;
}

/* ---- authentication ---------------------------------------------------------------- */

static int ossl_fail(const char *what) {
  char buf[256];
  unsigned long e = ERR_get_error();
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return ft_err_set(FT_EIO, "%s failed: %s", what, e ? buf : "no OpenSSL error queued");
}

int ft_wire_token_new(char out[FT_WIRE_TOKEN_HEX + 1]) {
  uint8_t raw[FT_WIRE_TOKEN_HEX / 2];
  if (RAND_bytes(raw, sizeof raw) != 1)
    return ossl_fail("RAND_bytes (token)");
  ft_hex_encode(raw, sizeof raw, out);
  OPENSSL_cleanse(raw, sizeof raw);
  return 0;
}

int ft_wire_nonce_new(uint8_t nonce[FT_WIRE_NONCE_LEN]) {
  if (RAND_bytes(nonce, FT_WIRE_NONCE_LEN) != 1)
    return ossl_fail("RAND_bytes (nonce)");
  return 0;
}

/* Decodes the token into key[32]; never puts the token into an error text. */
static int token_key(const char *token, uint8_t key[FT_WIRE_TOKEN_HEX / 2]) {
  if (!token || strnlen(token, FT_WIRE_TOKEN_HEX + 1) != FT_WIRE_TOKEN_HEX)
    return ft_err_set(FT_EINVAL, "run token must be %u hex characters", FT_WIRE_TOKEN_HEX);
  if (ft_hex_decode(token, FT_WIRE_TOKEN_HEX / 2, key, FT_HEX_ANY_CASE) != FT_OK) {
    OPENSSL_cleanse(key, FT_WIRE_TOKEN_HEX / 2);
    return ft_err_set(FT_EINVAL, "run token must be %u hex characters", FT_WIRE_TOKEN_HEX);
  }
  return 0;
}

int ft_wire_token_check(const char *token) {
  uint8_t key[FT_WIRE_TOKEN_HEX / 2];
  int rc = token_key(token, key);
  OPENSSL_cleanse(key, sizeof key);
  return rc;
}

#define HELLO_LABEL "ftsup-hello-v1" /* followed by its NUL on the MAC input */
#define MAX_LABEL 32u
#define MAX_NONCE 64u

/* HMAC-SHA256 keyed with the token over
 *   label 0x00 | nonce_len u32 | nonce | run_len u32 | run | tail
 * (tail: fixed-width fields of the protocol, at most 64 bytes). */
static int labelled_mac(const char *token, const char *label, const uint8_t *nonce,
                        size_t nonce_len, const char *run, const uint8_t *tail, size_t tail_len,
                        uint8_t mac[FT_WIRE_MAC_LEN]) {
  uint8_t key[FT_WIRE_TOKEN_HEX / 2];
  uint8_t msg[MAX_LABEL + 1 + 4 + MAX_NONCE + 4 + FT_WIRE_MAX_RUN + 64];
  size_t label_len = strnlen(label, MAX_LABEL + 1);
  size_t run_len = run ? strnlen(run, FT_WIRE_MAX_RUN + 1) : 0;
  if (label_len > MAX_LABEL || tail_len > 64)
    return ft_err_set(FT_EINVAL, "hmac: label or fields too long");
  if (!nonce || nonce_len == 0 || nonce_len > MAX_NONCE)
    return ft_err_set(FT_EINVAL, "hmac: nonce length %zu out of range 1..%u", nonce_len, MAX_NONCE);
  if (run_len < 1 || run_len > FT_WIRE_MAX_RUN)
    return ft_err_set(FT_EINVAL, "hmac: run id length out of range 1..%u", FT_WIRE_MAX_RUN);
  int rc = token_key(token, key);
  if (rc)
    return rc;
  size_t n = 0;
  memcpy(msg, label, label_len + 1); /* with the NUL */
  n += label_len + 1;
  put32(msg + n, (uint32_t)nonce_len);
  n += 4;
  memcpy(msg + n, nonce, nonce_len);
  n += nonce_len;
  put32(msg + n, (uint32_t)run_len);
  n += 4;
  memcpy(msg + n, run, run_len);
  n += run_len;
  if (tail_len)
    memcpy(msg + n, tail, tail_len);
  n += tail_len;
  unsigned int mac_len = 0;
  if (!HMAC(EVP_sha256(), key, (int)sizeof key, msg, n, mac, &mac_len) ||
      mac_len != FT_WIRE_MAC_LEN)
    rc = ossl_fail("HMAC-SHA256");
  OPENSSL_cleanse(key, sizeof key);
  return rc;
}

int ft_wire_hmac(const char *token, const uint8_t *nonce, size_t nonce_len, const char *run,
                 uint64_t gen, uint32_t node, uint32_t slot, uint32_t pid,
                 uint8_t mac[FT_WIRE_MAC_LEN]) {
  uint8_t tail[8 + 3 * 4];
  put64(tail, gen);
  put32(tail + 8, node);
  put32(tail + 12, slot);
  put32(tail + 16, pid);
  return labelled_mac(token, HELLO_LABEL, nonce, nonce_len, run, tail, sizeof tail, mac);
}

int ft_wire_hmac_label(const char *token, const char *label, const uint8_t *nonce, size_t nonce_len,
                       const char *run, uint8_t mac[FT_WIRE_MAC_LEN]) {
  if (!label || !strcmp(label, HELLO_LABEL))
    return ft_err_set(FT_EINVAL, "hmac: the label must name another protocol than HELLO's");
  return labelled_mac(token, label, nonce, nonce_len, run, NULL, 0, mac);
}

int ft_wire_hello_sign(ft_msg *hello, const char *token, const uint8_t nonce[FT_WIRE_NONCE_LEN]) {
  if (hello->type != FT_MSG_HELLO)
    return ft_err_set(FT_EINVAL, "hello_sign: message is %s, not HELLO",
                      ft_msg_type_name(hello->type));
  return ft_wire_hmac(token, nonce, FT_WIRE_NONCE_LEN, hello->run, hello->gen, hello->hello.node,
                      hello->hello.slot, hello->hello.pid, hello->hello.mac);
}

int ft_wire_hello_verify(const ft_msg *hello, const char *token,
                         const uint8_t nonce[FT_WIRE_NONCE_LEN]) {
  uint8_t want[FT_WIRE_MAC_LEN];
  if (hello->type != FT_MSG_HELLO)
    return ft_err_set(FT_EINVAL, "hello_verify: message is %s, not HELLO",
                      ft_msg_type_name(hello->type));
  int rc = ft_wire_hmac(token, nonce, FT_WIRE_NONCE_LEN, hello->run, hello->gen, hello->hello.node,
                        hello->hello.slot, hello->hello.pid, want);
  if (rc)
    return rc;
  if (!ft_wire_mac_equal(want, hello->hello.mac))
    rc = ft_err_set(FT_EPROTO, "HELLO MAC mismatch (node %u slot %u pid %u)",
                    (unsigned)hello->hello.node, (unsigned)hello->hello.slot,
                    (unsigned)hello->hello.pid);
  OPENSSL_cleanse(want, sizeof want);
  return rc;
}

int ft_wire_mac_equal(const uint8_t a[FT_WIRE_MAC_LEN], const uint8_t b[FT_WIRE_MAC_LEN]) {
  return CRYPTO_memcmp(a, b, FT_WIRE_MAC_LEN) == 0;
}
