/*
 * http2.c: HTTP/2 server connections over libnghttp2: one server session
 * per connection, fed from its input and sent into its output in batches
 * (one flush per loop turn), its limits, the reset and flood bounds,
 * idle timeout and graceful stop.  Streams are in http2_stream.c.
 */
#include "proto/http2/http2_internal.h"
#include "proto/http2/http2_mem.h"

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

/* SETTINGS frames a client may leave unacknowledged, and the window of the
 * whole connection for request bodies, in streams' worth (given back as it
 * arrives: only the streams' windows wait for handlers). */
#define H2_MAX_SETTINGS        32
#define H2_CONN_WINDOW_STREAMS 16

/* The largest header block sent, as nghttp2_hd_deflate_bound() counts it
 * (the fields' bytes, and 10 more for each): room for heads and trailers
 * of 128k (proxy_buffer_size's most), and what corral adds. */
#define H2_MAX_SEND_HEADER_BLOCK (1024 * 1024)

/* The frames a client may send per interval that ask work of the server
 * and carry no request forward (nghttp2 1.52 bounds none of them for a
 * client that reads its ACKs), and the WINDOW_UPDATE frames it may send:
 * a few per DATA frame it was sent, beyond a start-up allowance. */
#define H2_FLOOD_INTERVAL_MS        10000
#define H2_MAX_SETTINGS_FRAMES      100
#define H2_MAX_PING_FRAMES          1000
#define H2_MAX_EMPTY_FRAMES         1000
#define H2_WINDOW_UPDATES_BASE      1000
#define H2_WINDOW_UPDATES_PER_FRAME 4

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

/* ------------------------------------------------------------- the output */

static void h2_free(struct http2_conn *h2)
{
    /* nghttp2_session_del() reports no stream closes: the streams still
     * open are aborted here. */
    while (h2->streams != NULL)
        http2_stream_free(h2->streams);
    nghttp2_session_del(h2->session);
    free(h2);
}

/* When the stream's request body is due, as client_body_timeout has it
 * between two reads of an HTTP/1.1 body: once its head went to a handler,
 * while the client could send (all it sent was taken, so its window is
 * open) and has not ended its half; 0: not due. */
