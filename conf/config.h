/*
 * config.h: the daemon's configuration: what the config language produces
 * and cmd/corral consumes.  A plain struct tree with no behaviour; the
 * language itself (lexer, parser, directive registry) lives in conf/.
 * Each proto module's settings are that module's own struct, with the
 * module's defaults, embedded here as they are.
 */
#ifndef CORRAL_CONF_CONFIG_H
#define CORRAL_CONF_CONFIG_H

#include <corral.h>

#include "conf/directive.h" /* struct conf_pos, struct conf_module */

/* Types and defaults only: conf/ calls no proto function. */
#include "proto/policy/access.h"
#include "proto/http2/http2_conf.h"
#include "proto/http/http_limits.h"
#include "proto/stream/stream.h"
#include "proto/tls/tls.h"
#include "proto/upstream/upstream.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A parse or validation failure: "file:line:col: message". */
struct conf_error {
    char text[512];
};

/* limit_req_zone KEY zone=NAME:SIZE rate=N r/s|r/m, or
 * limit_conn_zone KEY zone=NAME:SIZE. */
struct conf_limit_zone {
    char *name;
    char *key; /* may hold $variables */
    bool conn; /* limit_conn_zone; else limit_req_zone */
    size_t size;
    uint64_t rate; /* milli-requests per second (limit_req_zone) */
    struct conf_pos pos, key_pos;
};

/* map $source $name { KEY VALUE; ... default VALUE; }: KEY is an exact
 * value, ~REGEX or ~*REGEX. */
struct conf_map_entry {
    char *key; /* NULL: the default */
    char *value;
    struct conf_pos key_pos, value_pos;
};

struct conf_map {
    char *source; /* a value with $variables */
    char *name;   /* without the "$" */
    struct conf_map_entry *entries;
    size_t entry_count;
    struct conf_pos source_pos, pos;
};

/* An upstream block: the upstream module's own settings, which the block
 * fills from PROXY_UPSTREAM_CONF_DEFAULT.  Its name, servers and their
 * addresses are malloc'd by the config; tls stays NULL (the daemon builds
 * it for an https:// proxy_pass). */
struct conf_upstream {
    struct proxy_upstream_conf upstream;
    struct conf_pos *server_pos; /* where each of upstream.servers is written */
    struct conf_pos pos;
    /* health_check match=NAME: a stream match block, whose send and
     * expect the stream block gives upstream.health; NULL: none */
    char *health_match;
    struct conf_pos health_match_pos;
};

/* access_log PATH [FORMAT] [buffer=SIZE] [flush=TIME]: one of a level's. */
struct conf_access_log {
    char *path;
    char *format; /* a log_format's name; NULL: the default */
    size_t buffer;
    uint32_t flush_ms;
    struct conf_pos pos, format_pos;
};

/* The access_log lines of one level (top, server, location).  The
 * innermost level that has any is the one whose logs get the lines
 * (nginx's rule); `access_log off` empties its level. */
struct conf_access_logs {
    struct conf_access_log *items;
    size_t count;
    bool set; /* the level has access_log lines */
};

struct conf_location {
    char *path;
    bool exact;    /* "location = /path": exact match; else prefix */
    bool no_regex; /* "location ^~ /path": a prefix that, as the longest, skips the regexes */
    bool regex;    /* "location ~ RE" (caseless: "~* RE"): path is the regex */
    bool caseless;
    struct conf_pos path_pos;
    /* The directive that gives it its content handler ("return",
     * "proxy_pass": those whose entry says `content`); NULL: none. */
    const char *content;
    struct conf_pos content_pos;
    bool passes; /* it has a directive that hands requests on (rewrite) */
    struct conf_pos pos;
    struct conf_access_logs access_logs;
    /* The registered modules' structs (conf_module_conf(), directive.h):
     * its own settings, then inherited; NULL when none is registered. */
    void *modules;
    /* The locations of its `if` blocks, in the order written (nginx's
     * noname locations: the exchange moves to one when its condition
     * holds).  Each has no path; `modules` NULL when its block holds only
     * the rewrite module's directives (its steps are the location's):
     * then it is the location itself, whose settings it would inherit
     * whole.  Its `pos` is its `if`'s. */
    struct conf_location *nested;
    size_t nested_count;
};

