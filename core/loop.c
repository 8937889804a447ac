/*
 * loop.c: the per-thread event loop.  One epoll set, a timer heap, deferred
 * callbacks, and a lock-free queue other threads post callbacks into.
 *
 * One iteration: wait for events, dispatch them, run due timers, run deferred
 * callbacks, flush the output every connection queued, then free the
 * connections that closed (only now can no pending event refer to them).
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define EVENTS_PER_WAIT 256
/* Queued output is flushed, and kicked connections read, after every few
 * events rather than once per batch of up to EVENTS_PER_WAIT: the first
 * answers of a large batch then reach their clients (and requests their
 * backends) while the rest of the batch is still being handled, so the
 * processes at the other ends start sooner.  Through the proxy on two CPUs
 * that was 8-10% more requests/s with a connection per request and 5% more
 * with keep-alive; responses to pipelined requests still leave together,
 * since they come from one event. */
#define EVENTS_PER_FLUSH 8
#define SCRATCH_SIZE     (64 * 1024)

uint64_t corral_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t corral__monotonic_ms(void)
{
    return corral_monotonic_ns() / 1000000u;
}

static void post_on_event(struct corral__handle *handle, uint32_t epoll_events);
static void free_watchers(corral_loop *loop);

int corral_loop_new(corral_loop **out)
{
    int err;
    corral_loop *loop = calloc(1, sizeof(*loop));
    if (loop == NULL)
        return -ENOMEM;
    loop->epfd = -1;
    loop->post_eventfd = -1;

    loop->scratch_size = SCRATCH_SIZE;
    loop->scratch = malloc(loop->scratch_size);
    if (loop->scratch == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd == -1) {
        err = -errno;
        corral__error("epoll_create1: %s", strerror(errno));
        goto fail;
    }
    loop->post_eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->post_eventfd == -1) {
        err = -errno;
        corral__error("eventfd: %s", strerror(errno));
        goto fail;
    }
    atomic_init(&loop->post_stub.next, NULL);
    atomic_init(&loop->post_head, &loop->post_stub);
    loop->post_tail = &loop->post_stub;
    atomic_init(&loop->post_wake_pending, false);
    loop->post_handle.on_event = post_on_event;
    err = corral__loop_watch(loop, loop->post_eventfd, &loop->post_handle, EPOLLIN);
    if (err != 0)
        goto fail;

    loop->now = corral__monotonic_ms();
    *out = loop;
    return 0;

fail:
    if (loop->post_eventfd != -1)
        close(loop->post_eventfd);
    if (loop->epfd != -1)
        close(loop->epfd);
    free(loop->scratch);
    free(loop);
    return err;
}

static struct corral__post *post_pop(corral_loop *loop);
static void post_run(struct corral__post *post);
static void run_deferred(corral_loop *loop);

void corral_loop_free(corral_loop *loop)
{
    if (loop == NULL)
        return;
    corral__loop_abort_conns(loop);
    /* No iteration will flush or read again: connections still listed for
     * one would be kept from the free below, and leak. */
    for (corral_conn *conn = loop->flush_list; conn != NULL; conn = conn->flush_next)
        conn->in_flush_list = false;
    for (corral_conn *conn = loop->kick_list; conn != NULL; conn = conn->kick_next)
        conn->in_kick_list = false;
    loop->flush_list = loop->kick_list = NULL;
    corral__loop_splices_done(loop); /* the aborts ended every splice */
    corral__loop_free_closed(loop);
    while (loop->deferred_count > 0)
        run_deferred(loop);
    for (size_t c = 0; c < CORRAL__BUFFER_CLASSES; c++)
        while (loop->pool_count[c] > 0)
            free(loop->pool[c][--loop->pool_count[c]]);
    /* Run what was posted but never delivered, so no poster's memory leaks. */
    struct corral__post *post;
    while ((post = post_pop(loop)) != NULL)
        post_run(post);
    free_watchers(loop);
    corral__loop_free_pipes(loop);
    corral__io_batch_free(loop);
    free(loop->read_ahead);
    close(loop->post_eventfd);
    close(loop->epfd);
    free(loop->timers);
    free(loop->deferred);
    free(loop->scratch);
    free(loop);
}

uint64_t corral_loop_now(const corral_loop *loop)
{
    return loop->now;
}

/* epoll_ctl(`op`) for `handle`, logged under `op_name` when it fails. */
static int loop_ctl(corral_loop *loop, int op, const char *op_name, int fd,
                    struct corral__handle *handle, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = handle};
    if (epoll_ctl(loop->epfd, op, fd, &ev) == -1) {
        int err = -errno;
        corral__error("epoll_ctl(%s, fd %d): %s", op_name, fd, strerror(errno));
        return err;
    }
    return 0;
}

