/*
 * nginx_porting.c: what to write instead of an nginx directive or variable
 * corral does not have.  The registry asks here before it calls a name
 * unknown, so that an nginx word never gets a bare "unknown directive":
 * the message names corral's replacement, says corral does it already, or
 * names the part of the roadmap (docs/config.md) that will bring it.
 */
#include "registry.h"

#include <stdio.h>
#include <string.h>

enum porting_kind {
    PORT_USE,     /* corral has it under another name or form */
    PORT_BUILTIN, /* corral does it already: the line can go */
    PORT_MISSING, /* not yet: a part of the roadmap covers it */
    PORT_NONE,    /* not planned: what to do instead */
};

/* The roadmap's parts, as docs/config.md names them. */
#define R_STATIC "static files and compression"
#define R_H2UP   "HTTP/2 and gRPC to backends"
#define R_CACHE  "cache"
#define R_H3     "HTTP/3"
#define R_ACME   "ACME and OCSP"
#define R_AUTH   "auth and tracing"
#define R_STREAM "stream proxy"

/* A name ending in "*" stands for every name with that prefix.  For
 * PORT_MISSING, `text` is the feature and `roadmap` its part; otherwise
 * `text` is the advice. */
struct porting_entry {
    const char *name;
    enum porting_kind kind;
    const char *text;
    const char *roadmap;
};

#define USE(n, t)                                                                                  \
    {                                                                                              \
        n, PORT_USE, t, NULL                                                                       \
    }
#define BUILTIN(n, t)                                                                              \
    {                                                                                              \
        n, PORT_BUILTIN, t, NULL                                                                   \
    }
#define MISSING(n, t, r)                                                                           \
    {                                                                                              \
        n, PORT_MISSING, t, r                                                                      \
    }
#define NONE(n, t)                                                                                 \
    {                                                                                              \
        n, PORT_NONE, t, NULL                                                                      \
    }

#define STATIC(n)   MISSING(n, "this option of serving files", R_STATIC)
#define TUNING(n)   BUILTIN(n, "corral sizes its buffers and tables itself")
#define NO_FILES(n) BUILTIN(n, "corral keeps no temporary files of responses")

