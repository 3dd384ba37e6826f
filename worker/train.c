/*
 * train: the training loop (see train.h), one code path for a standalone
 * process (world 1, or --world W over a rendezvous folder) and a gang's
 * worker under the supervisor (ctl: ASSIGN decides rank, world, restore
 * step and skipped batches; STEP, SHARD_SAVED and FAULT go back). The model
 * runs on an engine (engine.h: cpu = gpt2 + FSDP over Gloo, cuda = bf16
 * FSDP over NCCL).
 *
 * Exits (FT_EXIT_*, common/ft_wire.h): a collective's failure is the peer's
 * (FT_EXIT_GANG, FAULT collective_timeout/other); a configuration or data
 * error is reported as FAULT config/data before FT_EXIT_USAGE/FT_EXIT_DATA;
 * in a gang a checkpoint the store refuses is FAULT storage and skipped
 * (training goes on), the final one is retried, then FT_EXIT_STORE.
 *
 * Gloo binds an address of this host (gloo_addr): FT_IFACE > nodes.iface >
 * the control connection's local address (the route to the supervisor, so
 * peers on other hosts can reach it) > loopback for --world runs alone.
 *
 * One optimizer step s (0-based) takes the global batch of sequences
 * [seq, seq + global_batch) from the loader, as accum = global/micro
 * micro-batches; the loss of the step is the mean of the micro-batch means.
 * Gradients accumulate with weight 1/accum, are clipped to grad_clip by
 * their global norm, and AdamW applies them with lr(s). After the step the
 * state is (step = s+1, seq += global_batch): that is what a checkpoint of
 * step s+1 holds, and why a restore continues with exactly the same bits.
 */
#include "train.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "comm_filestore.h"
#include "ctl.h"
#include "data.h"
#include "ft_wire.h"
#include "engine.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_hex.h"
#include "ft_net.h"
#include "doctor.h"
#include "ft_failpoint.h"
#include "ft_gpt2.h"
#include "gpt2.h"
#include "buddy.h"
#include "progress.h"
#include "sdc.h"
#include "snap.h"
#include "stackdump.h"
#include "wdog.h"

static void sha256_hex(const char *txt, char out[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(txt, strlen(txt), md, &n, EVP_sha256(), NULL);
  ft_hex_encode(md, sizeof md, out);
}

/* Fills inp/tgt (B,T) with micro-batch `micro` of the global batch that
 * starts at sequence seq. Rank r of world W takes micro-batch slots
 * (micro*W + r); the standalone trainer is rank 0 of 1. */
static int fill_batch(const data_loader *dl, uint64_t seq, int micro, int rank, int world, int B,
                      int T, int32_t *inp, int32_t *tgt) {
  uint64_t first = seq + ((uint64_t)micro * world + rank) * B;
  for (int b = 0; b < B; b++) {
    int rc = data_sequence(dl, first + b, T, inp + (size_t)b * T, tgt + (size_t)b * T);
    if (rc)
      return rc;
  }
  return FT_OK;
}

/* Mean loss over up to max_batches micro-batches of the validation data. */
static double val_loss(engine *e, int T, const data_loader *val, int max_batches) {
  int B = engine_micro_batch(e);
  uint64_t nseq = data_num_sequences(val, T);
  int nb = (int)(nseq / B);
  if (nb > max_batches)
    nb = max_batches;
  if (nb <= 0)
    return NAN;
  int32_t *inp = malloc((size_t)B * T * sizeof *inp);
  int32_t *tgt = malloc((size_t)B * T * sizeof *tgt);
  double sum = 0;
  for (int i = 0; i < nb && inp && tgt; i++) {
    double l = NAN;
    fill_batch(val, 0, i, 0, 1, B, T, inp, tgt);
    if (engine_eval(e, inp, tgt, &l))
      l = NAN;
    sum += (float)l;
  }
  free(inp);
  free(tgt);
  return sum / nb;
}

/* Loads an llm.c model file into params (d's layout); dims must agree with
 * the run file. */
static int init_from_llmc(const ft_gpt2_dims *d, float *params, const char *path) {
  ft_gpt2_dims fd;
  float *fp = NULL;
  int rc = ft_gpt2_read_llmc(path, &fd, &fp);
  if (rc)
    return rc;
  if (fd.n_layer != d->n_layer || fd.n_head != d->n_head || fd.channels != d->channels ||
      fd.vocab_size != d->vocab_size || fd.max_seq_len < d->max_seq_len) {
    rc = ft_err_set(FT_ECONFIG,
                    "%s: model is L=%d H=%d C=%d V=%d maxT=%d but the run file asks for "
                    "L=%d H=%d C=%d V=%d seq_len=%d",
                    path, fd.n_layer, fd.n_head, fd.channels, fd.vocab_size, fd.max_seq_len,
                    d->n_layer, d->n_head, d->channels, d->vocab_size, d->max_seq_len);
    goto out;
  }
  /* Same layout, group by group; wpe keeps only the first seq_len rows and
   * wte's padding rows follow each file's own padded vocabulary. */
  for (int g = 0; g < ft_gpt2_ngroups(d); g++) {
    const float *src = fp + ft_gpt2_group_offset(&fd, g);
    float *dst = params + ft_gpt2_group_offset(d, g);
    size_t n = ft_gpt2_group_numel(d, g);
    if (g == 0)
      n = (size_t)d->vocab_size * d->channels;
    memcpy(dst, src, n * sizeof(float));
  }
out:
  free(fp);
  return rc;
}

static int exit_for(int rc) {
  switch (rc) {
  case FT_OK:
    return FT_EXIT_OK;
  case FT_ECONFIG:
  case FT_EINVAL:
    return FT_EXIT_USAGE;
  default:
    return FT_EXIT_FAIL;
  }
}

/* The gang's side of a saved shard: SHARD_SAVED's text, the envelope the
 * supervisor commits from: the shard manifest as a string (kept verbatim
 * because its checksum covers its exact text), rank 0's state, config,
 * metrics and loss, and "level": "memory" for a checkpoint only in memory.
 * NULL: out of memory. */
static char *shard_envelope(const ckpt_meta *meta, const ckpt_shard *shard) {
  char *sj = ckpt_shard_report_to_json(shard); /* a persisted one: its object's reference */
  cJSON *o = cJSON_CreateObject();
  char *txt = NULL;
  if (sj && o) {
    cJSON_AddStringToObject(o, "shard", sj);
    cJSON_AddStringToObject(o, "state", meta->state_json ? meta->state_json : "{}");
    cJSON_AddStringToObject(o, "config", meta->config_json ? meta->config_json : "{}");
    cJSON_AddStringToObject(o, "metrics", meta->metrics_json ? meta->metrics_json : "{}");
    cJSON_AddNumberToObject(o, "loss", meta->loss);
    if (meta->level == CKPT_LEVEL_MEMORY)
      cJSON_AddStringToObject(o, "level", "memory");
    txt = cJSON_PrintUnformatted(o);
  }
  cJSON_Delete(o);
  free(sj);
  return txt;
}

static int report_shard(void *ud, const ckpt_meta *meta, const ckpt_shard *shard) {
  char *txt = shard_envelope(meta, shard);
  int rc = txt ? ctl_send_shard(ud, meta->step, ckpt_shard_rank(shard), txt) : FT_ENOMEM;
  free(txt);
  return rc;
}

/* A checkpoint's shard could not be written (a full disk, an I/O error, a
 * quota, S3 refusing): the store's fault, never this node's. Reported as
 * FAULT storage (the detail names the file or request and the cause); the
 * rank trains on and the next checkpoint tries again. */
static void report_storage(void *ud, int64_t step, int rc, const char *detail) {
  char msg[FT_WIRE_MAX_DETAIL + 1];
  snprintf(msg, sizeof msg, "checkpoint of step %" PRId64 ": %s: %s", step, ft_strerror(rc),
           detail);
  ctl_send_fault((ctl *)ud, FT_FAULT_STORAGE, step, msg);
}

/* How long a gang's worker keeps retrying its shard of the FINAL checkpoint
 * while the store refuses it, before it gives up with FT_EXIT_STORE: three
 * heartbeat timeouts (the supervisor waits meanwhile; space may come back). */
static double final_retry_s(const ft_runfile *rf) {
  return 3 * rf->watchdog.heartbeat_timeout_s;
}

/* Not an exit code: the phases' way of saying "leave this generation and
 * rejoin the next one in this process" (recovery.in_process; rejoin()). */
#define TRAIN_REJOIN (-1)

static int in_process(const train_opts *o) {
  return o->ctl && o->rf->recovery.in_process;
}

/* checkpoint.replicate: shards pushed into buddies' memory (buddy.h) */
static int replicate(const train_opts *o) {
  return o->ctl && o->rf->checkpoint.replicate;
}

/* Whether this worker keeps chunks in memory: to restore from them in
 * process, or to hold (and serve) its buddies'. */
static int memory_tier(const train_opts *o) {
  return in_process(o) || replicate(o);
}

/* A collective failed: tell the supervisor (the peer that died is the
 * fault; this rank is healthy) and leave with FT_EXIT_GANG, or, in
 * process, leave the generation (TRAIN_REJOIN). */
static int gang_broken(const train_opts *o, int rc, int64_t step) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s", ft_err_detail());
  fprintf(stderr, "worker: collective failed at step %" PRId64 ": %s\n", step, detail);
  if (o->ctl)
    ctl_send_fault(o->ctl, rc == FT_ETIMEDOUT ? FT_FAULT_COLLECTIVE_TIMEOUT : FT_FAULT_OTHER, step,
                   detail);
  return in_process(o) ? TRAIN_REJOIN : FT_EXIT_GANG;
}

