/*
 * data_wait: why the training thread waits on its data's storage. The S3
 * client's retry hook (ckpt_s3_read.h) for the data loader's readers
 * (worker/data_s3.c installs it on each): every retried attempt becomes the
 * progress record's wait note (worker/progress.h: the reason on the wire,
 * ft_wait_reason, and the attempt), which the heartbeat carries while the
 * phase is storage_wait; a retried read that succeeds clears it.
 *
 * Runs on whichever thread made the request (the training thread's own
 * GET, or the prefetcher's that it waits for): one relaxed atomic store.
 */
#include "data_wait.h"

#include "ckpt_s3_read.h"
#include "progress.h"

ft_wait_reason data_wait_reason(int cause, long status) {
  switch (cause) {
  case CKPT_S3_RETRY_TIMEOUT:
    return FT_WAIT_TIMEOUT;
  case CKPT_S3_RETRY_CONNECT:
    return FT_WAIT_REFUSED;
  case CKPT_S3_RETRY_NETWORK:
    return FT_WAIT_NETWORK;
  default:
    break;
  }
  if (status == 503)
    return FT_WAIT_SLOWDOWN;
  if (status == 429)
    return FT_WAIT_THROTTLED;
  if (status >= 500)
    return FT_WAIT_SERVER;
  return FT_WAIT_OTHER;
}

void data_wait_on_retry(void *ud, const ckpt_s3_retry *r) {
  (void)ud;
  if (r->ok) {
    progress_wait_clear();
    return;
  }
  progress_wait_note(data_wait_reason(r->cause, r->status),
                     r->attempt > 0 ? (uint32_t)r->attempt : 1);
}
