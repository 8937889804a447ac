/*
 * h2_frame.h: HTTP/2 frames (RFC 9113 4-6) read from a connection's input
 * and written into its output, without sockets and without a frame
 * buffer of their own: the HTTP/2 server's framing (through
 * h2_session.h); libnghttp2 is the oracle this layer is tested against
 * (tests/fuzz/fuzz_h2_frame.c).
 *
 * Reading: h2_frame_read() takes the connection's unconsumed input and
 * consumes whole frames only, except DATA, whose payload passes in the
 * pieces that arrived.  A header block (HEADERS and its CONTINUATION
 * frames) stays unconsumed in the input until its last frame is there;
 * the reader keeps only how far it checked it.  So between reads it holds
 * a few words of state, never a frame's bytes.
 *
 * Writing: h2_frame_write_*() hand each frame to a sink as a gather list:
 * the frame header and small payloads from the caller's stack, DATA's
 * payload as the caller's own buffers.  The daemon's sink is
 * corral_conn_writev(), which copies small writes into the connection's
 * pooled output buffers and sends large ones from where they are.
 *
 * Ownership: the caller owns the reader; it holds no heap memory.  One
 * connection's reader is used by one thread.
 */
#ifndef CORRAL_PROTO_HTTP2_H2_FRAME_H
#define CORRAL_PROTO_HTTP2_H2_FRAME_H

#include "proto/http2/http2_hpack_scan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* RFC 9113 4.1. */
#define H2_FRAME_HEADER_LEN 9
/* RFC 9113 3.4: the client's connection preface. */
#define H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
/* RFC 9113 6.5.2: SETTINGS_MAX_FRAME_SIZE's range, and its default. */
#define H2_MIN_FRAME_SIZE 16384u
#define H2_MAX_FRAME_SIZE 16777215u
/* The largest flow-control window (RFC 9113 6.9.1), and the default. */
#define H2_MAX_WINDOW     0x7fffffffu
#define H2_DEFAULT_WINDOW 65535u
/* More CONTINUATION frames than this in one header block end the
 * connection (CVE-2024-27316), as the server set libnghttp2's. */
#define H2_MAX_CONTINUATIONS 8
/* More entries than this in one SETTINGS frame end the connection, as
 * the server set libnghttp2's (nghttp2_option_set_max_settings). */
#define H2_MAX_SETTINGS_ENTRIES 32

enum h2_frame_type {
    H2_DATA = 0x0,
    H2_HEADERS = 0x1,
    H2_PRIORITY = 0x2,
    H2_RST_STREAM = 0x3,
    H2_SETTINGS = 0x4,
    H2_PUSH_PROMISE = 0x5,
    H2_PING = 0x6,
    H2_GOAWAY = 0x7,
    H2_WINDOW_UPDATE = 0x8,
    H2_CONTINUATION = 0x9,
};

#define H2_FLAG_END_STREAM  0x01
#define H2_FLAG_ACK         0x01
#define H2_FLAG_END_HEADERS 0x04
#define H2_FLAG_PADDED      0x08
#define H2_FLAG_PRIORITY    0x20

/* RFC 9113 7. */
enum h2_error {
    H2_NO_ERROR = 0x0,
    H2_PROTOCOL_ERROR = 0x1,
    H2_INTERNAL_ERROR = 0x2,
    H2_FLOW_CONTROL_ERROR = 0x3,
    H2_SETTINGS_TIMEOUT = 0x4,
    H2_STREAM_CLOSED = 0x5,
    H2_FRAME_SIZE_ERROR = 0x6,
    H2_REFUSED_STREAM = 0x7,
    H2_CANCEL = 0x8,
    H2_COMPRESSION_ERROR = 0x9,
    H2_CONNECT_ERROR = 0xa,
    H2_ENHANCE_YOUR_CALM = 0xb,
    H2_INADEQUATE_SECURITY = 0xc,
    H2_HTTP_1_1_REQUIRED = 0xd,
};

/* RFC 9113 6.5.2, RFC 8441 3, RFC 9218 2.1. */
enum h2_setting_id {
    H2_SETTINGS_HEADER_TABLE_SIZE = 0x1,
    H2_SETTINGS_ENABLE_PUSH = 0x2,
    H2_SETTINGS_MAX_CONCURRENT_STREAMS = 0x3,
    H2_SETTINGS_INITIAL_WINDOW_SIZE = 0x4,
    H2_SETTINGS_MAX_FRAME_SIZE = 0x5,
    H2_SETTINGS_MAX_HEADER_LIST_SIZE = 0x6,
    H2_SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x8,
    H2_SETTINGS_NO_RFC7540_PRIORITIES = 0x9,
};

