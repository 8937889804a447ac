/*
 * access.c: a request's real client address behind trusted proxies, with
 * nginx's realip rules (the rightmost address not trusted, walking left
 * only with real_ip_recursive), and the allow/deny rules, first match wins.
 * Their directives, their struct per level and its merge are the
 * module's too.
 */
#include "proto/policy/access.h"
#include "proto/http/exchange.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/policy/satisfy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An IPv4-mapped IPv6 address is its IPv4 address, as in nginx. */
static const uint8_t *address_bytes(const struct sockaddr *addr, int *family)
{
    if (addr->sa_family == AF_INET) {
        *family = AF_INET;
        return (const uint8_t *)&((const struct sockaddr_in *)addr)->sin_addr;
    }
    if (addr->sa_family != AF_INET6) {
        *family = AF_UNSPEC;
        return NULL;
    }
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(in6)) {
        *family = AF_INET;
        return in6->s6_addr + 12;
    }
    *family = AF_INET6;
    return in6->s6_addr;
}

bool access_net_contains(const struct access_net *net, const struct sockaddr *addr)
{
    if (net->family == AF_UNSPEC)
        return true;
    int family;
    const uint8_t *bytes = address_bytes(addr, &family);
    if (bytes == NULL || family != net->family)
        return false;
    unsigned whole = net->bits / 8u, rest = net->bits % 8u;
    if (memcmp(bytes, net->addr, whole) != 0)
        return false;
    uint8_t mask = (uint8_t)(0xff00u >> rest);
    return rest == 0 || (bytes[whole] & mask) == net->addr[whole];
}

static bool trusted(const struct access_conf *conf, const struct sockaddr *addr)
{
    for (size_t i = 0; i < conf->real_ip_from_count; i++)
        if (access_net_contains(&conf->real_ip_from[i], addr))
            return true;
    return false;
}

/* One element of a forwarding header: "192.0.2.1", "192.0.2.1:80",
 * "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80". */
static bool parse_element(const char *text, size_t len, union exchange_addr *out)
{
    char buf[INET6_ADDRSTRLEN];
    const char *host = text;
    size_t host_len = len;
    const char *port = NULL;
    size_t port_len = 0;
    if (len > 0 && text[0] == '[') {
        const char *close = memchr(text, ']', len);
        if (close == NULL)
            return false;
        host = text + 1;
        host_len = (size_t)(close - host);
        size_t after = (size_t)(close + 1 - text);
        if (after < len) {
            if (text[after] != ':')
                return false;
            port = text + after + 1;
            port_len = len - after - 1;
        }
    } else {
        const char *colon = memchr(text, ':', len);
        if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon + 1 - text)) == NULL) {
            host_len = (size_t)(colon - text); /* one colon: IPv4 and a port */
            port = colon + 1;
            port_len = len - host_len - 1;
        }
    }
    unsigned port_value = 0;
    if (port != NULL) {
        if (port_len == 0 || port_len > 5)
            return false;
        for (size_t i = 0; i < port_len; i++) {
            if (port[i] < '0' || port[i] > '9')
                return false;
            port_value = port_value * 10 + (unsigned)(port[i] - '0');
        }
        if (port_value > 65535)
            return false;
    }
    if (host_len == 0 || host_len >= sizeof(buf))
        return false;
    memcpy(buf, host, host_len);
    buf[host_len] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, &out->in.sin_addr) == 1) {
        out->in.sin_family = AF_INET;
        out->in.sin_port = htons((uint16_t)port_value);
        return true;
    }
    if (inet_pton(AF_INET6, buf, &out->in6.sin6_addr) == 1) {
        out->in6.sin6_family = AF_INET6;
        out->in6.sin6_port = htons((uint16_t)port_value);
        return true;
    }
    return false;
}

static bool is_separator(char c)
{
    return c == ' ' || c == ',' || c == '\t';
}

