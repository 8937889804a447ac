/*
 * http2_response.c: responses on an HTTP/2 stream: HEADERS from the
 * handler's header lines, the body queued per stream and sent as DATA
 * frames referencing the queue as the windows open, trailers,
 * backpressure per stream, and the rest of struct exchange_ops.
 */
#include "proto/policy/access_log.h"
#include "proto/http2/http2_internal.h"

#include <assert.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The most response header fields encoded from the stack: a usual head,
 * which is most of them. */
#define H2_FIELDS_ON_STACK 32

/* CRLF header lines into fields with lowercase names, in `lower` (`len`
 * bytes at least) and `out` (`max` fields).  Returns the fields made. */
static size_t lines_to_fields(const char *lines, size_t len, char *lower, struct hpack_field *out,
                              size_t max)
{
    size_t n = 0, pos = 0;
    struct http_str name, value;
    while (n < max && http_fields_next_line(lines, len, &pos, &name, &value)) {
        for (size_t i = 0; i < name.len; i++)
            lower[i] = (char)tolower((unsigned char)name.data[i]);
        out[n++] = (struct hpack_field){(const uint8_t *)lower, name.len,
                                        (const uint8_t *)value.data, value.len, false};
        lower += name.len;
    }
    return n;
}

/* The trailers the handler left, as HEADERS ending the stream; false if
 * they could not be sent (no memory), and the stream must end with an
 * empty DATA frame instead. */
static bool send_trailers(struct h2_stream *st)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    size_t max = http_fields_count_lines(st->trailers, st->trailers_len);
    struct hpack_field *fields = calloc(max > 0 ? max : 1, sizeof(*fields));
    char *lower = malloc(st->trailers_len + 1);
    size_t count = fields != NULL && lower != NULL
                       ? lines_to_fields(st->trailers, st->trailers_len, lower, fields, max)
                       : 0;
    bool sent = count > 0 && h2_session_send_fields(&h2->session, (uint32_t)st->id, fields, NULL,
                                                    count, true) == 0;
    free(fields);
    free(lower);
    return sent;
}

static void response_send(struct h2_stream *st, size_t max)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    uint32_t id = (uint32_t)st->id;
    size_t n = h2_session_send_window(&h2->session, id);
    if (n > max)
        n = max;
    if (n > st->out.len)
        n = st->out.len;
    bool last = st->response_done && n == st->out.len;
    bool trailers = last && st->trailers != NULL;
    if (n > 0 || (last && !trailers)) {
        /* The frames reference the queue; the connection's output copies
         * what it does not send at once. */
        struct iovec iov = {st->out.data + st->out.off, n};
        if (h2_session_send_data(&h2->session, id, &iov, 1, last && !trailers) != 0) {
            h2_session_want_send(&h2->session, id, false);
            return;
        }
        st->out.off += n;
        st->out.len -= n;
        if (st->out.len == 0)
            st->out.off = 0;
        st->progress_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
        if (st->was_backed_up && st->out.len <= h2->conf->stream_buffer_size / 2)
            h2->drains_owed = true;
    }
    if (trailers && !send_trailers(st)) {
        struct iovec none = {NULL, 0};
        h2_session_send_data(&h2->session, id, &none, 0, true);
    }
    if (last)
        st->end_sent = true;
    if (st->out.len == 0)
        h2_session_want_send(&h2->session, id, false);
}

void http2_response_send(struct h2_stream *st, size_t max)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    assert(h2->sending == NULL);
    h2->sending = st; /* the stream its END_STREAM may close (on_closed()) */
    response_send(st, max);
    h2->sending = NULL;
}

