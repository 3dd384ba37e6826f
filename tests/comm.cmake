# Collectives (worker/comm*.{c,cpp}): real processes over TCP on 127.0.0.1.
if(NOT TARGET ftcomm)
  include(${CMAKE_SOURCE_DIR}/worker/comm.cmake)
endif()
if(TARGET ftcomm)
  ft_add_test(NAME test_comm_filestore SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_comm_filestore.c
              LIBS ftcomm LABELS unit TIMEOUT 30)
  # the training thread's progress record (worker/progress.c, in ftcomm)
  ft_add_test(NAME test_progress SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_progress.c
              LIBS ftcomm LABELS unit TIMEOUT 60)
  ft_add_test(NAME test_comm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_comm.c
              LIBS ftcomm LABELS integration TIMEOUT 90)
endif()
# The NCCL backend (label gpu): only where ftcomm was built with it. It exits
# 77 (skipped) when no CUDA device is visible.
if(TARGET ftcomm AND FT_HAVE_CUDA)
  get_target_property(_ftcomm_defs ftcomm INTERFACE_COMPILE_DEFINITIONS)
  if("FT_HAVE_NCCL" IN_LIST _ftcomm_defs)
    ft_add_test(NAME test_comm_nccl SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_comm_nccl.c
                LIBS ftcomm CUDA::cudart LABELS gpu TIMEOUT 240)
  endif()
endif()
