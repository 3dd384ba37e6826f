# Tests of the small shared helpers in common/: the write-every-byte loops
# (ft_file.h), the hex codec (ft_hex.h), the clocks (ft_clock.h) and the
# addresses of multi-host runs (ft_net.h), and FT_FAILPOINTS's parser
# (ft_failpoint.h).
foreach(t test_ft_file test_hex test_clock test_net test_failpoint)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c)
    ft_add_test(NAME ${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c
                LIBS ftcommon Threads::Threads LABELS unit TIMEOUT 60)
  endif()
endforeach()
# worker/comm_filestore.c on a failing write (it writes through ft_write_all).
if(TARGET ftcomm)
  ft_add_test(NAME test_filestore_fail SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_filestore_fail.c
              LIBS ftcomm LABELS unit TIMEOUT 30)
endif()
