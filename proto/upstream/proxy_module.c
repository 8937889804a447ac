/*
 * proxy_module.c: the proxy_pass module (proxy_module.h): its directives
 * and their checks, how a level inherits them, the checks of a location
 * against the rest of the config (an upstream block's name, TLS settings
 * without https://), and the build step that makes a location's struct
 * proxy_location on the generation's upstream group.  Its content handler
 * is proxy_handler (proxy.c).
 */
#include "proto/upstream/proxy_module.h"

#include "proto/http/http.h"
#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"
#include "proto/upstream/grpc_status.h"
#include "proto/upstream/proxy.h"
#include "proto/upstream/proxy_h2.h"
#include "proto/upstream/proxy_redirect.h"

#include <corral.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool is_token(const char *text)
{
    return http_is_token((struct http_str){text, strlen(text)});
}

/* The length of a proxy_pass or grpc_pass URL's scheme with its "://":
 * 7 for http and grpc, 8 for https and grpcs, 0 for anything else. */
static size_t scheme_length(const char *url)
{
    if (strncmp(url, "http://", 7) == 0 || strncmp(url, "grpc://", 7) == 0)
        return 7;
    if (strncmp(url, "https://", 8) == 0 || strncmp(url, "grpcs://", 8) == 0)
        return 8;
    return 0;
}

static bool url_is_https(const char *url)
{
    return strncmp(url, "https://", 8) == 0 || strncmp(url, "grpcs://", 8) == 0;
}

/* An address (HOST:PORT) is complete once parsed; a name may be an
 * upstream defined later, so it waits for check(). */
static int check_pass_address(const char *host, const struct conf_arg *arg, const char *directive,
                              struct conf_module_error *error)
{
    if (strchr(host, ':') == NULL)
        return 0;
    struct sockaddr_storage addr;
    socklen_t len;
    int err = corral_parse_address(host, &addr, &len);
    if (err == -ENOENT)
        return conf_module_fail(error, &arg->pos, "%s address \"%s\": host not found", directive,
                                host);
    if (err != 0)
        return conf_module_fail(error, &arg->pos,
                                "invalid %s address \"%s\" (expected HOST:PORT, [IPV6]:PORT, "
                                "*:PORT, PORT or unix:/PATH)",
                                directive, host);
    return 0;
}

/* grpc_pass [grpc[s]://]UPSTREAM | [grpc[s]://]HOST:PORT, as nginx's: no
 * path (a gRPC method's path goes on as it is). */
static int apply_grpc_pass(struct proxy_module_conf *c, const struct conf_arg *arg,
                           struct conf_module_error *error)
{
    const char *text = arg->text;
    bool tls = strncmp(text, "grpcs://", 8) == 0;
    size_t scheme = tls ? 8 : strncmp(text, "grpc://", 7) == 0 ? 7 : 0;
    const char *authority = text + scheme;
    if (scheme == 0 && strstr(text, "://") != NULL)
        return conf_module_fail(error, &arg->pos,
                                "invalid grpc_pass \"%s\" (expected grpc[s]://UPSTREAM or "
                                "grpc[s]://HOST:PORT)",
                                text);
    if (*authority == '\0' || strpbrk(authority, "/?#") != NULL)
        return conf_module_fail(error, &arg->pos,
                                "invalid grpc_pass \"%s\" (expected grpc[s]://UPSTREAM or "
                                "grpc[s]://HOST:PORT, without a path)",
                                text);
    size_t len = strlen(authority);
    if ((c->pass = malloc(len + 9)) == NULL)
        return conf_module_fail(error, &arg->pos, "%s", "out of memory");
    memcpy(c->pass, tls ? "grpcs://" : "grpc://", tls ? 8 : 7);
    memcpy(c->pass + (tls ? 8 : 7), authority, len + 1);
    c->pass_pos = arg->pos;
    c->grpc = true;
    return check_pass_address(authority, arg, "grpc_pass", error);
}

/* proxy_http_version 1.1 | 2 (nginx: 1.0 | 1.1) */
static int apply_http_version(void *conf, const struct conf_arg *args, size_t count,
                              struct conf_module_error *error)
{
    (void)count;
    struct proxy_module_conf *c = conf;
    if (strcmp(args[0].text, "1.1") == 0)
        c->http_version = PROXY_HTTP_11;
    else if (strcmp(args[0].text, "2") == 0 || strcmp(args[0].text, "2.0") == 0)
        c->http_version = PROXY_HTTP_2;
    else if (strcmp(args[0].text, "1.0") == 0)
        return conf_module_fail(error, &args[0].pos, "%s",
                                "proxy_http_version 1.0: corral speaks HTTP/1.1 or HTTP/2 to "
                                "backends (give 1.1 or 2)");
    else
        return conf_module_fail(error, &args[0].pos,
                                "invalid proxy_http_version \"%s\" (expected 1.1 or 2)",
                                args[0].text);
    c->version_at = *error->where->pos;
    return 0;
}

