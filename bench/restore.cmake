# bench_restore: bytes one rank reads to restore a checkpoint of 16,384 and
# 131,072 ranks (format 3: only the index and shard objects that hold its
# ranges), beside its own shard and the old path (every shard object).
# Writes ~3 GB of shard objects at 131,072 ranks: label "bench" only.
if(TARGET ftworker)
  add_executable(bench_restore ${CMAKE_CURRENT_SOURCE_DIR}/bench_restore.c)
  target_link_libraries(bench_restore PRIVATE ftworker ftckpt m)
  add_test(NAME bench_restore COMMAND bench_restore ${CMAKE_CURRENT_BINARY_DIR}/restore_bench.tmp
                                      16384 131072)
  set_tests_properties(bench_restore PROPERTIES LABELS bench TIMEOUT 3600)
endif()
