/*
 * http1.h: the server side of HTTP/1.1 on a libcorral connection, the
 * framer of proto/exchange.h: strict request parsing (llhttp, every lenient
 * flag off, plus the checks llhttp leaves to its caller), keep-alive,
 * pipelining, timeouts and response framing.  It routes requests by the
 * site it listens for (site.h); handlers plug in through struct
 * http_handler (exchange.h).  Implemented by http1.c (the
 * connection) and http1_response.c (responses).
 */
#ifndef CORRAL_PROTO_HTTP1_H
#define CORRAL_PROTO_HTTP1_H

#include "proto/counter.h"
#include "proto/exchange.h"
#include "proto/headers.h"
#include "proto/site.h" /* what a listening address serves: vhosts, locations, counters */

#include <corral.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* The connection handler to give corral_server_listen() with an http_site
 * as its data. */
extern const struct corral_conn_handler http1_server_handler;

#endif