/* proxy_pass http[s]://UPSTREAM | http[s]://HOST:PORT, with a path or not */
static int apply_pass(void *conf, const struct conf_arg *args, size_t count,
                      struct conf_module_error *error)
{
    (void)count;
    struct proxy_module_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    bool grpc = strcmp(error->where->name, "grpc_pass") == 0;
    if (grpc)
        return apply_grpc_pass(c, arg, error);
    int scheme = (int)scheme_length(arg->text);
    const char *authority = arg->text + scheme;
    if (scheme == 0 || *authority == '\0' || strncmp(arg->text, "grpc", 4) == 0)
        return conf_module_fail(error, &arg->pos,
                                "invalid proxy_pass \"%s\" (expected http[s]://UPSTREAM or "
                                "http[s]://HOST:PORT)",
                                arg->text);
    if (strpbrk(authority, "?#") != NULL)
        return conf_module_fail(error, &arg->pos,
                                "proxy_pass \"%s\" has a query; give %.*sUPSTREAM[/PATH] or "
                                "%.*sHOST:PORT[/PATH]",
                                arg->text, scheme, arg->text, scheme, arg->text);
    /* A path replaces the part of the request's path that the location
     * matched, as in nginx; a regex says nothing about what that part is. */
    const char *slash = strchr(authority, '/');
    if (slash != NULL && error->where->regex)
        return conf_module_fail(
            error, &arg->pos,
            "proxy_pass \"%s\" has a path, which a regex location cannot replace its "
            "match with",
            arg->text);
    /* nor an if, which matches no part of the path (nginx refuses it too) */
    if (slash != NULL && error->where->nested)
        return conf_module_fail(error, &arg->pos,
                                "proxy_pass \"%s\" has a path, which cannot be used inside "
                                "\"if\" (as in nginx): write it without, or rewrite the URI "
                                "in the \"if\" with \"rewrite ... break\"",
                                arg->text);
    if (slash == authority)
        return conf_module_fail(error, &arg->pos,
                                "invalid proxy_pass \"%s\" (expected http[s]://UPSTREAM or "
                                "http[s]://HOST:PORT)",
                                arg->text);
    if (slash != NULL && (c->uri = strdup(slash)) == NULL)
        return conf_module_fail(error, &arg->pos, "%s", "out of memory");
    /* What names the upstream: the URL without its path. */
    size_t pass_len = slash != NULL ? (size_t)(slash - arg->text) : strlen(arg->text);
    if ((c->pass = strndup(arg->text, pass_len)) == NULL)
        return conf_module_fail(error, &arg->pos, "%s", "out of memory");
    c->pass_pos = arg->pos;
    return check_pass_address(c->pass + scheme, arg, "proxy_pass", error);
}

static int upgrade_conflict(struct conf_module_error *error, const struct conf_pos *at)
{
    return conf_module_fail(
        error, at, "%s",
        "\"proxy_upgrade\" and \"proxy_set_header Upgrade $http_upgrade\" both say "
        "which upgrades pass; keep one");
}

static int duplicate_header(struct conf_module_error *error, const struct conf_arg *name)
{
    return conf_module_fail(error, &name->pos, "duplicate proxy_set_header \"%s\" in this location",
                            name->text);
}

/* nginx passes an upgrade on only where the config says
 *     proxy_set_header Upgrade $http_upgrade;
 *     proxy_set_header Connection "upgrade";   (or a map's $connection_upgrade)
 * corral derives both fields itself: the pair says "pass any upgrade", the
 * HTTP versions aside.  Returns 0 when it took the line, -1 on an error, 1
 * when the line is not part of the idiom. */
static int apply_upgrade_idiom(struct proxy_module_conf *c, const struct conf_arg *name,
                               const struct conf_arg *value, struct conf_module_error *error)
{
    /* nginx's way to append the client to X-Forwarded-For, which corral
     * does without being asked. */
    if (strcasecmp(name->text, "x-forwarded-for") == 0 &&
        strcmp(value->text, "$proxy_add_x_forwarded_for") == 0)
        return 0;
    if (strcasecmp(name->text, "upgrade") == 0 && strcmp(value->text, "$http_upgrade") == 0) {
        if (c->upgrade_any)
            return duplicate_header(error, name);
        if (c->upgrade_set)
            return upgrade_conflict(error, &name->pos);
        c->upgrade_any = true;
        c->upgrade_any_pos = name->pos;
        return 0;
    }
    /* Connection goes with the upgrade, and is sent when one is; nginx's
     * "" (for keep-alive to the upstream) is what corral does anyway. */
    if (strcasecmp(name->text, "connection") == 0 &&
        (strcasecmp(value->text, "upgrade") == 0 || value->text[0] == '$' ||
         value->text[0] == '\0')) {
        if (c->connection_set)
            return duplicate_header(error, name);
        c->connection_set = true;
        return 0;
    }
    return 1;
}

/* proxy_set_header NAME VALUE, at any level: a level's lines are checked
 * together, as a location takes them, and a level without any takes its
 * parent's (merge()). */
