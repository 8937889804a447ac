/*
 * http_limits.h: the HTTP server's limits and timeouts and their defaults,
 * in one place: the config language fills this struct (client_*, send_
 * and keepalive_* directives) and the HTTP/1.1 server reads it per vhost.
 */
#ifndef CORRAL_PROTO_HTTP_LIMITS_H
#define CORRAL_PROTO_HTTP_LIMITS_H

#include <stddef.h>
#include <stdint.h>

struct http_limits {
    uint32_t header_timeout_ms;    /* whole request head, from its first byte */
    uint32_t body_timeout_ms;      /* between two reads of the body */
    uint32_t send_timeout_ms;      /* between two writes of the response */
    uint32_t keepalive_timeout_ms; /* idle between requests; 0 = no keep-alive */
    unsigned keepalive_requests;
    size_t max_header_size; /* request line + headers; larger: 431 */
    unsigned max_headers;   /* larger: 431 */
    size_t max_body_size;   /* 0 = unlimited; larger: 413 */
};

/* The largest client_max_header_size: a connection may hold a head this
 * large, and HTTP/2's header list has the same ceiling. */
#define HTTP_MAX_HEADER_SIZE_MAX (16u * 1024 * 1024)

/* The defaults, as docs/config.md gives them. */
#define HTTP_LIMITS_DEFAULT                                                                        \
    ((struct http_limits){                                                                         \
        .header_timeout_ms = 60 * 1000,                                                            \
        .body_timeout_ms = 60 * 1000,                                                              \
        .send_timeout_ms = 60 * 1000,                                                              \
        .keepalive_timeout_ms = 75 * 1000,                                                         \
        .keepalive_requests = 1000,                                                                \
        .max_header_size = 8 * 1024,                                                               \
        .max_headers = 100,                                                                        \
        .max_body_size = 1024 * 1024,                                                              \
    })

#endif
