# bench_hang: the progress watchdog's time from a live hang to its detection
# and to the next step, per class (gang, behind, storage, rendezvous), beside
# the deadline + one heartbeat interval; MET/MISSED printed, not asserted.
if(TARGET worker)
  add_test(NAME bench_hang COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_hang.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(bench_hang PROPERTIES LABELS bench TIMEOUT 900)
endif()
