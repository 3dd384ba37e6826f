# Tests of the checkpoint store (ckptstore/): unit tests of the library
# against a real RocksDB and real files, a check that its files call each
# other in no circle (layering_store), and integration tests that drive the
# real `ckpt` program and a real writer process (crash and corruption tests).
if(TARGET ftckpt AND TARGET ckpt)
  add_executable(ckpt_testwriter ${CMAKE_CURRENT_SOURCE_DIR}/integration/ckpt_testwriter.c)
  target_link_libraries(ckpt_testwriter PRIVATE ftckpt m)
  set_target_properties(ckpt_testwriter PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

  foreach(t test_ckpt_chunk test_ckpt_manifest test_ckpt_read test_ckpt_replica test_ckpt_catalog
           test_ckpt_gc test_ckpt_gc_inv test_ckpt_delta test_ckpt_shardobj test_ckpt_ranges
           test_ckpt_hosts)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c)
      ft_add_test(NAME ${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c
                  LIBS ftckpt LABELS unit TIMEOUT 120)
    endif()
  endforeach()

  foreach(t ckpt_cli ckpt_commands ckpt_crash ckpt_corrupt ckpt_fulldisk ckpt_catalog_damage
           ckpt_s3_marks ckpt_safety)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh)
      ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh
                         LABELS integration TIMEOUT 240)
    endif()
  endforeach()
  # No circle of calls among the store's files (issue 40): nm on ftckpt's
  # objects; fails naming the files of a circle.
  find_program(FT_PYTHON3 python3)
  if(FT_PYTHON3)
    ft_add_script_test(NAME layering_store LABELS unit TIMEOUT 30
                       COMMAND ${FT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/layering.py store)
    set_property(TEST layering_store APPEND PROPERTY ENVIRONMENT NM=${CMAKE_NM})
  endif()
  # Under the sanitizers each kill waits for a writer that opens its store
  # several times slower: 20 kills there (50 in the plain build).
  if(SANITIZE AND TEST ckpt_crash)
    set_property(TEST ckpt_crash APPEND PROPERTY ENVIRONMENT CKPT_CRASH_ITERS=20)
  endif()
endif()
