/*
 * config.h: the daemon's configuration: what the config language produces
 * and cmd/corral consumes.  A plain struct tree with no behaviour; the
 * language itself (lexer, parser, directive registry) lives in conf/.
 */
#ifndef CORRAL_CONF_CONFIG_H
#define CORRAL_CONF_CONFIG_H

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a directive or argument was written: for error messages. */
struct conf_pos {
    const char *file;   /* owned by the config (or the parse), never NULL */
    unsigned line, col; /* 1-based */
};

/* A parse or validation failure: "file:line:col: message". */
struct conf_error {
    char text[512];
};

struct conf_header {
    char *name;
    char *value;
};

enum conf_balance {
    CONF_BALANCE_ROUND_ROBIN,
    CONF_BALANCE_LEAST_CONN,
    CONF_BALANCE_HASH,
};

struct conf_upstream_server {
    char *address;            /* "127.0.0.1:9001", as written */
    unsigned weight;          /* default 1 */
    unsigned max_fails;       /* default 1; 0 = never marked down */
    uint32_t fail_timeout_ms; /* default 10 s */
    struct conf_pos pos;
};

struct conf_upstream {
    char *name;
    struct conf_upstream_server *servers;
    size_t server_count;
    enum conf_balance balance;     /* default round_robin */
    unsigned keepalive;            /* idle connections kept per worker; default 32 */
    uint32_t keepalive_timeout_ms; /* an idle one is closed after this; default 60 s */
    struct conf_pos pos;
};

/* TLS towards upstreams (proxy_pass https://...), per location. */
struct conf_proxy_tls {
    bool verify;               /* proxy_tls_verify on|off; default on */
    char *trusted_certificate; /* proxy_tls_trusted_certificate CAFILE (PEM, resolved
                                  against the config file's directory); NULL = the
                                  system's default CA store */
    char *server_name;         /* proxy_tls_name NAME: SNI and the name verified;
                                  NULL = the host in proxy_pass (an upstream's name,
                                  or the address's host; no SNI for IP literals) */
    struct conf_pos trusted_certificate_pos;
};

enum conf_handler {
    CONF_HANDLER_NONE,
    CONF_HANDLER_RETURN,
    CONF_HANDLER_PROXY,
};

struct conf_location {
    char *path;
    bool exact; /* "location = /path": exact match; else prefix */
    enum conf_handler handler;
    unsigned return_code;            /* return CODE ["TEXT"] */
    char *return_text;               /* may be NULL (empty body) */
    char *proxy_pass;                /* "http[s]://name_or_address[:port]" as written */
    struct conf_proxy_tls proxy_tls; /* used when proxy_pass is https:// (the parser
                                        refuses proxy_tls_* otherwise) */
    struct conf_header *set_headers; /* proxy_set_header NAME VALUE */
    size_t set_header_count;
    char **hide_headers; /* proxy_hide_header NAME */
    size_t hide_header_count;
    /* proxy_buffer_size SIZE: the most bytes an upstream's response head
     * may take.  Once parsed, the location's effective value: its own, else
     * its server's, else the top level's, else 8k. */
    size_t proxy_buffer_size;
    struct conf_pos pos;
};

struct conf_listen {
    char *address;
    bool tls;
    bool default_server;
    /* Socket options, given on one listen of an address at most. */
    bool has_socket_options;
    bool deferred;    /* accept once the first bytes arrive (TCP_DEFER_ACCEPT) */
    unsigned backlog; /* 0: the default, 511 */
    struct conf_pos pos;
};

/* Client-side HTTP limits and timeouts; set in main and overridable per
 * server (a server block starts with a copy of main's values). */
struct conf_http {
    uint32_t client_header_timeout_ms; /* default 60 s */
    uint32_t client_body_timeout_ms;   /* default 60 s */
    uint32_t send_timeout_ms;          /* default 60 s */
    uint32_t keepalive_timeout_ms;     /* default 75 s; 0 disables keep-alive */
    unsigned keepalive_requests;       /* default 1000 */
    size_t client_max_header_size;     /* default 8k; larger header section: 431 */
    unsigned client_max_headers;       /* default 100 */
    size_t client_max_body_size;       /* default 1m; 0 = unlimited; larger: 413 */
    uint32_t proxy_connect_timeout_ms; /* default 60 s */
    uint32_t proxy_read_timeout_ms;    /* default 60 s */
    uint32_t proxy_send_timeout_ms;    /* default 60 s */
    size_t proxy_buffer_size;          /* 0: not set here; see conf_location */
};

/* One tls_certificate with the tls_certificate_key that follows it.  A server
 * may have several pairs, one per key type (RSA and ECDSA, say); the PEM
 * certificate file holds the leaf first, then its chain. */
struct conf_tls_certificate {
    char *certificate; /* resolved against the config file's directory */
    char *key;
    struct conf_pos certificate_pos, key_pos;
};

enum conf_tls_protocol {
    CONF_TLS_1_2 = 1 << 0,
    CONF_TLS_1_3 = 1 << 1,
};

