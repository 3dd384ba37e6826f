/*
 * test_wire: the control-protocol codec (common/ft_wire.h).
 *
 * Round trips of every message type with ordinary and extreme values;
 * the streaming frame-length helper fed byte by byte; malformed frames built
 * by hand (independently of the codec's writer) that must each fail with
 * FT_EPROTO and the right reason; many thousands of randomly mutated valid
 * frames (a crash or an out-of-bounds read shows under ASan/UBSan, and every
 * frame that is accepted must re-encode to the same bytes); the HELLO MAC
 * against an independent HMAC of the documented input; generation fencing;
 * the HEARTBEAT's progress (version 7: every phase and the extremes round
 * trip, a phase out of range is refused by decode and encode, a version-6
 * heartbeat is refused as truncated; version 9: the wait reason and attempt
 * round trip, a reason out of range is refused, a version-8 heartbeat is
 * refused as truncated).
 * Every frame handed to the decoder sits in its own exact-size malloc block,
 * so ASan sees any read past its end.
 *
 * FT_WIRE_SEED=<n> changes the mutation seed; FT_WIRE_ITERS=<n> the count;
 * FT_WIRE_CORPUS_DIR=<dir> writes one valid frame per type there (fuzz seeds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ft_err.h"
#include "ft_wire.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static double bitsd(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* Decodes bytes from an exact-size heap copy (so ASan catches overreads). */
static int decode_copy(const uint8_t *p, size_t n, ft_msg *m) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  if (n)
    memcpy(c, p, n);
  int rc = ft_wire_decode(c, n, m);
  free(c);
  return rc;
}

static void expect_proto(const uint8_t *p, size_t n, const char *reason) {
  ft_msg m;
  int rc = decode_copy(p, n, &m);
  if (rc != FT_EPROTO || (reason && !strstr(ft_err_detail(), reason)))
    fail_msg("expected FT_EPROTO with '%s', got rc %d detail '%s'", reason ? reason : "", rc,
             ft_err_detail());
  /* a failed decode leaves the message empty */
  assert_null(m.owned_[0]);
  assert_null(m.owned_[1]);
}

static void enc(const ft_msg *m, ft_buf *b) {
  ft_buf_reset(b);
  int rc = ft_wire_encode(m, b);
  if (rc)
    fail_msg("encode %s: %d %s", ft_msg_type_name(m->type), rc, ft_err_detail());
}

/* encode -> frame_len -> decode -> re-encode gives the same bytes. */
static void roundtrip(const ft_msg *in, ft_msg *out) {
  ft_buf b, b2;
  ft_buf_init(&b);
  ft_buf_init(&b2);
  enc(in, &b);
  size_t fl = 0;
  assert_int_equal(ft_wire_frame_len(b.data, b.len, &fl), 1);
  assert_int_equal(fl, b.len);
  int rc = decode_copy(b.data, b.len, out);
  if (rc)
    fail_msg("decode %s: %d %s", ft_msg_type_name(in->type), rc, ft_err_detail());
  assert_int_equal(out->type, in->type);
  assert_string_equal(out->run, in->run);
  assert_true(out->gen == in->gen);
  enc(out, &b2);
  assert_int_equal(b2.len, b.len);
  assert_memory_equal(b2.data, b.data, b.len);
  ft_buf_release(&b);
  ft_buf_release(&b2);
}

static const char *str_or_empty(const char *s) {
  return s ? s : "";
}

/* Field-by-field equality (doubles by bits). */
static void assert_same(const ft_msg *a, const ft_msg *b) {
  assert_int_equal(a->type, b->type);
  assert_string_equal(a->run, b->run);
  assert_true(a->gen == b->gen);
  switch (a->type) {
  case FT_MSG_CHALLENGE:
    assert_memory_equal(a->challenge.nonce, b->challenge.nonce, FT_WIRE_NONCE_LEN);
    break;
  case FT_MSG_HELLO:
    assert_int_equal(a->hello.node, b->hello.node);
    assert_int_equal(a->hello.slot, b->hello.slot);
    assert_int_equal(a->hello.pid, b->hello.pid);
    assert_memory_equal(a->hello.mac, b->hello.mac, FT_WIRE_MAC_LEN);
    break;
  case FT_MSG_WELCOME:
    assert_int_equal(a->welcome.heartbeat_ms, b->welcome.heartbeat_ms);
    break;
  case FT_MSG_ASSIGN:
    assert_int_equal(a->assign.rank, b->assign.rank);
    assert_int_equal(a->assign.world, b->assign.world);
    assert_true(a->assign.restore_step == b->assign.restore_step);
    assert_int_equal(a->assign.rdzv_len, b->assign.rdzv_len);
    if (a->assign.rdzv_len)
      assert_memory_equal(a->assign.rdzv, b->assign.rdzv, a->assign.rdzv_len);
    assert_int_equal(a->assign.nskips, b->assign.nskips);
    for (uint32_t i = 0; i < a->assign.nskips; i++) {
      assert_true(a->assign.skips[i].first == b->assign.skips[i].first);
      assert_true(a->assign.skips[i].end == b->assign.skips[i].end);
    }
    break;
  case FT_MSG_HEARTBEAT:
    assert_true(a->heartbeat.step == b->heartbeat.step);
    assert_int_equal(a->heartbeat.seq, b->heartbeat.seq);
    assert_int_equal(a->heartbeat.rtt_us, b->heartbeat.rtt_us);
    assert_int_equal(a->heartbeat.phase, b->heartbeat.phase);
    assert_true(a->heartbeat.coll_seq == b->heartbeat.coll_seq);
    assert_int_equal(a->heartbeat.prog_age_ms, b->heartbeat.prog_age_ms);
    assert_int_equal(a->heartbeat.wait, b->heartbeat.wait);
    assert_int_equal(a->heartbeat.wait_attempt, b->heartbeat.wait_attempt);
    break;
  case FT_MSG_STEP:
    assert_true(a->step.step == b->step.step);
    assert_true(dbits(a->step.loss) == dbits(b->step.loss));
    assert_true(dbits(a->step.grad_norm) == dbits(b->step.grad_norm));
    assert_true(dbits(a->step.tokens_per_s) == dbits(b->step.tokens_per_s));
    assert_true(dbits(a->step.step_ms) == dbits(b->step.step_ms));
    assert_true(dbits(a->step.val_loss) == dbits(b->step.val_loss));
    break;
  case FT_MSG_SHARD_SAVED:
    assert_true(a->shard_saved.step == b->shard_saved.step);
    assert_int_equal(a->shard_saved.rank, b->shard_saved.rank);
    assert_string_equal(str_or_empty(a->shard_saved.manifest),
                        str_or_empty(b->shard_saved.manifest));
    break;
  case FT_MSG_COMMITTED:
    assert_true(a->committed.step == b->committed.step);
    break;
  case FT_MSG_FAULT:
    assert_int_equal(a->fault.kind, b->fault.kind);
    assert_true(a->fault.step == b->fault.step);
    assert_string_equal(str_or_empty(a->fault.detail), str_or_empty(b->fault.detail));
    break;
  case FT_MSG_STOP:
    assert_int_equal(a->stop.reason, b->stop.reason);
    assert_string_equal(str_or_empty(a->stop.detail), str_or_empty(b->stop.detail));
    break;
  case FT_MSG_KV_SET:
    assert_string_equal(a->kv_set.key, b->kv_set.key);
    assert_int_equal(a->kv_set.value_len, b->kv_set.value_len);
    if (a->kv_set.value_len)
      assert_memory_equal(a->kv_set.value, b->kv_set.value, a->kv_set.value_len);
    break;
  case FT_MSG_KV_GET:
    assert_int_equal(a->kv_get.req, b->kv_get.req);
    assert_int_equal(a->kv_get.timeout_ms, b->kv_get.timeout_ms);
    assert_int_equal(a->kv_get.nkeys, b->kv_get.nkeys);
    for (uint32_t i = 0; i < a->kv_get.nkeys; i++)
      assert_string_equal(a->kv_get.keys[i], b->kv_get.keys[i]);
    break;
  case FT_MSG_KV_VALUE:
    assert_int_equal(a->kv_value.req, b->kv_value.req);
    assert_int_equal(a->kv_value.status, b->kv_value.status);
    assert_int_equal(a->kv_value.nvals, b->kv_value.nvals);
    for (uint32_t i = 0; i < a->kv_value.nvals; i++) {
      assert_int_equal(a->kv_value.vals[i].len, b->kv_value.vals[i].len);
      if (a->kv_value.vals[i].len)
        assert_memory_equal(a->kv_value.vals[i].data, b->kv_value.vals[i].data,
                            a->kv_value.vals[i].len);
    }
    break;
  case FT_MSG_REPLICA:
    assert_string_equal(str_or_empty(a->replica.addrs), str_or_empty(b->replica.addrs));
    break;
  case FT_MSG_DOCTOR:
    assert_string_equal(str_or_empty(a->doctor.report), str_or_empty(b->doctor.report));
    break;
  case FT_MSG_DUMP: /* the header only */
    break;
  case FT_MSG_RELAY:
    assert_int_equal(a->relay.slot, b->relay.slot);
    assert_int_equal(a->relay.frame_len, b->relay.frame_len);
    assert_memory_equal(a->relay.frame, b->relay.frame, a->relay.frame_len);
    break;
  case FT_MSG_HOSTBEAT:
    assert_int_equal(a->hostbeat.seq, b->hostbeat.seq);
    assert_int_equal(a->hostbeat.rtt_us, b->hostbeat.rtt_us);
    assert_int_equal(a->hostbeat.nbeats, b->hostbeat.nbeats);
    for (uint32_t i = 0; i < a->hostbeat.nbeats; i++) {
      const ft_wire_beat *x = &a->hostbeat.beats[i], *y = &b->hostbeat.beats[i];
      assert_int_equal(x->slot, y->slot);
      assert_true(x->gen == y->gen);
      assert_int_equal(x->age_ms, y->age_ms);
      assert_true(x->step == y->step);
      assert_int_equal(x->seq, y->seq);
      assert_int_equal(x->phase, y->phase);
      assert_true(x->coll_seq == y->coll_seq);
      assert_int_equal(x->prog_age_ms, y->prog_age_ms);
      assert_int_equal(x->wait, y->wait);
      assert_int_equal(x->wait_attempt, y->wait_attempt);
    }
    break;
  case FT_MSG_SLOT:
    assert_int_equal(a->slot.slot, b->slot.slot);
    assert_int_equal(a->slot.event, b->slot.event);
    assert_int_equal(a->slot.status, b->slot.status);
    assert_int_equal(a->slot.pid, b->slot.pid);
    break;
  }
}

