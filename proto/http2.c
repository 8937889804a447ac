/*
 * http2.c: HTTP/2 server connections over libnghttp2: one server session
 * per connection, fed from its input and sent into its output in batches
 * (one flush per loop turn), its limits, the reset and flood bounds,
 * idle timeout and graceful stop.  Streams are in http2_stream.c.
 */
#include "proto/http2_internal.h"

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
};

/* SETTINGS frames a client may leave unacknowledged, and the window of the
 * whole connection for request bodies, in streams' worth (given back as it
 * arrives: only the streams' windows wait for handlers). */
#define H2_MAX_SETTINGS        32
#define H2_CONN_WINDOW_STREAMS 16

static struct http_stats *h2_stats(const struct http2_conn *h2)
{
    corral_worker *worker = corral_conn_worker(h2->conn);
    if (worker == NULL || h2->site->stats == NULL)
        return NULL;
    return &h2->site->stats[corral_worker_index(worker)];
}

void h2_count(struct http2_conn *h2, enum http2_counter counter)
{
    struct http_stats *stats = h2_stats(h2);
    if (stats != NULL)
        counter_inc(&stats->http2[counter]);
}

void h2_count_response(struct http2_conn *h2, const struct h2_stream *st)
{
    uint64_t ns = corral_monotonic_ns() - st->started_ns;
    http_stats_count(h2_stats(h2), st->vhost, st->status, ns);
}

/* ------------------------------------------------------------- the output */

static void h2_free(struct http2_conn *h2)
{
    /* nghttp2_session_del() reports no stream closes: the streams still
     * open are aborted here. */
    while (h2->streams != NULL)
        h2_stream_free(h2->streams);
    nghttp2_session_del(h2->session);
    free(h2);
}

/* When a stream whose response waits for the client's window (the
 * stream's or the connection's) has made no progress for its server's
 * send_timeout; 0: none waits. */
static uint64_t stall_deadline(const struct http2_conn *h2)
{
    uint64_t at = 0;
    for (const struct h2_stream *st = h2->streams; st != NULL; st = st->next) {
        uint32_t ms = st->vhost->limits.send_timeout_ms;
        if (st->out.len == 0 || ms == 0)
            continue;
        if (at == 0 || st->progress_ms + ms < at)
            at = st->progress_ms + ms;
    }
    return at;
}

/* Idle (no stream open): the idle timeout runs; else the earliest stall
 * deadline of a stream. */
static void h2_set_deadline(struct http2_conn *h2)
{
    uint32_t ms = h2->conf->idle_timeout_ms;
    uint64_t now = corral_loop_now(corral_conn_loop(h2->conn));
    if (h2->stream_count > 0)
        corral_conn_set_deadline(h2->conn, stall_deadline(h2));
    else
        corral_conn_set_deadline(h2->conn, ms == 0 ? 0 : now + ms);
}

/* Frames what the session has queued into the connection's output, as far
 * as its watermark lets it: the rest follows on_drain. */
static void h2_flush(struct http2_conn *h2)
{
    while (!corral_conn_backed_up(h2->conn)) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h2->session, &data);
        if (n < 0) {
            corral_conn_abort(h2->conn, -EPROTO);
            h2->closing = true;
            return;
        }
        if (n == 0)
            break;
        corral_conn_write(h2->conn, data, (size_t)n);
    }
    /* Handlers that waited for their stream's output to drain go on now,
     * outside nghttp2's callbacks; what they write goes out next turn. */
    if (h2->drains_owed) {
        h2->drains_owed = false;
        for (struct h2_stream *st = h2->streams, *next; st != NULL; st = next) {
            next = st->next;
            h2_stream_drain(st);
        }
    }
    bool done = !nghttp2_session_want_read(h2->session) && !nghttp2_session_want_write(h2->session);
    if ((done || ((h2->closing || h2->stopping) && h2->stream_count == 0)) &&
        !corral_conn_backed_up(h2->conn)) {
        h2->closing = true;
        corral_conn_close(h2->conn);
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

void h2_schedule(struct http2_conn *h2)
{
    if (h2->flush_scheduled || h2->gone)
        return;
    if (corral_loop_defer(corral_conn_loop(h2->conn), h2_flush_deferred, h2) != 0) {
        corral_conn_abort(h2->conn, -ENOMEM);
        return;
    }
    h2->flush_scheduled = true;
}

/* ----------------------------------------------------- session callbacks */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct http2_conn *h2 = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct h2_stream *st = h2_stream_new(h2, frame->hd.stream_id);
    if (st == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st);
    h2_count(h2, HTTP2_STREAMS_OPENED);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* request trailers: the exchange has no place for them */
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    return h2_stream_header(st, name, namelen, value, valuelen);
}

