/*
 * fuzz_dns.c: libFuzzer over the DNS answers the `resolve` client reads
 * from a resolver: the first two bytes pick the query id it waits for, the
 * rest is the datagram.  Nothing may be read past it, and what is returned
 * must fit what was asked.
 */
#include "proto/resolve.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    struct in_addr out[3];
    int n = dns_answer_parse(msg, size, id, out, 3);
    if (n > 3 || (n < 0 && n != -EINVAL && n != -EAGAIN))
        abort();
    free(msg);
    return 0;
}
