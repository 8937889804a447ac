/*
 * vars.c: $variables: the compiler of config values into literal and
 * variable parts, and their evaluation for one exchange.  Maps are in
 * vars_map.c.
 */
#include "proto/http/vars.h"

#include "proto/http/regex.h"
#include "proto/http/site.h"
#include "proto/http/vars_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

_Static_assert(VARS_TLS_CLIENT_V_REMAIN - VARS_TLS_CLIENT_VERIFY == TLS_PEER_DAYS_LEFT &&
                   TLS_PEER_DAYS_LEFT + 1 == TLS_PEER_FACTS,
               "the client certificate variables follow enum tls_peer_fact");

/* The variables with a fixed name, and whether they are known only once
 * the response is under way. */
static const struct {
    const char *name;
    enum vars_id id;
    bool late;
} names[] = {
    {"remote_addr", VARS_REMOTE_ADDR, false},
    {"binary_remote_addr", VARS_BINARY_REMOTE_ADDR, false},
    {"realip_remote_addr", VARS_REALIP_REMOTE_ADDR, false},
    {"remote_port", VARS_REMOTE_PORT, false},
    {"server_addr", VARS_SERVER_ADDR, false},
    {"server_port", VARS_SERVER_PORT, false},
    {"host", VARS_HOST, false},
    {"request_uri", VARS_REQUEST_URI, false},
    {"uri", VARS_URI, false},
    {"document_uri", VARS_URI, false},
    {"args", VARS_ARGS, false},
    {"query_string", VARS_ARGS, false},
    {"is_args", VARS_IS_ARGS, false},
    {"scheme", VARS_SCHEME, false},
    {"https", VARS_HTTPS, false},
    {"request_method", VARS_REQUEST_METHOD, false},
    {"request", VARS_REQUEST, false},
    {"server_protocol", VARS_SERVER_PROTOCOL, false},
    {"content_length", VARS_CONTENT_LENGTH, false},
    {"content_type", VARS_CONTENT_TYPE, false},
    {"request_id", VARS_REQUEST_ID, false},
    {"time_local", VARS_TIME_LOCAL, false},
    {"time_iso8601", VARS_TIME_ISO8601, false},
    {"msec", VARS_MSEC, false},
    {"status", VARS_STATUS, true},
    {"body_bytes_sent", VARS_BODY_BYTES_SENT, true},
    {"bytes_sent", VARS_BODY_BYTES_SENT, true},
    {"request_time", VARS_REQUEST_TIME, true},
    {"upstream_addr", VARS_UPSTREAM_ADDR, true},
    {"upstream_status", VARS_UPSTREAM_STATUS, true},
    {"upstream_response_time", VARS_UPSTREAM_RESPONSE_TIME, true},
    {"upstream_connect_time", VARS_UPSTREAM_CONNECT_TIME, true},
    {"upstream_header_time", VARS_UPSTREAM_HEADER_TIME, true},
    {"ssl_protocol", VARS_SSL_PROTOCOL, false},
    {"ssl_server_name", VARS_SSL_SERVER_NAME, false},
    {"ssl_cipher", VARS_SSL_CIPHER, false},
    {"tls_client_verify", VARS_TLS_CLIENT_VERIFY, false},
    {"ssl_client_verify", VARS_TLS_CLIENT_VERIFY, false},
    {"tls_client_s_dn", VARS_TLS_CLIENT_S_DN, false},
    {"ssl_client_s_dn", VARS_TLS_CLIENT_S_DN, false},
    {"tls_client_i_dn", VARS_TLS_CLIENT_I_DN, false},
    {"ssl_client_i_dn", VARS_TLS_CLIENT_I_DN, false},
    {"tls_client_serial", VARS_TLS_CLIENT_SERIAL, false},
    {"ssl_client_serial", VARS_TLS_CLIENT_SERIAL, false},
    {"tls_client_fingerprint", VARS_TLS_CLIENT_FINGERPRINT, false},
    {"ssl_client_fingerprint", VARS_TLS_CLIENT_FINGERPRINT, false},
    {"tls_client_escaped_cert", VARS_TLS_CLIENT_ESCAPED_CERT, false},
    {"ssl_client_escaped_cert", VARS_TLS_CLIENT_ESCAPED_CERT, false},
    {"tls_client_v_start", VARS_TLS_CLIENT_V_START, false},
    {"ssl_client_v_start", VARS_TLS_CLIENT_V_START, false},
    {"tls_client_v_end", VARS_TLS_CLIENT_V_END, false},
    {"ssl_client_v_end", VARS_TLS_CLIENT_V_END, false},
    {"tls_client_v_remain", VARS_TLS_CLIENT_V_REMAIN, false},
    {"ssl_client_v_remain", VARS_TLS_CLIENT_V_REMAIN, false},
    {"connection_requests", VARS_CONNECTION_REQUESTS, false},
    {"pipe", VARS_PIPE, false},
    {"proxy_protocol_addr", VARS_PROXY_PROTOCOL_ADDR, false},
    {"proxy_protocol_port", VARS_PROXY_PROTOCOL_PORT, false},
    {"bytes_received", VARS_BYTES_RECEIVED, true},
    {"session_time", VARS_SESSION_TIME, true},
    {"upstream_bytes_sent", VARS_UPSTREAM_BYTES_SENT, true},
    {"upstream_bytes_received", VARS_UPSTREAM_BYTES_RECEIVED, true},
    {"tls_preread_server_name", VARS_PREREAD_SERVER_NAME, false},
    {"ssl_preread_server_name", VARS_PREREAD_SERVER_NAME, false},
    {"tls_preread_alpn_protocols", VARS_PREREAD_ALPN, false},
    {"ssl_preread_alpn_protocols", VARS_PREREAD_ALPN, false},
};

