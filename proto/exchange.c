/*
 * exchange.c: the parts of the exchange API that are the same for every
 * framer, built on its ops table: whole responses and error answers; the
 * client address every framer reports; a request copied to outlive its
 * head.
 */
#include "proto/exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
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

void exchange__begin_filtered(struct exchange *ex, unsigned status, const char *headers,
                              size_t headers_len, int64_t content_length, struct http_str codings)
{
    if (ex->status_override != 0) /* an error page's response: see error_page.h */
        status = ex->status_override;
    if (ex->begin_filter != NULL)
        ex->begin_filter(ex, status, headers, headers_len, content_length, codings);
    else
        ex->_ops->begin(ex, status, headers, headers_len, content_length, codings);
}

void exchange_respond_error(struct exchange *ex, unsigned status)
{
    if (ex->error_hook != NULL && ex->error_hook(ex, status))
        return;
    exchange_respond_builtin(ex, status);
}

void exchange_respond_builtin(struct exchange *ex, unsigned status)
{
    ex->status_override = 0; /* an error page's status is for the page only */
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

char *http_request_copy(const struct http_request *req, struct http_request *out)
{
    size_t size = req->header_count * sizeof(struct http_header);
    size += req->method.len + req->target.len + req->path.len + req->host.len + req->authority.len +
            req->upgrade_protocol.len;
    for (size_t i = 0; i < req->header_count; i++)
        size += req->headers[i].name.len + req->headers[i].value.len;
    char *block = malloc(size + 1);
    if (block == NULL)
        return NULL;
    *out = *req;
    struct http_header *headers = (struct http_header *)(void *)block;
    char *p = block + req->header_count * sizeof(struct http_header);
#define COPY(field)                                                                                \
    do {                                                                                           \
        if ((field).data != NULL) {                                                                \
            memcpy(p, (field).data, (field).len);                                                  \
            (field).data = p;                                                                      \
            p += (field).len;                                                                      \
        }                                                                                          \
    } while (0)
    COPY(out->method);
    COPY(out->target);
    COPY(out->path);
    COPY(out->host);
    COPY(out->authority);
    COPY(out->upgrade_protocol);
    for (size_t i = 0; i < req->header_count; i++) {
        headers[i] = req->headers[i];
        COPY(headers[i].name);
        COPY(headers[i].value);
    }
#undef COPY
    out->headers = headers;
    return block;
}
