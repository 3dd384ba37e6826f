/*
 * bench_gpu_copy: a bare device-to-host copy of BYTES through our own C API
 * (kernels_cuda.h): device buffer from kc_malloc, page-locked host buffer
 * from kc_host_alloc, kc_memcpy_d2h_async on a non-blocking stream, timed
 * with CUDA events (kc_timer_new / kc_event_record / kc_timer_ms) and, for
 * comparison with host-clock stalls, with the host clock around enqueue +
 * kc_stream_sync.
 *
 * This is the floor for a checkpoint's snapshot: the trainer's
 * ckpt_stall_ms copies the same bytes off the device, so it cannot be
 * shorter than this; bench/gpu_train.sh prints the two side by side.
 *
 * One untimed copy first (first-touch of the pinned pages, lazy context
 * set-up), then REPS timed copies; the best and the median are reported.
 * The device buffer is filled with a non-zero pattern first (the copy engine
 * does not care, but nothing here reads uninitialised memory).
 *
 * usage: bench_gpu_copy BYTES [REPS]    (REPS default 5; BYTES accepts a
 *        k/m/g suffix, powers of 1024)
 * Output: a human line, then one JSON line
 *   {"impl":"kc","bytes":..,"ms":best,"gb_s":..,"ms_median":..,"wall_ms":..}
 * Exit codes: 0 measured; 77 no GPU visible (kc_device_count() == 0);
 * 1 a CUDA or allocation error; 2 bad arguments.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft_clock.h"
#include "ft_err.h"
#include "kernels_cuda.h"

#define MAX_REPS 1000

static int parse_bytes(const char *s, size_t *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || v <= 0)
    return -1;
  const char *units = "kmg";
  const char *u = *end ? strchr(units, *end | 0x20) : NULL;
  for (const char *k = units; u && k <= u; k++)
    v *= 1024.0;
  if (u)
    end++;
  if (*end == 'i' || *end == 'B') /* "MiB", "MB", "GiB" */
    end += strspn(end, "iB");
  if (*end || v < 1 || v > 1e13)
    return -1;
  *out = (size_t)v;
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    rc = (call);                                                                                   \
    if (rc) {                                                                                      \
      fprintf(stderr, "bench_gpu_copy: %s: %s (%s)\n", #call, ft_strerror(rc), ft_err_detail());   \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  size_t bytes = 0;
  int reps = 5;
  if (argc < 2 || argc > 3 || parse_bytes(argv[1], &bytes) ||
      (argc == 3 && ((reps = atoi(argv[2])) < 1 || reps > MAX_REPS))) {
    fprintf(stderr, "usage: bench_gpu_copy BYTES [REPS]   e.g. bench_gpu_copy 1g 5\n"
                    "  a bare pinned device-to-host copy through kernels_cuda.h, timed with\n"
                    "  CUDA events; exits 77 when no GPU is visible\n");
    return 2;
  }
  if (kc_device_count() == 0) {
    fprintf(stderr, "bench_gpu_copy: no GPU visible: skipped\n");
    return 77;
  }

  int rc = 0;
  void *d = NULL, *h = NULL;
  kc_stream s = NULL;
  kc_event e0 = NULL, e1 = NULL;
  float ms[MAX_REPS];
  double wall[MAX_REPS];
  char name[128] = "?";

  CK(kc_set_device(0));
  CK(kc_device_info(0, name, sizeof name, NULL, NULL, NULL, NULL));
  CK(kc_malloc(&d, bytes));
  CK(kc_host_alloc(&h, bytes));
  CK(kc_stream_new(&s));
  CK(kc_timer_new(&e0));
  CK(kc_timer_new(&e1));
  CK(kc_memset_async(d, 0x5a, bytes, s));
  memset(h, 0, bytes); /* first touch of the pinned pages, outside the timing */
  CK(kc_stream_sync(s));

  /* untimed warm-up copy */
  CK(kc_memcpy_d2h_async(h, d, bytes, s));
  CK(kc_stream_sync(s));

  for (int i = 0; i < reps; i++) {
    double t0 = ft_now_s();
    CK(kc_event_record(e0, s));
    CK(kc_memcpy_d2h_async(h, d, bytes, s));
    CK(kc_event_record(e1, s));
    CK(kc_stream_sync(s));
    wall[i] = (ft_now_s() - t0) * 1e3;
    CK(kc_timer_ms(e0, e1, &ms[i]));
  }
  if (((unsigned char *)h)[0] != 0x5a || ((unsigned char *)h)[bytes - 1] != 0x5a) {
    fprintf(stderr, "bench_gpu_copy: the copied bytes are wrong\n");
    rc = 1;
    goto out;
  }
  qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
  qsort(wall, (size_t)reps, sizeof wall[0], cmp_double);
  double best = ms[0], med = ms[reps / 2];
  double gbs = (double)bytes / (best * 1e-3) / 1e9;
  printf("bench_gpu_copy: %s, D2H %.1f MB pinned, stream + events: best %.3f ms (%.1f GB/s), "
         "median %.3f ms; host clock best %.3f ms (%d reps)\n",
         name, (double)bytes / 1e6, best, gbs, med, wall[0], reps);
  printf("{\"impl\":\"kc\",\"bytes\":%zu,\"ms\":%.4f,\"gb_s\":%.2f,\"ms_median\":%.4f,"
         "\"wall_ms\":%.4f,\"reps\":%d}\n",
         bytes, best, gbs, med, wall[0], reps);

out:
  kc_event_free(e1);
  kc_event_free(e0);
  kc_stream_free(s);
  kc_host_free(h);
  kc_free(d);
  return rc ? 1 : 0;
}
