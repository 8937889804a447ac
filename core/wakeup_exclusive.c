/*
 * wakeup_exclusive.c: the shared listening socket sits in every worker's
 * epoll set with EPOLLEXCLUSIVE, so a connection wakes one blocked worker.
 * The kernel picks the first idle waiter from the head of the queue, so the
 * same few workers take most connections.
 */
#include "internal.h"

const struct corral_wakeup_ops corral__wakeup_exclusive = {
    .mode = CORRAL_WAKEUP_EXCLUSIVE,
    .impl = "epollexclusive",
    .description = "EPOLLEXCLUSIVE, first idle worker",
    .probe = corral__probe_epoll_exclusive,
    .attach = corral__attach_exclusive,
    .detach = corral__detach_all,
};
