/*
 * h2_client.c: HTTP/2 towards backends (h2_client.h): connections shared
 * by the streams of a worker's requests to one server, flow control per
 * stream (the backend's window opens only as the client takes the bytes),
 * request bodies and trailers, and the retry of streams the backend never
 * processed.  Each connection's HTTP/2 is the client side of corral's
 * session (h2_session.h), which checks the backend's frames and response
 * heads (RFC 9113 8.3.2) and holds the limits.
 */
#include "proto/upstream/h2_client.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The connection's receive window: the stream windows bound each
 * stream, and the connection's is consumed as bytes arrive, so that a
 * stalled stream never stalls the others. */
#define CONN_WINDOW (16 * 1024 * 1024)
/* A response's header list (RFC 9113 6.5.2), and a field's name and
 * value, as libnghttp2 bounded a field; a header block waits whole in the
 * connection's input, below its high watermark (256 KiB). */
#define HEADER_LIST_MAX HTTP2_HPACK_MAX_STRING
/* The most request body bytes a stream sends in one turn of the
 * round-robin between the streams that have some. */
#define SEND_TURN (4 * H2_MIN_FRAME_SIZE)

/* Where the sessions of a worker decode Huffman-coded strings. */
static _Thread_local uint8_t h2c_scratch[HEADER_LIST_MAX];

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

static struct hpack_field make_nv(const char *name, size_t name_len, const char *value,
                                  size_t value_len)
{
    return (struct hpack_field){(const uint8_t *)name, name_len, (const uint8_t *)value, value_len,
                                false};
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

size_t h2_client_head_nv(char *head, size_t len, const char *scheme, struct hpack_field *nv,
                         size_t max)
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

/* The stream `id` of `c`, or NULL. */
static struct h2_client_stream *stream_find(const struct h2_client *c, uint32_t id)
{
    for (struct h2_client_stream *st = c->streams; st != NULL; st = st->next)
        if (st->id == (int32_t)id)
            return st;
    return NULL;
}

/* Takes `st` off its connection: a stream still open in the session is
 * reset (CANCEL), so that the backend stops and the session forgets it. */
static void stream_unlink(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    if (c == NULL)
        return;
    if (!c->dead && c->session_up && st->id > 0 &&
        h2_session_stream(&c->session, (uint32_t)st->id) != NULL)
        h2_session_reset(&c->session, (uint32_t)st->id, H2_CANCEL);
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

/* The request's trailer lines as fields (what HTTP/2 forbids left
 * out), pointing into st->trailers; their count. */
static size_t trailer_fields(struct h2_client_stream *st, struct hpack_field *f, size_t max)
{
    size_t count = 0, pos = 0;
    struct http_str name, value;
    while (count < max && next_field(st->trailers, st->trailers_len, &pos, &name, &value))
        if (!connection_specific(name) && !http_str_equal_nocase(name, "te"))
            f[count++] = make_nv(name.data, name.len, value.data, value.len);
    return count;
}

/* One turn of a stream's request body: as much as the windows let go, up
 * to SEND_TURN, then its end (END_STREAM, or the trailers) once whole. */
static void stream_send_turn(struct h2_client *c, struct h2_client_stream *st)
{
    uint32_t id = (uint32_t)st->id;
    size_t n = st->len - st->sent, window = h2_session_send_window(&c->session, id);
    if (n > window)
        n = window;
    if (n > SEND_TURN)
        n = SEND_TURN;
    bool done = st->body_end && st->sent + n == st->len;
    struct hpack_field trailers[64];
    size_t count = done && st->trailers_len > 0 ? trailer_fields(st, trailers, 64) : 0;
    if (n > 0 || (done && count == 0)) {
        struct iovec iov = {st->data + st->sent, n};
        int rc = h2_session_send_data(&c->session, id, &iov, 1, done && count == 0);
        assert(rc == 0);
        (void)rc;
        if (n > 0)
            st->progress_ms = h2c_now(c);
        st->sent += n;
    }
    if (!st->replayable || st->sent > H2_CLIENT_REPLAY_MAX)
        stream_drop_replay(st);
    if (st->paused && st->len - st->sent < H2_CLIENT_SEND_BUFFER / 2)
        c->drains_owed = true;
    if (done) {
        if (count > 0 &&
            h2_session_send_fields(&c->session, id, trailers, NULL, count, true) != 0) {
            stream_fail(st, PROXY_ERROR_RESET, true);
            return;
        }
        h2_session_want_send(&c->session, id, false);
        st->sent_all = true;
        stream_arm(st);
    } else if (st->sent == st->len) {
        h2_session_want_send(&c->session, id, false); /* until more comes */
    }
}

/* Request bodies, stream by stream in turn, while the windows and the
 * socket take them. */
static void h2c_send_bodies(struct h2_client *c)
{
    uint32_t id;
    while (!c->dead && !corral_conn_backed_up(c->base.conn) &&
           (id = h2_session_next_sender(&c->session)) != 0) {
        struct h2_client_stream *st = stream_find(c, id);
        if (st == NULL) {
            h2_session_want_send(&c->session, id, false);
            continue;
        }
        stream_send_turn(c, st);
    }
}

/* Puts the streams waiting on `c` on the wire, as many as the backend
 * takes: one until its SETTINGS say how many. */
static void h2c_open_streams(struct h2_client *c)
{
    struct h2_session *s = &c->session;
    uint32_t limit = s->reader.settings_seen ? s->peer_max_concurrent : 1;
    for (struct h2_client_stream *st = c->streams, *next; st != NULL; st = next) {
        next = st->next;
        if (st->id != 0)
            continue;
        if (c->dead || s->stream_count >= limit || s->goaway_received || s->error != H2_NO_ERROR)
            return;
        uint32_t id =
            h2_session_request(s, st->nv, NULL, st->nvlen, !st->has_body, st->head_method);
        if (id == 0) {
            /* Its ids ran out, or memory: no new stream here. */
            h2c_unlist(c);
            stream_retry(st, c);
            next = c->streams;
            continue;
        }
        st->id = (int32_t)id;
        st->content_length = -1;
        st->headers_sent = true;
        if (!st->has_body) {
            st->sent_all = true;
            stream_arm(st);
        } else if (st->len > st->sent || st->body_end) {
            h2_session_want_send(s, id, true);
        }
    }
}

/* ------------------------------------------------------ session callbacks */

static void h2c_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct h2_client_stream *st = stream_find(arg, id);
    if (st == NULL || st->invalid)
        return;
    struct http_str n = {(const char *)f->name, f->name_len};
    struct http_str v = {(const char *)f->value, f->value_len};
    if (f->name_len > 0 && f->name[0] == ':') {
        /* The session checked it: the one :status, of 3 digits, first in
         * each head (an interim head's lines are dropped). */
        st->status =
            (unsigned)((f->value[0] - '0') * 100 + (f->value[1] - '0') * 10 + (f->value[2] - '0'));
        st->in.len = 0;
        return;
    }
    if (kind == H2_BLOCK_RESPONSE && http_str_equal_nocase(n, "content-length")) {
        uint64_t length = 0;
        for (size_t i = 0; i < f->value_len && length < (UINT64_C(1) << 60); i++)
            length = length * 10 + (uint64_t)(f->value[i] - '0'); /* digits: checked */
        st->content_length = (int64_t)length;
    }
    if (st->in.len + f->name_len + f->value_len + 4 > st->head_limit) {
        st->invalid = true; /* failed once the block ends */
        return;
    }
    http1_client_head_add_header(&st->in, n, v);
}

static void stream_head(struct h2_client *c, struct h2_client_stream *st, bool end);
static void stream_finish(struct h2_client_stream *st, bool trailers);

static void h2c_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head,
                        bool end)
{
    struct h2_client *c = arg;
    struct h2_client_stream *st = stream_find(c, id);
    if (st == NULL)
        return;
    if (st->invalid || head != H2_HEAD_OK) {
        h2_session_reset(&c->session, id, H2_INTERNAL_ERROR);
        stream_fail(st, PROXY_ERROR_INVALID, true);
        return;
    }
    stream_arm(st);
    if (kind == H2_BLOCK_TRAILERS) {
        stream_finish(st, true); /* the session saw END_STREAM */
        return;
    }
    if (st->status < 200) {
        st->in.len = 0; /* interim: the final head follows */
        return;
    }
    stream_head(c, st, end);
}

