/*
 * http2_internal.h: what the two halves of the HTTP/2 server share: the
 * connection and stream state.  http2.c runs the connection and its
 * nghttp2 session; http2_stream.c turns streams into exchanges and
 * implements struct exchange_ops.
 */
#ifndef CORRAL_PROTO_HTTP2_INTERNAL_H
#define CORRAL_PROTO_HTTP2_INTERNAL_H

#include "proto/http2/http2.h"
#include "proto/http2/http2_hpack_scan.h"
#include "proto/http/fields.h"

#include <nghttp2/nghttp2.h>

#include <stdint.h>

/* A growable byte buffer read from its front. */
struct h2_buf {
    char *data;
    size_t off, len, cap; /* unread bytes: data[off, off + len) */
};

/* One stream, one exchange. */
struct h2_stream {
    struct exchange base;          /* what handlers get; base.conn is its http2_conn's */
    struct h2_stream *prev, *next; /* the connection's open streams */
    int32_t id;
    unsigned number; /* of the connection's streams, from 1 */
    const struct http_vhost *vhost;
    const struct http_handler *handler;
    /* The request head as it arrives: names and values back to back, and
     * their spans; only until on_request. */
    struct h2_buf head;
    struct http_field_ref *fields; /* where in head each field is */
    size_t field_count, field_cap;
    size_t head_size; /* RFC 9113 6.5.2's accounting, against the limit */
    bool head_refused;
    bool head_done; /* the request head is complete (nghttp2 said so) */
    /* The head said content-length 0 without END_STREAM: the request waits
     * for the END_STREAM, since DATA would make it malformed (RFC 9113
     * 8.1.1), within client_header_timeout of head_started_ms. */
    bool awaits_end;
    uint64_t head_started_ms; /* its HEADERS frame's first byte (loop clock) */
    bool handler_owns;        /* on_request ran; neither the end nor on_abort yet */
    bool request_done;        /* END_STREAM from the client */
    bool body_paused;
    bool body_end_delivered;
    bool body_dropped; /* rerouted (an error page): the body goes to no handler */
    struct h2_buf in;  /* body bytes the handler has not taken (paused) */
    /* Trailer fields after the body, as CRLF lines, for on_body_trailers;
     * their RFC 9113 6.5.2 size, against the header list limit. */
    struct h2_buf trailers_in;
    size_t trailers_size;
    uint64_t body_received;
    uint64_t body_progress_ms; /* the head's delivery, or the last DATA taken (loop clock) */
    bool body_timed_out;       /* reset for client_body_timeout */
    bool response_started;
    bool response_body; /* the response has a body: DATA frames follow */
    bool response_done; /* the handler ended it (exchange_end) */
    bool head_method;
    bool was_backed_up; /* on_drain is owed once the stream's output drains */
    bool data_deferred; /* the data provider said DEFERRED: resume on new data */
    unsigned status;
    struct h2_buf out;    /* response body bytes not yet framed */
    uint64_t progress_ms; /* when `out` last moved (loop clock) */
    char *trailers;       /* CRLF lines to send after the body, or NULL */
    size_t trailers_len;
    uint64_t started_ns;
    char *log_fields;       /* with an access log: the request's text, copied */
    struct access_log *log; /* where its line goes (access_log_route()); NULL: none */
};

/* The frames a client may send only so many of per interval (http2.c). */
enum h2_flood {
    H2_FLOOD_SETTINGS,
    H2_FLOOD_PING,
    H2_FLOOD_EMPTY, /* DATA, HEADERS or CONTINUATION with nothing in it; PRIORITY */
    H2_FLOODS,
};

/* The length of a frame header (RFC 9113 4.1). */
#define H2_FRAME_HEADER 9

