/*
 * fuzz_gunzip.c: libFuzzer over compress_gunzip.h, gunzip's decoder of a
 * backend's body: the first two input bytes choose the size of its pieces
 * and how the body is cut and how often the consumer says it has enough,
 * the rest is the body.  Decoded in pieces with stops, it must give the
 * verdict that one pass with nothing stopping it gives, and the very
 * bytes unless the body is no gzip; no piece is longer than asked, and a stop is never followed by
 * output before the consumer asks for more.
 */
#include "proto/compress/compress_gunzip.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What decoded output is compared, at most: a bomb's tail is only counted. */
#define KEEP_MAX (1u << 20)
/* Output at which the run gives up (a bomb, fine as it is). */
#define OUT_MAX (64u << 20)

struct sink {
    size_t piece;
    unsigned stop_every, calls;
    bool stopped; /* said "enough" and not yet asked for more */
    char *kept;
    size_t len;
};

static bool sink_emit(void *arg, const char *data, size_t len)
{
    struct sink *s = arg;
    assert(len > 0 && len <= s->piece);
    assert(!s->stopped);
    if (s->len < KEEP_MAX) {
        size_t n = len < KEEP_MAX - s->len ? len : KEEP_MAX - s->len;
        memcpy(s->kept + s->len, data, n);
    }
    s->len += len;
    if (s->len >= OUT_MAX)
        return s->stopped = true, false;
    if (s->stop_every != 0 && ++s->calls % s->stop_every == 0)
        s->stopped = true;
    return !s->stopped;
}

/* Decodes `body` cut in pieces of `cut` bytes (0: whole), asking for more
 * after every stop.  Returns the verdict: 0, -EIO or -ENOMEM, 1 for cut
 * off, -1 when no decoder could be made. */
static int decode(const char *body, size_t size, size_t piece, size_t cut, unsigned stop_every,
                  struct sink *s)
{
    *s = (struct sink){.piece = piece, .stop_every = stop_every, .kept = malloc(KEEP_MAX)};
    assert(s->kept != NULL);
    struct compress_gunzip *g = compress_gunzip_new(piece, sink_emit, s);
    if (g == NULL)
        return -1;
    int err = 0;
    for (size_t at = 0; at < size && err == 0 && s->len < OUT_MAX;) {
        size_t n = cut == 0 || cut > size - at ? size - at : cut;
        err = compress_gunzip_write(g, body + at, n);
        at += n;
        /* The producer writes on while the consumer is backed up at times. */
        if (err == 0 && s->stopped && ((at / n) & 1u) == 0)
            continue;
        while (err == 0 && compress_gunzip_holds(g) && s->len < OUT_MAX) {
            s->stopped = false;
            err = compress_gunzip_write(g, NULL, 0);
        }
    }
    while (err == 0 && compress_gunzip_holds(g) && s->len < OUT_MAX) {
        s->stopped = false;
        err = compress_gunzip_write(g, NULL, 0);
    }
    int verdict = err != 0 ? err : compress_gunzip_complete(g) ? 0 : 1;
    compress_gunzip_free(g);
    return verdict;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t piece = 1 + (size_t)(data[0] & 0x3f) * 97;
    size_t cut = data[1] & 0x0f;
    unsigned stop_every = data[1] >> 4;
    /* A copy of exactly the body, so that ASan sees any read past it. */
    size_t len = size - 2;
    char *body = malloc(len ? len : 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + 2, len);
    struct sink whole, cutup;
    int a = decode(body, len, 65536, 0, 0, &whole);
    int b = decode(body, len, piece, cut, stop_every, &cutup);
    if (whole.len < OUT_MAX && cutup.len < OUT_MAX && a != -1 && b != -1) {
        /* The same verdict; then the same bytes (what a failing call
         * decoded is dropped, and that depends on the piece size). */
        assert(a == b);
        if (a != 0 && a != 1)
            goto out;
        assert(whole.len == cutup.len);
        size_t n = whole.len < KEEP_MAX ? whole.len : KEEP_MAX;
        assert(memcmp(whole.kept, cutup.kept, n) == 0);
    }
out:
    free(whole.kept);
    free(cutup.kept);
    free(body);
    return 0;
}
