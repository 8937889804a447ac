/*
 * block_pool.c: a small per-thread set of freed large blocks
 * (block_pool.h).  A coder's state is a few blocks of fixed sizes for a
 * given coding and level, and a file's read buffer is always the same
 * size, so the next response finds the sizes it needs: taking one back
 * is a scan of a few slots, and the bytes are already mapped and in the
 * cache.
 */
#include "proto/http/block_pool.h"

#include <pthread.h>
#include <stdlib.h>

/* Under AddressSanitizer a kept block is poisoned, so that a use after
 * it was given back is caught as it would be after free(). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KEEP(block, cap) ASAN_POISON_MEMORY_REGION(block, cap)
#define TAKE(block, cap) ASAN_UNPOISON_MEMORY_REGION(block, cap)
#else
#define KEEP(block, cap) ((void)(block), (void)(cap))
#define TAKE(block, cap) ((void)(block), (void)(cap))
#endif

#define SLOTS 32

struct pool {
    size_t bytes; /* the sum of the slots' caps */
    size_t count;
    struct {
        void *block;
        size_t cap;
    } slot[SLOTS];
};

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct pool *mine;

static void pool_destroy(void *arg)
{
    struct pool *p = arg;
    mine = NULL;
    for (size_t i = 0; i < p->count; i++) {
        TAKE(p->slot[i].block, p->slot[i].cap);
        free(p->slot[i].block);
    }
    free(p);
}

static void key_init(void)
{
    (void)pthread_key_create(&key, pool_destroy);
}

/* The thread's pool, made on its first put; NULL when out of memory. */
static struct pool *pool_get(void)
{
    if (mine != NULL)
        return mine;
    pthread_once(&key_once, key_init);
    struct pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if (pthread_setspecific(key, p) != 0) {
        free(p);
        return NULL;
    }
    mine = p;
    return p;
}

void *block_pool_take(size_t size, size_t *cap)
{
    struct pool *p = mine;
    if (p == NULL || size < BLOCK_POOL_MIN)
        return NULL;
    size_t best = SLOTS;
    for (size_t i = 0; i < p->count; i++) {
        size_t c = p->slot[i].cap;
        if (c >= size && c - size <= size / 4 && (best == SLOTS || c < p->slot[best].cap))
            best = i;
    }
    if (best == SLOTS)
        return NULL;
    void *block = p->slot[best].block;
    *cap = p->slot[best].cap;
    p->bytes -= *cap;
    p->slot[best] = p->slot[--p->count];
    TAKE(block, *cap);
    return block;
}

void block_pool_put(void *block, size_t cap)
{
    if (block == NULL)
        return;
    struct pool *p = cap >= BLOCK_POOL_MIN ? pool_get() : NULL;
    if (p == NULL || p->count == SLOTS || cap > BLOCK_POOL_BYTES - p->bytes) {
        free(block);
        return;
    }
    KEEP(block, cap);
    p->slot[p->count].block = block;
    p->slot[p->count].cap = cap;
    p->count++;
    p->bytes += cap;
}

size_t block_pool_bytes(void)
{
    return mine != NULL ? mine->bytes : 0;
}
