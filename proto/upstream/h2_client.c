/*
 * h2_client.c: HTTP/2 towards backends (h2_client.h): connections shared
 * by the streams of a worker's requests to one server, flow control per
 * stream (the backend's window opens only as the client takes the bytes),
 * request bodies and trailers, and the retry of streams the backend never
 * processed.
 */
#include "proto/upstream/h2_client.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The connection's receive window: the stream windows bound each
 * stream, and the connection's is consumed as bytes arrive, so that a
 * stalled stream never stalls the others. */
#define CONN_WINDOW (16 * 1024 * 1024)

static void h2c_flush(struct h2_client *c);
static void h2c_schedule(struct h2_client *c);
static int h2c_place(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct h2_client_stream *st, const struct h2_client *avoid);

/* ------------------------------------------------------------------ heads */

/* RFC 9113 8.2.2: these never appear in HTTP/2 (te only as "trailers"). */
static bool connection_specific(struct http_str name)
{
    static const char *const names[] = {"connection",        "keep-alive", "proxy-connection",
                                        "transfer-encoding", "upgrade",    "host"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (http_str_equal_nocase(name, names[i]))
            return true;
    return false;
}

static nghttp2_nv make_nv(const char *name, size_t name_len, const char *value, size_t value_len)
{
    return (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, name_len, value_len,
                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

/* One "name: value" line of `lines` from *pos: its parts (the name
 * lowercased in place).  Returns false at the end. */
static bool next_field(char *lines, size_t len, size_t *pos, struct http_str *name,
                       struct http_str *value)
{
    while (*pos < len) {
        char *line = lines + *pos;
        char *eol = memchr(line, '\n', len - *pos);
        size_t line_len = eol != NULL ? (size_t)(eol - line) : len - *pos;
        *pos += line_len + (eol != NULL);
        if (line_len > 0 && line[line_len - 1] == '\r')
            line_len--;
        char *colon = memchr(line, ':', line_len);
        if (colon == NULL || colon == line)
            continue;
        for (char *p = line; p < colon; p++)
            *p = (char)tolower((unsigned char)*p);
        *name = (struct http_str){line, (size_t)(colon - line)};
        *value = http_trim((struct http_str){colon + 1, line_len - name->len - 1});
        return true;
    }
    return false;
}

size_t h2_client_head_nv(char *head, size_t len, const char *scheme, nghttp2_nv *nv, size_t max)
{
    char *eol = memchr(head, '\n', len);
    char *sp1 = memchr(head, ' ', len);
    if (eol == NULL || sp1 == NULL || sp1 > eol || max < 4)
        return 0;
    char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (sp2 == NULL)
        return 0;
    size_t n = 0;
    nv[n++] = make_nv(":method", 7, head, (size_t)(sp1 - head));
    nv[n++] = make_nv(":scheme", 7, scheme, strlen(scheme));
    nv[n++] = make_nv(":authority", 10, "", 0); /* Host, found below */
    nv[n++] = make_nv(":path", 5, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    size_t pos = (size_t)(eol - head) + 1;
    struct http_str name, value;
    while (next_field(head, len, &pos, &name, &value)) {
        if (http_str_equal_nocase(name, "host")) {
            nv[2] = make_nv(":authority", 10, value.data, value.len);
            continue;
        }
        if (connection_specific(name) ||
            (http_str_equal_nocase(name, "te") && !http_str_equal_nocase(value, "trailers")))
            continue;
        if (n == max)
            return 0;
        nv[n++] = make_nv(name.data, name.len, value.data, value.len);
    }
    return n;
}

/* ---------------------------------------------------------------- streams */

static uint64_t h2c_now(const struct h2_client *c)
{
    return corral_loop_now(corral_conn_loop(c->base.conn));
}

/* The connection's deadline moves earlier if `at` is, never later
 * (on_deadline finds the rest). */
static void h2c_deadline_at(struct h2_client *c, uint64_t at)
{
    if (c->deadline_ms == 0 || at < c->deadline_ms) {
        c->deadline_ms = at;
        corral_conn_set_deadline(c->base.conn, at);
    }
}

/* The stream's read timeout runs from now. */
static void stream_arm(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    if (st->read_timeout_ms == 0 || !st->sent_all || c == NULL)
        return;
    st->deadline_ms = h2c_now(c) + st->read_timeout_ms;
    h2c_deadline_at(c, st->deadline_ms);
}

/* Body bytes wait from now (their send timeout runs). */
static void stream_arm_send(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    if (c == NULL || c->dead || st->send_timeout_ms == 0)
        return;
    st->progress_ms = h2c_now(c);
    h2c_deadline_at(c, st->progress_ms + st->send_timeout_ms);
}

static void h2c_unlist(struct h2_client *c)
{
    if (!c->listed)
        return;
    struct server_state *state = &c->base.worker->servers[c->base.server];
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        state->h2 = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->listed = false;
}

/* Takes `st` off its connection: nghttp2 no longer reaches it. */
static void stream_unlink(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    if (c == NULL)
        return;
    if (!c->dead && st->id > 0)
        nghttp2_session_set_stream_user_data(c->session, st->id, NULL);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    st->prev = st->next = NULL;
    st->conn = NULL;
    c->stream_count--;
    if (c->stream_count == 0 && !c->dead) {
        /* Idle: the pool's timeout applies, and a stopping worker's
         * connection closes (h2c_flush()). */
        corral_conn_set_timeouts(c->base.conn, c->base.upstream->idle_timeout_ms,
                                 c->send_timeout_ms);
        h2c_schedule(c);
    }
}

static void stream_link(struct h2_client *c, struct h2_client_stream *st)
{
    st->conn = c;
    st->prev = NULL;
    st->next = c->streams;
    if (c->streams != NULL)
        c->streams->prev = st;
    c->streams = st;
    if (c->stream_count++ == 0 && c->base.connected)
        corral_conn_set_timeouts(c->base.conn, 0, c->send_timeout_ms);
}

/* Once the head came, the body bytes sent are never sent again. */
static void stream_drop_replay(struct h2_client_stream *st)
{
    st->replayable = false;
    if (st->sent == 0)
        return;
    memmove(st->data, st->data + st->sent, st->len - st->sent);
    st->len -= st->sent;
    st->sent = 0;
}

static void stream_reset_input(struct h2_client_stream *st)
{
    free(st->in.data);
    st->in = (struct h1_head_buf){0};
}

/* The stream is off its connection; its body stays the owner's, who may
 * put it on another server's (h2_client_submit() again) or free it. */
static void stream_release(struct h2_client_stream *st)
{
    stream_unlink(st);
    stream_reset_input(st);
}

static void stream_fail(struct h2_client_stream *st, enum proxy_error_kind kind, bool processed)
{
    const struct h2_client_ops *ops = st->ops;
    void *owner = st->owner;
    stream_release(st);
    ops->on_error(owner, kind, processed);
}

/* A stream the backend never processed goes on another connection to the
 * same server, as long as its body is whole and it was not refused too
 * often; else it fails as unprocessed, for its owner to decide. */
static void stream_retry(struct h2_client_stream *st, struct h2_client *from)
{
    stream_unlink(st);
    stream_reset_input(st);
    st->id = 0;
    st->headers_sent = st->head_done = st->sent_all = false;
    st->deadline_ms = 0;
    st->sent = 0;
    if (!st->replayable || ++st->retries > H2_CLIENT_RETRIES_MAX ||
        h2c_place(from->base.upstream, from->base.worker, from->base.server,
                  corral_conn_loop(from->base.conn), 0, from->send_timeout_ms, st, from) != 0) {
        stream_fail(st, PROXY_ERROR_RESET, false);
        return;
    }
}

static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *user)
{
    (void)source;
    struct h2_client *c = user;
    struct h2_client_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* cancelled: reset */
    size_t n = st->len - st->sent < length ? st->len - st->sent : length;
    if (n > 0) { /* data may be NULL otherwise */
        memcpy(buf, st->data + st->sent, n);
        st->progress_ms = h2c_now(c);
    }
    st->sent += n;
    if (!st->replayable || st->sent > H2_CLIENT_REPLAY_MAX)
        stream_drop_replay(st);
    if (st->paused && st->len - st->sent < H2_CLIENT_SEND_BUFFER / 2)
        c->drains_owed = true;
    if (st->len > st->sent || !st->body_end)
        return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (st->trailers_len > 0) {
        nghttp2_nv nv[64];
        size_t count = 0, pos = 0;
        struct http_str name, value;
        while (count < 64 && next_field(st->trailers, st->trailers_len, &pos, &name, &value))
            if (!connection_specific(name) && !http_str_equal_nocase(name, "te"))
                nv[count++] = make_nv(name.data, name.len, value.data, value.len);
        if (count > 0 && nghttp2_submit_trailer(session, stream_id, nv, count) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    st->sent_all = true;
    stream_arm(st);
    return (ssize_t)n;
}

/* ------------------------------------------------------- nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    struct h2_client_stream *st =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st != NULL)
        st->in.len = 0; /* an interim head's lines are dropped */
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)flags, (void)user;
    struct h2_client_stream *st =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct http_str n = {(const char *)name, namelen}, v = {(const char *)value, valuelen};
    if (namelen > 0 && name[0] == ':') {
        /* nghttp2 checked the pseudo-fields: one :status of 3 digits */
        if (!st->head_done && http_str_equal_nocase(n, ":status") && valuelen == 3)
            st->status =
                (unsigned)((value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0'));
        return 0;
    }
    if (!st->head_done && http_str_equal_nocase(n, "content-length")) {
        uint64_t length = 0;
        for (size_t i = 0; i < valuelen && length < (UINT64_C(1) << 60); i++)
            length = length * 10 + (uint64_t)(value[i] - '0'); /* digits: nghttp2 checked */
        st->content_length = (int64_t)length;
    }
    if (st->in.len + namelen + valuelen + 4 > st->head_limit) {
        st->invalid = true;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    }
    http1_client_head_add_header(&st->in, n, v);
    return 0;
}

/* The response is complete: its owner gets it, with the trailers.  A
 * request still being sent (the backend answered early, RFC 9113 8.1)
 * stops: its stream is reset, or it would stay open on our side. */
static void stream_finish(struct h2_client_stream *st, bool trailers)
{
    if (!st->sent_all && st->conn != NULL && !st->conn->dead) {
        nghttp2_submit_rst_stream(st->conn->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
        h2c_schedule(st->conn);
    }
    struct h1_head_buf in = st->in;
    st->in = (struct h1_head_buf){0};
    const struct h2_client_ops *ops = st->ops;
    void *owner = st->owner;
    stream_release(st);
    ops->on_end(owner, trailers && !in.failed ? in.data : NULL,
                trailers && !in.failed ? in.len : 0);
    free(in.data);
}

/* The final head: its fields, which point into the stream's lines, go to
 * the owner. */
static void stream_head(struct h2_client *c, struct h2_client_stream *st, bool end)
{
    struct h1_head_buf in = st->in;
    st->in = (struct h1_head_buf){0};
    st->head_done = true;
    size_t count = 0;
    for (size_t i = 0; i < in.len; i++)
        count += in.data[i] == '\n';
    struct http_header *headers = calloc(count + 1, sizeof(*headers));
    if (in.failed || headers == NULL) {
        free(headers);
        free(in.data);
        st->invalid = true;
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        return;
    }
    size_t n = 0, pos = 0;
    struct http_str name, value;
    while (n < count && next_field(in.data, in.len, &pos, &name, &value))
        headers[n++] = (struct http_header){name, value};
    bool no_body = st->head_method || st->status == 204 || st->status == 304;
    const struct http1_client_head head = {
        .status = st->status,
        .headers = headers,
        .header_count = n,
        .content_length = end || no_body ? (no_body ? st->content_length : 0) : st->content_length,
    };
    int32_t id = st->id;
    st->ops->on_head(st->owner, &head);
    free(headers);
    free(in.data);
    /* The owner may have let go meanwhile, and freed the stream. */
    if (nghttp2_session_get_stream_user_data(c->session, id) != st)
        return;
    stream_drop_replay(st);
    if (end)
        stream_finish(st, false);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct h2_client *c = user;
    if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
        c->settings_received = true;
        return 0;
    }
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        /* No new stream here; nghttp2 closes those above its last stream
         * ID as refused, and they go elsewhere (stream_retry()). */
        c->goaway = true;
        h2c_unlist(c);
        return 0;
    }
    struct h2_client_stream *st =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    stream_arm(st);
    if (frame->hd.type == NGHTTP2_HEADERS) {
        if (!st->head_done) {
            if (st->status < 200) {
                if (st->status == 101 || end) { /* no upgrade here; nor an end without a head */
                    st->invalid = true;
                    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
                }
                st->in.len = 0; /* interim: the final head follows */
                return 0;
            }
            stream_head(c, st, end);
            return 0;
        }
        if (end)
            stream_finish(st, true);
        return 0;
    }
    if (frame->hd.type == NGHTTP2_DATA && end && st->head_done)
        stream_finish(st, false);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)flags, (void)user;
    /* The connection's window opens at once: only the stream's waits. */
    nghttp2_session_consume_connection(session, len);
    struct h2_client_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st == NULL || !st->head_done) {
        nghttp2_session_consume_stream(session, stream_id, len);
        return 0;
    }
    st->held += len;
    st->ops->on_body(st->owner, (const char *)data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct h2_client_stream *st =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL || st->headers_sent)
        return 0;
    st->headers_sent = true;
    if (!st->has_body) {
        st->sent_all = true;
        stream_arm(st);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    struct h2_client *c = user;
    struct h2_client_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st == NULL)
        return 0;
    if (st->invalid) {
        stream_fail(st, PROXY_ERROR_INVALID, true);
        return 0;
    }
    /* Refused (RFC 9113 8.7), or above a GOAWAY's last stream ID, which
     * nghttp2 closes as refused: the backend did nothing with it. */
    if (!st->head_done && (error_code == NGHTTP2_REFUSED_STREAM || !st->headers_sent)) {
        stream_retry(st, c);
        return 0;
    }
    stream_fail(st, PROXY_ERROR_RESET, true);
    return 0;
}

/* --------------------------------------------------------- the connection */

static void h2c_free(struct h2_client *c)
{
    nghttp2_session_del(c->session);
    free(c);
}

static void h2c_flush(struct h2_client *c)
{
    if (c->dead || !c->base.connected)
        return;
    while (!corral_conn_backed_up(c->base.conn)) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0) {
            c->broken = true;
            corral_conn_abort(c->base.conn, -EPROTO);
            c->dead = true;
            return;
        }
        if (n == 0)
            break;
        corral_conn_write(c->base.conn, data, (size_t)n);
    }
    if (c->drains_owed) {
        c->drains_owed = false;
        for (struct h2_client_stream *st = c->streams, *next; st != NULL; st = next) {
            next = st->next;
            if (st->paused && st->len - st->sent < H2_CLIENT_SEND_BUFFER / 2) {
                st->paused = false;
                st->ops->on_send_drain(st->owner); /* writes go out next turn */
            }
        }
    }
    corral_worker *worker = corral_conn_worker(c->base.conn);
    bool stopping = worker != NULL && corral_worker_stopping(worker);
    if (c->stream_count == 0 &&
        ((!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) ||
         !c->listed || stopping)) {
        h2c_unlist(c);
        c->dead = true;
        corral_conn_close(c->base.conn);
    }
}

