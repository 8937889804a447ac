/*
 * wakeup_reuseport.c: one listening socket per worker in a SO_REUSEPORT
 * group; the kernel hashes each connection's 4-tuple to one socket, so
 * nobody else is woken.  Balance is statistical, and a busy worker's private
 * queue waits for it.  (Unix sockets cannot form a group; they stay shared.)
 */
#include "internal.h"

static bool reuseport_probe(const struct corral_kernel_caps *caps, const char **why)
{
    *why = "SO_REUSEPORT is not supported";
    return caps->reuseport;
}

const struct corral_wakeup_ops corral__wakeup_reuseport = {
    .mode = CORRAL_WAKEUP_REUSEPORT,
    .impl = "hash",
    .description = "SO_REUSEPORT group, one listener per worker, 4-tuple hash",
    .per_worker_sockets = true,
    .probe = reuseport_probe,
    .attach = corral__attach_level,
    .detach = corral__detach_all,
};
