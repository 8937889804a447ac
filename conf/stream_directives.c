/*
 * stream_directives.c: the stream block (nginx's stream module): its
 * upstream blocks (upstream_directives.c's), its server blocks with their
 * listens and proxy_pass, and the proxy settings, which a server takes
 * from the stream block where it does not write them.
 */
#include "registry.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The settings a directive writes: the server block's being applied, else
 * the stream block's. */
static struct stream_conf *target(struct conf_state *state, unsigned **set)
{
    struct conf_stream *stream = &state->config->stream;
    if (stream->current != NULL) {
        *set = &stream->current->set;
        return &stream->current->conf;
    }
    *set = &stream->set;
    return &stream->conf;
}

static int apply_duration(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const struct conf_arg *arg = &node->args[0];
    uint32_t ms;
    if (conf_parse_duration(arg->text, &ms) != 0)
        return conf__error_at(state->error, &arg->pos, "invalid duration \"%s\"", arg->text);
    const char *name = directive->name;
    if (strcmp(name, "proxy_connect_timeout") == 0) {
        if (ms == 0)
            return conf__error_at(state->error, &arg->pos, "\"%s\" must be more than 0", name);
        conf->connect_timeout_ms = ms;
        *set |= CONF_STREAM_CONNECT_TIMEOUT;
    } else if (strcmp(name, "proxy_timeout") == 0) {
        if (ms == 0)
            return conf__error_at(state->error, &arg->pos, "\"%s\" must be more than 0", name);
        conf->timeout_ms = ms;
        *set |= CONF_STREAM_TIMEOUT;
    } else {
        conf->next_upstream_timeout_ms = ms;
        *set |= CONF_STREAM_NEXT_TIMEOUT;
    }
    return 0;
}

static int parse_switch(struct conf_state *state, const struct conf_arg *arg, bool *out)
{
    if (strcmp(arg->text, "on") == 0)
        *out = true;
    else if (strcmp(arg->text, "off") == 0)
        *out = false;
    else
        return conf__error_at(state->error, &arg->pos, "expected \"on\" or \"off\", got \"%s\"",
                              arg->text);
    return 0;
}

static int apply_switch(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const char *name = directive->name;
    bool *field = strcmp(name, "proxy_next_upstream") == 0 ? &conf->next_upstream
                  : strcmp(name, "proxy_protocol") == 0    ? &conf->proxy_protocol
                                                           : &conf->preread;
    if (parse_switch(state, &node->args[0], field) != 0)
        return -1;
    *set |= field == &conf->next_upstream    ? CONF_STREAM_NEXT_UPSTREAM
            : field == &conf->proxy_protocol ? CONF_STREAM_PROXY_PROTOCOL
                                             : CONF_STREAM_PREREAD;
    return 0;
}

static int apply_tries(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    (void)directive;
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const struct conf_arg *arg = &node->args[0];
    unsigned n;
    if (conf_parse_uint(arg->text, &n) != 0 || n > 1000)
        return conf__error_at(state->error, &arg->pos,
                              "\"proxy_next_upstream_tries\" must be from 0 to 1000, got \"%s\"",
                              arg->text);
    conf->next_upstream_tries = n;
    *set |= CONF_STREAM_NEXT_TRIES;
    return 0;
}

static int apply_buffer_size(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    (void)directive;
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const struct conf_arg *arg = &node->args[0];
    size_t size;
    if (conf_parse_size(arg->text, &size) != 0 || size < STREAM_BUFFER_MIN ||
        size > STREAM_BUFFER_MAX)
        return conf__error_at(state->error, &arg->pos,
                              "\"proxy_buffer_size\" must be from 1k to 16m, got \"%s\"",
                              arg->text);
    conf->buffer_size = size;
    *set |= CONF_STREAM_BUFFER_SIZE;
    return 0;
}

