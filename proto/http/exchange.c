/*
 * exchange.c: the parts of the exchange API that are the same for every
 * framer, built on its ops table: whole responses and error answers; the
 * response filter chain; the client address as text; a request copied to
 * outlive its head; the servers an exchange asked.
 */
#include "proto/http/exchange.h"

#include <assert.h>
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

/* ------------------------------------------------------ the servers asked */

struct exchange_upstream_try *exchange_upstream_ask(struct exchange *ex, const char *addr,
                                                    bool first_of_pass)
{
    bool new_pass = first_of_pass && ex->upstream_try_count > 0;
    if (ex->upstream_try_count < EXCHANGE_UPSTREAM_TRIES)
        ex->upstream_try_count++;
    else /* the overwritten entry's separator stays */
        new_pass = new_pass || ex->upstream_tries[EXCHANGE_UPSTREAM_TRIES - 1].new_pass;
    struct exchange_upstream_try *t = &ex->upstream_tries[ex->upstream_try_count - 1];
    *t = (struct exchange_upstream_try){
        .addr = addr,
        .connect_ms = EXCHANGE_UPSTREAM_UNKNOWN,
        .header_ms = EXCHANGE_UPSTREAM_UNKNOWN,
        .response_ms = EXCHANGE_UPSTREAM_UNKNOWN,
        .new_pass = new_pass,
    };
    return t;
}

uint32_t exchange_upstream_ms_since(uint64_t start_ns)
{
    uint64_t ms = (corral_monotonic_ns() - start_ns) / 1000000u;
    return ms < EXCHANGE_UPSTREAM_UNKNOWN ? (uint32_t)ms : EXCHANGE_UPSTREAM_UNKNOWN - 1;
}

void exchange_upstream_try_end(struct exchange_upstream_try *t, uint64_t start_ns, unsigned status)
{
    if (t == NULL || t->response_ms != EXCHANGE_UPSTREAM_UNKNOWN)
        return;
    if (t->status == 0)
        t->status = (uint16_t)status;
    t->response_ms = exchange_upstream_ms_since(start_ns);
}

/* ------------------------------------------------------ the filter chain */

void exchange_add_filter(struct exchange *ex, const struct exchange_filter *f)
{
    assert(f->order < EXCHANGE_FILTER_MAX);
    uint8_t bit = (uint8_t)(1u << f->order);
    ex->filters[f->order] = f;
    ex->head_filters = (uint8_t)(ex->head_filters & ~bit);
    ex->body_filters = (uint8_t)(ex->body_filters & ~bit);
    ex->flush_filters = (uint8_t)(ex->flush_filters & ~bit);
    ex->sent_filters = (uint8_t)(ex->sent_filters & ~bit);
    if (f->begin != NULL)
        ex->head_filters |= bit;
    if (f->write != NULL || f->end != NULL)
        ex->body_filters |= bit;
    if (f->flush != NULL)
        ex->flush_filters |= bit;
    if (f->sent != NULL)
        ex->sent_filters |= bit;
}

void exchange_remove_filter(struct exchange *ex, const struct exchange_filter *f)
{
    assert(f->order < EXCHANGE_FILTER_MAX);
    if (ex->filters[f->order] != f) /* off, or another one holds the place */
        return;
    uint8_t bit = (uint8_t)(1u << f->order);
    ex->filters[f->order] = NULL;
    ex->head_filters = (uint8_t)(ex->head_filters & ~bit);
    ex->body_filters = (uint8_t)(ex->body_filters & ~bit);
    ex->flush_filters = (uint8_t)(ex->flush_filters & ~bit);
    ex->sent_filters = (uint8_t)(ex->sent_filters & ~bit);
}

/* The first filter in `mask` at `from` or after; NULL: the framer next. */
static const struct exchange_filter *filter_at_or_after(const struct exchange *ex, unsigned mask,
                                                        unsigned from)
{
    mask &= ~((1u << from) - 1);
    if (mask == 0)
        return NULL;
    return ex->filters[__builtin_ctz(mask)];
}

static void begin_from(struct exchange *ex, unsigned from, const struct exchange_head *h)
{
    const struct exchange_filter *f = filter_at_or_after(ex, ex->head_filters, from);
    if (f != NULL)
        f->begin(ex, f, h);
    else
        ex->_ops->begin(ex, h->status, h->headers, h->headers_len, h->content_length, h->codings);
}

