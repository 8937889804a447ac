/*
 * site.c: which virtual host and location of a site serve a request: by
 * Host (or SNI) name, exact or wildcard, refusing a request that Host
 * sends to another TLS server block than SNI did; then by path, exact,
 * prefix or regex; and the names of the site's counters.
 */
#include "proto/http/site.h"

#include "proto/http/regex.h"
#include "proto/tls/tls.h"

#include <string.h>
#include <strings.h>

/* How a server name as written (not a "~" regex one) matches `host`
 * (`len` bytes): not at all, else by kind, as nginx ranks them (the
 * lower the better), with the length that ranks it within a kind in
 * *weight. */
enum name_kind {
    NAME_NONE,
    NAME_EXACT,
    NAME_LEADING,  /* "*.example.com" */
    NAME_TRAILING, /* "www.example.*" */
};

static enum name_kind name_match(const char *name, const char *host, size_t len, size_t *weight)
{
    if (name[0] == '~')
        return NAME_NONE; /* a regex: matched by its compiled form */
    size_t name_len = strlen(name);
    *weight = name_len;
    if (name[0] == '*' && name[1] == '.') {
        /* "*.example.com" matches "a.example.com", not "example.com". */
        size_t suffix = name_len - 1;
        return len > suffix && strncasecmp(host + len - suffix, name + 1, suffix) == 0
                   ? NAME_LEADING
                   : NAME_NONE;
    }
    if (name_len > 2 && name[name_len - 1] == '*' && name[name_len - 2] == '.') {
        /* "www.example.*" matches "www.example.org", not "www.example". */
        size_t prefix = name_len - 1;
        return len > prefix && strncasecmp(host, name, prefix) == 0 ? NAME_TRAILING : NAME_NONE;
    }
    return name_len == len && strncasecmp(name, host, len) == 0 ? NAME_EXACT : NAME_NONE;
}

/* Matches `host` (`len` bytes), lowercased into `buf` (SITE_HOST_MAX
 * bytes), against `count` caseless `regexes` in order: the index of the
 * first that matches, its groups in `ovector` (2 * HTTP_REGEX_PAIRS) and
 * their count in *pairs; -1 when none does. */
static int regexes_match(const struct http_regex *const *regexes, size_t count, const char *host,
                         size_t len, char *buf, size_t *ovector, int *pairs)
{
    if (count == 0 || len >= SITE_HOST_MAX)
        return -1;
    /* nginx matches the host lowercased */
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] - 'A' + 'a' : host[i]);
    buf[len] = '\0';
    for (size_t i = 0; i < count; i++) {
        int matched = regex_match(regexes[i], buf, len, ovector);
        if (matched > 0) {
            *pairs = matched;
            return (int)i;
        }
        /* one that gave up (HTTP_REGEX_GAVE_UP) matches nothing */
    }
    return -1;
}

int site_name_regex_match(const struct http_vhost *vhost, const char *host, size_t len, char *buf,
                          size_t *ovector, int *pairs)
{
    return regexes_match(vhost->name_regexes, vhost->name_regex_count, host, len, buf, ovector,
                         pairs);
}

/* The first pass of site_names_find(): the server with the best exact or
 * wildcard name for `host`, else NULL with *regex_next set if any server
 * has a regex name.  Always inlined: where `at` is known, as in HTTP's
 * per-request site_find_vhost(), the servers' names are read as directly
 * as a loop over its own array would read them. */
static inline __attribute__((always_inline)) const void *
names_find(const void *servers, size_t count, site_names_at_fn *at, const char *host, size_t len,
           bool *regex_next)
{
    const void *best = NULL;
    enum name_kind best_kind = NAME_NONE;
    size_t best_weight = 0;
    bool any_regex = false;
    for (size_t i = 0; i < count; i++) {
        struct site_names names;
        const void *server = at(servers, i, &names);
        any_regex |= names.regex_count > 0;
        for (size_t n = 0; n < names.name_count; n++) {
            size_t weight;
            enum name_kind kind = name_match(names.names[n], host, len, &weight);
            if (kind == NAME_EXACT)
                return server;
            if (kind != NAME_NONE &&
                (best == NULL || kind < best_kind || (kind == best_kind && weight > best_weight))) {
                best = server;
                best_kind = kind;
                best_weight = weight;
            }
        }
    }
    *regex_next = best == NULL && any_regex;
    return best;
}

/* The second pass of site_names_find(): the regexes, in the order of the
 * servers in the config (the default server comes first among `servers`
 * wherever it was written, so the first that matches is the one of least
 * `order`); NULL if none matches. */
static inline __attribute__((always_inline)) const void *
names_find_regex(const void *servers, size_t count, site_names_at_fn *at, const char *host,
                 size_t len)
{
    const void *first = NULL;
    unsigned first_order = 0;
    char buf[SITE_HOST_MAX];
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    int pairs;
    for (size_t i = 0; i < count; i++) {
        struct site_names names;
        const void *server = at(servers, i, &names);
        if ((first == NULL || names.order < first_order) &&
            regexes_match(names.regexes, names.regex_count, host, len, buf, ovector, &pairs) >= 0) {
            first = server;
            first_order = names.order;
        }
    }
    return first;
}

