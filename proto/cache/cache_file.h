/*
 * cache_file.h: the file a cache entry lives in.  A fixed header (magic,
 * version, lengths, times, a CRC-32 of the whole header), then the key,
 * the Vary names and the request's values for them, the response's
 * header lines, then the body.  Written to a temporary file and renamed
 * into place, so that a reader never sees a half-written entry; read
 * back only once its header checks out (cache_file_parse()).
 */
#ifndef CORRAL_PROTO_CACHE_FILE_H
#define CORRAL_PROTO_CACHE_FILE_H

#include "proto/http/http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_FILE_FIXED      88          /* the fixed part of the header */
#define CACHE_FILE_HEADER_MAX (64 * 1024) /* the whole header, at most */
#define CACHE_FILE_VERSION    1

#define CACHE_FILE_MUST_REVALIDATE 1u /* flags: no stale use of it */

/* An entry's header, decoded.  The strings point into the buffer it was
 * parsed from. */
struct cache_file_meta {
    uint32_t header_len; /* where the body starts */
    uint16_t status;
    uint16_t flags;
    uint64_t body_len;
    int64_t stored;          /* wall-clock second it arrived */
    int64_t expires;         /* wall-clock second from which it is stale */
    int64_t initial_age;     /* its age when it arrived */
    uint32_t swr, sie;       /* stale-while-revalidate, stale-if-error */
    uint32_t body_crc;       /* CRC-32 of the body */
    struct http_str key;     /* the cache key, as proxy_cache_key made it */
    struct http_str vary;    /* the response's Vary value (empty: none) */
    struct http_str variant; /* the request's values for those names */
    struct http_str head;    /* the response's header lines, CRLF each */
};

/* The header's length for `m`'s strings. */
size_t cache_file_header_len(const struct cache_file_meta *m);

/* Writes `m`'s header (header_len set from its strings) into `out`
 * (cache_file_header_len() bytes), with its CRC. */
void cache_file_encode(struct cache_file_meta *m, uint8_t *out);

/* Parses the header at the start of `buf` (`len` bytes read of the
 * file).  Returns 0 with *out filled, -EAGAIN when the header is longer
 * than `len` (out->header_len says how long: read that much and call
 * again), or -EINVAL for anything else than a whole, intact header of
 * this version: a wrong magic or version, lengths that do not add up or
 * pass CACHE_FILE_HEADER_MAX, a CRC that does not match.  Reads nothing
 * past `len`; allocates nothing. */
int cache_file_parse(const uint8_t *buf, size_t len, struct cache_file_meta *out);

/* CRC-32 (zlib's) of `len` bytes after `crc` (0 to start). */
uint32_t cache_file_crc(uint32_t crc, const void *data, size_t len);

#endif
