/*
 * wd_xid: Xid line parser and classifier. See wd_xid.h for the contract.
 *
 * The parser is a cursor over [p, end) and every read checks p < end first;
 * there is no sscanf and no strlen on the input (it need not be
 * NUL-terminated). Numbers are bounded in digits before they are converted,
 * so nothing overflows.
 */
#include "wd_xid.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ft_err.h"
#include "ft_hex.h"

static const char XID_TAG[] = "NVRM: Xid";

typedef struct cur {
  const char *p, *end;
} cur;

static void skip_spaces(cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
    c->p++;
}

static int eat(cur *c, char ch) {
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

static int starts_with(const cur *c, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(c->end - c->p) >= n && memcmp(c->p, lit, n) == 0;
}

/* Reads 1..maxd hex digits; -1 if none or too many. */
static long read_hex(cur *c, int maxd) {
  long v = 0;
  int d = 0;
  while (c->p < c->end && ft_hex_digit(*c->p, FT_HEX_ANY_CASE) >= 0) {
    if (++d > maxd)
      return -1;
    v = v * 16 + ft_hex_digit(*c->p, FT_HEX_ANY_CASE);
    c->p++;
  }
  return d ? v : -1;
}

/* Reads 1..maxd decimal digits; -1 if none or too many. */
static long read_dec(cur *c, int maxd) {
  long v = 0;
  int d = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (++d > maxd)
      return -1;
    v = v * 10 + (*c->p - '0');
    c->p++;
  }
  return d ? v : -1;
}

int wd_xid_pci_normalize(const char *s, size_t len, char out[WD_PCI_LEN]) {
  if (!s || !out)
    return ft_err_set(FT_EINVAL, "wd_xid_pci_normalize: NULL argument");
  out[0] = '\0';
  cur c = {s, s + len};
  skip_spaces(&c);
  while (c.end > c.p && (c.end[-1] == ' ' || c.end[-1] == '\t'))
    c.end--;
  if (c.end - c.p >= 4 && strncasecmp(c.p, "PCI:", 4) == 0)
    c.p += 4;
  long g[3];
  int nd[3], ng = 0;
  for (;;) {
    const char *at = c.p;
    long v = read_hex(&c, 8);
    if (v < 0)
      goto bad;
    nd[ng] = (int)(c.p - at);
    g[ng++] = v;
    if (ng < 3 && eat(&c, ':'))
      continue;
    break;
  }
  /* bus and device: 1..2 hex digits; the domain (if any): 1..8 */
  if (ng < 2 || nd[ng - 2] > 2 || nd[ng - 1] > 2)
    goto bad;
  if (eat(&c, '.') && read_hex(&c, 1) < 0)
    goto bad;
  if (c.p != c.end)
    goto bad;
  long dom = ng == 3 ? g[0] : 0, bus = g[ng - 2], dev = g[ng - 1];
  if (bus > 0xff || dev > 0xff)
    goto bad;
  unsigned d = (unsigned)dom & 0xffffffffu, b = (unsigned)bus & 0xffu, v = (unsigned)dev & 0xffu;
  snprintf(out, WD_PCI_LEN, d > 0xffff ? "%08x:%02x:%02x" : "%04x:%02x:%02x", d, b, v);
  return FT_OK;
bad:
  out[0] = '\0';
  return ft_err_set(FT_EFORMAT, "not a PCI bus id: '%.*s'", (int)(len > 40 ? 40 : len), s);
}

/* Copies [p, q) into dst (cap bytes), control bytes as '?', NUL-terminated. */
static void copy_clean(char *dst, size_t cap, const char *p, const char *q) {
  size_t n = 0;
  for (; p < q && n + 1 < cap; p++)
    dst[n++] = ((unsigned char)*p < 0x20 || *p == 0x7f) ? '?' : *p;
  dst[n] = '\0';
}

/* The end of the current field: the next ',' or the end. */
static const char *field_end(const cur *c) {
  const char *q = memchr(c->p, ',', (size_t)(c->end - c->p));
  return q ? q : c->end;
}

