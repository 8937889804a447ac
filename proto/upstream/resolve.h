/*
 * resolve.h: `server NAME:PORT resolve` with `resolver ADDRESS`: a small DNS
 * client (A and AAAA records over UDP) on the daemon's main loop
 * re-resolves the names every `valid`; new addresses join the upstream,
 * vanished ones drain.
 */
#ifndef CORRAL_PROTO_RESOLVE_H
#define CORRAL_PROTO_RESOLVE_H

#include "proto/upstream/dns_message.h"
#include "proto/upstream/upstream.h"

/* The shortest and longest wait between two rounds when the answers'
 * TTLs set it (no `valid=`): a TTL of 0 does not make a query loop, and
 * a day-long one still lets a name move within the hour. */
#define RESOLVE_TTL_MIN_MS 1000u
#define RESOLVE_TTL_MAX_MS (3600u * 1000)
/* The wait after a round that brought no TTL (no answer, no record). */
#define RESOLVE_RETRY_MS (30u * 1000)

/* Starts re-resolving the `resolve` servers of `up` on `loop` (the main
 * loop), at once and then as the answers' TTLs say, or every valid=
 * when the resolver has one; a no-op without any.  Loop thread
 * only.  Returns 0 or -errno. */
int resolve_start(struct proxy_upstream *up, corral_loop *loop);

/* Stops it; upstream_free() calls it.  Loop thread only. */
void resolve_stop(struct proxy_upstream *up);

#endif
