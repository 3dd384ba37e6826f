# The trainer, driven through the real worker program.
ft_add_script_test(NAME worker_determinism LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_determinism.sh)
ft_add_script_test(NAME worker_resume LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_resume.sh)
ft_add_script_test(NAME worker_baddata LABELS integration TIMEOUT 120
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_baddata.sh)
ft_add_script_test(NAME worker_modelfiles LABELS integration TIMEOUT 120
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_modelfiles.sh)
ft_add_script_test(NAME hf_dir LABELS integration TIMEOUT 180
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/hf_dir.sh)
ft_add_script_test(NAME worker_learns LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_learns.sh)
ft_add_script_test(NAME fsdp_world4 LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/fsdp_world4.sh)
ft_add_script_test(NAME worker_oom LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_oom.sh)
# the reported step time (straggler detection) on validation steps
ft_add_script_test(NAME worker_steptime LABELS integration TIMEOUT 120
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_steptime.sh)
# The CUDA trainer (label gpu): they exit 77 (skipped) where `worker --gpus`
# sees no GPU, which includes every build without CUDA.
ft_add_script_test(NAME worker_cuda_curve LABELS gpu TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu/worker_cuda_curve.sh)
ft_add_script_test(NAME worker_cuda_resume LABELS gpu TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_resume.sh cuda)
ft_add_script_test(NAME sup_cuda LABELS gpu TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu/sup_cuda.sh)
# the CUDA FSDP engine at world 2 and 4 (one GPU per rank; the sizes above the
# GPU count are skipped); on cuemu every build runs it (worker_cuemu_world)
ft_add_script_test(NAME worker_cuda_world LABELS gpu TIMEOUT 600
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/cuemu/worker_cuemu_world.sh)
ft_add_test(NAME test_shardmap SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_shardmap.c
            LIBS ftworker LABELS unit TIMEOUT 60)
# the control client against a fake supervisor: the in-process rejoin's
# state machine and its checks (worker/ctl.c)
ft_add_test(NAME test_ctl SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_ctl.c LIBS ftworker
            LABELS unit TIMEOUT 60)
ft_add_test(NAME test_sdc SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_sdc.c LIBS ftworker
            LABELS unit TIMEOUT 60)
# a hung worker's evidence: the training thread's stack on SIGUSR1, also
# with a SIGTERM right behind it; -rdynamic as the worker, for the names
ft_add_test(NAME test_stackdump SOURCES ${CMAKE_SOURCE_DIR}/tests/unit/test_stackdump.c
            LIBS ftworker LABELS unit TIMEOUT 60)
set_target_properties(test_stackdump PROPERTIES ENABLE_EXPORTS ON)
# Configuration and data errors under the supervisor (the real worker and
# the fake one): the run fails with the workers' message, no node blamed.
if(TARGET supervise AND TARGET fake_worker)
  ft_add_script_test(NAME sup_config LABELS integration TIMEOUT 120
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/sup_config.sh)
endif()
# Checks across keys on the merged configuration, for the world the program
# trains in: worker --standalone (world 1) and supervise --set nodes.count=1
# take a batch that only one rank divides; a bad merged world is named.
if(TARGET supervise AND TARGET fake_worker)
  ft_add_script_test(NAME runfile_merged LABELS integration TIMEOUT 120
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/runfile_merged.sh)
endif()
# Storage faults with the store on a tmpfs (root; skipped otherwise).
if(TARGET supervise)
  ft_add_script_test(NAME sup_storage LABELS integration TIMEOUT 120
                     COMMAND bash ${CMAKE_SOURCE_DIR}/tests/integration/sup_storage.sh)
endif()
# the worker connects again when the supervisor never speaks on its connection
ft_add_script_test(NAME worker_challenge LABELS integration TIMEOUT 60
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_challenge.sh)