/* Variables named by a prefix and what follows it. */
static const struct {
    const char *prefix;
    enum vars_id id;
} prefixes[] = {
    {"http_", VARS_HTTP},
    {"cookie_", VARS_COOKIE},
    {"arg_", VARS_ARG},
};

/* The modules' variables (vars_module_add()). */
static const struct vars_module_var *module_lists[VARS_MODULE_LISTS_MAX];
static size_t module_list_count;

int vars_module_add(const struct vars_module_var *list)
{
    for (size_t i = 0; i < module_list_count; i++)
        if (module_lists[i] == list)
            return 0;
    if (module_list_count == VARS_MODULE_LISTS_MAX)
        return -ENOSPC;
    module_lists[module_list_count++] = list;
    return 0;
}

/* A module's variable named `name` (`len` bytes, lowercased), or NULL;
 * *skip: how much of the name its prefix takes. */
static const struct vars_module_var *module_var(const char *name, size_t len, size_t *skip)
{
    for (size_t l = 0; l < module_list_count; l++)
        for (const struct vars_module_var *v = module_lists[l]; v->name != NULL; v++) {
            size_t n = strlen(v->name);
            if (v->prefix ? len > n && memcmp(name, v->name, n) == 0
                          : len == n && memcmp(name, v->name, n) == 0) {
                *skip = n;
                return v;
            }
        }
    return NULL;
}

/* ---------------------------------------------------------------- compiler */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* "what \"NAME\"": the message of a bad $name. */
static int fail(struct vars_error *error, size_t offset, const char *what, const char *name,
                size_t len)
{
    error->offset = offset;
    snprintf(error->message, sizeof(error->message), "%s \"%.*s\"", what, (int)len, name);
    return -EINVAL;
}

/* Resolves the name at `name` (`len` bytes, lowercased) into `part`. */
static int resolve(const char *name, size_t len, const struct vars_maps *maps,
                   struct vars_part *part)
{
    if (len == 1 && name[0] >= '1' && name[0] <= '9' && maps != NULL && maps->captures == NULL &&
        maps->host_regex_count > 0) {
        part->id = VARS_HOST_CAPTURE;
        part->index = (unsigned)(name[0] - '0');
        return 0;
    }
    if (len == 1 && name[0] >= '1' && name[0] <= '9') {
        part->id = VARS_CAPTURE;
        part->index = (unsigned)(name[0] - '0');
        return 0;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) {
            part->id = names[i].id;
            part->late = names[i].late;
            return 0;
        }
    size_t skip = 0;
    const struct vars_module_var *module = module_var(name, len, &skip);
    if (module != NULL) {
        part->id = VARS_MODULE;
        part->module = module;
        part->text = name + skip; /* the caller keeps the text */
        part->len = len - skip;
        return 0;
    }
    for (size_t i = 0; maps != NULL && i < maps->count; i++) {
        const char *map_name = vars_map_name(maps->maps[i]);
        if (strlen(map_name) == len && strncasecmp(map_name, name, len) == 0) {
            part->id = VARS_MAP;
            part->map = maps->maps[i];
            part->late = vars_map_is_late(maps->maps[i]);
            return 0;
        }
    }
    for (size_t i = 0; maps != NULL && i < maps->user_count; i++) {
        const char *user = maps->user_names[i];
        if (strlen(user) == len && strncasecmp(user, name, len) == 0) {
            part->id = VARS_USER;
            part->index = (unsigned)i;
            part->slot = maps->user_slot;
            return 0;
        }
    }
    int group =
        maps != NULL && maps->captures != NULL ? regex_group(maps->captures, name, len) : -1;
    if (group > 0 && group < HTTP_REGEX_PAIRS) {
        part->id = VARS_CAPTURE;
        part->index = (unsigned)group;
        return 0;
    }
    for (size_t i = 0; maps != NULL && i < maps->host_regex_count; i++)
        if (regex_group(maps->host_regexes[i], name, len) > 0) {
            part->id = VARS_HOST_CAPTURE;
            part->text = name; /* the caller keeps the text */
            part->len = len;
            return 0;
        }
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i].prefix);
        if (len > n && memcmp(name, prefixes[i].prefix, n) == 0) {
            part->id = prefixes[i].id;
            part->text = name + n; /* the caller keeps the text */
            part->len = len - n;
            return 0;
        }
    }
    return -1;
}

