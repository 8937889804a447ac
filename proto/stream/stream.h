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

#include "proto/http/regex.h"
#include "proto/http/site.h" /* struct site_names */
#include "proto/policy/access.h"
#include "proto/policy/access_log.h"
#include "proto/policy/limit.h"
#include "proto/upstream/upstream.h"

#include <corral.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

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
    bool preread;                      /* tls_preread: read the ClientHello first */
    struct access_conf access;         /* allow, deny */
    /* UDP sessions: proxy_responses, the datagrams expected from the
     * server per client datagram (STREAM_UNLIMITED: not limited); and
     * proxy_requests, the client datagrams a session takes (0: no limit). */
    unsigned responses;
    unsigned requests;
};

#define STREAM_UNLIMITED UINT32_MAX

#define STREAM_CONF_DEFAULT                                                                        \
    ((struct stream_conf){                                                                         \
        .connect_timeout_ms = 60 * 1000,                                                           \
        .timeout_ms = 10 * 60 * 1000,                                                              \
        .next_upstream = true,                                                                     \
        .buffer_size = 64 * 1024,                                                                  \
        .responses = STREAM_UNLIMITED,                                                             \
    })

/* The least and most proxy_buffer_size takes: a direction's buffer is the
 * backpressure watermark of the side it writes to. */
#define STREAM_BUFFER_MIN 1024
#define STREAM_BUFFER_MAX (16u * 1024 * 1024)

/* What a stream map looks up: the variables a session has. */
enum stream_var {
    STREAM_VAR_SERVER_NAME, /* $tls_preread_server_name, $ssl_preread_server_name */
    STREAM_VAR_ALPN,        /* $tls_preread_alpn_protocols, $ssl_preread_alpn_protocols */
    STREAM_VAR_REMOTE_ADDR, /* $remote_addr */
};

/* Reads a variable's name as written ("$tls_preread_server_name").
 * Returns 0, or -EINVAL for a name a stream does not have.  Inline: the
 * config's check calls it, and conf/ links nothing of proto/stream. */
static inline int stream_var_parse(const char *name, enum stream_var *out)
{
    static const struct {
        const char *name;
        enum stream_var var;
    } vars[] = {
        {"$tls_preread_server_name", STREAM_VAR_SERVER_NAME},
        {"$ssl_preread_server_name", STREAM_VAR_SERVER_NAME},
        {"$tls_preread_alpn_protocols", STREAM_VAR_ALPN},
        {"$ssl_preread_alpn_protocols", STREAM_VAR_ALPN},
        {"$remote_addr", STREAM_VAR_REMOTE_ADDR},
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if (strcmp(name, vars[i].name) == 0) {
            *out = vars[i].var;
            return 0;
        }
    }
    return -EINVAL;
}

/* proxy_pass $NAME: the stream map NAME, its values turned into
 * upstreams.  Exact keys are compared without regard to case (host
 * names); "~RE" and "~*RE" keys are regexes, tried after them in order. */
struct stream_route_entry {
    const char *key;          /* exact; NULL: `regex` */
    struct http_regex *regex; /* owned by whoever built the route */
    struct proxy_upstream *upstream;
};

struct stream_route {
    enum stream_var source;
    struct stream_route_entry *entries;
    size_t count;
    struct proxy_upstream *fallback; /* default; NULL: none, the session is closed */
};

/* The upstream `route` picks for `value` (`len` bytes, NUL-terminated),
 * or its fallback (NULL: none). */
struct proxy_upstream *stream_route_pick(const struct stream_route *route, const char *value,
                                         size_t len);

/* The statuses a session ends with, as nginx's $status, in the order of
 * their counters in stream_stats.status. */
#define STREAM_STATUSES 6
static inline unsigned stream_status_code(size_t i)
{
    switch (i) {
    case 0: return 200;
    case 1: return 400;
    case 2: return 403;
    case 3: return 500;
    case 4: return 502;
    default: return 503;
    }
}

/* Per-worker counters of the stream proxy, read by other threads. */
struct stream_stats {
    _Atomic uint64_t sessions;  /* client connections taken (UDP: sessions begun) */
    _Atomic uint64_t denied;    /* refused by allow/deny */
    _Atomic uint64_t failed;    /* no server could be reached */
    _Atomic uint64_t spliced;   /* directions moved by splice(2) */
    _Atomic uint64_t copied;    /* directions moved through user space */
    _Atomic uint64_t bytes_in;  /* from clients */
    _Atomic uint64_t bytes_out; /* to clients */
    /* UDP: client datagrams dropped (the worker's sessions all taken, or
     * the server's socket full), and the server's datagrams dropped (the
     * listen's socket full). */
    _Atomic uint64_t udp_dropped_in, udp_dropped_out;
    _Atomic uint64_t status[STREAM_STATUSES]; /* sessions ended, by status */
} __attribute__((aligned(64)));