/* proxy_responses N and proxy_requests N: UDP sessions' counts. */
static int apply_count(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const struct conf_arg *arg = &node->args[0];
    unsigned n;
    if (conf_parse_uint(arg->text, &n) != 0 || n > 1000000)
        return conf__error_at(state->error, &arg->pos,
                              "\"%s\" must be from 0 to 1000000, got \"%s\"", directive->name,
                              arg->text);
    if (strcmp(directive->name, "proxy_responses") == 0) {
        conf->responses = n;
        *set |= CONF_STREAM_RESPONSES;
    } else {
        conf->requests = n;
        *set |= CONF_STREAM_REQUESTS;
    }
    return 0;
}

/* allow ADDRESS|CIDR|all; and deny the same, in one list, in order. */
static int apply_rule(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    unsigned *set;
    struct stream_conf *conf = target(state, &set);
    const struct conf_arg *arg = &node->args[0];
    struct access_net net;
    char message[256];
    if (access_net_parse(arg->text, true, &net, message, sizeof(message)) != 0)
        return conf__error_at(state->error, &arg->pos, "%s", message);
    if (access_rule_add(&conf->access, strcmp(directive->name, "allow") == 0, &net) != 0)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    return 0;
}

/* limit_conn ZONE N: the zone is a limit_conn_zone of the top level. */
static int apply_limit_conn(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    char **zone = stream->current != NULL ? &stream->current->limit_zone : &stream->limit_zone;
    unsigned *max = stream->current != NULL ? &stream->current->limit_conn : &stream->limit_conn;
    struct conf_pos *pos =
        stream->current != NULL ? &stream->current->limit_pos : &stream->limit_pos;
    const struct conf_arg *n = &node->args[1];
    unsigned value;
    if (conf_parse_uint(n->text, &value) != 0 || value == 0 || value > 1000000)
        return conf__error_at(state->error, &n->pos,
                              "\"limit_conn\" must be from 1 to 1000000, got \"%s\"", n->text);
    *zone = conf__strdup(state, &node->args[0].pos, node->args[0].text);
    *max = value;
    *pos = node->args[0].pos;
    return *zone == NULL ? -1 : 0;
}

/* listen ADDRESS [udp] [tls|ssl] [proxy_protocol] [default_server] */
static int apply_listen(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream_server *server = state->config->stream.current;
    const struct conf_arg *address = &node->args[0];
    struct sockaddr_storage addr;
    socklen_t len;
    if (corral_parse_address(address->text, &addr, &len) != 0)
        return conf__error_at(state->error, &address->pos, "invalid address \"%s\"", address->text);
    if (addr.ss_family == AF_UNIX)
        return conf__error_at(state->error, &address->pos,
                              "a stream listens on TCP addresses only, got \"%s\"", address->text);
    struct conf_stream_listen listen = {.pos = node->name.pos};
    for (size_t i = 1; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (strcmp(arg->text, "proxy_protocol") == 0)
            listen.proxy_protocol = true;
        else if (strcmp(arg->text, "udp") == 0)
            listen.udp = true;
        else if (strcmp(arg->text, "tls") == 0 || strcmp(arg->text, "ssl") == 0)
            listen.tls = true;
        else if (strcmp(arg->text, "default_server") == 0 || strcmp(arg->text, "default") == 0)
            listen.default_server = true;
        else
            return conf__error_at(state->error, &arg->pos,
                                  "invalid listen parameter \"%s\" (expected udp, tls, "
                                  "proxy_protocol or default_server)",
                                  arg->text);
    }
    if (listen.udp && listen.proxy_protocol)
        return conf__error_at(state->error, &node->name.pos,
                              "a udp listen takes no PROXY header (\"proxy_protocol\")");
    if (listen.udp && listen.tls)
        return conf__error_at(state->error, &node->name.pos,
                              "a udp listen has no TLS (DTLS is not supported)");
    struct conf_stream_listen *listens =
        conf__grow(state, &node->name.pos, server->listens, server->listen_count, sizeof(*listens));
    if (listens == NULL)
        return -1;
    server->listens = listens;
    listen.address = conf__strdup(state, &address->pos, address->text);
    if (listen.address == NULL)
        return -1;
    listens[server->listen_count++] = listen;
    return 0;
}

