# Tests of what every program's command line shares: --version, exact option
# names with suggestions, and the installed layout (cmake --install: man
# pages, docs, bash completion).
if(TARGET supervise AND TARGET ckpt AND TARGET worker AND TARGET ftagent AND TARGET ftdata)
  ft_add_script_test(NAME cli_common COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/cli_common.sh
                     LABELS integration TIMEOUT 120)
endif()
