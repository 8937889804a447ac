/*
 * h2_session.c: either side of an HTTP/2 connection (h2_session.h): the
 * frame reader's events turned into stream states, windows and
 * answers.  Where RFC 9113 leaves the choice between a stream and a
 * connection error, the choice is libnghttp2's, which the server used
 * before; the defences the server had in front of libnghttp2 are
 * here.
 */
#include "proto/http2/h2_session.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The highest stream identifier (RFC 9113 5.1.1: 31 bits). */
#define H2_SESSION_LAST_STREAM_ID 0x7fffffffu

/* A connection error: GOAWAY, and nothing more is read. */
static void conn_error(struct h2_session *s, enum h2_error code, const char *why)
{
    if (s->error != H2_NO_ERROR)
        return;
    s->error = code;
    s->why = why;
    h2_frame_write_goaway(&s->sink, s->last_stream_id, code, NULL, 0);
    s->goaway_sent = true;
    s->goaway_last_id = s->last_stream_id;
    s->shutdown_notice = false;
}

struct h2_session_stream *h2_session_stream(const struct h2_session *s, uint32_t id)
{
    /* Few streams are open at once (max_concurrent_streams): a scan of
     * 16-byte entries beats a table's memory and upkeep. */
    for (uint32_t i = 0; i < s->stream_count; i++)
        if (s->streams[i].id == id)
            return &s->streams[i];
    return NULL;
}

static void stream_forget(struct h2_session *s, struct h2_session_stream *st)
{
    assert(st >= s->streams && st < s->streams + s->stream_count);
    if (st->wants_send)
        s->senders--;
    *st = s->streams[--s->stream_count];
    if (s->stream_count == 0) {
        free(s->streams);
        s->streams = NULL;
        s->stream_cap = 0;
    }
}

/* Both halves ended: forgotten, and the caller told. */
static void stream_close(struct h2_session *s, struct h2_session_stream *st)
{
    uint32_t id = st->id;
    stream_forget(s, st);
    if (s->ops->closed != NULL)
        s->ops->closed(s->arg, id);
}

static struct h2_session_stream *stream_add(struct h2_session *s, uint32_t id)
{
    if (s->stream_count == s->stream_cap) {
        uint32_t cap = s->stream_cap == 0 ? 4 : s->stream_cap * 2;
        struct h2_session_stream *n = realloc(s->streams, cap * sizeof(*n));
        if (n == NULL)
            return NULL;
        s->streams = n;
        s->stream_cap = cap;
    }
    struct h2_session_stream *st = &s->streams[s->stream_count++];
    *st = (struct h2_session_stream){
        .id = id,
        .state = H2_STREAM_OPEN,
        .send_window = (int32_t)s->peer_initial_window,
        .recv_window = (int32_t)s->local_initial_window,
    };
    h2_message_begin(&st->msg);
    return st;
}

/* Remembers a stream this side reset: trailers the client sent before it
 * saw the reset are skipped, not taken for a stream reopened. */
static void remember_reset(struct h2_session *s, uint32_t id)
{
    s->reset_ids[s->reset_next] = id;
    s->reset_next = (uint8_t)((s->reset_next + 1) % H2_SESSION_RESET_MEMORY);
}

static bool was_reset(const struct h2_session *s, uint32_t id)
{
    for (unsigned i = 0; i < H2_SESSION_RESET_MEMORY; i++)
        if (s->reset_ids[i] == id)
            return true;
    return false;
}

/* A stream not open and never opened (5.1): by the peer, past the last
 * it opened; for a client, whose server may open none (no push), an even
 * one, or an odd one past the last this side opened. */
static bool stream_idle(const struct h2_session *s, uint32_t id)
{
    if (s->conf.client)
        return id % 2 == 0 || id > s->local_last_id;
    return id % 2 == 0 || id > s->last_stream_id;
}

/* Counts a frame of a kind bounded per interval; false (and the
 * connection ended) past the limit. */
static bool flood(struct h2_session *s, enum h2_session_flood kind)
{
    static const unsigned limits[H2_SESSION_FLOODS] = {
        [H2_SESSION_FLOOD_SETTINGS] = H2_SESSION_MAX_SETTINGS,
        [H2_SESSION_FLOOD_PING] = H2_SESSION_MAX_PING,
        [H2_SESSION_FLOOD_EMPTY] = H2_SESSION_MAX_EMPTY,
    };
    static const char *const whys[H2_SESSION_FLOODS] = {
        [H2_SESSION_FLOOD_SETTINGS] = "settings_flood",
        [H2_SESSION_FLOOD_PING] = "ping_flood",
        [H2_SESSION_FLOOD_EMPTY] = "empty_frame_flood",
    };
    if (s->now_ms - s->floods_since_ms >= H2_SESSION_FLOOD_INTERVAL_MS) {
        memset(s->floods, 0, sizeof(s->floods));
        s->floods_since_ms = s->now_ms;
    }
    if (++s->floods[kind] <= limits[kind])
        return true;
    conn_error(s, H2_ENHANCE_YOUR_CALM, whys[kind]);
    return false;
}

