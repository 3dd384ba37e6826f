# bench_scale: one supervisor against 1,024 / 4,096 / 16,384 simulated ranks
# (tests/scale/ftswarm.c), each figure beside the issue's target.
if(TARGET ftswarm)
  add_test(NAME bench_scale COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_scale.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_scale PROPERTIES LABELS bench TIMEOUT 7200)
endif()
