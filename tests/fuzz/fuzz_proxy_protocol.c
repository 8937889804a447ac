/*
 * fuzz_proxy_protocol.c: libFuzzer over proxy_protocol_parse(): each input
 * is what a load balancer (or anyone who reaches a proxy_protocol listen)
 * sends first.  It is parsed whole and at every shorter length, and the
 * answers must agree: a prefix asks for more or fails as the whole does,
 * and a complete header parses the same from its own bytes alone.  What
 * parses is encoded again (proxy_protocol_encode(), v1 and v2) and must
 * parse back to the same addresses; the input's first bytes, taken as two
 * addresses of either family, must too.
 */
#include "proto/http/proxy_protocol.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_header(const struct proxy_protocol_header *h)
{
    assert(h->version == 1 || h->version == 2);
    if (!h->has_address)
        return;
    if (h->source.sa.sa_family == AF_INET)
        assert(h->address_len == sizeof(struct sockaddr_in) &&
               h->destination.sa.sa_family == AF_INET);
    else
        assert(h->source.sa.sa_family == AF_INET6 &&
               h->address_len == sizeof(struct sockaddr_in6) &&
               h->destination.sa.sa_family == AF_INET6);
}

/* Two addresses as the parser gives them back: each IPv4 one of a mixed
 * pair is mapped into IPv6. */
static bool same_address(const struct sockaddr *sent, const struct sockaddr *other,
                         const struct sockaddr *got)
{
    if (sent->sa_family == other->sa_family)
        return sent->sa_family == AF_INET
                   ? memcmp(&((const struct sockaddr_in *)sent)->sin_addr,
                            &((const struct sockaddr_in *)got)->sin_addr, 4) == 0 &&
                         ((const struct sockaddr_in *)sent)->sin_port ==
                             ((const struct sockaddr_in *)got)->sin_port
                   : memcmp(&((const struct sockaddr_in6 *)sent)->sin6_addr,
                            &((const struct sockaddr_in6 *)got)->sin6_addr, 16) == 0 &&
                         ((const struct sockaddr_in6 *)sent)->sin6_port ==
                             ((const struct sockaddr_in6 *)got)->sin6_port;
    const struct sockaddr_in6 *g = (const struct sockaddr_in6 *)got;
    if (sent->sa_family == AF_INET6)
        return same_address(sent, sent, got);
    const struct sockaddr_in *in = (const struct sockaddr_in *)sent;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return g->sin6_family == AF_INET6 && memcmp(g->sin6_addr.s6_addr, mapped, 12) == 0 &&
           memcmp(g->sin6_addr.s6_addr + 12, &in->sin_addr, 4) == 0 && g->sin6_port == in->sin_port;
}

/* Encodes src > dst in both versions and parses each back. */
static void round_trip(const struct sockaddr *src, const struct sockaddr *dst)
{
    for (unsigned version = 1; version <= 2; version++) {
        char buf[PROXY_PROTOCOL_SEND_MAX];
        ssize_t n = proxy_protocol_encode(version, src, dst, buf, sizeof(buf));
        assert(n > 0 && n <= PROXY_PROTOCOL_SEND_MAX);
        assert(proxy_protocol_encode(version, src, dst, buf, (size_t)n - 1) == -ENOSPC);
        struct proxy_protocol_header h;
        assert(proxy_protocol_parse(buf, (size_t)n, &h) == n);
        assert(h.version == version);
        bool ip = src != NULL && dst != NULL &&
                  (src->sa_family == AF_INET || src->sa_family == AF_INET6) &&
                  (dst->sa_family == AF_INET || dst->sa_family == AF_INET6);
        assert(h.has_address == ip);
        if (ip) {
            check_header(&h);
            assert(same_address(src, dst, &h.source.sa));
            assert(same_address(dst, src, &h.destination.sa));
        }
    }
}

/* An address from the fuzzer's bytes: IPv4, IPv6 or neither, as the
 * first says. */
static size_t take_address(const uint8_t *data, size_t size, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    if (size < 1 + 16 + 2)
        return 0;
    if (data[0] % 3 == 0) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, data + 1, 4);
        memcpy(&in->sin_port, data + 17, 2);
    } else if (data[0] % 3 == 1) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, data + 1, 16);
        memcpy(&in6->sin6_port, data + 17, 2);
    } else {
        out->ss_family = AF_UNIX;
    }
    return 1 + 16 + 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so that ASan sees any read past it. */
    char *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    struct proxy_protocol_header h;
    ssize_t whole = proxy_protocol_parse(copy, size, &h);
    assert(whole == 0 || whole == -EPROTO || whole == -EMSGSIZE ||
           (whole > 0 && (size_t)whole <= size));
    assert(whole <= PROXY_PROTOCOL_MAX);
    if (whole > 0) {
        check_header(&h);
        struct proxy_protocol_header alone;
        assert(proxy_protocol_parse(copy, (size_t)whole, &alone) == whole);
        assert(alone.has_address == h.has_address);
        if (h.has_address)
            round_trip(&h.source.sa, &h.destination.sa);
    }
    struct sockaddr_storage src, dst;
    size_t used = take_address(data, size, &src);
    if (used > 0 && take_address(data + used, size - used, &dst) > 0)
        round_trip((struct sockaddr *)&src, (struct sockaddr *)&dst);
    size_t end = whole > 0 ? (size_t)whole : size;
    for (size_t len = 0; len < end; len++) {
        ssize_t r = proxy_protocol_parse(copy, len, &h);
        assert(r == 0 || (whole < 0 && r == whole) || (whole < 0 && r < 0));
    }
    free(copy);
    return 0;
}
