/*
 * http2.c: HTTP/2 server connections: one session (h2_session.h) per
 * connection, fed from its input; its streams' bodies sent round-robin
 * into its output in batches (one flush per loop turn); the counters and
 * logs of its defences, the timeouts and the graceful stop.  Streams are
 * in http2_stream.c, responses in http2_response.c.
 */
#include "proto/http2/http2_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *const http2_counter_names[HTTP2_COUNTERS] = {
    [HTTP2_STREAMS_OPENED] = "streams_opened",
    [HTTP2_RESETS_RECEIVED] = "resets_received",
    [HTTP2_RESETS_SENT] = "resets_sent",
    [HTTP2_GOAWAY_NO_ERROR] = "goaway_no_error",
    [HTTP2_GOAWAY_PROTOCOL_ERROR] = "goaway_protocol_error",
    [HTTP2_GOAWAY_ENHANCE_YOUR_CALM] = "goaway_enhance_your_calm",
    [HTTP2_GOAWAY_OTHER] = "goaway_other",
    [HTTP2_RAPID_RESET] = "rapid_reset",
    [HTTP2_SETTINGS_FLOOD] = "settings_flood",
    [HTTP2_PING_FLOOD] = "ping_flood",
    [HTTP2_EMPTY_FRAME_FLOOD] = "empty_frame_flood",
    [HTTP2_WINDOW_UPDATE_FLOOD] = "window_update_flood",
    [HTTP2_HEADER_BLOCK_TOO_LONG] = "header_block_too_long",
    [HTTP2_HEADER_LIST_TOO_LARGE] = "header_list_too_large",
    [HTTP2_STREAMS_REFUSED] = "streams_refused",
    [HTTP2_STREAMS_STALLED] = "streams_stalled",
    [HTTP2_HEADER_TIMEOUT] = "header_timeout",
    [HTTP2_PARTIAL_FRAME_TIMEOUT] = "partial_frame_timeout",
    [HTTP2_TRAILER_FIELDS_DROPPED] = "trailer_fields_dropped",
    [HTTP2_BODY_TIMEOUT] = "body_timeout",
};

/* The window of the whole connection for request bodies, in streams'
 * worth (given back as it arrives: only the streams' windows wait for
 * handlers). */
#define H2_CONN_WINDOW_STREAMS 16

/* How long a graceful stop waits for the answer to its PING before it
 * sends the final GOAWAY anyway: a client that never answers gains
 * nothing but this long. */
#define H2_STOP_PING_WAIT_MS 1000

/* Where each worker's sessions decode Huffman strings and encode response
 * heads: a field's name and value, each as long as the reader lets a
 * string be (HTTP2_HPACK_MAX_STRING), fit.  Touched only as far as the
 * longest field needs. */
static _Thread_local uint8_t h2_scratch[2 * HTTP2_HPACK_MAX_STRING];

static struct http_stats *h2_stats(const struct http2_conn *h2)
{
    corral_worker *worker = corral_conn_worker(h2->c.sock);
    if (worker == NULL || h2->c.site->stats == NULL)
        return NULL;
    return &h2->c.site->stats[corral_worker_index(worker)];
}

void http2_count(struct http2_conn *h2, enum http2_counter counter)
{
    struct http_stats *stats = h2_stats(h2);
    if (stats != NULL)
        counter_inc(&stats->http2[counter]);
}

void http2_defence(struct http2_conn *h2, enum http2_counter counter, const char *what)
{
    http2_count(h2, counter);
    static_assert(HTTP2_COUNTERS <= 32, "h2->logged has a bit for each");
    if ((h2->logged & 1u << counter) != 0)
        return;
    h2->logged |= 1u << counter;
    char client[64];
    exchange_format_peer(&h2->c, client, sizeof(client));
    corral_log(CORRAL_LOG_WARN, "http2: %s: %s (logged once per connection)", client, what);
}

void http2_count_response(struct http2_conn *h2, const struct h2_stream *st)
{
    uint64_t ns = corral_monotonic_ns() - st->started_ns;
    site_stats_count(h2_stats(h2), st->vhost, st->status, ns);
    h2->c.requests++;
}

