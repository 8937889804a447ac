/*
 * http_directives.c: the HTTP side of the config: client limits and
 * timeouts (top level, overridable per server), server blocks with their
 * listen addresses, names and TLS settings, locations and `return`.
 */
#include "registry.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ----------------------------------------------------- limits and timeouts */

enum setting_kind {
    SETTING_DURATION, /* uint32_t milliseconds */
    SETTING_SIZE,     /* size_t bytes */
    SETTING_COUNT,    /* unsigned */
    SETTING_SWITCH,   /* bool: on|off */
};

/* One scalar field of struct conf_http or struct conf_tls, set by the
 * directive of the same name. */
struct setting {
    enum setting_kind kind;
    size_t offset;
    uint32_t min; /* the least value allowed: a count, bytes or milliseconds */
};

void conf__http_defaults(struct conf_http *http)
{
    *http = (struct conf_http){
        .client_header_timeout_ms = 60 * 1000,
        .client_body_timeout_ms = 60 * 1000,
        .send_timeout_ms = 60 * 1000,
        .keepalive_timeout_ms = 75 * 1000,
        .keepalive_requests = 1000,
        .client_max_header_size = 8 * 1024,
        .client_max_headers = 100,
        .client_max_body_size = 1024 * 1024,
        .proxy_connect_timeout_ms = 60 * 1000,
        .proxy_read_timeout_ms = 60 * 1000,
        .proxy_send_timeout_ms = 60 * 1000,
    };
}

/* clang-format off */
#define DURATION(field) {.kind = SETTING_DURATION, .offset = offsetof(struct conf_http, field)}
#define SIZE(field, least) \
    {.kind = SETTING_SIZE, .offset = offsetof(struct conf_http, field), .min = least}
#define COUNT(field, least) \
    {.kind = SETTING_COUNT, .offset = offsetof(struct conf_http, field), .min = least}
/* clang-format on */

static const struct setting client_header_timeout = DURATION(client_header_timeout_ms);
static const struct setting client_body_timeout = DURATION(client_body_timeout_ms);
static const struct setting send_timeout = DURATION(send_timeout_ms);
static const struct setting keepalive_timeout = DURATION(keepalive_timeout_ms);
static const struct setting keepalive_requests = COUNT(keepalive_requests, 1);
/* A header section must fit its request line at least; 0 would refuse
 * every request. */
static const struct setting client_max_header_size = SIZE(client_max_header_size, 1);
static const struct setting client_max_headers = COUNT(client_max_headers, 1);
static const struct setting client_max_body_size = SIZE(client_max_body_size, 0);
static const struct setting proxy_connect_timeout = DURATION(proxy_connect_timeout_ms);
static const struct setting proxy_read_timeout = DURATION(proxy_read_timeout_ms);
static const struct setting proxy_send_timeout = DURATION(proxy_send_timeout_ms);

/* Sets the field `directive` names in the struct at `base`. */
static int apply_setting(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive, char *base)
{
    const struct setting *setting = directive->data;
    char *field = base + setting->offset;
    const struct conf_arg *arg = &node->args[0];
    switch (setting->kind) {
    case SETTING_DURATION: {
        uint32_t ms;
        if (conf__arg_duration(state, arg, &ms) != 0)
            return -1;
        if (ms < setting->min) {
            char least[32];
            if (setting->min % 1000 == 0)
                snprintf(least, sizeof(least), "%us", (unsigned)(setting->min / 1000));
            else
                snprintf(least, sizeof(least), "%ums", (unsigned)setting->min);
            return conf__error_at(state->error, &arg->pos, "\"%s\" must be at least %s, got \"%s\"",
                                  directive->name, least, arg->text);
        }
        *(uint32_t *)(void *)field = ms;
        return 0;
    }
    case SETTING_SIZE: {
        size_t size;
        if (conf__arg_size(state, arg, &size) != 0)
            return -1;
        if (size < setting->min)
            return conf__error_at(state->error, &arg->pos, "\"%s\" must be at least %u, got \"%s\"",
                                  directive->name, (unsigned)setting->min, arg->text);
        *(size_t *)(void *)field = size;
        return 0;
    }
    case SETTING_COUNT: {
        char what[64];
        snprintf(what, sizeof(what), "\"%s\"", directive->name);
        return conf__arg_uint(state, arg, what, setting->min, UINT_MAX, (unsigned *)(void *)field);
    }
    case SETTING_SWITCH: return conf__arg_switch(state, arg, (bool *)(void *)field);
    }
    return -1;
}

