/*
 * h3_stream.c: HTTP/3 request streams as exchanges: the head collected
 * from nghttp3 and routed, the body handed to the handler with QUIC flow
 * control given back as it takes it, and the response (HEADERS, a body
 * queue that nghttp3's data reader drains and acknowledgements free,
 * trailers): the HTTP/3 implementation of struct exchange_ops.
 */
#include "proto/http/exchange_pool.h"
#include "proto/http/router.h"
#include "proto/http3/http3_internal.h"
#include "proto/policy/access_log.h"
#include "proto/policy/access_log_filter.h"
#include "proto/policy/add_header.h"
#include "proto/small_mem.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- buffers */

static int buf_append(struct h3_buf *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (b->off + b->len + len > b->cap) {
        if (b->off > 0) {
            memmove(b->data, b->data + b->off, b->len);
            b->off = 0;
        }
        if (b->len + len > b->cap) {
            size_t cap = b->cap * 2 > b->len + len ? b->cap * 2 : b->len + len;
            if (cap < 512)
                cap = 512;
            uint8_t *grown;
            if (b->grown) {
                grown = small_mem_realloc(b->data, cap, NULL);
            } else if ((grown = small_mem_malloc(cap, NULL)) != NULL && b->len > 0) {
                memcpy(grown, b->data, b->len); /* out of the owner's storage */
            }
            if (grown == NULL)
                return -ENOMEM;
            b->data = grown;
            b->cap = cap;
            b->grown = true;
        }
    }
    memcpy(b->data + b->off + b->len, data, len);
    b->len += len;
    return 0;
}

static void buf_free(struct h3_buf *b)
{
    if (b->grown)
        small_mem_free(b->data, NULL);
    *b = (struct h3_buf){0};
}

/* ------------------------------------------------------------ lifecycle */

static struct h3_stream *stream_new(struct h3_conn *conn, int64_t id)
{
    struct h3_stream *st = exchange_pool_take(sizeof(*st));
    if (st == NULL)
        return NULL;
    memset(st, 0, offsetof(struct h3_stream, fields_inline));
    st->head.data = st->head_inline;
    st->head.cap = sizeof(st->head_inline);
    st->fields = st->fields_inline;
    st->field_cap = H3_FIELDS_INLINE;
    st->base._ops = &h3_exchange_ops;
    st->base.conn = &conn->c;
    st->id = id;
    st->vhost = &conn->c.site->vhosts[0];
    st->started_ns = corral_monotonic_ns();
    st->next = conn->streams;
    if (conn->streams != NULL)
        conn->streams->prev = st;
    conn->streams = st;
    conn->stream_count++;
    st->number = ++conn->streams_begun;
    return st;
}

static void stream_log(struct h3_stream *st, unsigned status)
{
    struct access_entry entry = {
        .ex = &st->base,
        .protocol = "HTTP/3.0",
        .status = status,
        .body_bytes_sent = access_log_filter_bytes(&st->base),
        .request_ns = corral_monotonic_ns() - st->started_ns,
    };
    access_log_entry_from_kept(&entry, st->log_fields);
    if (st->log != NULL)
        access_log_write(st->log, &entry);
    free(st->log_fields);
    st->log_fields = NULL;
}

static void fields_free(struct h3_stream *st)
{
    if (st->fields != st->fields_inline)
        small_mem_free(st->fields, NULL);
    st->fields = NULL;
    st->field_count = st->field_cap = 0;
}

void h3_stream_free(struct h3_stream *st)
{
    struct h3_conn *conn = h3_stream_conn(st);
    if (st->handler_owns) {
        st->handler_owns = false;
        if (st->handler->on_abort != NULL)
            st->handler->on_abort(&st->base);
        if (st->log != NULL)
            stream_log(st, st->response_started ? st->status : 499);
    }
    router_end(&st->base);
    if (conn->h3 != NULL)
        nghttp3_conn_set_stream_user_data(conn->h3, st->id, NULL);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        conn->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    conn->stream_count--;
    buf_free(&st->head);
    buf_free(&st->in);
    for (struct h3_chunk *c = st->chunks, *next; c != NULL; c = next) {
        next = c->next;
        small_mem_free(c, NULL);
    }
    fields_free(st);
    free(st->trailers);
    free(st->log_fields);
    exchange_pool_put(st, sizeof(*st));
}