/* ------------------------------------------------------------- streams */

static struct h2_stream *stream_find(const struct http2_conn *h2, uint32_t id)
{
    for (struct h2_stream *st = h2->streams; st != NULL; st = st->next)
        if ((uint32_t)st->id == id && !st->ended)
            return st;
    return NULL;
}

void http2_stream_ended(struct h2_stream *st)
{
    struct http2_conn *h2 = h2_stream_conn(st);
    if (st->ended)
        return;
    st->ended = true;
    h2->ended_owed = true;
    /* The last stream's end starts the idle timeout. */
    h2->idle_from_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    http2_schedule(h2);
}

void http2_reset(struct h2_stream *st, enum h2_error code)
{
    if (st->ended)
        return;
    h2_session_reset(&h2_stream_conn(st)->session, (uint32_t)st->id, code);
    http2_stream_ended(st);
}

/* A stream the client opened: its state, counted. */
static struct h2_stream *stream_open(struct http2_conn *h2, uint32_t id)
{
    struct h2_stream *st = http2_stream_new(h2, (int32_t)id);
    if (st == NULL)
        return NULL;
    /* Its block began with the read that left it waiting, or with this
     * one. */
    const struct h2_session *s = &h2->session;
    st->head_started_ms = s->reader.wait != H2_WAIT_NONE ? s->wait_since_ms : s->now_ms;
    http2_count(h2, HTTP2_STREAMS_OPENED);
    return st;
}

/* The client ended its half of the stream. */
static void stream_end(struct h2_stream *st)
{
    if (st->awaits_end) {
        st->awaits_end = false;
        http2_stream_request(st, true);
    } else {
        http2_stream_body_end(st);
    }
}

/* ------------------------------------------------------------- the output */

static void h2_free(struct http2_conn *h2)
{
    while (h2->streams != NULL)
        http2_stream_free(h2->streams);
    h2_session_free(&h2->session);
    free(h2);
}

/* The session's frames into the connection's output, counted as
 * nghttp2's on_frame_send counted them: control frames come alone, their
 * header first. */
