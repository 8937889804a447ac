/*
 * h2_session.h: either side of an HTTP/2 connection (RFC 9113) as a
 * state machine without a socket: fed the peer's bytes, it checks them
 * with the frame reader (h2_frame.h), keeps the settings, the
 * flow-control windows and the streams' states, answers SETTINGS and
 * PING, and enforces the flood limits the server had in front of
 * libnghttp2; it passes request heads, trailers and bodies to its caller,
 * and writes frames, responses included, to a sink.  The HTTP/2 server
 * (http2.c) runs on it.
 *
 * The client side (conf.client) is the same machine with the roles
 * swapped where RFC 9113 swaps them: it writes the connection preface
 * and reads none, opens the odd streams itself (h2_session_request()),
 * takes no stream the server would open (no push: any frame on an even
 * stream is a connection error), and checks response heads as 8.3.2
 * asks (h2_message.h: :status alone, interim 1xx heads before the
 * final one, content-length against DATA).  A GOAWAY from the server
 * ends the streams above its last stream id as refused, which the
 * caller may send again elsewhere.
 *
 * Its clocks are the caller's: the times of the reads that consumed a
 * frame and that began what waits unfinished in the input (a frame
 * header, a header block) are kept for the caller's timeouts.
 *
 * It decodes each header block with its HPACK decoder (hpack.h), the
 * discarded ones included so that its table stays the client's, and
 * checks the fields as RFC 9113 8.1-8.3 asks (h2_message.h): a malformed
 * request or trailer section, or a body longer or shorter than its
 * content-length, resets its stream with PROTOCOL_ERROR, as libnghttp2
 * does.  It does not time anything (the caller passes the loop's clock)
 * or queue output (the sink takes every frame at once).
 *
 * Memory: the struct (see docs/http2.md for its size), an array of open
 * streams allocated while any is open and freed when none is, and each
 * HPACK table's block once an entry is added to it.  No frame is
 * buffered: a header block waits in the connection's input until its
 * last frame is in (at most 9 frames of the 16384 bytes announced,
 * H2_MAX_CONTINUATIONS), frames go to the sink.
 *
 * Ownership: the caller owns the struct; h2_session_free() releases the
 * streams and the HPACK tables.  One connection's session is used by one
 * thread.
 */
#ifndef CORRAL_PROTO_HTTP2_H2_SESSION_H
#define CORRAL_PROTO_HTTP2_H2_SESSION_H

#include "proto/http2/h2_frame.h"
#include "proto/http2/h2_message.h"
#include "proto/http2/hpack.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the session announces and enforces (the server's from struct
 * http2_conf). */
struct h2_session_conf {
    /* The client side: preface written, streams opened by this side. */
    bool client;
    uint32_t max_concurrent_streams; /* of streams the peer opens; unused by a client */
    uint32_t initial_window_size;    /* per stream, for the bodies received */
    uint32_t conn_window_size;       /* for the connection, at least 65535 */
    uint32_t max_header_list_size;
    unsigned max_resets; /* RST_STREAM (and refused streams) per interval */
    uint32_t reset_interval_ms;
    /* Where Huffman-coded strings are decoded: one buffer for all the
     * sessions of a thread.  A field longer than this (name and value)
     * ends the connection as a header block over the limit does. */
    uint8_t *scratch;
    size_t scratch_size;
    /* The most the response encoder's HPACK table holds (0: no dynamic
     * table), whatever the client allows. */
    uint32_t encoder_table_size;
    /* The most bytes written to the sink and not yet reported flushed
     * (h2_session_flushed()) before DATA must wait; 0: no bound. */
    size_t max_output;
};

/* The flood limits, as the server set them in front of libnghttp2. */
#define H2_SESSION_FLOOD_INTERVAL_MS   10000
#define H2_SESSION_MAX_SETTINGS        100
#define H2_SESSION_MAX_PING            1000
#define H2_SESSION_MAX_EMPTY           1000
#define H2_SESSION_WINDOW_UPDATES_BASE 1000
#define H2_SESSION_WINDOW_UPDATES_PER  4
/* Streams reset by this side whose trailers are skipped, not refused. */
#define H2_SESSION_RESET_MEMORY 8

