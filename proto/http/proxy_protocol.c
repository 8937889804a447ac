/*
 * proxy_protocol.c: the PROXY protocol header, v1 and v2, as the HAProxy
 * specification (proxy-protocol.txt) defines it, parsed from bytes; the
 * transport that takes exactly one header off a socket before TLS or HTTP;
 * and the header written for an upstream.
 */
#include "proto/http/proxy_protocol.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *const proxy_protocol_failure_names[PROXY_PROTOCOL_FAILURES] = {
    [PROXY_PROTOCOL_MALFORMED] = "malformed",
    [PROXY_PROTOCOL_TIMEOUT] = "timeout",
};

static const char v1_prefix[] = "PROXY ";
#define V1_PREFIX_LEN (sizeof(v1_prefix) - 1)
static const char v2_signature[12] = "\r\n\r\n\0\r\nQUIT\n";
#define V2_HEADER_LEN 16

/* ---------------------------------------------------------------------- v1 */

/* A decimal port: "0", or 1 to 5 digits without a leading zero, <= 65535. */
static bool v1_port(const char *text, size_t len, uint16_t *out)
{
    if (len == 0 || len > 5 || (text[0] == '0' && len > 1))
        return false;
    unsigned value = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        value = value * 10 + (unsigned)(text[i] - '0');
    }
    if (value > 65535)
        return false;
    *out = (uint16_t)value;
    return true;
}

/* An address of `family` written as `len` bytes of text. */
static bool v1_address(int family, const char *text, size_t len, void *out)
{
    char buf[INET6_ADDRSTRLEN];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return inet_pton(family, buf, out) == 1;
}

/* "PROXY TCP4|TCP6 SRC DST SPORT DPORT" or "PROXY UNKNOWN[ ...]": `line`
 * without its CRLF, and every byte of it printable. */
static int v1_line(const char *line, size_t len, struct proxy_protocol_header *out)
{
    const char *field[5]; /* protocol, source, destination, their ports */
    size_t field_len[5], count = 0;
    const char *p = line + V1_PREFIX_LEN;
    size_t rest = len - V1_PREFIX_LEN;
    if (rest >= 7 && memcmp(p, "UNKNOWN", 7) == 0 && (rest == 7 || p[7] == ' ')) {
        /* The rest of the line is to be ignored (the specification, 2.1). */
        *out = (struct proxy_protocol_header){.version = 1};
        return 0;
    }
    for (size_t at = V1_PREFIX_LEN;;) {
        const char *space = memchr(line + at, ' ', len - at);
        size_t stop = space != NULL ? (size_t)(space - line) : len;
        if (count == 5 || stop == at)
            return -EPROTO; /* too many fields, or two spaces in a row */
        field[count] = line + at;
        field_len[count++] = stop - at;
        if (space == NULL)
            break;
        at = stop + 1;
    }
    if (count != 5)
        return -EPROTO;
    struct proxy_protocol_header h = {.version = 1, .has_address = true};
    uint16_t sport, dport;
    if (!v1_port(field[3], field_len[3], &sport) || !v1_port(field[4], field_len[4], &dport))
        return -EPROTO;
    if (field_len[0] == 4 && memcmp(field[0], "TCP4", 4) == 0) {
        h.source.in = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(sport)};
        h.destination.in = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(dport)};
        h.address_len = sizeof(struct sockaddr_in);
        if (!v1_address(AF_INET, field[1], field_len[1], &h.source.in.sin_addr) ||
            !v1_address(AF_INET, field[2], field_len[2], &h.destination.in.sin_addr))
            return -EPROTO;
    } else if (field_len[0] == 4 && memcmp(field[0], "TCP6", 4) == 0) {
        h.source.in6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(sport)};
        h.destination.in6 =
            (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(dport)};
        h.address_len = sizeof(struct sockaddr_in6);
        if (!v1_address(AF_INET6, field[1], field_len[1], &h.source.in6.sin6_addr) ||
            !v1_address(AF_INET6, field[2], field_len[2], &h.destination.in6.sin6_addr))
            return -EPROTO;
    } else {
        return -EPROTO;
    }
    *out = h;
    return 0;
}