/* clang-format off */
static const struct porting_entry directives[] = {
    /* core and events */
    BUILTIN("daemon", "corral runs in the foreground; systemd (docs/corral.service) or your "
            "supervisor runs it as a service"),
    BUILTIN("master_process", "corral is one process with worker threads"),
    USE("worker_cpu_affinity", "workers follow the process's CPU mask (taskset, systemd "
        "CPUAffinity=), and \"wakeup affinity\" keeps connections on their CPU"),
    NONE("worker_priority", "set the priority with nice or systemd's Nice="),
    NONE("worker_rlimit_core", "set the core limit with ulimit or systemd's LimitCORE="),
    USE("worker_shutdown_timeout", "\"drain_timeout TIME;\""),
    NONE("working_directory", "relative paths are relative to the config file's directory"),
    NONE("env", "corral reads no environment variables from its config"),
    BUILTIN("lock_file", "corral needs no lock file"),
    BUILTIN("pcre_jit", "corral uses the PCRE2 JIT whenever it is available"),
    NONE("ssl_engine", "corral uses OpenSSL's default provider"),
    NONE("thread_pool", "corral's workers are its threads"),
    BUILTIN("timer_resolution", "corral's timers have millisecond resolution"),
    BUILTIN("accept_mutex", "\"wakeup\" says how workers share new connections"),
    BUILTIN("accept_mutex_delay", "\"wakeup\" says how workers share new connections"),
    USE("debug_connection", "\"error_log FILE debug;\""),
    BUILTIN("worker_aio_requests", "corral does no file AIO"),
    BUILTIN("debug_points", "corral's asserts are its debug points"),
    USE("resolver_timeout", "\"resolver\" belongs in an upstream block, which times its "
        "lookups itself"),
    STATIC("sendfile_max_chunk"),
    /* structure */
    USE("http", "\"http { ... }\" may be written at top level only"),
    NONE("mail", "corral is no mail proxy"),
    NONE("smtp_*", "corral is no mail proxy"),
    NONE("pop3_*", "corral is no mail proxy"),
    NONE("imap_*", "corral is no mail proxy"),
    MISSING("preread_*", "the stream proxy's preread settings", R_STREAM),
    /* http core */
    USE("large_client_header_buffers", "\"client_max_header_size SIZE;\" bounds the request "
        "head"),
    BUILTIN("client_body_in_file_only", "a buffered request body goes to a file only beyond "
            "client_body_buffer_size (proxy_request_buffering)"),
    TUNING("client_body_in_single_buffer"),
    TUNING("connection_pool_size"),
    TUNING("request_pool_size"),
    TUNING("output_buffers"),
    TUNING("postpone_output"),
    TUNING("send_lowat"),
    TUNING("subrequest_output_buffer_size"),
    STATIC("autoindex_*"), STATIC("aio"), STATIC("aio_write"), STATIC("directio*"),
    STATIC("open_file_cache_*"), STATIC("max_ranges"), STATIC("read_ahead"),
    STATIC("log_not_found"), STATIC("random_index"), STATIC("mp4*"), STATIC("flv"),
    BUILTIN("chunked_transfer_encoding", "corral chunks a response of unknown length for "
            "HTTP/1.1 clients"),
    NONE("ignore_invalid_headers", "corral refuses a request with an invalid header name (400), where nginx's on drops the header"),
    NONE("underscores_in_headers", "corral passes header names with underscores on"),
    BUILTIN("lingering_close", "corral drains a request it refused before closing"),
    BUILTIN("lingering_time", "corral drains a request it refused before closing"),
    BUILTIN("lingering_timeout", "corral drains a request it refused before closing"),
    BUILTIN("reset_timedout_connection", "corral closes a timed-out connection at once"),
    BUILTIN("keepalive_disable", "corral keeps connections of every client alive"),
    USE("keepalive_time", "\"keepalive_requests N;\" and \"keepalive_timeout TIME;\""),
    NONE("limit_rate", "corral does not slow responses down"),
    NONE("limit_rate_after", "corral does not slow responses down"),
    NONE("limit_except", "use \"map $request_method ...\" with a \"return\" in the location"),
    BUILTIN("merge_slashes", "see \"$uri\" in docs/config.md: corral matches the path as sent"),
    NONE("msie_padding", "corral adds nothing for old browsers"),
    NONE("msie_refresh", "corral adds nothing for old browsers"),
    NONE("recursive_error_pages", "corral's error_page does not recurse, as nginx's off"),
    MISSING("auth_jwt_claim_set", "JWT claim maps", R_AUTH),
    MISSING("auth_jwt_header_set", "JWT claim maps", R_AUTH),
    MISSING("auth_jwt_require", "JWT claim maps", R_AUTH),
    MISSING("auth_jwt_type", "encrypted JWTs", R_AUTH),
    MISSING("auth_delay", "a delay before 401 answers", R_AUTH),
    USE("opentelemetry*", "the \"otel_*\" directives (\"Tracing\" in docs/config.md)"),
    MISSING("otel_*", "this tracing directive (corral's otel_* directives are in docs/config.md)", R_AUTH),
    USE("internal", "a named location (\"location @name { ... }\") is reachable from error_page only"),
    /* log */
    BUILTIN("open_log_file_cache", "corral keeps its log files open"),
    BUILTIN("log_subrequest", "corral logs no subrequests (auth_request's), as nginx's off"),
    /* rewrite */
    BUILTIN("rewrite_log", "\"error_log FILE debug;\" logs each rewrite"),
    BUILTIN("uninitialized_variable_warn", "corral refuses unknown variables when it starts"),
    /* limits */
    NONE("limit_req_dry_run", "corral has no dry run of its limits; their metrics show how "
         "often they act"),
    NONE("limit_conn_dry_run", "corral has no dry run of its limits; their metrics show how "
         "often they act"),
    BUILTIN("limit_req_log_level", "corral logs refused requests at \"warn\""),
    BUILTIN("limit_conn_log_level", "corral logs refused connections at \"warn\""),
    USE("limit_zone", "\"limit_conn_zone KEY zone=NAME:SIZE;\""),
    /* headers and filters */
    NONE("add_trailer", "corral adds no trailers"),
    NONE("sub_filter*", "corral does not rewrite bodies"),
    NONE("addition_*", "corral does not rewrite bodies"),
    NONE("ssi*", "corral does not rewrite bodies"),
    NONE("xslt_*", "corral does not rewrite bodies"),
    NONE("image_filter*", "corral does not rewrite bodies"),
    NONE("charset*", "corral does not recode bodies"),
    NONE("source_charset", "corral does not recode bodies"),
    NONE("override_charset", "corral does not recode bodies"),
    NONE("geo", "use \"allow\"/\"deny\" for addresses, or \"map $remote_addr\""),
    NONE("geoip_*", "corral has no GeoIP database"),
    NONE("geoip2", "corral has no GeoIP database"),
    NONE("split_clients", "use \"balance hash\" in an upstream block"),
    NONE("userid*", "corral sets no tracking cookies"),
    NONE("secure_link*", "corral does not check signed links"),
    NONE("dav_*", "corral does not serve WebDAV"),
    NONE("create_full_put_path", "corral does not serve WebDAV"),
    NONE("min_delete_depth", "corral does not serve WebDAV"),
    NONE("empty_gif", "corral serves no files of its own"),
    NONE("js_*", "corral has no scripting"),
    NONE("perl*", "corral has no scripting"),
    NONE("mirror*", "corral does not mirror requests"),
    NONE("slice", "corral does not split requests"),
    /* proxy */
    NONE("proxy_pass_request_headers", "corral always passes the request's headers on, as nginx's on does"),
    NONE("proxy_pass_request_body", "corral always passes the request's body on, as nginx's on does"),
    NO_FILES("proxy_temp_path"),
    NO_FILES("proxy_max_temp_file_size"),
    NO_FILES("proxy_temp_file_write_size"),
    NONE("proxy_pass_header", "corral passes the upstream's headers on; \"proxy_hide_header\" drops one"),
    NONE("proxy_ignore_client_abort", "corral always closes the upstream request when the client leaves, as nginx's off does"),
    MISSING("proxy_cookie_*", "rewriting the upstream's Set-Cookie", R_H2UP),
    NONE("proxy_method", "corral sends the client's method"),
    NONE("proxy_set_body", "corral sends the client's body"),
    MISSING("proxy_store*", "storing responses as files (the HTTP cache, proxy_cache, keeps them)", R_CACHE),
    NONE("proxy_bind", "the kernel picks the upstream connection's source address"),
    BUILTIN("proxy_socket_keepalive", "corral's upstream connections are kept alive by "
            "\"keepalive\" in the upstream block"),
    NONE("proxy_limit_rate", "corral does not slow responses down"),
    BUILTIN("proxy_force_ranges", "corral passes Range requests on"),
    MISSING("proxy_cache_convert_head", "fetching a HEAD as a GET for the cache", R_CACHE),
    MISSING("proxy_cache_purge", "purging by request", R_CACHE),
    BUILTIN("proxy_ssl_server_name", "corral sends SNI to https:// upstreams (the host of "
            "proxy_pass, or proxy_tls_name)"),
    BUILTIN("proxy_ssl_session_reuse", "corral resumes TLS sessions with upstreams"),
    BUILTIN("proxy_ssl_verify_depth", "corral verifies the whole chain"),
    BUILTIN("proxy_ssl_protocols", "corral speaks TLS 1.2 and 1.3 to upstreams"),
    BUILTIN("proxy_ssl_ciphers", "corral uses OpenSSL's default ciphers towards upstreams"),
    MISSING("proxy_ssl_password_file", "encrypted keys (store the key unencrypted, mode 0600)", R_AUTH),
    MISSING("proxy_ssl_crl", "CRLs", R_ACME),
    NONE("proxy_ssl_conf_command", "corral sets no raw OpenSSL commands"),
    MISSING("grpc_ssl_password_file", "encrypted keys (store the key unencrypted, mode 0600)", R_AUTH),
    MISSING("grpc_ssl_crl", "CRLs", R_ACME),
    BUILTIN("grpc_ssl_server_name", "corral sends SNI to grpcs:// upstreams"),
    BUILTIN("grpc_ssl_session_reuse", "corral resumes TLS sessions with upstreams"),
    BUILTIN("grpc_ssl_verify_depth", "corral verifies the whole chain"),
    BUILTIN("grpc_ssl_protocols", "corral speaks TLS 1.2 and 1.3 to upstreams"),
    BUILTIN("grpc_ssl_ciphers", "corral uses OpenSSL's default ciphers towards upstreams"),
    NONE("grpc_ssl_conf_command", "corral sets no raw OpenSSL commands"),
    NONE("grpc_pass_header", "corral passes the upstream's headers on; \"grpc_hide_header\" drops one"),
    NONE("grpc_ignore_headers", "corral acts on no X-Accel-* fields of a backend's response"),
    NONE("grpc_bind", "the kernel picks the upstream connection's source address"),
    BUILTIN("grpc_socket_keepalive", "corral keeps HTTP/2 upstream connections open until "
            "\"keepalive_timeout\""),
    NONE("fastcgi_*", "corral speaks HTTP to backends, not FastCGI: give the application an HTTP listener (its language's HTTP server, or a FastCGI-to-HTTP gateway) and proxy_pass to it"),
    NONE("uwsgi_*", "corral proxies to HTTP backends: run uWSGI with --http-socket and "
         "proxy_pass to it"),
    NONE("scgi_*", "corral proxies to HTTP backends: give the application an HTTP listener"),
    NONE("memcached_*", "corral proxies to HTTP backends only"),
    /* upstream */
    USE("least_time", "\"balance least_conn;\" in the upstream block"),
    BUILTIN("zone", "corral's upstream state is shared by every worker"),
    NONE("keepalive_time", "corral reuses upstream connections until \"keepalive_timeout\""),
    NONE("ntlm", "corral does not tie upstream connections to clients"),
    NONE("queue", "a request with no server free is answered 502"),
    NONE("sticky*", "use \"balance hash $cookie_NAME;\" in the upstream block"),
    /* TLS */
    USE("ssl", "write \"ssl\" (or \"tls\") on the listen: \"listen 443 ssl;\""),
    BUILTIN("ssl_buffer_size", "corral sizes TLS records itself"),
    MISSING("ssl_crl", "CRLs", R_ACME),
    BUILTIN("ssl_dhparam", "corral offers ECDHE key exchange, which needs no DH parameters"),
    BUILTIN("ssl_ecdh_curve", "corral uses OpenSSL's default groups (X25519, P-256 and "
            "others)"),
    MISSING("ssl_ocsp*", "OCSP checks of client certificates", R_ACME),
    MISSING("ssl_password_file", "encrypted keys (store the key unencrypted, mode 0600)",
            R_ACME),
    NONE("ssl_reject_handshake", "a server without a certificate refuses the handshake in "
         "corral when no other server on the address has one"),
    USE("ssl_session_ticket_key", "\"tls_session_ticket_rotation TIME;\": corral makes and "
        "rotates the ticket keys itself"),
    BUILTIN("ssl_verify_depth", "corral verifies the whole chain"),
    MISSING("acme_*", "this ACME directive (corral has acme_issuer and acme_certificate)", R_ACME),
    /* HTTP/2 and HTTP/3 */
    BUILTIN("http2_body_preread_size", "corral sizes its buffers itself"),
    BUILTIN("http2_chunk_size", "corral sizes its frames itself"),
    USE("http2_max_field_size", "\"http2_max_header_list_size SIZE;\""),
    USE("http2_max_header_size", "\"http2_max_header_list_size SIZE;\""),
    USE("http2_max_requests", "\"keepalive_requests N;\""),
    USE("http2_recv_timeout", "\"http2_idle_timeout TIME;\""),
    TUNING("http2_recv_buffer_size"),
    NONE("http2_push*", "corral does not push (browsers removed it); use 103 Early Hints "
         "from the backend"),
    MISSING("http3_*", "HTTP/3's other settings (http3_hq)", R_H3),
    MISSING("quic_*", "QUIC's other settings", R_H3),
    {NULL, PORT_NONE, NULL, NULL},
};

