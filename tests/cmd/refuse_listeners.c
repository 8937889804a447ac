/*
 * refuse_listeners.c: preloaded into the daemon by test_daemon.  epoll_ctl()
 * refuses to watch a listening socket, as when the user's epoll watches run
 * out, so every worker of a generation stops on its own as it starts.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    int (*real)(int, int, int, struct epoll_event *);
    *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (op == EPOLL_CTL_ADD && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
        listening) {
        errno = ENOSPC;
        return -1;
    }
    return real(epfd, op, fd, event);
}
