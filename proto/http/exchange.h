/*
 * exchange.h: one request and its response, whatever protocol carries them.
 * A framer (HTTP/1.1: http1.c) parses requests, makes exchanges and
 * implements struct exchange_ops; handlers (return, proxy, admin) see only
 * this header and the connection the exchange came on (http_conn.h), never
 * a protocol's framing.
 */
#ifndef CORRAL_PROTO_EXCHANGE_H
#define CORRAL_PROTO_EXCHANGE_H

#include "proto/http/http.h"
#include "proto/http/http_conn.h"

#include <corral.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* One request and its response.  The framer allocates and frees it.  A
 * handler may use it from on_request until on_abort, or until it ends the
 * response (exchange_end(), exchange_respond()...) and then returns to the
 * framer: within that callback it may still, say, clear exchange_data(). */
struct exchange;

/* A parsed request head, the same for every protocol.  Its strings are
 * valid only during on_request. */
struct http_request {
    struct http_str method;
    struct http_str target;    /* "/path?query" (also when sent in absolute-form) */
    struct http_str path;      /* target without the query */
    struct http_str host;      /* Host (or the authority's host) without the port; may be empty */
    struct http_str authority; /* an absolute-form target's host[:port], which
                                  stands for Host (RFC 9112 3.2.2); else empty */
    /* Every header as the client sent it, those of the connection too
     * (Connection, Transfer-Encoding...): a proxy drops those itself. */
    const struct http_header *headers;
    size_t header_count;
    bool head;               /* HEAD: the response has no body */
    bool http10;             /* an HTTP/1.0 request (else 1.1 or 2) */
    bool has_body;           /* a body follows: content_length > 0, or of unknown length */
    bool has_content_length; /* the length was given, even as 0; else a body's
                                length is known only at its end */
    uint64_t content_length;
    bool expect_continue;             /* the framer answers it; for the record */
    bool upgrade;                     /* asks to switch protocols (WebSocket) */
    struct http_str upgrade_protocol; /* what to switch to */
};

/* What a location does with a request.  Every callback runs on the worker
 * that owns the exchange. */
struct http_handler {
    const char *name;
    /* A request head arrived: answer now with exchange_respond(), or later. */
    void (*on_request)(struct exchange *ex, const struct http_request *req, void *data);
    /* Request body bytes; optional (NULL discards them).  Stops while the
     * handler has paused the body (exchange_pause_body()). */
    void (*on_body)(struct exchange *ex, const char *data, size_t len);
    /* The whole request body has arrived; optional. */
    void (*on_body_end)(struct exchange *ex);
    /* Trailer fields after the request body, as header lines each ending
     * in CRLF, just before on_body_end; optional (NULL drops them).  Only
     * HTTP/2 delivers them, checked as header fields are. */
    void (*on_body_trailers)(struct exchange *ex, const char *lines, size_t len);
    /* The client went away before the response was complete, or the
     * handler cut it off (exchange_abort(), exchange_tunnel_close()):
     * release whatever the exchange holds.  Optional. */
    void (*on_abort)(struct exchange *ex);
    /* The response output, after exchange_backed_up() said so, went below
     * the low watermark: resume the producer.  Optional. */
    void (*on_drain)(struct exchange *ex);
    /* After exchange_tunnel(): raw bytes from the client.  Returns how many
     * were taken; the rest comes again.  Optional. */
    size_t (*on_tunnel_data)(struct exchange *ex, const char *data, size_t len);
};

/* How an exchange_splice() ended: `moved` bytes of the body reached the
 * client; `error` is 0 when `max` bytes went, or when `from` reached the
 * end of its stream first (then `moved` < `max`), else -errno (either
 * side failed or closed: see corral_splice_cb).  The exchange is valid
 * during the callback, which may end or abort it. */
typedef void (*exchange_splice_cb)(struct exchange *ex, uint64_t moved, int error, void *arg);