/* Walks one header value from its right end, as nginx's
 * ngx_http_get_forwarded_addr() does: takes the last element; with
 * real_ip_recursive, goes on leftwards while the address just taken is a
 * trusted proxy.  Returns true when the walk is over, false when the value
 * ran out and the header line before it goes on. */
static bool walk_value(const struct access_conf *conf, struct http_str value,
                       union exchange_addr *addr)
{
    size_t end = value.len;
    for (;;) {
        while (end > 0 && is_separator(value.data[end - 1]))
            end--;
        if (end == 0)
            return false;
        size_t start = end;
        while (start > 0 && !is_separator(value.data[start - 1]))
            start--;
        union exchange_addr parsed;
        if (!parse_element(value.data + start, end - start, &parsed))
            return true; /* what is not an address ends the walk: keep the last one */
        *addr = parsed;
        if (!conf->real_ip_recursive || !trusted(conf, &addr->sa))
            return true;
        end = start;
    }
}

/* The address conf's header gives, when the connection's peer is a
 * trusted proxy. */
static void real_ip(const struct access_conf *conf, const struct http_request *req,
                    union exchange_addr *addr)
{
    if (conf->real_ip_proxy_protocol || !trusted(conf, &addr->sa))
        return; /* a PROXY header's source is the peer already */
    const char *name = conf->real_ip_header != NULL ? conf->real_ip_header : "x-real-ip";
    for (size_t i = req->header_count; i > 0; i--) {
        const struct http_header *h = &req->headers[i - 1];
        if (http_str_equal_nocase(h->name, name) && walk_value(conf, h->value, addr))
            return;
    }
}

unsigned access_check(struct exchange *ex, const corral_conn *conn, const struct access_conf *conf,
                      const struct http_request *req)
{
    struct sockaddr_storage peer;
    socklen_t len;
    /* A unix socket's peer has no address: only "all" applies to it. */
    bool known =
        conn != NULL && corral_conn_peer(conn, &peer, &len) == 0 && len <= sizeof(ex->client);
    if (known)
        memcpy(&ex->client, &peer, len);
    return access_check_routed(ex, conf, req);
}

/* What the rules say of the exchange's client, its real address set
 * first: the first rule that matches, or none. */
enum verdict { NO_RULE, ALLOWED, DENIED };

/* The first rule that matches `addr` (NULL: unknown, which only "all"
 * matches). */
static enum verdict first_rule(const struct access_conf *conf, const struct sockaddr *addr)
{
    for (size_t i = 0; i < conf->rule_count; i++) {
        const struct access_rule *rule = &conf->rules[i];
        if (addr != NULL ? access_net_contains(&rule->net, addr) : rule->net.family == AF_UNSPEC)
            return rule->allow ? ALLOWED : DENIED;
    }
    return NO_RULE;
}

static enum verdict check(struct exchange *ex, const struct access_conf *conf,
                          const struct http_request *req)
{
    bool known = ex->client.sa.sa_family != AF_UNSPEC;
    if (conf == NULL)
        return NO_RULE;
    if (known && conf->real_ip_from_count > 0)
        real_ip(conf, req, &ex->client);
    return first_rule(conf, known ? &ex->client.sa : NULL);
}

bool access_rules_allow(const struct access_conf *conf, const struct sockaddr *addr)
{
    return first_rule(conf, addr) != DENIED;
}

unsigned access_check_routed(struct exchange *ex, const struct access_conf *conf,
                             const struct http_request *req)
{
    return check(ex, conf, req) == DENIED ? 403 : 0;
}

int access_peer_phase(struct router_walk *w)
{
    access_check(w->ex, exchange_conn(w->ex), NULL, &w->req);
    return ROUTER_DECLINED; /* the phase's later handlers (tracing's start) run too */
}

/* Under `satisfy any` an allow rule lets the client in without the
 * authentication after it in the phase, and a deny rule leaves the
 * decision to it (satisfy.h); else a deny rule answers and authentication
 * is asked too. */
