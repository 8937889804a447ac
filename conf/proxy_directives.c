/*
 * proxy_directives.c: what sends a location's requests to an upstream:
 * proxy_pass, the header rewriting around it, retries and TLS towards the
 * upstream (the upstream blocks themselves: upstream_directives.c).  A
 * proxy_pass may name an upstream defined further down, so names are
 * checked at the end.
 */
#include "registry.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The length of a proxy_pass URL's scheme with its "://": 7 for http, 8
 * for https, 0 for anything else. */
static size_t scheme_length(const char *url)
{
    if (strncmp(url, "http://", 7) == 0)
        return 7;
    if (strncmp(url, "https://", 8) == 0)
        return 8;
    return 0;
}

static bool url_is_https(const char *url)
{
    return strncmp(url, "https://", 8) == 0;
}

/* Upstream names cannot contain ":", so http://NAME (an upstream) and
 * http://HOST:PORT (an address) never look alike. */
bool conf__valid_upstream_name(const char *name)
{
    if (*name == '\0')
        return false;
    for (const char *p = name; *p != '\0'; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return false;
    }
    return true;
}

const struct conf_upstream *conf__find_upstream(const struct conf_config *config, const char *name)
{
    for (size_t i = 0; i < config->upstream_count; i++)
        if (strcmp(config->upstreams[i].upstream.name, name) == 0)
            return &config->upstreams[i];
    return NULL;
}

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

/* proxy_next_upstream CONDITION... | off */
static int apply_next_upstream(struct conf_state *state, const struct conf_node *node,
                               const struct conf_directive *directive)
{
    for (size_t i = 0; node->arg_count > 1 && i < node->arg_count; i++)
        if (strcmp(node->args[i].text, "off") == 0)
            return conf__error_at(state->error, &node->args[i].pos,
                                  "\"off\" cannot be combined with other conditions");
    /* nginx's conditions corral lacks */
    for (size_t i = 0; i < node->arg_count; i++) {
        const char *word = node->args[i].text;
        if (strcmp(word, "http_403") == 0 || strcmp(word, "http_404") == 0)
            return conf__error_at(
                state->error, &node->args[i].pos,
                "\"%s\" is nginx's: corral tries the next server on 429, 500, 502, 503 "
                "and 504 answers only",
                word);
        if (strcmp(word, "updating") == 0)
            return conf__error_at(state->error, &node->args[i].pos,
                                  "\"updating\": not in corral yet: caching (see \"cache\" in the "
                                  "roadmap, docs/config.md)");
    }
    if (conf__apply_setting(state, node, directive) != 0)
        return -1;
    struct proxy_conf *proxy = state->location != NULL ? &state->location->proxy
                               : state->server != NULL ? &state->server->http.proxy
                                                       : &state->config->http.proxy;
    proxy->next_upstream |= PROXY_NEXT_WRITTEN;
    return 0;
}

