/*
 * nginx_directives.c: nginx's boilerplate and spellings, so that an nginx
 * config whose features corral has loads unchanged: the events block, the
 * process directives, types { } and default_type, the ssl_* names of the
 * tls_* directives, and the tuning directives that mean nothing here
 * (docs/config.md lists each, with what it does in corral).
 */
#include "registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ----------------------------------------------------------------- aliases */

/* nginx's name and corral's, for directives that mean the same. */
static const struct {
    const char *nginx, *corral;
} aliases[] = {
    {"worker_processes", "workers"},
    {"pid", "pid_file"},
    {"ssl_certificate", "tls_certificate"},
    {"ssl_preread", "tls_preread"},
    {"ssl_alpn", "tls_alpn"},
    {"ssl_certificate_key", "tls_certificate_key"},
    {"ssl_ciphers", "tls_ciphers"},
    {"ssl_session_tickets", "tls_session_tickets"},
    {"ssl_session_timeout", "tls_session_timeout"},
    {"ssl_handshake_timeout", "tls_handshake_timeout"},
    {"ssl_client_certificate", "tls_client_certificate"},
    {"ssl_verify_client", "tls_verify_client"},
    {"ssl_stapling", "tls_stapling"},
    {"ssl_stapling_verify", "tls_stapling_verify"},
    {"ssl_stapling_file", "tls_stapling_file"},
    {"ssl_stapling_responder", "tls_stapling_responder"},
    {"ssl_trusted_certificate", "tls_trusted_certificate"},
    {"proxy_ssl_verify", "proxy_tls_verify"},
    {"proxy_ssl_trusted_certificate", "proxy_tls_trusted_certificate"},
    {"proxy_ssl_name", "proxy_tls_name"},
    {"proxy_ssl_certificate", "proxy_tls_certificate"},
    {"proxy_ssl_certificate_key", "proxy_tls_certificate_key"},
};

const char *conf__nginx_alias(const char *name)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(aliases[i].nginx, name) == 0)
            return aliases[i].corral;
    return NULL;
}

const char *conf__nginx_alias_of(const char *name)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(aliases[i].corral, name) == 0)
            return aliases[i].nginx;
    return NULL;
}

/* ---------------------------------------------------------------- accepted */

/* A directive that has no effect in corral, with its argument checked as
 * nginx would, so that a typo is still found: on|off. */
static int apply_switch_only(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    if (strcmp(arg->text, "on") != 0 && strcmp(arg->text, "off") != 0)
        return conf__error_at(state->error, &arg->pos, "invalid value \"%s\" (expected on or off)",
                              arg->text);
    return 0;
}

/* The same for a count or sizes: each argument a size ("64", "8k"). */
static int apply_sizes_only(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    for (size_t i = 0; i < node->arg_count; i++) {
        size_t size;
        if (conf__arg_size(state, &node->args[i], &size) != 0)
            return -1;
    }
    return 0;
}

static int apply_nothing(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive)
{
    (void)state;
    (void)node;
    (void)directive;
    return 0;
}

/* events { worker_connections N; use METHOD; multi_accept on|off; } */
static int apply_events(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    return conf__apply_block(state, node, CONF_EVENTS);
}

/* use epoll: corral picks its own mechanism; "wakeup" says how workers
 * share connections. */
static int apply_use(struct conf_state *state, const struct conf_node *node,
                     const struct conf_directive *directive)
{
    (void)directive;
    static const char *const methods[] = {"epoll",  "poll",      "select",
                                          "kqueue", "eventport", "/dev/poll"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(node->args[0].text, methods[i]) == 0)
            return 0;
    return conf__error_at(state->error, &node->args[0].pos,
                          "unknown event method \"%s\" (nginx's are epoll, poll, select, kqueue, "
                          "eventport and /dev/poll; corral uses epoll whatever it says)",
                          node->args[0].text);
}

/* A MIME type as nginx's mime.types writes them: TYPE/SUBTYPE. */
static bool valid_mime_type(const char *type)
{
    const char *slash = strchr(type, '/');
    if (slash == NULL || slash == type || slash[1] == '\0')
        return false;
    for (const char *p = type; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '"' || *p == ';')
            return false;
    return true;
}

