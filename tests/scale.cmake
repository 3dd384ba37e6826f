# tests/scale/: one supervisor against thousands of simulated workers
# (ftswarm: real TCP connections speaking the real protocol).
if(TARGET supervise)
  add_executable(ftswarm ${CMAKE_CURRENT_SOURCE_DIR}/scale/ftswarm.c)
  target_link_libraries(ftswarm PRIVATE ftckpt ftcommon PkgConfig::CJSON m)
  add_executable(ftswarm_attach ${CMAKE_CURRENT_SOURCE_DIR}/scale/ftswarm_attach.c)
  set_target_properties(ftswarm ftswarm_attach PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                          ${CMAKE_BINARY_DIR}/tests)
  # 1,024 simulated ranks, a silent rank and a dropped host (label scale:
  # not rerun under the sanitizers, whose supervisor would be the thing
  # measured; the protocol code it drives runs under them in sup_hostile,
  # sup_basic and the wire tests)
  # RUN_SERIAL: its 1,024 ranks take both cores; beside another test either
  # one's timing would be what is tested
  ft_add_script_test(NAME swarm_short LABELS scale TIMEOUT 300
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scale/swarm_short.sh)
  # the same with recovery.in_process: the survivors rejoin, nothing restarts
  ft_add_script_test(NAME swarm_inprocess LABELS scale TIMEOUT 300
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scale/swarm_short.sh inprocess)
  # one agent per host (nodes.agent), the swarm playing the agents, with a
  # silent host too: the same verdicts, a dropped host its agent's loss
  ft_add_script_test(NAME swarm_agents LABELS scale TIMEOUT 300
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scale/swarm_short.sh agents)
  set_tests_properties(swarm_short swarm_inprocess swarm_agents PROPERTIES RUN_SERIAL TRUE)
endif()
