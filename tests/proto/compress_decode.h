/*
 * compress_decode.h: streaming decoders of gzip, brotli and zstd for the
 * tests of response compression: what a client would make of the bytes
 * corral sends, piece by piece.
 */
#ifndef CORRAL_TEST_COMPRESS_DECODE_H
#define CORRAL_TEST_COMPRESS_DECODE_H

#include "proto/compress/compress_accept.h"

#include <stdbool.h>
#include <stddef.h>

struct compress_decoder;

/* A decoder of `coding`; aborts the test when out of memory. */
struct compress_decoder *compress_decoder_new(enum compress_coding coding);

/* Decodes `len` more bytes.  Returns false when they are not valid. */
bool compress_decoder_feed(struct compress_decoder *d, const char *data, size_t len);

/* What was decoded so far (NUL-terminated, `*len` bytes). */
const char *compress_decoder_output(const struct compress_decoder *d, size_t *len);

/* Whether the stream's end was decoded. */
bool compress_decoder_done(const struct compress_decoder *d);

void compress_decoder_free(struct compress_decoder *d);

#endif