static void h2c_flush_deferred(void *arg)
{
    struct h2_client *c = arg;
    c->flush_scheduled = false;
    if (c->gone) {
        h2c_free(c);
        return;
    }
    h2c_flush(c);
}

static void h2c_schedule(struct h2_client *c)
{
    if (c->flush_scheduled || c->gone || c->dead)
        return;
    if (corral_loop_defer(corral_conn_loop(c->base.conn), h2c_flush_deferred, c) != 0) {
        corral_conn_abort(c->base.conn, -ENOMEM);
        c->dead = true;
        return;
    }
    c->flush_scheduled = true;
}

static void h2c_on_open(corral_conn *conn)
{
    struct h2_client *c = corral_conn_data(conn);
    struct proxy_upstream *up = c->base.upstream;
    c->base.connected = true;
    if (up->tls != NULL && tls_client_connect(up->tls, conn, c->base.server, true) != 0) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    corral_conn_set_timeouts(conn, c->stream_count > 0 ? 0 : up->idle_timeout_ms,
                             c->send_timeout_ms);
    for (struct h2_client_stream *st = c->streams; st != NULL; st = st->next) {
        if (st->sent_all)
            stream_arm(st);
        st->ops->on_open(st->owner);
    }
    h2c_flush(c);
}

static size_t h2c_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct h2_client *c = corral_conn_data(conn);
    if (c->dead)
        return len;
    ssize_t n = nghttp2_session_mem_recv(c->session, (const uint8_t *)data, len);
    if (n < 0) {
        c->dead = c->broken = true;
        corral_conn_abort(conn, -EPROTO);
        return len;
    }
    h2c_flush(c);
    return len;
}

