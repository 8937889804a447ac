/*
 * hpack_huffman.c: HPACK's Huffman code (hpack_huffman.h).
 *
 * The decoding table is made from the code table alone: the code's tree
 * has 257 leaves, so 256 inner nodes, and each becomes a state.  For
 * each state and each 4-bit group the table says where the walk goes,
 * and whether it passed a symbol (no code is shorter than 5 bits, so at
 * most one per group) or the EOS code.  A string may end only at a state
 * reached by at most 7 bits, all 1s, since the last symbol (5.2).
 */
#include "proto/http2/hpack_huffman.h"

#include <assert.h>
#include <pthread.h>

/* RFC 7541 appendix B: the code of each symbol, aligned to its least
 * significant bit, and its length in bits; symbol 256 is EOS. */
static const struct {
    uint32_t code;
    uint8_t bits;
} huffman_codes[257] = {
    {0x1ff8, 13},     {0x7fffd8, 23},   {0xfffffe2, 28},  {0xfffffe3, 28},  {0xfffffe4, 28},
    {0xfffffe5, 28},  {0xfffffe6, 28},  {0xfffffe7, 28},  {0xfffffe8, 28},  {0xffffea, 24},
    {0x3ffffffc, 30}, {0xfffffe9, 28},  {0xfffffea, 28},  {0x3ffffffd, 30}, {0xfffffeb, 28},
    {0xfffffec, 28},  {0xfffffed, 28},  {0xfffffee, 28},  {0xfffffef, 28},  {0xffffff0, 28},
    {0xffffff1, 28},  {0xffffff2, 28},  {0x3ffffffe, 30}, {0xffffff3, 28},  {0xffffff4, 28},
    {0xffffff5, 28},  {0xffffff6, 28},  {0xffffff7, 28},  {0xffffff8, 28},  {0xffffff9, 28},
    {0xffffffa, 28},  {0xffffffb, 28},  {0x14, 6},        {0x3f8, 10},      {0x3f9, 10},
    {0xffa, 12},      {0x1ff9, 13},     {0x15, 6},        {0xf8, 8},        {0x7fa, 11},
    {0x3fa, 10},      {0x3fb, 10},      {0xf9, 8},        {0x7fb, 11},      {0xfa, 8},
    {0x16, 6},        {0x17, 6},        {0x18, 6},        {0x0, 5},         {0x1, 5},
    {0x2, 5},         {0x19, 6},        {0x1a, 6},        {0x1b, 6},        {0x1c, 6},
    {0x1d, 6},        {0x1e, 6},        {0x1f, 6},        {0x5c, 7},        {0xfb, 8},
    {0x7ffc, 15},     {0x20, 6},        {0xffb, 12},      {0x3fc, 10},      {0x1ffa, 13},
    {0x21, 6},        {0x5d, 7},        {0x5e, 7},        {0x5f, 7},        {0x60, 7},
    {0x61, 7},        {0x62, 7},        {0x63, 7},        {0x64, 7},        {0x65, 7},
    {0x66, 7},        {0x67, 7},        {0x68, 7},        {0x69, 7},        {0x6a, 7},
    {0x6b, 7},        {0x6c, 7},        {0x6d, 7},        {0x6e, 7},        {0x6f, 7},
    {0x70, 7},        {0x71, 7},        {0x72, 7},        {0xfc, 8},        {0x73, 7},
    {0xfd, 8},        {0x1ffb, 13},     {0x7fff0, 19},    {0x1ffc, 13},     {0x3ffc, 14},
    {0x22, 6},        {0x7ffd, 15},     {0x3, 5},         {0x23, 6},        {0x4, 5},
    {0x24, 6},        {0x5, 5},         {0x25, 6},        {0x26, 6},        {0x27, 6},
    {0x6, 5},         {0x74, 7},        {0x75, 7},        {0x28, 6},        {0x29, 6},
    {0x2a, 6},        {0x7, 5},         {0x2b, 6},        {0x76, 7},        {0x2c, 6},
    {0x8, 5},         {0x9, 5},         {0x2d, 6},        {0x77, 7},        {0x78, 7},
    {0x79, 7},        {0x7a, 7},        {0x7b, 7},        {0x7ffe, 15},     {0x7fc, 11},
    {0x3ffd, 14},     {0x1ffd, 13},     {0xffffffc, 28},  {0xfffe6, 20},    {0x3fffd2, 22},
    {0xfffe7, 20},    {0xfffe8, 20},    {0x3fffd3, 22},   {0x3fffd4, 22},   {0x3fffd5, 22},
    {0x7fffd9, 23},   {0x3fffd6, 22},   {0x7fffda, 23},   {0x7fffdb, 23},   {0x7fffdc, 23},
    {0x7fffdd, 23},   {0x7fffde, 23},   {0xffffeb, 24},   {0x7fffdf, 23},   {0xffffec, 24},
    {0xffffed, 24},   {0x3fffd7, 22},   {0x7fffe0, 23},   {0xffffee, 24},   {0x7fffe1, 23},
    {0x7fffe2, 23},   {0x7fffe3, 23},   {0x7fffe4, 23},   {0x1fffdc, 21},   {0x3fffd8, 22},
    {0x7fffe5, 23},   {0x3fffd9, 22},   {0x7fffe6, 23},   {0x7fffe7, 23},   {0xffffef, 24},
    {0x3fffda, 22},   {0x1fffdd, 21},   {0xfffe9, 20},    {0x3fffdb, 22},   {0x3fffdc, 22},
    {0x7fffe8, 23},   {0x7fffe9, 23},   {0x1fffde, 21},   {0x7fffea, 23},   {0x3fffdd, 22},
    {0x3fffde, 22},   {0xfffff0, 24},   {0x1fffdf, 21},   {0x3fffdf, 22},   {0x7fffeb, 23},
    {0x7fffec, 23},   {0x1fffe0, 21},   {0x1fffe1, 21},   {0x3fffe0, 22},   {0x1fffe2, 21},
    {0x7fffed, 23},   {0x3fffe1, 22},   {0x7fffee, 23},   {0x7fffef, 23},   {0xfffea, 20},
    {0x3fffe2, 22},   {0x3fffe3, 22},   {0x3fffe4, 22},   {0x7ffff0, 23},   {0x3fffe5, 22},
    {0x3fffe6, 22},   {0x7ffff1, 23},   {0x3ffffe0, 26},  {0x3ffffe1, 26},  {0xfffeb, 20},
    {0x7fff1, 19},    {0x3fffe7, 22},   {0x7ffff2, 23},   {0x3fffe8, 22},   {0x1ffffec, 25},
    {0x3ffffe2, 26},  {0x3ffffe3, 26},  {0x3ffffe4, 26},  {0x7ffffde, 27},  {0x7ffffdf, 27},
    {0x3ffffe5, 26},  {0xfffff1, 24},   {0x1ffffed, 25},  {0x7fff2, 19},    {0x1fffe3, 21},
    {0x3ffffe6, 26},  {0x7ffffe0, 27},  {0x7ffffe1, 27},  {0x3ffffe7, 26},  {0x7ffffe2, 27},
    {0xfffff2, 24},   {0x1fffe4, 21},   {0x1fffe5, 21},   {0x3ffffe8, 26},  {0x3ffffe9, 26},
    {0xffffffd, 28},  {0x7ffffe3, 27},  {0x7ffffe4, 27},  {0x7ffffe5, 27},  {0xfffec, 20},
    {0xfffff3, 24},   {0xfffed, 20},    {0x1fffe6, 21},   {0x3fffe9, 22},   {0x1fffe7, 21},
    {0x1fffe8, 21},   {0x7ffff3, 23},   {0x3fffea, 22},   {0x3fffeb, 22},   {0x1ffffee, 25},
    {0x1ffffef, 25},  {0xfffff4, 24},   {0xfffff5, 24},   {0x3ffffea, 26},  {0x7ffff4, 23},
    {0x3ffffeb, 26},  {0x7ffffe6, 27},  {0x3ffffec, 26},  {0x3ffffed, 26},  {0x7ffffe7, 27},
    {0x7ffffe8, 27},  {0x7ffffe9, 27},  {0x7ffffea, 27},  {0x7ffffeb, 27},  {0xffffffe, 28},
    {0x7ffffec, 27},  {0x7ffffed, 27},  {0x7ffffee, 27},  {0x7ffffef, 27},  {0x7fffff0, 27},
    {0x3ffffee, 26},  {0x3fffffff, 30},
};

