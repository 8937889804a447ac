/*
 * site.h: what an HTTP listening address serves, whatever the protocol
 * (HTTP/1.1 and later framers route the same way): its virtual hosts and
 * their locations, each with a handler (exchange.h), and the per-worker
 * counters of its responses, and the routing (site.c).
 */
#ifndef CORRAL_PROTO_SITE_H
#define CORRAL_PROTO_SITE_H

#include "proto/counter.h"
#include "proto/http/exchange.h"
#include "proto/http/http_limits.h"    /* struct http_limits, in each vhost */
#include "proto/http/proxy_protocol.h" /* enum proxy_protocol_failure, counted */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_STATUS 600

struct http_regex;
struct router_table;

struct http_location {
    const char *path; /* the prefix or exact path; for a regex, as written */
    size_t path_len;
    bool exact;
    const struct http_handler *handler;
    void *handler_data;
    bool no_regex;                  /* "^~": as the longest prefix, no regex is tried */
    const struct http_regex *regex; /* "~", "~*": tried in order after the prefixes */
    struct access_log *access_log;  /* its access_log lines; NULL: its vhost's */
    /* add_header for corral's own answers (403, a limit's 503); NULL: none */
    const struct http_add_headers *add_headers;
    bool named; /* "@name": searched for no request, reached by error_page only */
    /* What each module built for it (module.h), by the module's index
     * (each NULL: nothing); NULL when no module built anything.  A
     * pointer, so that the location search's array stays small. */
    const void *const *modules;
};

struct http_vhost {
    /* exact names, "*.suffix" and "prefix.*" wildcards, "~REGEX" names */
    const char *const *names;
    size_t name_count;
    /* Its "~REGEX" names compiled (caseless), in the order written. */
    const struct http_regex *const *name_regexes;
    size_t name_regex_count;
    const struct http_location *locations;
    size_t location_count;
    struct http_limits limits;
    /* its server's entry in http_stats.servers: its place among the
     * servers in the config, whose order its regex names are tried in */
    unsigned stats_slot;
    struct access_log *access_log; /* its server's access_log lines; NULL: the site's */
    /* add_header for the answers no location gives (404, 400...); NULL: none */
    const struct http_add_headers *add_headers;
    /* Vhosts of a TLS site with the same TLS settings (certificates, client
     * certificates) share it: a connection that SNI gave one may ask any of
     * its group (site_route_vhost()).  0 for every vhost of a plain site. */
    unsigned tls_group;
    /* The router's steps for its requests: its site's, without the
     * modules none of its site's vhosts turns on (module.h); NULL: the
     * one with every module. */
    const struct router_table *router;
    /* What each module built for the answers no location gives, as a
     * location's `modules`. */
    const void *const *modules;
    /* The content handler of a request that no location takes, from the
     * first module with one that built something for the server (static
     * files under its root, as nginx's server-level configuration
     * serves); NULL: such a request gets 404. */
    const struct http_handler *handler;
    void *handler_data;
};

/* Everything served on one listening address: its virtual hosts (the first
 * is the default) and per-worker counters. */
struct access_log;
struct tls_server;
struct http2_conf;

struct http_site {
    const struct http_vhost *vhosts;
    size_t vhost_count;
    struct tls_server *tls;        /* NULL: plain HTTP */
    struct access_log *access_log; /* NULL: none */
    struct http_stats *stats;      /* one per worker, indexed by corral_worker_index() */
    /* NULL: HTTP/1.1 only; else HTTP/2 too, with these settings (http2.h) */
    const struct http2_conf *http2;
    bool proxy_protocol; /* each connection starts with a PROXY header */
};

enum http_timeout_kind {
    HTTP_TIMEOUT_HEADER, /* the request head took too long: 408 */
    HTTP_TIMEOUT_BODY,   /* the request body stalled: closed */
    HTTP_TIMEOUT_SEND,   /* the client stopped reading the response: closed */
    HTTP_TIMEOUT_KINDS,
};
extern const char *const http_timeout_kind_names[HTTP_TIMEOUT_KINDS];

/* HTTP/2 events, counted per worker (names in http2.h). */
enum http2_counter {
    HTTP2_STREAMS_OPENED,
    HTTP2_RESETS_RECEIVED,
    HTTP2_RESETS_SENT,
    HTTP2_GOAWAY_NO_ERROR,          /* graceful stop, reload, idle */
    HTTP2_GOAWAY_PROTOCOL_ERROR,    /* malformed framing: nghttp2's verdict */
    HTTP2_GOAWAY_ENHANCE_YOUR_CALM, /* rapid reset, floods */
    HTTP2_GOAWAY_OTHER,
    /* The defences, each counted once per connection it ends (or per
     * stream it refuses or cuts off). */
    HTTP2_RAPID_RESET,
    HTTP2_SETTINGS_FLOOD,
    HTTP2_PING_FLOOD,
    HTTP2_EMPTY_FRAME_FLOOD,
    HTTP2_WINDOW_UPDATE_FLOOD,
    HTTP2_HEADER_BLOCK_TOO_LONG,  /* CONTINUATION flood */
    HTTP2_HEADER_LIST_TOO_LARGE,  /* HPACK bomb, or just too many fields: 431 */
    HTTP2_STREAMS_REFUSED,        /* beyond http2_max_concurrent_streams */
    HTTP2_STREAMS_STALLED,        /* reset at a window shut for send_timeout */
    HTTP2_HEADER_TIMEOUT,         /* a header block or request head over client_header_timeout */
    HTTP2_PARTIAL_FRAME_TIMEOUT,  /* idle with a frame left partial */
    HTTP2_TRAILER_FIELDS_DROPPED, /* request trailer fields that belong in a head */
    HTTP2_BODY_TIMEOUT,           /* a request body stalled for client_body_timeout */
    HTTP2_COUNTERS,
};

