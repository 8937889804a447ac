/*
 * http2_conf.h: the HTTP/2 server's settings and their defaults, in one
 * place: the config language fills this struct (http2_* directives) and the
 * HTTP/2 framer (http2.c) reads the one of an address's default server.
 */
#ifndef CORRAL_PROTO_HTTP2_CONF_H
#define CORRAL_PROTO_HTTP2_CONF_H

#include <stddef.h>
#include <stdint.h>

struct http2_conf {
    unsigned max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS */
    size_t max_header_list_size;     /* decoded request header list, bytes */
    size_t initial_window_size;      /* per stream, for request bodies, bytes */
    uint32_t idle_timeout_ms;        /* no stream open and nothing received */
    unsigned max_resets;             /* RST_STREAM from the client per reset_interval */
    uint32_t reset_interval_ms;
    size_t stream_buffer_size; /* response bytes queued per stream before backpressure */
};

/* The defaults, as docs/config.md gives them. */
#define HTTP2_CONF_DEFAULT                                                                         \
    ((struct http2_conf){                                                                          \
        .max_concurrent_streams = 128,                                                             \
        .max_header_list_size = 32 * 1024,                                                         \
        .initial_window_size = 64 * 1024,                                                          \
        .idle_timeout_ms = 180 * 1000,                                                             \
        .max_resets = 200,                                                                         \
        .reset_interval_ms = 10 * 1000,                                                            \
        .stream_buffer_size = 64 * 1024,                                                           \
    })

#endif
