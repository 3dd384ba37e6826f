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
if(EXISTS ${OUT})
  file(READ ${OUT} old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE ${OUT} "${text}")