static uint64_t body_deadline(const struct h2_stream *st)
{
    uint32_t ms = st->vhost->limits.body_timeout_ms;
    if (ms == 0 || !st->head_done || st->awaits_end || st->request_done || st->body_timed_out ||
        st->body_paused || st->in.len > 0)
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
        if (st->out.len == 0 || ms == 0)
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

/* When the client's bytes in progress are due: a frame header begun, a
 * header block begun, a request waiting for its END_STREAM, each within
 * client_header_timeout of its first byte; 0: none. */
static uint64_t header_deadline(const struct http2_conn *h2)
{
    uint32_t ms = header_timeout_ms(h2);
    uint64_t at = 0;
    if (ms == 0)
        return 0;
    if (h2->scan_have > 0)
        at = h2->frame_started_ms + ms;
    if (h2->block_open && (at == 0 || h2->block_started_ms + ms < at))
        at = h2->block_started_ms + ms;
    for (const struct h2_stream *st = h2->streams; st != NULL; st = st->next)
        if (st->awaits_end && (at == 0 || st->head_started_ms + ms < at))
            at = st->head_started_ms + ms;
    return at;
}

/* The earliest of: the header deadline; with no stream open, the idle
 * timeout from the last whole frame (bytes that complete none are no
 * progress); else the stall deadline of a stream. */
/* How long a graceful stop waits for the answer to its PING before it
 * sends the final GOAWAY anyway: a client that never answers gains
 * nothing but this long. */
#define H2_STOP_PING_WAIT_MS 1000

static void h2_set_deadline(struct http2_conn *h2)
{
    uint32_t ms = h2->conf->idle_timeout_ms;
    uint64_t at = header_deadline(h2);
    uint64_t other = 0;
    if (h2->stream_count > 0)
        other = stall_deadline(h2);
    else if (ms != 0)
        other = h2->idle_from_ms + ms;
    if (other != 0 && (at == 0 || other < at))
        at = other;
    if (h2->stopping && !h2->stop_goaway_sent) {
        other = h2->stop_from_ms + H2_STOP_PING_WAIT_MS;
        if (at == 0 || other < at)
            at = other;
    }
    corral_conn_set_deadline(h2->c.sock, at);
}

/* One frame from nghttp2 into the connection's output.  Our SETTINGS go
 * out with the configured stream limit, where nghttp2 was told twice that:
 * so a stream beyond the limit reaches on_begin_headers, which refuses it
 * as a stream error (RFC 9113 5.1.2), where nghttp2 1.52 would end the
 * connection once the client has acknowledged the settings. */
static void write_frame(struct http2_conn *h2, const uint8_t *data, size_t n)
{
    uint8_t frame[H2_FRAME_HEADER + 6 * 8];
    if (h2->settings_sent || n < H2_FRAME_HEADER || data[3] != NGHTTP2_SETTINGS ||
        (data[4] & NGHTTP2_FLAG_ACK) != 0) {
        corral_conn_write(h2->c.sock, data, n);
        return;
    }
    /* nghttp2_session_mem_send() hands out one frame at a time, and this
     * one holds the few settings http2_conn_new() submits. */
    assert(n <= sizeof(frame));
    h2->settings_sent = true;
    memcpy(frame, data, n);
    for (size_t i = H2_FRAME_HEADER; i + 6 <= n; i += 6) {
        if (frame[i] != 0 || frame[i + 1] != NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
            continue;
        uint32_t max = h2->conf->max_concurrent_streams;
        frame[i + 2] = (uint8_t)(max >> 24);
        frame[i + 3] = (uint8_t)(max >> 16);
        frame[i + 4] = (uint8_t)(max >> 8);
        frame[i + 5] = (uint8_t)max;
    }
    corral_conn_write(h2->c.sock, frame, n);
}

/* Frames what the session has queued into the connection's output, as far
 * as its watermark lets it: the rest follows on_drain. */
static void h2_flush(struct http2_conn *h2)
{
    while (!corral_conn_backed_up(h2->c.sock)) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h2->session, &data);
        if (n < 0) {
            corral_conn_abort(h2->c.sock, -EPROTO);
            h2->closing = true;
            return;
        }
        if (n == 0)
            break;
        write_frame(h2, data, (size_t)n);
    }
    /* Handlers that waited for their stream's output to drain go on now,
     * outside nghttp2's callbacks; what they write goes out next turn. */
    if (h2->drains_owed) {
        h2->drains_owed = false;
        for (struct h2_stream *st = h2->streams, *next; st != NULL; st = next) {
            next = st->next;
            http2_response_drain(st);
        }
    }
    bool done = !nghttp2_session_want_read(h2->session) && !nghttp2_session_want_write(h2->session);
    if ((done || ((h2->closing || h2->stop_goaway_sent) && h2->stream_count == 0)) &&
        !corral_conn_backed_up(h2->c.sock)) {
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

/* ------------------------------------------------- the client's bounds */

/* A client over one of the bounds below: GOAWAY ENHANCE_YOUR_CALM, counted
 * and logged once, since the connection ends; nothing it sends after this
 * reaches a handler. */
static void calm(struct http2_conn *h2, enum http2_counter counter, const char *what,
                 unsigned count, uint32_t interval_ms)
{
    if (h2->closing)
        return;
    http2_count(h2, counter);
    char client[64];
    exchange_format_peer(&h2->c, client, sizeof(client));
    if (interval_ms > 0)
        corral_log(CORRAL_LOG_WARN, "http2: %s: %u %s within %u ms: closing the connection", client,
                   count, what, interval_ms);
    else
        corral_log(CORRAL_LOG_WARN, "http2: %s: %s: closing the connection", client, what);
    nghttp2_session_terminate_session(h2->session, NGHTTP2_ENHANCE_YOUR_CALM);
    h2->closing = true;
}

/* More RST_STREAM than the bound in one interval: the rapid-reset attack
 * (CVE-2023-44487), where each reset stream costs the server a request. */
static void count_reset(struct http2_conn *h2)
{
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    if (now - h2->resets_since_ms >= h2->conf->reset_interval_ms) {
        h2->resets_since_ms = now;
        h2->resets = 0;
    }
    if (++h2->resets > h2->conf->max_resets)
        calm(h2, HTTP2_RAPID_RESET, "stream resets (or streams refused)", h2->resets,
             h2->conf->reset_interval_ms);
}

static void count_flood(struct http2_conn *h2, enum h2_flood kind)
{
    static const struct {
        unsigned max;
        enum http2_counter counter;
        const char *what;
    } bounds[H2_FLOODS] = {
        [H2_FLOOD_SETTINGS] = {H2_MAX_SETTINGS_FRAMES, HTTP2_SETTINGS_FLOOD, "SETTINGS frames"},
        [H2_FLOOD_PING] = {H2_MAX_PING_FRAMES, HTTP2_PING_FLOOD, "PING frames"},
        [H2_FLOOD_EMPTY] = {H2_MAX_EMPTY_FRAMES, HTTP2_EMPTY_FRAME_FLOOD,
                            "empty DATA, HEADERS, CONTINUATION or PRIORITY frames"},
    };
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    if (now - h2->floods_since_ms >= H2_FLOOD_INTERVAL_MS) {
        h2->floods_since_ms = now;
        memset(h2->floods, 0, sizeof(h2->floods));
    }
    if (++h2->floods[kind] > bounds[kind].max)
        calm(h2, bounds[kind].counter, bounds[kind].what, h2->floods[kind], H2_FLOOD_INTERVAL_MS);
}

/* The bytes a HEADERS frame has before its header block fragment: the
 * pad length and the priority fields (RFC 9113 6.2). */
static uint32_t headers_prefix(uint8_t flags)
{
    return ((flags & NGHTTP2_FLAG_PADDED) != 0 ? 1 : 0) +
           ((flags & NGHTTP2_FLAG_PRIORITY) != 0 ? 5 : 0);
}

/* Passes `n` bytes of a HEADERS or CONTINUATION frame's payload: the pad
 * length and priority, the fragment (to http2_hpack_scan()), the padding.
 * Returns how many pass before a cut. */
static size_t scan_fragment(struct http2_conn *h2, const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i < n && h2->frag_prefix > 0; i++, h2->frag_prefix--) {
        if (h2->frag_padded) {
            /* nghttp2 refuses padding longer than the frame. */
            h2->frag_padded = false;
            h2->frag_left = h2->frag_left > p[i] ? h2->frag_left - p[i] : 0;
        }
    }
    size_t k = n - i < h2->frag_left ? n - i : h2->frag_left;
    uint64_t bound = h2->conf->max_header_list_size;
    if (bound > HTTP2_HPACK_MAX_STRING)
        bound = HTTP2_HPACK_MAX_STRING;
    bool too_long;
    size_t passed = http2_hpack_scan(&h2->hpack_scan, bound, p + i, k, &too_long);
    if (too_long)
        h2->block_cut = h2->block_cut_field = true;
    h2->frag_left -= (uint32_t)passed;
    return i + passed;
}

/* RFC 9113 5.1.1: a new stream's identifier is above every one the
 * client opened, so HEADERS naming a lower stream that is gone is a
 * connection error, as nginx, HAProxy and h2o treat it (nghttp2 would skip
 * the frame).  Streams this side reset are the exception: the client may
 * have sent their trailers before it saw the reset (5.1, "closed"). */
static void check_stream_id(struct http2_conn *h2, int32_t stream_id)
{
    if (stream_id > h2->max_stream_id) {
        h2->max_stream_id = stream_id;
        return;
    }
    if (stream_id == 0 || nghttp2_session_find_stream(h2->session, stream_id) != NULL)
        return; /* stream 0 is nghttp2's to refuse; a live stream's trailers */
    for (size_t i = 0; i < sizeof(h2->reset_ids) / sizeof(h2->reset_ids[0]); i++)
        if (h2->reset_ids[i] == stream_id)
            return;
    char client[64];
    exchange_format_peer(&h2->c, client, sizeof(client));
    corral_log(CORRAL_LOG_INFO,
               "http2: %s: HEADERS for stream %d, below stream %d it opened: closing the "
               "connection",
               client, (int)stream_id, (int)h2->max_stream_id);
    nghttp2_session_terminate_session(h2->session, NGHTTP2_PROTOCOL_ERROR);
    h2->closing = true;
}

/* One frame header from the client, before nghttp2 reads the frame. */
static void frame_seen(struct http2_conn *h2, uint8_t type, uint8_t flags, uint32_t length,
                       int32_t stream_id)
{
    bool ack = (flags & NGHTTP2_FLAG_ACK) != 0;
    bool end_headers = (flags & NGHTTP2_FLAG_END_HEADERS) != 0;
    h2->frag_prefix = 0;
    h2->frag_padded = false;
    h2->frag_left = 0;
    switch (type) {
    case NGHTTP2_DATA:
        if ((flags & NGHTTP2_FLAG_END_STREAM) != 0)
            break; /* empty or not, it ends its stream */
        if ((flags & NGHTTP2_FLAG_PADDED) != 0 && length > 0)
            h2->scan_pad = true; /* empty or not: its pad length says */
        else if (length == 0)
            count_flood(h2, H2_FLOOD_EMPTY);
        break;
    case NGHTTP2_HEADERS:
    case NGHTTP2_CONTINUATION: {
        /* CVE-2024-27316: a header block is cut off as soon as its bytes
         * (the fragments, with a HEADERS frame's padding) are more than
         * http2_max_header_list_size.  HPACK never makes a field longer
         * than its RFC 9113 6.5.2 size (name, value and 32; a literal's
         * own framing is a few bytes), so a block over the limit is a
         * list over it.  A shorter block whose list is over the limit is
         * decoded to its end, keeping nothing, and answered 431. */
        uint32_t prefix = 0;
        if (type == NGHTTP2_HEADERS) {
            check_stream_id(h2, stream_id);
            prefix = headers_prefix(flags);
            h2->block_bytes = 0;
            h2->block_stream = stream_id;
            h2->block_open = true;
            h2->block_started_ms = h2->frame_started_ms;
            http2_hpack_scan_start(&h2->hpack_scan);
            h2->frag_prefix = (uint8_t)prefix;
            h2->frag_padded = (flags & NGHTTP2_FLAG_PADDED) != 0;
        }
        h2->frag_left = length > prefix ? length - prefix : 0;
        h2->scan_ends_block = end_headers;
        h2->block_bytes += length > prefix ? length - prefix : 0;
        if (h2->block_bytes > h2->conf->max_header_list_size)
            h2->block_cut = true;
        if (length == 0 && !end_headers)
            count_flood(h2, H2_FLOOD_EMPTY);
        break;
    }
    case NGHTTP2_PRIORITY: count_flood(h2, H2_FLOOD_EMPTY); break;
    case NGHTTP2_RST_STREAM: count_reset(h2); break;
    case NGHTTP2_SETTINGS:
        if (!ack)
            count_flood(h2, H2_FLOOD_SETTINGS);
        break;
    case NGHTTP2_PING: count_flood(h2, H2_FLOOD_PING); break;
    case NGHTTP2_WINDOW_UPDATE:
        if (++h2->window_updates >
            H2_WINDOW_UPDATES_BASE + H2_WINDOW_UPDATES_PER_FRAME * h2->data_frames_sent)
            calm(h2, HTTP2_WINDOW_UPDATE_FLOOD, "WINDOW_UPDATE frames far beyond the DATA sent", 0,
                 0);
        break;
    default: break;
    }
}

/* A frame has passed whole: progress, for the idle timeout.  Returns
 * whether it ended a header block. */
static bool frame_done(struct http2_conn *h2, uint64_t now)
{
    h2->idle_from_ms = now;
    if (!h2->scan_ends_block)
        return false;
    h2->scan_ends_block = false;
    h2->block_open = false;
    return true;
}

/* Walks the frame headers in the client's bytes, ahead of nghttp2: every
 * frame is counted, including those nghttp2 would skip without a callback
 * (for a closed stream, say), whose cost to the server is the same; and
 * timed: when a frame header and a header block began, and when a whole
 * frame last passed.  Returns how many of the bytes nghttp2 may read: up
 * to the end of the first header block that ends in them, so that the
 * block's times are still those of the block nghttp2 reads; and for a
 * header block over the limit, only up to its frame's fragment, so that
 * nghttp2 opens the stream (to be answered) and decodes none of it. */
static size_t scan_frames(struct http2_conn *h2, const uint8_t *data, size_t len)
{
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    size_t i = 0;
    while (i < len && !h2->closing) {
        if (h2->scan_pad) {
            /* The pad length (RFC 9113 6.1): a frame of padding only is
             * as empty as one of length 0.  nghttp2 refuses a pad length
             * beyond the frame. */
            h2->scan_pad = false;
            if (data[i] + 1u >= h2->scan_length)
                count_flood(h2, H2_FLOOD_EMPTY);
        }
        if (h2->scan_skip > 0) {
            size_t n = len - i < h2->scan_skip ? len - i : h2->scan_skip;
            if (h2->frag_prefix > 0 || h2->frag_left > 0) {
                size_t passed = scan_fragment(h2, data + i, n);
                if (h2->block_cut)
                    return i + passed;
            }
            h2->scan_skip -= (uint32_t)n;
            i += n;
            if (h2->scan_skip == 0 && frame_done(h2, now))
                return i;
            continue;
        }
        if (h2->scan_have == 0)
            h2->frame_started_ms = now;
        size_t n = H2_FRAME_HEADER - h2->scan_have;
        if (n > len - i)
            n = len - i;
        memcpy(h2->scan_head + h2->scan_have, data + i, n);
        h2->scan_have = (uint8_t)(h2->scan_have + n);
        i += n;
        if (h2->scan_have < H2_FRAME_HEADER)
            break;
        h2->scan_have = 0;
        const uint8_t *hd = h2->scan_head;
        uint32_t length = (uint32_t)hd[0] << 16 | (uint32_t)hd[1] << 8 | hd[2];
        int32_t stream_id = (int32_t)((uint32_t)(hd[5] & 0x7f) << 24 | (uint32_t)hd[6] << 16 |
                                      (uint32_t)hd[7] << 8 | hd[8]);
        h2->scan_skip = h2->scan_length = length;
        frame_seen(h2, hd[3], hd[4], length, stream_id);
        if (h2->block_cut) {
            size_t prefix = hd[3] == NGHTTP2_HEADERS ? headers_prefix(hd[4]) : 0;
            return i + (prefix < len - i ? prefix : len - i);
        }
        if (length == 0 && frame_done(h2, now))
            return i;
    }
    return len;
}

/* A header block went over http2_max_header_list_size: the connection
 * ends, since HPACK's state cannot skip the rest of a block.  A request
 * head still arriving gets its 431 first, sent before the GOAWAY (after
 * it, nghttp2 sends nothing); trailers get no answer. */
static void cut_header_block(struct http2_conn *h2)
{
    struct h2_stream *st = nghttp2_session_get_stream_user_data(h2->session, h2->block_stream);
    if (st != NULL && !st->head_done && !st->response_started) {
        http2_stream_keep_log_unread(st);
        exchange_respond_error(&st->base, 431);
        h2_flush(h2);
    }
    calm(h2, HTTP2_HEADER_BLOCK_TOO_LONG,
         h2->block_cut_field ? "a header field longer than http2_max_header_list_size or 64 KiB"
                             : "a header block over http2_max_header_list_size",
         0, 0);
}

/* ----------------------------------------------------- session callbacks */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct http2_conn *h2 = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (h2->stream_count >= h2->conf->max_concurrent_streams) {
        /* Beyond the limit we announced (nghttp2 enforces twice that,
         * write_frame()): the client may retry it (RFC 9113 8.7).  Its
         * fields and DATA find no stream and are dropped. */
        http2_defence(h2, HTTP2_STREAMS_REFUSED,
                      "a stream beyond http2_max_concurrent_streams: REFUSED_STREAM");
        /* Each costs a reset as a stream the client resets does. */
        count_reset(h2);
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    struct h2_stream *st = http2_stream_new(h2, frame->hd.stream_id);
    if (st == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    /* scan_frames() stops at the end of each block: this is its start. */
    st->head_started_ms = h2->block_started_ms;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st);
    http2_count(h2, HTTP2_STREAMS_OPENED);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    if (frame->headers.cat == NGHTTP2_HCAT_HEADERS)
        return http2_stream_trailer(st, name, namelen, value, valuelen);
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    return http2_stream_header(st, name, namelen, value, valuelen);
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

/* The second step of a graceful stop: GOAWAY with the last stream taken.
 * The streams up to it run to their end; the client retries later ones
 * elsewhere (RFC 9113 6.8). */
static void stop_goaway(struct http2_conn *h2)
{
    if (h2->stop_goaway_sent)
        return;
    h2->stop_goaway_sent = true;
    nghttp2_submit_goaway(h2->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h2->session), NGHTTP2_NO_ERROR,
                          NULL, 0);
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
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
            st->head_done = true;
            if (!end_stream && http2_stream_empty_body(st))
                st->awaits_end = true;
            else
                http2_stream_request(st, end_stream);
        } else if (end_stream) {
            stream_end(st); /* after trailers */
        }
        break;
    case NGHTTP2_DATA:
        if (st != NULL && end_stream)
            stream_end(st);
        break;
    case NGHTTP2_RST_STREAM: http2_count(h2, HTTP2_RESETS_RECEIVED); break;
    case NGHTTP2_PING:
        /* The answer to the stop's PING (or to none: any answer comes
         * after the notice was read): every stream opened before it is in. */
        if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0 && h2->stopping)
            stop_goaway(h2);
        break;
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
    http2_stream_body(st, data, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    struct http2_conn *h2 = user;
    (void)error_code;
    /* The last stream's end starts the idle timeout. */
    h2->idle_from_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    struct h2_stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
    if (st != NULL) {
        nghttp2_session_set_stream_user_data(session, stream_id, NULL);
        http2_stream_free(st);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct http2_conn *h2 = user;
    (void)session;
    if (frame->hd.type == NGHTTP2_DATA) {
        h2->data_frames_sent++;
    } else if (frame->hd.type == NGHTTP2_RST_STREAM) {
        http2_count(h2, HTTP2_RESETS_SENT);
        h2->reset_ids[h2->reset_next] = frame->hd.stream_id;
        h2->reset_next =
            (uint8_t)((h2->reset_next + 1) % (sizeof(h2->reset_ids) / sizeof(h2->reset_ids[0])));
    } else if (frame->hd.type == NGHTTP2_GOAWAY) {
        uint32_t code = frame->goaway.error_code;
        http2_count(h2, code == NGHTTP2_NO_ERROR            ? HTTP2_GOAWAY_NO_ERROR
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

struct http_conn *http2_conn_new(const struct http_conn *from)
{
    struct http2_conn *h2 = calloc(1, sizeof(*h2));
    nghttp2_session_callbacks *cbs = session_callbacks();
    nghttp2_option *opt = NULL;
    if (h2 == NULL || cbs == NULL || nghttp2_option_new(&opt) != 0)
        goto fail;
    corral_conn *conn = from->sock;
    const struct http_site *site = from->site;
    h2->c = *from;
    h2->c.framer = &http2_framer;
    h2->conf = site->http2;
    /* Window updates follow what handlers take, so that a paused request
     * body stalls its stream only (exchange_pause_body()). */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, H2_MAX_SETTINGS);
    /* A header block in more CONTINUATION frames than this is cut off
     * (CVE-2024-27316) as one over its length is (frame_seen()); nghttp2
     * also bounds queued PING/SETTINGS acks. */
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    /* A response head or trailer section as large as proxy_buffer_size
     * lets in (128k at most) must go out: nghttp2 would fail a HEADERS
     * frame over its 64 KiB default, leaving the stream without an end. */
    nghttp2_option_set_max_send_header_block_length(opt, H2_MAX_SEND_HEADER_BLOCK);
    if (nghttp2_session_server_new3(&h2->session, cbs, h2, opt, http2_mem()) != 0)
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
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 2 * h2->conf->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)h2->conf->max_header_list_size},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        /* RFC 9218: no priority tree, so neither its CPU (CVE-2019-9513)
         * nor the closed streams nghttp2 would keep for it. */
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    if (nghttp2_submit_settings(h2->session, NGHTTP2_FLAG_NONE, settings,
                                sizeof(settings) / sizeof(settings[0])) != 0 ||
        nghttp2_session_set_local_window_size(h2->session, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)conn_window) != 0)
        goto fail;
    h2->resets_since_ms = h2->floods_since_ms = h2->idle_from_ms =
        corral_loop_now(corral_conn_loop(conn));
    h2->scan_skip = HTTP2_PREFACE_LEN;
    corral_conn_set_data(conn, &h2->c);
    corral_conn_set_timeouts(conn, 0, site->vhosts[0].limits.send_timeout_ms);
    h2_set_deadline(h2);
    return &h2->c;

fail:
    nghttp2_option_del(opt);
    if (cbs != NULL)
        nghttp2_session_callbacks_del(cbs);
    if (h2 != NULL)
        nghttp2_session_del(h2->session);
    free(h2);
    return NULL;
}

