/*
 * resolve.h: `server NAME:PORT resolve` with `resolver ADDRESS`: a small DNS
 * client (A records over UDP) on the daemon's main loop re-resolves the
 * names every `valid`; new addresses join the upstream, vanished ones drain.
 */
#ifndef CORRAL_PROTO_RESOLVE_H
#define CORRAL_PROTO_RESOLVE_H

#include "proto/upstream.h"

#include <netinet/in.h>

/* Writes a query for the A records of `name` with `id` into `out`.
 * Returns its length, or -EINVAL for a name DNS cannot carry or a buffer
 * too small. */
int dns_query_build(const char *name, uint16_t id, uint8_t *out, size_t size);

/* Reads an answer to query `id` (peer bytes): the IPv4 addresses of its A
 * records, at most `max` of them, into `out`.  Returns their count (0 for
 * a name that does not exist or has none), -EAGAIN for an answer that
 * says nothing (a server failure, a truncated answer), or -EINVAL for one
 * that is malformed or not for `id`. */
int dns_answer_parse(const uint8_t *msg, size_t len, uint16_t id, struct in_addr *out, size_t max);

/* Starts re-resolving the `resolve` servers of `up` on `loop` (the main
 * loop), at once and then every valid; a no-op without any.  Loop thread
 * only.  Returns 0 or -errno. */
int upstream_resolve_start(struct proxy_upstream *up, corral_loop *loop);

/* Stops it; proxy_upstream_free() calls it.  Loop thread only. */
void upstream_resolve_stop(struct proxy_upstream *up);

#endif