/* Ends the stream both ways with `code` (RFC 9114 8.1). */
static void reset(struct h3_stream *st, uint64_t code)
{
    struct h3_conn *conn = h3_stream_conn(st);
    ngtcp2_conn_shutdown_stream(conn->quic, st->id, code);
    h3_conn_schedule(conn);
}

/* ---------------------------------------------------------- the request */

static int on_begin_headers(nghttp3_conn *h3, int64_t stream_id, void *user, void *stream_user)
{
    (void)stream_user;
    struct h3_conn *conn = user;
    struct h3_stream *st = stream_new(conn, stream_id);
    if (st == NULL || nghttp3_conn_set_stream_user_data(h3, stream_id, st) != 0) {
        if (st != NULL)
            h3_stream_free(st);
        return NGHTTP3_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_recv_header(nghttp3_conn *h3, int64_t stream_id, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *user, void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)token;
    (void)flags;
    (void)user;
    struct h3_stream *st = stream_user;
    if (st == NULL || st->head_refused)
        return 0;
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
    st->head_size += n.len + v.len + 32;
    if (st->head_size > H3_MAX_FIELD_SECTION ||
        st->field_count >= st->vhost->limits.max_headers + 4) {
        st->head_refused = true; /* answered 431 once complete; nothing more kept */
        return 0;
    }
    if (st->field_count == st->field_cap) {
        /* The cap is bounded by max_headers: no overflow. */
        size_t cap = st->field_cap ? st->field_cap * 2 : H3_FIELDS_INLINE;
        struct http_field_ref *grown;
        if (st->fields != st->fields_inline) {
            grown = small_mem_realloc(st->fields, cap * sizeof(*grown), NULL);
        } else if ((grown = small_mem_malloc(cap * sizeof(*grown), NULL)) != NULL) {
            memcpy(grown, st->fields, st->field_count * sizeof(*grown));
        }
        if (grown == NULL)
            return NGHTTP3_ERR_CALLBACK_FAILURE;
        st->fields = grown;
        st->field_cap = cap;
    }
    size_t at = st->head.len;
    if (buf_append(&st->head, n.base, n.len) != 0 || buf_append(&st->head, v.base, v.len) != 0)
        return NGHTTP3_ERR_CALLBACK_FAILURE;
    st->fields[st->field_count++] = (struct http_field_ref){at, n.len, at + n.len, v.len};
    return 0;
}

static void keep_log_fields(struct h3_stream *st, const struct http_request *req,
                            const struct http_location *loc)
{
    if (st->log_fields != NULL)
        return;
    st->log = access_log_filter_route(&st->base, h3_stream_conn(st)->c.site, st->vhost, loc);
    if (st->log == NULL)
        return;
    char remote[64]; /* exchange_client_host() writes at most this */
    exchange_client_host(&st->base, remote, sizeof(remote));
    st->log_fields = access_log_keep(req, remote);
}

/* Answers a request that never reaches a handler. */
static void refuse(struct h3_stream *st, unsigned status)
{
    const struct http_add_headers *rules = add_header_rules(&st->base);
    add_header_respond_error(&st->base, NULL, rules != NULL ? rules : st->vhost->add_headers,
                             status);
}

static void deliver_body(struct h3_stream *st);

/* A request whose head came before the handshake completed came in
 * 0-RTT (ngtcp2 holds a client's 1-RTT packets until then), which an
 * attacker may have replayed (RFC 8446 8, RFC 9001 9.2): only a GET or
 * HEAD that ended with its head is served; another is answered 425, so
 * that the client sends it again after the handshake (RFC 8470).
 * Returns the status to answer with, 0 to serve it. */
static unsigned early_request(struct h3_conn *conn, const struct http_request *req, bool ended)
{
    bool safe = (req->method.len == 3 && memcmp(req->method.data, "GET", 3) == 0) || req->head;
    if (safe && ended) {
        conn->ep->count[H3_EARLY_REQUESTS]++;
        return 0;
    }
    conn->ep->count[H3_TOO_EARLY]++;
    return 425;
}

static int on_end_headers(nghttp3_conn *h3, int64_t stream_id, int fin, void *user,
                          void *stream_user)
{
    (void)h3;
    (void)stream_id;
    struct h3_conn *conn = user;
    struct h3_stream *st = stream_user;
    if (st == NULL)
        return 0;
    st->request_done = fin != 0;
    struct http_request req = {.method = {NULL, 0}};
    struct http_header *headers = NULL;
    char *cookie = NULL;
    unsigned status =
        st->head_refused && st->field_count == 0
            ? 431
            : http_fields_request((const char *)st->head.data + st->head.off, st->fields,
                                  st->field_count, fin != 0, &req, &headers, &cookie);
    if (st->head_refused || (status != 0 && status != HTTP_FIELDS_MALFORMED))
        keep_log_fields(st, &req, NULL);
    if (st->head_refused) {
        refuse(st, 431);
    } else if (status == 0) {
        /* As over TCP: a request for a vhost whose certificate the
         * handshake did not offer is misdirected (421). */
        st->vhost = site_route_vhost_sni(conn->c.site, conn->dgram.server_name, req.host.data,
                                         req.host.len, &status);
        size_t max = st->vhost->limits.max_body_size;
        if (max > 0 && req.content_length > max)
            status = 413;
        if (status == 0 && !ngtcp2_conn_get_handshake_completed(conn->quic))
            status = early_request(conn, &req, fin != 0);
        st->head_method = req.head;
        /* A misdirected or too long request is routed too, for its
         * location's error page and log. */
        router_start(&st->base, st->vhost, &req, status);
    } else if (status == HTTP_FIELDS_MALFORMED) {
        reset(st, NGHTTP3_H3_MESSAGE_ERROR);
    } else {
        add_header_respond_error(&st->base, NULL, st->vhost->add_headers, status);
    }
    free(headers);
    free(cookie);
    buf_free(&st->head);
    fields_free(st);
    if (st->request_done)
        deliver_body(st);
    return 0;
}

/* Hands queued body bytes to the handler while it takes them, and gives
 * their stream window back to the client. */
static void deliver_body(struct h3_stream *st)
{
    struct h3_conn *conn = h3_stream_conn(st);
    while (st->in.len > 0 && !st->body_paused && st->handler_owns && !st->body_dropped) {
        const char *data = (const char *)st->in.data + st->in.off;
        size_t len = st->in.len;
        st->in.off += len;
        st->in.len = 0;
        ngtcp2_conn_extend_max_stream_offset(conn->quic, st->id, len);
        st->handler->on_body(&st->base, data, len);
    }
    if (st->in.len == 0 && st->request_done && !st->body_end_delivered) {
        st->body_end_delivered = true;
        if (st->handler_owns && !st->body_dropped && st->handler->on_body_end != NULL)
            st->handler->on_body_end(&st->base);
    }
    h3_conn_schedule(conn); /* the MAX_STREAM_DATA */
}

static void discard_body(struct h3_stream *st)
{
    if (st->in.len > 0)
        ngtcp2_conn_extend_max_stream_offset(h3_stream_conn(st)->quic, st->id, st->in.len);
    buf_free(&st->in);
}

static int on_recv_data(nghttp3_conn *h3, int64_t stream_id, const uint8_t *data, size_t len,
                        void *user, void *stream_user)
{
    (void)h3;
    struct h3_conn *conn = user;
    struct h3_stream *st = stream_user;
    /* The connection's window is given back at once: what waits for a
     * paused handler is bounded by its stream's window. */
    ngtcp2_conn_extend_max_offset(conn->quic, len);
    if (st == NULL) {
        ngtcp2_conn_extend_max_stream_offset(conn->quic, stream_id, len);
        return 0;
    }
    st->body_received += len;
    size_t max = st->vhost->limits.max_body_size;
    if (st->handler_owns && !st->body_dropped && max > 0 && st->body_received > max) {
        st->handler_owns = false;
        st->base.error_hook = NULL;
        if (!st->response_started)
            refuse(st, 413);
        else
            reset(st, NGHTTP3_H3_REQUEST_CANCELLED);
        if (st->handler->on_abort != NULL)
            st->handler->on_abort(&st->base);
        discard_body(st);
    }
    /* Bytes nobody takes give their stream window back at once. */
    bool kept = st->handler_owns && !st->body_dropped && st->handler->on_body != NULL;
    if (kept && buf_append(&st->in, data, len) == 0) {
        deliver_body(st);
        return 0;
    }
    ngtcp2_conn_extend_max_stream_offset(conn->quic, stream_id, len);
    if (kept) /* out of memory */
        reset(st, NGHTTP3_H3_INTERNAL_ERROR);
    return 0;
}

static int on_deferred_consume(nghttp3_conn *h3, int64_t stream_id, size_t consumed, void *user,
                               void *stream_user)
{
    (void)h3;
    (void)stream_user;
    struct h3_conn *conn = user;
    ngtcp2_conn_extend_max_stream_offset(conn->quic, stream_id, consumed);
    ngtcp2_conn_extend_max_offset(conn->quic, consumed);
    return 0;
}

static int on_end_stream(nghttp3_conn *h3, int64_t stream_id, void *user, void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)user;
    struct h3_stream *st = stream_user;
    if (st == NULL || st->request_done)
        return 0;
    st->request_done = true;
    if (st->handler == NULL || st->handler->on_body == NULL)
        st->in.len = 0;
    deliver_body(st);
    return 0;
}

