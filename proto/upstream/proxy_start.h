/*
 * proxy_start.h: what the proxy works out of a request before it asks
 * the first server, the same over HTTP/1.1 (proxy.c) and HTTP/2
 * (proxy_h2.c) to the backend.
 */
#ifndef CORRAL_PROTO_PROXY_START_H
#define CORRAL_PROTO_PROXY_START_H

#include "proto/http/exchange.h"
#include "proto/upstream/upstream.h"

#include <stdbool.h>
#include <stdint.h>

/* Kept by a proxy exchange for its life. */
struct proxy_start {
    char client[80];     /* the client's address, for X-Forwarded-For and hash */
    uint64_t started_ms; /* loop clock, for proxy_next_upstream_timeout */
    uint32_t hash;       /* of the balancing key (hash, ip_hash); else 0 */
    bool idempotent;     /* the method may go to another server after a failure */
};

struct http_add_headers;

/* Gives `ex` the location's add_header rules `add_headers` (NULL: none)
 * and fills *st from `req` for a request to `upstream`; the exchange's
 * thread. */
void proxy_start_init(struct proxy_start *st, struct exchange *ex,
                      const struct http_add_headers *add_headers,
                      const struct proxy_upstream *upstream, const struct http_request *req);

#endif