struct h2_frame_header {
    uint32_t length; /* 24 bits */
    uint8_t type;
    uint8_t flags;
    uint32_t stream_id; /* 31 bits: the reserved bit dropped (4.1) */
};

/* What the reader found, passed to the caller's callback in order. */
enum h2_event_kind {
    H2_EV_DATA,       /* a piece of a DATA frame's payload (maybe empty) */
    H2_EV_HEADERS,    /* a whole header block: HEADERS + CONTINUATION */
    H2_EV_PRIORITY,   /* valid, and ignored (RFC 9113 5.3.2) */
    H2_EV_RST_STREAM, /* .code */
    H2_EV_SETTINGS,   /* .settings: entries checked, or an ACK */
    H2_EV_PING,       /* .ping */
    H2_EV_GOAWAY,     /* .goaway */
    H2_EV_WINDOW_UPDATE /* .increment, not 0 */,
    H2_EV_UNKNOWN,      /* a frame of a type not defined, skipped (5.5) */
    H2_EV_STREAM_ERROR, /* a frame that is a stream error (5.4.2): .code */
};

struct h2_event {
    enum h2_event_kind kind;
    struct h2_frame_header hd; /* HEADERS: the HEADERS frame's, END_HEADERS set,
                                * length the block's */
    union {
        struct {
            const uint8_t *data;
            size_t len;
            /* The frame's bytes this piece passed (pad length byte and
             * padding included): what counts against the windows. */
            uint32_t flow;
            /* The frame's header, before any of its payload (no bytes, no
             * flow): its stream can be checked before its padding. */
            bool first;
            bool last; /* the frame ends with this piece */
        } data;
        struct {
            const uint8_t *block; /* valid during the callback only */
            size_t len;
            uint32_t pad_bytes; /* padding and pad length bytes, every frame's */
            uint8_t continuations;
            /* Frames of the block with no fragment that did not end it
             * (for the empty-frame flood defence). */
            uint8_t empty_frames;
        } headers;
        uint32_t code;
        struct {
            const uint8_t *entries; /* 6 bytes each, values checked (6.5.2) */
            size_t count;
        } settings;
        uint8_t ping[8];
        struct {
            uint32_t last_stream_id;
            uint32_t code;
            const uint8_t *debug;
            size_t debug_len;
        } goaway;
        uint32_t increment;
    };
};

/* A connection error: the connection must end with GOAWAY `code`. */
struct h2_frame_error {
    enum h2_error code; /* H2_NO_ERROR: none */
    const char *why;    /* what the peer did, for the log */
    /* Set for an error found in a frame's header: its stream. */
    uint32_t stream_id;
    /* A header block over max_block, cut before its end: the request it
     * opens may be answered (431) before the GOAWAY. */
    bool block_cut;
};

/* What waits at the front of the unconsumed input after a read: what a
 * caller's timers need (a frame header left unfinished, a header block
 * begun and not ended), which the input's length alone does not say. */
enum h2_wait {
    H2_WAIT_NONE,    /* nothing: the input ends where a frame ends */
    H2_WAIT_HEADER,  /* a frame header, not all of its 9 bytes in */
    H2_WAIT_PAYLOAD, /* a frame's payload (DATA's included), or the preface */
    H2_WAIT_BLOCK,   /* a header block: its HEADERS frame's header is in,
                      * its last frame (END_HEADERS) not yet */
};

/* Receives each event; nonzero stops the reading after this event. */
typedef int (*h2_event_fn)(void *arg, const struct h2_event *ev);

struct h2_frame_reader {
    uint32_t max_frame_size; /* ours: SETTINGS_MAX_FRAME_SIZE as announced */
    uint32_t max_block;      /* a header block's bytes past this are cut */
    bool preface_done;       /* the 24 bytes of H2_PREFACE were read */
    bool settings_seen;      /* the first frame, a SETTINGS, was read */
    bool in_data;            /* inside a DATA frame's payload: */
    bool data_need_pad;      /* its pad length byte is next */
    uint8_t data_flags;
    uint32_t data_stream;
    uint32_t data_length;  /* the frame's */
    uint32_t data_left;    /* its payload bytes still to come, padding included */
    uint32_t data_pad;     /* of them, padding at the end */
    bool in_block;         /* a header block is open: its frames sit at the
                            * front of the unconsumed input */
    uint32_t block_stream; /* its stream */
    uint32_t block_seen;   /* bytes of input (its frames) checked so far */
    uint32_t block_bytes;  /* its fragments and padding so far */
    uint8_t block_continuations;
    uint8_t block_empty; /* its frames that carried nothing, so far */
    /* The walk over the block's HPACK strings (http2_hpack_scan()), and
     * how far into the payload of the block's frame at the front of the
     * unchecked input it went: so that a string announced longer than
     * the block may be is refused at its length, not waited for. */
    struct http2_hpack_scan scan;
    uint32_t scan_done;
    uint8_t wait;    /* enum h2_wait, as the last read left the input */
    uint32_t frames; /* frames consumed whole, ever (wraps); the preface counts */
};