static void check_roundtrip(const ft_msg *in) {
  ft_msg out;
  roundtrip(in, &out);
  assert_same(in, &out);
  ft_msg_release(&out);
}

/* ---- one ordinary message of every type (also the mutation corpus) ------- */

static const ft_wire_range g_skips[] = {{100, 120}, {0, 1}, {5000, 5001}};
static const char *const g_keys[] = {"rank0/addr", "rank1/addr", "gen7/nccl_id"};
static const uint8_t g_val0[] = {1, 2, 3, 0, 255};
static const ft_wire_blob g_vals[] = {
    {g_val0, sizeof g_val0}, {NULL, 0}, {(const uint8_t *)"x", 1}};
/* a relayed frame: any bytes to the codec (the receiver decodes them) */
static const uint8_t g_inner[] = {0, 0, 0, 4, FT_WIRE_VERSION, 5, 0xaa, 0x55};
static const ft_wire_beat g_beats[] = {{.slot = 0,
                                        .gen = 7,
                                        .age_ms = 12,
                                        .step = 41,
                                        .seq = 9,
                                        .phase = FT_PHASE_COLLECTIVE,
                                        .coll_seq = 1234,
                                        .prog_age_ms = 3,
                                        .wait = FT_WAIT_NONE,
                                        .wait_attempt = 0},
                                       {.slot = 7,
                                        .gen = 0,
                                        .age_ms = 0,
                                        .step = -1,
                                        .seq = 1,
                                        .phase = FT_PHASE_STORAGE_WAIT,
                                        .coll_seq = UINT64_MAX,
                                        .prog_age_ms = UINT32_MAX,
                                        .wait = FT_WAIT_SLOWDOWN,
                                        .wait_attempt = 3}};

static void make_msg(int type, ft_msg *m) {
  ft_msg_init(m, (ft_msg_type)type);
  snprintf(m->run, sizeof m->run, "run-%d", type);
  m->gen = 7;
  switch (type) {
  case FT_MSG_CHALLENGE:
    for (int i = 0; i < 32; i++)
      m->challenge.nonce[i] = (uint8_t)(i * 7 + 1);
    break;
  case FT_MSG_HELLO:
    m->hello.node = 3;
    m->hello.slot = 1;
    m->hello.pid = 4242;
    for (int i = 0; i < 32; i++)
      m->hello.mac[i] = (uint8_t)(255 - i);
    break;
  case FT_MSG_WELCOME:
    m->welcome.heartbeat_ms = 500;
    break;
  case FT_MSG_ASSIGN:
    m->assign.rank = 2;
    m->assign.world = 8;
    m->assign.restore_step = 1200;
    m->assign.rdzv = (const uint8_t *)"kv:gen7/";
    m->assign.rdzv_len = 8;
    m->assign.skips = g_skips;
    m->assign.nskips = 3;
    break;
  case FT_MSG_HEARTBEAT:
    m->heartbeat.step = 99;
    m->heartbeat.seq = 0xfffffffeu;
    m->heartbeat.rtt_us = 123456;
    m->heartbeat.phase = FT_PHASE_COLLECTIVE;
    m->heartbeat.coll_seq = 0x0102030405060708ull;
    m->heartbeat.prog_age_ms = 4321;
    m->heartbeat.wait = FT_WAIT_TIMEOUT;
    m->heartbeat.wait_attempt = 3;
    break;
  case FT_MSG_STEP:
    m->step.step = 1234;
    m->step.loss = 3.25;
    m->step.grad_norm = 0.75;
    m->step.tokens_per_s = 123456.5;
    m->step.step_ms = 812.125;
    m->step.val_loss = NAN;
    break;
  case FT_MSG_SHARD_SAVED:
    m->shard_saved.step = 1200;
    m->shard_saved.rank = 5;
    m->shard_saved.manifest = "{\"chunks\":[\"ab12\",\"cd34\"],\"bytes\":1048576}";
    break;
  case FT_MSG_COMMITTED:
    m->committed.step = 1200;
    break;
  case FT_MSG_FAULT:
    m->fault.kind = FT_FAULT_XID;
    m->fault.step = 1201;
    m->fault.detail = "Xid 79: GPU has fallen off the bus";
    break;
  case FT_MSG_STOP:
    m->stop.reason = FT_STOP_RECOVERING;
    m->stop.detail = "node 3 lost";
    break;
  case FT_MSG_KV_SET:
    m->kv_set.key = "rank0/addr";
    m->kv_set.value = g_val0;
    m->kv_set.value_len = sizeof g_val0;
    break;
  case FT_MSG_KV_GET:
    m->kv_get.req = 17;
    m->kv_get.timeout_ms = 30000;
    m->kv_get.keys = g_keys;
    m->kv_get.nkeys = 3;
    break;
  case FT_MSG_KV_VALUE:
    m->kv_value.req = 17;
    m->kv_value.status = FT_KV_OK;
    m->kv_value.vals = g_vals;
    m->kv_value.nvals = 3;
    break;
  case FT_MSG_REPLICA:
    m->replica.addrs = "10.0.0.2:40123,[fd00::3]:40777";
    break;
  case FT_MSG_DOCTOR:
    m->doctor.report = "{\"ok\":true,\"checks\":[{\"name\":\"compute\",\"hash\":\"ab12\"}]}";
    break;
  case FT_MSG_RELAY:
    m->relay.slot = 3;
    m->relay.frame = g_inner;
    m->relay.frame_len = sizeof g_inner;
    break;
  case FT_MSG_HOSTBEAT:
    m->hostbeat.seq = 77;
    m->hostbeat.rtt_us = 450;
    m->hostbeat.beats = g_beats;
    m->hostbeat.nbeats = 2;
    break;
  case FT_MSG_SLOT:
    m->slot.slot = 5;
    m->slot.event = FT_SLOT_EXITED;
    m->slot.status = 9; /* killed by signal 9 */
    m->slot.pid = 4242;
    break;
  }
}

/* ---- round trips ---------------------------------------------------------- */

static void test_roundtrip_every_type(void **state) {
  (void)state;
  for (int t = FT_MSG_TYPE_MIN; t <= FT_MSG_TYPE_MAX; t++) {
    ft_msg m;
    make_msg(t, &m);
    check_roundtrip(&m);
  }
  /* several frames appended to one buffer come apart again */
  ft_buf b;
  ft_buf_init(&b);
  for (int t = FT_MSG_TYPE_MIN; t <= FT_MSG_TYPE_MAX; t++) {
    ft_msg m;
    make_msg(t, &m);
    assert_int_equal(ft_wire_encode(&m, &b), 0);
  }
  for (int t = FT_MSG_TYPE_MIN; t <= FT_MSG_TYPE_MAX; t++) {
    size_t fl;
    assert_int_equal(ft_wire_frame_len(b.data, b.len, &fl), 1);
    ft_msg m;
    assert_int_equal(ft_wire_decode(b.data, fl, &m), 0);
    assert_int_equal(m.type, t);
    ft_msg_release(&m);
    ft_buf_consume(&b, fl);
  }
  assert_int_equal(b.len, 0);
  ft_buf_release(&b);
}

static char *filled(size_t n, char c) {
  char *s = malloc(n + 1);
  assert_non_null(s);
  memset(s, c, n);
  s[n] = 0;
  return s;
}

