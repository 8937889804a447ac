/*
 * http2_response.c: responses on an HTTP/2 stream: HEADERS from the
 * handler's header lines, the body queued per stream and framed by
 * nghttp2's data provider, trailers, backpressure per stream, and the rest
 * of struct exchange_ops.
 */
#include "proto/policy/access_log.h"
#include "proto/http2/http2_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* CRLF header lines into nv pairs with lowercase names, in `lower` (`len`
 * bytes at least) and `nv` (`max` pairs).  Returns the pairs made. */
static size_t lines_to_nv(const char *lines, size_t len, char *lower, nghttp2_nv *nv, size_t max)
{
    size_t n = 0, pos = 0;
    struct http_str name, value;
    while (n < max && http_fields_next_line(lines, len, &pos, &name, &value)) {
        for (size_t i = 0; i < name.len; i++)
            lower[i] = (char)tolower((unsigned char)name.data[i]);
        nv[n++] = (nghttp2_nv){(uint8_t *)lower, (uint8_t *)value.data, name.len, value.len,
                               NGHTTP2_NV_FLAG_NONE};
        lower += name.len;
    }
    return n;
}

/* The body comes from the stream's queue; an empty queue defers the stream
 * until the handler writes or ends it. */
static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *user)
{
    (void)user;
    struct h2_stream *st = source->ptr;
    size_t n = st->out.len < length ? st->out.len : length;
    if (n > 0) {
        memcpy(buf, st->out.data + st->out.off, n);
        st->progress_ms = corral_loop_now(corral_conn_loop(h2_stream_conn(st)->c.sock));
    }
    st->out.off += n;
    st->out.len -= n;
    if (st->was_backed_up && st->out.len <= h2_stream_conn(st)->conf->stream_buffer_size / 2)
        h2_stream_conn(st)->drains_owed = true;
    if (st->out.len > 0 || !st->response_done) {
        if (n == 0)
            return NGHTTP2_ERR_DEFERRED;
        return (ssize_t)n;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (st->trailers != NULL) {
        size_t max = http_fields_count_lines(st->trailers, st->trailers_len);
        nghttp2_nv *nv = calloc(max, sizeof(*nv));
        char *lower = malloc(st->trailers_len + 1);
        size_t count = nv != NULL && lower != NULL
                           ? lines_to_nv(st->trailers, st->trailers_len, lower, nv, max)
                           : 0;
        if (count > 0 && nghttp2_submit_trailer(session, stream_id, nv, count) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        free(nv);
        free(lower);
    }
    return (ssize_t)n;
}

static void h2_ex_begin(struct exchange *base, unsigned status, const char *headers,
                        size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h2_stream *st = h2_stream_of(base);
    struct http2_conn *h2 = h2_stream_conn(st);
    if (st->response_started)
        return;
    bool informational = status < 200;
    /* A body known to be empty ends the stream with its HEADERS, as a
     * gRPC trailers-only response must. */
    bool body =
        !st->head_method && !informational && status != 204 && status != 304 && content_length != 0;
    /* The framing's own fields, then the handler's lines: on the stack for
     * a usual head, which is most of them. */
    nghttp2_nv nv_small[32];
    char lower_small[2048];
    size_t cap = http_fields_count_lines(headers, headers_len) + 4;
    nghttp2_nv *nv = cap <= 32 ? nv_small : calloc(cap, sizeof(*nv));
    char *lower = headers_len < sizeof(lower_small) ? lower_small : malloc(headers_len + 1);
    if (nv == NULL || lower == NULL) {
        if (nv != nv_small)
            free(nv);
        if (lower != lower_small)
            free(lower);
        nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        http2_schedule(h2);
        return;
    }
    struct http_fields_head own;
    http_fields_head(&own, status, content_length, codings);
    status %= 1000;
    size_t n = 0;
    for (; n < own.count; n++)
        nv[n] = (nghttp2_nv){(uint8_t *)own.field[n].name.data, (uint8_t *)own.field[n].value.data,
                             own.field[n].name.len, own.field[n].value.len, NGHTTP2_NV_FLAG_NONE};
    n += lines_to_nv(headers, headers_len, lower, nv + n, cap - n);
    int rc;
    if (informational) {
        rc = nghttp2_submit_headers(h2->session, NGHTTP2_FLAG_NONE, st->id, NULL, nv, n, NULL);
    } else {
        st->response_started = true;
        st->status = status;
        st->response_body = body;
        nghttp2_data_provider provider = {.source.ptr = st, .read_callback = read_body};
        rc = nghttp2_submit_response(h2->session, st->id, nv, n, body ? &provider : NULL);
    }
    if (nv != nv_small)
        free(nv);
    if (lower != lower_small)
        free(lower);
    if (rc != 0)
        nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    http2_schedule(h2);
}

void http2_response_resume(struct h2_stream *st)
{
    /* An error only says the stream was not deferred. */
    nghttp2_session_resume_data(h2_stream_conn(st)->session, st->id);
    http2_schedule(h2_stream_conn(st));
}

static void h2_ex_write(struct exchange *base, const char *data, size_t len)
{
    struct h2_stream *st = h2_stream_of(base);
    if (!st->response_body || st->response_done || len == 0)
        return;
    if (st->out.len == 0) /* a stall is counted from here */
        st->progress_ms = corral_loop_now(corral_conn_loop(h2_stream_conn(st)->c.sock));
    if (http2_stream_buf_append(&st->out, data, len) != 0) {
        nghttp2_submit_rst_stream(h2_stream_conn(st)->session, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
        http2_schedule(h2_stream_conn(st));
        return;
    }
    exchange_body_sent(&st->base, len);
    http2_response_resume(st);
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
    if (st->response_body)
        http2_response_resume(st);
    else
        http2_schedule(h2);
}

static void h2_ex_abort(struct exchange *base)
{
    struct h2_stream *st = h2_stream_of(base);
    /* on_abort follows from the stream's close, in the next flush. */
    nghttp2_submit_rst_stream(h2_stream_conn(st)->session, NGHTTP2_FLAG_NONE, st->id,
                              NGHTTP2_INTERNAL_ERROR);
    http2_schedule(h2_stream_conn(st));
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
