/*
 * listener.c: listening addresses and sockets.  Parses and formats the
 * address syntax shared by the API and the config file, creates bound,
 * listening sockets with the listener's options, and adds listeners to a
 * server, from an address or from sockets passed in.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
    if (text[0] >= '0' && text[0] <= '9' && text[strspn(text, "0123456789")] == '\0') {
        host[0] = '\0'; /* a port alone: every IPv4 address, as "*:PORT" */
        port = text;
    } else if (text[0] == '[') {
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
    int gai = getaddrinfo(host, port, &hints, &found);
    /* "256.1.1.1" is a malformed address, not a name nobody knows. */
    bool looks_numeric = host[strspn(host, "0123456789.")] == '\0' || strchr(host, ':') != NULL;
    if (gai != 0)
        return !looks_numeric && (gai == EAI_NONAME || gai == EAI_NODATA || gai == EAI_FAIL ||
                                  gai == EAI_AGAIN)
                   ? -ENOENT
                   : -EINVAL;
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

int corral__listen_socket(const corral_listener *listener, enum corral__reuseport reuseport)
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
    if (reuseport == CORRAL__REUSEPORT_JOIN &&
        (err = set_int_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT")) != 0)
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
    /* The kernel makes the group at listen(), from the sockets that have
     * SO_REUSEPORT by then: the rest can join this one from now on. */
    if (reuseport == CORRAL__REUSEPORT_FIRST &&
        (err = set_int_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT")) != 0)
        goto fail;
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

/* --------------------------------------------------------------- listen */

void corral__listener_close(corral_listener *listener)
{
    if (listener->fds != NULL) {
        for (unsigned i = 0; i < listener->server->worker_count; i++) {
            if (listener->fds[i] != -1)
                close(listener->fds[i]);
            listener->fds[i] = -1;
        }
    } else if (listener->fd != -1) {
        close(listener->fd);
    }
    listener->fd = -1;
    if (listener->owns_path)
        unlink(((const struct sockaddr_un *)&listener->addr)->sun_path);
    listener->owns_path = false;
}

void corral__listener_free(corral_listener *listener)
{
    corral__listener_close(listener);
    free(listener->fds);
    free(listener->address_text);
    free(listener);
}

/* Records the address the kernel really bound (port 0 becomes a port). */
static void listener_read_bound_address(corral_listener *listener)
{
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (listener->addr.ss_family != AF_UNIX &&
        getsockname(listener->fd, (struct sockaddr *)&bound, &len) == 0) {
        listener->addr = bound;
        listener->addrlen = len;
    }
}

static corral_listener *listener_new(corral_server *server,
                                     const struct corral_listen_options *options,
                                     const struct corral_conn_handler *handler, void *data)
{
    corral_listener *listener = calloc(1, sizeof(*listener));
    if (listener == NULL)
        return NULL;
    listener->server = server;
    listener->fd = -1;
    listener->handler = handler;
    listener->data = data;
    if (options != NULL)
        listener->options = *options;
    else
        corral_listen_options_init(&listener->options);
    return listener;
}

static void listener_add(corral_server *server, corral_listener *listener, corral_listener **out)
{
    listener->index = server->listener_count++;
    corral_listener **tail = &server->listeners;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = listener;
    if (out != NULL)
        *out = listener;
}

unsigned corral_server_sockets_per_listener(const corral_server *server)
{
    return server->wakeup->per_worker_sockets ? server->worker_count : 1;
}

int corral_server_listen(corral_server *server, const char *address,
                         const struct corral_listen_options *options,
                         const struct corral_conn_handler *handler, void *data,
                         corral_listener **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    int err;
    corral_listener *listener = listener_new(server, options, handler, data);
    if (listener == NULL)
        return -ENOMEM;
    listener->address_text = strdup(address);
    if (listener->address_text == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    err = corral_parse_address(address, &listener->addr, &listener->addrlen);
    if (err != 0) {
        corral__error("listen: bad address \"%s\"", address);
        goto fail;
    }

    if (corral_server_sockets_per_listener(server) > 1 && listener->addr.ss_family != AF_UNIX) {
        listener->fds = malloc(server->worker_count * sizeof(*listener->fds));
        if (listener->fds == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < server->worker_count; i++)
            listener->fds[i] = -1;
        /* The first socket fixes the port (an ephemeral one if 0) and,
         * bound alone, makes sure no one else listens there; the rest join
         * its reuseport group on that port. */
        for (unsigned i = 0; i < server->worker_count; i++) {
            int fd = corral__listen_socket(listener, i == 0 ? CORRAL__REUSEPORT_FIRST
                                                            : CORRAL__REUSEPORT_JOIN);
            if (fd < 0) {
                err = fd;
                goto fail;
            }
            listener->fds[i] = fd;
            if (i == 0) {
                listener->fd = fd;
                listener_read_bound_address(listener);
            }
        }
    } else {
        int fd = corral__listen_socket(listener, CORRAL__REUSEPORT_NONE);
        if (fd < 0) {
            err = fd;
            goto fail;
        }
        listener->fd = fd;
        listener->owns_path = listener->addr.ss_family == AF_UNIX;
        listener_read_bound_address(listener);
    }
    listener_add(server, listener, out);
    return 0;

fail:
    corral__listener_free(listener);
    return err;
}

static bool is_listening_stream(int fd)
{
    int listening = 0, type = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == -1 || !listening)
        return false;
    len = sizeof(int);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

/* Gives sockets passed in the backlog and TCP options the caller asks for
 * now: a reload may have changed them.  listen() again only resizes the
 * queue of a listening socket. */
static int apply_listen_options(const corral_listener *listener, unsigned count)
{
    for (unsigned i = 0; i < count; i++) {
        int fd = listener->fds != NULL ? listener->fds[i] : listener->fd;
        int err;
        if (listener->addr.ss_family != AF_UNIX &&
            (err = corral__set_accept_options(listener, fd)) != 0)
            return err;
        if (listen(fd, listener->options.backlog) == -1) {
            err = -errno;
            corral__error("listen(fd %d): %s", fd, strerror(errno));
            return err;
        }
    }
    return 0;
}

int corral_server_listen_fds(corral_server *server, const int *fds, unsigned count,
                             const struct corral_listen_options *options,
                             const struct corral_conn_handler *handler, void *data,
                             corral_listener **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    if (count == 0 || (count != 1 && count != corral_server_sockets_per_listener(server)))
        return -EINVAL;
    for (unsigned i = 0; i < count; i++)
        if (!is_listening_stream(fds[i]))
            return -EINVAL;
    int err;
    corral_listener *listener = listener_new(server, options, handler, data);
    if (listener == NULL)
        return -ENOMEM;
    if (count > 1) {
        /* corral__listener_free() and corral_listener_fds() count the group by
         * workers. */
        assert(count == server->worker_count);
        listener->fds = malloc(count * sizeof(*listener->fds));
        if (listener->fds == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < count; i++)
            listener->fds[i] = -1;
    }
    for (unsigned i = 0; i < count; i++) {
        int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (fd == -1) {
            err = -errno;
            corral__error("dup(listening socket %d): %s", fds[i], strerror(errno));
            goto fail;
        }
        if (listener->fds != NULL)
            listener->fds[i] = fd;
        if (i == 0)
            listener->fd = fd;
    }
    /* Accepted sockets must be non-blocking whatever the donor set. */
    int flags = fcntl(listener->fd, F_GETFL);
    for (unsigned i = 0; i < count; i++)
        fcntl(listener->fds != NULL ? listener->fds[i] : listener->fd, F_SETFL, flags | O_NONBLOCK);
    listener->addrlen = sizeof(listener->addr);
    if (getsockname(listener->fd, (struct sockaddr *)&listener->addr, &listener->addrlen) == -1) {
        err = -errno;
        goto fail;
    }
    if (options != NULL && (err = apply_listen_options(listener, count)) != 0)
        goto fail;
    char text[128];
    if (corral_listener_address(listener, text, sizeof(text)) != 0)
        snprintf(text, sizeof(text), "fd %d", fds[0]);
    listener->address_text = strdup(text);
    if (listener->address_text == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    listener_add(server, listener, out);
    return 0;

fail:
    corral__listener_free(listener);
    return err;
}

unsigned corral_listener_fds(corral_listener *listener, const int **fds)
{
    listener->owns_path = false; /* a successor serves the file now */
    if (listener->fds != NULL) {
        *fds = listener->fds;
        return listener->server->worker_count;
    }
    *fds = &listener->fd;
    return 1;
}