static void test_roundtrip_extremes(void **state) {
  (void)state;
  ft_msg m;
  char *run = filled(FT_WIRE_MAX_RUN, 'r');
  char *detail = filled(FT_WIRE_MAX_DETAIL, 'd');

  /* integers at their limits */
  make_msg(FT_MSG_HELLO, &m);
  memcpy(m.run, run, FT_WIRE_MAX_RUN + 1);
  m.gen = UINT64_MAX;
  m.hello.node = m.hello.slot = m.hello.pid = UINT32_MAX;
  check_roundtrip(&m);
  m.gen = 0;
  m.hello.node = m.hello.slot = m.hello.pid = 0;
  memset(m.hello.mac, 0, sizeof m.hello.mac);
  check_roundtrip(&m);

  make_msg(FT_MSG_HEARTBEAT, &m);
  m.heartbeat.step = -1;
  m.gen = 0;
  check_roundtrip(&m);
  m.heartbeat.step = INT64_MAX;
  check_roundtrip(&m);
  /* the progress fields at their limits: every phase, any seq and age */
  for (int ph = 0; ph < FT_PHASE_COUNT; ph++) {
    m.heartbeat.phase = (ft_phase)ph;
    m.heartbeat.coll_seq = ph % 2 ? UINT64_MAX : 0;
    m.heartbeat.prog_age_ms = ph % 2 ? 0 : UINT32_MAX;
    m.heartbeat.wait = (ft_wait_reason)(ph % FT_WAIT_REASON_COUNT);
    m.heartbeat.wait_attempt = ph % 2 ? UINT32_MAX : 0;
    check_roundtrip(&m);
  }

  /* doubles: NaN (with a payload, and negative), infinities, -0, denormals */
  const uint64_t nan_payload = 0x7ff8000000abcdefull, neg_nan = 0xfff8000000000001ull;
  make_msg(FT_MSG_STEP, &m);
  m.gen = UINT64_MAX;
  m.step.step = INT64_MAX;
  m.step.loss = bitsd(nan_payload);
  m.step.grad_norm = INFINITY;
  m.step.tokens_per_s = -INFINITY;
  m.step.step_ms = -0.0;
  check_roundtrip(&m);
  m.step.step = 0;
  m.step.loss = bitsd(neg_nan);
  m.step.grad_norm = 4.9406564584124654e-324;
  m.step.tokens_per_s = 1.7976931348623157e308;
  m.step.step_ms = 0.0;
  check_roundtrip(&m);

  /* DUMP: the header alone, in and out of a gang */
  make_msg(FT_MSG_DUMP, &m);
  m.gen = 0;
  check_roundtrip(&m);
  m.gen = UINT64_MAX;
  check_roundtrip(&m);
  {
    ft_buf b;
    ft_buf_init(&b);
    make_msg(FT_MSG_DUMP, &m);
    assert_int_equal(ft_wire_encode(&m, &b), 0);
    /* length + version + type + run (u32 + "run-16") + gen u64: nothing after it */
    assert_int_equal(b.len, FT_WIRE_HDR_LEN + 4 + strlen(m.run) + 8);
    ft_buf_release(&b);
  }

  make_msg(FT_MSG_COMMITTED, &m);
  m.committed.step = 0;
  check_roundtrip(&m);
  m.committed.step = INT64_MAX;
  check_roundtrip(&m);

  make_msg(FT_MSG_WELCOME, &m);
  m.welcome.heartbeat_ms = 1;
  check_roundtrip(&m);
  m.welcome.heartbeat_ms = FT_WIRE_MAX_HEARTBEAT_MS;
  check_roundtrip(&m);

  /* strings: empty, NULL (encodes as ""), and at their cap */
  make_msg(FT_MSG_FAULT, &m);
  m.fault.detail = "";
  m.fault.step = -1;
  check_roundtrip(&m);
  m.fault.detail = NULL;
  ft_msg out;
  roundtrip(&m, &out);
  assert_string_equal(out.fault.detail, "");
  ft_msg_release(&out);
  m.fault.detail = detail;
  m.fault.kind = FT_FAULT_OTHER;
  m.fault.step = INT64_MAX;
  check_roundtrip(&m);
  for (int k = 0; k < FT_FAULT_KIND_COUNT; k++) {
    m.fault.kind = (ft_fault_kind)k;
    check_roundtrip(&m);
  }

  make_msg(FT_MSG_STOP, &m);
  m.gen = 0;
  for (int r = 0; r < FT_STOP_REASON_COUNT; r++) {
    m.stop.reason = (ft_stop_reason)r;
    m.stop.detail = r % 2 ? detail : "";
    check_roundtrip(&m);
  }

  /* ASSIGN: no rdzv/skips; then max rdzv, max skips, extreme ranks */
  make_msg(FT_MSG_ASSIGN, &m);
  m.assign.rdzv = NULL;
  m.assign.rdzv_len = 0;
  m.assign.skips = NULL;
  m.assign.nskips = 0;
  m.assign.restore_step = -1;
  m.assign.rank = 0;
  m.assign.world = 1;
  check_roundtrip(&m);
  uint8_t *rdzv = malloc(FT_WIRE_MAX_RDZV);
  ft_wire_range *skips = malloc(FT_WIRE_MAX_SKIPS * sizeof *skips);
  assert_non_null(rdzv);
  assert_non_null(skips);
  for (uint32_t i = 0; i < FT_WIRE_MAX_RDZV; i++)
    rdzv[i] = (uint8_t)i;
  for (uint32_t i = 0; i < FT_WIRE_MAX_SKIPS; i++) {
    skips[i].first = (int64_t)i * 10;
    skips[i].end = i == FT_WIRE_MAX_SKIPS - 1 ? INT64_MAX : (int64_t)i * 10 + 3;
  }
  m.assign.rdzv = rdzv;
  m.assign.rdzv_len = FT_WIRE_MAX_RDZV;
  m.assign.skips = skips;
  m.assign.nskips = FT_WIRE_MAX_SKIPS;
  m.assign.world = FT_WIRE_MAX_WORLD;
  m.assign.rank = FT_WIRE_MAX_WORLD - 1;
  m.assign.restore_step = INT64_MAX;
  check_roundtrip(&m);

  /* SHARD_SAVED with an empty and with a maximal manifest */
  make_msg(FT_MSG_SHARD_SAVED, &m);
  m.shard_saved.manifest = "";
  m.shard_saved.step = 0;
  m.shard_saved.rank = 0;
  check_roundtrip(&m);
  char *manifest = filled(FT_WIRE_MAX_MANIFEST, 'm');
  manifest[0] = '{';
  manifest[FT_WIRE_MAX_MANIFEST - 1] = '}';
  memcpy(m.run, run, FT_WIRE_MAX_RUN + 1);
  m.shard_saved.manifest = manifest;
  m.shard_saved.rank = FT_WIRE_MAX_WORLD - 1;
  m.shard_saved.step = INT64_MAX;
  check_roundtrip(&m);

  /* KV: max key, empty and max value, max key count */
  char *key = filled(FT_WIRE_MAX_KEY, 'k');
  uint8_t *value = malloc(FT_WIRE_MAX_VALUE);
  assert_non_null(value);
  for (uint32_t i = 0; i < FT_WIRE_MAX_VALUE; i++)
    value[i] = (uint8_t)(i * 31);
  make_msg(FT_MSG_KV_SET, &m);
  m.kv_set.key = key;
  m.kv_set.value = NULL;
  m.kv_set.value_len = 0;
  check_roundtrip(&m);
  m.kv_set.value = value;
  m.kv_set.value_len = FT_WIRE_MAX_VALUE;
  check_roundtrip(&m);

  const char *keys[FT_WIRE_MAX_KEYS];
  ft_wire_blob vals[FT_WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < FT_WIRE_MAX_KEYS; i++) {
    keys[i] = i % 2 ? key : "a";
    vals[i].data = i % 2 ? value : NULL;
    vals[i].len = i % 2 ? 1000 + i : 0;
  }
  make_msg(FT_MSG_KV_GET, &m);
  m.kv_get.keys = keys;
  m.kv_get.nkeys = FT_WIRE_MAX_KEYS;
  m.kv_get.req = UINT32_MAX;
  m.kv_get.timeout_ms = FT_WIRE_MAX_KV_TIMEOUT_MS;
  check_roundtrip(&m);
  m.kv_get.nkeys = 1;
  m.kv_get.timeout_ms = 0;
  check_roundtrip(&m);

  make_msg(FT_MSG_KV_VALUE, &m);
  m.kv_value.vals = vals;
  m.kv_value.nvals = FT_WIRE_MAX_KEYS;
  check_roundtrip(&m);
  m.kv_value.vals = NULL;
  m.kv_value.nvals = 0;
  m.kv_value.status = FT_KV_TIMEOUT;
  check_roundtrip(&m);

  /* 64 maximal values don't fit in one frame: encode refuses, buffer intact */
  for (uint32_t i = 0; i < FT_WIRE_MAX_KEYS; i++) {
    vals[i].data = value;
    vals[i].len = FT_WIRE_MAX_VALUE;
  }
  m.kv_value.status = FT_KV_OK;
  m.kv_value.vals = vals;
  m.kv_value.nvals = FT_WIRE_MAX_KEYS;
  ft_buf b;
  ft_buf_init(&b);
  assert_int_equal(ft_buf_append(&b, "xyz", 3), 0);
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "exceeds the limit"));
  assert_int_equal(b.len, 3);
  ft_buf_release(&b);

  free(value);
  free(key);
  free(manifest);
  free(skips);
  free(rdzv);
  free(detail);
  free(run);
}

/* ---- frame length ------------------------------------------------------------ */

static void test_frame_len_partial(void **state) {
  (void)state;
  for (int t = FT_MSG_TYPE_MIN; t <= FT_MSG_TYPE_MAX; t++) {
    ft_msg m;
    ft_buf b;
    ft_buf_init(&b);
    make_msg(t, &m);
    enc(&m, &b);
    /* byte by byte: 0 until the last byte arrives, then 1 with the full length */
    for (size_t n = 0; n <= b.len; n++) {
      uint8_t *c = malloc(n ? n : 1);
      memcpy(c, b.data, n);
      size_t fl = 12345;
      int rc = ft_wire_frame_len(c, n, &fl);
      if (n < b.len) {
        assert_int_equal(rc, 0);
        assert_int_equal(fl, 12345); /* untouched */
      } else {
        assert_int_equal(rc, 1);
        assert_int_equal(fl, b.len);
      }
      free(c);
    }
    /* extra bytes of the next frame don't change the answer */
    assert_int_equal(ft_buf_append(&b, "\0\0\0\2\1\5", 6), 0);
    size_t fl;
    assert_int_equal(ft_wire_frame_len(b.data, b.len, &fl), 1);
    assert_int_equal(fl, b.len - 6);
    ft_buf_release(&b);
  }
}

