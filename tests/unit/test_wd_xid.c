/*
 * Tests of wd_xid (watchdog/wd_xid.c): the Xid line parser over every known
 * line form, the PCI id normaliser, the classifier and its override string,
 * and a fuzz loop of random and mutated bytes (run it under ASan: the parser
 * must never read outside the bytes it was given).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ft_err.h"
#include "wd_xid.h"

static void parse_ok(const char *line, wd_xid_event *ev) {
  int rc = wd_xid_parse(line, strlen(line), ev);
  if (rc)
    fail_msg("parse failed (%d: %s) for: %s", rc, ft_err_detail(), line);
}

static void test_plain_line(void **state) {
  wd_xid_event ev;
  parse_ok("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", &ev);
  assert_string_equal(ev.pci, "0000:3b:00");
  assert_int_equal(ev.xid, 79);
  assert_int_equal(ev.pid, 1234);
  assert_string_equal(ev.name, "");
  assert_string_equal(ev.msg, "GPU has fallen off the bus.");
}

static void test_kmsg_record(void **state) {
  wd_xid_event ev;
  parse_ok("6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
           "GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
           &ev);
  assert_string_equal(ev.pci, "0000:3b:00");
  assert_int_equal(ev.xid, 79);
  assert_int_equal(ev.pid, -1);
  assert_string_equal(ev.name, "");
  /* continuation lines are not part of the message */
  assert_string_equal(ev.msg, "GPU has fallen off the bus.");
}

static void test_old_form_and_case(void **state) {
  wd_xid_event ev;
  parse_ok("[ 10030.000001] NVRM: Xid (0000:AF:00): 48, An uncorrectable double bit error.\r\n",
           &ev);
  assert_string_equal(ev.pci, "0000:af:00");
  assert_int_equal(ev.xid, 48);
  assert_int_equal(ev.pid, -1);
  assert_string_equal(ev.msg, "An uncorrectable double bit error.");

  parse_ok("NVRM: Xid (PCI:0000:18:00): 13, pid=40112, name=python3, Graphics SM Warp Exception "
           "on (GPC 0, TPC 1): Out Of Range Address",
           &ev);
  assert_int_equal(ev.xid, 13);
  assert_int_equal(ev.pid, 40112);
  assert_string_equal(ev.name, "python3");
  assert_string_equal(ev.msg, "Graphics SM Warp Exception on (GPC 0, TPC 1): Out Of Range Address");

  /* Nothing after the number at all. */
  parse_ok("NVRM: Xid (PCI:0000:18:00): 62", &ev);
  assert_int_equal(ev.xid, 62);
  assert_string_equal(ev.msg, "");
}

static void test_not_xid_and_malformed(void **state) {
  wd_xid_event ev;
  const char *none[] = {"", "eth0: link up", "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                        "NVRM: Xi"};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
    assert_int_equal(wd_xid_parse(none[i], strlen(none[i]), &ev), FT_ENOENT);
  const char *bad[] = {
      "NVRM: Xid",
      "NVRM: Xid (PCI:0000:3b:00",            /* no ')' */
      "NVRM: Xid PCI:0000:3b:00): 79",        /* no '(' */
      "NVRM: Xid (PCI:zz:3b:00): 79, x",      /* bad bus id */
      "NVRM: Xid (PCI:0000:3b:00) 79, x",     /* no ':' */
      "NVRM: Xid (PCI:0000:3b:00): , x",      /* no number */
      "NVRM: Xid (PCI:0000:3b:00): 1234567,", /* too many digits */
      "NVRM: Xid (PCI:0000:3b:00): 79x, msg", /* junk after the number */
      "NVRM: Xid (PCI:0000:3b:100): 79, msg", /* device > 0xff */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = wd_xid_parse(bad[i], strlen(bad[i]), &ev);
    if (rc != FT_EFORMAT)
      fail_msg("expected FT_EFORMAT, got %d for: %s", rc, bad[i]);
  }
  /* The parser honours len: the Xid number lies past it. */
  const char *cut = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1";
  assert_int_equal(wd_xid_parse(cut, 28, &ev), FT_EFORMAT);
  assert_int_equal(wd_xid_parse(cut, 8, &ev), FT_ENOENT);
}

static void test_pci_normalize(void **state) {
  char out[WD_PCI_LEN];
  struct {
    const char *in, *want;
  } ok[] = {
      {"PCI:0000:3b:00", "0000:3b:00"},   {"0000:3B:00", "0000:3b:00"},
      {"00000000:3B:00.0", "0000:3b:00"}, {"3b:00", "0000:3b:00"},
      {"pci:0001:5E:01.3", "0001:5e:01"}, {"  0000:3b:00 ", "0000:3b:00"},
      {"10000:3b:00", "00010000:3b:00"},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    assert_int_equal(wd_xid_pci_normalize(ok[i].in, strlen(ok[i].in), out), FT_OK);
    assert_string_equal(out, ok[i].want);
  }
  const char *bad[] = {"",
                       "PCI:",
                       "3b",
                       "0000:3b:00:00",
                       "0000:3b:00.",
                       "000000000:3b:00",
                       "0000:3b:00.10",
                       "0000:g3:00",
                       "0000:3b:-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (wd_xid_pci_normalize(bad[i], strlen(bad[i]), out) != FT_EFORMAT)
      fail_msg("accepted bad bus id '%s'", bad[i]);
    assert_string_equal(out, "");
  }
}

static void test_classify_defaults(void **state) {
  wd_xid_table t;
  wd_xid_table_default(&t);
  int fatal[] = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120};
  int app[] = {13, 31, 43};
  for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
    assert_int_equal(wd_xid_classify(&t, fatal[i]), WD_ACT_QUARANTINE_NODE);
  for (size_t i = 0; i < sizeof app / sizeof app[0]; i++)
    assert_int_equal(wd_xid_classify(&t, app[i]), WD_ACT_RESTART_GANG);
  int other[] = {0, 1, 45, 62, 78, 80, 121, 999, 5000, -3};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    assert_int_equal(wd_xid_classify(&t, other[i]), WD_ACT_REPORT);
}

