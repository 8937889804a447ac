/*
 * exchange_pool.c: per-thread lists of freed exchanges (exchange_pool.h).
 * Each worker thread runs one loop, so a thread's lists are the loop's and
 * need no lock.  There are only a few exchange sizes (one per framer, and
 * the proxy's state for each), so each gets a class of its own, found by a
 * scan of at most CLASSES sizes.
 */
#include "proto/http/exchange_pool.h"

#include <stdlib.h>

#include "proto/poison.h"
#include "proto/thread_exit.h"

/* Sizes kept; a block of another size once all are taken is malloc's.
 * One per framer's exchange, and handlers' per-exchange state (the
 * proxy's). */
#define CLASSES 8

struct size_class {
    size_t size; /* 0: unused */
    size_t count;
    void *block[EXCHANGE_POOL_SLOTS];
};

struct pool {
    struct size_class cls[CLASSES];
};

static _Thread_local struct pool *mine;

static void pool_destroy(void *arg)
{
    struct pool *p = arg;
    mine = NULL;
    for (size_t c = 0; c < CLASSES; c++) {
        for (size_t i = 0; i < p->cls[c].count; i++) {
            poison_take(p->cls[c].block[i], p->cls[c].size);
            free(p->cls[c].block[i]);
        }
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

/* The class of `size` in `p`; with `add`, a free one made so; or NULL. */
static struct size_class *class_of(struct pool *p, size_t size, int add)
{
    for (size_t c = 0; c < CLASSES; c++) {
        if (p->cls[c].size == size)
            return &p->cls[c];
        if (p->cls[c].size == 0) {
            if (!add)
                return NULL;
            p->cls[c].size = size;
            return &p->cls[c];
        }
    }
    return NULL;
}

void *exchange_pool_take(size_t size)
{
    struct size_class *cls = mine != NULL ? class_of(mine, size, 0) : NULL;
    if (cls == NULL || cls->count == 0)
        return malloc(size);
    void *block = cls->block[--cls->count];
    poison_take(block, size);
    return block;
}

void exchange_pool_put(void *block, size_t size)
{
    if (block == NULL)
        return;
    struct pool *p = pool_get();
    struct size_class *cls = p != NULL ? class_of(p, size, 1) : NULL;
    if (cls == NULL || cls->count == EXCHANGE_POOL_SLOTS) {
        free(block);
        return;
    }
    poison_keep(block, size);
    cls->block[cls->count++] = block;
}

size_t exchange_pool_count(size_t size)
{
    struct size_class *cls = mine != NULL ? class_of(mine, size, 0) : NULL;
    return cls != NULL ? cls->count : 0;
}
