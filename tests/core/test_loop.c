/*
 * test_loop.c: deferred callbacks, fd watchers and cross-thread posts.
 */
#include "../helpers.h"
#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct order_log {
    int seen[8];
    int count;
};

struct deferred_case {
    struct order_log *log;
    int value;
    corral_loop *loop;
};

static void deferred_record(void *arg)
{
    struct deferred_case *c = arg;
    c->log->seen[c->log->count++] = c->value;
    if (c->log->count == 3)
        corral_loop_stop(c->loop);
}

START_TEST(deferred_callbacks_run_in_order)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct order_log log = {0};
    struct deferred_case cases[3];
    for (int i = 0; i < 3; i++) {
        cases[i] = (struct deferred_case){&log, i, loop};
        ck_assert_int_eq(corral_loop_defer(loop, deferred_record, &cases[i]), 0);
    }
    ck_assert_int_eq(corral_loop_run(loop), 0);
    ck_assert_int_eq(log.count, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(log.seen[i], i);
    corral_loop_free(loop);
}
END_TEST

struct pipe_case {
    corral_loop *loop;
    int fds[2];
    int reads;
};

static void pipe_readable(corral_io *io, unsigned events, void *arg)
{
    struct pipe_case *c = arg;
    ck_assert(events & CORRAL_READABLE);
    char byte;
    ck_assert_int_eq(read(c->fds[0], &byte, 1), 1);
    if (++c->reads == 2) {
        corral_io_free(io); /* freeing inside the callback is allowed */
        corral_loop_stop(c->loop);
        return;
    }
    ck_assert_int_eq(write(c->fds[1], "y", 1), 1);
}

START_TEST(fd_watcher_sees_readable_pipe)
{
    struct pipe_case c = {0};
    ck_assert_int_eq(corral_loop_new(&c.loop), 0);
    ck_assert_int_eq(pipe(c.fds), 0);
    corral_io *io;
    ck_assert_int_eq(corral_io_new(c.loop, c.fds[0], CORRAL_READABLE, pipe_readable, &c, &io), 0);
    ck_assert_int_eq(write(c.fds[1], "x", 1), 1);
    ck_assert_int_eq(corral_loop_run(c.loop), 0);
    ck_assert_int_eq(c.reads, 2);
    close(c.fds[0]);
    close(c.fds[1]);
    corral_loop_free(c.loop);
}
END_TEST

/* ------------------------------------------------------------------ posts */

enum { PRODUCERS = 4, POSTS_PER_PRODUCER = 100000 };

struct post_target {
    corral_loop *loop;
    uint32_t next_expected[PRODUCERS]; /* per-producer FIFO check */
    uint64_t delivered;
    bool out_of_order;
    unsigned char *seen; /* each post exactly once */
};

struct post_message {
    struct post_target *target;
    uint32_t producer;
    uint32_t sequence;
};

static void on_post(void *arg)
{
    struct post_message *message = arg;
    struct post_target *target = message->target;
    size_t slot = (size_t)message->producer * POSTS_PER_PRODUCER + message->sequence;
    if (target->seen[slot]++ != 0 || target->next_expected[message->producer] != message->sequence)
        target->out_of_order = true;
    target->next_expected[message->producer] = message->sequence + 1;
    free(message);
    if (++target->delivered == (uint64_t)PRODUCERS * POSTS_PER_PRODUCER)
        corral_loop_stop(target->loop);
}

struct producer_arg {
    struct post_target *target;
    uint32_t producer;
};

static void *producer_main(void *arg)
{
    struct producer_arg *p = arg;
    for (uint32_t i = 0; i < POSTS_PER_PRODUCER; i++) {
        struct post_message *message = malloc(sizeof(*message));
        *message = (struct post_message){p->target, p->producer, i};
        while (corral_loop_post(p->target->loop, on_post, message) != 0)
            ;
    }
    return NULL;
}

START_TEST(posts_from_four_threads_arrive_exactly_once)
{
    struct post_target target = {0};
    target.seen = calloc((size_t)PRODUCERS * POSTS_PER_PRODUCER, 1);
    ck_assert_int_eq(corral_loop_new(&target.loop), 0);
    pthread_t threads[PRODUCERS];
    struct producer_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (struct producer_arg){&target, i};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, producer_main, &args[i]), 0);
    }
    ck_assert_int_eq(corral_loop_run(target.loop), 0);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(threads[i], NULL);
    ck_assert_uint_eq(target.delivered, (uint64_t)PRODUCERS * POSTS_PER_PRODUCER);
    ck_assert(!target.out_of_order);
    for (size_t i = 0; i < (size_t)PRODUCERS * POSTS_PER_PRODUCER; i++)
        ck_assert_int_eq(target.seen[i], 1);
    free(target.seen);
    corral_loop_free(target.loop);
}
END_TEST

