/*
 * upstream.h: upstream groups for the proxy: their servers and addresses,
 * balancing, passive health, per-worker pools of idle connections, and error
 * counters.  Nothing here knows HTTP; the protocol client builds on it.
 */
#ifndef CORRAL_PROTO_UPSTREAM_H
#define CORRAL_PROTO_UPSTREAM_H

#include "proto/counter.h"
#include "proto/http/proxy_protocol.h"
#include "proto/tls/tls.h"

#include <corral.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum proxy_balance {
    PROXY_BALANCE_ROUND_ROBIN,
    PROXY_BALANCE_LEAST_CONN,
    PROXY_BALANCE_IP_HASH, /* by the client's address */
    PROXY_BALANCE_HASH,    /* by a key (hash_key); hash_consistent: on a ring */
    PROXY_BALANCE_RANDOM,  /* weighted random; random_two: the less loaded of two */
};

/* Kinds of upstream failure, for corral_upstream_errors_total{kind=...}. */
enum proxy_error_kind {
    PROXY_ERROR_CONNECT, /* refused, unreachable: 502 */
    PROXY_ERROR_TIMEOUT, /* connect, read or send timeout: 504 */
    PROXY_ERROR_RESET,   /* closed or reset before the response was complete */
    PROXY_ERROR_INVALID, /* an unparsable response: 502 */
    PROXY_ERROR_TLS,     /* the TLS handshake or certificate check failed: 502 */
    PROXY_ERROR_KINDS,
};
extern const char *const proxy_error_kind_names[PROXY_ERROR_KINDS];

/* One server of an upstream: `server ADDRESS [weight=N] [max_fails=N]
 * [fail_timeout=DURATION] [backup] [down] [max_conns=N] [slow_start=TIME]`
 * in an upstream block. */
struct proxy_server_conf {
    const char *address; /* "127.0.0.1:9001" */
    unsigned weight;
    unsigned max_fails;       /* 0: never marked down */
    uint32_t fail_timeout_ms; /* how long a failed server is skipped */
    bool backup;              /* used only while every other server is down */
    bool down;                /* never used */
    unsigned max_conns;       /* requests in flight over all workers; 0: no limit */
    uint32_t slow_start_ms;   /* its weight ramps up over this after it comes back */
    bool resolve;             /* NAME:PORT re-resolved with the upstream's resolvers */
    unsigned resolve_slots;   /* max_addresses=N: the addresses it may have at once;
                                 0: UPSTREAM_RESOLVE_SLOTS */
    const char *service;      /* service=NAME: `address` is a NAME whose SRV records
                                 give the servers (NULL: none) */
};

/* The most a record name takes (DNS's bound on a name). */
#define UPSTREAM_SRV_NAME_MAX 253

/* The SRV record name nginx looks up for `server NAME service=SERVICE`:
 * "_SERVICE._tcp.NAME", or "SERVICE.NAME" when SERVICE has a dot.
 * Writes it into `out`; returns 0, or -ENAMETOOLONG. */
int upstream_srv_name(const char *name, const char *service, char *out, size_t size);

#define PROXY_SERVER_CONF_DEFAULT                                                                  \
    ((struct proxy_server_conf){.weight = 1, .max_fails = 1, .fail_timeout_ms = 10 * 1000})

#define UPSTREAM_MAX_RESOLVERS 4

/* health_check interval=T timeout=T rise=N fall=N uri=PATH match=... port=N:
 * one loop probes every server of the upstream for all workers. */
