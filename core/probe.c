/*
 * probe.c: what this kernel and process can do, asked once at start.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>

/* The per-epoll busy-poll ioctl (Linux 6.9).  Older system headers lack it;
 * the layout is kernel ABI, and older kernels answer ENOTTY. */
#ifndef EPIOCSPARAMS
struct epoll_params {
    uint32_t busy_poll_usecs;
    uint16_t busy_poll_budget;
    uint8_t prefer_busy_poll;
    uint8_t pad;
};
#define EPIOCSPARAMS _IOW(0x8A, 0x01, struct epoll_params)
#endif

unsigned corral__cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == -1)
        return 1;
    int count = CPU_COUNT(&set);
    return count > 0 ? (unsigned)count : 1;
}

void corral__loop_set_busy_poll(corral_loop *loop, unsigned usecs)
{
    struct epoll_params params = {.busy_poll_usecs = usecs, .busy_poll_budget = 8};
    if (ioctl(loop->epfd, EPIOCSPARAMS, &params) == -1)
        corral__warn("busy_poll %u us: ioctl(EPIOCSPARAMS): %s; polling without busy poll", usecs,
                     strerror(errno));
}
