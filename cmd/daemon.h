/*
 * daemon.h: what the parts of the corral daemon share: the running
 * generations (one per loaded configuration), their counters, and the log.
 */
#ifndef CORRAL_CMD_DAEMON_H
#define CORRAL_CMD_DAEMON_H

#include "conf/config.h"
#include "proto/policy/access_log.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/serve/serve.h" /* the connection handler of HTTP sites */
#include "proto/stream/stream.h"
#include "proto/upstream/proxy.h"

#include <corral.h>
#include <pthread.h>

#define DAEMON_MAX_WORKERS 1024 /* the configuration's own limit */

/* One served address: the http_site its connections use. */
struct site {
    char *address; /* as configured */
    struct http_site http;
    struct http_vhost *vhosts;
    struct http_location *locations; /* all vhosts' locations, one array */
    /* After those (`location_count`), the locations of their if blocks
     * (nginx's noname locations, which no search finds), the i-th nested
     * in locations[nested_parent[i]], whose access log is its too. */
    size_t location_count, nested_count;
    size_t *nested_parent;
    struct router_table router; /* its vhosts' steps: the modules it uses */
    struct corral_listen_options listen_options;
    corral_listener *listener;
    bool admin; /* serves the admin endpoints, which are not access-logged */
    /* A stream listen (stream { server { listen } }): its connections go
     * to stream_handler with this; NULL: HTTP, to serve_handler. */
    struct stream_site *stream;
    const struct conf_stream_server *stream_server; /* its server block */
    corral_udp *udp; /* a udp listen's sockets (generation.udp_sites) */
    /* A quic listen (listen ... quic): HTTP/3 on `udp`, with `http` as its
     * site; NULL for the others. */
    struct h3_udp_site *quic;
};

/* The handler of `site`'s listener, and its data. */
static inline const struct corral_conn_handler *site_handler(const struct site *site)
{
    return site->stream != NULL ? &stream_handler : &serve_handler;
}

static inline void *site_handler_data(struct site *site)
{
    return site->stream != NULL ? (void *)site->stream : (void *)&site->http;
}

struct shared_upstream {
    struct proxy_upstream *upstream;
    /* What it was built for: a proxy_pass target and, for https, its TLS
     * settings (NULL: http), the config's. */
    const char *target;
    const struct tls_client_conf *tls;
};

/*
 * A generation is everything built from one configuration: a server with
 * its workers and listeners.  A reload starts a new generation on the same
 * sockets and lets the old one drain; both run meanwhile.
 */
struct runtime_acme;

struct generation {
    unsigned number;
    struct conf_config *config;
    corral_server *server;
    struct site *sites;
    size_t site_count;
    /* The udp listens, stream and quic: apart, as nothing of the TCP listeners'
     * handling (accepting, handing connections over, upgrades) is theirs. */
    struct site *udp_sites;
    size_t udp_site_count;
    /* The upstreams the sites' proxy locations use: one for all locations
     * that proxy_pass to the same place with the same TLS settings. */
    struct shared_upstream *upstreams;
    size_t upstream_count;
    struct http_stats *stats;      /* per worker */
    struct access_log *access_log; /* NULL: none */
    struct access_log **logs;      /* every access_log file, each level's */
    size_t log_count;
    struct access_log **tees; /* each level's set of them (access_log_tee()) */
    size_t tee_count;
    uint32_t log_flush_ms;     /* the shortest flush=; 0: none */
    corral_timer *log_flush;   /* access_log flush=: on the main loop; NULL: none */
    struct runtime_vars *vars; /* maps and compiled values (runtime_vars.h) */
    bool stop_requested;       /* by a reload or a signal, not by its own workers */
    bool listeners_closed;     /* by the next generation's start or a stop */
    struct generation *next;
    /* Its limit zones (runtime_limit.h). */
    struct runtime_limits *limits;
    /* Its ACME clients (runtime_acme.h); NULL: none. */
    struct runtime_acme *acme;
};

/* Counter totals of generations that have exited, so counters keep growing
 * across reloads as Prometheus expects. */
#define DAEMON_MAX_UPSTREAMS 64

struct retired_upstream {
    char *name; /* a copy: it outlives the configuration it came from */
    uint64_t errors[PROXY_ERROR_KINDS];
};

struct tls_totals {
    uint64_t handshakes[TLS_HANDSHAKE_KINDS];
    uint64_t errors[TLS_ERROR_KINDS];
    uint64_t ktls;
    uint64_t ocsp_fetches, ocsp_failures; /* tls_stapling: fetched once for all workers */
    uint64_t acme_issued, acme_failures;  /* ACME certificates stored, orders failed */
};

