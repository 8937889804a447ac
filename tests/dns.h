/*
 * dns.h: a DNS server on loopback for tests: a thread answering every
 * query with A, AAAA or SRV records of its choosing, counting the
 * queries.
 */
#ifndef CORRAL_TEST_DNS_H
#define CORRAL_TEST_DNS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A DNS server on 127.0.0.1 answering every query with the A records of
 * `addrs` (the first `count`), TTL 1 s. */
struct dns_server {
    int fd, port;
    pthread_t thread;
    atomic_bool stop;
    atomic_uint count, queries;
    _Atomic uint32_t addrs[16]; /* network order */
    atomic_bool has_v6;         /* AAAA queries get v6, else no record */
    uint8_t v6[16];             /* set before has_v6 */
    atomic_uint v6_queries;
    /* SRV queries: the name asked last (read once the server stopped),
     * and the records, written before srv_count publishes them:
     * priority, weight, port, one-label target (".test" is added) */
    char srv_asked[256];
    atomic_uint srv_queries;
    atomic_uint srv_count;
    atomic_uint srv_first; /* the answer is srv[srv_first] on, srv_count of them */
    struct {
        uint16_t priority, weight, port;
        const char *target;
    } srv[4];
};

/* Starts one on an ephemeral port (d->port), answering with no record. */
struct dns_server *dns_start(void);
/* A queries get `ip` from now on. */
void dns_answer(struct dns_server *d, const char *ip);
/* `count` A records from now on: 127.0.0.1, 127.0.0.2... */
void dns_answer_many(struct dns_server *d, unsigned count);
/* AAAA queries get `ip` from now on. */
void dns_answer_v6(struct dns_server *d, const char *ip);
/* Stops (unless the test stopped it: d->stop set, d->thread joined) and
 * frees it. */
void dns_free(struct dns_server *d);

#endif