/* Variables nginx has and corral does not. */
static const struct porting_entry variables[] = {
    MISSING("document_root", "the $document_root variable", R_STATIC),
    MISSING("realpath_root", "the $realpath_root variable", R_STATIC),
    MISSING("gzip_ratio", "the $gzip_ratio variable", R_STATIC),
    MISSING("ssl_client_*", "client certificate variables", R_AUTH),
    MISSING("ssl_early_data", "TLS 1.3 early data", R_H3),
    MISSING("http2", "an $http2 variable (use $server_protocol)", R_H2UP),
    MISSING("http3", "an $http3 variable (use $server_protocol)", R_H3),
    MISSING("upstream_http_*", "response header variables", R_H2UP),
    MISSING("sent_http_*", "response header variables", R_H2UP),
    MISSING("upstream_cookie_*", "response header variables", R_H2UP),
    MISSING("geoip_*", "GeoIP", NULL),
    USE("proxy_add_x_forwarded_for", "corral appends the client's address to X-Forwarded-For "
        "by itself: \"proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\" is "
        "accepted and means that; elsewhere use $http_x_forwarded_for and $remote_addr"),
    NONE("hostname", "write the host's name as text"),
    NONE("nginx_version", "corral is not nginx"),
    NONE("pid", "corral's workers are threads of one process"),
    NONE("limit_rate", "corral does not slow responses down"),
    NONE("request_body", "corral streams request bodies and keeps none"),
    NONE("request_body_file", "corral streams request bodies and keeps none"),
    NONE("request_completion", "see $status"),
    NONE("server_name", "write the name as text, or use $host"),
    NONE("connection", "see $request_id"),
    {NULL, PORT_NONE, NULL, NULL},
};
/* clang-format on */