struct retired_totals {
    struct retired_upstream upstreams[DAEMON_MAX_UPSTREAMS];
    size_t upstream_count;
    uint64_t accepts[DAEMON_MAX_WORKERS];
    uint64_t accept_wakeups[DAEMON_MAX_WORKERS];
    uint64_t accept_wasted[DAEMON_MAX_WORKERS];
    uint64_t accepts_local[DAEMON_MAX_WORKERS];
    uint64_t responses[HTTP_MAX_STATUS];
    uint64_t timeouts[HTTP_TIMEOUT_KINDS];
    uint64_t http2[HTTP2_COUNTERS];
    uint64_t proxy_protocol[PROXY_PROTOCOL_FAILURES];
    struct tls_totals tls;
};

struct daemon_state {
    pthread_mutex_t lock;           /* guards the generation list and the totals */
    struct generation *generations; /* newest first */
    struct retired_totals retired;
    unsigned generation_count;
    uint64_t started_at; /* wall-clock seconds */
    /* Reloads (SIGHUP) that started a new generation, and those that
     * failed (it kept serving, or stopped); the last one's result. */
    _Atomic unsigned reloads_ok, reloads_failed;
    _Atomic bool last_reload_failed;
    /* The generation that takes new connections: after a reload, the new
     * one's number once the one before it has stopped accepting, so that
     * a client that sees it in /status knows the next connection gets the
     * new configuration. */
    _Atomic unsigned accepting;
    const char *config_path;
    _Atomic bool stopping; /* a SIGTERM or SIGINT arrived: /readyz says 503 */
};

/* The daemon's one instance, defined in generation.c. */
extern struct daemon_state daemon_state;

/* Adds worker `worker`'s TLS counters, summed over the TLS sites of `gen`,
 * to `totals` (admin.c). */
void tls_totals_add(struct tls_totals *totals, const struct generation *gen, unsigned worker);

/* Adds an upstream's error counters to the slot of its name among `count`
 * slots, taking a new slot, with a copy of the name, for a new name while
 * there is room and memory (admin.c). */
void upstream_errors_add(struct retired_upstream *slots, size_t *count,
                         const struct proxy_upstream *upstream);

/* stub_status's counts (admin.c), a stub_status_source_fn. */
struct stub_status_counts;
bool admin_stub_status_counts(struct stub_status_counts *out);

/* Admin endpoints (admin.c): GET /metrics and GET /status. */
extern const struct http_handler admin_metrics_handler;
extern const struct http_handler admin_status_handler;
/* GET /healthz (alive) and GET /readyz (503 once stopping). */
extern const struct http_handler admin_healthz_handler;
extern const struct http_handler admin_readyz_handler;

/* What an admin location checks before its endpoint answers (admin.c):
 * the admin block's allow/deny (403), then, where `token` is set, the
 * bearer token (401).  Each refusal is counted for /metrics. */
struct admin_gate {
    const struct http_handler *next;  /* the endpoint; NULL: 404 */
    const struct access_conf *access; /* NULL: no rules */
    const char *token;                /* NULL: no token needed here */
    size_t token_len;
};
extern const struct http_handler admin_gate_handler; /* its data: a struct admin_gate */

#define ADMIN_TOKEN_MAX 4096

/* Reads the token of `auth_token_file path` (written at `pos`) into
 * `token`, ADMIN_TOKEN_MAX + 1 bytes: the file's one word, without the
 * white space around it, which must be an RFC 6750 b64token.  Refuses
 * what is not a regular file (a FIFO would never end); warns when any user
 * may read it.  Returns 0 with *len set, or -EINVAL (logged at `pos`). */
int admin_token_read(const char *path, const struct conf_pos *pos, char *token, size_t *len);

/* Log sink (log.c): stderr or a file, reopened on SIGUSR1.  It becomes the
 * library's logger, so the library's lines and the daemon's own (through
 * corral_log(), filtered by corral_set_log_level()) share it. */
int daemon_log_open(const char *path);
int daemon_log_reopen(void);
void daemon_log_plain(bool on);
/* The logger daemon_log_open() installs: writes `message` as one line, whole
 * whatever its length.  Any thread. */
void daemon_log_write(enum corral_log_level level, const char *message, void *arg);
#define log_error(...) corral_log(CORRAL_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  corral_log(CORRAL_LOG_WARN, __VA_ARGS__)
#define log_info(...)  corral_log(CORRAL_LOG_INFO, __VA_ARGS__)

#endif
