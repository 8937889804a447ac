/*
 * http1_response.c: responses on an HTTP/1.1 server connection: the head,
 * sized from its inputs, the body (with a length, chunked, or until close),
 * trailers, the end of an exchange, and the rest of what handlers ask of an
 * exchange: the HTTP/1.1 implementation of struct exchange_ops.
 */
#include "proto/http1/http1_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

static bool h1_keep_alive(const struct h1_conn *h1, const struct h1_exchange *ex)
{
    const struct http_limits *limits = &h1->vhost->limits;
    return ex->keep_alive && !h1->stopping && limits->keepalive_timeout_ms > 0 &&
           h1->c.requests + 1 < limits->keepalive_requests;
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

static void h1_ex_begin(struct exchange *base, unsigned status, const char *headers,
                        size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = h1_exchange_conn(ex);
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
    const char *reason = http_reason(status);
    size_t need = sizeof("HTTP/1.1  \r\nServer: corral\r\n") + HTTP_UINT64_DIGITS + strlen(reason) +
                  sizeof("Date: \r\n") + HTTP_DATE_LEN + sizeof("Content-Length: \r\n") +
                  HTTP_UINT64_DIGITS + sizeof("Transfer-Encoding: , chunked\r\n") + codings.len +
                  sizeof("Connection: close\r\n") + headers_len + sizeof("\r\n");
    char small[512], *head = small;
    if (need > sizeof(small) && (head = malloc(need)) == NULL) {
        corral_conn_abort(h1->c.sock, -ENOMEM);
        return;
    }
    char *p;
    if (status == 200) { /* most responses: their first lines in one piece */
        static const char ok[] = "HTTP/1.1 200 OK\r\nServer: corral\r\nDate: ";
        p = append(head, ok, sizeof(ok) - 1);
    } else {
        p = append(head, "HTTP/1.1 ", 9);
        p = http_append_uint(p, status);
        *p++ = ' ';
        p = append_str(p, reason);
        p = append(p, "\r\nServer: corral\r\nDate: ", 24);
    }
    p = append(p, http_date(), HTTP_DATE_LEN);
    p = append(p, "\r\n", 2);
    if (content_length >= 0 && !bodiless_status) {
        p = append(p, "Content-Length: ", 16);
        p = http_append_uint(p, (uint64_t)content_length);
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
    corral_conn_write(h1->c.sock, head, (size_t)(p - head));
    if (head != small)
        free(head);
}

static void h1_ex_write(struct exchange *base, const char *data, size_t len)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    if (!ex->response_body || len == 0 || ex->response_done)
        return;
    if (ex->chunk_left > 0) { /* a chunk h1_ex_splice() opened and did not fill */
        size_t n = len < ex->chunk_left ? len : (size_t)ex->chunk_left;
        ex->chunk_left -= n;
        exchange_body_sent(&ex->base, n);
        struct iovec iov[2] = {{(void *)data, n}, {"\r\n", 2}};
        corral_conn_writev(h1_exchange_conn(ex)->c.sock, iov, ex->chunk_left == 0 ? 2 : 1);
        if (n == len)
            return;
        data += n;
        len -= n;
    }
    exchange_body_sent(&ex->base, len);
    if (!ex->response_chunked) {
        corral_conn_write(h1_exchange_conn(ex)->c.sock, data, len);
        return;
    }
    char size_line[HTTP_CHUNK_SIZE_LINE];
    struct iovec iov[3];
    http_chunk_iov(size_line, data, len, iov);
    corral_conn_writev(h1_exchange_conn(ex)->c.sock, iov, 3);
}

/* Buffers gathered into one chunk at most: its size line, these and its
 * CRLF go to one corral_conn_writev() from the stack. */
#define H1_CHUNK_IOV_MAX 16

static void h1_ex_writev(struct exchange *base, const struct iovec *iov, int count)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    if (!ex->response_body || ex->response_done)
        return;
    for (; ex->chunk_left > 0 && count > 0; iov++, count--)
        h1_ex_write(base, iov->iov_base, iov->iov_len);
    while (count > 0) {
        int n = count < H1_CHUNK_IOV_MAX ? count : H1_CHUNK_IOV_MAX;
        size_t len = 0;
        for (int i = 0; i < n; i++)
            len += iov[i].iov_len;
        if (len > 0 && !ex->response_chunked) {
            exchange_body_sent(&ex->base, len);
            corral_conn_writev(h1_exchange_conn(ex)->c.sock, iov, n);
        } else if (len > 0) { /* an empty chunk would end the body */
            exchange_body_sent(&ex->base, len);
            char size_line[HTTP_CHUNK_SIZE_LINE];
            struct iovec framing[3], chunk[H1_CHUNK_IOV_MAX + 2];
            http_chunk_iov(size_line, NULL, len, framing); /* its size line and CRLF */
            chunk[0] = framing[0];
            memcpy(chunk + 1, iov, (size_t)n * sizeof(*iov));
            chunk[n + 1] = framing[2];
            corral_conn_writev(h1_exchange_conn(ex)->c.sock, chunk, n + 2);
        }
        iov += n;
        count -= n;
    }
}

