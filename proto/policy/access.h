/*
 * access.h: who a request's client is and whether it may come in: the
 * real client address behind trusted proxies (nginx's set_real_ip_from,
 * real_ip_header, real_ip_recursive) and the allow/deny rules checked
 * against it.  The config language fills struct access_conf; the router
 * runs the checks (access_phase()) once a request's location is known.
 */
#ifndef CORRAL_PROTO_ACCESS_H
#define CORRAL_PROTO_ACCESS_H

#include "conf/directive.h"

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An IPv4 or IPv6 network ("192.0.2.0/24"; an address alone is a /32 or
 * /128), or every address. */
struct access_net {
    uint8_t family;   /* AF_INET, AF_INET6; AF_UNSPEC: all */
    uint8_t bits;     /* the prefix length */
    uint8_t addr[16]; /* network byte order, the bits past the prefix zero */
};

struct access_rule {
    struct access_net net;
    bool allow; /* else deny */
};

/* One level's settings (top level, server, location; the admin block's
 * allow/deny, which inherit nothing), its parents' merged in by the
 * module's merge: a list a level does not write is its parent's as a
 * whole, as in nginx, and so are real_ip_header and real_ip_recursive.
 * The config owns the arrays and the string: the level that wrote them,
 * not those that inherit them (`inherited`). */
struct access_conf {
    struct access_net *real_ip_from; /* set_real_ip_from: trusted proxies */
    size_t real_ip_from_count;
    char *real_ip_header;        /* real_ip_header NAME; NULL: X-Real-IP */
    bool real_ip_proxy_protocol; /* real_ip_header proxy_protocol */
    bool real_ip_recursive;
    struct access_rule *rules; /* allow and deny, in order */
    size_t rule_count;
    /* Whether the level wrote real_ip_header itself; where it wrote
     * real_ip_recursive (file NULL: it did not). */
    bool has_real_ip_header;
    struct conf_pos real_ip_recursive_pos;
    /* What it holds of its parent's, which it does not free. */
    bool inherited_real_ip_from, inherited_real_ip_header, inherited_rules;
};

/* Whether `conf` asks for anything: else access_check() need not run. */
static inline bool access_conf_active(const struct access_conf *conf)
{
    return conf->real_ip_from_count > 0 || conf->rule_count > 0;
}

struct exchange;
struct http_request;

/* Sets the exchange's client address (its `client`, which
 * exchange_client_host() formats) for `req`, which came on `conn`: the
 * connection's peer (the source of its PROXY header, if any), replaced by
 * the address in conf's real_ip_header when that peer is trusted; then
 * checks the allow/deny rules against it.  Returns 0, or 403 when a rule
 * denies the client.  `conf` NULL (the location has none of these): the
 * peer, and no rules.  The router calls it for every request it routes. */
unsigned access_check(struct exchange *ex, const corral_conn *conn, const struct access_conf *conf,
                      const struct http_request *req);

/* access_check() for an exchange whose client address is set already:
 * the location's rules (and real_ip settings), once it is known. */
unsigned access_check_routed(struct exchange *ex, const struct access_conf *conf,
                             const struct http_request *req);

/* The router's phase handlers (router.h): the connection's peer as the
 * client's address (post-read), then the location's (or, with none, the
 * server's) real_ip and allow/deny (access): 403 when a rule denies,
 * else on to the authentication handlers of the phase; under `satisfy
 * any` (satisfy.h) an allow rule skips them and a denial is theirs to
 * overrule. */
struct router_walk;
int access_peer_phase(struct router_walk *w);
int access_phase(struct router_walk *w);

/* Parses "192.0.2.0/24", "2001:db8::/32", an address alone, or (with
 * `all_ok`) "all" into *out, dropping the bits past the prefix, as nginx
 * does.  Returns 0, or -1 with why in `message` (`len` bytes).  The
 * module's allow/deny and set_real_ip_from and the admin block's
 * allow/deny (conf/) read their addresses with it. */
int access_net_parse(const char *text, bool all_ok, struct access_net *out, char *message,
                     size_t len);

/* Adds an allow (else deny) rule for `net` to `conf`'s list.  Returns 0,
 * or -1 when out of memory. */
int access_rule_add(struct access_conf *conf, bool allow, const struct access_net *net);

/* Frees what `conf` owns. */
void access_conf_free(struct access_conf *conf);

/* Whether `addr` (IPv4, or IPv6: an IPv4-mapped one counts as IPv4) is
 * in `net`. */
bool access_net_contains(const struct access_net *net, const struct sockaddr *addr);

/* What `conf`'s allow/deny rules say of a client at `addr` (NULL:
 * unknown, which only "all" matches), without real_ip: false when the
 * first rule that matches denies it, else true (no rule matches). */
bool access_rules_allow(const struct access_conf *conf, const struct sockaddr *addr);

/* The modules (module.h): the connection's peer as the client's address
 * (post-read), in every site; and the configured real_ip and allow/deny
 * (access phase), its struct per level a struct access_conf, built for
 * the levels that set something (access_conf_active()). */
struct http_module;
extern struct http_module access_peer_module;
extern struct http_module access_module;

#endif
