/*
 * proxy_start.c: what the proxy works out of a request before it asks
 * the first server (proxy_start.h).
 */
#include "proto/upstream/proxy_start.h"

#include "proto/policy/add_header.h"
#include "proto/upstream/balance.h"

void proxy_start_init(struct proxy_start *st, struct exchange *ex,
                      const struct http_add_headers *add_headers,
                      const struct proxy_upstream *upstream, const struct http_request *req)
{
    add_header_set_rules(ex, add_headers);
    st->idempotent = http_method_idempotent(req->method);
    st->started_ms = corral_loop_now(exchange_loop(ex));
    exchange_client_host(ex, st->client, sizeof(st->client));
    if (upstream->balance == PROXY_BALANCE_HASH || upstream->balance == PROXY_BALANCE_IP_HASH)
        st->hash = balance_key_hash(upstream->key, req, st->client);
}
