/*
 * compress_decode.c: the decoders of compress_decode.h, through zlib,
 * libbrotlidec and libzstd.
 */
#include "compress_decode.h"

#include <brotli/decode.h>
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

struct compress_decoder {
    enum compress_coding coding;
    z_stream z;
    BrotliDecoderState *br;
    ZSTD_DStream *zstd;
    bool done;
    char *out;
    size_t len, cap;
};

struct compress_decoder *compress_decoder_new(enum compress_coding coding)
{
    struct compress_decoder *d = calloc(1, sizeof(*d));
    ck_assert_ptr_nonnull(d);
    d->coding = coding;
    d->cap = 4096;
    d->out = malloc(d->cap + 1);
    ck_assert_ptr_nonnull(d->out);
    d->out[0] = '\0';
    switch (coding) {
    case COMPRESS_GZIP: ck_assert_int_eq(inflateInit2(&d->z, 15 + 16), Z_OK); break;
    case COMPRESS_BR:
        d->br = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        ck_assert_ptr_nonnull(d->br);
        break;
    case COMPRESS_ZSTD:
        d->zstd = ZSTD_createDStream();
        ck_assert_ptr_nonnull(d->zstd);
        break;
    default: ck_abort();
    }
    return d;
}

/* Room for at least 4 KB more output. */
static char *room(struct compress_decoder *d, size_t *space)
{
    if (d->cap - d->len < 4096) {
        d->cap *= 2;
        d->out = realloc(d->out, d->cap + 1);
        ck_assert_ptr_nonnull(d->out);
    }
    *space = d->cap - d->len;
    return d->out + d->len;
}

bool compress_decoder_feed(struct compress_decoder *d, const char *data, size_t len)
{
    bool ok = true;
    switch (d->coding) {
    case COMPRESS_GZIP:
        d->z.next_in = (Bytef *)(uintptr_t)data;
        d->z.avail_in = (uInt)len;
        for (;;) {
            size_t space;
            d->z.next_out = (Bytef *)room(d, &space);
            d->z.avail_out = (uInt)space;
            int rc = inflate(&d->z, Z_NO_FLUSH);
            d->len += space - d->z.avail_out;
            if (rc == Z_STREAM_END) {
                d->done = true;
                ok = d->z.avail_in == 0;
                break;
            }
            if (rc != Z_OK && rc != Z_BUF_ERROR) {
                ok = false;
                break;
            }
            if (d->z.avail_out != 0 && d->z.avail_in == 0)
                break;
        }
        break;
    case COMPRESS_BR: {
        size_t avail_in = len;
        const uint8_t *next_in = (const uint8_t *)data;
        for (;;) {
            size_t space;
            uint8_t *next_out = (uint8_t *)room(d, &space);
            size_t avail_out = space;
            BrotliDecoderResult rc = BrotliDecoderDecompressStream(d->br, &avail_in, &next_in,
                                                                   &avail_out, &next_out, NULL);
            d->len += space - avail_out;
            if (rc == BROTLI_DECODER_RESULT_SUCCESS) {
                d->done = true;
                ok = avail_in == 0;
                break;
            }
            if (rc == BROTLI_DECODER_RESULT_ERROR) {
                ok = false;
                break;
            }
            /* libbrotlidec 1.0.9 may ask for input while it still holds
             * output for a small output buffer: drain it first. */
            if (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT && !BrotliDecoderHasMoreOutput(d->br))
                break;
        }
        break;
    }
    case COMPRESS_ZSTD: {
        ZSTD_inBuffer in = {data, len, 0};
        for (;;) {
            size_t space;
            ZSTD_outBuffer out = {room(d, &space), space, 0};
            size_t rc = ZSTD_decompressStream(d->zstd, &out, &in);
            d->len += out.pos;
            if (ZSTD_isError(rc)) {
                ok = false;
                break;
            }
            if (rc == 0) {
                d->done = true;
                ok = in.pos == in.size;
                break;
            }
            if (in.pos == in.size && out.pos < out.size)
                break;
        }
        break;
    }
    default: ck_abort();
    }
    d->out[d->len] = '\0';
    return ok;
}

const char *compress_decoder_output(const struct compress_decoder *d, size_t *len)
{
    *len = d->len;
    return d->out;
}

bool compress_decoder_done(const struct compress_decoder *d)
{
    return d->done;
}

void compress_decoder_free(struct compress_decoder *d)
{
    if (d == NULL)
        return;
    if (d->coding == COMPRESS_GZIP)
        inflateEnd(&d->z);
    if (d->br != NULL)
        BrotliDecoderDestroyInstance(d->br);
    ZSTD_freeDStream(d->zstd);
    free(d->out);
    free(d);
}
