# cuemu (tests/cuemu/): the CUDA kernels and the CUDA trainer, run on the CPU.
#
# Where no GPU is lent, the label-gpu tests only skip. cuemu compiles
# kernels/cuda/*.cu with the host compiler against the real CUDA headers,
# runs each CUDA thread as a fibre, streams as deferred queues and cuBLASLt
# as its documented arithmetic (see tests/cuemu/cuemu.h for what is and is
# not modelled), so that the kernels' index math, barriers, stream waits and
# the CUDA engine's logic are tested in every build (label cuemu):
#   test_kernels_cuemu, test_kernels_cuemu_rev  the kernel tests (fibres in
#       forward, then reverse order between barriers)
#   worker_cuemu_curve, worker_cuemu_resume  the CUDA trainer's GPU tests,
#       with build/cuemu/bin/worker (the CUDA engine on cuemu) as the worker
#   worker_cuemu_oom  a real cudaMalloc failure: micro-batch halving on the
#       CUDA engine, bit-identical to the configured smaller micro-batch
#   test_comm_nccl_cuemu, worker_cuemu_world, sup_cuemu  NCCL on cuemu
#       (cuemu_nccl.cpp): the NCCL backend's tests with two ranks, the CUDA
#       FSDP engine at world 2 and 4, a world-2 run under the supervisor
#       that loses a node and ends bit-identical to one that does not
#   sup_cuemu_hang  a rank stuck in cudaDeviceSynchronize behind a kernel
#       that never finishes (failpoint hang_in=cuda): the progress watchdog
#       names its node, its process goes, a spare takes its place
# It needs only the CUDA headers (no driver, no GPU, no libcudart) and an
# x86-64 host (the fibre switch is x86-64 assembly).
if(NOT FT_CUEMU)
  message(STATUS "cuemu (CUDA kernels on the CPU): OFF (FT_CUEMU=OFF)")
  return()
endif()
find_path(FT_CUEMU_CUDA_INC cuda_runtime.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include ENV CUDA_HOME
          PATH_SUFFIXES include)
find_package(Python3 COMPONENTS Interpreter)
if(NOT FT_CUEMU_CUDA_INC OR NOT EXISTS ${FT_CUEMU_CUDA_INC}/cublasLt.h
   OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" OR NOT Python3_Interpreter_FOUND
   OR NOT TARGET ftcomm OR NOT TARGET ftckpt OR NOT TARGET ftwatchdog)
  message(STATUS "cuemu (CUDA kernels on the CPU): OFF (needs the CUDA headers, x86-64, python3)")
  return()
endif()
message(STATUS "cuemu (CUDA kernels on the CPU): ON (${FT_CUEMU_CUDA_INC})")

set(EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/cuemu)
set(EMU_OUT ${CMAKE_BINARY_DIR}/cuemu)