#define HEALTH_MATCH_CODES 600
enum proxy_health_type {
    PROXY_HEALTH_HTTP,  /* GET uri over HTTP/1.0 */
    PROXY_HEALTH_HTTP2, /* GET uri over HTTP/2 (h2c, or ALPN h2) */
    PROXY_HEALTH_GRPC,  /* grpc.health.v1.Health/Check over HTTP/2 */
    PROXY_HEALTH_TCP,   /* a connection accepted passes (a stream's upstream) */
    /* a datagram sent (`send`, else "health check"): with `expect`, an
     * answer that has it passes; without, no ICMP refusal within the
     * timeout passes (a stream udp upstream, as NGINX Plus's) */
    PROXY_HEALTH_UDP,
};
struct http_regex; /* proto/http/regex.h */
struct proxy_health_conf {
    bool enabled;
    enum proxy_health_type type; /* type=http|http2|grpc|tcp|udp */
    const char *grpc_service;    /* grpc_service=NAME; NULL: "" (the server) */
    uint32_t interval_ms, timeout_ms;
    unsigned rise, fall; /* passes that bring a server up, failures that take it down */
    const char *uri;     /* "/" by default */
    unsigned port;       /* 0: the server's own */
    uint64_t match[(HEALTH_MATCH_CODES + 63) / 64]; /* statuses that pass, as bits */
    /* type=tcp with a stream match block (match=NAME): `send` written
     * once connected (NULL: nothing), then what the server answers, read
     * up to HEALTH_EXPECT_MAX bytes, must contain `expect` (NULL: no
     * answer awaited), or match it as a regex with `expect_regex`. */
    const char *send, *expect;
    bool expect_regex;
};

/* The most a send/expect check reads of a server's answer: an answer
 * without the expected bytes within it fails, so that a server that
 * sends without end costs a bounded buffer. */
#define HEALTH_EXPECT_MAX 4096

#define PROXY_HEALTH_CONF_DEFAULT                                                                  \
    ((struct proxy_health_conf){.interval_ms = 5000, .timeout_ms = 1000, .rise = 2, .fall = 3})

/* An upstream: an upstream block, or the single address a proxy_pass
 * names (which has the defaults). */
struct proxy_upstream_conf {
    const char *name;
    const struct proxy_server_conf *servers;
    size_t server_count;
    enum proxy_balance balance; /* balance */
    const char *hash_key;       /* balance hash KEY: "$remote_addr", "$http_x_user"... */
    bool hash_consistent;       /* balance hash KEY consistent */
    bool random_two;            /* balance random two */
    struct proxy_health_conf health;
    /* resolver ADDRESS... [valid=TIME] [ipv6=off]: for the `resolve` servers */
    const char *resolvers[UPSTREAM_MAX_RESOLVERS];
    size_t resolver_count;
    uint32_t resolve_valid_ms;
    bool resolve_ipv4_only;   /* ipv6=off: A records only, no AAAA */
    unsigned keepalive;       /* keepalive: idle connections kept per worker */
    unsigned api_servers;     /* api_servers: slots the admin API may add servers to */
    uint32_t idle_timeout_ms; /* keepalive_timeout: an idle pooled connection is
                                 closed after this */
    struct tls_client *tls;   /* NULL: plain HTTP; the upstream owns it once created */
    /* proxy_protocol on: each new connection starts with a PROXY header
     * of proxy_protocol_version (1 or 2) naming the client */
    bool proxy_protocol;
    unsigned proxy_protocol_version;
};

#define PROXY_UPSTREAM_CONF_DEFAULT                                                                \
    ((struct proxy_upstream_conf){                                                                 \
        .balance = PROXY_BALANCE_ROUND_ROBIN,                                                      \
        .proxy_protocol_version = 1,                                                               \
        .keepalive = 32,                                                                           \
        .api_servers = 0,                                                                          \
        .idle_timeout_ms = 60 * 1000,                                                              \
        .health = PROXY_HEALTH_CONF_DEFAULT,                                                       \
        .resolve_valid_ms = 0, /* the answers' TTLs */                                             \
    })

struct proxy_upstream;

/* Creates an upstream for `workers` workers (per-worker state is indexed by
 * corral_worker_index()).  Returns 0, -EINVAL for an unusable address, or
 * -ENOMEM. */
int upstream_new(const struct proxy_upstream_conf *conf, unsigned workers,
                 struct proxy_upstream **out);
/* Frees an upstream no worker uses any more. */
void upstream_free(struct proxy_upstream *upstream);
const char *upstream_name(const struct proxy_upstream *upstream);
/* Failures of `kind` counted so far, over all workers; safe from any thread. */
uint64_t upstream_errors(const struct proxy_upstream *upstream, enum proxy_error_kind kind);

