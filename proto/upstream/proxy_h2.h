/*
 * proxy_h2.h: the handler of proxy_pass locations that speak HTTP/2 to
 * their backend (proxy_http_version 2) and of grpc_pass locations.
 */
#ifndef CORRAL_PROTO_PROXY_H2_H
#define CORRAL_PROTO_PROXY_H2_H

#include "proto/upstream/proxy.h"

/* handler_data is a struct proxy_location with `http2` set. */
extern const struct http_handler proxy_h2_handler;

#endif