static ssize_t v1_parse(const char *data, size_t len, struct proxy_protocol_header *out)
{
    size_t scan = len < PROXY_PROTOCOL_V1_MAX ? len : PROXY_PROTOCOL_V1_MAX;
    for (size_t i = V1_PREFIX_LEN; i < scan; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c == '\r') {
            if (i + 2 > PROXY_PROTOCOL_V1_MAX)
                return -EMSGSIZE;
            if (i + 1 == len)
                return 0; /* its LF is still to come */
            if (data[i + 1] != '\n')
                return -EPROTO;
            int err = v1_line(data, i, out);
            return err != 0 ? err : (ssize_t)(i + 2);
        }
        if (c < 0x20 || c > 0x7e)
            return -EPROTO;
    }
    return len < PROXY_PROTOCOL_V1_MAX ? 0 : -EMSGSIZE;
}

/* ---------------------------------------------------------------------- v2 */

/* The TLVs after the addresses: skipped, but they must fill the rest of
 * the header exactly. */
static bool v2_tlvs_valid(const unsigned char *p, size_t len)
{
    while (len > 0) {
        if (len < 3)
            return false;
        size_t value_len = (size_t)p[1] << 8 | p[2];
        if (value_len > len - 3)
            return false;
        p += 3 + value_len;
        len -= 3 + value_len;
    }
    return true;
}

/* An IP family's address block: the source's and the destination's
 * addresses, `size` bytes each, then their ports, all in network order
 * as a sockaddr keeps them. */
static void v2_ip_addresses(const unsigned char *p, size_t size, void *source, void *destination,
                            in_port_t *source_port, in_port_t *destination_port)
{
    memcpy(source, p, size);
    memcpy(destination, p + size, size);
    memcpy(source_port, p + 2 * size, 2);
    memcpy(destination_port, p + 2 * size + 2, 2);
}

static ssize_t v2_parse(const unsigned char *data, size_t len, struct proxy_protocol_header *out)
{
    if (len < V2_HEADER_LEN)
        return len > 12 && (data[12] >> 4) != 2 ? -EPROTO : 0;
    unsigned version = data[12] >> 4, command = data[12] & 0x0f;
    unsigned family = data[13] >> 4, transport = data[13] & 0x0f;
    size_t body = (size_t)data[14] << 8 | data[15];
    if (version != 2 || command > 1 || family > 3 || transport > 2)
        return -EPROTO;
    if (body > PROXY_PROTOCOL_MAX - V2_HEADER_LEN)
        return -EMSGSIZE;
    if (len < V2_HEADER_LEN + body)
        return 0;
    const unsigned char *p = data + V2_HEADER_LEN;
    struct proxy_protocol_header h = {.version = 2};
    /* The address block's length by family (UNSPEC, INET, INET6, UNIX):
     * AF_UNIX's two 108-byte paths say nothing of a client's IP address,
     * and the connection's own is kept, as in nginx. */
    static const size_t family_addresses[4] = {0, 12, 36, 216};
    assert(family < sizeof(family_addresses) / sizeof(family_addresses[0])); /* checked above */
    size_t addresses = command == 1 ? family_addresses[family] : 0;
    if (body < addresses)
        return -EPROTO;
    if (command == 1 && family == 1) { /* PROXY, IPv4 */
        h.has_address = true;
        h.address_len = sizeof(struct sockaddr_in);
        h.source.in.sin_family = h.destination.in.sin_family = AF_INET;
        v2_ip_addresses(p, 4, &h.source.in.sin_addr, &h.destination.in.sin_addr,
                        &h.source.in.sin_port, &h.destination.in.sin_port);
    } else if (command == 1 && family == 2) { /* PROXY, IPv6 */
        h.has_address = true;
        h.address_len = sizeof(struct sockaddr_in6);
        h.source.in6.sin6_family = h.destination.in6.sin6_family = AF_INET6;
        v2_ip_addresses(p, 16, &h.source.in6.sin6_addr, &h.destination.in6.sin6_addr,
                        &h.source.in6.sin6_port, &h.destination.in6.sin6_port);
    }
    /* LOCAL (a health check of the balancer's own) and UNSPEC carry no
     * address: what follows the header is skipped, TLVs or not. */
    if (addresses > 0 && !v2_tlvs_valid(p + addresses, body - addresses))
        return -EPROTO;
    *out = h;
    return (ssize_t)(V2_HEADER_LEN + body);
}

