/*
 * dns.c: the tests' DNS server on loopback (dns.h).
 */
#include "tests/dns.h"
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void *dns_main(void *arg)
{
    struct dns_server *d = arg;
    while (!atomic_load(&d->stop)) {
        struct pollfd p = {.fd = d->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        uint8_t q[512], out[1024];
        struct sockaddr_storage from;
        socklen_t from_len = sizeof(from);
        ssize_t n = recvfrom(d->fd, q, sizeof(q), 0, (struct sockaddr *)&from, &from_len);
        if (n < 17)
            continue;
        size_t pos = 12;
        while (pos < (size_t)n && q[pos] != 0)
            pos += q[pos] + 1u;
        pos += 1 + 4;
        if (pos > (size_t)n)
            continue;
        atomic_fetch_add(&d->queries, 1);
        memcpy(out, q, pos);
        out[2] = 0x81;                             /* a response, recursion desired */
        out[3] = 0x80;                             /* recursion available, no error */
        if (q[pos - 4] == 0 && q[pos - 3] == 33) { /* SRV */
            size_t at = 0;
            for (size_t l = 12; q[l] != 0 && at + q[l] + 1 < sizeof(d->srv_asked); l += q[l] + 1u) {
                memcpy(d->srv_asked + at, q + l + 1, q[l]);
                at += q[l];
                d->srv_asked[at++] = '.';
            }
            d->srv_asked[at > 0 ? at - 1 : 0] = '\0';
            atomic_fetch_add(&d->srv_queries, 1);
            unsigned srv_count = atomic_load(&d->srv_count);
            unsigned srv_first = atomic_load(&d->srv_first);
            unsigned srv_max = sizeof(d->srv) / sizeof(d->srv[0]);
            srv_first = srv_first < srv_max ? srv_first : srv_max;
            srv_count = srv_count < srv_max - srv_first ? srv_count : srv_max - srv_first;
            out[7] = (uint8_t)srv_count;
            for (unsigned i = srv_first; i < srv_first + srv_count; i++) {
                size_t tlen = strlen(d->srv[i].target);
                uint16_t rdlen = (uint16_t)(6 + 1 + tlen + 1 + 4 + 1);
                uint8_t rr[] = {0xc0,
                                0x0c,
                                0,
                                33,
                                0,
                                1,
                                0,
                                0,
                                0,
                                1,
                                0,
                                (uint8_t)rdlen,
                                (uint8_t)(d->srv[i].priority >> 8),
                                (uint8_t)d->srv[i].priority,
                                (uint8_t)(d->srv[i].weight >> 8),
                                (uint8_t)d->srv[i].weight,
                                (uint8_t)(d->srv[i].port >> 8),
                                (uint8_t)d->srv[i].port};
                memcpy(out + pos, rr, sizeof(rr));
                pos += sizeof(rr);
                out[pos++] = (uint8_t)tlen;
                memcpy(out + pos, d->srv[i].target, tlen);
                pos += tlen;
                memcpy(out + pos, "\x04test\x00", 6);
                pos += 6;
            }
            sendto(d->fd, out, pos, 0, (struct sockaddr *)&from, from_len);
            continue;
        }
        bool aaaa = q[pos - 4] == 0 && q[pos - 3] == 28;
        unsigned count = aaaa ? 0 : atomic_load(&d->count);
        out[6] = 0;
        out[7] = (uint8_t)count;
        memset(out + 8, 0, 4);
        if (aaaa && atomic_load(&d->has_v6)) {
            static const uint8_t rr[] = {0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 1, 0, 16};
            atomic_fetch_add(&d->v6_queries, 1);
            out[7] = 1;
            memcpy(out + pos, rr, sizeof(rr));
            memcpy(out + pos + sizeof(rr), d->v6, 16);
            pos += sizeof(rr) + 16;
        }
        for (unsigned i = 0; i < count; i++) {
            static const uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4};
            memcpy(out + pos, rr, sizeof(rr));
            uint32_t a = atomic_load(&d->addrs[i]);
            memcpy(out + pos + sizeof(rr), &a, 4);
            pos += sizeof(rr) + 4;
        }
        sendto(d->fd, out, pos, 0, (struct sockaddr *)&from, from_len);
    }
    return NULL;
}

struct dns_server *dns_start(void)
{
    struct dns_server *d = calloc(1, sizeof(*d));
    ck_assert_ptr_nonnull(d);
    d->fd = test_bind_udp(&d->port);
    ck_assert_int_eq(pthread_create(&d->thread, NULL, dns_main, d), 0);
    return d;
}

void dns_answer(struct dns_server *d, const char *ip)
{
    struct in_addr a;
    ck_assert_int_eq(inet_pton(AF_INET, ip, &a), 1);
    atomic_store(&d->addrs[0], a.s_addr);
    atomic_store(&d->count, 1);
}

/* AAAA queries get `ip` from now on. */
void dns_answer_many(struct dns_server *d, unsigned count)
{
    ck_assert_uint_le(count, sizeof(d->addrs) / sizeof(d->addrs[0]));
    for (unsigned i = 0; i < count; i++)
        atomic_store(&d->addrs[i], htonl(INADDR_LOOPBACK + i));
    atomic_store(&d->count, count);
}

void dns_answer_v6(struct dns_server *d, const char *ip)
{
    ck_assert_int_eq(inet_pton(AF_INET6, ip, d->v6), 1);
    atomic_store(&d->has_v6, true);
}

void dns_free(struct dns_server *d)
{
    if (!atomic_exchange(&d->stop, true)) /* else stopped by the test */
        pthread_join(d->thread, NULL);
    close(d->fd);
    free(d);
}
