/*
 * runtime_stream.c: the sites of a configuration's stream listens: each a
 * struct stream_site with its server block's settings and the upstream
 * its proxy_pass names, and per-worker counters.
 */
#include "cmd/runtime.h"
#include "cmd/runtime_limit.h"
#include "cmd/runtime_vars.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void stream_route_free(struct stream_route *route)
{
    if (route == NULL)
        return;
    for (size_t i = 0; i < route->count; i++)
        regex_free(route->entries[i].regex);
    free(route->entries);
    free(route);
}

/* The settings of `server` in `st`: the ones a listen's servers do not
 * share (conf, upstream or route, limit_conn, names). */
static int stream_site_fill(struct stream_site *st, const struct conf_stream_server *server,
                            const struct conf_stream_listen *listen,
                            struct proxy_upstream *upstream, struct stream_route *route,
                            const struct runtime_limits *limits, const struct conf_stream *stream,
                            struct runtime_vars *vars)
{
    st->route = route;
    st->origin = server;
    st->conf = &server->conf;
    st->upstream = upstream;
    st->proxy_protocol = listen->proxy_protocol;
    st->names.names = (const char *const *)server->server_names;
    st->names.name_count = server->server_name_count;
    const char *zone = server->limit_zone != NULL ? server->limit_zone : stream->limit_zone;
    if (zone != NULL) {
        const struct conf_pos *pos =
            server->limit_zone != NULL ? &server->limit_pos : &stream->limit_pos;
        uint64_t rate;
        if (runtime_limits_find(limits, zone, &st->conn_zone, &st->conn_key, &rate) != 0 ||
            rate != 0) {
            log_error("%s:%u:%u: no limit_conn_zone \"%s\"", pos->file, pos->line, pos->col, zone);
            return -EINVAL;
        }
        st->conn_max = server->limit_zone != NULL ? server->limit_conn : stream->limit_conn;
    }
    /* The "~" names compiled (caseless, as nginx's), which `vars` owns. */
    return runtime_vars_name_regexes(vars, server->server_names, server->server_name_pos,
                                     server->server_name_count, &st->names.regexes,
                                     &st->names.regex_count);
}

int stream_site_build(struct site *site, const struct conf_stream_server *server,
                      const struct conf_stream_listen *listen, struct proxy_upstream *upstream,
                      struct stream_route *route, const struct runtime_limits *limits,
                      const struct conf_stream *stream, struct runtime_vars *vars, unsigned workers)
{
    site->address = strdup(listen->address);
    site->stream = calloc(1, sizeof(*site->stream));
    if (site->address == NULL || site->stream == NULL) {
        stream_route_free(route);
        return -ENOMEM;
    }
    site->stream_server = server;
    size_t stats_size = (workers > 0 ? workers : 1) * sizeof(struct stream_stats);
    site->stream->stats = aligned_alloc(64, stats_size);
    if (site->stream->stats == NULL) {
        stream_route_free(route);
        return -ENOMEM;
    }
    memset(site->stream->stats, 0, stats_size);
    int err = stream_site_fill(site->stream, server, listen, upstream, route, limits, stream, vars);
    if (err != 0)
        return err;
    if (listen->udp) {
        site->stream->udp_workers =
            calloc(workers > 0 ? workers : 1, sizeof(*site->stream->udp_workers));
        if (site->stream->udp_workers == NULL)
            return -ENOMEM;
    }
    corral_listen_options_init(&site->listen_options);
    /* The watermarks of the client side: proxy_buffer_size. */
    site->listen_options.high_watermark = server->conf.buffer_size;
    site->listen_options.low_watermark = server->conf.buffer_size / 4;
    return 0;
}

int stream_vhost_add(struct site *site, const struct conf_stream_server *server,
                     const struct conf_stream_listen *listen, struct proxy_upstream *upstream,
                     struct stream_route *route, const struct runtime_limits *limits,
                     const struct conf_stream *stream, struct runtime_vars *vars)
{
    struct stream_site *first = site->stream;
    size_t count = first->vhost_count > 0 ? first->vhost_count : 1;
    struct stream_site **vhosts = realloc((void *)first->vhosts, (count + 1) * sizeof(*vhosts));
    struct stream_site *st = calloc(1, sizeof(*st));
    if (vhosts == NULL || st == NULL) {
        free(st);
        stream_route_free(route);
        if (vhosts != NULL)
            first->vhosts = vhosts;
        return -ENOMEM;
    }
    if (first->vhost_count == 0)
        vhosts[0] = first;
    vhosts[count] = st;
    first->vhosts = vhosts;
    first->vhost_count = count + 1;
    st->stats = first->stats;          /* the address's counters */
    st->names.order = (unsigned)count; /* the servers come in the config's order */
    int err = stream_site_fill(st, server, listen, upstream, route, limits, stream, vars);
    if (err != 0 || !listen->default_server)
        return err;
    /* The default server: the listener's site, first among the vhosts;
     * the others keep their order. */
    memmove(&vhosts[1], &vhosts[0], count * sizeof(*vhosts));
    vhosts[0] = st;
    st->vhosts = vhosts;
    st->vhost_count = count + 1;
    first->vhosts = NULL;
    first->vhost_count = 0;
    site->stream = st;
    site->stream_server = server;
    site->listen_options.high_watermark = server->conf.buffer_size;
    site->listen_options.low_watermark = server->conf.buffer_size / 4;
    return 0;
}

void stream_site_free(struct site *site)
{
    if (site->stream == NULL)
        return;
    struct stream_site *st = site->stream;
    for (size_t i = 0; i < st->vhost_count; i++) {
        struct stream_site *vhost = st->vhosts[i];
        if (vhost == st)
            continue;
        stream_route_free((struct stream_route *)vhost->route);
        free(vhost);
    }
    free((void *)st->vhosts);
    free(st->stats);
    free(st->udp_workers);
    stream_route_free((struct stream_route *)st->route);
    free(st);
    site->stream = NULL;
}
