/*
 * fuzz_hpack_scan.c: libFuzzer over http2_hpack_scan(), the walk the
 * HTTP/2 server makes over a client's header block before libnghttp2
 * decodes it.  Each input is a header block fragment.  The walk must
 * give the same answer whether the bytes come whole or in pieces, and
 * agree with libnghttp2's own decoder, the oracle: a block nghttp2 decodes
 * whole ends where a field ends and is never cut; a block the walk cuts
 * at nghttp2's string limit is one nghttp2 refuses.
 */
#include "proto/http2/http2_hpack_scan.h"

#include <nghttp2/nghttp2.h>

#include <assert.h>
#include <stdint.h>

/* The walk over `data` in pieces whose sizes come from `seed`. */
static size_t scan_in_pieces(struct http2_hpack_scan *s, uint64_t bound, const uint8_t *data,
                             size_t size, uint32_t seed, bool *cut)
{
    http2_hpack_scan_start(s);
    size_t off = 0;
    *cut = false;
    while (off < size) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 17;
        if (piece > size - off)
            piece = size - off;
        size_t passed = http2_hpack_scan(s, bound, data + off, piece, cut);
        assert(passed <= piece);
        off += passed;
        if (*cut) {
            assert(passed < piece);
            break;
        }
        assert(passed == piece);
    }
    return off;
}

/* Whether nghttp2 decodes `data` as one whole header block. */
static bool nghttp2_decodes(const uint8_t *data, size_t size)
{
    nghttp2_hd_inflater *inflater;
    if (nghttp2_hd_inflate_new(&inflater) != 0)
        return false;
    bool ok = false;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t n = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, data, size, 1);
        if (n < 0)
            break;
        data += n;
        size -= (size_t)n;
        if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
            ok = size == 0;
            break;
        }
        if ((flags & NGHTTP2_HD_INFLATE_EMIT) == 0 && n == 0)
            break;
    }
    nghttp2_hd_inflate_del(inflater);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A bound small enough to cut often, and nghttp2's own. */
    static const uint64_t bounds[] = {100, HTTP2_HPACK_MAX_STRING};
    for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++) {
        struct http2_hpack_scan whole, pieces;
        bool cut_whole, cut_pieces;
        http2_hpack_scan_start(&whole);
        size_t passed = http2_hpack_scan(&whole, bounds[b], data, size, &cut_whole);
        assert(passed <= size && (passed < size) == cut_whole);
        size_t passed_pieces =
            scan_in_pieces(&pieces, bounds[b], data, size, (uint32_t)size, &cut_pieces);
        assert(passed_pieces == passed && cut_pieces == cut_whole);
        if (!cut_whole)
            assert(whole.state == pieces.state && whole.strings == pieces.strings &&
                   whole.shift == pieces.shift && whole.len == pieces.len);
        if (bounds[b] == HTTP2_HPACK_MAX_STRING) {
            bool decodes = nghttp2_decodes(data, size);
            if (decodes)
                assert(!cut_whole && whole.state == HTTP2_HPACK_FIELD);
            if (cut_whole)
                assert(!decodes);
        }
    }
    return 0;
}
