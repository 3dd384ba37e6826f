/*
 * Tests of wd_action (watchdog/wd_action.c): the default action per fault
 * kind follows docs/watchdog.md, names round-trip, unknown input is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ft_err.h"
#include "ft_wire.h"
#include "wd_action.h"

static void test_defaults_follow_design(void **state) {
  assert_int_equal(wd_action_for(FT_FAULT_PROCESS_EXIT), WD_ACT_RESTART_GANG);
  assert_int_equal(wd_action_for(FT_FAULT_HANG), WD_ACT_QUARANTINE_NODE);
  assert_int_equal(wd_action_for(FT_FAULT_COLLECTIVE_TIMEOUT), WD_ACT_RESTART_GANG);
  assert_int_equal(wd_action_for(FT_FAULT_XID), WD_ACT_QUARANTINE_NODE);
  assert_int_equal(wd_action_for(FT_FAULT_LOSS_SPIKE), WD_ACT_ROLLBACK_AND_SKIP);
  assert_int_equal(wd_action_for(FT_FAULT_NAN), WD_ACT_ROLLBACK_AND_SKIP);
  assert_int_equal(wd_action_for(FT_FAULT_OOM), WD_ACT_REPORT);
  assert_int_equal(wd_action_for(FT_FAULT_STRAGGLER), WD_ACT_REPORT);
  assert_int_equal(wd_action_for(FT_FAULT_OTHER), WD_ACT_RESTART_GANG);
  /* the store's and the configuration's faults are never a node's */
  assert_int_equal(wd_action_for(FT_FAULT_STORAGE), WD_ACT_REPORT);
  assert_int_equal(wd_action_for(FT_FAULT_CONFIG), WD_ACT_REPORT);
  assert_int_equal(wd_action_for(FT_FAULT_DATA), WD_ACT_REPORT);
  /* Unknown kinds fail safe. */
  assert_int_equal(wd_action_for(-1), WD_ACT_RESTART_GANG);
  assert_int_equal(wd_action_for(FT_FAULT_KIND_COUNT), WD_ACT_RESTART_GANG);
}

static void test_every_kind_has_summary(void **state) {
  for (int k = 0; k < FT_FAULT_KIND_COUNT; k++) {
    const char *s = wd_action_fault_summary(k);
    assert_non_null(s);
    assert_true(strlen(s) > 10);
    int a = wd_action_for(k);
    assert_true(a >= 0 && a < WD_ACTION_COUNT);
    assert_string_not_equal(wd_action_name(a), "unknown");
  }
  assert_non_null(wd_action_fault_summary(99));
}

static void test_names_round_trip(void **state) {
  for (int a = 0; a < WD_ACTION_COUNT; a++) {
    wd_action back;
    assert_int_equal(wd_action_from_name(wd_action_name(a), &back), FT_OK);
    assert_int_equal(back, a);
  }
  assert_string_equal(wd_action_name(WD_ACT_QUARANTINE_NODE), "quarantine");
  assert_string_equal(wd_action_name(WD_ACT_RESTART_GANG), "restart");
  assert_string_equal(wd_action_name(WD_ACT_ROLLBACK_AND_SKIP), "rollback_and_skip");
  assert_string_equal(wd_action_name(-1), "unknown");
  assert_string_equal(wd_action_name(WD_ACTION_COUNT), "unknown");
  wd_action a;
  assert_int_equal(wd_action_from_name("warn", &a), FT_OK);
  assert_int_equal(a, WD_ACT_REPORT);
  assert_int_equal(wd_action_from_name("restart_gang", &a), FT_OK);
  assert_int_equal(a, WD_ACT_RESTART_GANG);
  assert_int_equal(wd_action_from_name("Quarantine", &a), FT_EINVAL);
  assert_int_equal(wd_action_from_name("", &a), FT_EINVAL);
  assert_int_equal(wd_action_from_name(NULL, &a), FT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_follow_design),
      cmocka_unit_test(test_every_kind_has_summary),
      cmocka_unit_test(test_names_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
