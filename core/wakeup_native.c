/*
 * wakeup_native.c: the native kernel modes.  The listening sockets sit in
 * one shared epoll set created with the kernel's round-robin (EPOLL_ROTATE)
 * or CPU-affinity (EPOLL_AFFINITY) flag, and that set is registered with
 * EPOLLEXCLUSIVE in every worker's epoll: the kernel then chooses which
 * worker to wake.  Only these modes nest listeners below the worker's set:
 * without the kernel's support, nesting turns exclusive wakeups back into a
 * broadcast, which is why the emulated modes never do it.
 *
 * Mainline kernels have neither flag; the probe reports them missing unless
 * the system headers define them and the kernel accepts them.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#ifdef EPOLL_ROTATE
#define ROTATE_FLAG    EPOLL_ROTATE
#define ROTATE_MISSING "the kernel refused EPOLL_ROTATE"
#else
#define ROTATE_FLAG    0
#define ROTATE_MISSING "no native round-robin epoll (EPOLL_ROTATE is not in the system headers)"
#endif
#ifdef EPOLL_AFFINITY
#define AFFINITY_FLAG    EPOLL_AFFINITY
#define AFFINITY_MISSING "the kernel refused EPOLL_AFFINITY"
#else
#define AFFINITY_FLAG 0
#define AFFINITY_MISSING                                                                           \
    "no native CPU-affinity epoll (EPOLL_AFFINITY is not in the system headers)"
#endif

#define READY_PER_WAKEUP 16

static bool native_rotate_probe(const struct corral_kernel_caps *caps, const char **why)
{
    *why = ROTATE_MISSING;
    return caps->epoll_rotate;
}

static bool native_affinity_probe(const struct corral_kernel_caps *caps, const char **why)
{
    *why = AFFINITY_MISSING;
    return caps->epoll_affinity;
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
    return nested_setup(server, ROTATE_FLAG);
}

static int native_affinity_setup(corral_server *server)
{
    return nested_setup(server, AFFINITY_FLAG);
}

static void nested_teardown(corral_server *server)
{
    if (server->nested_epfd != -1)
        close(server->nested_epfd);
    server->nested_epfd = -1;
}

/* The worker was chosen: ask the shared set which listeners are ready. */
static void nested_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    (void)epoll_events;
    corral_worker *worker =
        (corral_worker *)((char *)handle - offsetof(corral_worker, nested_handle));
    if (!worker->attached)
        return;
    struct epoll_event ready[READY_PER_WAKEUP];
    int n = epoll_wait(worker->server->nested_epfd, ready, READY_PER_WAKEUP, 0);
    for (int i = 0; i < n && worker->attached; i++) {
        corral_listener *listener = ready[i].data.ptr;
        corral__accept_from(&worker->entries[listener->index]);
    }
}

/* Mainline refuses EPOLLEXCLUSIVE on an epoll fd; a kernel with the native
 * flag is expected to take it for its rotate and affinity sets.  Built
 * without the flag, a forced capability (tests only) gets a plain nested
 * set, which wakes every worker but still exercises this path. */
static int nested_attach(corral_worker *worker, int kernel_flag)
{
    worker->nested_handle.on_event = nested_on_event;
    uint32_t exclusive = kernel_flag != 0 ? EPOLLEXCLUSIVE : 0;
    return corral__loop_watch(worker->loop, worker->server->nested_epfd, &worker->nested_handle,
                              EPOLLIN | exclusive);
}

static int native_rotate_attach(corral_worker *worker)
{
    return nested_attach(worker, ROTATE_FLAG);
}

static int native_affinity_attach(corral_worker *worker)
{
    return nested_attach(worker, AFFINITY_FLAG);
}

static void nested_detach(corral_worker *worker)
{
    corral__loop_unwatch(worker->loop, worker->server->nested_epfd);
}

const struct corral_wakeup_ops corral__wakeup_native_rotate = {
    .mode = CORRAL_WAKEUP_ROUNDROBIN,
    .impl = "native",
    .description = "kernel round-robin epoll set shared by the workers",
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
    .pins_workers = true,
    .probe = native_affinity_probe,
    .setup = native_affinity_setup,
    .teardown = nested_teardown,
    .attach = native_affinity_attach,
    .detach = nested_detach,
};