/* ----------------------------------------------------------------- either */

ssize_t proxy_protocol_parse(const char *data, size_t len, struct proxy_protocol_header *out)
{
    if (len == 0)
        return 0;
    if (data[0] == 'P') {
        size_t n = len < V1_PREFIX_LEN ? len : V1_PREFIX_LEN;
        if (memcmp(data, v1_prefix, n) != 0)
            return -EPROTO;
        return n < V1_PREFIX_LEN ? 0 : v1_parse(data, len, out);
    }
    size_t n = len < sizeof(v2_signature) ? len : sizeof(v2_signature);
    if (memcmp(data, v2_signature, n) != 0)
        return -EPROTO;
    return v2_parse((const unsigned char *)data, len, out);
}

/* ----------------------------------------------------------------- encode */

static bool is_ip(const struct sockaddr *addr)
{
    return addr != NULL && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
}

/* An IP address with its port, copied by its family's size. */
static union exchange_addr addr_copy(const struct sockaddr *addr)
{
    union exchange_addr out;
    memcpy(&out, addr,
           addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    return out;
}

/* An IPv4 address as IPv6 (::ffff:a.b.c.d), for a header whose two
 * addresses must share a family. */
static union exchange_addr as_ipv6(union exchange_addr addr)
{
    if (addr.sa.sa_family == AF_INET6)
        return addr;
    union exchange_addr out = {.in6 = {.sin6_family = AF_INET6, .sin6_port = addr.in.sin_port}};
    out.in6.sin6_addr.s6_addr[10] = out.in6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&out.in6.sin6_addr.s6_addr[12], &addr.in.sin_addr, 4);
    return out;
}

static ssize_t v1_encode(const union exchange_addr *src, const union exchange_addr *dst, char *buf,
                         size_t cap)
{
    char line[PROXY_PROTOCOL_V1_MAX + 1];
    int n;
    if (src == NULL) {
        n = snprintf(line, sizeof(line), "PROXY UNKNOWN\r\n");
    } else {
        bool v4 = src->sa.sa_family == AF_INET;
        int family = v4 ? AF_INET : AF_INET6;
        char from[INET6_ADDRSTRLEN], to[INET6_ADDRSTRLEN];
        inet_ntop(family, v4 ? (const void *)&src->in.sin_addr : &src->in6.sin6_addr, from,
                  sizeof(from));
        inet_ntop(family, v4 ? (const void *)&dst->in.sin_addr : &dst->in6.sin6_addr, to,
                  sizeof(to));
        n = snprintf(line, sizeof(line), "PROXY %s %s %s %u %u\r\n", v4 ? "TCP4" : "TCP6", from, to,
                     ntohs(v4 ? src->in.sin_port : src->in6.sin6_port),
                     ntohs(v4 ? dst->in.sin_port : dst->in6.sin6_port));
    }
    /* Past the specified bound only if inet_ntop() wrote an IPv6 address
     * longer than its 39 hexadecimal characters, which it does not. */
    if (n < 0 || (size_t)n >= sizeof(line) || (size_t)n > cap)
        return -ENOSPC;
    memcpy(buf, line, (size_t)n);
    return n;
}

static ssize_t v2_encode(const union exchange_addr *src, const union exchange_addr *dst, char *buf,
                         size_t cap)
{
    bool v4 = src != NULL && src->sa.sa_family == AF_INET;
    size_t body = src == NULL ? 0 : v4 ? 12 : 36;
    if (cap < V2_HEADER_LEN + body)
        return -ENOSPC;
    unsigned char *p = (unsigned char *)buf;
    memcpy(p, v2_signature, sizeof(v2_signature));
    p[12] = src == NULL ? 0x20 : 0x21;             /* version 2; LOCAL or PROXY */
    p[13] = src == NULL ? 0x00 : v4 ? 0x11 : 0x21; /* UNSPEC, or TCP over IPv4 or IPv6 */
    p[14] = 0;
    p[15] = (unsigned char)body;
    if (v4) {
        memcpy(p + 16, &src->in.sin_addr, 4);
        memcpy(p + 20, &dst->in.sin_addr, 4);
        memcpy(p + 24, &src->in.sin_port, 2);
        memcpy(p + 26, &dst->in.sin_port, 2);
    } else if (src != NULL) {
        memcpy(p + 16, &src->in6.sin6_addr, 16);
        memcpy(p + 32, &dst->in6.sin6_addr, 16);
        memcpy(p + 48, &src->in6.sin6_port, 2);
        memcpy(p + 50, &dst->in6.sin6_port, 2);
    }
    return (ssize_t)(V2_HEADER_LEN + body);
}

