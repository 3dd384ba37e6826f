# ftcomm: collectives behind comm.h (each published in the training
# thread's progress record, progress.c, which lives here for that reason) (Gloo over TCP on the CPU; NCCL on the
# GPU where CUDA and NCCL are found) and the directory-backed rendezvous store
# (comm_filestore.h). Included from worker/CMakeLists.txt (and, until then,
# from tests/comm.cmake).
# Debian's libgloo-dev ships a shared libgloo.so in /usr/lib that already
# records its own dependencies (libibverbs, libhiredis), so -lgloo suffices.
if(TARGET ftcomm)
  return()
endif()
find_library(GLOO_LIB gloo)
find_path(GLOO_INCLUDE_DIR gloo/rendezvous/store.h PATHS /usr/include)
if(NOT GLOO_LIB OR NOT GLOO_INCLUDE_DIR)
  message(WARNING "Gloo (libgloo-dev) not found: ftcomm is not built")
  return()
endif()
# Debian's libgloo-dev lacks gloo/common/memory.h, which the TCP pair's
# header (comm_gloo.cpp's abort) includes: a stand-in where it is missing.
if(NOT EXISTS ${GLOO_INCLUDE_DIR}/gloo/common/memory.h)
  set(GLOO_COMPAT_DIR ${CMAKE_CURRENT_LIST_DIR}/gloo_compat CACHE INTERNAL "")
else()
  set(GLOO_COMPAT_DIR "" CACHE INTERNAL "")
endif()
add_library(ftcomm STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_filestore.c
  ${CMAKE_CURRENT_LIST_DIR}/progress.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_gloo.cpp)
target_include_directories(ftcomm PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_include_directories(ftcomm SYSTEM PRIVATE ${GLOO_INCLUDE_DIR} ${GLOO_COMPAT_DIR})
target_link_libraries(ftcomm PUBLIC ftcommon Threads::Threads PRIVATE ${GLOO_LIB})
set_target_properties(ftcomm PROPERTIES POSITION_INDEPENDENT_CODE ON)

# NCCL backend (comm_nccl.c): only with the CUDA parts (FT_HAVE_CUDA, from the
# root CMakeLists) and a libnccl + nccl.h (the CUDA toolkit's, or NCCL_HOME).
# FT_HAVE_NCCL is PUBLIC so that users of ftcomm (and comm.c, which otherwise
# compiles a comm_nccl_new that returns FT_ECONFIG) know the backend is there.
if(FT_HAVE_CUDA)
  find_library(NCCL_LIB nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ENV NCCL_HOME
               PATH_SUFFIXES lib lib64)
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT} ENV NCCL_HOME
            PATH_SUFFIXES include)
  if(NCCL_LIB AND NCCL_INCLUDE_DIR)
    message(STATUS "NCCL backend: ON (${NCCL_LIB})")
    target_sources(ftcomm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/comm_nccl.c)
    target_compile_definitions(ftcomm PUBLIC FT_HAVE_NCCL)
    target_include_directories(ftcomm SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
    target_link_libraries(ftcomm PRIVATE CUDA::cudart ${NCCL_LIB})
  else()
    message(WARNING "CUDA is on but NCCL (libnccl, nccl.h) was not found: ftcomm has no NCCL backend")
  endif()
endif()