/* What a header block is for. */
enum h2_block_kind {
    H2_BLOCK_REQUEST,  /* opens the stream: a request head */
    H2_BLOCK_TRAILERS, /* a second block on an open stream, ending it */
    H2_BLOCK_DISCARD,  /* for no stream (refused, reset, after GOAWAY):
                        * decoded for HPACK's table, then dropped; never
                        * passed to the caller */
    H2_BLOCK_RESPONSE, /* a response head, interim (1xx) or final: the
                        * stream's h2_message.status says which */
};

/* How a header block ended. */
enum h2_head {
    H2_HEAD_OK,
    /* The header list passed max_header_list_size (RFC 9113 6.5.2):
     * the fields past the limit were not passed.  The caller answers a
     * request 431, and drops trailers. */
    H2_HEAD_TOO_LARGE,
    /* The block was cut before its end (its bytes, or one field, passed
     * the limits): the connection ends with GOAWAY ENHANCE_YOUR_CALM
     * once this returns.  A request may be answered 431 first. */
    H2_HEAD_CUT,
};

struct h2_session_ops {
    /* A checked header field of a request or response head or of its
     * trailers (the span is valid during the call only).  Called while
     * the block is being decoded: it may not send, nor reset the stream. */
    void (*field)(void *arg, uint32_t stream_id, enum h2_block_kind kind,
                  const struct hpack_field *f);
    /* The block's end, after its fields; `end_stream`: the peer's half
     * ends with it.  A malformed block never gets here: its stream is
     * reset (the reset callback, maybe after some of its fields) instead.
     * It may answer (h2_session_send_fields()) or reset the stream. */
    void (*headers)(void *arg, uint32_t stream_id, enum h2_block_kind kind, enum h2_head head,
                    bool end_stream);
    /* Body bytes (maybe none), in order; `end_stream` on the last.
     * Their window comes back with h2_session_consume(). */
    void (*data)(void *arg, uint32_t stream_id, const uint8_t *data, size_t len, bool end_stream);
    /* The stream is gone: reset by the peer (`by_peer`) or by this
     * side for a stream error, with `code`.  For a client, the streams
     * a GOAWAY leaves out come here too, by_peer, H2_REFUSED_STREAM. */
    void (*reset)(void *arg, uint32_t stream_id, uint32_t code, bool by_peer);
    /* A send window opened: the stream's, or the connection's (0). */
    void (*window)(void *arg, uint32_t stream_id);
    /* The peer sent GOAWAY, or a PING ACK (optional: NULL ignores). */
    void (*goaway)(void *arg, uint32_t last_stream_id, uint32_t code);
    void (*ping_ack)(void *arg, const uint8_t data[8]);
    /* Both halves of the stream ended (not by a reset): it is forgotten.
     * Called from h2_session_recv() when the client's END_STREAM ends
     * it, or from the h2_session_send_*() call whose END_STREAM does.
     * Optional: NULL, and the caller asks h2_session_stream(). */
    void (*closed)(void *arg, uint32_t stream_id);
    /* A new stream was refused (REFUSED_STREAM) beyond
     * max_concurrent_streams: for the caller's counters (optional). */
    void (*refused)(void *arg, uint32_t stream_id);
};

/* The state of an open stream (RFC 9113 5.1); a closed one is forgotten. */
enum h2_stream_state {
    H2_STREAM_OPEN,
    H2_STREAM_HALF_CLOSED_REMOTE, /* the client ended its half */
    H2_STREAM_HALF_CLOSED_LOCAL,  /* this side ended its half */
};

struct h2_session_stream {
    uint32_t id;
    uint8_t state;         /* enum h2_stream_state */
    bool wants_send;       /* the caller has body for it (h2_session_want_send()) */
    int32_t send_window;   /* may go below 0 when the client lowers its setting */
    int32_t recv_window;   /* what the client may still send */
    uint32_t recv_unacked; /* taken by the caller, not yet in a WINDOW_UPDATE */
    struct h2_message msg; /* the request's checks: its content-length */
    uint64_t body_received;
};

