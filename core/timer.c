/*
 * timer.c: one-shot timers in a binary min-heap ordered by (deadline, start
 * order).  Each timer knows its heap position, so stop and re-arm are
 * O(log n) without searching.
 */
#include "internal.h"

#include <assert.h>
#include <errno.h>

static bool timer_before(const struct corral_timer *a, const struct corral_timer *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_place(corral_loop *loop, size_t pos, struct corral_timer *timer)
{
    loop->timers[pos] = timer;
    timer->heap_pos = pos;
}

static void heap_sift_up(corral_loop *loop, size_t pos)
{
    struct corral_timer *timer = loop->timers[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!timer_before(timer, loop->timers[parent]))
            break;
        heap_place(loop, pos, loop->timers[parent]);
        pos = parent;
    }
    heap_place(loop, pos, timer);
}

static void heap_sift_down(corral_loop *loop, size_t pos)
{
    struct corral_timer *timer = loop->timers[pos];
    for (;;) {
        size_t child = 2 * pos + 1;
        if (child >= loop->timer_count)
            break;
        if (child + 1 < loop->timer_count &&
            timer_before(loop->timers[child + 1], loop->timers[child]))
            child++;
        if (!timer_before(loop->timers[child], timer))
            break;
        heap_place(loop, pos, loop->timers[child]);
        pos = child;
    }
    heap_place(loop, pos, timer);
}

static void heap_remove(corral_loop *loop, struct corral_timer *timer)
{
    size_t pos = timer->heap_pos;
    assert(pos < loop->timer_count && loop->timers[pos] == timer);
    struct corral_timer *last = loop->timers[--loop->timer_count];
    timer->heap_pos = CORRAL__TIMER_IDLE;
    if (last == timer)
        return;
    heap_place(loop, pos, last);
    if (pos > 0 && timer_before(last, loop->timers[(pos - 1) / 2]))
        heap_sift_up(loop, pos);
    else
        heap_sift_down(loop, pos);
}

/* Every timer that exists owns a slot in its loop's heap array, reserved
 * when the timer is created, so that starting one never allocates: a timer
 * that failed to start would leave its connection waiting forever, and
 * corral_timer_start() has no caller that could act on a failure. */
int corral__timer_init(struct corral_timer *timer, corral_loop *loop, corral_timer_cb cb, void *arg)
{
    if (loop->timer_reserved == loop->timer_cap) {
        size_t cap = loop->timer_cap ? loop->timer_cap * 2 : 64;
        struct corral_timer **grown = realloc(loop->timers, cap * sizeof(*grown));
        if (grown == NULL)
            return -ENOMEM;
        loop->timers = grown;
        loop->timer_cap = cap;
    }
    loop->timer_reserved++;
    *timer =
        (struct corral_timer){.loop = loop, .cb = cb, .arg = arg, .heap_pos = CORRAL__TIMER_IDLE};
    return 0;
}

void corral__timer_deinit(struct corral_timer *timer)
{
    corral_loop *loop = timer->loop;
    corral_timer_stop(timer);
    assert(loop->timer_reserved > loop->timer_count);
    loop->timer_reserved--;
}

int corral_timer_new(corral_loop *loop, corral_timer_cb cb, void *arg, corral_timer **out)
{
    struct corral_timer *timer = malloc(sizeof(*timer));
    if (timer == NULL)
        return -ENOMEM;
    if (corral__timer_init(timer, loop, cb, arg) != 0) {
        free(timer);
        return -ENOMEM;
    }
    *out = timer;
    return 0;
}

void corral_timer_start(corral_timer *timer, uint64_t after_ms)
{
    corral_loop *loop = timer->loop;
    assert(corral__loop_owned(loop));
    corral_timer_stop(timer);
    assert(loop->timer_count < loop->timer_reserved && loop->timer_reserved <= loop->timer_cap);
    timer->deadline = loop->now + after_ms;
    timer->seq = loop->timer_seq++;
    heap_place(loop, loop->timer_count++, timer);
    heap_sift_up(loop, timer->heap_pos);
}

void corral_timer_stop(corral_timer *timer)
{
    assert(corral__loop_owned(timer->loop));
    if (timer->heap_pos != CORRAL__TIMER_IDLE)
        heap_remove(timer->loop, timer);
}

bool corral_timer_active(const corral_timer *timer)
{
    return timer->heap_pos != CORRAL__TIMER_IDLE;
}

void corral_timer_free(corral_timer *timer)
{
    if (timer == NULL)
        return;
    corral__timer_deinit(timer);
    free(timer);
}

void corral__timers_run(corral_loop *loop)
{
    /* Timers started by a callback for "now" wait for the next iteration, so
     * a callback that re-arms itself with 0 cannot starve the loop. */
    uint64_t last_seq = loop->timer_seq;
    while (loop->timer_count > 0) {
        struct corral_timer *timer = loop->timers[0];
        if (timer->deadline > loop->now || timer->seq >= last_seq)
            break;
        heap_remove(loop, timer);
        timer->cb(timer, timer->arg);
    }
}

int corral__timers_next_timeout(const corral_loop *loop)
{
    if (loop->timer_count == 0)
        return -1;
    uint64_t deadline = loop->timers[0]->deadline;
    if (deadline <= loop->now)
        return 0;
    uint64_t wait = deadline - loop->now;
    return wait > INT32_MAX ? INT32_MAX : (int)wait;
}
