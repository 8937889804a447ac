/*
 * proxy_head.h: the heads the proxy forwards (proxy_head.c): the request
 * head it sends the upstream and the response fields it passes on.
 */
#ifndef CORRAL_PROTO_PROXY_HEAD_H
#define CORRAL_PROTO_PROXY_HEAD_H

#include "proto/upstream/http1_client.h"
#include "proto/upstream/proxy.h"

struct vars_ctx;

/* What shapes a forwarded request head besides the request itself. */
struct proxy_head_request {
    const char *client;  /* the client's address, appended to X-Forwarded-For */
    bool tls;            /* the client speaks TLS: X-Forwarded-Proto: https */
    bool chunked;        /* the body goes out chunked, else with its length */
    bool upgrade;        /* the client asks to switch protocols */
    struct exchange *ex; /* what proxy_set_header's variables read */
};

/* Whether an upgrade to `upgrade` (a client's Upgrade value, a list of
 * protocols) goes on to `loc`'s upstream: every protocol listed must be
 * allowed, and none is an HTTP version (h2c, h2, HTTP/x), which would
 * open a tunnel that the proxy's own checks never see. */
bool proxy_head_upgrade_allowed(const struct proxy_location *loc, struct http_str upgrade);

/* The request head for the upstream, rebuilt from parsed fields: the
 * hop-by-hop fields dropped (RFC 9110 7.6.1), proxy_set_header applied,
 * Host, X-Forwarded-For, Via and X-Forwarded-Proto, then the framing.
 * Sets *head (the caller frees it with proxy_head_free()) and *len;
 * returns 0 or -ENOMEM. */
int proxy_head_build(const struct proxy_location *loc, const struct http_request *req,
                     const struct proxy_head_request *how, char **head, size_t *len);

/* Frees a head proxy_head_build() made (NULL: nothing), on any thread. */
void proxy_head_free(char *head);

/* The response head's fields for the client: the upstream's, less the
 * hop-by-hop ones and those corral replaces or proxy_hide_header hides (a
 * 101 keeps its Upgrade and Connection), its Location and Refresh
 * rewritten by proxy_redirect, whose variables read `ctx`.  Appends them to
 * `out` (as "Name: value\r\n" lines; the caller starts it, with
 * http1_client_head_init() on a buffer of its stack for a head that usually
 * fits, and frees it with http1_client_head_free() whatever the outcome);
 * returns 0 or -ENOMEM. */
int proxy_head_response(const struct proxy_location *loc, const struct http1_client_head *head,
                        struct vars_ctx *ctx, struct h1_head_buf *out);

#endif