static void h2c_on_drain(corral_conn *conn)
{
    h2c_flush(corral_conn_data(conn));
}

/* The read timeouts of the streams that passed them (a stream whose
 * client has not taken what came, its window closed, is waiting for the
 * client, not for the backend), and the send timeouts of those whose body
 * waits for the backend's window. */
static void h2c_on_deadline(corral_conn *conn)
{
    struct h2_client *c = corral_conn_data(conn);
    uint64_t now = h2c_now(c), next = 0;
    c->deadline_ms = 0;
    for (struct h2_client_stream *st = c->streams, *after; st != NULL; st = after) {
        after = st->next;
        if (st->len > st->sent && st->send_timeout_ms != 0 && c->base.connected) {
            uint64_t due = st->progress_ms + st->send_timeout_ms;
            if (due <= now) {
                if (!c->dead)
                    nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, st->id,
                                              NGHTTP2_CANCEL);
                stream_fail(st, PROXY_ERROR_TIMEOUT, st->headers_sent);
                continue;
            }
            if (next == 0 || due < next)
                next = due;
        }
        if (st->deadline_ms == 0)
            continue;
        if (st->held > 0 && st->deadline_ms <= now)
            st->deadline_ms = now + st->read_timeout_ms;
        if (st->deadline_ms <= now) {
            if (!c->dead)
                nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
            stream_fail(st, PROXY_ERROR_TIMEOUT, true);
            continue;
        }
        if (next == 0 || st->deadline_ms < next)
            next = st->deadline_ms;
    }
    c->deadline_ms = next;
    corral_conn_set_deadline(conn, next);
    h2c_schedule(c);
}