struct http2_conn {
    /* The connection (its data, from http2_conn_new() on): first, so that
     * h2_conn_of() finds the rest. */
    struct http_conn c;
    const struct http2_conf *conf;
    nghttp2_session *session;
    struct h2_stream *streams; /* open ones */
    size_t stream_count;
    unsigned streams_begun; /* ever: $connection_requests */
    bool flush_scheduled;   /* h2_flush() is deferred to the loop's turn */
    bool gone;              /* the connection closed while a flush was pending */
    bool closing;           /* asked to close: no more input */
    bool stopping;          /* a graceful stop began: the shutdown notice went out */
    bool stop_goaway_sent;  /* and the GOAWAY with the last stream it takes */
    uint64_t stop_from_ms;  /* when the notice went out */
    bool drains_owed;       /* some stream's output drained: on_drain to deliver */
    bool settings_sent;     /* ours went out, with the configured stream limit */
    uint32_t logged;        /* 1 << enum http2_counter: the defences logged once */
    unsigned resets;        /* RST_STREAM from the client in this interval */
    /* The highest stream a client's HEADERS opened, and the last streams
     * this side reset, whose HEADERS (trailers) may still be in flight
     * (RFC 9113 5.1): for the check in frame_seen(). */
    int32_t max_stream_id;
    int32_t reset_ids[8];
    uint8_t reset_next;
    uint64_t resets_since_ms;
    /* The client's frames as scanned ahead of nghttp2 (http2.c): where the
     * scan is, and what it counted. */
    uint8_t scan_head[H2_FRAME_HEADER]; /* a frame header split across reads */
    uint8_t scan_have;                  /* its bytes so far */
    bool scan_pad;                      /* next: a DATA frame's pad length byte */
    uint32_t scan_length;               /* that frame's length */
    uint32_t scan_skip;                 /* bytes still to pass: payload, or the preface */
    bool scan_ends_block;               /* that frame ends a header block (END_HEADERS) */
    uint64_t frame_started_ms;          /* when the frame header being read began */
    size_t block_bytes;                 /* of the header block being received */
    int32_t block_stream;               /* its stream */
    bool block_cut;                     /* it went over the limit: see cut_header_block() */
    bool block_cut_field;               /* by one field's announced length (http2_hpack_scan()) */
    /* The header block fragment in the frame passing, walked for the
     * lengths HPACK announces (http2_hpack_scan()). */
    uint8_t frag_prefix; /* HEADERS: pad length and priority bytes still to pass */
    bool frag_padded;    /* the first of them is the pad length */
    uint32_t frag_left;  /* fragment bytes still to pass */
    struct http2_hpack_scan hpack_scan;
    bool block_open;            /* a header block has begun and not ended */
    uint64_t block_started_ms;  /* its HEADERS frame's first byte */
    uint64_t idle_from_ms;      /* the last whole frame, or the last stream's end */
    unsigned floods[H2_FLOODS]; /* frames of each kind in this interval */
    uint64_t floods_since_ms;
    uint64_t window_updates, data_frames_sent;
};

_Static_assert(offsetof(struct http2_conn, c) == 0, "h2_conn_of() casts");

static inline struct http2_conn *h2_conn_of(struct http_conn *c)
{
    return (struct http2_conn *)c;
}

/* The stream of `ex`. */
static inline struct h2_stream *h2_stream_of(const struct exchange *ex)
{
    return (struct h2_stream *)ex;
}
_Static_assert(offsetof(struct h2_stream, base) == 0, "h2_stream_of() casts");

/* The connection of `st`. */
static inline struct http2_conn *h2_stream_conn(const struct h2_stream *st)
{
    return h2_conn_of(st->base.conn);
}

extern const struct exchange_ops h2_exchange_ops;

/* The set_handler and routed ops (http2_stream.c). */
void http2_stream_set_handler(struct exchange *base, const struct http_handler *handler);
void http2_stream_routed(struct exchange *base, const struct http_request *req);

/* http2.c */
/* Sends what the session has queued, at the end of the loop's turn. */
void http2_schedule(struct http2_conn *h2);
/* Counts an event in the site's per-worker counters. */
void http2_count(struct http2_conn *h2, enum http2_counter counter);
/* Counts a defence that leaves the connection open, and logs it the first
 * time on this connection: "http2: CLIENT: WHAT". */
void http2_defence(struct http2_conn *h2, enum http2_counter counter, const char *what);
/* Counts a response by status. */
void http2_count_response(struct http2_conn *h2, const struct h2_stream *st);

/* http2_stream.c */
/* Appends to `b`, growing it.  Returns 0 or -ENOMEM. */
int http2_stream_buf_append(struct h2_buf *b, const void *data, size_t len);
/* For a stream refused before its head could be read (a header block cut
 * off): its log line names the client, and "-" for the request. */
void http2_stream_keep_log_unread(struct h2_stream *st);
/* Writes the stream's access log line (the site has an access log). */
void http2_stream_log(struct h2_stream *st, unsigned status);
/* No one takes the request body any more: what is queued is dropped and
 * its window given back. */
void http2_stream_discard_body(struct h2_stream *st);
/* Hands queued request body bytes to the handler while it takes them. */
void http2_stream_deliver_body(struct h2_stream *st);
struct h2_stream *http2_stream_new(struct http2_conn *h2, int32_t id);
/* Frees the stream, telling its handler first if it still holds it. */
void http2_stream_free(struct h2_stream *st);
/* One request header field (nghttp2 checked its syntax).  Returns 0, or
 * NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE to refuse the stream. */
int http2_stream_header(struct h2_stream *st, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen);
/* One trailer field after the request body (nghttp2 checked it as it
 * checks header fields).  Returns 0. */
int http2_stream_trailer(struct h2_stream *st, const uint8_t *name, size_t namelen,
                         const uint8_t *value, size_t valuelen);
/* Whether the request head says content-length 0. */
bool http2_stream_empty_body(const struct h2_stream *st);
/* The request head is complete: route it and run its handler. */
void http2_stream_request(struct h2_stream *st, bool end_stream);
/* Request body bytes. */
void http2_stream_body(struct h2_stream *st, const uint8_t *data, size_t len);
/* The client ended its half. */
void http2_stream_body_end(struct h2_stream *st);
/* The client output fell below the watermark: owed on_drain callbacks. */
void http2_response_drain(struct h2_stream *st);
/* Lets the data provider go on after new output. */
void http2_response_resume(struct h2_stream *st);

#endif