const void *site_names_find(const void *servers, size_t count, site_names_at_fn *at,
                            const char *host, size_t len)
{
    bool regex_next = false;
    const void *found = names_find(servers, count, at, host, len, &regex_next);
    return regex_next ? names_find_regex(servers, count, at, host, len) : found;
}

static const void *vhost_names(const void *servers, size_t i, struct site_names *out)
{
    const struct http_vhost *vhost = &((const struct http_vhost *)servers)[i];
    *out = (struct site_names){
        .names = vhost->names,
        .name_count = vhost->name_count,
        .regexes = vhost->name_regexes,
        .regex_count = vhost->name_regex_count,
        .order = vhost->stats_slot,
    };
    return vhost;
}

/* HTTP's regex pass, out of line: site_find_vhost() stays small for the
 * exact and wildcard names most requests are picked by. */
static __attribute__((noinline)) const struct http_vhost *
vhost_find_regex(const struct http_vhost *vhosts, size_t count, const char *host, size_t len)
{
    return names_find_regex(vhosts, count, vhost_names, host, len);
}

const struct http_vhost *site_find_vhost(const struct http_site *site, const char *host, size_t len)
{
    const struct http_vhost *vhosts = site->vhosts;
    size_t count = site->vhost_count;
    bool regex_next = false;
    const struct http_vhost *found = names_find(vhosts, count, vhost_names, host, len, &regex_next);
    if (regex_next)
        found = vhost_find_regex(vhosts, count, host, len);
    return found != NULL ? found : &vhosts[0];
}

const struct http_vhost *site_route_vhost(const struct http_site *site, const corral_conn *conn,
                                          const char *host, size_t len, unsigned *status)
{
    return site_route_vhost_sni(site, tls_conn_server_name(conn), host, len, status);
}

const struct http_vhost *site_route_vhost_sni(const struct http_site *site, const char *sni,
                                              const char *host, size_t len, unsigned *status)
{
    const struct http_vhost *vhost = site_find_vhost(site, host, len);
    /* A client without SNI got the default server's certificates, as one
     * that names no server does; nginx checks only where SNI was sent. */
    if (sni == NULL)
        return vhost;
    const struct http_vhost *negotiated = site_find_vhost(site, sni, strlen(sni));
    if (negotiated->tls_group == vhost->tls_group)
        return vhost;
    *status = 421;
    return negotiated;
}

size_t site_sni_select(void *site, const char *name, size_t len)
{
    const struct http_site *s = site;
    return (size_t)(site_find_vhost(s, name, len) - s->vhosts);
}

/* Where a request goes whose regex location search gave up: a 500, as
 * in nginx, rather than the longest prefix, which may be a location with
 * other rules (allow/deny, limits) than the regex meant to apply. */
static void answer_regex_failure(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    exchange_respond_error(ex, 500);
}

static const struct http_handler regex_failure_handler = {
    .name = "regex-failure",
    .on_request = answer_regex_failure,
};

const struct http_location http_location_regex_failure = {
    .path = "",
    .handler = &regex_failure_handler,
};

const struct http_location *site_search_location(const struct http_vhost *vhost, const char *path,
                                                 size_t len)
{
    const struct http_location *best = NULL;
    bool any_regex = false;
    for (size_t i = 0; i < vhost->location_count; i++) {
        const struct http_location *loc = &vhost->locations[i];
        if (loc->regex != NULL) {
            any_regex = true;
        } else if (loc->named) {
            continue;
        } else if (loc->exact) {
            if (loc->path_len == len && memcmp(loc->path, path, len) == 0)
                return loc;
        } else if (loc->path_len <= len && memcmp(loc->path, path, loc->path_len) == 0 &&
                   (best == NULL || loc->path_len > best->path_len)) {
            best = loc;
        }
    }
    if (!any_regex || (best != NULL && best->no_regex))
        return best;
    for (size_t i = 0; i < vhost->location_count; i++) {
        const struct http_location *loc = &vhost->locations[i];
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        int matched = loc->regex != NULL ? regex_match(loc->regex, path, len, ovector) : 0;
        if (matched == HTTP_REGEX_GAVE_UP)
            return &http_location_regex_failure;
        if (matched > 0)
            return loc;
    }
    return best;
}

const char *const http_timeout_kind_names[HTTP_TIMEOUT_KINDS] = {
    [HTTP_TIMEOUT_HEADER] = "header",
    [HTTP_TIMEOUT_BODY] = "body",
    [HTTP_TIMEOUT_SEND] = "send",
};

void site_stats_count(struct http_stats *stats, const struct http_vhost *vhost, unsigned status,
                      uint64_t ns)
{
    if (stats == NULL || status >= HTTP_MAX_STATUS) /* a backend may send any number */
        return;
    counter_inc(&stats->responses[status]);
    int class = status_class(status);
    if (stats->servers != NULL && vhost->stats_slot < stats->server_count && class >= 0)
        histogram_observe(&stats->servers[vhost->stats_slot].duration[class], ns);
}