/* One server block's counters on one worker: how long its exchanges took,
 * from the first byte of the request head to the end of the response, by
 * status class. */
struct http_server_stats {
    struct histogram duration[STATUS_CLASSES];
};

/* Per-worker counters, written by the worker only. */
struct http_stats {
    _Atomic uint64_t responses[HTTP_MAX_STATUS];
    _Atomic uint64_t timeouts[HTTP_TIMEOUT_KINDS];
    _Atomic uint64_t http2[HTTP2_COUNTERS];
    _Atomic uint64_t proxy_protocol[PROXY_PROTOCOL_FAILURES];
    /* By http_vhost.stats_slot, `server_count` of them; NULL: not kept */
    struct http_server_stats *servers;
    unsigned server_count;
} __attribute__((aligned(64)));

/* Counts a response of `status` that `vhost` gave, `ns` after its request
 * began, in `stats` (NULL: none). */
void site_stats_count(struct http_stats *stats, const struct http_vhost *vhost, unsigned status,
                      uint64_t ns);

/* Finds the location for `path` in `vhost` as nginx does: an exact match;
 * else the longest prefix if it is "^~"; else the first regex that
 * matches, in order; else the longest prefix.  NULL if none, and
 * &http_location_regex_failure (which answers 500) when a regex gave up
 * before knowing whether it matches. */
extern const struct http_location http_location_regex_failure;
const struct http_location *site_search_location(const struct http_vhost *vhost, const char *path,
                                                 size_t len);

/* Picks the virtual host for `host` (without port) as nginx does: an
 * exact name, else the longest leading wildcard ("*.example.com"), else
 * the longest trailing one ("www.example.*"), else the first regex name
 * that matches, in the order of the config's servers; else the site's
 * first. */
const struct http_vhost *site_find_vhost(const struct http_site *site, const char *host,
                                         size_t len);

/* The longest host a regex name is matched against (DNS's 253, and
 * room): a longer one matches none. */
#define SITE_HOST_MAX 256

/* One server's names as site_names_find() reads them, whatever the
 * protocol (an HTTP vhost's, a stream server's): as written, exact,
 * "*.example.com", "www.example.*" or "~REGEX" (skipped: see `regexes`);
 * its "~" ones compiled (caseless), in the order written; and its place
 * among the servers of its address in the config. */
struct site_names {
    const char *const *names;
    size_t name_count;
    const struct http_regex *const *regexes;
    size_t regex_count;
    unsigned order;
};

/* Reads the names of server `i` of `servers` into *out; returns the
 * server. */
typedef const void *site_names_at_fn(const void *servers, size_t i, struct site_names *out);

/* The server of `servers` (`count` of them, read with `at`) that a client
 * naming `host` (`len` bytes, not NUL-terminated) is served by, as nginx
 * picks a virtual server: an exact name, else the longest
 * "*.example.com", else the longest "www.example.*", else the first "~"
 * name that matches, in the order of the servers in the config; else
 * NULL, for the address's default. */
const void *site_names_find(const void *servers, size_t count, site_names_at_fn *at,
                            const char *host, size_t len);

/* Matches `host` (`len` bytes), lowercased into `buf` (SITE_HOST_MAX
 * bytes: the subject of the groups), against `vhost`'s regex names in
 * order: the index of the first that matches, its groups in `ovector`
 * (2 * HTTP_REGEX_PAIRS) and their count in *pairs; -1 when none does. */
int site_name_regex_match(const struct http_vhost *vhost, const char *host, size_t len, char *buf,
                          size_t *ovector, int *pairs);

/* The virtual host for a request to `host` (without port) on `conn`,
 * picked as site_find_vhost() does, unless the client named by SNI a vhost
 * of another TLS group (struct http_vhost): then the request is misdirected
 * (RFC 9110 15.5.20): *status becomes 421 and the vhost returned is SNI's,
 * to which the connection belongs.  *status is left alone otherwise, and
 * for a connection without TLS or without SNI. */
const struct http_vhost *site_route_vhost(const struct http_site *site, const corral_conn *conn,
                                          const char *host, size_t len, unsigned *status);
/* The same for a connection whose SNI name is `sni` (NULL: none), as
 * HTTP/3's, whose TLS is QUIC's and not a corral_conn's. */
const struct http_vhost *site_route_vhost_sni(const struct http_site *site, const char *sni,
                                              const char *host, size_t len, unsigned *status);

/* A tls_sni_select_fn for a site's TLS server (`site` is the http_site):
 * SNI picks the certificates of the vhost that Host would pick. */
size_t site_sni_select(void *site, const char *name, size_t len);

#endif
