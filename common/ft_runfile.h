/*
 * ft_runfile: the run file (run.yaml) of docs/design.md §2, parsed with
 * libfyaml into a plain struct with every default filled in. Words with a
 * fixed set of values are parsed once, here, into C enums and bools (the
 * ft_rf_*_name functions give the word back for logs, events and JSON).
 *
 * Two stages of checks:
 *  - each key's own (type, range, allowed words) when it is read: by
 *    _load/_parse for the file, by _set for a --set; errors name
 *    FILE:LINE:COLUMN (or, for _set, the key alone) and the key's dotted
 *    path, e.g.
 *      examples/demo.yaml:4:16: train.micro_batch: must be >= 1, got 0
 *  - checks across keys (micro_batch x world divides global_batch, ...) by
 *    ft_runfile_validate/_validate_world, once, on the merged result: the
 *    file, then the program's --steps and --set, for the world the program
 *    trains in (supervise: nodes.count x nodes.workers_per_node; worker
 *    --standalone: 1). _load does not run them: a file may rely on an
 *    override (--set nodes.count=1) to be consistent. Their errors name
 *    the key blamed where it was written, and where the keys involved came
 *    from when that is not the file, e.g.
 *      run.yaml:4:16: train.micro_batch: 4 x the world size 2 (...) does not
 *      divide train.global_batch (4); micro_batch 2 would
 *      [nodes.count: default, nodes.workers_per_node: default]
 * Shared by the worker (standalone mode reads model/train/data) and the
 * supervisor (everything). Shared here, in common/, because both programs
 * parse the same file and must agree on every default.
 */
#ifndef FT_RUNFILE_H
#define FT_RUNFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ranges of the keys that size a run (docs/runfile.md lists every key's).
 * Tokens are uint16 in llm.c's shards, so the vocabulary is at most 65536;
 * the world (nodes.count x nodes.workers_per_node) is at most
 * FT_RUNFILE_MAX_WORLD, the wire protocol's limit. */
#define FT_RUNFILE_MAX_LAYER 1024
#define FT_RUNFILE_MAX_HEAD 1024
#define FT_RUNFILE_MAX_EMBD 32768
#define FT_RUNFILE_MAX_VOCAB 65536
#define FT_RUNFILE_MAX_SEQ 32768
#define FT_RUNFILE_MAX_GLOBAL_BATCH 1048576
#define FT_RUNFILE_MAX_MICRO_BATCH 65536
#define FT_RUNFILE_MAX_NODES 32768
#define FT_RUNFILE_MAX_WORKERS_PER_NODE 256
#define FT_RUNFILE_MAX_WORLD 262144
#define FT_RUNFILE_MAX_TOKENS_PER_STEP 2147483647LL /* global_batch x seq_len */
#define FT_RUNFILE_MAX_PARAMS 1000000000000LL       /* 1e12 */
#define FT_RUNFILE_MAX_BYTES (4 << 20)              /* a run file's size */
/* The number of leaf keys (ft_runfile.c's table; its static assert keeps
 * this equal). */
#define FT_RUNFILE_NKEYS 85

/* The keys with a fixed set of words, one enum each. A value is the index
 * of its word in ft_runfile.c's word list (W_SCHEDULE, ...), which keeps
 * this order; the first is not always the default (ft_runfile_defaults). */