/* Writes into the server being read, else into the top level's values. */
static int apply_http_setting(struct conf_state *state, const struct conf_node *node,
                              const struct conf_directive *directive)
{
    struct conf_http *http = state->server != NULL ? &state->server->http : &state->config->http;
    return apply_setting(state, node, directive, (char *)http);
}

static void copy_setting(struct conf_http *to, const struct conf_http *from,
                         const struct setting *setting)
{
    static const size_t sizes[] = {
        [SETTING_DURATION] = sizeof(uint32_t),
        [SETTING_SIZE] = sizeof(size_t),
        [SETTING_COUNT] = sizeof(unsigned),
        [SETTING_SWITCH] = sizeof(bool),
    };
    memcpy((char *)to + setting->offset, (const char *)from + setting->offset,
           sizes[setting->kind]);
}

static const struct conf_node *find_child(const struct conf_node *block, const char *name)
{
    for (size_t i = 0; i < block->child_count; i++)
        if (strcmp(block->children[i].name.text, name) == 0)
            return &block->children[i];
    return NULL;
}

/* --------------------------------------------------------------------- tls */

/* Every server gets them, tls or not: the daemon reads them for the tls
 * addresses only. */
static void tls_defaults(struct conf_tls *tls)
{
    *tls = (struct conf_tls){
        .protocols = CONF_TLS_1_2 | CONF_TLS_1_3,
        .session_tickets = true,
        .ticket_key_rotation_ms = 60 * 60 * 1000,
        .session_cache = 20000,
        .session_timeout_ms = 5 * 60 * 1000,
        .handshake_timeout_ms = 10 * 1000,
        .ktls = false,
        /* Settled by check_tls(), once it is known whether the block
         * names a CA file. */
        .verify_client = CONF_TLS_VERIFY_CLIENT_OFF,
    };
}

/* tls_certificate FILE: starts a pair that the next tls_certificate_key
 * completes.  The files are opened by the daemon, not here, so that a
 * config can be checked where they are not readable. */
static int apply_tls_certificate(struct conf_state *state, const struct conf_node *node,
                                 const struct conf_directive *directive)
{
    (void)directive;
    struct conf_tls *tls = &state->server->tls;
    const struct conf_arg *arg = &node->args[0];
    if (tls->certificate_count > 0 && tls->certificates[tls->certificate_count - 1].key == NULL) {
        const struct conf_pos *last =
            &tls->certificates[tls->certificate_count - 1].certificate_pos;
        char where[300];
        return conf__error_at(state->error, &node->name.pos,
                              "\"tls_certificate\" at %s needs its \"tls_certificate_key\" before "
                              "the next \"tls_certificate\"",
                              conf__where(where, sizeof(where), &node->name.pos, last));
    }
    struct conf_tls_certificate *certificates = conf__grow(
        state, &arg->pos, tls->certificates, tls->certificate_count, sizeof(*certificates));
    if (certificates == NULL)
        return -1;
    tls->certificates = certificates;
    struct conf_tls_certificate *pair = &certificates[tls->certificate_count++];
    pair->certificate_pos = arg->pos;
    return conf__arg_path(state, arg, &pair->certificate);
}