/* Whether a variable reads the request's head, which is gone once the
 * handler returns from on_request. */
static bool reads_request(enum vars_id id)
{
    switch (id) {
    case VARS_HOST:
    case VARS_REQUEST_URI:
    case VARS_URI:
    case VARS_ARGS:
    case VARS_IS_ARGS:
    case VARS_REQUEST_METHOD:
    case VARS_REQUEST:
    case VARS_CONTENT_LENGTH:
    case VARS_CONTENT_TYPE:
    case VARS_HTTP:
    case VARS_COOKIE:
    case VARS_ARG:
    case VARS_CAPTURE:
    case VARS_HOST_CAPTURE:
    case VARS_MAP: return true;
    default: return false;
    }
}

int vars_compile(const char *text, const struct vars_maps *maps, struct vars_template **out,
                 struct vars_error *error)
{
    size_t text_len = strlen(text), dollars = 0;
    for (const char *p = text; (p = strchr(p, '$')) != NULL; p++)
        dollars++;
    /* Each variable, and a literal before each and after the last. */
    size_t max_parts = 2 * dollars + 1;
    struct vars_template *t =
        calloc(1, sizeof(*t) + max_parts * sizeof(struct vars_part) + text_len + 1);
    if (t == NULL)
        return -ENOMEM;
    char *copy = (char *)&t->parts[max_parts];
    memcpy(copy, text, text_len + 1);
    t->text = copy;
    t->text_len = text_len;
    size_t i = 0;
    while (i < text_len) {
        assert(t->count < max_parts);
        struct vars_part *part = &t->parts[t->count++];
        if (copy[i] != '$') {
            const char *dollar = memchr(copy + i, '$', text_len - i);
            size_t n = dollar != NULL ? (size_t)(dollar - (copy + i)) : text_len - i;
            *part = (struct vars_part){.id = VARS_LITERAL, .text = copy + i, .len = n};
            i += n;
            continue;
        }
        size_t start = i, name = i + 1;
        bool braced = copy[name] == '{';
        if (braced)
            name++;
        size_t end = name;
        /* As in nginx, a capture's name is one digit: "$10" is $1, "0". */
        if (copy[name] >= '1' && copy[name] <= '9' && !braced)
            end = name + 1;
        else
            while (end < text_len && name_char(copy[end]))
                end++;
        if (end == name || (braced && copy[end] != '}')) {
            int err = fail(error, start, "invalid variable name", copy + start,
                           end - start + (end < text_len && !braced ? 1 : 0));
            free(t);
            return err;
        }
        for (size_t k = name; k < end; k++)
            if (copy[k] >= 'A' && copy[k] <= 'Z')
                copy[k] = (char)(copy[k] - 'A' + 'a');
        *part = (struct vars_part){0};
        if (resolve(copy + name, end - name, maps, part) != 0) {
            int err = fail(error, start, "unknown variable", copy + start, end - start);
            free(t);
            return err;
        }
        t->late |= part->late;
        t->request |=
            reads_request(part->id) || (part->id == VARS_MODULE && part->module->make != NULL);
        t->has_vars = true;
        i = end + (braced ? 1 : 0);
    }
    *out = t;
    return 0;
}

void vars_template_free(struct vars_template *t)
{
    free(t);
}

bool vars_template_is_literal(const struct vars_template *t)
{
    return !t->has_vars;
}

bool vars_template_uses_captures(const struct vars_template *t)
{
    for (size_t i = 0; i < t->count; i++)
        if (t->parts[i].id == VARS_CAPTURE)
            return true;
    return false;
}

bool vars_set_captures(struct vars_ctx *ctx, const struct http_regex *re, size_t *ovector)
{
    if (ctx->req == NULL || ctx->req->path.data == NULL)
        return true;
    ctx->subject = ctx->req->path.data;
    ctx->ovector = ovector;
    int pairs = regex_match(re, ctx->req->path.data, ctx->req->path.len, ovector);
    ctx->capture_count = pairs > 0 ? (size_t)pairs : 0;
    return pairs != HTTP_REGEX_GAVE_UP;
}

bool vars_name_is_builtin(const char *name, size_t len)
{
    struct vars_part part;
    char lower[64];
    if (len == 0 || len > sizeof(lower))
        return false;
    for (size_t i = 0; i < len; i++)
        lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    return resolve(lower, len, NULL, &part) == 0;
}

int vars_template_user_index(const struct vars_template *t)
{
    return t->count == 1 && t->parts[0].id == VARS_USER ? (int)t->parts[0].index : -1;
}

