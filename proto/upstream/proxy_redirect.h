/*
 * proxy_redirect.h: nginx's `proxy_redirect`: the rules that rewrite the
 * Location and Refresh headers of a proxied response, compiled per
 * location, and the rewriting itself (proxy_redirect.c), which needs no
 * socket.
 */
#ifndef CORRAL_PROTO_PROXY_REDIRECT_H
#define CORRAL_PROTO_PROXY_REDIRECT_H

#include "proto/http/http.h"
#include "proto/http/vars.h"

#include <stdbool.h>
#include <stddef.h>

struct http_regex;
struct vars_template;

/* One `proxy_redirect REDIRECT REPLACEMENT` line (or `default`, made
 * into one from proxy_pass and the location).  Either `regex` (a ~ or ~*
 * line: matched against the value, which the replacement, reading its
 * groups, replaces whole) or a text (the value starts with it: that part
 * is replaced), the text's $variables in `pattern` when it has any. */
struct proxy_redirect {
    const struct http_regex *regex;
    struct http_str text;                    /* when regex is NULL and pattern too */
    const struct vars_template *pattern;     /* the text with $variables; NULL: none */
    const struct vars_template *replacement; /* never NULL */
};

/* A location's lines, in the order written: the first that matches
 * rewrites. */
struct proxy_redirects {
    const struct proxy_redirect *items;
    size_t count;
};

/* Rewrites `value`, the part of a header value from byte `prefix` on
 * (the whole of a Location, what follows "url=" in a Refresh), with the
 * first rule of `rules` that matches it, into `out` (the whole value,
 * its first `prefix` bytes kept).  `ctx` reads the variables (its
 * captures are set here for a regex).  Returns true when a rule matched
 * (out->failed: out of memory), false when none did (`out` untouched). */
bool proxy_redirect_value(const struct proxy_redirects *rules, struct http_str value, size_t prefix,
                          struct vars_ctx *ctx, struct vars_buf *out);

/* Rewrites the header `name`: `value` into `out` when it is a Location
 * or a Refresh with "url=" that a rule matches (true), else false. */
bool proxy_redirect_header(const struct proxy_redirects *rules, struct http_str name,
                           struct http_str value, struct vars_ctx *ctx, struct vars_buf *out);

#endif
