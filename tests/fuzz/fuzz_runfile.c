/*
 * fuzz_runfile: libFuzzer harness for the run file parser (common/ft_runfile.c).
 *
 * Feeds the input as a run file's text to ft_runfile_parse (an exact-size
 * copy, so an overread is an ASan report) and once in a while through the
 * real file path (ft_runfile_load on a memfd). Properties: only FT_OK or
 * FT_ECONFIG; an error is one line "fuzz.yaml:..." naming the file; a run
 * file that parses has NUL-terminated strings, words within their enums,
 * and validates across keys (ft_runfile_validate, which _parse leaves to
 * after the overrides) with FT_OK or one line naming a key; a valid one
 * gives a config JSON that parses back.
 */
#include "fuzz_common.h"

#include "ft_err.h"
#include "ft_runfile.h"

#include <cjson/cJSON.h>

static void check_loaded(const ft_runfile *rf) {
  char err[512];
  FUZZ_CHECK(memchr(rf->run, 0, sizeof rf->run) &&
             memchr(rf->data.train, 0, sizeof rf->data.train));
  FUZZ_CHECK(rf->checkpoint.codec_level >= 1 && rf->checkpoint.codec_level <= 19);
  FUZZ_CHECK((unsigned)rf->train.schedule <= FT_RF_SCHEDULE_CONSTANT &&
             (unsigned)rf->nodes.launcher <= FT_RF_LAUNCHER_SLURM &&
             (unsigned)rf->recovery.when_no_spares <= FT_RF_NO_SPARES_FAIL);
  FUZZ_CHECK(rf->nodes.nhosts >= 0 && rf->nodes.nhosts <= 64);
  int rc = ft_runfile_validate(rf, err, sizeof err);
  FUZZ_CHECK(rc == FT_OK || (rc == FT_ECONFIG && strstr(err, ": ") && !strchr(err, '\n')));
  if (rc)
    return;
  char *json = ft_runfile_config_json(rf);
  FUZZ_CHECK(json != NULL);
  cJSON *j = cJSON_Parse(json);
  FUZZ_CHECK(j != NULL);
  cJSON_Delete(j);
  free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned calls;
  ft_runfile *rf = malloc(sizeof *rf);
  char err[1024];
  char *text = fuzz_copy(data, size);
  if (!rf || !text)
    goto out;
  int rc = ft_runfile_parse("fuzz.yaml", text, size, rf, err, sizeof err);
  FUZZ_CHECK(rc == FT_OK || rc == FT_ECONFIG);
  if (rc == FT_OK) {
    FUZZ_CHECK(err[0] == 0);
    check_loaded(rf);
  } else {
    FUZZ_CHECK(!strncmp(err, "fuzz.yaml", 9) && !strchr(err, '\n'));
  }
  /* The file path (read, size limit) agrees with the buffer path. */
  if (++calls % 16 == 0) {
    const char *path = fuzz_memfd_path(data, size);
    char err2[1024];
    if (path) {
      int rc2 = ft_runfile_load(path, rf, err2, sizeof err2);
      /* the one difference: a relative data glob under the file's
       * directory ("/proc/self/fd") may grow too long */
      FUZZ_CHECK(rc2 == rc || (rc == FT_OK && strstr(err2, "directory is too long")));
    }
  }
out:
  free(text);
  free(rf);
  return 0;
}
