/*
 * http1_client.h: the HTTP/1.1 client side of one upstream connection: it
 * serialises the framing of a request head, parses and checks the response,
 * and reports it to its owner (the proxy) through callbacks.
 */
#ifndef CORRAL_PROTO_HTTP1_CLIENT_H
#define CORRAL_PROTO_HTTP1_CLIENT_H

#include "proto/http/http.h"
#include "proto/upstream/upstream.h"

#include <llhttp.h>
#include <string.h>

/* A head being written: grows as needed; `failed` once memory ran out (the
 * adds that follow do nothing).  Zeroed, it starts with no memory; see
 * http1_client_head_init() for one that starts in the caller's. */
struct h1_head_buf {
    char *data;
    size_t len, cap;
    bool failed;
    char *small; /* the caller's memory it started in, or NULL */
};

/* Starts `b` in `small` (`size` bytes, the caller's, which must outlive
 * it): a head that fits allocates nothing, a longer one moves to malloc's
 * memory.  Released with http1_client_head_free(). */
void http1_client_head_init(struct h1_head_buf *b, char *small, size_t size);
/* Frees what `b` allocated (not the caller's memory) and empties it. */
void http1_client_head_free(struct h1_head_buf *b);

/* Appends `len` bytes (data may be NULL when len is 0), moving `b` to
 * larger memory when they do not fit: http1_client_head_add() calls it
 * only then. */
void http1_client_head_add_grow(struct h1_head_buf *b, const char *data, size_t len);

/* Inline: a request head is a dozen small appends, most of them literals
 * whose length the compiler knows, and a call each cost more than the
 * copy.  Only a head that outgrows its memory calls out. */
static inline void http1_client_head_add(struct h1_head_buf *b, const char *data, size_t len)
{
    if (!b->failed && len > 0 && len <= b->cap - b->len) {
        memcpy(b->data + b->len, data, len);
        b->len += len;
        return;
    }
    http1_client_head_add_grow(b, data, len);
}

static inline void http1_client_head_add_str(struct h1_head_buf *b, const char *s)
{
    http1_client_head_add(b, s, strlen(s));
}
/* "name: value\r\n" */
void http1_client_head_add_header(struct h1_head_buf *b, struct http_str name,
                                  struct http_str value);
/* The request line: "METHOD target HTTP/1.1\r\n". */
void http1_client_head_request_line(struct h1_head_buf *b, struct http_str method,
                                    struct http_str target);
/* Ends a request head with its connection and framing fields: an upgrade to
 * `*upgrade` (NULL: none), then Transfer-Encoding: chunked when `chunked`,
 * else Content-Length when `has_length`; then the empty line. */
void http1_client_head_end(struct h1_head_buf *b, const struct http_str *upgrade, bool chunked,
                           bool has_length, uint64_t length);

/* The last chunk of a request body, with no trailers. */
#define H1_LAST_CHUNK "0\r\n\r\n"

/* What the owner's request asks of the response, read while it owns the
 * connection; the owner keeps it and may update `sent`. */
struct http1_client_request {
    uint32_t read_timeout_ms, send_timeout_ms;
    size_t head_limit; /* the most bytes a response head may take */
    bool head;         /* HEAD: the response has no body */
    bool upgrade;      /* the request asks to switch protocols: a 101 may come */
    bool sent;         /* the whole request is out: the read timeout counts */
};

/* A final response head that passed every check.  Its strings are valid
 * during on_head only. */
struct http1_client_head {
    unsigned status;
    const struct http_header *headers;
    size_t header_count;
    bool tunnel;             /* 101: after the head, bytes pass through raw */
    int64_t content_length;  /* -1: chunked or until the connection closes */
    struct http_str codings; /* transfer codings other than the final chunked */
};

/* Callbacks to the connection's owner; each gets the owner pointer given to
 * http1_client_attach().  None is called while the connection is idle. */