static void test_frame_len_bad(void **state) {
  (void)state;
  size_t fl;
  const uint8_t zero[] = {0, 0, 0, 0};
  assert_int_equal(ft_wire_frame_len(zero, 4, &fl), FT_EPROTO);
  assert_non_null(strstr(ft_err_detail(), "shorter"));
  const uint8_t one[] = {0, 0, 0, 1, FT_WIRE_VERSION};
  assert_int_equal(ft_wire_frame_len(one, 5, &fl), FT_EPROTO);
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff};
  assert_int_equal(ft_wire_frame_len(huge, 4, &fl), FT_EPROTO);
  assert_non_null(strstr(ft_err_detail(), "exceeds the limit"));
  uint8_t over[4];
  over[0] = (uint8_t)((FT_WIRE_MAX_FRAME + 1) >> 24);
  over[1] = (uint8_t)((FT_WIRE_MAX_FRAME + 1) >> 16);
  over[2] = (uint8_t)((FT_WIRE_MAX_FRAME + 1) >> 8);
  over[3] = (uint8_t)(FT_WIRE_MAX_FRAME + 1);
  assert_int_equal(ft_wire_frame_len(over, 4, &fl), FT_EPROTO);
  /* exactly the max is fine (need more bytes) */
  const uint8_t max[] = {0x01, 0x00, 0x00, 0x00, FT_WIRE_VERSION};
  assert_int_equal(ft_wire_frame_len(max, 5, &fl), 0);
  /* but not before authentication */
  assert_int_equal(ft_wire_frame_len_max(max, 5, FT_WIRE_PREAUTH_MAX_FRAME, &fl), FT_EPROTO);
  const uint8_t small[] = {0, 0, 0x10, 0x00, FT_WIRE_VERSION};
  assert_int_equal(ft_wire_frame_len_max(small, 5, FT_WIRE_PREAUTH_MAX_FRAME, &fl), 0);
  /* version is checked as soon as its byte is there */
  const uint8_t v1[] = {0, 0, 0, 10, 6}; /* version 6: before HEARTBEAT's progress */
  assert_int_equal(ft_wire_frame_len(v1, 4, &fl), 0);
  assert_int_equal(ft_wire_frame_len(v1, 5, &fl), FT_EPROTO);
  assert_non_null(strstr(ft_err_detail(), "version 6, expected 12"));
  const uint8_t v0[] = {0, 0, 0, 2, 0, 5};
  assert_int_equal(ft_wire_frame_len(v0, 6, &fl), FT_EPROTO);
}

/* ---- malformed frames, built by hand ---------------------------------------- */

typedef struct tb {
  uint8_t d[8192];
  size_t n;
} tb;

static void tb_u8(tb *t, uint8_t v) {
  t->d[t->n++] = v;
}
static void tb_u32(tb *t, uint32_t v) {
  for (int i = 3; i >= 0; i--)
    tb_u8(t, (uint8_t)(v >> (8 * i)));
}
static void tb_u64(tb *t, uint64_t v) {
  tb_u32(t, (uint32_t)(v >> 32));
  tb_u32(t, (uint32_t)v);
}
static void tb_bytes(tb *t, const void *p, size_t n) {
  memcpy(t->d + t->n, p, n);
  t->n += n;
}
static void tb_str(tb *t, const char *s) {
  tb_u32(t, (uint32_t)strlen(s));
  tb_bytes(t, s, strlen(s));
}
static void tb_filled(tb *t, size_t n, char c) {
  tb_u32(t, (uint32_t)n);
  memset(t->d + t->n, c, n);
  t->n += n;
}
/* Header: length placeholder, version, type, run, gen. */
static void tb_start(tb *t, uint8_t type, uint64_t gen) {
  t->n = 0;
  tb_u32(t, 0);
  tb_u8(t, FT_WIRE_VERSION);
  tb_u8(t, type);
  tb_str(t, "run");
  tb_u64(t, gen);
}
/* Patches the length field to match. */
static const uint8_t *tb_done(tb *t) {
  uint32_t n = (uint32_t)(t->n - 4);
  t->d[0] = (uint8_t)(n >> 24);
  t->d[1] = (uint8_t)(n >> 16);
  t->d[2] = (uint8_t)(n >> 8);
  t->d[3] = (uint8_t)n;
  return t->d;
}

static void tb_ok(tb *t) {
  ft_msg m;
  tb_done(t);
  int rc = decode_copy(t->d, t->n, &m);
  if (rc)
    fail_msg("hand-built frame rejected: %s", ft_err_detail());
  ft_msg_release(&m);
}

static void tb_bad(tb *t, const char *reason) {
  tb_done(t);
  expect_proto(t->d, t->n, reason);
}