static void sink_write(void *arg, const struct iovec *iov, int count)
{
    struct http2_conn *h2 = arg;
    const uint8_t *p = iov[0].iov_base;
    if (count == 1 && iov[0].iov_len >= H2_FRAME_HEADER_LEN + 4 && p[3] == H2_RST_STREAM) {
        http2_count(h2, HTTP2_RESETS_SENT);
    } else if (count == 1 && iov[0].iov_len >= H2_FRAME_HEADER_LEN + 8 && p[3] == H2_GOAWAY) {
        const uint8_t *c = p + H2_FRAME_HEADER_LEN + 4;
        uint32_t code = (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 | (uint32_t)c[2] << 8 | c[3];
        http2_count(h2, code == H2_NO_ERROR            ? HTTP2_GOAWAY_NO_ERROR
                        : code == H2_PROTOCOL_ERROR    ? HTTP2_GOAWAY_PROTOCOL_ERROR
                        : code == H2_ENHANCE_YOUR_CALM ? HTTP2_GOAWAY_ENHANCE_YOUR_CALM
                                                       : HTTP2_GOAWAY_OTHER);
    }
    /* Other streams still open may answer from events of the same batch:
     * their frames then share this write (and TLS record). */
    corral_conn_hold_output(h2->c.sock, h2->session.stream_count > 1);
    corral_conn_writev(h2->c.sock, iov, count);
}

/* When the stream's request body is due, as client_body_timeout has it
 * between two reads of an HTTP/1.1 body: once its head went to a handler,
 * while the client could send (all it sent was taken, so its window is
 * open) and has not ended its half; 0: not due. */
static uint64_t body_deadline(const struct h2_stream *st)
{
    uint32_t ms = st->vhost->limits.body_timeout_ms;
    if (ms == 0 || st->ended || !st->head_done || st->awaits_end || st->request_done ||
        st->body_timed_out || st->body_paused || st->in.len > 0)
        return 0;
    return st->body_progress_ms + ms;
}

/* When a stream whose response waits for the client's window (the
 * stream's or the connection's) has made no progress for its server's
 * send_timeout; 0: none waits. */
static uint64_t stall_deadline(const struct http2_conn *h2)
{
    uint64_t at = 0;
    for (const struct h2_stream *st = h2->streams; st != NULL; st = st->next) {
        uint64_t body = body_deadline(st);
        if (body != 0 && (at == 0 || body < at))
            at = body;
        uint32_t ms = st->vhost->limits.send_timeout_ms;
        if (st->ended || st->out.len == 0 || ms == 0)
            continue;
        if (at == 0 || st->progress_ms + ms < at)
            at = st->progress_ms + ms;
    }
    return at;
}

/* The connection's client_header_timeout: its default server's, since a
 * header block's server is not known before it is decoded; 0: none. */
static uint32_t header_timeout_ms(const struct http2_conn *h2)
{
    return h2->c.site->vhosts[0].limits.header_timeout_ms;
}

/* Whether the client's input holds a frame header or a header block begun
 * and not finished. */
static bool header_waits(const struct http2_conn *h2)
{
    uint8_t wait = h2->session.reader.wait;
    return wait == H2_WAIT_HEADER || wait == H2_WAIT_BLOCK;
}

/* When the client's bytes in progress are due: a frame header begun, a
 * header block begun, a request waiting for its END_STREAM, each within
 * client_header_timeout of its first byte; 0: none. */
static uint64_t header_deadline(const struct http2_conn *h2)
{
    uint32_t ms = header_timeout_ms(h2);
    uint64_t at = 0;
    if (ms == 0)
        return 0;
    if (header_waits(h2))
        at = h2->session.wait_since_ms + ms;
    for (const struct h2_stream *st = h2->streams; st != NULL; st = st->next)
        if (st->awaits_end && !st->ended && (at == 0 || st->head_started_ms + ms < at))
            at = st->head_started_ms + ms;
    return at;
}

/* Progress for the idle timeout: the last whole frame, or the last
 * stream's end (bytes that complete no frame are none). */
static uint64_t idle_from(const struct http2_conn *h2)
{
    uint64_t frame = h2->session.frame_done_ms;
    return frame > h2->idle_from_ms ? frame : h2->idle_from_ms;
}

/* The earliest of: the header deadline; with no stream open, the idle
 * timeout; else the stall deadline of a stream; the stop's wait for its
 * PING's answer. */
static void h2_set_deadline(struct http2_conn *h2)
{
    uint32_t ms = h2->conf->idle_timeout_ms;
    uint64_t at = header_deadline(h2);
    uint64_t other = 0;
    if (h2->session.stream_count > 0)
        other = stall_deadline(h2);
    else if (ms != 0)
        other = idle_from(h2) + ms;
    if (other != 0 && (at == 0 || other < at))
        at = other;
    if (h2->stopping && h2->session.shutdown_notice) {
        other = h2->stop_from_ms + H2_STOP_PING_WAIT_MS;
        if (at == 0 || other < at)
            at = other;
    }
    corral_conn_set_deadline(h2->c.sock, at);
}

/* The ends of responses whose handlers are done and whose queues are
 * empty: END_STREAM (or trailers) needs no window. */
static void send_ends(struct http2_conn *h2)
{
    for (struct h2_stream *st = h2->streams; st != NULL; st = st->next)
        if (st->response_done && st->response_body && !st->end_sent && !st->ended &&
            st->out.len == 0)
            http2_response_send(st, 0);
}

/* Response bodies as far as the windows and the output's watermark let
 * them go, a frame's worth per stream in turn. */
static void send_bodies(struct http2_conn *h2)
{
    struct h2_session *s = &h2->session;
    while (!corral_conn_backed_up(h2->c.sock)) {
        uint32_t id = h2_session_next_sender(s);
        if (id == 0)
            break;
        struct h2_stream *st = stream_find(h2, id);
        if (st == NULL) {
            h2_session_want_send(s, id, false);
            continue;
        }
        http2_response_send(st, s->peer_max_frame_size);
    }
}

/* Frees the streams the session forgot, telling their handlers. */
static void free_ended(struct http2_conn *h2)
{
    h2->ended_owed = false;
    for (struct h2_stream *st = h2->streams, *next; st != NULL; st = next) {
        next = st->next;
        if (st->ended)
            http2_stream_free(st);
    }
}

/* Sends what the streams have queued into the connection's output, as far
 * as its watermark lets it: the rest follows on_drain. */
static void h2_flush(struct http2_conn *h2)
{
    send_ends(h2);
    send_bodies(h2);
    if (h2->ended_owed)
        free_ended(h2);
    /* Handlers that waited for their stream's output to drain go on now;
     * what they write goes out next turn. */
    if (h2->drains_owed) {
        h2->drains_owed = false;
        for (struct h2_stream *st = h2->streams, *next; st != NULL; st = next) {
            next = st->next;
            if (!st->ended)
                http2_response_drain(st);
        }
    }
    const struct h2_session *s = &h2->session;
    bool done = h2_session_done(s) || (h2->peer_goaway && s->stream_count == 0);
    if ((done || (h2->closing && s->stream_count == 0)) && !corral_conn_backed_up(h2->c.sock)) {
        h2->closing = true;
        corral_conn_close(h2->c.sock);
        return;
    }
    h2_set_deadline(h2);
}

static void h2_flush_deferred(void *arg)
{
    struct http2_conn *h2 = arg;
    h2->flush_scheduled = false;
    if (h2->gone) {
        h2_free(h2);
        return;
    }
    h2_flush(h2);
}

void http2_schedule(struct http2_conn *h2)
{
    if (h2->flush_scheduled || h2->gone)
        return;
    if (corral_loop_defer(corral_conn_loop(h2->c.sock), h2_flush_deferred, h2) != 0) {
        corral_conn_abort(h2->c.sock, -ENOMEM);
        return;
    }
    h2->flush_scheduled = true;
}

/* ----------------------------------------------------- session callbacks */

static void on_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct http2_conn *h2 = arg;
    struct h2_stream *st = stream_find(h2, id);
    if (kind == H2_BLOCK_TRAILERS) {
        if (st != NULL)
            http2_stream_trailer(st, f->name, f->name_len, f->value, f->value_len);
        return;
    }
    if (st == NULL && (st = stream_open(h2, id)) == NULL)
        return; /* reset once the block ends */
    if (!st->head_failed &&
        http2_stream_header(st, f->name, f->name_len, f->value, f->value_len) != 0)
        st->head_failed = true;
}

