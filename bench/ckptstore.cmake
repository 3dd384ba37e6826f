# bench_ckpt: checkpoint store save/restore throughput beside plain I/O and
# `zstd -1` (CTest label "bench"; not part of the default test run:
# run it with `ctest -L bench -V`).
if(TARGET ftckpt)
  add_executable(bench_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/bench_ckpt.c)
  target_link_libraries(bench_ckpt PRIVATE ftckpt m)
  add_test(NAME bench_ckpt COMMAND bench_ckpt ${CMAKE_CURRENT_BINARY_DIR}/ckpt_bench.tmp)
  set_tests_properties(bench_ckpt PROPERTIES LABELS bench TIMEOUT 900)
endif()
