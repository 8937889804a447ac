/*
 * refuse_listeners.c: preloaded into the daemon by test_daemon, to make the
 * kernel refuse listening sockets as REFUSE_LISTENERS says:
 *   all          epoll_ctl() refuses to watch one, as when the user's epoll
 *                watches run out: every worker stops on its own at start;
 *   all-but-one  the same, except for the first epoll set to watch one (one
 *                worker serves);
 *   rebind       bind() to a TCP port this process has bound before fails
 *                with EADDRINUSE, as when another program takes the port in
 *                the instant a reload re-creates the sockets.
 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

static bool mode_is(const char *name)
{
    const char *mode = getenv("REFUSE_LISTENERS");
    return mode != NULL && strcmp(mode, name) == 0;
}

static atomic_int allowed_epfd = -1;

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    int (*real)(int, int, int, struct epoll_event *);
    *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    int listening = 0;
    socklen_t len = sizeof(listening);
    if ((mode_is("all") || mode_is("all-but-one")) && op == EPOLL_CTL_ADD &&
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) {
        int none = -1;
        if (mode_is("all-but-one") &&
            (atomic_compare_exchange_strong(&allowed_epfd, &none, epfd) || none == epfd))
            return real(epfd, op, fd, event);
        errno = ENOSPC;
        return -1;
    }
    return real(epfd, op, fd, event);
}

static int port_of(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)addr)->sin_port);
    if (addr->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
    return 0;
}

static atomic_int bound_ports[64];
static atomic_int bound_count;

int bind(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    int (*real)(int, const struct sockaddr *, socklen_t);
    *(void **)&real = dlsym(RTLD_NEXT, "bind");
    if (!mode_is("rebind"))
        return real(fd, addr, addrlen);
    int port = port_of(addr);
    int count = atomic_load(&bound_count);
    for (int i = 0; port != 0 && i < count && i < 64; i++) {
        if (atomic_load(&bound_ports[i]) == port) {
            errno = EADDRINUSE;
            return -1;
        }
    }
    int rc = real(fd, addr, addrlen);
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (rc == 0 && getsockname(fd, (struct sockaddr *)&bound, &len) == 0 &&
        port_of((struct sockaddr *)&bound) != 0) {
        int slot = atomic_fetch_add(&bound_count, 1);
        if (slot < 64)
            atomic_store(&bound_ports[slot], port_of((struct sockaddr *)&bound));
    }
    return rc;
}