/* tls_alpn PROTOCOL...: what a tls listen offers by ALPN, most preferred
 * first, kept in ALPN's wire format for OpenSSL. */
static int apply_alpn(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    unsigned char **alpn = stream->current != NULL ? &stream->current->alpn : &stream->alpn;
    size_t *alpn_len = stream->current != NULL ? &stream->current->alpn_len : &stream->alpn_len;
    assert(node->arg_count > 0); /* the directive table asks for one or more */
    size_t len = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        size_t n = strlen(node->args[i].text);
        if (n == 0 || n > 255)
            return conf__error_at(state->error, &node->args[i].pos,
                                  "an ALPN protocol name is 1 to 255 bytes, got \"%s\"",
                                  node->args[i].text);
        len += 1 + n;
    }
    unsigned char *wire = malloc(len);
    if (wire == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    unsigned char *p = wire;
    for (size_t i = 0; i < node->arg_count; i++) {
        size_t n = strlen(node->args[i].text);
        *p++ = (unsigned char)n;
        memcpy(p, node->args[i].text, n);
        p += n;
    }
    free(*alpn);
    *alpn = wire;
    *alpn_len = len;
    return 0;
}

/* proxy_pass UPSTREAM|HOST:PORT */
static int apply_pass(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream_server *server = state->config->stream.current;
    const struct conf_arg *arg = &node->args[0];
    if (strstr(arg->text, "://") != NULL)
        return conf__error_at(state->error, &arg->pos,
                              "a stream's proxy_pass takes an upstream's name or HOST:PORT, "
                              "without a scheme, got \"%s\"",
                              arg->text);
    if (strchr(arg->text + 1, '$') != NULL)
        return conf__error_at(state->error, &arg->pos,
                              "a stream's proxy_pass takes one variable, a map's, alone, got "
                              "\"%s\"",
                              arg->text);
    if (strchr(arg->text, ':') != NULL) {
        struct sockaddr_storage addr;
        socklen_t len;
        if (corral_parse_address(arg->text, &addr, &len) != 0)
            return conf__error_at(state->error, &arg->pos, "invalid address \"%s\"", arg->text);
    }
    server->pass = conf__strdup(state, &arg->pos, arg->text);
    server->pass_pos = arg->pos;
    return server->pass == NULL ? -1 : 0;
}

/* Gives `server` the stream block's value of each setting it does not
 * write (the TLS ones: conf__tls_check_stream()).  Returns 0, or -1 out
 * of memory. */
static int inherit(struct conf_stream_server *server, const struct conf_stream *stream)
{
    struct stream_conf *c = &server->conf;
    const struct stream_conf *p = &stream->conf;
    unsigned set = server->set;
    if (!(set & CONF_STREAM_CONNECT_TIMEOUT))
        c->connect_timeout_ms = p->connect_timeout_ms;
    if (!(set & CONF_STREAM_TIMEOUT))
        c->timeout_ms = p->timeout_ms;
    if (!(set & CONF_STREAM_NEXT_UPSTREAM))
        c->next_upstream = p->next_upstream;
    if (!(set & CONF_STREAM_NEXT_TRIES))
        c->next_upstream_tries = p->next_upstream_tries;
    if (!(set & CONF_STREAM_NEXT_TIMEOUT))
        c->next_upstream_timeout_ms = p->next_upstream_timeout_ms;
    if (!(set & CONF_STREAM_PROXY_PROTOCOL))
        c->proxy_protocol = p->proxy_protocol;
    if (!(set & CONF_STREAM_BUFFER_SIZE))
        c->buffer_size = p->buffer_size;
    if (!(set & CONF_STREAM_PREREAD))
        c->preread = p->preread;
    if (!(set & CONF_STREAM_RESPONSES))
        c->responses = p->responses;
    if (!(set & CONF_STREAM_REQUESTS))
        c->requests = p->requests;
    if (server->alpn == NULL && stream->alpn != NULL) {
        server->alpn = malloc(stream->alpn_len);
        if (server->alpn == NULL)
            return -1;
        memcpy(server->alpn, stream->alpn, stream->alpn_len);
        server->alpn_len = stream->alpn_len;
    }
    /* A list of rules is inherited as a whole, as nginx does. */
    if (c->access.rule_count == 0 && p->access.rule_count > 0) {
        c->access.rules = p->access.rules;
        c->access.rule_count = p->access.rule_count;
        c->access.inherited_rules = true;
    }
    return 0;
}