/* More RST_STREAM than the bound in one interval: the rapid-reset attack
 * (CVE-2023-44487), where each reset stream costs the server a request. */
static void count_reset(struct http2_conn *h2)
{
    h2_count(h2, HTTP2_RESETS_RECEIVED);
    uint64_t now = corral_loop_now(corral_conn_loop(h2->conn));
    if (now - h2->resets_since_ms >= h2->conf->reset_interval_ms) {
        h2->resets_since_ms = now;
        h2->resets = 0;
    }
    if (++h2->resets == h2->conf->max_resets + 1) {
        char client[64];
        exchange_format_client(h2->conn, client, sizeof(client));
        corral_log(CORRAL_LOG_WARN,
                   "http2: %s: %u stream resets within %u ms: closing the connection", client,
                   h2->resets, h2->conf->reset_interval_ms);
        nghttp2_session_terminate_session(h2->session, NGHTTP2_ENHANCE_YOUR_CALM);
        h2->closing = true; /* nothing more it sends reaches a handler */
    }
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct http2_conn *h2 = user;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (st == NULL)
            break;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            h2_stream_request(st, end_stream);
        else if (end_stream)
            h2_stream_body_end(st); /* after trailers */
        break;
    case NGHTTP2_DATA:
        if (st != NULL && end_stream)
            h2_stream_body_end(st);
        break;
    case NGHTTP2_RST_STREAM: count_reset(h2); break;
    default: break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    (void)user;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st == NULL) {
        /* No one takes it: give the connection's window back at once. */
        nghttp2_session_consume_connection(session, len);
        return 0;
    }
    h2_stream_body(st, data, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    (void)error_code;
    (void)user;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st != NULL) {
        nghttp2_session_set_stream_user_data(session, stream_id, NULL);
        h2_stream_free(st);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct http2_conn *h2 = user;
    (void)session;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        h2_count(h2, HTTP2_RESETS_SENT);
    } else if (frame->hd.type == NGHTTP2_GOAWAY) {
        uint32_t code = frame->goaway.error_code;
        h2_count(h2, code == NGHTTP2_NO_ERROR            ? HTTP2_GOAWAY_NO_ERROR
                     : code == NGHTTP2_PROTOCOL_ERROR    ? HTTP2_GOAWAY_PROTOCOL_ERROR
                     : code == NGHTTP2_ENHANCE_YOUR_CALM ? HTTP2_GOAWAY_ENHANCE_YOUR_CALM
                                                         : HTTP2_GOAWAY_OTHER);
    }
    return 0;
}

static nghttp2_session_callbacks *session_callbacks(void)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    return cbs;
}

/* ------------------------------------------------------------ connection */

struct http2_conn *http2_conn_new(corral_conn *conn, const struct http_site *site)
{
    struct http2_conn *h2 = calloc(1, sizeof(*h2));
    nghttp2_session_callbacks *cbs = session_callbacks();
    nghttp2_option *opt = NULL;
    if (h2 == NULL || cbs == NULL || nghttp2_option_new(&opt) != 0)
        goto fail;
    h2->conn = conn;
    h2->site = site;
    h2->conf = site->http2;
    /* Window updates follow what handlers take, so that a paused request
     * body stalls its stream only (exchange_pause_body()). */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, H2_MAX_SETTINGS);
    /* A header block in more CONTINUATION frames than this is cut off
     * (CVE-2024-27316); nghttp2 also bounds queued PING/SETTINGS acks. */
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    if (nghttp2_session_server_new2(&h2->session, cbs, h2, opt) != 0)
        goto fail;
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    opt = NULL;
    cbs = NULL;

    size_t window = h2->conf->initial_window_size;
    size_t conn_window = window * H2_CONN_WINDOW_STREAMS;
    if (conn_window > INT32_MAX)
        conn_window = INT32_MAX;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h2->conf->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)h2->conf->max_header_list_size},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    if (nghttp2_submit_settings(h2->session, NGHTTP2_FLAG_NONE, settings,
                                sizeof(settings) / sizeof(settings[0])) != 0 ||
        nghttp2_session_set_local_window_size(h2->session, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)conn_window) != 0)
        goto fail;
    h2->resets_since_ms = corral_loop_now(corral_conn_loop(conn));
    corral_conn_set_timeouts(conn, 0, site->vhosts[0].limits.send_timeout_ms);
    h2_set_deadline(h2);
    return h2;