int wd_xid_parse(const char *line, size_t len, wd_xid_event *ev) {
  if (!line || !ev)
    return ft_err_set(FT_EINVAL, "wd_xid_parse: NULL argument");
  memset(ev, 0, sizeof *ev);
  ev->xid = -1;
  ev->pid = -1;
  const char *tag = memmem(line, len, XID_TAG, sizeof XID_TAG - 1);
  if (!tag)
    return FT_ENOENT;
  cur c = {tag + sizeof XID_TAG - 1, line + len};
  /* A kmsg record or a log line ends at its first newline; continuation
   * lines (" SUBSYSTEM=pci") are not part of the message. */
  const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
  if (nl)
    c.end = nl;

  skip_spaces(&c);
  if (!eat(&c, '('))
    return ft_err_set(FT_EFORMAT, "Xid line: no '(' after the tag");
  const char *close = memchr(c.p, ')', (size_t)(c.end - c.p));
  if (!close)
    return ft_err_set(FT_EFORMAT, "Xid line: no ')' after the bus id");
  int rc = wd_xid_pci_normalize(c.p, (size_t)(close - c.p), ev->pci);
  if (rc)
    return rc;
  c.p = close + 1;
  if (!eat(&c, ':'))
    return ft_err_set(FT_EFORMAT, "Xid line: no ':' after the bus id");
  skip_spaces(&c);
  long xid = read_dec(&c, 6);
  if (xid < 0)
    return ft_err_set(FT_EFORMAT, "Xid line: no Xid number");
  ev->xid = (int)xid;
  if (c.p < c.end && !eat(&c, ','))
    return ft_err_set(FT_EFORMAT, "Xid line: junk after the Xid number");

  /* Optional "pid=...", "name=..." fields, then the message. */
  for (;;) {
    skip_spaces(&c);
    if (starts_with(&c, "pid=")) {
      c.p += 4;
      const char *q = field_end(&c);
      cur num = {c.p, q};
      long pid = read_dec(&num, 10);
      ev->pid = (pid >= 0 && pid <= 0x7fffffffL && num.p == q) ? (int)pid : -1;
      c.p = q;
      eat(&c, ',');
    } else if (starts_with(&c, "name=")) {
      c.p += 5;
      const char *q = field_end(&c);
      const char *a = c.p, *b = q;
      if (b - a >= 2 && (*a == '\'' || *a == '"') && b[-1] == *a) {
        a++;
        b--;
      }
      if (b - a == 9 && memcmp(a, "<unknown>", 9) == 0)
        b = a;
      copy_clean(ev->name, sizeof ev->name, a, b);
      c.p = q;
      eat(&c, ',');
    } else {
      break;
    }
  }
  const char *e = c.end;
  while (e > c.p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
    e--;
  copy_clean(ev->msg, sizeof ev->msg, c.p, e);
  return FT_OK;
}

static const int fatal_xids[] = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120};
static const int app_xids[] = {13, 31, 43};

void wd_xid_table_default(wd_xid_table *t) {
  memset(t->action, WD_ACT_REPORT, sizeof t->action);
  t->other = WD_ACT_REPORT;
  for (size_t i = 0; i < sizeof fatal_xids / sizeof fatal_xids[0]; i++)
    t->action[fatal_xids[i]] = WD_ACT_QUARANTINE_NODE;
  for (size_t i = 0; i < sizeof app_xids / sizeof app_xids[0]; i++)
    t->action[app_xids[i]] = WD_ACT_RESTART_GANG;
}

static int xid_action_ok(wd_action a) {
  return a == WD_ACT_IGNORE || a == WD_ACT_REPORT || a == WD_ACT_RESTART_GANG ||
         a == WD_ACT_QUARANTINE_NODE;
}

int wd_xid_table_set(wd_xid_table *t, int xid, wd_action action) {
  if (!t || xid < 0 || xid >= WD_XID_TABLE_SIZE)
    return ft_err_set(FT_EINVAL, "Xid %d out of range 0..%d", xid, WD_XID_TABLE_SIZE - 1);
  if (!xid_action_ok(action))
    return ft_err_set(FT_EINVAL, "'%s' is not an Xid action (quarantine, restart, report, ignore)",
                      wd_action_name(action));
  t->action[xid] = (uint8_t)action;
  return FT_OK;
}

int wd_xid_table_parse(wd_xid_table *t, const char *spec) {
  if (!t || !spec)
    return ft_err_set(FT_EINVAL, "wd_xid_table_parse: NULL argument");
  wd_xid_table tmp = *t;
  const char *p = spec;
  int item = 0;
  while (*p) {
    item++;
    const char *q = strchr(p, ',');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    char buf[64];
    /* trim */
    const char *a = p, *b = p + n;
    while (a < b && isspace((unsigned char)*a))
      a++;
    while (b > a && isspace((unsigned char)b[-1]))
      b--;
    if (b == a || (size_t)(b - a) >= sizeof buf)
      return ft_err_set(FT_ECONFIG, "Xid override item %d: empty or too long (want XID:ACTION)",
                        item);
    memcpy(buf, a, (size_t)(b - a));
    buf[b - a] = '\0';
    char *colon = strchr(buf, ':');
    if (!colon)
      return ft_err_set(FT_ECONFIG, "Xid override item %d '%s': want XID:ACTION", item, buf);
    *colon = '\0';
    char *act = colon + 1;
    while (isspace((unsigned char)*act))
      act++;
    size_t kl = strlen(buf);
    while (kl > 0 && isspace((unsigned char)buf[kl - 1]))
      buf[--kl] = '\0';
    cur nc = {buf, buf + kl};
    long xid = read_dec(&nc, 4);
    if (xid < 0 || nc.p != nc.end || xid >= WD_XID_TABLE_SIZE)
      return ft_err_set(FT_ECONFIG, "Xid override item %d: '%s' is not an Xid number 0..%d", item,
                        buf, WD_XID_TABLE_SIZE - 1);
    wd_action action;
    if (wd_action_from_name(act, &action) || !xid_action_ok(action))
      return ft_err_set(FT_ECONFIG,
                        "Xid override item %d: '%s' is not an Xid action (quarantine, restart, "
                        "report, ignore)",
                        item, act);
    tmp.action[xid] = (uint8_t)action;
    if (!q)
      break;
    p = q + 1;
    if (!*p)
      return ft_err_set(FT_ECONFIG, "Xid override: trailing ','");
  }
  *t = tmp;
  return FT_OK;
}

wd_action wd_xid_classify(const wd_xid_table *t, int xid) {
  if (!t || xid < 0)
    return WD_ACT_REPORT;
  if (xid >= WD_XID_TABLE_SIZE)
    return (wd_action)t->other;
  return (wd_action)t->action[xid];
}
