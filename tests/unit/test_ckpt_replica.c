/*
 * test_ckpt_replica: a shard's chunks pushed into another process's memory
 * (ckpt_replica.h), over real TCP on loopback. The receiving store handle
 * then reads the checkpoint with every chunk file on disk damaged: all of
 * it comes from memory. A second push sends nothing (the buddy has every
 * chunk). A wrong run token is refused; a peer that sends bytes that do
 * not hash to their name gets 'X' and nothing is kept; a chunk over the
 * limit gets 'R'; a stop with a silent peer connected returns. A third
 * handle restores through the buddy (ckpt_store_set_remote), a damaged
 * chunk on the way (failpoint corrupt_replica_chunk) read from the store.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ckpt_replica.h"
#include "ft_net.h"
#include "ft_wire.h"
#include "test_ckpt_util.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define N ((size_t)(3u << 20) / 4 + 777) /* ~3 MiB of f32: 4 chunks of 1 MiB */
#define TOKEN "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define OTHER "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

/* A raw client of the replica server at addr, past the MAC (good: with
 * the right token); returns the socket. */
static int raw_client(const char *addr, int good) {
  ft_hostport hp;
  ft_sockaddr a;
  assert_int_equal(ft_net_parse(addr, &hp), FT_OK);
  assert_int_equal(ft_net_resolve(hp.host, hp.port, 0, &a), FT_OK);
  int fd = socket(a.ss.ss_family, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&a.ss, a.len), 0);
  uint8_t hello[8 + FT_WIRE_NONCE_LEN], mac[FT_WIRE_MAC_LEN];
  assert_int_equal(recv(fd, hello, sizeof hello, MSG_WAITALL), (ssize_t)sizeof hello);
  assert_memory_equal(hello, "FTREPL01", 8);
  assert_int_equal(ft_wire_hmac_label(good ? TOKEN : OTHER, "ftsup-replica-v1", hello + 8,
                                      FT_WIRE_NONCE_LEN, "rep", mac),
                   FT_OK);
  assert_int_equal(send(fd, mac, sizeof mac, 0), (ssize_t)sizeof mac);
  return fd;
}

static const char *fetch_addr;

static int fetch_from(void *ud, const uint8_t *hash, uint64_t len, void *buf) {
  (void)ud;
  return ckpt_replica_fetch(fetch_addr, TOKEN, "rep", hash, len, buf) == FT_OK;
}

static char answer(int fd) {
  char c = 0;
  if (recv(fd, &c, 1, MSG_WAITALL) != 1)
    return 0;
  return c;
}

