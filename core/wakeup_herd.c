/*
 * wakeup_herd.c: every worker's epoll set holds the shared listening socket
 * with no flag, so every idle worker wakes for every connection.  The
 * baseline the other modes are measured against; needs nothing.
 */
#include "internal.h"

const struct corral_wakeup_ops corral__wakeup_herd = {
    .mode = CORRAL_WAKEUP_HERD,
    .impl = "shared",
    .description = "one shared listener in every worker, no flag",
    .attach = corral__attach_level,
    .detach = corral__detach_all,
};
