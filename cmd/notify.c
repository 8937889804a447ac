/*
 * notify.c: the service manager's notification protocol (sd_notify(3)),
 * written out rather than linked from libsystemd: one datagram per message
 * to the unix socket $NOTIFY_SOCKET names, which is all the protocol is.
 */
#include "cmd/notify.h"
#include "cmd/daemon.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int notify_fd = -1;
static bool send_failed_logged;

void notify_open(void)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0' || notify_fd != -1)
        return;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    if ((name[0] != '/' && name[0] != '@') || len >= sizeof(addr.sun_path)) {
        log_warn("NOTIFY_SOCKET=%s: not a unix socket this daemon can use; not notifying", name);
        return;
    }
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@')
        addr.sun_path[0] = '\0'; /* an abstract name: no terminating NUL counts */
    socklen_t addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd == -1 || connect(fd, (struct sockaddr *)&addr, addr_len) == -1) {
        log_warn("NOTIFY_SOCKET=%s: %s: %s; not notifying", name, fd == -1 ? "socket" : "connect",
                 strerror(errno));
        if (fd != -1)
            close(fd);
        return;
    }
    notify_fd = fd;
}

bool notify_enabled(void)
{
    return notify_fd != -1;
}

void notify_send(const char *format, ...)
{
    if (notify_fd == -1)
        return;
    char message[512];
    va_list args;
    va_start(args, format);
    int len = vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    if (len < 0)
        return;
    if ((size_t)len >= sizeof(message))
        len = (int)sizeof(message) - 1; /* a status line cut short, not a failure */
    ssize_t sent;
    while ((sent = send(notify_fd, message, (size_t)len, MSG_NOSIGNAL)) == -1 && errno == EINTR)
        ;
    if (sent == -1 && !send_failed_logged) {
        send_failed_logged = true;
        log_warn("NOTIFY_SOCKET: send: %s", strerror(errno));
    }
}

void notify_reloading(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    notify_send("RELOADING=1\nMONOTONIC_USEC=%llu",
                (unsigned long long)now.tv_sec * 1000000u + (unsigned long long)now.tv_nsec / 1000);
}

void notify_close(void)
{
    if (notify_fd != -1)
        close(notify_fd);
    notify_fd = -1;
}
