# bench_incremental: stored vs logical bytes of five successive checkpoints.
add_test(NAME bench_incremental COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_incremental.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_incremental PROPERTIES LABELS bench TIMEOUT 600)
