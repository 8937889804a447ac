/*
 * http1.h: the server side of HTTP/1.1 on a libcorral connection: strict
 * request parsing (llhttp, every lenient flag off, plus the checks llhttp
 * leaves to its caller), routing to a virtual host and location, keep-alive,
 * pipelining, timeouts, and response writing.  Handlers (return, admin,
 * proxy) plug in through struct http_handler.  Implemented by http1.c (the
 * connection), http1_response.c (responses), route.c and return.c.
 */
#ifndef CORRAL_PROTO_HTTP1_H
#define CORRAL_PROTO_HTTP1_H

#include "proto/counter.h"
#include "proto/headers.h"
#include "proto/http_limits.h" /* struct http_limits, in each vhost */

#include <corral.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#define HTTP_MAX_STATUS 600

struct http_exchange;

/* A parsed request head.  Its strings point into the connection's input and
 * are valid only during on_request. */
struct http_request {
    struct http_str method;
    struct http_str target;    /* "/path?query" (also when sent in absolute-form) */
    struct http_str path;      /* target without the query */
    struct http_str host;      /* Host header without the port; may be empty */
    struct http_str authority; /* an absolute-form target's host[:port], which
                                  stands for Host (RFC 9112 3.2.2); else empty */
    unsigned version_minor;    /* HTTP/1.x */
    const struct http_header *headers;
    size_t header_count;
    bool head;               /* HEAD: the response has no body */
    bool chunked;            /* Transfer-Encoding: chunked */
    bool has_body;           /* chunked or Content-Length > 0 */
    bool has_content_length; /* a Content-Length header, even of 0 */
    uint64_t content_length;
    bool keep_alive; /* what the client asked for */
    bool expect_continue;
    bool upgrade;                     /* Upgrade with "Connection: upgrade" (WebSocket) */
    struct http_str upgrade_protocol; /* the Upgrade header's value */
};

/* What a location does with a request. */
struct http_handler {
    const char *name;
    /* A request head arrived: answer now with http_respond(), or later. */
    void (*on_request)(struct http_exchange *ex, const struct http_request *req, void *data);
    /* Request body bytes; optional (NULL discards them). */
    void (*on_body)(struct http_exchange *ex, const char *data, size_t len);
    /* The whole request body has arrived; optional. */
    void (*on_body_end)(struct http_exchange *ex);
    /* The client connection closed before the response was complete;
     * release whatever the exchange holds.  Optional. */
    void (*on_abort)(struct http_exchange *ex);
    /* The client took the response output below the low watermark, after
     * it had exceeded the high one: resume the producer.  Optional. */
    void (*on_drain)(struct http_exchange *ex);
    /* After http_exchange_tunnel(): raw bytes from the client.  Returns how
     * many were taken; the rest comes again.  Optional. */
    size_t (*on_tunnel_data)(struct http_exchange *ex, const char *data, size_t len);
};

struct http_location {
    const char *path;
    size_t path_len;
    bool exact;
    const struct http_handler *handler;
    void *handler_data;
};

struct http_vhost {
    const char *const *names; /* exact names, "*.suffix" wildcards */
    size_t name_count;
    const struct http_location *locations;
    size_t location_count;
    struct http_limits limits;
};

/* Everything served on one listening address: its virtual hosts (the first
 * is the default) and per-worker counters. */
struct access_log;
struct tls_server;

struct http_site {
    const struct http_vhost *vhosts;
    size_t vhost_count;
    struct tls_server *tls;        /* NULL: plain HTTP */
    struct access_log *access_log; /* NULL: none */
    struct http_stats *stats;      /* one per worker, indexed by corral_worker_index() */
};

enum http_timeout_kind {
    HTTP_TIMEOUT_HEADER, /* the request head took too long: 408 */
    HTTP_TIMEOUT_BODY,   /* the request body stalled: closed */
    HTTP_TIMEOUT_SEND,   /* the client stopped reading the response: closed */
    HTTP_TIMEOUT_KINDS,
};
extern const char *const http_timeout_kind_names[HTTP_TIMEOUT_KINDS];

