/*
 * test_runfile: ft_runfile (common/ft_runfile.c) against the sample run files
 * in tests/data/runfiles/ (found through $FT_SRC).
 *
 * Good files must load with the values written in them (and defaults for
 * keys they leave out); each bad file must fail with exactly the line
 * "FILE:LINE:COL: KEY: problem" that a user would see, the line and column
 * pointing at the offending node of that file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ft_err.h"
#include "ft_gpt2.h"
#include "ft_runfile.h"

static char src_dir[1024], data_dir[1200];

static const char *data_path(const char *name) {
  static char buf[2048];
  snprintf(buf, sizeof buf, "%s/%s", data_dir, name);
  return buf;
}

static ft_runfile *load_ok(const char *name) {
  ft_runfile *rf = malloc(sizeof *rf);
  char err[1024] = "";
  assert_non_null(rf);
  int rc = ft_runfile_load(data_path(name), rf, err, sizeof err);
  if (rc)
    fail_msg("loading %s: rc %d: %s", name, rc, err);
  assert_string_equal(err, "");
  return rf;
}

/* ---- good files ------------------------------------------------------------ */

static void test_full_file(void **state) {
  ft_runfile *rf = load_ok("good_full.yaml");
  assert_string_equal(rf->path, data_path("good_full.yaml"));
  assert_string_equal(rf->run, "full-test.v2");
  assert_int_equal(rf->model.n_layer, 4);
  assert_int_equal(rf->model.n_head, 8);
  assert_int_equal(rf->model.n_embd, 128);
  assert_int_equal(rf->model.vocab_size, 512);
  assert_int_equal(rf->model.seq_len, 128);
  assert_int_equal(rf->train.steps, 1000);
  assert_int_equal(rf->train.global_batch, 96);
  assert_int_equal(rf->train.micro_batch, 4);
  assert_true(rf->train.lr == 3.0e-4);
  assert_int_equal(rf->train.warmup, 100);
  assert_int_equal(rf->train.schedule, FT_RF_SCHEDULE_LINEAR);
  assert_true(rf->train.min_lr_frac == 0.05);
  assert_true(rf->train.weight_decay == 0.01);
  assert_true(rf->train.grad_clip == 0.5);
  assert_true(rf->train.beta1 == 0.85);
  assert_true(rf->train.beta2 == 0.99);
  assert_true(rf->train.eps == 1.0e-6);
  assert_true(rf->train.seed == UINT64_MAX);
  assert_int_equal(rf->train.precision, FT_RF_PRECISION_BF16);
  /* relative to the run file's directory */
  char glob[2048];
  snprintf(glob, sizeof glob, "%s/data/full_train_*.bin", data_dir);
  assert_string_equal(rf->data.train, glob);
  assert_string_equal(rf->data.val, "");
  assert_int_equal(rf->nodes.count, 3);
  assert_int_equal(rf->nodes.workers_per_node, 8);
  assert_int_equal(rf->nodes.device, FT_RF_DEVICE_CUDA);
  assert_int_equal(rf->nodes.launcher, FT_RF_LAUNCHER_COMMAND);
  assert_string_equal(rf->nodes.command, "ssh {host} {argv}");
  assert_int_equal(rf->nodes.nhosts, 3);
  assert_string_equal(rf->nodes.hosts[0], "node-a");
  assert_string_equal(rf->nodes.hosts[1], "node-b.example.com");
  assert_string_equal(rf->nodes.hosts[2], "10.0.0.3");
  assert_int_equal(rf->checkpoint.every_steps, 0);
  assert_true(rf->checkpoint.every_seconds == 600);
  assert_string_equal(rf->checkpoint.store, "s3://bucket/runs/full");
  assert_int_equal(rf->checkpoint.keep_last, 3);
  assert_int_equal(rf->checkpoint.keep_every, 1000);
  assert_int_equal(rf->checkpoint.chunk_mib, 16);
  assert_int_equal(rf->checkpoint.codec_level, 19);
  assert_true(rf->watchdog.heartbeat_timeout_s == 5.5);
  assert_true(rf->watchdog.collective_timeout_s == 120);
  assert_int_equal(rf->watchdog.spike_window, 100);
  assert_true(rf->watchdog.spike_zscore == 4.5);
  assert_int_equal(rf->watchdog.spike_min_steps, 50);
  assert_string_equal(rf->watchdog.xid_source, "/var/log/kern.log");
  assert_int_equal(rf->recovery.max_restarts, 0);
  assert_int_equal(rf->recovery.on_loss_spike, FT_RF_SPIKE_WARN);
  assert_int_equal(rf->recovery.skip_batches, 10);
  assert_int_equal(rf->recovery.when_no_spares, FT_RF_NO_SPARES_FAIL);
  free(rf);
}

static void test_flow_style(void **state) {
  ft_runfile *rf = load_ok("good_flow.yaml");
  assert_string_equal(rf->run, "flow");
  assert_int_equal(rf->model.n_layer, 3);
  assert_int_equal(rf->model.n_head, 2);
  assert_int_equal(rf->model.n_embd, 32);
  assert_int_equal(rf->model.vocab_size, 100);
  assert_int_equal(rf->model.seq_len, 16);
  assert_int_equal(rf->train.steps, 50);
  assert_int_equal(rf->train.global_batch, 8);
  assert_int_equal(rf->train.micro_batch, 2);
  assert_true(rf->train.lr == 0.01);
  assert_int_equal(rf->train.warmup, 0);
  assert_int_equal(rf->train.schedule, FT_RF_SCHEDULE_CONSTANT);
  char glob[2048];
  snprintf(glob, sizeof glob, "%s/a_*.bin", data_dir);
  assert_string_equal(rf->data.train, glob);
  snprintf(glob, sizeof glob, "%s/b_*.bin", data_dir);
  assert_string_equal(rf->data.val, glob);
  assert_int_equal(rf->nodes.count, 1);
  assert_int_equal(rf->nodes.nhosts, 2);
  assert_string_equal(rf->nodes.hosts[0], "h1");
  assert_string_equal(rf->nodes.hosts[1], "h2");
  assert_int_equal(rf->watchdog.spike_window, 10);
  assert_true(rf->watchdog.spike_zscore == 3.0);
  assert_int_equal(rf->watchdog.spike_min_steps, 0);
  assert_int_equal(rf->recovery.on_loss_spike, FT_RF_SPIKE_ROLLBACK);
  assert_int_equal(rf->recovery.when_no_spares, FT_RF_NO_SPARES_WAIT);
  /* untouched keys keep their defaults */
  assert_int_equal(rf->checkpoint.keep_last, 5);
  assert_true(rf->train.beta2 == 0.95);
  free(rf);
}

