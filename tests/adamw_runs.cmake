# The one AdamW walk shared by the CPU trainer, FSDP and the CUDA engine
# (worker/gpt2.c gpt2_adamw_runs).
if(TARGET ftworker)
  ft_add_test(NAME test_adamw_runs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_adamw_runs.c
              LIBS ftworker LABELS unit TIMEOUT 60)
endif()
