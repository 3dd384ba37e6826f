# chaos/: fault-injection suites against the real binaries (label chaos).
find_program(FT_PYTHON3 python3)
if(FT_PYTHON3 AND TARGET supervise)
  ft_add_script_test(NAME chaos_node_loss LABELS chaos TIMEOUT 900
                     COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/run_chaos.sh node-loss)
  ft_add_script_test(NAME chaos_watchdog LABELS chaos TIMEOUT 900
                     COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/run_chaos.sh watchdog)
  # supervise with an s3:// store against moto_server with authentication enforced (chaos/moto_auth.py) behind the
  # fault proxy chaos/s3_faults.py; fails (never skips) without a server
  ft_add_script_test(NAME chaos_s3 LABELS chaos TIMEOUT 600
                     COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/run_chaos.sh s3)
endif()
ft_add_script_test(NAME goodput_calc LABELS unit TIMEOUT 30
                   COMMAND ${CMAKE_SOURCE_DIR}/tests/integration/goodput_calc.sh)