static void h2c_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct h2_client *c = arg;
    /* The connection's window opens at once: only the stream's waits. */
    h2_session_consume(&c->session, 0, len);
    struct h2_client_stream *st = stream_find(c, id);
    if (st == NULL || !st->head_done) {
        h2_session_consume_stream(&c->session, id, len);
        return;
    }
    stream_arm(st);
    if (len > 0) {
        st->held += len;
        st->ops->on_body(st->owner, (const char *)data, len);
    }
    /* The owner may have let go meanwhile. */
    if (end && stream_find(c, id) == st)
        stream_finish(st, false);
}

/* Reset by the backend (`by_peer`, refused streams above a GOAWAY's last
 * stream id among them), or by the session: a malformed response, or a
 * window broken. */
static void h2c_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    struct h2_client *c = arg;
    struct h2_client_stream *st = stream_find(c, id);
    if (st == NULL)
        return;
    if (st->invalid) {
        stream_fail(st, PROXY_ERROR_INVALID, true);
        return;
    }
    /* Refused (RFC 9113 8.7), or above a GOAWAY's last stream ID: the
     * backend did nothing with it. */
    if (by_peer && !st->head_done && (code == H2_REFUSED_STREAM || !st->headers_sent)) {
        stream_retry(st, c);
        return;
    }
    stream_fail(st, PROXY_ERROR_RESET, true);
}

static void h2c_window(void *arg, uint32_t id)
{
    (void)id;
    h2c_schedule(arg);
}

/* No new stream here; the session ends those above its last stream ID
 * as refused, and they go elsewhere (stream_retry()), as do those not
 * sent yet. */
