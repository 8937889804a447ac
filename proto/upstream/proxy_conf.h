/*
 * proxy_conf.h: what the proxy's settings are and their defaults, in one
 * place: the config language fills struct proxy_conf (proxy_*_timeout,
 * proxy_buffer_size, proxy_splice) and the daemon gives each proxy_pass
 * location its values.
 */
#ifndef CORRAL_PROTO_PROXY_CONF_H
#define CORRAL_PROTO_PROXY_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The default bound on a response head, as nginx's proxy_buffer_size. */
#define PROXY_RESPONSE_HEAD_LIMIT (8 * 1024)
/* Its bounds.  A head must fit in one connection's input buffer, which
 * stops growing at the 256 KiB backpressure watermark: the upper bound
 * stays well below that. */
#define PROXY_RESPONSE_HEAD_LIMIT_MIN 1024
#define PROXY_RESPONSE_HEAD_LIMIT_MAX (128 * 1024)

/* The least of a response body's rest that proxy_splice moves inside the
 * kernel: conn-bench (docs/benchmarks.md, "kernel-side moves") puts the
 * break-even of a splice against a copy through user space near 256 KiB.
 * A body that ends with the connection has no known rest: it is spliced
 * whatever its size. */
#define PROXY_SPLICE_MIN (256 * 1024)

/* proxy_next_upstream: which failures send a request on to the next
 * server (bits).  PROXY_NEXT_WRITTEN marks a value the config wrote, `off`
 * included, so that a location's own wins over its server's. */
enum {
    PROXY_NEXT_ERROR = 1u << 0,          /* connect failure, reset, TLS failure */
    PROXY_NEXT_TIMEOUT = 1u << 1,        /* connect, send or read timeout */
    PROXY_NEXT_INVALID_HEADER = 1u << 2, /* an unparsable response */
    PROXY_NEXT_HTTP_500 = 1u << 3,
    PROXY_NEXT_HTTP_502 = 1u << 4,
    PROXY_NEXT_HTTP_503 = 1u << 5,
    PROXY_NEXT_HTTP_504 = 1u << 6,
    PROXY_NEXT_HTTP_429 = 1u << 7,
    PROXY_NEXT_NON_IDEMPOTENT = 1u << 8, /* even a POST whose bytes left */
    PROXY_NEXT_WRITTEN = 1u << 31,
};

/* The settings of one proxy_pass location (struct proxy_location carries
 * them at run time). */
struct proxy_conf {
    uint32_t connect_timeout_ms;       /* proxy_connect_timeout */
    uint32_t read_timeout_ms;          /* proxy_read_timeout: between two reads */
    uint32_t send_timeout_ms;          /* proxy_send_timeout: between two writes */
    size_t response_head_limit;        /* proxy_buffer_size: the most bytes a response
                                          head (status line and headers) may take */
    bool splice;                       /* proxy_splice: response bodies move inside
                                          the kernel where both sides are plain */
    bool via;                          /* proxy_via: add "Via: 1.1 corral" to requests */
    unsigned next_upstream;            /* proxy_next_upstream: PROXY_NEXT_* bits */
    unsigned next_upstream_tries;      /* proxy_next_upstream_tries: 0 = no limit */
    uint32_t next_upstream_timeout_ms; /* proxy_next_upstream_timeout: 0 = no limit */
    bool intercept_errors;             /* proxy_intercept_errors: a response of 300 or more
                                          for which the location has an error_page gets
                                          that page instead */
    /* proxy_request_buffering (grpc_request_buffering for grpc_pass): a
     * request body is read whole, kept in memory up to body_buffer_size
     * (client_body_buffer_size) and beyond that in an unlinked file in
     * body_temp_path (client_body_temp_path), before a server is asked. */
    bool request_buffering, grpc_request_buffering;
    size_t body_buffer_size;
    const char *body_temp_path;
    /* client_body_temp_max_size: the most the temporary files of all the
     * buffered request bodies of the process take at once (0: no bound) */
    size_t body_temp_max_size;
};

/* client_body_buffer_size's default: nginx's on 64-bit hosts (two
 * pages), and its most: a buffered body beyond it goes to a file. */
#define PROXY_BODY_BUFFER_DEFAULT (16 * 1024)
#define PROXY_BODY_BUFFER_MAX     (64u * 1024 * 1024)
/* client_body_temp_max_size's default. */
#define PROXY_BODY_TEMP_MAX_DEFAULT ((size_t)1024 * 1024 * 1024)
/* client_body_temp_path's default. */
#define PROXY_BODY_TEMP_PATH_DEFAULT "/tmp"

#define PROXY_CONF_DEFAULT                                                                         \
    ((struct proxy_conf){                                                                          \
        .connect_timeout_ms = 60 * 1000,                                                           \
        .read_timeout_ms = 60 * 1000,                                                              \
        .send_timeout_ms = 60 * 1000,                                                              \
        .response_head_limit = PROXY_RESPONSE_HEAD_LIMIT,                                          \
        .splice = true,                                                                            \
        .next_upstream = PROXY_NEXT_ERROR | PROXY_NEXT_TIMEOUT,                                    \
        .body_buffer_size = PROXY_BODY_BUFFER_DEFAULT,                                             \
        .body_temp_path = PROXY_BODY_TEMP_PATH_DEFAULT,                                            \
        .body_temp_max_size = PROXY_BODY_TEMP_MAX_DEFAULT,                                         \
    })

#endif