struct http1_client_ops {
    /* The connection is up: what was queued goes out now. */
    void (*on_open)(void *owner);
    /* The response head: forward it.  Nonzero fails the exchange with
     * PROXY_ERROR_INVALID (nothing has reached the client yet).  The
     * owner may detach meanwhile (it answered otherwise, and the rest of
     * the response is not read): nothing more is called then. */
    int (*on_head)(void *owner, const struct http1_client_head *head);
    /* Response body bytes, without their framing. */
    void (*on_body)(void *owner, const char *data, size_t len);
    /* The response is complete, with its trailer fields (`len` 0: none)
     * as header lines each ending in CRLF, checked as a head's fields are
     * and without those that must not follow a body (framing, Host,
     * connection-specific fields).  The owner lets go of the connection
     * (the client pools or closes it after this returns). */
    void (*on_end)(void *owner, const char *trailers, size_t len);
    /* The response is not usable: fail the exchange (the owner detaches). */
    void (*on_error)(void *owner, enum proxy_error_kind kind);
    /* The connection closed while owned: `error` as on_close gives it, and
     * the kind of failure it stands for. */
    void (*on_close)(void *owner, int error, enum proxy_error_kind kind);
    /* After a 101 head: the client side becomes a pipe too. */
    void (*on_tunnel)(void *owner);
    /* Raw bytes from the upstream in a tunnel; returns how many were taken. */
    size_t (*on_tunnel_data)(void *owner, const char *data, size_t len);
    /* The upstream ended the tunnel (the client closes its side after). */
    void (*on_tunnel_end)(void *owner);
    /* The upstream took its output below the low watermark. */
    void (*on_drain)(void *owner);
    /* Optional.  Everything read so far went to on_body, and the rest of
     * the body (or of its current chunk) can move without being read:
     * `len` bytes, or UINT64_MAX for a body that ends with the
     * connection.  The owner may start moving them from `conn`
     * (exchange_splice()) and return 0, then report how that ended with
     * http1_client_spliced(); or return nonzero, and the body is read and
     * passed to on_body as usual. */
    int (*on_splice)(void *owner, corral_conn *conn, uint64_t len);
    /* Optional, and only while `watch_pauses` is set: a read of the body
     * ended and everything it brought went to on_body.  Whether the
     * upstream paused there (a slow backend, or server-sent events between
     * two events) the owner may ask of `conn` (corral_conn_input_pending(),
     * a system call: only when it has something to do about it). */
    void (*on_read_done)(void *owner, corral_conn *conn);
};

/* One upstream connection: owned by an exchange, or idle in a pool. */
struct http1_client {
    struct upstream_conn base; /* the pool's view; first, so the pool can hold these */
    const struct http1_client_ops *ops;
    void *owner;                            /* NULL while idle */
    const struct http1_client_request *req; /* the owner's; NULL while idle */
    llhttp_t parser;
    bool head_done;   /* the response head has been parsed */
    bool tunnel;      /* after 101: a byte pipe to the client */
    unsigned interim; /* 1xx responses to the current request */
    /* For splicing the body (h1c_offer_splice()): what on_splice last
     * offered, and whether llhttp is inside a chunk's data. */
    uint64_t splice_len;
    bool in_chunk;
    /* The owner wants on_read_done: set while a response filter holds
     * bytes back (exchange_flush()), so that no other response pays for
     * the call.  Cleared by http1_client_attach(). */
    bool watch_pauses;
    /* The trailer section of a chunked response as it parses, bounded by
     * the head limit: the lines kept so far, where the field being read
     * starts, and whether its name is still coming. */
    struct h1_head_buf trailers;
    size_t trailer_start;
    bool trailer_in_name;
    /* The response head, held back until the rest of the read that
     * completed it has parsed: up to then nothing has reached the client,
     * and an error still gets a clean 502 (see h1c_on_data).  The headers
     * stay in the parser's per-thread list meanwhile. */
    struct {
        bool set;
        unsigned status;
        int64_t length;
        struct http_str codings; /* points into the input being read */
    } pending;
};

/* Sets *out to an idle pooled connection to `server` that sent
 * `preamble` when `pooled` allows, or to a new one, whose connect and send
 * timeouts are set and which sends `preamble` first, in the clear (before
 * a TLS handshake), as soon as it is up.  Returns 0 or corral_connect()'s
 * -errno (-ENOMEM if the connection's state cannot be allocated). */
int http1_client_get(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     bool pooled, const struct upstream_preamble *preamble, corral_loop *loop,
                     uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct http1_client **out);
/* Gives the connection to `owner` for one request; `req` stays the owner's. */
void http1_client_attach(struct http1_client *c, const struct http1_client_ops *ops, void *owner,
                         const struct http1_client_request *req);
/* Detaches the connection from its owner for good and closes it.  A tunnel
 * closes gracefully, so what the other side sent last still arrives. */
void http1_client_detach(struct http1_client *c);
/* A splice on_splice started ended with `moved` bytes and no error.
 * Returns true when those were all that was offered: the body goes on (a
 * chunk's data went), or it is complete, on_end has run and the
 * connection is pooled or closed.  False when the upstream ended the
 * stream short of the length it announced: the owner fails the exchange
 * and detaches. */
bool http1_client_spliced(struct http1_client *c, uint64_t moved);
/* proxy_read_timeout counts once the whole request is out (req->sent), as
 * in nginx: an upload that keeps moving is governed by the send timeout
 * alone. */
void http1_client_set_timeouts(struct http1_client *c);

#endif