enum conf_tls_verify_client {
    CONF_TLS_VERIFY_CLIENT_OFF,
    CONF_TLS_VERIFY_CLIENT_OPTIONAL, /* asked for; verified if given */
    CONF_TLS_VERIFY_CLIENT_ON,       /* required */
};

/* TLS settings of a server block, used by its `listen ... tls` addresses.  On
 * an address shared by several server blocks, the certificate is picked by
 * SNI; everything else comes from the address's default server. */
struct conf_tls {
    struct conf_tls_certificate *certificates;
    size_t certificate_count;
    unsigned protocols; /* tls_protocols: CONF_TLS_* bits; default both */
    char *ciphers;      /* tls_ciphers: TLS 1.2 list, OpenSSL syntax; NULL =
                           corral's list (proto/tls.c) */
    char *ciphersuites; /* tls_ciphersuites: TLS 1.3; NULL = OpenSSL's */
    struct conf_pos ciphers_pos, ciphersuites_pos;
    bool session_tickets;            /* tls_session_tickets on|off; default on */
    uint32_t ticket_key_rotation_ms; /* tls_session_ticket_rotation; default 1h */
    unsigned session_cache;          /* tls_session_cache N|off: sessions kept, 0 = off;
                                        default 20000 */
    uint32_t session_timeout_ms;     /* tls_session_timeout; default 5m (used in whole
                                        seconds, at least 1) */
    uint32_t handshake_timeout_ms;   /* tls_handshake_timeout; default 10s */
    bool ktls;                       /* tls_ktls on|off; default off */
    char *client_certificate;        /* tls_client_certificate CAFILE; NULL = no mTLS */
    struct conf_pos client_certificate_pos;
    enum conf_tls_verify_client verify_client; /* tls_verify_client on|optional|off;
                                                  default on when a CA file is given */
};

struct conf_server {
    struct conf_listen *listens;
    size_t listen_count;
    char **server_names; /* exact names and "*.example.com" wildcards */
    size_t server_name_count;
    struct conf_location *locations;
    size_t location_count;
    struct conf_http http;
    struct conf_tls tls;
    struct conf_pos pos;
};

struct conf_config {
    unsigned workers;                /* 0 = auto: CPUs in the affinity mask */
    enum corral_wakeup_mode wakeup;  /* default auto */
    unsigned max_connections;        /* per worker; default 10000 */
    unsigned busy_poll_usecs;        /* default 0 (off) */
    uint32_t drain_timeout_ms;       /* graceful stop and reload; default 10 s */
    char *user, *group;              /* privilege drop after binding; NULL = keep */
    char *pid_file;                  /* NULL = none */
    char *error_log;                 /* NULL = stderr */
    enum corral_log_level log_level; /* default info */
    char *access_log;                /* NULL = off */
    char *log_format;                /* NULL = combined */

    char **admin_listens; /* admin { listen ADDR; } */
    size_t admin_listen_count;

    struct conf_http http;
    struct conf_server *servers;
    size_t server_count;
    struct conf_upstream *upstreams;
    size_t upstream_count;

    char *path;   /* the main file, for messages and reloads; "<built-in>" */
    char **files; /* every file read, main first, as positions name them */
    size_t file_count;
};

/*
 * Reads a file for `include` (and for the main file): returns a malloc'd
 * buffer and its length, or NULL with errno set.  Tests supply their own to
 * parse from memory.
 */
typedef char *(*conf_read_file_fn)(const char *path, size_t *len, void *arg);

/* Parses `text` (`len` bytes) as the main config file named `path`.  On
 * success returns 0 and *out (free with conf_free()).  On failure returns -1
 * with *out NULL and `error` holding "path:line:col: message".  Pure: all
 * file access goes through `read_file` (NULL = read from the file system).
 * Include patterns are expanded with glob(3) only when reading from the
 * file system; a custom `read_file` is handed them as they are. */
int conf_parse(const char *path, const char *text, size_t len, conf_read_file_fn read_file,
               void *read_arg, struct conf_config **out, struct conf_error *error);

/* Reads `path` from the file system and parses it. */
int conf_load(const char *path, struct conf_config **out, struct conf_error *error);

/* The built-in default config, used when the daemon is given no -c. */
extern const char conf_default_text[];

void conf_free(struct conf_config *config);

/* True when the two addresses name the same socket address: "*:80" and
 * "0.0.0.0:80" do, "localhost:80" and "127.0.0.1:80" do.  Addresses that
 * corral_parse_address() cannot read are the same only as the same text. */
bool conf_same_address(const char *a, const char *b);

/* Value syntax shared by directives (exported for tests): return 0, or -1
 * with errno EINVAL (not that syntax) or ERANGE (too large). */
int conf_parse_size(const char *text, size_t *out);          /* 512, 16k, 10m, 1g */
int conf_parse_duration(const char *text, uint32_t *out_ms); /* 500ms, 30s, 5m, 1h, 2d; bare = s */

#endif
