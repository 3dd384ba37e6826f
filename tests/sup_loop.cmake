# Tests of the supervisor's event loop and command line (sup_main, sup_conn,
# sup_commitq, sup_run): terminal states, idle connections, own stalls.
if(TARGET supervise)
  ft_add_test(NAME test_sup_conn SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_conn.c
              LIBS ftsup LABELS unit TIMEOUT 60)
  foreach(t sup_terminal sup_stall sup_idle sup_snapshot sup_catalog sup_localstore sup_storefail
            sup_generation)
    ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh
                       LABELS integration TIMEOUT 120)
  endforeach()
  # two runs with every rename taking 4.5 s (a GOOD mark, then a recovery)
  ft_add_script_test(NAME sup_slowdisk COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_slowdisk.sh
                     LABELS integration TIMEOUT 240)
endif()
