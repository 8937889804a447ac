/*
 * fuzz_accept.c: libFuzzer over compress_accept_parse(): each input is an
 * Accept-Encoding value as a client may send it.  It is read whole, and
 * as two fields cut where its first byte says; every q-value read is a
 * qvalue or unset, and the order and the choice agree with the q-values.
 */
#include "proto/compress/compress_accept.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(const struct compress_accept *a)
{
    for (int c = 0; c < COMPRESS_CODINGS; c++)
        assert(a->q[c] <= 1000 || a->q[c] == COMPRESS_Q_UNSET);
    assert(a->any <= 1000 || a->any == COMPRESS_Q_UNSET);
    assert(a->identity <= 1000 || a->identity == COMPRESS_Q_UNSET);
    enum compress_coding order[COMPRESS_CODINGS];
    size_t n = compress_accept_order(a, order);
    assert(n <= COMPRESS_CODINGS);
    unsigned seen = 0;
    for (size_t i = 0; i < n; i++) {
        assert(order[i] < COMPRESS_CODINGS);
        assert(!(seen & (1u << order[i])));
        seen |= 1u << order[i];
        unsigned q = compress_accept_q(a, order[i]);
        assert(q > 0 && q <= 1000);
        if (i > 0) {
            unsigned before = compress_accept_q(a, order[i - 1]);
            assert(before > q || (before == q && order[i - 1] < order[i]));
        }
    }
    for (int c = 0; c < COMPRESS_CODINGS; c++)
        assert(((seen >> c) & 1u) == (compress_accept_q(a, (enum compress_coding)c) > 0));
    assert(compress_accept_choose(a, 7) == (n > 0 ? (int)order[0] : -1));
    for (unsigned offered = 0; offered < 8; offered++) {
        int chosen = compress_accept_choose(a, offered);
        assert(chosen == -1 || ((offered >> chosen) & 1u));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so that ASan sees any read past it. */
    char *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    struct compress_accept a;
    compress_accept_init(&a);
    compress_accept_parse(&a, copy, size);
    check(&a);
    size_t cut = size > 0 ? (unsigned char)copy[0] % (size + 1) : 0;
    compress_accept_init(&a);
    compress_accept_parse(&a, copy, cut);
    compress_accept_parse(&a, copy + cut, size - cut);
    check(&a);
    free(copy);
    return 0;
}