static const struct porting_entry *lookup(const struct porting_entry *table, const char *name)
{
    for (const struct porting_entry *e = table; e->name != NULL; e++) {
        size_t len = strlen(e->name);
        if (e->name[len - 1] == '*' ? strncmp(e->name, name, len - 1) == 0
                                    : strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

static const char *describe(const struct porting_entry *e, const char *shown, char *buf, size_t len)
{
    switch (e->kind) {
    case PORT_USE: snprintf(buf, len, "%s is nginx's: in corral, %s", shown, e->text); break;
    case PORT_BUILTIN:
        snprintf(buf, len, "%s is not needed: %s; delete the line", shown, e->text);
        break;
    case PORT_MISSING:
        if (e->roadmap != NULL)
            snprintf(buf, len,
                     "%s: not in corral yet: %s (see \"%s\" in the roadmap, docs/config.md)", shown,
                     e->text, e->roadmap);
        else
            snprintf(buf, len, "%s: corral has no %s", shown, e->text);
        break;
    case PORT_NONE: snprintf(buf, len, "%s is nginx's: %s", shown, e->text); break;
    }
    return buf;
}

const char *conf__nginx_directive_note(const char *name, char *buf, size_t len)
{
    const struct porting_entry *e = lookup(directives, name);
    if (e == NULL)
        return NULL;
    char shown[96];
    snprintf(shown, sizeof(shown), "\"%s\"", name);
    return describe(e, shown, buf, len);
}

const char *conf_nginx_variable_note(const char *name, char *buf, size_t len)
{
    const struct porting_entry *e = lookup(variables, name);
    if (e == NULL)
        return NULL;
    char shown[96];
    snprintf(shown, sizeof(shown), "\"$%s\"", name);
    return describe(e, shown, buf, len);
}
