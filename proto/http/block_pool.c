/*
 * block_pool.c: a small per-thread set of freed large blocks
 * (block_pool.h).  A coder's state is a few blocks of fixed sizes for a
 * given coding and level, and a file's read buffer is always the same
 * size, so the next response finds the sizes it needs: taking one back
 * is a scan of a few slots, and the bytes are already mapped and in the
 * cache.
 */
#include "proto/http/block_pool.h"

#include <stdlib.h>

#include "proto/poison.h"
#include "proto/thread_exit.h"

#define SLOTS 32

struct pool {
    size_t bytes; /* the sum of the slots' caps */
    size_t count;
    struct {
        void *block;
        size_t cap;
    } slot[SLOTS];
};

static _Thread_local struct pool *mine;

static void pool_destroy(void *arg)
{
    struct pool *p = arg;
    mine = NULL;
    for (size_t i = 0; i < p->count; i++) {
        poison_take(p->slot[i].block, p->slot[i].cap);
        free(p->slot[i].block);
    }
    free(p);
}

/* The thread's pool, made on its first put; NULL when out of memory. */
static struct pool *pool_get(void)
{
    if (mine == NULL)
        mine = thread_exit_calloc(sizeof(*mine), pool_destroy);
    return mine;
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
    poison_take(block, *cap);
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
    poison_keep(block, cap);
    p->slot[p->count].block = block;
    p->slot[p->count].cap = cap;
    p->count++;
    p->bytes += cap;
}

size_t block_pool_bytes(void)
{
    return mine != NULL ? mine->bytes : 0;
}
