/*
 * h2_frame_read.c: the frame reader (h2_frame.h).  Every length, flag,
 * stream id and padding from the peer is checked against RFC 9113 4-6
 * before a byte of the payload is used.  Where the RFC allows a stream
 * error or a connection error, this reader ends the connection as
 * libnghttp2 1.52 does (its verdicts are what the daemon gives today and
 * what fuzz_h2_frame compares with); the one stream error it reports is
 * a WINDOW_UPDATE of 0 on a stream.
 */
#include "proto/http2/h2_frame.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void h2_frame_reader_init(struct h2_frame_reader *r, uint32_t max_block)
{
    *r = (struct h2_frame_reader){.max_frame_size = H2_MIN_FRAME_SIZE, .max_block = max_block};
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static struct h2_frame_header parse_header(const uint8_t *p)
{
    return (struct h2_frame_header){
        .length = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2],
        .type = p[3],
        .flags = p[4],
        .stream_id = get32(p + 5) & 0x7fffffff,
    };
}

static bool fail(struct h2_frame_error *err, enum h2_error code, const char *why)
{
    err->code = code;
    err->why = why;
    return false;
}

/* The bytes of a HEADERS frame before its fragment (6.2). */
static uint32_t headers_prefix(uint8_t flags)
{
    return ((flags & H2_FLAG_PADDED) != 0 ? 1u : 0u) + ((flags & H2_FLAG_PRIORITY) != 0 ? 5u : 0u);
}

/* The checks a frame's header alone allows, at once: so that a frame
 * too long, say, is refused before its payload is waited for.  Where a
 * frame breaks two rules, the one named is libnghttp2's: lengths first. */
