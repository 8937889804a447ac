/*
 * proxy_protocol.h: the PROXY protocol (v1 text, v2 binary) that a load
 * balancer sends before a connection's first byte to say whose connection
 * it is: a parser, a transport that reads exactly one header off a socket,
 * and the encoder that writes one for an upstream (`proxy_protocol on`).
 */
#ifndef CORRAL_PROTO_PROXY_PROTOCOL_H
#define CORRAL_PROTO_PROXY_PROTOCOL_H

#include "proto/http/exchange.h"

#include <corral.h>

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The longest v1 line, CRLF included (the specification's bound). */
#define PROXY_PROTOCOL_V1_MAX 107
/* The longest v2 header taken, TLVs included: the specification allows
 * 16 + 65535 bytes, nginx and HAProxy take a few kilobytes. */
#define PROXY_PROTOCOL_MAX 4096

struct proxy_protocol_header {
    unsigned version; /* 1 or 2 */
    /* False for v1 UNKNOWN, v2 LOCAL, and v2 families other than IPv4 and
     * IPv6: the connection keeps its own peer address, as in nginx. */
    bool has_address;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } source, destination;
    socklen_t address_len; /* of source and destination */
};

/* Reads the header at the start of `data` (`len` bytes).  Returns its
 * length once it is complete, with *out filled in; 0 when `data` is a valid
 * beginning of a header and more is needed; -EPROTO when malformed (not a
 * PROXY header at all, among others); -EMSGSIZE when longer than
 * PROXY_PROTOCOL_V1_MAX or PROXY_PROTOCOL_MAX.  Allocates nothing and
 * reads no byte past `len`. */
ssize_t proxy_protocol_parse(const char *data, size_t len, struct proxy_protocol_header *out);

/* Names of the reasons a connection's header is refused, for counters. */
enum proxy_protocol_failure {
    PROXY_PROTOCOL_MALFORMED, /* not a valid header, or too long */
    PROXY_PROTOCOL_TIMEOUT,   /* not complete within client_header_timeout */
    PROXY_PROTOCOL_FAILURES,
};
extern const char *const proxy_protocol_failure_names[PROXY_PROTOCOL_FAILURES];

/* The transport of a connection whose first bytes must be a PROXY header.
 * Each read peeks at the socket and, once the header is complete, takes
 * exactly its bytes and no more: what follows (a TLS ClientHello, say)
 * stays in the socket for the transport that comes next.  The header's
 * bytes reach on_data as they are, in one piece; the handler parses them
 * again with proxy_protocol_parse() and sets the next transport there.
 * A read fails with -EPROTO or -EMSGSIZE for a malformed header, and with
 * -EPROTO for one cut short by the peer's close.  Set it from on_open. */
extern const struct corral_transport proxy_protocol_transport;

/* The room proxy_protocol_encode() needs for any header it writes: a v1
 * line's specified bound (a TCP6 line takes 104 bytes at most); a v2
 * header, without TLVs, takes 52 at most. */
#define PROXY_PROTOCOL_SEND_MAX PROXY_PROTOCOL_V1_MAX

/* Writes the header of `version` (1 or 2) for a connection from `source`
 * to `destination` into `buf` (`cap` bytes).  IPv4 and IPv6 addresses with
 * their ports give TCP4 or TCP6 (a mix of the two, both as IPv6, IPv4
 * mapped); NULL or another family for either gives "PROXY UNKNOWN" (v1)
 * or the LOCAL command (v2), which tells the receiver to keep the
 * connection's own addresses.  No TLVs.  Returns the header's length, or
 * -ENOSPC when `cap` is short of it; no NUL is counted or needed after it. */
ssize_t proxy_protocol_encode(unsigned version, const struct sockaddr *source,
                              const struct sockaddr *destination, char *buf, size_t cap);

/* Writes into `buf` the header for an upstream connection opened for
 * `ex`: from the client as $remote_addr and $remote_port see it (after
 * real_ip) to the address the client connected to ($server_addr,
 * $server_port).  Returns its length. */
unsigned char proxy_protocol_encode_exchange(const struct exchange *ex, unsigned version,
                                             char buf[PROXY_PROTOCOL_SEND_MAX]);

#endif
