/*
 * ft_net: parsing and resolving the addresses of a multi-host run (see
 * ft_net.h for what each call does and why).
 *
 * Decisions:
 *  - IPv4 first everywhere (resolution, interfaces): Gloo and most
 *    clusters' private networks are IPv4; an IPv6-only name still works.
 *  - The loopback address appears once, in ft_net_loopback, as
 *    INADDR_LOOPBACK: resolving "localhost" would depend on /etc/hosts,
 *    which `ip netns exec` replaces with /etc/netns/NS/hosts.
 *  - "Belongs to this host" is decided by the kernel: a socket bound to
 *    the address with port 0 (EADDRNOTAVAIL when it is not ours), so a
 *    secondary address or one on a bridge counts like any other.
 *  - Link-local IPv6 addresses of an interface are skipped: they need a
 *    scope that a peer on another host cannot use.
 */
#include "ft_net.h"

#include "ft_err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_port(const char *p, const char *whole, int *out) {
  if (!*p)
    return ft_err_set(FT_EINVAL, "'%s': the port after ':' is empty", whole);
  long v = 0;
  for (const char *c = p; *c; c++) {
    if (*c < '0' || *c > '9')
      return ft_err_set(FT_EINVAL, "'%s': port '%s' is not a number 0-65535", whole, p);
    v = v * 10 + (*c - '0');
    if (v > 65535)
      return ft_err_set(FT_EINVAL, "'%s': port '%s' is not a number 0-65535", whole, p);
  }
  *out = (int)v;
  return FT_OK;
}

static int set_host(ft_hostport *out, const char *h, size_t n, const char *whole) {
  if (n >= sizeof out->host)
    return ft_err_set(FT_EINVAL, "'%.64s...': the host is longer than %zu bytes", whole,
                      sizeof out->host - 1);
  memcpy(out->host, h, n);
  out->host[n] = 0;
  return FT_OK;
}

int ft_net_parse(const char *s, ft_hostport *out) {
  if (!s || !out)
    return ft_err_set(FT_EINVAL, "ft_net_parse: NULL argument");
  memset(out, 0, sizeof *out);
  out->port = -1;
  if (!*s)
    return ft_err_set(FT_EINVAL, "empty address: want HOST:PORT, :PORT, HOST or [IPV6]:PORT");
  if (strpbrk(s, " \t\r\n/"))
    return ft_err_set(FT_EINVAL, "'%s': an address has no spaces or slashes", s);
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close)
      return ft_err_set(FT_EINVAL, "'%s': '[' without a closing ']'", s);
    if (close == s + 1)
      return ft_err_set(FT_EINVAL, "'%s': empty IPv6 address in brackets", s);
    int rc = set_host(out, s + 1, (size_t)(close - s - 1), s);
    if (rc)
      return rc;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, out->host, &a6) != 1)
      return ft_err_set(FT_EINVAL, "'%s': '%s' in brackets is not an IPv6 address", s, out->host);
    if (!close[1])
      return FT_OK;
    if (close[1] != ':')
      return ft_err_set(FT_EINVAL, "'%s': want ':PORT' after ']'", s);
    return parse_port(close + 2, s, &out->port);
  }
  const char *colon = strchr(s, ':');
  if (!colon)
    return set_host(out, s, strlen(s), s);
  if (strchr(colon + 1, ':')) {
    /* two or more colons: an IPv6 literal, without a port */
    struct in6_addr a6;
    if (inet_pton(AF_INET6, s, &a6) != 1)
      return ft_err_set(FT_EINVAL,
                        "'%s': too many ':' for HOST:PORT and not an IPv6 address "
                        "(an IPv6 address with a port is written [ADDR]:PORT)",
                        s);
    return set_host(out, s, strlen(s), s);
  }
  int rc = set_host(out, s, (size_t)(colon - s), s);
  if (rc)
    return rc;
  return parse_port(colon + 1, s, &out->port);
}