/* tls_certificate_key FILE: the key of the tls_certificate just before. */
static int apply_tls_certificate_key(struct conf_state *state, const struct conf_node *node,
                                     const struct conf_directive *directive)
{
    (void)directive;
    struct conf_tls *tls = &state->server->tls;
    const struct conf_arg *arg = &node->args[0];
    if (tls->certificate_count == 0) {
        size_t index = (size_t)(state->server - state->config->servers);
        if (find_child(state->server_nodes[index], "tls_certificate") == NULL)
            return conf__error_at(state->error, &node->name.pos,
                                  "\"tls_certificate_key\" needs a \"tls_certificate\" in the "
                                  "same server");
        return conf__error_at(state->error, &node->name.pos,
                              "\"tls_certificate_key\" must come after its \"tls_certificate\"");
    }
    struct conf_tls_certificate *pair = &tls->certificates[tls->certificate_count - 1];
    if (pair->key != NULL) {
        char where[300];
        return conf__error_at(
            state->error, &node->name.pos,
            "duplicate \"tls_certificate_key\" for the \"tls_certificate\" at %s",
            conf__where(where, sizeof(where), &node->name.pos, &pair->certificate_pos));
    }
    pair->key_pos = arg->pos;
    return conf__arg_path(state, arg, &pair->key);
}

/* tls_protocols TLSv1.2 | TLSv1.3 ... */
static int apply_tls_protocols(struct conf_state *state, const struct conf_node *node,
                               const struct conf_directive *directive)
{
    (void)directive;
    static const struct conf_keyword protocols[] = {
        {"TLSv1.2", CONF_TLS_1_2},
        {"TLSv1.3", CONF_TLS_1_3},
    };
    unsigned mask = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        int bit;
        if (conf__arg_keyword(state, arg, "TLS protocol", protocols,
                              sizeof(protocols) / sizeof(protocols[0]), &bit) != 0)
            return -1;
        if (mask & (unsigned)bit)
            return conf__error_at(state->error, &arg->pos, "duplicate protocol \"%s\"", arg->text);
        mask |= (unsigned)bit;
    }
    state->server->tls.protocols = mask;
    return 0;
}

/* tls_ciphers LIST (TLS 1.2, OpenSSL's cipher list syntax), tls_ciphersuites
 * LIST (TLS 1.3): kept as written.  OpenSSL judges them when the daemon
 * sets up TLS; the position lets it point here. */
static int apply_tls_ciphers(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    struct conf_tls *tls = &state->server->tls;
    const struct conf_arg *arg = &node->args[0];
    bool suites = strcmp(directive->name, "tls_ciphersuites") == 0;
    char **field = suites ? &tls->ciphersuites : &tls->ciphers;
    *(suites ? &tls->ciphersuites_pos : &tls->ciphers_pos) = arg->pos;
    *field = conf__strdup(state, &arg->pos, arg->text);
    return *field != NULL ? 0 : -1;
}

/* clang-format off */
#define TLS_SWITCH_FIELD(field) {.kind = SETTING_SWITCH, .offset = offsetof(struct conf_tls, field)}
#define TLS_DURATION_FIELD(field, least) \
    {.kind = SETTING_DURATION, .offset = offsetof(struct conf_tls, field), .min = least}
/* clang-format on */

static const struct setting tls_session_tickets = TLS_SWITCH_FIELD(session_tickets);
static const struct setting tls_ktls = TLS_SWITCH_FIELD(ktls);
/* A ticket's lifetime is told to the client in whole seconds, and a ticket
 * lives at least one rotation period. */
static const struct setting tls_session_ticket_rotation =
    TLS_DURATION_FIELD(ticket_key_rotation_ms, 1000);
static const struct setting tls_session_timeout = TLS_DURATION_FIELD(session_timeout_ms, 1);
static const struct setting tls_handshake_timeout = TLS_DURATION_FIELD(handshake_timeout_ms, 1);

/* TLS settings belong to server blocks only. */
static int apply_tls_setting(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    return apply_setting(state, node, directive, (char *)&state->server->tls);
}

