# bench_ckpt: checkpoint store save/restore throughput beside plain I/O and
# `zstd -1` (CTest label "bench"; not part of the default test run:
# run it with `ctest -L bench -V`).
if(TARGET ftckpt)
  add_executable(bench_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/bench_ckpt.c)
  target_link_libraries(bench_ckpt PRIVATE ftckpt m)
  add_test(NAME bench_ckpt COMMAND bench_ckpt ${CMAKE_CURRENT_BINARY_DIR}/ckpt_bench.tmp)
  set_tests_properties(bench_ckpt PROPERTIES LABELS bench TIMEOUT 900)
endif()
# bench_delta: delta chunks against today's codec, zstd -3 and restic on a
# real run's successive states (bench_delta.sh drives bench_delta).
if(TARGET ftckpt)
  add_executable(bench_delta ${CMAKE_CURRENT_SOURCE_DIR}/bench_delta.c)
  target_link_libraries(bench_delta PRIVATE ftckpt m)
  add_test(NAME bench_delta COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_delta.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_delta PROPERTIES LABELS bench TIMEOUT 3600)
endif()
# bench_moments: what a resume from lossy optimizer moments (checkpoint.moments)
# does to the next 200 steps' losses.
if(TARGET worker)
  add_test(NAME bench_moments COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench_moments.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_moments PROPERTIES LABELS bench TIMEOUT 900)
endif()