/* A codec or store written quoted, or in flow style, is the same value. */
static void test_quoted_and_flow_strings(void **state) {
  ft_runfile *rf = load_ok("good_quoted.yaml");
  assert_int_equal(rf->checkpoint.codec_level, 7);
  assert_string_equal(rf->checkpoint.store, "local:quoted/store");
  free(rf);
  rf = load_ok("good_flow_codec.yaml");
  assert_int_equal(rf->checkpoint.codec_level, 3);
  assert_string_equal(rf->checkpoint.store, "local:flow");
  free(rf);
}

/* _parse reads exactly len bytes: a buffer without a NUL after it (ASan
 * sees any overread), a NUL inside it, and one too large. */
static void test_parse_buffer(void **state) {
  static const char text[] = "checkpoint: {codec: zstd:12, store: \"local:x\"}\nrun: r1";
  size_t n = sizeof text - 1;
  char *exact = malloc(n), err[512];
  ft_runfile *rf = malloc(sizeof *rf);
  memcpy(exact, text, n);
  assert_int_equal(ft_runfile_parse("mem.yaml", exact, n, rf, err, sizeof err), FT_OK);
  assert_int_equal(rf->checkpoint.codec_level, 12);
  assert_string_equal(rf->checkpoint.store, "local:x");
  assert_string_equal(rf->run, "r1");
  assert_string_equal(rf->path, "mem.yaml");
  /* the first 2 bytes of "r1" only: the run name is "r" */
  assert_int_equal(ft_runfile_parse("mem.yaml", exact, n - 1, rf, err, sizeof err), FT_OK);
  assert_string_equal(rf->run, "r");
  free(exact);

  static const char nul[] = "train:\n  steps: 40\nrun: ab\0cd\n";
  assert_int_equal(ft_runfile_parse("nul.yaml", nul, sizeof nul - 1, rf, err, sizeof err),
                   FT_ECONFIG);
  assert_string_equal(err, "nul.yaml:3:8: syntax error: a NUL byte; a run file is text");

  /* libfyaml loops forever on this one (found by tests/fuzz/fuzz_runfile) */
  static const char hang[] = "%  \xb6\x16";
  assert_int_equal(ft_runfile_parse("h.yaml", hang, sizeof hang - 1, rf, err, sizeof err),
                   FT_ECONFIG);
  assert_string_equal(
      err, "h.yaml:1:4: syntax error: invalid UTF-8 (byte 0xb6); a run file is UTF-8 text");
  static const char ctl[] = "run: x\ntrain: {steps: 4\x1b}\n";
  assert_int_equal(ft_runfile_parse("c.yaml", ctl, sizeof ctl - 1, rf, err, sizeof err),
                   FT_ECONFIG);
  assert_string_equal(err,
                      "c.yaml:2:17: syntax error: a control character (0x1b); a run file is text");
  /* UTF-8 in comments and strings is text */
  static const char utf8[] = "# caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n"
                             "data: {val: \"d\xc3\xa9j\xc3\xa0/*.bin\"}\r\n";
  assert_int_equal(ft_runfile_parse("u.yaml", utf8, sizeof utf8 - 1, rf, err, sizeof err), FT_OK);
  assert_string_equal(rf->data.val, "d\xc3\xa9j\xc3\xa0/*.bin");
  /* overlong, surrogate, truncated */
  static const char *const bad8[] = {"run: \xc0\xafx", "run: \xed\xa0\x80", "run: \xe2\x82",
                                     "run: \xf5\x80\x80\x80"};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(ft_runfile_parse("b.yaml", bad8[i], strlen(bad8[i]), rf, err, sizeof err),
                     FT_ECONFIG);
    assert_non_null(strstr(err, "b.yaml:1:6: syntax error: invalid UTF-8"));
  }

  size_t big = (size_t)FT_RUNFILE_MAX_BYTES + 1;
  char *huge = malloc(big);
  memset(huge, '#', big);
  assert_int_equal(ft_runfile_parse("big.yaml", huge, big, rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "big.yaml: (file): 4194305 bytes is too large for a run file (at most "
                           "4194304)");
  free(huge);
  assert_int_equal(ft_runfile_parse("empty.yaml", NULL, 0, rf, err, sizeof err), FT_OK);
  /* watchdog.progress_timeout_s: auto, a number, and the file's position of a bad one */
  static const char pa[] = "watchdog:\n  progress_timeout_s: auto\n";
  assert_int_equal(ft_runfile_parse("p.yaml", pa, sizeof pa - 1, rf, err, sizeof err), FT_OK);
  assert_true(rf->watchdog.progress_timeout_s == 0);
  static const char pn[] = "watchdog:\n  progress_timeout_s: 7.5\n";
  assert_int_equal(ft_runfile_parse("p.yaml", pn, sizeof pn - 1, rf, err, sizeof err), FT_OK);
  assert_true(rf->watchdog.progress_timeout_s == 7.5);
  static const char p0[] = "watchdog:\n  progress_timeout_s: 0\n";
  assert_int_equal(ft_runfile_parse("p.yaml", p0, sizeof p0 - 1, rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "p.yaml:2:23: watchdog.progress_timeout_s: must be > 0, got 0");
  static const char pw[] = "watchdog:\n  progress_timeout_s: never\n";
  assert_int_equal(ft_runfile_parse("p.yaml", pw, sizeof pw - 1, rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "p.yaml:2:23: watchdog.progress_timeout_s: expected a number or auto, "
                           "got a string ('never')");
  free(rf);
}

/* A model that cannot fit in this machine's memory is refused up front with
 * the estimate; the default model's estimate is its real size. */
static void test_memory_estimate(void **state) {
  char err[1024], want[4096];
  ft_runfile *rf = malloc(sizeof *rf);
  assert_int_equal(ft_runfile_load(data_path("bad_memory.yaml"), rf, err, sizeof err), FT_OK);
  assert_int_equal(ft_runfile_validate(rf, err, sizeof err), FT_ECONFIG);
  snprintf(want, sizeof want,
           "%s:5:11: model.n_embd: the model needs about 9362.1 GiB (2.062e+11 parameters: "
           "weights, gradients and AdamW moments, plus activations at micro_batch 8 x seq_len "
           "64: 4681.1 GiB per rank, 2 ranks on this machine), more than this machine's ",
           data_path("bad_memory.yaml"));
  if (strncmp(err, want, strlen(want)) != 0)
    fail_msg("got:  %s\nwant: %s...", err, want);
  assert_non_null(strstr(err + strlen(want), " GiB"));
  /* a world of its own runs all of its ranks here, whatever the launcher */
  ft_runfile_set(rf, "nodes.launcher", "ssh", err, sizeof err);
  assert_int_equal(ft_runfile_validate(rf, err, sizeof err), FT_OK);
  assert_int_equal(ft_runfile_validate_world(rf, 1, "worker --standalone", err, sizeof err),
                   FT_ECONFIG);
  assert_non_null(strstr(err, "GiB per rank, 1 ranks on this machine)"));
  ft_runfile_set(rf, "nodes.launcher", "local", err, sizeof err);

  /* the same model on the command launcher (other machines) or on CUDA is
   * not measured against this machine */
  ft_runfile_set(rf, "model.n_layer", "64", err, sizeof err);
  ft_runfile_set(rf, "model.n_head", "16", err, sizeof err);
  ft_runfile_set(rf, "model.n_embd", "16384", err, sizeof err);
  assert_int_equal(ft_runfile_validate(rf, err, sizeof err), FT_ECONFIG);
  assert_non_null(strstr(err, "model.n_embd: the model needs about 9362.1 GiB"));
  ft_runfile_set(rf, "nodes.device", "cuda", err, sizeof err);
  assert_int_equal(ft_runfile_validate(rf, err, sizeof err), FT_OK);

  ft_runfile_defaults(rf);
  double params = 0, bytes = ft_runfile_mem_estimate(rf, &params);
  ft_gpt2_dims d = {.max_seq_len = 64,
                    .vocab_size = 256,
                    .padded_vocab_size = 256,
                    .n_layer = 2,
                    .n_head = 4,
                    .channels = 64};
  assert_true(params == (double)ft_gpt2_num_params(&d));
  /* 4 full fp32 copies + 4 half shards (world 2) of 120576 parameters, and
   * two arenas of activations */
  assert_true(bytes > 4.0 * 6 * params && bytes < 64.0 * 1024 * 1024);
  free(rf);
}

/* A relative data glob written in a run file is relative to the file's
 * directory; absolute globs, defaults and --set values are left alone, and
 * a run file in the current directory keeps its globs as written. */
static void test_data_globs_relative_to_file(void **state) {
  char err[1024], cwd[1024];
  ft_runfile *rf = malloc(sizeof *rf);
  static const char text[] = "data: {train: /abs/x_*.bin, val: rel/v_*.bin}\n";
  assert_int_equal(ft_runfile_parse("/some/dir/r.yaml", text, sizeof text - 1, rf, err, sizeof err),
                   FT_OK);
  assert_string_equal(rf->data.train, "/abs/x_*.bin");
  assert_string_equal(rf->data.val, "/some/dir/rel/v_*.bin");
  assert_int_equal(ft_runfile_parse("/r.yaml", text, sizeof text - 1, rf, err, sizeof err), FT_OK);
  assert_string_equal(rf->data.val, "/rel/v_*.bin");
  assert_int_equal(ft_runfile_parse("runs/r.yaml", text, sizeof text - 1, rf, err, sizeof err),
                   FT_OK);
  assert_string_equal(rf->data.val, "runs/rel/v_*.bin");
  assert_int_equal(ft_runfile_parse("r.yaml", text, sizeof text - 1, rf, err, sizeof err), FT_OK);
  assert_string_equal(rf->data.val, "rel/v_*.bin");

  /* not written in the file: the defaults, and overrides, stay as they are */
  static const char other[] = "run: x\n";
  assert_int_equal(ft_runfile_parse("runs/r.yaml", other, sizeof other - 1, rf, err, sizeof err),
                   FT_OK);
  assert_string_equal(rf->data.train, "data/synth_train_*.bin");
  assert_string_equal(rf->data.val, "data/synth_val_*.bin");
  assert_int_equal(ft_runfile_set(rf, "data.train", "mine/*.bin", err, sizeof err), FT_OK);
  assert_string_equal(rf->data.train, "mine/*.bin");

  /* too long once under the directory: refused, naming the key */
  char *longtext = malloc(1100);
  snprintf(longtext, 1100, "data:\n  train: %01000d\n", 0);
  char dir[200];
  memset(dir, 'd', 150);
  strcpy(dir + 150, "/r.yaml");
  assert_int_equal(ft_runfile_parse(dir, longtext, strlen(longtext), rf, err, sizeof err),
                   FT_ECONFIG);
  assert_non_null(strstr(err, "/r.yaml:2:10: data.train: '0000"));
  assert_non_null(strstr(err, "' under the run file's directory is too long (at most 1023 bytes)"));
  free(longtext);

  /* a run file named from its own directory */
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(data_dir), 0);
  int rc = ft_runfile_load("good_flow.yaml", rf, err, sizeof err);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(rc, FT_OK);
  assert_string_equal(rf->data.train, "a_*.bin");
  free(rf);
}

static void test_defaults(void **state) {
  ft_runfile d;
  ft_runfile_defaults(&d);
  assert_string_equal(d.path, "");
  assert_string_equal(d.run, "gpt2-tiny");
  assert_int_equal(d.model.n_layer, 2);
  assert_int_equal(d.model.n_head, 4);
  assert_int_equal(d.model.n_embd, 64);
  assert_int_equal(d.model.vocab_size, 256);
  assert_int_equal(d.model.seq_len, 64);
  assert_int_equal(d.train.steps, 300);
  assert_int_equal(d.train.global_batch, 16);
  assert_int_equal(d.train.micro_batch, 8);
  assert_true(d.train.lr == 1e-3);
  assert_int_equal(d.train.warmup, 20);
  assert_int_equal(d.train.schedule, FT_RF_SCHEDULE_COSINE);
  assert_true(d.train.min_lr_frac == 0.1);
  assert_true(d.train.weight_decay == 0.1);
  assert_true(d.train.grad_clip == 1.0);
  assert_true(d.train.beta1 == 0.9);
  assert_true(d.train.beta2 == 0.95);
  assert_true(d.train.eps == 1e-8);
  assert_true(d.train.seed == 1337);
  assert_int_equal(d.train.precision, FT_RF_PRECISION_FP32);
  assert_string_equal(d.data.train, "data/synth_train_*.bin");
  assert_string_equal(d.data.val, "data/synth_val_*.bin");
  assert_int_equal(d.nodes.count, 2);
  assert_int_equal(d.nodes.workers_per_node, 1);
  assert_int_equal(d.nodes.device, FT_RF_DEVICE_CPU);
  assert_int_equal(d.nodes.launcher, FT_RF_LAUNCHER_LOCAL);
  assert_string_equal(d.nodes.command, "");
  assert_int_equal(d.nodes.nhosts, 0);
  assert_int_equal(d.checkpoint.every_steps, 25);
  assert_true(d.checkpoint.every_seconds == 0);
  assert_string_equal(d.checkpoint.store, "local:state/store");
  assert_int_equal(d.checkpoint.keep_last, 5);
  assert_int_equal(d.checkpoint.keep_every, 0);
  assert_int_equal(d.checkpoint.chunk_mib, 4);
  assert_int_equal(d.checkpoint.codec_level, 1);
  assert_true(d.watchdog.heartbeat_timeout_s == 10);
  assert_true(d.watchdog.collective_timeout_s == 30);
  assert_int_equal(d.watchdog.spike_window, 50);
  assert_true(d.watchdog.spike_zscore == 6.0);
  assert_int_equal(d.watchdog.spike_min_steps, 20);
  assert_string_equal(d.watchdog.xid_source, "/dev/kmsg");
  assert_int_equal(d.recovery.max_restarts, 20);
  assert_int_equal(d.recovery.on_loss_spike, FT_RF_SPIKE_ROLLBACK_AND_SKIP);
  assert_int_equal(d.recovery.skip_batches, 200);
  assert_int_equal(d.recovery.when_no_spares, FT_RF_NO_SPARES_SHRINK);
  char err[256];
  assert_int_equal(ft_runfile_validate(&d, err, sizeof err), FT_OK);

  /* A file with only comments gives exactly the defaults. */
  ft_runfile *rf = load_ok("good_empty.yaml");
  snprintf(d.path, sizeof d.path, "%.1000s", data_path("good_empty.yaml"));
  assert_memory_equal(rf, &d, sizeof d);
  free(rf);

  /* A partial file changes only what it names. */
  rf = load_ok("good_partial.yaml");
  ft_runfile_defaults(&d);
  snprintf(d.path, sizeof d.path, "%.1000s", data_path("good_partial.yaml"));
  d.train.steps = 40;
  d.checkpoint.keep_last = 2;
  /* and remembers where: those two keys, nothing else */
  int written = 0;
  for (int i = 0; i < FT_RUNFILE_NKEYS; i++)
    written += rf->from[i].line > 0;
  assert_int_equal(written, 2);
  memcpy(d.from, rf->from, sizeof d.from);
  assert_memory_equal(rf, &d, sizeof d);
  free(rf);
}

static void test_demo_example(void **state) {
  /* The shipped example must load (it is someone else's file; read only). */
  char path[2048], err[1024];
  ft_runfile *rf = malloc(sizeof *rf);
  snprintf(path, sizeof path, "%s/examples/demo.yaml", src_dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    free(rf);
    skip();
  }
  fclose(f);
  int rc = ft_runfile_load(path, rf, err, sizeof err);
  if (rc)
    fail_msg("%s", err);
  assert_string_equal(rf->run, "gpt2-tiny");
  free(rf);
}

/* ---- bad files ---------------------------------------------------------------- */

struct bad_case {
  const char *file;
  int line, col;
  const char *key;
  const char *problem;
};

static const struct bad_case BAD[] = {
    {"bad_unknown_key.yaml", 5, 3, "train.micro_bacth", "unknown key, did you mean 'micro_batch'?"},
    {"bad_unknown_misplaced.yaml", 2, 1, "steps", "unknown key, did you mean 'train.steps'?"},
    {"bad_unknown_nosuggest.yaml", 3, 3, "model.flux_capacitor", "unknown key"},
    {"bad_unknown_dotted.yaml", 2, 1, "train.steps",
     "unknown key; dotted keys are not expanded, nest it instead"},
    {"bad_type_string.yaml", 2, 10, "train.steps", "expected an integer, got a string ('lots')"},
    {"bad_type_float.yaml", 1, 23, "train.global_batch", "expected an integer, got a float (1.5)"},
    {"bad_type_mapping.yaml", 3, 7, "train.lr", "expected a number, got a mapping"},
    {"bad_type_block_mapping.yaml", 3, 5, "data.train", "expected a string, got a mapping"},
    {"bad_type_quoted.yaml", 2, 12, "model.n_layer", "expected an integer, got a string ('2')"},
    {"bad_type_bool.yaml", 2, 14, "train.grad_clip", "expected a number, got a boolean (true)"},
    {"bad_type_null.yaml", 2, 3, "train.steps", "expected an integer, got null"},
    {"bad_section_scalar.yaml", 2, 11, "watchdog", "expected a mapping, got an integer (5)"},
    {"bad_range_zero.yaml", 2, 16, "train.micro_batch", "must be >= 1, got 0"},
    {"bad_range_negative.yaml", 1, 16, "nodes.count", "must be >= 1, got -1"},
    {"bad_range_lr.yaml", 2, 7, "train.lr", "must be > 0, got 0"},
    {"bad_range_zscore.yaml", 2, 36, "watchdog.loss_spike.zscore", "must be > 0, got 0"},
    {"bad_word_schedule.yaml", 2, 13, "train.schedule",
     "'step' is not one of cosine, linear, constant"},
    {"bad_word_precision.yaml", 1, 20, "train.precision", "'fp16' is not one of fp32, bf16"},
    {"bad_word_device.yaml", 2, 11, "nodes.device", "'tpu' is not one of cpu, cuda"},
    {"bad_word_launcher.yaml", 2, 13, "nodes.launcher",
     "'pbs' is not one of local, command, ssh, slurm"},
    {"bad_codec_level.yaml", 2, 10, "checkpoint.codec",
     "'zstd:20' is not a known codec (expected zstd:LEVEL, LEVEL 1..19)"},
    {"bad_codec_name.yaml", 2, 10, "checkpoint.codec",
     "'lz4' is not a known codec (expected zstd:LEVEL, LEVEL 1..19)"},
    {"bad_word_on_loss_spike.yaml", 2, 18, "recovery.on_loss_spike",
     "'ignore' is not one of rollback, rollback_and_skip, warn"},
    {"bad_word_when_no_spares.yaml", 2, 19, "recovery.when_no_spares",
     "'panic' is not one of shrink, wait, fail"},
    {"bad_store_scheme.yaml", 2, 10, "checkpoint.store",
     "'gs://bucket/ckpt' has an unknown store scheme (expected local:DIR or s3://BUCKET/PREFIX)"},
    {"bad_syntax.yaml", 3, 7, "syntax error", "plain scalar cannot start with '@'"},
    {"bad_duplicate.yaml", 5, 3, "train.steps", "duplicate key (first at line 3, column 3)"},
    {"bad_multidoc.yaml", 3, 1, "syntax error",
     "a run file holds one YAML document, found a second"},
    {"bad_toplevel.yaml", 1, 1, "(top level)", "expected a mapping of keys, got a sequence"},
    {"bad_hosts_element.yaml", 2, 14, "nodes.hosts", "expected a host name, got a mapping"},
    {"bad_hosts_type.yaml", 2, 10, "nodes.hosts",
     "expected a sequence of host names, got a string ('node1')"},
    {"bad_alias.yaml", 3, 11, "train.warmup", "aliases are not supported in a run file"},
    {"bad_cross_micro.yaml", 4, 16, "train.micro_batch",
     "12 x the world size 2 (nodes.count 2 x nodes.workers_per_node 1) does not divide "
     "train.global_batch (32); micro_batch 8 would [nodes.count: default, "
     "nodes.workers_per_node: default]"},
    {"bad_cross_global.yaml", 2, 17, "train.global_batch",
     "20 is not a multiple of train.micro_batch (8) x the world size 2 (nodes.count 2 x "
     "nodes.workers_per_node 1); 32 would (or micro_batch 5) [train.micro_batch: default, "
     "nodes.count: default, nodes.workers_per_node: default]"},
    /* the worker used to pick micro-batch 6 silently at run time */
    {"bad_cross_world_micro.yaml", 4, 16, "train.micro_batch",
     "8 x the world size 2 (nodes.count 2 x nodes.workers_per_node 1) does not divide "
     "train.global_batch (24); micro_batch 6 would [nodes.count: default, "
     "nodes.workers_per_node: default]"},
    {"bad_cross_world_global.yaml", 4, 17, "train.global_batch",
     "18 is not a multiple of the world size 4 (nodes.count 4 x nodes.workers_per_node 1); 16 "
     "or 20 would be [nodes.workers_per_node: default]"},
    {"bad_store_quoted_empty.yaml", 2, 10, "checkpoint.store",
     "'local:' names no directory (expected local:DIR)"},
    {"bad_range_workers.yaml", 2, 21, "nodes.workers_per_node", "must be <= 256, got 2147483647"},
    {"bad_range_layers.yaml", 2, 12, "model.n_layer", "must be <= 1024, got 2147483647"},
    {"bad_range_global_huge.yaml", 2, 17, "train.global_batch",
     "must be <= 1048576, got 2147483640"},
    {"bad_nul.yaml", 1, 9, "syntax error", "a NUL byte; a run file is text"},
    {"bad_tokens.yaml", 4, 17, "train.global_batch",
     "train.global_batch 1048576 x model.seq_len 4096 is 4294967296 tokens per step, more than "
     "2147483647"},
    {"bad_params.yaml", 4, 11, "model.n_embd",
     "the model has 1.319e+13 parameters, more than 1e+12"},
    {"bad_cross_heads.yaml", 1, 17, "model.n_head",
     "5 does not divide model.n_embd (64) [model.n_embd: default]"},
    {"bad_cross_embd.yaml", 2, 11, "model.n_embd",
     "66 is not a multiple of model.n_head (4) [model.n_head: default]"},
    {"bad_cross_launcher.yaml", 1, 19, "nodes.launcher",
     "'command' needs nodes.command with {argv} in it [nodes.command: default]"},
    {"bad_cross_command.yaml", 3, 12, "nodes.command",
     "launcher 'command' needs a command containing {argv}, got 'ssh {host}'"},
};

static void test_bad_files(void **state) {
  int failures = 0;
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    const struct bad_case *b = &BAD[i];
    char want[4096], err[1024] = "";
    ft_runfile *rf = malloc(sizeof *rf);
    assert_non_null(rf);
    const char *path = data_path(b->file);
    snprintf(want, sizeof want, "%s:%d:%d: %s: %s", path, b->line, b->col, b->key, b->problem);
    int rc = ft_runfile_load(path, rf, err, sizeof err);
    if (rc == FT_OK) /* across keys: what a program runs after its overrides */
      rc = ft_runfile_validate(rf, err, sizeof err);
    if (rc != FT_ECONFIG || strcmp(err, want) != 0) {
      print_error("%s: rc %d\n  got:  %s\n  want: %s\n", b->file, rc, err, want);
      failures++;
    }
    /* the same text is the thread's error detail */
    if (rc == FT_ECONFIG && strcmp(ft_err_detail(), err) != 0) {
      print_error("%s: ft_err_detail differs: %s\n", b->file, ft_err_detail());
      failures++;
    }
    free(rf);
  }
  assert_int_equal(failures, 0);
}