/* tls_session_cache N|off: sessions kept for resumption without a ticket;
 * 0 is off too. */
static int apply_tls_session_cache(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    unsigned n;
    if (strcmp(arg->text, "off") == 0) {
        state->server->tls.session_cache = 0;
        return 0;
    }
    if (conf__parse_uint(arg->text, &n) != 0 && errno == EINVAL)
        return conf__error_at(state->error, &arg->pos,
                              "invalid session cache size \"%s\" (expected a number or off)",
                              arg->text);
    return conf__arg_uint(state, arg, "\"tls_session_cache\"", 0, UINT_MAX,
                          &state->server->tls.session_cache);
}

/* tls_client_certificate CAFILE: the CAs that client certificates must
 * chain to. */
static int apply_tls_client_certificate(struct conf_state *state, const struct conf_node *node,
                                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_tls *tls = &state->server->tls;
    tls->client_certificate_pos = node->args[0].pos;
    return conf__arg_path(state, &node->args[0], &tls->client_certificate);
}

/* tls_verify_client on|optional|off: checked against the CA file by
 * check_tls(), which may come later in the block. */
static int apply_tls_verify_client(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    static const struct conf_keyword modes[] = {
        {"on", CONF_TLS_VERIFY_CLIENT_ON},
        {"optional", CONF_TLS_VERIFY_CLIENT_OPTIONAL},
        {"off", CONF_TLS_VERIFY_CLIENT_OFF},
    };
    int verify;
    if (conf__arg_keyword(state, &node->args[0], "client verification", modes,
                          sizeof(modes) / sizeof(modes[0]), &verify) != 0)
        return -1;
    state->server->tls.verify_client = (enum conf_tls_verify_client)verify;
    return 0;
}

/* What needs the whole server block: the last certificate has its key, a
 * tls listener has a certificate, and client verification has a CA file
 * (which settles its default). */
static int check_tls(struct conf_state *state, size_t index)
{
    struct conf_server *server = &state->config->servers[index];
    struct conf_tls *tls = &server->tls;
    const struct conf_node *node = state->server_nodes[index];
    if (tls->certificate_count > 0 && tls->certificates[tls->certificate_count - 1].key == NULL) {
        const struct conf_node *cert = NULL;
        for (size_t i = 0; i < node->child_count; i++)
            if (strcmp(node->children[i].name.text, "tls_certificate") == 0)
                cert = &node->children[i];
        return conf__error_at(state->error, &cert->name.pos,
                              "\"tls_certificate\" needs a \"tls_certificate_key\" in the same "
                              "server");
    }
    for (size_t i = 0; i < server->listen_count; i++)
        if (server->listens[i].tls && tls->certificate_count == 0)
            return conf__error_at(state->error, &server->listens[i].pos,
                                  "listen \"%s\" is tls but the server has no \"tls_certificate\"",
                                  server->listens[i].address);

    const struct conf_node *verify = find_child(node, "tls_verify_client");
    if (verify == NULL)
        tls->verify_client = tls->client_certificate != NULL ? CONF_TLS_VERIFY_CLIENT_ON
                                                             : CONF_TLS_VERIFY_CLIENT_OFF;
    else if (tls->verify_client != CONF_TLS_VERIFY_CLIENT_OFF && tls->client_certificate == NULL)
        return conf__error_at(state->error, &verify->args[0].pos,
                              "\"tls_verify_client %s\" needs a \"tls_client_certificate\" in the "
                              "same server",
                              verify->args[0].text);
    return 0;
}

/* ------------------------------------------------------------------ server */

static bool valid_server_name(const char *name)
{
    const char *p = name;
    if (strncmp(p, "*.", 2) == 0)
        p += 2;
    if (*p == '\0')
        return false;
    for (; *p != '\0'; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return false;
    }
    return true;
}

/* Where `name`, one of the server's names, is written in its server_name
 * directive. */
