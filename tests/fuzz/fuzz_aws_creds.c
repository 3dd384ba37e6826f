/*
 * fuzz_aws_creds: libFuzzer harness for the AWS shared credentials file
 * reader (ckpt_s3_config_read_credentials in ckptstore/ckpt_s3_config.c:
 * inih through a reader that sets aside values longer than inih's lines).
 *
 * Each input is the file (through a memfd, so the real fopen/getline path
 * runs); the profile asked for is "default", then "dev" (which a file may
 * spell "[profile dev]"). Properties checked: no crash, no leak; only
 * FT_OK, FT_ENOENT, FT_ECONFIG or FT_ENOMEM; on FT_OK both keys are set and
 * every field is a NUL-terminated string within its buffer.
 *   build-fuzz/tests/fuzz_aws_creds -max_total_time=60 tests/fuzz/seeds/aws_creds
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_s3.h"
#include "ft_err.h"
#include "fuzz_common.h"

static void one(const char *path, const char *profile) {
  ckpt_s3_config *c = calloc(1, sizeof *c);
  if (!c)
    return;
  int rc = ckpt_s3_config_read_credentials(path, profile, c);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ENOENT || rc == FT_ECONFIG || rc == FT_ENOMEM);
  FUZZ_CHECK(memchr(c->access_key, 0, sizeof c->access_key) != NULL);
  FUZZ_CHECK(memchr(c->secret_key, 0, sizeof c->secret_key) != NULL);
  FUZZ_CHECK(memchr(c->session_token, 0, sizeof c->session_token) != NULL);
  if (rc == FT_OK)
    FUZZ_CHECK(c->access_key[0] != 0 && c->secret_key[0] != 0);
  ckpt_s3_config_wipe(c);
  free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfd_path(data, size);
  if (!path)
    return 0;
  one(path, "default");
  one(path, "dev");
  return 0;
}