static void test_malformed(void **state) {
  (void)state;
  tb t;

  /* the hand-built baseline is accepted (so the failures below are real) */
  tb_start(&t, FT_MSG_STEP, 3);
  tb_u64(&t, 5);
  for (int i = 0; i < 5; i++)
    tb_u64(&t, dbits(1.5));
  tb_ok(&t);

  /* frame-level */
  expect_proto(NULL, 0, "shorter");
  expect_proto(t.d, 5, "shorter");
  tb_done(&t);
  expect_proto(t.d, t.n - 1, "length field"); /* frame shorter than its length */
  t.d[4] = FT_WIRE_VERSION + 1;
  expect_proto(t.d, t.n, "expected 12");
  t.d[4] = FT_WIRE_VERSION;
  for (unsigned ty = 0; ty < 256; ty++) {
    if (ty >= FT_MSG_TYPE_MIN && ty <= FT_MSG_TYPE_MAX)
      continue;
    t.d[5] = (uint8_t)ty;
    expect_proto(t.d, t.n, "unknown message type");
  }

  /* trailing bytes */
  tb_start(&t, FT_MSG_COMMITTED, 3);
  tb_u64(&t, 5);
  tb_u8(&t, 0);
  tb_bad(&t, "1 trailing bytes");

  /* DUMP has no body: the header alone is whole, any byte after it is
   * trailing (a version-7 peer never sends type 16: unknown type there) */
  tb_start(&t, FT_MSG_DUMP, 3);
  tb_ok(&t);
  tb_start(&t, FT_MSG_DUMP, 0);
  tb_ok(&t);
  tb_start(&t, FT_MSG_DUMP, 3);
  tb_u8(&t, 0);
  tb_bad(&t, "DUMP: 1 trailing bytes");
  tb_start(&t, FT_MSG_DUMP, 3);
  tb_u64(&t, 5);
  tb_bad(&t, "DUMP: 8 trailing bytes");

  /* short payload */
  tb_start(&t, FT_MSG_COMMITTED, 3);
  tb_u32(&t, 5);
  tb_bad(&t, "COMMITTED.step: truncated");

  /* run id: empty, too long, NUL inside, absurd length */
  t.n = 0;
  tb_u32(&t, 0);
  tb_u8(&t, FT_WIRE_VERSION);
  tb_u8(&t, FT_MSG_COMMITTED);
  tb_str(&t, "");
  tb_u64(&t, 1);
  tb_u64(&t, 1);
  tb_bad(&t, "run: length 0 is below");
  t.n = 6;
  tb_filled(&t, FT_WIRE_MAX_RUN + 1, 'r');
  tb_u64(&t, 1);
  tb_u64(&t, 1);
  tb_bad(&t, "run: length 128 exceeds");
  t.n = 6;
  tb_filled(&t, FT_WIRE_MAX_RUN, 'r');
  tb_u64(&t, 1);
  tb_u64(&t, 1);
  tb_ok(&t);
  t.n = 6;
  tb_u32(&t, 3);
  tb_bytes(&t, "r\0n", 3);
  tb_u64(&t, 1);
  tb_u64(&t, 1);
  tb_bad(&t, "NUL byte");
  t.n = 6;
  tb_u32(&t, 0xffffffffu);
  tb_bad(&t, "run: length 4294967295 exceeds");
  t.n = 6;
  tb_u32(&t, 100); /* within the cap, beyond the frame */
  tb_bytes(&t, "abc", 3);
  tb_bad(&t, "run: truncated");

  /* generation 0 where a gang generation is required */
  tb_start(&t, FT_MSG_COMMITTED, 0);
  tb_u64(&t, 5);
  tb_bad(&t, "generation 0");
  tb_start(&t, FT_MSG_HEARTBEAT, 0);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_u8(&t, FT_PHASE_IDLE);
  tb_u64(&t, 0);
  tb_u32(&t, 0);
  tb_u8(&t, FT_WAIT_NONE);
  tb_u32(&t, 0);
  tb_ok(&t);
  /* a version-8 HEARTBEAT (no wait reason) is short now */
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_u8(&t, FT_PHASE_STORAGE_WAIT);
  tb_u64(&t, 0);
  tb_u32(&t, 0);
  tb_bad(&t, "HEARTBEAT.wait: truncated");
  /* a wait reason out of range */
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_u8(&t, FT_PHASE_STORAGE_WAIT);
  tb_u64(&t, 0);
  tb_u32(&t, 0);
  tb_u8(&t, FT_WAIT_REASON_COUNT);
  tb_u32(&t, 1);
  tb_bad(&t, "HEARTBEAT.wait");
  /* a version-6 HEARTBEAT (no progress) is short now */
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_bad(&t, "HEARTBEAT.phase: truncated");
  /* a phase out of range: hostile or from a newer worker */
  for (unsigned ph = FT_PHASE_COUNT; ph < 256; ph += 61) {
    tb_start(&t, FT_MSG_HEARTBEAT, 1);
    tb_u64(&t, 5);
    tb_u32(&t, 1);
    tb_u32(&t, 250);
    tb_u8(&t, (uint8_t)ph);
    tb_u64(&t, 7);
    tb_u32(&t, 10);
    tb_u8(&t, 0);
    tb_u32(&t, 0);
    tb_bad(&t, "HEARTBEAT.phase");
  }
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_u8(&t, FT_PHASE_COUNT - 1);
  tb_u64(&t, UINT64_MAX);
  tb_u32(&t, UINT32_MAX);
  tb_u8(&t, FT_WAIT_REASON_COUNT - 1);
  tb_u32(&t, UINT32_MAX);
  tb_ok(&t);
  /* trailing bytes after the progress */
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, 5);
  tb_u32(&t, 1);
  tb_u32(&t, 250);
  tb_u8(&t, FT_PHASE_DATA);
  tb_u64(&t, 7);
  tb_u32(&t, 10);
  tb_u8(&t, 0);
  tb_u32(&t, 0);
  tb_u8(&t, 0);
  tb_bad(&t, "trailing");

  /* steps out of range */
  tb_start(&t, FT_MSG_COMMITTED, 1);
  tb_u64(&t, (uint64_t)-1);
  tb_bad(&t, "COMMITTED.step: -1 is negative");
  tb_start(&t, FT_MSG_HEARTBEAT, 1);
  tb_u64(&t, (uint64_t)-2);
  tb_u32(&t, 1);
  tb_u32(&t, 0);
  tb_u8(&t, 0);
  tb_u64(&t, 0);
  tb_u32(&t, 0);
  tb_u8(&t, 0);
  tb_u32(&t, 0);
  tb_bad(&t, "HEARTBEAT.step: -2");
  tb_start(&t, FT_MSG_STEP, 1);
  tb_u64(&t, 0x8000000000000000ull);
  for (int i = 0; i < 5; i++)
    tb_u64(&t, 0);
  tb_bad(&t, "STEP.step");

  /* WELCOME */
  tb_start(&t, FT_MSG_WELCOME, 1);
  tb_u32(&t, 0);
  tb_bad(&t, "heartbeat_ms: 0 out of range");
  tb_start(&t, FT_MSG_WELCOME, 1);
  tb_u32(&t, FT_WIRE_MAX_HEARTBEAT_MS + 1);
  tb_bad(&t, "heartbeat_ms");

  /* HELLO / CHALLENGE short fixed fields */
  tb_start(&t, FT_MSG_HELLO, 0);
  tb_u32(&t, 1);
  tb_u32(&t, 1);
  tb_u32(&t, 1);
  tb_bytes(&t, "0123456789abcdef0123456789abcde", 31);
  tb_bad(&t, "HELLO.mac: truncated");
  tb_start(&t, FT_MSG_CHALLENGE, 0);
  tb_bytes(&t, "0123456789abcdef0123456789abcdef", 32);
  tb_ok(&t);
  tb_start(&t, FT_MSG_CHALLENGE, 0);
  tb_bytes(&t, "0123456789abcdef0123456789abcdef!", 33);
  tb_bad(&t, "trailing");

  /* ASSIGN: world, rank, restore step, rdzv, skips */
  struct {
    uint32_t rank, world;
    uint64_t restore;
    const char *why;
  } as[] = {
      {0, 0, 1, "world: 0 out of range"},
      {0, FT_WIRE_MAX_WORLD + 1, 1, "world"},
      {4, 4, 1, "rank: 4 not below world 4"},
      {0, 4, (uint64_t)-2, "restore_step: -2"},
  };
  for (size_t i = 0; i < sizeof as / sizeof as[0]; i++) {
    tb_start(&t, FT_MSG_ASSIGN, 1);
    tb_u32(&t, as[i].rank);
    tb_u32(&t, as[i].world);
    tb_u64(&t, as[i].restore);
    tb_u32(&t, 0);
    tb_u32(&t, 0);
    tb_bad(&t, as[i].why);
  }
  tb_start(&t, FT_MSG_ASSIGN, 1);
  tb_u32(&t, 0);
  tb_u32(&t, 1);
  tb_u64(&t, (uint64_t)-1);
  size_t at_rdzv = t.n;
  tb_filled(&t, FT_WIRE_MAX_RDZV + 1, 'z');
  tb_u32(&t, 0);
  tb_bad(&t, "rdzv: length 4097 exceeds");
  t.n = at_rdzv;
  tb_u32(&t, 0);
  size_t at_skips = t.n;
  tb_u32(&t, FT_WIRE_MAX_SKIPS + 1);
  tb_bad(&t, "nskips: count 1025 out of range");
  t.n = at_skips;
  tb_u32(&t, 1000); /* allowed count, no room for it */
  tb_u64(&t, 1);
  tb_u64(&t, 2);
  tb_bad(&t, "ASSIGN.skips: truncated");
  int64_t bad_ranges[][2] = {{5, 5}, {6, 5}, {-1, 3}, {INT64_MIN, 0}};
  for (size_t i = 0; i < 4; i++) {
    t.n = at_skips;
    tb_u32(&t, 2);
    tb_u64(&t, 1);
    tb_u64(&t, 2);
    tb_u64(&t, (uint64_t)bad_ranges[i][0]);
    tb_u64(&t, (uint64_t)bad_ranges[i][1]);
    tb_bad(&t, "ASSIGN.skips[1]");
  }
  t.n = at_skips;
  tb_u32(&t, 1);
  tb_u64(&t, 1);
  tb_u64(&t, 2);
  tb_ok(&t);

  /* SHARD_SAVED */
  tb_start(&t, FT_MSG_SHARD_SAVED, 1);
  tb_u64(&t, 1);
  tb_u32(&t, FT_WIRE_MAX_WORLD);
  tb_str(&t, "{}");
  tb_bad(&t, "SHARD_SAVED.rank");
  tb_start(&t, FT_MSG_SHARD_SAVED, 1);
  tb_u64(&t, 1);
  tb_u32(&t, 0);
  tb_u32(&t, FT_WIRE_MAX_MANIFEST + 1);
  tb_bad(&t, "manifest: length");
  tb_start(&t, FT_MSG_SHARD_SAVED, 1);
  tb_u64(&t, 1);
  tb_u32(&t, 0);
  tb_u32(&t, 4);
  tb_bytes(&t, "{}\0}", 4);
  tb_bad(&t, "manifest: NUL byte");

  /* FAULT / STOP enums and details */
  for (unsigned k = FT_FAULT_KIND_COUNT; k < 256; k += 41) {
    tb_start(&t, FT_MSG_FAULT, 1);
    tb_u8(&t, (uint8_t)k);
    tb_u64(&t, 1);
    tb_str(&t, "x");
    tb_bad(&t, "FAULT.kind");
  }
  tb_start(&t, FT_MSG_FAULT, 1);
  tb_u8(&t, FT_FAULT_KIND_COUNT);
  tb_u64(&t, 1);
  tb_str(&t, "x");
  tb_bad(&t, "FAULT.kind: 14 out of range");
  tb_start(&t, FT_MSG_FAULT, 1);
  tb_u8(&t, FT_FAULT_NAN);
  tb_u64(&t, (uint64_t)-2);
  tb_str(&t, "x");
  tb_bad(&t, "FAULT.step");
  tb_start(&t, FT_MSG_FAULT, 1);
  tb_u8(&t, FT_FAULT_NAN);
  tb_u64(&t, 1);
  tb_filled(&t, FT_WIRE_MAX_DETAIL + 1, 'd');
  tb_bad(&t, "FAULT.detail: length 1024 exceeds");
  tb_start(&t, FT_MSG_STOP, 1);
  tb_u8(&t, FT_STOP_REASON_COUNT);
  tb_str(&t, "x");
  tb_bad(&t, "STOP.reason: 7 out of range");
  tb_start(&t, FT_MSG_STOP, 1);
  tb_u8(&t, FT_STOP_DONE);
  tb_filled(&t, FT_WIRE_MAX_DETAIL + 1, 'd');
  tb_bad(&t, "STOP.detail");

  /* KV_SET */
  tb_start(&t, FT_MSG_KV_SET, 1);
  tb_str(&t, "");
  tb_u32(&t, 0);
  tb_bad(&t, "KV_SET.key: length 0");
  tb_start(&t, FT_MSG_KV_SET, 1);
  tb_filled(&t, FT_WIRE_MAX_KEY + 1, 'k');
  tb_u32(&t, 0);
  tb_bad(&t, "KV_SET.key: length 513 exceeds");
  tb_start(&t, FT_MSG_KV_SET, 1);
  tb_str(&t, "k");
  tb_u32(&t, FT_WIRE_MAX_VALUE + 1);
  tb_bad(&t, "KV_SET.value: length");
  tb_start(&t, FT_MSG_KV_SET, 1);
  tb_str(&t, "k");
  tb_u32(&t, 10);
  tb_bytes(&t, "abc", 3);
  tb_bad(&t, "KV_SET.value: truncated");

  /* KV_GET */
  tb_start(&t, FT_MSG_KV_GET, 1);
  tb_u32(&t, 1);
  tb_u32(&t, 1000);
  tb_u32(&t, 0);
  tb_bad(&t, "nkeys: count 0 out of range");
  tb_start(&t, FT_MSG_KV_GET, 1);
  tb_u32(&t, 1);
  tb_u32(&t, 1000);
  tb_u32(&t, FT_WIRE_MAX_KEYS + 1);
  tb_bad(&t, "nkeys: count 65");
  tb_start(&t, FT_MSG_KV_GET, 1);
  tb_u32(&t, 1);
  tb_u32(&t, 1000);
  tb_u32(&t, 3);
  tb_str(&t, "a");
  tb_str(&t, "b");
  tb_bad(&t, "KV_GET.keys[]: truncated");
  tb_start(&t, FT_MSG_KV_GET, 1);
  tb_u32(&t, 1);
  tb_u32(&t, FT_WIRE_MAX_KV_TIMEOUT_MS + 1);
  tb_u32(&t, 1);
  tb_str(&t, "a");
  tb_bad(&t, "timeout_ms");

  /* KV_VALUE */
  tb_start(&t, FT_MSG_KV_VALUE, 1);
  tb_u32(&t, 1);
  tb_u8(&t, 2);
  tb_u32(&t, 0);
  tb_bad(&t, "KV_VALUE.status: 2 out of range");
  tb_start(&t, FT_MSG_KV_VALUE, 1);
  tb_u32(&t, 1);
  tb_u8(&t, FT_KV_OK);
  tb_u32(&t, 0);
  tb_bad(&t, "KV_VALUE.nvals: 0");
  tb_start(&t, FT_MSG_KV_VALUE, 1);
  tb_u32(&t, 1);
  tb_u8(&t, FT_KV_TIMEOUT);
  tb_u32(&t, 1);
  tb_str(&t, "v");
  tb_bad(&t, "with status timeout");
  tb_start(&t, FT_MSG_KV_VALUE, 1);
  tb_u32(&t, 1);
  tb_u8(&t, FT_KV_OK);
  tb_u32(&t, FT_WIRE_MAX_KEYS + 1);
  tb_bad(&t, "nvals: count 65");
  tb_start(&t, FT_MSG_KV_VALUE, 1);
  tb_u32(&t, 1);
  tb_u8(&t, FT_KV_OK);
  tb_u32(&t, 1);
  tb_u32(&t, FT_WIRE_MAX_VALUE + 1);
  tb_bad(&t, "vals[]: length");

  /* the agent's frames (version 10) */
  tb_start(&t, FT_MSG_RELAY, 0);
  tb_u32(&t, FT_WIRE_MAX_SLOTS);
  tb_filled(&t, 8, 'x');
  tb_bad(&t, "RELAY.slot: 4096 exceeds");
  tb_start(&t, FT_MSG_RELAY, 0);
  tb_u32(&t, 1);
  tb_filled(&t, FT_WIRE_HDR_LEN - 1, 'x'); /* shorter than any frame */
  tb_bad(&t, "RELAY.frame: length 5 is below");
  tb_start(&t, FT_MSG_HOSTBEAT, 0);
  tb_u32(&t, 1);
  tb_u32(&t, 0);
  tb_u32(&t, FT_WIRE_MAX_SLOTS + 1);
  tb_bad(&t, "HOSTBEAT.nbeats: count 4097");
  tb_start(&t, FT_MSG_HOSTBEAT, 0);
  tb_u32(&t, 1);
  tb_u32(&t, 0);
  tb_u32(&t, 2); /* two beats claimed, bytes for none */
  tb_bad(&t, "HOSTBEAT.beats: truncated: 2 beats");
  tb_start(&t, FT_MSG_HOSTBEAT, 0);
  tb_u32(&t, 1);
  tb_u32(&t, 0);
  tb_u32(&t, 1);
  tb_u32(&t, 0);             /* slot */
  tb_u64(&t, 3);             /* gen */
  tb_u32(&t, 5);             /* age_ms */
  tb_u64(&t, 10);            /* step */
  tb_u32(&t, 1);             /* seq */
  tb_u8(&t, FT_PHASE_COUNT); /* phase: out of range */
  tb_u64(&t, 0);             /* coll_seq */
  tb_u32(&t, 0);             /* prog_age_ms */
  tb_u8(&t, 0);              /* wait */
  tb_u32(&t, 0);             /* wait_attempt */
  tb_bad(&t, "HOSTBEAT.beats[0].phase: 13 out of range");
  tb_start(&t, FT_MSG_SLOT, 0);
  tb_u32(&t, 2);
  tb_u8(&t, FT_SLOT_EVENT_COUNT); /* 5 */
  tb_u32(&t, 0);
  tb_u32(&t, 0);
  tb_bad(&t, "SLOT.event: 5 out of range");
  /* the agent itself (FT_WIRE_AGENT_SLOT) may be signalled, not started */
  tb_start(&t, FT_MSG_SLOT, 0);
  tb_u32(&t, FT_WIRE_AGENT_SLOT);
  tb_u8(&t, FT_SLOT_SIGNAL);
  tb_u32(&t, 9);
  tb_u32(&t, 0);
  tb_ok(&t);
  tb_start(&t, FT_MSG_SLOT, 0);
  tb_u32(&t, FT_WIRE_AGENT_SLOT);
  tb_u8(&t, FT_SLOT_START);
  tb_u32(&t, 0);
  tb_u32(&t, 0);
  tb_bad(&t, "SLOT.slot: 4294967295 exceeds 4095");
}