static const struct conf_pos *server_name_pos(const struct conf_node *server_node, const char *name)
{
    const struct conf_node *directive = find_child(server_node, "server_name");
    size_t i = 0;
    while (strcasecmp(directive->args[i].text, name) != 0)
        i++;
    return &directive->args[i].pos;
}

/* A name the two servers share (names are case-insensitive), or NULL. */
static const char *shared_name(const struct conf_server *a, const struct conf_server *b)
{
    for (size_t i = 0; i < a->server_name_count; i++)
        for (size_t j = 0; j < b->server_name_count; j++)
            if (strcasecmp(a->server_names[i], b->server_names[j]) == 0)
                return a->server_names[i];
    return NULL;
}

/* Two servers on one address must be told apart by name, agree on TLS, not
 * both claim to be the default, and not both set the one socket's options. */
static int check_listen_conflict(struct conf_state *state, size_t index,
                                 const struct conf_listen *listen, size_t other_index,
                                 const struct conf_listen *theirs)
{
    const struct conf_server *server = &state->config->servers[index];
    const struct conf_server *other = &state->config->servers[other_index];
    char where[300];
    if (listen->tls != theirs->tls)
        return conf__error_at(state->error, &listen->pos, "listen \"%s\" is %s here but %s at %s",
                              listen->address, listen->tls ? "tls" : "not tls",
                              theirs->tls ? "tls" : "not tls",
                              conf__where(where, sizeof(where), &listen->pos, &theirs->pos));
    if (listen->default_server && theirs->default_server)
        return conf__error_at(state->error, &listen->pos,
                              "listen \"%s\" already has a default_server (at %s)", listen->address,
                              conf__where(where, sizeof(where), &listen->pos, &theirs->pos));
    if (listen->has_socket_options && theirs->has_socket_options)
        return conf__error_at(
            state->error, &listen->pos, "listen \"%s\" already has deferred or backlog set (at %s)",
            listen->address, conf__where(where, sizeof(where), &listen->pos, &theirs->pos));
    if (server->server_name_count == 0 && other->server_name_count == 0)
        return conf__error_at(state->error, &listen->pos,
                              "a server without server_name already listens on \"%s\" (at %s)",
                              listen->address,
                              conf__where(where, sizeof(where), &listen->pos, &theirs->pos));
    const char *name = shared_name(server, other);
    if (name == NULL)
        return 0;
    const struct conf_pos *here = server_name_pos(state->server_nodes[index], name);
    const struct conf_pos *there = server_name_pos(state->server_nodes[other_index], name);
    return conf__error_at(state->error, here, "server_name \"%s\" on \"%s\" is already used at %s",
                          name, listen->address, conf__where(where, sizeof(where), here, there));
}

static int check_server(struct conf_state *state, size_t index)
{
    const struct conf_server *server = &state->config->servers[index];
    if (server->listen_count == 0)
        return conf__error_at(state->error, &server->pos, "server has no \"listen\"");
    if (check_tls(state, index) != 0)
        return -1;

    for (size_t i = 0; i < server->listen_count; i++) {
        const struct conf_listen *listen = &server->listens[i];
        for (size_t j = 0; j < index; j++) {
            const struct conf_server *other = &state->config->servers[j];
            for (size_t k = 0; k < other->listen_count; k++)
                if (conf_same_address(listen->address, other->listens[k].address) &&
                    check_listen_conflict(state, index, listen, j, &other->listens[k]) != 0)
                    return -1;
        }
    }
    return 0;
}