typedef enum ft_rf_schedule {
  FT_RF_SCHEDULE_COSINE,
  FT_RF_SCHEDULE_LINEAR,
  FT_RF_SCHEDULE_CONSTANT
} ft_rf_schedule;
typedef enum ft_rf_precision { FT_RF_PRECISION_FP32, FT_RF_PRECISION_BF16 } ft_rf_precision;
typedef enum ft_rf_device { FT_RF_DEVICE_CPU, FT_RF_DEVICE_CUDA } ft_rf_device;
typedef enum ft_rf_launcher {
  FT_RF_LAUNCHER_LOCAL,
  FT_RF_LAUNCHER_COMMAND,
  FT_RF_LAUNCHER_SSH,
  FT_RF_LAUNCHER_SLURM
} ft_rf_launcher;
typedef enum ft_rf_require {
  FT_RF_REQUIRE_DURABLE,
  FT_RF_REQUIRE_LOCAL,
  FT_RF_REQUIRE_MEMORY
} ft_rf_require;
typedef enum ft_rf_moments {
  FT_RF_MOMENTS_EXACT,
  FT_RF_MOMENTS_BF16,
  FT_RF_MOMENTS_Q8
} ft_rf_moments;
typedef enum ft_rf_on_spike {
  FT_RF_SPIKE_ROLLBACK,
  FT_RF_SPIKE_ROLLBACK_AND_SKIP,
  FT_RF_SPIKE_WARN
} ft_rf_on_spike;
typedef enum ft_rf_no_spares {
  FT_RF_NO_SPARES_SHRINK,
  FT_RF_NO_SPARES_WAIT,
  FT_RF_NO_SPARES_FAIL
} ft_rf_no_spares;

/* The run file's word for a value ("cosine", "cuda", ...); "?" for a value
 * out of the enum. */
const char *ft_rf_schedule_name(ft_rf_schedule v);
const char *ft_rf_precision_name(ft_rf_precision v);
const char *ft_rf_device_name(ft_rf_device v);
const char *ft_rf_launcher_name(ft_rf_launcher v);
const char *ft_rf_require_name(ft_rf_require v);
const char *ft_rf_moments_name(ft_rf_moments v);
const char *ft_rf_on_spike_name(ft_rf_on_spike v);
const char *ft_rf_no_spares_name(ft_rf_no_spares v);

typedef struct ft_model_cfg {
  int n_layer, n_head, n_embd, vocab_size, seq_len;
} ft_model_cfg;

typedef struct ft_train_cfg {
  int64_t steps;
  int global_batch; /* sequences per optimizer step */
  int micro_batch;  /* sequences per rank per forward/backward */
  double lr;
  int64_t warmup;
  ft_rf_schedule schedule;
  double min_lr_frac; /* final lr as a fraction of lr (cosine/linear); default 0.1 */
  double weight_decay;
  double grad_clip; /* 0: off */
  double beta1, beta2, eps;
  uint64_t seed;
  ft_rf_precision precision;
  int64_t val_every; /* validation loss every this many steps; 0: never */
} ft_train_cfg;

/* The learning rate of 0-based step index s (the step that ends as step
 * s + 1) by t's schedule: linear warmup over t->warmup steps, then cosine,
 * linear or constant down to lr * min_lr_frac at t->steps. What the worker
 * trains with and the supervisor charts. */
double ft_train_lr(const ft_train_cfg *t, int64_t s);

/* Globs of llm.c token shards. One written relative in a run file is
 * relative to that file's directory: _load/_parse prefix it with the
 * directory part of the path ("runs/a.yaml": "data/x_*.bin" becomes
 * "runs/data/x_*.bin"); an s3:// one is left as written. Defaults and
 * ft_runfile_set values stay relative to the current directory. */
typedef struct ft_data_cfg {
  char train[1024]; /* glob, or s3://bucket/prefix/glob */
  char val[1024];   /* glob, may be "" */
  /* s3:// data only (worker/data.h, docs/data.md) */
  char cache_dir[1024];  /* the block cache directory; "": the default */
  int64_t cache_bytes;   /* its size bound; 0: no cache directory */
  int64_t block_bytes;   /* bytes of one ranged GET (aligned, even); 0: not set
                            (the loader picks one from the geometry) */
  int prefetch_blocks;   /* blocks read ahead of the step */
  char s3_endpoint[512]; /* the data bucket's endpoint; "": the store's */
} ft_data_cfg;

