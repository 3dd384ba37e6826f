# Tests of the watchdog detectors (watchdog/, docs/watchdog.md). All pure unit
# tests: no GPU, no network, no root (test_wd_xid_source uses a temporary
# file; its /dev/kmsg and permission cases adapt to what the machine allows).
foreach(t action hb coll loss xid xid_source gpumap nvml straggler)
  ft_add_test(NAME test_wd_${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_wd_${t}.c
              LIBS ftwatchdog LABELS unit TIMEOUT 120)
endforeach()