/* An engine call of step `step` failed: a collective's failure is the
 * peer's (gang_broken); anything else (a CUDA error, a kernel refusing a
 * shape) is this rank's own, so it exits FT_EXIT_FAIL and the supervisor
 * blames this node rather than its healthy peers. */
static int engine_failed(const train_opts *o, int rc, int64_t step) {
  if (rc == FT_ECOMM || rc == FT_ETIMEDOUT)
    return gang_broken(o, rc, step);
  fprintf(stderr, "worker: step %" PRId64 ": %s\n", step + 1, ft_err_detail());
  return FT_EXIT_FAIL;
}

/* Micro batch for world W: the largest b <= max with global_batch
 * divisible by b*W (the global batch never changes), or 0 if none. */
static int micro_for_world(const ft_train_cfg *tc, int world, int max) {
  for (int b = max; b >= 1; b--)
    if (tc->global_batch % (b * world) == 0)
      return b;
  return 0;
}

/* Out of memory at micro-batch *B: the next micro-batch to try (about half,
 * keeping the global batch), reported on stderr and to the supervisor; 0
 * when *B is already 1. */
static int halve_micro(const train_opts *o, const ft_train_cfg *tc, int world, int64_t step, int *B,
                       int *accum) {
  int b = *B > 1 ? micro_for_world(tc, world, *B / 2) : 0;
  char detail[256];
  if (!b) {
    fprintf(stderr, "worker: out of memory at micro-batch %d, the smallest there is: %s\n", *B,
            ft_err_detail());
    return 0;
  }
  snprintf(detail, sizeof detail,
           "out of memory at micro-batch %d: micro-batch %d x accumulation %d (global batch %d "
           "kept)",
           *B, b, tc->global_batch / (b * world), tc->global_batch);
  fprintf(stderr, "worker: %s\n", detail);
  if (o->ctl)
    ctl_send_fault(o->ctl, FT_FAULT_OOM, step, detail);
  *B = b;
  *accum = tc->global_batch / (b * world);
  return b;
}

/* CUDA device of this rank: FT_CUDA_DEVICE if set, else rank modulo the
 * number of visible devices. */
static int cuda_device_for(int rank) {
  const char *env = getenv("FT_CUDA_DEVICE");
  if (env && *env)
    return atoi(env);
  int n = engine_cuda_devices();
  return n > 0 ? rank % n : 0;
}

/* The collectives for rank of world: Gloo on the CPU (none at world 1),
 * NCCL on CUDA (in a gang even at world 1: the supervisor relays its id). */
static int comm_for(int cuda, int gang, const comm_opts *co, const comm_kv *kv, comm **out) {
  *out = NULL;
  if (cuda && (gang || co->world > 1))
    return comm_nccl_new(co, kv, cuda_device_for(co->rank), out);
  if (co->world > 1)
    return comm_gloo_new(co, kv, out);
  return FT_OK;
}

/* The data position for the next step: the global batch index b = seq /
 * global_batch moves past every skip range [first, end) it lies in (the
 * rule the supervisor simulates to place new ranges). */
static uint64_t apply_skips(const train_state *st, uint64_t seq, int global_batch) {
  uint64_t b = seq / (uint64_t)global_batch;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < st->nskips; i++) {
      if ((int64_t)b >= st->skips[i][0] && (int64_t)b < st->skips[i][1]) {
        b = (uint64_t)st->skips[i][1];
        moved = 1;
      }
    }
  }
  return b * (uint64_t)global_batch;
}

/* Failpoint poison_batch: the targets of one batch replaced by a fixed
 * scramble of themselves, so the model meets data unlike the corpus: a
 * real loss spike that comes from the data, as in the field. */
static void poison_targets(int32_t *tgt, size_t n, int V) {
  for (size_t i = 0; i < n; i++)
    tgt[i] = (int32_t)(((uint32_t)tgt[i] * 2654435761u + 97u * (uint32_t)i) % (uint32_t)V);
}

/* ---- the training process, in phases ---------------------------------------
 *
 * train_main runs the phases below in order over one trainer; each returns
 * FT_EXIT_OK to go on, or the exit code to stop with (it has printed why);
 * trainer_free releases whatever the phases acquired. */

typedef struct trainer {
  const train_opts *o;
  const ft_runfile *rf;
  const ft_train_cfg *tc;
  ft_gpt2_dims d;
  int T, level, cuda;
  data_loader *train, *val;
  engine *e;
  comm *cm;
  snap *sn;
  buddy *bd;        /* checkpoint.replicate; set once, before the first shard */
  int memory_first; /* checkpoint.require memory (snap_set_memory_first) */
  wdog *wd;
  FILE *logf;
  char *config, *ck_config; /* the run file's config JSON; the restored checkpoint's */
  int32_t *inp, *tgt;       /* one micro-batch */
  train_state st;
  ctl_assign a;                          /* gang mode: the supervisor's assignment */
  char addr[INET6_ADDRSTRLEN + 1];       /* the address Gloo binds */
  uint64_t assign_ns;                    /* when this generation's ASSIGN was taken */
  int pf_stop;                           /* the spare's thread stops (join_gang) */
  engine *warm;                          /* built ahead by a warm spare, or NULL */
  double ms_comm, ms_engine, ms_restore; /* what the generation's start took */
  int rank, world, B, accum; /* B: micro-batch; accum: micro-batches per step and rank */
  int64_t restore_step;      /* -1: a fresh start */
  int64_t slow_rank;         /* failpoint slow_rank; -1: none */
  int final_rc;              /* snap_take of the final step */
  int64_t sdc_clean;         /* the last step the SDC check passed (or the restored one) */
  int sdc_mb;                /* the micro-batch this step checks; -1: none */
  uint64_t sdc_own;          /* its hash */
  double last_loss;          /* the newest checkpoint's loss and metrics, for a retry */
  char last_metrics[160];
} trainer;

static void trainer_init(trainer *t, const train_opts *o) {
  memset(t, 0, sizeof *t);
  const ft_runfile *rf = o->rf;
  t->o = o;
  t->rf = rf;
  t->tc = &rf->train;
  t->d = (ft_gpt2_dims){.max_seq_len = rf->model.seq_len,
                        .vocab_size = rf->model.vocab_size,
                        .padded_vocab_size = ft_gpt2_pad_vocab(rf->model.vocab_size),
                        .n_layer = rf->model.n_layer,
                        .n_head = rf->model.n_head,
                        .channels = rf->model.n_embd};
  t->T = rf->model.seq_len;
  t->level = rf->checkpoint.codec_level;
  t->cuda = rf->nodes.device == FT_RF_DEVICE_CUDA;
  t->world = 1;
  t->restore_step = -1;
  t->slow_rank = -1;
  t->sdc_mb = -1;
  t->last_loss = NAN;
  snprintf(t->last_metrics, sizeof t->last_metrics, "{}");
}

static void trainer_free(trainer *t) {
  if (t->logf)
    fclose(t->logf);
  wdog_stop(t->wd);
  buddy_stop(t->bd);
  engine_free(t->warm);
  snap_free(t->sn);
  engine_free(t->e);
  if (t->o->ctl)
    ctl_set_comm(t->o->ctl, NULL);
  comm_free(t->cm);
  free(t->inp);
  free(t->tgt);
  free(t->config);
  free(t->ck_config);
  data_free(t->train);
  data_free(t->val);
  free(t->st.skips);
}

/* The exit for a data loader's error rc (its detail printed already): a
 * storage fault (an S3 data bucket unavailable, throttling or too slow
 * past the client's retries: nobody's, the supervisor restarts in place),
 * else a data fault (an object changed or gone since it was listed, a bad
 * shard: the run's; train_main reports it as FAULT data with the detail,
 * and the run stops naming the key). */
static int data_exit(int rc) {
  return data_err_is_storage(rc) ? FT_EXIT_STORE : FT_EXIT_DATA;
}

/* Tells an s3:// loader's prefetcher the windows this rank's host reads
 * from the step at sequence seq on (fill_batch's layout at this
 * generation's geometry; a host's ranks are consecutive, so per micro-batch
 * one window, which its prefetchers bring with one GET for the host): at a
 * generation's start its first step, at every step the ones after it. */
static void hint_reads(trainer *t, uint64_t seq) {
  int g = t->rf->nodes.workers_per_node, r0 = t->rank - t->rank % g;
  int n = t->world - r0 < g ? t->world - r0 : g;
  data_reads r = {.T = t->T,
                  .seq = seq,
                  .stride = (uint64_t)t->tc->global_batch,
                  .first = (uint64_t)r0 * (uint64_t)t->B,
                  .gap = (uint64_t)t->world * (uint64_t)t->B,
                  .count = (uint64_t)n * (uint64_t)t->B,
                  .windows = t->accum};
  data_hint(t->train, &r);
}

