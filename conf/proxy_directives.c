/*
 * proxy_directives.c: upstream pools and what sends a location's requests
 * to them: proxy_pass, the header rewriting around it and TLS towards the
 * upstream.  A proxy_pass may name an upstream defined further down, so
 * names are checked at the end.
 */
#include "registry.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Weights are ratios between servers of one pool; a bound keeps the sums
 * the balancer computes far from overflow. */
#define MAX_WEIGHT 1000

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
static bool valid_upstream_name(const char *name)
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

static const struct conf_upstream *find_upstream(const struct conf_config *config, const char *name)
{
    for (size_t i = 0; i < config->upstream_count; i++)
        if (strcmp(config->upstreams[i].name, name) == 0)
            return &config->upstreams[i];
    return NULL;
}

/* upstream NAME { ... } */
static int apply_upstream(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    const struct conf_arg *name = &node->args[0];
    if (!valid_upstream_name(name->text))
        return conf__error_at(state->error, &name->pos,
                              "invalid upstream name \"%s\" (use letters, digits, \"-\", \"_\" "
                              "and \".\")",
                              name->text);
    const struct conf_upstream *other = find_upstream(config, name->text);
    if (other != NULL) {
        char where[300];
        return conf__error_at(state->error, &name->pos, "duplicate upstream \"%s\" (first at %s)",
                              name->text,
                              conf__where(where, sizeof(where), &name->pos, &other->pos));
    }
    struct conf_upstream *upstreams = conf__grow(state, &node->name.pos, config->upstreams,
                                                 config->upstream_count, sizeof(*upstreams));
    if (upstreams == NULL)
        return -1;
    config->upstreams = upstreams;
    struct conf_upstream *upstream = &upstreams[config->upstream_count++];
    upstream->balance = CONF_BALANCE_ROUND_ROBIN;
    upstream->keepalive = 32;
    upstream->keepalive_timeout_ms = 60 * 1000;
    upstream->pos = node->name.pos;
    upstream->name = conf__strdup(state, &name->pos, name->text);
    if (upstream->name == NULL)
        return -1;

    state->upstream = upstream;
    int rc = conf__apply_block(state, node, CONF_UPSTREAM);
    state->upstream = NULL;
    if (rc != 0)
        return -1;
    if (upstream->server_count == 0)
        return conf__error_at(state->error, &node->name.pos, "upstream \"%s\" has no servers",
                              upstream->name);
    return 0;
}

/* server ADDRESS [weight=N] [max_fails=N] [fail_timeout=DURATION] */
static int apply_upstream_server(struct conf_state *state, const struct conf_node *node,
                                 const struct conf_directive *directive)
{
    (void)directive;
    struct conf_upstream *upstream = state->upstream;
    const struct conf_arg *address = &node->args[0];
    if (conf__arg_address(state, address, "server address") != 0)
        return -1;
    struct conf_upstream_server server = {
        .weight = 1,
        .max_fails = 1,
        .fail_timeout_ms = 10 * 1000,
        .pos = address->pos,
    };
    bool weight = false, max_fails = false, fail_timeout = false;
    for (size_t i = 1; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        char *equals = strchr(arg->text, '=');
        size_t key_len = equals != NULL ? (size_t)(equals - arg->text) : 0;
        bool *seen;
        if (key_len == 6 && strncmp(arg->text, "weight", key_len) == 0)
            seen = &weight;
        else if (key_len == 9 && strncmp(arg->text, "max_fails", key_len) == 0)
            seen = &max_fails;
        else if (key_len == 12 && strncmp(arg->text, "fail_timeout", key_len) == 0)
            seen = &fail_timeout;
        else
            return conf__error_at(state->error, &arg->pos,
                                  "unknown server parameter \"%s\" (expected weight=, max_fails= "
                                  "or fail_timeout=)",
                                  arg->text);
        if (*seen)
            return conf__error_at(state->error, &arg->pos, "duplicate parameter \"%.*s\"",
                                  (int)key_len, arg->text);
        *seen = true;
        /* The value alone, for the value parsers' messages. */
        const struct conf_arg value = {.text = equals + 1, .pos = arg->pos};
        int rc = seen == &weight
                     ? conf__arg_uint(state, &value, "weight", 1, MAX_WEIGHT, &server.weight)
                 : seen == &max_fails
                     ? conf__arg_uint(state, &value, "max_fails", 0, UINT_MAX, &server.max_fails)
                     : conf__arg_duration(state, &value, &server.fail_timeout_ms);
        if (rc != 0)
            return -1;
    }
    struct conf_upstream_server *servers = conf__grow(state, &address->pos, upstream->servers,
                                                      upstream->server_count, sizeof(*servers));
    if (servers == NULL)
        return -1;
    upstream->servers = servers;
    server.address = conf__strdup(state, &address->pos, address->text);
    if (server.address == NULL)
        return -1;
    servers[upstream->server_count++] = server;
    return 0;
}

