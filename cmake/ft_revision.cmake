# Writes OUT (a C header defining FT_GIT_REVISION) from `git describe` of
# SRC, rewriting it only when the revision changed, so a commit is picked up
# by the next build without recompiling anything else. Run at build time by
# common/CMakeLists.txt. Outside a git checkout the revision is "unknown".
execute_process(COMMAND git -C ${SRC} describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE res ERROR_QUIET)
if(NOT res EQUAL 0 OR rev STREQUAL "")
  set(rev "unknown")
endif()
set(text "#define FT_GIT_REVISION \"${rev}\"\n")
include(${CMAKE_CURRENT_LIST_DIR}/ft_write_if_changed.cmake)
ft_write_if_changed(${OUT} "${text}")
