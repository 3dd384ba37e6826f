# Tests of the supervisor (supervisor/): unit tests of its pure modules, and
# integration tests that run the real `supervise` with a protocol-conformant
# fake worker (tests/integration/fake_worker.c) and a hostile client.
if(TARGET supervise)
  foreach(t test_sup_kv test_sup_gang test_sup_events test_sup_launch test_sup_rollback)
    ft_add_test(NAME ${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c
                LIBS ftsup LABELS unit TIMEOUT 60)
  endforeach()
  # common/ft_bug.h: FT_BUG and FT_ASSERT_INV, which sup_recovery.c's check_state uses
  ft_add_test(NAME test_ft_bug SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ft_bug.c
              LIBS ftcommon LABELS unit TIMEOUT 60)
  ft_add_test(NAME test_sup_meta SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_meta.c
              LIBS ftckpt LABELS unit TIMEOUT 60)

  add_executable(fake_worker ${CMAKE_CURRENT_SOURCE_DIR}/integration/fake_worker.c)
  target_link_libraries(fake_worker PRIVATE ftckpt ftcommon PkgConfig::CJSON m)
  set_target_properties(fake_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

  foreach(t sup_basic sup_recovery sup_hostile sup_resume sup_loss sup_faults)
    ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh
                       LABELS integration TIMEOUT 90)
  endforeach()
endif()
