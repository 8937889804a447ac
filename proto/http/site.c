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

static bool host_matches(const char *name, const char *host, size_t len)
{
    size_t name_len = strlen(name);
    if (name[0] == '*' && name[1] == '.') {
        /* "*.example.com" matches "a.example.com", not "example.com". */
        size_t suffix = name_len - 1;
        return len > suffix && strncasecmp(host + len - suffix, name + 1, suffix) == 0;
    }
    return name_len == len && strncasecmp(name, host, len) == 0;
}

const struct http_vhost *site_find_vhost(const struct http_site *site, const char *host, size_t len)
{
    const struct http_vhost *wildcard = NULL;
    size_t wildcard_len = 0;
    for (size_t i = 0; i < site->vhost_count; i++) {
        const struct http_vhost *vhost = &site->vhosts[i];
        for (size_t n = 0; n < vhost->name_count; n++) {
            const char *name = vhost->names[n];
            if (!host_matches(name, host, len))
                continue;
            if (name[0] != '*')
                return vhost;
            if (strlen(name) > wildcard_len) {
                wildcard = vhost;
                wildcard_len = strlen(name);
            }
        }
    }
    return wildcard != NULL ? wildcard : &site->vhosts[0];
}

const struct http_vhost *site_route_vhost(const struct http_site *site, const corral_conn *conn,
                                          const char *host, size_t len, unsigned *status)
{
    const struct http_vhost *vhost = site_find_vhost(site, host, len);
    /* A client without SNI got the default server's certificates, as one
     * that names no server does; nginx checks only where SNI was sent. */
    const char *sni = tls_conn_server_name(conn);
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