#define VAL_BATCHES 8 /* micro-batches of the validation data a validation reads */

/* Tells an s3:// validation loader what val_loss_gang reads (rank r the
 * micro-batches r, r + world, ... of the first VAL_BATCHES; per host one
 * window a world apart), so its prefetcher brings them ahead of the first
 * validation and keeps them (the plan never changes), and a validation
 * does not stall the step on a cold GET per block. */
static void hint_val(trainer *t) {
  if (!t->val || t->tc->val_every <= 0)
    return;
  uint64_t nseq = data_num_sequences(t->val, t->T);
  int nb = (int)(nseq / (uint64_t)t->B);
  if (nb > VAL_BATCHES)
    nb = VAL_BATCHES;
  int g = t->rf->nodes.workers_per_node, r0 = t->rank - t->rank % g;
  int n = t->world - r0 < g ? t->world - r0 : g;
  if (nb <= r0)
    return; /* no micro-batch for this host */
  data_reads r = {.T = t->T,
                  .seq = 0,
                  .stride = nseq, /* the next "step" wraps onto the same windows */
                  .first = (uint64_t)r0 * (uint64_t)t->B,
                  .gap = (uint64_t)t->world * (uint64_t)t->B,
                  .count = (uint64_t)n * (uint64_t)t->B,
                  .windows = (nb - r0 + t->world - 1) / t->world};
  data_hint(t->val, &r);
}

/* The token shards, and the config JSON and its hash. */
static int phase_data(trainer *t) {
  const ft_runfile *rf = t->rf;
  data_opts dopts;
  data_opts_from_runfile(&rf->data, &dopts);
  dopts.window_bytes = 2LL * rf->nodes.workers_per_node * rf->train.micro_batch * rf->model.seq_len;
  int rc = data_open_opts(rf->data.train, rf->model.vocab_size, &dopts, &t->train);
  if (rc) {
    fprintf(stderr, "worker: data.train: %s\n", ft_err_detail());
    return data_exit(rc);
  }
  if ((!t->o->ctl || t->tc->val_every > 0) && rf->data.val[0] &&
      data_open_opts(rf->data.val, rf->model.vocab_size, &dopts, &t->val)) {
    fprintf(stderr, "worker: warning: data.val: %s (no validation loss)\n", ft_err_detail());
    t->val = NULL;
  }
  if (data_num_tokens(t->train) < (uint64_t)t->T + 1) {
    fprintf(stderr, "worker: data.train: %" PRIu64 " tokens, fewer than seq_len+1 = %d\n",
            data_num_tokens(t->train), t->T + 1);
    return FT_EXIT_DATA;
  }
  t->config = ft_runfile_config_json(rf);
  sha256_hex(t->config, t->st.config_hash);
  t->st.rng = t->tc->seed;
  return FT_EXIT_OK;
}

/* The address Gloo binds (docs/multihost.md): FT_IFACE (an interface name
 * or an address of this host) > nodes.iface > in a gang this host's
 * address on the control connection (the route to the supervisor), alone
 * (--world) loopback. Printed once, with why. */
static int gloo_addr(const trainer *t, char *buf, size_t len) {
  const train_opts *o = t->o;
  const char *env = getenv("FT_IFACE");
  const char *spec = env && env[0] ? env : t->rf->nodes.iface;
  const char *key = env && env[0] ? "FT_IFACE" : "nodes.iface";
  char why[160];
  ft_sockaddr a;
  if (spec[0]) {
    if (ft_net_iface(spec, &a)) {
      fprintf(stderr, "worker: %s=%s: %s\n", key, spec, ft_err_detail());
      return FT_EXIT_USAGE;
    }
    ft_net_format(&a, 0, buf, len);
    snprintf(why, sizeof why, "%s=%s", key, spec);
  } else if (o->ctl) {
    if (ctl_local_addr(o->ctl, buf, len)) {
      fprintf(stderr, "worker: %s\n", ft_err_detail());
      return FT_EXIT_GANG;
    }
    snprintf(why, sizeof why, "route to the supervisor");
  } else {
    ft_net_loopback(0, &a);
    ft_net_format(&a, 0, buf, len);
    snprintf(why, sizeof why, "loopback");
  }
  if (o->ctl)
    fprintf(stderr, "worker: node %u slot %u: gloo on %s (%s)\n", o->node, o->slot, buf, why);
  else
    fprintf(stderr, "worker: rank %d of %d: gloo on %s (%s)\n", o->rank, o->world, buf, why);
  return FT_EXIT_OK;
}

/* snap's on_durable in a gang: a shard in the store goes to the
 * supervisor, then (checkpoint.replicate) to the buddies. A memory-level one
 * goes to the buddies first: the pusher reports it once a buddy on another
 * host holds it (memory level means two hosts' memory). */
static int shard_saved(void *ud, const ckpt_meta *meta, const ckpt_shard *shard) {
  trainer *t = ud;
  buddy *bd = __atomic_load_n(&t->bd, __ATOMIC_ACQUIRE);
  if (meta->level == CKPT_LEVEL_MEMORY) {
    char *txt = shard_envelope(meta, shard);
    if (!txt)
      return ft_err_set(FT_ENOMEM, "out of memory");
    buddy_offer(bd, shard, txt); /* takes txt */
    return FT_OK;
  }
  if (t->memory_first) /* its memory-level report first (pushed while it was written) */
    buddy_flush(bd);
  int rc = report_shard(t->o->ctl, meta, shard);
  if (rc == FT_OK && !t->memory_first) /* memory_first: pushed at memory level already */
    buddy_offer(bd, shard, NULL);
  return rc;
}

/* The checkpoint store, once. With a memory tier (recovery.in_process,
 * checkpoint.replicate) it keeps in memory the chunks this rank writes and
 * a spare fetches or is pushed: twice the whole training state (a spare may
 * replace any rank; the newest whole), three times with memory-level
 * checkpoints. */
static int open_store(trainer *t) {
  const train_opts *o = t->o;
  const ft_runfile *rf = t->rf;
  if (!o->store_uri || t->sn)
    return FT_EXIT_OK;
  ft_runfile_store_env(rf, o->store_uri);
  int rc = snap_open(o->store_uri, rf->run, rf->checkpoint.chunk_mib, t->level,
                     rf->checkpoint.full_every, o->ctl ? shard_saved : NULL, t, &t->sn);
  if (rc) {
    fprintf(stderr, "worker: checkpoint store %s: %s\n", o->store_uri, ft_err_detail());
    return FT_EXIT_STORE;
  }
  if (o->ctl)
    snap_set_fault(t->sn, report_storage, o->ctl);
  snap_set_moments(t->sn, rf->checkpoint.moments);
  if (memory_tier(o)) {
    uint64_t chunk = (uint64_t)(rf->checkpoint.chunk_mib > 0 ? rf->checkpoint.chunk_mib : 4) << 20;
    uint64_t state = 3 * (uint64_t)ft_gpt2_num_params(&t->d) * sizeof(float);
    /* memory-level checkpoints: the committed one must outlive the next one
     * being pushed and the one after it being hashed, so three */
    uint64_t keep =
        rf->checkpoint.persist_every > 1 || rf->checkpoint.require == FT_RF_REQUIRE_MEMORY ? 3 : 2;
    if (snap_keep_in_memory(t->sn, keep * (state + chunk)))
      fprintf(stderr, "worker: warning: no snapshots in memory: %s\n", ft_err_detail());
    else if (replicate(o)) {
      buddy *bd = NULL;
      if (buddy_start(t->sn, o->ctl, t->addr, rf->run, o->node, o->slot, &bd))
        fprintf(stderr, "worker: warning: no replicas (checkpoint.replicate): %s\n",
                ft_err_detail());
      __atomic_store_n(&t->bd, bd, __ATOMIC_RELEASE);
      if (bd && rf->checkpoint.require == FT_RF_REQUIRE_MEMORY) {
        t->memory_first = 1;
        snap_set_memory_first(t->sn, 1);
      }
    }
  }
  return FT_EXIT_OK;
}

/* A warm spare's engine, built at the world size that wrote checkpoint
 * `step`, its memory touched (engine_new_warm): 0, or -1 when none can be
 * (said once). */
static int warm_engine(trainer *t, int64_t step) {
  const train_opts *o = t->o;
  int world = 0, rc = snap_world(t->sn, step, &world);
  int B = rc ? 0 : micro_for_world(t->tc, world, t->tc->micro_batch);
  engine *e = NULL;
  uint64_t t0 = ft_now_ns();
  if (B)
    rc = engine_new_warm(ft_rf_device_name(t->rf->nodes.device), &t->d, B, t->T, world, &e);
  if (!B || rc) {
    fprintf(stderr, "worker: node %u slot %u: no engine built ahead: %s\n", o->node, o->slot,
            B ? ft_err_detail() : "no micro-batch for that world size");
    return -1;
  }
  __atomic_store_n(&t->warm, e, __ATOMIC_RELEASE);
  fprintf(stderr, "worker: node %u slot %u: engine for world %d ready ahead (%.0f ms)\n", o->node,
          o->slot, world, (double)(ft_now_ns() - t0) * 1e-6);
  return 0;
}