/* Every proper prefix of every valid frame, with the length field made to
 * match, is a short payload. */
static void test_every_truncation(void **state) {
  (void)state;
  for (int ty = FT_MSG_TYPE_MIN; ty <= FT_MSG_TYPE_MAX; ty++) {
    ft_msg m;
    ft_buf b;
    ft_buf_init(&b);
    make_msg(ty, &m);
    enc(&m, &b);
    for (size_t n = 0; n < b.len; n++) {
      uint8_t *c = malloc(n ? n : 1);
      memcpy(c, b.data, n);
      if (n >= 4) {
        uint32_t l = (uint32_t)(n - 4);
        c[0] = (uint8_t)(l >> 24);
        c[1] = (uint8_t)(l >> 16);
        c[2] = (uint8_t)(l >> 8);
        c[3] = (uint8_t)l;
      }
      ft_msg out;
      int rc = ft_wire_decode(c, n, &out);
      if (rc != FT_EPROTO)
        fail_msg("%s truncated to %zu bytes: rc %d", ft_msg_type_name(ty), n, rc);
      free(c);
    }
    ft_buf_release(&b);
  }
}

static void test_encode_rejects(void **state) {
  (void)state;
  ft_msg m;
  ft_buf b;
  ft_buf_init(&b);
  char *long_run = filled(FT_WIRE_MAX_DETAIL + 1, 'x');

  make_msg(FT_MSG_STEP, &m);
  m.gen = 0;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "generation 0"));
  make_msg(FT_MSG_STEP, &m);
  m.run[0] = 0;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "run: must not be empty"));
  make_msg(FT_MSG_FAULT, &m);
  m.fault.kind = (ft_fault_kind)FT_FAULT_KIND_COUNT;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_FAULT, &m);
  m.fault.detail = long_run;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "FAULT.detail"));
  make_msg(FT_MSG_STOP, &m);
  m.stop.reason = (ft_stop_reason)99;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_HEARTBEAT, &m);
  m.heartbeat.phase = (ft_phase)FT_PHASE_COUNT;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "HEARTBEAT.phase"));
  make_msg(FT_MSG_HEARTBEAT, &m);
  m.heartbeat.wait = (ft_wait_reason)FT_WAIT_REASON_COUNT;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_non_null(strstr(ft_err_detail(), "HEARTBEAT.wait"));
  make_msg(FT_MSG_ASSIGN, &m);
  m.assign.rank = m.assign.world;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_ASSIGN, &m);
  m.assign.skips = NULL;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_ASSIGN, &m);
  m.assign.rdzv = NULL;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_KV_GET, &m);
  m.kv_get.nkeys = 0;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_KV_GET, &m);
  m.kv_get.keys = NULL;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_KV_SET, &m);
  m.kv_set.key = "";
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_KV_VALUE, &m);
  m.kv_value.status = FT_KV_TIMEOUT;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  make_msg(FT_MSG_STEP, &m);
  m.type = (ft_msg_type)77;
  assert_int_equal(ft_wire_encode(&m, &b), FT_EINVAL);
  assert_int_equal(b.len, 0); /* nothing was appended by any failure */
  free(long_run);
  ft_buf_release(&b);
}

