/*
 * runtime_cache.h: the cache zones seen from the daemon (runtime_cache.c):
 * their metrics, and the admin API's purge.
 */
#ifndef CORRAL_CMD_RUNTIME_CACHE_H
#define CORRAL_CMD_RUNTIME_CACHE_H

#include "cmd/metrics.h"
#include "proto/http/exchange.h"

/* Each zone's counters, size and loader progress (Prometheus text). */
void runtime_cache_metrics(struct text *t);

/* POST (or PURGE, DELETE) /cache/purge?zone=NAME&key=KEY on the admin
 * listener: the entries of KEY (percent-encoded; a trailing "*" makes it
 * a prefix) leave the zone.  200 with how many went, 400 for a request
 * without both, 404 for an unknown zone, 405 for another method.  The
 * admin gate runs first; the daemon refuses it where the admin listener
 * has neither a token nor client certificates (admin_refuse_handler). */
extern const struct http_handler admin_cache_purge_handler;

/* 403 for an endpoint that changes the daemon's state where the admin
 * listener authenticates nobody. */
extern const struct http_handler admin_refuse_handler;

#endif
