/*
 * compress_zstd.c: zstd (RFC 8878) through libzstd's streaming API, with
 * a 64 KB window (its tables clamped to it), smaller for a body known to
 * be short: what a stream holds stays bounded (docs/config.md).  The
 * frame carries no content size, so a body that ends short still ends a
 * valid frame.
 */
#include "proto/compress/compress_codec.h"

/* The custom allocator (ZSTD_createCCtx_advanced()) is in the part of the
 * API that the shared library exports but marks experimental. */
#define ZSTD_STATIC_LINKING_ONLY
#include <errno.h>
#include <stdint.h>
#include <zstd.h>

/* 64 KB: on text, level 1 then codes 2% smaller than gzip's level 1 and
 * 4% smaller than with 32 KB; 128 KB would double the memory (the block
 * buffers follow the window) for another 3%. */
#define ZSTD_WINDOW_BITS 16

static void *zstd_alloc(void *opaque, size_t size)
{
    return compress_alloc(opaque, size);
}

static void zstd_free(void *opaque, void *p)
{
    compress_free(opaque, p);
}

static int zstd_create(struct compress_stream *s, unsigned level, int64_t length)
{
    ZSTD_customMem mem = {zstd_alloc, zstd_free, s};
    ZSTD_CCtx *z = ZSTD_createCCtx_advanced(mem);
    if (z == NULL)
        return -ENOMEM;
    int bits = ZSTD_WINDOW_BITS;
    while (length >= 0 && bits > ZSTD_WINDOWLOG_MIN && length < (INT64_C(1) << (bits - 1)))
        bits--;
    /* The level's tables, clamped to the window: past it they would only
     * index what the window has forgotten, at up to 80 MB a stream. */
    ZSTD_compressionParameters p = ZSTD_getCParams((int)level, 0, 0);
    int hash = (int)p.hashLog < bits + 1 ? (int)p.hashLog : bits + 1;
    int chain = (int)p.chainLog < bits + 1 ? (int)p.chainLog : bits + 1;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, (int)level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_windowLog, bits)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_hashLog, hash)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_chainLog, chain)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 0))) {
        ZSTD_freeCCtx(z);
        return -EINVAL;
    }
    s->impl = z;
    return 0;
}

static int zstd_run(struct compress_stream *s, const char *in, size_t len, enum compress_op op)
{
    ZSTD_CCtx *z = s->impl;
    ZSTD_EndDirective what = op == COMPRESS_RUN     ? ZSTD_e_continue
                             : op == COMPRESS_FLUSH ? ZSTD_e_flush
                                                    : ZSTD_e_end;
    ZSTD_inBuffer input = {in, len, 0};
    for (;;) {
        ZSTD_outBuffer output = {s->out, sizeof(s->out), 0};
        size_t left = ZSTD_compressStream2(z, &output, &input, what);
        if (ZSTD_isError(left))
            return -EIO;
        compress_stream_out(s, output.pos);
        if (what == ZSTD_e_continue ? input.pos == input.size : left == 0)
            return 0;
    }
}

static void zstd_destroy(struct compress_stream *s)
{
    if (s->impl == NULL)
        return;
    ZSTD_freeCCtx(s->impl);
    s->impl = NULL;
}

const struct compress_codec compress_zstd = {
    .coding = COMPRESS_ZSTD,
    .level_min = 1,
    .level_max = 19,
    .create = zstd_create,
    .run = zstd_run,
    .destroy = zstd_destroy,
};