typedef struct ft_nodes_cfg {
  int count;
  int workers_per_node;
  ft_rf_device device;
  ft_rf_launcher launcher;
  char command[512]; /* command: the template ({host}, {argv}); ssh: the ssh
                        part ("" = "ssh -T -o BatchMode=yes {host}") */
  int nhosts;
  char hosts[64][128];
  char iface[64];      /* the interface (name, or an address of this host)
                          workers bind Gloo to; "" = the one on the route to
                          the supervisor (env FT_IFACE overrides) */
  int threads;         /* kernel threads per worker; 0 = cores / workers on the host */
  char workdir[1024];  /* remote launchers: the workers' directory; "" = supervise's */
  char srun_args[512]; /* slurm: extra srun arguments, e.g. "--mpi=none" */
  bool agent;          /* one agent per node (ftagent) starts and relays its workers */
  bool launch_once;    /* with agent: one launch for the whole pool's agents */
  double peak_tflops;  /* one worker's device's peak (TFLOP/s, the run's
                          precision), for the dashboard's MFU; 0: unknown */
} ft_nodes_cfg;

/* The supervisor's control port. */
typedef struct ft_supervisor_cfg {
  char listen[256];          /* HOST:PORT (or :PORT) to bind; "" = loopback with the
                                local launcher, every interface with a remote one;
                                port 0 = any */
  char advertise[256];       /* HOST[:PORT] workers dial; "" = the bound address, or
                                for a wildcard bind this host's address on the route
                                to the first worker host */
  char http[256];            /* the operator's HTTP port (/metrics, /status):
                                HOST:PORT; "" = loopback, any free port; "off" */
  int64_t step_events_every; /* a "step" event every this many of rank 0's
                                steps (and always the final one); 0: none.
                                Its own cadence, not the checkpoints' */
} ft_supervisor_cfg;

typedef struct ft_ckpt_cfg {
  int64_t every_steps;  /* 0: off */
  double every_seconds; /* 0: off */
  char store[1024];     /* "local:DIR" or "s3://bucket/prefix" */
  int keep_last;
  int keep_every;
  int chunk_mib;
  int codec_level;       /* checkpoint.codec "zstd:LEVEL": the zstd level, 1..19 */
  bool replicate;        /* push each shard into buddies' memory */
  int64_t persist_every; /* every persist_every-th checkpoint goes to the store;
                            the others live only in memory (two hosts') */
  ft_rf_require require; /* when a checkpoint counts as committed */
  int full_every;        /* every full_every-th checkpoint stands alone; the
                            others' chunks are deltas against the one before
                            (ckpt_store_opts.full_every); 1: no deltas */
  ft_rf_moments moments; /* how the optimizer's moments are stored
                            (ckpt_part.lossy) */
} ft_ckpt_cfg;

typedef struct ft_watchdog_cfg {
  double heartbeat_timeout_s;
  double start_timeout_s; /* launch to HELLO: a start slower than this is a hang */
  double collective_timeout_s;
  double progress_timeout_s; /* no progress from every rank this long is a hang
                                (watchdog/wd_progress.h); 0: auto (the run file's
                                `auto`: derived from the recent step times) */
  double storage_backoff_s;  /* a storage hang's wait before the restart, doubled
                                for each consecutive one (0: restart at once) */
  int spike_window;
  double spike_zscore;
  int spike_min_steps;
  char xid_source[512];
  char xid_actions[512]; /* overrides of the Xid table, "79:quarantine,13:restart" */
  int64_t sdc_every;     /* every sdc_every-th step each rank's micro-batch is
                            recomputed on its neighbour and the bits compared
                            (silent data corruption); 0: off */
} ft_watchdog_cfg;