/* Counts a session's end with `status` (one of stream_status_code()'s). */
static inline void stream_stats_end(struct stream_stats *stats, unsigned status)
{
    for (size_t i = 0; i < STREAM_STATUSES; i++)
        if (stream_status_code(i) == status)
            atomic_fetch_add_explicit(&stats->status[i], 1, memory_order_relaxed);
}

/* The most UDP sessions of one listen that a worker keeps at once: a
 * datagram from a new client beyond them is dropped (counted in
 * udp_dropped_in).  Each holds a socket to its server. */
#define STREAM_UDP_SESSIONS_MAX 4096

struct stream_udp_worker; /* a worker's UDP sessions, in stream_udp.c */
struct tls_server;        /* proto/tls/tls.h */

/* One stream listen address: what its connections are proxied with.  The
 * daemon builds it and gives it as the listener's data; it must outlive
 * every connection accepted on it. */
struct stream_site {
    const struct stream_conf *conf;
    struct proxy_upstream *upstream;  /* proxy_pass NAME|HOST:PORT; NULL: `route` */
    const struct stream_route *route; /* proxy_pass $NAME */
    bool proxy_protocol;              /* listen ... proxy_protocol: clients send a PROXY header */
    /* listen ... tls: the client's TLS ends here (after its PROXY header,
     * if any), and the server gets its plain bytes; NULL: none */
    struct tls_server *tls;
    struct stream_stats *stats; /* one per worker, by corral_worker_index() */
    struct access_log *log;     /* access_log: a line per session; NULL: none */
    /* limit_conn: at most `conn_max` sessions at once per value of the
     * zone's key; NULL zone: none. */
    struct limit_zone *conn_zone;
    const struct vars_template *conn_key;
    unsigned conn_max;
    /* A udp listen: each worker's sessions, by corral_worker_index(),
     * made by the worker on its first datagram and freed by on_stop. */
    struct stream_udp_worker **udp_workers;
    /* server_name: the names of this server, and its place among the
     * servers of its address in the config. */
    struct site_names names;
    /* Several servers on one TCP address: the listener's site (its
     * default server's) has all of them, itself first, and a session
     * moves to the one its SNI name picks (stream_site_select()): at the
     * end of its handshake on a tls listen, or once tls_preread read the
     * ClientHello.  NULL (0): the site is alone on its address. */
    struct stream_site *const *vhosts;
    size_t vhost_count;
    const void *origin; /* the daemon's: the server block it was built from */
};

/* The server of `site`'s address that a client naming `name` (`len`
 * bytes, not NUL-terminated; SNI) is served by, as site_names_find()
 * picks it; else the address's default (`site` itself). */
struct stream_site *stream_site_select(struct stream_site *site, const char *name, size_t len);

/* A tls_sni_select_fn for the TLS server of an address several servers
 * share (`site` is the listener's stream_site, whose vhosts are the TLS
 * server's in the same order): the index of stream_site_select()'s. */
size_t stream_sni_select(void *site, const char *name, size_t len);

/* The handler of a stream listener (corral_server_listen()'s `data`: a
 * struct stream_site).  A graceful stop lets its sessions run: they end
 * when their peers end them, or when the stop's timeout aborts them. */
extern const struct corral_conn_handler stream_handler;

/* The handler of a stream udp listen (corral_server_listen_udp()'s `data`:
 * a struct stream_site with udp_workers).  A stop ends its sessions, each
 * logged, when the worker's loop ends. */
extern const struct corral_udp_handler stream_udp_handler;

/* The IP address of `addr` as text, without the port ($remote_addr).
 * Returns 0, or -1 for another family or a `len` too short. */
int stream_addr_text(const struct sockaddr_storage *addr, char *buf, size_t len);

/* Whether `up` can balance stream sessions: its `balance hash` key, if
 * any, must be the client's address (a stream has no request to take
 * another key from).  Returns 0 or -EINVAL. */
int stream_upstream_check(const struct proxy_upstream_conf *up);

#endif