ssize_t proxy_protocol_encode(unsigned version, const struct sockaddr *source,
                              const struct sockaddr *destination, char *buf, size_t cap)
{
    assert(version == 1 || version == 2);
    union exchange_addr src, dst;
    bool known = is_ip(source) && is_ip(destination);
    if (known) {
        src = addr_copy(source);
        dst = addr_copy(destination);
        if (src.sa.sa_family != dst.sa.sa_family) {
            src = as_ipv6(src);
            dst = as_ipv6(dst);
        }
    }
    return version == 1 ? v1_encode(known ? &src : NULL, known ? &dst : NULL, buf, cap)
                        : v2_encode(known ? &src : NULL, known ? &dst : NULL, buf, cap);
}

/* A system call per request on a proxy_protocol upstream: the header of
 * each request is what picks a pooled connection, and the client's
 * connection keeps no copy of its local address to read instead. */
unsigned char proxy_protocol_encode_exchange(const struct exchange *ex, unsigned version,
                                             char buf[PROXY_PROTOCOL_SEND_MAX])
{
    union exchange_addr local = {.sa.sa_family = AF_UNSPEC};
    struct sockaddr_storage addr;
    socklen_t len;
    if (ex->conn != NULL && http_conn_local(ex->conn, &addr, &len) && len <= sizeof(local))
        memcpy(&local, &addr, len);
    /* The unions, not their `sa`: an IPv6 address is longer than that. */
    ssize_t n =
        proxy_protocol_encode(version, (const struct sockaddr *)&ex->client,
                              (const struct sockaddr *)&local, buf, PROXY_PROTOCOL_SEND_MAX);
    assert(n > 0 && n <= PROXY_PROTOCOL_SEND_MAX); /* the room holds any header */
    return (unsigned char)n;
}

/* -------------------------------------------------------------- transport */

/* Whether the peer has shut its side: then a header still incomplete will
 * never be. */
static bool peer_closed(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static ssize_t pp_read(corral_conn *conn, void *buf, size_t len)
{
    int fd = corral_conn_fd(conn);
    size_t want = len < PROXY_PROTOCOL_MAX ? len : PROXY_PROTOCOL_MAX;
    ssize_t n;
    do
        n = recv(fd, buf, want, MSG_PEEK);
    while (n == -1 && errno == EINTR);
    if (n == -1)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    if (n == 0)
        return 0;
    struct proxy_protocol_header header;
    ssize_t used = proxy_protocol_parse(buf, (size_t)n, &header);
    if (used < 0)
        return used;
    if (used == 0) {
        if ((size_t)n == want)
            return -EMSGSIZE; /* the caller's buffer is below the bound */
        /* Peeked bytes stay in the socket; the next arrival is a new edge. */
        return peer_closed(fd) ? -EPROTO : -EAGAIN;
    }
    do
        n = recv(fd, buf, (size_t)used, 0);
    while (n == -1 && errno == EINTR);
    if (n == -1)
        return -errno;
    return n == used ? n : -EIO; /* the bytes were there a moment ago */
}

static ssize_t pp_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    return corral_plain_transport.writev(conn, iov, iovcnt);
}

static int pp_shutdown(corral_conn *conn)
{
    return corral_plain_transport.shutdown(conn);
}

const struct corral_transport proxy_protocol_transport = {
    .name = "proxy_protocol",
    /* A read that returns the header alone leaves the socket readable: the
     * next transport must be given its turn without waiting for an edge. */
    .layered = true,
    .read = pp_read,
    .writev = pp_writev,
    .shutdown = pp_shutdown,
};
