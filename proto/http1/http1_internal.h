/*
 * http1_internal.h: what the two halves of the HTTP/1.1 server share: the
 * connection and exchange state, the exchange ops, and the connection steps
 * a response ends with.  http1.c parses and runs connections;
 * http1_response.c writes and implements struct exchange_ops.
 */
#ifndef CORRAL_PROTO_HTTP1_INTERNAL_H
#define CORRAL_PROTO_HTTP1_INTERNAL_H

#include "proto/http1/http1.h"

#include <llhttp.h>

/* An exchange on an HTTP/1.1 connection: one at a time per connection. */
struct h1_exchange {
    struct exchange base; /* what handlers get; base.conn is its h1_conn's */
    const struct http_handler *handler;
    bool head;          /* HEAD request: responses carry no body */
    bool keep_alive;    /* the client allows reusing the connection */
    bool http10;        /* an HTTP/1.0 client: no chunked responses */
    bool client_closes; /* the client asked to close after this request */
    bool request_done;  /* message complete */
    bool response_started;
    bool response_body;    /* the response being sent has a body */
    bool response_chunked; /* ...sent in chunks, its length unknown */
    bool response_keep;    /* the connection stays open after it */
    bool response_done;
    bool splicing; /* exchange_splice() under way */
    /* During on_body: the bytes given end the input, and the rest of the
     * body (or of its chunk) follows raw: exchange_request_spliceable().
     * Bits, so that the exchange (in every connection) does not grow. */
    bool body_raw : 1;
    bool request_splicing : 1; /* exchange_request_splice() under way */
    bool body_dropped : 1;     /* rerouted (an error page): the body goes to no handler */
    bool expect_continue : 1;  /* an HTTP/1.1 body behind "Expect: 100-continue" */
    bool upgrade : 1;          /* the request asks to switch protocols */
    bool pipelined : 1;        /* its head came behind an unanswered request ($pipe) */
    unsigned status;
    uint64_t body_received;
    uint64_t started_ns;    /* when its head was parsed */
    char *log_fields;       /* with an access log: the request's text, copied */
    struct access_log *log; /* where its line goes (access_log_route()); NULL: none */
    /* What is left of a chunk whose size line h1_ex_splice() sent. */
    uint64_t chunk_left;
    /* A chunked request's trailer section as it parses: NULL until its
     * first field (http1_request.c). */
    struct h1_trailers *trailers;
    struct h1_exchange *retired_next; /* h1_conn.retired */
};

struct h1_conn {
    /* The connection (its data, from http1_conn_new() on): first, so that
     * h1_conn_of() finds the rest. */
    struct http_conn c;
    const struct http_vhost *vhost; /* whose limits apply */
    /* Only from a head's start to its message's end: idle connections
     * hold none. */
    llhttp_t *parser;
    /* The exchange under way, from its request head until both halves
     * are done (http1_exchange_begin(), http1_exchange_retire()); NULL between
     * requests, so that idle connections hold none. */
    struct h1_exchange *ex;
    /* Retired exchanges whose deferred free could not be queued (out of
     * memory): freed with the connection. */
    struct h1_exchange *retired;
    bool stopping;            /* graceful stop: close after the current response */
    bool handing_over;        /* graceful stop: move to the successor once idle */
    bool partial_head;        /* part of a request head has arrived */
    bool tunnel;              /* switched protocols: bytes pass through raw */
    uint64_t head_started_ns; /* when this head began */
    bool closed;              /* close requested: parse nothing more */
    unsigned error_status;    /* set by a callback that fails the request */
    /* The input starts with bytes left unread behind an unanswered
     * request; the head being read came behind one ($pipe). */
    bool held, behind;
    char *head_line; /* with an access log: a partial head's line, for a 408 */
};

/* What handlers call on an HTTP/1.1 exchange (http1_response.c). */
extern const struct exchange_ops h1_exchange_ops;

_Static_assert(offsetof(struct h1_exchange, base) == 0, "h1_exchange_of() casts");

static inline struct h1_exchange *h1_exchange_of(const struct exchange *ex)
{
    return (struct h1_exchange *)ex;
}

_Static_assert(offsetof(struct h1_conn, c) == 0, "h1_conn_of() casts");

static inline struct h1_conn *h1_conn_of(struct http_conn *c)
{
    return (struct h1_conn *)c;
}

/* The connection of `ex`. */
static inline struct h1_conn *h1_exchange_conn(const struct h1_exchange *ex)
{
    return h1_conn_of(ex->base.conn);
}

/* The connection lets go of its exchange (both halves done, or closing);
 * its memory goes once the handler that ended it has returned. */
void http1_exchange_retire(struct h1_conn *h1);
/* Parses nothing more and closes.  `linger` unless the client asked to
 * close and so sends nothing more. */
void http1_end(struct h1_conn *h1, bool linger);
void http1_close(struct h1_conn *h1);
/* Both halves of the exchange are done: get ready for the next request. */
void http1_finish_exchange(struct h1_conn *h1);
/* Counts a response sent, by status, in the site's per-worker stats. */
void http1_count_response(struct h1_conn *h1, unsigned status);
/* Writes the exchange's access log line (the site has an access log). */
void http1_request_log(struct h1_conn *h1, struct h1_exchange *ex, unsigned status);
/* The whole request body has arrived (llhttp's end of message, or the end
 * of a spliced body): on_body_end, and the timeouts of a response. */
void http1_request_complete(struct h1_conn *h1);
/* Frees the parser of a message that ended. */
void http1_request_parser_free(struct h1_conn *h1);
/* A parser for the head about to be read (http1_request.c): 0 or -ENOMEM. */
int http1_request_parser_new(struct h1_conn *h1);
/* Feeds llhttp; returns bytes consumed, or SIZE_MAX after refusing. */
size_t http1_request_execute(struct h1_conn *h1, const char *data, size_t len);
/* One space around the request-target, none elsewhere in the request line
 * of `head` (complete, its lines valid). */
bool http1_request_line_valid(const char *head, size_t len);
/* A head still arriving: its request line, once whole, is kept for the log
 * line of a 408. */
void http1_request_keep_head_line(struct h1_conn *h1, const char *data, size_t len);
/* A request head has arrived: its exchange, or NULL when out of memory. */
struct h1_exchange *http1_exchange_begin(struct h1_conn *h1);
/* Answers a request that never became an exchange (a malformed head that
 * `head` starts, or NULL), and closes. */
void http1_reject(struct h1_conn *h1, unsigned status, const char *head, size_t len);
/* Request bodies moved inside the kernel (http1_upload.c): the exchange
 * ops. */
uint64_t http1_upload_spliceable(const struct exchange *base);
int http1_upload_splice(struct exchange *base, corral_conn *to, uint64_t len, exchange_splice_cb cb,
                        void *arg);
/* The set_handler and routed ops (http1.c). */
void http1_set_handler(struct exchange *base, const struct http_handler *handler);
void http1_routed(struct exchange *base, const struct http_request *req);

#endif
