# Tests of the data path: the token-shard loader (worker/data.c), the data
# tool (build/bin/ftdata) and GPT-2's layout and model files (common/ft_gpt2.c).
# The unit tests link the loader alone (data.c, and data_s3.c with the
# store's S3 client for s3:// shards) plus ftcommon (ft_gpt2, ft_file,
# ft_err), not the whole worker library (progress.c and data_wait.c: the
# storage_wait phase data_s3.c sets while the training thread waits).
add_library(ft_datatest STATIC ${CMAKE_SOURCE_DIR}/worker/data.c ${CMAKE_SOURCE_DIR}/worker/data_s3.c
            ${CMAKE_SOURCE_DIR}/worker/data_listing.c ${CMAKE_SOURCE_DIR}/worker/data_wait.c
            ${CMAKE_SOURCE_DIR}/worker/progress.c)
target_include_directories(ft_datatest PUBLIC ${CMAKE_SOURCE_DIR}/worker)
target_link_libraries(ft_datatest PUBLIC ftckpt ftcommon m)

ft_add_test(NAME test_data SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_data.c
            LIBS ft_datatest LABELS unit TIMEOUT 60)
ft_add_test(NAME test_data_s3 SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_data_s3.c
            LIBS ft_datatest LABELS unit TIMEOUT 60)
ft_add_test(NAME test_gpt2io SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_gpt2io.c
            LIBS ft_datatest LABELS unit TIMEOUT 60)

if(TARGET ftdata)
  foreach(t data_stats_bad data_synth data_encode data_args)
    ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/${t}.sh
                       LABELS integration TIMEOUT 120)
  endforeach()
endif()
# A run file's relative data glob, resolved against its directory, by the worker.
if(TARGET ftdata AND TARGET worker)
  ft_add_script_test(NAME data_runfile_dir
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/data_runfile_dir.sh
                     LABELS integration TIMEOUT 120)
endif()
# s3:// data (worker/data_s3.c) against moto with signatures checked
# (tests/integration/s3_lib.sh): bit identity with the local run, the cache
# bound, each host's GETs at world 4 (the trainer's hint), a shard changed
# or deleted under the run.
if(TARGET ftdata AND TARGET worker)
  ft_add_script_test(NAME data_s3 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/data_s3.sh
                     LABELS integration TIMEOUT 600)
  # the data's storage failing under a supervised gang (a 503 SlowDown and
  # a hanging proxy on the data endpoint): the step waits and says so
  # (data_wait events, phase storage_wait), nobody is blamed
  ft_add_script_test(NAME data_s3_storage
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/data_s3_storage.sh
                     LABELS integration TIMEOUT 300)
endif()
# `ftdata encode|synth --out s3://...` (ckptstore/ckpt_s3_write.h) against moto
# with signatures checked: the bytes of a local encode, refused keys, no
# object ever half-written.
if(TARGET ftdata)
  ft_add_script_test(NAME data_encode_s3
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/data_encode_s3.sh
                     LABELS integration s3 TIMEOUT 120)
endif()
# supervised runs on s3:// data resumed (a fresh --state: the listing from
# the checkpoint; the supervisor killed) and recovered (in process, shrink):
# the bits of the runs on the local copies
if(TARGET ftdata AND TARGET worker AND TARGET supervise)
  ft_add_script_test(NAME data_s3_resume
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/data_s3_resume.sh
                     LABELS integration TIMEOUT 300)
endif()
