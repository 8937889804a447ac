/*
 * wakeup_rotate.c: round-robin on a kernel without a rotate flag.  Like
 * exclusive mode, but after a worker has drained the accept queue it removes
 * its exclusive entry and adds it again, which moves it to the tail of the
 * listener's wait queue: "first idle waiter" becomes "next idle waiter in
 * turn".  EPOLL_CTL_MOD would be cheaper but is refused for exclusive
 * entries.  Unlike SO_REUSEPORT, every worker keeps pulling from one shared
 * queue, so a slow worker cannot strand connections.
 */
#include "internal.h"

#include <string.h>
#include <sys/epoll.h>
void corral__rotate_requeue(corral_worker *worker, struct corral__accept_entry *entry)
{
    if (worker->server->worker_count == 1)
        return; /* nobody to take turns with: save the two syscalls */
    corral__entry_unregister(entry);
    int err = corral__entry_register(entry, EPOLLEXCLUSIVE);
    if (err != 0) {
        /* Without its entry this worker would silently stop accepting. */
        corral__error("worker %u: re-queueing %s failed: %s; leaving the rotation", worker->index,
                      entry->listener->address_text, strerror(-err));
    }
}

const struct corral_wakeup_ops corral__wakeup_rotate = {
    .mode = CORRAL_WAKEUP_ROUNDROBIN,
    .impl = "rotate",
    .description = "EPOLLEXCLUSIVE re-queued after each drain",
    .probe = corral__probe_epoll_exclusive,
    .attach = corral__attach_exclusive,
    .on_drained = corral__rotate_requeue,
    .detach = corral__detach_all,
};