static void count_post(void *arg)
{
    (*(int *)arg)++;
}

START_TEST(a_burst_of_posts_costs_one_wakeup)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int count = 0;
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(corral_loop_post(loop, count_post, &count), 0);
    /* One eventfd write for the whole burst: its counter reads 1. */
    uint64_t writes = 0;
    ck_assert_int_eq(read(loop->post_eventfd, &writes, sizeof(writes)), sizeof(writes));
    ck_assert_uint_eq(writes, 1);
    ck_assert_int_eq(count, 0);
    /* The batch is still delivered: the pending flag makes the next
     * iteration drain it once the eventfd fires again. */
    uint64_t one = 1;
    ck_assert_int_eq(write(loop->post_eventfd, &one, sizeof(one)), sizeof(one));
    ck_assert_int_eq(corral__loop_run_once(loop, 1000), 0);
    ck_assert_int_eq(count, 1000);
    corral_loop_free(loop);
}
END_TEST

START_TEST(posts_never_delivered_run_when_the_loop_is_freed)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int count = 0;
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(corral_loop_post(loop, count_post, &count), 0);
    corral_loop_free(loop);
    ck_assert_int_eq(count, 10);
}
END_TEST

/* Freeing a watcher allocates nothing, so it cannot fail and leak: it
 * used to defer the free, which needs memory. */
static void never_called(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    (void)arg;
    ck_abort_msg("a freed watcher's callback ran");
}

START_TEST(freeing_watchers_allocates_nothing)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    ck_assert_int_eq(write(fds[1], "x", 1), 1); /* readable: an event is due */
    for (int round = 0; round < 3; round++) {
        corral_io *io[20];
        int dups[20];
        for (int i = 0; i < 20; i++) {
            dups[i] = dup(fds[0]);
            ck_assert_int_ge(dups[i], 0);
            ck_assert_int_eq(
                corral_io_new(loop, dups[i], CORRAL_READABLE, never_called, NULL, &io[i]), 0);
        }
        for (int i = 0; i < 20; i++) {
            corral_io_free(io[i]);
            close(dups[i]);
        }
        ck_assert_uint_eq(loop->deferred_count, 0);
        ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    }
    close(fds[0]);
    close(fds[1]);
    corral_loop_free(loop);
}
END_TEST

#ifndef NDEBUG
/* Ownership is asserted: a loop's objects used from a thread other than
 * the one running it abort, in builds with assertions. */
static void *run_loop(void *arg)
{
    corral_loop_run(arg);
    return NULL;
}

static void nothing(void *arg)
{
    (void)arg;
}

START_TEST(using_a_running_loop_from_another_thread_aborts)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, run_loop, loop), 0);
    test_wait_for(atomic_load(&loop->running), TEST_WAIT_MS, "the loop did not start");
    corral_loop_defer(loop, nothing, NULL); /* not the loop's thread */
    ck_abort_msg("no assertion fired");
}
END_TEST
#endif

/* ------------------------------------------------------------------- log */

static char logged[2048];

static void capture_line(enum corral_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    snprintf(logged, sizeof(logged), "%s", line);
}

START_TEST(a_long_log_line_is_cut_visibly)
{
    char long_text[2000];
    memset(long_text, 'x', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = '\0';
    corral_set_logger(capture_line, NULL);
    corral_log(CORRAL_LOG_ERROR, "listen %s: refused", long_text);
    corral_set_logger(NULL, NULL);
    ck_assert_uint_eq(strlen(logged), 1023);
    ck_assert_str_eq(logged + 1020, "...");
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/loop");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, deferred_callbacks_run_in_order);
    tcase_add_test(tc, fd_watcher_sees_readable_pipe);
    tcase_add_test(tc, posts_from_four_threads_arrive_exactly_once);
    tcase_add_test(tc, a_burst_of_posts_costs_one_wakeup);
    tcase_add_test(tc, posts_never_delivered_run_when_the_loop_is_freed);
    tcase_add_test(tc, freeing_watchers_allocates_nothing);
    tcase_add_test(tc, a_long_log_line_is_cut_visibly);
#ifndef NDEBUG
    tcase_add_test_raise_signal(tc, using_a_running_loop_from_another_thread_aborts, SIGABRT);
#endif
    suite_add_tcase(suite, tc);
    return suite;
}