/* Trailers go in the last chunk (RFC 9112 7.1.2); a response with a length
 * or until close has nowhere to carry them. */
static void h1_ex_end(struct exchange *base, const char *trailers, size_t trailers_len)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = h1_exchange_conn(ex);
    if (ex->response_done || !ex->response_started)
        return;
    if (ex->response_chunked && trailers_len > 0) {
        struct iovec last[3] = {{"0\r\n", 3}, {(void *)trailers, trailers_len}, {"\r\n", 2}};
        corral_conn_writev(h1->c.sock, last, 3);
    } else if (ex->response_chunked) {
        corral_conn_write(h1->c.sock, "0\r\n\r\n", 5);
    }
    ex->response_done = true;
    http1_count_response(h1, ex->status);
    if (ex->log != NULL)
        http1_request_log(h1, ex, ex->status);
    if (ex->response_keep) {
        if (ex->request_done)
            http1_finish_exchange(h1);
    } else if (ex->client_closes && ex->request_done) {
        http1_end(h1, false);
    } else {
        http1_close(h1);
    }
}

static void h1_ex_abort(struct exchange *base)
{
    corral_conn_abort(h1_exchange_conn(h1_exchange_of(base))->c.sock, -ECONNRESET);
}

static bool h1_ex_response_started(const struct exchange *base)
{
    return h1_exchange_of(base)->response_started;
}

static bool h1_ex_backed_up(const struct exchange *base)
{
    return corral_conn_backed_up(h1_exchange_conn(h1_exchange_of(base))->c.sock);
}

/* The body and the next request share the connection's input: pausing one
 * pauses both, and a request waiting behind this one stays unread anyway
 * until the response is done.  The client's end is watched meanwhile
 * (h1_on_hangup()): a request held before its body is whole (an
 * auth_request, a limit_req delay) or an upload paused for its upstream
 * is let go of when the client leaves, not when the wait is over. */
static void h1_ex_pause_body(struct exchange *base)
{
    corral_conn *sock = h1_exchange_conn(h1_exchange_of(base))->c.sock;
    corral_conn_pause_read(sock);
    corral_conn_watch(sock);
}

static void h1_ex_resume_body(struct exchange *base)
{
    corral_conn_resume_read(h1_exchange_conn(h1_exchange_of(base))->c.sock);
}

static void h1_ex_conn_facts(const struct exchange *base, struct exchange_conn_facts *out)
{
    out->requests = base->conn->requests + 1; /* those completed, and this one */
    out->pipelined = h1_exchange_of(base)->pipelined;
    out->proxy_protocol = base->conn->proxy_address;
}

static void h1_ex_tunnel(struct exchange *base)
{
    struct h1_conn *h1 = h1_exchange_conn(h1_exchange_of(base));
    h1->tunnel = true;
    corral_conn_set_deadline(h1->c.sock, 0);
    corral_conn_set_timeouts(h1->c.sock, 0, 0); /* the protocol inside has its own */
    corral_conn_resume_read(h1->c.sock);        /* bytes that came early are waiting */
}

static void h1_ex_tunnel_write(struct exchange *base, const char *data, size_t len)
{
    corral_conn_write(h1_exchange_conn(h1_exchange_of(base))->c.sock, data, len);
}

/* Closes the connection once the output is sent; h1_on_close then reports
 * on_abort, as for a client that closes. */
static void h1_ex_tunnel_close(struct exchange *base)
{
    corral_conn_close(h1_exchange_conn(h1_exchange_of(base))->c.sock);
}

/* A splice under way, allocated only then: an idle connection's exchange
 * carries none of it. */
struct h1_splice {
    struct h1_exchange *ex;
    exchange_splice_cb cb;
    void *arg;
};

static void h1_ex_spliced(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg)
{
    (void)from;
    (void)to;
    struct h1_splice sp = *(struct h1_splice *)arg;
    free(arg);
    struct h1_exchange *ex = sp.ex;
    ex->splicing = false;
    exchange_body_sent(&ex->base, moved);
    /* A whole chunk went: its CRLF, before whatever the handler sends next.
     * A short one leaves the chunk unfinished, and the handler aborts. */
    if (ex->chunk_left > 0) {
        ex->chunk_left -= moved; /* at most what the splice was asked to move */
        if (ex->chunk_left == 0)
            corral_conn_write(h1_exchange_conn(ex)->c.sock, "\r\n", 2);
    }
    sp.cb(&ex->base, moved, error, sp.arg);
}

