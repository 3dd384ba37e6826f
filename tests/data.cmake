# Tests of the data path: the token-shard loader (worker/data.c), the data
# tool (build/bin/ftdata) and GPT-2's layout and model files (common/ft_gpt2.c).
# The unit tests link a small library of exactly the files under test (plus
# ft_err.c) rather than ftworker/ftcommon, so they build and run even while
# other parts of those libraries are being changed.
add_library(ft_datatest STATIC ${CMAKE_SOURCE_DIR}/worker/data.c
            ${CMAKE_SOURCE_DIR}/common/ft_gpt2.c ${CMAKE_SOURCE_DIR}/common/ft_err.c)
target_include_directories(ft_datatest PUBLIC ${CMAKE_SOURCE_DIR}/worker ${CMAKE_SOURCE_DIR}/common)
target_link_libraries(ft_datatest PUBLIC PkgConfig::CJSON m)

ft_add_test(NAME test_data SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_data.c
            LIBS ft_datatest LABELS unit TIMEOUT 60)
ft_add_test(NAME test_gpt2io SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_gpt2io.c
            LIBS ft_datatest LABELS unit TIMEOUT 60)

if(TARGET ftdata)
  foreach(t data_stats_bad data_synth data_encode)
    ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/${t}.sh
                       LABELS integration TIMEOUT 120)
  endforeach()
endif()