/* balance round_robin|least_conn|hash */
static int apply_balance(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive)
{
    (void)directive;
    static const struct conf_keyword methods[] = {
        {"round_robin", CONF_BALANCE_ROUND_ROBIN},
        {"least_conn", CONF_BALANCE_LEAST_CONN},
        {"hash", CONF_BALANCE_HASH},
    };
    int balance;
    if (conf__arg_keyword(state, &node->args[0], "balance method", methods,
                          sizeof(methods) / sizeof(methods[0]), &balance) != 0)
        return -1;
    state->upstream->balance = (enum conf_balance)balance;
    return 0;
}

/* keepalive N: idle connections to the pool kept per worker; 0 closes each
 * after its response. */
static int apply_keepalive(struct conf_state *state, const struct conf_node *node,
                           const struct conf_directive *directive)
{
    (void)directive;
    return conf__arg_uint(state, &node->args[0], "\"keepalive\"", 0, UINT_MAX,
                          &state->upstream->keepalive);
}

/* keepalive_timeout DURATION (upstream): how long an idle pooled
 * connection is kept */
static int apply_upstream_keepalive_timeout(struct conf_state *state, const struct conf_node *node,
                                            const struct conf_directive *directive)
{
    (void)directive;
    return conf__arg_duration(state, &node->args[0], &state->upstream->keepalive_timeout_ms);
}