/* A reset by the client, or a stream refused: the rapid-reset bound
 * (CVE-2023-44487). */
static bool count_reset(struct h2_session *s)
{
    if (s->now_ms - s->resets_since_ms >= s->conf.reset_interval_ms) {
        s->resets = 0;
        s->resets_since_ms = s->now_ms;
    }
    if (++s->resets <= s->conf.max_resets)
        return true;
    conn_error(s, H2_ENHANCE_YOUR_CALM, "rapid_reset");
    return false;
}

/* A stream error (5.4.2): RST_STREAM, and the stream is gone. */
static void stream_error(struct h2_session *s, uint32_t id, enum h2_error code)
{
    h2_frame_write_rst_stream(&s->sink, id, code);
    remember_reset(s, id);
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (st != NULL) {
        stream_forget(s, st);
        s->ops->reset(s->arg, id, code, false);
    }
}

/* Every frame passes here on its way to the caller's sink: the bytes the
 * output holds, for conf.max_output. */
static void session_write(void *arg, const struct iovec *iov, int count)
{
    struct h2_session *s = arg;
    for (int i = 0; i < count; i++)
        s->output += iov[i].iov_len;
    s->out.write(s->out.arg, iov, count);
}

void h2_session_init(struct h2_session *s, const struct h2_session_conf *conf,
                     const struct h2_session_ops *ops, void *arg, const struct h2_sink *sink,
                     uint64_t now_ms)
{
    assert(conf->initial_window_size <= H2_MAX_WINDOW);
    assert(conf->conn_window_size >= H2_DEFAULT_WINDOW && conf->conn_window_size <= H2_MAX_WINDOW);
    *s = (struct h2_session){
        .sink = {session_write, s},
        .out = *sink,
        .ops = ops,
        .arg = arg,
        .conf = *conf,
        .now_ms = now_ms,
        .peer_initial_window = H2_DEFAULT_WINDOW,
        .peer_max_frame_size = H2_MIN_FRAME_SIZE,
        .peer_header_table_size = 4096,
        .peer_max_concurrent = UINT32_MAX,
        .peer_no_priorities = 2,
        .local_initial_window = H2_DEFAULT_WINDOW,
        .send_window = H2_DEFAULT_WINDOW,
        .recv_window = conf->conn_window_size,
        .floods_since_ms = now_ms,
        .resets_since_ms = now_ms,
        .frame_done_ms = now_ms,
        .wait_since_ms = now_ms,
    };
    assert(conf->scratch != NULL && conf->scratch_size > 0);
    h2_frame_reader_init(&s->reader, conf->max_header_list_size);
    hpack_decoder_init(&s->hpack, 4096);
    hpack_encoder_init(&s->hpack_out, conf->encoder_table_size);
    uint16_t ids[] = {H2_SETTINGS_INITIAL_WINDOW_SIZE, H2_SETTINGS_MAX_HEADER_LIST_SIZE,
                      H2_SETTINGS_ENABLE_PUSH, H2_SETTINGS_NO_RFC7540_PRIORITIES,
                      H2_SETTINGS_MAX_CONCURRENT_STREAMS};
    uint32_t values[] = {conf->initial_window_size, conf->max_header_list_size, 0, 1,
                         conf->max_concurrent_streams};
    size_t count = sizeof(ids) / sizeof(ids[0]);
    if (conf->client) {
        /* 3.4: the client's preface, and no server's to read.  A client
         * announces no stream limit: its server opens none. */
        static const struct iovec preface = {(void *)H2_PREFACE, H2_PREFACE_LEN};
        s->sink.write(s->sink.arg, &preface, 1);
        s->reader.preface_done = true;
        count--;
    }
    h2_frame_write_settings(&s->sink, ids, values, count);
    if (conf->conn_window_size > H2_DEFAULT_WINDOW)
        h2_frame_write_window_update(&s->sink, 0, conf->conn_window_size - H2_DEFAULT_WINDOW);
}

void h2_session_free(struct h2_session *s)
{
    hpack_decoder_free(&s->hpack);
    hpack_encoder_free(&s->hpack_out);
    free(s->streams);
    s->streams = NULL;
    s->stream_count = s->stream_cap = 0;
}

