/*
 * http_directives.c: the HTTP side of the config: client limits and
 * timeouts (top level, overridable per server), server blocks with their
 * listen addresses and names, locations and `return`.  A server's TLS
 * settings are in tls_directives.c.
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

/* ------------------------------------------------------------------ server */

static bool valid_server_name(const char *name)
{
    const char *p = name;
    size_t len = strlen(name);
    /* "*.example.com" or "www.example.*", not both */
    if (strncmp(p, "*.", 2) == 0)
        p += 2;
    else if (len > 2 && strcmp(name + len - 2, ".*") == 0)
        len -= 2;
    if (*p == '\0')
        return false;
    for (; p < name + len; p++) {
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
    const struct conf_node *directive = conf__find_child(server_node, "server_name");
    size_t i = 0;
    /* nginx's ".example.com" stands for "example.com" and "*.example.com" */
    while (strcasecmp(directive->args[i].text, name) != 0 &&
           !(directive->args[i].text[0] == '.' &&
             (strcasecmp(directive->args[i].text + 1, name) == 0 ||
              (name[0] == '*' && strcasecmp(directive->args[i].text, name + 1) == 0))))
        i++;
    assert(i < directive->arg_count);
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
    if (listen->http2 != theirs->http2)
        return conf__error_at(state->error, &listen->pos, "listen \"%s\" is %s here but %s at %s",
                              listen->address, listen->http2 ? "http2" : "not http2",
                              theirs->http2 ? "http2" : "not http2",
                              conf__where(where, sizeof(where), &listen->pos, &theirs->pos));
    if (listen->proxy_protocol != theirs->proxy_protocol)
        return conf__error_at(state->error, &listen->pos, "listen \"%s\" is %s here but %s at %s",
                              listen->address,
                              listen->proxy_protocol ? "proxy_protocol" : "not proxy_protocol",
                              theirs->proxy_protocol ? "proxy_protocol" : "not proxy_protocol",
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

/* The key of a server name on one address: the address's index and the
 * name in lower case (names are case-insensitive).  Malloc'd; NULL when out
 * of memory. */
static char *name_key(size_t address_index, const char *name, size_t *len)
{
    size_t name_len = strlen(name);
    char *key = malloc(sizeof(address_index) + name_len);
    if (key == NULL)
        return NULL;
    memcpy(key, &address_index, sizeof(address_index));
    for (size_t i = 0; i < name_len; i++)
        key[sizeof(address_index) + i] =
            name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] - 'A' + 'a') : name[i];
    *len = sizeof(address_index) + name_len;
    return key;
}

static size_t earlier(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* The first earlier server that `listen` of server `index` conflicts with
 * (as check_listen_conflict() sees it), or SIZE_MAX: from what the earlier
 * servers left on the address, not by comparing with each of them. */
static int first_conflict(struct conf_state *state, size_t index, const struct conf_listen *listen,
                          size_t *out)
{
    const struct conf_server *server = &state->config->servers[index];
    const struct conf_address_use *use = &state->address_uses[listen->address_index];
    size_t found = SIZE_MAX;
    if (use->first_server != SIZE_MAX) {
        const struct conf_listen *first =
            &state->config->servers[use->first_server].listens[use->first_listen];
        if (first->tls != listen->tls || first->http2 != listen->http2 ||
            first->proxy_protocol != listen->proxy_protocol)
            found = use->first_server; /* every earlier one agrees with the first */
    }
    if (listen->default_server)
        found = earlier(found, use->default_server);
    if (listen->has_socket_options)
        found = earlier(found, use->options_server);
    if (server->server_name_count == 0)
        found = earlier(found, use->nameless_server);
    for (size_t i = 0; i < server->server_name_count; i++) {
        size_t len, other;
        char *key = name_key(listen->address_index, server->server_names[i], &len);
        if (key == NULL)
            return conf__error_at(state->error, &listen->pos, "out of memory");
        if (conf__index_find(&state->names, key, len, &other))
            found = earlier(found, other);
        free(key);
    }
    *out = found;
    return 0;
}

/* Records what server `index`, checked, leaves on its addresses. */
static int note_server(struct conf_state *state, size_t index)
{
    const struct conf_server *server = &state->config->servers[index];
    for (size_t i = 0; i < server->listen_count; i++) {
        const struct conf_listen *listen = &server->listens[i];
        struct conf_address_use *use = &state->address_uses[listen->address_index];
        if (use->first_server == SIZE_MAX) {
            use->first_server = index;
            use->first_listen = i;
        }
        if (listen->default_server)
            use->default_server = index;
        if (listen->has_socket_options)
            use->options_server = index;
        if (server->server_name_count == 0 && use->nameless_server == SIZE_MAX)
            use->nameless_server = index;
        for (size_t n = 0; n < server->server_name_count; n++) {
            size_t len;
            char *key = name_key(listen->address_index, server->server_names[n], &len);
            int rc = key != NULL ? conf__index_add(&state->names, key, len, index, NULL) : -ENOMEM;
            free(key);
            if (rc < 0)
                return conf__error_at(state->error, &listen->pos, "out of memory");
        }
    }
    return 0;
}

/* A quic listen: its server's certificate is the one its QUIC handshakes
 * offer to a client whose SNI names the server.  Several servers may
 * share a quic address, picked by SNI and :authority as on a TLS one. */
static int check_quic_listen(struct conf_state *state, const struct conf_server *server,
                             const struct conf_listen *listen)
{
    if (server->tls.certificate_count == 0)
        return conf__error_at(state->error, &listen->pos,
                              "listen \"%s\" quic needs a certificate: the server has no "
                              "\"tls_certificate\"",
                              listen->address);
    return 0;
}

static int check_server(struct conf_state *state, size_t index)
{
    const struct conf_server *server = &state->config->servers[index];
    if (server->listen_count == 0)
        return conf__error_at(state->error, &server->pos, "server has no \"listen\"");
    if (conf__tls_check_server(state, index) != 0)
        return -1;

    for (size_t i = 0; i < server->listen_count; i++) {
        const struct conf_listen *listen = &server->listens[i];
        /* A quic address's servers are checked as a TCP one's are: one
         * default_server, no name twice. */
        if (listen->quic && check_quic_listen(state, server, listen) != 0)
            return -1;
        size_t j = SIZE_MAX;
        if (first_conflict(state, index, listen, &j) != 0)
            return -1;
        if (j == SIZE_MAX)
            continue;
        const struct conf_server *other = &state->config->servers[j];
        for (size_t k = 0; k < other->listen_count; k++)
            if (other->listens[k].address_index == listen->address_index &&
                check_listen_conflict(state, index, listen, j, &other->listens[k]) != 0)
                return -1;
        assert(false); /* first_conflict() found one */
    }
    return note_server(state, index);
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
    /* Every server gets them, tls or not: the daemon reads them for the
     * tls addresses only.  verify_client is settled by
     * conf__tls_check_server(), once it is known whether the block names a
     * CA file. */
    server->tls.settings = TLS_SERVER_CONF_DEFAULT;

    state->server = server;
    int rc = conf__apply_block(state, node, CONF_SERVER);
    state->server = NULL;
    conf__index_free(&state->locations);
    if (rc != 0)
        return -1;
    conf__nginx_server_http2(state, node, server);
    conf__nginx_server_http3(state, node, server);
    return check_server(state, index);
}

/* nginx's listen parameters that are not corral's: 0 when accepted
 * without effect, -1 with the error written, 1 when `arg` is none. */
static int nginx_listen_parameter(struct conf_state *state, const struct conf_arg *arg)
{
    const char *text = arg->text;
    /* corral binds each address it listens on by itself, and its wakeup
     * mode decides on SO_REUSEPORT; a [::] listen is IPv6 only */
    if (strcmp(text, "reuseport") == 0 || strcmp(text, "bind") == 0 ||
        strcmp(text, "ipv6only=on") == 0)
        return 0;
    if (strcmp(text, "ipv6only=off") == 0)
        return conf__error_at(state->error, &arg->pos,
                              "\"ipv6only=off\" is nginx's: corral's [::] listens take IPv6 "
                              "only; add a listen on 0.0.0.0 for IPv4");
    static const char *const socket_options[] = {
        "so_keepalive=", "fastopen=", "rcvbuf=", "sndbuf=", "setfib=", "accept_filter="};
    for (size_t i = 0; i < sizeof(socket_options) / sizeof(socket_options[0]); i++)
        if (strncmp(text, socket_options[i], strlen(socket_options[i])) == 0)
            return conf__error_at(state->error, &arg->pos,
                                  "\"%.*s\" is nginx's: corral sets no such socket option (it "
                                  "has deferred and backlog=N); remove it",
                                  (int)strlen(socket_options[i]) - 1, text);
    return 1;
}

/* One listen parameter: a flag (tls, http2, default_server, deferred,
 * proxy_protocol) or backlog=N. */
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
    int nginx = nginx_listen_parameter(state, arg);
    if (nginx <= 0)
        return nginx;
    /* "ssl" is nginx's name of tls, "default" an old one of default_server */
    bool *flag = strcmp(arg->text, "tls") == 0 || strcmp(arg->text, "ssl") == 0 ? &listen->tls
                 : strcmp(arg->text, "http2") == 0                              ? &listen->http2
                 : strcmp(arg->text, "default_server") == 0 || strcmp(arg->text, "default") == 0
                     ? &listen->default_server
                 : strcmp(arg->text, "deferred") == 0       ? &listen->deferred
                 : strcmp(arg->text, "proxy_protocol") == 0 ? &listen->proxy_protocol
                 : strcmp(arg->text, "quic") == 0           ? &listen->quic
                                                            : NULL;
    if (flag == NULL)
        return conf__error_at(state->error, &arg->pos,
                              "unknown listen parameter \"%s\" (expected tls, http2, quic, "
                              "default_server, deferred, proxy_protocol or backlog=N)",
                              arg->text);
    if (*flag)
        return conf__error_at(state->error, &arg->pos, "duplicate parameter \"%s\"", arg->text);
    *flag = true;
    if (flag == &listen->deferred)
        listen->has_socket_options = true;
    return 0;
}

/* listen ADDRESS [tls] [http2] [quic] [default_server] [deferred] [proxy_protocol]
 * [backlog=N] */
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
    if (parsed.quic &&
        (parsed.tls || parsed.http2 || parsed.proxy_protocol || parsed.has_socket_options))
        return conf__error_at(state->error, &address->pos,
                              "listen \"%s\" quic: a UDP socket for HTTP/3, whose TLS is QUIC's; "
                              "tls, http2, proxy_protocol, deferred and backlog are TCP's",
                              address->text);
    /* Each distinct address gets an index, the same for all its listens,
     * which the checks between servers and the daemon's sites use. */
    struct conf_config *config = state->config;
    size_t server_index = (size_t)(server - config->servers);
    struct conf_address_key key;
    if (conf__address_key(address->text, &key) != 0) /* conf__arg_address() read it */
        return conf__error_at(state->error, &address->pos, "invalid listen address");
    if (parsed.quic) {
        /* A UDP port is not the TCP port of the same number: its own index. */
        if (strncmp(address->text, "unix:", 5) == 0 || key.len >= sizeof(key.bytes))
            return conf__error_at(state->error, &address->pos,
                                  "listen \"%s\" quic: QUIC listens on an IP address",
                                  address->text);
        key.bytes[key.len++] = 'q';
    }
    int added = conf__index_add(&state->addresses, key.bytes, key.len, config->listen_address_count,
                                &parsed.address_index);
    if (added < 0)
        return conf__error_at(state->error, &address->pos, "out of memory");
    if (added == 0) {
        struct conf_address_use *uses = conf__grow(state, &address->pos, state->address_uses,
                                                   config->listen_address_count, sizeof(*uses));
        if (uses == NULL)
            return -1;
        state->address_uses = uses;
        parsed.address_index = config->listen_address_count++;
        uses[parsed.address_index] = (struct conf_address_use){
            .last_server = SIZE_MAX,
            .first_server = SIZE_MAX,
            .default_server = SIZE_MAX,
            .options_server = SIZE_MAX,
            .nameless_server = SIZE_MAX,
        };
    }
    struct conf_address_use *use = &state->address_uses[parsed.address_index];
    if (use->last_server == server_index) {
        char where[300];
        return conf__error_at(state->error, &address->pos, "duplicate listen \"%s\" (first at %s)",
                              address->text,
                              conf__where(where, sizeof(where), &address->pos, &use->last_pos));
    }
    use->last_server = server_index;
    use->last_pos = parsed.pos;
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

/* nginx's ".example.com", which stands for two names. */
static bool server_name_dotted(const char *name)
{
    return name[0] == '.' && name[1] != '.' && name[1] != '\0';
}

/* server_name NAME...: exact names, "*.example.com" and "www.example.*"
 * wildcards, "~REGEX" names; in an HTTP server or a stream server (which
 * keeps them in the same fields). */
static int apply_server_name(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream_server *stream = state->config->stream.current;
    char ***server_names = stream != NULL ? &stream->server_names : &state->server->server_names;
    struct conf_pos **server_name_pos =
        stream != NULL ? &stream->server_name_pos : &state->server->server_name_pos;
    size_t *server_name_count =
        stream != NULL ? &stream->server_name_count : &state->server->server_name_count;
    size_t names = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        const char *name = node->args[i].text;
        /* nginx's "" (requests without a Host) is what the address's
         * default server answers in corral */
        if (name[0] == '\0')
            continue;
        /* A regex, compiled (and its errors reported) with the sites. */
        if (name[0] == '~') {
            if (name[1] == '\0')
                return conf__error_at(state->error, &node->args[i].pos, "empty server name regex");
            names++;
            continue;
        }
        bool dotted = server_name_dotted(name);
        if (!valid_server_name(dotted ? name + 1 : name) ||
            (dotted && (strncmp(name + 1, "*.", 2) == 0 || name[strlen(name) - 1] == '*')))
            return conf__error_at(state->error, &node->args[i].pos,
                                  "invalid server name \"%s\" (expected a host name, "
                                  "*.domain, name.*, .domain or ~REGEX)",
                                  name);
        names += dotted ? 2 : 1;
    }
    if (names == 0)
        return 0;
    /* One server_name per server (the entry does not repeat). */
    assert(*server_names == NULL);
    *server_name_count = 0;
    *server_names = calloc(names, sizeof(**server_names));
    *server_name_pos = calloc(names, sizeof(**server_name_pos));
    if (*server_names == NULL || *server_name_pos == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    for (size_t i = 0; i < node->arg_count; i++) {
        const char *name = node->args[i].text;
        if (name[0] == '\0')
            continue;
        /* ".example.com": "example.com" and "*.example.com", as in nginx;
         * as many names as counted above */
        bool dotted = server_name_dotted(name);
        for (int part = dotted ? 0 : 1; part < 2; part++) {
            char *copy = NULL;
            if (part == 0 ? asprintf(&copy, "*%s", name) < 0
                          : (copy = strdup(name + dotted)) == NULL)
                return conf__error_at(state->error, &node->args[i].pos, "out of memory");
            assert(*server_name_count < names);
            (*server_name_pos)[*server_name_count] = node->args[i].pos;
            (*server_names)[(*server_name_count)++] = copy;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- location */

/* location [=|~|~*|^~] PATH { ... } */
static int apply_location(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    (void)directive;
    struct conf_server *server = state->server;
    const struct conf_arg *path = &node->args[node->arg_count - 1];
    const char *modifier = node->arg_count == 2 ? node->args[0].text : "";
    bool exact = strcmp(modifier, "=") == 0, no_regex = strcmp(modifier, "^~") == 0;
    bool caseless = strcmp(modifier, "~*") == 0, regex = caseless || strcmp(modifier, "~") == 0;
    if (node->arg_count == 2 && !exact && !no_regex && !regex)
        return conf__error_at(state->error, &node->args[0].pos,
                              "unknown location modifier \"%s\" (expected =, ~, ~* or ^~)",
                              modifier);
    /* "@name": a named location, which only error_page reaches. */
    bool named = node->arg_count == 1 && path->text[0] == '@' && path->text[1] != '\0';
    if (!regex && !named && path->text[0] != '/')
        return conf__error_at(state->error, &path->pos,
                              "location path must start with \"/\", got \"%s\"", path->text);
    if (regex && path->text[0] == '\0')
        return conf__error_at(state->error, &path->pos, "empty location regex");
    /* The kind and the path: "^~ /a" and "/a" are the same prefix, as in
     * nginx. */
    size_t path_len = strlen(path->text);
    char *key = malloc(path_len + 1);
    if (key == NULL)
        return conf__error_at(state->error, &path->pos, "out of memory");
    key[0] = (char)('0' + exact + 2 * regex + 4 * caseless);
    memcpy(key + 1, path->text, path_len);
    size_t first;
    int added =
        conf__index_add(&state->locations, key, path_len + 1, server->location_count, &first);
    free(key);
    if (added < 0)
        return conf__error_at(state->error, &path->pos, "out of memory");
    if (added == 1) {
        char where[300];
        return conf__error_at(
            state->error, &path->pos, "duplicate location \"%s%s%s\" (first at %s)", modifier,
            node->arg_count == 2 ? " " : "", path->text,
            conf__where(where, sizeof(where), &path->pos, &server->locations[first].pos));
    }
    struct conf_location *locations = conf__grow(state, &node->name.pos, server->locations,
                                                 server->location_count, sizeof(*locations));
    if (locations == NULL)
        return -1;
    server->locations = locations;
    struct conf_location *location = &locations[server->location_count++];
    location->exact = exact;
    location->no_regex = no_regex;
    location->regex = regex;
    location->caseless = caseless;
    location->path_pos = path->pos;
    location->pos = node->name.pos;
    location->path = conf__strdup(state, &path->pos, path->text);
    if (location->path == NULL)
        return -1;

    state->location = location;
    int rc = conf__apply_block(state, node, CONF_LOCATION);
    state->location = NULL;
    if (rc != 0)
        return -1;
    /* One with none of return, proxy_pass and rewrite serves files, as
     * nginx's: the static module's check wants a root for it. */
    /* nginx's return is a step of the location's script, which answers
     * whether an if before it held or not: a handler in an if's block
     * would never get a request there. */
    for (size_t i = 0; location->content != NULL && strcmp(location->content, "return") == 0 &&
                       i < location->nested_count;
         i++)
        if (location->nested[i].content != NULL) {
            const struct conf_pos *at = &location->nested[i].content_pos;
            char where[300];
            return conf__error_at(state->error, at,
                                  "\"%s\" inside \"if\" never gets a request: the location's "
                                  "\"return\" (%s) answers first, as in nginx",
                                  location->nested[i].content,
                                  conf__where(where, sizeof(where), at, &location->content_pos));
        }
    return 0;
}

int conf__apply_nested(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive, unsigned context)
{
    struct conf_location *location = state->location;
    assert(location != NULL && state->enclosing == NULL); /* no if holds an if */
    struct conf_location *nested = conf__grow(state, &node->name.pos, location->nested,
                                              location->nested_count, sizeof(*nested));
    if (nested == NULL)
        return -1;
    location->nested = nested;
    /* The array grows only from here, once this block is applied: the
     * pointer holds while it is. */
    struct conf_location *own = &nested[location->nested_count++];
    own->exact = location->exact;
    own->no_regex = location->no_regex;
    own->regex = location->regex;
    own->caseless = location->caseless;
    own->path_pos = location->path_pos;
    own->pos = node->name.pos;
    state->enclosing = location;
    state->block = directive;
    state->location = own;
    int rc = conf__apply_block(state, node, context);
    state->location = location;
    state->enclosing = NULL;
    state->block = NULL;
    return rc;
}

/* keepalive_timeout TIME [HEADER_TIME] */
static int apply_keepalive_timeout(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    uint32_t header_ms;
    if (node->arg_count == 2 && conf__arg_duration(state, &node->args[1], &header_ms) != 0)
        return -1;
    return conf__apply_setting(state, node, directive);
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
        if (strcmp(state->admin_node->children[i].name.text, "listen") != 0 ||
            state->admin_node->children[i].arg_count == 0) /* refused already */
            continue;
        const struct conf_arg *address = &state->admin_node->children[i].args[0];
        struct conf_address_key key;
        size_t index;
        if (conf__address_key(address->text, &key) != 0 ||
            !conf__index_find(&state->addresses, key.bytes, key.len, &index))
            continue;
        /* The first server listening there: the servers are all checked. */
        const struct conf_address_use *use = &state->address_uses[index];
        const struct conf_listen *listen =
            &config->servers[use->first_server].listens[use->first_listen];
        char where[300];
        return conf__error_at(
            state->error, &address->pos, "admin listen \"%s\" is also a server's listen (at %s)",
            address->text, conf__where(where, sizeof(where), &address->pos, &listen->pos));
    }
    return 0;
}

int conf__http_finish(struct conf_state *state)
{
    struct conf_config *config = state->config;
    /* Settled here, once the whole file is read, so that a top-level
     * setting reaches every server that does not set its own, whether it
     * is written before or after the server. */
    for (size_t i = 0; i < config->server_count; i++)
        conf__inherit_settings(state, i);
    if (conf__error_pages_check(state) != 0)
        return -1;
    return check_admin_listens(state);
}

/* The limits set one field of struct http_limits (the server's, else the
 * top level's) through conf__apply_setting().  server, listen,
 * server_name, location and return build structure, so they have apply
 * functions.  One directive per entry: a table reads better than what
 * the formatter makes of it. */
/* clang-format off */
#define HTTP_FIELD(base_, type, field) HTTP_FIELD_IN(CONF_MAIN | CONF_SERVER, base_, type, field)
#define HTTP_FIELD_IN(where, base_, type, field) .contexts = where, .min_args = 1, \
    .max_args = 1, .base = base_, CONF_FIELD(type, field)
#define LIMIT(field) HTTP_FIELD(CONF_BASE_LIMITS, struct http_limits, field)
#define HTTP2(field) HTTP_FIELD(CONF_BASE_HTTP2, struct http2_conf, field)

const struct conf_directive conf__http_directives[] = {
    {.name = "client_header_timeout", LIMIT(header_timeout_ms), .kind = CONF_KIND_DURATION},
    {.name = "client_body_timeout", LIMIT(body_timeout_ms), .kind = CONF_KIND_DURATION},
    {.name = "send_timeout", LIMIT(send_timeout_ms), .kind = CONF_KIND_DURATION},
    /* nginx's second argument, a Keep-Alive header's timeout, is checked
     * and unused: corral sends no Keep-Alive header */
    {.name = "keepalive_timeout", .contexts = CONF_MAIN | CONF_SERVER, .min_args = 1,
     .max_args = 2, .base = CONF_BASE_LIMITS, CONF_FIELD(struct http_limits, keepalive_timeout_ms),
     .kind = CONF_KIND_DURATION, .apply = apply_keepalive_timeout},
    {.name = "keepalive_requests", LIMIT(keepalive_requests), .kind = CONF_KIND_COUNT, .min = 1},
    /* A header section must fit its request line at least; 0 would refuse
     * every request.  A connection holds up to this much of a head. */
    {.name = "client_max_header_size", LIMIT(max_header_size), .kind = CONF_KIND_SIZE, .min = 1,
     .max = HTTP_MAX_HEADER_SIZE_MAX},
    {.name = "client_max_headers", LIMIT(max_headers), .kind = CONF_KIND_COUNT, .min = 1},
    {.name = "client_max_body_size", LIMIT(max_body_size), .kind = CONF_KIND_SIZE},
    /* HTTP/2 (2^31-1: the largest window RFC 9113 6.9.2 allows; a header
     * list smaller than 1k refuses ordinary requests). */
    {.name = "http2_max_concurrent_streams", HTTP2(max_concurrent_streams),
     .kind = CONF_KIND_COUNT, .min = 1, .max = 65536},
    {.name = "http2_max_header_list_size", HTTP2(max_header_list_size), .kind = CONF_KIND_SIZE,
     .min = 1024, .max = 16 * 1024 * 1024},
    {.name = "http2_initial_window_size", HTTP2(initial_window_size), .kind = CONF_KIND_SIZE,
     .min = 1024, .max = 2147483647},
    {.name = "http2_idle_timeout", HTTP2(idle_timeout_ms), .kind = CONF_KIND_DURATION},
    {.name = "http2_max_resets", HTTP2(max_resets), .kind = CONF_KIND_COUNT, .min = 1},
    {.name = "http2_reset_interval", HTTP2(reset_interval_ms), .kind = CONF_KIND_DURATION,
     .min = 1},
    {.name = "http2_stream_buffer_size", HTTP2(stream_buffer_size), .kind = CONF_KIND_SIZE,
     .min = 4096, .max = 16 * 1024 * 1024},
    {.name = "server", .contexts = CONF_MAIN, .block = true, .repeat = true,
     .apply = apply_server},
    {.name = "listen", .contexts = CONF_SERVER, .min_args = 1, .max_args = 6, .repeat = true,
     .apply = apply_listen},
    {.name = "server_name", .contexts = CONF_SERVER | CONF_STREAM_SERVER, .min_args = 1, .max_args = CONF_ARGS_MANY,
     .apply = apply_server_name},
    {.name = "location", .contexts = CONF_SERVER, .min_args = 1, .max_args = 2, .block = true,
     .repeat = true, .apply = apply_location},
    {.name = NULL},
};
/* clang-format on */