int corral__loop_watch(corral_loop *loop, int fd, struct corral__handle *handle, uint32_t events)
{
    return loop_ctl(loop, EPOLL_CTL_ADD, "ADD", fd, handle, events);
}

int corral__loop_rewatch(corral_loop *loop, int fd, struct corral__handle *handle, uint32_t events)
{
    return loop_ctl(loop, EPOLL_CTL_MOD, "MOD", fd, handle, events);
}

void corral__loop_unwatch(corral_loop *loop, int fd)
{
    /* ENOENT/EBADF here mean the fd was never or is no longer registered,
     * which callers tolerate by design. */
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* ------------------------------------------------------- buffer pool */

/*
 * The classes: 16 KiB holds any request or response head and a batch of
 * small pipelined responses (the one pooled size before the classes, which
 * measured best for small responses); 64 KiB holds what one read into the
 * loop's scratch buffer leaves unconsumed; 256 KiB is the default high
 * watermark, so a connection pushing back on its producer never needs more.
 * Larger buffers, for writes past the watermark, come from malloc.  Each
 * class's pool holds at most class_depth[] buffers: 1 MiB per class and
 * 3 MiB per loop at most, kept for reuse and never handed back to the
 * system while the loop runs.
 */
static const uint32_t class_size[CORRAL__BUFFER_CLASSES] = {16 * 1024, 64 * 1024, 256 * 1024};
static const size_t class_depth[CORRAL__BUFFER_CLASSES] = {64, 16, 4};

/* The class of buffers of `size` bytes, or CORRAL__BUFFER_CLASSES. */
static size_t buffer_class(size_t size)
{
    size_t c = 0;
    while (c < CORRAL__BUFFER_CLASSES && class_size[c] < size)
        c++;
    return c;
}

char *corral__buffer_get(corral_loop *loop, size_t need, uint32_t *cap)
{
    assert(need <= CORRAL__BUFFER_MAX);
    size_t c = buffer_class(need);
    uint32_t size;
    char *buf;
    if (c < CORRAL__BUFFER_CLASSES) {
        size = class_size[c];
        buf = loop->pool_count[c] > 0 ? loop->pool[c][--loop->pool_count[c]] : malloc(size);
    } else {
        size = class_size[CORRAL__BUFFER_CLASSES - 1] * 2;
        while (size < need)
            size *= 2;
        buf = malloc(size);
    }
    if (buf != NULL)
        *cap = size;
    return buf;
}

char *corral__buffer_grow(corral_loop *loop, char *buf, size_t used, uint32_t *cap, size_t need)
{
    assert(used <= *cap && need <= CORRAL__BUFFER_MAX);
    if (need <= *cap)
        return buf;
    uint32_t size;
    char *grown = corral__buffer_get(loop, need, &size);
    if (grown == NULL)
        return NULL;
    memcpy(grown, buf, used);
    corral__buffer_put(loop, buf, *cap);
    *cap = size;
    return grown;
}

void corral__buffer_put(corral_loop *loop, char *buf, uint32_t cap)
{
    if (buf == NULL)
        return;
    assert(cap >= class_size[0] && (cap & (cap - 1)) == 0); /* from buffer_get */
    size_t c = buffer_class(cap);
    if (c < CORRAL__BUFFER_CLASSES && class_size[c] == cap && loop->pool_count[c] < class_depth[c])
        loop->pool[c][loop->pool_count[c]++] = buf;
    else
        free(buf);
}

/* ------------------------------------------------------ deferred callbacks */

int corral_loop_defer(corral_loop *loop, corral_callback cb, void *arg)
{
    assert(corral__loop_owned(loop));
    if (loop->deferred_count == loop->deferred_cap) {
        size_t cap = loop->deferred_cap ? loop->deferred_cap * 2 : 16;
        struct corral__deferred *grown = realloc(loop->deferred, cap * sizeof(*grown));
        if (grown == NULL)
            return -ENOMEM;
        loop->deferred = grown;
        loop->deferred_cap = cap;
    }
    loop->deferred[loop->deferred_count++] = (struct corral__deferred){cb, arg};
    return 0;
}

static void run_deferred(corral_loop *loop)
{
    /* Callbacks deferred while running wait for the next pass: take the
     * batch as it stands and run it in order. */
    size_t count = loop->deferred_count;
    if (count == 0)
        return;
    for (size_t i = 0; i < count; i++)
        loop->deferred[i].cb(loop->deferred[i].arg);
    memmove(loop->deferred, loop->deferred + count,
            (loop->deferred_count - count) * sizeof(*loop->deferred));
    loop->deferred_count -= count;
}

/* --------------------------------------------------------- posts (MPSC) */

int corral_loop_post(corral_loop *loop, corral_callback cb, void *arg)
{
    struct corral__post *post = malloc(sizeof(*post));
    if (post == NULL)
        return -ENOMEM;
    post->cb = cb;
    post->arg = arg;
    post->embedded = false;
    corral__loop_post_node(loop, post);
    return 0;
}

void corral__loop_post_node(corral_loop *loop, struct corral__post *post)
{
    atomic_init(&post->next, NULL);
    struct corral__post *prev = atomic_exchange(&loop->post_head, post);
    atomic_store(&prev->next, post);

    /* Only the first post of a batch writes the eventfd.  The loop clears
     * the flag before draining, so a post that finds it set is drained by
     * the pass that follows. */
    if (!atomic_exchange(&loop->post_wake_pending, true)) {
        uint64_t one = 1;
        while (write(loop->post_eventfd, &one, sizeof(one)) == -1 && errno == EINTR)
            ;
    }
}

/* Pops one post, or NULL if none is (yet) fully linked. */
static struct corral__post *post_pop(corral_loop *loop)
{
    assert(corral__loop_owned(loop)); /* the one consumer */
    struct corral__post *tail = loop->post_tail;
    struct corral__post *next = atomic_load(&tail->next);
    if (tail == &loop->post_stub) {
        if (next == NULL)
            return NULL;
        loop->post_tail = next;
        tail = next;
        next = atomic_load(&tail->next);
    }
    if (next != NULL) {
        loop->post_tail = next;
        return tail;
    }
    if (tail != atomic_load(&loop->post_head))
        return NULL; /* a producer is between its exchange and its link */
    /* `tail` is the last node: put the stub behind it so it can be taken. */
    atomic_store(&loop->post_stub.next, NULL);
    struct corral__post *prev = atomic_exchange(&loop->post_head, &loop->post_stub);
    atomic_store(&prev->next, &loop->post_stub);
    next = atomic_load(&tail->next);
    if (next != NULL) {
        loop->post_tail = next;
        return tail;
    }
    return NULL;
}

/* Runs a popped post.  An embedded node may be queued again by its owner
 * as soon as its callback starts, so it is not touched after. */
static void post_run(struct corral__post *post)
{
    bool allocated = !post->embedded;
    post->cb(post->arg);
    if (allocated)
        free(post);
}

static void post_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    (void)epoll_events;
    corral_loop *loop = (corral_loop *)((char *)handle - offsetof(corral_loop, post_handle));
    uint64_t count;
    while (read(loop->post_eventfd, &count, sizeof(count)) == -1 && errno == EINTR)
        ;
    atomic_store(&loop->post_wake_pending, false);
    struct corral__post *post;
    while ((post = post_pop(loop)) != NULL)
        post_run(post);
}

