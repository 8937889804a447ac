/*
 * http2_stream.c: HTTP/2 streams as exchanges: the request head collected
 * and routed, the body delivered with flow control tied to the handler's
 * pace, and the response (HEADERS, DATA from a per-stream queue, trailers):
 * the HTTP/2 implementation of struct exchange_ops.
 */
#include "proto/policy/access_log.h"
#include "proto/policy/access_log_filter.h"
#include "proto/policy/add_header.h"
#include "proto/http2/http2_internal.h"
#include "proto/small_mem.h"
#include "proto/http/exchange_pool.h"
#include "proto/http/router.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ------------------------------------------------------------- buffers */

/* Room for `len` more bytes at the end of `b`, grown: where they go (the
 * caller adds them to b->len), or NULL without memory. */
static char *buf_room(struct h2_buf *b, size_t len)
{
    assert(len > 0); /* else an empty buffer has no room to point at */
    if (b->off + b->len + len > b->cap) {
        if (b->off > 0) {
            memmove(b->data, b->data + b->off, b->len);
            b->off = 0;
        }
        if (b->len + len > b->cap) {
            /* From 512 bytes: a request's fields then usually fit at once. */
            size_t cap = b->cap * 2 > b->len + len ? b->cap * 2 : b->len + len;
            if (cap < 512)
                cap = 512;
            char *grown = small_mem_realloc(b->data, cap, NULL);
            if (grown == NULL)
                return NULL;
            b->data = grown;
            b->cap = cap;
        }
    }
    assert(b->data != NULL && b->off + b->len + len <= b->cap);
    return b->data + b->off + b->len;
}

int http2_stream_buf_append(struct h2_buf *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    char *to = buf_room(b, len);
    if (to == NULL)
        return -ENOMEM;
    memcpy(to, data, len);
    b->len += len;
    return 0;
}

static void buf_free(struct h2_buf *b)
{
    small_mem_free(b->data, NULL);
    *b = (struct h2_buf){0};
}

/* ------------------------------------------------------------ lifecycle */

struct h2_stream *http2_stream_new(struct http2_conn *h2, int32_t id)
{
    struct h2_stream *st = exchange_pool_take(sizeof(*st));
    if (st == NULL)
        return NULL;
    memset(st, 0, sizeof(*st));
    st->base._ops = &h2_exchange_ops;
    st->base.conn = &h2->c;
    st->id = id;
    st->vhost = &h2->c.site->vhosts[0];
    st->started_ns = corral_monotonic_ns(); /* for the access log and the metrics */
    st->next = h2->streams;
    if (h2->streams != NULL)
        h2->streams->prev = st;
    h2->streams = st;
    h2->stream_count++;
    st->number = ++h2->streams_begun;
    return st;
}

void http2_stream_log(struct h2_stream *st, unsigned status)
{
    struct access_entry entry = {
        .ex = &st->base,
        .protocol = "HTTP/2.0",
        .status = status,
        .body_bytes_sent = access_log_filter_bytes(&st->base),
        .request_ns = st->started_ns ? corral_monotonic_ns() - st->started_ns : 0,
    };
    access_log_entry_from_kept(&entry, st->log_fields);
    if (st->log != NULL)
        access_log_write(st->log, &entry);
    free(st->log_fields);
    st->log_fields = NULL;
}

void http2_stream_free(struct h2_stream *st)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    if (st->handler_owns) {
        st->handler_owns = false;
        if (st->handler->on_abort != NULL)
            st->handler->on_abort(&st->base);
        if (st->log != NULL)
            http2_stream_log(st, st->response_started ? st->status : 499);
    }
    router_end(&st->base);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        h2->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    h2->stream_count--;
    buf_free(&st->head);
    buf_free(&st->in);
    buf_free(&st->trailers_in);
    buf_free(&st->out);
    small_mem_free(st->fields, NULL);
    free(st->trailers);
    free(st->log_fields);
    exchange_pool_put(st, sizeof(*st));
}

/* ---------------------------------------------------------- the request */

int http2_stream_header(struct h2_stream *st, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen)
{
    if (st->head_refused)
        return 0;
    /* RFC 9113 6.5.2: each field counts its name, its value and 32. */
    st->head_size += namelen + valuelen + 32;
    unsigned max_headers = st->vhost->limits.max_headers + 4; /* and the pseudo-headers */
    if (st->head_size > h2_stream_conn(st)->conf->max_header_list_size ||
        st->field_count >= max_headers) {
        st->head_refused = true; /* answered 431 once complete; nothing more kept */
        return 0;
    }
    if (st->field_count == st->field_cap) {
        size_t cap = st->field_cap ? st->field_cap * 2 : 16;
        struct http_field_ref *grown = small_mem_realloc(st->fields, cap * sizeof(*grown), NULL);
        if (grown == NULL)
            return -ENOMEM;
        st->fields = grown;
        st->field_cap = cap;
    }
    /* Name and value in one go: a field's room made once (a name is not
     * empty, h2_message.c saw to that). */
    size_t at = st->head.len;
    char *to = buf_room(&st->head, namelen + valuelen);
    if (to == NULL)
        return -ENOMEM;
    memcpy(to, name, namelen);
    if (valuelen > 0)
        memcpy(to + namelen, value, valuelen);
    st->head.len += namelen + valuelen;
    st->fields[st->field_count++] = (struct http_field_ref){at, namelen, at + namelen, valuelen};
    return 0;
}