static void h2c_on_stop(corral_conn *conn)
{
    struct h2_client *c = corral_conn_data(conn);
    h2c_unlist(c); /* no new stream; the connection ends with its last */
    if (c->stream_count == 0 && !c->dead) {
        c->dead = true;
        corral_conn_close_no_linger(conn);
    }
}

static void h2c_on_close(corral_conn *conn, int error)
{
    struct h2_client *c = corral_conn_data(conn);
    h2c_unlist(c);
    upstream_count_open(c->base.worker, c->base.server, -1);
    bool connected = c->base.connected;
    enum proxy_error_kind kind = error == -ETIMEDOUT ? PROXY_ERROR_TIMEOUT
                                 : !connected        ? PROXY_ERROR_CONNECT
                                 : c->broken         ? PROXY_ERROR_INVALID
                                 : error == -EPROTO  ? PROXY_ERROR_TLS
                                                     : PROXY_ERROR_RESET;
    c->dead = true;
    /* A stream whose HEADERS never left went nowhere: it goes on another
     * connection when this one had worked (else the server is unreachable,
     * which its owner's policy handles); the others may have been
     * processed. */
    while (c->streams != NULL) {
        struct h2_client_stream *st = c->streams;
        if (st->headers_sent || !connected || st->head_done)
            stream_fail(st, kind, st->headers_sent);
        else
            stream_retry(st, c);
    }
    c->gone = true;
    if (!c->flush_scheduled)
        h2c_free(c);
}

