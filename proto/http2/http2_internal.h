/*
 * http2_internal.h: what the two halves of the HTTP/2 server share: the
 * connection and stream state.  http2.c runs the connection and its
 * session (h2_session.h); http2_stream.c turns streams into exchanges and
 * http2_response.c implements the response side of struct exchange_ops.
 */
#ifndef CORRAL_PROTO_HTTP2_INTERNAL_H
#define CORRAL_PROTO_HTTP2_INTERNAL_H

#include "proto/http2/h2_session.h"
#include "proto/http2/http2.h"
#include "proto/http/fields.h"

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
    bool head_failed; /* out of memory while it arrived: reset */
    bool head_done;   /* the request head is complete */
    bool ended;       /* the session forgot it: freed by the next flush */
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
    bool end_sent;      /* the response's END_STREAM went out */
    unsigned status;
    struct h2_buf out;    /* response body bytes not yet framed */
    uint64_t progress_ms; /* when `out` last moved (loop clock) */
    char *trailers;       /* CRLF lines to send after the body, or NULL */
    size_t trailers_len;
    uint64_t started_ns;
    char *log_fields;       /* with an access log: the request's text, copied */
    struct access_log *log; /* where its line goes (access_log_route()); NULL: none */
};

struct http2_conn {
    /* The connection (its data, from http2_conn_new() on): first, so that
     * h2_conn_of() finds the rest. */
    struct http_conn c;
    const struct http2_conf *conf;
    struct h2_session session; /* frames, windows, streams' states, HPACK */
    struct h2_stream *streams; /* open ones, and ended ones until the flush */
    struct h2_stream *sending; /* while its frames go to the session: on_closed()'s likely one */
    size_t stream_count;       /* in `streams` */
    unsigned streams_begun;    /* ever: $connection_requests */
    bool flush_scheduled;      /* h2_flush() is deferred to the loop's turn */
    bool gone;                 /* the connection closed while a flush was pending */
    bool closing;              /* asked to close: no more input */
    bool stopping;             /* a graceful stop began: the shutdown notice went out */
    uint64_t stop_from_ms;     /* when the notice went out */
    bool drains_owed;          /* some stream's output drained: on_drain to deliver */
    bool ended_owed;           /* some stream ended: to be freed by the flush */
    bool peer_goaway;          /* the client sent GOAWAY */
    uint32_t logged;           /* 1 << enum http2_counter: the defences logged once */
    uint64_t idle_from_ms;     /* the last stream's end */
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
/* Sends what the streams have queued, at the end of the loop's turn. */
void http2_schedule(struct http2_conn *h2);
/* Resets the stream from this side (RST_STREAM `code`); it ends, its
 * handler told of the abort by the next flush. */
void http2_reset(struct h2_stream *st, enum h2_error code);
/* The session forgot the stream (both halves ended, or a reset): it is
 * freed by the next flush, outside the calls that may still use it. */
void http2_stream_ended(struct h2_stream *st);
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
/* One request header field (the session checked its syntax).  Returns 0,
 * or -ENOMEM. */
int http2_stream_header(struct h2_stream *st, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen);
/* One trailer field after the request body (the session checked it as it
 * checks header fields).  Returns 0. */
int http2_stream_trailer(struct h2_stream *st, const uint8_t *name, size_t namelen,
                         const uint8_t *value, size_t valuelen);
/* The trailers passed http2_max_header_list_size: all of them are dropped. */
void http2_stream_trailers_too_large(struct h2_stream *st);
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
/* Sends what the stream may of its queued body, at most `max` bytes
 * (its window and the connection's permitting), and its end (END_STREAM
 * or trailers) once the handler ended it and the queue is empty. */
void http2_response_send(struct h2_stream *st, size_t max);

#endif
