/*
 * block_pool.h: large blocks that responses use and give back, kept by
 * the worker thread for its next responses: a coder's state (brotli's,
 * zstd's: hundreds of KB, which malloc would map, fault in and unmap for
 * every response) and the buffer a file is read into when it cannot be
 * sent with sendfile (TLS, HTTP/2, a body filter).
 */
#ifndef CORRAL_PROTO_HTTP_BLOCK_POOL_H
#define CORRAL_PROTO_HTTP_BLOCK_POOL_H

#include <stddef.h>

/* Blocks of at least this much are kept; smaller ones are malloc's. */
#define BLOCK_POOL_MIN (32u * 1024)

/* What one thread keeps at most, in blocks it does not use (docs/config.md). */
#define BLOCK_POOL_BYTES (4u * 1024 * 1024)

/* A kept block of at least `size` bytes (and at most a quarter more), its
 * size in *cap, or NULL when the thread keeps none that fits.  Taken from
 * the pool: the caller owns it and gives it back with block_pool_put()
 * (or free()).  Any thread; each has its own pool. */
void *block_pool_take(size_t size, size_t *cap);

/* Keeps `block` (from malloc() or block_pool_take(), `cap` bytes) for
 * the thread's next block_pool_take(), or frees it when the pool would
 * pass BLOCK_POOL_BYTES or `cap` is below BLOCK_POOL_MIN.  The pool
 * is freed when the thread ends. */
void block_pool_put(void *block, size_t cap);

/* What the calling thread's pool holds now, in bytes (for tests). */
size_t block_pool_bytes(void);

#endif
