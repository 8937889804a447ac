/*
 * small_mem.h: an allocator for the small, short-lived blocks that the
 * protocol libraries (ngtcp2, nghttp3) and the streams built on them
 * allocate and free for every request.  At many requests a loop
 * iteration those come in bursts larger than malloc's per-thread cache,
 * so each went to the arena (about 150 to 300 instructions).  This keeps
 * freed blocks in per-thread lists of a few size classes instead,
 * without a lock (a worker thread runs one loop).
 *
 * The four functions have the signatures of the libraries' memory hooks
 * (ngtcp2_mem, nghttp3_mem, nghttp2_mem: malloc, free, calloc, realloc,
 * each with the table's user pointer, ignored), so that a table is
 * filled with them directly.  A block may be freed on any thread.
 */
#ifndef CORRAL_PROTO_SMALL_MEM_H
#define CORRAL_PROTO_SMALL_MEM_H

#include <stddef.h>

/* Blocks are kept in classes of 64, 128, ... SMALL_MEM_LARGEST bytes
 * (a 16-byte head included); a larger request is malloc's alone.  A
 * thread keeps at most SMALL_MEM_KEEP_BYTES of blocks per class, so at
 * most 5 * SMALL_MEM_KEEP_BYTES (640 KiB) in all; the lists are freed
 * when the thread ends. */
#define SMALL_MEM_LARGEST    1024u
#define SMALL_MEM_KEEP_BYTES 131072u

/* As malloc(), calloc(), realloc() and free(), on these blocks only. */
void *small_mem_malloc(size_t size, void *user);
void *small_mem_calloc(size_t nmemb, size_t size, void *user);
void *small_mem_realloc(void *ptr, size_t size, void *user);
void small_mem_free(void *ptr, void *user);

/* How many freed blocks the calling thread keeps for requests of up to
 * `size` bytes; 0 for a size it never keeps (for tests). */
size_t small_mem_kept(size_t size);

#endif