static void on_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head,
                       bool end_stream)
{
    struct http2_conn *h2 = arg;
    struct h2_stream *st = stream_find(h2, id);
    if (kind == H2_BLOCK_TRAILERS) {
        if (st == NULL)
            return;
        if (head != H2_HEAD_OK)
            http2_stream_trailers_too_large(st);
        if (end_stream)
            stream_end(st);
        return;
    }
    if (st == NULL)
        st = stream_open(h2, id);
    if (st == NULL || st->head_failed) {
        if (st != NULL)
            http2_reset(st, H2_INTERNAL_ERROR);
        else
            h2_session_reset(&h2->session, id, H2_INTERNAL_ERROR);
        return;
    }
    if (head == H2_HEAD_CUT) {
        /* The connection ends once this returns (HPACK's state cannot
         * skip the rest of a block): the request gets its 431 first,
         * body and all, before the GOAWAY. */
        http2_stream_keep_log_unread(st);
        exchange_respond_error(&st->base, 431);
        http2_response_send(st, SIZE_MAX);
        return;
    }
    if (head == H2_HEAD_TOO_LARGE)
        st->head_refused = true;
    st->head_done = true;
    if (!end_stream && http2_stream_empty_body(st))
        st->awaits_end = true;
    else
        http2_stream_request(st, end_stream);
}

static void on_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end_stream)
{
    struct http2_conn *h2 = arg;
    struct h2_stream *st = stream_find(h2, id);
    if (st == NULL) {
        /* No one takes it: its window goes back at once. */
        h2_session_consume(&h2->session, id, len);
        return;
    }
    if (len > 0)
        http2_stream_body(st, data, len);
    if (end_stream && !st->ended)
        stream_end(st);
}

