/*
 * wakeup_herd.c: every worker's epoll set holds the shared listening socket
 * with no flag, so every idle worker wakes for every connection.  The
 * baseline the other modes are measured against.
 */
#include "internal.h"

static int herd_attach(corral_worker *worker)
{
    for (size_t i = 0; i < worker->entry_count; i++) {
        int err = corral__entry_register(&worker->entries[i], 0);
        if (err != 0) {
            while (i-- > 0)
                corral__entry_unregister(&worker->entries[i]);
            return err;
        }
    }
    return 0;
}

static void herd_detach(corral_worker *worker)
{
    for (size_t i = 0; i < worker->entry_count; i++)
        corral__entry_unregister(&worker->entries[i]);
}

const struct corral_wakeup_ops corral__wakeup_herd = {
    .mode = CORRAL_WAKEUP_HERD,
    .impl = "shared",
    .attach = herd_attach,
    .detach = herd_detach,
};
