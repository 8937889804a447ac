/*
 * h2_frames.c: the hand-built HTTP/2 bytes of h2_frames.h.
 */
#include "h2_frames.h"

#include "proto/http2/h2_frame.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

void h2_frames_put(struct h2_frames_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

void h2_frames_drop(struct h2_frames_buf *b, size_t n)
{
    ck_assert_uint_le(n, b->len);
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void h2_frames_sink_write(void *arg, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        h2_frames_put(arg, iov[i].iov_base, iov[i].iov_len);
}

void h2_frames_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

void h2_frames_frame(struct h2_frames_buf *b, uint8_t type, uint8_t flags, uint32_t sid,
                     const void *payload, size_t len)
{
    uint8_t hd[H2_FRAME_HEADER_LEN];
    hd[0] = (uint8_t)(len >> 16);
    hd[1] = (uint8_t)(len >> 8);
    hd[2] = (uint8_t)len;
    hd[3] = type;
    hd[4] = flags;
    h2_frames_be32(hd + 5, sid);
    h2_frames_put(b, hd, sizeof(hd));
    h2_frames_put(b, payload, len);
}

void h2_frames_setting(struct h2_frames_buf *b, uint16_t id, uint32_t v)
{
    uint8_t e[6] = {(uint8_t)(id >> 8), (uint8_t)id};
    h2_frames_be32(e + 2, v);
    h2_frames_put(b, e, sizeof(e));
}

void h2_frames_u32_frame(struct h2_frames_buf *b, uint8_t type, uint32_t sid, uint32_t v)
{
    uint8_t p[4];
    h2_frames_be32(p, v);
    h2_frames_frame(b, type, 0, sid, p, sizeof(p));
}

void h2_frames_start(struct h2_frames_buf *b)
{
    h2_frames_put(b, H2_PREFACE, H2_PREFACE_LEN);
    h2_frames_frame(b, H2_SETTINGS, 0, 0, NULL, 0);
}

struct hpack_field h2_frames_field(const char *name, const char *value)
{
    return (struct hpack_field){(const uint8_t *)name, strlen(name), (const uint8_t *)value,
                                strlen(value), false};
}
