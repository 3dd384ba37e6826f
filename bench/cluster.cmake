# bench_cluster_recovery: time to detect and to recover from a lost or cut-off
# host on the namespace Slurm cluster, beside Slurm's own notice (root; 77
# elsewhere). Shares the cluster lock with the cluster tests.
add_test(NAME bench_cluster_recovery COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_cluster_recovery.sh ${CMAKE_BINARY_DIR} 2)
set_tests_properties(bench_cluster_recovery PROPERTIES LABELS bench TIMEOUT 600 SKIP_RETURN_CODE 77
                     RESOURCE_LOCK cluster)
# bench_cluster_soak: 10 minutes, a random fault every 60 s; prints goodput
# beside its ceiling and target, and detect/recover/steps lost per fault.
add_test(NAME bench_cluster_soak COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_cluster_soak.sh ${CMAKE_BINARY_DIR} 600 60)
set_tests_properties(bench_cluster_soak PROPERTIES LABELS bench TIMEOUT 1800 SKIP_RETURN_CODE 77
                     RESOURCE_LOCK cluster)