/* What a framer does for each of its exchanges; each handler-facing
 * function below is one call through this table, but those that read the
 * connection (ex->conn: its loop, worker, addresses, TLS), which is the
 * same for every protocol.  Every slot is required but `splice`,
 * `request_spliceable` and `request_splice`, which a framer that cannot
 * move bytes inside the kernel leaves NULL. */
/* What $connection_requests, $pipe and $proxy_protocol_* read of the
 * client's connection (exchange_conn_facts()). */
struct exchange_conn_facts {
    unsigned requests;   /* this request's number on its connection, from 1 */
    bool pipelined;      /* HTTP/1.1: it came behind a request not yet answered */
    bool proxy_protocol; /* the connection's peer is its PROXY header's source */
};

struct exchange_ops {
    void (*begin)(struct exchange *ex, unsigned status, const char *headers, size_t headers_len,
                  int64_t content_length, struct http_str codings);
    void (*write)(struct exchange *ex, const char *data, size_t len);
    void (*writev)(struct exchange *ex, const struct iovec *iov, int count);
    void (*end)(struct exchange *ex, const char *trailers, size_t trailers_len);
    void (*abort)(struct exchange *ex);
    bool (*response_started)(const struct exchange *ex);
    bool (*backed_up)(const struct exchange *ex);
    void (*pause_body)(struct exchange *ex);
    void (*resume_body)(struct exchange *ex);
    void (*tunnel)(struct exchange *ex);
    void (*tunnel_write)(struct exchange *ex, const char *data, size_t len);
    void (*tunnel_close)(struct exchange *ex);
    int (*splice)(struct exchange *ex, corral_conn *from, uint64_t max, exchange_splice_cb cb,
                  void *arg);
    int (*sendfile)(struct exchange *ex, int fd, uint64_t offset, uint64_t len,
                    exchange_splice_cb cb, void *arg);
    uint64_t (*request_spliceable)(const struct exchange *ex);
    int (*request_splice)(struct exchange *ex, corral_conn *to, uint64_t len, exchange_splice_cb cb,
                          void *arg);
    /* The router (router.h) hands the exchange, whose response has not
     * begun, to `handler`: its callbacks from now on, but for on_request,
     * which the router makes.  After an internal redirect (ex->redirected)
     * no request body goes to it: what is left is read and dropped.  A
     * handler without on_request only holds the exchange for a while (a
     * limit's delay): the framer decides nothing from it (100 Continue,
     * an upgrade). */
    void (*set_handler)(struct exchange *ex, const struct http_handler *handler);
    /* The router has found where the request goes (ex->vhost, ex->loc;
     * `req` as the client sent it, before any rewrite): the framer picks
     * its access log and keeps what its line needs.  Once per exchange,
     * before it is answered. */
    void (*routed)(struct exchange *ex, const struct http_request *req);
    /* Fills what the framer knows of the connection; optional. */
    void (*conn_facts)(const struct exchange *ex, struct exchange_conn_facts *out);
};

struct http_add_headers;
struct http_vhost;
struct http_location;

/* How many modules (module.h) a build may have: each has its place in a
 * location's and a vhost's `modules` (site.h). */
#define HTTP_MODULES_MAX 24

/* The per-exchange state slots of modules, as nginx's r->ctx[]: the
 * exchange knows none of them; each module has its own (`slot` in
 * struct http_module, module.h).  As many as the modules keep. */
#define EXCHANGE_CTX_SLOTS 20

/* ------------------------------------------------------ the filter chain */

/* A response head on its way through the header filters. */
struct exchange_head {
    unsigned status;
    const char *headers; /* extra header lines, each ending in CRLF */
    size_t headers_len;
    int64_t content_length; /* -1: unknown */
    struct http_str codings;
};

