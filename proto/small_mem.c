/*
 * small_mem.c: per-thread lists of freed blocks (small_mem.h).  Each
 * block carries a 16-byte head naming its size class, since the
 * libraries free without saying the size.  Classes are powers of two
 * from 64 bytes to SMALL_MEM_LARGEST, head included: what a request
 * allocates fits, while a connection's larger blocks, kept for its life,
 * are malloc's at their size, with it in their head, so that an idle
 * connection's memory is not rounded up.
 */
#include "proto/small_mem.h"

#include "proto/poison.h"
#include "proto/thread_exit.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CLASSES        5       /* 64, 128, ... 1024 bytes */
#define SMALLEST_SHIFT 6       /* 64 */
#define BIG            CLASSES /* the class of a block from malloc alone */
_Static_assert(SMALL_MEM_LARGEST == 1u << (SMALLEST_SHIFT + CLASSES - 1), "classes");

/* 16 bytes, so that what follows keeps malloc's alignment. */
struct block_head {
    size_t cls;
    union {
        size_t size;             /* BIG: the bytes asked for */
        struct block_head *next; /* kept: the next in its list */
    };
};
_Static_assert(sizeof(struct block_head) == 16, "the head keeps malloc's alignment");

struct cache {
    struct block_head *list[CLASSES];
    size_t count[CLASSES];
    bool registered; /* for the lists' release at the thread's end */
};

static _Thread_local struct cache mine;

static size_t block_size(size_t cls)
{
    return (size_t)1 << (SMALLEST_SHIFT + cls);
}

static size_t usable(size_t cls)
{
    return block_size(cls) - sizeof(struct block_head);
}

static size_t keep_limit(size_t cls)
{
    return SMALL_MEM_KEEP_BYTES / block_size(cls);
}

/* The smallest class whose blocks hold `size` bytes, or BIG. */
static size_t class_of(size_t size)
{
    if (size > usable(CLASSES - 1))
        return BIG;
    size_t block = size + sizeof(struct block_head);
    if (block <= block_size(0))
        return 0;
    /* bits of block - 1: 65..128 -> 7, 129..256 -> 8, ... */
    return (size_t)(64 - __builtin_clzll((unsigned long long)(block - 1))) - SMALLEST_SHIFT;
}

static void cache_release(void *arg)
{
    struct cache *c = arg;
    for (size_t cls = 0; cls < CLASSES; cls++) {
        while (c->list[cls] != NULL) {
            struct block_head *h = c->list[cls];
            c->list[cls] = h->next;
            poison_take(h + 1, usable(cls));
            free(h);
        }
        c->count[cls] = 0;
    }
    c->registered = false;
}

void *small_mem_malloc(size_t size, void *user)
{
    (void)user;
    size_t cls = class_of(size);
    struct block_head *h;
    if (cls == BIG) {
        if (size > SIZE_MAX - sizeof(*h))
            return NULL;
        h = malloc(sizeof(*h) + size);
        if (h == NULL)
            return NULL;
        h->cls = BIG;
        h->size = size;
        return h + 1;
    }
    h = mine.list[cls];
    if (h != NULL) {
        mine.list[cls] = h->next;
        mine.count[cls]--;
        poison_take(h + 1, usable(cls));
        return h + 1;
    }
    h = malloc(block_size(cls));
    if (h == NULL)
        return NULL;
    h->cls = cls;
    return h + 1;
}

void small_mem_free(void *ptr, void *user)
{
    (void)user;
    if (ptr == NULL)
        return;
    struct block_head *h = (struct block_head *)ptr - 1;
    size_t cls = h->cls;
    assert(cls <= BIG);
    if (cls == BIG || mine.count[cls] >= keep_limit(cls)) {
        free(h);
        return;
    }
    if (!mine.registered) {
        /* The lists are freed when the thread ends, not leaked. */
        if (thread_exit_call(cache_release, &mine) != 0) {
            free(h);
            return;
        }
        mine.registered = true;
    }
    poison_keep(ptr, usable(cls));
    h->next = mine.list[cls];
    mine.list[cls] = h;
    mine.count[cls]++;
}

void *small_mem_calloc(size_t nmemb, size_t size, void *user)
{
    if (size != 0 && nmemb > SIZE_MAX / size)
        return NULL;
    void *p = small_mem_malloc(nmemb * size, user);
    if (p != NULL)
        memset(p, 0, nmemb * size);
    return p;
}

void *small_mem_realloc(void *ptr, size_t size, void *user)
{
    if (ptr == NULL)
        return small_mem_malloc(size, user);
    if (size == 0) { /* as realloc(): freed */
        small_mem_free(ptr, user);
        return NULL;
    }
    struct block_head *h = (struct block_head *)ptr - 1;
    if (h->cls == BIG) {
        if (class_of(size) != BIG) /* shrunk into a class: moved below */
            goto move;
        if (size > SIZE_MAX - sizeof(*h))
            return NULL;
        struct block_head *grown = realloc(h, sizeof(*h) + size);
        if (grown == NULL)
            return NULL;
        grown->size = size;
        return grown + 1;
    }
    if (size <= usable(h->cls))
        return ptr;
move:;
    size_t have = h->cls == BIG ? h->size : usable(h->cls);
    void *moved = small_mem_malloc(size, user);
    if (moved == NULL)
        return NULL;
    memcpy(moved, ptr, have < size ? have : size);
    small_mem_free(ptr, user);
    return moved;
}

size_t small_mem_kept(size_t size)
{
    size_t cls = class_of(size);
    return cls == BIG ? 0 : mine.count[cls];
}