static int apply_set_header(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    (void)count;
    struct proxy_module_conf *c = conf;
    const struct conf_arg *name = &args[0], *value = &args[1];
    c->headers_written = true;
    if (!is_token(name->text))
        return conf_module_fail(error, &name->pos, "invalid header name \"%s\"", name->text);
    int idiom = apply_upgrade_idiom(c, name, value, error);
    if (idiom <= 0)
        return idiom;
    /* The proxy derives the message framing and connection handling itself;
     * a second Content-Length or Transfer-Encoding would make the request
     * ambiguous to the upstream. */
    static const char *const derived[] = {
        "content-length", "transfer-encoding", "connection",      "upgrade", "te",
        "keep-alive",     "trailer",           "proxy-connection"};
    for (size_t i = 0; i < sizeof(derived) / sizeof(derived[0]); i++)
        if (strcasecmp(name->text, derived[i]) == 0)
            return conf_module_fail(error, &name->pos,
                                    "proxy_set_header cannot set \"%s\": the proxy derives it",
                                    name->text);
    /* A field value is visible characters, spaces and tabs: a CR or LF
     * here would let the config split the request it is added to. */
    for (const char *p = value->text; *p != '\0'; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return conf_module_fail(error, &value->pos, "%s",
                                    "header value contains a control character");
    for (size_t i = 0; i < c->set_header_count; i++)
        if (strcasecmp(c->set_headers[i].name, name->text) == 0)
            return duplicate_header(error, name);
    struct proxy_set_header_conf *headers =
        realloc(c->set_headers, (c->set_header_count + 1) * sizeof(*headers));
    if (headers == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    c->set_headers = headers;
    struct proxy_set_header_conf *header = &headers[c->set_header_count++]; /* freed whole or not */
    *header = (struct proxy_set_header_conf){
        .name = strdup(name->text), .value = strdup(value->text), .value_pos = value->pos};
    if (header->name == NULL || header->value == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    return 0;
}

/* proxy_hide_header NAME: dropped from upstream responses. */
static int apply_hide_header(void *conf, const struct conf_arg *args, size_t count,
                             struct conf_module_error *error)
{
    (void)count;
    struct proxy_module_conf *c = conf;
    const struct conf_arg *name = &args[0];
    if (!is_token(name->text))
        return conf_module_fail(error, &name->pos, "invalid header name \"%s\"", name->text);
    char **names = realloc(c->hide_headers, (c->hide_header_count + 1) * sizeof(*names));
    if (names == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    c->hide_headers = names;
    if ((names[c->hide_header_count] = strdup(name->text)) == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    c->hide_header_count++;
    return 0;
}

/* proxy_redirect default | off | REDIRECT REPLACEMENT, several lines at
 * a level, as nginx's. */
static int apply_redirect(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    struct proxy_module_conf *c = conf;
    const struct conf_arg *from = &args[0];
    bool off = count == 1 && strcmp(from->text, "off") == 0;
    if (c->redirects_off || (off && c->redirect_count > 0))
        return conf_module_fail(error, &from->pos, "%s",
                                "\"proxy_redirect off\" cannot be combined with other "
                                "proxy_redirect lines");
    c->redirects_written = true;
    if (off) {
        c->redirects_off = true;
        return 0;
    }
    if (count == 1 && strcmp(from->text, "default") != 0)
        return conf_module_fail(error, &from->pos,
                                "invalid proxy_redirect \"%s\" (expected default, off, or "
                                "REDIRECT REPLACEMENT)",
                                from->text);
    if (count == 2) {
        if (strcmp(from->text, "~") == 0 || strcmp(from->text, "~*") == 0)
            return conf_module_fail(error, &from->pos, "%s", "empty proxy_redirect regex");
        /* The replacement goes into a header line. */
        for (const char *p = args[1].text; *p != '\0'; p++)
            if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
                return conf_module_fail(error, &args[1].pos, "%s",
                                        "header value contains a control character");
    }
    struct proxy_redirect_conf *items =
        realloc(c->redirects, (c->redirect_count + 1) * sizeof(*items));
    if (items == NULL)
        return conf_module_fail(error, &from->pos, "%s", "out of memory");
    c->redirects = items;
    struct proxy_redirect_conf *line = &items[c->redirect_count++]; /* freed whole or not */
    *line = (struct proxy_redirect_conf){.from_pos = from->pos};
    if (count == 1)
        return 0;
    line->to_pos = args[1].pos;
    line->from = strdup(from->text);
    line->to = strdup(args[1].text);
    if (line->from == NULL || line->to == NULL)
        return conf_module_fail(error, &from->pos, "%s", "out of memory");
    return 0;
}

/* An HTTP version as an Upgrade protocol: what a tunnel past the proxy's
 * checks would carry (h2c smuggling). */
static bool upgrade_is_http(const char *protocol)
{
    return strcasecmp(protocol, "h2c") == 0 || strcasecmp(protocol, "h2") == 0 ||
           strcasecmp(protocol, "http") == 0;
}

/* proxy_upgrade PROTOCOL... | off */
static int apply_upgrade(void *conf, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    struct proxy_module_conf *c = conf;
    if (c->upgrade_any)
        return upgrade_conflict(error, NULL);
    c->upgrade_set = true;
    if (count == 1 && strcmp(args[0].text, "off") == 0)
        return 0;
    char **upgrades = calloc(count, sizeof(*upgrades));
    if (upgrades == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    c->upgrades = upgrades; /* free() frees what is counted */
    for (size_t i = 0; i < count; i++) {
        const struct conf_arg *arg = &args[i];
        if (strcmp(arg->text, "off") == 0)
            return conf_module_fail(error, &arg->pos, "%s",
                                    "\"off\" cannot be combined with protocols");
        if (!is_token(arg->text)) /* a token, without a version */
            return conf_module_fail(
                error, &arg->pos,
                "invalid proxy_upgrade protocol \"%s\" (expected a name such as "
                "websocket, without a version)",
                arg->text);
        if (upgrade_is_http(arg->text))
            return conf_module_fail(
                error, &arg->pos,
                "proxy_upgrade cannot allow \"%s\": an HTTP version through a tunnel "
                "would pass requests that the proxy never checks",
                arg->text);
        if ((upgrades[i] = strdup(arg->text)) == NULL)
            return conf_module_fail(error, &arg->pos, "%s", "out of memory");
        c->upgrade_count = i + 1;
    }
    return 0;
}

/* proxy_next_upstream CONDITION... | off: what the generic setter's
 * keywords cannot say, before it reads them. */
static int check_next_upstream(void *conf, const struct conf_arg *args, size_t count,
                               struct conf_module_error *error)
{
    (void)conf;
    for (size_t i = 0; count > 1 && i < count; i++)
        if (strcmp(args[i].text, "off") == 0)
            return conf_module_fail(error, &args[i].pos, "%s",
                                    "\"off\" cannot be combined with other conditions");
    /* nginx's conditions corral lacks */
    for (size_t i = 0; i < count; i++) {
        const char *word = args[i].text;
        if (strcmp(word, "http_403") == 0 || strcmp(word, "http_404") == 0)
            return conf_module_fail(
                error, &args[i].pos,
                "\"%s\" is nginx's: corral tries the next server on 429, 500, 502, 503 "
                "and 504 answers only",
                word);
        if (strcmp(word, "updating") == 0)
            return conf_module_fail(
                error, &args[i].pos, "%s",
                "\"updating\": not in corral yet: caching (see \"cache\" in the roadmap, "
                "docs/config.md)");
    }
    return 0;
}

/* Where a proxy_tls_* directive is written and how it is spelt, for
 * check(): they say nothing without https://. */
static void note_tls(const struct conf_module_error *error, struct conf_pos *at, bool *nginx)
{
    *at = *error->where->pos;
    *nginx = strncmp(error->where->name, "proxy_ssl_", 10) == 0 ||
             strncmp(error->where->name, "grpc_ssl_", 9) == 0;
}

static int note_tls_verify(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    (void)args, (void)count;
    struct proxy_module_conf *c = conf;
    note_tls(error, &c->tls_verify_at, &c->tls_verify_nginx);
    c->tls_grpc = strncmp(error->where->name, "grpc_", 5) == 0;
    return 0;
}

static int note_tls_ca(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)args, (void)count;
    struct proxy_module_conf *c = conf;
    note_tls(error, &c->tls_ca_at, &c->tls_ca_nginx);
    c->tls_grpc = strncmp(error->where->name, "grpc_", 5) == 0;
    return 0;
}

static int note_tls_certificate(void *conf, const struct conf_arg *args, size_t count,
                                struct conf_module_error *error)
{
    (void)args, (void)count;
    struct proxy_module_conf *c = conf;
    note_tls(error, &c->tls_cert_at, &c->tls_cert_nginx);
    c->tls_grpc = strncmp(error->where->name, "grpc_", 5) == 0;
    return 0;
}

static int note_tls_certificate_key(void *conf, const struct conf_arg *args, size_t count,
                                    struct conf_module_error *error)
{
    (void)args, (void)count;
    struct proxy_module_conf *c = conf;
    note_tls(error, &c->tls_key_at, &c->tls_key_nginx);
    c->tls_grpc = strncmp(error->where->name, "grpc_", 5) == 0;
    return 0;
}

/* An upstream block's name: what conf/ takes for one. */
static bool host_name(const char *name)
{
    if (*name == '\0')
        return false;
    for (const char *p = name; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.' || *p == '_'))
            return false;
    return true;
}

/* proxy_tls_name NAME: a host name, sent as SNI and matched against the
 * upstream's certificate; or an IP address, matched as one. */
static int check_tls_name(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    (void)count;
    struct proxy_module_conf *c = conf;
    struct in6_addr ipv6;
    if (!host_name(args[0].text) && inet_pton(AF_INET6, args[0].text, &ipv6) != 1)
        return conf_module_fail(
            error, &args[0].pos,
            "invalid proxy_tls_name \"%s\" (expected a host name or an IP address)", args[0].text);
    note_tls(error, &c->tls_name_at, &c->tls_name_nginx);
    c->tls_grpc = strncmp(error->where->name, "grpc_", 5) == 0;
    return 0;
}

/* A timeout no duration the parser takes is this long: the longest is
 * one less. */
#define TIMEOUT_MAX (UINT32_MAX - 1)

/* One directive per entry: a table reads better than what the formatter
 * makes of it. */
/* clang-format off */
#define ONE_ARG(where) .contexts = where, .min_args = 1, .max_args = 1
#define ANY_LEVEL (CONF_MAIN | CONF_SERVER | CONF_LOCATION)
#define FIELD(field, at) .base = CONF_BASE_MODULE, CONF_FIELD(struct proxy_module_conf, field), \
    .keep_pos = true, .pos_offset = offsetof(struct proxy_module_conf, at)
#define TLS(field) ONE_ARG(CONF_LOCATION), .base = CONF_BASE_MODULE, \
    CONF_FIELD(struct proxy_module_conf, tls.field)

static const struct conf_keyword next_upstream_words[] = {
    {"error", PROXY_NEXT_ERROR},
    {"timeout", PROXY_NEXT_TIMEOUT},
    {"invalid_header", PROXY_NEXT_INVALID_HEADER},
    {"http_500", PROXY_NEXT_HTTP_500},
    {"http_502", PROXY_NEXT_HTTP_502},
    {"http_503", PROXY_NEXT_HTTP_503},
    {"http_504", PROXY_NEXT_HTTP_504},
    {"http_429", PROXY_NEXT_HTTP_429},
    {"non_idempotent", PROXY_NEXT_NON_IDEMPOTENT},
    {"off", 0},
};

static const struct conf_directive proxy_directives[] = {
    /* in an if's block too: its location's handler when the if holds */
    {.name = "proxy_pass", ONE_ARG(CONF_LOCATION | CONF_LOCATION_IF), .content = true,
     .base = CONF_BASE_MODULE, .module_apply = apply_pass},
    /* in a server or at top level, for the levels below that write none */
    {.name = "proxy_set_header", .contexts = ANY_LEVEL, .min_args = 2, .max_args = 2,
     .repeat = true, .base = CONF_BASE_MODULE, .module_apply = apply_set_header},
    {.name = "proxy_hide_header", ONE_ARG(CONF_LOCATION), .repeat = true,
     .base = CONF_BASE_MODULE, .module_apply = apply_hide_header},
    /* the response's Location and Refresh; a level without any takes its
     * parent's; none anywhere: default */
    {.name = "proxy_redirect", .contexts = ANY_LEVEL, .min_args = 1, .max_args = 2,
     .repeat = true, .base = CONF_BASE_MODULE, .module_apply = apply_redirect},
    /* which client upgrades go on to the upstream; the default: websocket */
    {.name = "proxy_upgrade", .contexts = CONF_LOCATION, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .base = CONF_BASE_MODULE, .module_apply = apply_upgrade},
    {.name = "proxy_connect_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.connect_timeout_ms, connect_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "proxy_read_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.read_timeout_ms, read_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "proxy_send_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.send_timeout_ms, send_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "proxy_buffer_size", ONE_ARG(ANY_LEVEL), FIELD(proxy.response_head_limit, buffer_at),
     .kind = CONF_KIND_SIZE, .min = PROXY_RESPONSE_HEAD_LIMIT_MIN,
     .max = PROXY_RESPONSE_HEAD_LIMIT_MAX},
    /* when a request goes on to the next server, and how far */
    {.name = "proxy_next_upstream", .contexts = ANY_LEVEL, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .module_apply = check_next_upstream,
     FIELD(proxy.next_upstream, next_at), .kind = CONF_KIND_FLAGS,
     CONF_KEYWORDS(next_upstream_words), .what = "proxy_next_upstream condition",
     .repeated = "condition"},
    {.name = "proxy_next_upstream_tries", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.next_upstream_tries, tries_at), .kind = CONF_KIND_COUNT},
    {.name = "proxy_next_upstream_timeout", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.next_upstream_timeout_ms, next_timeout_at), .kind = CONF_KIND_DURATION},
    /* response bodies from the upstream's socket to the client's inside
     * the kernel (both plain); in a server or at the top level */
    {.name = "proxy_splice", ONE_ARG(CONF_MAIN | CONF_SERVER), FIELD(proxy.splice, splice_at),
     .kind = CONF_KIND_SWITCH},
    /* a backend's error answered with the location's error_page */
    {.name = "proxy_intercept_errors", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.intercept_errors, intercept_at), .kind = CONF_KIND_SWITCH},
    /* a request body read whole before a server is asked */
    {.name = "proxy_request_buffering", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.request_buffering, buffering_at), .kind = CONF_KIND_SWITCH},
    {.name = "grpc_request_buffering", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.grpc_request_buffering, grpc_buffering_at), .kind = CONF_KIND_SWITCH},
    {.name = "client_body_buffer_size", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.body_buffer_size, body_buffer_at), .kind = CONF_KIND_SIZE,
     .max = PROXY_BODY_BUFFER_MAX},
    {.name = "client_body_temp_path", ONE_ARG(ANY_LEVEL), FIELD(body_temp_path, body_temp_at),
     .kind = CONF_KIND_PATH},
    /* the most the buffered bodies' temporary files take, over the process */
    {.name = "client_body_temp_max_size", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.body_temp_max_size, body_temp_max_at), .kind = CONF_KIND_SIZE},
    /* "Via: 1.1 corral" on forwarded requests (off, as nginx, which never
     * adds one: a Via turns off gzip on an nginx backend, gzip_proxied) */
    {.name = "proxy_via", ONE_ARG(CONF_MAIN | CONF_SERVER), FIELD(proxy.via, via_at),
     .kind = CONF_KIND_SWITCH},
    /* whether the upstream's certificate must chain to a trusted CA and
     * match the name */
    {.name = "proxy_tls_verify", TLS(verify), .kind = CONF_KIND_SWITCH,
     .module_apply = note_tls_verify},
    /* opened by the daemon, like the server's certificates */
    {.name = "proxy_tls_trusted_certificate", TLS(ca_file), .kind = CONF_KIND_PATH,
     .keep_pos = true, .pos_offset = offsetof(struct proxy_module_conf, tls_ca_pos),
     .module_apply = note_tls_ca},
    {.name = "proxy_tls_name", TLS(server_name), .kind = CONF_KIND_STRING,
     .module_apply = check_tls_name},
    /* the client certificate an upstream that asks for one is shown */
    {.name = "proxy_tls_certificate", TLS(certificate), .kind = CONF_KIND_PATH,
     .keep_pos = true, .pos_offset = offsetof(struct proxy_module_conf, tls_cert_pos),
     .module_apply = note_tls_certificate},
    {.name = "proxy_tls_certificate_key", TLS(certificate_key), .kind = CONF_KIND_PATH,
     .module_apply = note_tls_certificate_key},
    /* HTTP/2 to the backend (h2c, or ALPN h2 with https://) */
    {.name = "proxy_http_version", ONE_ARG(ANY_LEVEL), .base = CONF_BASE_MODULE,
     .module_apply = apply_http_version},
    /* gRPC: HTTP/2 to the backend; nginx's grpc_* names for the proxy's
     * settings, which a location shares with its proxy_* ones */
    {.name = "grpc_pass", ONE_ARG(CONF_LOCATION | CONF_LOCATION_IF), .content = true,
     .base = CONF_BASE_MODULE, .module_apply = apply_pass},
    {.name = "grpc_set_header", .contexts = ANY_LEVEL, .min_args = 2, .max_args = 2,
     .repeat = true, .base = CONF_BASE_MODULE, .module_apply = apply_set_header},
    {.name = "grpc_hide_header", ONE_ARG(CONF_LOCATION), .repeat = true,
     .base = CONF_BASE_MODULE, .module_apply = apply_hide_header},
    {.name = "grpc_connect_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.connect_timeout_ms, connect_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "grpc_read_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.read_timeout_ms, read_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "grpc_send_timeout", ONE_ARG(ANY_LEVEL), FIELD(proxy.send_timeout_ms, send_at),
     .kind = CONF_KIND_DURATION, .max = TIMEOUT_MAX},
    {.name = "grpc_buffer_size", ONE_ARG(ANY_LEVEL), FIELD(proxy.response_head_limit, buffer_at),
     .kind = CONF_KIND_SIZE, .min = PROXY_RESPONSE_HEAD_LIMIT_MIN,
     .max = PROXY_RESPONSE_HEAD_LIMIT_MAX},
    {.name = "grpc_next_upstream", .contexts = ANY_LEVEL, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .module_apply = check_next_upstream,
     FIELD(proxy.next_upstream, next_at), .kind = CONF_KIND_FLAGS,
     CONF_KEYWORDS(next_upstream_words), .what = "grpc_next_upstream condition",
     .repeated = "condition"},
    {.name = "grpc_next_upstream_tries", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.next_upstream_tries, tries_at), .kind = CONF_KIND_COUNT},
    {.name = "grpc_next_upstream_timeout", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.next_upstream_timeout_ms, next_timeout_at), .kind = CONF_KIND_DURATION},
    {.name = "grpc_intercept_errors", ONE_ARG(ANY_LEVEL),
     FIELD(proxy.intercept_errors, intercept_at), .kind = CONF_KIND_SWITCH},
    {.name = "grpc_ssl_verify", TLS(verify), .kind = CONF_KIND_SWITCH,
     .module_apply = note_tls_verify},
    {.name = "grpc_ssl_trusted_certificate", TLS(ca_file), .kind = CONF_KIND_PATH,
     .keep_pos = true, .pos_offset = offsetof(struct proxy_module_conf, tls_ca_pos),
     .module_apply = note_tls_ca},
    {.name = "grpc_ssl_name", TLS(server_name), .kind = CONF_KIND_STRING,
     .module_apply = check_tls_name},
    {.name = "grpc_ssl_certificate", TLS(certificate), .kind = CONF_KIND_PATH,
     .keep_pos = true, .pos_offset = offsetof(struct proxy_module_conf, tls_cert_pos),
     .module_apply = note_tls_certificate},
    {.name = "grpc_ssl_certificate_key", TLS(certificate_key), .kind = CONF_KIND_PATH,
     .module_apply = note_tls_certificate_key},
    {.name = NULL},
};
/* clang-format on */