struct conf_listen {
    char *address;
    /* The same for every listen on the same address, whatever its
     * spelling: from 0 to conf_config.listen_address_count - 1. */
    size_t address_index;
    bool tls;
    bool http2; /* HTTP/2 too: by ALPN with tls, else by its connection preface */
    bool default_server;
    bool proxy_protocol; /* connections start with a PROXY header (v1 or v2) */
    /* HTTP/3: a UDP address, apart from a TCP listen on the same one (its
     * address_index is its own), served by one server block only. */
    bool quic;
    /* Socket options, given on one listen of an address at most. */
    bool has_socket_options;
    bool deferred;    /* accept once the first bytes arrive (TCP_DEFER_ACCEPT) */
    unsigned backlog; /* 0: the default, 511 */
    struct conf_pos pos;
};

/* Client-side HTTP limits and HTTP/2 settings; set in main and
 * overridable per server (a server takes main's value of what it does not
 * set, wherever main sets it). */
struct conf_http {
    struct http_limits limits; /* client_*, send_timeout, keepalive_* */
    struct http2_conf http2;   /* http2_*: an address takes its default server's */
};

/* One tls_certificate with the tls_certificate_key that follows it.  A server
 * may have several pairs, one per key type (RSA and ECDSA, say); the PEM
 * certificate file holds the leaf first, then its chain. */
struct conf_tls_certificate {
    char *certificate; /* resolved against the config file's directory */
    char *key;
    struct conf_pos certificate_pos, key_pos;
};

/* TLS settings of a server block, used by its `listen ... tls` addresses.  On
 * an address shared by several server blocks, the certificate is picked by
 * SNI; everything else comes from the address's default server. */
struct conf_tls {
    struct conf_tls_certificate *certificates;
    size_t certificate_count;
    /* The TLS module's settings, from TLS_SERVER_CONF_DEFAULT; the strings
     * are malloc'd by the config.  sni_select and sni_arg stay NULL: the
     * daemon wires them. */
    struct tls_server_conf settings;
    struct conf_pos ciphers_pos, ciphersuites_pos, client_ca_pos;
    struct conf_pos stapling_file_pos, stapling_responder_pos, trusted_ca_pos;
};

/* log_format NAME [escape=default|json|none] STRING...: how its values are
 * escaped (nginx's escape=). */
enum conf_log_escape {
    CONF_LOG_ESCAPE_DEFAULT, /* '"', '\\', control and non-ASCII bytes as \xHH */
    CONF_LOG_ESCAPE_JSON,    /* RFC 8259 string escapes; an empty value stays empty */
    CONF_LOG_ESCAPE_NONE,
};

struct conf_log_format {
    char *name;
    char *format; /* the strings joined */
    enum conf_log_escape escape;
    struct conf_pos pos, format_pos;
};

/* acme_issuer NAME { ... } (nginx's ngx_http_acme_module). */
struct conf_acme_issuer {
    char *name;
    char *uri;        /* the ACME directory: https:// */
    char *state_path; /* resolved; default: acme/NAME beside the config */
    char *trusted_ca; /* ssl_trusted_certificate, resolved; NULL: the system's */
    char **contacts;
    size_t contact_count;
    bool accept_terms_of_service;
    int account_key; /* enum acme_key_type (proto/tls/acme.h) */
    bool tls_alpn;   /* challenge tls-alpn-01; else http-01 */
    /* external_account_key KID FILE|data:KEY: the key ID and the MAC key
     * (base64url, checked); NULL: no external account binding */
    char *eab_kid, *eab_key;
    struct conf_pos pos;
};

