/*
 * ft_net: the addresses of a run that spans hosts (docs/multihost.md,
 * "Addresses and ports").
 *
 * The supervisor binds its control port to an address of the run file or
 * command line (supervisor.listen, --listen) and tells workers the address
 * to dial (supervisor.advertise, --advertise, or one it works out); each
 * worker binds Gloo to an address of its own host (FT_IFACE, nodes.iface,
 * or the one on the route to the supervisor). This module is the one place
 * those strings are parsed and turned into socket addresses:
 *
 *   ft_net_parse       "HOST:PORT", ":PORT", "HOST", "[v6]:PORT", "[v6]"
 *   ft_net_resolve     a host name or literal (getaddrinfo; IPv4 first)
 *   ft_net_loopback    this host's loopback (the one place it is named)
 *   ft_net_route_to    this host's address on the route to a peer (a UDP
 *                      socket connected to it, then getsockname: no packet
 *                      is sent)
 *   ft_net_iface       the address of interface NAME (IPv4 first), or
 *                      an address checked to belong to this host
 *   ft_net_is_local    whether an address belongs to this host (a bind to
 *                      it, port 0, succeeds)
 *   ft_net_format      "1.2.3.4", "1.2.3.4:5", "[fe80::1]:5"
 *
 * Everything but ft_net_parse and ft_net_format asks the kernel or the
 * resolver; none of it keeps state. Errors: FT_EINVAL for a malformed
 * string, FT_ENOENT for a name that does not resolve or an interface that
 * does not exist or has no address, FT_ENET for an address that is not
 * this host's or a socket call that fails.
 */
#ifndef FT_NET_H
#define FT_NET_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct ft_hostport {
  char host[256]; /* without brackets; "" when the string was ":PORT" */
  int port;       /* 0-65535; -1 when the string had none */
} ft_hostport;

typedef struct ft_sockaddr {
  struct sockaddr_storage ss;
  socklen_t len;
} ft_sockaddr;

/* Parses s as HOST:PORT, :PORT, HOST, [V6]:PORT or [V6]; an unbracketed
 * string with two or more colons is an IPv6 literal without a port. The
 * error says what was wrong, quoting s. */
int ft_net_parse(const char *s, ft_hostport *out);

/* Resolves host (a name or a literal; "" with passive = every interface,
 * 0.0.0.0) and sets the port. IPv4 results come before IPv6 ones. */
int ft_net_resolve(const char *host, int port, int passive, ft_sockaddr *out);

/* This host's IPv4 loopback with the given port. */
void ft_net_loopback(int port, ft_sockaddr *out);

/* This host's address on the route to peer (its port is ignored); the
 * result's port is 0. */
int ft_net_route_to(const ft_sockaddr *peer, ft_sockaddr *out);

/* spec is an interface name (its first IPv4 address, else its first IPv6
 * one) or an address literal that must belong to this host. Port 0. */
int ft_net_iface(const char *spec, ft_sockaddr *out);

/* 1 if a is an address of this host, 0 if not (-1 with the error set when
 * no socket can be made). */
int ft_net_is_local(const ft_sockaddr *a);

/* 1 for 0.0.0.0 or ::. */
int ft_net_is_wildcard(const ft_sockaddr *a);

/* Writes the address (with_port: and its port, IPv6 in brackets) to buf.
 * Returns buf; "?" for a family it does not know. */
char *ft_net_format(const ft_sockaddr *a, int with_port, char *buf, size_t len);

/* The port of a (host order). */
int ft_net_port(const ft_sockaddr *a);

#endif