/* ---- random mutations ------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) {
  /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static void test_mutations(void **state) {
  (void)state;
  const char *seed_env = getenv("FT_WIRE_SEED");
  const char *iters_env = getenv("FT_WIRE_ITERS");
  rng_state = seed_env ? strtoull(seed_env, NULL, 0) : 0x5eed1234abcdull;
  if (!rng_state)
    rng_state = 1;
  long iters = iters_env ? atol(iters_env) : 50000;
  print_message("mutation seed 0x%llx, %ld iterations\n", (unsigned long long)rng_state, iters);

  ft_buf corpus[FT_MSG_TYPE_MAX + 1];
  for (int ty = FT_MSG_TYPE_MIN; ty <= FT_MSG_TYPE_MAX; ty++) {
    ft_msg m;
    ft_buf_init(&corpus[ty]);
    make_msg(ty, &m);
    enc(&m, &corpus[ty]);
  }
  /* FT_WIRE_CORPUS_DIR=<dir>: also write the valid frames there (fuzzer seeds) */
  const char *corpus_dir = getenv("FT_WIRE_CORPUS_DIR");
  for (int ty = FT_MSG_TYPE_MIN; corpus_dir && ty <= FT_MSG_TYPE_MAX; ty++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", corpus_dir, ft_msg_type_name(ty));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(corpus[ty].data, 1, corpus[ty].len, f), corpus[ty].len);
    assert_int_equal(fclose(f), 0);
  }
  static const uint32_t interesting[] = {0,          1,          2,          0x7f,       0x80,
                                         0xff,       0x100,      0x7fffffff, 0x80000000, 0xffffffff,
                                         0xfffffffe, 0x01000000, 64,         65,         1024};
  long accepted = 0, rejected = 0;
  uint8_t *w = malloc(4096);
  assert_non_null(w);
  for (long it = 0; it < iters; it++) {
    const ft_buf *src = &corpus[FT_MSG_TYPE_MIN + rnd() % FT_MSG_TYPE_MAX];
    size_t n = src->len;
    memcpy(w, src->data, n);
    int nmut = 1 + (int)(rnd() % 4);
    int fix_len = rnd() % 4 != 0; /* usually keep the length field consistent */
    for (int k = 0; k < nmut; k++) {
      switch (rnd() % 7) {
      case 0: /* bit flip */
      case 1:
        w[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 2: /* random byte */
        w[rnd() % n] = (uint8_t)rnd();
        break;
      case 3: /* truncate */
        n = rnd() % (n + 1);
        break;
      case 4: /* append junk */
        for (int j = (int)(rnd() % 9); j > 0 && n < 4000; j--)
          w[n++] = (uint8_t)rnd();
        break;
      case 5: /* an interesting u32 at a random offset (lengths and counts) */
        if (n >= 4) {
          uint32_t v = interesting[rnd() % (sizeof interesting / sizeof interesting[0])];
          size_t off = rnd() % (n - 3);
          w[off] = (uint8_t)(v >> 24);
          w[off + 1] = (uint8_t)(v >> 16);
          w[off + 2] = (uint8_t)(v >> 8);
          w[off + 3] = (uint8_t)v;
        }
        break;
      case 6: /* corrupt the length field itself */
        if (n >= 4) {
          w[rnd() % 4] = (uint8_t)rnd();
          fix_len = 0;
        }
        break;
      }
      if (n == 0)
        break;
    }
    if (fix_len && n >= 4) {
      uint32_t l = (uint32_t)(n - 4);
      w[0] = (uint8_t)(l >> 24);
      w[1] = (uint8_t)(l >> 16);
      w[2] = (uint8_t)(l >> 8);
      w[3] = (uint8_t)l;
    }
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, w, n);
    size_t fl = 0;
    int frc = ft_wire_frame_len(c, n, &fl);
    assert_true(frc == 0 || frc == 1 || frc == FT_EPROTO);
    if (frc == 1)
      assert_true(fl <= n);
    ft_msg m;
    int rc = ft_wire_decode(c, n, &m);
    if (rc == 0) {
      /* accepted: well formed by definition, so it re-encodes to the same bytes
       * and frame_len agrees it is one whole frame */
      accepted++;
      assert_int_equal(frc, 1);
      assert_int_equal(fl, n);
      ft_buf b;
      ft_buf_init(&b);
      assert_int_equal(ft_wire_encode(&m, &b), 0);
      assert_int_equal(b.len, n);
      assert_memory_equal(b.data, c, n);
      ft_buf_release(&b);
      ft_msg_release(&m);
    } else {
      assert_int_equal(rc, FT_EPROTO);
      assert_true(ft_err_detail()[0] != 0);
      rejected++;
    }
    free(c);
  }
  print_message("accepted %ld, rejected %ld\n", accepted, rejected);
  /* the mutator must exercise both paths, or this test proves nothing */
  assert_true(accepted > iters / 100);
  assert_true(rejected > iters / 10);
  free(w);
  for (int ty = FT_MSG_TYPE_MIN; ty <= FT_MSG_TYPE_MAX; ty++)
    ft_buf_release(&corpus[ty]);
}

/* ---- authentication ------------------------------------------------------------ */

/* An independent HMAC of the input documented in ft_wire.h. */
static void reference_mac(const char *token_hex, const uint8_t nonce[32], const char *run,
                          uint64_t gen, uint32_t node, uint32_t slot, uint32_t pid,
                          uint8_t out[32]) {
  uint8_t key[32];
  for (int i = 0; i < 32; i++) {
    unsigned v;
    sscanf(token_hex + 2 * i, "%2x", &v);
    key[i] = (uint8_t)v;
  }
  tb t;
  t.n = 0;
  tb_bytes(&t, "ftsup-hello-v1", 15); /* label and its NUL */
  tb_u32(&t, 32);
  tb_bytes(&t, nonce, 32);
  tb_str(&t, run);
  tb_u64(&t, gen);
  tb_u32(&t, node);
  tb_u32(&t, slot);
  tb_u32(&t, pid);
  unsigned len = 0;
  assert_non_null(HMAC(EVP_sha256(), key, 32, t.d, t.n, out, &len));
  assert_int_equal(len, 32);
}

static void test_hmac(void **state) {
  (void)state;
  char token[65], other[65];
  assert_int_equal(ft_wire_token_new(token), 0);
  assert_int_equal(ft_wire_token_new(other), 0);
  assert_int_equal(strlen(token), 64);
  assert_int_equal(strspn(token, "0123456789abcdef"), 64);
  assert_string_not_equal(token, other);
  assert_int_equal(ft_wire_token_check(token), 0);

  uint8_t nonce[32], nonce2[32];
  assert_int_equal(ft_wire_nonce_new(nonce), 0);
  assert_int_equal(ft_wire_nonce_new(nonce2), 0);
  assert_memory_not_equal(nonce, nonce2, 32);

  /* the worker signs, the frame crosses the wire, the supervisor verifies */
  ft_msg h;
  ft_msg_init(&h, FT_MSG_HELLO);
  strcpy(h.run, "gpt2-124m");
  h.gen = 4;
  h.hello.node = 2;
  h.hello.slot = 3;
  h.hello.pid = 31337;
  assert_int_equal(ft_wire_hello_sign(&h, token, nonce), 0);
  uint8_t ref[32];
  reference_mac(token, nonce, "gpt2-124m", 4, 2, 3, 31337, ref);
  assert_memory_equal(h.hello.mac, ref, 32);

  ft_msg got;
  roundtrip(&h, &got);
  assert_int_equal(ft_wire_hello_verify(&got, token, nonce), 0);

  /* wrong token, wrong nonce */
  assert_int_equal(ft_wire_hello_verify(&got, other, nonce), FT_EPROTO);
  assert_non_null(strstr(ft_err_detail(), "MAC mismatch"));
  assert_null(strstr(ft_err_detail(), token)); /* the token never reaches a log */
  assert_int_equal(ft_wire_hello_verify(&got, token, nonce2), FT_EPROTO);
  /* same HELLO replayed with a different run or identity */
  ft_msg x = got;
  strcpy(x.run, "other-run");
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  x = got;
  x.gen = 5;
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  x = got;
  x.hello.node = 9;
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  x = got;
  x.hello.slot = 0;
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  x = got;
  x.hello.pid = 1;
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  x = got;
  x.hello.mac[31] ^= 1;
  assert_int_equal(ft_wire_hello_verify(&x, token, nonce), FT_EPROTO);
  /* the token's hex case doesn't matter (same key) */
  char upper[65];
  for (int i = 0; i < 65; i++)
    upper[i] = (char)(token[i] >= 'a' && token[i] <= 'f' ? token[i] - 32 : token[i]);
  assert_int_equal(ft_wire_hello_verify(&got, upper, nonce), 0);
  ft_msg_release(&got);

  /* malformed tokens and arguments */
  char bad[66];
  strcpy(bad, token);
  bad[10] = 'g';
  assert_int_equal(ft_wire_token_check(bad), FT_EINVAL);
  assert_int_equal(ft_wire_hello_verify(&h, bad, nonce), FT_EINVAL);
  assert_int_equal(ft_wire_token_check(""), FT_EINVAL);
  assert_int_equal(ft_wire_token_check(NULL), FT_EINVAL);
  strcpy(bad, token);
  bad[63] = 0;
  assert_int_equal(ft_wire_token_check(bad), FT_EINVAL);
  strcpy(bad, token);
  strcat(bad, "a");
  assert_int_equal(ft_wire_token_check(bad), FT_EINVAL);
  uint8_t mac[32];
  assert_int_equal(ft_wire_hmac(token, nonce, 0, "r", 0, 0, 0, 0, mac), FT_EINVAL);
  assert_int_equal(ft_wire_hmac(token, nonce, 65, "r", 0, 0, 0, 0, mac), FT_EINVAL);
  assert_int_equal(ft_wire_hmac(token, nonce, 32, "", 0, 0, 0, 0, mac), FT_EINVAL);
  /* another protocol's MAC (the replica channel): never HELLO's label,
   * and not HELLO's MAC for the same nonce and run */
  assert_int_equal(ft_wire_hmac_label(token, "ftsup-hello-v1", nonce, 32, "gpt2-124m", mac),
                   FT_EINVAL);
  assert_int_equal(ft_wire_hmac_label(token, "ftsup-replica-v1", nonce, 32, "gpt2-124m", mac), 0);
  assert_memory_not_equal(mac, ref, 32);
  uint8_t mac2[32];
  assert_int_equal(ft_wire_hmac_label(other, "ftsup-replica-v1", nonce, 32, "gpt2-124m", mac2), 0);
  assert_memory_not_equal(mac, mac2, 32);
  ft_msg noth;
  make_msg(FT_MSG_STEP, &noth);
  assert_int_equal(ft_wire_hello_sign(&noth, token, nonce), FT_EINVAL);
  assert_int_equal(ft_wire_hello_verify(&noth, token, nonce), FT_EINVAL);

  /* constant-time compare */
  assert_int_equal(ft_wire_mac_equal(ref, ref), 1);
  memcpy(mac, ref, 32);
  mac[0] ^= 0x80;
  assert_int_equal(ft_wire_mac_equal(ref, mac), 0);
}

