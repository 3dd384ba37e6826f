# The ssh launcher (nodes.launcher: ssh) against a real OpenSSH sshd that the
# test starts on a loopback port (root and sshd needed, else it skips). It
# shares the "cluster" lock with the other multi-host tests: they start
# daemons and runs that compete for the same two cores.
if(TARGET supervise AND TARGET worker)
  ft_add_script_test(NAME sup_ssh COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_ssh.sh
                     LABELS integration TIMEOUT 300)
  set_tests_properties(sup_ssh PROPERTIES RESOURCE_LOCK cluster)
endif()
