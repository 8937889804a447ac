/*
 * cache.h: the HTTP cache (RFC 9111, nginx's proxy_cache): a content-
 * phase handler that answers from a zone's stored entry when it is fresh,
 * and otherwise lets the proxy fetch the response while its store filter
 * writes it to a temporary file, renamed into the zone when whole.  Its
 * filter sits before every other, so that the stored copy is the
 * backend's (identity, before add_header and compression) and a hit goes
 * through the same filters as a miss.
 */
#ifndef CORRAL_PROTO_CACHE_H
#define CORRAL_PROTO_CACHE_H

/* $upstream_cache_status's values. */
enum cache_status {
    CACHE_STATUS_NONE,
    CACHE_STATUS_MISS,
    CACHE_STATUS_BYPASS,
    CACHE_STATUS_EXPIRED,
    CACHE_STATUS_STALE,
    CACHE_STATUS_UPDATING,
    CACHE_STATUS_REVALIDATED,
    CACHE_STATUS_HIT,
};

/* The module (module.h). */
struct http_module;
extern struct http_module cache_module;

#endif
