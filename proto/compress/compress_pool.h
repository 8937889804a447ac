/*
 * compress_pool.h: the large blocks a coder's library frees, kept by the
 * thread for the next stream, so that a worker does not map, fault in and
 * unmap a brotli or zstd state (hundreds of KB) for every response.
 */
#ifndef CORRAL_PROTO_COMPRESS_POOL_H
#define CORRAL_PROTO_COMPRESS_POOL_H

#include <stddef.h>

/* Blocks of at least this much are kept; smaller ones are malloc's. */
#define COMPRESS_POOL_MIN (32u * 1024)

/* What one thread keeps at most, in blocks it does not use (docs/config.md). */
#define COMPRESS_POOL_BYTES (4u * 1024 * 1024)

/* A kept block of at least `size` bytes (and at most a quarter more), its
 * size in *cap, or NULL when the thread keeps none that fits.  Taken from
 * the pool: the caller owns it and gives it back with compress_pool_put()
 * (or free()).  Any thread; each has its own pool. */
void *compress_pool_take(size_t size, size_t *cap);

/* Keeps `block` (from malloc() or compress_pool_take(), `cap` bytes) for
 * the thread's next compress_pool_take(), or frees it when the pool would
 * pass COMPRESS_POOL_BYTES or `cap` is below COMPRESS_POOL_MIN.  The pool
 * is freed when the thread ends. */
void compress_pool_put(void *block, size_t cap);

/* What the calling thread's pool holds now, in bytes (for tests). */
size_t compress_pool_bytes(void);

#endif
