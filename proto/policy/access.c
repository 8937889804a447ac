/*
 * access.c: a request's real client address behind trusted proxies, with
 * nginx's realip rules (the rightmost address not trusted, walking left
 * only with real_ip_recursive), and the allow/deny rules, first match wins.
 */
#include "proto/policy/access.h"
#include "proto/http/exchange.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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

unsigned access_check_routed(struct exchange *ex, const struct access_conf *conf,
                             const struct http_request *req)
{
    bool known = ex->client.sa.sa_family != AF_UNSPEC;
    if (conf == NULL)
        return 0;
    if (known && conf->real_ip_from_count > 0)
        real_ip(conf, req, &ex->client);
    for (size_t i = 0; i < conf->rule_count; i++) {
        const struct access_rule *rule = &conf->rules[i];
        if (known ? access_net_contains(&rule->net, &ex->client.sa) : rule->net.family == AF_UNSPEC)
            return rule->allow ? 0 : 403;
    }
    return 0;
}

int access_peer_phase(struct router_walk *w)
{
    access_check(w->ex, exchange_conn(w->ex), NULL, &w->req);
    return ROUTER_NEXT;
}

int access_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct access_conf *conf = ex->loc != NULL ? ex->loc->access : ex->vhost->access;
    unsigned refused = access_check_routed(ex, conf, &w->req);
    return refused != 0 ? (int)refused : ROUTER_NEXT;
}

static const struct http_phase_handler access_phases[] = {
    {ROUTER_POST_READ, access_peer_phase},
    {ROUTER_ACCESS, access_phase},
};

struct http_module access_module = {
    .name = "access",
    .phases = access_phases,
    .phase_count = sizeof(access_phases) / sizeof(access_phases[0]),
};
