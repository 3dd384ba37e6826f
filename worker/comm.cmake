# ftcomm: collectives behind comm.h (Gloo over TCP on the CPU) and the
# directory-backed rendezvous store (comm_filestore.h). Included from
# worker/CMakeLists.txt (and, until then, from tests/comm.cmake).
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
add_library(ftcomm STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_filestore.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_gloo.cpp)
target_include_directories(ftcomm PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_include_directories(ftcomm SYSTEM PRIVATE ${GLOO_INCLUDE_DIR})
target_link_libraries(ftcomm PUBLIC ftcommon Threads::Threads PRIVATE ${GLOO_LIB})
set_target_properties(ftcomm PROPERTIES POSITION_INDEPENDENT_CODE ON)
