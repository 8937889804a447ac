/*
 * http2_mem.h: the allocator of the HTTP/2 server's per-stream buffers.
 * A stream allocates and frees a few small blocks (its request head and
 * field spans, body queues).  At many streams a loop iteration, those
 * come in bursts larger than malloc's per-thread cache, so each went to
 * the arena (about 150 to 300 instructions).  This keeps freed blocks in
 * per-thread lists of a few size classes instead, without a lock (a
 * worker thread runs one loop).
 */
#ifndef CORRAL_PROTO_HTTP2_MEM_H
#define CORRAL_PROTO_HTTP2_MEM_H

#include <stddef.h>

/* realloc() and free() that keep freed blocks per thread; a block may be
 * freed on any thread (a connection can move to another worker). */
void *http2_mem_realloc(void *ptr, size_t size);
void http2_mem_free(void *ptr);

/* How many freed blocks the calling thread keeps for requests of up to
 * `size` bytes; 0 for a size it never keeps (for tests). */
size_t http2_mem_kept(size_t size);

#endif