/* server { ... } */
static int apply_server(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    const struct conf_node **nodes = conf__grow(state, &node->name.pos, state->server_nodes,
                                                config->server_count, sizeof(*nodes));
    if (nodes == NULL)
        return -1;
    state->server_nodes = nodes;
    struct conf_server *servers =
        conf__grow(state, &node->name.pos, config->servers, config->server_count, sizeof(*servers));
    if (servers == NULL)
        return -1;
    config->servers = servers;
    size_t index = config->server_count++;
    nodes[index] = node;
    struct conf_server *server = &servers[index];
    server->pos = node->name.pos;
    /* Provisional: conf__http_finish() fills in what the block leaves out. */
    server->http = config->http;
    tls_defaults(&server->tls);

    state->server = server;
    int rc = conf__apply_block(state, node, CONF_SERVER);
    state->server = NULL;
    if (rc != 0)
        return -1;
    return check_server(state, index);
}

/* One listen parameter: a flag (tls, default_server, deferred) or backlog=N. */
static int listen_parameter(struct conf_state *state, const struct conf_arg *arg,
                            struct conf_listen *listen)
{
    static const char backlog_prefix[] = "backlog=";
    if (strncmp(arg->text, backlog_prefix, sizeof(backlog_prefix) - 1) == 0) {
        if (listen->backlog != 0)
            return conf__error_at(state->error, &arg->pos, "duplicate parameter \"backlog\"");
        /* The value alone, for the value parser's messages. */
        const struct conf_arg value = {.text = arg->text + sizeof(backlog_prefix) - 1,
                                       .pos = arg->pos};
        listen->has_socket_options = true;
        return conf__arg_uint(state, &value, "backlog", 1, INT_MAX, &listen->backlog);
    }
    bool *flag = strcmp(arg->text, "tls") == 0              ? &listen->tls
                 : strcmp(arg->text, "default_server") == 0 ? &listen->default_server
                 : strcmp(arg->text, "deferred") == 0       ? &listen->deferred
                                                            : NULL;
    if (flag == NULL)
        return conf__error_at(state->error, &arg->pos,
                              "unknown listen parameter \"%s\" (expected tls, default_server, "
                              "deferred or backlog=N)",
                              arg->text);
    if (*flag)
        return conf__error_at(state->error, &arg->pos, "duplicate parameter \"%s\"", arg->text);
    *flag = true;
    if (flag == &listen->deferred)
        listen->has_socket_options = true;
    return 0;
}

/* listen ADDRESS [tls] [default_server] [deferred] [backlog=N] */
static int apply_listen(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_server *server = state->server;
    const struct conf_arg *address = &node->args[0];
    if (conf__arg_address(state, address, "listen address") != 0)
        return -1;
    struct conf_listen parsed = {.pos = address->pos};
    for (size_t i = 1; i < node->arg_count; i++)
        if (listen_parameter(state, &node->args[i], &parsed) != 0)
            return -1;
    for (size_t i = 0; i < server->listen_count; i++) {
        if (!conf_same_address(server->listens[i].address, address->text))
            continue;
        char where[300];
        return conf__error_at(
            state->error, &address->pos, "duplicate listen \"%s\" (first at %s)", address->text,
            conf__where(where, sizeof(where), &address->pos, &server->listens[i].pos));
    }
    struct conf_listen *listens =
        conf__grow(state, &address->pos, server->listens, server->listen_count, sizeof(*listens));
    if (listens == NULL)
        return -1;
    server->listens = listens;
    struct conf_listen *listen = &listens[server->listen_count++];
    *listen = parsed;
    listen->address = conf__strdup(state, &address->pos, address->text);
    return listen->address != NULL ? 0 : -1;
}