/* A worker waiting for its first ASSIGN with a memory tier (a warm spare).
 * With recovery.in_process and nobody pushing to it, it reads each newly
 * committed checkpoint into memory, so that if it replaces a rank its
 * restore reads no store. And once it hears a COMMITTED (a worker about to
 * be assigned hears none: it is a spare) it builds its engine at that
 * checkpoint's world size and touches its memory, so that its first step
 * in a gang runs as fast as the survivors'. */
static void *spare_main(void *arg) {
  trainer *t = arg;
  const train_opts *o = t->o;
  int fetch = in_process(o) && !replicate(o), warm_done = 0;
  int64_t have = -2, want = -1; /* -1: the newest in the catalog */
  while (want != -2) {
    if (want != have && fetch) {
      uint64_t bytes = 0, t0 = ft_now_ns();
      int rc = snap_prefetch(t->sn, want, &t->pf_stop, &bytes);
      if (__atomic_load_n(&t->pf_stop, __ATOMIC_RELAXED))
        break;
      if (rc)
        fprintf(stderr, "worker: node %u slot %u: prefetch of checkpoint %" PRId64 ": %s\n",
                o->node, o->slot, want, ft_err_detail());
      else if (bytes && want >= 0)
        fprintf(stderr,
                "worker: node %u slot %u: checkpoint %" PRId64 " in memory (%.2f MiB fetched in "
                "%.0f ms)\n",
                o->node, o->slot, want, (double)bytes / 1048576.0,
                (double)(ft_now_ns() - t0) * 1e-6);
      else if (bytes)
        fprintf(stderr,
                "worker: node %u slot %u: the newest checkpoint in memory (%.2f MiB fetched in "
                "%.0f ms)\n",
                o->node, o->slot, (double)bytes / 1048576.0, (double)(ft_now_ns() - t0) * 1e-6);
    }
    if (want != have && want >= 0 && !warm_done && !__atomic_load_n(&t->pf_stop, __ATOMIC_RELAXED))
      warm_done = 1 + warm_engine(t, want); /* tried once */
    have = want;
    want = ctl_wait_committed(o->ctl, have < 0 ? -1 : have, 2000, &t->pf_stop);
  }
  return NULL;
}

static int join_gang(trainer *t) {
  const train_opts *o = t->o;
  pthread_t pf;
  int prefetching = 0;
  /* not after a rejoin (it has its engine, and its own chunks in memory) */
  if (t->sn && memory_tier(o) && !t->e) {
    t->pf_stop = 0;
    prefetching = pthread_create(&pf, NULL, spare_main, t) == 0;
  }
  progress_phase(FT_PHASE_IDLE);
  ctl_wait_assign(o->ctl, &t->a);
  /* failpoint hang_in=rendezvous: the ASSIGN taken (heartbeats carry its
   * generation), the generation never joined (still idle, nothing counted) */
  ft_failpoint_hang_arm((int)o->node, t->a.rank, t->a.gen,
                        (t->a.restore_step < 0 ? 0 : t->a.restore_step) + 1); /* its first step */
  ft_failpoint_hang_here(FT_HANG_RENDEZVOUS);
  progress_generation(); /* this generation's comm counts its collectives from 0 */
  progress_phase(FT_PHASE_RENDEZVOUS);
  if (prefetching) {
    __atomic_store_n(&t->pf_stop, 1, __ATOMIC_RELAXED);
    ctl_wake(o->ctl);
    pthread_join(pf, NULL);
  }
  t->assign_ns = ft_now_ns();
  t->rank = t->a.rank;
  stackdump_set_rank(t->rank);
  t->world = t->a.world;
  t->restore_step = t->a.restore_step;
  comm_kv kv = ctl_kv(o->ctl);
  comm_opts co = {.rank = t->rank,
                  .world = t->world,
                  .bind_addr = t->addr,
                  .prefix = t->a.rdzv,
                  .timeout_ms = (int)(t->rf->watchdog.collective_timeout_s * 1000)};
  int rc = comm_for(t->cuda, 1, &co, &kv, &t->cm);
  if (rc)
    return gang_broken(o, rc, t->restore_step);
  if (in_process(o))
    ctl_set_comm(o->ctl, t->cm); /* a STOP rejoin aborts it from the reader thread */
  /* the node doctor's link check: a gang starting the run (every rank knows
   * it from ASSIGN, so all or none take part); rank 0 reports */
  const ft_runfile *rf = t->rf;
  if (rf->doctor.on_join && rf->doctor.link_mb > 0 && t->world > 1 && t->restore_step < 0 &&
      !t->cuda) {
    char *rep = NULL;
    rc = doctor_links(t->cm, (size_t)rf->doctor.link_mb << 20, &rep);
    if (rc)
      return gang_broken(o, rc, t->restore_step);
    if (rep && ctl_send_doctor(o->ctl, rep))
      fprintf(stderr, "worker: cannot send the link check's report: %s\n", ft_err_detail());
    free(rep);
  }
  t->ms_comm = (double)(ft_now_ns() - t->assign_ns) * 1e-6;
  fprintf(stderr, "worker: node %u slot %u: rank %d of %d, generation %" PRIu64 "%s\n", o->node,
          o->slot, t->rank, t->world, t->a.gen, t->restore_step >= 0 ? ", restoring" : "");
  return FT_EXIT_OK;
}

static int phase_gang(trainer *t) {
  const train_opts *o = t->o;
  const ft_runfile *rf = t->rf;
  char *addr = t->addr;
  int rc;
  if (o->ctl || o->world > 1) {
    rc = gloo_addr(t, addr, sizeof t->addr);
    if (rc)
      return rc;
  }
  if (o->ctl) {
    rc = wdog_start(rf, o->ctl, o->node, o->slot, &t->wd);
    if (rc) {
      fprintf(stderr, "worker: watchdog.xid_actions: %s\n", ft_err_detail());
      return FT_EXIT_USAGE;
    }
    /* a spare fetches, or is pushed, checkpoints meanwhile */
    int code = memory_tier(o) ? open_store(t) : FT_EXIT_OK;
    return code ? code : join_gang(t);
  } else if (o->world > 1) {
    /* Several standalone processes meeting through a folder (tests, debugging). */
    comm_kv kv;
    t->rank = o->rank;
    stackdump_set_rank(t->rank);
    t->world = o->world;
    comm_opts co = {.rank = t->rank,
                    .world = t->world,
                    .bind_addr = addr,
                    .timeout_ms = (int)(rf->watchdog.collective_timeout_s * 1000)};
    progress_phase(FT_PHASE_RENDEZVOUS);
    rc = comm_filestore_init(&kv, o->rdzv_dir);
    if (rc == FT_OK) {
      rc = comm_for(t->cuda, 0, &co, &kv, &t->cm);
      comm_filestore_release(&kv);
    }
    if (rc) {
      fprintf(stderr, "worker: rank %d of %d: %s\n", t->rank, t->world, ft_err_detail());
      return FT_EXIT_GANG;
    }
  }
  return FT_EXIT_OK;
}

/* The initial parameters (the seed's, or an llm.c model file's) into the engine. */
static int initial_weights(trainer *t) {
  const train_opts *o = t->o;
  float *full = malloc(ft_gpt2_num_params(&t->d) * sizeof *full);
  if (!full) {
    fprintf(stderr, "worker: out of memory\n");
    return FT_EXIT_FAIL;
  }
  gpt2_init_params(&t->d, full, t->tc->seed);
  int rc;
  if (o->init_from) {
    rc = init_from_llmc(&t->d, full, o->init_from);
    if (rc) {
      fprintf(stderr, "worker: --init-from: %s\n", ft_err_detail());
      free(full);
      return exit_for(rc);
    }
  }
  rc = engine_set_params(t->e, full);
  free(full);
  if (rc) {
    fprintf(stderr, "worker: %s\n", ft_err_detail());
    return FT_EXIT_FAIL;
  }
  return FT_EXIT_OK;
}

/* The engine at the largest micro-batch that fits, with the initial
 * parameters unless a restore is to set them. */
