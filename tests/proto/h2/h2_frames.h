/*
 * h2_frames.h: HTTP/2 bytes the tests build by hand, byte by byte and
 * not by the frame writer under test: a buffer that grows as bytes are
 * put, a sink that keeps what a session writes, raw frames, and the
 * header fields given to an encoder.
 */
#ifndef CORRAL_TEST_H2_FRAMES_H
#define CORRAL_TEST_H2_FRAMES_H

#include "proto/http2/hpack.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Bytes, grown with realloc; zeroed to start, `p` freed by the owner. */
struct h2_frames_buf {
    uint8_t *p;
    size_t len, cap;
};

/* Appends `n` bytes of `p` (`p` may be NULL when `n` is 0). */
void h2_frames_put(struct h2_frames_buf *b, const void *p, size_t n);

/* Drops the first `n` bytes (at most `len`), what a reader consumed. */
void h2_frames_drop(struct h2_frames_buf *b, size_t n);

/* An h2_sink's write: appends each iovec to the struct h2_frames_buf
 * `arg`. */
void h2_frames_sink_write(void *arg, const struct iovec *iov, int count);

/* `v` in network order at `p`. */
void h2_frames_be32(uint8_t *p, uint32_t v);

/* A frame: the 9-byte header, then `len` bytes of `payload`. */
void h2_frames_frame(struct h2_frames_buf *b, uint8_t type, uint8_t flags, uint32_t sid,
                     const void *payload, size_t len);

/* One setting of a SETTINGS payload: id and value. */
void h2_frames_setting(struct h2_frames_buf *b, uint16_t id, uint32_t v);

/* A frame of `type` whose payload is the 32 bits `v` (WINDOW_UPDATE,
 * RST_STREAM). */
void h2_frames_u32_frame(struct h2_frames_buf *b, uint8_t type, uint32_t sid, uint32_t v);

/* The client preface and an empty SETTINGS: how a client begins. */
void h2_frames_start(struct h2_frames_buf *b);

/* The field `name`: `value` (both NUL-terminated, not copied). */
struct hpack_field h2_frames_field(const char *name, const char *value);

#endif