/* proxy_pass http[s]://UPSTREAM | http[s]://HOST:PORT */
static int apply_proxy_pass(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *arg = &node->args[0];
    if (location->handler == CONF_HANDLER_RETURN)
        return conf__error_at(state->error, &node->name.pos,
                              "\"proxy_pass\" cannot be combined with \"return\" in one location");
    int scheme = (int)scheme_length(arg->text);
    char *authority = arg->text + scheme;
    if (scheme == 0 || *authority == '\0')
        return conf__error_at(state->error, &arg->pos,
                              "invalid proxy_pass \"%s\" (expected http[s]://UPSTREAM or "
                              "http[s]://HOST:PORT)",
                              arg->text);
    if (strpbrk(authority, "/?#") != NULL)
        return conf__error_at(state->error, &arg->pos,
                              "proxy_pass \"%s\" has a path; requests are passed on with "
                              "their own, so give only %.*sUPSTREAM or %.*sHOST:PORT",
                              arg->text, scheme, arg->text, scheme, arg->text);
    /* An address is complete now; a name may be an upstream defined
     * later, so it waits for conf__proxy_finish(). */
    struct conf_proxy_ref *refs = NULL;
    if (strchr(authority, ':') != NULL) {
        const struct conf_arg address = {.text = authority, .pos = arg->pos};
        if (conf__arg_address(state, &address, "proxy_pass address") != 0)
            return -1;
    } else {
        refs =
            conf__grow(state, &arg->pos, state->proxy_refs, state->proxy_ref_count, sizeof(*refs));
        if (refs == NULL)
            return -1;
        state->proxy_refs = refs;
    }
    location->proxy_pass = conf__strdup(state, &arg->pos, arg->text);
    if (location->proxy_pass == NULL)
        return -1;
    location->handler = CONF_HANDLER_PROXY;
    if (refs != NULL)
        refs[state->proxy_ref_count++] = (struct conf_proxy_ref){
            .url = location->proxy_pass,
            .pos = arg->pos,
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

static int check_header_name(struct conf_state *state, const struct conf_arg *arg)
{
    if (valid_header_name(arg->text))
        return 0;
    return conf__error_at(state->error, &arg->pos, "invalid header name \"%s\"", arg->text);
}

/* proxy_set_header NAME VALUE */
static int apply_proxy_set_header(struct conf_state *state, const struct conf_node *node,
                                  const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *name = &node->args[0], *value = &node->args[1];
    if (check_header_name(state, name) != 0)
        return -1;
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
    return header->value != NULL ? 0 : -1;
}

/* proxy_hide_header NAME: dropped from upstream responses. */
static int apply_proxy_hide_header(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    struct conf_location *location = state->location;
    const struct conf_arg *name = &node->args[0];
    if (check_header_name(state, name) != 0)
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

/* The bounds of proxy_buffer_size.  The default is nginx's on most
 * platforms.  A head must fit in one connection's input buffer, which
 * stops growing at the 256 KiB backpressure watermark: the upper bound
 * stays well below that. */
#define PROXY_BUFFER_SIZE_DEFAULT (8 * 1024)
#define PROXY_BUFFER_SIZE_MIN     1024
#define PROXY_BUFFER_SIZE_MAX     (128 * 1024)

/* proxy_buffer_size SIZE: in a location, a server or at the top level;
 * conf__proxy_finish() gives each location its effective value. */
static int apply_proxy_buffer_size(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    size_t size;
    if (conf__arg_size(state, arg, &size) != 0)
        return -1;
    if (size < PROXY_BUFFER_SIZE_MIN || size > PROXY_BUFFER_SIZE_MAX)
        return conf__error_at(state->error, &arg->pos,
                              "\"proxy_buffer_size\" must be between 1k and 128k, got \"%s\"",
                              arg->text);
    if (state->location != NULL)
        state->location->proxy_buffer_size = size;
    else if (state->server != NULL)
        state->server->http.proxy_buffer_size = size;
    else
        state->config->http.proxy_buffer_size = size;
    return 0;
}

/* ------------------------------------------------------ TLS to upstreams */

void conf__proxy_tls_defaults(struct conf_proxy_tls *tls)
{
    *tls = (struct conf_proxy_tls){.verify = true};
}

/* proxy_tls_verify on|off: whether the upstream's certificate must chain
 * to a trusted CA and match the name. */
static int apply_proxy_tls_verify(struct conf_state *state, const struct conf_node *node,
                                  const struct conf_directive *directive)
{
    (void)directive;
    return conf__arg_switch(state, &node->args[0], &state->location->proxy_tls.verify);
}

/* proxy_tls_trusted_certificate CAFILE: opened by the daemon, like the
 * server's certificates. */
static int apply_proxy_tls_trusted_certificate(struct conf_state *state,
                                               const struct conf_node *node,
                                               const struct conf_directive *directive)
{
    (void)directive;
    struct conf_proxy_tls *tls = &state->location->proxy_tls;
    tls->trusted_certificate_pos = node->args[0].pos;
    return conf__arg_path(state, &node->args[0], &tls->trusted_certificate);
}

/* proxy_tls_name NAME: a host name, sent as SNI and matched against the
 * upstream's certificate; or an IP address, matched as one. */
static int apply_proxy_tls_name(struct conf_state *state, const struct conf_node *node,
                                const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    struct in6_addr ipv6;
    if (!valid_upstream_name(arg->text) && inet_pton(AF_INET6, arg->text, &ipv6) != 1)
        return conf__error_at(state->error, &arg->pos,
                              "invalid proxy_tls_name \"%s\" (expected a host name or an IP "
                              "address)",
                              arg->text);
    state->location->proxy_tls.server_name = conf__strdup(state, &arg->pos, arg->text);
    return state->location->proxy_tls.server_name != NULL ? 0 : -1;
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

int conf__proxy_finish(struct conf_state *state)
{
    /* A server's value is its own, or the copy of the top level's it
     * started with; a top-level value written after the server is taken
     * here. */
    const struct conf_config *config = state->config;
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        for (size_t l = 0; l < server->location_count; l++) {
            struct conf_location *location = &server->locations[l];
            if (location->proxy_buffer_size == 0)
                location->proxy_buffer_size = server->http.proxy_buffer_size;
            if (location->proxy_buffer_size == 0)
                location->proxy_buffer_size = config->http.proxy_buffer_size;
            if (location->proxy_buffer_size == 0)
                location->proxy_buffer_size = PROXY_BUFFER_SIZE_DEFAULT;
        }
    }
    for (size_t i = 0; i < state->proxy_ref_count; i++) {
        const struct conf_proxy_ref *ref = &state->proxy_refs[i];
        int scheme = (int)scheme_length(ref->url);
        const char *name = ref->url + scheme;
        if (find_upstream(state->config, name) == NULL)
            return conf__error_at(state->error, &ref->pos,
                                  "no upstream named \"%s\" (an address needs a port: "
                                  "%.*sHOST:PORT)",
                                  name, scheme, ref->url);
    }
    return 0;
}

/* One directive per entry: a table reads better than what the formatter makes of it. */
/* clang-format off */
const struct conf_directive conf__proxy_directives[] = {
    {.name = "upstream", .contexts = CONF_MAIN, .min_args = 1, .max_args = 1, .block = true,
     .repeat = true, .apply = apply_upstream},
    {.name = "server", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 4, .repeat = true,
     .apply = apply_upstream_server},
    {.name = "balance", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 1,
     .apply = apply_balance},
    {.name = "keepalive", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 1,
     .apply = apply_keepalive},
    {.name = "keepalive_timeout", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 1,
     .apply = apply_upstream_keepalive_timeout},
    {.name = "proxy_pass", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .apply = apply_proxy_pass},
    {.name = "proxy_set_header", .contexts = CONF_LOCATION, .min_args = 2, .max_args = 2,
     .repeat = true, .apply = apply_proxy_set_header},
    {.name = "proxy_hide_header", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_proxy_hide_header},
    {.name = "proxy_buffer_size", .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 1, .max_args = 1, .apply = apply_proxy_buffer_size},
    {.name = "proxy_tls_verify", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .apply = apply_proxy_tls_verify},
    {.name = "proxy_tls_trusted_certificate", .contexts = CONF_LOCATION, .min_args = 1,
     .max_args = 1, .apply = apply_proxy_tls_trusted_certificate},
    {.name = "proxy_tls_name", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1,
     .apply = apply_proxy_tls_name},
    {.name = NULL},
};
/* clang-format on */