static void test_missing_file(void **state) {
  char err[1024], want[4096];
  ft_runfile *rf = malloc(sizeof *rf);
  const char *path = data_path("does_not_exist.yaml");
  assert_int_equal(ft_runfile_load(path, rf, err, sizeof err), FT_EIO);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
  assert_string_equal(err, want);
  /* a directory is not a run file either */
  assert_int_equal(ft_runfile_load(data_dir, rf, err, sizeof err), FT_EIO);
  assert_non_null(strstr(err, "is a directory"));
  free(rf);
}

static void test_err_buffer_small(void **state) {
  /* a tiny or absent error buffer must not overflow or crash */
  char err[8];
  ft_runfile *rf = malloc(sizeof *rf);
  assert_int_equal(ft_runfile_load(data_path("bad_unknown_key.yaml"), rf, err, sizeof err),
                   FT_ECONFIG);
  assert_int_equal(strlen(err), 7);
  assert_int_equal(ft_runfile_load(data_path("bad_syntax.yaml"), rf, NULL, 0), FT_ECONFIG);
  free(rf);
}

/* ---- validate ------------------------------------------------------------------ */

static void test_validate(void **state) {
  ft_runfile rf;
  char err[512];
  ft_runfile_defaults(&rf);
  rf.model.n_head = 3;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "model.n_head: 3 does not divide model.n_embd (64)");

  ft_runfile_defaults(&rf);
  rf.train.micro_batch = 5;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "train.micro_batch: 5 x the world size 2 (nodes.count 2 x "
                           "nodes.workers_per_node 1) does not divide train.global_batch (16); "
                           "micro_batch 4 would");
  rf.nodes.count = 1;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "train.micro_batch: 5 does not divide train.global_batch (16); 4 would");

  /* A warmup longer than the run is allowed: short smoke runs keep the
   * file's warmup, and the lr simply is still ramping when they end. */
  ft_runfile_defaults(&rf);
  rf.train.warmup = 301;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);

  ft_runfile_defaults(&rf);
  rf.nodes.launcher = FT_RF_LAUNCHER_COMMAND;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(
      err, "nodes.command: launcher 'command' needs a command containing {argv}, got ''");
  strcpy(rf.nodes.command, "srun -w {host} {argv}");
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);

  /* per-field rules apply to values written straight into the struct */
  ft_runfile_defaults(&rf);
  rf.train.schedule = (ft_rf_schedule)3;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "train.schedule: '3' is not one of cosine, linear, constant");
  ft_runfile_defaults(&rf);
  rf.checkpoint.codec_level = 20;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(
      err, "checkpoint.codec: 'zstd:20' is not a known codec (expected zstd:LEVEL, LEVEL 1..19)");
  ft_runfile_defaults(&rf);
  strcpy(rf.checkpoint.store, "ftp://x");
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_non_null(strstr(err, "checkpoint.store: 'ftp://x' has an unknown store scheme"));
  ft_runfile_defaults(&rf);
  rf.watchdog.spike_zscore = -1;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "watchdog.loss_spike.zscore: must be > 0, got -1");
  /* products are computed without overflow and printed as they are */
  ft_runfile_defaults(&rf);
  rf.nodes.count = 256;
  rf.nodes.workers_per_node = 256;
  rf.train.micro_batch = 1;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "train.global_batch: 16 is not a multiple of the world size 65536 "
                           "(nodes.count 256 x nodes.workers_per_node 256); 65536 would be");
  rf.train.global_batch = 65536;
  rf.nodes.device = FT_RF_DEVICE_CUDA; /* 65536 CPU ranks would not fit on this machine */
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);
  rf.nodes.workers_per_node = INT32_MAX; /* written straight into the struct */
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "nodes.workers_per_node: must be <= 256, got 2147483647");

  ft_runfile_defaults(&rf);
  rf.nodes.workers_per_node = 0;
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "nodes.workers_per_node: must be >= 1, got 0");
}