/* ------------------------------------------------------------------ run */

/* Set once epoll_pwait2() has failed other than by a signal: kernels
 * before 5.11 lack it, and a seccomp filter may refuse it (EPERM). */
static atomic_bool pwait2_refused;

/* epoll_wait() for at most `ns`: a millisecond is far too long to wait for
 * a connection that will be ready to take in microseconds.  Where
 * epoll_pwait2() is refused, the millisecond it is. */
static int wait_ns(corral_loop *loop, struct epoll_event *events, uint64_t ns)
{
    if (!atomic_load_explicit(&pwait2_refused, memory_order_relaxed)) {
        struct timespec timeout = {.tv_sec = (time_t)(ns / 1000000000),
                                   .tv_nsec = (long)(ns % 1000000000)};
        int n = epoll_pwait2(loop->epfd, events, EVENTS_PER_WAIT, &timeout, NULL);
        if (n != -1 || errno == EINTR)
            return n;
        corral__warn("epoll_pwait2: %s; waiting a millisecond instead", strerror(errno));
        atomic_store_explicit(&pwait2_refused, true, memory_order_relaxed);
    }
    return epoll_wait(loop->epfd, events, EVENTS_PER_WAIT, 1);
}

int corral__loop_run_once(corral_loop *loop, int timeout_ms)
{
    struct epoll_event events[EVENTS_PER_WAIT];
    /* eBPF steering passes by a worker that has been in one iteration for
     * long: it publishes when it wakes and when it waits again. */
    corral_worker *steered =
        loop->worker != NULL && loop->worker->steer_slot != NULL ? loop->worker : NULL;
    uint64_t look_again_ns = 0;
    if (steered != NULL && timeout_ms != 0) {
        if (corral__steer_take(steered, &look_again_ns))
            timeout_ms = 0; /* took connections off others' queues: serve them now */
        else
            corral__steer_busy(steered, false);
    }
    int n = look_again_ns > 0 && (timeout_ms < 0 || look_again_ns < (uint64_t)timeout_ms * 1000000)
                ? wait_ns(loop, events, look_again_ns)
                : epoll_wait(loop->epfd, events, EVENTS_PER_WAIT, timeout_ms);
    if (n == -1 && errno != EINTR) {
        int err = -errno;
        corral__error("epoll_wait: %s", strerror(errno));
        return err;
    }
    loop->now = corral__monotonic_ms();
    if (steered != NULL)
        corral__steer_busy(steered, true);
    static_assert(EVENTS_PER_FLUSH <= CORRAL__READ_AHEAD_CONNS, "a group's reads fit");
    for (int i = 0; i < n; i++) {
        if (i % EVENTS_PER_FLUSH == 0 && !loop->io_batch_off)
            corral__loop_read_ahead(loop, events + i,
                                    n - i < EVENTS_PER_FLUSH ? n - i : EVENTS_PER_FLUSH);
        struct corral__handle *handle = events[i].data.ptr;
        handle->on_event(handle, events[i].events);
        if ((i + 1) % EVENTS_PER_FLUSH == 0 && i + 1 < n) {
            corral__loop_kick(loop);
            corral__loop_flush(loop, true);
        }
    }
    corral__loop_kick(loop);
    corral__timers_run(loop);
    run_deferred(loop);
    corral__loop_splices_done(loop);
    corral__loop_flush(loop, false);
    corral__loop_free_closed(loop);
    free_watchers(loop);
    return 0;
}

