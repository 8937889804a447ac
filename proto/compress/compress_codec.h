/*
 * compress_codec.h: one compressor stream behind a small ops table, one
 * table per coding (compress_gzip.c, compress_brotli.c, compress_zstd.c),
 * fed a body piece by piece with bounded memory: what the library keeps
 * (counted through an allocator of the stream's own) and one output
 * buffer, handed on whenever it fills.
 */
#ifndef CORRAL_PROTO_COMPRESS_CODEC_H
#define CORRAL_PROTO_COMPRESS_CODEC_H

#include "proto/compress/compress_accept.h"

#include <stddef.h>
#include <stdint.h>

/* What a call does besides taking its input. */
enum compress_op {
    COMPRESS_RUN,   /* keep what the coder wants to keep */
    COMPRESS_FLUSH, /* all input so far decodes from what was emitted */
    COMPRESS_END,   /* the stream is complete */
};

/* Where compressed bytes go: `len` > 0. */
typedef void (*compress_emit_fn)(void *arg, const char *data, size_t len);

/* Output is handed on in pieces of at most this much. */
#define COMPRESS_OUT_SIZE 8192

struct compress_stream;

struct compress_codec {
    enum compress_coding coding;
    unsigned level_min, level_max;
    /* Sets s->impl up at `level` for a body of `length` bytes (-1:
     * unknown), which may size the window down.  Returns 0 or -ENOMEM. */
    int (*create)(struct compress_stream *s, unsigned level, int64_t length);
    /* Compresses `len` bytes and does `op`, emitting through
     * compress_stream_out().  Returns 0 or -errno (-ENOMEM, -EIO). */
    int (*run)(struct compress_stream *s, const char *in, size_t len, enum compress_op op);
    void (*destroy)(struct compress_stream *s);
};

extern const struct compress_codec compress_gzip;
extern const struct compress_codec compress_brotli;
extern const struct compress_codec compress_zstd;

/* The codec of `coding`. */
const struct compress_codec *compress_codec_of(enum compress_coding coding);

/* One body being compressed.  The fields are the codecs'. */
struct compress_stream {
    const struct compress_codec *codec;
    void *impl;
    compress_emit_fn emit;
    void *arg;
    size_t mem, mem_peak; /* what the library holds, through compress_alloc() */
    int error;            /* the first failure; then nothing more is emitted */
    char out[COMPRESS_OUT_SIZE];
};

/* A stream of `codec` at `level` (within its bounds) for a body of
 * `length` bytes (-1: unknown), its output to emit(arg, ...).  Returns
 * NULL when out of memory.  Free with compress_stream_free(). */
struct compress_stream *compress_stream_new(const struct compress_codec *codec, unsigned level,
                                            int64_t length, compress_emit_fn emit, void *arg);

/* Compresses `len` bytes (may be 0) and does `op`.  Returns 0 or the
 * stream's first error, after which it does nothing. */
int compress_stream_write(struct compress_stream *s, const char *data, size_t len,
                          enum compress_op op);

void compress_stream_free(struct compress_stream *s);

/* For the codecs: the library's memory, counted in s->mem and s->mem_peak. */
void *compress_alloc(struct compress_stream *s, size_t size);
void compress_free(struct compress_stream *s, void *p);

/* For the codecs: hands `len` bytes of s->out on (nothing when 0). */
void compress_stream_out(struct compress_stream *s, size_t len);

#endif
