# Tests of the supervisor's event loop and command line (sup_main, sup_conn,
# sup_commitq, sup_run): terminal states, idle connections, own stalls.
if(TARGET supervise)
endif()
