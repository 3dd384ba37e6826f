# The trainer, driven through the real worker program.
ft_add_script_test(NAME worker_determinism LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_determinism.sh)
ft_add_script_test(NAME worker_resume LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_resume.sh)
ft_add_script_test(NAME worker_baddata LABELS integration TIMEOUT 120
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_baddata.sh)
ft_add_script_test(NAME worker_modelfiles LABELS integration TIMEOUT 120
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_modelfiles.sh)
ft_add_script_test(NAME worker_learns LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/worker_learns.sh)
ft_add_script_test(NAME fsdp_world4 LABELS integration TIMEOUT 300
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/fsdp_world4.sh)