/* The flood counters' kinds. */
enum h2_session_flood {
    H2_SESSION_FLOOD_SETTINGS,
    H2_SESSION_FLOOD_PING,
    H2_SESSION_FLOOD_EMPTY,
    H2_SESSION_FLOODS,
};

struct h2_session {
    struct h2_frame_reader reader;
    struct h2_sink sink; /* the session's own: counts, then passes to out */
    struct h2_sink out;  /* the caller's */
    size_t output;       /* written to out, not yet reported flushed */
    const struct h2_session_ops *ops;
    void *arg;
    struct h2_session_conf conf;
    uint64_t now_ms; /* the clock of the last h2_session_recv() */
    /* For the caller's timers: when the last read consumed a whole frame
     * (or the session began), and since when what reader.wait names has
     * waited in the input: from the read that brought its first byte. */
    uint64_t frame_done_ms;
    uint64_t wait_since_ms;
    /* The client's settings (defaults until its SETTINGS). */
    uint32_t peer_initial_window;
    uint32_t peer_max_frame_size;
    uint32_t peer_header_table_size;
    uint32_t peer_max_concurrent;
    uint8_t peer_no_priorities; /* RFC 9218 2.1: 2 until the first SETTINGS */
    /* Ours take effect when acknowledged (6.5.3): until then a new
     * stream's receive window is the default. */
    bool settings_acked;
    uint32_t local_initial_window;
    int64_t send_window;     /* the connection's */
    int64_t recv_window;     /* the connection's: what the client may still send */
    uint32_t recv_unacked;   /* given back by the caller, not yet in a WINDOW_UPDATE */
    uint32_t last_stream_id; /* the highest the peer opened (a client's: 0) */
    uint32_t local_last_id;  /* the highest this side opened (a client's) */
    uint32_t goaway_last_id; /* of the GOAWAY sent; streams above it are not taken */
    bool goaway_sent;
    /* A graceful stop's first GOAWAY went out (h2_session_shutdown()),
     * the final one not yet. */
    bool shutdown_notice;
    bool goaway_received;
    uint32_t peer_goaway_last_id; /* of the last GOAWAY received */
    enum h2_error error;          /* a connection error ended it: GOAWAY sent */
    const char *why;              /* what the client did, for the log */
    struct h2_session_stream *streams;
    uint32_t stream_count, stream_cap;
    uint32_t sender_last; /* the stream h2_session_next_sender() gave last */
    uint32_t senders;     /* open streams that want to send */
    uint32_t reset_ids[H2_SESSION_RESET_MEMORY];
    uint8_t reset_next;
    /* The DATA frame passing: its stream's state, checked at its first
     * piece (a stream error drops the rest), and its payload so far. */
    uint32_t data_stream;
    bool data_dropped;
    uint64_t data_payload;
    unsigned floods[H2_SESSION_FLOODS];
    uint64_t floods_since_ms;
    unsigned resets;
    uint64_t resets_since_ms;
    uint64_t window_updates, data_frames_sent;
    struct hpack_decoder hpack;
    struct hpack_encoder hpack_out;
};

/* Starts a session, writing the server's SETTINGS (and a WINDOW_UPDATE
 * for the connection past its default) to `sink`. */
void h2_session_init(struct h2_session *s, const struct h2_session_conf *conf,
                     const struct h2_session_ops *ops, void *arg, const struct h2_sink *sink,
                     uint64_t now_ms);
void h2_session_free(struct h2_session *s);

/* Reads the client's bytes (all of the connection's unconsumed input);
 * returns how many it consumed, the rest to be presented again with more.
 * On a connection error it writes GOAWAY, sets s->error and s->why, and
 * reads nothing more: the caller closes once the output is flushed. */
size_t h2_session_recv(struct h2_session *s, const uint8_t *in, size_t len, uint64_t now_ms);

/* The caller took `n` bytes of the stream's body: the client may send
 * them again.  WINDOW_UPDATE frames go out once half a window is owed. */
void h2_session_consume(struct h2_session *s, uint32_t stream_id, size_t n);

/* The stream's window alone, for a caller that gave the connection's
 * back as the bytes arrived (h2_session_consume() with stream 0), so
 * that a stream whose handler pauses holds only its own window. */