typedef struct ft_recovery_cfg {
  int max_restarts;
  ft_rf_on_spike on_loss_spike;
  int64_t skip_batches;
  ft_rf_no_spares when_no_spares;
  /* A node is quarantined after this many failures of its own (worker
   * deaths on a host that still answers) within node_failure_window_s;
   * until then its workers are restarted in place. Hardware causes (fatal
   * Xid, host unreachable) quarantine at once. */
  int node_failures_to_quarantine;
  double node_failure_window_s;
  /* slurm launcher: a node quarantined for a hardware cause is drained in
   * Slurm (scontrol update ... state=drain reason="ftsup: ...") */
  bool drain;
  /* Survivors of a fault elsewhere keep their process: they abort their
   * collectives, wait for the next generation's ASSIGN, re-form the comm
   * and restore in place; one that has not rejoined within
   * rejoin_timeout_s is restarted as a process. */
  bool in_process;
  double rejoin_timeout_s;
} ft_recovery_cfg;

/* The node doctor (worker/doctor.h): checks a worker runs on its own node
 * before it can join a gang. */
typedef struct ft_doctor_cfg {
  bool on_join;         /* every worker process (gang node, spare, node
                           restarted in place) runs it and reports before it
                           may be put into a gang */
  int mem_mb;           /* memory pattern test size; 0: skipped */
  int disk_mb;          /* write, fsync, read back this much; 0: skipped */
  char dir[1024];       /* where (""): a local: store's folder, else TMPDIR or /tmp */
  int link_mb;          /* the gang's link check before the first step; 0: off */
  double link_min_frac; /* a node whose best link is below this fraction of
                           the gang's median is named (slow link) */
  double spare_every_s; /* idle spares check themselves again this often; 0: never */
} ft_doctor_cfg;

/* Faults a run asks for on purpose (demos, drills); all off by default. */
typedef struct ft_chaos_cfg {
  int64_t kill_node_at_step; /* supervisor SIGKILLs the gang's last node when
                                rank 0 first reports this step; 0: off */
} ft_chaos_cfg;

/* Where a key's value came from: line > 0: the run file's line and column
 * (1-based); FT_RF_FROM_DEFAULT or FT_RF_FROM_SET (ft_runfile_set: the
 * command line). A value a program writes straight into the struct keeps
 * the origin it had. */
#define FT_RF_FROM_DEFAULT 0
#define FT_RF_FROM_SET (-1)
typedef struct ft_rf_origin {
  int line, col;
} ft_rf_origin;

typedef struct ft_runfile {
  char path[1024]; /* the file it came from ("" for defaults) */
  char run[128];
  ft_model_cfg model;
  ft_train_cfg train;
  ft_data_cfg data;
  ft_nodes_cfg nodes;
  ft_supervisor_cfg supervisor;
  ft_ckpt_cfg checkpoint;
  ft_watchdog_cfg watchdog;
  ft_recovery_cfg recovery;
  ft_doctor_cfg doctor;
  ft_chaos_cfg chaos;
  /* each key's origin, in ft_runfile.c's table order: for the messages of
   * the checks across keys */
  ft_rf_origin from[FT_RUNFILE_NKEYS];
} ft_runfile;

/* Fills rf with the embedded defaults (a small GPT that learns visibly on
 * the synthetic corpus, CPU, local store). */
void ft_runfile_defaults(ft_runfile *rf);

/* Parses path over the defaults, with each key's own checks (not those
 * across keys: ft_runfile_validate, after the overrides). On error returns
 * FT_ECONFIG (or FT_EIO if the file can't be read) and writes one line
 * "FILE:LINE:COL: KEY: problem" into err (size errlen). */
int ft_runfile_load(const char *path, ft_runfile *rf, char *err, size_t errlen);
/* checkpoint.require local with an s3:// store_uri: sets FT_S3_REQUIRE=local
 * (a commit waits for the local cache, the bucket's copy follows), for this
 * process and the workers it starts. durable and memory leave the
 * environment as it is (the store's default: both). */
void ft_runfile_store_env(const ft_runfile *rf, const char *store_uri);