bool vars_template_assign(struct exchange *ex, const struct vars_template *target, const char *data,
                          size_t len, unsigned *slot)
{
    if (vars_template_user_index(target) < 0)
        return false;
    *slot = target->parts[0].slot;
    return vars_user_set(ex, target->parts[0].slot, target->parts[0].index, data, len);
}

bool vars_template_reads_request(const struct vars_template *t)
{
    return t->request;
}

bool vars_template_is_late(const struct vars_template *t)
{
    return t->late;
}

/* A value from the request or the peer, escaped as the context asks
 * (vars_escape.c). */
static void put_value(struct vars_ctx *ctx, struct vars_buf *out, const char *data, size_t len)
{
    vars_escape_put_value(ctx, out, data, len);
}

/* A module's value made from the request (vars_module_var.make), in a
 * buffer on this call's stack, not on that of every evaluation. */
static __attribute__((noinline)) void put_made(struct vars_ctx *ctx, struct vars_buf *out,
                                               const struct vars_module_var *v)
{
    char buf[PATH_MAX];
    size_t n =
        ctx->ex != NULL && ctx->req != NULL ? v->make(ctx->ex, ctx->req, buf, sizeof(buf)) : 0;
    put_value(ctx, out, buf, n <= sizeof(buf) ? n : 0);
}

static void put_str(struct vars_ctx *ctx, struct vars_buf *out, struct http_str s)
{
    put_value(ctx, out, s.data != NULL ? s.data : "", s.data != NULL ? s.len : 0);
}

static void put_uint(struct vars_ctx *ctx, struct vars_buf *out, uint64_t n)
{
    char text[24];
    int len = snprintf(text, sizeof(text), "%llu", (unsigned long long)n);
    if (len > 0 && (size_t)len < sizeof(text)) /* 20 digits at most */
        put_value(ctx, out, text, (size_t)len);
}

static void put_seconds(struct vars_ctx *ctx, struct vars_buf *out, uint64_t ns)
{
    char text[40];
    int len = snprintf(text, sizeof(text), "%llu.%03llu", (unsigned long long)(ns / 1000000000u),
                       (unsigned long long)(ns / 1000000u % 1000u));
    if (len > 0 && (size_t)len < sizeof(text)) /* 24 characters at most */
        put_value(ctx, out, text, (size_t)len);
}

/* One field of one server asked ("-" when unknown): $upstream_*. */
static void put_upstream_field(struct vars_buf *out, const struct exchange_upstream_try *t,
                               enum vars_id id)
{
    if (id == VARS_UPSTREAM_ADDR) {
        vars_buf_add(out, t->addr, strlen(t->addr));
        return;
    }
    uint32_t ms = id == VARS_UPSTREAM_CONNECT_TIME  ? t->connect_ms
                  : id == VARS_UPSTREAM_HEADER_TIME ? t->header_ms
                                                    : t->response_ms;
    char text[24];
    int len;
    if (id == VARS_UPSTREAM_STATUS && t->status != 0)
        len = snprintf(text, sizeof(text), "%u", (unsigned)t->status);
    else if (id != VARS_UPSTREAM_STATUS && ms != EXCHANGE_UPSTREAM_UNKNOWN)
        len = snprintf(text, sizeof(text), "%u.%03u", ms / 1000u, ms % 1000u);
    else
        len = snprintf(text, sizeof(text), "-");
    if (len > 0 && (size_t)len < sizeof(text)) /* 14 characters at most */
        vars_buf_add(out, text, (size_t)len);
}

/* $upstream_addr, $upstream_status and the $upstream_*_time variables:
 * one value per server asked, joined as nginx joins them (", " within one
 * upstream pass, " : " before the pass an error_page started); empty when
 * no server was asked.  The values are corral's own (addresses from the
 * config, numbers): they need no escaping. */
static void put_upstream(struct vars_ctx *ctx, struct vars_buf *out, enum vars_id id)
{
    const struct exchange *ex = ctx->ex;
    if (ctx->stream != NULL && id == VARS_UPSTREAM_ADDR && ctx->stream->upstream_addr != NULL) {
        put_value(ctx, out, ctx->stream->upstream_addr, strlen(ctx->stream->upstream_addr));
        return;
    }
    if (ex == NULL || ex->upstream_try_count == 0) {
        put_value(ctx, out, "", 0);
        return;
    }
    for (unsigned i = 0; i < ex->upstream_try_count; i++) {
        const struct exchange_upstream_try *t = &ex->upstream_tries[i];
        if (i > 0)
            vars_buf_add(out, t->new_pass ? " : " : ", ", t->new_pass ? 3 : 2);
        put_upstream_field(out, t, id);
    }
}

/* ------------------------------------------------------- request variables */

/* The value of header `name` (variable spelling: '_' for '-'); several
 * headers of that name are joined with ", " as nginx does. */
bool vars_field_name_is(struct http_str field, const char *name, size_t len)
{
    if (field.len != len)
        return false;
    for (size_t k = 0; k < len; k++) {
        char a = field.data[k] == '-' ? '_' : field.data[k];
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (a != name[k])
            return false;
    }
    return true;
}

