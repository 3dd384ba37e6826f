# kernels/: unit tests of the CPU kernels; the CUDA comparison test (label
# gpu) only where the CUDA parts are built. It skips (77) without a GPU.
if(TARGET ftkernels)
  ft_add_test(NAME test_kernels SOURCES unit/test_kernels.c LIBS ftkernels m LABELS unit
              TIMEOUT 120)
  ft_add_test(NAME test_kernels_determinism SOURCES unit/test_kernels_determinism.c
              LIBS ftkernels m LABELS unit TIMEOUT 300)
endif()
if(FT_HAVE_CUDA AND TARGET ftkernels_cuda)
  ft_add_test(NAME test_kernels_cuda SOURCES gpu/test_kernels_cuda.c
              LIBS ftkernels_cuda ftkernels m LABELS gpu TIMEOUT 300)
endif()