/* ---- set ----------------------------------------------------------------------- */

static void set_ok(ft_runfile *rf, const char *k, const char *v) {
  char err[512] = "";
  int rc = ft_runfile_set(rf, k, v, err, sizeof err);
  if (rc)
    fail_msg("set %s=%s: %s", k, v, err);
}

static void set_bad(ft_runfile *rf, const char *k, const char *v, const char *want) {
  char err[512] = "";
  ft_runfile before = *rf;
  int rc = ft_runfile_set(rf, k, v, err, sizeof err);
  if (rc != FT_ECONFIG || strcmp(err, want) != 0)
    fail_msg("set %s=%s: rc %d\n  got:  %s\n  want: %s", k, v, rc, err, want);
  assert_memory_equal(&before, rf, sizeof before); /* unchanged on error */
}

/* Checks across keys judge the merged result, for the program's world, and
 * say where each key involved came from. */
static void test_merged(void **state) {
  static const char text[] = "train: {global_batch: 4, micro_batch: 4}\n";
  ft_runfile rf;
  char err[1024];
  assert_int_equal(ft_runfile_parse("m.yaml", text, sizeof text - 1, &rf, err, sizeof err), FT_OK);
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "m.yaml:1:39: train.micro_batch: 4 x the world size 2 (nodes.count 2 x "
                           "nodes.workers_per_node 1) does not divide train.global_batch (4); "
                           "micro_batch 2 would [nodes.count: default, nodes.workers_per_node: "
                           "default]");
  /* worker --standalone: a world of 1 */
  assert_int_equal(ft_runfile_validate_world(&rf, 1, "worker --standalone", err, sizeof err),
                   FT_OK);
  /* --set nodes.count=1 repairs it; 3 breaks it again, said to be the --set */
  set_ok(&rf, "nodes.count", "1");
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);
  set_ok(&rf, "nodes.count", "3");
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "m.yaml:1:23: train.global_batch: 4 is not a multiple of the world "
                           "size 3 (nodes.count 3 x nodes.workers_per_node 1); 3 or 6 would be "
                           "[nodes.count: --set, nodes.workers_per_node: default]");
  /* a program's own world of 3: its name, no nodes keys */
  assert_int_equal(ft_runfile_validate_world(&rf, 3, "3 ranks", err, sizeof err), FT_ECONFIG);
  assert_string_equal(err, "m.yaml:1:23: train.global_batch: 4 is not a multiple of the world "
                           "size 3 (3 ranks); 3 or 6 would be");
  /* the blamed key from --set: no position, its origin at the end */
  set_ok(&rf, "train.micro_batch", "3");
  assert_int_equal(ft_runfile_validate_world(&rf, 1, "worker --standalone", err, sizeof err),
                   FT_ECONFIG);
  assert_string_equal(err, "train.micro_batch: 3 does not divide train.global_batch (4); 2 would "
                           "[train.micro_batch: --set]");
}