/* types { TYPE EXTENSION...; ... }: the type of a file by its extension.
 * A later line for an extension replaces an earlier one, as in nginx. */
static int apply_types(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    int rc = 0;
    for (size_t i = 0; i < node->child_count; i++) {
        const struct conf_node *line = &node->children[i];
        if (line->block || line->arg_count == 0 || !valid_mime_type(line->name.text)) {
            rc = conf__error_at(state->error, &line->name.pos,
                                "expected \"TYPE EXTENSION...;\" in types, such as \"text/html "
                                "html htm;\"");
            continue;
        }
        for (size_t j = 0; j < line->arg_count; j++) {
            const char *extension = line->args[j].text;
            size_t k = 0;
            while (k < config->mime_type_count &&
                   strcasecmp(config->mime_types[k].extension, extension) != 0)
                k++;
            if (k == config->mime_type_count) {
                struct conf_mime_type *types =
                    conf__grow(state, &line->args[j].pos, config->mime_types, k, sizeof(*types));
                if (types == NULL)
                    return -1;
                config->mime_types = types;
                config->mime_type_count++;
                types[k].extension = conf__strdup(state, &line->args[j].pos, extension);
                if (types[k].extension == NULL)
                    return -1;
            }
            char *type = conf__strdup(state, &line->name.pos, line->name.text);
            if (type == NULL)
                return -1;
            free(config->mime_types[k].type);
            config->mime_types[k].type = type;
        }
    }
    return rc;
}

static int check_default_type(struct conf_state *state, const struct conf_arg *arg)
{
    if (!valid_mime_type(arg->text))
        return conf__error_at(state->error, &arg->pos,
                              "invalid type \"%s\" (expected TYPE/SUBTYPE, such as "
                              "application/octet-stream)",
                              arg->text);
    return 0;
}

/* default_type in a server or location: accepted, as only the top
 * level's is kept (docs/config.md). */
static int apply_default_type(struct conf_state *state, const struct conf_node *node,
                              const struct conf_directive *directive)
{
    if (check_default_type(state, &node->args[0]) != 0)
        return -1;
    if (state->server != NULL)
        return 0;
    return conf__apply_setting(state, node, directive);
}

/* ssl_protocols: nginx's list, in which corral takes TLSv1.2 and TLSv1.3
 * and passes over the older ones, which it never speaks. */
static const struct conf_keyword ssl_protocols[] = {
    {"TLSv1.2", TLS_PROTOCOL_1_2},
    {"TLSv1.3", TLS_PROTOCOL_1_3},
};

static int apply_ssl_protocols(struct conf_state *state, const struct conf_node *node,
                               const struct conf_directive *directive)
{
    (void)directive;
    static const char *const old[] = {"SSLv2", "SSLv3", "TLSv1", "TLSv1.1"};
    unsigned protocols = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        bool skipped = false;
        for (size_t j = 0; j < sizeof(old) / sizeof(old[0]); j++)
            skipped |= strcmp(arg->text, old[j]) == 0;
        if (skipped)
            continue;
        int value;
        if (conf__arg_keyword(state, arg, "TLS protocol", ssl_protocols,
                              sizeof(ssl_protocols) / sizeof(ssl_protocols[0]), &value) != 0)
            return -1;
        protocols |= (unsigned)value;
    }
    if (protocols == 0)
        return conf__error_at(state->error, &node->args[0].pos,
                              "no protocol corral speaks: it has TLSv1.2 and TLSv1.3 only");
    conf__block_tls(state)->settings.protocols = protocols;
    return 0;
}

/* ssl_conf_command NAME VALUE: the two OpenSSL commands corral has a
 * directive for, Ciphersuites (tls_ciphersuites) and Options KTLS
 * (tls_ktls on). */
static int apply_ssl_conf_command(struct conf_state *state, const struct conf_node *node,
                                  const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *name = &node->args[0], *value = &node->args[1];
    struct conf_tls *tls = conf__block_tls(state);
    if (strcasecmp(name->text, "Ciphersuites") == 0) {
        char *copy = conf__strdup(state, &value->pos, value->text);
        if (copy == NULL)
            return -1;
        free((void *)tls->settings.ciphersuites);
        tls->settings.ciphersuites = copy;
        tls->ciphersuites_pos = value->pos;
        return 0;
    }
    if (strcasecmp(name->text, "Options") == 0 && strcasecmp(value->text, "KTLS") == 0) {
        tls->settings.ktls = true;
        return 0;
    }
    return conf__error_at(state->error, &name->pos,
                          "ssl_conf_command \"%s\": corral sets no raw OpenSSL commands but "
                          "Ciphersuites (tls_ciphersuites) and Options KTLS (tls_ktls on)",
                          name->text);
}

