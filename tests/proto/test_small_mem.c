/*
 * test_small_mem.c: the per-thread allocator of small blocks: a freed
 * block comes back for the next request of its size class and of no
 * other; calloc zeroes a kept block; realloc keeps the bytes whether the
 * block stays, changes class or is malloc's alone; a thread keeps a
 * bounded number of blocks per class; under AddressSanitizer a kept
 * block is poisoned; another thread has lists of its own, freed when it
 * ends (LeakSanitizer would report them otherwise).
 */
#include "../helpers.h"
#include "proto/small_mem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void *mem_malloc(size_t size)
{
    return small_mem_malloc(size, NULL);
}

static void mem_free(void *p)
{
    small_mem_free(p, NULL);
}

static void *mem_realloc(void *p, size_t size)
{
    return small_mem_realloc(p, size, NULL);
}

static void *mem_calloc(size_t n, size_t size)
{
    return small_mem_calloc(n, size, NULL);
}

START_TEST(mem_reuse)
{
    size_t before = small_mem_kept(100);
    char *a = mem_malloc(100);
    ck_assert_ptr_nonnull(a);
    memset(a, 'x', 100);
    mem_free(a);
    ck_assert_uint_eq(small_mem_kept(100), before + 1);
    ck_assert_uint_eq(small_mem_kept(90), before + 1); /* the same class */
#if TEST_ASAN
    ck_assert(__asan_address_is_poisoned(a + 10));
#endif
    /* another class: not this block */
    char *b = mem_malloc(1000);
    ck_assert_ptr_ne(b, a);
    ck_assert_ptr_eq(mem_malloc(90), a);
    ck_assert_uint_eq(small_mem_kept(100), before);
#if TEST_ASAN
    ck_assert(!__asan_address_is_poisoned(a + 10));
#endif
    mem_free(a);
    /* calloc's block is the kept one, zeroed */
    char *z = mem_calloc(10, 10);
    ck_assert_ptr_eq(z, a);
    for (size_t i = 0; i < 100; i++)
        ck_assert_int_eq(z[i], 0);
    mem_free(z);
    mem_free(b);
    /* calloc refuses a product that overflows */
    ck_assert_ptr_null(mem_calloc(SIZE_MAX / 2, 3));
    mem_free(NULL);
}
END_TEST

START_TEST(mem_realloc_keeps_bytes)
{
    unsigned char *p = mem_realloc(NULL, 20);
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 20; i++)
        p[i] = (unsigned char)i;
    /* within its class: the same block */
    ck_assert_ptr_eq(mem_realloc(p, 40), p);
    /* into a larger class, past the largest (malloc's alone), and back */
    size_t sizes[] = {300, 3000, 100000, 200000, 50000, 2000, 500};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        p = mem_realloc(p, sizes[s]);
        ck_assert_ptr_nonnull(p);
        for (int i = 0; i < 20; i++)
            ck_assert_uint_eq(p[i], (unsigned)i);
        memset(p + 20, 0xab, sizes[s] - 20); /* all of it usable */
    }
    /* a block over 1 KiB is never kept */
    ck_assert_uint_eq(small_mem_kept(1100), 0);
    void *big = mem_malloc(1100);
    mem_free(big);
    ck_assert_uint_eq(small_mem_kept(1100), 0);
    ck_assert_uint_eq(small_mem_kept(100000), 0);
    /* realloc to 0 frees, as realloc() does */
    ck_assert_ptr_null(mem_realloc(p, 0));
}
END_TEST

START_TEST(mem_bounded)
{
    enum { MANY = 4096 };
    void **blocks = malloc(MANY * sizeof(*blocks));
    ck_assert_ptr_nonnull(blocks);
    for (size_t i = 0; i < MANY; i++)
        ck_assert_ptr_nonnull(blocks[i] = mem_malloc(1000));
    for (size_t i = 0; i < MANY; i++)
        mem_free(blocks[i]);
    size_t kept = small_mem_kept(1000);
    ck_assert_uint_gt(kept, 0);
    ck_assert_uint_lt(kept, MANY); /* the rest went back to malloc */
    ck_assert_uint_eq(kept, SMALL_MEM_KEEP_BYTES / SMALL_MEM_LARGEST); /* the stated bound */
    /* kept blocks come back last in first out */
    ck_assert_ptr_eq(mem_malloc(1000), blocks[kept - 1]);
    mem_free(blocks[kept - 1]);
    free(blocks);
}
END_TEST

static void *other_thread(void *arg)
{
    size_t *seen = arg;
    seen[0] = small_mem_kept(500);
    void *p[8];
    for (int i = 0; i < 8; i++)
        p[i] = mem_malloc(500);
    for (int i = 0; i < 8; i++)
        mem_free(p[i]);
    seen[1] = small_mem_kept(500);
    return NULL;
}

START_TEST(mem_per_thread)
{
    void *mine = mem_malloc(500);
    mem_free(mine);
    size_t kept = small_mem_kept(500);
    size_t seen[2] = {99, 99};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, seen), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(seen[0], 0); /* not this thread's blocks */
    ck_assert_uint_eq(seen[1], 8);
    ck_assert_uint_eq(small_mem_kept(500), kept);
    ck_assert_ptr_eq(mem_malloc(500), mine);
    mem_free(mine);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/small_mem");
    TCase *tc = tcase_create("mem");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, mem_reuse);
    tcase_add_test(tc, mem_realloc_keeps_bytes);
    tcase_add_test(tc, mem_bounded);
    tcase_add_test(tc, mem_per_thread);
    suite_add_tcase(suite, tc);
    return suite;
}
