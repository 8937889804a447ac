/*
 * listener.c: listening addresses and sockets.  Parses and formats the
 * address syntax shared by the API and the config file, and creates bound,
 * listening sockets with the listener's options.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int corral_parse_address(const char *text, struct sockaddr_storage *addr, socklen_t *addrlen)
{
    memset(addr, 0, sizeof(*addr));
    if (strncmp(text, "unix:", 5) == 0) {
        struct sockaddr_un *sun = (struct sockaddr_un *)addr;
        const char *path = text + 5;
        size_t len = strlen(path);
        if (len == 0 || len >= sizeof(sun->sun_path))
            return -EINVAL;
        sun->sun_family = AF_UNIX;
        memcpy(sun->sun_path, path, len + 1);
        *addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
        return 0;
    }

    char host[256];
    const char *port;
    if (text[0] == '[') {
        const char *end = strchr(text, ']');
        if (end == NULL || end[1] != ':' || (size_t)(end - text - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, text + 1, (size_t)(end - text - 1));
        host[end - text - 1] = '\0';
        port = end + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL || (size_t)(colon - text) >= sizeof(host))
            return -EINVAL;
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port = colon + 1;
    }
    char *end;
    errno = 0;
    unsigned long port_number = strtoul(port, &end, 10);
    if (*port == '\0' || *end != '\0' || errno != 0 || port_number > 65535 ||
        !(port[0] >= '0' && port[0] <= '9'))
        return -EINVAL;

    if (strcmp(host, "*") == 0 || host[0] == '\0') {
        struct sockaddr_in *sin = (struct sockaddr_in *)addr;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port_number);
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        *addrlen = sizeof(*sin);
        return 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *found;
    if (getaddrinfo(host, port, &hints, &found) != 0)
        return -EINVAL;
    memcpy(addr, found->ai_addr, found->ai_addrlen);
    *addrlen = found->ai_addrlen;
    freeaddrinfo(found);
    return 0;
}

int corral_format_address(const struct sockaddr *addr, socklen_t addrlen, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    int n;
    switch (addr->sa_family) {
    case AF_INET: {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        n = snprintf(buf, len, "%s:%u", host, ntohs(sin->sin_port));
        break;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)addr;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        n = snprintf(buf, len, "[%s]:%u", host, ntohs(sin6->sin6_port));
        break;
    }
    case AF_UNIX: {
        const struct sockaddr_un *sun = (const struct sockaddr_un *)addr;
        size_t path_len =
            addrlen > offsetof(struct sockaddr_un, sun_path)
                ? strnlen(sun->sun_path, addrlen - offsetof(struct sockaddr_un, sun_path))
                : 0;
        n = snprintf(buf, len, "unix:%.*s", (int)path_len, sun->sun_path);
        break;
    }
    default: return -EAFNOSUPPORT;
    }
    return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

static int set_int_option(int fd, int level, int name, int value, const char *what)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) == -1) {
        int err = -errno;
        corral__error("setsockopt(%s): %s", what, strerror(errno));
        return err;
    }
    return 0;
}

int corral__set_accept_options(const corral_listener *listener, int fd)
{
    int err =
        set_int_option(fd, IPPROTO_TCP, TCP_NODELAY, listener->options.tcp_nodelay, "TCP_NODELAY");
    if (err == 0)
        err = set_int_option(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT,
                             (int)listener->options.defer_accept_s, "TCP_DEFER_ACCEPT");
    return err;
}

int corral__listen_socket(const corral_listener *listener, bool reuseport)
{
    const struct sockaddr *addr = (const struct sockaddr *)&listener->addr;
    bool tcp = addr->sa_family != AF_UNIX;
    int err;
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        err = -errno;
        corral__error("socket(%s): %s", listener->address_text, strerror(errno));
        return err;
    }
    if (tcp && (err = set_int_option(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")) != 0)
        goto fail;
    if (reuseport && (err = set_int_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT")) != 0)
        goto fail;
    if (addr->sa_family == AF_INET6 &&
        (err = set_int_option(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY")) != 0)
        goto fail;
    if (tcp && (err = corral__set_accept_options(listener, fd)) != 0)
        goto fail;
    if (bind(fd, addr, listener->addrlen) == -1) {
        err = -errno;
        corral__error("bind(%s): %s", listener->address_text, strerror(errno));
        goto fail;
    }
    if (listen(fd, listener->options.backlog) == -1) {
        err = -errno;
        corral__error("listen(%s): %s", listener->address_text, strerror(errno));
        goto fail;
    }
    return fd;

fail:
    close(fd);
    return err;
}

void corral_listen_options_init(struct corral_listen_options *options)
{
    *options = (struct corral_listen_options){
        .backlog = 511,
        .tcp_nodelay = true,
        .high_watermark = CORRAL_HIGH_WATERMARK,
        .low_watermark = CORRAL_LOW_WATERMARK,
    };
}

int corral_listener_address(const corral_listener *listener, char *buf, size_t len)
{
    return corral_format_address((const struct sockaddr *)&listener->addr, listener->addrlen, buf,
                                 len);
}

int corral_listener_port(const corral_listener *listener)
{
    const struct sockaddr *addr = (const struct sockaddr *)&listener->addr;
    if (addr->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)addr)->sin_port);
    if (addr->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
    return 0;
}