/* A body filter may have a `write` but no `end`, or the other way round. */
static void write_from(struct exchange *ex, unsigned from, const char *data, size_t len)
{
    const struct exchange_filter *f = filter_at_or_after(ex, ex->body_filters, from);
    while (f != NULL && f->write == NULL)
        f = filter_at_or_after(ex, ex->body_filters, f->order + 1);
    if (f != NULL)
        f->write(ex, f, data, len);
    else
        ex->_ops->write(ex, data, len);
}

static void end_from(struct exchange *ex, unsigned from, const char *trailers, size_t len)
{
    const struct exchange_filter *f = filter_at_or_after(ex, ex->body_filters, from);
    while (f != NULL && f->end == NULL)
        f = filter_at_or_after(ex, ex->body_filters, f->order + 1);
    if (f != NULL)
        f->end(ex, f, trailers, len);
    else
        ex->_ops->end(ex, trailers, len);
}

/* Only the filters with a `flush` are in their mask: past the last the
 * flush ends, the framers sending what they hold at the end of the turn. */
static void flush_from(struct exchange *ex, unsigned from)
{
    const struct exchange_filter *f = filter_at_or_after(ex, ex->flush_filters, from);
    if (f != NULL)
        f->flush(ex, f);
}

void exchange_filter_begin_next(struct exchange *ex, const struct exchange_filter *self,
                                const struct exchange_head *head)
{
    begin_from(ex, self->order + 1, head);
}

void exchange_filter_write_next(struct exchange *ex, const struct exchange_filter *self,
                                const char *data, size_t len)
{
    if (len > 0)
        write_from(ex, self->order + 1, data, len);
}

void exchange_filter_end_next(struct exchange *ex, const struct exchange_filter *self,
                              const char *trailers, size_t len)
{
    end_from(ex, self->order + 1, trailers, len);
}

void exchange_filter_flush_next(struct exchange *ex, const struct exchange_filter *self)
{
    flush_from(ex, self->order + 1);
}

void exchange__begin_filtered(struct exchange *ex, unsigned status, const char *headers,
                              size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct exchange_head h = {status, headers, headers_len, content_length, codings};
    begin_from(ex, 0, &h);
}

void exchange__write_filtered(struct exchange *ex, const char *data, size_t len)
{
    if (len > 0)
        write_from(ex, 0, data, len);
}

void exchange__writev_filtered(struct exchange *ex, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        if (iov[i].iov_len > 0)
            write_from(ex, 0, iov[i].iov_base, iov[i].iov_len);
}

void exchange__end_filtered(struct exchange *ex, const char *trailers, size_t len)
{
    end_from(ex, 0, trailers, len);
}

void exchange__flush_filtered(struct exchange *ex)
{
    flush_from(ex, 0);
}

void exchange_drained(struct exchange *ex, const struct http_handler *handler)
{
    for (unsigned m = ex->body_filters; m != 0; m &= m - 1) {
        const struct exchange_filter *f = ex->filters[__builtin_ctz(m)];
        if (f->drain != NULL && !f->drain(ex, f))
            return;
    }
    if (handler != NULL && handler->on_drain != NULL)
        handler->on_drain(ex);
}

void exchange__sent_filtered(struct exchange *ex, uint64_t bytes)
{
    for (unsigned mask = ex->sent_filters; mask != 0; mask &= mask - 1) {
        const struct exchange_filter *f = ex->filters[__builtin_ctz(mask)];
        f->sent(ex, f, bytes);
    }
}

bool exchange_error_page(struct exchange *ex, unsigned status)
{
    return ex->error_hook != NULL && ex->error_hook(ex, status);
}

void exchange_respond_error(struct exchange *ex, unsigned status)
{
    if (exchange_error_page(ex, status))
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

void exchange_format_peer(const struct http_conn *c, char *buf, size_t len)
{
    struct sockaddr_storage peer;
    socklen_t peer_len;
    union exchange_addr addr = {.sa.sa_family = AF_UNSPEC};
    if (c != NULL && http_conn_peer(c, &peer, &peer_len) && peer_len <= sizeof(addr))
        memcpy(&addr, &peer, peer_len);
    exchange_format_addr(&addr, buf, len);
}

char *exchange_request_copy(const struct http_request *req, struct http_request *out)
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
