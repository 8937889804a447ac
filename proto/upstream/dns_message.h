/*
 * dns_message.h: the DNS messages the `resolve` client (resolve.c) sends
 * and reads: queries for A, AAAA and SRV records, and the answers, read
 * as what they are, peer bytes: every read bounded by the datagram.
 */
#ifndef CORRAL_PROTO_DNS_MESSAGE_H
#define CORRAL_PROTO_DNS_MESSAGE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_HEADER    12
#define DNS_NAME_MAX  253
#define DNS_TYPE_A    1
#define DNS_TYPE_AAAA 28
#define DNS_TYPE_SRV  33

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

/* An SRV record (RFC 2782): its target's name as text, without the
 * trailing dot. */
struct dns_srv {
    uint16_t priority, weight, port;
    char target[DNS_NAME_MAX + 1];
};

/* Reads an answer to the SRV query `id` as resolve_answer_parse() reads
 * one for addresses: the records, at most `max` into `out` (a target of
 * "." says there is no such service and is not one), the least TTL into
 * *ttl.  A target that is not a host name (a byte other than a letter, a
 * digit, '-' or '_' in a label) makes the answer malformed. */
int resolve_srv_parse(const uint8_t *msg, size_t len, uint16_t id, struct dns_srv *out, size_t max,
                      uint32_t *ttl);

#endif