/* proxy_pass http[s]://UPSTREAM | http[s]://HOST:PORT */
static int apply_proxy_pass(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *arg = &node->args[0];
    int scheme = (int)scheme_length(arg->text);
    const char *authority = arg->text + scheme;
    if (scheme == 0 || *authority == '\0')
        return conf__error_at(state->error, &arg->pos,
                              "invalid proxy_pass \"%s\" (expected http[s]://UPSTREAM or "
                              "http[s]://HOST:PORT)",
                              arg->text);
    if (strpbrk(authority, "?#") != NULL)
        return conf__error_at(state->error, &arg->pos,
                              "proxy_pass \"%s\" has a query; give %.*sUPSTREAM[/PATH] or "
                              "%.*sHOST:PORT[/PATH]",
                              arg->text, scheme, arg->text, scheme, arg->text);
    /* A path replaces the part of the request's path that the location
     * matched, as in nginx; a regex says nothing about what that part is. */
    const char *slash = strchr(authority, '/');
    if (slash != NULL && location->regex)
        return conf__error_at(state->error, &arg->pos,
                              "proxy_pass \"%s\" has a path, which a regex location cannot "
                              "replace its match with",
                              arg->text);
    if (slash == authority)
        return conf__error_at(state->error, &arg->pos,
                              "invalid proxy_pass \"%s\" (expected http[s]://UPSTREAM or "
                              "http[s]://HOST:PORT)",
                              arg->text);
    if (slash != NULL && (location->proxy_uri = conf__strdup(state, &arg->pos, slash)) == NULL)
        return -1;
    /* What names the upstream: the URL without its path. */
    size_t pass_len = slash != NULL ? (size_t)(slash - arg->text) : strlen(arg->text);
    location->proxy_pass = strndup(arg->text, pass_len);
    if (location->proxy_pass == NULL)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    char *host = location->proxy_pass + scheme;
    /* Locations with the same proxy_pass may share an upstream: the daemon
     * finds the others by this number rather than by comparing strings. */
    struct conf_config *config = state->config;
    int added = conf__index_add(&state->proxy_targets, location->proxy_pass, pass_len,
                                config->proxy_target_count, &location->proxy_target);
    if (added < 0)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    if (added == 0)
        location->proxy_target = config->proxy_target_count++;
    location->proxy_upstream = SIZE_MAX;
    /* An address is complete now; a name may be an upstream defined
     * later, so it waits for conf__proxy_finish(). */
    struct conf_proxy_ref *refs = NULL;
    if (strchr(host, ':') != NULL) {
        const struct conf_arg address = {.text = host, .pos = arg->pos};
        if (conf__arg_address(state, &address, "proxy_pass address") != 0)
            return -1;
    } else {
        refs =
            conf__grow(state, &arg->pos, state->proxy_refs, state->proxy_ref_count, sizeof(*refs));
        if (refs == NULL)
            return -1;
        state->proxy_refs = refs;
    }
    if (refs != NULL)
        refs[state->proxy_ref_count++] = (struct conf_proxy_ref){
            .url = location->proxy_pass,
            .pos = arg->pos,
            .server = (size_t)(state->server - config->servers),
            .location = (size_t)(location - state->server->locations),
        };
    return 0;
}

/* An HTTP field name: RFC 9110 token characters. */
static bool valid_header_name(const char *name)
{
    if (*name == '\0')
        return false;
    for (const char *p = name; *p != '\0'; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("!#$%&'*+-.^_`|~", c) != NULL))
            return false;
    }
    return true;
}

int conf__check_header_name(struct conf_state *state, const struct conf_arg *arg)
{
    if (valid_header_name(arg->text))
        return 0;
    return conf__error_at(state->error, &arg->pos, "invalid header name \"%s\"", arg->text);
}

/* An HTTP version as an Upgrade protocol: what a tunnel past the proxy's
 * checks would carry (h2c smuggling). */
static bool upgrade_is_http(const char *protocol)
{
    return strcasecmp(protocol, "h2c") == 0 || strcasecmp(protocol, "h2") == 0 ||
           strcasecmp(protocol, "http") == 0;
}

static int upgrade_conflict(struct conf_state *state, const struct conf_pos *pos)
{
    return conf__error_at(state->error, pos,
                          "\"proxy_upgrade\" and \"proxy_set_header Upgrade $http_upgrade\" "
                          "both say which upgrades pass; keep one");
}

/* nginx passes an upgrade on only where the config says
 *     proxy_set_header Upgrade $http_upgrade;
 *     proxy_set_header Connection "upgrade";   (or a map's $connection_upgrade)
 * corral derives both fields itself: the pair says "pass any upgrade", the
 * HTTP versions aside.  Returns 0 when it took the line, -1 on an error, 1
 * when the line is not part of the idiom. */
