/*
 * rewrite.h: `rewrite REGEX REPLACEMENT [last|break|redirect|permanent]`
 * at server and location level, as nginx runs them: a vhost with any
 * rewrite routes its requests through the rewrite handler, which rewrites
 * the URI, searches the locations again and hands the request on.
 */
#ifndef CORRAL_PROTO_REWRITE_H
#define CORRAL_PROTO_REWRITE_H

#include "proto/exchange.h"

#include <stdbool.h>
#include <stddef.h>

/* A URI may be rewritten and its location searched again this many times;
 * one more is a loop, answered 500 as nginx does. */
#define HTTP_REWRITE_CYCLES_MAX 10

enum http_rewrite_flag {
    HTTP_REWRITE_NEXT,      /* no flag: on to the next rewrite, then search again */
    HTTP_REWRITE_LAST,      /* stop rewriting, search the locations again */
    HTTP_REWRITE_BREAK,     /* stop rewriting, stay in this location */
    HTTP_REWRITE_REDIRECT,  /* 302 to the replacement */
    HTTP_REWRITE_PERMANENT, /* 301 to the replacement */
};

struct http_regex;
struct vars_template;

struct http_rewrite {
    const struct http_regex *regex;          /* matched against the path */
    const struct vars_template *replacement; /* may read the regex's groups */
    enum http_rewrite_flag flag;
    /* The replacement starts with http://, https:// or $scheme: a redirect
     * (302 without a flag), as in nginx. */
    bool absolute;
};

struct http_rewrites {
    const struct http_rewrite *items;
    size_t count;
};

struct vars_buf;

/* Appends to `out` the request's target with its path's prefix `strip`
 * replaced by `uri` (proxy_pass with a path), or as it is when the path
 * does not start with `strip` or uri.data is NULL. */
void http_replace_prefix(const struct http_request *req, struct http_str strip, struct http_str uri,
                         struct vars_buf *out);

/* Appends `len` bytes of a URI to `b`, percent-encoding what a request
 * line cannot carry (spaces, control and non-ASCII bytes): a value with
 * variables may hold a header's. */
void http_add_uri_bytes(struct vars_buf *b, const char *data, size_t len);

/* The handler of a vhost's routing location (http_vhost.router):
 * handler_data is the struct http_vhost.  It forwards the exchange's other
 * callbacks to the handler it routed to. */
extern const struct http_handler http_rewrite_handler;

#endif