/* server { ... } in stream */
static int apply_server(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    struct conf_stream_server *servers =
        conf__grow(state, &node->name.pos, stream->servers, stream->server_count, sizeof(*servers));
    if (servers == NULL)
        return -1;
    stream->servers = servers;
    struct conf_stream_server *server = &servers[stream->server_count++];
    server->pos = node->name.pos;
    server->conf = STREAM_CONF_DEFAULT;
    server->tls.settings = TLS_SERVER_CONF_DEFAULT;
    stream->current = server;
    state->stream_node = node;
    int rc = conf__apply_block(state, node, CONF_STREAM_SERVER);
    stream->current = NULL;
    state->stream_node = NULL;
    if (rc != 0)
        return -1;
    if (server->listen_count == 0)
        return conf__error_at(state->error, &node->name.pos,
                              "a stream's server needs a \"listen\"");
    if (server->pass == NULL)
        return conf__error_at(state->error, &node->name.pos,
                              "a stream's server needs a \"proxy_pass\"");
    return 0;
}

/* Whether `name` is an upstream block of the config. */
static bool has_upstream(const struct conf_config *config, const char *name)
{
    for (size_t i = 0; i < config->upstream_count; i++)
        if (strcmp(config->upstreams[i].upstream.name, name) == 0)
            return true;
    return false;
}

/* The stream map `name` (without "$"), or NULL. */
static const struct conf_map *stream_map(const struct conf_stream *stream, const char *name)
{
    for (size_t i = 0; i < stream->map_count; i++)
        if (strcmp(stream->maps[i].name, name) == 0)
            return &stream->maps[i];
    return NULL;
}

/* A stream map reads a stream's variable, and each value names where to
 * go: an upstream block or HOST:PORT. */
static int check_map(struct conf_state *state, const struct conf_map *map)
{
    enum stream_var var;
    if (stream_var_parse(map->source, &var) != 0)
        return conf__error_at(state->error, &map->source_pos,
                              "a stream's map reads $tls_preread_server_name, "
                              "$tls_preread_alpn_protocols (or their $ssl_preread_ names) or "
                              "$remote_addr, got \"%s\"",
                              map->source);
    for (size_t i = 0; i < map->entry_count; i++) {
        const struct conf_map_entry *e = &map->entries[i];
        struct sockaddr_storage addr;
        socklen_t len;
        if (strchr(e->value, ':') != NULL ? corral_parse_address(e->value, &addr, &len) != 0
                                          : !has_upstream(state->config, e->value))
            return conf__error_at(state->error, &e->value_pos,
                                  "a stream's map value is an upstream's name or HOST:PORT, got "
                                  "\"%s\"",
                                  e->value);
    }
    return 0;
}

/* map $SOURCE $NAME { ... } in stream */
static int apply_map(struct conf_state *state, const struct conf_node *node,
                     const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    if (conf__map_apply(state, node, &stream->maps, &stream->map_count) != 0)
        return -1;
    return check_map(state, &stream->maps[stream->map_count - 1]);
}

/* The names that `a` and `b` both have, compared without regard to case,
 * or NULL. */
