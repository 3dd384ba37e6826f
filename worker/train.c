/*
 * train: the standalone training loop (see train.h).
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

#include <inttypes.h>
#include <math.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "ft_clock.h"
#include "ft_err.h"
#include "ft_failpoint.h"
#include "ft_gpt2.h"
#include "gpt2.h"
#include "kernels.h"
#include "snap.h"

double train_lr(const ft_train_cfg *t, int64_t s) {
  double lr = t->lr, min_lr = t->lr * t->min_lr_frac;
  if (s < t->warmup)
    return lr * (double)(s + 1) / (double)t->warmup;
  if (strcmp(t->schedule, "constant") == 0)
    return lr;
  int64_t span = t->steps - t->warmup;
  double p = span > 0 ? (double)(s - t->warmup) / (double)span : 1.0;
  if (p > 1.0)
    p = 1.0;
  if (strcmp(t->schedule, "linear") == 0)
    return lr - (lr - min_lr) * p;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p));
}

static void sha256_hex(const char *txt, char out[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(txt, strlen(txt), md, &n, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++)
    sprintf(out + 2 * i, "%02x", md[i]);
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
static double val_loss(gpt2 *m, const data_loader *val, int max_batches) {
  uint64_t nseq = data_num_sequences(val, m->T);
  int nb = (int)(nseq / m->B);
  if (nb > max_batches)
    nb = max_batches;
  if (nb <= 0)
    return NAN;
  int32_t *inp = malloc((size_t)m->B * m->T * sizeof *inp);
  int32_t *tgt = malloc((size_t)m->B * m->T * sizeof *tgt);
  double sum = 0;
  for (int i = 0; i < nb && inp && tgt; i++) {
    fill_batch(val, 0, i, 0, 1, m->B, m->T, inp, tgt);
    sum += gpt2_forward(m, inp, tgt);
  }
  free(inp);
  free(tgt);
  return sum / nb;
}

/* Loads an llm.c model file into m; dims must agree with the run file. */
static int init_from_llmc(gpt2 *m, const char *path) {
  ft_gpt2_dims fd;
  float *fp = NULL;
  int rc = ft_gpt2_read_llmc(path, &fd, &fp);
  if (rc)
    return rc;
  const ft_gpt2_dims *d = &m->d;
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
    float *dst = m->params + ft_gpt2_group_offset(d, g);
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
    return TRAIN_EXIT_OK;
  case FT_ECONFIG:
  case FT_EINVAL:
    return TRAIN_EXIT_USAGE;
  default:
    return TRAIN_EXIT_FAIL;
  }
}

