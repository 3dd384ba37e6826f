# bench_dashboard: the report of a 100k-step run, thinned vs every step, in Chromium.
add_test(NAME bench_dashboard COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_dashboard.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_dashboard PROPERTIES LABELS bench TIMEOUT 900 SKIP_RETURN_CODE 77)