static const char *shared_name(const struct conf_stream_server *a,
                               const struct conf_stream_server *b)
{
    for (size_t i = 0; i < a->server_name_count; i++)
        for (size_t j = 0; j < b->server_name_count; j++)
            if (strcasecmp(a->server_names[i], b->server_names[j]) == 0)
                return a->server_names[i];
    return NULL;
}

/* `listen` of `server` is on the address of `first`, an earlier listen
 * of `other`: several servers share a TCP address (picked by SNI, with
 * server_name) when they listen alike; a server lists an address once,
 * and a udp address has one server (a datagram names none). */
static int check_shared(struct conf_state *state, const struct conf_stream_server *other,
                        const struct conf_stream_listen *first,
                        const struct conf_stream_server *server,
                        const struct conf_stream_listen *listen)
{
    char where[300];
    conf__where(where, sizeof(where), &listen->pos, &first->pos);
    if (other == server || listen->udp)
        return conf__error_at(state->error, &listen->pos,
                              "duplicate stream listen %s (first at %s)", listen->address, where);
    if (listen->tls != first->tls || listen->proxy_protocol != first->proxy_protocol)
        return conf__error_at(state->error, &listen->pos,
                              "stream listen %s takes other parameters than at %s (servers on "
                              "one address share its tls and proxy_protocol)",
                              listen->address, where);
    if (listen->default_server && first->default_server)
        return conf__error_at(state->error, &listen->pos,
                              "a duplicate default server for %s (first at %s)", listen->address,
                              where);
    const char *name = shared_name(server, other);
    if (name != NULL)
        return conf__error_at(state->error, &listen->pos,
                              "server_name \"%s\" on \"%s\" is already used at %s", name,
                              listen->address, where);
    return 0;
}

/* What the listens of the stream's servers must agree on where they
 * share an address (check_shared()). */
static int check_addresses(struct conf_state *state, const struct conf_stream *stream)
{
    for (size_t s = 0; s < stream->server_count; s++) {
        const struct conf_stream_server *server = &stream->servers[s];
        for (size_t l = 0; l < server->listen_count; l++) {
            const struct conf_stream_listen *listen = &server->listens[l];
            for (size_t t = 0; t <= s; t++) {
                const struct conf_stream_server *other = &stream->servers[t];
                size_t end = t == s ? l : other->listen_count;
                for (size_t k = 0; k < end; k++) {
                    /* TCP and UDP on one address are two listens. */
                    if (conf_same_address(other->listens[k].address, listen->address) &&
                        other->listens[k].udp == listen->udp &&
                        check_shared(state, other, &other->listens[k], server, listen) != 0)
                        return -1;
                }
            }
        }
    }
    return 0;
}

/* The most a match block's send or expect holds. */
#define STREAM_MATCH_TEXT_MAX 4096

/* match NAME { send TEXT; expect TEXT | expect ~ REGEX; } in stream: read
 * here, line by line (its two directives exist nowhere else). */
