/*
 * proxy.h: the reverse proxy: upstream groups with per-worker pools of idle
 * keep-alive connections, balancing, passive health checks, retries, and the
 * `proxy_pass` location handler that streams requests and responses
 * between a client exchange and an upstream connection.
 */
#ifndef CORRAL_PROTO_PROXY_H
#define CORRAL_PROTO_PROXY_H

#include "proto/http1.h"

enum proxy_balance {
    PROXY_BALANCE_ROUND_ROBIN,
    PROXY_BALANCE_LEAST_CONN,
    PROXY_BALANCE_HASH, /* by client address */
};

/* Kinds of upstream failure, for corral_upstream_errors_total{kind=...}. */
enum proxy_error_kind {
    PROXY_ERROR_CONNECT, /* refused, unreachable: 502 */
    PROXY_ERROR_TIMEOUT, /* connect, read or send timeout: 504 */
    PROXY_ERROR_RESET,   /* closed or reset before the response was complete */
    PROXY_ERROR_INVALID, /* an unparsable response: 502 */
    PROXY_ERROR_TLS,     /* the TLS handshake or certificate check failed: 502 */
    PROXY_ERROR_KINDS,
};
extern const char *const proxy_error_kind_names[PROXY_ERROR_KINDS];

struct proxy_server_conf {
    const char *address; /* "127.0.0.1:9001" */
    unsigned weight;
    unsigned max_fails;       /* 0: never marked down */
    uint32_t fail_timeout_ms; /* how long a failed server is skipped */
};

struct proxy_upstream_conf {
    const char *name;
    const struct proxy_server_conf *servers;
    size_t server_count;
    enum proxy_balance balance;
    unsigned keepalive;       /* idle connections kept per worker */
    uint32_t idle_timeout_ms; /* an idle pooled connection is closed after this */
    struct tls_client *tls;   /* NULL: plain HTTP; the upstream owns it once created */
};

struct proxy_upstream;

/* Creates an upstream for `workers` workers (per-worker state is indexed by
 * corral_worker_index()).  Returns 0, -EINVAL for an unusable address, or
 * -ENOMEM. */
int proxy_upstream_new(const struct proxy_upstream_conf *conf, unsigned workers,
                       struct proxy_upstream **out);
/* Frees an upstream no worker uses any more. */
void proxy_upstream_free(struct proxy_upstream *upstream);
const char *proxy_upstream_name(const struct proxy_upstream *upstream);
/* Failures of `kind` counted so far, over all workers; safe from any thread. */
uint64_t proxy_upstream_errors(const struct proxy_upstream *upstream, enum proxy_error_kind kind);

/* The default bound on a response head, as nginx's proxy_buffer_size. */
#define PROXY_RESPONSE_HEAD_LIMIT (8 * 1024)

/* One proxy_pass location.  Locations may share an upstream, and with it
 * its pools and health state; the timeouts are each location's own. */
struct proxy_location {
    struct proxy_upstream *upstream;
    uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms;
    const struct http_header *set_headers; /* proxy_set_header: replace or add; "" removes */
    size_t set_header_count;
    const struct http_str *hide_headers; /* proxy_hide_header: response headers to drop */
    size_t hide_header_count;
    /* proxy_buffer_size: the most bytes a response head (status line and
     * headers) may take; a longer one gets 502.  0: PROXY_RESPONSE_HEAD_LIMIT. */
    size_t response_head_limit;
};

/* The `proxy_pass` handler: handler_data is a struct proxy_location. */
extern const struct http_handler proxy_handler;

#endif