/* Every field unset but the TLS settings, a location's own. */
static void conf_init(void *conf)
{
    ((struct proxy_module_conf *)conf)->tls = TLS_CLIENT_CONF_DEFAULT;
}

static bool written(const struct conf_pos *at)
{
    return at->file != NULL;
}

/* A level takes its parent's value of each setting it does not write
 * (the top level: the default), and its parent's proxy_set_header lines
 * when it has none of its own. */
static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct proxy_module_conf *c = conf;
    const struct proxy_module_conf *p = parent;
    const struct proxy_conf from = p != NULL ? p->proxy : PROXY_CONF_DEFAULT;
    struct proxy_conf *to = &c->proxy;
    if (!written(&c->connect_at))
        to->connect_timeout_ms = from.connect_timeout_ms;
    if (!written(&c->read_at))
        to->read_timeout_ms = from.read_timeout_ms;
    if (!written(&c->send_at))
        to->send_timeout_ms = from.send_timeout_ms;
    if (!written(&c->buffer_at))
        to->response_head_limit = from.response_head_limit;
    if (!written(&c->splice_at))
        to->splice = from.splice;
    if (!written(&c->via_at))
        to->via = from.via;
    if (!written(&c->intercept_at))
        to->intercept_errors = from.intercept_errors;
    if (!written(&c->buffering_at))
        to->request_buffering = from.request_buffering;
    if (!written(&c->grpc_buffering_at))
        to->grpc_request_buffering = from.grpc_request_buffering;
    if (!written(&c->body_buffer_at))
        to->body_buffer_size = from.body_buffer_size;
    if (!written(&c->body_temp_max_at))
        to->body_temp_max_size = from.body_temp_max_size;
    /* borrowed from the parent unless written: free() leaves it */
    to->body_temp_path = written(&c->body_temp_at) ? c->body_temp_path : from.body_temp_path;
    if (!written(&c->version_at))
        c->http_version = p != NULL ? p->http_version : PROXY_HTTP_11;
    if (written(&c->next_at))
        to->next_upstream |= PROXY_NEXT_WRITTEN; /* `off` included */
    else
        to->next_upstream = from.next_upstream;
    if (!written(&c->tries_at))
        to->next_upstream_tries = from.next_upstream_tries;
    if (!written(&c->next_timeout_at))
        to->next_upstream_timeout_ms = from.next_upstream_timeout_ms;
    c->parent_tries = from.next_upstream_tries;
    c->parent_next_timeout_ms = from.next_upstream_timeout_ms;
    if (!c->headers_written && p != NULL) {
        /* borrowed: free() leaves them to their level */
        c->set_headers = p->set_headers;
        c->set_header_count = p->set_header_count;
        c->upgrade_any = p->upgrade_any;
        c->upgrade_any_pos = p->upgrade_any_pos;
        c->connection_set = p->connection_set;
    }
    if (!c->redirects_written && p != NULL) {
        /* borrowed: free() leaves them to their level */
        c->redirects = p->redirects;
        c->redirect_count = p->redirect_count;
        c->redirects_off = p->redirects_off;
    }
    return 0;
}

