/*
 * ft_failpoint: named fault points, compiled in, off by default.
 *
 * Enabled only through the environment variable FT_FAILPOINTS, a comma
 * separated list of NAME or NAME=ARG, e.g.
 *   FT_FAILPOINTS=hang_at_step=15,crash_at_step=30
 * Cheap when off: the variable is parsed once, and a disabled check is one
 * branch on a cached flag. The catalogue of names lives in docs/failpoints.md
 * and, for the parser, in ft_failpoint.c's table.
 *
 * The parser is strict: a name not in the catalogue, an argument that is not
 * a whole integer (or, for a word-valued failpoint such as hang_in, not one
 * of its words), more than FT_FAILPOINT_MAX entries, or a modifier without
 * what it modifies (hang_node, hang_rank, hang_in without hang_at_step;
 * sdc_corrupt_from without sdc_corrupt_node) is an error that names the
 * failpoint and the text. Programs call ft_failpoint_check at start and
 * refuse to run (exit 2) on an error; an invalid FT_FAILPOINTS enables no
 * failpoint at all in a program that did not check it.
 */
#ifndef FT_FAILPOINT_H
#define FT_FAILPOINT_H

#include <stddef.h>
#include <stdint.h>

#define FT_FAILPOINT_MAX 16

/* 1 if NAME is enabled; *arg (may be NULL) gets its integer argument (0 if
 * none, or if the failpoint's argument is a word). */
int ft_failpoint(const char *name, int64_t *arg);

/* 1 if NAME is enabled with argument equal to value (e.g. the current step). */
int ft_failpoint_at(const char *name, int64_t value);

/* NAME's word argument (hang_in=data gives "data"); NULL if NAME is not
 * enabled. */
const char *ft_failpoint_word(const char *name);

/* Parses spec in FT_FAILPOINTS's syntax without enabling anything: 0 if it
 * is valid (NULL and "" are), else -1 with err (may be NULL) naming the
 * failpoint and the offending text. */
int ft_failpoint_parse(const char *spec, char *err, size_t len);

/* The same for this process's FT_FAILPOINTS (parsed once): 0 if valid or
 * unset, else -1 with err. */
int ft_failpoint_check(char *err, size_t len);

/* The hang failpoint: hang_at_step=S, optionally hang_node=N, hang_rank=R,
 * hang_gen=G (only in generation G; default: every generation) and
 * hang_in=compute|data|collective|checkpoint|rendezvous|cuda (default: after
 * step S). */
typedef enum {
  FT_HANG_AFTER,      /* after step S's reports (train.c) */
  FT_HANG_COMPUTE,    /* step S's backward, before a gradient reduction (fsdp.c) */
  FT_HANG_DATA,       /* step S's first read of the data loader (data.c) */
  FT_HANG_COLLECTIVE, /* step S's first collective, entered (comm.c) */
  FT_HANG_CHECKPOINT, /* the first checkpoint at or after step S, its snapshot (snap.c) */
  FT_HANG_RENDEZVOUS, /* a generation to train step S, its ASSIGN taken, before its rendezvous
                         (train.c) */
  FT_HANG_CUDA,       /* step S's first micro-batch on the CUDA engine: a kernel that never
                         finishes, then a device synchronisation (engine_cuda.c) */
} ft_hang_where;

/* The training thread, at the start of the step that becomes `step`: arms
 * the hang on this thread when hang_at_step targets this node, rank,
 * generation (gen: the supervisor's ASSIGN; 0 standalone) and this step
 * (checkpoint: this step or a later one; rendezvous: called as its
 * generation starts, with `step` its first step, armed when that is not
 * after S); else disarms it. */
void ft_failpoint_hang_arm(int node, int rank, uint64_t gen, int64_t step);

/* A place the hang can happen. Armed for `where` on this thread: says so on
 * stderr ("worker: failpoint hang_at_step=S ...: hanging (ts T)", T the
 * wall clock in seconds, as the supervisor's events' ts) and stalls the
 * calling thread forever (sleeping; the process's other threads, its
 * heartbeats among them, run on). Otherwise nothing. */
void ft_failpoint_hang_here(ft_hang_where where);

/* The same for a caller that stalls its own way (the CUDA engine blocks in
 * a device synchronisation behind a kernel that never finishes): armed for
 * `where`, says so on stderr, disarms and returns 1; else 0. */
int ft_failpoint_hang_take(ft_hang_where where);

#endif
