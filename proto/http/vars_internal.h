/*
 * vars_internal.h: what vars.c and vars_map.c share: a compiled template's
 * parts, and the evaluation of a map.
 */
#ifndef CORRAL_PROTO_VARS_INTERNAL_H
#define CORRAL_PROTO_VARS_INTERNAL_H

#include "proto/http/vars.h"

enum vars_id {
    VARS_LITERAL,
    VARS_REMOTE_ADDR,
    VARS_REALIP_REMOTE_ADDR,
    VARS_BINARY_REMOTE_ADDR,
    VARS_REMOTE_PORT,
    VARS_SERVER_ADDR,
    VARS_SERVER_PORT,
    VARS_HOST,
    VARS_REQUEST_URI,
    VARS_URI,
    VARS_ARGS,
    VARS_IS_ARGS,
    VARS_SCHEME,
    VARS_HTTPS,
    VARS_REQUEST_METHOD,
    VARS_REQUEST,
    VARS_SERVER_PROTOCOL,
    VARS_CONTENT_LENGTH,
    VARS_CONTENT_TYPE,
    VARS_REQUEST_ID,
    VARS_TIME_LOCAL,
    VARS_TIME_ISO8601,
    VARS_MSEC,
    VARS_STATUS,
    VARS_BODY_BYTES_SENT,
    VARS_REQUEST_TIME,
    VARS_UPSTREAM_ADDR,
    VARS_UPSTREAM_STATUS,
    VARS_UPSTREAM_RESPONSE_TIME,
    VARS_UPSTREAM_CONNECT_TIME,
    VARS_UPSTREAM_HEADER_TIME,
    VARS_SSL_PROTOCOL,
    VARS_SSL_SERVER_NAME,
    VARS_SSL_CIPHER,
    /* The client certificate's facts, in enum tls_peer_fact's order. */
    VARS_TLS_CLIENT_VERIFY,
    VARS_TLS_CLIENT_S_DN,
    VARS_TLS_CLIENT_I_DN,
    VARS_TLS_CLIENT_SERIAL,
    VARS_TLS_CLIENT_FINGERPRINT,
    VARS_TLS_CLIENT_ESCAPED_CERT,
    VARS_TLS_CLIENT_V_START,
    VARS_TLS_CLIENT_V_END,
    VARS_TLS_CLIENT_V_REMAIN,
    VARS_CONNECTION_REQUESTS,
    VARS_PIPE,
    VARS_PROXY_PROTOCOL_ADDR,
    VARS_PROXY_PROTOCOL_PORT,
    VARS_BYTES_RECEIVED, /* a stream session's (vars_ctx.stream) */
    VARS_SESSION_TIME,
    VARS_UPSTREAM_BYTES_SENT,
    VARS_UPSTREAM_BYTES_RECEIVED,
    VARS_PREREAD_SERVER_NAME,
    VARS_PREREAD_ALPN,
    VARS_HTTP,         /* $http_NAME: `text` is NAME */
    VARS_COOKIE,       /* $cookie_NAME */
    VARS_ARG,          /* $arg_NAME */
    VARS_CAPTURE,      /* $1..$9: `index` */
    VARS_MAP,          /* a map's name: `map` */
    VARS_USER,         /* a variable `set` defines: `index`, its values in `slot` */
    VARS_HOST_CAPTURE, /* a group of a server name regex: `index`, or named by `text` */
    VARS_MODULE,       /* a module's variable: `module`, with `text` what follows a prefix */
};

struct vars_part {
    enum vars_id id;
    bool late;
    const char *text; /* into the template's copy of its text */
    size_t len;
    unsigned index;
    unsigned slot;
    const struct vars_map *map;
    const struct vars_module_var *module;
};

/* The parts follow the struct, then the copy of the text. */
struct vars_template {
    const char *text;
    size_t text_len;
    bool has_vars, late;
    bool request; /* reads the request head (or a map, which may) */
    size_t count;
    struct vars_part parts[];
};

/* Appends `data` (`len` bytes, a value from the request, the peer or the
 * config) to `out`, escaped as ctx->escape says (vars_escape.c). */
void vars_escape_put_value(struct vars_ctx *ctx, struct vars_buf *out, const char *data,
                           size_t len);

/* Appends the value of `map` for `ctx` (vars_map.c). */
bool vars_map_is_late(const struct vars_map *map);
void vars_map_eval(const struct vars_map *map, struct vars_ctx *ctx, struct vars_buf *out);

#endif
