/*
 * runtime_stream.c: the sites of a configuration's stream listens: each a
 * struct stream_site with its server block's settings and the upstream
 * its proxy_pass names, and per-worker counters.
 */
#include "cmd/runtime.h"
#include "cmd/runtime_limit.h"

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

int stream_site_build(struct site *site, const struct conf_stream_server *server,
                      const struct conf_stream_listen *listen, struct proxy_upstream *upstream,
                      struct stream_route *route, const struct runtime_limits *limits,
                      const struct conf_stream *stream, unsigned workers)
{
    site->address = strdup(listen->address);
    site->stream = calloc(1, sizeof(*site->stream));
    if (site->address == NULL || site->stream == NULL) {
        stream_route_free(route);
        return -ENOMEM;
    }
    site->stream->route = route;
    site->stream_server = server;
    size_t stats_size = (workers > 0 ? workers : 1) * sizeof(struct stream_stats);
    site->stream->stats = aligned_alloc(64, stats_size);
    if (site->stream->stats == NULL)
        return -ENOMEM;
    memset(site->stream->stats, 0, stats_size);
    site->stream->conf = &server->conf;
    site->stream->upstream = upstream;
    site->stream->proxy_protocol = listen->proxy_protocol;
    const char *zone = server->limit_zone != NULL ? server->limit_zone : stream->limit_zone;
    if (zone != NULL) {
        const struct conf_pos *pos =
            server->limit_zone != NULL ? &server->limit_pos : &stream->limit_pos;
        uint64_t rate;
        if (runtime_limits_find(limits, zone, &site->stream->conn_zone, &site->stream->conn_key,
                                &rate) != 0 ||
            rate != 0) {
            log_error("%s:%u:%u: no limit_conn_zone \"%s\"", pos->file, pos->line, pos->col, zone);
            return -EINVAL;
        }
        site->stream->conn_max =
            server->limit_zone != NULL ? server->limit_conn : stream->limit_conn;
    }
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

void stream_site_free(struct site *site)
{
    if (site->stream == NULL)
        return;
    free(site->stream->stats);
    free(site->stream->udp_workers);
    stream_route_free((struct stream_route *)site->stream->route);
    free(site->stream);
    site->stream = NULL;
}
