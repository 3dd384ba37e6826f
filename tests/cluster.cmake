# The namespace Slurm test cluster (tests/cluster/cluster.sh): real slurmctld,
# slurmd and munged across network namespaces on this machine. Label
# "cluster"; skipped (77) without root, ip netns or Slurm. The RESOURCE_LOCK
# "cluster" keeps two multi-host tests from running at once: they start
# daemons that compete for the same cores, and timing-based detectors
# (SlurmdTimeout, heartbeats) must not be starved by another cluster.
ft_add_script_test(NAME cluster_smoke COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/cluster_smoke.sh
                   LABELS cluster TIMEOUT 180)
set_tests_properties(cluster_smoke PROPERTIES RESOURCE_LOCK cluster)
# docs/multihost.md's sbatch script, as written, on the namespace cluster
ft_add_script_test(NAME cluster_sbatch_doc COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/sbatch_doc.sh
                   LABELS cluster TIMEOUT 240)
set_tests_properties(cluster_sbatch_doc PROPERTIES RESOURCE_LOCK cluster)
# Cluster chaos (issue 13): faults injected into runs under the slurm launcher.
foreach(t chaos_power chaos_cut chaos_head chaos_slow chaos_hang doctor_links)
  ft_add_script_test(NAME cluster_${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/${t}.sh
                     LABELS cluster TIMEOUT 300)
  set_tests_properties(cluster_${t} PROPERTIES RESOURCE_LOCK cluster)
endforeach()
# Real agents (nodes.agent) across the namespaces, launched per host and
# once for the pool; a host of the gang loses power.
foreach(mode each once)
  ft_add_script_test(NAME cluster_agents_${mode}
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/agents.sh ${mode}
                     LABELS cluster TIMEOUT 300)
  set_tests_properties(cluster_agents_${mode} PROPERTIES RESOURCE_LOCK cluster)
endforeach()
# The soak (issue 13): a random fault every 12 s for 72 s, about five faults,
# so the shuffled deck deals most kinds (the 10-minute version with a fault
# every 60 s is bench_cluster_soak, label bench).
ft_add_script_test(NAME cluster_soak COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/soak.sh 72 12
                   LABELS cluster TIMEOUT 600)
set_tests_properties(cluster_soak PROPERTIES RESOURCE_LOCK cluster)