int http2_stream_trailer(struct h2_stream *st, const uint8_t *name, size_t namelen,
                         const uint8_t *value, size_t valuelen)
{
    if (!st->handler_owns || st->body_dropped || st->handler->on_body_trailers == NULL)
        return 0;
    /* Framing, routing, credentials and the like are settled by the head
     * (RFC 9110 6.5.1). */
    if (!http_trailer_allowed((struct http_str){(const char *)name, namelen})) {
        http2_count(h2_stream_conn(st), HTTP2_TRAILER_FIELDS_DROPPED);
        return 0;
    }
    /* Beyond the header list's limit the trailers are dropped, all of them. */
    size_t limit = h2_stream_conn(st)->conf->max_header_list_size;
    if (st->trailers_size > limit)
        return 0; /* dropped already */
    st->trailers_size += namelen + valuelen + 32;
    if (st->trailers_size > limit) {
        buf_free(&st->trailers_in);
        return 0;
    }
    if (http2_stream_buf_append(&st->trailers_in, name, namelen) != 0 ||
        http2_stream_buf_append(&st->trailers_in, ": ", 2) != 0 ||
        http2_stream_buf_append(&st->trailers_in, value, valuelen) != 0 ||
        http2_stream_buf_append(&st->trailers_in, "\r\n", 2) != 0) {
        st->trailers_size = SIZE_MAX; /* dropped */
        buf_free(&st->trailers_in);
    }
    return 0;
}

void http2_stream_trailers_too_large(struct h2_stream *st)
{
    st->trailers_size = SIZE_MAX;
    buf_free(&st->trailers_in);
}

/* Keeps what the stream's log line needs of `req`, which `loc` (NULL:
 * none) of its vhost serves, when it has an access log. */
static void keep_log_fields(struct h2_stream *st, const struct http_request *req,
                            const struct http_location *loc)
{
    if (st->log_fields != NULL)
        return;
    st->log = access_log_filter_route(&st->base, h2_stream_conn(st)->c.site, st->vhost, loc);
    if (st->log == NULL)
        return;
    char remote[64]; /* exchange_client_host() writes at most this */
    exchange_client_host(&st->base, remote, sizeof(remote));
    st->log_fields = access_log_keep(req, remote);
}

void http2_stream_keep_log_unread(struct h2_stream *st)
{
    if (st->log_fields != NULL)
        return;
    st->log = access_log_filter_route(&st->base, h2_stream_conn(st)->c.site, st->vhost, NULL);
    if (st->log == NULL)
        return;
    char remote[64]; /* exchange_client_host() writes at most this */
    exchange_client_host(&st->base, remote, sizeof(remote));
    st->log_fields = access_log_keep_line(NULL, 0, remote);
}

/* Answers a request that never reaches a handler. */
static void refuse(struct h2_stream *st, unsigned status)
{
    const struct http_add_headers *rules = add_header_rules(&st->base);
    add_header_respond_error(&st->base, NULL, rules != NULL ? rules : st->vhost->add_headers,
                             status);
}

bool http2_stream_empty_body(const struct h2_stream *st)
{
    if (st->head_refused || st->field_count == 0)
        return false;
    const char *base = st->head.data + st->head.off;
    for (size_t i = 0; i < st->field_count; i++) {
        const struct http_field_ref *f = &st->fields[i];
        struct http_str name = {base + f->name, f->name_len};
        if (http_str_equal_nocase(name, "content-length"))
            return http_fields_length((struct http_str){base + f->value, f->value_len}) == 0;
    }
    return false;
}

