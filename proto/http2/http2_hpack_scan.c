/*
 * http2_hpack_scan.c: the walk over HPACK's framing (http2_hpack_scan.h).
 * Peer bytes, read one at a time with no buffer: an integer's value is
 * kept only for a string's length, and only up to the bound.
 */
#include "proto/http2/http2_hpack_scan.h"

/* The string after the one whose length has just been read. */
static void string_read(struct http2_hpack_scan *s)
{
    s->strings--;
    if (s->len > 0)
        s->state = HTTP2_HPACK_STRING;
    else
        s->state = s->strings > 0 ? HTTP2_HPACK_LEN : HTTP2_HPACK_FIELD;
}

size_t http2_hpack_scan(struct http2_hpack_scan *s, uint64_t bound, const uint8_t *p, size_t n,
                        bool *too_long)
{
    *too_long = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        switch (s->state) {
        case HTTP2_HPACK_FIELD:
            s->strings = 0;
            if ((b & 0x80) != 0) { /* indexed: a 7-bit prefix */
                if ((b & 0x7f) == 0x7f)
                    s->state = HTTP2_HPACK_INDEX;
            } else if ((b & 0xe0) == 0x20) { /* a table size update: 5 bits */
                if ((b & 0x1f) == 0x1f)
                    s->state = HTTP2_HPACK_INDEX;
            } else { /* a literal: a 6-bit index with indexing, else 4 */
                uint8_t mask = (b & 0x40) != 0 ? 0x3f : 0x0f;
                s->strings = (b & mask) == 0 ? 2 : 1; /* index 0: a new name */
                s->state = (b & mask) == mask ? HTTP2_HPACK_INDEX : HTTP2_HPACK_LEN;
            }
            break;
        case HTTP2_HPACK_INDEX:
            if ((b & 0x80) == 0)
                s->state = s->strings > 0 ? HTTP2_HPACK_LEN : HTTP2_HPACK_FIELD;
            break;
        case HTTP2_HPACK_LEN:
            s->len = b & 0x7f;
            s->shift = 0;
            if (s->len == 0x7f)
                s->state = HTTP2_HPACK_LEN_MORE;
            else
                string_read(s);
            break;
        case HTTP2_HPACK_LEN_MORE:
            /* Each byte adds to the length: cut at the first that takes
             * it past the bound.  nghttp2 refuses a length of more than
             * 32 bits itself. */
            if (s->shift < 32) {
                s->len += (uint64_t)(b & 0x7f) << s->shift;
                s->shift = (uint8_t)(s->shift + 7);
            }
            if (s->len > bound) {
                *too_long = true;
                return i;
            }
            if ((b & 0x80) == 0)
                string_read(s);
            break;
        case HTTP2_HPACK_STRING: {
            size_t k = n - i < s->len ? n - i : (size_t)s->len;
            s->len -= k;
            i += k - 1;
            if (s->len == 0)
                s->state = s->strings > 0 ? HTTP2_HPACK_LEN : HTTP2_HPACK_FIELD;
            break;
        }
        default: break;
        }
    }
    return n;
}