static void h2c_goaway(void *arg, uint32_t last_stream_id, uint32_t code)
{
    (void)last_stream_id, (void)code;
    struct h2_client *c = arg;
    c->goaway = true;
    h2c_unlist(c);
    for (struct h2_client_stream *st = c->streams, *next; st != NULL; st = next) {
        next = st->next;
        if (st->id == 0) {
            stream_retry(st, c);
            next = c->streams;
        }
    }
}

static const struct h2_session_ops h2c_ops = {
    .field = h2c_field,
    .headers = h2c_headers,
    .data = h2c_data,
    .reset = h2c_reset,
    .window = h2c_window,
    .goaway = h2c_goaway,
};

/* The response is complete: its owner gets it, with the trailers.  A
 * request still being sent (the backend answered early, RFC 9113 8.1)
 * stops: its stream is reset, or it would stay open on our side. */
static void stream_finish(struct h2_client_stream *st, bool trailers)
{
    /* stream_unlink() resets a stream whose request is still going. */
    if (st->conn != NULL)
        h2c_schedule(st->conn);
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
        h2_session_reset(&c->session, (uint32_t)st->id, H2_INTERNAL_ERROR);
        stream_fail(st, PROXY_ERROR_INVALID, true);
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
    if (stream_find(c, (uint32_t)id) != st)
        return;
    stream_drop_replay(st);
    if (end)
        stream_finish(st, false);
}

/* --------------------------------------------------------- the connection */

static void h2c_free(struct h2_client *c)
{
    if (c->session_up)
        h2_session_free(&c->session);
    free(c);
}

/* The session's frames go to the connection as they are made; while
 * another stream is open, they wait for the batch's end, so that requests
 * made in one wakeup share a write (see http2.c's sink_write()). */
static void h2c_write(void *arg, const struct iovec *iov, int count)
{
    struct h2_client *c = arg;
    corral_conn_hold_output(c->base.conn, c->session.stream_count > 1);
    corral_conn_writev(c->base.conn, iov, count);
}

static void h2c_flush(struct h2_client *c)
{
    if (c->dead || !c->session_up)
        return;
    h2c_open_streams(c);
    h2c_send_bodies(c);
    if (c->dead)
        return;
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
    const struct h2_session *s = &c->session;
    if (c->stream_count == 0 && (s->goaway_received || s->goaway_sent || s->error != H2_NO_ERROR ||
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
    /* The preface, SETTINGS and the connection's window go first. */
    const struct h2_session_conf conf = {
        .client = true,
        .initial_window_size = H2_CLIENT_STREAM_WINDOW,
        .conn_window_size = CONN_WINDOW,
        .max_header_list_size = HEADER_LIST_MAX,
        .max_resets = UINT_MAX, /* a backend's resets cost the backend */
        .reset_interval_ms = 1000,
        .scratch = h2c_scratch,
        .scratch_size = sizeof(h2c_scratch),
    };
    const struct h2_sink sink = {h2c_write, c};
    h2_session_init(&c->session, &conf, &h2c_ops, c, &sink, h2c_now(c));
    c->session_up = true;
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
    if (c->dead || !c->session_up)
        return len;
    size_t used = h2_session_recv(&c->session, (const uint8_t *)data, len, h2c_now(c));
    if (c->session.error != H2_NO_ERROR) {
        /* The backend broke the protocol: its streams fail as invalid. */
        if (!c->dead) {
            c->dead = c->broken = true;
            corral_conn_abort(conn, -EPROTO);
        }
        return len;
    }
    h2c_flush(c);
    return used;
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
                stream_fail(st, PROXY_ERROR_TIMEOUT, st->headers_sent); /* reset: CANCEL */
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
            stream_fail(st, PROXY_ERROR_TIMEOUT, true); /* reset: CANCEL */
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

static int h2c_new(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                   corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                   struct h2_client **out)
{
    /* The session starts once connected (h2c_on_open()). */
    struct h2_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
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
        uint32_t max = c->session_up && c->session.reader.settings_seen
                           ? c->session.peer_max_concurrent
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
    /* Its HEADERS go once the connection is up and has room
     * (h2c_open_streams()). */
    st->id = 0;
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
    if (st->conn != NULL && st->id > 0) {
        h2_session_want_send(&st->conn->session, (uint32_t)st->id, true);
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
    if (st->conn != NULL && st->id > 0) {
        h2_session_want_send(&st->conn->session, (uint32_t)st->id, true);
        h2c_schedule(st->conn);
    }
}

void h2_client_stream_consume(struct h2_client_stream *st, size_t len)
{
    if (len > st->held)
        len = st->held;
    st->held -= len;
    if (st->conn == NULL || st->conn->dead || len == 0 || st->id <= 0)
        return;
    h2_session_consume_stream(&st->conn->session, (uint32_t)st->id, len);
    h2c_schedule(st->conn);
}

void h2_client_stream_cancel(struct h2_client_stream *st)
{
    struct h2_client *c = st->conn;
    stream_release(st); /* reset: CANCEL */
    if (c != NULL)
        h2c_schedule(c);
}