/* ---- generation fencing ------------------------------------------------------------ */

static void test_check_gen(void **state) {
  (void)state;
  ft_msg m;
  /* fenced types: older stale, equal fine, newer a protocol error */
  int fenced[] = {FT_MSG_STEP,      FT_MSG_SHARD_SAVED, FT_MSG_COMMITTED,
                  FT_MSG_KV_SET,    FT_MSG_KV_GET,      FT_MSG_KV_VALUE,
                  FT_MSG_HEARTBEAT, FT_MSG_FAULT,       FT_MSG_HELLO};
  for (size_t i = 0; i < sizeof fenced / sizeof fenced[0]; i++) {
    make_msg(fenced[i], &m);
    m.gen = 5;
    assert_int_equal(ft_wire_check_gen(&m, 5), 0);
    assert_int_equal(ft_wire_check_gen(&m, 6), 1);
    assert_int_equal(ft_wire_check_gen(&m, UINT64_MAX), 1);
    assert_int_equal(ft_wire_check_gen(&m, 4), FT_EPROTO);
    assert_non_null(strstr(ft_err_detail(), "future"));
    m.gen = UINT64_MAX;
    assert_int_equal(ft_wire_check_gen(&m, UINT64_MAX), 0);
    assert_int_equal(ft_wire_check_gen(&m, 0), FT_EPROTO);
  }
  /* gen 0 = not in a gang: fine for an idle worker's heartbeat/hello/fault */
  int idle_ok[] = {FT_MSG_HEARTBEAT, FT_MSG_FAULT, FT_MSG_HELLO, FT_MSG_DUMP};
  for (size_t i = 0; i < 4; i++) {
    make_msg(idle_ok[i], &m);
    m.gen = 0;
    assert_int_equal(ft_wire_check_gen(&m, 9), 0);
  }
  /* ...but a STEP can't come from outside a gang */
  make_msg(FT_MSG_STEP, &m);
  m.gen = 0;
  assert_int_equal(ft_wire_check_gen(&m, 9), 1);
  /* messages that announce or set the generation are not fenced */
  int unfenced[] = {FT_MSG_CHALLENGE, FT_MSG_WELCOME, FT_MSG_ASSIGN, FT_MSG_STOP};
  for (size_t i = 0; i < 4; i++) {
    make_msg(unfenced[i], &m);
    m.gen = 100;
    assert_int_equal(ft_wire_check_gen(&m, 3), 0);
    m.gen = 1;
    assert_int_equal(ft_wire_check_gen(&m, 3), 0);
  }
}

/* ---- names and small pieces --------------------------------------------------------- */

static void test_names(void **state) {
  (void)state;
  assert_string_equal(ft_msg_type_name(FT_MSG_HELLO), "HELLO");
  assert_string_equal(ft_msg_type_name(FT_MSG_KV_VALUE), "KV_VALUE");
  assert_string_equal(ft_msg_type_name(0), "?");
  assert_string_equal(ft_msg_type_name(FT_MSG_DOCTOR), "DOCTOR");
  assert_string_equal(ft_msg_type_name(16), "DUMP");
  assert_string_equal(ft_msg_type_name(17), "RELAY");
  assert_string_equal(ft_msg_type_name(19), "SLOT");
  assert_string_equal(ft_msg_type_name(20), "?");
  /* only an agent (or the supervisor) speaks the agent's types */
  assert_int_equal(ft_wire_sender(FT_MSG_RELAY), FT_WIRE_FROM_SUPERVISOR | FT_WIRE_FROM_AGENT);
  assert_int_equal(ft_wire_sender(FT_MSG_HOSTBEAT) & FT_WIRE_FROM_WORKER, 0);
  assert_string_equal(ft_slot_event_name(FT_SLOT_EXITED), "exited");
  assert_string_equal(ft_slot_event_name(FT_SLOT_SIGNAL), "signal");
  assert_string_equal(ft_slot_event_name(FT_SLOT_EVENT_COUNT), "?");
  for (int t = FT_MSG_TYPE_MIN; t <= FT_MSG_TYPE_MAX; t++) {
    assert_string_not_equal(ft_msg_type_name(t), "?");
    assert_true(ft_wire_sender(t) != 0);
  }
  assert_int_equal(ft_wire_sender(FT_MSG_HELLO), FT_WIRE_FROM_WORKER);
  assert_int_equal(ft_wire_sender(FT_MSG_ASSIGN), FT_WIRE_FROM_SUPERVISOR);
  /* a worker never sends DUMP: the supervisor refuses it (sup_conn.c), as
   * it refuses STOP and COMMITTED from a worker */
  assert_int_equal(ft_wire_sender(FT_MSG_DUMP), FT_WIRE_FROM_SUPERVISOR);
  assert_int_equal(ft_wire_sender(FT_MSG_STOP), FT_WIRE_FROM_SUPERVISOR);
  assert_int_equal(ft_wire_sender(99), 0);
  const char *kinds[] = {"process_exit", "hang",           "collective_timeout",
                         "xid",          "loss_spike",     "nan",
                         "oom",          "straggler",      "other",
                         "storage",      "config",         "data",
                         "sdc",          "restore_corrupt"};
  assert_int_equal(sizeof kinds / sizeof kinds[0], FT_FAULT_KIND_COUNT);
  for (int k = 0; k < FT_FAULT_KIND_COUNT; k++) {
    assert_string_equal(ft_fault_kind_name(k), kinds[k]);
    ft_fault_kind out;
    assert_int_equal(ft_fault_kind_from_name(kinds[k], &out), 0);
    assert_int_equal(out, k);
  }
  ft_fault_kind out;
  assert_int_equal(ft_fault_kind_from_name("meteor", &out), FT_EINVAL);
  assert_string_equal(ft_fault_kind_name(FT_FAULT_KIND_COUNT), "?");
  assert_string_equal(ft_fault_kind_name(-1), "?");
  assert_string_equal(ft_stop_reason_name(FT_STOP_STALE_GENERATION), "stale_generation");
  assert_string_equal(ft_stop_reason_name(FT_STOP_REASON_COUNT), "?");
  assert_string_equal(ft_kv_status_name(FT_KV_TIMEOUT), "timeout");
  assert_string_equal(ft_kv_status_name(7), "?");
  const char *phases[] = {"idle",        "data",          "forward",  "backward",
                          "collective",  "optimizer",     "snapshot", "checkpoint_write",
                          "validation",  "sdc_recompute", "restore",  "rendezvous",
                          "storage_wait"};
  assert_int_equal(sizeof phases / sizeof phases[0], FT_PHASE_COUNT);
  for (int k = 0; k < FT_PHASE_COUNT; k++) {
    assert_string_equal(ft_phase_name(k), phases[k]);
    ft_phase ph;
    assert_int_equal(ft_phase_from_name(phases[k], &ph), 0);
    assert_int_equal(ph, k);
  }
  ft_phase ph;
  assert_int_equal(ft_phase_from_name("nap", &ph), FT_EINVAL);
  assert_string_equal(ft_phase_name(FT_PHASE_COUNT), "?");
  assert_string_equal(ft_phase_name(-1), "?");
  const char *waits[] = {"none",    "slowdown", "throttled", "server_error",
                         "timeout", "refused",  "network",   "other"};
  assert_int_equal(sizeof waits / sizeof waits[0], FT_WAIT_REASON_COUNT);
  for (int k = 0; k < FT_WAIT_REASON_COUNT; k++)
    assert_string_equal(ft_wait_reason_name(k), waits[k]);
  assert_string_equal(ft_wait_reason_name(FT_WAIT_REASON_COUNT), "?");
  /* the worker's exit codes: the numbers are a contract (worker --help,
   * scripts, the supervisor's blame rules) and never change */
  assert_int_equal(FT_EXIT_OK, 0);
  assert_int_equal(FT_EXIT_FAIL, 1);
  assert_int_equal(FT_EXIT_USAGE, 2);
  assert_int_equal(FT_EXIT_DATA, 3);
  assert_int_equal(FT_EXIT_STORE, 4);
  assert_int_equal(FT_EXIT_GANG, 5);
  assert_int_equal(FT_EXIT_LOST, 6);
  assert_string_equal(ft_exit_code_name(FT_EXIT_GANG), "gang");
  assert_string_equal(ft_exit_code_name(FT_EXIT_STORE), "store");
  assert_string_equal(ft_exit_code_name(7), "?");
  /* heartbeats: four per timeout */
  assert_true(ft_wire_heartbeat_interval_s(10.0) == 2.5);
  assert_true(ft_wire_heartbeat_interval_s(3.0) == 0.75);

  ft_buf b;
  ft_buf_init(&b);
  assert_int_equal(ft_buf_append(&b, "hello world", 11), 0);
  ft_buf_consume(&b, 6);
  assert_int_equal(b.len, 5);
  assert_memory_equal(b.data, "world", 5);
  ft_buf_consume(&b, 100);
  assert_int_equal(b.len, 0);
  ft_buf_release(&b);
  ft_buf_release(&b); /* releasing twice is harmless */
  ft_buf_release(NULL);
  ft_msg_release(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_every_type),
      cmocka_unit_test(test_roundtrip_extremes),
      cmocka_unit_test(test_frame_len_partial),
      cmocka_unit_test(test_frame_len_bad),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_every_truncation),
      cmocka_unit_test(test_encode_rejects),
      cmocka_unit_test(test_mutations),
      cmocka_unit_test(test_hmac),
      cmocka_unit_test(test_check_gen),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
