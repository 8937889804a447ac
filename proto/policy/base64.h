/*
 * base64.h: strict base64 decoding (RFC 4648): the standard alphabet with
 * its padding (Basic credentials, RFC 7617) and the URL-safe one without
 * padding (JWS, RFC 7515).  Anything else is refused: a stray character,
 * a wrong length, bits left over that are not zero.
 */
#ifndef CORRAL_PROTO_BASE64_H
#define CORRAL_PROTO_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most bytes `len` characters decode to. */
static inline size_t base64_decoded_max(size_t len)
{
    return len / 4 * 3 + 3;
}

/* Decodes `len` characters at `in` into `out` (`cap` bytes): standard
 * with padding, or with `url` URL-safe without it.  Returns the decoded
 * length, or -1 when the input is not strictly that encoding or does not
 * fit. */
long base64_decode(const char *in, size_t len, bool url, uint8_t *out, size_t cap);

#endif