static void test_push_and_read_from_memory(void **st) {
  (void)st;
  char *dir, *uri;
  ckpt_store *a = NULL;
  ckpt_store_opts o = {.chunk_mib = 1, .threads = 2};
  assert_int_equal(tu_store_open(&dir, &uri, &a, &o), FT_OK);
  assert_int_equal(ckpt_store_keep_in_memory(a, 8u << 20), FT_OK);
  float *v = malloc(N * 4), *out = malloc(N * 4);
  tu_fill(v, N, 77);
  ckpt_part p = tu_part("param/big", v, N, 0, N);
  ckpt_job *j = NULL;
  ckpt_shard *sh = NULL;
  assert_int_equal(ckpt_store_submit(a, "rep", 5, 0, 1, &p, 1, &j), FT_OK);
  assert_int_equal(ckpt_job_wait(j, &sh), FT_OK);
  ckpt_job_free(j);
  ckpt_meta m = {.run = "rep", .step = 5, .parent_step = -1, .world = 1, .loss = 1.0};
  assert_int_equal(ckpt_store_commit(a, &m, &sh, 1), FT_OK);

  /* the buddy: another handle on the store, with nothing in memory yet */
  ckpt_store *b = NULL;
  ckpt_store_opts ro = {.read_only = 1};
  assert_int_equal(ckpt_store_open(uri, &ro, &b), FT_OK);
  ckpt_replica *r = NULL;
  assert_int_equal(ckpt_replica_serve(b, "127.0.0.1", TOKEN, "rep", &r), FT_EINVAL);
  assert_int_equal(ckpt_store_keep_in_memory(b, 8u << 20), FT_OK);
  assert_int_equal(ckpt_replica_serve(b, "127.0.0.1", TOKEN, "rep", &r), FT_OK);
  const char *addr = ckpt_replica_addr(r);
  assert_true(strncmp(addr, "127.0.0.1:", 10) == 0);

  /* a wrong token: refused, nothing kept */
  ckpt_push_stats ps = {0};
  assert_int_equal(ckpt_replica_push(a, sh, addr, OTHER, "rep", NULL, &ps), FT_EPROTO);
  assert_int_equal(ps.chunks_sent, 0);
  ckpt_replica_stats rs;
  ckpt_replica_stats_get(r, &rs);
  assert_int_equal(rs.conns_refused, 1);
  assert_int_equal(rs.chunks_kept, 0);

  /* the push: every chunk, then none again */
  assert_int_equal(ckpt_replica_push(a, sh, addr, TOKEN, "rep", NULL, &ps), FT_OK);
  assert_int_equal(ps.chunks_sent, 4);
  assert_int_equal(ps.bytes_sent, N * 4);
  assert_int_equal(ps.chunks_absent, 0);
  memset(&ps, 0, sizeof ps);
  assert_int_equal(ckpt_replica_push(a, sh, addr, TOKEN, "rep", NULL, &ps), FT_OK);
  assert_int_equal(ps.chunks_sent, 0);
  assert_int_equal(ps.chunks_had, 4);

  /* a third process restores through the buddy (the store's remote
   * source): the first chunk served arrives damaged (failpoint
   * corrupt_replica_chunk=1), fails its hash and is read from the store */
  ckpt_store *c = NULL;
  assert_int_equal(ckpt_store_open(uri, &ro, &c), FT_OK);
  assert_int_equal(ckpt_store_keep_in_memory(c, 8u << 20), FT_OK);
  fetch_addr = addr;
  ckpt_store_set_remote(c, fetch_from, NULL);
  ckpt_manifest *mc = NULL;
  assert_int_equal(ckpt_store_load(c, "rep", 5, &mc), FT_OK);
  assert_int_equal(ckpt_store_read(c, mc, "param/big", 0, N * 4, out), FT_OK);
  assert_memory_equal(out, v, N * 4);
  ckpt_read_stats rc3;
  ckpt_store_read_stats(c, &rc3);
  assert_int_equal(rc3.remote_rejected, 1);
  assert_int_equal(rc3.remote_bytes + rc3.store_bytes, N * 4);
  assert_true(rc3.store_bytes >= (1u << 20) && rc3.store_bytes < N * 4);
  assert_int_equal(rc3.memory_bytes, 0);
  uint8_t h0[CKPT_HASH_LEN];
  memset(h0, 0x5a, sizeof h0);
  assert_int_equal(ckpt_replica_fetch(addr, TOKEN, "rep", h0, 16, out), FT_ENOENT);
  assert_int_equal(ckpt_replica_fetch(addr, OTHER, "rep", h0, 16, out), FT_EPROTO);
  ckpt_manifest_free(mc);
  ckpt_store_free(c);

  /* every chunk file damaged: the buddy reads it all from its memory */
  ckpt_manifest *mf = NULL;
  assert_int_equal(ckpt_store_load(b, "rep", 5, &mf), FT_OK);
  const ckpt_tensor *t = &mf->tensors[ckpt_manifest_find(mf, "param/big")];
  for (int c = 0; c < t->nchunks; c++)
    assert_int_equal(tu_damage_chunk(dir, t, c), 0);
  ckpt_read_stats rd;
  assert_int_equal(ckpt_store_read(b, mf, "param/big", 0, N * 4, out), FT_OK);
  assert_memory_equal(out, v, N * 4);
  ckpt_store_read_stats(b, &rd);
  assert_int_equal(rd.memory_bytes, N * 4);
  assert_int_equal(rd.store_bytes, 0);

  /* a hostile peer: bytes that are not what they claim, and a huge chunk */
  int fd = raw_client(addr, 1);
  assert_int_equal(answer(fd), 'K');
  uint8_t hdr[1 + CKPT_HASH_LEN + 8] = {'P'}, junk[16] = {1, 2, 3};
  memset(hdr + 1, 0xab, CKPT_HASH_LEN);
  hdr[CKPT_HASH_LEN + 8] = sizeof junk;
  assert_int_equal(send(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  assert_int_equal(answer(fd), 'W');
  assert_int_equal(send(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
  assert_int_equal(answer(fd), 'X');
  hdr[0] = 'G'; /* and it was not kept */
  assert_int_equal(send(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  assert_int_equal(answer(fd), 'N');
  hdr[0] = 'P';
  memset(hdr + 1 + CKPT_HASH_LEN, 0x7f, 8);
  assert_int_equal(send(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  assert_int_equal(answer(fd), 'R');
  assert_int_equal(answer(fd), 0); /* and closed */
  close(fd);
  fd = raw_client(addr, 1); /* an unknown request: closed */
  assert_int_equal(answer(fd), 'K');
  assert_int_equal(send(fd, "Z", 1, 0), 1);
  assert_int_equal(answer(fd), 0);
  close(fd);
  ckpt_replica_stats_get(r, &rs);
  assert_int_equal(rs.chunks_rejected, 1);
  assert_int_equal(rs.chunks_kept, 4);
  assert_int_equal(rs.chunks_had, 4);

  /* a silent peer past its MAC, and one that never sends it: the stop
   * still returns */
  int quiet = raw_client(addr, 1), mute = -1;
  {
    ft_hostport hp;
    ft_sockaddr sa;
    assert_int_equal(ft_net_parse(addr, &hp), FT_OK);
    assert_int_equal(ft_net_resolve(hp.host, hp.port, 0, &sa), FT_OK);
    mute = socket(sa.ss.ss_family, SOCK_STREAM, 0);
    assert_int_equal(connect(mute, (struct sockaddr *)&sa.ss, sa.len), 0);
  }
  assert_int_equal(answer(quiet), 'K');
  ckpt_replica_stop(r);
  close(quiet);
  close(mute);

  ckpt_manifest_free(mf);
  ckpt_shard_free(sh);
  ckpt_store_free(b);
  free(v);
  free(out);
  tu_store_close(dir, uri, a);
}

int main(void) {
  setenv("FT_FAILPOINTS", "corrupt_replica_chunk=1", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_push_and_read_from_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
