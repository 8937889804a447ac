/*
 * http2_hpack_scan.h: a walk over HPACK's framing (RFC 7541 6), without
 * its tables or Huffman code, far enough to read the length each string
 * announces.  The HTTP/2 server runs it over a header block before
 * libnghttp2 decodes it, to cut off a block whose strings are longer than
 * the server takes, at the byte that says so.  Bytes of a block may come
 * in any number of pieces: the walk keeps its place between them.
 */
#ifndef CORRAL_PROTO_HTTP2_HPACK_SCAN_H
#define CORRAL_PROTO_HTTP2_HPACK_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest HPACK string libnghttp2 decodes (NGHTTP2_HD_MAX_NV in its
 * lib/nghttp2_hd.h, not exported): a longer one is a COMPRESSION_ERROR
 * for the connection. */
#define HTTP2_HPACK_MAX_STRING 65536

/* Where the walk is in a field representation. */
enum http2_hpack_scan_state {
    HTTP2_HPACK_FIELD,    /* its first byte: a field begins here */
    HTTP2_HPACK_INDEX,    /* an integer's continuation bytes: an index, a table size */
    HTTP2_HPACK_LEN,      /* a string's first byte: H and the length's prefix */
    HTTP2_HPACK_LEN_MORE, /* the length's continuation bytes */
    HTTP2_HPACK_STRING,   /* the string's bytes */
};

struct http2_hpack_scan {
    uint8_t state;   /* enum http2_hpack_scan_state */
    uint8_t strings; /* strings still to come in this field representation */
    uint8_t shift;   /* of the next byte of a string's length */
    uint64_t len;    /* that length so far, then the string's bytes left */
};

/* A header block begins. */
static inline void http2_hpack_scan_start(struct http2_hpack_scan *s)
{
    *s = (struct http2_hpack_scan){.state = HTTP2_HPACK_FIELD};
}

/* Walks the next `n` bytes of the block.  Returns how many pass: `n`, or,
 * when a string announces a length over `bound`, fewer, the byte that
 * takes the length past it the first that does not pass (*too_long set;
 * the walk is then over for this block). */
size_t http2_hpack_scan(struct http2_hpack_scan *s, uint64_t bound, const uint8_t *p, size_t n,
                        bool *too_long);

#endif