/* What the status page and the metrics show of each server; any thread may
 * read these while the upstream lives. */
enum proxy_server_state {
    PROXY_SERVER_UP,
    PROXY_SERVER_DOWN,     /* failed its health checks */
    PROXY_SERVER_DISABLED, /* `down` in the config */
};
size_t upstream_server_count(const struct proxy_upstream *upstream);

/* The server slots an upstream made from `conf` has: one per address,
 * UPSTREAM_RESOLVE_SLOTS per `resolve` server, and its api_servers.  Whatever is kept per server
 * (TLS sessions, stats) is indexed by slot, so sized by this. */
size_t upstream_conf_slots(const struct proxy_upstream_conf *conf);
const char *upstream_server_address(const struct proxy_upstream *upstream, size_t index);
bool upstream_server_backup(const struct proxy_upstream *upstream, size_t index);
enum proxy_server_state upstream_server_state(const struct proxy_upstream *upstream, size_t index);
/* Which of its addresses a `resolve` server's entry is (its address text,
 * NAME:PORT, is the same for all of them: a label needs both); 0 for
 * other servers.  An entry without an address reads as disabled. */
unsigned upstream_server_slot(const struct proxy_upstream *upstream, size_t index);
/* Requests in flight to the server, over all workers. */
unsigned upstream_server_conns(const struct proxy_upstream *upstream, size_t index);

/* Gives `upstream` the health of each server of `previous` (an upstream of
 * the generation it replaces) at the same address: a reload neither
 * brings back a server found down nor restarts a slow start.  What the
 * admin API set (weight, drain, down) goes on too while the server's line
 * says the same weight and down as before.  Main thread, before
 * `upstream` serves. */
void upstream_take_health(struct proxy_upstream *upstream, const struct proxy_upstream *previous);

/* ------------------------------------------------ inside proto/: the layers
 * above (the HTTP/1.1 client and the proxy) read these structures directly.
 * Everything per worker is touched by that worker's thread only, except the
 * error counters, which other threads read. */

/* Server slots in one upstream: a request keeps the ones it tried as bits
 * (struct upstream_tried), inside its own state. */
#define UPSTREAM_MAX_SERVERS 1024
/* The addresses a `resolve` server may have at once unless its
 * max_addresses says: each is a slot of the upstream's servers. */
#define UPSTREAM_RESOLVE_SLOTS 16

/* The slots a server of the config takes: one, or its name's addresses. */
static inline size_t upstream_server_conf_slots(const struct proxy_server_conf *s)
{
    return !s->resolve ? 1 : s->resolve_slots != 0 ? s->resolve_slots : UPSTREAM_RESOLVE_SLOTS;
}

/* A server slot's life: a configured address is active for good; a slot
 * of a `resolve` server is empty until an answer fills it, and drains (no
 * new requests) when its address leaves the answers. */
enum upstream_slot {
    UPSTREAM_SLOT_ACTIVE,
    UPSTREAM_SLOT_EMPTY,
    UPSTREAM_SLOT_DRAINING,
};

/* A server: its settings, and what all workers share of it. */
struct upstream_server {
    char *address;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    /* weight and backup: an SRV slot's are written while it is empty,
     * as its address is, and read by every worker */
    _Atomic unsigned weight;
    unsigned conf_weight; /* the config's weight= (an SRV record's or the API's
                             may differ) */
    unsigned max_fails;
    uint32_t fail_timeout_ms;
    _Atomic bool backup;
    bool disabled;
    unsigned max_conns; /* 0: no limit */
    uint32_t slow_start_ms;
    _Atomic unsigned conns;        /* requests in flight, over all workers */
    _Atomic bool checked_down;     /* by the health checks */
    _Atomic uint64_t recovered_ms; /* loop clock when the checks brought it back; 0: never */
    _Atomic uint64_t log_ms;       /* the last error line about it (see upstream_log) */
    _Atomic unsigned log_skipped;  /* lines not written since */
    /* `resolve` servers: the name, its port, and which of its slots this
     * is; the main loop writes addr only while the slot is empty and no
     * request holds it (see resolve.c), then publishes it with `state`. */
    char *resolve_name;
    uint16_t resolve_port;
    unsigned resolve_slot;
    unsigned resolve_slots; /* the name's slots, this one among them */
    bool resolve_srv;       /* resolve_name is an SRV record's: each slot's port,
                               weight and backup come from its record */
    bool resolve_backup;    /* the server line's `backup`, which an SRV slot's
                               own `backup` no longer says */
    _Atomic int state;      /* enum upstream_slot */
    /* Set at run time through the admin API (UPSTREAM_API_*): drained or
     * down servers get no new requests, in every worker. */
    _Atomic unsigned char api_state;
    _Atomic unsigned gen; /* bumped with each new address: older pooled
                             connections are not reused */
    /* One of the upstream's api_servers slots: empty until the admin API
     * adds a server (upstream_api_add()), draining once it removes it.
     * Its address text is a buffer of UPSTREAM_API_ADDRESS_MAX bytes,
     * written under the daemon's lock while the slot is empty. */
    bool api_slot;
};

