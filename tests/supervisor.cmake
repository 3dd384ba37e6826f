# Tests of the supervisor (supervisor/): unit tests of its pure modules, and
# integration tests that run the real `supervise` with a protocol-conformant
# fake worker (tests/integration/fake_worker.c) and a hostile client.
if(TARGET supervise)
  foreach(t test_sup_kv test_sup_gang test_sup_events test_sup_history test_sup_launch
            test_sup_rollback test_sup_shardq)
    ft_add_test(NAME ${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c
                LIBS ftsup LABELS unit TIMEOUT 60)
  endforeach()
  # The supervisor's calls go one way (issue 40): no circle among its files
  # and no call up a layer (tests/unit/layering.py LAYERS; sup_hooks for the
  # few that must go up). nm on the ftsup and supervise objects.
  find_program(FT_PYTHON3 python3)
  if(FT_PYTHON3)
    ft_add_script_test(NAME layering_supervisor LABELS unit TIMEOUT 30
                       COMMAND ${FT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/layering.py supervisor)
    set_property(TEST layering_supervisor APPEND PROPERTY ENVIRONMENT NM=${CMAKE_NM})
  endif()
  # common/ft_bug.h: FT_BUG and FT_ASSERT_INV, which sup_recovery.c's check_state uses
  ft_add_test(NAME test_ft_bug SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ft_bug.c
              LIBS ftcommon LABELS unit TIMEOUT 60)
  # the checkpoint events (supervisor/sup_ckpt_events.c, part of supervise)
  ft_add_test(NAME test_sup_ckpt_events
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_ckpt_events.c
                      ${CMAKE_SOURCE_DIR}/supervisor/sup_ckpt_events.c
              LIBS ftsup ftwatchdog LABELS unit TIMEOUT 60)
  # the s3:// data listing kept with the checkpoints (supervisor/sup_listing.c,
  # part of supervise): its cache, and the restore at a resume against a real
  # local store
  ft_add_test(NAME test_sup_listing
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_listing.c
                      ${CMAKE_SOURCE_DIR}/supervisor/sup_listing.c
              LIBS ftsup LABELS unit TIMEOUT 60)
  # the commit queue (supervisor/sup_commitq.c, part of supervise): lanes,
  # order, and its invariant checks
  ft_add_test(NAME test_sup_commitq
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_commitq.c
                      ${CMAKE_SOURCE_DIR}/supervisor/sup_commitq.c
              LIBS ftsup ftwatchdog LABELS unit TIMEOUT 60)
  ft_add_test(NAME test_sup_meta SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sup_meta.c
              LIBS ftckpt LABELS unit TIMEOUT 60)

  add_executable(fake_worker ${CMAKE_CURRENT_SOURCE_DIR}/integration/fake_worker.c)
  target_link_libraries(fake_worker PRIVATE ftckpt ftcommon PkgConfig::CJSON m)
  set_target_properties(fake_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

  # sup_agent: one agent per node (nodes.agent), its faults and the real worker through it
  foreach(t sup_basic sup_recovery sup_hostile sup_resume sup_loss sup_faults sup_agent)
    ft_add_script_test(NAME ${t} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh
                       LABELS integration TIMEOUT 90)
  endforeach()
  # Addresses: the control port and Gloo across hosts made of network
  # namespaces (root; skips with 77 elsewhere), and the local defaults.
  ft_add_script_test(NAME sup_netns COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_netns.sh
                     LABELS integration TIMEOUT 180)
  set_tests_properties(sup_netns PROPERTIES RESOURCE_LOCK cluster)
  ft_add_script_test(NAME sup_listen COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_listen.sh
                     LABELS integration TIMEOUT 90)
  # The node doctor: a node's own fault refuses it before it joins; storage
  # and a missing majority never cost a node.
  foreach(part worker policy)
    ft_add_script_test(NAME sup_doctor_${part}
                       COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_doctor.sh ${part}
                       LABELS integration TIMEOUT 240)
  endforeach()
  # A silent warm spare leaves the pool at once.
  # Every worker silent at once: the supervisor's isolation, nobody blamed.
  ft_add_script_test(NAME sup_isolated COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_isolated.sh
                     LABELS integration TIMEOUT 90)
  # The operator's HTTP port: a real Prometheus scrapes it; supervise status.
  ft_add_script_test(NAME sup_http COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_http.sh
                     LABELS integration TIMEOUT 180)
  # docs/alerts.yml: promtool check and test rules (tests/alerts/alerts_test.yml),
  # and every event the supervisor writes counted from 0 (sup_metrics.c's EVENTS).
  ft_add_script_test(NAME alerts_rules COMMAND bash ${CMAKE_SOURCE_DIR}/tests/alerts/alerts_rules.sh
                     LABELS unit TIMEOUT 60)
  # The alerts end to end: a run with a node killed, a real Prometheus and
  # Alertmanager; the first fault's alert reaches a webhook.
  ft_add_script_test(NAME sup_alerts COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_alerts.sh
                     LABELS integration TIMEOUT 180)
  # The HTTP port under load (200 connections, 50 slowloris, descriptors run out): the run unharmed.
  ft_add_script_test(NAME sup_http_load COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_http_load.sh
                     LABELS integration TIMEOUT 150)
  # The dashboard and the report in headless Chromium (kill, Xid, spike).
  ft_add_script_test(NAME sup_dashboard COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_dashboard.sh
                     LABELS integration TIMEOUT 300)
  # The progress line on a terminal (script(1) gives supervise a pty).
  ft_add_script_test(NAME sup_progress COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_progress.sh
                     LABELS integration TIMEOUT 90)
  # Failpoints aimed at one node (hang_node, hang_in) and a strict FT_FAILPOINTS.
  ft_add_script_test(NAME sup_hang_target COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_hang_target.sh
                     LABELS integration TIMEOUT 120)
  # In-process restart with the real worker: pids kept, bits equal, fallback.
  ft_add_script_test(NAME sup_inprocess COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_inprocess.sh
                     LABELS integration TIMEOUT 180)
  # Checkpoints in memory: every step, persist_every, require memory, lost copies.
  ft_add_script_test(NAME sup_memckpt COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_memckpt.sh
                     LABELS integration TIMEOUT 180)
  # Restores fall back: a damaged newest checkpoint is marked BAD, at most 3 fallbacks.
  ft_add_script_test(NAME sup_restore_fallback COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_restore_fallback.sh
                     LABELS integration TIMEOUT 180)
  # A retention GC the store refuses (a manifest its catalog lacks): an event, nothing deleted.
  ft_add_script_test(NAME sup_gc_refused COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_gc_refused.sh
                     LABELS integration TIMEOUT 90)
  # Retention's deletions told to every view; a finished run's status keys.
  ft_add_script_test(NAME sup_ckpt_list COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_ckpt_list.sh
                     LABELS integration TIMEOUT 120)
  # The terminal's progress line fitted to its width (script(1) gives a pty).
  ft_add_script_test(NAME sup_progress_tty COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_progress_tty.sh
                     LABELS integration TIMEOUT 120)
  # A hang with live processes (hang_at_step): /status shows phase and progress age.
  ft_add_script_test(NAME sup_hang_progress COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_hang_progress.sh
                     LABELS integration TIMEOUT 180)
  # The progress watchdog acts on a live hang (watchdog.progress_timeout_s):
  # one rank behind (its node quarantined, a spare), a collective timeout
  # attributed to the rank behind it, every rank in compute (gang), every
  # rank in a data read (storage); each run finishes.
  foreach(part behind coll gang storage storage2)
    ft_add_script_test(NAME sup_hang_watchdog_${part}
                       COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_hang_watchdog.sh ${part}
                       LABELS integration TIMEOUT 150)
  endforeach()
  # A rank that heartbeats but never joins the rendezvous: its node blamed at
  # the first rendezvous timeout, a spare in its place (process restart, in
  # process).
  foreach(part process inprocess)
    ft_add_script_test(NAME sup_hang_rendezvous_${part}
                       COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_hang_rendezvous.sh ${part}
                       LABELS integration TIMEOUT 200)
  endforeach()
  ft_add_script_test(NAME sup_spare_silent COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_spare_silent.sh
                     LABELS integration TIMEOUT 90)
  # Bounded teardown: a survivor asked to rejoin in process whose training
  # thread hangs is killed at its grace (rejoin); workers in D state on a
  # frozen file system are given up, their nodes lost (dstate), and a run
  # that ends meanwhile does not wait for them (dstate_end). The dstate
  # parts need root and a loop device, else they skip with 77.
  foreach(part rejoin dstate dstate_end)
    ft_add_script_test(NAME sup_teardown_${part}
                       COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sup_teardown.sh ${part}
                       LABELS integration TIMEOUT 240)
  endforeach()
endif()