static int apply_match(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    for (size_t i = 0; i < stream->match_count; i++)
        if (strcmp(stream->matches[i].name, node->args[0].text) == 0) {
            char where[300];
            return conf__error_at(
                state->error, &node->args[0].pos, "duplicate match \"%s\" (first at %s)",
                node->args[0].text,
                conf__where(where, sizeof(where), &node->args[0].pos, &stream->matches[i].pos));
        }
    struct conf_stream_match *matches =
        conf__grow(state, &node->name.pos, stream->matches, stream->match_count, sizeof(*matches));
    if (matches == NULL)
        return -1;
    stream->matches = matches;
    struct conf_stream_match *match = &matches[stream->match_count++];
    *match = (struct conf_stream_match){.pos = node->args[0].pos};
    match->name = conf__strdup(state, &node->args[0].pos, node->args[0].text);
    if (match->name == NULL)
        return -1;
    for (size_t c = 0; c < node->child_count; c++) {
        const struct conf_node *line = &node->children[c];
        const char *name = line->name.text;
        bool send = strcmp(name, "send") == 0;
        if (!send && strcmp(name, "expect") != 0)
            return conf__error_at(state->error, &line->name.pos,
                                  "a match block takes \"send\" and \"expect\", not \"%s\"", name);
        bool regex = !send && line->arg_count == 2 && strcmp(line->args[0].text, "~") == 0;
        if (line->child_count > 0 || line->arg_count != (regex ? 2u : 1u))
            return conf__error_at(state->error, &line->name.pos,
                                  send ? "\"send\" takes one string"
                                       : "\"expect\" takes a string, or \"~\" and a regex");
        const struct conf_arg *text = &line->args[regex ? 1 : 0];
        char **field = send ? &match->send : &match->expect;
        if (*field != NULL)
            return conf__error_at(state->error, &line->name.pos, "duplicate \"%s\"", name);
        size_t len = strlen(text->text);
        if (len == 0 || len > STREAM_MATCH_TEXT_MAX)
            return conf__error_at(state->error, &text->pos, "\"%s\" takes 1 to 4096 bytes, got %zu",
                                  name, len);
        *field = conf__strdup(state, &text->pos, text->text);
        if (*field == NULL)
            return -1;
        if (!send)
            match->expect_regex = regex;
    }
    return 0;
}

/* health_check match=NAME of the config's upstreams: the stream match
 * block's send and expect, which upstream_new() copies. */
static int resolve_matches(struct conf_state *state, const struct conf_stream *stream)
{
    for (size_t i = 0; i < state->config->upstream_count; i++) {
        struct conf_upstream *up = &state->config->upstreams[i];
        if (up->health_match == NULL)
            continue;
        const struct conf_stream_match *match = NULL;
        for (size_t m = 0; m < stream->match_count; m++)
            if (strcmp(stream->matches[m].name, up->health_match) == 0)
                match = &stream->matches[m];
        if (match == NULL)
            return conf__error_at(state->error, &up->health_match_pos,
                                  "no match block \"%s\" in the stream block", up->health_match);
        up->upstream.health.send = match->send;
        up->upstream.health.expect = match->expect;
        up->upstream.health.expect_regex = match->expect_regex;
    }
    return 0;
}

/* stream { ... } */
static int apply_stream(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    struct conf_stream *stream = &state->config->stream;
    stream->present = true;
    stream->conf = STREAM_CONF_DEFAULT;
    stream->tls.settings = TLS_SERVER_CONF_DEFAULT;
    stream->applying = true;
    state->stream_block = node;
    int rc = conf__apply_block(state, node, CONF_STREAM);
    stream->applying = false;
    state->stream_block = NULL;
    if (rc != 0 || conf__tls_check_stream(state, node) != 0)
        return -1;
    for (size_t s = 0; s <= stream->server_count; s++) {
        const struct conf_access_logs *logs =
            s < stream->server_count ? &stream->servers[s].access_logs : &stream->access_logs;
        for (size_t i = 0; i < logs->count; i++)
            if (logs->items[i].format == NULL)
                return conf__error_at(state->error, &logs->items[i].pos,
                                      "a stream's access_log names its log_format (the default "
                                      "format is HTTP's)");
    }
    for (size_t s = 0; s < stream->server_count; s++) {
        struct conf_stream_server *server = &stream->servers[s];
        if (inherit(server, stream) != 0)
            return conf__error_at(state->error, &server->pos, "out of memory");
        for (size_t l = 0; l < server->listen_count; l++)
            if (server->listens[l].tls && server->conf.preread)
                return conf__error_at(state->error, &server->listens[l].pos,
                                      "a tls listen terminates TLS itself: \"tls_preread\" "
                                      "reads a ClientHello that is passed on");
        if (server->pass[0] == '$') {
            if (stream_map(stream, server->pass + 1) == NULL)
                return conf__error_at(state->error, &server->pass_pos,
                                      "no map \"%s\" in the stream block", server->pass);
        } else if (strchr(server->pass, ':') == NULL && !has_upstream(state->config, server->pass))
            return conf__error_at(state->error, &server->pass_pos,
                                  "no upstream \"%s\" (write its upstream block in the stream "
                                  "block, before its use)",
                                  server->pass);
    }
    if (resolve_matches(state, stream) != 0)
        return -1;
    return check_addresses(state, stream);
}

