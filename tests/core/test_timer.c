/*
 * test_timer.c: the timer heap through the public loop API.
 */
#include "../helpers.h"
#include "internal.h"

#include <stdlib.h>

struct fired {
    int order[16];
    int count;
    corral_loop *loop;
    int stop_after;
};

struct tagged_timer {
    struct fired *fired;
    int tag;
};

static void record_fire(corral_timer *timer, void *arg)
{
    (void)timer;
    struct tagged_timer *t = arg;
    t->fired->order[t->fired->count++] = t->tag;
    if (t->fired->count == t->fired->stop_after)
        corral_loop_stop(t->fired->loop);
}

START_TEST(timers_fire_in_deadline_order)
{
    uint64_t start = test_now_ms(); /* not later than the loop's clock */
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct fired fired = {.loop = loop, .stop_after = 5};
    static const int delays[] = {40, 10, 30, 0, 20};
    struct tagged_timer tags[5];
    corral_timer *timers[5];
    for (int i = 0; i < 5; i++) {
        tags[i] = (struct tagged_timer){&fired, delays[i]};
        ck_assert_int_eq(corral_timer_new(loop, record_fire, &tags[i], &timers[i]), 0);
        corral_timer_start(timers[i], (uint64_t)delays[i]);
    }
    ck_assert_int_eq(corral_loop_run(loop), 0);
    ck_assert_int_ge(test_now_ms() - start, 40);
    ck_assert_int_eq(fired.count, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(fired.order[i], i * 10);
    for (int i = 0; i < 5; i++)
        corral_timer_free(timers[i]);
    corral_loop_free(loop);
}
END_TEST

START_TEST(timers_with_equal_deadlines_fire_in_start_order)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct fired fired = {.loop = loop, .stop_after = 8};
    struct tagged_timer tags[8];
    corral_timer *timers[8];
    for (int i = 0; i < 8; i++) {
        tags[i] = (struct tagged_timer){&fired, i};
        ck_assert_int_eq(corral_timer_new(loop, record_fire, &tags[i], &timers[i]), 0);
        corral_timer_start(timers[i], 5);
    }
    ck_assert_int_eq(corral_loop_run(loop), 0);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(fired.order[i], i);
        corral_timer_free(timers[i]);
    }
    corral_loop_free(loop);
}
END_TEST

START_TEST(stopped_and_rearmed_timers)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct fired fired = {.loop = loop, .stop_after = 2};
    struct tagged_timer cancelled = {&fired, 1}, rearmed = {&fired, 2}, last = {&fired, 3};
    corral_timer *a, *b, *c;
    ck_assert_int_eq(corral_timer_new(loop, record_fire, &cancelled, &a), 0);
    ck_assert_int_eq(corral_timer_new(loop, record_fire, &rearmed, &b), 0);
    ck_assert_int_eq(corral_timer_new(loop, record_fire, &last, &c), 0);
    corral_timer_start(a, 5);
    corral_timer_start(b, 5);
    corral_timer_start(c, 30);
    ck_assert(corral_timer_active(a));
    corral_timer_stop(a);
    ck_assert(!corral_timer_active(a));
    corral_timer_stop(a);      /* stopping twice is harmless */
    corral_timer_start(b, 50); /* re-arming moves it behind c */
    ck_assert_int_eq(corral_loop_run(loop), 0);
    ck_assert_int_eq(fired.count, 2);
    ck_assert_int_eq(fired.order[0], 3);
    ck_assert_int_eq(fired.order[1], 2);
    corral_timer_free(a);
    corral_timer_free(b);
    corral_timer_free(c);
    corral_loop_free(loop);
}
END_TEST

struct many {
    corral_loop *loop;
    uint64_t last_deadline;
    int fired;
    int total;
    bool out_of_order;
};

struct many_timer {
    struct many *many;
    uint64_t deadline;
};

static void many_fire(corral_timer *timer, void *arg)
{
    (void)timer;
    struct many_timer *t = arg;
    struct many *many = t->many;
    if (t->deadline < many->last_deadline)
        many->out_of_order = true;
    many->last_deadline = t->deadline;
    if (++many->fired == many->total)
        corral_loop_stop(many->loop);
}

START_TEST(hundred_thousand_timers)
{
    enum { COUNT = 100000 };
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct many many = {.loop = loop, .total = COUNT / 2};
    struct many_timer *tags = calloc(COUNT, sizeof(*tags));
    corral_timer **timers = calloc(COUNT, sizeof(*timers));
    srand(42);
    uint64_t now = corral_loop_now(loop);
    for (int i = 0; i < COUNT; i++) {
        uint64_t delay = (uint64_t)(rand() % 200);
        tags[i] = (struct many_timer){&many, now + delay};
        ck_assert_int_eq(corral_timer_new(loop, many_fire, &tags[i], &timers[i]), 0);
        corral_timer_start(timers[i], delay);
    }
    /* Cancel every other one: only half may fire. */
    for (int i = 0; i < COUNT; i += 2)
        corral_timer_stop(timers[i]);
    ck_assert_int_eq(corral_loop_run(loop), 0);
    ck_assert_int_eq(many.fired, COUNT / 2);
    ck_assert(!many.out_of_order);
    for (int i = 0; i < COUNT; i++) {
        ck_assert(!corral_timer_active(timers[i]));
        corral_timer_free(timers[i]);
    }
    free(tags);
    free(timers);
    corral_loop_free(loop);
}
END_TEST

static void free_self(corral_timer *timer, void *arg)
{
    corral_timer_free(timer);
    corral_loop_stop(arg);
}

START_TEST(timer_freed_in_its_callback)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    corral_timer *timer;
    ck_assert_int_eq(corral_timer_new(loop, free_self, loop, &timer), 0);
    corral_timer_start(timer, 1);
    ck_assert_int_eq(corral_loop_run(loop), 0);
    corral_loop_free(loop);
}
END_TEST

/* Starting a timer never allocates: each timer's heap slot is reserved
 * when it is created, so a start cannot fail for want of memory (it used
 * to grow the heap, and abort the process when that failed). */
static void ignore_fire(corral_timer *timer, void *arg)
{
    (void)timer;
    (void)arg;
}

START_TEST(starting_timers_allocates_nothing)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    enum { COUNT = 1000 };
    corral_timer **timers = calloc(COUNT, sizeof(*timers));
    for (int i = 0; i < COUNT; i++)
        ck_assert_int_eq(corral_timer_new(loop, ignore_fire, NULL, &timers[i]), 0);
    struct corral_timer **heap = loop->timers;
    size_t cap = loop->timer_cap;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < COUNT; i++)
            corral_timer_start(timers[i], (uint64_t)(i % 7) * 1000);
        ck_assert_ptr_eq(loop->timers, heap);
        ck_assert_uint_eq(loop->timer_cap, cap);
        for (int i = 0; i < COUNT; i += 2)
            corral_timer_stop(timers[i]);
    }
    for (int i = 0; i < COUNT; i++)
        corral_timer_free(timers[i]);
    free(timers);
    corral_loop_free(loop);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/timer");
    TCase *tc = tcase_create("timers");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, timers_fire_in_deadline_order);
    tcase_add_test(tc, timers_with_equal_deadlines_fire_in_start_order);
    tcase_add_test(tc, stopped_and_rearmed_timers);
    tcase_add_test(tc, hundred_thousand_timers);
    tcase_add_test(tc, timer_freed_in_its_callback);
    tcase_add_test(tc, starting_timers_allocates_nothing);
    suite_add_tcase(suite, tc);
    return suite;
}
