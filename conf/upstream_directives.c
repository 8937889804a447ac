/*
 * upstream_directives.c: upstream blocks: their servers, balancing, active
 * health checks, the resolver that re-resolves server names, the pools'
 * settings, and the PROXY header sent to the servers.
 */
#include "registry.h"

#include <assert.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* Weights are ratios between servers of one pool; a bound keeps the sums
 * the balancer computes far from overflow. */
#define MAX_WEIGHT 1000

/* Keyword settings are stored as int: their enums must be int-sized. */
_Static_assert(sizeof(enum proxy_balance) == sizeof(int), "an enum setting is an int");

/* upstream NAME { ... } */
static int apply_upstream(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    const struct conf_arg *name = &node->args[0];
    if (!conf__valid_upstream_name(name->text))
        return conf__error_at(state->error, &name->pos,
                              "invalid upstream name \"%s\" (use letters, digits, \"-\", \"_\" "
                              "and \".\")",
                              name->text);
    size_t first;
    int added = conf__index_add(&state->upstream_names, name->text, strlen(name->text),
                                config->upstream_count, &first);
    if (added < 0)
        return conf__error_at(state->error, &name->pos, "out of memory");
    if (added == 1) {
        char where[300];
        return conf__error_at(
            state->error, &name->pos, "duplicate upstream \"%s\" (first at %s)", name->text,
            conf__where(where, sizeof(where), &name->pos, &config->upstreams[first].pos));
    }
    struct conf_upstream *upstreams = conf__grow(state, &node->name.pos, config->upstreams,
                                                 config->upstream_count, sizeof(*upstreams));
    if (upstreams == NULL)
        return -1;
    config->upstreams = upstreams;
    struct conf_upstream *upstream = &upstreams[config->upstream_count++];
    upstream->upstream = PROXY_UPSTREAM_CONF_DEFAULT;
    upstream->pos = node->name.pos;
    upstream->upstream.name = conf__strdup(state, &name->pos, name->text);
    if (upstream->upstream.name == NULL)
        return -1;

    state->upstream = upstream;
    int rc = conf__apply_block(state, node, CONF_UPSTREAM);
    state->upstream = NULL;
    if (rc != 0)
        return -1;
    if (upstream->upstream.server_count == 0)
        return conf__error_at(state->error, &node->name.pos, "upstream \"%s\" has no servers",
                              upstream->upstream.name);
    for (size_t i = 0; i < upstream->upstream.server_count; i++)
        if (upstream->upstream.servers[i].resolve && upstream->upstream.resolver_count == 0)
            return conf__error_at(state->error, &upstream->server_pos[i],
                                  "\"resolve\" needs a \"resolver\" in the upstream block");
    /* A version that would silently send nothing is a mistake. */
    for (size_t i = 0; !upstream->upstream.proxy_protocol && i < node->child_count; i++)
        if (strcmp(node->children[i].name.text, "proxy_protocol_version") == 0)
            return conf__error_at(state->error, &node->children[i].name.pos,
                                  "\"proxy_protocol_version\" needs \"proxy_protocol on\" in the "
                                  "upstream block");
    return 0;
}

/* NAME:PORT, for `server ... resolve`. */
static int check_resolve_name(struct conf_state *state, const struct conf_arg *arg)
{
    const char *colon = strrchr(arg->text, ':');
    unsigned port;
    char name[254];
    size_t len = colon != NULL ? (size_t)(colon - arg->text) : 0;
    if (len > 0 && len < sizeof(name)) {
        memcpy(name, arg->text, len);
        name[len] = '\0';
    }
    if (len == 0 || len >= sizeof(name) || !conf__valid_upstream_name(name) ||
        conf__parse_uint(colon + 1, &port) != 0 || port == 0 || port > 65535)
        return conf__error_at(state->error, &arg->pos,
                              "invalid server name \"%s\" for resolve (expected NAME:PORT)",
                              arg->text);
    return 0;
}

/* service=NAME: letters, digits, '-', '_' and '.'; nginx's forms
 * ("http", or "_http._tcp" with its dots). */
