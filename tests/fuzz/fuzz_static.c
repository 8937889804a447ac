/*
 * fuzz_static.c: libFuzzer over the request headers static files parse
 * (proto/static/): the input's first 8 bytes are a file's size (its
 * modification time the next 8), the rest a header value, read as a
 * Range (the ranges kept must lie in the file, sorted, disjoint, at most
 * STATIC_RANGES_MAX), as an HTTP date (a date parsed must format back to
 * one that parses to the same time), as each precondition header (If-Match,
 * If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range) and as a
 * request path to normalise (what comes out starts with '/' and has no
 * dot segment).
 */
#include "proto/static/static_cond.h"
#include "proto/static/static_path.h"
#include "proto/static/static_range.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t file_size = 0, mtime = 0;
    if (size >= 8) {
        memcpy(&file_size, data, 8);
        data += 8;
        size -= 8;
    }
    if (size >= 8) {
        memcpy(&mtime, data, 8);
        data += 8;
        size -= 8;
    }
    /* A copy of exactly its size: ASan sees any read past the value. */
    char *value = malloc(size > 0 ? size : 1);
    if (value == NULL)
        return 0;
    memcpy(value, data, size);
    struct http_str s = {value, size};

    struct static_range r[STATIC_RANGES_MAX];
    size_t n = 99;
    enum static_range_result res = static_range_parse(s, file_size, r, &n);
    if (res == STATIC_RANGE_OK) {
        assert(n >= 1 && n <= STATIC_RANGES_MAX);
        for (size_t i = 0; i < n; i++) {
            assert(r[i].first <= r[i].last && r[i].last < file_size);
            assert(i == 0 || r[i].first > r[i - 1].last + 1);
        }
    } else {
        assert(n == 0);
    }

    int64_t t;
    if (static_date_parse(s, &t)) {
        char text[STATIC_DATE_LEN + 1];
        static_date_format(text, t);
        int64_t again;
        assert(static_date_parse((struct http_str){text, STATIC_DATE_LEN}, &again) && again == t);
    }

    char etag[STATIC_ETAG_MAX];
    size_t etag_len = static_etag_format(etag, (int64_t)(mtime >> 1), file_size);
    struct static_validators v = {
        .mtime = (int64_t)(mtime >> 1), .size = file_size, .etag = etag, .etag_len = etag_len};
    static const char *const names[] = {"If-Match", "If-None-Match", "If-Modified-Since",
                                        "If-Unmodified-Since", "If-Range"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct http_header h[2] = {{{names[i], strlen(names[i])}, s}, {{"If-None-Match", 13}, s}};
        struct http_request req = {.method = {"GET", 3}, .headers = h, .header_count = 2};
        unsigned status = static_cond_check(&req, &v, (enum static_ims)(mtime % 3));
        assert(status == 0 || status == 304 || status == 412);
        (void)static_cond_if_range(&req, &v);
    }

    char path[256];
    size_t len;
    if (static_path_normalise(value, size, path, sizeof(path), &len) == 0) {
        assert(len == strlen(path) && path[0] == '/');
        assert(!static_path_has_dot_segment(path));
    }
    free(value);
    return 0;
}
