/*
 * poison.h: marking memory a pool keeps.  Under AddressSanitizer a block
 * given back to a pool is poisoned until the pool hands it out again, so
 * that a use after it was given back is caught as it would be after
 * free(); otherwise both are nothing.
 */
#ifndef CORRAL_PROTO_POISON_H
#define CORRAL_PROTO_POISON_H

#include <stddef.h>

/* gcc says -fsanitize=address with __SANITIZE_ADDRESS__, Debian 12's clang
 * (14) only through __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define POISON_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POISON_ASAN 1
#endif
#endif

#if defined(POISON_ASAN)
#include <sanitizer/asan_interface.h>
#endif

/* `size` bytes at `block` are kept by a pool: no one may touch them. */
static inline void poison_keep(void *block, size_t size)
{
#if defined(POISON_ASAN)
    ASAN_POISON_MEMORY_REGION(block, size);
#else
    (void)block, (void)size;
#endif
}

/* `size` bytes at `block` leave the pool: usable again. */
static inline void poison_take(void *block, size_t size)
{
#if defined(POISON_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(block, size);
#else
    (void)block, (void)size;
#endif
}

#endif
