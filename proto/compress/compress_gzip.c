/*
 * compress_gzip.c: gzip (RFC 1952) through zlib's deflate, with a window
 * and hash smaller than zlib's defaults (docs/config.md says how much a
 * stream holds), smaller still for a body known to be short, as nginx
 * sizes its own.
 */
#include "proto/compress/compress_codec.h"

#include <errno.h>
#include <stdint.h>
#include <zlib.h>

/* nginx's 32 KB window (gzip_window's default), so that the output is
 * within 1% of nginx's at the same level, with half of its hash (16 K
 * heads) and of its symbol buffer: about 195 KB of state, against the
 * 260 KB of nginx's default gzip_hash (docs/config.md).  A 16 KB window
 * saved another 64 KB but coded 2-4% larger at level 6. */
#define GZIP_WINDOW_BITS 15
#define GZIP_MEM_LEVEL   7

static voidpf gzip_alloc(voidpf opaque, uInt items, uInt size)
{
    if (size != 0 && items > SIZE_MAX / size)
        return Z_NULL;
    return compress_alloc(opaque, (size_t)items * size);
}

static void gzip_free(voidpf opaque, voidpf p)
{
    compress_free(opaque, p);
}

static int gzip_create(struct compress_stream *s, unsigned level, int64_t length)
{
    z_stream *z = compress_alloc(s, sizeof(*z));
    if (z == NULL)
        return -ENOMEM;
    *z = (z_stream){.zalloc = gzip_alloc, .zfree = gzip_free, .opaque = s};
    int bits = GZIP_WINDOW_BITS, mem = GZIP_MEM_LEVEL;
    /* A short body needs no more window than itself (9 is zlib's least). */
    while (length >= 0 && bits > 9 && length < (INT64_C(1) << (bits - 1))) {
        bits--;
        if (mem > 1)
            mem--;
    }
    if (deflateInit2(z, (int)level, Z_DEFLATED, bits + 16, mem, Z_DEFAULT_STRATEGY) != Z_OK) {
        compress_free(s, z);
        return -ENOMEM;
    }
    s->impl = z;
    return 0;
}

static int gzip_run(struct compress_stream *s, const char *in, size_t len, enum compress_op op)
{
    z_stream *z = s->impl;
    int flush = op == COMPRESS_RUN ? Z_NO_FLUSH : op == COMPRESS_FLUSH ? Z_SYNC_FLUSH : Z_FINISH;
    z->next_in = (Bytef *)(uintptr_t)in;
    while (len > 0 || z->avail_in > 0 || flush != Z_NO_FLUSH) {
        if (z->avail_in == 0) { /* avail_in is an uInt: long input in turns */
            z->avail_in = len > UINT32_MAX ? UINT32_MAX : (uInt)len;
            len -= z->avail_in;
        }
        z->next_out = (Bytef *)s->out;
        z->avail_out = sizeof(s->out);
        int rc = deflate(z, len > 0 ? Z_NO_FLUSH : flush);
        if (rc == Z_STREAM_ERROR)
            return -EIO;
        compress_stream_out(s, sizeof(s->out) - z->avail_out);
        if (rc == Z_STREAM_END)
            return 0;
        /* Room left: the input is taken and, for a flush, flushed. */
        if (z->avail_out != 0 && z->avail_in == 0 && len == 0 && flush != Z_FINISH)
            return 0;
    }
    return 0;
}

static void gzip_destroy(struct compress_stream *s)
{
    z_stream *z = s->impl;
    if (z == NULL)
        return;
    deflateEnd(z);
    compress_free(s, z);
    s->impl = NULL;
}

const struct compress_codec compress_gzip = {
    .coding = COMPRESS_GZIP,
    .level_min = 1,
    .level_max = 9,
    .create = gzip_create,
    .run = gzip_run,
    .destroy = gzip_destroy,
};
