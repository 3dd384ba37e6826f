/*
 * data_wait: the S3 client's retry hook for the data loader (data_wait.c):
 * why the training thread waits in phase storage_wait (worker/progress.h).
 */
#ifndef DATA_WAIT_H
#define DATA_WAIT_H

#include "ft_wire.h"

struct ckpt_s3_retry;

/* The wire's reason for a retried attempt: cause (ckpt_s3_retry_cause) and
 * HTTP status (0: none): 503 slowdown, 429 throttled, other 5xx
 * server_error, timeout, refused, network, else other. */
ft_wait_reason data_wait_reason(int cause, long status);

/* ckpt_s3_retry_fn (ud unused): each retry into the progress record's wait
 * note, a retried read's success clears it. Thread-safe. */
void data_wait_on_retry(void *ud, const struct ckpt_s3_retry *r);

#endif