/* nginx counts about 4000 sessions in a megabyte of shared cache. */
#define SSL_SESSION_BYTES 256
/* nginx's builtin cache without a size. */
#define SSL_BUILTIN_SESSIONS 20480

/* ssl_session_cache off | none | [builtin[:N]] [shared:NAME:SIZE]: how
 * many sessions corral keeps for resumption without tickets.  corral's
 * cache is one for all workers, as nginx's shared one is. */
static int apply_ssl_session_cache(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    struct tls_server_conf *settings = &conf__block_tls(state)->settings;
    unsigned sessions = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        const char *text = arg->text;
        if (strcmp(text, "off") == 0 || strcmp(text, "none") == 0) {
            if (node->arg_count > 1)
                return conf__error_at(state->error, &arg->pos,
                                      "\"%s\" cannot be combined with a cache", text);
            sessions = 0;
        } else if (strcmp(text, "builtin") == 0) {
            sessions += SSL_BUILTIN_SESSIONS;
        } else if (strncmp(text, "builtin:", 8) == 0) {
            unsigned n;
            const struct conf_arg value = {(char *)text + 8, arg->pos};
            if (conf__arg_uint(state, &value, "builtin cache size", 1, UINT32_MAX / 2, &n) != 0)
                return -1;
            sessions += n;
        } else if (strncmp(text, "shared:", 7) == 0 && strchr(text + 7, ':') != NULL &&
                   strchr(text + 7, ':') != text + 7) {
            size_t size;
            const struct conf_arg value = {strchr(text + 7, ':') + 1, arg->pos};
            if (conf__arg_size(state, &value, &size) != 0)
                return -1;
            size_t n = size / SSL_SESSION_BYTES;
            if (n == 0 || n > UINT32_MAX / 2)
                return conf__error_at(state->error, &arg->pos,
                                      "shared cache size out of range (from 1k to 512g)");
            sessions += (unsigned)n;
        } else {
            return conf__error_at(state->error, &arg->pos,
                                  "invalid ssl_session_cache \"%s\" (expected off, none, "
                                  "builtin[:N] or shared:NAME:SIZE)",
                                  text);
        }
    }
    settings->session_cache = sessions;
    return 0;
}

/* http2 on|off (nginx 1.25): HTTP/2 on each listen of the server, or of
 * every server when written at top level. */
static int apply_http2(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    return apply_switch_only(state, node, directive);
}

int conf__nginx_server_http2(struct conf_state *state, const struct conf_node *server_node,
                             struct conf_server *server)
{
    const struct conf_node *http2 = conf__find_child(server_node, "http2");
    if (http2 == NULL)
        http2 = state->root_http2;
    if (http2 == NULL || http2->arg_count != 1 || strcmp(http2->args[0].text, "on") != 0)
        return 0;
    for (size_t i = 0; i < server->listen_count; i++)
        server->listens[i].http2 = !server->listens[i].quic; /* QUIC carries HTTP/3 only */
    return 0;
}

void conf__nginx_server_http3(struct conf_state *state, const struct conf_node *server_node,
                              struct conf_server *server)
{
    const struct conf_node *http3 = conf__find_child(server_node, "http3");
    if (http3 == NULL)
        http3 = state->root_http3;
    server->http3_off =
        http3 != NULL && http3->arg_count == 1 && strcmp(http3->args[0].text, "off") == 0;
}

/* clang-format off */
#define ANYWHERE (CONF_MAIN | CONF_SERVER | CONF_LOCATION)
#define SWITCH_ONLY(name_, where) {.name = name_, .contexts = where, .min_args = 1, \
    .max_args = 1, .apply = apply_switch_only}
#define SIZES_ONLY(name_, where, n) {.name = name_, .contexts = where, .min_args = n, \
    .max_args = n, .apply = apply_sizes_only}

