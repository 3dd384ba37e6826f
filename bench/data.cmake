# bench_data_s3: training tokens/s and GET requests/s reading s3:// shards
# (moto, locally) beside the same shards on local disk, interleaved pairs;
# then on the namespace Slurm cluster with the bucket host's link limited to
# about twice the training's byte rate (root; that part skipped elsewhere).
if(TARGET worker AND TARGET ftdata)
  add_test(NAME bench_data_s3 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_data_s3.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_data_s3 PROPERTIES LABELS bench TIMEOUT 900 RESOURCE_LOCK cluster
                       ENVIRONMENT "FT_BIN=${CMAKE_BINARY_DIR}/bin;FT_SRC=${CMAKE_SOURCE_DIR}")
endif()