static int check_service(struct conf_state *state, const struct conf_arg *value)
{
    bool ok = value->text[0] != '\0' && value->text[0] != '.';
    for (const char *p = value->text; ok && *p != '\0'; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '-' || *p == '_' || (*p == '.' && p[1] != '.' && p[1] != '\0');
    if (!ok)
        return conf__error_at(state->error, &value->pos,
                              "invalid service \"%s\" (expected a name such as http or _http._tcp)",
                              value->text);
    return 0;
}

/* NAME with service=: no port (the SRV records give them), and a record
 * name that DNS can carry. */
static int check_service_name(struct conf_state *state, const struct conf_arg *arg,
                              const char *service)
{
    char record[UPSTREAM_SRV_NAME_MAX + 1];
    if (!conf__valid_upstream_name(arg->text) ||
        upstream_srv_name(arg->text, service, record, sizeof(record)) != 0)
        return conf__error_at(state->error, &arg->pos,
                              "invalid server name \"%s\" for service= (expected a host name "
                              "without a port, the SRV records give the ports)",
                              arg->text);
    return 0;
}

/* resolver ADDRESS... [valid=DURATION] [ipv6=on|off]: IP addresses, with
 * a port or for port 53; ipv6=off asks for A records only. */
static int apply_resolver(struct conf_state *state, const struct conf_node *node,
                          const struct conf_directive *directive)
{
    (void)directive;
    struct proxy_upstream_conf *upstream = &state->upstream->upstream;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (strncmp(arg->text, "valid=", 6) == 0) {
            const struct conf_arg value = {.text = arg->text + 6, .pos = arg->pos};
            if (conf__arg_duration(state, &value, &upstream->resolve_valid_ms) != 0)
                return -1;
            if (upstream->resolve_valid_ms == 0)
                return conf__error_at(state->error, &arg->pos, "\"valid\" must be more than 0");
            continue;
        }
        if (strncmp(arg->text, "ipv6=", 5) == 0) {
            const struct conf_arg value = {.text = arg->text + 5, .pos = arg->pos};
            bool ipv6;
            if (conf__arg_switch(state, &value, &ipv6) != 0)
                return -1;
            upstream->resolve_ipv4_only = !ipv6;
            continue;
        }
        struct in_addr ip4;
        struct sockaddr_storage addr;
        socklen_t addr_len;
        char with_port[128];
        bool bare = inet_pton(AF_INET, arg->text, &ip4) == 1;
        int n = snprintf(with_port, sizeof(with_port), bare ? "%s:53" : "%s", arg->text);
        /* An IP literal only: a name would need a resolver itself. */
        bool literal = (size_t)n < sizeof(with_port) &&
                       (with_port[0] == '[' || (with_port[0] >= '0' && with_port[0] <= '9')) &&
                       strspn(with_port, "0123456789.:[]abcdefABCDEF") == (size_t)n &&
                       corral_parse_address(with_port, &addr, &addr_len) == 0;
        if (!literal)
            return conf__error_at(state->error, &arg->pos,
                                  "invalid resolver \"%s\" (expected an IP address, with a port "
                                  "or for port 53)",
                                  arg->text);
        if (upstream->resolver_count == UPSTREAM_MAX_RESOLVERS)
            return conf__error_at(state->error, &arg->pos, "at most %d resolvers",
                                  UPSTREAM_MAX_RESOLVERS);
        upstream->resolvers[upstream->resolver_count] = conf__strdup(state, &arg->pos, arg->text);
        if (upstream->resolvers[upstream->resolver_count] == NULL)
            return -1;
        upstream->resolver_count++;
    }
    if (upstream->resolver_count == 0)
        return conf__error_at(state->error, &node->name.pos, "\"resolver\" needs an address");
    return 0;
}

/* server ADDRESS [weight=N] [max_fails=N] [fail_timeout=DURATION] [backup]
 * [down] [max_conns=N] [slow_start=DURATION] */