int access_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    enum verdict verdict = check(ex, http_module_built(ex, &access_module), &w->req);
    if (verdict != NO_RULE && satisfy_any(ex)) {
        if (verdict == ALLOWED)
            return ROUTER_NEXT;
        satisfy_note_denied(ex);
        return ROUTER_DECLINED;
    }
    return verdict == DENIED ? 403 : ROUTER_DECLINED;
}

/* ------------------------------------------------------- configuration */

int access_net_parse(const char *text, bool all_ok, struct access_net *out, char *message,
                     size_t len)
{
    *out = (struct access_net){.family = AF_UNSPEC};
    if (all_ok && strcmp(text, "all") == 0)
        return 0;
    char host[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(text, '/');
    size_t host_len = slash != NULL ? (size_t)(slash - text) : strlen(text);
    unsigned max_bits = 0;
    if (host_len > 0 && host_len < sizeof(host)) {
        memcpy(host, text, host_len);
        host[host_len] = '\0';
        if (inet_pton(AF_INET, host, out->addr) == 1) {
            out->family = AF_INET;
            max_bits = 32;
        } else if (inet_pton(AF_INET6, host, out->addr) == 1) {
            out->family = AF_INET6;
            max_bits = 128;
        }
    }
    if (max_bits == 0) {
        snprintf(message, len,
                 all_ok ? "invalid address \"%s\" (expected an IPv4 or IPv6 address, "
                          "ADDRESS/BITS or all)"
                        : "invalid address \"%s\" (expected an IPv4 or IPv6 address "
                          "or ADDRESS/BITS)",
                 text);
        return -1;
    }
    unsigned bits = max_bits;
    if (slash != NULL) {
        if (conf_parse_uint(slash + 1, &bits) != 0 || bits > max_bits) {
            snprintf(message, len, "invalid prefix length in \"%s\" (expected 0 to %u)", text,
                     max_bits);
            return -1;
        }
    }
    out->bits = (uint8_t)bits;
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
        out->addr[i] &= (uint8_t)(0xff00u >> keep);
    }
    return 0;
}

int access_rule_add(struct access_conf *conf, bool allow, const struct access_net *net)
{
    struct access_rule *rules = realloc(conf->rules, (conf->rule_count + 1) * sizeof(*rules));
    if (rules == NULL)
        return -1;
    conf->rules = rules;
    rules[conf->rule_count++] = (struct access_rule){*net, allow};
    return 0;
}

void access_conf_free(struct access_conf *conf)
{
    if (!conf->inherited_real_ip_from)
        free(conf->real_ip_from);
    if (!conf->inherited_real_ip_header)
        free(conf->real_ip_header);
    if (!conf->inherited_rules)
        free(conf->rules);
}

/* set_real_ip_from CIDR; */
static int apply_real_ip_from(void *conf, const struct conf_arg *args, size_t count,
                              struct conf_module_error *error)
{
    (void)count;
    struct access_conf *c = conf;
    struct access_net net;
    if (access_net_parse(args[0].text, false, &net, error->message, sizeof(error->message)) != 0) {
        error->at = &args[0].pos;
        return -1;
    }
    struct access_net *nets = realloc(c->real_ip_from, (c->real_ip_from_count + 1) * sizeof(*nets));
    if (nets == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    c->real_ip_from = nets;
    nets[c->real_ip_from_count++] = net;
    return 0;
}

/* real_ip_header X-Real-IP | X-Forwarded-For | proxy_protocol | NAME; */
static int apply_real_ip_header(void *conf, const struct conf_arg *args, size_t count,
                                struct conf_module_error *error)
{
    (void)count;
    struct access_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    c->has_real_ip_header = true;
    if (strcmp(arg->text, "proxy_protocol") == 0) {
        c->real_ip_proxy_protocol = true;
        return 0;
    }
    for (const char *p = arg->text; *p != '\0'; p++)
        if (*p <= ' ' || *p == ':' || *p >= 0x7f)
            return conf_module_fail(error, &arg->pos, "invalid header name \"%s\"", arg->text);
    if (arg->text[0] == '\0')
        return conf_module_fail(error, &arg->pos, "%s", "invalid header name \"\"");
    c->real_ip_header = strdup(arg->text);
    return c->real_ip_header != NULL ? 0
                                     : conf_module_fail(error, &arg->pos, "%s", "out of memory");
}

/* allow ADDRESS|CIDR|all; and deny the same, in one list, in order. */
static int apply_rule(struct access_conf *c, bool allow, const struct conf_arg *arg,
                      struct conf_module_error *error)
{
    struct access_net net;
    if (access_net_parse(arg->text, true, &net, error->message, sizeof(error->message)) != 0) {
        error->at = &arg->pos;
        return -1;
    }
    if (access_rule_add(c, allow, &net) != 0)
        return conf_module_fail(error, &arg->pos, "%s", "out of memory");
    return 0;
}

static int apply_allow(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)count;
    return apply_rule(conf, true, &args[0], error);
}

