/*
 * proxy_module.h: proxy_pass as a module (proto/http/module.h): its
 * directives (proxy_pass, the header rewriting around it, its timeouts,
 * retries and TLS towards the upstream), its struct per level and how a
 * level inherits it, its build step, which makes a location's struct
 * proxy_location (proxy.h), and its content handler, proxy_handler.
 * The upstream blocks and the groups locations share are the daemon's:
 * the build step asks for them (http_module_build.upstream).
 */
#ifndef CORRAL_PROTO_PROXY_MODULE_H
#define CORRAL_PROTO_PROXY_MODULE_H

#include "conf/directive.h"
#include "proto/tls/tls.h" /* struct tls_client_conf */
#include "proto/upstream/proxy_conf.h"

/* proxy_http_version's values. */
#define PROXY_HTTP_11 11
#define PROXY_HTTP_2  20

/* proxy_set_header NAME VALUE, as written. */
struct proxy_set_header_conf {
    char *name, *value;
    struct conf_pos value_pos;
};

/* proxy_redirect REDIRECT REPLACEMENT as written, or `default`. */
struct proxy_redirect_conf {
    char *from, *to; /* malloc'd; NULL for default */
    struct conf_pos from_pos, to_pos;
};

/* The proxy's directives at one level (top level, server, location).  The
 * settings of struct proxy_conf are merged field by field, each written
 * one keeping its position; a level with no proxy_set_header line of its
 * own takes its parent's lines, as nginx's does. */
struct proxy_module_conf {
    /* proxy_pass (a location's only): "http[s]://NAME" or
     * "http[s]://HOST:PORT" as written, without its path; NULL: none. */
    char *pass;
    char *uri; /* the path after it ("/", "/app/"), which replaces the part of
                  the request's path the location matched; NULL: none */
    struct conf_pos pass_pos;
    /* grpc_pass: pass is "grpc[s]://..." (HTTP/2, gRPC errors) */
    bool grpc;
    /* proxy_http_version: 11 or 20 (written at version_at) */
    unsigned http_version;
    struct conf_pos version_at;
    /* An if's location: proxy_pass (pass, uri) and the TLS settings are
     * its location's, not its own to free (merge_nested). */
    bool borrowed_pass, borrowed_tls;
    /* TLS towards the upstream, used when proxy_pass is https:// (the
     * check refuses proxy_tls_* otherwise).  tls.ca_file is resolved
     * against the config file's directory; a NULL server_name stands for
     * the host in proxy_pass (an upstream's name, or the address's host;
     * no SNI for IP literals). */
    struct tls_client_conf tls;
    struct conf_pos tls_ca_pos;   /* proxy_tls_trusted_certificate's argument */
    struct conf_pos tls_cert_pos; /* proxy_tls_certificate's argument */
    /* Where each proxy_tls_* directive is written (file NULL: it is not). */
    struct conf_pos tls_verify_at, tls_ca_at, tls_name_at, tls_cert_at, tls_key_at;
    /* written proxy_ssl_* */
    bool tls_verify_nginx, tls_ca_nginx, tls_name_nginx, tls_cert_nginx, tls_key_nginx;
    bool tls_grpc;                /* the last one written was spelt grpc_ssl_* */
    struct conf_pos location_pos; /* a location's block (check()) */
    /* proxy_set_header lines; `headers_written`: the level has some (the
     * upgrade idiom's included), else it holds its parent's, which it
     * does not own. */
    struct proxy_set_header_conf *set_headers;
    size_t set_header_count;
    bool headers_written;
    char **hide_headers; /* proxy_hide_header NAME */
    size_t hide_header_count;
    /* proxy_upgrade PROTOCOL... | off: the Upgrade protocols passed on
     * (upgrade_set false: websocket); upgrade_any: every protocol but the
     * HTTP versions, which nginx's "proxy_set_header Upgrade
     * $http_upgrade" says (written at upgrade_any_pos). */
    char **upgrades;
    size_t upgrade_count;
    bool upgrade_set, upgrade_any;
    bool connection_set; /* proxy_set_header Connection, which goes with it */
    struct conf_pos upgrade_any_pos;
    /* proxy_redirect lines (`redirects_written`: the level has some, or
     * off; else it holds its parent's, which it does not own).  Off:
     * none apply; none at all: `default`. */
    struct proxy_redirect_conf *redirects;
    size_t redirect_count;
    bool redirects_written, redirects_off;
    /* Once merged, the level's effective settings. */
    struct proxy_conf proxy;
    /* Where each of proxy's settings is written (file NULL: it is not). */
    struct conf_pos connect_at, read_at, send_at, buffer_at, next_at, tries_at, next_timeout_at,
        splice_at, via_at, intercept_at, buffering_at, grpc_buffering_at, body_buffer_at,
        body_temp_at, body_temp_max_at;
    /* client_body_temp_path as written (owned when body_temp_at is). */
    char *body_temp_path;
    /* The parent's tries and timeout: a location's 0 (no limit) takes
     * them (check()). */
    unsigned parent_tries;
    uint32_t parent_next_timeout_ms;
};

/* The module (proto/modules.c lists it). */
struct http_module;
extern struct http_module proxy_module;

#endif
