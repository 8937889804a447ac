/*
 * serve.h: HTTP on an accepted connection, above the framers: the
 * connection handler every HTTP site listens with.  It makes the
 * connection object (proto/http/http_conn.h), takes the PROXY header,
 * starts TLS, and chooses the framer that serves the connection:
 * HTTP/2 (proto/http2/) after ALPN h2, or for the connection preface on a
 * cleartext port of a site with HTTP/2 on; HTTP/1.1 (proto/http1/)
 * otherwise.
 */
#ifndef CORRAL_PROTO_SERVE_H
#define CORRAL_PROTO_SERVE_H

#include "proto/http/site.h" /* struct http_site, each listener's data */

#include <corral.h>

/* The connection handler to give corral_server_listen() with an http_site
 * (proto/http/site.h) as its data. */
extern const struct corral_conn_handler serve_handler;

#endif
