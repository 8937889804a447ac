/*
 * proxy_pair.h: the real corral server of the fuzz targets of the request
 * path, on unix sockets: a front listener whose locations answer with
 * `return` (/) or proxy (/p, setting and hiding headers) to a back
 * listener that answers with `return`.  It runs until the process ends.
 */
#ifndef CORRAL_FUZZ_PROXY_PAIR_H
#define CORRAL_FUZZ_PROXY_PAIR_H

#include "proto/http2/http2.h"
#include "proto/upstream/proxy.h"

#include <stddef.h>
#include <stdint.h>

/* Starts the server, on the first call only: its sockets are
 * /tmp/corral-`name`-PID-front.sock and -back.sock, removed at exit.
 * `http2` (copied; NULL: none): the front site's HTTP/2 conf. */
void proxy_pair_start(const char *name, const struct http2_conf *http2);

/* A one-worker server listening on unix:`front` for `site`, with
 * `*upstream` made: one server, unix:`back`, keepalive 4.  Not started;
 * aborts on failure.  proxy_pair_start() makes its server with it, and so
 * does a target that plays the backend itself. */
corral_server *proxy_pair_server(const char *front, const char *back, struct http_site *site,
                                 struct proxy_upstream **upstream);

/* One connection to the front listener: `prefix`, then `data`, then the
 * response is read until the server closes. */
void proxy_pair_exchange(const void *prefix, size_t prefix_len, const uint8_t *data, size_t size);

#endif