void h2_session_consume_stream(struct h2_session *s, uint32_t stream_id, size_t n);

/* How many bytes of body the stream may send now (the smallest of its
 * window, the connection's and the output bound's room; 0 for a stream
 * not open to send). */
size_t h2_session_send_window(const struct h2_session *s, uint32_t stream_id);

/* A response head (":status" first) or trailers (no pseudo-header):
 * `n` fields encoded with the session's HPACK encoder (`how` as
 * hpack_encode() takes it) into HEADERS and, past the client's
 * SETTINGS_MAX_FRAME_SIZE, CONTINUATION frames.  The block is built in
 * the scratch buffer, or in memory allocated for the call when larger.
 * Not to be called from the field callback.  Returns 0, or -1 when the
 * stream cannot send or memory failed. */
int h2_session_send_fields(struct h2_session *s, uint32_t stream_id,
                           const struct hpack_field *fields, const uint8_t *how, size_t n,
                           bool end_stream);

/* The same with a block already encoded (by this session's encoder:
 * h2_session_send_fields() is the way to keep it in step). */
int h2_session_send_headers(struct h2_session *s, uint32_t stream_id, const uint8_t *block,
                            size_t len, bool end_stream);

/* Body bytes as DATA frames, referencing `iov` (h2_frame_write_data()):
 * at most h2_session_send_window() bytes.  Returns 0, or -1 when the
 * stream cannot send or they pass the window. */
int h2_session_send_data(struct h2_session *s, uint32_t stream_id, const struct iovec *iov,
                         int count, bool end_stream);

/* A client's request: opens the next stream and sends its head as
 * h2_session_send_fields() does (`fields` from ":method" on, `head`: the
 * method is HEAD, so the response has no body).  Returns the stream's
 * id, or 0 when no stream may open: the server's GOAWAY came or ours
 * went, the server's SETTINGS_MAX_CONCURRENT_STREAMS are open, the ids
 * ran out, or memory failed. */
uint32_t h2_session_request(struct h2_session *s, const struct hpack_field *fields,
                            const uint8_t *how, size_t n, bool end_stream, bool head);

/* Whether the caller has body bytes queued for the stream, waiting for
 * its turn and its window (h2_session_next_sender()). */
void h2_session_want_send(struct h2_session *s, uint32_t stream_id, bool want);

/* The stream whose body goes next: of the streams that want to send and
 * may (h2_session_send_window() not 0), the one after the last given,
 * by stream id, round the open streams; 0 for none.  Round-robin, as
 * RFC 9113 5.3 lets a server that ignores priorities choose: a caller
 * that sends a frame's worth per turn shares the connection fairly. */
uint32_t h2_session_next_sender(struct h2_session *s);

/* The caller's output sent `n` of the bytes written to its sink: DATA
 * may use the room again (conf.max_output). */
void h2_session_flushed(struct h2_session *s, size_t n);

/* Resets a stream from this side (RST_STREAM `code`). */
void h2_session_reset(struct h2_session *s, uint32_t stream_id, enum h2_error code);

/* Sends GOAWAY naming the last stream taken: later ones are discarded.
 * `code` H2_NO_ERROR for a graceful end. */
void h2_session_goaway(struct h2_session *s, enum h2_error code);

/* The first step of a graceful stop, as RFC 9113 6.8 advises: a GOAWAY
 * naming the highest stream id (the client opens no more, and the
 * streams already on their way are still taken) and a PING.  Its ACK,
 * one round trip later when every stream sent before the notice is in,
 * sends the final GOAWAY (h2_session_goaway()) before ping_ack is
 * called; a caller that waits no longer calls h2_session_goaway()
 * itself.  Once only; nothing after a connection error. */
void h2_session_shutdown(struct h2_session *s);

/* Whether the connection is over once its output is flushed: a
 * connection error, or the final GOAWAY sent and no stream open. */
bool h2_session_done(const struct h2_session *s);

/* The open stream `id`, or NULL. */
struct h2_session_stream *h2_session_stream(const struct h2_session *s, uint32_t id);

#endif