static void set_port(ft_sockaddr *a, int port) {
  if (a->ss.ss_family == AF_INET)
    ((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
  else if (a->ss.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
}

int ft_net_port(const ft_sockaddr *a) {
  if (a->ss.ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
  if (a->ss.ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
  return -1;
}

int ft_net_resolve(const char *host, int port, int passive, ft_sockaddr *out) {
  if (!host || !out)
    return ft_err_set(FT_EINVAL, "ft_net_resolve: NULL argument");
  memset(out, 0, sizeof *out);
  if (!*host && !passive)
    return ft_err_set(FT_EINVAL, "no host to resolve");
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  struct addrinfo *res = NULL;
  if (!*host)
    hints.ai_family = AF_INET; /* every interface: 0.0.0.0 */
  int e = getaddrinfo(*host ? host : NULL, "0", &hints, &res);
  if (e)
    return ft_err_set(e == EAI_NONAME || e == EAI_NODATA ? FT_ENOENT : FT_ENET,
                      "cannot resolve '%s': %s", host,
                      e == EAI_SYSTEM ? strerror(errno) : gai_strerror(e));
  const struct addrinfo *pick = NULL;
  for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
    if (ai->ai_family == AF_INET)
      pick = ai;
  for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
    if (ai->ai_family == AF_INET6)
      pick = ai;
  if (!pick || pick->ai_addrlen > sizeof out->ss) {
    freeaddrinfo(res);
    return ft_err_set(FT_ENOENT, "'%s' has no IPv4 or IPv6 address", host);
  }
  memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
  out->len = pick->ai_addrlen;
  freeaddrinfo(res);
  set_port(out, port < 0 ? 0 : port);
  return FT_OK;
}

void ft_net_loopback(int port, ft_sockaddr *out) {
  memset(out, 0, sizeof *out);
  struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin->sin_port = htons((uint16_t)(port < 0 ? 0 : port));
  out->len = sizeof *sin;
}

int ft_net_route_to(const ft_sockaddr *peer, ft_sockaddr *out) {
  memset(out, 0, sizeof *out);
  ft_sockaddr p = *peer;
  if (ft_net_port(&p) == 0)
    set_port(&p, 9); /* connect() of a UDP socket wants a port; nothing is sent */
  int fd = socket(p.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ft_err_set(FT_ENET, "socket: %s", strerror(errno));
  char a[80];
  int rc = FT_OK;
  if (connect(fd, (struct sockaddr *)&p.ss, p.len)) {
    rc = ft_err_set(FT_ENET, "no route to %s: %s", ft_net_format(&p, 0, a, sizeof a),
                    strerror(errno));
    goto out;
  }
  out->len = sizeof out->ss;
  if (getsockname(fd, (struct sockaddr *)&out->ss, &out->len)) {
    rc = ft_err_set(FT_ENET, "getsockname: %s", strerror(errno));
    goto out;
  }
  set_port(out, 0);
out:
  close(fd);
  return rc;
}

int ft_net_is_local(const ft_sockaddr *a) {
  ft_sockaddr b = *a;
  set_port(&b, 0);
  int fd = socket(b.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ft_err_set(FT_ENET, "socket: %s", strerror(errno));
    return -1;
  }
  int ok = bind(fd, (struct sockaddr *)&b.ss, b.len) == 0;
  close(fd);
  return ok;
}

int ft_net_is_wildcard(const ft_sockaddr *a) {
  if (a->ss.ss_family == AF_INET)
    return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (a->ss.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
  return 0;
}

int ft_net_iface(const char *spec, ft_sockaddr *out) {
  memset(out, 0, sizeof *out);
  if (!spec || !*spec)
    return ft_err_set(FT_EINVAL, "empty interface");
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, spec, &a4) == 1 || inet_pton(AF_INET6, spec, &a6) == 1) {
    int rc = ft_net_resolve(spec, 0, 0, out);
    if (rc)
      return rc;
    int local = ft_net_is_local(out);
    if (local < 0)
      return FT_ENET;
    if (!local)
      return ft_err_set(FT_ENET, "%s is not an address of this host", spec);
    return FT_OK;
  }
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs))
    return ft_err_set(FT_ENET, "getifaddrs: %s", strerror(errno));
  const struct ifaddrs *pick = NULL;
  int seen = 0;
  char names[256] = "";
  for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr)
      continue;
    if (!strcmp(i->ifa_name, spec)) {
      seen = 1;
      if (i->ifa_addr->sa_family == AF_INET) {
        pick = i;
        break;
      }
      if (!pick && i->ifa_addr->sa_family == AF_INET6 &&
          !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
        pick = i;
    } else if ((i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6) &&
               !strstr(names, i->ifa_name) &&
               strlen(names) + strlen(i->ifa_name) + 3 < sizeof names) {
      if (names[0])
        strcat(names, ", ");
      strcat(names, i->ifa_name);
    }
  }
  int rc = FT_OK;
  if (!pick) {
    rc = seen ? ft_err_set(FT_ENOENT, "interface %s has no usable IPv4 or IPv6 address", spec)
              : ft_err_set(FT_ENOENT,
                           "no interface or address of this host is called '%s' (interfaces: %s)",
                           spec, names[0] ? names : "none");
    goto out;
  }
  out->len = pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                  : sizeof(struct sockaddr_in6);
  memcpy(&out->ss, pick->ifa_addr, out->len);
  set_port(out, 0);
out:
  freeifaddrs(ifs);
  return rc;
}

char *ft_net_format(const ft_sockaddr *a, int with_port, char *buf, size_t len) {
  char h[INET6_ADDRSTRLEN] = "?";
  int v6 = a->ss.ss_family == AF_INET6;
  if (a->ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, h, sizeof h);
  else if (v6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, h, sizeof h);
  else {
    snprintf(buf, len, "?");
    return buf;
  }
  if (!with_port)
    snprintf(buf, len, "%s", h);
  else if (v6)
    snprintf(buf, len, "[%s]:%d", h, ft_net_port(a));
  else
    snprintf(buf, len, "%s:%d", h, ft_net_port(a));
  return buf;
}