static void test_set(void **state) {
  ft_runfile rf;
  char err[512];
  ft_runfile_defaults(&rf);
  set_ok(&rf, "train.steps", "40");
  assert_int_equal(rf.train.steps, 40);
  set_ok(&rf, "train.lr", "3e-4");
  assert_true(rf.train.lr == 3e-4);
  set_ok(&rf, "train.lr", "2");
  assert_true(rf.train.lr == 2.0);
  set_ok(&rf, "train.seed", "18446744073709551615");
  assert_true(rf.train.seed == UINT64_MAX);
  set_ok(&rf, "train.schedule", "linear");
  assert_int_equal(rf.train.schedule, FT_RF_SCHEDULE_LINEAR);
  set_ok(&rf, "nodes.hosts", "a, b ,c");
  assert_int_equal(rf.nodes.nhosts, 3);
  assert_string_equal(rf.nodes.hosts[0], "a");
  assert_string_equal(rf.nodes.hosts[1], "b");
  assert_string_equal(rf.nodes.hosts[2], "c");
  set_ok(&rf, "nodes.hosts", "");
  assert_int_equal(rf.nodes.nhosts, 0);
  set_ok(&rf, "data.val", "");
  assert_string_equal(rf.data.val, "");
  set_ok(&rf, "checkpoint.store", "s3://bucket/prefix");
  assert_string_equal(rf.checkpoint.store, "s3://bucket/prefix");
  set_ok(&rf, "watchdog.loss_spike.window", "7");
  assert_int_equal(rf.watchdog.spike_window, 7);
  set_ok(&rf, "run", "my-run_2");
  assert_string_equal(rf.run, "my-run_2");
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);

  ft_runfile_defaults(&rf);
  set_bad(&rf, "train.steps", "forty", "train.steps: expected an integer, got a string ('forty')");
  set_bad(&rf, "train.steps", "0", "train.steps: must be >= 1, got 0");
  set_bad(&rf, "train.steps", "1e3", "train.steps: expected an integer, got a float (1e3)");
  set_bad(&rf, "train.micro_batch", "2.5",
          "train.micro_batch: expected an integer, got a float (2.5)");
  set_bad(&rf, "model.n_layer", "99999999999", "model.n_layer: must be <= 1024, got 99999999999");
  set_bad(&rf, "nodes.workers_per_node", "2147483647",
          "nodes.workers_per_node: must be <= 256, got 2147483647");
  set_bad(&rf, "model.n_embd", "2147483647", "model.n_embd: must be <= 32768, got 2147483647");
  set_bad(&rf, "model.vocab_size", "65537", "model.vocab_size: must be <= 65536, got 65537");
  set_bad(&rf, "train.steps", "1000000000001",
          "train.steps: must be <= 1000000000000, got 1000000000001");
  set_bad(&rf, "watchdog.collective_timeout_s", "1e9",
          "watchdog.collective_timeout_s: must be <= 86400, got 1e+09");
  set_bad(&rf, "train.lr", "1e300", "train.lr: must be <= 10, got 1e+300");
  /* watchdog.progress_timeout_s: auto (0) or a number > 0 */
  assert_true(rf.watchdog.progress_timeout_s == 0);
  set_ok(&rf, "watchdog.progress_timeout_s", "5");
  assert_true(rf.watchdog.progress_timeout_s == 5);
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);
  set_ok(&rf, "watchdog.progress_timeout_s", "auto");
  assert_true(rf.watchdog.progress_timeout_s == 0);
  assert_int_equal(ft_runfile_validate(&rf, err, sizeof err), FT_OK);
  set_bad(&rf, "watchdog.progress_timeout_s", "0",
          "watchdog.progress_timeout_s: must be > 0, got 0");
  set_bad(&rf, "watchdog.progress_timeout_s", "-3",
          "watchdog.progress_timeout_s: must be > 0, got -3");
  set_bad(&rf, "watchdog.progress_timeout_s", "fast",
          "watchdog.progress_timeout_s: expected a number or auto, got a string ('fast')");
  set_bad(&rf, "watchdog.progress_timeout_s", "1e9",
          "watchdog.progress_timeout_s: must be <= 86400, got 1e+09");
  set_bad(&rf, "train.stepz", "4", "train.stepz: unknown key, did you mean 'train.steps'?");
  set_bad(&rf, "steps", "4", "steps: unknown key, did you mean 'train.steps'?");
  set_bad(&rf, "bogus.thing", "4", "bogus.thing: unknown key");
  set_bad(&rf, "train", "4", "train: is a section, not a value; set one of its keys");
  set_bad(&rf, "checkpoint.codec", "zstd:0",
          "checkpoint.codec: 'zstd:0' is not a known codec (expected zstd:LEVEL, LEVEL 1..19)");
  set_bad(&rf, "train.seed", "-1", "train.seed: must be >= 0, got -1");
  set_bad(&rf, "train.seed", "18446744073709551616",
          "train.seed: 18446744073709551616 is out of range (at most 18446744073709551615)");
  set_bad(&rf, "train.lr", "-0.1", "train.lr: must be > 0, got -0.1");
  set_bad(&rf, "train.lr", "nan", "train.lr: expected a number, got a string ('nan')");
  set_bad(&rf, "train.beta2", "1", "train.beta2: must be < 1, got 1");
  set_bad(&rf, "data.train", "", "data.train: must not be empty");
  set_bad(&rf, "nodes.device", "tpu", "nodes.device: 'tpu' is not one of cpu, cuda");
  set_bad(&rf, "nodes.hosts", "a,,b", "nodes.hosts: a host name must not be empty");
  set_bad(&rf, "nodes.hosts", "a,b c",
          "nodes.hosts: host name 'b c' contains whitespace or a control character");
  set_bad(&rf, "run", "a/b", "run: 'a/b' may hold only letters, digits, '.', '_' and '-'");
  set_bad(&rf, "checkpoint.store",
          "local:", "checkpoint.store: 'local:' names no directory (expected local:DIR)");
}