# kernels/cuda/*.cu, launches rewritten (cuemu_launch.py), as C++
file(GLOB EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
set(EMU_GEN)
foreach(cu ${EMU_CU})
  get_filename_component(base ${cu} NAME_WE)
  set(gen ${EMU_OUT}/src/${base}.cpp)
  add_custom_command(OUTPUT ${gen}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${EMU_OUT}/src
                     COMMAND ${Python3_EXECUTABLE} ${EMU_DIR}/cuemu_launch.py ${cu} ${gen}
                     DEPENDS ${cu} ${EMU_DIR}/cuemu_launch.py
                     COMMENT "cuemu: ${base}.cu")
  list(APPEND EMU_GEN ${gen})
endforeach()
set_source_files_properties(${EMU_GEN} PROPERTIES
  COMPILE_OPTIONS "-include;${EMU_DIR}/cuemu.h;-Wno-unknown-pragmas"
  OBJECT_DEPENDS "${EMU_DIR}/cuemu.h")

add_library(ftkernels_cuemu STATIC ${EMU_GEN} ${EMU_DIR}/cuemu_rt.cpp)
target_include_directories(ftkernels_cuemu PUBLIC ${CMAKE_SOURCE_DIR}/kernels
                           PRIVATE ${CMAKE_SOURCE_DIR}/kernels/cuda ${EMU_DIR})
target_include_directories(ftkernels_cuemu SYSTEM PRIVATE ${FT_CUEMU_CUDA_INC})
target_link_libraries(ftkernels_cuemu PUBLIC ftcommon Threads::Threads m)

ft_add_test(NAME test_kernels_cuemu SOURCES gpu/test_kernels_cuda.c
            LIBS ftkernels_cuemu ftkernels m LABELS "cuemu" TIMEOUT 300)
set_property(TEST test_kernels_cuemu APPEND PROPERTY ENVIRONMENT "CUEMU_ORDER=fwd")
add_test(NAME test_kernels_cuemu_rev COMMAND test_kernels_cuemu)
set_tests_properties(test_kernels_cuemu_rev PROPERTIES LABELS "cuemu" TIMEOUT 300
                     ENVIRONMENT "CUEMU_ORDER=rev;CUEMU_SEED=7")

# NCCL on cuemu (cuemu_nccl.cpp): ranks are processes, each with its own
# emulated device, exchanging through shared memory on their streams. The
# NCCL backend (worker/comm_nccl.c) is built against it, and its test runs
# with two emulated devices, so the 2-rank cases run.
find_path(FT_CUEMU_NCCL_INC nccl.h HINTS ${FT_CUEMU_CUDA_INC} ${CUDAToolkit_INCLUDE_DIRS}
          ENV NCCL_HOME PATH_SUFFIXES include)
if(FT_CUEMU_NCCL_INC)
  add_library(ftnccl_cuemu STATIC ${EMU_DIR}/cuemu_nccl.cpp)
  target_include_directories(ftnccl_cuemu SYSTEM PRIVATE ${FT_CUEMU_CUDA_INC} ${FT_CUEMU_NCCL_INC})
  target_link_libraries(ftnccl_cuemu PUBLIC ftkernels_cuemu)
  add_library(ftcomm_nccl_cuemu STATIC ${CMAKE_SOURCE_DIR}/worker/comm.c
              ${CMAKE_SOURCE_DIR}/worker/comm_filestore.c ${CMAKE_SOURCE_DIR}/worker/comm_gloo.cpp
              ${CMAKE_SOURCE_DIR}/worker/comm_nccl.c ${CMAKE_SOURCE_DIR}/worker/progress.c)
  target_compile_definitions(ftcomm_nccl_cuemu PUBLIC FT_HAVE_NCCL)
  target_include_directories(ftcomm_nccl_cuemu PUBLIC ${CMAKE_SOURCE_DIR}/worker)
  target_include_directories(ftcomm_nccl_cuemu SYSTEM PRIVATE ${GLOO_INCLUDE_DIR} ${GLOO_COMPAT_DIR}
                             ${FT_CUEMU_CUDA_INC} ${FT_CUEMU_NCCL_INC})
  target_link_libraries(ftcomm_nccl_cuemu PUBLIC ftcommon ftnccl_cuemu Threads::Threads
                        PRIVATE ${GLOO_LIB})
  message(STATUS "cuemu NCCL: ON (${FT_CUEMU_NCCL_INC}/nccl.h)")
  set(FT_CUEMU_COMM ftcomm_nccl_cuemu)
else()
  message(STATUS "cuemu NCCL: OFF (no nccl.h): the cuemu worker runs standalone only")
  set(FT_CUEMU_COMM ftcomm_cuemu)
endif()

# The worker with the CUDA engine on cuemu (NCCL on cuemu where nccl.h is found),
# in build/cuemu/bin beside links to the build's other programs.
file(GLOB EMU_WORKER_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/worker/*.c)
list(FILTER EMU_WORKER_SRC EXCLUDE REGEX "/(ftdata_main|agent_main|comm[a-z_]*|progress)\\.c$")
add_library(ftcomm_cuemu STATIC ${CMAKE_SOURCE_DIR}/worker/comm.c
            ${CMAKE_SOURCE_DIR}/worker/comm_filestore.c ${CMAKE_SOURCE_DIR}/worker/comm_gloo.cpp
            ${CMAKE_SOURCE_DIR}/worker/progress.c)
target_include_directories(ftcomm_cuemu PUBLIC ${CMAKE_SOURCE_DIR}/worker)
target_include_directories(ftcomm_cuemu SYSTEM PRIVATE ${GLOO_INCLUDE_DIR} ${GLOO_COMPAT_DIR})
target_link_libraries(ftcomm_cuemu PUBLIC ftcommon Threads::Threads PRIVATE ${GLOO_LIB})
add_executable(worker_cuemu ${EMU_WORKER_SRC})
target_compile_definitions(worker_cuemu PRIVATE FT_WITH_CUDA)
target_link_libraries(worker_cuemu PRIVATE ftkernels_cuemu ftkernels ftckpt ${FT_CUEMU_COMM} ftwatchdog
                      ftcommon Threads::Threads m)
set_target_properties(worker_cuemu PROPERTIES OUTPUT_NAME worker
                      RUNTIME_OUTPUT_DIRECTORY ${EMU_OUT}/bin)
file(MAKE_DIRECTORY ${EMU_OUT}/bin)
foreach(prog ftdata ftagent ckpt supervise)
  file(CREATE_LINK ${CMAKE_BINARY_DIR}/bin/${prog} ${EMU_OUT}/bin/${prog} SYMBOLIC)
endforeach()

function(ft_cuemu_script_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "cuemu" TIMEOUT 600 SKIP_RETURN_CODE ${FT_SKIP_RC}
                       ENVIRONMENT "FT_CUEMU=1;FT_BIN=${EMU_OUT}/bin;FT_SRC=${CMAKE_SOURCE_DIR};FT_BUILD=${CMAKE_BINARY_DIR};${FT_TEST_ENV}")
endfunction()
ft_cuemu_script_test(worker_cuemu_curve ${CMAKE_SOURCE_DIR}/tests/gpu/worker_cuda_curve.sh)
ft_cuemu_script_test(worker_cuemu_resume ${CMAKE_SOURCE_DIR}/tests/integration/worker_resume.sh cuda)
ft_cuemu_script_test(worker_cuemu_oom ${CMAKE_SOURCE_DIR}/tests/cuemu/worker_cuemu_oom.sh)
ft_cuemu_script_test(worker_cuemu_doctor ${CMAKE_SOURCE_DIR}/tests/cuemu/doctor_cuemu.sh)

if(TARGET ftcomm_nccl_cuemu)
  ft_cuemu_script_test(worker_cuemu_world ${CMAKE_SOURCE_DIR}/tests/cuemu/worker_cuemu_world.sh)
  ft_cuemu_script_test(sup_cuemu ${CMAKE_SOURCE_DIR}/tests/cuemu/sup_cuemu.sh)
  ft_cuemu_script_test(sup_cuemu_hang ${CMAKE_SOURCE_DIR}/tests/cuemu/sup_cuemu_hang.sh)
  ft_add_test(NAME test_comm_nccl_cuemu SOURCES gpu/test_comm_nccl.c
              LIBS ftcomm_nccl_cuemu LABELS "cuemu" TIMEOUT 300)
  target_include_directories(test_comm_nccl_cuemu SYSTEM PRIVATE ${FT_CUEMU_CUDA_INC})
  set_property(TEST test_comm_nccl_cuemu APPEND PROPERTY ENVIRONMENT "CUEMU_DEVICES=2")
endif()