/* A reader expecting the client's connection preface, then SETTINGS;
 * `max_block` bounds a header block's fragments and padding (the
 * configured header-list size: RFC 9113 6.5.2 counts no field smaller
 * than HPACK encodes it, so a block over it is a list over it), and the
 * length an HPACK string in it may announce (HTTP2_HPACK_MAX_STRING at
 * most): past either, the block is cut (h2_frame_error.block_cut) as
 * soon as the bytes that say so are in. */
void h2_frame_reader_init(struct h2_frame_reader *r, uint32_t max_block);

/* Reads the frames in `in` (all of the connection's unconsumed input),
 * passing each event to `fn`.  Returns the bytes consumed: whole frames,
 * DATA payload pieces, never part of a header block; the caller presents
 * the rest again with more.  A connection error sets *err (code not
 * H2_NO_ERROR) and stops the reading: nothing after it may be read.
 * After each read r->wait says what the unconsumed rest begins, and
 * r->frames has counted the frames it consumed whole. */
size_t h2_frame_read(struct h2_frame_reader *r, const uint8_t *in, size_t len, h2_event_fn fn,
                     void *arg, struct h2_frame_error *err);

/* The setting `i` of a SETTINGS event. */
static inline void h2_frame_setting(const struct h2_event *ev, size_t i, uint16_t *id,
                                    uint32_t *value)
{
    const uint8_t *p = ev->settings.entries + 6 * i;
    *id = (uint16_t)(p[0] << 8 | p[1]);
    *value = (uint32_t)p[2] << 24 | (uint32_t)p[3] << 16 | (uint32_t)p[4] << 8 | p[5];
}

/* Where frames go: a gather list, written whole and in order.  The
 * buffers are free again when the call returns. */
typedef void (*h2_sink_fn)(void *arg, const struct iovec *iov, int count);

struct h2_sink {
    h2_sink_fn write;
    void *arg;
};

/* A SETTINGS frame of `count` (id, value) pairs; ids[] and values[]. */
void h2_frame_write_settings(const struct h2_sink *s, const uint16_t *ids, const uint32_t *values,
                             size_t count);
void h2_frame_write_settings_ack(const struct h2_sink *s);
void h2_frame_write_ping(const struct h2_sink *s, const uint8_t data[8], bool ack);
void h2_frame_write_goaway(const struct h2_sink *s, uint32_t last_stream_id, enum h2_error code,
                           const void *debug, size_t debug_len);
void h2_frame_write_rst_stream(const struct h2_sink *s, uint32_t stream_id, enum h2_error code);
void h2_frame_write_window_update(const struct h2_sink *s, uint32_t stream_id, uint32_t increment);

/* DATA frames for `iov`'s bytes on `stream_id`, each at most `max_frame`
 * bytes (the peer's SETTINGS_MAX_FRAME_SIZE): the payload is `iov`'s
 * buffers themselves, cut where frames end, never copied here.
 * END_STREAM on the last frame when `end_stream` (an empty DATA frame if
 * there are no bytes).  The caller checked the flow-control windows.
 * Returns the frames written. */
size_t h2_frame_write_data(const struct h2_sink *s, uint32_t stream_id, const struct iovec *iov,
                           int count, bool end_stream, uint32_t max_frame);

/* A header block already encoded (hpack_encode()) as HEADERS and, past
 * `max_frame` bytes, CONTINUATION frames. */
void h2_frame_write_headers(const struct h2_sink *s, uint32_t stream_id, const uint8_t *block,
                            size_t len, bool end_stream, uint32_t max_frame);

/* The 9 bytes of a frame header. */
void h2_frame_header_put(uint8_t out[H2_FRAME_HEADER_LEN], uint32_t length, uint8_t type,
                         uint8_t flags, uint32_t stream_id);

#endif