/* acme_certificate ISSUER [DOMAIN...] [key=ALG]: in a server. */
struct conf_acme_certificate {
    char *issuer;   /* NULL: none in this server */
    char **domains; /* none written: the server's exact server_names */
    size_t domain_count;
    int key; /* enum acme_key_type */
    struct conf_pos pos;
};

struct conf_server {
    struct conf_acme_certificate acme;
    struct conf_listen *listens;
    size_t listen_count;
    /* Exact names, "*.example.com" and "www.example.*" wildcards and
     * "~REGEX" names, as written; and where
     * each is written. */
    char **server_names;
    struct conf_pos *server_name_pos;
    size_t server_name_count;
    struct conf_location *locations;
    size_t location_count;
    struct conf_http http;
    struct conf_tls tls;
    struct conf_pos pos;
    struct conf_access_logs access_logs;
    void *modules; /* the registered modules' structs, as a location's */
    /* http3 off (here or at top level): its quic listens open no socket
     * and its TLS responses get no Alt-Svc. */
    bool http3_off;
};

/* One admin listen beyond its address (conf_config.admin_listens). */
struct conf_admin_listen {
    bool tls;
    struct conf_pos pos;
};

/* Who may read the admin listener: the admin block's own allow/deny (not
 * the top level's), a bearer token, and TLS with client certificates. */
struct conf_admin {
    struct conf_admin_listen *listens; /* one per conf_config.admin_listens */
    struct access_conf access;         /* allow, deny */
    char *token_file;                  /* auth_token_file, resolved; NULL: none */
    struct conf_pos token_file_pos;
    struct conf_tls tls; /* for its tls listens */
    struct conf_pos pos;
};

/* types { TYPE EXTENSION...; }: the type of files with one extension
 * (nginx's mime.types), for static files. */
struct conf_mime_type {
    char *extension;
    char *type;
};

/* stream { server { listen ADDRESS [udp] [tls] [proxy_protocol]; proxy_pass TARGET; } }:
 * nginx's stream module. */
struct conf_stream_listen {
    char *address;
    bool proxy_protocol; /* clients send a PROXY header (v1 or v2) */
    bool tls;            /* listen ... tls (or ssl): TLS terminated, plain bytes to the server */
    bool udp;            /* listen ... udp: datagrams, a session per client address */
    /* listen ... default_server: the server of its address that a client
     * naming none of its servers gets (else the first written) */
    bool default_server;
    struct conf_pos pos;
};

/* What a stream server block's settings writes itself: the rest it takes
 * from the stream block. */
enum {
    CONF_STREAM_CONNECT_TIMEOUT = 1u << 0,
    CONF_STREAM_TIMEOUT = 1u << 1,
    CONF_STREAM_NEXT_UPSTREAM = 1u << 2,
    CONF_STREAM_NEXT_TRIES = 1u << 3,
    CONF_STREAM_NEXT_TIMEOUT = 1u << 4,
    CONF_STREAM_PROXY_PROTOCOL = 1u << 5,
    CONF_STREAM_BUFFER_SIZE = 1u << 6,
    CONF_STREAM_PREREAD = 1u << 7,
    CONF_STREAM_RESPONSES = 1u << 8,
    CONF_STREAM_REQUESTS = 1u << 9,
};