/* One module's stage on the response's way from the handler to the
 * framer, as nginx's header and body filters.  A module turns its filter
 * on for one exchange (exchange_add_filter()) only when it has something
 * to do there: a response no filter wants goes straight to the framer
 * (and may be spliced).  Every callback passes its input on to the next
 * stage, changed or not, with exchange_filter_begin_next() etc.; a NULL
 * callback passes it on unchanged.  A filter with a `write` or an `end`
 * is a body filter: while it is on, exchange_splice() refuses with
 * -EOPNOTSUPP, so that every body byte goes through it. */
struct exchange_filter {
    const char *name;
    unsigned order; /* its place in the chain: set by http_module_init() (module.h) */
    void (*begin)(struct exchange *ex, const struct exchange_filter *self,
                  const struct exchange_head *head);
    /* A piece of the body (never empty); exchange_writev() hands each of
     * its buffers in turn. */
    void (*write)(struct exchange *ex, const struct exchange_filter *self, const char *data,
                  size_t len);
    /* The end of the response, with its trailer lines (len 0: none):
     * the last chance to write what the filter holds back. */
    void (*end)(struct exchange *ex, const struct exchange_filter *self, const char *trailers,
                size_t len);
    /* The producer has nothing more to write for now (exchange_flush():
     * the proxy's upstream paused): write on what the filter holds back,
     * so that the client sees the body so far, then pass the flush on
     * (exchange_filter_flush_next()).  NULL: passed on. */
    void (*flush)(struct exchange *ex, const struct exchange_filter *self);
    /* An observer's callback: `bytes` of the body reached the framer,
     * after every body filter, whether written, spliced or sent from a
     * file (exchange_body_sent()).  A filter with only `begin` and `sent`
     * is no body filter: the body may still be spliced or sent from a
     * file past it. */
    void (*sent)(struct exchange *ex, const struct exchange_filter *self, uint64_t bytes);
    /* The output drained (the framer's on_drain, exchange_drained()): a
     * body filter that held output back because exchange_backed_up() said
     * so (gunzip, whose output may be much larger than its input) writes
     * on.  Returns false while it still holds some (the output backed up
     * again) or once it ended the response: the producer stays paused, and
     * nothing more of the exchange is touched.  NULL: holds nothing. */
    bool (*drain)(struct exchange *ex, const struct exchange_filter *self);
};

/* How many places the chain has: modules with a filter, at most.  The
 * order is the order of those modules in the list of modules
 * (proto/modules.c): a response head goes through the header filters,
 * its body through the body filters, from the first place to the last,
 * then to the framer, and a filter sees what those before it made of the
 * response. */
#define EXCHANGE_FILTER_MAX 8

/* Turns `f` on for this exchange, in its place (replacing what was
 * there), or off.  Call exchange_add_filter() before the response
 * begins; a body filter may turn itself off from its own callbacks. */
void exchange_add_filter(struct exchange *ex, const struct exchange_filter *f);
void exchange_remove_filter(struct exchange *ex, const struct exchange_filter *f);

/* Passes the head, a piece of the body, or the end on from `self` to the
 * next filter that is on, or to the framer. */
void exchange_filter_begin_next(struct exchange *ex, const struct exchange_filter *self,
                                const struct exchange_head *head);
void exchange_filter_write_next(struct exchange *ex, const struct exchange_filter *self,
                                const char *data, size_t len);
void exchange_filter_end_next(struct exchange *ex, const struct exchange_filter *self,
                              const char *trailers, size_t len);
void exchange_filter_flush_next(struct exchange *ex, const struct exchange_filter *self);

/* The entries of the chain for exchange_begin() and friends below. */
void exchange__begin_filtered(struct exchange *ex, unsigned status, const char *headers,
                              size_t headers_len, int64_t content_length, struct http_str codings);
void exchange__write_filtered(struct exchange *ex, const char *data, size_t len);
void exchange__writev_filtered(struct exchange *ex, const struct iovec *iov, int count);
void exchange__end_filtered(struct exchange *ex, const char *trailers, size_t len);
void exchange__flush_filtered(struct exchange *ex);
void exchange__sent_filtered(struct exchange *ex, uint64_t bytes);