const struct conf_directive conf__nginx_directives[] = {
    {.name = "events", .contexts = CONF_MAIN, .block = true, .apply = apply_events},
    /* per worker, as corral's max_connections is (nginx counts upstream
     * connections too) */
    {.name = "worker_connections", .contexts = CONF_EVENTS, .min_args = 1, .max_args = 1,
     .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, max_connections),
     .kind = CONF_KIND_COUNT, .min = 1},
    {.name = "use", .contexts = CONF_EVENTS, .min_args = 1, .max_args = 1, .apply = apply_use},
    SWITCH_ONLY("multi_accept", CONF_EVENTS),
    /* Debian's modules-enabled/ holds these: corral has no modules to
     * load, and a module's directives get their own message where used */
    {.name = "load_module", .contexts = CONF_MAIN, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_nothing},
    /* corral raises its descriptor limit to what its connections need */
    SIZES_ONLY("worker_rlimit_nofile", CONF_MAIN, 1),
    {.name = "types", .contexts = CONF_MAIN, .block = true, .repeat = true,
     .apply = apply_types},
    {.name = "default_type", .contexts = ANYWHERE, .min_args = 1, .max_args = 1,
     .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, default_type),
     .kind = CONF_KIND_STRING, .what = "type", .apply = apply_default_type},
    SWITCH_ONLY("tcp_nopush", ANYWHERE),
    SWITCH_ONLY("tcp_nodelay", ANYWHERE),
    SWITCH_ONLY("server_tokens", ANYWHERE),
    SWITCH_ONLY("ssl_prefer_server_ciphers", CONF_MAIN | CONF_SERVER),
    SWITCH_ONLY("proxy_buffering", ANYWHERE),
    SIZES_ONLY("types_hash_max_size", CONF_MAIN, 1),
    SIZES_ONLY("types_hash_bucket_size", CONF_MAIN, 1),
    SIZES_ONLY("server_names_hash_max_size", CONF_MAIN, 1),
    SIZES_ONLY("server_names_hash_bucket_size", CONF_MAIN, 1),
    SIZES_ONLY("variables_hash_max_size", CONF_MAIN, 1),
    SIZES_ONLY("variables_hash_bucket_size", CONF_MAIN, 1),
    SIZES_ONLY("map_hash_max_size", CONF_MAIN, 1),
    SIZES_ONLY("map_hash_bucket_size", CONF_MAIN, 1),
    SIZES_ONLY("proxy_headers_hash_max_size", ANYWHERE, 1),
    SIZES_ONLY("proxy_headers_hash_bucket_size", ANYWHERE, 1),
    SIZES_ONLY("client_header_buffer_size", CONF_MAIN | CONF_SERVER, 1),
    SIZES_ONLY("proxy_buffers", ANYWHERE, 2),
    SIZES_ONLY("proxy_busy_buffers_size", ANYWHERE, 1),
    {.name = "ssl_protocols", .contexts = CONF_MAIN | CONF_SERVER | CONF_ADMIN | CONF_STREAM | CONF_STREAM_SERVER, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .apply = apply_ssl_protocols, .base = CONF_BASE_TLS,
     CONF_FIELD(struct conf_tls, settings.protocols), .kind = CONF_KIND_FLAGS},
    {.name = "ssl_session_cache", .contexts = CONF_MAIN | CONF_SERVER | CONF_ADMIN | CONF_STREAM | CONF_STREAM_SERVER,
     .min_args = 1, .max_args = 2, .apply = apply_ssl_session_cache, .base = CONF_BASE_TLS,
     CONF_FIELD(struct conf_tls, settings.session_cache), .kind = CONF_KIND_COUNT},
    {.name = "http2", .contexts = CONF_MAIN | CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_http2},
    /* http3 on|off: read by conf__nginx_server_http3() once the server's
     * block is applied */
    SWITCH_ONLY("http3", CONF_MAIN | CONF_SERVER),
    {.name = "ssl_conf_command", .contexts = CONF_MAIN | CONF_SERVER | CONF_ADMIN, .min_args = 2,
     .max_args = 2, .repeat = true, .apply = apply_ssl_conf_command},
    {.name = NULL},
};
/* clang-format on */
