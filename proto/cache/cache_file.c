/*
 * cache_file.c: encoding and checking a cache entry's header
 * (cache_file.h).  Little-endian whatever the host, byte by byte, so
 * that the reader trusts no alignment and no length it has not bounded.
 */
#include "proto/cache/cache_file.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

static const uint8_t magic[8] = {'C', 'O', 'R', 'R', 'A', 'L', 'C', 'F'};

/* Offsets in the fixed part. */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_CRC = 12,
    OFF_HEADER_LEN = 16,
    OFF_STATUS = 20,
    OFF_FLAGS = 22,
    OFF_BODY_LEN = 24,
    OFF_STORED = 32,
    OFF_EXPIRES = 40,
    OFF_AGE = 48,
    OFF_SWR = 56,
    OFF_SIE = 60,
    OFF_BODY_CRC = 64,
    OFF_KEY_LEN = 68,
    OFF_VARY_LEN = 72,
    OFF_VARIANT_LEN = 76,
    OFF_HEAD_LEN = 80,
    OFF_END = 84,
};
_Static_assert(OFF_END <= CACHE_FILE_FIXED, "the fixed part holds its fields");

static void put(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint32_t cache_file_crc(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    uLong c = crc;
    while (len > 0) {
        uInt n = len > 1u << 30 ? 1u << 30 : (uInt)len;
        c = crc32(c, p, n);
        p += n;
        len -= n;
    }
    return (uint32_t)c;
}

size_t cache_file_header_len(const struct cache_file_meta *m)
{
    return CACHE_FILE_FIXED + m->key.len + m->vary.len + m->variant.len + m->head.len;
}

void cache_file_encode(struct cache_file_meta *m, uint8_t *out)
{
    size_t total = cache_file_header_len(m);
    m->header_len = (uint32_t)total;
    memset(out, 0, CACHE_FILE_FIXED);
    memcpy(out + OFF_MAGIC, magic, sizeof(magic));
    put(out + OFF_VERSION, CACHE_FILE_VERSION, 4);
    put(out + OFF_HEADER_LEN, total, 4);
    put(out + OFF_STATUS, m->status, 2);
    put(out + OFF_FLAGS, m->flags, 2);
    put(out + OFF_BODY_LEN, m->body_len, 8);
    put(out + OFF_STORED, (uint64_t)m->stored, 8);
    put(out + OFF_EXPIRES, (uint64_t)m->expires, 8);
    put(out + OFF_AGE, (uint64_t)m->initial_age, 8);
    put(out + OFF_SWR, m->swr, 4);
    put(out + OFF_SIE, m->sie, 4);
    put(out + OFF_BODY_CRC, m->body_crc, 4);
    put(out + OFF_KEY_LEN, m->key.len, 4);
    put(out + OFF_VARY_LEN, m->vary.len, 4);
    put(out + OFF_VARIANT_LEN, m->variant.len, 4);
    put(out + OFF_HEAD_LEN, m->head.len, 4);
    uint8_t *p = out + CACHE_FILE_FIXED;
    const struct http_str *parts[] = {&m->key, &m->vary, &m->variant, &m->head};
    for (size_t i = 0; i < 4; i++) {
        if (parts[i]->len > 0)
            memcpy(p, parts[i]->data, parts[i]->len);
        p += parts[i]->len;
    }
    put(out + OFF_CRC, cache_file_crc(0, out, total), 4);
}

int cache_file_parse(const uint8_t *buf, size_t len, struct cache_file_meta *out)
{
    memset(out, 0, sizeof(*out));
    if (len < CACHE_FILE_FIXED) {
        if (len < sizeof(magic) || memcmp(buf, magic, sizeof(magic)) != 0)
            return -EINVAL;
        out->header_len = CACHE_FILE_FIXED;
        return -EAGAIN;
    }
    if (memcmp(buf + OFF_MAGIC, magic, sizeof(magic)) != 0 ||
        get(buf + OFF_VERSION, 4) != CACHE_FILE_VERSION)
        return -EINVAL;
    /* The fixed part's tail is padding the encoder zeroes: other bytes
     * there, even under a matching CRC, are no header it wrote. */
    if (get(buf + OFF_END, CACHE_FILE_FIXED - OFF_END) != 0)
        return -EINVAL;
    uint64_t total = get(buf + OFF_HEADER_LEN, 4);
    uint64_t key = get(buf + OFF_KEY_LEN, 4), vary = get(buf + OFF_VARY_LEN, 4);
    uint64_t variant = get(buf + OFF_VARIANT_LEN, 4), head = get(buf + OFF_HEAD_LEN, 4);
    /* Each length is below 2^32: their sum cannot overflow 64 bits. */
    if (total > CACHE_FILE_HEADER_MAX || total != CACHE_FILE_FIXED + key + vary + variant + head)
        return -EINVAL;
    out->header_len = (uint32_t)total;
    if (total > len)
        return -EAGAIN;
    uint8_t fixed[CACHE_FILE_FIXED];
    memcpy(fixed, buf, sizeof(fixed));
    put(fixed + OFF_CRC, 0, 4);
    uint32_t crc = cache_file_crc(0, fixed, sizeof(fixed));
    crc = cache_file_crc(crc, buf + CACHE_FILE_FIXED, (size_t)total - CACHE_FILE_FIXED);
    if (crc != (uint32_t)get(buf + OFF_CRC, 4))
        return -EINVAL;
    out->status = (uint16_t)get(buf + OFF_STATUS, 2);
    out->flags = (uint16_t)get(buf + OFF_FLAGS, 2);
    out->body_len = get(buf + OFF_BODY_LEN, 8);
    out->stored = (int64_t)get(buf + OFF_STORED, 8);
    out->expires = (int64_t)get(buf + OFF_EXPIRES, 8);
    out->initial_age = (int64_t)get(buf + OFF_AGE, 8);
    out->swr = (uint32_t)get(buf + OFF_SWR, 4);
    out->sie = (uint32_t)get(buf + OFF_SIE, 4);
    out->body_crc = (uint32_t)get(buf + OFF_BODY_CRC, 4);
    if (out->status < 100 || out->status > 599 || out->body_len > INT64_MAX)
        return -EINVAL;
    const char *p = (const char *)buf + CACHE_FILE_FIXED;
    out->key = (struct http_str){p, (size_t)key};
    p += key;
    out->vary = (struct http_str){p, (size_t)vary};
    p += vary;
    out->variant = (struct http_str){p, (size_t)variant};
    p += variant;
    out->head = (struct http_str){p, (size_t)head};
    return 0;
}