/* The longest "[IPv6]:PORT" an API-added server has, with its NUL. */
#define UPSTREAM_API_ADDRESS_MAX 64

/* Whether server `i` of `up` is an api_servers slot holding no server
 * (or one removed, whose requests in flight finish), which lists,
 * metrics and the status page leave out. */
static inline bool upstream_server_api_unused(const struct proxy_upstream *up, size_t i);

/* Adds the server at `address` (a literal IP:PORT) with `weight` and
 * api_state `state` (UPSTREAM_API_*) to a free api_servers slot of `up`,
 * in every worker at once.  Under the daemon's lock, one thread at a time.
 * Returns the slot, or -EINVAL (not an IP:PORT), -EEXIST (a server of the
 * upstream has that address), -ENOSPC (no free slot), -ENOTSUP (a hash
 * ring, which the config's servers make). */
int upstream_api_add(struct proxy_upstream *up, const char *address, unsigned weight,
                     unsigned char state);
/* Removes API-added server `i`: it drains (no new request) and its slot is
 * free once no request holds it.  Returns 0, -ENOENT (not an API-added
 * server in use), under the daemon's lock. */
int upstream_api_remove(struct proxy_upstream *up, size_t i);

enum {
    UPSTREAM_API_NONE,
    UPSTREAM_API_DRAIN, /* no new requests; those in flight finish */
    UPSTREAM_API_DOWN,  /* as the config's `down` */
};

struct upstream_conn;
struct h2_client;

/* The servers one request has tried, as bits; zeroed: none. */
struct upstream_tried {
    uint64_t bits[UPSTREAM_MAX_SERVERS / 64];
};

static inline bool upstream_tried_has(const struct upstream_tried *tried, size_t server)
{
    return (tried->bits[server / 64] >> (server % 64)) & 1;
}

static inline void upstream_tried_add(struct upstream_tried *tried, size_t server)
{
    tried->bits[server / 64] |= 1ull << (server % 64);
}

static inline void upstream_tried_remove(struct upstream_tried *tried, size_t server)
{
    tried->bits[server / 64] &= ~(1ull << (server % 64));
}

/* A worker's view of one server: balancing, health and its idle pool. */
struct server_state {
    int current_weight; /* smooth weighted round robin */
    unsigned active;    /* this worker's requests in flight */
    unsigned fails;
    uint64_t down_until; /* loop clock ms */
    struct upstream_conn *idle;
    struct h2_client *h2; /* HTTP/2 connections that take new streams (h2_client.c) */
};

/* A worker's counters of one server, which other threads read (metrics,
 * status): its open and pooled connections, and how long its responses
 * took, from the request to the response's end, by status class. */
struct upstream_server_stats {
    _Atomic uint64_t open, idle;
    _Atomic uint64_t down_until; /* a copy of server_state's, for other threads */
    struct histogram response[STATUS_CLASSES];
};