static void on_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    struct http2_conn *h2 = arg;
    (void)code;
    if (by_peer)
        http2_count(h2, HTTP2_RESETS_RECEIVED);
    struct h2_stream *st = stream_find(h2, id);
    if (st != NULL)
        http2_stream_ended(st);
}

static void on_closed(void *arg, uint32_t id)
{
    /* Mostly the stream whose END_STREAM is being sent: the search went
     * through every stream of the connection not yet freed, ended ones
     * included, one cache miss each (2 to 3% of the CPU at 32 streams). */
    struct http2_conn *h2 = arg;
    struct h2_stream *st =
        h2->sending != NULL && (uint32_t)h2->sending->id == id ? h2->sending : stream_find(h2, id);
    if (st != NULL)
        http2_stream_ended(st);
}

static void on_window(void *arg, uint32_t id)
{
    /* The flush that follows the read sends what may go now. */
    (void)arg;
    (void)id;
}

static void on_goaway(void *arg, uint32_t last_stream_id, uint32_t code)
{
    (void)last_stream_id;
    (void)code;
    /* Its streams run to their end; then the connection closes. */
    ((struct http2_conn *)arg)->peer_goaway = true;
}

static void on_refused(void *arg, uint32_t id)
{
    (void)id;
    http2_defence(arg, HTTP2_STREAMS_REFUSED,
                  "a stream beyond http2_max_concurrent_streams: REFUSED_STREAM");
}

static const struct h2_session_ops session_ops = {
    .field = on_field,
    .headers = on_headers,
    .data = on_data,
    .reset = on_reset,
    .window = on_window,
    .goaway = on_goaway,
    .closed = on_closed,
    .refused = on_refused,
};

/* ------------------------------------------------- the client's bounds */

/* The connection ended for what the client did: counted, and logged once,
 * since the connection ends.  The session wrote the GOAWAY. */
static void session_error(struct http2_conn *h2)
{
    static const struct {
        const char *why;
        enum http2_counter counter;
        const char *what;
    } defences[] = {
        {"settings_flood", HTTP2_SETTINGS_FLOOD, "SETTINGS frames past 100 within 10000 ms"},
        {"ping_flood", HTTP2_PING_FLOOD, "PING frames past 1000 within 10000 ms"},
        {"empty_frame_flood", HTTP2_EMPTY_FRAME_FLOOD,
         "empty DATA, HEADERS, CONTINUATION or PRIORITY frames past 1000 within 10000 ms"},
        {"window_update_flood", HTTP2_WINDOW_UPDATE_FLOOD,
         "WINDOW_UPDATE frames far beyond the DATA sent"},
        {"rapid_reset", HTTP2_RAPID_RESET, "stream resets (or streams refused) past the bound"},
        {"header block too long", HTTP2_HEADER_BLOCK_TOO_LONG,
         "a header block over http2_max_header_list_size"},
        {"header block in too many frames", HTTP2_HEADER_BLOCK_TOO_LONG,
         "a header block in too many CONTINUATION frames"},
        {"a header field announced too long", HTTP2_HEADER_BLOCK_TOO_LONG,
         "a header field longer than http2_max_header_list_size or 64 KiB"},
        {"a header field too long", HTTP2_HEADER_BLOCK_TOO_LONG,
         "a header field longer than http2_max_header_list_size or 64 KiB"},
    };
    const char *why = h2->session.why != NULL ? h2->session.why : "?";
    char client[64];
    exchange_format_peer(&h2->c, client, sizeof(client));
    for (size_t i = 0; i < sizeof(defences) / sizeof(defences[0]); i++) {
        if (strcmp(why, defences[i].why) != 0)
            continue;
        http2_count(h2, defences[i].counter);
        corral_log(CORRAL_LOG_WARN, "http2: %s: %s: closing the connection", client,
                   defences[i].what);
        return;
    }
    /* A bad preface or a framing error: once per connection, since it
     * ends. */
    corral_log(CORRAL_LOG_INFO, "http2: %s: %s: closing the connection", client, why);
}

