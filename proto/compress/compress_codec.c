/*
 * compress_codec.c: what every codec's stream shares: its allocation, an
 * allocator that counts what the library holds (so that the per-stream
 * bound in docs/config.md is measured, not guessed) and takes its large
 * blocks from the thread's pool (block_pool.h), and the output.
 */
#include "proto/compress/compress_codec.h"

#include "proto/http/block_pool.h"

#include <assert.h>
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

const struct compress_codec *compress_codec_of(enum compress_coding coding)
{
    switch (coding) {
    case COMPRESS_ZSTD: return &compress_zstd;
    case COMPRESS_BR: return &compress_brotli;
    case COMPRESS_GZIP: return &compress_gzip;
    default: return NULL;
    }
}

struct compress_stream *compress_stream_new(const struct compress_codec *codec, unsigned level,
                                            int64_t length, compress_emit_fn emit, void *arg)
{
    struct compress_stream *s = malloc(sizeof(*s));
    if (s == NULL)
        return NULL;
    s->codec = codec;
    s->impl = NULL;
    s->emit = emit;
    s->arg = arg;
    s->mem = s->mem_peak = 0;
    s->error = 0;
    if (level < codec->level_min)
        level = codec->level_min;
    if (level > codec->level_max)
        level = codec->level_max;
    if (codec->create(s, level, length) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

int compress_stream_write(struct compress_stream *s, const char *data, size_t len,
                          enum compress_op op)
{
    if (s->error == 0)
        s->error = s->codec->run(s, data, len, op);
    return s->error;
}

void compress_stream_free(struct compress_stream *s)
{
    if (s == NULL)
        return;
    s->codec->destroy(s);
    assert(s->mem == 0);
    free(s);
}

void compress_stream_out(struct compress_stream *s, size_t len)
{
    assert(len <= sizeof(s->out));
    if (len > 0)
        s->emit(s->arg, s->out, len);
}

/* Each block starts with its size, so that compress_free() can count it
 * down (brotli's and zstd's free functions are not told the size), and
 * with what it holds, which a pooled block may have more of. */
union block_head {
    struct {
        size_t size, cap;
    } b;
    max_align_t align;
};

void *compress_alloc(struct compress_stream *s, size_t size)
{
    if (size > SIZE_MAX - sizeof(union block_head))
        return NULL;
    size_t cap = sizeof(union block_head) + size;
    union block_head *h = block_pool_take(cap, &cap);
    if (h == NULL)
        h = malloc(cap);
    if (h == NULL)
        return NULL;
    h->b.size = size;
    h->b.cap = cap;
    s->mem += size;
    if (s->mem > s->mem_peak)
        s->mem_peak = s->mem;
    return h + 1;
}

void compress_free(struct compress_stream *s, void *p)
{
    if (p == NULL)
        return;
    union block_head *h = (union block_head *)p - 1;
    assert(s->mem >= h->b.size);
    s->mem -= h->b.size;
    block_pool_put(h, h->b.cap);
}