/* servers and stats have one entry per server slot of the upstream. */
struct upstream_worker {
    struct server_state *servers;
    unsigned idle_count;
    /* HTTP/1.1 connections owned by an exchange, and the most of them at
     * once in this window of keepalive_timeout and the last one: the
     * concurrency of the recent past, which the pool keeps connections
     * for (upstream_pool_release()). */
    unsigned busy_count, busy_peak, busy_peak_last;
    uint64_t busy_window_ms;                    /* loop clock: the window's start */
    uint64_t random;                            /* xorshift state for balance random */
    uint64_t local_error_logged_ms;             /* loop clock; 0: never */
    _Atomic uint64_t errors[PROXY_ERROR_KINDS]; /* written by the worker only */
    struct upstream_server_stats *stats;
} __attribute__((aligned(64)));

struct balance_ring;
struct upstream_health;
struct upstream_resolver;

struct proxy_upstream {
    char *name;
    struct upstream_server *servers;
    size_t server_count;
    enum proxy_balance balance;
    struct balance_key *key;   /* hash: what it hashes; NULL otherwise */
    struct balance_ring *ring; /* hash ... consistent: the primaries' ring */
    bool random_two;
    bool has_backup;
    struct proxy_health_conf health;
    char *health_uri;
    char *health_service;                /* health_check grpc_service= (copied, as health_uri) */
    char *health_send, *health_expect;   /* health.send and .expect, copied as health_uri */
    struct http_regex *health_expect_re; /* health.expect compiled, with expect_regex */
    struct upstream_health *checker;     /* while the checks run */
    struct sockaddr_storage resolvers[UPSTREAM_MAX_RESOLVERS];
    socklen_t resolver_lens[UPSTREAM_MAX_RESOLVERS];
    size_t resolver_count;
    uint32_t resolve_valid_ms;
    bool resolve_ipv4_only;
    bool has_resolve;
    struct upstream_resolver *resolver; /* while re-resolving */
    unsigned keepalive;
    uint32_t idle_timeout_ms;
    unsigned worker_count;
    struct upstream_worker *workers;
    struct tls_client *tls;  /* NULL: plain HTTP */
    unsigned proxy_protocol; /* the PROXY header's version sent; 0: none */
    /* a digest of the config's servers and balancing: a reload carries
     * the servers the admin API added while it stays the same */
    uint64_t conf_digest;
};

static inline bool upstream_server_api_unused(const struct proxy_upstream *up, size_t i)
{
    const struct upstream_server *s = &up->servers[i];
    return s->api_slot &&
           atomic_load_explicit(&s->state, memory_order_relaxed) != UPSTREAM_SLOT_ACTIVE;
}

/* What a connection sent ahead of its first request: the PROXY header of
 * the client it was opened for (proxy_protocol on), else nothing.  Each
 * request computes the one it needs, and a pooled connection serves only
 * a request whose preamble is the same bytes (upstream_pool_take()). */
struct upstream_preamble {
    unsigned char len;
    char data[PROXY_PROTOCOL_SEND_MAX];
};

/* One connection to a server, as the pool sees it.  The protocol client
 * embeds it in its own per-connection state and allocates and frees that. */
struct upstream_conn {
    corral_conn *conn;
    struct proxy_upstream *upstream;
    struct upstream_worker *worker;
    unsigned server;
    unsigned gen; /* the server's address generation it connected to */
    bool connected;
    bool reused; /* served an earlier request */
    bool busy;   /* counted in worker->busy_count */
    struct upstream_preamble preamble;
    struct upstream_conn *idle_next, *idle_prev;
};

/* The per-worker state of `upstream` for `worker` (NULL: a bare loop, which
 * uses the first). */
struct upstream_worker *upstream_worker_of(const struct proxy_upstream *upstream,
                                           const corral_worker *worker);

/* Picks a server not in `tried`, usable (not down, under its max_conns),
 * or -1; a backup only when no other is usable.  `hash` is the request's
 * key hash (balance_key_hash()) for hash and ip_hash. */
int balance_pick_server(struct proxy_upstream *up, struct upstream_worker *worker,
                        const struct upstream_tried *tried, uint32_t hash, uint64_t now);

/* Whether balance_pick_server() would find a server, without taking a
 * balancing turn. */
