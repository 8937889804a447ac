/*
 * compress_brotli.c: brotli (RFC 7932) through libbrotlienc, with a 64 KB
 * window instead of its default 4 MB, smaller still for a body known to
 * be short: what a stream holds stays bounded (docs/config.md).
 */
#include "proto/compress/compress_codec.h"

#include <brotli/encode.h>
#include <errno.h>
#include <stdint.h>

#define BROTLI_WINDOW_BITS 16

static void *brotli_alloc(void *opaque, size_t size)
{
    return compress_alloc(opaque, size);
}

static void brotli_free(void *opaque, void *p)
{
    compress_free(opaque, p);
}

static int brotli_create(struct compress_stream *s, unsigned level, int64_t length)
{
    BrotliEncoderState *b = BrotliEncoderCreateInstance(brotli_alloc, brotli_free, s);
    if (b == NULL)
        return -ENOMEM;
    uint32_t bits = BROTLI_WINDOW_BITS;
    while (length >= 0 && bits > BROTLI_MIN_WINDOW_BITS && length < (INT64_C(1) << (bits - 1)))
        bits--;
    BrotliEncoderSetParameter(b, BROTLI_PARAM_QUALITY, level);
    BrotliEncoderSetParameter(b, BROTLI_PARAM_LGWIN, bits);
    if (length >= 0 && length <= UINT32_MAX)
        BrotliEncoderSetParameter(b, BROTLI_PARAM_SIZE_HINT, (uint32_t)length);
    s->impl = b;
    return 0;
}

static int brotli_run(struct compress_stream *s, const char *in, size_t len, enum compress_op op)
{
    BrotliEncoderState *b = s->impl;
    BrotliEncoderOperation what = op == COMPRESS_RUN     ? BROTLI_OPERATION_PROCESS
                                  : op == COMPRESS_FLUSH ? BROTLI_OPERATION_FLUSH
                                                         : BROTLI_OPERATION_FINISH;
    const uint8_t *next_in = (const uint8_t *)in;
    for (;;) {
        uint8_t *next_out = (uint8_t *)s->out;
        size_t avail_out = sizeof(s->out);
        if (!BrotliEncoderCompressStream(b, what, &len, &next_in, &avail_out, &next_out, NULL))
            return -EIO;
        compress_stream_out(s, sizeof(s->out) - avail_out);
        if (len > 0 || BrotliEncoderHasMoreOutput(b))
            continue;
        if (op == COMPRESS_END && !BrotliEncoderIsFinished(b))
            continue;
        return 0;
    }
}

static void brotli_destroy(struct compress_stream *s)
{
    if (s->impl == NULL)
        return;
    BrotliEncoderDestroyInstance(s->impl);
    s->impl = NULL;
}

const struct compress_codec compress_brotli = {
    .coding = COMPRESS_BR,
    .level_min = 0,
    .level_max = 11,
    .create = brotli_create,
    .run = brotli_run,
    .destroy = brotli_destroy,
};