static const struct corral_conn_handler h2_client_handler = {
    .on_stop = h2c_on_stop,
    .on_open = h2c_on_open,
    .on_data = h2c_on_data,
    .on_drain = h2c_on_drain,
    .on_deadline = h2c_on_deadline,
    .on_close = h2c_on_close,
};

/* The callbacks and options every session copies: made once, for every
 * worker, and kept for the process's life. */
static nghttp2_session_callbacks *h2c_cbs;
static nghttp2_option *h2c_opt;
static pthread_once_t h2c_once = PTHREAD_ONCE_INIT;

static void h2c_init(void)
{
    if (nghttp2_session_callbacks_new(&h2c_cbs) != 0 || nghttp2_option_new(&h2c_opt) != 0)
        return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(h2c_cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(h2c_cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(h2c_cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h2c_cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(h2c_cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(h2c_cbs, on_stream_close);
    /* The stream windows open as the clients take the bytes. */
    nghttp2_option_set_no_auto_window_update(h2c_opt, 1);
    /* Until its SETTINGS come, a backend may take a single stream: the
     * others wait in the session's queue, never refused for going over a
     * limit it has not said yet. */
    nghttp2_option_set_peer_max_concurrent_streams(h2c_opt, 1);
}

static int h2c_new(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                   corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                   struct h2_client **out)
{
    pthread_once(&h2c_once, h2c_init);
    struct h2_client *c = calloc(1, sizeof(*c));
    if (c == NULL || h2c_cbs == NULL || h2c_opt == NULL ||
        nghttp2_session_client_new2(&c->session, h2c_cbs, c, h2c_opt) != 0) {
        free(c);
        return -ENOMEM;
    }
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_CLIENT_STREAM_WINDOW},
    };
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2) != 0 ||
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0) {
        h2c_free(c);
        return -ENOMEM;
    }
    c->base = (struct upstream_conn){.upstream = up, .worker = worker, .server = server};
    c->send_timeout_ms = send_timeout_ms;
    int err = upstream_connect(&c->base, loop, &h2_client_handler, c);
    if (err != 0) {
        h2c_free(c);
        return err;
    }
    corral_conn_set_timeouts(c->base.conn, connect_timeout_ms, send_timeout_ms);
    struct server_state *state = &worker->servers[server];
    c->next = state->h2;
    if (state->h2 != NULL)
        state->h2->prev = c;
    state->h2 = c;
    c->listed = true;
    *out = c;
    return 0;
}