static bool check_header(const struct h2_frame_reader *r, const struct h2_frame_header *hd,
                         struct h2_frame_error *err)
{
    if (!r->settings_seen && (hd->type != H2_SETTINGS || (hd->flags & H2_FLAG_ACK) != 0))
        return fail(err, H2_PROTOCOL_ERROR, "first frame is not SETTINGS");
    if (r->in_block && hd->type != H2_CONTINUATION)
        return fail(err, H2_PROTOCOL_ERROR, "frame inside a header block");
    if (r->in_block && hd->stream_id != r->block_stream)
        return fail(err, H2_PROTOCOL_ERROR, "CONTINUATION for another stream");
    if (hd->length > r->max_frame_size)
        return fail(err, H2_FRAME_SIZE_ERROR,
                    /* RFC 9113 4.2; libnghttp2 1.52 does not check
                     * CONTINUATION's: told apart for fuzz_h2_frame. */
                    hd->type == H2_CONTINUATION ? "CONTINUATION larger than SETTINGS_MAX_FRAME_SIZE"
                                                : "frame larger than SETTINGS_MAX_FRAME_SIZE");
    switch (hd->type) {
    case H2_DATA:
        if (hd->stream_id == 0)
            return fail(err, H2_PROTOCOL_ERROR, "DATA on stream 0");
        return true;
    case H2_HEADERS:
        /* As libnghttp2 names them: no room for the pad length is a
         * PROTOCOL_ERROR, none for the priority a FRAME_SIZE_ERROR; the
         * two together are checked once the pad length is read. */
        if ((hd->flags & H2_FLAG_PADDED) != 0 && hd->length < 1)
            return fail(err, H2_PROTOCOL_ERROR, "HEADERS too short for its padding");
        if ((hd->flags & H2_FLAG_PADDED) == 0 && hd->length < headers_prefix(hd->flags))
            return fail(err, H2_FRAME_SIZE_ERROR, "HEADERS too short");
        if (hd->length >= headers_prefix(hd->flags) &&
            hd->length - headers_prefix(hd->flags) > r->max_block) {
            err->block_cut = true;
            return fail(err, H2_ENHANCE_YOUR_CALM, "header block too long");
        }
        return true;
    case H2_PRIORITY:
        if (hd->length != 5)
            return fail(err, H2_FRAME_SIZE_ERROR, "PRIORITY of a wrong length");
        return true;
    case H2_RST_STREAM:
        if (hd->length != 4)
            return fail(err, H2_FRAME_SIZE_ERROR, "RST_STREAM of a wrong length");
        return true;
    case H2_SETTINGS:
        if ((hd->flags & H2_FLAG_ACK) != 0 && hd->length != 0)
            return fail(err, H2_FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
        if (hd->length % 6 != 0)
            return fail(err, H2_FRAME_SIZE_ERROR, "SETTINGS of a wrong length");
        if (hd->length / 6 > H2_MAX_SETTINGS_ENTRIES)
            return fail(err, H2_ENHANCE_YOUR_CALM, "too many settings");
        return true;
    case H2_PUSH_PROMISE:
        if (hd->length < ((hd->flags & H2_FLAG_PADDED) != 0 ? 5u : 4u))
            return fail(err, H2_FRAME_SIZE_ERROR, "PUSH_PROMISE too short");
        /* A client may not push (8.4), and a server may not when told
         * SETTINGS_ENABLE_PUSH 0, which ours are (6.5.2). */
        return fail(err, H2_PROTOCOL_ERROR, "PUSH_PROMISE, which no peer of ours may send");
    case H2_PING:
        if (hd->length != 8)
            return fail(err, H2_FRAME_SIZE_ERROR, "PING of a wrong length");
        return true;
    case H2_GOAWAY:
        if (hd->length < 8)
            return fail(err, H2_FRAME_SIZE_ERROR, "GOAWAY too short");
        return true;
    case H2_WINDOW_UPDATE:
        if (hd->length != 4)
            return fail(err, H2_FRAME_SIZE_ERROR, "WINDOW_UPDATE of a wrong length");
        return true;
    case H2_CONTINUATION:
        if (!r->in_block)
            return fail(err, H2_PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        if (r->block_continuations >= H2_MAX_CONTINUATIONS)
            return fail(err, H2_ENHANCE_YOUR_CALM, "header block in too many frames");
        if (hd->length > r->max_block - r->block_bytes) {
            err->block_cut = true;
            return fail(err, H2_ENHANCE_YOUR_CALM, "header block too long");
        }
        return true;
    default: return true;
    }
}

/* The stream id a whole frame may have (6.2-6.8): checked once its
 * payload is in, after its length, as libnghttp2 does. */
static bool check_stream_id(const struct h2_frame_header *hd, struct h2_frame_error *err)
{
    switch (hd->type) {
    case H2_HEADERS:
        return hd->stream_id != 0 || fail(err, H2_PROTOCOL_ERROR, "HEADERS on stream 0");
    case H2_PRIORITY:
        return hd->stream_id != 0 || fail(err, H2_PROTOCOL_ERROR, "PRIORITY on stream 0");
    case H2_RST_STREAM:
        return hd->stream_id != 0 || fail(err, H2_PROTOCOL_ERROR, "RST_STREAM on stream 0");
    case H2_SETTINGS:
        return hd->stream_id == 0 || fail(err, H2_PROTOCOL_ERROR, "SETTINGS on a stream");
    case H2_PING: return hd->stream_id == 0 || fail(err, H2_PROTOCOL_ERROR, "PING on a stream");
    case H2_GOAWAY: return hd->stream_id == 0 || fail(err, H2_PROTOCOL_ERROR, "GOAWAY on a stream");
    default: return true;
    }
}

/* The SETTINGS values 6.5.2 bounds. */
static bool check_settings(const uint8_t *p, uint32_t length, struct h2_frame_error *err)
{
    for (uint32_t i = 0; i < length; i += 6) {
        uint16_t id = (uint16_t)(p[i] << 8 | p[i + 1]);
        uint32_t v = get32(p + i + 2);
        switch (id) {
        case H2_SETTINGS_ENABLE_PUSH:
            if (v > 1)
                return fail(err, H2_PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1");
            break;
        case H2_SETTINGS_ENABLE_CONNECT_PROTOCOL: /* RFC 8441 3 */
        case H2_SETTINGS_NO_RFC7540_PRIORITIES:   /* RFC 9218 2.1 */
            if (v > 1)
                return fail(err, H2_PROTOCOL_ERROR, "an extension's boolean setting not 0 or 1");
            break;
        case H2_SETTINGS_INITIAL_WINDOW_SIZE:
            if (v > H2_MAX_WINDOW)
                return fail(err, H2_FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE too large");
            break;
        case H2_SETTINGS_MAX_FRAME_SIZE:
            if (v < H2_MIN_FRAME_SIZE || v > H2_MAX_FRAME_SIZE)
                return fail(err, H2_PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
            break;
        default: /* unknown settings are ignored (6.5.2) */ break;
        }
    }
    return true;
}

/* 1 for a frame of a header block that carries no fragment and does not
 * end the block. */
static uint8_t frag_empty(uint32_t frag_len, uint8_t flags)
{
    return frag_len == 0 && (flags & H2_FLAG_END_HEADERS) == 0 ? 1 : 0;
}

/* Walks the fragment of a header block's frame `p` (its header whole,
 * `avail` of its bytes in) with the HPACK scan, from where the walk of it
 * stopped before: a string announcing more than the block may hold cuts
 * the block at once, as the frame's or block's length over the limit
 * does at its header, instead of waiting for bytes that cannot pass. */
static bool scan_fragment(struct h2_frame_reader *r, const uint8_t *p, size_t avail,
                          struct h2_frame_error *err)
{
    struct h2_frame_header hd = parse_header(p);
    const uint8_t *payload = p + H2_FRAME_HEADER_LEN;
    size_t have = avail - H2_FRAME_HEADER_LEN;
    if (have > hd.length)
        have = hd.length;
    size_t from = 0, end = hd.length;
    if (hd.type == H2_HEADERS) {
        if (r->scan_done == 0)
            http2_hpack_scan_start(&r->scan); /* a block begins */
        from = headers_prefix(hd.flags);
        if ((hd.flags & H2_FLAG_PADDED) != 0) {
            if (have == 0)
                return true;
            /* Padding past the frame is refused once it is whole. */
            end = payload[0] <= hd.length - from ? hd.length - payload[0] : from;
        }
    }
    if (from < r->scan_done)
        from = r->scan_done;
    size_t to = have < end ? have : end;
    if (to <= from)
        return true;
    uint64_t bound = r->max_block < HTTP2_HPACK_MAX_STRING ? r->max_block : HTTP2_HPACK_MAX_STRING;
    bool too_long = false;
    size_t passed = http2_hpack_scan(&r->scan, bound, payload + from, to - from, &too_long);
    r->scan_done = (uint32_t)(from + passed);
    if (!too_long)
        return true;
    err->block_cut = true;
    return fail(err, H2_ENHANCE_YOUR_CALM, "a header field announced too long");
}

/* A header block whose last frame is in: its fragments joined (when it
 * spans frames) and passed on.  `p` is its HEADERS frame. */
static int emit_block(struct h2_frame_reader *r, const uint8_t *p, h2_event_fn fn, void *arg,
                      struct h2_frame_error *err)
{
    struct h2_frame_header hd = parse_header(p);
    uint32_t prefix = headers_prefix(hd.flags);
    uint32_t pad = (hd.flags & H2_FLAG_PADDED) != 0 ? p[H2_FRAME_HEADER_LEN] : 0;
    const uint8_t *frag = p + H2_FRAME_HEADER_LEN + prefix;
    size_t frag_len = hd.length - prefix - pad;
    struct h2_event ev = {.kind = H2_EV_HEADERS, .hd = hd};
    ev.hd.flags |= H2_FLAG_END_HEADERS;
    ev.headers.pad_bytes = pad + ((hd.flags & H2_FLAG_PADDED) != 0 ? 1u : 0u);
    ev.headers.continuations = r->block_continuations;
    ev.headers.empty_frames = r->block_empty;
    uint8_t *joined = NULL;
    if (r->block_continuations == 0) {
        ev.headers.block = frag;
        ev.headers.len = frag_len;
    } else {
        /* Fragments, bounded by max_block: the only copy this reader
         * makes, and only for the duration of the callback. */
        size_t total = r->block_bytes - pad;
        joined = malloc(total > 0 ? total : 1);
        if (joined == NULL) {
            fail(err, H2_INTERNAL_ERROR, "out of memory");
            return -1;
        }
        memcpy(joined, frag, frag_len);
        size_t n = frag_len;
        const uint8_t *q = p + H2_FRAME_HEADER_LEN + hd.length;
        for (unsigned i = 0; i < r->block_continuations; i++) {
            struct h2_frame_header c = parse_header(q);
            assert(n + c.length <= total);
            memcpy(joined + n, q + H2_FRAME_HEADER_LEN, c.length);
            n += c.length;
            q += H2_FRAME_HEADER_LEN + c.length;
        }
        assert(n == total);
        ev.headers.block = joined;
        ev.headers.len = n;
    }
    ev.hd.length = (uint32_t)ev.headers.len;
    int rc = fn(arg, &ev);
    free(joined);
    return rc;
}

static size_t read_frames(struct h2_frame_reader *r, const uint8_t *in, size_t len, h2_event_fn fn,
                          void *arg, struct h2_frame_error *err)
{
    size_t pos = 0;
    if (!r->preface_done) {
        size_t n = len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN;
        if (memcmp(in, H2_PREFACE, n) != 0) {
            fail(err, H2_PROTOCOL_ERROR, "no connection preface");
            return 0;
        }
        if (n < H2_PREFACE_LEN)
            return 0;
        r->preface_done = true;
        r->frames++;
        pos = H2_PREFACE_LEN;
    }
    for (;;) {
        if (r->in_data) {
            /* The pad length byte, DATA's payload as it arrived, then its
             * padding. */
            size_t pad_byte = 0;
            if (r->data_need_pad) {
                if (pos == len)
                    return pos;
                if (in[pos] >= r->data_left) {
                    fail(err, H2_PROTOCOL_ERROR, "DATA padding as long as the frame");
                    return pos;
                }
                r->data_pad = in[pos];
                r->data_need_pad = false;
                r->data_left--;
                pos++;
                pad_byte = 1;
            }
            size_t avail = len - pos;
            uint32_t body = r->data_left - r->data_pad;
            size_t n = avail < body ? avail : body;
            size_t padn = 0;
            if (n == body)
                padn = avail - n < r->data_pad ? avail - n : r->data_pad;
            bool last = n == body && padn == r->data_pad;
            int rc = 0;
            if (n > 0 || padn > 0 || pad_byte > 0 || last) {
                struct h2_event ev = {.kind = H2_EV_DATA,
                                      .hd = {.length = r->data_length,
                                             .type = H2_DATA,
                                             .flags = r->data_flags,
                                             .stream_id = r->data_stream}};
                ev.data.data = in + pos;
                ev.data.len = n;
                ev.data.flow = (uint32_t)(pad_byte + n + padn);
                ev.data.last = last;
                rc = fn(arg, &ev);
            }
            pos += n + padn;
            r->data_left -= (uint32_t)(n + padn);
            r->data_pad -= (uint32_t)padn;
            if (!last)
                return pos;
            r->in_data = false;
            r->frames++;
            if (rc != 0)
                return pos;
            continue;
        }
        size_t at = r->in_block ? pos + r->block_seen : pos;
        if (len - at < H2_FRAME_HEADER_LEN)
            return pos;
        const uint8_t *p = in + at;
        struct h2_frame_header hd = parse_header(p);
        if (!check_header(r, &hd, err)) {
            err->stream_id = hd.stream_id;
            return pos;
        }
        if (hd.type == H2_DATA) {
            /* Its header is consumed at once, and told first: the stream's
             * state is checked before the padding, as libnghttp2 does. */
            r->in_data = true;
            r->data_need_pad = (hd.flags & H2_FLAG_PADDED) != 0;
            r->data_flags = hd.flags;
            r->data_stream = hd.stream_id;
            r->data_length = hd.length;
            r->data_left = hd.length;
            r->data_pad = 0;
            pos = at + H2_FRAME_HEADER_LEN;
            struct h2_event ev = {.kind = H2_EV_DATA, .hd = hd};
            ev.data.data = in + pos;
            ev.data.first = true;
            if (fn(arg, &ev) != 0)
                return pos;
            if (r->data_need_pad && hd.length < 1) { /* as libnghttp2 says */
                fail(err, H2_PROTOCOL_ERROR, "DATA too short for its padding");
                return pos;
            }
            continue;
        }
        if ((hd.type == H2_HEADERS || hd.type == H2_CONTINUATION) &&
            !scan_fragment(r, p, len - at, err)) {
            err->stream_id = hd.stream_id;
            return pos;
        }
        if (len - at < H2_FRAME_HEADER_LEN + (size_t)hd.length)
            return pos; /* the rest of the frame is still to come */
        if (hd.type == H2_HEADERS || hd.type == H2_CONTINUATION)
            r->scan_done = 0; /* walked whole: the next frame's turn */
        if (!check_stream_id(&hd, err))
            return pos;
        const uint8_t *payload = p + H2_FRAME_HEADER_LEN;
        size_t next = at + H2_FRAME_HEADER_LEN + hd.length;
        struct h2_event ev = {.hd = hd};
        switch (hd.type) {
        case H2_HEADERS: {
            uint32_t prefix = headers_prefix(hd.flags);
            uint32_t pad = (hd.flags & H2_FLAG_PADDED) != 0 ? payload[0] : 0;
            if (hd.length < prefix || pad > hd.length - prefix) {
                fail(err, H2_PROTOCOL_ERROR, "HEADERS padding longer than the frame");
                return pos;
            }
            if ((hd.flags & H2_FLAG_PRIORITY) != 0) {
                const uint8_t *pri = payload + ((hd.flags & H2_FLAG_PADDED) != 0 ? 1 : 0);
                if ((get32(pri) & 0x7fffffff) == hd.stream_id) {
                    fail(err, H2_PROTOCOL_ERROR, "HEADERS: stream depends on itself");
                    return pos;
                }
            }
            r->block_bytes = hd.length - prefix;
            r->block_continuations = 0;
            r->block_empty = frag_empty(hd.length - prefix - pad, hd.flags);
            r->block_stream = hd.stream_id;
            if ((hd.flags & H2_FLAG_END_HEADERS) == 0) {
                r->in_block = true;
                r->block_seen = H2_FRAME_HEADER_LEN + hd.length;
                continue;
            }
            int rc = emit_block(r, p, fn, arg, err);
            if (rc < 0)
                return pos;
            pos = next;
            r->frames++;
            if (rc != 0)
                return pos;
            continue;
        }
        case H2_CONTINUATION: {
            r->block_continuations++;
            r->block_empty = (uint8_t)(r->block_empty + frag_empty(hd.length, hd.flags));
            r->block_bytes += hd.length;
            r->block_seen += H2_FRAME_HEADER_LEN + hd.length;
            if ((hd.flags & H2_FLAG_END_HEADERS) == 0)
                continue;
            int rc = emit_block(r, in + pos, fn, arg, err);
            if (rc < 0)
                return pos;
            r->in_block = false;
            r->block_seen = 0;
            pos = next;
            r->frames++;
            if (rc != 0)
                return pos;
            continue;
        }
        case H2_PRIORITY:
            if ((get32(payload) & 0x7fffffff) == hd.stream_id) {
                fail(err, H2_PROTOCOL_ERROR, "PRIORITY: stream depends on itself");
                return pos;
            }
            ev.kind = H2_EV_PRIORITY;
            break;
        case H2_RST_STREAM:
            ev.kind = H2_EV_RST_STREAM;
            ev.code = get32(payload);
            break;
        case H2_SETTINGS:
            if (!check_settings(payload, hd.length, err))
                return pos;
            r->settings_seen = true;
            ev.kind = H2_EV_SETTINGS;
            ev.settings.entries = payload;
            ev.settings.count = hd.length / 6;
            break;
        case H2_PING:
            ev.kind = H2_EV_PING;
            memcpy(ev.ping, payload, 8);
            break;
        case H2_GOAWAY:
            ev.kind = H2_EV_GOAWAY;
            ev.goaway.last_stream_id = get32(payload) & 0x7fffffff;
            ev.goaway.code = get32(payload + 4);
            ev.goaway.debug = payload + 8;
            ev.goaway.debug_len = hd.length - 8;
            break;
        case H2_WINDOW_UPDATE:
            ev.increment = get32(payload) & 0x7fffffff;
            if (ev.increment == 0 && hd.stream_id == 0) {
                fail(err, H2_PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
                return pos;
            }
            ev.kind = ev.increment == 0 ? H2_EV_STREAM_ERROR : H2_EV_WINDOW_UPDATE;
            if (ev.increment == 0)
                ev.code = H2_PROTOCOL_ERROR;
            break;
        default: ev.kind = H2_EV_UNKNOWN; break;
        }
        pos = next;
        r->frames++;
        if (fn(arg, &ev) != 0)
            return pos;
    }
}

/* What the input holds past `pos`, the bytes consumed (enum h2_wait). */
static uint8_t waiting(const struct h2_frame_reader *r, const uint8_t *in, size_t len, size_t pos)
{
    if (!r->preface_done)
        return len > 0 ? H2_WAIT_PAYLOAD : H2_WAIT_NONE;
    if (r->in_data)
        return H2_WAIT_PAYLOAD;
    if (r->in_block)
        return H2_WAIT_BLOCK;
    if (len == pos)
        return H2_WAIT_NONE;
    if (len - pos < H2_FRAME_HEADER_LEN)
        return H2_WAIT_HEADER;
    /* A whole frame header whose frame is not: a HEADERS frame begins a
     * block whether or not it ends it. */
    return in[pos + 3] == H2_HEADERS ? H2_WAIT_BLOCK : H2_WAIT_PAYLOAD;
}

size_t h2_frame_read(struct h2_frame_reader *r, const uint8_t *in, size_t len, h2_event_fn fn,
                     void *arg, struct h2_frame_error *err)
{
    *err = (struct h2_frame_error){0};
    size_t pos = read_frames(r, in, len, fn, arg, err);
    r->wait = err->code == H2_NO_ERROR ? waiting(r, in, len, pos) : H2_WAIT_NONE;
    return pos;
}
