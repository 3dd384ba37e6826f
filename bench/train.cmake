# bench_train: the CPU trainer's tokens/s and GFLOP/s beside sgemm's.
if(TARGET ftworker)
  add_executable(bench_train ${CMAKE_CURRENT_SOURCE_DIR}/bench_train.c)
  target_link_libraries(bench_train PRIVATE ftworker)
  add_test(NAME bench_train COMMAND bench_train)
  set_tests_properties(bench_train PROPERTIES LABELS bench TIMEOUT 600)
endif()