static int phase_engine(trainer *t) {
  const train_opts *o = t->o;
  const ft_train_cfg *tc = t->tc;
  uint64_t e0 = ft_now_ns();
  progress_phase(FT_PHASE_RESTORE); /* the generation's start: engine, then weights */
  t->B = micro_for_world(tc, t->world, tc->micro_batch);
  if (!t->B) {
    fprintf(stderr, "worker: train.global_batch %d is not divisible by the world size %d\n",
            tc->global_batch, t->world);
    return FT_EXIT_USAGE;
  }
  t->accum = tc->global_batch / (t->B * t->world);
  /* Out of memory for the activations: halve the micro-batch, double the
   * accumulation (docs/design.md §4). Every rank of a gang meets the same limit on
   * the same devices; one that does not would desynchronise the
   * collectives, which the watchdog then reports. */
  int rc = FT_ESTATE;
  const char *whose = "the engine of the last generation kept";
  if (!t->e && t->warm) { /* a warm spare built one ahead */
    t->e = t->warm;
    t->warm = NULL;
    whose = "the engine built ahead taken";
  }
  if (t->e) { /* kept by an in-process rejoin, or built ahead: reuse it at the same world size */
    if (engine_micro_batch(t->e) == t->B)
      rc = engine_set_comm(t->e, t->cm, t->rank, t->world);
    if (rc) {
      engine_free(t->e);
      t->e = NULL;
    } else {
      fprintf(stderr, "worker: node %u slot %u: %s\n", o->node, o->slot, whose);
    }
  }
  while (!t->e &&
         (rc = engine_new(ft_rf_device_name(t->rf->nodes.device), &t->d, t->B, t->T, t->cm, t->rank,
                          t->world, cuda_device_for(t->rank), &t->e)) == FT_ENOMEM &&
         halve_micro(o, tc, t->world, t->restore_step, &t->B, &t->accum))
    ;
  if (rc) {
    fprintf(stderr, "worker: %s\n", ft_err_detail());
    return rc == FT_ECONFIG ? FT_EXIT_USAGE : FT_EXIT_FAIL;
  }
  if (t->cuda && !o->quiet && t->rank == 0)
    fprintf(stderr, "worker: training on %s\n", engine_device_name(t->e));
  char pci[32];
  if (t->wd && engine_device_pci(t->e, pci, sizeof pci) == FT_OK) /* real Xids, the abort hook */
    wdog_set_gpu(t->wd, pci, t->cm && comm_is_device(t->cm) ? t->cm : NULL);
  /* a gang's restore sets every shard: no initial weights to draw */
  int code = o->ctl && o->store_uri && t->restore_step >= 0 ? FT_EXIT_OK : initial_weights(t);
  t->ms_engine = (double)(ft_now_ns() - e0) * 1e-6;
  return code;
}

/* The restore step's manifest as the supervisor published it in this
 * generation's KV (a memory-level checkpoint, whose record only the
 * supervisor's catalog holds): *json malloc'd. FT_ENOENT: none published. */
static int restore_manifest(trainer *t, char **json) {
  comm_kv kv = ctl_kv(t->o->ctl);
  char key[FT_WIRE_MAX_KEY + 1];
  void *v = NULL;
  size_t len = 0, have = 0;
  *json = NULL;
  snprintf(key, sizeof key, "%s" FT_KV_RESTORE_MANIFEST, t->a.rdzv);
  int rc = kv.get(kv.ud, key, &v, &len);
  if (rc)
    return rc;
  char num[32] = "";
  memcpy(num, v, len < sizeof num - 1 ? len : sizeof num - 1);
  free(v);
  int n = atoi(num);
  if (n <= 0 || n > 4096)
    return ft_err_set(FT_EPROTO, "the supervisor's restore manifest: %d parts", n);
  char *out = NULL;
  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof key, "%s" FT_KV_RESTORE_MANIFEST "/%d", t->a.rdzv, i);
    rc = kv.get(kv.ud, key, &v, &len);
    if (rc)
      break;
    char *grown = realloc(out, have + len + 1);
    if (!grown) {
      free(v);
      rc = ft_err_set(FT_ENOMEM, "out of memory");
      break;
    }
    out = grown;
    memcpy(out + have, v, len);
    have += len;
    out[have] = 0;
    free(v);
  }
  if (rc) {
    free(out);
    return rc;
  }
  *json = out;
  return FT_OK;
}

/* The checkpoint store, and the restore: the supervisor's restore step in a
 * gang (and its skip list, the whole history), the newest checkpoint with
 * --resume standalone. */
static int phase_restore(trainer *t) {
  const train_opts *o = t->o;
  const ft_runfile *rf = t->rf;
  int code = open_store(t);
  if (code)
    return code;
  if (t->sn) {
    int rc;
    int64_t last;
    if (!o->ctl && snap_latest(t->sn, &last) == FT_OK) {
      if (!o->resume) {
        fprintf(
            stderr,
            "worker: store %s already holds checkpoints of run '%s' (newest: step %" PRId64
            ").\n  Pass --resume to continue that run, or choose another --store or run name.\n",
            o->store_uri, rf->run, last);
        return FT_EXIT_USAGE;
      }
      t->restore_step = last;
    } else if (!o->ctl && o->resume) {
      fprintf(stderr, "worker: no checkpoint of run '%s' in %s yet: starting from step 0\n",
              rf->run, o->store_uri);
    }
    if (t->restore_step >= 0) {
      progress_phase(FT_PHASE_RESTORE);
      ckpt_read_stats r0, r1;
      snap_read_stats(t->sn, &r0);
      uint64_t t0 = ft_now_ns();
      char *mj = NULL;
      int published = o->ctl ? restore_manifest(t, &mj) : FT_ENOENT;
      if (published == FT_OK) /* a memory-level one */
        rc = snap_restore_json(t->sn, t->restore_step, mj, t->e, &t->st, &t->ck_config);
      else if (published != FT_ENOENT) /* said, then the store's own record tried */
        fprintf(stderr, "worker: the supervisor's manifest of step %" PRId64 ": %s\n",
                t->restore_step, ft_err_detail());
      if (published != FT_OK)
        rc = snap_restore(t->sn, t->restore_step, t->e, &t->st, &t->ck_config);
      free(mj);
      snap_read_stats(t->sn, &r1);
      t->ms_restore = (double)(ft_now_ns() - t0) * 1e-6;
      if (o->ctl && rc == FT_OK)
        fprintf(stderr,
                "worker: node %u slot %u: restored step %" PRId64 " in %.0f ms: %.2f MiB from "
                "memory, %.2f MiB from buddies, %.2f MiB from the store; %" PRIu64
                " chunk(s) in memory and %" PRIu64 " from buddies failed their hash\n",
                o->node, o->slot, t->restore_step, (double)(ft_now_ns() - t0) * 1e-6,
                (double)(r1.memory_bytes - r0.memory_bytes) / 1048576.0,
                (double)(r1.remote_bytes - r0.remote_bytes) / 1048576.0,
                (double)(r1.store_bytes - r0.store_bytes) / 1048576.0,
                r1.memory_rejected - r0.memory_rejected, r1.remote_rejected - r0.remote_rejected);
      if (rc) {
        fprintf(stderr, "worker: restore of step %" PRId64 ": %s\n", t->restore_step,
                ft_err_detail());
        /* damaged or missing from every source (memory, buddies, the store):
         * the supervisor marks the checkpoint BAD and falls back */
        if (o->ctl && (rc == FT_ECORRUPT || rc == FT_ENOENT)) {
          char msg[FT_WIRE_MAX_DETAIL + 1];
          snprintf(msg, sizeof msg, "%s", ft_err_detail());
          ctl_send_fault(o->ctl, FT_FAULT_RESTORE_CORRUPT, t->restore_step, msg);
        }
        return FT_EXIT_STORE;
      }
      char hash[65];
      sha256_hex(t->config, hash);
      if (strcmp(hash, t->st.config_hash) != 0)
        fprintf(stderr,
                "worker: warning: the run file's config differs from checkpoint %" PRId64
                "'s; the continued run will not match an uninterrupted one bit for bit\n",
                t->restore_step);
      if (t->rank == 0)
        fprintf(stderr, "worker: resumed run '%s' from step %" PRId64 " (%s)\n", rf->run,
                t->st.step, o->store_uri);
    }
  }
  if (o->ctl) { /* the supervisor's skip list is the whole history: it wins */
    train_state *st = &t->st;
    free(st->skips);
    st->skips = t->a.nskips ? calloc((size_t)t->a.nskips, sizeof *st->skips) : NULL;
    st->nskips = st->skips ? t->a.nskips : 0;
    if (st->nskips)
      memcpy(st->skips, t->a.skips, (size_t)t->a.nskips * sizeof *st->skips);
  }
  return FT_EXIT_OK;
}

/* The step log, the batch buffers, the banner. */
static int phase_prepare(trainer *t) {
  const train_opts *o = t->o;
  const ft_train_cfg *tc = t->tc;
  const ft_gpt2_dims *d = &t->d;
  if (t->logf && t->rank != 0) { /* a rejoin moved this worker off rank 0 */
    fclose(t->logf);
    t->logf = NULL;
  }
  if (o->log_json && t->rank == 0 && !t->logf) {
    t->logf = fopen(o->log_json, t->st.step > 0 ? "a" : "w");
    if (!t->logf) {
      fprintf(stderr, "worker: --log-json %s: cannot open for writing\n", o->log_json);
      return FT_EXIT_USAGE;
    }
  }
  /* sized for the largest micro-batch: a smaller one after an OOM fits */
  t->inp = malloc((size_t)t->B * t->T * sizeof *t->inp);
  t->tgt = malloc((size_t)t->B * t->T * sizeof *t->tgt);
  if (!t->inp || !t->tgt) {
    fprintf(stderr, "worker: out of memory\n");
    return FT_EXIT_FAIL;
  }
  if (!o->quiet && t->rank == 0)
    fprintf(stderr,
            "worker: run '%s': %zu parameters, L=%d H=%d C=%d V=%d T=%d, global batch %d = "
            "%d x micro %d x %d rank(s), %" PRId64 " steps\n",
            t->rf->run,
            ft_gpt2_num_params(d) - (size_t)(d->padded_vocab_size - d->vocab_size) * d->channels,
            d->n_layer, d->n_head, d->channels, d->vocab_size, t->T, tc->global_batch, t->accum,
            t->B, t->world, tc->steps);
  if (!ft_failpoint("slow_rank", &t->slow_rank))
    t->slow_rank = -1;
  t->sdc_clean = t->st.step;                     /* a restored state is trusted */
  progress_step_done(t->st.step, FT_PHASE_DATA); /* the first step reads next */
  /* the prefetcher: this generation's geometry, before its first step */
  hint_reads(t, t->st.seq);
  hint_val(t);
  if (o->ctl)
    fprintf(stderr,
            "worker: node %u slot %u: generation %" PRIu64 " ready %.0f ms after its ASSIGN "
            "(comm %.0f ms, engine %.0f ms, restore %.0f ms)\n",
            o->node, o->slot, t->a.gen, (double)(ft_now_ns() - t->assign_ns) * 1e-6, t->ms_comm,
            t->ms_engine, t->ms_restore);
  return FT_EXIT_OK;
}

