/*
 * refuse_listeners.c: preloaded into the daemon by test_daemon.  epoll_ctl()
 * refuses to watch a listening socket, as when the user's epoll watches run
 * out, so the workers of a generation stop on their own as they start.
 * With REFUSE_LISTENERS=all-but-one, the first epoll set to watch one keeps
 * watching (one worker serves) and only the others are refused.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

static atomic_int allowed_epfd = -1;

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    int (*real)(int, int, int, struct epoll_event *);
    *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (op == EPOLL_CTL_ADD && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
        listening) {
        const char *mode = getenv("REFUSE_LISTENERS");
        int none = -1;
        if (mode != NULL && strcmp(mode, "all-but-one") == 0 &&
            (atomic_compare_exchange_strong(&allowed_epfd, &none, epfd) || none == epfd))
            return real(epfd, op, fd, event);
        errno = ENOSPC;
        return -1;
    }
    return real(epfd, op, fd, event);
}
