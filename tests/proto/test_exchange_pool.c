/*
 * test_exchange_pool.c: the per-thread lists of freed exchanges: a kept
 * block comes back for the next take of its size, and no other; a
 * thread keeps at most EXCHANGE_POOL_SLOTS of a size; under AddressSanitizer
 * a kept block is poisoned; another thread has lists of its own, freed when
 * it ends (LeakSanitizer would report them otherwise).  And the
 * thread-exit list those pools hang on: a thread's calls run at its end,
 * newest first, and one registered while they run still runs.
 */
#include "../helpers.h"
#include "proto/http/exchange_pool.h"
#include "proto/thread_exit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

START_TEST(pool_reuse)
{
    ck_assert_uint_eq(exchange_pool_count(752), 0);
    char *a = exchange_pool_take(752);
    ck_assert_ptr_nonnull(a);
    a[751] = 1;
    exchange_pool_put(a, 752);
    ck_assert_uint_eq(exchange_pool_count(752), 1);
#if TEST_ASAN
    /* kept, not to be touched: a use after the framer freed it is caught */
    ck_assert(__asan_address_is_poisoned(a + 100));
#endif
    /* another size: not this block */
    char *b = exchange_pool_take(600);
    ck_assert_ptr_ne(b, a);
    ck_assert_uint_eq(exchange_pool_count(752), 1);
    ck_assert_ptr_eq(exchange_pool_take(752), a);
#if TEST_ASAN
    ck_assert(!__asan_address_is_poisoned(a + 100));
#endif
    ck_assert_uint_eq(exchange_pool_count(752), 0);
    a[0] = 2;
    exchange_pool_put(b, 600);
    exchange_pool_put(a, 752);
    ck_assert_uint_eq(exchange_pool_count(600), 1);
}
END_TEST

START_TEST(pool_bounded)
{
    enum { MANY = EXCHANGE_POOL_SLOTS + 10 };
    void *blocks[MANY];
    for (size_t i = 0; i < MANY; i++)
        ck_assert_ptr_nonnull(blocks[i] = exchange_pool_take(512));
    for (size_t i = 0; i < MANY; i++)
        exchange_pool_put(blocks[i], 512);
    ck_assert_uint_eq(exchange_pool_count(512), EXCHANGE_POOL_SLOTS);
    /* what is kept comes back, last in first out, then malloc's */
    for (size_t i = 0; i < EXCHANGE_POOL_SLOTS; i++)
        ck_assert_ptr_eq(exchange_pool_take(512), blocks[EXCHANGE_POOL_SLOTS - 1 - i]);
    ck_assert_uint_eq(exchange_pool_count(512), 0);
    for (size_t i = 0; i < EXCHANGE_POOL_SLOTS; i++)
        exchange_pool_put(blocks[i], 512);
}
END_TEST

static void *other_thread(void *arg)
{
    size_t *seen = arg;
    seen[0] = exchange_pool_count(700);
    for (int i = 0; i < 8; i++)
        exchange_pool_put(malloc(700), 700);
    seen[1] = exchange_pool_count(700);
    return NULL;
}

START_TEST(pool_per_thread)
{
    void *mine = exchange_pool_take(700);
    exchange_pool_put(mine, 700);
    size_t seen[2] = {99, 99};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, seen), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(seen[0], 0); /* not this thread's block */
    ck_assert_uint_eq(seen[1], 8);
    ck_assert_uint_eq(exchange_pool_count(700), 1);
    ck_assert_ptr_eq(exchange_pool_take(700), mine);
    free(mine);
}
END_TEST

/* Each call appends its letter; the one for 'c' registers 'd' as the
 * thread's calls already run. */
struct order {
    char seen[8];
    size_t n;
};
static struct order order;

static void note(void *arg);

static void note_d(void *arg)
{
    (void)arg;
    order.seen[order.n++] = 'd';
}

static void note(void *arg)
{
    char c = *(const char *)arg;
    order.seen[order.n++] = c;
    if (c == 'c')
        ck_assert_int_eq(thread_exit_call(note_d, NULL), 0);
}

static void *exit_thread(void *arg)
{
    (void)arg;
    static const char letters[] = "abc";
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(thread_exit_call(note, (void *)&letters[i]), 0);
    ck_assert_uint_eq(order.n, 0); /* nothing before the thread ends */
    return NULL;
}

START_TEST(thread_exit_order)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, exit_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(order.n, 4);
    ck_assert_int_eq(memcmp(order.seen, "cbad", 4), 0);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/exchange_pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, pool_reuse);
    tcase_add_test(tc, pool_bounded);
    tcase_add_test(tc, pool_per_thread);
    tcase_add_test(tc, thread_exit_order);
    suite_add_tcase(suite, tc);
    return suite;
}
