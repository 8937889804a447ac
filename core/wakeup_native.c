/*
 * wakeup_native.c: the native kernel modes.  The listening sockets sit in
 * one shared epoll set created with the kernel's round-robin (EPOLL_ROTATE)
 * or CPU-affinity (EPOLL_AFFINITY) flag, and that set is registered with
 * EPOLLEXCLUSIVE in every worker's epoll: the kernel then chooses which
 * worker to wake.  Only these modes nest listeners below the worker's set:
 * without the kernel's support, nesting turns exclusive wakeups back into a
 * broadcast, which is why the emulated modes never do it.
 *
 * Mainline kernels have neither flag (tests/kernel/ patches them into
 * Linux): the probe asks the kernel at run time and explains a refusal.
 */
#include "internal.h"

#include "epoll_native.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct native_kind {
    int flag;
    const char *flag_name, *what;
    bool works;
    char why[160]; /* why the kernel refused it; "" if it did not */
};

static struct native_kind rotate_kind = {
    .flag = EPOLL_ROTATE, .flag_name = "EPOLL_ROTATE", .what = "round-robin"};
static struct native_kind affinity_kind = {
    .flag = EPOLL_AFFINITY, .flag_name = "EPOLL_AFFINITY", .what = "CPU-affinity"};
static pthread_once_t native_once = PTHREAD_ONCE_INIT;

/* The whole arrangement the modes rely on: a set created with the flag, and
 * another set taking it with EPOLLEXCLUSIVE, which mainline refuses. */
static void probe_kind(struct native_kind *kind)
{
    int upper = -1, set = epoll_create1(EPOLL_CLOEXEC | kind->flag);
    if (set == -1) {
        snprintf(kind->why, sizeof(kind->why),
                 "the kernel has no %s epoll sets (epoll_create1(%s): %s; mainline Linux lacks "
                 "them)",
                 kind->what, kind->flag_name, strerror(errno));
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE};
    upper = epoll_create1(EPOLL_CLOEXEC);
    if (upper == -1 || epoll_ctl(upper, EPOLL_CTL_ADD, set, &ev) == -1)
        snprintf(kind->why, sizeof(kind->why),
                 "the kernel refused EPOLLEXCLUSIVE on a %s epoll set (%s: %s)", kind->what,
                 upper == -1 ? "epoll_create1" : "epoll_ctl", strerror(errno));
    else
        kind->works = true;
    if (upper != -1)
        close(upper);
    close(set);
}

static void probe_kinds(void)
{
    probe_kind(&rotate_kind);
    probe_kind(&affinity_kind);
}

/* The kind, asked of the kernel if it was not yet. */
static const struct native_kind *probed(const struct native_kind *kind)
{
    pthread_once(&native_once, probe_kinds);
    return kind;
}

void corral__native_probe(bool *rotate, bool *affinity)
{
    pthread_once(&native_once, probe_kinds);
    *rotate = rotate_kind.works;
    *affinity = affinity_kind.works;
}

static bool native_probe(const struct native_kind *kind, bool cap,
                         const struct corral_kernel_caps *caps, const char **why)
{
    if (probed(kind)->why[0] != '\0')
        *why = kind->why;
    else if (!caps->epoll_exclusive)
        *why = "EPOLLEXCLUSIVE is not supported";
    else if (kind == &rotate_kind)
        *why = "native round-robin epoll is turned off (CORRAL_CAPS_DISABLE=epoll_rotate)";
    else
        *why = "native CPU-affinity epoll is turned off (CORRAL_CAPS_DISABLE=epoll_affinity)";
    return cap && caps->epoll_exclusive; /* the shared set is taken with it */
}

static bool native_rotate_probe(const struct corral_kernel_caps *caps, const char **why)
{
    return native_probe(&rotate_kind, caps->epoll_rotate, caps, why);
}

static bool native_affinity_probe(const struct corral_kernel_caps *caps, const char **why)
{
    return native_probe(&affinity_kind, caps->epoll_affinity, caps, why);
}

/* The flag to create the shared set with: 0 where the kernel lacks it and
 * the capability was forced on (tests only), which gives a plain nested set
 * that wakes every worker but still exercises this path. */
static int kernel_flag(const struct native_kind *kind)
{
    return probed(kind)->works ? kind->flag : 0;
}

static int nested_setup(corral_server *server, int flag)
{
    server->nested_epfd = epoll_create1(EPOLL_CLOEXEC | flag);
    if (server->nested_epfd == -1) {
        int err = -errno;
        corral__error("epoll_create1(shared accept set): %s", strerror(errno));
        return err;
    }
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        if (epoll_ctl(server->nested_epfd, EPOLL_CTL_ADD, l->fd, &ev) == -1) {
            int err = -errno;
            corral__error("epoll_ctl(shared accept set, %s): %s", l->address_text, strerror(errno));
            close(server->nested_epfd);
            server->nested_epfd = -1;
            return err;
        }
    }
    return 0;
}