static int on_stream_close(nghttp3_conn *h3, int64_t stream_id, uint64_t app_error_code, void *user,
                           void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)app_error_code;
    (void)user;
    struct h3_stream *st = stream_user;
    if (st != NULL)
        h3_stream_free(st);
    return 0;
}

/* The peer acknowledged `len` more bytes of the response: they are
 * nghttp3's no more, and their chunks go. */
static int on_acked_stream_data(nghttp3_conn *h3, int64_t stream_id, uint64_t len, void *user,
                                void *stream_user)
{
    (void)h3;
    (void)stream_id;
    struct h3_conn *conn = user;
    struct h3_stream *st = stream_user;
    if (st == NULL)
        return 0;
    assert(len <= st->unacked);
    st->unacked -= (size_t)len;
    st->acked_in_first += (size_t)len;
    while (st->chunks != NULL && st->chunks != st->unsent &&
           st->acked_in_first >= st->chunks->len) {
        struct h3_chunk *c = st->chunks;
        st->acked_in_first -= c->len;
        st->chunks = c->next;
        if (st->last == c)
            st->last = NULL;
        small_mem_free(c, NULL);
    }
    if (st->was_backed_up && st->unacked <= conn->ep->config.stream_buffer_size / 2)
        conn->drains_owed = true;
    return 0;
}