static void h2_ex_begin(struct exchange *base, unsigned status, const char *headers,
                        size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h2_stream *st = h2_stream_of(base);
    struct http2_conn *h2 = h2_stream_conn(st);
    if (st->response_started || st->ended)
        return;
    bool informational = status < 200;
    /* A body known to be empty ends the stream with its HEADERS, as a
     * gRPC trailers-only response must. */
    bool body =
        !st->head_method && !informational && status != 204 && status != 304 && content_length != 0;
    /* The framing's own fields, then the handler's lines: on the stack for
     * a usual head, which is most of them. */
    struct hpack_field fields_small[H2_FIELDS_ON_STACK];
    char lower_small[2048];
    size_t cap = http_fields_count_lines(headers, headers_len) + 4;
    struct hpack_field *fields =
        cap <= H2_FIELDS_ON_STACK ? fields_small : calloc(cap, sizeof(*fields));
    char *lower = headers_len < sizeof(lower_small) ? lower_small : malloc(headers_len + 1);
    struct http_fields_head own;
    http_fields_head(&own, status, content_length, codings);
    status %= 1000;
    int rc = -1;
    if (fields != NULL && lower != NULL) {
        size_t n = 0;
        for (; n < own.count; n++)
            fields[n] = (struct hpack_field){
                (const uint8_t *)own.field[n].name.data, own.field[n].name.len,
                (const uint8_t *)own.field[n].value.data, own.field[n].value.len, false};
        n += lines_to_fields(headers, headers_len, lower, fields + n, cap - n);
        if (!informational) {
            st->response_started = true;
            st->status = status;
            st->response_body = body;
        }
        /* Response fields are indexed, as libnghttp2 did: a connection's
         * responses repeat most of their fields, and a literal of each on
         * every response doubled the bytes of a small answer (and the TLS
         * and kernel work on them).  Set-Cookie stays out of the table:
         * per-client values would only churn it. */
        uint8_t how_small[H2_FIELDS_ON_STACK];
        uint8_t *how = n <= H2_FIELDS_ON_STACK ? how_small : malloc(n);
        if (how != NULL)
            for (size_t i = 0; i < n; i++)
                how[i] = http_str_equal_nocase(
                             (struct http_str){(const char *)fields[i].name, fields[i].name_len},
                             "set-cookie")
                             ? HPACK_NO_INDEX
                             : HPACK_INDEX;
        /* Written at once: the HPACK encoder's state follows the order of
         * the blocks on the wire. */
        h2->sending = st;
        rc = h2_session_send_fields(&h2->session, (uint32_t)st->id, fields, how, n,
                                    !informational && !body);
        h2->sending = NULL;
        if (how != how_small)
            free(how);
        if (rc == 0 && !informational && !body)
            st->end_sent = true;
    }
    if (fields != fields_small)
        free(fields);
    if (lower != lower_small)
        free(lower);
    if (rc != 0)
        http2_reset(st, H2_INTERNAL_ERROR);
    http2_schedule(h2);
}

static void h2_ex_write(struct exchange *base, const char *data, size_t len)
{
    struct h2_stream *st = h2_stream_of(base);
    struct http2_conn *h2 = h2_stream_conn(st);
    if (!st->response_body || st->response_done || st->ended || len == 0)
        return;
    if (st->out.len == 0) /* a stall is counted from here */
        st->progress_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    if (http2_stream_buf_append(&st->out, data, len) != 0) {
        http2_reset(st, H2_INTERNAL_ERROR);
        return;
    }
    exchange_body_sent(&st->base, len);
    h2_session_want_send(&h2->session, (uint32_t)st->id, true);
    http2_schedule(h2);
}

static void h2_ex_writev(struct exchange *base, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        h2_ex_write(base, iov[i].iov_base, iov[i].iov_len);
}