/* ------------------------------------------------------------ connection */

struct http_conn *http2_conn_new(const struct http_conn *from)
{
    struct http2_conn *h2 = calloc(1, sizeof(*h2));
    if (h2 == NULL)
        return NULL;
    corral_conn *conn = from->sock;
    const struct http_site *site = from->site;
    h2->c = *from;
    h2->c.framer = &http2_framer;
    h2->conf = site->http2;
    size_t window = h2->conf->initial_window_size;
    size_t conn_window = window * H2_CONN_WINDOW_STREAMS;
    if (conn_window > INT32_MAX)
        conn_window = INT32_MAX;
    if (conn_window < H2_DEFAULT_WINDOW)
        conn_window = H2_DEFAULT_WINDOW;
    const struct h2_session_conf conf = {
        .max_concurrent_streams = h2->conf->max_concurrent_streams,
        .initial_window_size = (uint32_t)window,
        .conn_window_size = (uint32_t)conn_window,
        .max_header_list_size = (uint32_t)h2->conf->max_header_list_size,
        .max_resets = h2->conf->max_resets,
        .reset_interval_ms = h2->conf->reset_interval_ms,
        .scratch = h2_scratch,
        .scratch_size = sizeof(h2_scratch),
        /* Response fields are indexed (http2_response.c); the size stays
         * the default, so no block owes the client a size update. */
        .encoder_table_size = 4096,
        /* The output's watermark bounds DATA instead (send_bodies()). */
        .max_output = 0,
    };
    uint64_t now = corral_loop_now(corral_conn_loop(conn));
    h2->idle_from_ms = now;
    corral_conn_set_data(conn, &h2->c);
    const struct h2_sink sink = {sink_write, h2};
    h2_session_init(&h2->session, &conf, &session_ops, h2, &sink, now);
    corral_conn_set_timeouts(conn, 0, site->vhosts[0].limits.send_timeout_ms);
    h2_set_deadline(h2);
    return &h2->c;
}

static size_t h2_on_data(struct http_conn *c, const char *data, size_t len)
{
    struct http2_conn *h2 = h2_conn_of(c);
    if (h2->closing)
        return len;
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    size_t n = h2_session_recv(&h2->session, (const uint8_t *)data, len, now);
    if (h2->session.error != H2_NO_ERROR) {
        session_error(h2);
        h2->closing = true;
        n = len;
    }
    h2_flush(h2);
    return n;
}

static void h2_on_eof(struct http_conn *c)
{
    struct http2_conn *h2 = h2_conn_of(c);
    /* A client that closes its half reads nothing more either: a response
     * would go nowhere. */
    h2->closing = true;
    corral_conn_close(h2->c.sock);
}

static void h2_on_drain(struct http_conn *c)
{
    struct http2_conn *h2 = h2_conn_of(c);
    h2->drains_owed = true;
    h2_flush(h2);
}

/* A header timeout: the client's request heads come too slowly. */
static void header_timeout(struct http2_conn *h2, const char *what)
{
    struct http_stats *stats = h2_stats(h2);
    if (stats != NULL)
        counter_inc(&stats->timeouts[HTTP_TIMEOUT_HEADER]);
    http2_defence(h2, HTTP2_HEADER_TIMEOUT, what);
}

