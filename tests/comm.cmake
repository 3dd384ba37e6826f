# Collectives (worker/comm*.{c,cpp}): real processes over TCP on 127.0.0.1.
if(NOT TARGET ftcomm)
  include(${CMAKE_SOURCE_DIR}/worker/comm.cmake)
endif()
if(TARGET ftcomm)
  ft_add_test(NAME test_comm_filestore SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_comm_filestore.c
              LIBS ftcomm LABELS unit TIMEOUT 30)
  ft_add_test(NAME test_comm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_comm.c
              LIBS ftcomm LABELS integration TIMEOUT 90)
endif()
