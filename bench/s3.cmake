# bench_s3: S3 tier upload/download throughput and requests per checkpoint
# against a local moto_server, beside `aws s3 cp` of the same bytes to the
# same server in the same run (CTest label "bench"; `ctest -L bench -R s3 -V`).
if(TARGET ftckpt)
  add_executable(bench_s3 ${CMAKE_CURRENT_SOURCE_DIR}/bench_s3.c)
  target_link_libraries(bench_s3 PRIVATE ftckpt m)
  add_test(NAME bench_s3 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_s3.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_s3 PROPERTIES LABELS bench TIMEOUT 900
                       ENVIRONMENT "FT_BIN=${CMAKE_BINARY_DIR}/bin;FT_SRC=${CMAKE_SOURCE_DIR};FT_BUILD=${CMAKE_BINARY_DIR}")
endif()
