/*
 * base64.c: strict RFC 4648 decoding, by table, for auth_basic's
 * credentials and auth_jwt's token parts.
 */
#include "proto/policy/base64.h"

/* A character's value in the alphabet, or -1. */
static int value_of(char c, bool url)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (url ? '-' : '+'))
        return 62;
    if (c == (url ? '_' : '/'))
        return 63;
    return -1;
}

long base64_decode(const char *in, size_t len, bool url, uint8_t *out, size_t cap)
{
    if (!url) { /* padded to a multiple of four, one or two '=' at most */
        if (len % 4 != 0)
            return -1;
        if (len > 0 && in[len - 1] == '=')
            len--;
        if (len > 0 && in[len - 1] == '=')
            len--;
    }
    if (len % 4 == 1)
        return -1;
    size_t n = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = value_of(in[i], url);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) /* the last character's unused bits must be zero */
        return -1;
    return (long)n;
}
