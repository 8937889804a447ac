/*
 * http2.h: the server side of HTTP/2 (RFC 9113) over libnghttp2, the second
 * framer of proto/http/exchange.h: every stream is one exchange, routed by the
 * site (site.h) as HTTP/1.1 routes a request.  An HTTP/1.1 connection of a
 * site with HTTP/2 on hands itself over when its first bytes are the
 * connection preface (after ALPN h2, or with prior knowledge).
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

/* One HTTP/2 connection; it lives inside the connection that handed over. */
struct http2_conn;

/* Takes over `conn` (of `site`, whose http2 settings are set) for HTTP/2:
 * the caller hands it every event of the connection from then on, starting
 * with the input, preface included.  Returns NULL when out of memory. */
struct http2_conn *http2_conn_new(corral_conn *conn, const struct http_site *site);

/* Tells the HTTP/2 connection that its peer address came from a PROXY
 * header, for $proxy_protocol_addr. */
void http2_conn_note_proxy_address(struct http2_conn *h2);

/* The connection's events, as struct corral_conn_handler has them. */
size_t http2_on_data(struct http2_conn *h2, const char *data, size_t len);
void http2_on_eof(struct http2_conn *h2);
void http2_on_drain(struct http2_conn *h2);
void http2_on_deadline(struct http2_conn *h2);
void http2_on_stop(struct http2_conn *h2);
/* The last one: aborts the streams still open and frees `h2`. */
void http2_on_close(struct http2_conn *h2, int error);

#endif