/* A body sent as it is, or one chunk of a chunked one: its size line goes
 * first, as queued output, which leaves ahead of the spliced bytes.  A
 * chunk needs its length: a splice until the stream ends cannot be one.
 * The h1 connection outlives the callback: its on_close waits for the
 * splice. */
static int h1_ex_splice(struct exchange *base, corral_conn *from, uint64_t max,
                        exchange_splice_cb cb, void *arg)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = h1_exchange_conn(ex);
    if (!ex->response_body || ex->response_done || max == 0 ||
        (ex->response_chunked && max == UINT64_MAX) || h1->c.tls)
        return -EOPNOTSUPP;
    /* The last response of a connection, when its length is known, is
     * copied: spliced and then closed at once, 1 MB responses to clients
     * that each made one request went at 0.82x the best peer's rate,
     * against 1.18x copied (docs/benchmarks.md).  A close-delimited body
     * still moves in the kernel: nothing else can end it. */
    if (!ex->response_keep && max != UINT64_MAX)
        return -EOPNOTSUPP;
    if (ex->splicing)
        return -EBUSY;
    /* A chunk left open by a splice that did not start goes on only with
     * exactly its rest. */
    if (ex->chunk_left > 0 && max != ex->chunk_left)
        return -EOPNOTSUPP;
    struct h1_splice *sp = malloc(sizeof(*sp));
    if (sp == NULL)
        return -ENOMEM;
    *sp = (struct h1_splice){.ex = ex, .cb = cb, .arg = arg};
    if (ex->response_chunked && ex->chunk_left == 0) {
        /* Nothing may be written to the connection once the splice runs.
         * If it does not start, the chunk stays open and the handler's
         * writes fill it (h1_ex_write). */
        char size_line[HTTP_CHUNK_SIZE_LINE];
        struct iovec iov[3];
        http_chunk_iov(size_line, NULL, (size_t)max, iov);
        corral_conn_write(h1->c.sock, iov[0].iov_base, iov[0].iov_len);
        ex->chunk_left = max;
    }
    int err = corral_conn_splice(from, h1->c.sock, max, h1_ex_spliced, sp);
    if (err != 0) {
        free(sp);
        return err;
    }
    ex->splicing = true;
    return 0;
}

/* A file's bytes as the body, or one chunk of a chunked one, its size
 * line first (queued output leaves ahead of the file's bytes), as a
 * splice's; the connection waits for the callback as for a splice. */
static int h1_ex_sendfile(struct exchange *base, int fd, uint64_t offset, uint64_t len,
                          exchange_splice_cb cb, void *arg)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = h1_exchange_conn(ex);
    if (!ex->response_body || ex->response_done || len == 0 || h1->c.tls)
        return -EOPNOTSUPP;
    if (ex->splicing)
        return -EBUSY;
    if (ex->chunk_left > 0 && len != ex->chunk_left)
        return -EOPNOTSUPP;
    struct h1_splice *sp = malloc(sizeof(*sp));
    if (sp == NULL)
        return -ENOMEM;
    *sp = (struct h1_splice){.ex = ex, .cb = cb, .arg = arg};
    if (ex->response_chunked && ex->chunk_left == 0) {
        /* If the send does not start, the chunk stays open and the
         * handler's writes fill it (h1_ex_write). */
        char size_line[HTTP_CHUNK_SIZE_LINE];
        struct iovec iov[3];
        http_chunk_iov(size_line, NULL, (size_t)len, iov);
        corral_conn_write(h1->c.sock, iov[0].iov_base, iov[0].iov_len);
        ex->chunk_left = len;
    }
    int err = corral_conn_sendfile(h1->c.sock, fd, offset, len, h1_ex_spliced, sp);
    if (err != 0) {
        free(sp);
        return err;
    }
    ex->splicing = true;
    return 0;
}

const struct exchange_ops h1_exchange_ops = {
    .begin = h1_ex_begin,
    .write = h1_ex_write,
    .writev = h1_ex_writev,
    .end = h1_ex_end,
    .abort = h1_ex_abort,
    .response_started = h1_ex_response_started,
    .backed_up = h1_ex_backed_up,
    .pause_body = h1_ex_pause_body,
    .resume_body = h1_ex_resume_body,
    .conn_facts = h1_ex_conn_facts,
    .tunnel = h1_ex_tunnel,
    .tunnel_write = h1_ex_tunnel_write,
    .tunnel_close = h1_ex_tunnel_close,
    .splice = h1_ex_splice,
    .sendfile = h1_ex_sendfile,
    .request_spliceable = http1_upload_spliceable,
    .request_splice = http1_upload_splice,
    .set_handler = http1_set_handler,
    .routed = http1_routed,
};