/* An if's location (nginx's noname one) without a proxy_pass of its own
 * proxies as its location does, to the same upstream; with one, to its
 * own, with the location's TLS settings, as nginx merges them (no
 * proxy_tls_* is written inside an if).  Borrowed: free() leaves them to
 * the location. */
static void merge_nested(void *conf, const void *location, bool content)
{
    struct proxy_module_conf *c = conf;
    const struct proxy_module_conf *p = location;
    c->tls = p->tls;
    c->tls_ca_pos = p->tls_ca_pos;
    c->tls_verify_at = p->tls_verify_at;
    c->tls_ca_at = p->tls_ca_at;
    c->tls_name_at = p->tls_name_at;
    c->tls_verify_nginx = p->tls_verify_nginx;
    c->tls_ca_nginx = p->tls_ca_nginx;
    c->tls_name_nginx = p->tls_name_nginx;
    c->tls_cert_pos = p->tls_cert_pos;
    c->tls_cert_at = p->tls_cert_at;
    c->tls_key_at = p->tls_key_at;
    c->tls_cert_nginx = p->tls_cert_nginx;
    c->tls_key_nginx = p->tls_key_nginx;
    c->tls_grpc = p->tls_grpc;
    c->borrowed_tls = true;
    if (content || p->pass == NULL)
        return;
    c->pass = p->pass;
    c->uri = p->uri;
    c->pass_pos = p->pass_pos;
    c->grpc = p->grpc;
    c->borrowed_pass = true;
}

