# Tests of the S3 tier (ckptstore/ckpt_s3_*.c, ckpt_tier_s3.c): pure unit
# tests (SigV4 against AWS's examples, the XML and credentials parsers), then
# tests against moto_server with authentication enforced (every signature
# checked, as AWS does: tests/integration/s3_lib.sh, chaos/moto_auth.py) that
# each script starts on loopback and kills at the end. A script FAILS when
# moto cannot run: S3 support is never "tested" by skipping, nor against a
# server that accepts any signature.
if(TARGET ftckpt AND TARGET ckpt AND TARGET ckpt_testwriter)
  ft_add_test(NAME test_ckpt_s3_config SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ckpt_s3_config.c
              LIBS ftckpt PkgConfig::LIBCURL LABELS unit TIMEOUT 60)

  # the tiered tier's invariant checks (no server: they abort before a request)
  ft_add_test(NAME test_ckpt_s3_tiered_inv
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ckpt_s3_tiered_inv.c
              LIBS ftckpt PkgConfig::LIBCURL LABELS unit TIMEOUT 60)

  # needs the server: built here, run by s3_client.sh
  add_executable(test_ckpt_s3_client ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ckpt_s3_client.c)
  target_link_libraries(test_ckpt_s3_client PRIVATE ftckpt PkgConfig::CMOCKA)
  set_target_properties(test_ckpt_s3_client PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

  # the s3 chaos suite's wrong-key case (supervise exits 4 after one 403),
  # started as chaos/README.md writes it: no --bin (FT_BIN), no --work
  if(TARGET supervise)
    ft_add_script_test(NAME chaos_s3_wrong_key LABELS integration chaos TIMEOUT 300
                       COMMAND python3 ${CMAKE_SOURCE_DIR}/chaos/chaos.py --suite s3 wrong-key)
  endif()

  foreach(t s3_client s3_store s3_chaos s3_gc_safety ckpt_property)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh)
      ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh
                         LABELS integration TIMEOUT 600)
    endif()
  endforeach()
  # The property test (random ckpt commands under faults, a local and an s3
  # store): 40 commands per store (about 2 minutes on two cores), 15 under
  # the sanitizers. FT_PROPERTY_SEED=N replays one.
  if(SANITIZE AND TEST ckpt_property)
    set_property(TEST ckpt_property APPEND PROPERTY ENVIRONMENT FT_PROPERTY_OPS=15)
  endif()
endif()
