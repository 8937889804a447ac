/*
 * uri.h: building request targets: percent-encoding the bytes a request
 * line cannot carry, and replacing a matched path prefix (proxy_pass with a
 * path).  Used by the rewrite phase, error_page and the proxy.
 */
#ifndef CORRAL_PROTO_URI_H
#define CORRAL_PROTO_URI_H

#include "proto/http/http.h"
#include "proto/http/vars.h"

#include <stddef.h>

/* Appends to `out` the request's target with its path's prefix `strip`
 * replaced by `uri` (proxy_pass with a path), or as it is when the path
 * does not start with `strip` or uri.data is NULL. */
void uri_replace_prefix(const struct http_request *req, struct http_str strip, struct http_str uri,
                        struct vars_buf *out);

/* Appends `len` bytes of a URI to `b`, percent-encoding what a request
 * line cannot carry (spaces, control and non-ASCII bytes): a value with
 * variables may hold a header's. */
void uri_add_bytes(struct vars_buf *b, const char *data, size_t len);

#endif