/* inp/tgt: micro-batch mb of `rank` in the step consuming `batch` (the
 * failpoint's poisoned targets included). FT_OK or non-zero (printed). */
static int load_micro(trainer *t, int64_t batch, int mb, int rank) {
  ft_phase was = progress_phase_get();
  progress_phase(FT_PHASE_DATA);
  int rc = fill_batch(t->train, t->st.seq, mb, rank, t->world, t->B, t->T, t->inp, t->tgt);
  if (rc) {
    fprintf(stderr, "worker: %s\n", ft_err_detail());
    return rc;
  }
  if (ft_failpoint_at("poison_batch", batch))
    poison_targets(t->tgt, (size_t)t->B * t->T, t->rf->model.vocab_size);
  progress_phase(was == FT_PHASE_SDC ? FT_PHASE_SDC : FT_PHASE_FORWARD);
  return FT_OK;
}

/* One pass over the step's micro-batches into the gradients. *oom: a
 * micro-batch ran out of memory (nothing printed; the caller decides). */
static int micro_batches(trainer *t, int64_t batch, int *nan_batch, int *oom) {
  *oom = 0;
  for (int mb = 0; mb < t->accum; mb++) {
    int lrc = load_micro(t, batch, mb, t->rank);
    if (lrc)
      return data_exit(lrc);
    if (ft_failpoint_at("nan_batch", batch))
      *nan_batch = 1;
    int rc = mb == t->sdc_mb ? engine_grad_check(t->e, &t->sdc_own) : FT_OK;
    if (rc == FT_OK)
      rc = engine_micro(t->e, t->inp, t->tgt, 1.0f / (float)(t->accum * t->world));
    if (mb == t->sdc_mb)
      engine_grad_check(t->e, NULL);
    if (rc == FT_ENOMEM) {
      *oom = 1;
      return FT_EXIT_FAIL;
    }
    if (rc)
      return engine_failed(t->o, rc, t->st.step);
  }
  return FT_EXIT_OK;
}

/* The step's gradients. Out of memory: a world-1 run halves the
 * micro-batch and redoes the whole step; a gang cannot (the other ranks are
 * inside collectives): it fails and the supervisor restarts it. */
static int accumulate(trainer *t, int64_t batch, int *nan_batch) {
  const train_opts *o = t->o;
  for (;;) {
    int oom, code = micro_batches(t, batch, nan_batch, &oom);
    if (!oom)
      return code;
    if (t->world == 1 && halve_micro(o, t->tc, t->world, t->st.step, &t->B, &t->accum)) {
      int rc;
      while ((rc = engine_set_micro(t->e, t->B)) == FT_ENOMEM &&
             halve_micro(o, t->tc, t->world, t->st.step, &t->B, &t->accum))
        ;
      if (rc) {
        fprintf(stderr, "worker: %s\n", ft_err_detail());
        return FT_EXIT_FAIL;
      }
      engine_zero_grad(t->e);
      continue;
    }
    fprintf(stderr, "worker: step %" PRId64 ": %s\n", t->st.step + 1, ft_err_detail());
    if (o->ctl)
      ctl_send_fault(o->ctl, FT_FAULT_OOM, t->st.step + 1, ft_err_detail());
    return FT_EXIT_FAIL;
  }
}

/* ---- the silent-data-corruption check (sdc.h, docs/design.md §6) ---------- */

/* Whether step k checks a micro-batch (t->sdc_mb, its hash armed in
 * t->sdc_own): due, and the engine has a check (said once if not). */
static void sdc_arm(trainer *t, int64_t k) {
  static int off; /* the engine has none: every rank's is the same backend */
  t->sdc_mb = -1;
  int64_t from; /* failpoints: node N's gradients flip a bit (from step F on) */
  engine_corrupt(t->e, ft_failpoint_at("sdc_corrupt_node", t->o->node) &&
                           (!ft_failpoint("sdc_corrupt_from", &from) || k >= from));
  if (off || !sdc_due(t->rf->watchdog.sdc_every, t->world, k))
    return;
  if (engine_grad_check(t->e, NULL) != FT_OK) {
    off = 1;
    if (t->rank == 0)
      fprintf(stderr, "worker: watchdog.sdc_every: no check on this engine: %s\n", ft_err_detail());
    return;
  }
  t->sdc_mb = sdc_micro(t->tc->seed, k, t->accum);
  t->sdc_own = SDC_HASH_INIT;
}

/* Recomputes rank `whose` micro-batch t->sdc_mb of this step into *h. */
static int sdc_recompute(trainer *t, int64_t batch, int whose, uint64_t *h) {
  progress_phase(FT_PHASE_SDC);
  int lrc = load_micro(t, batch, t->sdc_mb, whose);
  if (lrc)
    return data_exit(lrc);
  *h = SDC_HASH_INIT;
  int rc = engine_recompute(t->e, t->inp, t->tgt, 1.0f / (float)(t->accum * t->world), h);
  return rc ? engine_failed(t->o, rc, t->st.step) : FT_EXIT_OK;
}

/* Every rank's a (and b, when all2) into all[r] (all2[r]): one all-reduce. */
static int sdc_gather(trainer *t, uint64_t a, uint64_t *all, uint64_t b, uint64_t *all2) {
  int W = t->world, n = all2 ? 4 * W : 2 * W;
  double *v = calloc((size_t)n, sizeof *v);
  if (!v) {
    fprintf(stderr, "worker: out of memory for the SDC check's hashes\n");
    return FT_EXIT_FAIL;
  }
  sdc_pack(v, t->rank, a);
  if (all2)
    sdc_pack(v + 2 * W, t->rank, b);
  int rc = engine_allreduce_sum(t->e, v, n);
  for (int r = 0; rc == FT_OK && r < W; r++) {
    all[r] = sdc_unpack(v, r);
    if (all2)
      all2[r] = sdc_unpack(v + 2 * W, r);
  }
  free(v);
  return rc ? engine_failed(t->o, rc, t->st.step) : FT_EXIT_OK;
}

/* Step k's check, after its micro-batches and before its update: each rank
 * recomputes its left neighbour's micro-batch (a second round on a
 * mismatch). Passed: FT_EXIT_OK, *ms its cost. Failed: the update is not
 * applied; the lowest rank not named reports (FAULT sdc, step: the first
 * step no check covers) and every rank waits for the supervisor's STOP,
 * as on a NaN. */
static int sdc_check(trainer *t, int64_t batch, int64_t k, double *ms) {
  uint64_t t0 = ft_now_ns(), h = 0;
  int W = t->world, s = sdc_stride(W, t->rf->nodes.workers_per_node);
  uint64_t *own = calloc(3 * (size_t)W, sizeof *own), *re1 = own + W, *re2 = re1 + W;
  if (!own) {
    fprintf(stderr, "worker: out of memory for the SDC check's hashes\n");
    return FT_EXIT_FAIL;
  }
  int first, code = sdc_recompute(t, batch, (t->rank - s + W) % W, &h);
  if (!code)
    code = sdc_gather(t, t->sdc_own, own, h, re1);
  if (!code && sdc_mismatches(own, re1, W, s, &first) == 0) {
    t->sdc_clean = k;
    *ms = (double)(ft_now_ns() - t0) * 1e-6;
    free(own);
    return FT_EXIT_OK;
  }
  if (!code)
    code = sdc_recompute(t, batch, (t->rank - 2 * s + 2 * W) % W, &h);
  if (!code)
    code = sdc_gather(t, h, re2, 0, NULL);
  if (code) {
    free(own);
    return code;
  }
  char detail[512];
  int named = sdc_judge(own, re1, re2, W, s, k, t->sdc_mb, detail, sizeof detail);
  free(own);
  if (t->rank == 0 || t->rank == named)
    fprintf(stderr, "worker: step %" PRId64 ": silent data corruption: %s\n", k, detail);
  if (!t->o->ctl)
    return FT_EXIT_FAIL;
  if (t->rank == (named == 0 ? 1 : 0)) /* the first healthy rank speaks */
    ctl_send_fault(t->o->ctl, FT_FAULT_SDC, t->sdc_clean + 1, detail);
  fflush(NULL);
  progress_phase(FT_PHASE_IDLE);
  ctl_wait_stop(t->o->ctl);
  return TRAIN_REJOIN;
}