/* The client asked this side to stop sending, or reset its side: nghttp3
 * asks the same of QUIC's stream, in that direction. */
static int shutdown_stream(struct h3_conn *conn, int64_t stream_id, uint64_t code, bool read)
{
    int rc = read ? ngtcp2_conn_shutdown_stream_read(conn->quic, stream_id, code)
                  : ngtcp2_conn_shutdown_stream_write(conn->quic, stream_id, code);
    return rc != 0 ? NGHTTP3_ERR_CALLBACK_FAILURE : 0;
}

static int on_stop_sending(nghttp3_conn *h3, int64_t stream_id, uint64_t code, void *user,
                           void *stream_user)
{
    (void)h3;
    (void)stream_user;
    return shutdown_stream(user, stream_id, code, true);
}

static int on_reset_stream(nghttp3_conn *h3, int64_t stream_id, uint64_t code, void *user,
                           void *stream_user)
{
    (void)h3;
    (void)stream_user;
    return shutdown_stream(user, stream_id, code, false);
}

const nghttp3_callbacks h3_stream_callbacks = {
    .acked_stream_data = on_acked_stream_data,
    .stream_close = on_stream_close,
    .recv_data = on_recv_data,
    .deferred_consume = on_deferred_consume,
    .begin_headers = on_begin_headers,
    .recv_header = on_recv_header,
    .end_headers = on_end_headers,
    .stop_sending = on_stop_sending,
    .end_stream = on_end_stream,
    .reset_stream = on_reset_stream,
};

/* --------------------------------------------------------- the response */

/* CRLF header lines into nv pairs with lowercase names, in `lower` (`len`
 * bytes at least) and `nv` (`max` pairs).  Returns the pairs made. */
static size_t lines_to_nv(const char *lines, size_t len, char *lower, nghttp3_nv *nv, size_t max)
{
    size_t n = 0, pos = 0;
    struct http_str name, value;
    while (n < max && http_fields_next_line(lines, len, &pos, &name, &value)) {
        for (size_t i = 0; i < name.len; i++)
            lower[i] = (char)tolower((unsigned char)name.data[i]);
        nv[n++] = (nghttp3_nv){(uint8_t *)lower, (uint8_t *)value.data, name.len, value.len,
                               NGHTTP3_NV_FLAG_NONE};
        lower += name.len;
    }
    return n;
}

/* nghttp3's data reader: the chunks not handed out yet.  nghttp3 keeps
 * pointing into them until on_acked_stream_data(). */