void conf__stream_free(struct conf_stream *stream)
{
    for (size_t s = 0; s < stream->server_count; s++) {
        struct conf_stream_server *server = &stream->servers[s];
        for (size_t l = 0; l < server->listen_count; l++)
            free(server->listens[l].address);
        free(server->listens);
        free(server->pass);
        access_conf_free(&server->conf.access);
        conf__access_logs_free(&server->access_logs);
        free(server->limit_zone);
        conf__tls_free(&server->tls);
        free(server->alpn);
        for (size_t n = 0; n < server->server_name_count; n++)
            free(server->server_names[n]);
        free(server->server_names);
        free(server->server_name_pos);
    }
    free(stream->servers);
    for (size_t m = 0; m < stream->match_count; m++) {
        free(stream->matches[m].name);
        free(stream->matches[m].send);
        free(stream->matches[m].expect);
    }
    free(stream->matches);
    access_conf_free(&stream->conf.access);
    conf__maps_free(stream->maps, stream->map_count);
    conf__access_logs_free(&stream->access_logs);
    free(stream->limit_zone);
    conf__tls_free(&stream->tls);
    free(stream->alpn);
    *stream = (struct conf_stream){0};
}

/* Where the proxy settings may be written: in the stream block, for its
 * servers, or in a server. */
#define STREAM_LEVELS (CONF_STREAM | CONF_STREAM_SERVER)

/* clang-format off */
const struct conf_directive conf__stream_directives[] = {
    {.name = "stream", .contexts = CONF_MAIN, .block = true, .apply = apply_stream},
    {.name = "server", .contexts = CONF_STREAM, .block = true, .repeat = true,
     .apply = apply_server},
    {.name = "listen", .contexts = CONF_STREAM_SERVER, .min_args = 1, .max_args = 5,
     .repeat = true, .apply = apply_listen},
    {.name = "proxy_pass", .contexts = CONF_STREAM_SERVER, .min_args = 1, .max_args = 1,
     .apply = apply_pass},
    {.name = "proxy_connect_timeout", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_duration},
    {.name = "proxy_timeout", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_duration},
    {.name = "proxy_next_upstream", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_switch},
    {.name = "proxy_next_upstream_tries", .contexts = STREAM_LEVELS, .min_args = 1,
     .max_args = 1, .apply = apply_tries},
    {.name = "proxy_next_upstream_timeout", .contexts = STREAM_LEVELS, .min_args = 1,
     .max_args = 1, .apply = apply_duration},
    {.name = "proxy_protocol", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_switch},
    {.name = "proxy_buffer_size", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_buffer_size},
    {.name = "proxy_responses", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_count},
    {.name = "proxy_requests", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_count},
    {.name = "limit_conn", .contexts = STREAM_LEVELS, .min_args = 2, .max_args = 2,
     .apply = apply_limit_conn},
    {.name = "tls_alpn", .contexts = STREAM_LEVELS, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .apply = apply_alpn},
    {.name = "tls_preread", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1,
     .apply = apply_switch},
    {.name = "match", .contexts = CONF_STREAM, .min_args = 1, .max_args = 1, .block = true,
     .repeat = true, .apply = apply_match},
    {.name = "map", .contexts = CONF_STREAM, .min_args = 2, .max_args = 2, .block = true,
     .repeat = true, .apply = apply_map},
    {.name = "allow", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1, .repeat = true,
     .apply = apply_rule},
    {.name = "deny", .contexts = STREAM_LEVELS, .min_args = 1, .max_args = 1, .repeat = true,
     .apply = apply_rule},
    {.name = NULL},
};
/* clang-format on */
