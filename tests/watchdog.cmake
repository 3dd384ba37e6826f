# Tests of the watchdog detectors (watchdog/, docs/watchdog.md). All pure unit
# tests: no GPU, no network, no root (test_wd_xid_source uses a temporary
# file; its /dev/kmsg and permission cases adapt to what the machine allows).
foreach(t action hb coll loss xid xid_source gpumap nvml straggler progress)
  ft_add_test(NAME test_wd_${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_wd_${t}.c
              LIBS ftwatchdog LABELS unit TIMEOUT 120)
endforeach()
# A stand-in NVML (no GPU here) for the node doctor's health query: the
# test loads it by path, and so do the cuemu doctor tests (FT_NVML_LIB).
add_library(fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/unit/fake_nvml.c)
set_target_properties(fake_nvml PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_definitions(test_wd_nvml PRIVATE FAKE_NVML="$<TARGET_FILE:fake_nvml>")
add_dependencies(test_wd_nvml fake_nvml)