static int apply_upgrade_idiom(struct conf_state *state, const struct conf_arg *name,
                               const struct conf_arg *value)
{
    struct conf_location *location = state->location;
    /* nginx's way to append the client to X-Forwarded-For, which corral
     * does without being asked. */
    if (strcasecmp(name->text, "x-forwarded-for") == 0 &&
        strcmp(value->text, "$proxy_add_x_forwarded_for") == 0)
        return 0;
    if (strcasecmp(name->text, "upgrade") == 0 && strcmp(value->text, "$http_upgrade") == 0) {
        if (location->upgrade_any)
            return conf__error_at(state->error, &name->pos,
                                  "duplicate proxy_set_header \"%s\" in this location", name->text);
        if (location->upgrade_set)
            return upgrade_conflict(state, &name->pos);
        location->upgrade_any = true;
        return 0;
    }
    /* Connection goes with the upgrade, and is sent when one is; nginx's
     * "" (for keep-alive to the upstream) is what corral does anyway. */
    if (strcasecmp(name->text, "connection") == 0 &&
        (strcasecmp(value->text, "upgrade") == 0 || value->text[0] == '$' ||
         value->text[0] == '\0')) {
        if (location->connection_set)
            return conf__error_at(state->error, &name->pos,
                                  "duplicate proxy_set_header \"%s\" in this location", name->text);
        location->connection_set = true;
        return 0;
    }
    return 1;
}

/* proxy_upgrade PROTOCOL... | off */
static int apply_proxy_upgrade(struct conf_state *state, const struct conf_node *node,
                               const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    if (location->upgrade_any)
        return upgrade_conflict(state, &node->name.pos);
    location->upgrade_set = true;
    if (node->arg_count == 1 && strcmp(node->args[0].text, "off") == 0)
        return 0;
    char **upgrades = calloc(node->arg_count, sizeof(*upgrades));
    if (upgrades == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    location->upgrades = upgrades; /* the config frees what is counted */
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (strcmp(arg->text, "off") == 0)
            return conf__error_at(state->error, &arg->pos,
                                  "\"off\" cannot be combined with protocols");
        if (!valid_header_name(arg->text)) /* a token, without a version */
            return conf__error_at(state->error, &arg->pos,
                                  "invalid proxy_upgrade protocol \"%s\" (expected a name such "
                                  "as websocket, without a version)",
                                  arg->text);
        if (upgrade_is_http(arg->text))
            return conf__error_at(state->error, &arg->pos,
                                  "proxy_upgrade cannot allow \"%s\": an HTTP version through a "
                                  "tunnel would pass requests that the proxy never checks",
                                  arg->text);
        upgrades[i] = conf__strdup(state, &arg->pos, arg->text);
        if (upgrades[i] == NULL)
            return -1;
        location->upgrade_count = i + 1;
    }
    return 0;
}

/* proxy_set_header NAME VALUE */
static int apply_location_header(struct conf_state *state, const struct conf_node *node);

/* proxy_set_header in a server or at top level: its lines are applied to
 * each location that writes none (conf__proxy_inherit_headers()); here they
 * are checked once, together with the lines before them in the block, as
 * a location would take them. */
static int check_level_header(struct conf_state *state, const struct conf_node *node)
{
    const struct conf_node *block =
        state->server != NULL ? state->server_nodes[state->server - state->config->servers]
                              : state->root;
    struct conf_location scratch = {0};
    state->location = &scratch;
    int rc = 0;
    for (const struct conf_node *line = block->children; line <= node; line++) {
        if (strcmp(line->name.text, "proxy_set_header") != 0 || line->arg_count != 2)
            continue;
        rc = apply_location_header(state, line);
        if (line != node && rc != 0)
            state->error->text[0] = '\0'; /* reported with its own line */
    }
    state->location = NULL;
    for (size_t i = 0; i < scratch.set_header_count; i++) {
        free(scratch.set_headers[i].name);
        free(scratch.set_headers[i].value);
    }
    free(scratch.set_headers);
    return rc;
}