/* Per-worker counters, written by the worker only. */
struct http_stats {
    _Atomic uint64_t responses[HTTP_MAX_STATUS];
    _Atomic uint64_t timeouts[HTTP_TIMEOUT_KINDS];
} __attribute__((aligned(64)));

/* The connection handler to give corral_server_listen() with an http_site
 * as its data. */
extern const struct corral_conn_handler http1_server_handler;

/* Answers the exchange with a complete response.  `headers` holds extra
 * header lines, each ending in CRLF ("" for none); Content-Length, Date,
 * Server and Connection are added.  The body is left out for HEAD. */
void http_respond(struct http_exchange *ex, unsigned status, const char *headers, const char *body,
                  size_t body_len);

/* A streamed response: begin with the status, extra header lines (each
 * ending in CRLF) and the body length, or -1 if unknown (then the body is
 * sent chunked, or until the connection closes for an HTTP/1.0 client);
 * write the body in pieces; end.  No body is sent for HEAD, 1xx, 204, 304.
 * The client's output buffer applies backpressure: see on_drain and
 * corral_conn_pending_output(http_exchange_conn(ex)). */
void http_response_begin(struct http_exchange *ex, unsigned status, const char *headers,
                         size_t headers_len, int64_t content_length);
/* The same, for a body that carries transfer codings besides chunked
 * ("gzip"): they are announced before the chunked coding corral adds. */
void http_response_begin_coded(struct http_exchange *ex, unsigned status, const char *headers,
                               size_t headers_len, int64_t content_length, struct http_str codings);
void http_response_write(struct http_exchange *ex, const char *data, size_t len);
void http_response_end(struct http_exchange *ex);
bool http_exchange_response_started(const struct http_exchange *ex);

/* The client's IP address as text ("192.0.2.1", "::1"), or "-"; `len` is at
 * least INET6_ADDRSTRLEN. */
void http_client_host(const corral_conn *conn, char *buf, size_t len);

/* For the access log's $upstream_response_time. */
void http_exchange_note_upstream_time(struct http_exchange *ex, uint64_t ns);

/* After a "101 Switching Protocols" response: the client connection stops
 * speaking HTTP and its bytes go to the handler's on_tunnel_data, until it
 * closes (then on_abort).  Write to the client with corral_conn_write() on
 * http_exchange_conn(). */
void http_exchange_tunnel(struct http_exchange *ex);

/* Answers with a short text/plain body: "404 Not Found\n" etc. */
void http_respond_error(struct http_exchange *ex, unsigned status);

/* The handler's per-exchange state. */
void http_exchange_set_data(struct http_exchange *ex, void *data);
void *http_exchange_data(const struct http_exchange *ex);
corral_conn *http_exchange_conn(const struct http_exchange *ex);
/* Whether the client speaks TLS to us. */
bool http_exchange_tls(const struct http_exchange *ex);

/* Finds the location for `path` in `vhost`: an exact match first, else the
 * longest prefix.  NULL if none. */
const struct http_location *http_find_location(const struct http_vhost *vhost, const char *path,
                                               size_t len);

/* Picks the virtual host for `host` (without port): an exact name, then the
 * longest matching wildcard, else the site's first. */
const struct http_vhost *http_find_vhost(const struct http_site *site, const char *host,
                                         size_t len);

/* A tls_sni_select_fn for a site's TLS server (`site` is the http_site):
 * SNI picks the certificates of the vhost that Host would pick. */
size_t http_site_sni_select(void *site, const char *name, size_t len);

/* The handler of `return CODE "TEXT"`: handler_data is a struct http_return. */
struct http_return {
    unsigned status;
    const char *text;
    size_t text_len;
};
extern const struct http_handler http_return_handler;

#endif