/* What a checkpoint.store value names, as ft_runfile_store_uri reads it. */
typedef enum ft_rf_store_kind {
  FT_RF_STORE_S3,    /* s3://BUCKET/PREFIX */
  FT_RF_STORE_LOCAL, /* local:DIR, other than the default */
  FT_RF_STORE_STATE  /* the default local:state/store (or another scheme):
                        the store inside the run's state directory */
} ft_rf_store_kind;
ft_rf_store_kind ft_runfile_store_kind(const char *store);
/* 1 if a store or data URI (checkpoint.store, data.train, data.val) names a
 * bucket ("s3://..."). */
int ft_runfile_is_s3(const char *uri);

/* The store a supervised run uses for checkpoint.store `store` when no
 * --store is given (supervise's rule, which the node doctor's disk check
 * follows too): an s3:// URI as it is; an absolute local:DIR as it is; a
 * relative local:DIR relative to the run file's folder (runfile_path's;
 * the current directory if it has no '/'); the default local:state/store
 * (and any other scheme) local:STATE_DIR/store. 0, or -1 if it does not fit
 * in out (n bytes). */
int ft_runfile_store_uri(const char *store, const char *runfile_path, const char *state_dir,
                         char *out, size_t n);

/* Parses a run file's text (len bytes, need not be NUL-terminated) over the
 * defaults, as _load does with the file's contents; name is used in
 * messages and kept in rf->path. */
int ft_runfile_parse(const char *name, const char *text, size_t len, ft_runfile *rf, char *err,
                     size_t errlen);

/* Re-checks each key's own rules on the stored values (a program may have
 * written into the struct), then the constraints across keys (heads divide
 * channels, micro_batch x world divides global_batch, products that must
 * not overflow, a memory-only checkpoint needs replicas, the command
 * launcher's {argv}) and, for CPU runs on this machine (nodes.device cpu,
 * launcher local), that the estimated memory of all ranks
 * (ft_runfile_mem_estimate) fits in this machine's physical memory. Call it
 * once, after the file and every override are applied: _load and _set do
 * not. The world is nodes.count x nodes.workers_per_node. On error returns
 * FT_ECONFIG and writes one line: "FILE:LINE:COL: KEY: problem" when the
 * blamed key was written in the file, else "KEY: problem"; a problem
 * involving keys not written in the file ends with where they came from,
 * e.g. " [nodes.count: --set, nodes.workers_per_node: default]" (defaults
 * are named only when rf came from a file). */
int ft_runfile_validate(const ft_runfile *rf, char *err, size_t errlen);

/* ft_runfile_validate for a program that trains in a world of its own
 * rather than nodes.count x nodes.workers_per_node (worker --standalone:
 * 1), all of its ranks on this machine; who names it in messages ("world
 * size 3 (who)"). world 0: as ft_runfile_validate. */
int ft_runfile_validate_world(const ft_runfile *rf, int world, const char *who, char *err,
                              size_t errlen);

/* Estimated bytes one CPU rank needs: the full parameters, gradients and
 * AdamW moments (4 x fp32), their FSDP shards (4 x fp32 / world), and the
 * activations and their gradients at micro_batch x seq_len. Doubles: the
 * estimate of a huge model must not overflow. *params gets the parameter
 * count (may be NULL). */
double ft_runfile_mem_estimate(const ft_runfile *rf, double *params);

/* The model and train config as compact JSON (malloc'd; caller frees), used
 * as a checkpoint's config and to compute the config hash (and compared
 * with the run file's seal): words are written as the run file spells them,
 * so the JSON stays the same for the same file. */
char *ft_runfile_config_json(const ft_runfile *rf);

/* Applies one command-line override, e.g. ("train.steps", "40") or
 * ("nodes.hosts", "a,b,c"), with the same type and range checks as the file
 * (the value reads as a plain YAML scalar; hosts as a comma-separated list).
 * On error returns FT_ECONFIG, leaves rf unchanged and writes one line
 * "KEY: problem" into err. The key's origin becomes FT_RF_FROM_SET.
 * Checks across keys are left to _validate, after the last override. */
int ft_runfile_set(ft_runfile *rf, const char *dotted_key, const char *value, char *err,
                   size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
