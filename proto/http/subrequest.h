/*
 * subrequest.h: a request that corral makes of itself for an exchange, as
 * nginx's subrequests: a GET of a URI on the exchange's server, with the
 * client's header fields and no body, routed as any request (its location
 * may proxy_pass it) but for the access phase, which a subrequest skips
 * as in nginx.  Its response head is kept; its body is read and dropped.
 * auth_request (proto/policy/auth_request.c) and the cache's background
 * update (proto/cache/cache.c) are its users.
 */
#ifndef CORRAL_PROTO_SUBREQUEST_H
#define CORRAL_PROTO_SUBREQUEST_H

#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>

struct subrequest;

/* The subrequest is over: its status is known (0: it failed before an
 * answer, or was cut off).  Called from the loop, never from inside
 * subrequest_start(); the subrequest stays until subrequest_free(). */
typedef void (*subrequest_done_fn)(struct subrequest *sr, void *arg);

/* Starts a GET of `uri` ("/path?query", `len` bytes) for `parent`, whose
 * request (as the walk has it, e.g. a hold's copy: it must outlive the
 * call only) lends its header fields.  Up to `body_max` bytes of the
 * response body are kept (0: none).  Returns NULL when out of memory. */
struct subrequest *subrequest_start(struct exchange *parent, const struct http_request *req,
                                    const char *uri, size_t len, size_t body_max,
                                    subrequest_done_fn done, void *arg);

/* The same, detached from `parent`: its connection is its own (a copy
 * of what `parent`'s tells: its site, whether it speaks TLS; no peer
 * address of its own but `parent`'s client address), so that it goes on
 * once `parent` and its client are gone, on the same worker.  Its owner
 * must not wait for `parent` to free it: `done` does, or the owner's
 * own end (proxy_cache_background_update, proto/cache/cache.c).  Its
 * upstream connections keep a stopping worker as a client's do, up to
 * its drain time; past that its loop no longer runs, and its owner must
 * free it when the worker's thread ends. */
struct subrequest *subrequest_start_detached(struct exchange *parent,
                                             const struct http_request *req, const char *uri,
                                             size_t len, subrequest_done_fn done, void *arg);

/* The response body it kept, `*len` bytes; NULL when it was longer than
 * `body_max` (or memory ran out): not to be trusted whole. */
const char *subrequest_body(const struct subrequest *sr, size_t *len);

/* Its response status; 0 until it is over, or when it failed. */
unsigned subrequest_status(const struct subrequest *sr);

/* Its exchange: for evaluating variables in its context ($upstream_*,
 * $upstream_http_NAME). */
struct exchange *subrequest_exchange(struct subrequest *sr);

/* The subrequest whose exchange `ex` is; NULL: `ex` is no subrequest. */
struct subrequest *subrequest_of(const struct exchange *ex);

/* The value of the first response header field `name` (`len` bytes, in
 * $upstream_http_NAME's spelling: lowercase, '_' for '-') into *out,
 * which lives as long as the subrequest; false: none. */
bool subrequest_header(const struct subrequest *sr, const char *name, size_t len,
                       struct http_str *out);

/* Ends it, cutting it off if it still runs (its handler is told, as when
 * a client goes), and frees it. */
void subrequest_free(struct subrequest *sr);

#endif