/* An IPv4 or IPv6 address with its port. */
union exchange_addr {
    struct sockaddr sa; /* sa_family AF_UNSPEC: none */
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* One server asked for the exchange, as nginx keeps it in
 * r->upstream_states: what $upstream_addr, $upstream_status and the
 * $upstream_*_time variables list, one entry per server. */
struct exchange_upstream_try {
    const char *addr; /* the server's address as configured */
    /* Milliseconds from the server being asked to its connection being
     * up, its response head, the end of its response (or its failure);
     * EXCHANGE_UPSTREAM_UNKNOWN until then, or never (logged "-"). */
    uint32_t connect_ms, header_ms, response_ms;
    uint16_t status; /* its response's status, 502 or 504 when it failed; 0: none yet */
    /* When it was asked (corral_monotonic_ns()): where its client span
     * starts (proto/policy/trace.c); 0 when the asker did not say. */
    uint64_t asked_ns;
    /* The first server of a new upstream pass after an internal redirect
     * (error_page): nginx writes " : " before it, ", " before others. */
    bool new_pass;
};
#define EXCHANGE_UPSTREAM_UNKNOWN UINT32_MAX
/* The servers an exchange logs, at most: past them the last entry is
 * overwritten, so that the server that answered is always there. */
#define EXCHANGE_UPSTREAM_TRIES 8

/* The part every framer's exchange starts with.  Fields starting with `_`
 * are the framer's. */
struct exchange {
    const struct exchange_ops *_ops;
    /* The connection it came on, for as long as the exchange lives: its
     * addresses, TLS, loop and worker are the connection's, not the
     * framer's to tell per request. */
    struct http_conn *conn;
    void *data; /* the handler's: exchange_data() */
    /* The client's address for this request, set by the router's access
     * phases (access.h): the connection's peer, or what a trusted proxy's
     * header says.  AF_UNSPEC before that, and for a unix socket's
     * client. */
    union exchange_addr client;
    /* What variables (vars.h) read that only the exchange knows. */
    uint64_t request_id[2]; /* $request_id, drawn when first read; 0: not yet */
    /* The servers asked, in order (exchange_upstream_ask()). */
    struct exchange_upstream_try upstream_tries[EXCHANGE_UPSTREAM_TRIES];
    uint8_t upstream_try_count;
    /* Where the router (router.h) routed the exchange: its vhost, and its
     * location (NULL: none yet, or none found). */
    const struct http_vhost *vhost;
    const struct http_location *loc;
    bool redirected; /* an internal redirect (error_page) took it: no body */
    bool _routed;    /* the router told the framer (exchange_ops.routed) */
    /* corral's own request for another exchange (subrequest.h): the
     * router skips its access phase, as nginx skips a subrequest's. */
    bool subrequest;
    /* Answers an error of corral's own instead of the built-in answer
     * (error_page.h sets it); returns false to leave it to the built-in
     * one.  NULL: none. */
    bool (*error_hook)(struct exchange *ex, unsigned status);
    /* Each module's state, by its slot (module.h); NULL: none. */
    void *ctx[EXCHANGE_CTX_SLOTS];
    /* The status the response goes out with, whatever its handler says:
     * an error page's (as nginx's err_status), applied by error_page.c's
     * header filter; 0: the handler's. */
    unsigned status_override;
    /* The response filters on for this exchange, by their place in the
     * chain (enum exchange_filter_order); NULL: that one is off. */
    const struct exchange_filter *filters[EXCHANGE_FILTER_MAX];
    /* One bit per place above whose filter has a `begin`, and one per
     * place whose filter has a `write` or an `end`: 0 sends the response
     * straight to the framer, as with no filter at all. */
    uint8_t head_filters;
    uint8_t body_filters;
    /* One bit per place whose filter has a `flush`, and one per place
     * whose filter has a `sent`. */
    uint8_t flush_filters;
    uint8_t sent_filters;
};

/* Whether the filter at `order` is on. */
static inline bool exchange_has_filter(const struct exchange *ex, unsigned order)
{
    return order < EXCHANGE_FILTER_MAX && ex->filters[order] != NULL;
}

/* ------------------------------------------------------------- the response */

/* Answers with a complete response.  `headers` holds extra header lines,
 * each ending in CRLF ("" for none); the framer adds the length, Date,
 * Server and its own framing.  The body is left out for HEAD.  Does
 * nothing once a response has begun. */
void exchange_respond(struct exchange *ex, unsigned status, const char *headers, const char *body,
                      size_t body_len);

/* Answers an error of corral's own: through ex->error_hook (the
 * exchange's error page for `status`, error_page.h) when it takes it, else with a short text/plain
 * body: "404 Not Found\n" etc. */
void exchange_respond_error(struct exchange *ex, unsigned status);

/* Answers with the exchange's error page for `status` (ex->error_hook,
 * error_page.h) when it has one for it: true.  False: it has none, and
 * the response is the caller's to send (the proxy's
 * proxy_intercept_errors passes the backend's on). */
bool exchange_error_page(struct exchange *ex, unsigned status);

/* The built-in answer only, never an error page: for a framer about to
 * close the connection. */
void exchange_respond_builtin(struct exchange *ex, unsigned status);

/* Copies the strings of `req` into one malloc'd block (the caller frees
 * it) and points *out at them: a request outlives on_request this way.
 * Returns the block, or NULL when out of memory. */
char *exchange_request_copy(const struct http_request *req, struct http_request *out);

/* Begins a streamed response: the status, extra header lines (each ending
 * in CRLF) and the body length, or -1 if unknown (then the framer frames it:
 * HTTP/1.1 chunked, or until the connection closes for an HTTP/1.0 client).
 * No body is sent for HEAD, 1xx, 204, 304.  Only the first call counts. */
static inline void exchange_begin(struct exchange *ex, unsigned status, const char *headers,
                                  size_t headers_len, int64_t content_length)
{
    if (ex->head_filters != 0)
        exchange__begin_filtered(ex, status, headers, headers_len, content_length,
                                 (struct http_str){NULL, 0});
    else
        ex->_ops->begin(ex, status, headers, headers_len, content_length,
                        (struct http_str){NULL, 0});
}

/* The same, for a body that carries transfer codings of its own ("gzip"):
 * HTTP/1.1 announces them before the chunked coding it adds, and the
 * length is then never sent. */
static inline void exchange_begin_coded(struct exchange *ex, unsigned status, const char *headers,
                                        size_t headers_len, int64_t content_length,
                                        struct http_str codings)
{
    if (ex->head_filters != 0)
        exchange__begin_filtered(ex, status, headers, headers_len, content_length, codings);
    else
        ex->_ops->begin(ex, status, headers, headers_len, content_length, codings);
}

/* A piece of the response body (an empty one is ignored).  Output backs up
 * in the framer's buffer: see exchange_backed_up() and on_drain. */
static inline void exchange_write(struct exchange *ex, const char *data, size_t len)
{
    if (ex->body_filters != 0)
        exchange__write_filtered(ex, data, len);
    else
        ex->_ops->write(ex, data, len);
}

/* A piece of the response body gathered from `count` buffers, sent without
 * copying them together (HTTP/1.1 chunked: as one chunk, or a few for a
 * long list).  Empty buffers are ignored. */
static inline void exchange_writev(struct exchange *ex, const struct iovec *iov, int count)
{
    if (ex->body_filters != 0)
        exchange__writev_filtered(ex, iov, count);
    else
        ex->_ops->writev(ex, iov, count);
}

/* For framers: `bytes` of the body went to the client's connection (or
 * its stream), however they went; the observers are told. */
static inline void exchange_body_sent(struct exchange *ex, uint64_t bytes)
{
    if (ex->sent_filters != 0)
        exchange__sent_filtered(ex, bytes);
}

/* Sends the next `max` bytes of the response body (UINT64_MAX: until
 * `from`'s stream ends) straight from `from`'s socket to the client's,
 * inside the kernel (corral_conn_splice()).  The handler has consumed
 * what `from` had read already and written it to the exchange.  Until
 * `cb` runs, the handler writes nothing to the exchange and `from` is not
 * read.  Returns 0 (then `cb` runs exactly once, later), or -errno and
 * the handler goes on writing as usual: -EOPNOTSUPP when the framer or
 * either transport cannot (a NULL slot, TLS, a response it frames in a
 * way the length does not fit), -EAGAIN when the loop's pipes are all in
 * use, or corral_conn_splice()'s other errors. */
static inline int exchange_splice(struct exchange *ex, corral_conn *from, uint64_t max,
                                  exchange_splice_cb cb, void *arg)
{
    if (ex->_ops->splice == NULL || ex->body_filters != 0)
        return -EOPNOTSUPP;
    return ex->_ops->splice(ex, from, max, cb, arg);
}

/* Sends the next `len` bytes of the response body from the file `fd` at
 * `offset` straight to the client's socket, inside the kernel
 * (corral_conn_sendfile()).  Until `cb` runs, the handler writes nothing
 * to the exchange; `fd` stays the handler's and open until then.  `cb`
 * gets the bytes sent (the framer counts them in the body's), and
 * `error` 0 with `moved` < `len` when the file ended first (it shrank):
 * the handler then cuts the exchange off.  Returns 0 (then `cb` runs
 * exactly once, later), or -errno and the handler sends the bytes itself
 * (pread() and exchange_write()): -EOPNOTSUPP when a body filter is on
 * or the framer cannot (a NULL slot: HTTP/2; TLS; a response without a
 * body, HEAD), -EBUSY, -EAGAIN, or corral_conn_sendfile()'s other
 * errors. */
static inline int exchange_sendfile(struct exchange *ex, int fd, uint64_t offset, uint64_t len,
                                    exchange_splice_cb cb, void *arg)
{
    if (ex->_ops->sendfile == NULL || ex->body_filters != 0)
        return -EOPNOTSUPP;
    return ex->_ops->sendfile(ex, fd, offset, len, cb, arg);
}

/* Ends the response; the exchange is the framer's again. */
static inline void exchange_end(struct exchange *ex)
{
    if (ex->body_filters != 0)
        exchange__end_filtered(ex, NULL, 0);
    else
        ex->_ops->end(ex, NULL, 0);
}

/* Ends the response with trailer fields: header lines, each ending in CRLF.
 * They are sent only where the protocol can carry them after the body: in
 * HTTP/1.1 when the response is chunked (its length was -1), and in
 * HTTP/2 as a last HEADERS frame; otherwise they are dropped (RFC 9110 6.5
 * lets a recipient discard them anyway). */
static inline void exchange_end_trailers(struct exchange *ex, const char *trailers, size_t len)
{
    if (ex->body_filters != 0)
        exchange__end_filtered(ex, trailers, len);
    else
        ex->_ops->end(ex, trailers, len);
}

/* Whether some filter on for this exchange holds body bytes back until
 * told (exchange_flush()): a producer asks before it watches for pauses,
 * so that the response no filter holds costs it nothing. */
static inline bool exchange_wants_flush(const struct exchange *ex)
{
    return ex->flush_filters != 0;
}

/* The producer has written all it has for now and more may take a
 * while (the proxy: its read from the upstream found nothing more):
 * the body filters that hold bytes back (compression) write them on, so
 * that what was written so far reaches the client.  The framers send
 * what they are given at the end of the loop's turn anyway: nothing
 * reaches them.  Costs one test when no filter wants it. */
static inline void exchange_flush(struct exchange *ex)
{
    if (ex->flush_filters != 0)
        exchange__flush_filtered(ex);
}

/* Cuts the exchange off after its response began, so that the client sees
 * it incomplete (HTTP/1.1: a reset of the connection).  on_abort follows,
 * later, from the loop: a handler that frees its state first clears
 * exchange_data(). */
static inline void exchange_abort(struct exchange *ex)
{
    ex->_ops->abort(ex);
}

/* Whether the response has begun: after that, a failure can only cut the
 * exchange off (exchange_abort()), not answer it. */
static inline bool exchange_response_started(const struct exchange *ex)
{
    return ex->_ops->response_started(ex);
}

/* ------------------------------------------------------------- backpressure */

/* For framers, in place of the handler's on_drain (which `handler` is,
 * NULL: none): the response output went below the low watermark.  The
 * body filters with a `drain` write on what they held back first; the
 * handler's on_drain runs unless one of them still holds some or ended
 * the response. */
void exchange_drained(struct exchange *ex, const struct http_handler *handler);

/* Whether the response output went over the framer's high watermark (the
 * client connection's own) and has not yet drained: stop producing until
 * on_drain. */
static inline bool exchange_backed_up(const struct exchange *ex)
{
    return ex->_ops->backed_up(ex);
}

/* How many bytes of the request body come next in the client's stream as
 * they are, with no framing among them: the rest of a body sent with a
 * length, or of the chunk being read.  0 when none (between chunks, the
 * whole body read) or when they cannot move inside the kernel (a NULL slot,
 * TLS, a framer that multiplexes), and 0 outside on_body: only there does
 * the framer know that nothing it has read is left to deliver. */
static inline uint64_t exchange_request_spliceable(const struct exchange *ex)
{
    if (ex->_ops->request_spliceable == NULL)
        return 0;
    return ex->_ops->request_spliceable(ex);
}

/* Sends the next `len` bytes of the request body (at most what
 * exchange_request_spliceable() said) straight from the client's socket
 * to `to`'s, inside the kernel (corral_conn_splice()), behind whatever the
 * handler wrote to `to` before.  The framer counts them against the body's
 * limits and its end as if they had been read.  Until `cb` runs, on_body
 * is not called and the handler writes nothing to `to`; then, with
 * `moved` == `len`, the body goes on (on_body, or on_body_end when those
 * were its last bytes).  A shorter move with no error means the client
 * ended its stream: the exchange is aborted after.  Returns 0 (then `cb`
 * runs exactly once, later), or -errno and the body comes to on_body as
 * usual: -EOPNOTSUPP (a NULL slot, TLS on either side, `len` beyond what
 * follows raw), -EBUSY (already splicing), -EAGAIN (the loop's pipes are
 * all in use), or corral_conn_splice()'s other errors. */
static inline int exchange_request_splice(struct exchange *ex, corral_conn *to, uint64_t len,
                                          exchange_splice_cb cb, void *arg)
{
    if (ex->_ops->request_splice == NULL)
        return -EOPNOTSUPP;
    return ex->_ops->request_splice(ex, to, len, cb, arg);
}

/* Stops and resumes the delivery of request body bytes to on_body (and of
 * tunnel bytes to on_tunnel_data), while what they feed is backed up. */
static inline void exchange_pause_body(struct exchange *ex)
{
    ex->_ops->pause_body(ex);
}

static inline void exchange_resume_body(struct exchange *ex)
{
    ex->_ops->resume_body(ex);
}

/* ------------------------------------------------- what the exchange runs on */

/* These read the connection the exchange came on (ex->conn, http_conn.h),
 * not the framer. */

/* The loop of the worker that runs the exchange: for its clock, its timers
 * and the connections a handler opens. */
static inline corral_loop *exchange_loop(const struct exchange *ex)
{
    return http_conn_loop(ex->conn);
}

/* The worker that runs the exchange; NULL when it runs on a bare loop. */
static inline corral_worker *exchange_worker(const struct exchange *ex)
{
    return http_conn_worker(ex->conn);
}

/* `addr` as text ("192.0.2.1", "::1"), or "-"; `len` is at least
 * INET6_ADDRSTRLEN. */
void exchange_format_addr(const union exchange_addr *addr, char *buf, size_t len);

/* The peer of `c` (its PROXY header's source, if it had one) as text
 * ("192.0.2.1", "::1"), or "-".  `len` is at least INET6_ADDRSTRLEN. */
void exchange_format_peer(const struct http_conn *c, char *buf, size_t len);

/* The client's IP address as text ("192.0.2.1", "::1"), or "-"; `len` is at
 * least INET6_ADDRSTRLEN: nginx's $remote_addr, after real_ip. */
static inline void exchange_client_host(const struct exchange *ex, char *buf, size_t len)
{
    if (ex->client.sa.sa_family != AF_UNSPEC)
        exchange_format_addr(&ex->client, buf, len);
    else
        exchange_format_peer(ex->conn, buf, len);
}

/* The address the connection came from (its PROXY header's source, if it
 * had one), before real_ip: nginx's $realip_remote_addr. */
static inline void exchange_connection_host(const struct exchange *ex, char *buf, size_t len)
{
    exchange_format_peer(ex->conn, buf, len);
}

/* Whether the client speaks TLS to us. */
static inline bool exchange_tls(const struct exchange *ex)
{
    return ex->conn->tls;
}

/* Records that `addr` is asked for the exchange, `first_of_pass` when it
 * is the first server of this handler's pass, and returns its entry (the
 * last one, overwritten, when the list is full). */
struct exchange_upstream_try *exchange_upstream_ask(struct exchange *ex, const char *addr,
                                                    bool first_of_pass);

/* Milliseconds from `start_ns` (corral_monotonic_ns()) to now, for an
 * exchange_upstream_try: truncated, as $request_time is, so that a time
 * never exceeds the request's own. */
uint32_t exchange_upstream_ms_since(uint64_t start_ns);

/* Ends the server try `t` (NULL: none), once: its status, unless it has
 * one (its response's), becomes `status` (502 or 504 for a failure, as
 * nginx logs it), and its response time runs from `start_ns`. */
void exchange_upstream_try_end(struct exchange_upstream_try *t, uint64_t start_ns, unsigned status);

/* The client's transport connection (for its socket), or NULL for a fake
 * exchange without one. */
static inline const corral_conn *exchange_conn(const struct exchange *ex)
{
    return ex->conn != NULL ? ex->conn->sock : NULL;
}

/* What the framer knows of the client's connection; zero when it does not
 * tell. */
static inline void exchange_conn_facts(const struct exchange *ex, struct exchange_conn_facts *out)
{
    *out = (struct exchange_conn_facts){0};
    if (ex->_ops->conn_facts != NULL)
        ex->_ops->conn_facts(ex, out);
}

/* A module's per-exchange state, by its slot (module.h). */
static inline void *exchange_ctx(const struct exchange *ex, unsigned slot)
{
    return ex->ctx[slot];
}

static inline void exchange_set_ctx(struct exchange *ex, unsigned slot, void *state)
{
    ex->ctx[slot] = state;
}

/* The handler's per-exchange state. */
static inline void exchange_set_data(struct exchange *ex, void *data)
{
    ex->data = data;
}

static inline void *exchange_data(const struct exchange *ex)
{
    return ex->data;
}

/* ------------------------------------------------------------------ tunnels */

/* After a "101 Switching Protocols" response: the client stops speaking
 * HTTP and its bytes go to the handler's on_tunnel_data, until it closes
 * (then on_abort). */
static inline void exchange_tunnel(struct exchange *ex)
{
    ex->_ops->tunnel(ex);
}

/* Bytes to the client through the tunnel; exchange_backed_up() applies. */
static inline void exchange_tunnel_write(struct exchange *ex, const char *data, size_t len)
{
    ex->_ops->tunnel_write(ex, data, len);
}

/* Ends the tunnel once what was written is sent: on_abort follows, later. */
static inline void exchange_tunnel_close(struct exchange *ex)
{
    ex->_ops->tunnel_close(ex);
}

#endif