static nghttp3_ssize read_data(nghttp3_conn *h3, int64_t stream_id, nghttp3_vec *vec, size_t veccnt,
                               uint32_t *flags, void *user, void *stream_user)
{
    (void)user;
    struct h3_stream *st = stream_user;
    size_t n = 0;
    while (st->unsent != NULL && n < veccnt) {
        vec[n++] = (nghttp3_vec){st->unsent->data, st->unsent->len};
        st->unsent = st->unsent->next;
    }
    if (st->unsent != NULL || !st->response_done) {
        if (n == 0) {
            st->data_blocked = true;
            return NGHTTP3_ERR_WOULDBLOCK;
        }
        return (nghttp3_ssize)n;
    }
    *flags |= NGHTTP3_DATA_FLAG_EOF;
    if (st->trailers != NULL) {
        size_t max = http_fields_count_lines(st->trailers, st->trailers_len);
        nghttp3_nv *nv = calloc(max, sizeof(*nv));
        char *lower = malloc(st->trailers_len + 1);
        size_t count = nv != NULL && lower != NULL
                           ? lines_to_nv(st->trailers, st->trailers_len, lower, nv, max)
                           : 0;
        /* nghttp3 encodes the fields at once: they need not outlive the call. */
        if (count > 0 && nghttp3_conn_submit_trailers(h3, stream_id, nv, count) == 0)
            *flags |= NGHTTP3_DATA_FLAG_NO_END_STREAM;
        free(nv);
        free(lower);
    }
    return (nghttp3_ssize)n;
}

static void resume(struct h3_stream *st)
{
    struct h3_conn *conn = h3_stream_conn(st);
    if (st->data_blocked) {
        st->data_blocked = false;
        nghttp3_conn_resume_stream(conn->h3, st->id);
    }
    h3_conn_schedule(conn);
}

static void h3_ex_begin(struct exchange *base, unsigned status, const char *headers,
                        size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h3_stream *st = h3_stream_of(base);
    struct h3_conn *conn = h3_stream_conn(st);
    if (st->response_started)
        return;
    bool informational = status < 200;
    bool body =
        !st->head_method && !informational && status != 204 && status != 304 && content_length != 0;
    /* On the stack for a usual head, which is most of them. */
    nghttp3_nv nv_small[32];
    char lower_small[2048];
    size_t cap = http_fields_count_lines(headers, headers_len) + 4;
    nghttp3_nv *nv = cap <= 32 ? nv_small : calloc(cap, sizeof(*nv));
    char *lower = headers_len < sizeof(lower_small) ? lower_small : malloc(headers_len + 1);
    if (nv == NULL || lower == NULL) {
        if (nv != nv_small)
            free(nv);
        if (lower != lower_small)
            free(lower);
        reset(st, NGHTTP3_H3_INTERNAL_ERROR);
        return;
    }
    struct http_fields_head own;
    http_fields_head(&own, status, content_length, codings);
    status %= 1000;
    size_t n = 0;
    for (; n < own.count; n++)
        nv[n] = (nghttp3_nv){(uint8_t *)own.field[n].name.data, (uint8_t *)own.field[n].value.data,
                             own.field[n].name.len, own.field[n].value.len, NGHTTP3_NV_FLAG_NONE};
    n += lines_to_nv(headers, headers_len, lower, nv + n, cap - n);
    int rc = 0;
    if (!informational) {
        st->response_started = true;
        st->status = status;
        st->response_body = body;
        static const nghttp3_data_reader reader = {.read_data = read_data};
        rc = nghttp3_conn_submit_response(conn->h3, st->id, nv, n, body ? &reader : NULL);
    } /* an interim response is not sent on HTTP/3 yet */
    if (nv != nv_small)
        free(nv);
    if (lower != lower_small)
        free(lower);
    if (rc != 0)
        reset(st, NGHTTP3_H3_INTERNAL_ERROR);
    h3_conn_schedule(conn);
}

static void h3_ex_write(struct exchange *base, const char *data, size_t len)
{
    struct h3_stream *st = h3_stream_of(base);
    if (!st->response_body || st->response_done || len == 0)
        return;
    struct h3_chunk *c =
        len <= SIZE_MAX - sizeof(*c) ? small_mem_malloc(sizeof(*c) + len, NULL) : NULL;
    if (c == NULL) {
        reset(st, NGHTTP3_H3_INTERNAL_ERROR);
        return;
    }
    c->next = NULL;
    c->len = len;
    memcpy(c->data, data, len);
    if (st->last != NULL)
        st->last->next = c;
    else
        st->chunks = c;
    st->last = c;
    if (st->unsent == NULL)
        st->unsent = c;
    st->unacked += len;
    exchange_body_sent(&st->base, len);
    resume(st);
}

