/*
 * fuzz_runfile_set: libFuzzer harness for command-line overrides
 * (ft_runfile_set, `--set KEY=VALUE`) and the validator after them.
 *
 * The input is lines "KEY=VALUE" (a line without '=' is a key with an empty
 * value), applied in order over the defaults. Properties: only FT_OK or
 * FT_ECONFIG; a refused override leaves the struct byte-for-byte unchanged
 * and says "KEY: problem"; after all of them ft_runfile_validate returns
 * FT_OK or FT_ECONFIG, and a valid result gives a config JSON.
 */
#include "fuzz_common.h"

#include "ft_err.h"
#include "ft_runfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ft_runfile *rf = malloc(sizeof *rf), *before = malloc(sizeof *before);
  char *text = malloc(size + 1), err[1024];
  if (!rf || !before || !text)
    goto out;
  memcpy(text, data, size);
  text[size] = 0;
  ft_runfile_defaults(rf);
  for (char *line = text, *next; line && line < text + size; line = next) {
    char *nl = strchr(line, '\n');
    next = nl ? nl + 1 : NULL;
    if (nl)
      *nl = 0;
    char *eq = strchr(line, '=');
    const char *value = "";
    if (eq) {
      *eq = 0;
      value = eq + 1;
    }
    memcpy(before, rf, sizeof *rf);
    int rc = ft_runfile_set(rf, line, value, err, sizeof err);
    FUZZ_CHECK(rc == FT_OK || rc == FT_ECONFIG);
    if (rc) {
      FUZZ_CHECK(memcmp(before, rf, sizeof *rf) == 0);
      FUZZ_CHECK(strstr(err, ": ") != NULL);
    }
  }
  int rc = ft_runfile_validate(rf, err, sizeof err);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ECONFIG);
  if (rc == FT_OK) {
    char *json = ft_runfile_config_json(rf);
    FUZZ_CHECK(json != NULL);
    free(json);
  }
out:
  free(text);
  free(before);
  free(rf);
  return 0;
}