/* A listed connection with room for one more stream, but `avoid`. */
static struct h2_client *h2c_find(struct upstream_worker *worker, unsigned server,
                                  const struct h2_client *avoid)
{
    for (struct h2_client *c = worker->servers[server].h2, *next; c != NULL; c = next) {
        next = c->next;
        if (c->base.gen !=
            atomic_load_explicit(&c->base.upstream->servers[server].gen, memory_order_relaxed)) {
            h2c_unlist(c); /* the resolver replaced its address: it ends with its streams */
            if (c->stream_count == 0)
                h2c_schedule(c);
            continue;
        }
        /* Before the backend's SETTINGS, as many as a backend commonly
         * takes wait for them here rather than open more connections. */
        uint32_t max = c->settings_received
                           ? nghttp2_session_get_remote_settings(
                                 c->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                           : H2_CLIENT_STREAMS_BEFORE_SETTINGS;
        if (c != avoid && c->stream_count < max)
            return c;
    }
    return NULL;
}

static int h2c_place(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct h2_client_stream *st, const struct h2_client *avoid)
{
    struct h2_client *c = h2c_find(worker, server, avoid);
    if (c == NULL) {
        /* A retry reuses the connect timeout of its first connection's
         * time: 0 here means the send timeout's, the only one it has. */
        uint32_t connect = connect_timeout_ms != 0 ? connect_timeout_ms : send_timeout_ms;
        int err = h2c_new(up, worker, server, loop, connect, send_timeout_ms, &c);
        if (err != 0)
            return err;
    }
    nghttp2_data_provider provider = {.source.ptr = NULL, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(c->session, NULL, st->nv, st->nvlen,
                                        st->has_body ? &provider : NULL, st);
    if (id < 0) {
        if (c->stream_count == 0)
            h2c_schedule(c);
        return -ENOMEM;
    }
    st->id = id;
    st->content_length = -1;
    stream_link(c, st);
    h2c_schedule(c);
    return 0;
}

int h2_client_submit(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct h2_client_stream *st)
{
    st->sent = 0;
    st->headers_sent = st->head_done = st->sent_all = st->invalid = false;
    st->deadline_ms = 0;
    st->held = 0;
    st->retries = 0;
    return h2c_place(up, worker, server, loop, connect_timeout_ms, send_timeout_ms, st, NULL);
}

bool h2_client_stream_write(struct h2_client_stream *st, const char *data, size_t len)
{
    if (len == 0 || st->body_end)
        return false;
    if (st->len + len > st->cap) {
        size_t cap = st->cap != 0 ? st->cap * 2 : 16 * 1024;
        while (cap < st->len + len)
            cap *= 2;
        char *grown = realloc(st->data, cap);
        if (grown == NULL) {
            if (st->conn != NULL)
                stream_fail(st, PROXY_ERROR_RESET, st->headers_sent);
            return false;
        }
        st->data = grown;
        st->cap = cap;
    }
    memcpy(st->data + st->len, data, len);
    if (st->len == st->sent)
        stream_arm_send(st);
    st->len += len;
    if (st->conn != NULL) {
        nghttp2_session_resume_data(st->conn->session, st->id);
        h2c_schedule(st->conn);
    }
    st->paused = st->len - st->sent >= H2_CLIENT_SEND_BUFFER;
    return st->paused;
}

void h2_client_stream_end(struct h2_client_stream *st, const char *trailers, size_t len)
{
    if (st->body_end)
        return;
    st->body_end = true;
    if (len > 0 && (st->trailers = malloc(len)) != NULL) {
        memcpy(st->trailers, trailers, len);
        st->trailers_len = len;
    }
    if (st->conn != NULL) {
        nghttp2_session_resume_data(st->conn->session, st->id);
        h2c_schedule(st->conn);
    }
}

void h2_client_stream_consume(struct h2_client_stream *st, size_t len)
{
    if (len > st->held)
        len = st->held;
    st->held -= len;
    if (st->conn == NULL || st->conn->dead || len == 0)
        return;
    nghttp2_session_consume_stream(st->conn->session, st->id, len);
    h2c_schedule(st->conn);
}

void h2_client_stream_cancel(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    if (c != NULL && !c->dead)
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    stream_release(st);
    if (c != NULL)
        h2c_schedule(c);
}