fail:
    nghttp2_option_del(opt);
    if (cbs != NULL)
        nghttp2_session_callbacks_del(cbs);
    if (h2 != NULL)
        nghttp2_session_del(h2->session);
    free(h2);
    return NULL;
}

size_t http2_on_data(struct http2_conn *h2, const char *data, size_t len)
{
    if (h2->closing)
        return len;
    ssize_t n = nghttp2_session_mem_recv(h2->session, (const uint8_t *)data, len);
    if (n < 0) {
        /* A bad preface, a flood, or a framing error: nghttp2 has queued
         * the GOAWAY where it can.  Once per connection, since it ends. */
        char client[64];
        exchange_format_client(h2->conn, client, sizeof(client));
        corral_log(n == NGHTTP2_ERR_FLOODED ? CORRAL_LOG_WARN : CORRAL_LOG_INFO,
                   "http2: %s: %s: closing the connection", client, nghttp2_strerror((int)n));
        if (n != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            nghttp2_session_terminate_session(h2->session, NGHTTP2_PROTOCOL_ERROR);
        h2->closing = true;
    }
    h2_flush(h2);
    return len;
}

void http2_on_eof(struct http2_conn *h2)
{
    /* A client that closes its half reads nothing more either: a response
     * would go nowhere. */
    h2->closing = true;
    corral_conn_close(h2->conn);
}

void http2_on_drain(struct http2_conn *h2)
{
    h2->drains_owed = true;
    h2_flush(h2);
}

void http2_on_deadline(struct http2_conn *h2)
{
    if (h2->stream_count == 0) {
        /* Idle: no stream open since the timeout began. */
        nghttp2_session_terminate_session(h2->session, NGHTTP2_NO_ERROR);
        h2->closing = true;
        h2_flush(h2);
        return;
    }
    /* A client that keeps a window shut stalls its streams' producers: cut
     * off each stream that made no progress for its send_timeout. */
    uint64_t now = corral_loop_now(corral_conn_loop(h2->conn));
    struct http_stats *stats = h2_stats(h2);
    for (struct h2_stream *st = h2->streams; st != NULL; st = st->next) {
        uint32_t ms = st->vhost->limits.send_timeout_ms;
        if (st->out.len == 0 || ms == 0 || st->progress_ms + ms > now)
            continue;
        st->progress_ms = now; /* once */
        if (stats != NULL)
            counter_inc(&stats->timeouts[HTTP_TIMEOUT_SEND]);
        nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    }
    h2_flush(h2);
}

void http2_on_stop(struct http2_conn *h2)
{
    /* The streams up to the last one processed run to their end; the
     * client retries later ones elsewhere (RFC 9113 6.8). */
    h2->stopping = true;
    nghttp2_submit_goaway(h2->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h2->session), NGHTTP2_NO_ERROR,
                          NULL, 0);
    h2_flush(h2);
}

void http2_on_close(struct http2_conn *h2, int error)
{
    (void)error;
    /* Handlers told of the abort below may call back: nothing more is
     * scheduled from here on. */
    bool deferred = h2->flush_scheduled;
    h2->gone = true;
    while (h2->streams != NULL)
        h2_stream_free(h2->streams);
    if (!deferred)
        h2_free(h2); /* else the deferred flush, which holds a pointer, frees */
}
