/*
 * stream_vhost.c: which of the servers sharing a stream address serves a
 * session: the one whose server_name the client's SNI name matches, as
 * nginx (1.25.5 and later) picks a stream virtual server, with the HTTP
 * side's name matching.
 */
#include "proto/http/site.h"
#include "proto/stream/stream.h"

#include <assert.h>

struct stream_site *stream_site_select(struct stream_site *site, const char *name, size_t len)
{
    if (site->vhost_count == 0 || len == 0)
        return site;
    assert(site->vhosts[0] == site); /* the default first */
    struct stream_site *best = NULL;
    enum site_name_kind best_kind = SITE_NAME_NONE;
    size_t best_weight = 0;
    bool any_regex = false;
    for (size_t i = 0; i < site->vhost_count; i++) {
        struct stream_site *vhost = site->vhosts[i];
        any_regex |= vhost->name_regex_count > 0;
        for (size_t n = 0; n < vhost->name_count; n++) {
            size_t weight;
            enum site_name_kind kind = site_name_match(vhost->names[n], name, len, &weight);
            if (kind == SITE_NAME_EXACT)
                return vhost;
            if (kind != SITE_NAME_NONE &&
                (best == NULL || kind < best_kind || (kind == best_kind && weight > best_weight))) {
                best = vhost;
                best_kind = kind;
                best_weight = weight;
            }
        }
    }
    if (best != NULL || !any_regex)
        return best != NULL ? best : site;
    char buf[SITE_HOST_MAX];
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    int pairs;
    for (size_t i = 0; i < site->vhost_count; i++) {
        struct stream_site *vhost = site->vhosts[i];
        if (site_regexes_match(vhost->name_regexes, vhost->name_regex_count, name, len, buf,
                               ovector, &pairs) >= 0)
            return vhost;
    }
    return site;
}

size_t stream_sni_select(void *site, const char *name, size_t len)
{
    struct stream_site *s = site;
    struct stream_site *picked = stream_site_select(s, name, len);
    for (size_t i = 0; i < s->vhost_count; i++)
        if (s->vhosts[i] == picked)
            return i;
    return 0;
}