/* The client's SETTINGS (values checked by the reader). */
static void on_settings(struct h2_session *s, const struct h2_event *ev)
{
    if ((ev->hd.flags & H2_FLAG_ACK) != 0) {
        if (s->settings_acked) {
            conn_error(s, H2_PROTOCOL_ERROR, "SETTINGS ACK for no SETTINGS");
            return;
        }
        /* Our initial window applies from now on, to open streams too
         * (6.9.2); the reader's frame size stays the default we sent. */
        s->settings_acked = true;
        int64_t delta = (int64_t)s->conf.initial_window_size - s->local_initial_window;
        s->local_initial_window = s->conf.initial_window_size;
        for (uint32_t i = 0; i < s->stream_count; i++)
            s->streams[i].recv_window = (int32_t)(s->streams[i].recv_window + delta);
        return;
    }
    if (!flood(s, H2_SESSION_FLOOD_SETTINGS))
        return;
    for (size_t i = 0; i < ev->settings.count; i++) {
        uint16_t id;
        uint32_t v;
        h2_frame_setting(ev, i, &id, &v);
        switch (id) {
        case H2_SETTINGS_HEADER_TABLE_SIZE:
            /* The encoder's table shrinks at once, memory too (RFC 7541
             * 4.2); the next block tells the client. */
            s->peer_header_table_size = v;
            hpack_encoder_set_peer_size(&s->hpack_out, v);
            break;
        case H2_SETTINGS_MAX_CONCURRENT_STREAMS: s->peer_max_concurrent = v; break;
        case H2_SETTINGS_ENABLE_PUSH:
            /* 6.5.2: a server may only say 0. */
            if (s->conf.client && v != 0) {
                conn_error(s, H2_PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH from a server");
                return;
            }
            break;
        case H2_SETTINGS_MAX_FRAME_SIZE: s->peer_max_frame_size = v; break;
        case H2_SETTINGS_NO_RFC7540_PRIORITIES:
            /* RFC 9218 2.1: fixed by the first SETTINGS (the reader
             * checked it is 0 or 1); libnghttp2 refuses a change, and
             * takes a frame's last value as the one it sends. */
            for (size_t j = i + 1; j < ev->settings.count; j++) {
                uint16_t later;
                uint32_t lv;
                h2_frame_setting(ev, j, &later, &lv);
                if (later == id)
                    v = lv;
            }
            if (s->peer_no_priorities != 2 && s->peer_no_priorities != v) {
                conn_error(s, H2_PROTOCOL_ERROR, "SETTINGS_NO_RFC7540_PRIORITIES changed");
                return;
            }
            s->peer_no_priorities = (uint8_t)v;
            break;
        case H2_SETTINGS_INITIAL_WINDOW_SIZE: {
            /* 6.9.2: every stream's window moves by the change, and
             * none may pass 2^31-1. */
            int64_t delta = (int64_t)v - s->peer_initial_window;
            for (uint32_t j = 0; j < s->stream_count; j++) {
                if (s->streams[j].send_window + delta > H2_MAX_WINDOW) {
                    conn_error(s, H2_FLOW_CONTROL_ERROR, "SETTINGS window overflows a stream's");
                    return;
                }
            }
            for (uint32_t j = 0; j < s->stream_count; j++)
                s->streams[j].send_window = (int32_t)(s->streams[j].send_window + delta);
            s->peer_initial_window = v;
            if (delta > 0)
                for (uint32_t j = 0; j < s->stream_count; j++)
                    s->ops->window(s->arg, s->streams[j].id);
            break;
        }
        default: break;
        }
    }
    /* RFC 9218 2.1: the first SETTINGS fixes it, 0 if it said nothing. */
    if (s->peer_no_priorities == 2)
        s->peer_no_priorities = 0;
    h2_frame_write_settings_ack(&s->sink);
}

/* A DATA frame: its header, then its pieces.  The windows are charged
 * as its bytes arrive (libnghttp2 does the same), so a frame past a
 * window is refused at the byte that passes it. */
static void on_data(struct h2_session *s, const struct h2_event *ev)
{
    uint32_t id = ev->hd.stream_id;
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (ev->data.first) {
        s->data_stream = id;
        s->data_dropped = false;
        s->data_payload = 0;
        if (st == NULL && stream_idle(s, id)) {
            conn_error(s, H2_PROTOCOL_ERROR, "DATA on an idle stream");
            return;
        }
        /* After the client's END_STREAM: the connection's error, as
         * libnghttp2 makes it (5.1 allows the stream's); closed (it
         * crossed our end of it): dropped, its window given back. */
        if (st != NULL && st->state == H2_STREAM_HALF_CLOSED_REMOTE) {
            conn_error(s, H2_STREAM_CLOSED, "DATA after the stream's end");
            return;
        }
        /* Before any response head: the connection's error, as
         * libnghttp2's client makes it (after an interim head, the
         * stream's: h2_message_body_ok()). */
        if (st != NULL && st->msg.response && st->msg.status == 0) {
            conn_error(s, H2_PROTOCOL_ERROR, "DATA before the response's HEADERS");
            return;
        }
        s->data_dropped = st == NULL;
        return;
    }
    if (ev->data.flow > s->recv_window) {
        conn_error(s, H2_FLOW_CONTROL_ERROR, "DATA past the connection's window");
        return;
    }
    s->recv_window -= ev->data.flow;
    if (st == NULL)
        s->data_dropped = true; /* the caller reset it meanwhile */
    if (!s->data_dropped && ev->data.flow > (uint32_t)(st->recv_window > 0 ? st->recv_window : 0)) {
        s->data_dropped = true;
        stream_error(s, id, H2_FLOW_CONTROL_ERROR);
    }
    if (s->data_dropped) {
        /* What no stream takes goes back to the connection at once. */
        h2_session_consume(s, 0, ev->data.flow);
        return;
    }
    st->recv_window -= (int32_t)ev->data.flow;
    s->data_payload += ev->data.len;
    bool end = ev->data.last && (ev->hd.flags & H2_FLAG_END_STREAM) != 0;
    /* 8.1.1: more body than its content-length is malformed at once (the
     * rest of the frame dropped, its window given back); less, once the
     * stream ends, after the bytes that came. */
    st->body_received += ev->data.len;
    if (!h2_message_body_ok(&st->msg, st->body_received, false)) {
        s->data_dropped = true;
        stream_error(s, id, H2_PROTOCOL_ERROR);
        h2_session_consume(s, 0, ev->data.flow);
        return;
    }
    if (end && !h2_message_body_ok(&st->msg, st->body_received, true)) {
        s->data_dropped = true;
        if (ev->data.len > 0)
            s->ops->data(s->arg, id, ev->data.data, ev->data.len, false);
        stream_error(s, id, H2_PROTOCOL_ERROR);
        h2_session_consume(s, 0, ev->data.flow - ev->data.len);
        return;
    }
    if (ev->data.last && s->data_payload == 0 && !end && !flood(s, H2_SESSION_FLOOD_EMPTY))
        return;
    bool closes = end && st->state == H2_STREAM_HALF_CLOSED_LOCAL;
    if (end && !closes)
        st->state = H2_STREAM_HALF_CLOSED_REMOTE;
    if (closes)
        stream_forget(s, st);
    if (ev->data.len > 0 || end)
        s->ops->data(s->arg, id, ev->data.data, ev->data.len, end);
    /* Told after its last bytes. */
    if (closes && s->ops->closed != NULL)
        s->ops->closed(s->arg, id);
    /* The padding and the pad length byte: no one else consumes them. */
    if (ev->data.flow > ev->data.len)
        h2_session_consume(s, id, ev->data.flow - ev->data.len);
}

/* A header block being decoded. */
struct block {
    struct h2_session *s;
    uint32_t id;
    enum h2_block_kind kind;
    uint64_t list_size; /* RFC 9113 6.5.2, of the fields passed */
    bool malformed;     /* its stream is to be reset: nothing more passes */
    bool gone;          /* its stream was reset meanwhile: nothing passes */
    bool too_large;     /* past max_header_list_size: nothing more passes */
    bool cut;           /* a field longer than the scratch */
    uint32_t at;        /* where in s->streams its stream was last seen */
};

/* The block's stream: where it was for the last field, unless the array
 * moved (a callback may reset streams), else looked up again.  A scan of
 * every open stream for every field was a sixth of the request's decoding
 * at 32 streams. */
static struct h2_session_stream *block_field_stream(struct block *b)
{
    struct h2_session *s = b->s;
    if (b->at < s->stream_count && s->streams[b->at].id == b->id)
        return &s->streams[b->at];
    struct h2_session_stream *st = h2_session_stream(s, b->id);
    if (st != NULL)
        b->at = (uint32_t)(st - s->streams);
    return st;
}

/* A decoded field (hpack_field_fn): checked, counted, passed on. */
static int block_field(void *arg, const struct hpack_field *f)
{
    struct block *b = arg;
    struct h2_session *s = b->s;
    /* Plain strings are spans of the block, Huffman ones are bounded by
     * the scratch: one bound for both, as the daemon cuts a field. */
    if (f->name_len + f->value_len > s->conf.scratch_size) {
        b->cut = true;
        return 1;
    }
    if (b->kind == H2_BLOCK_DISCARD || b->malformed || b->gone)
        return 0;
    struct h2_session_stream *st = block_field_stream(b);
    if (st == NULL) { /* the caller reset it (which it may not here) */
        b->gone = true;
        return 0;
    }
    /* A field's bytes are checked once while it stays in the decoder's
     * table (the bytes of a request's fields were a third of their
     * checks): the entry is marked when they pass. */
    bool marked = hpack_decoder_marked(&s->hpack), bytes_ok = marked;
    enum h2_message_verdict verdict =
        h2_message_field(&st->msg, f, b->kind == H2_BLOCK_TRAILERS, &bytes_ok);
    if (bytes_ok && !marked)
        hpack_decoder_mark(&s->hpack);
    switch (verdict) {
    case H2_MESSAGE_MALFORMED:
        /* The rest is still decoded, for HPACK's table, and the stream
         * reset after: the caller's reset callback may send, and the
         * scratch must keep this field until it is indexed. */
        b->malformed = true;
        return 0;
    case H2_MESSAGE_DROP: return 0;
    case H2_MESSAGE_PASS: break;
    }
    /* Still checked past the limit: a malformed request is reset, not
     * answered 431, as the server's libnghttp2 did. */
    b->list_size += f->name_len + f->value_len + 32;
    if (b->list_size > s->conf.max_header_list_size)
        b->too_large = true;
    if (!b->too_large)
        s->ops->field(s->arg, b->id, b->kind, f);
    return 0;
}

/* A header block cut before its end (the reader's max_block, or a field
 * past the scratch): a request still open is told, so that it can be
 * answered 431 before the GOAWAY; HPACK's state is lost with the rest of
 * the block, so the connection ends. */
static void block_cut(struct h2_session *s, uint32_t id, enum h2_block_kind kind, const char *why)
{
    if (kind == H2_BLOCK_REQUEST && h2_session_stream(s, id) != NULL)
        s->ops->headers(s->arg, id, kind, H2_HEAD_CUT, false);
    /* A response's is the connection's end alone: its streams fail. */
    conn_error(s, H2_ENHANCE_YOUR_CALM, why);
}

/* Decodes a block, checks it, and tells the caller. */
static void block_decode(struct h2_session *s, uint32_t id, enum h2_block_kind kind,
                         const uint8_t *data, size_t len, bool end)
{
    /* A request's stream was added last, at the array's end. */
    struct block b = {.s = s, .id = id, .kind = kind, .at = s->stream_count - 1};
    enum hpack_result r = hpack_decode(&s->hpack, data, len, UINT64_MAX, s->conf.scratch,
                                       s->conf.scratch_size, block_field, &b);
    if (r == HPACK_TOO_LARGE || b.cut) {
        block_cut(s, id, b.malformed ? H2_BLOCK_DISCARD : kind, "a header field too long");
        return;
    }
    if (r != HPACK_OK) {
        conn_error(s, H2_COMPRESSION_ERROR, "header block does not decode");
        return;
    }
    if (b.malformed) {
        stream_error(s, id, H2_PROTOCOL_ERROR);
        return;
    }
    if (kind == H2_BLOCK_DISCARD || b.gone)
        return;
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (st == NULL)
        return;
    /* 8.1: trailers end the stream; 8.3.1 and 8.3.2: a head has its
     * pseudo-headers; 8.1.1: the body came whole (after a final head). */
    if ((kind == H2_BLOCK_TRAILERS && !end) ||
        (kind != H2_BLOCK_TRAILERS && !h2_message_head_end(&st->msg)) ||
        (end && !h2_message_body_ok(&st->msg, st->body_received, true))) {
        stream_error(s, id, H2_PROTOCOL_ERROR);
        return;
    }
    s->ops->headers(s->arg, id, kind, b.too_large ? H2_HEAD_TOO_LARGE : H2_HEAD_OK, end);
    st = h2_session_stream(s, id);
    if (st == NULL || !end)
        return; /* the caller reset it */
    if (st->state == H2_STREAM_HALF_CLOSED_LOCAL)
        stream_close(s, st);
    else
        st->state = H2_STREAM_HALF_CLOSED_REMOTE;
}

/* block_stream() for a client: a response head until the final one
 * came, then trailers. */
static bool block_stream_client(struct h2_session *s, uint32_t id, enum h2_block_kind *kind)
{
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (st != NULL) {
        if (st->state == H2_STREAM_HALF_CLOSED_REMOTE) {
            conn_error(s, H2_STREAM_CLOSED, "HEADERS after the stream's end");
            return false;
        }
        *kind = h2_message_final(&st->msg) ? H2_BLOCK_TRAILERS : H2_BLOCK_RESPONSE;
        return true;
    }
    if (stream_idle(s, id)) {
        conn_error(s, H2_PROTOCOL_ERROR, "HEADERS on a stream the client did not open");
        return false;
    }
    /* Closed: reset by this side (a response the server sent before it
     * saw the reset), or ended; dropped, as libnghttp2's client drops
     * it, however many streams ago it closed. */
    *kind = H2_BLOCK_DISCARD;
    return true;
}

/* The stream a header block is for, opened if new; H2_BLOCK_DISCARD
 * when none takes it; false when the connection ended. */
static bool block_stream(struct h2_session *s, uint32_t id, enum h2_block_kind *kind)
{
    if (s->conf.client)
        return block_stream_client(s, id, kind);
    *kind = H2_BLOCK_REQUEST;
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (id % 2 == 0) {
        conn_error(s, H2_PROTOCOL_ERROR, "HEADERS on a stream id a client may not use");
        return false;
    }
    if (st != NULL) {
        if (st->state == H2_STREAM_HALF_CLOSED_REMOTE) {
            conn_error(s, H2_STREAM_CLOSED, "HEADERS after the stream's end");
            return false;
        }
        *kind = H2_BLOCK_TRAILERS;
        return true;
    }
    if (id <= s->last_stream_id) {
        if (!was_reset(s, id)) {
            conn_error(s, H2_PROTOCOL_ERROR, "HEADERS on a closed stream");
            return false;
        }
        *kind = H2_BLOCK_DISCARD;
        return true;
    }
    s->last_stream_id = id;
    if (s->goaway_sent && id > s->goaway_last_id) {
        *kind = H2_BLOCK_DISCARD;
    } else if (s->stream_count >= s->conf.max_concurrent_streams) {
        /* Refused (8.7: the client may retry it), and counted with the
         * resets: refusing costs the server as a reset does. */
        *kind = H2_BLOCK_DISCARD;
        h2_frame_write_rst_stream(&s->sink, id, H2_REFUSED_STREAM);
        remember_reset(s, id);
        if (s->ops->refused != NULL)
            s->ops->refused(s->arg, id);
        if (!count_reset(s))
            return false;
    } else if (stream_add(s, id) == NULL) {
        conn_error(s, H2_INTERNAL_ERROR, "out of memory");
        return false;
    }
    return true;
}

static void on_headers(struct h2_session *s, const struct h2_event *ev)
{
    uint32_t id = ev->hd.stream_id;
    bool end = (ev->hd.flags & H2_FLAG_END_STREAM) != 0;
    for (unsigned i = 0; i < ev->headers.empty_frames; i++)
        if (!flood(s, H2_SESSION_FLOOD_EMPTY))
            return;
    if (ev->headers.len == 0 && !end && !flood(s, H2_SESSION_FLOOD_EMPTY))
        return;
    enum h2_block_kind kind;
    if (block_stream(s, id, &kind))
        block_decode(s, id, kind, ev->headers.block, ev->headers.len, end);
}

static void on_rst_stream(struct h2_session *s, const struct h2_event *ev)
{
    uint32_t id = ev->hd.stream_id;
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (st == NULL && stream_idle(s, id)) {
        conn_error(s, H2_PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        return;
    }
    if (!count_reset(s))
        return;
    if (st != NULL) {
        stream_forget(s, st);
        s->ops->reset(s->arg, id, ev->code, true);
    }
}

static void on_window_update(struct h2_session *s, const struct h2_event *ev)
{
    uint32_t id = ev->hd.stream_id;
    /* A client opens windows as it is sent data, not faster. */
    if (++s->window_updates >
        H2_SESSION_WINDOW_UPDATES_BASE + H2_SESSION_WINDOW_UPDATES_PER * s->data_frames_sent) {
        conn_error(s, H2_ENHANCE_YOUR_CALM, "window_update_flood");
        return;
    }
    if (id == 0) {
        if (s->send_window + ev->increment > H2_MAX_WINDOW) {
            conn_error(s, H2_FLOW_CONTROL_ERROR, "connection window past 2^31-1");
            return;
        }
        s->send_window += ev->increment;
        s->ops->window(s->arg, 0);
        return;
    }
    struct h2_session_stream *st = h2_session_stream(s, id);
    if (st == NULL) {
        if (stream_idle(s, id))
            conn_error(s, H2_PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
        return; /* closed: it crossed our end of it */
    }
    if ((int64_t)st->send_window + ev->increment > H2_MAX_WINDOW) {
        stream_error(s, id, H2_FLOW_CONTROL_ERROR);
        return;
    }
    st->send_window += (int32_t)ev->increment;
    s->ops->window(s->arg, id);
}

static void on_goaway(struct h2_session *s, const struct h2_event *ev)
{
    uint32_t last = ev->goaway.last_stream_id;
    /* It names a stream this side may open (5.1.1: even for a server,
     * odd for a client, or 0), and never a higher one than before (6.8). */
    if ((last != 0 && last % 2 != (s->conf.client ? 1u : 0u)) ||
        (s->goaway_received && last > s->peer_goaway_last_id)) {
        conn_error(s, H2_PROTOCOL_ERROR, "GOAWAY naming a stream it may not");
        return;
    }
    s->goaway_received = true;
    s->peer_goaway_last_id = last;
    if (s->ops->goaway != NULL)
        s->ops->goaway(s->arg, last, ev->goaway.code);
    /* 6.8: the server did nothing with the streams above `last`: they end
     * as refused (the caller may send them again), as libnghttp2 ends
     * them.  One at a time, from the start: the callback may reset
     * others. */
    for (bool found = true; found && s->error == H2_NO_ERROR;) {
        found = false;
        for (uint32_t i = 0; i < s->stream_count; i++) {
            uint32_t id = s->streams[i].id;
            if (id > last && id % 2 == 1 && s->conf.client) {
                stream_forget(s, &s->streams[i]);
                s->ops->reset(s->arg, id, H2_REFUSED_STREAM, true);
                found = true;
                break;
            }
        }
    }
}

/* The reader's events (h2_event_fn); nonzero once the connection ended. */
static int on_event(void *arg, const struct h2_event *ev)
{
    struct h2_session *s = arg;
    switch (ev->kind) {
    case H2_EV_DATA: on_data(s, ev); break;
    case H2_EV_HEADERS: on_headers(s, ev); break;
    case H2_EV_PRIORITY: /* ignored (5.3.2): costs the client a frame */
        flood(s, H2_SESSION_FLOOD_EMPTY);
        break;
    case H2_EV_RST_STREAM: on_rst_stream(s, ev); break;
    case H2_EV_SETTINGS: on_settings(s, ev); break;
    case H2_EV_PING:
        if ((ev->hd.flags & H2_FLAG_ACK) != 0) {
            /* The answer to the stop's PING (or to none: any answer
             * comes after the notice was read): every stream opened
             * before it is in. */
            if (s->shutdown_notice)
                h2_session_goaway(s, H2_NO_ERROR);
            if (s->ops->ping_ack != NULL)
                s->ops->ping_ack(s->arg, ev->ping);
        } else if (flood(s, H2_SESSION_FLOOD_PING)) {
            h2_frame_write_ping(&s->sink, ev->ping, true);
        }
        break;
    case H2_EV_GOAWAY: on_goaway(s, ev); break;
    case H2_EV_WINDOW_UPDATE: on_window_update(s, ev); break;
    case H2_EV_STREAM_ERROR: {
        uint32_t id = ev->hd.stream_id;
        if (h2_session_stream(s, id) != NULL)
            stream_error(s, id, (enum h2_error)ev->code);
        else if (stream_idle(s, id))
            conn_error(s, H2_PROTOCOL_ERROR, "frame on an idle stream");
        break;
    }
    case H2_EV_UNKNOWN: break;
    }
    return s->error != H2_NO_ERROR;
}

size_t h2_session_recv(struct h2_session *s, const uint8_t *in, size_t len, uint64_t now_ms)
{
    if (s->error != H2_NO_ERROR)
        return 0;
    s->now_ms = now_ms;
    uint8_t wait = s->reader.wait;
    uint32_t frames = s->reader.frames;
    struct h2_frame_error err;
    size_t n = h2_frame_read(&s->reader, in, len, on_event, s, &err);
    /* What waits began with this read if nothing waited before, or if a
     * frame ended in it (the frame that waited then is gone). */
    if (s->reader.frames != frames)
        s->frame_done_ms = now_ms;
    if (s->reader.wait != H2_WAIT_NONE && (wait == H2_WAIT_NONE || s->reader.frames != frames))
        s->wait_since_ms = now_ms;
    uint32_t id = err.stream_id;
    if (err.code != H2_NO_ERROR && err.block_cut && s->error == H2_NO_ERROR && !s->conf.client &&
        id % 2 == 1 && id > s->last_stream_id && !s->goaway_sent &&
        s->stream_count < s->conf.max_concurrent_streams) {
        /* A request the block would have opened opens, so that it can be
         * answered before the GOAWAY; any other block's cut is the
         * connection's end alone, with the reader's code. */
        s->last_stream_id = id;
        if (stream_add(s, id) != NULL)
            block_cut(s, id, H2_BLOCK_REQUEST, err.why);
    }
    if (err.code != H2_NO_ERROR)
        conn_error(s, err.code, err.why);
    return n;
}

void h2_session_consume_stream(struct h2_session *s, uint32_t stream_id, size_t n)
{
    if (n == 0 || s->error != H2_NO_ERROR)
        return;
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->state == H2_STREAM_HALF_CLOSED_REMOTE)
        return; /* the client sends it nothing more */
    st->recv_unacked += (uint32_t)n;
    if (st->recv_unacked >= s->local_initial_window / 2) {
        h2_frame_write_window_update(&s->sink, stream_id, st->recv_unacked);
        st->recv_window += (int32_t)st->recv_unacked;
        st->recv_unacked = 0;
    }
}

void h2_session_consume(struct h2_session *s, uint32_t stream_id, size_t n)
{
    if (n == 0 || s->error != H2_NO_ERROR)
        return;
    if (stream_id != 0)
        h2_session_consume_stream(s, stream_id, n);
    s->recv_unacked += (uint32_t)n;
    if (s->recv_unacked >= s->conf.conn_window_size / 2) {
        h2_frame_write_window_update(&s->sink, 0, s->recv_unacked);
        s->recv_window += s->recv_unacked;
        s->recv_unacked = 0;
    }
}

size_t h2_session_send_window(const struct h2_session *s, uint32_t stream_id)
{
    const struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->state == H2_STREAM_HALF_CLOSED_LOCAL || s->error != H2_NO_ERROR)
        return 0;
    int64_t w = st->send_window < s->send_window ? st->send_window : s->send_window;
    if (w <= 0)
        return 0;
    if (s->conf.max_output > 0) {
        size_t room = s->output < s->conf.max_output ? s->conf.max_output - s->output : 0;
        if ((uint64_t)w > room)
            return room;
    }
    return (size_t)w;
}

/* This side ended its half. */
static void end_local(struct h2_session *s, struct h2_session_stream *st)
{
    if (st->state == H2_STREAM_HALF_CLOSED_REMOTE)
        stream_close(s, st);
    else
        st->state = H2_STREAM_HALF_CLOSED_LOCAL;
}

int h2_session_send_headers(struct h2_session *s, uint32_t stream_id, const uint8_t *block,
                            size_t len, bool end_stream)
{
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->state == H2_STREAM_HALF_CLOSED_LOCAL || s->error != H2_NO_ERROR)
        return -1;
    h2_frame_write_headers(&s->sink, stream_id, block, len, end_stream, s->peer_max_frame_size);
    if (end_stream)
        end_local(s, st);
    return 0;
}