static int apply_deny(void *conf, const struct conf_arg *args, size_t count,
                      struct conf_module_error *error)
{
    (void)count;
    return apply_rule(conf, false, &args[0], error);
}

/* Gives `conf` what it does not write of `parent`'s, as nginx merges:
 * the trusted list and the rules as a whole, the other two one by one;
 * shared, not copied (the parent outlives it: conf/ frees every level's
 * struct together). */
static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct access_conf *c = conf;
    const struct access_conf *p = parent;
    if (p == NULL)
        return 0;
    if (c->real_ip_from_count == 0 && p->real_ip_from_count > 0) {
        c->real_ip_from = p->real_ip_from;
        c->real_ip_from_count = p->real_ip_from_count;
        c->inherited_real_ip_from = true;
    }
    if (!c->has_real_ip_header && p->has_real_ip_header) {
        c->has_real_ip_header = true;
        c->real_ip_proxy_protocol = p->real_ip_proxy_protocol;
        c->real_ip_header = p->real_ip_header;
        c->inherited_real_ip_header = true;
    }
    if (c->real_ip_recursive_pos.file == NULL && p->real_ip_recursive_pos.file != NULL) {
        c->real_ip_recursive_pos = p->real_ip_recursive_pos;
        c->real_ip_recursive = p->real_ip_recursive;
    }
    if (c->rule_count == 0 && p->rule_count > 0) {
        c->rules = p->rules;
        c->rule_count = p->rule_count;
        c->inherited_rules = true;
    }
    return 0;
}

static void conf_free(void *conf)
{
    access_conf_free(conf);
}

/* What the access phase reads: the level's merged struct, when it asks
 * for anything. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    (void)b;
    *out = access_conf_active(conf) ? conf : NULL;
    return 0;
}

#define ACCESS_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

/* allow and deny in the admin block are conf/'s (access_directives.c):
 * that block has no levels and inherits nothing. */
static const struct conf_directive access_directives[] = {
    {.name = "set_real_ip_from",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_real_ip_from},
    {.name = "real_ip_header",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_real_ip_header},
    {.name = "real_ip_recursive",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct access_conf, real_ip_recursive),
     .keep_pos = true,
     .pos_offset = offsetof(struct access_conf, real_ip_recursive_pos)},
    {.name = "allow",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_allow},
    {.name = "deny",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_deny},
    {.name = NULL},
};

static const struct http_phase_handler access_peer_phases[] = {
    {ROUTER_POST_READ, access_peer_phase},
};

/* No configuration: in every site's steps, as $remote_addr needs it. */
struct http_module access_peer_module = {
    .name = "access_peer",
    .phases = access_peer_phases,
    .phase_count = 1,
};

static const struct http_phase_handler access_phases[] = {
    {ROUTER_ACCESS, access_phase},
};

struct http_module access_module = {
    .name = "access",
    .conf =
        {
            .name = "access",
            .directives = access_directives,
            .size = sizeof(struct access_conf),
            .merge = merge,
            .free = conf_free,
        },
    .build = build,
    .phases = access_phases,
    .phase_count = 1,
};