/* Whether the checkpoint of step goes to the store (checkpoint.persist_every)
 * or lives in memory only (this host's and a buddy's): every persist_every-th
 * one, the final one, and every one when there is no buddy to hold a copy. */
static int persisted(const trainer *t, int64_t step) {
  int64_t every = t->rf->checkpoint.persist_every;
  if (!t->o->ctl || every <= 1 || step == t->tc->steps || t->o->ckpt_every <= 0 ||
      !__atomic_load_n(&t->bd, __ATOMIC_ACQUIRE))
    return 1;
  return (step / t->o->ckpt_every) % every == 0;
}

/* The checkpoint of the step just taken, if one is due; *stall_ms: how long
 * it held the loop (-1: none). A refused one is skipped in a gang. */
static int checkpoint_step(trainer *t, double loss, double lr, float norm, double *stall_ms) {
  const train_opts *o = t->o;
  train_state *st = &t->st;
  *stall_ms = -1;
  if (!t->sn || !((o->ckpt_every > 0 && st->step % o->ckpt_every == 0) || st->step == t->tc->steps))
    return FT_EXIT_OK;
  snprintf(t->last_metrics, sizeof t->last_metrics,
           "{\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g}", loss, lr, norm);
  t->last_loss = loss;
  uint64_t c0 = ft_now_ns();
  progress_phase(FT_PHASE_SNAPSHOT);
  int rc = snap_take(t->sn, t->e, t->rank, t->world, st, t->config, loss, t->last_metrics,
                     persisted(t, st->step));
  progress_phase(FT_PHASE_OPTIMIZER); /* the step's tail */
  if (st->step == t->tc->steps)
    t->final_rc = rc;
  if (rc) {
    fprintf(stderr, "worker: checkpoint at step %" PRId64 ": %s\n", st->step, ft_err_detail());
    if (!o->ctl || rc == FT_ENOMEM)
      return FT_EXIT_STORE;
    report_storage(o->ctl, st->step, rc, ft_err_detail()); /* skipped; training goes on */
  }
  *stall_ms = (double)(ft_now_ns() - c0) * 1e-6;
  return FT_EXIT_OK;
}

/* The validation loss at a train.val_every step, collective (every rank
 * calls it): the full parameters gathered, rank r evaluates micro-batches
 * r, r + world, ... of the first VAL_BATCHES of the validation data, and
 * the sums are added over the ranks. The weights are only read: training
 * goes on bit for bit as without it. */
static int val_loss_gang(trainer *t, double *out) {
  *out = NAN;
  progress_phase(FT_PHASE_VALIDATION);
  const float *full;
  int rc = engine_full_params(t->e, &full);
  if (rc)
    return rc;
  uint64_t nseq = data_num_sequences(t->val, t->T);
  int nb = (int)(nseq / (uint64_t)t->B);
  if (nb > VAL_BATCHES)
    nb = VAL_BATCHES;
  double acc[2] = {0, 0}; /* sum of micro-batch losses, their number */
  uint64_t e0 = ft_now_ns();
  for (int i = t->rank; i < nb; i += t->world) {
    double l = NAN;
    if ((rc = fill_batch(t->val, 0, i, 0, 1, t->B, t->T, t->inp, t->tgt)) ||
        (rc = engine_eval(t->e, t->inp, t->tgt, &l)))
      return rc;
    acc[0] += (float)l;
    acc[1] += 1;
  }
  if (t->slow_rank == t->rank) /* failpoint: the straggler evaluates 3x slower too */
    usleep((useconds_t)((double)(ft_now_ns() - e0) * 2e-3));
  if ((rc = engine_allreduce_sum(t->e, acc, 2)))
    return rc;
  if (acc[1] > 0)
    *out = acc[0] / acc[1];
  return FT_OK;
}

/* One optimizer step: gradients, clipping, AdamW, then the step's reports
 * (terminal, supervisor, --log-json) and checkpoint. */
static int train_step(trainer *t) {
  const train_opts *o = t->o;
  const ft_train_cfg *tc = t->tc;
  train_state *st = &t->st;
  engine *e = t->e;
  if (in_process(o) && ctl_aborted(o->ctl))
    return TRAIN_REJOIN; /* the supervisor ended this generation (a fault elsewhere) */
  ft_failpoint_hang_arm((int)o->node, t->rank, t->a.gen, st->step + 1); /* hang_at_step & co. */
  uint64_t t0 = ft_now_ns();
  double comm0 = engine_comm_seconds(e);
  double lr = ft_train_lr(tc, st->step), loss = 0;
  st->seq = apply_skips(st, st->seq, tc->global_batch);
  hint_reads(t, apply_skips(st, st->seq + (uint64_t)tc->global_batch, tc->global_batch));
  int64_t batch = (int64_t)(st->seq / (uint64_t)tc->global_batch);
  int nan_batch = 0;
  engine_zero_grad(e);
  sdc_arm(t, st->step + 1);
  int code = accumulate(t, batch, &nan_batch);
  double sdc_ms = -1;
  if (!code && t->sdc_mb >= 0)
    code = sdc_check(t, batch, st->step + 1, &sdc_ms);
  if (code)
    return code;
  progress_phase(FT_PHASE_OPTIMIZER);
  int rc = engine_loss(e, &loss);
  if (rc)
    return engine_failed(o, rc, st->step);
  if (nan_batch)
    loss += NAN;
  loss /= t->accum;
  if (t->slow_rank == t->rank) { /* failpoint: this rank computes 3x slower */
    double own = (double)(ft_now_ns() - t0) * 1e-9 - (engine_comm_seconds(e) - comm0);
    usleep((useconds_t)(2e6 * own));
  }
  rc = engine_allreduce_sum(e, &loss, 1);
  loss /= t->world;
  float norm = 0;
  if (rc == FT_OK)
    rc = engine_grad_norm(e, &norm);
  if (rc)
    return engine_failed(o, rc, st->step);
  if (!isfinite(loss) || !isfinite(norm)) {
    fprintf(stderr, "worker: step %" PRId64 ": non-finite loss %g or gradient norm %g\n",
            st->step + 1, loss, norm);
    if (o->ctl) { /* the update is not applied; the supervisor rolls back */
      ctl_send_fault(o->ctl, FT_FAULT_NAN, st->step + 1, "non-finite loss or gradient norm");
      fflush(NULL);
      progress_phase(FT_PHASE_IDLE);
      ctl_wait_stop(o->ctl);
      return TRAIN_REJOIN; /* it returns only to rejoin (the rollback, in process) */
    }
    return FT_EXIT_FAIL;
  }
  if (tc->grad_clip > 0 && norm > tc->grad_clip)
    rc = engine_scale_grads(e, (float)(tc->grad_clip / norm));
  if (rc == FT_OK)
    rc = engine_adamw(e, (float)lr, (float)tc->beta1, (float)tc->beta2, (float)tc->eps,
                      (float)tc->weight_decay, st->step + 1);
  if (rc) {
    fprintf(stderr, "worker: step %" PRId64 ": %s\n", st->step + 1, ft_err_detail());
    return FT_EXIT_FAIL;
  }
  double fence_ms = engine_fence_ms(e);
  st->step++;
  st->seq += (uint64_t)tc->global_batch;
  progress_step_done(st->step, FT_PHASE_OPTIMIZER);
  double ms = (double)(ft_now_ns() - t0) * 1e-6;
  /* This rank's own compute time (straggler detection, the supervisor's
   * step times): the step's time less its time inside collectives (waiting
   * for peers), both taken here, so validation is excluded from both. The
   * validation below waits in its collectives for the slowest rank's
   * evaluation; subtracting that wait from a time measured before it made
   * every validation step's time negative. */
  double own_ms = ms - (engine_comm_seconds(e) - comm0) * 1e3;
  if (own_ms < 0) /* the collectives' share never exceeds the step's */
    own_ms = 0;
  double tok_s = (double)tc->global_batch * t->T / (ms * 1e-3);
  double vl = NAN; /* not timed: ms, own_ms and tok_s are the training step's */
  if (t->val && tc->val_every > 0 && st->step % tc->val_every == 0 && (rc = val_loss_gang(t, &vl)))
    return engine_failed(o, rc, st->step);
  progress_phase(FT_PHASE_OPTIMIZER); /* the step's tail: its reports */

  if (t->rank == 0) {
    if (!o->quiet)
      printf("step %5" PRId64 "/%" PRId64 " | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | "
             "%8.0f tok/s%s",
             st->step, tc->steps, loss, lr, norm, ms, tok_s, isfinite(vl) ? "" : "\n");
    if (!o->quiet && isfinite(vl))
      printf(" | val %.6f\n", vl);
    fflush(stdout);
  }
  if (o->ctl) { /* every rank: its own compute time feeds straggler detection */
    ctl_send_step(o->ctl, st->step, t->rank == 0 ? loss : NAN, norm, tok_s, own_ms,
                  t->rank == 0 ? vl : NAN);
    ctl_set_step(o->ctl, st->step);
  }
  double stall_ms;
  code = checkpoint_step(t, loss, lr, norm, &stall_ms);
  if (code)
    return code;
  if (t->logf) {
    fprintf(t->logf,
            "{\"step\":%" PRId64 ",\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,"
            "\"tok_s\":%.1f,\"compute_ms\":%.3f",
            st->step, loss, lr, norm, ms, tok_s, own_ms);
    if (stall_ms >= 0) /* the time the snapshot held the training loop */
      fprintf(t->logf, ",\"ckpt_stall_ms\":%.3f,\"ckpt_bytes\":%zu", stall_ms,
              engine_snapshot_bytes(e));
    if (sdc_ms >= 0) /* the silent-data-corruption check's recomputation */
      fprintf(t->logf, ",\"sdc_ms\":%.3f", sdc_ms);
    if (fence_ms > 0) /* this step's update waited for the last snapshot's copy */
      fprintf(t->logf, ",\"ckpt_fence_ms\":%.3f", fence_ms);
    if (isfinite(vl))
      fprintf(t->logf, ",\"val_loss\":%.9g", vl);
    fprintf(t->logf, "}\n");
    fflush(t->logf);
  }
  if (ft_failpoint_at("crash_at_step", st->step)) {
    fprintf(stderr, "worker: failpoint crash_at_step=%" PRId64 "\n", st->step);
    raise(SIGKILL);
  }
  ft_failpoint_hang_here(FT_HANG_AFTER); /* hang_at_step=S without hang_in */
  int64_t min_ms; /* a pace no faster than this (a test's faults land mid-run) */
  if (ft_failpoint("min_step_ms", &min_ms) && min_ms > 0) {
    double left_s = (double)min_ms * 1e-3 - (double)(ft_now_ns() - t0) * 1e-9;
    if (left_s > 0)
      usleep((useconds_t)(left_s * 1e6));
  }
  return FT_EXIT_OK;
}

