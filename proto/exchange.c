/*
 * exchange.c: the parts of the exchange API that are the same for every
 * framer, built on its ops table: whole responses and error answers; and
 * the client address every framer reports.
 */
#include "proto/exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

void exchange_respond(struct exchange *ex, unsigned status, const char *headers, const char *body,
                      size_t body_len)
{
    if (exchange_response_started(ex))
        return;
    exchange_begin(ex, status, headers, strlen(headers), (int64_t)body_len);
    exchange_write(ex, body, body_len);
    exchange_end(ex);
}

void exchange_respond_error(struct exchange *ex, unsigned status)
{
    /* 10 digits and a reason of 31 characters at most; cut, never overrun */
    char body[64];
    int n = snprintf(body, sizeof(body), "%u %s\n", status, http_reason(status));
    if (n < 0 || (size_t)n >= sizeof(body))
        n = (int)sizeof(body) - 1;
    exchange_respond(ex, status, "Content-Type: text/plain\r\n", body, (size_t)n);
}

/* inet_ntop() formats IPv4 with sprintf, and the proxy needs the address
 * for every request.  `buf` holds INET_ADDRSTRLEN bytes. */
static void format_ipv4(const struct in_addr *in, char *buf)
{
    const unsigned char *octets = (const unsigned char *)&in->s_addr;
    for (int i = 0; i < 4; i++) {
        unsigned octet = octets[i];
        if (octet >= 100)
            *buf++ = (char)('0' + octet / 100);
        if (octet >= 10)
            *buf++ = (char)('0' + octet / 10 % 10);
        *buf++ = (char)('0' + octet % 10);
        *buf++ = i < 3 ? '.' : '\0';
    }
}

void exchange_format_addr(const union exchange_addr *addr, char *buf, size_t len)
{
    if (len >= 2)
        memcpy(buf, "-", 2);
    if (addr->sa.sa_family == AF_INET && len >= INET_ADDRSTRLEN)
        format_ipv4(&addr->in.sin_addr, buf);
    else if (addr->sa.sa_family == AF_INET6)
        inet_ntop(AF_INET6, &addr->in6.sin6_addr, buf, (socklen_t)len);
}

void exchange_format_client(const corral_conn *conn, char *buf, size_t len)
{
    struct sockaddr_storage peer;
    socklen_t peer_len;
    union exchange_addr addr = {.sa.sa_family = AF_UNSPEC};
    if (corral_conn_peer(conn, &peer, &peer_len) == 0 && peer_len <= sizeof(addr))
        memcpy(&addr, &peer, peer_len);
    exchange_format_addr(&addr, buf, len);
}
