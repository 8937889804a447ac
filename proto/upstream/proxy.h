/*
 * proxy.h: the reverse proxy: the `proxy_pass` location handler that streams
 * requests and responses between a client exchange and an upstream
 * connection, with retries.  Upstream groups (balancing, passive health,
 * pools of idle keep-alive connections) are in proto/upstream/upstream.h.
 */
#ifndef CORRAL_PROTO_PROXY_H
#define CORRAL_PROTO_PROXY_H

#include "proto/http/exchange.h"
#include "proto/upstream/proxy_conf.h" /* the settings and their defaults, PROXY_RESPONSE_HEAD_LIMIT */
#include "proto/upstream/upstream.h" /* upstream_new() and the rest of an upstream's API */

struct vars_template;
struct http_regex;
struct proxy_redirects;

/* One proxy_pass location.  Locations may share an upstream, and with it
 * its pools and health state; the timeouts are each location's own. */
struct proxy_location {
    struct proxy_upstream *upstream;
    struct proxy_conf conf;                /* timeouts and the response head bound */
    const struct http_header *set_headers; /* proxy_set_header: replace or add; "" removes */
    size_t set_header_count;
    /* The values with $variables, one per set_headers entry (NULL: its
     * value is literal); NULL: none has any.  An empty result removes. */
    const struct vars_template *const *set_values;
    const struct http_add_headers *add_headers; /* NULL: none */
    /* proxy_pass with a path: a request path starting with `strip` (the
     * location's prefix) goes on with that part replaced by `uri`;
     * uri.data NULL: the target goes on as it is. */
    struct http_str strip, uri;
    const struct http_regex *captures;   /* the location's regex, when a value reads its groups */
    const struct http_str *hide_headers; /* proxy_hide_header: response headers to drop */
    size_t hide_header_count;
    /* proxy_upgrade: the Upgrade protocols passed on (proxy_head_upgrade_allowed());
     * none when upgrade_count is 0, unless upgrade_any: every protocol but
     * the HTTP versions (nginx's proxy_set_header Upgrade $http_upgrade). */
    const char *const *upgrades;
    size_t upgrade_count;
    bool upgrade_any;
    /* proxy_redirect: the rules for the response's Location and Refresh
     * (proxy_redirect.h); NULL: off.  `redirects_read_request`: some value
     * reads the request, which the exchange then keeps a copy of. */
    const struct proxy_redirects *redirects;
    bool redirects_read_request;
    /* proxy_http_version 2 or grpc_pass: HTTP/2 to the backend, through
     * proxy_h2_handler; `grpc`: grpc_pass, whose gRPC calls get corral's
     * own errors as grpc-status answers. */
    bool http2, grpc;
};

/* What proxy_upgrade allows when a location does not say. */
extern const char *const proxy_upgrade_default[1];

/* The `proxy_pass` handler: handler_data is a struct proxy_location. */
extern const struct http_handler proxy_handler;

#endif
