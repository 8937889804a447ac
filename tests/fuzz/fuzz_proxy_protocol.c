/*
 * fuzz_proxy_protocol.c: libFuzzer over proxy_protocol_parse(): each input
 * is what a load balancer (or anyone who reaches a proxy_protocol listen)
 * sends first.  It is parsed whole and at every shorter length, and the
 * answers must agree: a prefix asks for more or fails as the whole does,
 * and a complete header parses the same from its own bytes alone.
 */
#include "proto/proxy_protocol.h"

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
    }
    size_t end = whole > 0 ? (size_t)whole : size;
    for (size_t len = 0; len < end; len++) {
        ssize_t r = proxy_protocol_parse(copy, len, &h);
        assert(r == 0 || (whole < 0 && r == whole) || (whole < 0 && r < 0));
    }
    free(copy);
    return 0;
}
