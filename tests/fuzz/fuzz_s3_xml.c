/*
 * fuzz_s3_xml: libFuzzer harness for the S3 XML answer parsers (expat) of
 * ckptstore/ckpt_s3_client.c: ListObjectsV2 pages, <Error> bodies and
 * InitiateMultipartUploadResult's UploadId, all from what a server (or
 * anything pretending to be one) sends.
 *
 * Feeds every input, as an exact-size copy, to ckpt_s3_xml_list,
 * ckpt_s3_xml_error and ckpt_s3_xml_field. Properties checked: no crash, no
 * leak; only the documented codes come back (FT_OK, FT_EPROTO, FT_ENOMEM;
 * FT_ENOENT where "not this document" is an answer); every key handed to
 * the callback is a C string no longer than S3's keys can be here; a
 * truncated page always comes with a continuation token; outputs are
 * NUL-terminated within their buffers.
 *   build-fuzz/tests/fuzz_s3_xml -max_total_time=60 tests/fuzz/seeds/s3_xml
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_s3.h"
#include "ft_err.h"
#include "fuzz_common.h"

typedef struct counts {
  size_t n;
} counts;

static int on_object(void *ud, const char *key, uint64_t size, int64_t mtime_ns) {
  (void)size, (void)mtime_ns;
  counts *c = ud;
  FUZZ_CHECK(key != NULL);
  FUZZ_CHECK(strlen(key) < 2048);
  c->n++;
  /* a caller that stops the walk: its code comes back unchanged */
  return c->n == 1000 ? FT_ECANCELED : FT_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *x = fuzz_copy(data, size);
  if (!x)
    return 0;
  counts c = {0};
  int truncated = -1;
  char token[1024];
  memset(token, 'X', sizeof token);
  int rc = ckpt_s3_xml_list(x, size, on_object, &c, &truncated, token, sizeof token);
  FUZZ_CHECK(rc == FT_OK || rc == FT_EPROTO || rc == FT_ENOMEM || rc == FT_ECANCELED);
  FUZZ_CHECK(memchr(token, 0, sizeof token) != NULL);
  if (rc == FT_OK) {
    FUZZ_CHECK(truncated == 0 || truncated == 1);
    FUZZ_CHECK(!truncated || token[0] != 0);
  }

  char code[128], msg[256];
  memset(code, 'X', sizeof code);
  memset(msg, 'X', sizeof msg);
  rc = ckpt_s3_xml_error(x, size, code, sizeof code, msg, sizeof msg);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ENOENT || rc == FT_EPROTO || rc == FT_ENOMEM);
  FUZZ_CHECK(memchr(code, 0, sizeof code) != NULL && memchr(msg, 0, sizeof msg) != NULL);
  if (rc != FT_OK)
    FUZZ_CHECK(code[0] == 0 && msg[0] == 0);

  char id[1024];
  memset(id, 'X', sizeof id);
  rc = ckpt_s3_xml_field(x, size, "InitiateMultipartUploadResult", "UploadId", id, sizeof id);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ENOENT || rc == FT_EPROTO || rc == FT_ENOMEM);
  FUZZ_CHECK(memchr(id, 0, sizeof id) != NULL);
  if (rc != FT_OK)
    FUZZ_CHECK(id[0] == 0);
  free(x);
  return 0;
}