static size_t h2_on_data(struct http_conn *c, const char *data, size_t len)
{
    struct http2_conn *h2 = h2_conn_of(c);
    if (h2->closing)
        return len;
    const uint8_t *in = (const uint8_t *)data;
    for (size_t off = 0; off < len && !h2->closing;) {
        size_t readable = scan_frames(h2, in + off, len - off);
        ssize_t n = h2->closing ? 0 : nghttp2_session_mem_recv(h2->session, in + off, readable);
        off += readable;
        if (n == NGHTTP2_ERR_FLOODED) {
            /* Its ACKs (of PING or SETTINGS) piled up unread. */
            bool pings = h2->floods[H2_FLOOD_PING] >= h2->floods[H2_FLOOD_SETTINGS];
            calm(h2, pings ? HTTP2_PING_FLOOD : HTTP2_SETTINGS_FLOOD,
                 pings ? "PING frames, their ACKs unread" : "SETTINGS frames, their ACKs unread", 0,
                 0);
        } else if (n == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
            calm(h2, HTTP2_HEADER_BLOCK_TOO_LONG, nghttp2_strerror((int)n), 0, 0);
        } else if (n < 0) {
            /* A bad preface or a framing error: nghttp2 has queued the
             * GOAWAY where it can.  Once per connection, since it ends. */
            char client[64];
            exchange_format_peer(&h2->c, client, sizeof(client));
            corral_log(CORRAL_LOG_INFO, "http2: %s: %s: closing the connection", client,
                       nghttp2_strerror((int)n));
            if (n != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
                nghttp2_session_terminate_session(h2->session, NGHTTP2_PROTOCOL_ERROR);
            h2->closing = true;
        } else if (h2->block_cut) {
            cut_header_block(h2);
        }
    }
    h2_flush(h2);
    return len;
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
    uint64_t now = corral_loop_now(corral_conn_loop(h2->c.sock));
    uint32_t header_ms = header_timeout_ms(h2);
    if (header_ms != 0 && ((h2->scan_have > 0 && h2->frame_started_ms + header_ms <= now) ||
                           (h2->block_open && h2->block_started_ms + header_ms <= now))) {
        /* A frame header or header block left unfinished: HPACK's state
         * waits on the block, so the connection ends, as nginx ends it. */
        header_timeout(h2, "a header block not complete within client_header_timeout: "
                           "closing the connection");
        nghttp2_session_terminate_session(h2->session, NGHTTP2_PROTOCOL_ERROR);
        h2->closing = true;
        h2_flush(h2);
        return;
    }
    if (h2->stopping && !h2->stop_goaway_sent && h2->stop_from_ms + H2_STOP_PING_WAIT_MS <= now) {
        stop_goaway(h2);
        h2_flush(h2);
        return;
    }
    uint32_t idle_ms = h2->conf->idle_timeout_ms;
    if (h2->stream_count == 0) {
        if (idle_ms != 0 && h2->idle_from_ms + idle_ms <= now) {
            /* Idle: no stream open, and no whole frame since the timeout
             * began; bytes of a frame that never ends hold nothing off. */
            if (h2->scan_have > 0 || h2->scan_skip > 0)
                http2_count(h2, HTTP2_PARTIAL_FRAME_TIMEOUT);
            nghttp2_session_terminate_session(h2->session, NGHTTP2_NO_ERROR);
            h2->closing = true;
        }
        h2_flush(h2);
        return;
    }
    struct http_stats *stats = h2_stats(h2);
    for (struct h2_stream *st = h2->streams; st != NULL; st = st->next) {
        if (st->awaits_end && header_ms != 0 && st->head_started_ms + header_ms <= now) {
            /* Its head is whole, so only the stream ends. */
            st->awaits_end = false;
            header_timeout(h2, "a request's END_STREAM not within client_header_timeout: reset");
            nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
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
            nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
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
        nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    }
    h2_flush(h2);
}

/* A graceful stop in two steps, as RFC 9113 6.8 advises: a GOAWAY naming
 * the highest stream possible first (nghttp2's shutdown notice), which
 * tells the client to open no more, and a PING; the final GOAWAY follows
 * the PING's answer, one round trip later, when every stream the client
 * opened before it saw the notice has arrived and is served.  A GOAWAY
 * with the last stream processed at once refuses the requests already on
 * their way, which a client may not retry. */
static void h2_on_stop(struct http_conn *c)
{
    struct http2_conn *h2 = h2_conn_of(c);
    if (h2->stopping)
        return;
    h2->stopping = true;
    h2->stop_from_ms = corral_loop_now(corral_conn_loop(h2->c.sock));
    if (nghttp2_submit_shutdown_notice(h2->session) != 0 ||
        nghttp2_submit_ping(h2->session, NGHTTP2_FLAG_NONE, NULL) != 0)
        stop_goaway(h2);
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
