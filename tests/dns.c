/*
 * dns.c: the tests' DNS server on loopback (dns.h).
 */
#include "tests/dns.h"

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
        uint8_t q[512], out[600];
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
        out[2] = 0x81; /* a response, recursion desired */
        out[3] = 0x80; /* recursion available, no error */
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
    d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(d->fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(getsockname(d->fd, (struct sockaddr *)&addr, &len), 0);
    d->port = ntohs(addr.sin_port);
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
void dns_answer_v6(struct dns_server *d, const char *ip)
{
    ck_assert_int_eq(inet_pton(AF_INET6, ip, d->v6), 1);
    atomic_store(&d->has_v6, true);
}

void dns_free(struct dns_server *d)
{
    atomic_store(&d->stop, true);
    pthread_join(d->thread, NULL);
    close(d->fd);
    free(d);
}