static int apply_upstream_server(struct conf_state *state, const struct conf_node *node,
                                 const struct conf_directive *directive)
{
    (void)directive;
    struct proxy_upstream_conf *upstream = &state->upstream->upstream;
    const struct conf_arg *address = &node->args[0];
    struct proxy_server_conf server = PROXY_SERVER_CONF_DEFAULT;
    static const char *const params[] = {"weight",     "max_fails",     "fail_timeout", "max_conns",
                                         "slow_start", "max_addresses", "service",      "backup",
                                         "down",       "resolve"};
    bool seen[sizeof(params) / sizeof(params[0])] = {false};
    for (size_t i = 1; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        char *equals = strchr(arg->text, '=');
        size_t key_len = equals != NULL ? (size_t)(equals - arg->text) : strlen(arg->text);
        size_t p = 0;
        while (p < sizeof(params) / sizeof(params[0]) &&
               !(strlen(params[p]) == key_len && strncmp(arg->text, params[p], key_len) == 0))
            p++;
        bool flag = p >= 7; /* backup, down, resolve: no value */
        if (p == sizeof(params) / sizeof(params[0]) || flag != (equals == NULL))
            return conf__error_at(
                state->error, &arg->pos,
                "unknown server parameter \"%s\" (expected weight=, max_fails=, "
                "fail_timeout=, max_conns=, slow_start=, max_addresses=, service=, backup, "
                "down or resolve)",
                arg->text);
        if (seen[p])
            return conf__error_at(state->error, &arg->pos, "duplicate parameter \"%.*s\"",
                                  (int)key_len, arg->text);
        seen[p] = true;
        /* The value alone, for the value parsers' messages. */
        const struct conf_arg value = {.text = flag ? arg->text : equals + 1, .pos = arg->pos};
        int rc = 0;
        switch (p) {
        case 0: rc = conf__arg_uint(state, &value, "weight", 1, MAX_WEIGHT, &server.weight); break;
        case 1:
            rc = conf__arg_uint(state, &value, "max_fails", 0, UINT_MAX, &server.max_fails);
            break;
        case 2: rc = conf__arg_duration(state, &value, &server.fail_timeout_ms); break;
        case 3:
            rc = conf__arg_uint(state, &value, "max_conns", 0, UINT_MAX, &server.max_conns);
            break;
        case 4: rc = conf__arg_duration(state, &value, &server.slow_start_ms); break;
        case 5:
            rc = conf__arg_uint(state, &value, "max_addresses", 1, UPSTREAM_MAX_SERVERS,
                                &server.resolve_slots);
            break;
        case 6:
            server.service = value.text; /* the config's copy is made last */
            rc = check_service(state, &value);
            break;
        case 7: server.backup = true; break;
        case 8: server.down = true; break;
        default: server.resolve = true; break;
        }
        if (rc != 0)
            return -1;
    }
    /* A name to resolve again and again is checked for its form only: the
     * resolver, not this host's, knows it. */
    if (server.service != NULL && !server.resolve)
        return conf__error_at(state->error, &address->pos,
                              "\"service=\" needs \"resolve\" (SRV records are looked up again "
                              "and again)");
    if (server.service != NULL ? check_service_name(state, address, server.service) != 0
        : server.resolve       ? check_resolve_name(state, address) != 0
                               : conf__arg_address(state, address, "server address") != 0)
        return -1;
    /* The balancer keeps the servers a request has tried as the bits of
     * one word (proto/upstream/upstream.h), and a resolve server holds a slot for
     * each address it may have at once. */
    if (server.resolve_slots != 0 && !server.resolve)
        return conf__error_at(state->error, &address->pos,
                              "\"max_addresses\" is for a server with \"resolve\"");
    size_t slots = upstream_server_conf_slots(&server);
    for (size_t i = 0; i < upstream->server_count; i++)
        slots += upstream_server_conf_slots(&upstream->servers[i]);
    if (slots > UPSTREAM_MAX_SERVERS)
        return conf__error_at(state->error, &address->pos,
                              "upstream \"%s\" has more than %d servers (at most %d addresses, a "
                              "server with \"resolve\" counting as its max_addresses, %d by "
                              "default)",
                              upstream->name, UPSTREAM_MAX_SERVERS, UPSTREAM_MAX_SERVERS,
                              UPSTREAM_RESOLVE_SLOTS);
    /* The config owns what the upstream's struct points to. */
    struct proxy_server_conf *servers = conf__grow(state, &address->pos, (void *)upstream->servers,
                                                   upstream->server_count, sizeof(*servers));
    if (servers == NULL)
        return -1;
    upstream->servers = servers;
    struct conf_pos *positions = conf__grow(state, &address->pos, state->upstream->server_pos,
                                            upstream->server_count, sizeof(*positions));
    if (positions == NULL)
        return -1;
    state->upstream->server_pos = positions;
    positions[upstream->server_count] = address->pos;
    server.address = conf__strdup(state, &address->pos, address->text);
    if (server.address == NULL)
        return -1;
    if (server.service != NULL &&
        (server.service = conf__strdup(state, &address->pos, server.service)) == NULL) {
        free((void *)server.address);
        return -1;
    }
    servers[upstream->server_count++] = server;
    return 0;
}