static void h2_ex_end(struct exchange *base, const char *trailers, size_t trailers_len)
{
    struct h2_stream *st = h2_stream_of(base);
    struct http2_conn *h2 = h2_stream_conn(st);
    if (st->response_done || !st->response_started)
        return;
    st->response_done = true;
    if (trailers_len > 0 && st->response_body && (st->trailers = malloc(trailers_len)) != NULL) {
        memcpy(st->trailers, trailers, trailers_len);
        st->trailers_len = trailers_len;
    }
    http2_count_response(h2, st);
    /* Logged here unless a handler was cut off before (then on its close) */
    if (st->log != NULL && (st->handler_owns || st->handler == NULL))
        http2_stream_log(st, st->status);
    st->handler_owns = false;
    http2_stream_discard_body(st);
    /* The body and its end go out now, as far as the windows let them:
     * behind the head, in the same flush of the output (one TLS record,
     * one system call), where the flush at the end of the loop's turn
     * may come after the output was sent.  The rest follows with it. */
    if (st->response_body && !st->ended && !corral_conn_backed_up(h2->c.sock))
        http2_response_send(st, SIZE_MAX);
    http2_schedule(h2);
}

static void h2_ex_abort(struct exchange *base)
{
    /* on_abort follows from the stream's end, in the next flush. */
    http2_reset(h2_stream_of(base), H2_INTERNAL_ERROR);
}

static bool h2_ex_response_started(const struct exchange *base)
{
    return h2_stream_of(base)->response_started;
}

static bool h2_ex_backed_up(const struct exchange *base)
{
    struct h2_stream *st = h2_stream_of(base);
    bool backed_up = st->out.len >= h2_stream_conn(st)->conf->stream_buffer_size ||
                     corral_conn_backed_up(h2_stream_conn(st)->c.sock);
    if (backed_up)
        st->was_backed_up = true; /* on_drain is owed */
    return backed_up;
}

void http2_response_drain(struct h2_stream *st)
{
    if (!st->was_backed_up || !st->handler_owns ||
        st->out.len > h2_stream_conn(st)->conf->stream_buffer_size / 2 ||
        corral_conn_backed_up(h2_stream_conn(st)->c.sock))
        return;
    st->was_backed_up = false;
    exchange_drained(&st->base, st->handler);
}

static void h2_ex_pause_body(struct exchange *base)
{
    h2_stream_of(base)->body_paused = true;
}

static void h2_ex_resume_body(struct exchange *base)
{
    struct h2_stream *st = h2_stream_of(base);
    if (!st->body_paused)
        return;
    st->body_paused = false;
    /* The client could not send while the window waited on the handler. */
    st->body_progress_ms = corral_loop_now(corral_conn_loop(h2_stream_conn(st)->c.sock));
    http2_stream_deliver_body(st);
    http2_schedule(h2_stream_conn(st)); /* the WINDOW_UPDATE */
}

static void h2_ex_conn_facts(const struct exchange *base, struct exchange_conn_facts *out)
{
    out->requests = h2_stream_of(base)->number;
    out->proxy_protocol = base->conn->proxy_address;
}

/* No protocol switch over HTTP/2 (extended CONNECT is not offered), so a
 * request never asks for one; a handler that tries anyway ends the stream. */
static void h2_ex_tunnel(struct exchange *base)
{
    h2_ex_abort(base);
}

static void h2_ex_tunnel_write(struct exchange *base, const char *data, size_t len)
{
    (void)base;
    (void)data;
    (void)len;
}

static void h2_ex_tunnel_close(struct exchange *base)
{
    h2_ex_abort(base);
}

const struct exchange_ops h2_exchange_ops = {
    .begin = h2_ex_begin,
    .write = h2_ex_write,
    .writev = h2_ex_writev,
    .end = h2_ex_end,
    .abort = h2_ex_abort,
    .response_started = h2_ex_response_started,
    .backed_up = h2_ex_backed_up,
    .pause_body = h2_ex_pause_body,
    .resume_body = h2_ex_resume_body,
    .conn_facts = h2_ex_conn_facts,
    .tunnel = h2_ex_tunnel,
    .tunnel_write = h2_ex_tunnel_write,
    .tunnel_close = h2_ex_tunnel_close,
    .set_handler = http2_stream_set_handler,
    .routed = http2_stream_routed,
};