enum {
    STEP_SYMBOL = 1, /* the step passed a symbol's last bit */
    STEP_ACCEPT = 2, /* the string may end after this step */
    STEP_FAIL = 4,   /* the step decoded EOS: the string is invalid */
};

struct huffman_step {
    uint8_t state;
    uint8_t symbol;
    uint8_t flags;
};

static struct huffman_step huffman_steps[256][16];
static pthread_once_t huffman_once = PTHREAD_ONCE_INIT;

/* The tree while the table is made: inner nodes 0..255 (0 the root), a
 * child below 256 an inner node, else 256 + the symbol of a leaf. */
static void huffman_build(void)
{
    uint16_t child[256][2] = {{0}};
    uint8_t depth[256] = {0};
    bool ones[256] = {false}; /* the path from the root is all 1s */
    unsigned inner = 1;
    ones[0] = true;
    for (unsigned sym = 0; sym < 257; sym++) {
        unsigned node = 0;
        for (int b = huffman_codes[sym].bits - 1; b > 0; b--) {
            unsigned bit = (huffman_codes[sym].code >> b) & 1;
            if (child[node][bit] == 0) {
                assert(inner < 256);
                child[node][bit] = (uint16_t)inner;
                depth[inner] = (uint8_t)(depth[node] + 1);
                ones[inner] = ones[node] && bit == 1;
                inner++;
            }
            node = child[node][bit];
            assert(node < 256);
        }
        child[node][huffman_codes[sym].code & 1] = (uint16_t)(256 + sym);
    }
    assert(inner == 256);
    for (unsigned s = 0; s < 256; s++) {
        for (unsigned nib = 0; nib < 16; nib++) {
            struct huffman_step st = {0};
            unsigned node = s;
            for (int b = 3; b >= 0; b--) {
                unsigned next = child[node][(nib >> b) & 1];
                if (next == 256 + 256) {
                    st.flags = STEP_FAIL;
                    break;
                }
                if (next >= 256) {
                    st.flags |= STEP_SYMBOL;
                    st.symbol = (uint8_t)(next - 256);
                    node = 0;
                } else {
                    node = next;
                }
            }
            if (!(st.flags & STEP_FAIL)) {
                st.state = (uint8_t)node;
                if (node == 0 || (ones[node] && depth[node] <= 7))
                    st.flags |= STEP_ACCEPT;
            }
            huffman_steps[s][nib] = st;
        }
    }
}