bool balance_any_usable(const struct proxy_upstream *up, const struct upstream_worker *worker,
                        const struct upstream_tried *tried, uint64_t now);

/* Counts a request in flight to `server`; false when that would pass its
 * max_conns (another worker took the last slot meanwhile). */
bool upstream_server_acquire(struct proxy_upstream *up, struct upstream_worker *worker,
                             unsigned server);
/* Ends what upstream_server_acquire() counted. */
void upstream_server_release(struct proxy_upstream *up, struct upstream_worker *worker,
                             unsigned server);

/* Counts a failure against `server`; max_fails of them mark it down for
 * fail_timeout. */
void upstream_server_failed(struct proxy_upstream *up, struct upstream_worker *worker,
                            unsigned server, uint64_t now);

/* Whether a line about `server` may be logged now: at most one a second
 * over all workers.  *skipped gets the lines left out since the last one. */
bool upstream_log_turn(struct proxy_upstream *up, unsigned server, uint64_t now, unsigned *skipped);

/* Whether a connect error is this host's trouble (out of descriptors,
 * buffers, memory or local ports), not the upstream's. */
bool upstream_local_error(int err);

/* Writes a preamble (`len` may be 0) straight to `conn`'s socket, from
 * on_open: ahead of anything queued and of any TLS record.  A new
 * connection's socket buffer takes a hundred bytes at once, so a short
 * write is an error like any other.  Returns 0 or -errno. */
int upstream_send_preamble(corral_conn *conn, const char *data, size_t len);

/* Takes an idle connection to `server` that sent `preamble` out of the
 * worker's pool, closing any connected to an address the server no longer
 * has on the way; NULL when none is left.  The connection taken counts as
 * busy (upstream_pool_busy()). */
struct upstream_conn *upstream_pool_take(struct upstream_worker *worker, unsigned server,
                                         const struct upstream_preamble *preamble);
/* Counts `uc`, taken from the pool or just opened, as busy at `now` (loop
 * clock ms): the pool's measure of the recent concurrency. */
void upstream_pool_busy(struct upstream_conn *uc, uint64_t now);
/* Puts a connection whose exchange finished cleanly into its pool, or
 * closes it when the pool is full or the worker is stopping.  The pool is
 * full when it holds `keepalive` idle connections and keeping one more
 * would leave more connections open than the busiest moment of the last
 * one or two keepalive_timeout windows had busy plus `keepalive`. */
void upstream_pool_release(struct upstream_conn *uc);
/* Takes `uc` out of its pool if it is there, else out of the busy count:
 * the connection is closing. */
void upstream_pool_remove(struct upstream_conn *uc);

/* Whether `worker`'s passive health skips `server` at `now` (loop clock
 * ms).  Any thread, for the status page: the value may be a moment old.
 * Shared or active health state would answer here. */
static inline bool upstream_server_down(const struct upstream_worker *worker, unsigned server,
                                        uint64_t now)
{
    return atomic_load_explicit(&worker->stats[server].down_until, memory_order_relaxed) > now;
}

/* Counts a connection to `server` opened (+1) or closed (-1), or one
 * going into (+1) or out of (-1) its pool.  The worker's thread only. */
static inline void upstream_count_open(struct upstream_worker *worker, unsigned server, int delta)
{
    counter_add(&worker->stats[server].open, (uint64_t)(int64_t)delta);
}

static inline void upstream_count_idle(struct upstream_worker *worker, unsigned server, int delta)
{
    counter_add(&worker->stats[server].idle, (uint64_t)(int64_t)delta);
}

/* Counts a response of `status` from `server` that took `ns`. */
static inline void upstream_count_response(struct upstream_worker *worker, unsigned server,
                                           unsigned status, uint64_t ns)
{
    int class = status_class(status);
    if (class >= 0)
        histogram_observe(&worker->stats[server].response[class], ns);
}

/* Opens a connection to uc->server (uc->upstream, uc->worker and
 * uc->server set) with `handler` and its `data`.  Returns 0 or
 * corral_connect()'s -errno. */
int upstream_connect(struct upstream_conn *uc, corral_loop *loop,
                     const struct corral_conn_handler *handler, void *data);

#endif
