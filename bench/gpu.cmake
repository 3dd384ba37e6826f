# GPU benchmarks (CTest label "bench", not part of the default test run; both
# skip with 77 where no GPU is visible). Only where the CUDA parts are built.
#   bench_gpu_copy  a bare pinned device-to-host copy through kernels_cuda.h
#   bench_gpu_train the CUDA trainer's tokens/s and MFU for GPT-2 124M and
#                   350M beside PyTorch's (bench/pytorch_gpt2.py) and the
#                   measured bf16 matmul peak, and the checkpoint stall beside
#                   a bare D2H copy of the same bytes (bench/gpu_train.sh)
# On a GPU machine without this project's Debian libraries, use the bundle:
# scripts/gpu-bundle.sh here, then `source gpu-bundle/env.sh && bench/gpu_train.sh`.
if(TARGET ftkernels_cuda)
  add_executable(bench_gpu_copy ${CMAKE_CURRENT_SOURCE_DIR}/bench_gpu_copy.c)
  target_link_libraries(bench_gpu_copy PRIVATE ftkernels_cuda ftcommon)
  add_test(NAME bench_gpu_copy COMMAND bench_gpu_copy 1g 5)
  set_tests_properties(bench_gpu_copy PROPERTIES LABELS bench TIMEOUT 120
                       SKIP_RETURN_CODE ${FT_SKIP_RC})
  ft_add_script_test(NAME bench_gpu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu_train.sh
                     LABELS bench TIMEOUT 1800)
endif()