int train_main(const train_opts *o) {
  const ft_runfile *rf = o->rf;
  const ft_train_cfg *tc = &rf->train;
  int code = TRAIN_EXIT_FAIL, rc;
  data_loader *train = NULL, *val = NULL;
  gpt2 *m = NULL;
  snap *sn = NULL;
  FILE *logf = NULL;
  char *config = NULL, *ck_config = NULL;
  int32_t *inp = NULL, *tgt = NULL;
  train_state st = {0};

  ft_gpt2_dims d = {.max_seq_len = rf->model.seq_len,
                    .vocab_size = rf->model.vocab_size,
                    .padded_vocab_size = ft_gpt2_pad_vocab(rf->model.vocab_size),
                    .n_layer = rf->model.n_layer,
                    .n_head = rf->model.n_head,
                    .channels = rf->model.n_embd};
  int B = tc->micro_batch, T = rf->model.seq_len, accum = tc->global_batch / tc->micro_batch;

  rc = data_open(rf->data.train, rf->model.vocab_size, &train);
  if (rc) {
    fprintf(stderr, "worker: data.train: %s\n", ft_err_detail());
    code = TRAIN_EXIT_DATA;
    goto out;
  }
  if (rf->data.val[0] && data_open(rf->data.val, rf->model.vocab_size, &val)) {
    fprintf(stderr, "worker: warning: data.val: %s (no validation loss)\n", ft_err_detail());
    val = NULL;
  }
  if (data_num_tokens(train) < (uint64_t)T + 1) {
    fprintf(stderr, "worker: data.train: %" PRIu64 " tokens, fewer than seq_len+1 = %d\n",
            data_num_tokens(train), T + 1);
    code = TRAIN_EXIT_DATA;
    goto out;
  }

  rc = gpt2_new(&d, B, T, &m);
  if (rc) {
    fprintf(stderr, "worker: %s\n", ft_err_detail());
    goto out;
  }
  config = ft_runfile_config_json(rf);
  sha256_hex(config, st.config_hash);
  st.rng = tc->seed;
  gpt2_init_weights(m, tc->seed);
  if (o->init_from) {
    rc = init_from_llmc(m, o->init_from);
    if (rc) {
      fprintf(stderr, "worker: --init-from: %s\n", ft_err_detail());
      code = exit_for(rc);
      goto out;
    }
  }

  if (o->store_uri) {
    int level = 1;
    if (sscanf(rf->checkpoint.codec, "zstd:%d", &level) != 1)
      level = 1;
    rc = snap_open(o->store_uri, rf->run, rf->checkpoint.chunk_mib, level, &sn);
    if (rc) {
      fprintf(stderr, "worker: checkpoint store %s: %s\n", o->store_uri, ft_err_detail());
      code = TRAIN_EXIT_STORE;
      goto out;
    }
    int64_t last;
    if (snap_latest(sn, &last) == FT_OK) {
      if (!o->resume) {
        fprintf(stderr,
                "worker: store %s already holds checkpoints of run '%s' (newest: step %" PRId64
                ").\n  Pass --resume to continue that run, or choose another --store or run name.\n",
                o->store_uri, rf->run, last);
        code = TRAIN_EXIT_USAGE;
        goto out;
      }
      rc = snap_restore(sn, last, m, &st, &ck_config);
      if (rc) {
        fprintf(stderr, "worker: restore of step %" PRId64 ": %s\n", last, ft_err_detail());
        code = TRAIN_EXIT_STORE;
        goto out;
      }
      char hash[65];
      sha256_hex(config, hash);
      if (strcmp(hash, st.config_hash) != 0)
        fprintf(stderr,
                "worker: warning: the run file's config differs from checkpoint %" PRId64
                "'s; the continued run will not match an uninterrupted one bit for bit\n",
                last);
      fprintf(stderr, "worker: resumed run '%s' from step %" PRId64 " (%s)\n", rf->run, st.step,
              o->store_uri);
    } else if (o->resume) {
      fprintf(stderr, "worker: no checkpoint of run '%s' in %s yet: starting from step 0\n",
              rf->run, o->store_uri);
    }
  }

  if (o->log_json) {
    logf = fopen(o->log_json, st.step > 0 ? "a" : "w");
    if (!logf) {
      fprintf(stderr, "worker: --log-json %s: cannot open for writing\n", o->log_json);
      code = TRAIN_EXIT_USAGE;
      goto out;
    }
  }

  inp = malloc((size_t)B * T * sizeof *inp);
  tgt = malloc((size_t)B * T * sizeof *tgt);
  if (!inp || !tgt) {
    fprintf(stderr, "worker: out of memory\n");
    goto out;
  }
  if (!o->quiet)
    fprintf(stderr,
            "worker: run '%s': %zu parameters, L=%d H=%d C=%d V=%d T=%d, global batch %d = "
            "%d x micro %d, %" PRId64 " steps\n",
            rf->run, ft_gpt2_num_params(&d) - (size_t)(d.padded_vocab_size - d.vocab_size) * d.channels,
            d.n_layer, d.n_head, d.channels, d.vocab_size, T, tc->global_batch, accum, B,
            tc->steps);

  while (st.step < tc->steps) {
    uint64_t t0 = ft_now_ns();
    double lr = train_lr(tc, st.step), loss = 0;
    gpt2_zero_grad(m);
    for (int mb = 0; mb < accum; mb++) {
      rc = fill_batch(train, st.seq, mb, 0, 1, B, T, inp, tgt);
      if (rc) {
        fprintf(stderr, "worker: %s\n", ft_err_detail());
        code = TRAIN_EXIT_DATA;
        goto out;
      }
      loss += gpt2_forward(m, inp, tgt);
      gpt2_backward(m, 1.0f / (float)accum);
    }
    loss /= accum;
    float norm = gpt2_grad_norm(m);
    if (!isfinite(loss) || !isfinite(norm)) {
      fprintf(stderr, "worker: step %" PRId64 ": non-finite loss %g or gradient norm %g\n",
              st.step + 1, loss, norm);
      goto out;
    }
    if (tc->grad_clip > 0 && norm > tc->grad_clip)
      k_scale(m->grads, (float)(tc->grad_clip / norm), m->nparams);
    gpt2_adamw(m, (float)lr, (float)tc->beta1, (float)tc->beta2, (float)tc->eps,
               (float)tc->weight_decay, st.step + 1);
    st.step++;
    st.seq += (uint64_t)tc->global_batch;
    double ms = (double)(ft_now_ns() - t0) * 1e-6;
    double tok_s = (double)tc->global_batch * T / (ms * 1e-3);

    if (!o->quiet)
      printf("step %5" PRId64 "/%" PRId64 " | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %8.0f "
             "tok/s\n",
             st.step, tc->steps, loss, lr, norm, ms, tok_s);
    if (logf) {
      fprintf(logf,
              "{\"step\":%" PRId64 ",\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,"
              "\"tok_s\":%.1f}\n",
              st.step, loss, lr, norm, ms, tok_s);
      fflush(logf);
    }
    fflush(stdout);

    if (sn && ((o->ckpt_every > 0 && st.step % o->ckpt_every == 0) || st.step == tc->steps)) {
      char metrics[160];
      snprintf(metrics, sizeof metrics, "{\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g}", loss, lr,
               norm);
      rc = snap_take(sn, m, &st, config, loss, metrics);
      if (rc) {
        fprintf(stderr, "worker: checkpoint at step %" PRId64 ": %s\n", st.step, ft_err_detail());
        code = TRAIN_EXIT_STORE;
        goto out;
      }
    }
    if (ft_failpoint_at("crash_at_step", st.step)) {
      fprintf(stderr, "worker: failpoint crash_at_step=%" PRId64 "\n", st.step);
      raise(SIGKILL);
    }
    if (ft_failpoint_at("hang_at_step", st.step)) {
      fprintf(stderr, "worker: failpoint hang_at_step=%" PRId64 ": hanging\n", st.step);
      for (;;)
        pause();
    }
  }

  if (sn) {
    rc = snap_drain(sn);
    if (rc) {
      code = TRAIN_EXIT_STORE;
      goto out;
    }
  }
  if (val) {
    double vl = val_loss(m, val, 8);
    if (!o->quiet && isfinite(vl))
      printf("val loss %.6f (after %" PRId64 " steps)\n", vl, st.step);
    if (logf && isfinite(vl))
      fprintf(logf, "{\"step\":%" PRId64 ",\"val_loss\":%.9g}\n", st.step, vl);
  }
  if (o->export_path) {
    rc = ft_gpt2_write_safetensors(o->export_path, &d, m->params, NULL, NULL, 0);
    if (rc) {
      fprintf(stderr, "worker: --export %s: %s\n", o->export_path, ft_err_detail());
      goto out;
    }
    if (!o->quiet)
      fprintf(stderr, "worker: wrote %s (Hugging Face GPT-2 safetensors)\n", o->export_path);
  }
  code = TRAIN_EXIT_OK;

out:
  if (logf)
    fclose(logf);
  snap_free(sn);
  free(inp);
  free(tgt);
  free(config);
  free(ck_config);
  gpt2_free(m);
  data_free(train);
  data_free(val);
  return code;
}