int h2_session_send_fields(struct h2_session *s, uint32_t stream_id,
                           const struct hpack_field *fields, const uint8_t *how, size_t n,
                           bool end_stream)
{
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->state == H2_STREAM_HALF_CLOSED_LOCAL || s->error != H2_NO_ERROR)
        return -1;
    /* No buffer of the session's own: the worker's scratch, which no
     * block is being decoded into now, or one for this call. */
    size_t bound = hpack_encode_bound(fields, n);
    uint8_t *block = bound <= s->conf.scratch_size ? s->conf.scratch : malloc(bound);
    if (block == NULL)
        return -1;
    size_t len = hpack_encode(&s->hpack_out, fields, how, n, block);
    int rc = h2_session_send_headers(s, stream_id, block, len, end_stream);
    if (block != s->conf.scratch)
        free(block);
    return rc;
}

uint32_t h2_session_request(struct h2_session *s, const struct hpack_field *fields,
                            const uint8_t *how, size_t n, bool end_stream, bool head)
{
    assert(s->conf.client);
    if (s->error != H2_NO_ERROR || s->goaway_sent || s->goaway_received ||
        s->stream_count >= s->peer_max_concurrent || s->local_last_id >= H2_SESSION_LAST_STREAM_ID)
        return 0;
    /* 5.1.1: the next odd id, each above every one before. */
    uint32_t id = s->local_last_id + (s->local_last_id == 0 ? 1 : 2);
    struct h2_session_stream *st = stream_add(s, id);
    if (st == NULL)
        return 0;
    h2_message_begin_response(&st->msg, head);
    s->local_last_id = id;
    if (h2_session_send_fields(s, id, fields, how, n, end_stream) != 0) {
        /* Nothing went: the id stays used, the stream forgotten. */
        stream_forget(s, h2_session_stream(s, id));
        return 0;
    }
    return id;
}