struct conf_stream_server {
    struct conf_stream_listen *listens;
    size_t listen_count;
    char *pass; /* proxy_pass: an upstream block's name, HOST:PORT, or $MAP */
    struct conf_pos pass_pos, pos;
    struct stream_conf conf;             /* the stream block's where it writes none */
    unsigned set;                        /* CONF_STREAM_* bits */
    struct conf_access_logs access_logs; /* none set: the stream block's */
    char *limit_zone;                    /* limit_conn ZONE N; NULL: the stream block's */
    unsigned limit_conn;
    struct conf_pos limit_pos;
    /* its tls listens': the server's own tls_*, and the stream block's
     * where it writes none (the certificates as a whole list) */
    struct conf_tls tls;
    /* tls_alpn (nginx's ssl_alpn): the protocols offered, in ALPN's wire
     * format (a length byte before each); NULL: no ALPN (the stream
     * block's where it writes none) */
    unsigned char *alpn;
    size_t alpn_len;
    /* server_name: which clients of its addresses it serves when several
     * servers listen on one, by the name of their TLS SNI (of the
     * handshake, or read by tls_preread); as an HTTP server's */
    char **server_names;
    struct conf_pos *server_name_pos;
    size_t server_name_count;
};

/* match NAME { send TEXT; expect TEXT | ~ REGEX; } in stream: what a
 * `health_check match=NAME` sends and expects (nginx Plus's stream match). */
struct conf_stream_match {
    char *name;
    char *send, *expect; /* NULL: none */
    bool expect_regex;
    struct conf_pos pos;
};

struct conf_stream {
    bool present;
    struct conf_stream_match *matches;
    size_t match_count;
    struct conf_stream_server *servers;
    size_t server_count;
    struct stream_conf conf; /* the stream block's own settings */
    unsigned set;
    struct conf_stream_server *current; /* while a server block is applied */
    struct conf_map *maps;              /* the stream block's own: proxy_pass $NAME reads one */
    size_t map_count;
    struct conf_access_logs access_logs; /* its servers' where they write none */
    char *limit_zone;                    /* limit_conn ZONE N: its servers' where they write none */
    unsigned limit_conn;
    struct conf_pos limit_pos;
    struct conf_tls tls; /* the stream block's tls_*: its servers' where they write none */
    unsigned char *alpn; /* its tls_alpn, as a server's */
    size_t alpn_len;
    bool applying; /* the stream block is being applied */
};

struct conf_config {
    unsigned workers;               /* 0 = auto: CPUs in the affinity mask */
    enum corral_wakeup_mode wakeup; /* default auto */
    double wakeup_spill;            /* wakeup affinity spill=F; 0 = the library's 1.1 */
    unsigned max_connections;       /* per worker; default 10000 */
    unsigned busy_poll_usecs;       /* default 0 (off) */
    uint32_t drain_timeout_ms;      /* graceful stop and reload; default 10 s */
    uint32_t shutdown_delay_ms;     /* SIGTERM: /readyz fails this long first; default 0 */
    bool quic_bpf;                  /* quic listens steered by connection ID; default on */
    bool io_uring;                  /* workers batch sends and reads through io_uring; default on */
    bool quic_gso;                  /* quic datagrams sent in UDP GSO runs; default on */
    bool quic_retry;                /* address validation by Retry; default off */
    unsigned quic_retry_threshold;  /* handshakes per worker that start Retry; 100 */
    bool ssl_early_data;            /* 0-RTT on quic listens; default off */
    unsigned http3_max_concurrent_streams; /* request streams per connection; default 128 */
    size_t http3_stream_buffer_size;       /* per stream, each way; default 64k */
    char *user, *group;                    /* privilege drop after binding; NULL = keep */
    char *pid_file;                        /* NULL = none */
    char *error_log;                       /* NULL = stderr */
    char *quic_host_key;                   /* NULL: random keys per listen and generation */
    enum corral_log_level log_level;       /* default info */
    char *access_log;                      /* NULL = off */
    char *log_format;                      /* NULL = combined */
    struct conf_pos log_format_pos;
    struct conf_log_format *log_formats; /* log_format NAME ...: for access_log PATH NAME */
    size_t log_format_count;
    char *access_log_format; /* NULL: log_format's one string, else the default */
    struct conf_pos access_log_format_pos;
    size_t access_log_buffer;            /* buffer=SIZE: per worker; 0: a write per line */
    uint32_t access_log_flush_ms;        /* flush=TIME: 0: when full, and at the end */
    struct conf_access_logs access_logs; /* the top level's: the first is the fields above */
    struct conf_map *maps;
    size_t map_count;

