/*
 * fuzz_dns.c: libFuzzer over the DNS answers the `resolve` client reads
 * from a resolver: the first two bytes pick the query id it waits for, the
 * rest is the datagram, read as an answer to an A, an AAAA and an SRV
 * query (whose targets' names follow compression pointers).
 * Nothing may be read past it, what is returned must fit what was asked,
 * and a TTL must be one RFC 2181 allows.
 */
#include "proto/upstream/resolve.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint16_t id = (uint16_t)(data[0] << 8 | data[1]);
    size -= 2;
    /* An exact-size copy, so that ASan sees any read past the end. */
    uint8_t *msg = malloc(size > 0 ? size : 1);
    if (msg == NULL)
        return 0;
    memcpy(msg, data + 2, size);
    static const uint16_t types[] = {DNS_TYPE_A, DNS_TYPE_AAAA};
    for (size_t t = 0; t < 2; t++) {
        struct dns_addr out[3];
        uint32_t ttl = UINT32_MAX;
        int n = resolve_answer_parse(msg, size, id, types[t], out, 3, &ttl);
        if (n < 0 && n != -EINVAL && n != -EAGAIN)
            abort();
        if (n > 0 && ttl > INT32_MAX) /* every record counted has a TTL, RFC 2181's */
            abort();
        for (int i = 0; i < n && i < 3; i++)
            if (out[i].family != (types[t] == DNS_TYPE_A ? AF_INET : AF_INET6))
                abort();
    }
    struct dns_srv srv[2];
    uint32_t ttl = UINT32_MAX;
    int n = resolve_srv_parse(msg, size, id, srv, 2, &ttl);
    if (n < 0 && n != -EINVAL && n != -EAGAIN)
        abort();
    for (int i = 0; i < n && i < 2; i++) {
        size_t len = strnlen(srv[i].target, sizeof(srv[i].target));
        /* a host name, never empty (the root is no target), within bounds */
        if (len == 0 || len > DNS_NAME_MAX || srv[i].target[0] == '.' ||
            srv[i].target[len - 1] == '.')
            abort();
    }
    free(msg);
    return 0;
}