static void test_table_override(void **state) {
  wd_xid_table t;
  wd_xid_table_default(&t);
  assert_int_equal(wd_xid_table_set(&t, 45, WD_ACT_IGNORE), FT_OK);
  assert_int_equal(wd_xid_classify(&t, 45), WD_ACT_IGNORE);
  assert_int_equal(wd_xid_table_set(&t, 45, WD_ACT_ROLLBACK_AND_SKIP), FT_EINVAL);
  assert_int_equal(wd_xid_table_set(&t, WD_XID_TABLE_SIZE, WD_ACT_REPORT), FT_EINVAL);
  assert_int_equal(wd_xid_table_set(&t, -1, WD_ACT_REPORT), FT_EINVAL);

  wd_xid_table_default(&t);
  assert_int_equal(wd_xid_table_parse(&t, "79:report, 13:quarantine ,45:ignore,31:restart_gang"),
                   FT_OK);
  assert_int_equal(wd_xid_classify(&t, 79), WD_ACT_REPORT);
  assert_int_equal(wd_xid_classify(&t, 13), WD_ACT_QUARANTINE_NODE);
  assert_int_equal(wd_xid_classify(&t, 45), WD_ACT_IGNORE);
  assert_int_equal(wd_xid_classify(&t, 31), WD_ACT_RESTART_GANG);
  assert_int_equal(wd_xid_classify(&t, 48), WD_ACT_QUARANTINE_NODE); /* untouched */
  assert_int_equal(wd_xid_table_parse(&t, ""), FT_OK);

  /* All or nothing: a bad item leaves the table as it was. */
  wd_xid_table before = t;
  const char *bad[] = {"79",
                       "79:",
                       ":quarantine",
                       "x:report",
                       "79:explode",
                       "79:report,",
                       "79:report,,13:restart",
                       "2000:report",
                       "79:rollback_and_skip",
                       "-1:report",
                       "7 9:report"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char spec[128];
    snprintf(spec, sizeof spec, "48:ignore,%s", bad[i]);
    if (wd_xid_table_parse(&t, spec) != FT_ECONFIG)
      fail_msg("accepted bad override '%s'", spec);
    assert_memory_equal(&t, &before, sizeof t);
  }
  assert_non_null(strstr(ft_err_detail(), "item 2"));
}

/* Every Xid line of tests/data/xid/{kern.log,kmsg.txt}, matched against
 * tests/data/xid/expected.tsv. */
