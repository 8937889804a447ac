/*
 * http2_mem.h: the allocator the HTTP/2 server's nghttp2 sessions use.
 * nghttp2 allocates and frees a few small blocks for every stream (the
 * stream, its queued frames, each decoded header field, the response's
 * field array).  At many streams a loop iteration, those come in bursts
 * larger than malloc's per-thread cache, so each went to the arena (about
 * 150 to 300 instructions).  This keeps freed blocks in per-thread lists
 * of a few size classes instead, without a lock (a worker thread runs one
 * loop).
 */
#ifndef CORRAL_PROTO_HTTP2_MEM_H
#define CORRAL_PROTO_HTTP2_MEM_H

#include <nghttp2/nghttp2.h>

#include <stddef.h>

/* The allocator, for nghttp2_session_server_new3(); its blocks may be
 * freed on any thread (a connection can move to another worker). */
nghttp2_mem *http2_mem(void);

/* The same allocator for the server's own per-stream buffers (the request
 * head and its field spans, body queues): realloc() and free() that keep
 * freed blocks as nghttp2's are kept. */
void *http2_mem_realloc(void *ptr, size_t size);
void http2_mem_free(void *ptr);

/* How many freed blocks the calling thread keeps for requests of up to
 * `size` bytes; 0 for a size it never keeps (for tests). */
size_t http2_mem_kept(size_t size);

#endif
