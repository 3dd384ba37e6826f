# bench_doctor: the node doctor's time per node and the silent-data-corruption
# check's overhead, beside the issue's targets (10 s; 1% of step time).
add_test(NAME bench_doctor COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_doctor.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_doctor PROPERTIES LABELS bench TIMEOUT 900)