/* The first proxy_tls_* directive of a location, in the order written. */
static const struct conf_pos *first_tls(const struct proxy_module_conf *c, const char **name)
{
    const struct {
        const struct conf_pos *at;
        const char *name;
    } all[] = {
        {&c->tls_verify_at, c->tls_grpc           ? "grpc_ssl_verify"
                            : c->tls_verify_nginx ? "proxy_ssl_verify"
                                                  : "proxy_tls_verify"},
        {&c->tls_ca_at, c->tls_grpc       ? "grpc_ssl_trusted_certificate"
                        : c->tls_ca_nginx ? "proxy_ssl_trusted_certificate"
                                          : "proxy_tls_trusted_certificate"},
        {&c->tls_name_at, c->tls_grpc         ? "grpc_ssl_name"
                          : c->tls_name_nginx ? "proxy_ssl_name"
                                              : "proxy_tls_name"},
        {&c->tls_cert_at, c->tls_grpc         ? "grpc_ssl_certificate"
                          : c->tls_cert_nginx ? "proxy_ssl_certificate"
                                              : "proxy_tls_certificate"},
        {&c->tls_key_at, c->tls_grpc        ? "grpc_ssl_certificate_key"
                         : c->tls_key_nginx ? "proxy_ssl_certificate_key"
                                            : "proxy_tls_certificate_key"},
    };
    const struct conf_pos *first = NULL;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        const struct conf_pos *at = all[i].at;
        if (!written(at))
            continue;
        if (first == NULL || at->line < first->line ||
            (at->line == first->line && at->col < first->col)) {
            first = at;
            *name = all[i].name;
        }
    }
    return first;
}

