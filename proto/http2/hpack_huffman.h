/*
 * hpack_huffman.h: HPACK's Huffman code (RFC 7541 5.2, appendix B).
 * Decoding walks a table of 4-bit steps, built once from the RFC's code
 * table on first use (about 12 KB, shared by every thread); encoding
 * writes codes from the RFC's table through a 64-bit accumulator.
 * Neither allocates per call.
 */
#ifndef CORRAL_PROTO_HTTP2_HPACK_HUFFMAN_H
#define CORRAL_PROTO_HTTP2_HPACK_HUFFMAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length in bytes of `s` (`n` bytes) Huffman-coded, padding included. */
size_t hpack_huffman_encoded_len(const uint8_t *s, size_t n);

/* Writes `s` (`n` bytes) Huffman-coded into `out`, which has room for
 * hpack_huffman_encoded_len(s, n) bytes; returns that length. */
size_t hpack_huffman_encode(uint8_t *out, const uint8_t *s, size_t n);

/* Decodes the `n` coded bytes at `in` into `out` (room for `cap` bytes).
 * Returns the decoded length, or -1 when the code is invalid (EOS
 * decoded, padding longer than 7 bits or not all 1s) and -2 when the
 * decoded string would be longer than `cap`: nothing past `cap` is ever
 * written, whatever `n` says. */
long hpack_huffman_decode(uint8_t *out, size_t cap, const uint8_t *in, size_t n);

#endif
