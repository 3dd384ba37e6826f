# bench_inprocess: recovery in parts (detect, stop, re-form, restore, first
# step), process restart beside in-process restart, at two model sizes.
add_test(NAME bench_inprocess COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_inprocess.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_inprocess PROPERTIES LABELS bench TIMEOUT 900)