static void h2_on_deadline(struct http_conn *c)
{
    struct http2_conn *h2 = h2_conn_of(c);
    struct h2_session *s = &h2->session;
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    uint32_t header_ms = header_timeout_ms(h2);
    if (header_ms != 0 && header_waits(h2) && s->wait_since_ms + header_ms <= now) {
        /* A frame header or header block left unfinished: HPACK's state
         * waits on the block, so the connection ends, as nginx ends it. */
        header_timeout(h2, "a header block not complete within client_header_timeout: "
                           "closing the connection");
        h2_session_goaway(s, H2_PROTOCOL_ERROR);
        h2->closing = true;
        h2_flush(h2);
        return;
    }
    if (h2->stopping && s->shutdown_notice && h2->stop_from_ms + H2_STOP_PING_WAIT_MS <= now) {
        h2_session_goaway(s, H2_NO_ERROR);
        h2_flush(h2);
        return;
    }
    uint32_t idle_ms = h2->conf->idle_timeout_ms;
    if (s->stream_count == 0) {
        if (idle_ms != 0 && idle_from(h2) + idle_ms <= now) {
            /* Idle: no stream open, and no whole frame since the timeout
             * began; bytes of a frame that never ends hold nothing off. */
            if (s->reader.wait != H2_WAIT_NONE)
                http2_count(h2, HTTP2_PARTIAL_FRAME_TIMEOUT);
            h2_session_goaway(s, H2_NO_ERROR);
            h2->closing = true;
        }
        h2_flush(h2);
        return;
    }
    struct http_stats *stats = h2_stats(h2);
    for (struct h2_stream *st = h2->streams; st != NULL; st = st->next) {
        if (st->ended)
            continue;
        if (st->awaits_end && header_ms != 0 && st->head_started_ms + header_ms <= now) {
            /* Its head is whole, so only the stream ends. */
            st->awaits_end = false;
            header_timeout(h2, "a request's END_STREAM not within client_header_timeout: reset");
            http2_reset(st, H2_CANCEL);
            continue;
        }
        uint64_t body = body_deadline(st);
        if (body != 0 && body <= now) {
            /* A body that stops coming holds its handler (and a proxied
             * request's backend connection): reset, as HTTP/1.1 closes. */
            st->body_timed_out = true;
            if (stats != NULL)
                counter_inc(&stats->timeouts[HTTP_TIMEOUT_BODY]);
            http2_defence(h2, HTTP2_BODY_TIMEOUT,
                          "a request body stalled for client_body_timeout: reset");
            http2_reset(st, H2_CANCEL);
            continue;
        }
        /* A client that keeps a window shut stalls its streams' producers:
         * cut off each stream that made no progress for its send_timeout. */
        uint32_t ms = st->vhost->limits.send_timeout_ms;
        if (st->out.len == 0 || ms == 0 || st->progress_ms + ms > now)
            continue;
        st->progress_ms = now; /* once */
        if (stats != NULL)
            counter_inc(&stats->timeouts[HTTP_TIMEOUT_SEND]);
        http2_defence(h2, HTTP2_STREAMS_STALLED,
                      "a stream stalled at a shut window for send_timeout: reset");
        http2_reset(st, H2_CANCEL);
    }
    h2_flush(h2);
}

/* A graceful stop in two steps, as RFC 9113 6.8 advises
 * (h2_session_shutdown()): a GOAWAY naming the highest stream possible
 * and a PING first; the final GOAWAY follows the PING's answer, one round
 * trip later, when every stream the client opened before it saw the
 * notice has arrived and is served, or H2_STOP_PING_WAIT_MS without one.
 * A GOAWAY with the last stream processed at once refuses the requests
 * already on their way, which a client may not retry. */
static void h2_on_stop(struct http_conn *c)
{
    struct http2_conn *h2 = h2_conn_of(c);
    if (h2->stopping)
        return;
    h2->stopping = true;
    h2->stop_from_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    h2_session_shutdown(&h2->session);
    h2_flush(h2);
}

static void h2_on_close(struct http_conn *c, int error)
{
    (void)error;
    struct http2_conn *h2 = h2_conn_of(c);
    /* Handlers told of the abort below may call back: nothing more is
     * scheduled from here on. */
    bool deferred = h2->flush_scheduled;
    h2->gone = true;
    while (h2->streams != NULL)
        http2_stream_free(h2->streams);
    if (!deferred)
        h2_free(h2); /* else the deferred flush, which holds a pointer, frees */
}

const struct http_framer http2_framer = {
    .name = "HTTP/2",
    .on_data = h2_on_data,
    .on_eof = h2_on_eof,
    .on_drain = h2_on_drain,
    .on_deadline = h2_on_deadline,
    .on_stop = h2_on_stop,
    .on_close = h2_on_close,
};