static void test_sample_files(void **state) {
  const char *src = getenv("FT_SRC");
  if (!src)
    skip();
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/xid/expected.tsv", src);
  FILE *ex = fopen(path, "r");
  assert_non_null(ex);
  wd_xid_table t;
  wd_xid_table_default(&t);
  const char *files[] = {"kern.log", "kmsg.txt"};
  int matched = 0, non_xid = 0;
  char line[4096], want[4096];
  for (int f = 0; f < 2; f++) {
    snprintf(path, sizeof path, "%s/tests/data/xid/%s", src, files[f]);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    while (fgets(line, sizeof line, in)) {
      wd_xid_event ev;
      int rc = wd_xid_parse(line, strlen(line), &ev);
      if (rc == FT_ENOENT) {
        non_xid++;
        continue;
      }
      assert_int_equal(rc, FT_OK);
      assert_non_null(fgets(want, sizeof want, ex));
      want[strcspn(want, "\n")] = '\0';
      char got[4096];
      snprintf(got, sizeof got, "%s\t%d\t%d\t%s\t%s", ev.pci, ev.xid, ev.pid,
               wd_action_name(wd_xid_classify(&t, ev.xid)), ev.msg);
      assert_string_equal(got, want);
      matched++;
    }
    fclose(in);
  }
  assert_null(fgets(want, sizeof want, ex)); /* every expected line was seen */
  fclose(ex);
  assert_int_equal(matched, 10);
  assert_int_equal(non_xid, 6);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Random bytes, and mutations of valid lines, each in a heap buffer of
 * exactly its length so ASan catches a read one byte past the end. Also
 * checks the output strings are always terminated within their buffers. */
static void test_fuzz(void **state) {
  const char *seeds[] = {
      "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
      "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, x.",
      "NVRM: Xid (0000:af:00): 48, An uncorrectable double bit error",
      "NVRM: Xid (PCI:0000:18:00): 13, pid=40112, name=python3, Graphics",
  };
  const char alphabet[] = "NVRM: Xid(PCI)0123456789abcdef,=pidname'<>\n\r\t ";
  int parsed = 0;
  for (int iter = 0; iter < 200000; iter++) {
    size_t len;
    char tmp[512];
    if (iter % 2) {
      len = next_rand() % 200;
      for (size_t i = 0; i < len; i++) {
        uint64_t r = next_rand();
        tmp[i] = (r & 1) ? (char)(r >> 8) : alphabet[(r >> 8) % (sizeof alphabet - 1)];
      }
    } else {
      const char *s = seeds[next_rand() % 4];
      len = strlen(s);
      memcpy(tmp, s, len);
      int muts = 1 + (int)(next_rand() % 4);
      for (int m = 0; m < muts && len > 0; m++) {
        uint64_t r = next_rand();
        switch (r % 3) {
        case 0:
          tmp[(r >> 8) % len] = (char)(r >> 16);
          break;
        case 1:
          len = (r >> 8) % len; /* truncate */
          break;
        default:
          tmp[(r >> 8) % len] = alphabet[(r >> 16) % (sizeof alphabet - 1)];
        }
      }
    }
    char *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    memcpy(buf, tmp, len);
    wd_xid_event ev;
    memset(&ev, 'X', sizeof ev);
    int rc = wd_xid_parse(buf, len, &ev);
    assert_true(rc == FT_OK || rc == FT_ENOENT || rc == FT_EFORMAT);
    if (rc == FT_OK) {
      parsed++;
      assert_true(memchr(ev.pci, '\0', sizeof ev.pci) != NULL);
      assert_true(memchr(ev.name, '\0', sizeof ev.name) != NULL);
      assert_true(memchr(ev.msg, '\0', sizeof ev.msg) != NULL);
      assert_true(ev.xid >= 0 && ev.xid <= 999999);
      assert_int_equal(strlen(ev.pci), 10);
      for (const char *p = ev.msg; *p; p++)
        assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
    }
    char norm[WD_PCI_LEN];
    rc = wd_xid_pci_normalize(buf, len, norm);
    assert_true(rc == FT_OK || rc == FT_EFORMAT);
    free(buf);
  }
  /* The mutations must leave some lines valid, or the fuzz loop tests nothing. */
  assert_true(parsed > 1000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_line),
      cmocka_unit_test(test_kmsg_record),
      cmocka_unit_test(test_old_form_and_case),
      cmocka_unit_test(test_not_xid_and_malformed),
      cmocka_unit_test(test_pci_normalize),
      cmocka_unit_test(test_classify_defaults),
      cmocka_unit_test(test_table_override),
      cmocka_unit_test(test_sample_files),
      cmocka_unit_test(test_fuzz),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
