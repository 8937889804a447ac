/*
 * resolve.h: `server NAME:PORT resolve` with `resolver ADDRESS`: a small DNS
 * client (A and AAAA records over UDP) on the daemon's main loop
 * re-resolves the names every `valid`; new addresses join the upstream,
 * vanished ones drain.
 */
#ifndef CORRAL_PROTO_RESOLVE_H
#define CORRAL_PROTO_RESOLVE_H

#include "proto/upstream/upstream.h"

#include <netinet/in.h>

#define DNS_TYPE_A    1
#define DNS_TYPE_AAAA 28

/* An address of an answer: an A record's (AF_INET, 4 bytes) or an AAAA
 * record's (AF_INET6, 16 bytes). */
struct dns_addr {
    int family;
    uint8_t bytes[16];
};

/* Writes a query for the records of `type` (DNS_TYPE_A or DNS_TYPE_AAAA)
 * of `name` with `id` into `out`.  Returns its length, or -EINVAL for a
 * name DNS cannot carry or a buffer too small. */
int resolve_query_build(const char *name, uint16_t id, uint16_t type, uint8_t *out, size_t size);

/* Reads an answer to query `id` (peer bytes): the addresses of its records
 * of `type` (what was asked), at most `max` of them, into `out`, and the
 * least TTL of those records (seconds) into *ttl, which stays as it was
 * when there are none.  Returns how many records there are (0 for a name
 * that does not exist or has none; more than `max` when some did not
 * fit), -EAGAIN for an answer that says nothing (a server failure, a
 * truncated answer), or -EINVAL for one that is malformed or not for
 * `id`. */
int resolve_answer_parse(const uint8_t *msg, size_t len, uint16_t id, uint16_t type,
                         struct dns_addr *out, size_t max, uint32_t *ttl);

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
