# bench_http_load: 2,000 connections and 500 slowloris against a running demo, paired with unloaded runs.
add_test(NAME bench_http_load COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_http_load.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_http_load PROPERTIES LABELS bench TIMEOUT 1800 SKIP_RETURN_CODE 77)