static int native_rotate_setup(corral_server *server)
{
    return nested_setup(server, kernel_flag(&rotate_kind));
}

static int native_affinity_setup(corral_server *server)
{
    return nested_setup(server, kernel_flag(&affinity_kind));
}

static void nested_teardown(corral_server *server)
{
    if (server->nested_epfd != -1)
        close(server->nested_epfd);
    server->nested_epfd = -1;
}

/* The worker was chosen for one connection: ask the shared set for one
 * ready listener and accept one connection from it (accept_batch 1).  The
 * set hands out its listeners in turn (they are level-triggered in it), and
 * taking no more than was announced leaves the next connection to the
 * worker the kernel tells about it. */
static void nested_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    (void)epoll_events;
    corral_worker *worker =
        (corral_worker *)((char *)handle - offsetof(corral_worker, nested_handle));
    if (!worker->attached)
        return;
    struct epoll_event ready;
    int n = epoll_wait(worker->server->nested_epfd, &ready, 1, 0);
    if (n == 0) {
        /* With no timeout, epoll_wait() looks at the ready list without
         * its lock and misses it while another worker's scan has it in
         * hand; with one, it looks again under the lock.  The kernel just
         * said the set is ready, so a second look that finds nothing is
         * rare, and then returns within microseconds. */
        static const struct timespec a_moment = {.tv_nsec = 1};
        n = epoll_pwait2(worker->server->nested_epfd, &ready, 1, &a_moment, NULL);
    }
    if (n <= 0) {
        /* Woken for nothing: another worker took the connection first.
         * Counted like an accept() that finds the queue empty. */
        corral__stat_add(&worker->stats.accept_wakeups, 1);
        corral__stat_add(&worker->stats.accept_wasted, 1);
        return;
    }
    corral_listener *listener = ready.data.ptr;
    corral__accept_from(&worker->entries[listener->index]);
}

/* Mainline refuses EPOLLEXCLUSIVE on an epoll fd; a kernel with the native
 * flag takes it for its rotate and affinity sets, and then tells one worker
 * per connection.  Edge-triggered, so that a worker hears of a connection
 * only when the kernel chose it: level-triggered, the shared set would stay
 * queued in the worker's epoll after each delivery, and the worker would
 * take the connections announced to the next ones, which then wake for
 * nothing.  The kernel keeps the count exact: an event that merges into a
 * notification still queued is delivered once more, and one queued in a
 * worker that leaves (EPOLL_CTL_DEL) is passed to another, so none is left
 * waiting for the next arrival.  The plain nested set (kernel_flag 0, tests
 * only) wakes every worker and stays level-triggered. */
static int nested_attach(corral_worker *worker, int kernel_flag)
{
    worker->nested_handle.on_event = nested_on_event;
    uint32_t one_each = kernel_flag != 0 ? EPOLLEXCLUSIVE | EPOLLET : 0;
    return corral__loop_watch(worker->loop, worker->server->nested_epfd, &worker->nested_handle,
                              EPOLLIN | one_each);
}

static int native_rotate_attach(corral_worker *worker)
{
    return nested_attach(worker, kernel_flag(&rotate_kind));
}

static int native_affinity_attach(corral_worker *worker)
{
    return nested_attach(worker, kernel_flag(&affinity_kind));
}

static void nested_detach(corral_worker *worker)
{
    corral__loop_unwatch(worker->loop, worker->server->nested_epfd);
}

const struct corral_wakeup_ops corral__wakeup_native_rotate = {
    .mode = CORRAL_WAKEUP_ROUNDROBIN,
    .impl = "native",
    .description = "kernel round-robin epoll set shared by the workers",
    .accept_batch = 1,
    .probe = native_rotate_probe,
    .setup = native_rotate_setup,
    .teardown = nested_teardown,
    .attach = native_rotate_attach,
    .detach = nested_detach,
};

const struct corral_wakeup_ops corral__wakeup_native_affinity = {
    .mode = CORRAL_WAKEUP_AFFINITY,
    .impl = "native",
    .description = "kernel CPU-affinity epoll set shared by pinned workers",
    .accept_batch = 1,
    .pins_workers = true,
    .probe = native_affinity_probe,
    .setup = native_affinity_setup,
    .teardown = nested_teardown,
    .attach = native_affinity_attach,
    .detach = nested_detach,
};