static void put_header(struct vars_ctx *ctx, struct vars_buf *out, const char *name, size_t len)
{
    const struct http_request *req = ctx->req;
    bool found = false;
    for (size_t i = 0; req != NULL && i < req->header_count; i++) {
        if (!vars_field_name_is(req->headers[i].name, name, len))
            continue;
        struct http_str v = http_trim(req->headers[i].value);
        if (v.len == 0)
            continue;
        if (found)
            vars_buf_add(out, ", ", 2);
        put_value(ctx, out, v.data, v.len);
        found = true;
    }
    if (!found)
        put_value(ctx, out, "", 0);
}

/* The value of cookie `name` in the request's Cookie headers. */
static void put_cookie(struct vars_ctx *ctx, struct vars_buf *out, const char *name, size_t len)
{
    const struct http_request *req = ctx->req;
    for (size_t i = 0; req != NULL && i < req->header_count; i++) {
        if (!http_str_equal_nocase(req->headers[i].name, "cookie"))
            continue;
        const char *p = req->headers[i].value.data, *end = p + req->headers[i].value.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == '\t' || *p == ';'))
                p++;
            const char *pair_end = memchr(p, ';', (size_t)(end - p));
            if (pair_end == NULL)
                pair_end = end;
            const char *eq = memchr(p, '=', (size_t)(pair_end - p));
            if (eq != NULL && (size_t)(eq - p) == len && strncasecmp(p, name, len) == 0) {
                put_str(ctx, out,
                        http_trim((struct http_str){eq + 1, (size_t)(pair_end - eq - 1)}));
                return;
            }
            p = pair_end;
        }
    }
    put_value(ctx, out, "", 0);
}

static struct http_str request_args(const struct http_request *req)
{
    if (req == NULL || req->target.data == NULL)
        return (struct http_str){"", 0};
    const char *q = memchr(req->target.data, '?', req->target.len);
    if (q == NULL)
        return (struct http_str){"", 0};
    return (struct http_str){q + 1, req->target.len - (size_t)(q + 1 - req->target.data)};
}

/* The value of query argument `name` (names case-insensitive, as nginx). */
static void put_arg(struct vars_ctx *ctx, struct vars_buf *out, const char *name, size_t len)
{
    struct http_str args = request_args(ctx->req);
    const char *p = args.data, *end = args.data + args.len;
    while (p < end) {
        const char *pair_end = memchr(p, '&', (size_t)(end - p));
        if (pair_end == NULL)
            pair_end = end;
        const char *eq = memchr(p, '=', (size_t)(pair_end - p));
        const char *name_end = eq != NULL ? eq : pair_end;
        if ((size_t)(name_end - p) == len && strncasecmp(p, name, len) == 0) {
            const char *value = eq != NULL ? eq + 1 : pair_end;
            put_value(ctx, out, value, (size_t)(pair_end - value));
            return;
        }
        p = pair_end + (pair_end < end);
    }
    put_value(ctx, out, "", 0);
}

/* The first server_name of the server the request went to, as nginx's
 * $host reads without a Host (HTTP/1.0); "" when it has none. */
static struct http_str server_name(const struct exchange *ex)
{
    const struct http_vhost *vhost = ex != NULL ? ex->vhost : NULL;
    /* its first name that is a name, not a regex */
    for (size_t i = 0; vhost != NULL && i < vhost->name_count; i++)
        if (vhost->names[i][0] != '~')
            return (struct http_str){vhost->names[i], strlen(vhost->names[i])};
    return (struct http_str){"", 0};
}

/* ---------------------------------------------------- connection variables */

static void remote_addr(struct vars_ctx *ctx, char *buf, size_t len)
{
    if (ctx->remote_addr != NULL)
        snprintf(buf, len, "%s", ctx->remote_addr);
    else if (ctx->ex != NULL)
        exchange_client_host(ctx->ex, buf, len);
    else
        buf[0] = '\0';
}

/* The connection's peer or local address; false when unknown. */
static bool conn_address(struct vars_ctx *ctx, bool local, struct sockaddr_storage *addr)
{
    if (ctx->stream != NULL) {
        const struct sockaddr *sa = local ? ctx->stream->local : ctx->stream->peer;
        if (sa == NULL)
            return false;
        memcpy(addr, sa,
               sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                         : sizeof(struct sockaddr_in));
        return sa->sa_family == AF_INET || sa->sa_family == AF_INET6;
    }
    const struct http_conn *c = ctx->ex != NULL ? ctx->ex->conn : NULL;
    socklen_t len;
    if (c == NULL)
        return false;
    return local ? http_conn_local(c, addr, &len) : http_conn_peer(c, addr, &len);
}