long hpack_huffman_decode(uint8_t *out, size_t cap, const uint8_t *in, size_t n)
{
    pthread_once(&huffman_once, huffman_build);
    size_t len = 0;
    uint8_t state = 0;
    bool accept = true; /* the empty string */
    for (size_t i = 0; i < n; i++) {
        for (int half = 0; half < 2; half++) {
            unsigned nib = half == 0 ? in[i] >> 4 : in[i] & 0x0f;
            const struct huffman_step *st = &huffman_steps[state][nib];
            if (st->flags & STEP_FAIL)
                return -1;
            if (st->flags & STEP_SYMBOL) {
                if (len == cap)
                    return -2;
                out[len++] = st->symbol;
            }
            state = st->state;
            accept = (st->flags & STEP_ACCEPT) != 0;
        }
    }
    return accept ? (long)len : -1;
}

size_t hpack_huffman_encoded_len(const uint8_t *s, size_t n)
{
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += huffman_codes[s[i]].bits;
    return (size_t)((bits + 7) / 8);
}

size_t hpack_huffman_encode(uint8_t *out, const uint8_t *s, size_t n)
{
    uint64_t acc = 0; /* pending bits, in its low `pending` bits */
    unsigned pending = 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        /* A code has at most 30 bits and fewer than 32 wait: 64 hold
         * them, and they leave 32 at a time. */
        acc = (acc << huffman_codes[s[i]].bits) | huffman_codes[s[i]].code;
        pending += huffman_codes[s[i]].bits;
        if (pending >= 32) {
            pending -= 32;
            uint32_t word = (uint32_t)(acc >> pending);
            out[len] = (uint8_t)(word >> 24);
            out[len + 1] = (uint8_t)(word >> 16);
            out[len + 2] = (uint8_t)(word >> 8);
            out[len + 3] = (uint8_t)word;
            len += 4;
        }
    }
    while (pending >= 8) {
        pending -= 8;
        out[len++] = (uint8_t)(acc >> pending);
    }
    if (pending > 0) /* pad with the most significant bits of EOS: 1s */
        out[len++] = (uint8_t)((acc << (8 - pending)) | (0xffu >> pending));
    return len;
}