/* A location's settings against the rest of the config, once merged. */
static int check(void *conf, struct conf_module_error *error)
{
    struct proxy_module_conf *c = conf;
    const struct conf_module_where *where = error->where;
    if (where->context != CONF_LOCATION)
        return 0;
    c->location_pos = *where->pos;
    /* A location's tries or timeout of 0 (no limit) takes its server's. */
    if (c->proxy.next_upstream_tries == 0)
        c->proxy.next_upstream_tries = c->parent_tries;
    if (c->proxy.next_upstream_timeout_ms == 0)
        c->proxy.next_upstream_timeout_ms = c->parent_next_timeout_ms;
    /* Settings that would silently do nothing are mistakes: most likely
     * the proxy_pass was meant to say https://. */
    const char *name = NULL;
    const struct conf_pos *tls = c->borrowed_tls ? NULL : first_tls(c, &name);
    if (tls != NULL && (c->pass == NULL || !url_is_https(c->pass)))
        return conf_module_fail(error, tls, "\"%s\" needs \"%s\" in the same location", name,
                                c->tls_grpc ? "grpc_pass grpcs://..." : "proxy_pass https://...");
    /* A certificate is nothing without its key, and the other way round. */
    if (!c->borrowed_tls && written(&c->tls_cert_at) != written(&c->tls_key_at)) {
        bool cert = written(&c->tls_cert_at);
        const char *prefix = c->tls_grpc ? "grpc_ssl_" : "proxy_tls_";
        if (!c->tls_grpc && (cert ? c->tls_cert_nginx : c->tls_key_nginx))
            prefix = "proxy_ssl_";
        return conf_module_fail(
            error, cert ? &c->tls_cert_at : &c->tls_key_at,
            "\"%scertificate%s\" needs \"%scertificate%s\" in the same location", prefix,
            cert ? "" : "_key", prefix, cert ? "_key" : "");
    }
    /* Its own proxy_upgrade and its server's Upgrade line. */
    if (c->upgrade_set && c->upgrade_any)
        return upgrade_conflict(error, &c->upgrade_any_pos);
    if (c->pass == NULL)
        return 0;
    int scheme = (int)scheme_length(c->pass);
    const char *host = c->pass + scheme;
    if (strchr(host, ':') == NULL && !where->has_upstream(where, host))
        return conf_module_fail(error, &c->pass_pos,
                                "no upstream named \"%s\" (an address needs a port: %.*sHOST:PORT)",
                                host, scheme, c->pass);
    return 0;
}

static void conf_free(void *conf)
{
    struct proxy_module_conf *c = conf;
    if (!c->borrowed_pass) {
        free(c->pass);
        free(c->uri);
    }
    if (!c->borrowed_tls) {
        free((void *)c->tls.ca_file);
        free((void *)c->tls.server_name);
        free((void *)c->tls.certificate);
        free((void *)c->tls.certificate_key);
    }
    if (written(&c->body_temp_at))
        free(c->body_temp_path);
    for (size_t i = 0; c->headers_written && i < c->set_header_count; i++) {
        free(c->set_headers[i].name);
        free(c->set_headers[i].value);
    }
    if (c->headers_written)
        free(c->set_headers);
    for (size_t i = 0; i < c->hide_header_count; i++)
        free(c->hide_headers[i]);
    free(c->hide_headers);
    for (size_t i = 0; i < c->upgrade_count; i++)
        free(c->upgrades[i]);
    free(c->upgrades);
    for (size_t i = 0; c->redirects_written && i < c->redirect_count; i++) {
        free(c->redirects[i].from);
        free(c->redirects[i].to);
    }
    if (c->redirects_written)
        free(c->redirects);
}

/* ----------------------------------------------------------------- build */

/* `default`: proxy_pass's URL replaced by the location's prefix when
 * proxy_pass has a path, else the URL and "/" by "/", as nginx's. */
static int build_default(const struct proxy_module_conf *c, const struct http_module_build *b,
                         struct proxy_redirect *rule)
{
    const char *uri = c->uri != NULL ? c->uri : "/";
    size_t pass_len = strlen(c->pass), uri_len = strlen(uri);
    char *text = b->calloc(b->arena, pass_len + uri_len + 1, 1);
    if (text == NULL)
        return -ENOMEM;
    memcpy(text, c->pass, pass_len);
    memcpy(text + pass_len, uri, uri_len);
    rule->text = (struct http_str){text, pass_len + uri_len};
    const char *to = "/";
    if (c->uri != NULL) {
        char *path = b->calloc(b->arena, b->loc->path_len + 1, 1);
        if (path == NULL)
            return -ENOMEM;
        memcpy(path, b->loc->path, b->loc->path_len);
        to = path;
    }
    return b->compile_with(b->arena, to, &c->location_pos, "proxy_redirect", NULL, true,
                           &rule->replacement);
}

/* A location's proxy_redirect lines compiled (off: NULL); *reads: some
 * value reads the request. */
static int build_redirects(const struct proxy_module_conf *c, const struct http_module_build *b,
                           const struct proxy_redirects **out, bool *reads)
{
    *out = NULL;
    *reads = false;
    if (c->redirects_off)
        return 0;
    size_t count = c->redirect_count > 0 ? c->redirect_count : 1;
    struct proxy_redirects *rules = b->calloc(b->arena, 1, sizeof(*rules));
    struct proxy_redirect *items = b->calloc(b->arena, count, sizeof(*items));
    if (rules == NULL || items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        const struct proxy_redirect_conf *line = c->redirect_count > 0 ? &c->redirects[i] : NULL;
        struct proxy_redirect *rule = &items[i];
        int err;
        if (line == NULL || line->from == NULL) {
            err = build_default(c, b, rule);
        } else if (line->from[0] == '~') {
            bool caseless = line->from[1] == '*';
            err = b->regex(b->arena, line->from + (caseless ? 2 : 1), caseless, &line->from_pos,
                           "proxy_redirect", &rule->regex);
            if (err == 0)
                err = b->compile_with(b->arena, line->to, &line->to_pos, "proxy_redirect",
                                      rule->regex, true, &rule->replacement);
        } else {
            rule->text = (struct http_str){line->from, strlen(line->from)};
            err =
                b->compile(b->arena, line->from, &line->from_pos, "proxy_redirect", &rule->pattern);
            if (err == 0)
                err = b->compile_with(b->arena, line->to, &line->to_pos, "proxy_redirect", NULL,
                                      true, &rule->replacement);
        }
        if (err != 0)
            return err;
        if (vars_template_reads_request(rule->replacement) ||
            (rule->pattern != NULL && vars_template_reads_request(rule->pattern)))
            *reads = true;
    }
    *rules = (struct proxy_redirects){items, count};
    *out = rules;
    return 0;
}