/* A gang's final checkpoint must be written: the earlier ones may have been
 * skipped, this one is retried while the store refuses it (the supervisor
 * waits), then the run ends with FT_EXIT_STORE. */
static int final_checkpoint(trainer *t) {
  const train_opts *o = t->o;
  train_state *st = &t->st;
  char why[512];
  progress_phase(FT_PHASE_CKPT_WRITE);
  int rc = t->final_rc ? t->final_rc : snap_drain_last(t->sn);
  snprintf(why, sizeof why, "%s", ft_err_detail());
  double give_up = ft_now_s() + final_retry_s(t->rf);
  while (rc && ft_now_s() < give_up) {
    struct timespec pause_ts = {1, 0};
    nanosleep(&pause_ts, NULL);
    rc = snap_take(t->sn, t->e, t->rank, t->world, st, t->config, t->last_loss, t->last_metrics, 1);
    if (rc) {
      snprintf(why, sizeof why, "%s", ft_err_detail());
      report_storage(o->ctl, st->step, rc, why);
    } else if ((rc = snap_drain_last(t->sn))) { /* reported by the committer */
      snprintf(why, sizeof why, "%s", ft_err_detail());
    }
  }
  if (!rc)
    return FT_EXIT_OK;
  char msg[FT_WIRE_MAX_DETAIL + 1];
  snprintf(msg, sizeof msg,
           "the final checkpoint (step %" PRId64 ") could not be written for %.0f s: %s", st->step,
           final_retry_s(t->rf), why);
  fprintf(stderr, "worker: %s\n", msg);
  ctl_send_fault(o->ctl, FT_FAULT_STORAGE, st->step, msg);
  return FT_EXIT_STORE;
}

/* After the last step: checkpoints durable (standalone) or the final one
 * written (gang; then the supervisor's STOP ends the process), the
 * validation loss, the export. */
static int phase_finish(trainer *t) {
  const train_opts *o = t->o;
  int rc;
  if (t->sn && !o->ctl)
    progress_phase(FT_PHASE_CKPT_WRITE);
  if (t->sn && !o->ctl && snap_drain(t->sn))
    return FT_EXIT_STORE;
  if (t->sn && o->ctl && t->st.step == t->tc->steps) {
    int code = final_checkpoint(t);
    if (code)
      return code;
  }
  if (o->ctl) {
    fflush(NULL);
    progress_phase(FT_PHASE_IDLE);
    ctl_wait_stop(o->ctl); /* the supervisor ends the process once it has committed */
    return TRAIN_REJOIN;   /* or, in process, a fault elsewhere sends this rank back */
  }
  const float *params = NULL; /* the full model, for export */
  if (o->export_path && (rc = engine_full_params(t->e, &params))) {
    fprintf(stderr, "worker: %s\n", ft_err_detail());
    return FT_EXIT_FAIL;
  }
  if (t->val) {
    double vl = val_loss(t->e, t->T, t->val, 8);
    if (!o->quiet && isfinite(vl))
      printf("val loss %.6f (after %" PRId64 " steps)\n", vl, t->st.step);
    if (t->logf && isfinite(vl))
      fprintf(t->logf, "{\"step\":%" PRId64 ",\"val_loss\":%.9g}\n", t->st.step, vl);
  }
  if (o->export_path) {
    rc = ft_gpt2_export(o->export_path, &t->d, params, NULL, NULL, 0);
    if (rc) {
      fprintf(stderr, "worker: --export %s\n", ft_err_detail());
      return FT_EXIT_FAIL;
    }
    if (!o->quiet)
      fprintf(stderr, "worker: wrote %s (Hugging Face GPT-2)\n", o->export_path);
  }
  return FT_EXIT_OK;
}

/* In-process restart (recovery.in_process): out of the generation in this
 * process. The comm goes first (peers blocked on this rank fail at once),
 * then the engine, once the checkpoint in flight has released its staging
 * buffer; the data files, the store, the watchdog, the control connection
 * and (on CUDA) the device context stay. Then the supervisor hears that
 * this rank is out (ctl_rejoin) and join_gang waits for the next ASSIGN. */
static int rejoin(trainer *t) {
  const train_opts *o = t->o;
  uint64_t t0 = ft_now_ns(), old = t->a.gen;
  char pci[32];
  if (t->wd && t->e && engine_device_pci(t->e, pci, sizeof pci) == FT_OK)
    wdog_set_gpu(t->wd, pci, NULL); /* its abort hook must not outlive the comm */
  ctl_set_comm(o->ctl, NULL);       /* nor the reader's */
  progress_generation(); /* idle, nothing counted: not in the next generation until its ASSIGN */
  comm_free(t->cm);
  t->cm = NULL;
  if (t->sn)
    snap_drain_last(t->sn); /* the engine's staging buffer is in the store's hands until then */
  /* the engine stays (phase_engine reuses it at the same world size): its
   * comm pointer dangles until then and nothing uses it */
  free(t->inp);
  free(t->tgt);
  t->inp = t->tgt = NULL;
  free(t->ck_config);
  t->ck_config = NULL;
  /* the state of a fresh start; the restore replaces it */
  free(t->st.skips);
  memset(&t->st, 0, sizeof t->st);
  sha256_hex(t->config, t->st.config_hash);
  t->st.rng = t->tc->seed;
  t->final_rc = 0;
  t->ms_restore = 0;
  t->last_loss = NAN;
  snprintf(t->last_metrics, sizeof t->last_metrics, "{}");
  int64_t delay_ms; /* failpoint: out late (the supervisor's rejoin deadline) */
  if (ft_failpoint("rejoin_delay_ms", &delay_ms) && delay_ms > 0)
    usleep((useconds_t)(delay_ms * 1000));
  uint64_t gen = ctl_rejoin(o->ctl);
  fprintf(stderr,
          "worker: node %u slot %u: left generation %" PRIu64 " in %.0f ms, in process; "
          "waiting for generation %" PRIu64 "\n",
          o->node, o->slot, old, (double)(ft_now_ns() - t0) * 1e-6, gen);
  return FT_EXIT_OK;
}

int train_main(const train_opts *o) {
  trainer t;
  trainer_init(&t, o);
  int code = phase_data(&t);
  if (!code)
    code = phase_gang(&t);
  for (;;) {
    if (!code)
      code = phase_engine(&t);
    if (!code)
      code = phase_restore(&t);
    if (!code)
      code = phase_prepare(&t);
    while (!code && t.st.step < t.tc->steps)
      code = train_step(&t);
    if (!code)
      code = phase_finish(&t);
    if (code != TRAIN_REJOIN)
      break;
    code = rejoin(&t);
    if (!code)
      code = join_gang(&t);
  }
  if (o->ctl && (code == FT_EXIT_USAGE || code == FT_EXIT_DATA)) {
    /* a configuration or data error: the supervisor fails the run with this
     * message if every worker reports the same (else it is this node's) */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ft_err_detail());
    ctl_send_fault(o->ctl, code == FT_EXIT_DATA ? FT_FAULT_DATA : FT_FAULT_CONFIG, t.st.step, msg);
  }
  trainer_free(&t);
  return code;
}