static void put_address(struct vars_ctx *ctx, struct vars_buf *out, bool local, bool port)
{
    struct sockaddr_storage addr = {.ss_family = AF_UNSPEC};
    char text[INET6_ADDRSTRLEN + 8] = "";
    if (conn_address(ctx, local, &addr)) {
        if (addr.ss_family == AF_INET && port)
            snprintf(text, sizeof(text), "%u", ntohs(((struct sockaddr_in *)&addr)->sin_port));
        else if (addr.ss_family == AF_INET6 && port)
            snprintf(text, sizeof(text), "%u", ntohs(((struct sockaddr_in6 *)&addr)->sin6_port));
        else if (addr.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&addr)->sin_addr, text, sizeof(text));
        else if (addr.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, text, sizeof(text));
    }
    put_value(ctx, out, text, strlen(text));
}

/* A per-thread generator, seeded from the kernel once: $request_id wants
 * 128 unpredictable bits per request, not a system call per request. */
void vars_random_128(uint64_t out[2])
{
    static _Thread_local uint64_t state[4];
    static _Thread_local bool seeded;
    if (!seeded) {
        while (getrandom(state, sizeof(state), 0) != (ssize_t)sizeof(state))
            ;
        seeded = true;
    }
    for (int k = 0; k < 2; k++) { /* xoshiro256** */
        uint64_t s1 = state[1] * 5;
        out[k] = ((s1 << 7) | (s1 >> 57)) * 9;
        uint64_t t = state[1] << 17;
        state[2] ^= state[0];
        state[3] ^= state[1];
        state[1] ^= state[2];
        state[0] ^= state[3];
        state[2] ^= t;
        state[3] = (state[3] << 45) | (state[3] >> 19);
    }
}

void vars_request_id(struct exchange *ex, char out[33])
{
    if (ex->request_id[0] == 0 && ex->request_id[1] == 0)
        while (ex->request_id[0] == 0 && ex->request_id[1] == 0)
            vars_random_128(ex->request_id);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)ex->request_id[0],
             (unsigned long long)ex->request_id[1]);
}

static void put_time(struct vars_ctx *ctx, struct vars_buf *out, bool iso8601)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char text[64]; /* fixed-width fields; strftime() returns 0 if not */
    size_t n = iso8601 ? strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S%z", &tm)
                       : strftime(text, sizeof(text), "%d/%b/%Y:%H:%M:%S %z", &tm);
    assert(n < sizeof(text));
    put_value(ctx, out, text, n);
}

/* ---------------------------------------------------------------- evaluate */

static void put_capture(struct vars_ctx *ctx, struct vars_buf *out, unsigned index)
{
    if (ctx->ovector == NULL || index >= ctx->capture_count ||
        ctx->ovector[2 * index] > ctx->ovector[2 * index + 1]) {
        put_value(ctx, out, "", 0);
        return;
    }
    size_t start = ctx->ovector[2 * index], end = ctx->ovector[2 * index + 1];
    put_value(ctx, out, ctx->subject + start, end - start);
}

/* A group of the server name regex that matches the request's host,
 * matched again: only the values that read one pay for it. */
static void put_host_capture(struct vars_ctx *ctx, struct vars_buf *out,
                             const struct vars_part *part)
{
    const struct http_vhost *vhost = ctx->ex != NULL ? ctx->ex->vhost : NULL;
    struct http_str host = ctx->req != NULL ? ctx->req->host : (struct http_str){"", 0};
    char buf[SITE_HOST_MAX];
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    int pairs = 0;
    int i = vhost != NULL && host.data != NULL
                ? site_name_regex_match(vhost, host.data, host.len, buf, ovector, &pairs)
                : -1;
    int group = i < 0                ? -1
                : part->text != NULL ? regex_group(vhost->name_regexes[i], part->text, part->len)
                                     : (int)part->index;
    if (group <= 0 || group >= pairs || ovector[2 * group] > ovector[2 * group + 1]) {
        put_value(ctx, out, "", 0);
        return;
    }
    put_value(ctx, out, buf + ovector[2 * group], ovector[2 * group + 1] - ovector[2 * group]);
}