/* A proxy_pass location: its upstream group (the generation's, shared),
 * its settings and its own header rewriting, as proxy_handler reads
 * them.  Anything else: nothing. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct proxy_module_conf *c = conf;
    *out = NULL;
    if (c->pass == NULL || b->loc == NULL)
        return 0;
    struct proxy_upstream *upstream;
    bool http2 = c->grpc || c->http_version == PROXY_HTTP_2;
    bool https = url_is_https(c->pass);
    const char *url = c->pass;
    const struct tls_client_conf *tls = https ? &c->tls : NULL;
    if (http2) {
        /* The upstream group is named by its http[s]:// URL: an h2c
         * location shares it (its servers' health and balancing) with the
         * HTTP/1.1 ones; over TLS, ALPN h2 makes its own. */
        const char *host = c->pass + scheme_length(c->pass);
        size_t len = strlen(host);
        char *text = b->calloc(b->arena, len + 9, 1);
        struct tls_client_conf *h2tls = https ? b->calloc(b->arena, 1, sizeof(*h2tls)) : NULL;
        if (text == NULL || (https && h2tls == NULL))
            return -ENOMEM;
        memcpy(text, https ? "https://" : "http://", https ? 8 : 7);
        memcpy(text + (https ? 8 : 7), host, len);
        url = text;
        if (https) {
            *h2tls = c->tls;
            h2tls->http2 = true;
            tls = h2tls;
        }
    }
    /* Where a file that does not load is reported: the message names it. */
    const struct conf_pos *tls_pos = c->tls.certificate != NULL ? &c->tls_cert_pos
                                     : c->tls.ca_file != NULL   ? &c->tls_ca_pos
                                                                : &c->location_pos;
    int err = b->upstream(b->arena, url, tls, tls_pos, &upstream);
    if (err != 0)
        return err;
    size_t count = c->set_header_count;
    const struct vars_template **values = NULL;
    for (size_t i = 0; i < count; i++) {
        const struct vars_template *t;
        err = b->compile(b->arena, c->set_headers[i].value, &c->set_headers[i].value_pos,
                         "proxy_set_header", &t);
        if (err != 0)
            return err;
        if (t != NULL && values == NULL &&
            (values = b->calloc(b->arena, count, sizeof(*values))) == NULL)
            return -ENOMEM;
        if (values != NULL)
            values[i] = t;
    }
    const struct http_regex *captures = NULL;
    for (size_t i = 0; values != NULL && i < count; i++)
        if (values[i] != NULL && vars_template_uses_captures(values[i]))
            captures = b->loc->regex;
    const struct proxy_redirects *redirects;
    bool redirects_read_request;
    err = build_redirects(c, b, &redirects, &redirects_read_request);
    if (err != 0)
        return err;
    struct proxy_location *px = b->calloc(b->arena, 1, sizeof(*px));
    struct http_header *headers = b->calloc(b->arena, count + 1, sizeof(*headers));
    struct http_str *hides = b->calloc(b->arena, c->hide_header_count + 1, sizeof(*hides));
    if (px == NULL || headers == NULL || hides == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++)
        headers[i] =
            (struct http_header){{c->set_headers[i].name, strlen(c->set_headers[i].name)},
                                 {c->set_headers[i].value, strlen(c->set_headers[i].value)}};
    for (size_t i = 0; i < c->hide_header_count; i++)
        hides[i] = (struct http_str){c->hide_headers[i], strlen(c->hide_headers[i])};
    /* the config's own copy goes with it: the location keeps one */
    size_t temp_len = strlen(c->proxy.body_temp_path);
    char *temp_path = b->calloc(b->arena, temp_len + 1, 1);
    if (temp_path == NULL)
        return -ENOMEM;
    memcpy(temp_path, c->proxy.body_temp_path, temp_len);
    *px = (struct proxy_location){
        .upstream = upstream,
        .conf = c->proxy,
        .set_headers = headers,
        .set_header_count = count,
        .hide_headers = hides,
        .hide_header_count = c->hide_header_count,
        .upgrades = c->upgrade_set ? (const char *const *)c->upgrades : proxy_upgrade_default,
        .upgrade_count = c->upgrade_set ? c->upgrade_count : 1,
        .upgrade_any = c->upgrade_any,
        .set_values = values,
        .captures = captures,
        .strip = {b->loc->path, b->loc->path_len},
        .uri = {c->uri, c->uri != NULL ? strlen(c->uri) : 0},
        .add_headers = http_module_built_in(*b->built, &add_header_module),
        .redirects = redirects,
        .redirects_read_request = redirects_read_request,
        .http2 = http2,
        .grpc = c->grpc,
    };
    px->conf.body_temp_path = temp_path;
    *out = px;
    return 0;
}

static const struct http_handler *content_of(const void *built)
{
    return ((const struct proxy_location *)built)->http2 ? &proxy_h2_handler : &proxy_handler;
}

/* A gRPC call to a grpc_pass location gets corral's own errors (a deny, a
 * limit) as grpc-status answers, never a page, whatever error_page says. */
static int grpc_phase(struct router_walk *w)
{
    const struct proxy_location *loc = http_module_built(w->ex, &proxy_module);
    if (loc != NULL && loc->grpc && grpc_status_call(&w->req))
        w->ex->error_hook = grpc_status_error_hook;
    return ROUTER_DECLINED;
}

static const struct http_phase_handler proxy_phases[] = {
    {ROUTER_FIND_LOCATION, grpc_phase},
};

struct http_module proxy_module = {
    .name = "proxy",
    .conf =
        {
            .name = "proxy",
            .directives = proxy_directives,
            .size = sizeof(struct proxy_module_conf),
            .init = conf_init,
            .merge = merge,
            .check = check,
            .merge_nested = merge_nested,
            .free = conf_free,
        },
    .build = build,
    .content = &proxy_handler,
    .content_of = content_of,
    .phases = proxy_phases,
    .phase_count = 1,
};
