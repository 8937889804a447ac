/*
 * stream.h: the layer 4 proxy (nginx's stream module): each client
 * connection accepted on a stream listen is joined to a connection to a
 * server of an upstream, and bytes move both ways, by splice(2) where
 * both sides are plain sockets, until both sides have ended.  It knows
 * no HTTP: it uses the upstream groups (balancing, passive health), the
 * PROXY protocol and the allow/deny rules of the layers beside it.
 */
#ifndef CORRAL_PROTO_STREAM_H
#define CORRAL_PROTO_STREAM_H

#include "proto/policy/access.h"
#include "proto/upstream/upstream.h"

#include <corral.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The settings of one stream server block (those of the stream block
 * that it does not write), as the config gives them. */
struct stream_conf {
    uint32_t connect_timeout_ms;       /* proxy_connect_timeout */
    uint32_t timeout_ms;               /* proxy_timeout: each side's reads and writes */
    bool next_upstream;                /* proxy_next_upstream: try another server */
    unsigned next_upstream_tries;      /* proxy_next_upstream_tries; 0: no limit */
    uint32_t next_upstream_timeout_ms; /* proxy_next_upstream_timeout; 0: none */
    bool proxy_protocol;               /* proxy_protocol: a PROXY v1 header to the server */
    size_t buffer_size;                /* proxy_buffer_size: each direction's buffer */
    struct access_conf access;         /* allow, deny */
};

#define STREAM_CONF_DEFAULT                                                                        \
    ((struct stream_conf){                                                                         \
        .connect_timeout_ms = 60 * 1000,                                                           \
        .timeout_ms = 10 * 60 * 1000,                                                              \
        .next_upstream = true,                                                                     \
        .buffer_size = 64 * 1024,                                                                  \
    })

/* The least and most proxy_buffer_size takes: a direction's buffer is the
 * backpressure watermark of the side it writes to. */
#define STREAM_BUFFER_MIN 1024
#define STREAM_BUFFER_MAX (16u * 1024 * 1024)

/* Per-worker counters of the stream proxy, read by other threads. */
struct stream_stats {
    _Atomic uint64_t sessions;  /* client connections taken */
    _Atomic uint64_t denied;    /* refused by allow/deny */
    _Atomic uint64_t failed;    /* no server could be reached */
    _Atomic uint64_t spliced;   /* directions moved by splice(2) */
    _Atomic uint64_t copied;    /* directions moved through user space */
    _Atomic uint64_t bytes_in;  /* from clients */
    _Atomic uint64_t bytes_out; /* to clients */
} __attribute__((aligned(64)));

/* One stream listen address: what its connections are proxied with.  The
 * daemon builds it and gives it as the listener's data; it must outlive
 * every connection accepted on it. */
struct stream_site {
    const struct stream_conf *conf;
    struct proxy_upstream *upstream;
    bool proxy_protocol;        /* listen ... proxy_protocol: clients send a PROXY header */
    struct stream_stats *stats; /* one per worker, by corral_worker_index() */
};

/* The handler of a stream listener (corral_server_listen()'s `data`: a
 * struct stream_site).  A graceful stop lets its sessions run: they end
 * when their peers end them, or when the stop's timeout aborts them. */
extern const struct corral_conn_handler stream_handler;

/* Whether `up` can balance stream sessions: its `balance hash` key, if
 * any, must be the client's address (a stream has no request to take
 * another key from).  Returns 0 or -EINVAL. */
int stream_upstream_check(const struct proxy_upstream_conf *up);

#endif
