/*
 * fuzz_cache_file.c: libFuzzer over cache_file_parse(), the reader of a
 * cache entry's header, which reads what is on disk (a file torn by a
 * crash, corrupted, or put there by anyone who can write the directory).
 * The input is read whole and cut where its first two bytes say; what
 * parses has lengths that add up within what was read, and encodes back
 * to the same bytes.
 */
#include "proto/cache/cache_file.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(const uint8_t *data, size_t len)
{
    struct cache_file_meta m;
    int rc = cache_file_parse(data, len, &m);
    assert(rc == 0 || rc == -EAGAIN || rc == -EINVAL);
    if (rc == -EAGAIN) {
        assert(m.header_len > len && m.header_len <= CACHE_FILE_HEADER_MAX);
        return;
    }
    if (rc != 0)
        return;
    assert(m.header_len <= len && m.header_len <= CACHE_FILE_HEADER_MAX);
    assert(cache_file_header_len(&m) == m.header_len);
    const char *start = (const char *)data, *end = start + m.header_len;
    const struct http_str *parts[] = {&m.key, &m.vary, &m.variant, &m.head};
    for (size_t i = 0; i < 4; i++)
        assert(parts[i]->data >= start + CACHE_FILE_FIXED && parts[i]->data + parts[i]->len <= end);
    uint8_t *again = malloc(m.header_len);
    assert(again != NULL);
    struct cache_file_meta copy = m;
    cache_file_encode(&copy, again);
    assert(memcmp(again, data, m.header_len) == 0);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    check(copy, size);
    if (size >= 2) {
        size_t cut = ((size_t)data[0] << 8 | data[1]) % size;
        check(copy, cut);
    }
    free(copy);
    return 0;
}