static void h3_ex_writev(struct exchange *base, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        h3_ex_write(base, iov[i].iov_base, iov[i].iov_len);
}

static void h3_ex_end(struct exchange *base, const char *trailers, size_t trailers_len)
{
    struct h3_stream *st = h3_stream_of(base);
    if (st->response_done || !st->response_started)
        return;
    st->response_done = true;
    if (trailers_len > 0 && st->response_body && (st->trailers = malloc(trailers_len)) != NULL) {
        memcpy(st->trailers, trailers, trailers_len);
        st->trailers_len = trailers_len;
    }
    if (st->log != NULL && (st->handler_owns || st->handler == NULL))
        stream_log(st, st->status);
    st->handler_owns = false;
    discard_body(st);
    /* The client may still be sending a body no one reads: it is told to
     * stop (RFC 9114 4.1: H3_NO_ERROR once the response is complete). */
    if (!st->request_done)
        ngtcp2_conn_shutdown_stream_read(h3_stream_conn(st)->quic, st->id, NGHTTP3_H3_NO_ERROR);
    resume(st);
}

static void h3_ex_abort(struct exchange *base)
{
    /* on_abort follows from the stream's close. */
    reset(h3_stream_of(base), NGHTTP3_H3_INTERNAL_ERROR);
}

static bool h3_ex_response_started(const struct exchange *base)
{
    return h3_stream_of(base)->response_started;
}

static bool h3_ex_backed_up(const struct exchange *base)
{
    struct h3_stream *st = h3_stream_of(base);
    bool backed_up = st->unacked >= h3_stream_conn(st)->ep->config.stream_buffer_size;
    if (backed_up)
        st->was_backed_up = true;
    return backed_up;
}

void h3_stream_drains(struct h3_conn *conn)
{
    if (!conn->drains_owed)
        return;
    conn->drains_owed = false;
    size_t mark = conn->ep->config.stream_buffer_size / 2;
    for (struct h3_stream *st = conn->streams, *next; st != NULL; st = next) {
        next = st->next; /* on_drain may end the stream, never free it */
        if (!st->was_backed_up || !st->handler_owns || st->unacked > mark)
            continue;
        st->was_backed_up = false;
        exchange_drained(&st->base, st->handler);
    }
}

static void h3_ex_pause_body(struct exchange *base)
{
    h3_stream_of(base)->body_paused = true;
}

static void h3_ex_resume_body(struct exchange *base)
{
    struct h3_stream *st = h3_stream_of(base);
    if (!st->body_paused)
        return;
    st->body_paused = false;
    deliver_body(st);
}

static void h3_ex_conn_facts(const struct exchange *base, struct exchange_conn_facts *out)
{
    out->requests = h3_stream_of(base)->number;
}

/* No protocol switch over HTTP/3 (extended CONNECT is not offered). */
static void h3_ex_tunnel(struct exchange *base)
{
    h3_ex_abort(base);
}

static void h3_ex_tunnel_write(struct exchange *base, const char *data, size_t len)
{
    (void)base;
    (void)data;
    (void)len;
}

static void h3_ex_set_handler(struct exchange *base, const struct http_handler *handler)
{
    struct h3_stream *st = h3_stream_of(base);
    assert(!st->response_started);
    st->handler = handler;
    st->handler_owns = true;
    if (!base->redirected)
        return;
    st->body_dropped = true;
    st->body_paused = false;
    discard_body(st);
    h3_conn_schedule(h3_stream_conn(st));
}

static void h3_ex_routed(struct exchange *base, const struct http_request *req)
{
    keep_log_fields(h3_stream_of(base), req, base->loc);
}

const struct exchange_ops h3_exchange_ops = {
    .begin = h3_ex_begin,
    .write = h3_ex_write,
    .writev = h3_ex_writev,
    .end = h3_ex_end,
    .abort = h3_ex_abort,
    .response_started = h3_ex_response_started,
    .backed_up = h3_ex_backed_up,
    .pause_body = h3_ex_pause_body,
    .resume_body = h3_ex_resume_body,
    .conn_facts = h3_ex_conn_facts,
    .tunnel = h3_ex_tunnel,
    .tunnel_write = h3_ex_tunnel_write,
    .tunnel_close = h3_ex_abort,
    .set_handler = h3_ex_set_handler,
    .routed = h3_ex_routed,
};