/* ---- config JSON ------------------------------------------------------------- */

static const char *const JSON_KEYS[] = {
    "model",        "n_layer",     "n_head", "n_embd", "vocab_size", "seq_len",  "train",
    "global_batch", "micro_batch", "lr",     "warmup", "steps",      "schedule", "min_lr_frac",
    "weight_decay", "grad_clip",   "beta1",  "beta2",  "eps",        "seed",     "precision",
    "data",         "train",       "val",    NULL};

static void collect_keys(const cJSON *o, const char **out, int *n) {
  for (const cJSON *c = o->child; c; c = c->next) {
    out[(*n)++] = c->string;
    if (cJSON_IsObject(c))
      collect_keys(c, out, n);
  }
}

static void test_config_json(void **state) {
  ft_runfile *rf = load_ok("good_full.yaml");
  char *a = ft_runfile_config_json(rf), *b = ft_runfile_config_json(rf);
  assert_non_null(a);
  assert_string_equal(a, b); /* stable */
  assert_null(strchr(a, ' '));
  assert_null(strchr(a, '\n'));

  cJSON *j = cJSON_Parse(a);
  assert_non_null(j);
  const char *keys[64];
  int n = 0;
  collect_keys(j, keys, &n);
  for (int i = 0; JSON_KEYS[i]; i++) {
    assert_true(i < n);
    assert_string_equal(keys[i], JSON_KEYS[i]);
  }
  assert_int_equal(n, 24);
  cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
  cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "train");
  cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "n_embd")->valueint, 128);
  assert_true(cJSON_GetObjectItemCaseSensitive(t, "lr")->valuedouble == rf->train.lr);
  assert_true(cJSON_GetObjectItemCaseSensitive(t, "beta2")->valuedouble == rf->train.beta2);
  assert_true(cJSON_GetObjectItemCaseSensitive(t, "eps")->valuedouble == rf->train.eps);
  assert_true(cJSON_GetObjectItemCaseSensitive(t, "min_lr_frac")->valuedouble ==
              rf->train.min_lr_frac);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(t, "steps")->valuedouble, 1000);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "seed")->valuestring,
                      "18446744073709551615");
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "schedule")->valuestring, "linear");
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "precision")->valuestring, "bf16");
  char glob[2048];
  snprintf(glob, sizeof glob, "%s/data/full_train_*.bin", data_dir);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(d, "train")->valuestring, glob);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(d, "val")->valuestring, "");
  cJSON_Delete(j);

  /* a value outside model/train/data does not change the JSON; one inside does */
  rf->checkpoint.keep_last = 77;
  char *c = ft_runfile_config_json(rf);
  assert_string_equal(a, c);
  rf->train.lr = nextafter(rf->train.lr, 1.0);
  char *e = ft_runfile_config_json(rf);
  assert_string_not_equal(a, e);
  j = cJSON_Parse(e);
  assert_true(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "train"), "lr")
                  ->valuedouble == rf->train.lr);
  cJSON_Delete(j);
  free(a);
  free(b);
  free(c);
  free(e);
  free(rf);

  /* golden text of the defaults: the config hash of every checkpoint depends on it */
  ft_runfile def;
  ft_runfile_defaults(&def);
  char *g = ft_runfile_config_json(&def);
  assert_string_equal(
      g, "{\"model\":{\"n_layer\":2,\"n_head\":4,\"n_embd\":64,\"vocab_size\":256,\"seq_len\":64},"
         "\"train\":{\"global_batch\":16,\"micro_batch\":8,\"lr\":0.001,\"warmup\":20,"
         "\"steps\":300,\"schedule\":\"cosine\",\"min_lr_frac\":0.10000000000000001,"
         "\"weight_decay\":0.10000000000000001,\"grad_clip\":1,\"beta1\":0.90000000000000002,"
         "\"beta2\":0.94999999999999996,\"eps\":1e-08,\"seed\":\"1337\",\"precision\":\"fp32\"},"
         "\"data\":{\"train\":\"data/synth_train_*.bin\",\"val\":\"data/synth_val_*.bin\"}}");
  free(g);
}

int main(void) {
  const char *src = getenv("FT_SRC");
  if (!src) {
    fprintf(stderr, "FT_SRC is not set (run through ctest)\n");
    return 77;
  }
  snprintf(src_dir, sizeof src_dir, "%s", src);
  snprintf(data_dir, sizeof data_dir, "%s/tests/data/runfiles", src_dir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_file),
      cmocka_unit_test(test_flow_style),
      cmocka_unit_test(test_quoted_and_flow_strings),
      cmocka_unit_test(test_parse_buffer),
      cmocka_unit_test(test_memory_estimate),
      cmocka_unit_test(test_data_globs_relative_to_file),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_demo_example),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_err_buffer_small),
      cmocka_unit_test(test_validate),
      cmocka_unit_test(test_merged),
      cmocka_unit_test(test_set),
      cmocka_unit_test(test_config_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
