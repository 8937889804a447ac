/*
 * stream_vhost.c: which of the servers sharing a stream address serves a
 * session: the one whose server_name the client's SNI name matches, as
 * nginx (1.25.5 and later) picks a stream virtual server, by the HTTP
 * side's walk of the names.
 */
#include "proto/http/site.h"
#include "proto/stream/stream.h"

#include <assert.h>

static const void *vhost_names(const void *servers, size_t i, struct site_names *out)
{
    const struct stream_site *vhost = ((struct stream_site *const *)servers)[i];
    *out = vhost->names;
    return vhost;
}

struct stream_site *stream_site_select(struct stream_site *site, const char *name, size_t len)
{
    if (site->vhost_count == 0 || len == 0)
        return site;
    assert(site->vhosts[0] == site); /* the default first */
    /* One of site->vhosts, given back as the const void * the walk reads. */
    struct stream_site *picked = (struct stream_site *)site_names_find(
        site->vhosts, site->vhost_count, vhost_names, name, len);
    return picked != NULL ? picked : site;
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
