/*
 * http1_response.c: responses on an HTTP/1.1 server connection: the head,
 * sized from its inputs, the body (with a length, chunked, or until close),
 * the end of an exchange, and what handlers ask of the exchange.
 */
#include "proto/http1_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

/* "Date: Thu, 03 Dec 2026 04:10:00 GMT", formatted once per second per thread. */
static const char *date_header(void)
{
    static _Thread_local char text[48]; /* 37 bytes of fixed-width fields */
    static _Thread_local time_t formatted_at = -1;
    time_t now = time(NULL);
    if (now != formatted_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof(text), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        formatted_at = now;
    }
    return text;
}

static bool h1_keep_alive(const struct h1_conn *h1, const struct http_exchange *ex)
{
    const struct http_limits *limits = &h1->vhost->limits;
    return ex->keep_alive && !h1->stopping && limits->keepalive_timeout_ms > 0 &&
           h1->requests + 1 < limits->keepalive_requests;
}

static char *append(char *p, const char *text, size_t len)
{
    memcpy(p, text, len);
    return p + len;
}

static char *append_str(char *p, const char *text)
{
    return append(p, text, strlen(text));
}

/* The most digits append_uint() writes. */
#define UINT64_DIGITS 20

static char *append_uint(char *p, uint64_t value)
{
    char digits[UINT64_DIGITS]; /* UINT64_MAX has 20 */
    size_t n = 0;
    do
        digits[n++] = (char)('0' + value % 10);
    while ((value /= 10) > 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

void http_response_begin(struct http_exchange *ex, unsigned status, const char *headers,
                         size_t headers_len, int64_t content_length)
{
    http_response_begin_coded(ex, status, headers, headers_len, content_length,
                              (struct http_str){NULL, 0});
}

void http_response_begin_coded(struct http_exchange *ex, unsigned status, const char *headers,
                               size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h1_conn *h1 = ex->h1;
    if (ex->response_started)
        return;
    ex->response_started = true;
    ex->status = status;
    bool bodiless_status = status < 200 || status == 204 || status == 304;
    ex->response_body = !ex->head && !bodiless_status;
    if (codings.len > 0)
        content_length = -1; /* a coded body is sent chunked, never with a length */
    ex->response_chunked = ex->response_body && content_length < 0 && !ex->http10;
    /* A body of unknown length to an HTTP/1.0 client ends with the connection;
     * after 101 the connection belongs to another protocol. */
    ex->response_keep = status == 101 || (h1_keep_alive(h1, ex) &&
                                          !(ex->response_body && content_length < 0 && ex->http10));

    /* Built by hand: this runs once per request, and snprintf showed up in
     * the profile.  Sized from its inputs, since the header lines and the
     * codings come from the producer (a backend) and have any length: on
     * the stack when that fits, which is the common case, else on the heap.
     * The lengths are of objects in memory, so their sum cannot wrap. */
    const char *reason = http_reason(status), *date = date_header();
    size_t need = sizeof("HTTP/1.1  \r\nServer: corral\r\n") + UINT64_DIGITS + strlen(reason) +
                  strlen(date) + sizeof("Content-Length: \r\n") + UINT64_DIGITS +
                  sizeof("Transfer-Encoding: , chunked\r\n") + codings.len +
                  sizeof("Connection: close\r\n") + headers_len + sizeof("\r\n");
    char small[512], *head = small;
    if (need > sizeof(small) && (head = malloc(need)) == NULL) {
        corral_conn_abort(h1->conn, -ENOMEM);
        return;
    }
    char *p = append(head, "HTTP/1.1 ", 9);
    p = append_uint(p, status);
    *p++ = ' ';
    p = append_str(p, reason);
    p = append(p, "\r\nServer: corral\r\n", 18);
    p = append_str(p, date);
    if (content_length >= 0 && !bodiless_status) {
        p = append(p, "Content-Length: ", 16);
        p = append_uint(p, (uint64_t)content_length);
        p = append(p, "\r\n", 2);
    } else if (ex->response_chunked) {
        p = append(p, "Transfer-Encoding: ", 19);
        if (codings.len > 0) {
            p = append(p, codings.data, codings.len);
            p = append(p, ", ", 2);
        }
        p = append(p, "chunked\r\n", 9);
    }
    if (!ex->response_keep)
        p = append(p, "Connection: close\r\n", 19);
    p = append(p, headers, headers_len);
    p = append(p, "\r\n", 2);
    assert((size_t)(p - head) <= need);
    corral_conn_write(h1->conn, head, (size_t)(p - head));
    if (head != small)
        free(head);
}

void http_response_write(struct http_exchange *ex, const char *data, size_t len)
{
    if (!ex->response_body || len == 0 || ex->response_done)
        return;
    ex->body_sent += len;
    if (!ex->response_chunked) {
        corral_conn_write(ex->h1->conn, data, len);
        return;
    }
    char size_line[HTTP_CHUNK_SIZE_LINE];
    struct iovec iov[3];
    http_chunk_iov(size_line, data, len, iov);
    corral_conn_writev(ex->h1->conn, iov, 3);
}

void http_response_end(struct http_exchange *ex)
{
    struct h1_conn *h1 = ex->h1;
    if (ex->response_done || !ex->response_started)
        return;
    if (ex->response_chunked)
        corral_conn_write(h1->conn, "0\r\n\r\n", 5);
    ex->response_done = true;
    h1_count_response(h1, ex->status);
    if (h1->site->access_log != NULL)
        h1_log_exchange(h1, ex, ex->status);
    if (ex->response_keep) {
        if (ex->request_done)
            h1_finish_exchange(h1);
    } else if (ex->client_closes && ex->request_done) {
        h1_end(h1, false);
    } else {
        h1_close(h1);
    }
}

void http_respond(struct http_exchange *ex, unsigned status, const char *headers, const char *body,
                  size_t body_len)
{
    if (ex->response_started)
        return;
    http_response_begin(ex, status, headers, strlen(headers), (int64_t)body_len);
    http_response_write(ex, body, body_len);
    http_response_end(ex);
}

void http_respond_error(struct http_exchange *ex, unsigned status)
{
    /* 10 digits and a reason of 31 characters at most; cut, never overrun */
    char body[64];
    int n = snprintf(body, sizeof(body), "%u %s\n", status, http_reason(status));
    if (n < 0 || (size_t)n >= sizeof(body))
        n = (int)sizeof(body) - 1;
    http_respond(ex, status, "Content-Type: text/plain\r\n", body, (size_t)n);
}

void http_exchange_set_data(struct http_exchange *ex, void *data)
{
    ex->data = data;
}

void *http_exchange_data(const struct http_exchange *ex)
{
    return ex->data;
}

bool http_exchange_tls(const struct http_exchange *ex)
{
    return ex->h1->site->tls != NULL;
}

corral_conn *http_exchange_conn(const struct http_exchange *ex)
{
    return ex->h1->conn;
}

bool http_exchange_response_started(const struct http_exchange *ex)
{
    return ex->response_started;
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

void http_client_host(const corral_conn *conn, char *buf, size_t len)
{
    struct sockaddr_storage addr;
    socklen_t addrlen;
    if (len >= 2)
        memcpy(buf, "-", 2);
    if (corral_conn_peer(conn, &addr, &addrlen) != 0)
        return;
    if (addr.ss_family == AF_INET && len >= INET_ADDRSTRLEN)
        format_ipv4(&((struct sockaddr_in *)&addr)->sin_addr, buf);
    else if (addr.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, buf, (socklen_t)len);
}

void http_exchange_note_upstream_time(struct http_exchange *ex, uint64_t ns)
{
    ex->upstream_ns = (int64_t)ns;
}

void http_exchange_tunnel(struct http_exchange *ex)
{
    struct h1_conn *h1 = ex->h1;
    h1->tunnel = true;
    corral_conn_set_deadline(h1->conn, 0);
    corral_conn_set_timeouts(h1->conn, 0, 0); /* the protocol inside has its own */
    corral_conn_resume_read(h1->conn);        /* bytes that came early are waiting */
}
