/*
 * http1.h: the server side of HTTP/1.1 on a libcorral connection, the
 * framer of proto/http/exchange.h: strict request parsing (llhttp, every lenient
 * flag off, plus the checks llhttp leaves to its caller), keep-alive,
 * pipelining, timeouts and response framing.  It routes requests by the
 * site it listens for (site.h); handlers plug in through struct
 * http_handler (exchange.h).  Implemented by http1.c (the
 * connection) and http1_response.c (responses).  proto/serve/ gives it the
 * connections that speak HTTP/1.1.
 */
#ifndef CORRAL_PROTO_HTTP1_H
#define CORRAL_PROTO_HTTP1_H

#include "proto/counter.h"
#include "proto/http/exchange.h"
#include "proto/http/http.h"
#include "proto/http/site.h" /* what a listening address serves: vhosts, locations, counters */

#include <corral.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* The HTTP/1.1 framer, which proto/serve/ gives a connection. */
extern const struct http_framer http1_framer;

/* Serves `conn`, just accepted for `site`, with HTTP/1.1: the connection
 * object (struct http_conn, set as `conn`'s data), with http1_framer as
 * its framer and the timeouts of a connection waiting for its first
 * request.  NULL when out of memory. */
struct http_conn *http1_conn_new(corral_conn *conn, const struct http_site *site);

/* Frees the HTTP/1.1 state of a connection that another framer serves
 * before it read anything, and nothing else: the connection goes on. */
void http1_conn_free(struct http_conn *c);

/* Answers plain HTTP sent to a TLS port (tls_conn_plaintext()) with
 * nginx's 400 and its words, then closes (reading what the client still
 * sends, so that the answer is not lost to a reset).  Returns `len`. */
size_t http1_reject_plaintext(struct http_conn *c, const char *data, size_t len);

/* Where a stopping site's connections go on (a reload: the site of the new
 * configuration for the same address; a binary upgrade: the new process),
 * chosen by the program that runs the sites.  Called on the stopping
 * worker: first with `detached` false, to ask whether `conn` can go on (0
 * or -ENOENT); then, once it is detached from its worker, to rebind it
 * (http1_conn_rebind()) and hand it over (corral_conn_adopt()), or pass it
 * on: 0, or -errno when it cannot, and the connection is closed as it would
 * have been without a successor. */
typedef int (*http1_handover_fn)(const struct http_site *site, corral_conn *conn, bool detached);

/* Sets the handover (NULL: none, stopping closes idle connections).  Before
 * any connection is served. */
void http1_set_handover(http1_handover_fn fn);

/* Makes a detached idle connection one of `site`'s, served by its worker
 * `worker`, from its next request on. */
void http1_conn_rebind(corral_conn *conn, const struct http_site *site, unsigned worker);

#endif
