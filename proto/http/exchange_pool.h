/*
 * exchange_pool.h: the memory of finished exchanges (an HTTP/1 exchange,
 * an HTTP/2 stream, the proxy's state for one), kept by the worker thread
 * for its next requests.  An exchange is freed at the end of the loop's
 * iteration (exchange.h), so with many requests per iteration malloc
 * sees a burst of same-sized frees and then a burst of allocations, more
 * than its per-thread cache holds: a few hundred instructions per request
 * that a list of kept blocks avoids.  At 10 HTTP/2 connections of 32
 * streams, 320 requests are in flight: a list of 64 missed for most of
 * the bursts.
 */
#ifndef CORRAL_PROTO_HTTP_EXCHANGE_POOL_H
#define CORRAL_PROTO_HTTP_EXCHANGE_POOL_H

#include <stddef.h>

/* Blocks of one size a thread keeps at most (the rest go to free()). */
#define EXCHANGE_POOL_SLOTS 256

/* An uninitialised block of `size` bytes: a kept one, or malloc's; NULL
 * when out of memory.  Given back with exchange_pool_put(). */
void *exchange_pool_take(size_t size);

/* Keeps `block` (of `size` bytes, from exchange_pool_take()) for the
 * calling thread's next take of that size, or frees it when the thread
 * keeps EXCHANGE_POOL_SLOTS of them already.  Kept blocks are freed when
 * the thread ends. */
void exchange_pool_put(void *block, size_t size);

/* How many blocks of `size` the calling thread keeps now (for tests). */
size_t exchange_pool_count(size_t size);

#endif