int corral_loop_run(corral_loop *loop)
{
    assert(!atomic_load_explicit(&loop->running, memory_order_relaxed)); /* not re-entered */
    loop->thread = pthread_self();
    atomic_store_explicit(&loop->running, true, memory_order_release);
    corral__io_batch_start(loop);
    int err = 0;
    loop->stopping = false;
    while (!loop->stopping) {
        int timeout = corral__timers_next_timeout(loop);
        /* Work left for the next iteration: a connection closed from
         * another's on_close waits in closed_list for its own. */
        if (loop->deferred_count > 0 || loop->flush_list != NULL || loop->kick_list != NULL ||
            loop->splices_done != NULL || loop->closed_list != NULL)
            timeout = 0;
        err = corral__loop_run_once(loop, timeout);
        if (err != 0)
            break;
    }
    atomic_store_explicit(&loop->running, false, memory_order_relaxed);
    return err;
}

void corral_loop_stop(corral_loop *loop)
{
    loop->stopping = true;
}

/* ------------------------------------------------------------ fd watchers */

struct corral_io {
    struct corral__handle handle;
    corral_loop *loop;
    int fd;
    corral_io_cb cb;
    void *arg;
    bool freed;
    corral_io *freed_next; /* loop->freed_ios */
};

static uint32_t io_epoll_events(unsigned events)
{
    return ((events & CORRAL_READABLE) ? EPOLLIN : 0u) |
           ((events & CORRAL_WRITABLE) ? EPOLLOUT : 0u);
}

/* Frees the watchers freed during the iteration, once no event of its
 * batch can refer to them. */
static void free_watchers(corral_loop *loop)
{
    while (loop->freed_ios != NULL) {
        corral_io *io = loop->freed_ios;
        loop->freed_ios = io->freed_next;
        free(io);
    }
}

static void io_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    corral_io *io = (corral_io *)handle;
    if (io->freed)
        return;
    unsigned events = ((epoll_events & EPOLLIN) ? CORRAL_READABLE : 0u) |
                      ((epoll_events & EPOLLOUT) ? CORRAL_WRITABLE : 0u) |
                      ((epoll_events & (EPOLLERR | EPOLLHUP)) ? CORRAL_HANGUP : 0u);
    io->cb(io, events, io->arg);
}

int corral_io_new(corral_loop *loop, int fd, unsigned events, corral_io_cb cb, void *arg,
                  corral_io **out)
{
    assert(corral__loop_owned(loop));
    corral_io *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return -ENOMEM;
    *io = (corral_io){.handle.on_event = io_on_event, .loop = loop, .fd = fd, .cb = cb, .arg = arg};
    int err = corral__loop_watch(loop, fd, &io->handle, io_epoll_events(events));
    if (err != 0) {
        free(io);
        return err;
    }
    *out = io;
    return 0;
}

int corral_io_set(corral_io *io, unsigned events)
{
    return corral__loop_rewatch(io->loop, io->fd, &io->handle, io_epoll_events(events));
}

void corral_io_free(corral_io *io)
{
    if (io == NULL)
        return;
    assert(corral__loop_owned(io->loop) && !io->freed);
    corral__loop_unwatch(io->loop, io->fd);
    /* Events for it may still sit in this iteration's batch: free at its
     * end.  A list through the watcher itself, so freeing allocates
     * nothing and cannot fail. */
    io->freed = true;
    io->freed_next = io->loop->freed_ios;
    io->loop->freed_ios = io;
}