/* server_name NAME...: exact names and "*.example.com" wildcards. */
static int apply_server_name(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    (void)directive;
    struct conf_server *server = state->server;
    for (size_t i = 0; i < node->arg_count; i++)
        if (!valid_server_name(node->args[i].text))
            return conf__error_at(state->error, &node->args[i].pos,
                                  "invalid server name \"%s\" (expected a host name or "
                                  "*.domain)",
                                  node->args[i].text);
    assert(node->arg_count > 0); /* min_args, checked before apply */
    server->server_names = calloc(node->arg_count, sizeof(*server->server_names));
    if (server->server_names == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    for (size_t i = 0; i < node->arg_count; i++) {
        server->server_names[i] = conf__strdup(state, &node->args[i].pos, node->args[i].text);
        if (server->server_names[i] == NULL)
            return -1;
        server->server_name_count++;
    }
    return 0;
}

/* ---------------------------------------------------------------- location */

/* location [=] PATH { ... } */
static int apply_location(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    (void)directive;
    struct conf_server *server = state->server;
    const struct conf_arg *path = &node->args[node->arg_count - 1];
    bool exact = node->arg_count == 2;
    if (exact && strcmp(node->args[0].text, "=") != 0)
        return conf__error_at(state->error, &node->args[0].pos,
                              "unknown location modifier \"%s\" (only \"=\" is supported)",
                              node->args[0].text);
    if (path->text[0] != '/')
        return conf__error_at(state->error, &path->pos,
                              "location path must start with \"/\", got \"%s\"", path->text);
    for (size_t i = 0; i < server->location_count; i++) {
        const struct conf_location *other = &server->locations[i];
        if (other->exact != exact || strcmp(other->path, path->text) != 0)
            continue;
        char where[300];
        return conf__error_at(state->error, &path->pos, "duplicate location \"%s%s\" (first at %s)",
                              exact ? "= " : "", path->text,
                              conf__where(where, sizeof(where), &path->pos, &other->pos));
    }
    struct conf_location *locations = conf__grow(state, &node->name.pos, server->locations,
                                                 server->location_count, sizeof(*locations));
    if (locations == NULL)
        return -1;
    server->locations = locations;
    struct conf_location *location = &locations[server->location_count++];
    location->exact = exact;
    location->pos = node->name.pos;
    conf__proxy_tls_defaults(&location->proxy_tls);
    location->path = conf__strdup(state, &path->pos, path->text);
    if (location->path == NULL)
        return -1;

    state->location = location;
    int rc = conf__apply_block(state, node, CONF_LOCATION);
    state->location = NULL;
    if (rc != 0)
        return -1;
    if (location->handler == CONF_HANDLER_NONE)
        return conf__error_at(state->error, &node->name.pos,
                              "location \"%s\" has no \"return\" or \"proxy_pass\"", path->text);
    return conf__proxy_check_location(state, location, node);
}

/* return CODE ["TEXT"] */
static int apply_return(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *code = &node->args[0];
    if (location->handler == CONF_HANDLER_PROXY)
        return conf__error_at(state->error, &node->name.pos,
                              "\"return\" cannot be combined with \"proxy_pass\" in one location");
    /* A 1xx status never ends an exchange: the client would wait for the
     * final response. */
    if (conf__parse_uint(code->text, &location->return_code) != 0 || location->return_code < 200 ||
        location->return_code > 599)
        return conf__error_at(state->error, &code->pos,
                              "invalid status code \"%s\" (expected 200 to 599)", code->text);
    location->handler = CONF_HANDLER_RETURN;
    if (node->arg_count == 1)
        return 0;
    /* A redirect's text becomes its Location line: a CR or LF in it would
     * start header lines of its own. */
    unsigned c = location->return_code;
    bool redirect = c == 301 || c == 302 || c == 303 || c == 307 || c == 308;
    for (const char *p = node->args[1].text; redirect && *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return conf__error_at(state->error, &node->args[1].pos,
                                  "a redirect target cannot hold control characters");
    location->return_text = conf__strdup(state, &node->args[1].pos, node->args[1].text);
    return location->return_text != NULL ? 0 : -1;
}

/* ------------------------------------------------------------------ finish */

/* Admin and server listeners must not share an address: under reuseport
 * both binds would succeed and split the connections between them. */
static int check_admin_listens(struct conf_state *state)
{
    const struct conf_config *config = state->config;
    if (state->admin_node == NULL)
        return 0;
    for (size_t i = 0; i < state->admin_node->child_count; i++) {
        const struct conf_arg *address = &state->admin_node->children[i].args[0];
        for (size_t j = 0; j < config->server_count; j++) {
            for (size_t k = 0; k < config->servers[j].listen_count; k++) {
                const struct conf_listen *listen = &config->servers[j].listens[k];
                if (!conf_same_address(address->text, listen->address))
                    continue;
                char where[300];
                return conf__error_at(
                    state->error, &address->pos,
                    "admin listen \"%s\" is also a server's listen (at %s)", address->text,
                    conf__where(where, sizeof(where), &address->pos, &listen->pos));
            }
        }
    }
    return 0;
}

int conf__http_finish(struct conf_state *state)
{
    struct conf_config *config = state->config;
    /* Settled here, once the whole file is read, so that a top-level
     * setting reaches every server that does not set its own, whether it
     * is written before or after the server. */
    for (size_t i = 0; i < config->server_count; i++) {
        for (const struct conf_directive *d = conf__http_directives; d->name != NULL; d++)
            if (d->apply == apply_http_setting &&
                find_child(state->server_nodes[i], d->name) == NULL)
                copy_setting(&config->servers[i].http, &config->http, d->data);
    }
    return check_admin_listens(state);
}

/* One directive per entry: a table reads better than what the formatter makes of it. */
/* clang-format off */
#define HTTP_SETTING(setting)                                                                      \
    {.name = #setting, .contexts = CONF_MAIN | CONF_SERVER, .min_args = 1, .max_args = 1,          \
     .apply = apply_http_setting, .data = &setting}
#define TLS_SETTING(setting)                                                                       \
    {.name = #setting, .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,                      \
     .apply = apply_tls_setting, .data = &setting}

const struct conf_directive conf__http_directives[] = {
    HTTP_SETTING(client_header_timeout),
    HTTP_SETTING(client_body_timeout),
    HTTP_SETTING(send_timeout),
    HTTP_SETTING(keepalive_timeout),
    HTTP_SETTING(keepalive_requests),
    HTTP_SETTING(client_max_header_size),
    HTTP_SETTING(client_max_headers),
    HTTP_SETTING(client_max_body_size),
    HTTP_SETTING(proxy_connect_timeout),
    HTTP_SETTING(proxy_read_timeout),
    HTTP_SETTING(proxy_send_timeout),
    {.name = "server", .contexts = CONF_MAIN, .block = true, .repeat = true,
     .apply = apply_server},
    {.name = "listen", .contexts = CONF_SERVER, .min_args = 1, .max_args = 3, .repeat = true,
     .apply = apply_listen},
    {.name = "server_name", .contexts = CONF_SERVER, .min_args = 1, .max_args = CONF_ARGS_MANY,
     .apply = apply_server_name},
    {.name = "tls_certificate", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_tls_certificate},
    {.name = "tls_certificate_key", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_tls_certificate_key},
    {.name = "tls_protocols", .contexts = CONF_SERVER, .min_args = 1, .max_args = CONF_ARGS_MANY,
     .apply = apply_tls_protocols},
    {.name = "tls_ciphers", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_tls_ciphers},
    {.name = "tls_ciphersuites", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_tls_ciphers},
    TLS_SETTING(tls_session_tickets),
    TLS_SETTING(tls_session_ticket_rotation),
    {.name = "tls_session_cache", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_tls_session_cache},
    TLS_SETTING(tls_session_timeout),
    TLS_SETTING(tls_handshake_timeout),
    TLS_SETTING(tls_ktls),
    {.name = "tls_client_certificate", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_tls_client_certificate},
    {.name = "tls_verify_client", .contexts = CONF_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_tls_verify_client},
    {.name = "location", .contexts = CONF_SERVER, .min_args = 1, .max_args = 2, .block = true,
     .repeat = true, .apply = apply_location},
    {.name = "return", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 2,
     .apply = apply_return},
    {.name = NULL},
};
/* clang-format on */