void h2_session_want_send(struct h2_session *s, uint32_t stream_id, bool want)
{
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->wants_send == want)
        return;
    st->wants_send = want;
    if (want)
        s->senders++;
    else
        s->senders--;
}

uint32_t h2_session_next_sender(struct h2_session *s)
{
    /* h2_session_send_window() for each stream, without its lookup: the
     * connection's share once, then each stream's own window. */
    if (s->senders == 0 || s->error != H2_NO_ERROR || s->send_window <= 0 ||
        (s->conf.max_output > 0 && s->output >= s->conf.max_output))
        return 0;
    /* The smallest id past the last one given, else the smallest of all:
     * the array's order changes as streams go, ids do not. */
    uint32_t after = 0, first = 0;
    for (uint32_t i = 0; i < s->stream_count; i++) {
        const struct h2_session_stream *st = &s->streams[i];
        if (!st->wants_send || st->state == H2_STREAM_HALF_CLOSED_LOCAL || st->send_window <= 0)
            continue;
        if (first == 0 || st->id < first)
            first = st->id;
        if (st->id > s->sender_last && (after == 0 || st->id < after))
            after = st->id;
    }
    uint32_t next = after != 0 ? after : first;
    if (next != 0)
        s->sender_last = next;
    return next;
}

void h2_session_flushed(struct h2_session *s, size_t n)
{
    assert(n <= s->output);
    s->output -= n;
}