void conf__proxy_server_start(struct conf_state *state, const struct conf_node *node)
{
    state->server_headers = conf__find_child(node, "proxy_set_header") != NULL ? node
                            : state->root_headers                              ? state->root
                                                                               : NULL;
}

int conf__proxy_inherit_headers(struct conf_state *state, const struct conf_node *location_node)
{
    const struct conf_node *from = state->server_headers;
    if (from == NULL || conf__find_child(location_node, "proxy_set_header") != NULL)
        return 0;
    for (size_t i = 0; i < from->child_count; i++) {
        const struct conf_node *line = &from->children[i];
        if (strcmp(line->name.text, "proxy_set_header") == 0 &&
            apply_location_header(state, line) != 0)
            return -1;
    }
    return 0;
}

static int apply_proxy_set_header(struct conf_state *state, const struct conf_node *node,
                                  const struct conf_directive *directive)
{
    (void)directive;
    if (state->location == NULL)
        return check_level_header(state, node);
    return apply_location_header(state, node);
}

static int apply_location_header(struct conf_state *state, const struct conf_node *node)
{
    struct conf_location *location = state->location;
    const struct conf_arg *name = &node->args[0], *value = &node->args[1];
    if (conf__check_header_name(state, name) != 0)
        return -1;
    int idiom = apply_upgrade_idiom(state, name, value);
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
            return conf__error_at(state->error, &name->pos,
                                  "proxy_set_header cannot set \"%s\": the proxy derives it",
                                  name->text);
    /* A field value is visible characters, spaces and tabs: a CR or LF
     * here would let the config split the request it is added to. */
    for (const char *p = value->text; *p != '\0'; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return conf__error_at(state->error, &value->pos,
                                  "header value contains a control character");
    for (size_t i = 0; i < location->set_header_count; i++)
        if (strcasecmp(location->set_headers[i].name, name->text) == 0)
            return conf__error_at(state->error, &name->pos,
                                  "duplicate proxy_set_header \"%s\" in this location", name->text);
    struct conf_header *headers = conf__grow(state, &name->pos, location->set_headers,
                                             location->set_header_count, sizeof(*headers));
    if (headers == NULL)
        return -1;
    location->set_headers = headers;
    struct conf_header *header = &headers[location->set_header_count++];
    header->name = conf__strdup(state, &name->pos, name->text);
    if (header->name == NULL)
        return -1;
    header->value = conf__strdup(state, &value->pos, value->text);
    header->value_pos = value->pos;
    return header->value != NULL ? 0 : -1;
}

/* proxy_hide_header NAME: dropped from upstream responses. */
static int apply_proxy_hide_header(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *name = &node->args[0];
    if (conf__check_header_name(state, name) != 0)
        return -1;
    char **names = conf__grow(state, &name->pos, location->hide_headers,
                              location->hide_header_count, sizeof(*names));
    if (names == NULL)
        return -1;
    location->hide_headers = names;
    names[location->hide_header_count] = conf__strdup(state, &name->pos, name->text);
    if (names[location->hide_header_count] == NULL)
        return -1;
    location->hide_header_count++;
    return 0;
}

/* ------------------------------------------------------ TLS to upstreams */

/* proxy_tls_name NAME: a host name, sent as SNI and matched against the
 * upstream's certificate; or an IP address, matched as one. */
static int check_proxy_tls_name(struct conf_state *state, const struct conf_arg *arg)
{
    struct in6_addr ipv6;
    if (!conf__valid_upstream_name(arg->text) && inet_pton(AF_INET6, arg->text, &ipv6) != 1)
        return conf__error_at(state->error, &arg->pos,
                              "invalid proxy_tls_name \"%s\" (expected a host name or an IP "
                              "address)",
                              arg->text);
    return 0;
}

int conf__proxy_check_location(struct conf_state *state, const struct conf_location *location,
                               const struct conf_node *node)
{
    /* Settings that would silently do nothing are mistakes: most likely
     * the proxy_pass was meant to say https://. */
    if (location->proxy_pass != NULL && url_is_https(location->proxy_pass))
        return 0;
    for (size_t i = 0; i < node->child_count; i++) {
        const struct conf_node *child = &node->children[i];
        if (strncmp(child->name.text, "proxy_tls_", 10) == 0)
            return conf__error_at(state->error, &child->name.pos,
                                  "\"%s\" needs \"proxy_pass https://...\" in the same location",
                                  child->name.text);
    }
    return 0;
}

/* A location's proxy timeout it does not write: no duration the parser
 * takes is this long. */
#define TIMEOUT_UNSET UINT32_MAX

void conf__proxy_location_start(struct conf_location *location)
{
    location->proxy.connect_timeout_ms = TIMEOUT_UNSET;
    location->proxy.read_timeout_ms = TIMEOUT_UNSET;
    location->proxy.send_timeout_ms = TIMEOUT_UNSET;
}

static int inherit(struct conf_state *state, const struct conf_pos *pos, void *child,
                   const void *parent)
{
    (void)state, (void)pos;
    struct proxy_conf *location = child;
    struct proxy_conf own = *location;
    *location = *(const struct proxy_conf *)parent;
    if (own.response_head_limit != 0)
        location->response_head_limit = own.response_head_limit;
    if (own.next_upstream & PROXY_NEXT_WRITTEN)
        location->next_upstream = own.next_upstream;
    if (own.next_upstream_tries != 0)
        location->next_upstream_tries = own.next_upstream_tries;
    if (own.next_upstream_timeout_ms != 0)
        location->next_upstream_timeout_ms = own.next_upstream_timeout_ms;
    if (own.connect_timeout_ms != TIMEOUT_UNSET)
        location->connect_timeout_ms = own.connect_timeout_ms;
    if (own.read_timeout_ms != TIMEOUT_UNSET)
        location->read_timeout_ms = own.read_timeout_ms;
    if (own.send_timeout_ms != TIMEOUT_UNSET)
        location->send_timeout_ms = own.send_timeout_ms;
    return 0;
}

int conf__proxy_finish(struct conf_state *state)
{
    /* A location takes its server's settings, which hold the top level's
     * where the server sets none (conf__http_finish() ran first), and
     * keeps its own timeouts, proxy_buffer_size and proxy_next_upstream*: a tries
     * or timeout of 0 (no limit) in a location takes the server's. */
    static const struct conf_levels levels = {
        SIZE_MAX, /* a server's are merged setting by setting (conf__inherit_settings()) */
        offsetof(struct conf_server, http.proxy),
        offsetof(struct conf_location, proxy),
        inherit,
    };
    if (conf__levels_merge(state, &levels) != 0)
        return -1;
    for (size_t i = 0; i < state->proxy_ref_count; i++) {
        const struct conf_proxy_ref *ref = &state->proxy_refs[i];
        int scheme = (int)scheme_length(ref->url);
        const char *name = ref->url + scheme;
        size_t index;
        if (!conf__index_find(&state->upstream_names, name, strlen(name), &index))
            return conf__error_at(state->error, &ref->pos,
                                  "no upstream named \"%s\" (an address needs a port: "
                                  "%.*sHOST:PORT)",
                                  name, scheme, ref->url);
        state->config->servers[ref->server].locations[ref->location].proxy_upstream = index;
    }
    return 0;
}

/* The settings set one field of struct proxy_conf (a location's, a server's or the
 * top level's) or of the location's struct tls_client_conf, through
 * conf__apply_setting().  proxy_pass and the header lists build structure, so they have apply
 * functions.  One directive per entry: a table reads better than what the formatter makes of it. */
/* clang-format off */
#define ONE_ARG(context) .contexts = context, .min_args = 1, .max_args = 1
#define PROXY_TLS(field) ONE_ARG(CONF_LOCATION), .base = CONF_BASE_LOCATION, \
    CONF_FIELD(struct conf_location, proxy_tls.field)

const struct conf_directive conf__proxy_directives[] = {
    {.name = "proxy_pass", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .content = true, .apply = apply_proxy_pass},
    /* in a server or at top level, for the locations that write none */
    {.name = "proxy_set_header", .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 2, .max_args = 2,
     .repeat = true, .apply = apply_proxy_set_header},
    {.name = "proxy_hide_header", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_proxy_hide_header},
    /* which client upgrades go on to the upstream; the default: websocket */
    {.name = "proxy_upgrade", .contexts = CONF_LOCATION, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .apply = apply_proxy_upgrade},
    /* in a location, a server or at the top level; conf__proxy_finish()
     * gives each location its effective value */
    {.name = "proxy_buffer_size", ONE_ARG(CONF_MAIN | CONF_SERVER | CONF_LOCATION),
     .base = CONF_BASE_PROXY, CONF_FIELD(struct proxy_conf, response_head_limit),
     .kind = CONF_KIND_SIZE, .min = PROXY_RESPONSE_HEAD_LIMIT_MIN,
     .max = PROXY_RESPONSE_HEAD_LIMIT_MAX},
    /* when a request goes on to the next server, and how far */
    {.name = "proxy_next_upstream", .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 1, .max_args = CONF_ARGS_MANY, .apply = apply_next_upstream,
     .base = CONF_BASE_PROXY, CONF_FIELD(struct proxy_conf, next_upstream),
     .kind = CONF_KIND_FLAGS, CONF_KEYWORDS(next_upstream_words),
     .what = "proxy_next_upstream condition", .repeated = "condition"},
    {.name = "proxy_next_upstream_tries", ONE_ARG(CONF_MAIN | CONF_SERVER | CONF_LOCATION),
     .base = CONF_BASE_PROXY, CONF_FIELD(struct proxy_conf, next_upstream_tries),
     .kind = CONF_KIND_COUNT},
    {.name = "proxy_next_upstream_timeout", ONE_ARG(CONF_MAIN | CONF_SERVER | CONF_LOCATION),
     .base = CONF_BASE_PROXY, CONF_FIELD(struct proxy_conf, next_upstream_timeout_ms),
     .kind = CONF_KIND_DURATION},
    /* response bodies from the upstream's socket to the client's inside
     * the kernel (both plain); in a server or at the top level */
    {.name = "proxy_splice", ONE_ARG(CONF_MAIN | CONF_SERVER), .base = CONF_BASE_PROXY,
     CONF_FIELD(struct proxy_conf, splice), .kind = CONF_KIND_SWITCH},
    /* "Via: 1.1 corral" on forwarded requests (off, as nginx, which never
     * adds one: a Via turns off gzip on an nginx backend, gzip_proxied) */
    {.name = "proxy_via", ONE_ARG(CONF_MAIN | CONF_SERVER), .base = CONF_BASE_PROXY,
     CONF_FIELD(struct proxy_conf, via), .kind = CONF_KIND_SWITCH},
    /* whether the upstream's certificate must chain to a trusted CA and
     * match the name */
    {.name = "proxy_tls_verify", PROXY_TLS(verify), .kind = CONF_KIND_SWITCH},
    /* opened by the daemon, like the server's certificates */
    {.name = "proxy_tls_trusted_certificate", PROXY_TLS(ca_file), .kind = CONF_KIND_PATH,
     .keep_pos = true, .pos_offset = offsetof(struct conf_location, proxy_tls_ca_pos)},
    {.name = "proxy_tls_name", PROXY_TLS(server_name), .kind = CONF_KIND_STRING,
     .check = check_proxy_tls_name},
    {.name = NULL},
};
/* clang-format on */
