# ft_write_if_changed(PATH TEXT): writes TEXT to PATH unless PATH already
# holds exactly it, so a generated file keeps its timestamp (and nothing
# that depends on it is rebuilt) when its content did not change. Included
# by the build-time scripts ft_embed.cmake and ft_revision.cmake.
function(ft_write_if_changed path text)
  if(EXISTS ${path})
    file(READ ${path} old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE ${path} "${text}")
endfunction()
