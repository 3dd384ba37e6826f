# `cmake --install build [--prefix DIR]`: the programs, their man pages
# (generated from --help and --version by help2man at build time), the
# documentation and example run file, and bash completion.
include(GNUInstallDirs)
set(FT_PROGRAMS supervise ckpt worker ftagent ftdata)
find_program(FT_HELP2MAN help2man)
set(FT_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(FT_MAN_PAGES)
foreach(p ${FT_PROGRAMS})
  if(NOT TARGET ${p})
    continue()
  endif()
  install(TARGETS ${p} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${CMAKE_SOURCE_DIR}/scripts/completion/ftsup.bash
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ${p})
  if(FT_HELP2MAN)
    # --no-discard-stderr: some programs print --help on stderr when asked badly
    add_custom_command(OUTPUT ${FT_MAN_DIR}/${p}.1
      COMMAND ${CMAKE_COMMAND} -E make_directory ${FT_MAN_DIR}
      COMMAND ${FT_HELP2MAN} --no-info --no-discard-stderr --section 1
              --source "ftsup ${PROJECT_VERSION}" --output ${FT_MAN_DIR}/${p}.1 $<TARGET_FILE:${p}>
      DEPENDS ${p} VERBATIM)
    list(APPEND FT_MAN_PAGES ${FT_MAN_DIR}/${p}.1)
  endif()
endforeach()
if(FT_MAN_PAGES)
  add_custom_target(ft_man ALL DEPENDS ${FT_MAN_PAGES})
  install(FILES ${FT_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "man pages: OFF (help2man not found; scripts/install-deps.sh installs it)")
endif()
file(GLOB FT_DOCS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${FT_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_SOURCE_DIR}/examples/demo.yaml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