void http2_stream_request(struct h2_stream *st, bool end_stream)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    st->request_done = end_stream;
    st->body_progress_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    struct http_request req = {.method = {NULL, 0}};
    struct http_header *headers = NULL;
    char *cookie = NULL;
    /* A refused head may have kept no field at all. */
    unsigned status =
        st->head_refused && st->field_count == 0
            ? 431
            : http_fields_request(st->head.data + st->head.off, st->fields, st->field_count,
                                  end_stream, &req, &headers, &cookie);
    if (st->head_refused || (status != 0 && status != HTTP_FIELDS_MALFORMED)) {
        /* Logged with what of the request arrived: its pseudo-headers
         * come first. */
        keep_log_fields(st, &req, NULL);
    }
    if (st->head_refused) {
        free(headers);
        free(cookie);
        buf_free(&st->head);
        http2_defence(h2, HTTP2_HEADER_LIST_TOO_LARGE,
                      "a header list over http2_max_header_list_size: 431");
        refuse(st, 431);
        return;
    }
    if (status == 0) {
        st->vhost = site_route_vhost(h2->c.site, h2->c.sock, req.host.data, req.host.len, &status);
        size_t max = st->vhost->limits.max_body_size;
        if (max > 0 && req.content_length > max)
            status = 413;
        st->head_method = req.head;
        /* A misdirected or too long request is routed too, for its
         * location's error page and log. */
        router_start(&st->base, st->vhost, &req, status);
    } else if (status == HTTP_FIELDS_MALFORMED) {
        http2_reset(st, H2_PROTOCOL_ERROR);
    } else {
        add_header_respond_error(&st->base, NULL, st->vhost->add_headers, status);
    }
    free(headers);
    free(cookie);
    buf_free(&st->head);
    small_mem_free(st->fields, NULL);
    st->fields = NULL;
    st->field_count = st->field_cap = 0;
    if (end_stream)
        http2_stream_body_end(st);
    http2_schedule(h2);
}

void http2_stream_set_handler(struct exchange *base, const struct http_handler *handler)
{
    struct h2_stream *st = h2_stream_of(base);
    assert(!st->response_started);
    st->handler = handler;
    st->handler_owns = true;
    if (!base->redirected)
        return;
    st->body_dropped = true;
    st->body_paused = false;
    http2_stream_discard_body(st);
    http2_schedule(h2_stream_conn(st)); /* the WINDOW_UPDATE for what was dropped */
}

void http2_stream_routed(struct exchange *base, const struct http_request *req)
{
    struct h2_stream *st = h2_stream_of(base);
    keep_log_fields(st, req, base->loc);
}

/* Hands queued body bytes to the handler while it takes them, and gives
 * their window back to the client. */
void http2_stream_deliver_body(struct h2_stream *st)
{
    struct h2_session *session = &h2_stream_conn(st)->session;
    while (st->in.len > 0 && !st->body_paused && st->handler_owns && !st->body_dropped) {
        const char *data = st->in.data + st->in.off;
        size_t len = st->in.len;
        st->in.off += len;
        st->in.len = 0;
        st->handler->on_body(&st->base, data, len);
        h2_session_consume_stream(session, (uint32_t)st->id, len);
    }
    if (st->in.len == 0 && st->request_done && !st->body_end_delivered) {
        st->body_end_delivered = true;
        if (st->handler_owns && !st->body_dropped && st->trailers_in.len > 0 &&
            st->trailers_size <= h2_stream_conn(st)->conf->max_header_list_size)
            st->handler->on_body_trailers(&st->base, st->trailers_in.data + st->trailers_in.off,
                                          st->trailers_in.len);
        buf_free(&st->trailers_in);
        if (st->handler_owns && !st->body_dropped && st->handler->on_body_end != NULL)
            st->handler->on_body_end(&st->base);
    }
}

void http2_stream_discard_body(struct h2_stream *st)
{
    if (st->in.len > 0)
        h2_session_consume_stream(&h2_stream_conn(st)->session, (uint32_t)st->id, st->in.len);
    buf_free(&st->in);
}

void http2_stream_body(struct h2_stream *st, const uint8_t *data, size_t len)
{
    struct h2_session *session = &h2_stream_conn(st)->session;
    /* The connection's window is given back at once: what waits for a
     * paused handler is bounded by its stream's window, and one paused
     * stream must not use up the window of all the others. */
    h2_session_consume(session, 0, len);
    st->body_received += len;
    st->body_progress_ms = corral_loop_now(corral_conn_loop(h2_stream_conn(st)->c.sock));
    size_t max = st->vhost->limits.max_body_size;
    if (st->handler_owns && !st->body_dropped && max > 0 && st->body_received > max) {
        /* A body longer than it said, or than the limit: the built-in
         * answer, as on HTTP/1.1, where the connection closes. */
        st->handler_owns = false;
        st->base.error_hook = NULL;
        if (!st->response_started)
            refuse(st, 413);
        else
            http2_reset(st, H2_CANCEL);
        if (st->handler->on_abort != NULL)
            st->handler->on_abort(&st->base);
        http2_stream_discard_body(st);
    }
    if (!st->handler_owns || st->body_dropped || st->handler->on_body == NULL) {
        h2_session_consume_stream(session, (uint32_t)st->id, len);
        return;
    }
    /* Kept while the handler pauses: the window bounds it, since what is
     * kept is not given back. */
    if (http2_stream_buf_append(&st->in, data, len) != 0) {
        h2_session_consume_stream(session, (uint32_t)st->id, len);
        http2_reset(st, H2_INTERNAL_ERROR);
        return;
    }
    http2_stream_deliver_body(st);
}

void http2_stream_body_end(struct h2_stream *st)
{
    st->request_done = true;
    if (st->handler == NULL || st->handler->on_body == NULL)
        st->in.len = 0;
    http2_stream_deliver_body(st);
}
