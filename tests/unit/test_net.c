/*
 * test_net: addresses of a multi-host run (common/ft_net.h).
 *
 * The parser on every form the run file and the command line accept
 * (HOST:PORT, :PORT, HOST, [v6]:PORT, a bare IPv6 literal) and on the
 * mistakes a user makes (empty, a port out of range or not a number, an
 * unclosed bracket, a v6 address with a port and no brackets), each error
 * naming the string; resolution of literals, names ("localhost") and the
 * wildcard; the route to a peer (to loopback: loopback, no packet sent);
 * interfaces by name ("lo") and by address, with an unknown name listing
 * the interfaces; whether an address is this host's; formatting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ft_err.h"
#include "ft_net.h"

static void parses(const char *s, const char *host, int port) {
  ft_hostport hp;
  int rc = ft_net_parse(s, &hp);
  if (rc)
    fprintf(stderr, "%s: %s\n", s, ft_err_detail());
  assert_int_equal(rc, FT_OK);
  assert_string_equal(hp.host, host);
  assert_int_equal(hp.port, port);
}

static void refuses(const char *s, const char *needle) {
  ft_hostport hp;
  assert_int_equal(ft_net_parse(s, &hp), FT_EINVAL);
  if (!strstr(ft_err_detail(), needle))
    fail_msg("'%s': error '%s' does not say '%s'", s, ft_err_detail(), needle);
}

static void test_parse_forms(void **st) {
  (void)st;
  parses("head.cluster:7000", "head.cluster", 7000);
  parses("10.1.2.3:0", "10.1.2.3", 0);
  parses(":65535", "", 65535);
  parses("h1", "h1", -1);
  parses("0.0.0.0", "0.0.0.0", -1);
  parses("[fd00::1]:80", "fd00::1", 80);
  parses("[::]", "::", -1);
  parses("fd00::1", "fd00::1", -1);
}

static void test_parse_errors(void **st) {
  (void)st;
  refuses("", "empty address");
  refuses("h1:", "port after ':' is empty");
  refuses(":", "port after ':' is empty");
  refuses("h1:65536", "'h1:65536': port '65536' is not a number 0-65535");
  refuses("h1:http", "port 'http' is not a number");
  refuses("h1:-1", "is not a number");
  refuses("[fd00::1:80", "without a closing ']'");
  refuses("[]:80", "empty IPv6 address");
  refuses("[h1]:80", "is not an IPv6 address");
  refuses("[fd00::1]80", "want ':PORT' after ']'");
  refuses("h1:2:3", "[ADDR]:PORT");
  refuses("h 1:80", "no spaces");
  char longhost[400];
  memset(longhost, 'a', sizeof longhost - 1);
  longhost[sizeof longhost - 1] = 0;
  refuses(longhost, "longer than 255 bytes");
}

static void test_resolve(void **st) {
  (void)st;
  ft_sockaddr a;
  char buf[80];
  assert_int_equal(ft_net_resolve("10.9.8.7", 12, 0, &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 1, buf, sizeof buf), "10.9.8.7:12");
  assert_int_equal(ft_net_is_wildcard(&a), 0);
  assert_int_equal(ft_net_resolve("", 5, 1, &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 1, buf, sizeof buf), "0.0.0.0:5");
  assert_int_equal(ft_net_is_wildcard(&a), 1);
  assert_int_equal(ft_net_resolve("fd00::2", 9, 0, &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 1, buf, sizeof buf), "[fd00::2]:9");
  assert_string_equal(ft_net_format(&a, 0, buf, sizeof buf), "fd00::2");
  assert_int_equal(ft_net_port(&a), 9);
  /* a name: localhost is in every /etc/hosts, and IPv4 comes first */
  assert_int_equal(ft_net_resolve("localhost", 0, 0, &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 0, buf, sizeof buf), "127.0.0.1");
  assert_int_equal(ft_net_resolve("no-such-host.invalid", 0, 0, &a), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "no-such-host.invalid"));
  assert_int_equal(ft_net_resolve("", 0, 0, &a), FT_EINVAL);
}

static void test_loopback_route_local(void **st) {
  (void)st;
  ft_sockaddr lo, r, other;
  char buf[80];
  ft_net_loopback(77, &lo);
  assert_string_equal(ft_net_format(&lo, 1, buf, sizeof buf), "127.0.0.1:77");
  assert_int_equal(ft_net_is_local(&lo), 1);
  /* the route to loopback leaves from loopback; the port is 0 */
  assert_int_equal(ft_net_route_to(&lo, &r), FT_OK);
  assert_string_equal(ft_net_format(&r, 1, buf, sizeof buf), "127.0.0.1:0");
  /* a documentation address (TEST-NET-3) is nobody's */
  assert_int_equal(ft_net_resolve("203.0.113.77", 0, 0, &other), FT_OK);
  assert_int_equal(ft_net_is_local(&other), 0);
}

static void test_iface(void **st) {
  (void)st;
  ft_sockaddr a;
  char buf[80];
  assert_int_equal(ft_net_iface("lo", &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 1, buf, sizeof buf), "127.0.0.1:0");
  assert_int_equal(ft_net_iface("127.0.0.1", &a), FT_OK);
  assert_string_equal(ft_net_format(&a, 0, buf, sizeof buf), "127.0.0.1");
  assert_int_equal(ft_net_iface("203.0.113.77", &a), FT_ENET);
  assert_non_null(strstr(ft_err_detail(), "203.0.113.77 is not an address of this host"));
  assert_int_equal(ft_net_iface("nosuchif0", &a), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "'nosuchif0'"));
  assert_non_null(strstr(ft_err_detail(), "lo")); /* the interfaces it has */
  assert_int_equal(ft_net_iface("", &a), FT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_forms), cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_resolve),     cmocka_unit_test(test_loopback_route_local),
      cmocka_unit_test(test_iface),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
