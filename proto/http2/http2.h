/*
 * http2.h: the server side of HTTP/2 (RFC 9113) on h2_session.h, the second
 * framer of proto/http/exchange.h: every stream is one exchange, routed by the
 * site (site.h) as HTTP/1.1 routes a request.  proto/serve/ gives it the
 * connections that chose it: ALPN h2, or the connection preface on a
 * cleartext port of a site with HTTP/2 on.
 */
#ifndef CORRAL_PROTO_HTTP2_H
#define CORRAL_PROTO_HTTP2_H

#include "proto/counter.h"
#include "proto/http2/http2_conf.h"
#include "proto/http/site.h"

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>

/* What a client sends first on an HTTP/2 connection (RFC 9113 3.4). */
#define HTTP2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define HTTP2_PREFACE_LEN 24

/* /metrics names of enum http2_counter (site.h). */
extern const char *const http2_counter_names[HTTP2_COUNTERS];

/* The HTTP/2 framer (struct http_framer): its on_close aborts the
 * streams still open and frees the connection's state. */
extern const struct http_framer http2_framer;

/* Serves the connection `from` describes (of a site whose http2 settings
 * are set) with HTTP/2, from its next input on, preface included: a new
 * connection object, a copy of `from` with http2_framer as its framer, set
 * as the transport connection's data.  The caller frees `from`'s framer
 * state.  Returns NULL when out of memory, `from` unchanged. */
struct http_conn *http2_conn_new(const struct http_conn *from);

#endif