static const struct conf_keyword balance_methods[] = {
    {"round_robin", PROXY_BALANCE_ROUND_ROBIN}, {"least_conn", PROXY_BALANCE_LEAST_CONN},
    {"ip_hash", PROXY_BALANCE_IP_HASH},         {"hash", PROXY_BALANCE_HASH},
    {"random", PROXY_BALANCE_RANDOM},
};

/* The keys balance hash reads until request variables come: the client's
 * address, the target, the host, a request header. */
static bool valid_hash_key(const char *key)
{
    if (strcmp(key, "$remote_addr") == 0 || strcmp(key, "$request_uri") == 0 ||
        strcmp(key, "$host") == 0)
        return true;
    if (strncmp(key, "$http_", 6) != 0 || key[6] == '\0')
        return false;
    for (const char *p = key + 6; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* nginx's spellings: least_conn; ip_hash; hash KEY [consistent];
 * random [two]; are "balance" with the method first. */
static int apply_balance(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive);

static int apply_nginx_balance(struct conf_state *state, const struct conf_node *node,
                               const struct conf_directive *directive)
{
    struct conf_arg args[3];
    /* The entries' max_args keep this from failing; checked, not assumed,
     * since the words come from the file. */
    if (node->arg_count > sizeof(args) / sizeof(args[0]) - 1)
        return conf__error_at(state->error, &node->name.pos, "too many arguments to \"%s\"",
                              node->name.text);
    args[0] = (struct conf_arg){.text = node->name.text, .pos = node->name.pos};
    for (size_t i = 0; i < node->arg_count; i++)
        args[i + 1] = node->args[i];
    struct conf_node balance = *node;
    balance.args = args;
    balance.arg_count = node->arg_count + 1;
    return apply_balance(state, &balance, directive);
}

/* balance round_robin | least_conn | ip_hash | hash KEY [consistent] |
 * random [two] */
static int apply_balance(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive)
{
    (void)directive;
    struct proxy_upstream_conf *upstream = &state->upstream->upstream;
    int method;
    if (conf__arg_keyword(state, &node->args[0], "balance method", balance_methods,
                          sizeof(balance_methods) / sizeof(balance_methods[0]), &method) != 0)
        return -1;
    upstream->balance = (enum proxy_balance)method;
    size_t next = 1;
    /* A bare "balance hash" (corral's earlier form) hashes the client's
     * address, as ip_hash does. */
    if (method == PROXY_BALANCE_HASH && node->arg_count >= 2) {
        const struct conf_arg *key = &node->args[1];
        if (!valid_hash_key(key->text))
            return conf__error_at(state->error, &key->pos,
                                  "unsupported hash key \"%s\" (expected $remote_addr, "
                                  "$request_uri, $host or $http_NAME)",
                                  key->text);
        upstream->hash_key = conf__strdup(state, &key->pos, key->text);
        if (upstream->hash_key == NULL)
            return -1;
        next = 2;
        if (next < node->arg_count && strcmp(node->args[next].text, "consistent") == 0) {
            upstream->hash_consistent = true;
            next++;
        }
    } else if (method == PROXY_BALANCE_RANDOM && next < node->arg_count &&
               strcmp(node->args[next].text, "two") == 0) {
        upstream->random_two = true;
        next++;
    }
    if (next < node->arg_count)
        return conf__error_at(state->error, &node->args[next].pos,
                              "unexpected \"%s\" after \"balance %s\"", node->args[next].text,
                              node->args[0].text);
    return 0;
}

/* match=2xx,301,404: whole classes or single statuses. */
static int parse_health_match(struct conf_state *state, const struct conf_arg *arg,
                              struct proxy_health_conf *health)
{
    const char *p = arg->text;
    for (;;) {
        size_t len = strcspn(p, ",");
        unsigned lo, hi;
        if (len == 3 && p[0] >= '1' && p[0] <= '5' && p[1] == 'x' && p[2] == 'x') {
            lo = (unsigned)(p[0] - '0') * 100;
            hi = lo + 99;
        } else if (len == 3 && p[0] >= '1' && p[0] <= '5' && p[1] >= '0' && p[1] <= '9' &&
                   p[2] >= '0' && p[2] <= '9') {
            lo = hi =
                (unsigned)(p[0] - '0') * 100 + (unsigned)(p[1] - '0') * 10 + (unsigned)(p[2] - '0');
        } else {
            return conf__error_at(state->error, &arg->pos,
                                  "invalid health_check match \"%s\" (expected statuses or "
                                  "classes such as 2xx, separated by commas)",
                                  arg->text);
        }
        for (unsigned s = lo; s <= hi; s++)
            health->match[s / 64] |= 1ull << (s % 64);
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

/* health_check [interval=T] [timeout=T] [rise=N] [fall=N] [uri=PATH]
 * [match=...] [port=N] */
static int apply_health_check(struct conf_state *state, const struct conf_node *node,
                              const struct conf_directive *directive)
{
    (void)directive;
    struct proxy_health_conf *health = &state->upstream->upstream.health;
    static const char *const params[] = {"interval", "timeout", "rise", "fall",        "uri",
                                         "match",    "port",    "type", "grpc_service"};
    bool seen[sizeof(params) / sizeof(params[0])] = {false};
    health->enabled = true;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        /* NGINX Plus's stream spelling of type=udp: "udp" alone */
        bool udp = strcmp(arg->text, "udp") == 0;
        char *equals = udp ? NULL : strchr(arg->text, '=');
        size_t key_len = udp ? 3 : equals != NULL ? (size_t)(equals - arg->text) : 0;
        size_t p = udp ? 7 : 0;
        while (!udp && p < sizeof(params) / sizeof(params[0]) &&
               !(strlen(params[p]) == key_len && strncmp(arg->text, params[p], key_len) == 0))
            p++;
        if (p == sizeof(params) / sizeof(params[0]))
            return conf__error_at(state->error, &arg->pos,
                                  "unknown health_check parameter \"%s\" (expected interval=, "
                                  "timeout=, rise=, fall=, uri=, match=, port=, type= or "
                                  "grpc_service=)",
                                  arg->text);
        if (seen[p])
            return conf__error_at(state->error, &arg->pos, "duplicate parameter \"%.*s\"",
                                  (int)key_len, arg->text);
        seen[p] = true;
        const struct conf_arg value = {.text = udp ? arg->text : equals + 1, .pos = arg->pos};
        int rc = 0;
        switch (p) {
        case 0: rc = conf__arg_duration(state, &value, &health->interval_ms); break;
        case 1: rc = conf__arg_duration(state, &value, &health->timeout_ms); break;
        case 2: rc = conf__arg_uint(state, &value, "rise", 1, 1000, &health->rise); break;
        case 3: rc = conf__arg_uint(state, &value, "fall", 1, 1000, &health->fall); break;
        case 4:
            /* It goes into the request line: a path, no spaces or controls. */
            if (value.text[0] != '/' || strlen(value.text) > 256 ||
                strpbrk(value.text, " \t\r\n\x7f") != NULL)
                return conf__error_at(state->error, &arg->pos,
                                      "invalid health_check uri \"%s\" (a path of at most 256 "
                                      "bytes, without spaces)",
                                      value.text);
            for (const char *c = value.text; *c != '\0'; c++)
                if ((unsigned char)*c < 0x20)
                    return conf__error_at(state->error, &arg->pos,
                                          "health_check uri contains a control character");
            health->uri = conf__strdup(state, &arg->pos, value.text);
            rc = health->uri != NULL ? 0 : -1;
            break;
        case 5:
            /* a stream match block's name, or statuses */
            if (value.text[0] >= '0' && value.text[0] <= '9') {
                rc = parse_health_match(state, &value, health);
                break;
            }
            if (!state->config->stream.applying)
                return conf__error_at(state->error, &arg->pos,
                                      "health_check match=%s names a stream match block: the "
                                      "upstream must be in the stream block",
                                      value.text);
            free(state->upstream->health_match);
            state->upstream->health_match = conf__strdup(state, &arg->pos, value.text);
            state->upstream->health_match_pos = arg->pos;
            rc = state->upstream->health_match != NULL ? 0 : -1;
            break;
        case 6: rc = conf__arg_uint(state, &value, "port", 1, 65535, &health->port); break;
        case 7:
            if (strcmp(value.text, "http") == 0)
                health->type = PROXY_HEALTH_HTTP;
            else if (strcmp(value.text, "http2") == 0)
                health->type = PROXY_HEALTH_HTTP2;
            else if (strcmp(value.text, "grpc") == 0)
                health->type = PROXY_HEALTH_GRPC;
            else if (strcmp(value.text, "tcp") == 0)
                health->type = PROXY_HEALTH_TCP;
            else if (strcmp(value.text, "udp") == 0)
                health->type = PROXY_HEALTH_UDP;
            else
                return conf__error_at(state->error, &arg->pos,
                                      "invalid health_check type \"%s\" (expected http, http2, "
                                      "grpc, tcp or udp)",
                                      value.text);
            break;
        default:
            /* a protobuf string of at most 255 bytes, visible characters */
            if (strlen(value.text) > 255 || strpbrk(value.text, " \t\r\n\x7f") != NULL)
                return conf__error_at(state->error, &arg->pos,
                                      "invalid health_check grpc_service \"%s\" (a name of at "
                                      "most 255 bytes, without spaces)",
                                      value.text);
            health->grpc_service = conf__strdup(state, &arg->pos, value.text);
            rc = health->grpc_service != NULL ? 0 : -1;
            break;
        }
        if (rc != 0)
            return -1;
        if (p <= 1 && (p == 0 ? health->interval_ms : health->timeout_ms) == 0)
            return conf__error_at(state->error, &arg->pos, "\"%.*s\" must be more than 0",
                                  (int)key_len, arg->text);
    }
    /* A match block's check is a connect check that sends and reads. */
    if (state->upstream->health_match != NULL) {
        if (seen[7] && health->type != PROXY_HEALTH_TCP && health->type != PROXY_HEALTH_UDP)
            return conf__error_at(state->error, &node->name.pos,
                                  "\"health_check match=%s\" (a stream match block) is a "
                                  "type=tcp or udp check",
                                  state->upstream->health_match);
        if (health->type != PROXY_HEALTH_UDP)
            health->type = PROXY_HEALTH_TCP;
        seen[5] = false;
    }
    /* A connect check reads nothing: what judges an answer has no place. */
    if (health->type == PROXY_HEALTH_UDP && (seen[4] || seen[5] || seen[8]))
        return conf__error_at(state->error, &node->name.pos,
                              "\"health_check udp\" sends a datagram: it takes no uri=, match= "
                              "with statuses or grpc_service=");
    if (health->type == PROXY_HEALTH_TCP && (seen[4] || seen[5] || seen[8]))
        return conf__error_at(state->error, &node->name.pos,
                              "\"health_check type=tcp\" only connects: it takes no uri=, "
                              "match= or grpc_service=");
    return 0;
}

/* One directive per entry: a table reads better than what the formatter
 * makes of it. */
/* clang-format off */
#define UPSTREAM(field) .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 1, \
    .base = CONF_BASE_UPSTREAM, CONF_FIELD(struct conf_upstream, upstream.field)

const struct conf_directive conf__upstream_directives[] = {
    {.name = "upstream", .contexts = CONF_MAIN | CONF_STREAM, .min_args = 1, .max_args = 1, .block = true,
     .repeat = true, .apply = apply_upstream},
    {.name = "server", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 8, .repeat = true,
     .apply = apply_upstream_server},
    {.name = "balance", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 3,
     .apply = apply_balance},
    /* nginx's names of the methods */
    {.name = "least_conn", .contexts = CONF_UPSTREAM, .apply = apply_nginx_balance},
    {.name = "ip_hash", .contexts = CONF_UPSTREAM, .apply = apply_nginx_balance},
    {.name = "hash", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 2,
     .apply = apply_nginx_balance},
    {.name = "random", .contexts = CONF_UPSTREAM, .max_args = 1, .apply = apply_nginx_balance},
    {.name = "health_check", .contexts = CONF_UPSTREAM, .min_args = 0, .max_args = 9,
     .apply = apply_health_check},
    {.name = "resolver", .contexts = CONF_UPSTREAM, .min_args = 1, .max_args = 6,
     .apply = apply_resolver},
    /* idle connections to the pool kept per worker; 0 closes each after
     * its response */
    {.name = "keepalive", UPSTREAM(keepalive), .kind = CONF_KIND_COUNT},
    /* slots the admin API may add servers to */
    {.name = "api_servers", UPSTREAM(api_servers), .kind = CONF_KIND_COUNT, .max = 1000},
    /* how long an idle pooled connection is kept */
    {.name = "keepalive_timeout", UPSTREAM(idle_timeout_ms), .kind = CONF_KIND_DURATION},
    /* a PROXY header first on each new connection to a server, naming the
     * client; a pooled connection serves that client only */
    {.name = "proxy_protocol", UPSTREAM(proxy_protocol), .kind = CONF_KIND_SWITCH},
    {.name = "proxy_protocol_version", UPSTREAM(proxy_protocol_version), .kind = CONF_KIND_COUNT,
     .min = 1, .max = 2},
    {.name = NULL},
};
/* clang-format on */