    char **admin_listens; /* admin { listen ADDR [tls]; } */
    size_t admin_listen_count;
    struct conf_admin admin; /* the rest of the admin block */

    struct conf_http http;
    struct conf_server *servers;
    size_t server_count;
    size_t listen_address_count; /* distinct listen addresses of the servers */
    struct conf_upstream *upstreams;
    size_t upstream_count;

    struct conf_limit_zone *limit_zones;
    size_t limit_zone_count;
    void *modules; /* the registered modules' structs at the top level */

    struct conf_mime_type *mime_types; /* types { }: one per extension */
    size_t mime_type_count;
    char *default_type; /* default_type at top level; NULL: none */
    /* TLS settings written at top level (nginx's ssl_* in http { }), which
     * each server takes for those it does not write; no certificates. */
    struct conf_tls tls;

    struct conf_stream stream; /* stream { }: the layer 4 proxy */

    struct conf_acme_issuer *acme_issuers;
    size_t acme_issuer_count;

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

/* What to write instead of nginx's variable `name` (without "$"), which
 * corral does not have: the message in `buf`, or NULL when it is no nginx
 * variable (conf/nginx_porting.c). */
const char *conf_nginx_variable_note(const char *name, char *buf, size_t len);

/* Reads `path` from the file system and parses it. */
int conf_load(const char *path, struct conf_config **out, struct conf_error *error);

/* The most errors one parse reports: past this many, the rest are mostly
 * consequences of the first ones. */
#define CONF_ERRORS_MAX 50

/* Called once per error, in the order found, with "file:line:col: message". */
typedef void (*conf_report_fn)(void *arg, const char *message);

/*
 * As conf_parse() and conf_load(), but a directive that fails does not end
 * the parse: each error goes to `report` (when not NULL) and the parse goes
 * on with the next directive, up to CONF_ERRORS_MAX errors.  A syntax error
 * still ends it (the structure after it is unknown), and the checks that
 * need the whole config (listen conflicts, upstream and zone names) run only
 * when every directive applied.  `error` holds the first error.
 */
int conf_parse_each(const char *path, const char *text, size_t len, conf_read_file_fn read_file,
                    void *read_arg, conf_report_fn report, void *report_arg,
                    struct conf_config **out, struct conf_error *error);
int conf_load_each(const char *path, conf_report_fn report, void *report_arg,
                   struct conf_config **out, struct conf_error *error);

/*
 * `corral --from-nginx`: writes `text` (`len` bytes of the nginx config file
 * `path`) to `out` in corral's spelling, keeping its comments and layout,
 * with a "# corral: ..." line above each line it changed
 * (conf/nginx_translate.c).  A directive corral lacks is commented out
 * under its porting message and sent to `report` (when not NULL) as
 * "path:line: message".  Included files are not read.  Returns how many
 * directives could not be translated (0: all were), or -1 with `error`
 * written when the text is not a config (a syntax error).
 */
int conf_from_nginx(const char *path, const char *text, size_t len, FILE *out,
                    conf_report_fn report, void *report_arg, struct conf_error *error);
/* The same, reading the file `path`. */
int conf_from_nginx_file(const char *path, FILE *out, conf_report_fn report, void *report_arg,
                         struct conf_error *error);

/* The built-in default config, used when the daemon is given no -c. */
extern const char conf_default_text[];

void conf_free(struct conf_config *config);

/* True when the two addresses name the same socket address: "*:80" and
 * "0.0.0.0:80" do, "localhost:80" and "127.0.0.1:80" do.  Addresses that
 * corral_parse_address() cannot read are the same only as the same text. */
bool conf_same_address(const char *a, const char *b);

/* conf_parse_size() and conf_parse_duration(), the value syntax shared
 * by directives, are in directive.h, for modules' apply functions too. */

#endif
