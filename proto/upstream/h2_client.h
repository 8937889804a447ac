/*
 * h2_client.h: the HTTP/2 client side of upstream connections (corral's
 * HTTP/2 session, h2_session.h):
 * per worker and server, a few connections that carry many requests at
 * once within the backend's SETTINGS_MAX_CONCURRENT_STREAMS, each request
 * a stream reported to its owner (the proxy) through callbacks.  A stream
 * the backend cannot have processed (REFUSED_STREAM, above a GOAWAY's last
 * stream ID, never sent before its connection ended) goes again on
 * another connection to the same server without its owner seeing it.
 */
#ifndef CORRAL_PROTO_H2_CLIENT_H
#define CORRAL_PROTO_H2_CLIENT_H

#include "proto/http2/h2_session.h"
#include "proto/upstream/http1_client.h" /* struct http1_client_head, h1_head_buf */
#include "proto/upstream/upstream.h"

/* Request body bytes a stream holds for its connection: above this the
 * owner pauses the client (h2_client_stream_write() says so), and
 * on_send_drain resumes it below half.  What the backend's window has not
 * taken yet waits here. */
#define H2_CLIENT_SEND_BUFFER (64 * 1024)
/* The body bytes kept after they went, so that a refused stream can go
 * again whole; past this the stream is no longer retried. */
#define H2_CLIENT_REPLAY_MAX (64 * 1024)
/* The receive window of each stream: the response bytes the backend may
 * send ahead of what the client has taken (h2_client_stream_consume()). */
#define H2_CLIENT_STREAM_WINDOW (256 * 1024)
/* The streams put on a new connection before the backend's SETTINGS say
 * how many it takes (RFC 9113 6.5.2's recommended least is 100). */
#define H2_CLIENT_STREAMS_BEFORE_SETTINGS 100
/* How often one request goes again after refusals before it fails. */
#define H2_CLIENT_RETRIES_MAX 8

/* Callbacks to a stream's owner; none runs after on_end or on_error, nor
 * after h2_client_stream_cancel(). */
struct h2_client_ops {
    /* The stream's new connection is up ($upstream_connect_time); not
     * called for one that was up already (st->conn->base.connected). */
    void (*on_open)(void *owner);
    /* The final response head.  The owner may cancel the stream meanwhile
     * (h2_client_stream_cancel()): nothing more is called then. */
    void (*on_head)(void *owner, const struct http1_client_head *head);
    /* Response body bytes; the owner calls h2_client_stream_consume() for
     * them once its client took them, which opens the window again. */
    void (*on_body)(void *owner, const char *data, size_t len);
    /* The response is complete, with its trailer fields as header lines
     * ending in CRLF (`len` 0: none).  The stream is over. */
    void (*on_end)(void *owner, const char *trailers, size_t len);
    /* The stream failed; `processed`: the backend may have acted on it.
     * The stream is over. */
    void (*on_error)(void *owner, enum proxy_error_kind kind, bool processed);
    /* The request body queued fell below half of H2_CLIENT_SEND_BUFFER
     * after h2_client_stream_write() said it was full. */
    void (*on_send_drain)(void *owner);
};

struct h2_client;

/* One request: the owner allocates it (inside its own state), zeroed but
 * for what it sets, `replayable` true, and keeps it, with `nv`, until
 * on_end, on_error or h2_client_stream_cancel(); then it frees `data`,
 * `trailers` and `in.data`, or submits it again (the body goes whole as
 * long as `replayable` holds). */
struct h2_client_stream {
    struct h2_client *conn; /* NULL: not on a connection */
    int32_t id;             /* 0: its HEADERS not sent yet */
    const struct h2_client_ops *ops;
    void *owner;
    const struct hpack_field *nv;
    size_t nvlen;
    bool has_body;
    uint32_t read_timeout_ms;
    /* Body bytes that wait this long for the backend's window (or the
     * socket) fail the stream, as a write that stalls does. */
    uint32_t send_timeout_ms;
    uint64_t progress_ms; /* when body bytes last went, or began to wait */
    size_t head_limit;    /* the most bytes the response head may take */
    bool head_method;     /* HEAD: the response has no body */
    /* The request body: `len` bytes of `data`, of which `sent` went (kept
     * for a replay while `replayable`). */
    char *data;
    size_t len, sent, cap;
    bool body_end, replayable, paused;
    char *trailers; /* the request's trailer lines, sent when the body ends */
    size_t trailers_len;
    bool headers_sent; /* its HEADERS left: the backend may have it */
    bool invalid;      /* the response broke a bound: fail it as invalid */
    bool head_done;
    bool sent_all; /* the request is out: the read timeout counts */
    unsigned retries;
    uint64_t deadline_ms; /* loop clock; 0: none */
    size_t held;          /* body bytes on_body gave that are not consumed yet */
    /* The response head or the trailers as they arrive: "name: value\r\n"
     * lines, bounded by head_limit, and the status. */
    struct h1_head_buf in;
    unsigned status;
    int64_t content_length;
    struct h2_client_stream *prev, *next;
};

/* One connection: owned by the worker's list of its server while it may
 * take streams, and by its streams once it goes away. */
struct h2_client {
    struct upstream_conn base;
    struct h2_session session;     /* started once connected (session_up) */
    struct h2_client *prev, *next; /* in the server's list (listed) */
    struct h2_client_stream *streams;
    unsigned stream_count;
    uint32_t send_timeout_ms;
    uint64_t deadline_ms; /* the connection's, the earliest of its streams' */
    bool listed, goaway, flush_scheduled, gone, dead, drains_owed;
    bool session_up;
    bool broken; /* the backend broke the protocol: its streams fail as invalid */
};

/* Puts `st` (ops, owner, nv, nvlen, has_body and the limits set) on a
 * connection to `server` that has room for it, or on a new one whose
 * connect and send timeouts are set.  Returns 0, or corral_connect()'s
 * -errno, or -ENOMEM. */
int h2_client_submit(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     corral_loop *loop, uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct h2_client_stream *st);
/* Queues request body bytes.  Returns true when the stream holds
 * H2_CLIENT_SEND_BUFFER or more: the owner pauses its client until
 * on_send_drain.  False too on a stream that is over. */
bool h2_client_stream_write(struct h2_client_stream *st, const char *data, size_t len);
/* The request body is complete, with trailer lines (CRLF-ended; `len` 0:
 * none). */
void h2_client_stream_end(struct h2_client_stream *st, const char *trailers, size_t len);
/* `len` bytes that on_body gave went on to the client: the backend may
 * send as many more. */
void h2_client_stream_consume(struct h2_client_stream *st, size_t len);
/* The owner lets go: the stream is reset (CANCEL) if it still runs, and
 * its memory is the owner's again. */
void h2_client_stream_cancel(struct h2_client_stream *st);

/* Turns a request head as proxy_head_build() writes it (request line and
 * CRLF header lines) into HTTP/2 fields: :method, :scheme (`scheme`),
 * :authority from Host, :path, then the other fields with lowercase names,
 * without those HTTP/2 forbids (RFC 9113 8.2.2) but "te: trailers".  The
 * names are lowercased in place in `head`; `nv` gets the pairs, which
 * point into `head`.  Returns the count, or 0 if `head` is not such a
 * head or `max` is too few. */
size_t h2_client_head_nv(char *head, size_t len, const char *scheme, struct hpack_field *nv,
                         size_t max);

#endif