static void eval_part(const struct vars_part *part, struct vars_ctx *ctx, struct vars_buf *out)
{
    const struct http_request *req = ctx->req;
    switch (part->id) {
    case VARS_LITERAL: vars_buf_add(out, part->text, part->len); break;
    case VARS_REMOTE_ADDR: {
        char text[INET6_ADDRSTRLEN + 8];
        remote_addr(ctx, text, sizeof(text));
        put_value(ctx, out, text, strlen(text));
        break;
    }
    case VARS_REALIP_REMOTE_ADDR: {
        /* The peer before set_real_ip_from replaced it (its PROXY header's
         * source, if it sent one). */
        char text[INET6_ADDRSTRLEN + 8] = "";
        if (ctx->ex != NULL)
            exchange_connection_host(ctx->ex, text, sizeof(text));
        else
            remote_addr(ctx, text, sizeof(text));
        put_value(ctx, out, text, strlen(text));
        break;
    }
    case VARS_BINARY_REMOTE_ADDR: {
        char text[INET6_ADDRSTRLEN + 8];
        unsigned char bin[16];
        remote_addr(ctx, text, sizeof(text));
        if (inet_pton(AF_INET, text, bin) == 1)
            put_value(ctx, out, (const char *)bin, 4);
        else if (inet_pton(AF_INET6, text, bin) == 1)
            put_value(ctx, out, (const char *)bin, 16);
        else
            put_value(ctx, out, "", 0);
        break;
    }
    case VARS_REMOTE_PORT: put_address(ctx, out, false, true); break;
    case VARS_CONNECTION_REQUESTS:
    case VARS_PIPE:
    case VARS_PROXY_PROTOCOL_ADDR:
    case VARS_PROXY_PROTOCOL_PORT: {
        struct exchange_conn_facts facts = {0};
        if (ctx->ex != NULL)
            exchange_conn_facts(ctx->ex, &facts);
        if (part->id == VARS_CONNECTION_REQUESTS)
            put_uint(ctx, out, facts.requests);
        else if (part->id == VARS_PIPE)
            put_value(ctx, out, facts.pipelined ? "p" : ".", 1);
        else if (facts.proxy_protocol) /* the peer is the header's source */
            put_address(ctx, out, false, part->id == VARS_PROXY_PROTOCOL_PORT);
        else
            put_value(ctx, out, "", 0);
        break;
    }
    case VARS_SERVER_ADDR: put_address(ctx, out, true, false); break;
    case VARS_SERVER_PORT: put_address(ctx, out, true, true); break;
    case VARS_HOST: {
        /* nginx's $host is lowercase */
        struct http_str host = req != NULL ? req->host : (struct http_str){"", 0};
        if (host.len == 0)
            host = server_name(ctx->ex);
        char small[256];
        if (host.len <= sizeof(small)) {
            for (size_t i = 0; i < host.len; i++)
                small[i] =
                    (char)(host.data[i] >= 'A' && host.data[i] <= 'Z' ? host.data[i] - 'A' + 'a'
                                                                      : host.data[i]);
            host.data = small;
        }
        put_str(ctx, out, host);
        break;
    }
    case VARS_REQUEST_URI:
        put_str(ctx, out, req != NULL ? req->target : (struct http_str){0});
        break;
    case VARS_URI: put_str(ctx, out, req != NULL ? req->path : (struct http_str){0}); break;
    case VARS_ARGS: put_str(ctx, out, request_args(req)); break;
    case VARS_IS_ARGS: {
        bool has = req != NULL && req->target.data != NULL &&
                   memchr(req->target.data, '?', req->target.len) != NULL;
        put_value(ctx, out, "?", has ? 1 : 0);
        break;
    }
    case VARS_SCHEME: {
        bool tls = ctx->ex != NULL && exchange_tls(ctx->ex);
        put_value(ctx, out, tls ? "https" : "http", tls ? 5 : 4);
        break;
    }
    case VARS_HTTPS: {
        bool tls = ctx->ex != NULL && exchange_tls(ctx->ex);
        put_value(ctx, out, "on", tls ? 2 : 0);
        break;
    }
    case VARS_REQUEST_METHOD:
        put_str(ctx, out, req != NULL ? req->method : (struct http_str){0});
        break;
    case VARS_REQUEST:
        if (req == NULL || req->method.data == NULL) {
            put_value(ctx, out, "", 0);
            break;
        }
        put_str(ctx, out, req->method);
        vars_buf_add(out, " ", 1);
        put_str(ctx, out, req->target);
        vars_buf_add(out, " ", 1);
        put_value(ctx, out, ctx->protocol != NULL ? ctx->protocol : "",
                  ctx->protocol != NULL ? strlen(ctx->protocol) : 0);
        break;
    case VARS_SERVER_PROTOCOL:
        put_value(ctx, out, ctx->protocol != NULL ? ctx->protocol : "",
                  ctx->protocol != NULL ? strlen(ctx->protocol) : 0);
        break;
    case VARS_CONTENT_LENGTH: put_header(ctx, out, "content_length", 14); break;
    case VARS_CONTENT_TYPE: put_header(ctx, out, "content_type", 12); break;
    case VARS_REQUEST_ID: {
        char id[33];
        if (ctx->ex == NULL) {
            put_value(ctx, out, "", 0);
            break;
        }
        vars_request_id(ctx->ex, id);
        put_value(ctx, out, id, 32);
        break;
    }
    case VARS_TIME_LOCAL: put_time(ctx, out, false); break;
    case VARS_TIME_ISO8601: put_time(ctx, out, true); break;
    case VARS_MSEC: {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        put_seconds(ctx, out, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
        break;
    }
    case VARS_STATUS:
        if (ctx->status == 0)
            put_value(ctx, out, "", 0);
        else
            put_uint(ctx, out, ctx->status);
        break;
    case VARS_BODY_BYTES_SENT: put_uint(ctx, out, ctx->bytes_sent); break;
    case VARS_REQUEST_TIME: put_seconds(ctx, out, ctx->request_ns); break;
    case VARS_UPSTREAM_ADDR:
    case VARS_UPSTREAM_STATUS:
    case VARS_UPSTREAM_RESPONSE_TIME:
    case VARS_UPSTREAM_CONNECT_TIME:
    case VARS_UPSTREAM_HEADER_TIME: put_upstream(ctx, out, part->id); break;
    case VARS_SSL_PROTOCOL:
    case VARS_SSL_CIPHER:
    case VARS_SSL_SERVER_NAME: {
        const struct http_conn *c = ctx->ex != NULL ? ctx->ex->conn : NULL;
        const struct vars_stream *st = ctx->stream;
        const char *text = st != NULL  ? part->id == VARS_SSL_PROTOCOL ? st->tls_protocol
                                         : part->id == VARS_SSL_CIPHER ? st->tls_cipher
                                                                       : st->tls_server_name
                           : c == NULL ? NULL
                           : part->id == VARS_SSL_PROTOCOL ? http_conn_tls_protocol(c)
                           : part->id == VARS_SSL_CIPHER   ? http_conn_tls_cipher(c)
                                                           : http_conn_server_name(c);
        put_value(ctx, out, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
        break;
    }
    case VARS_TLS_CLIENT_VERIFY:
    case VARS_TLS_CLIENT_S_DN:
    case VARS_TLS_CLIENT_I_DN:
    case VARS_TLS_CLIENT_SERIAL:
    case VARS_TLS_CLIENT_FINGERPRINT:
    case VARS_TLS_CLIENT_ESCAPED_CERT:
    case VARS_TLS_CLIENT_V_START:
    case VARS_TLS_CLIENT_V_END:
    case VARS_TLS_CLIENT_V_REMAIN: {
        const struct http_conn *c = ctx->ex != NULL ? ctx->ex->conn : NULL;
        char *text =
            c != NULL
                ? http_conn_tls_peer(c, (enum tls_peer_fact)(part->id - VARS_TLS_CLIENT_VERIFY))
                : NULL;
        put_value(ctx, out, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
        free(text);
        break;
    }
    case VARS_BYTES_RECEIVED:
    case VARS_UPSTREAM_BYTES_SENT:
    case VARS_UPSTREAM_BYTES_RECEIVED: {
        const struct vars_stream *st = ctx->stream;
        if (st == NULL)
            put_value(ctx, out, "", 0);
        else
            put_uint(ctx, out,
                     part->id == VARS_BYTES_RECEIVED        ? st->bytes_received
                     : part->id == VARS_UPSTREAM_BYTES_SENT ? st->upstream_bytes_sent
                                                            : st->upstream_bytes_received);
        break;
    }
    case VARS_SESSION_TIME:
        if (ctx->stream == NULL)
            put_value(ctx, out, "", 0);
        else
            put_seconds(ctx, out, ctx->stream->session_ns);
        break;
    case VARS_PREREAD_SERVER_NAME:
    case VARS_PREREAD_ALPN: {
        const struct vars_stream *st = ctx->stream;
        const char *text = st == NULL                             ? NULL
                           : part->id == VARS_PREREAD_SERVER_NAME ? st->server_name
                                                                  : st->alpn;
        put_value(ctx, out, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
        break;
    }
    case VARS_HTTP: put_header(ctx, out, part->text, part->len); break;
    case VARS_COOKIE: put_cookie(ctx, out, part->text, part->len); break;
    case VARS_ARG: put_arg(ctx, out, part->text, part->len); break;
    case VARS_CAPTURE: put_capture(ctx, out, part->index); break;
    case VARS_HOST_CAPTURE: put_host_capture(ctx, out, part); break;
    case VARS_MAP: vars_map_eval(part->map, ctx, out); break;
    case VARS_USER: {
        struct http_str value = {"", 0};
        if (ctx->ex != NULL)
            vars_user_get(ctx->ex, part->slot, part->index, &value);
        put_value(ctx, out, value.data, value.len);
        break;
    }
    case VARS_MODULE: {
        if (part->module->make != NULL) {
            put_made(ctx, out, part->module);
            break;
        }
        struct http_str value = {"", 0};
        if (ctx->ex == NULL || !part->module->get(ctx->ex, part->text, part->len, &value))
            value = (struct http_str){"", 0};
        put_value(ctx, out, value.data, value.len);
        break;
    }
    }
}

void vars_eval(const struct vars_template *t, struct vars_ctx *ctx, struct vars_buf *out)
{
    for (size_t i = 0; i < t->count; i++)
        eval_part(&t->parts[i], ctx, out);
}

size_t vars_eval_into(const struct vars_template *t, struct vars_ctx *ctx, char *buf, size_t cap)
{
    struct vars_buf out;
    vars_buf_fixed(&out, buf, cap);
    vars_eval(t, ctx, &out);
    return out.len;
}
