/*
 * access_log_filter.h: the access log's byte count ($body_bytes_sent),
 * kept by an observer filter (exchange.h): it is told every body byte the
 * framer took, written, spliced or sent from a file, and wants no body,
 * so a logged response keeps the zero-copy paths.
 */
#ifndef CORRAL_PROTO_ACCESS_LOG_FILTER_H
#define CORRAL_PROTO_ACCESS_LOG_FILTER_H

#include <stdint.h>

struct exchange;
struct http_site;
struct http_vhost;
struct http_location;
struct access_log;

/* The log of an exchange that `loc` of `vhost` on `site` serves
 * (access_log_route()), with the byte count turned on for `ex` when there
 * is one; NULL: none, and nothing is counted. */
struct access_log *access_log_filter_route(struct exchange *ex, const struct http_site *site,
                                           const struct http_vhost *vhost,
                                           const struct http_location *loc);

/* The body bytes counted for `ex` so far. */
uint64_t access_log_filter_bytes(const struct exchange *ex);

/* The module (module.h). */
struct http_module;
extern struct http_module access_log_filter_module;

#endif