int h2_session_send_data(struct h2_session *s, uint32_t stream_id, const struct iovec *iov,
                         int count, bool end_stream)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += iov[i].iov_len;
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || st->state == H2_STREAM_HALF_CLOSED_LOCAL || s->error != H2_NO_ERROR ||
        total > h2_session_send_window(s, stream_id))
        return -1;
    st->send_window -= (int32_t)total;
    s->send_window -= (int64_t)total;
    s->data_frames_sent +=
        h2_frame_write_data(&s->sink, stream_id, iov, count, end_stream, s->peer_max_frame_size);
    if (end_stream)
        end_local(s, st);
    return 0;
}

void h2_session_reset(struct h2_session *s, uint32_t stream_id, enum h2_error code)
{
    struct h2_session_stream *st = h2_session_stream(s, stream_id);
    if (st == NULL || s->error != H2_NO_ERROR)
        return;
    h2_frame_write_rst_stream(&s->sink, stream_id, code);
    remember_reset(s, stream_id);
    stream_forget(s, st);
}

void h2_session_goaway(struct h2_session *s, enum h2_error code)
{
    if (s->error != H2_NO_ERROR)
        return;
    h2_frame_write_goaway(&s->sink, s->last_stream_id, code, NULL, 0);
    s->goaway_sent = true;
    s->goaway_last_id = s->last_stream_id;
    s->shutdown_notice = false;
    if (code != H2_NO_ERROR) {
        s->error = code;
        s->why = s->conf.client ? "closed by the client" : "closed by the server";
    }
}

void h2_session_shutdown(struct h2_session *s)
{
    if (s->error != H2_NO_ERROR || s->goaway_sent)
        return;
    /* The highest stream id: none is past it, so none the client already
     * sent is discarded (block_stream()). */
    h2_frame_write_goaway(&s->sink, H2_SESSION_LAST_STREAM_ID, H2_NO_ERROR, NULL, 0);
    s->goaway_sent = true;
    s->goaway_last_id = H2_SESSION_LAST_STREAM_ID;
    s->shutdown_notice = true;
    static const uint8_t opaque[8] = {0};
    h2_frame_write_ping(&s->sink, opaque, false);
}

bool h2_session_done(const struct h2_session *s)
{
    return s->error != H2_NO_ERROR ||
           (s->goaway_sent && !s->shutdown_notice && s->stream_count == 0);
}
