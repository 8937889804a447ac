/*
 * udp.c: UDP listens.  Each is one socket per worker in a SO_REUSEPORT
 * group, bound with the options its data path needs (pktinfo, TOS, GRO),
 * made from an address or taken over from a previous server, and watched
 * by its worker's loop from the server's start until its sockets are
 * released.  The data path itself is in udp_io.c.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define RECV_BATCH_DEFAULT   16
#define RECV_BATCH_MAX       256
#define MAX_DATAGRAM_DEFAULT 4096
#define MAX_DATAGRAM         65535

void corral_udp_options_init(struct corral_udp_options *options)
{
    *options = (struct corral_udp_options){
        .recv_batch = RECV_BATCH_DEFAULT,
        .max_datagram = MAX_DATAGRAM_DEFAULT,
        .gso = true,
    };
}

static bool udp_args_valid(const struct corral_udp_options *options,
                           const struct corral_udp_handler *handler)
{
    if (handler == NULL || handler->on_recv == NULL || !CORRAL__RESERVED_CLEAR(handler->reserved))
        return false;
    if (options == NULL)
        return true;
    return CORRAL__RESERVED_CLEAR(options->reserved) && options->recv_batch >= 1 &&
           options->recv_batch <= RECV_BATCH_MAX && options->max_datagram >= 1 &&
           options->max_datagram <= MAX_DATAGRAM && options->recv_buffer >= 0 &&
           options->send_buffer >= 0;
}

static int set_option(int fd, int level, int name, int value, const char *what, const char *address)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) == -1) {
        int err = -errno;
        corral__error("udp %s: setsockopt(%s): %s", address, what, strerror(errno));
        return err;
    }
    return 0;
}

/* What every socket of the listen gets, new or inherited: the ancillary
 * data the receive path reads, GRO, and the buffer sizes. */
static int udp_socket_options(const corral_udp *udp, int fd)
{
    const char *a = udp->address_text;
    int err;
    if (udp->addr.ss_family == AF_INET6) {
        if ((err = set_option(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO", a)) ||
            (err = set_option(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS", a)))
            return err;
    } else {
        if ((err = set_option(fd, IPPROTO_IP, IP_PKTINFO, 1, "IP_PKTINFO", a)) ||
            (err = set_option(fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS", a)))
            return err;
    }
    /* GRO is asked for, not required: without it datagrams arrive one by
     * one, which the receive path reads as well. */
    int gro = udp->options.gro && udp->server->caps.udp_gro;
    if (setsockopt(fd, IPPROTO_UDP, UDP_GRO, &gro, sizeof(gro)) == -1 && gro)
        corral__warn("udp %s: setsockopt(UDP_GRO): %s; reading without GRO", a, strerror(errno));
    if (udp->options.recv_buffer > 0 &&
        (err = set_option(fd, SOL_SOCKET, SO_RCVBUF, udp->options.recv_buffer, "SO_RCVBUF", a)))
        return err;
    if (udp->options.send_buffer > 0 &&
        (err = set_option(fd, SOL_SOCKET, SO_SNDBUF, udp->options.send_buffer, "SO_SNDBUF", a)))
        return err;
    return 0;
}

/* A new socket on the listen's address.  The first of a group is bound
 * without SO_REUSEPORT, so that an address someone else holds fails with
 * EADDRINUSE (a group of another process of this user would otherwise be
 * joined), then set, so that the rest can join. */
static int udp_socket_new(const corral_udp *udp, bool first)
{
    const struct sockaddr *addr = (const struct sockaddr *)&udp->addr;
    int fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        int err = -errno;
        corral__error("udp %s: socket: %s", udp->address_text, strerror(errno));
        return err;
    }
    int err = 0;
    if (!first)
        err = set_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT", udp->address_text);
    if (err == 0 && addr->sa_family == AF_INET6)
        err = set_option(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY", udp->address_text);
    if (err == 0 && bind(fd, addr, udp->addrlen) == -1) {
        err = -errno;
        corral__error("udp %s: bind: %s", udp->address_text, strerror(errno));
    }
    if (err == 0 && first)
        err = set_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT", udp->address_text);
    if (err == 0)
        err = udp_socket_options(udp, fd);
    if (err != 0) {
        close(fd);
        return err;
    }
    return fd;
}

static void udp_free(corral_udp *udp)
{
    corral__udp_steer_free(udp);
    unsigned workers = udp->server->worker_count;
    for (unsigned i = 0; udp->fds != NULL && i < workers; i++)
        if (udp->fds[i] != -1)
            close(udp->fds[i]);
    for (unsigned i = 0; udp->sockets != NULL && i < workers; i++) {
        corral_udp_socket *sock = &udp->sockets[i];
        free(sock->recv_msgs);
        free(sock->recv_iov);
        free(sock->recv_names);
        free(sock->recv_control);
        free(sock->recv_buffers);
        free(sock->recv_out);
        free(sock->send_msgs);
        free(sock->send_iov);
        free(sock->send_control);
        free(sock->send_ends);
    }
    free(udp->fds);
    free(udp->sockets);
    free(udp->address_text);
    free(udp);
}

static corral_udp *udp_new(corral_server *server, const struct corral_udp_options *options,
                           const struct corral_udp_handler *handler, void *data)
{
    corral_udp *udp = calloc(1, sizeof(*udp));
    if (udp == NULL)
        return NULL;
    udp->server = server;
    udp->handler = handler;
    udp->data = data;
    if (options != NULL)
        udp->options = *options;
    else
        corral_udp_options_init(&udp->options);
    atomic_init(&udp->gso, udp->options.gso && server->caps.udp_gso);
    atomic_init(&udp->gso_fallback_logged, false);
    udp->fds = malloc(server->worker_count * sizeof(*udp->fds));
    udp->sockets = calloc(server->worker_count, sizeof(*udp->sockets));
    if (udp->fds == NULL || udp->sockets == NULL) {
        udp_free(udp);
        return NULL;
    }
    for (unsigned i = 0; i < server->worker_count; i++)
        udp->fds[i] = udp->sockets[i].fd = -1; /* set at the start */
    return udp;
}

/* Attaches the steering program, records the bound address, logs what the
 * listen uses and adds it to the server. */
static int udp_finish(corral_udp *udp, corral_udp **out)
{
    /* A lone socket is in no reuseport group (the first is bound without
     * SO_REUSEPORT, and the group is made when a second joins), so the
     * kernel refuses a program for it, which it would not need. */
    if (udp->options.steer_cbpf != NULL && udp->server->worker_count > 1 &&
        setsockopt(udp->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, udp->options.steer_cbpf,
                   sizeof(*udp->options.steer_cbpf)) == -1) {
        int err = -errno;
        corral__error("udp %s: setsockopt(SO_ATTACH_REUSEPORT_CBPF): %s", udp->address_text,
                      strerror(errno));
        return err;
    }
    udp->steered_cbpf = udp->options.steer_cbpf != NULL;
    udp->options.steer_cbpf = NULL;
    udp->addrlen = sizeof(udp->addr);
    if (getsockname(udp->fds[0], (struct sockaddr *)&udp->addr, &udp->addrlen) == -1)
        return -errno;
    char text[128];
    if (corral_udp_address(udp, text, sizeof(text)) == 0) {
        char *copy = strdup(text);
        if (copy == NULL)
            return -ENOMEM;
        free(udp->address_text);
        udp->address_text = copy;
    }
    /* Replaces the classic program when it can. */
    corral__udp_steer_attach(udp, udp->options.steer_quic);
    udp->options.steer_quic = NULL;
    corral__info("udp %s: %u sockets, steered by %s%s%s, GSO %s, GRO %s", udp->address_text,
                 udp->server->worker_count, udp->steering,
                 udp->steer != NULL ? ", new connections " : "",
                 udp->steer != NULL ? udp->steering_initials : "",
                 atomic_load_explicit(&udp->gso, memory_order_relaxed) ? "on"
                 : udp->options.gso                                    ? "off (kernel)"
                                                                       : "off",
                 udp->options.gro ? (udp->server->caps.udp_gro ? "on" : "off (kernel)") : "off");
    corral_udp **tail = &udp->server->udps;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = udp;
    if (out != NULL)
        *out = udp;
    return 0;
}

int corral_server_listen_udp(corral_server *server, const char *address,
                             const struct corral_udp_options *options,
                             const struct corral_udp_handler *handler, void *data, corral_udp **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    if (!udp_args_valid(options, handler))
        return -EINVAL;
    corral_udp *udp = udp_new(server, options, handler, data);
    if (udp == NULL)
        return -ENOMEM;
    int err = -ENOMEM;
    udp->address_text = strdup(address);
    if (udp->address_text == NULL)
        goto fail;
    err = corral_parse_address(address, &udp->addr, &udp->addrlen);
    if (err == 0 && udp->addr.ss_family == AF_UNIX)
        err = -EINVAL;
    if (err != 0) {
        corral__error("udp: bad address \"%s\"", address);
        goto fail;
    }
    for (unsigned i = 0; i < server->worker_count; i++) {
        int fd = udp_socket_new(udp, i == 0);
        if (fd < 0) {
            err = fd;
            goto fail;
        }
        udp->fds[i] = fd;
        if (i == 0) { /* the rest join on the port it was given */
            udp->addrlen = sizeof(udp->addr);
            if (getsockname(fd, (struct sockaddr *)&udp->addr, &udp->addrlen) == -1) {
                err = -errno;
                goto fail;
            }
        }
    }
    if ((err = udp_finish(udp, out)) != 0)
        goto fail;
    return 0;

fail:
    udp_free(udp);
    return err;
}

static bool is_bound_udp(int fd)
{
    int type, protocol;
    socklen_t len = sizeof(type);
    struct sockaddr_storage addr = {0}; /* getsockname() may fill less */
    socklen_t addrlen = sizeof(addr);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 || type != SOCK_DGRAM)
        return false;
    len = sizeof(protocol);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == -1 || protocol != IPPROTO_UDP)
        return false;
    if (getsockname(fd, (struct sockaddr *)&addr, &addrlen) == -1)
        return false;
    if (addr.ss_family == AF_INET)
        return ((struct sockaddr_in *)&addr)->sin_port != 0;
    return addr.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&addr)->sin6_port != 0;
}

int corral_server_udp_fds(corral_server *server, const int *fds, unsigned count,
                          const struct corral_udp_options *options,
                          const struct corral_udp_handler *handler, void *data, corral_udp **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    if (count == 0 || !udp_args_valid(options, handler))
        return -EINVAL;
    for (unsigned i = 0; i < count; i++)
        if (!is_bound_udp(fds[i]))
            return -EINVAL;
    corral_udp *udp = udp_new(server, options, handler, data);
    if (udp == NULL)
        return -ENOMEM;
    int err = 0;
    udp->addrlen = sizeof(udp->addr);
    if (getsockname(fds[0], (struct sockaddr *)&udp->addr, &udp->addrlen) == -1) {
        err = -errno;
        goto fail;
    }
    char text[128];
    if (corral_udp_address(udp, text, sizeof(text)) != 0)
        snprintf(text, sizeof(text), "fd %d", fds[0]);
    if ((udp->address_text = strdup(text)) == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < server->worker_count; i++) {
        int fd;
        if (i < count) {
            fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
            if (fd == -1) {
                err = -errno;
                corral__error("udp %s: dup(%d): %s", text, fds[i], strerror(errno));
                goto fail;
            }
            udp->fds[i] = fd;
            int flags = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, flags | O_NONBLOCK);
            /* A socket that was alone joins a group only with the flag. */
            if ((err = set_option(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT", text)) != 0 ||
                (err = udp_socket_options(udp, fd)) != 0)
                goto fail;
        } else {
            fd = udp_socket_new(udp, false);
            if (fd < 0) {
                err = fd;
                goto fail;
            }
            udp->fds[i] = fd;
        }
    }
    if ((err = udp_finish(udp, out)) != 0)
        goto fail;
    return 0;

fail:
    udp_free(udp);
    return err;
}

unsigned corral_udp_fds(const corral_udp *udp, const int **fds)
{
    *fds = udp->fds;
    return udp->server->worker_count;
}

int corral_udp_address(const corral_udp *udp, char *buf, size_t len)
{
    return corral_format_address((const struct sockaddr *)&udp->addr, udp->addrlen, buf, len);
}

int corral_udp_port(const corral_udp *udp)
{
    if (udp->addr.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&udp->addr)->sin_port);
    if (udp->addr.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&udp->addr)->sin6_port);
    return 0;
}

corral_udp_socket *corral_udp_socket_of(corral_udp *udp, unsigned index)
{
    return index < udp->server->worker_count ? &udp->sockets[index] : NULL;
}

corral_udp *corral_udp_socket_udp(const corral_udp_socket *sock)
{
    return sock->udp;
}

void *corral_udp_data(const corral_udp_socket *sock)
{
    return sock->udp->data;
}

corral_worker *corral_udp_socket_worker(const corral_udp_socket *sock)
{
    return sock->worker;
}

int corral_udp_stats(const corral_udp *udp, unsigned index, struct corral_udp_stats *out)
{
    if (index >= udp->server->worker_count || udp->sockets[index].worker == NULL)
        return -EINVAL;
    const corral_udp_socket *sock = &udp->sockets[index];
    const struct corral__udp_stats *s = &sock->stats;
    *out = (struct corral_udp_stats){
        .received = corral__stat_read(&s->received),
        .received_bytes = corral__stat_read(&s->received_bytes),
        .recv_batches = corral__stat_read(&s->recv_batches),
        .truncated = corral__stat_read(&s->truncated),
        .sent = corral__stat_read(&s->sent),
        .sent_bytes = corral__stat_read(&s->sent_bytes),
        .send_calls = corral__stat_read(&s->send_calls),
        .send_full = corral__stat_read(&s->send_full),
        .send_errors = corral__stat_read(&s->send_errors),
        .gso_sends = corral__stat_read(&s->gso_sends),
        .gso_fallbacks = corral__stat_read(&s->gso_fallbacks),
        .gso = atomic_load_explicit(&udp->gso, memory_order_relaxed),
        .gro = sock->gro,
    };
    corral__udp_steer_stats(sock, &out->steered_new, &out->steered_owned);
    return 0;
}

/* ------------------------------------------------------- the server's life */

/* The buffers of one worker's socket: the receive batch and the send
 * table, so that no datagram allocates. */
static int udp_socket_alloc(corral_udp *udp, corral_udp_socket *sock)
{
    unsigned batch = udp->options.recv_batch;
    int gro = 0;
    socklen_t len = sizeof(gro);
    sock->gro =
        udp->options.gro && getsockopt(sock->fd, IPPROTO_UDP, UDP_GRO, &gro, &len) == 0 && gro != 0;
    /* A coalesced run is up to 64 KiB, whatever one datagram's bound. */
    sock->recv_size = sock->gro ? MAX_DATAGRAM : udp->options.max_datagram;
    sock->recv_msgs = calloc(batch, sizeof(*sock->recv_msgs));
    sock->recv_iov = calloc(batch, sizeof(*sock->recv_iov));
    sock->recv_names = calloc(batch, sizeof(*sock->recv_names));
    sock->recv_control = calloc(batch, sizeof(*sock->recv_control));
    sock->recv_buffers = malloc(batch * sock->recv_size);
    sock->recv_out = calloc(batch, sizeof(*sock->recv_out));
    sock->send_msgs = calloc(CORRAL__UDP_SEND_BATCH, sizeof(*sock->send_msgs));
    sock->send_iov = calloc(CORRAL__UDP_SEND_BATCH, sizeof(*sock->send_iov));
    sock->send_control = calloc(CORRAL__UDP_SEND_BATCH, sizeof(*sock->send_control));
    sock->send_ends = calloc(CORRAL__UDP_SEND_BATCH, sizeof(*sock->send_ends));
    if (sock->recv_msgs == NULL || sock->recv_iov == NULL || sock->recv_names == NULL ||
        sock->recv_control == NULL || sock->recv_buffers == NULL || sock->recv_out == NULL ||
        sock->send_msgs == NULL || sock->send_iov == NULL || sock->send_control == NULL ||
        sock->send_ends == NULL)
        return -ENOMEM;
    return 0;
}

int corral__udp_start(corral_server *server)
{
    for (corral_udp *udp = server->udps; udp != NULL; udp = udp->next) {
        for (unsigned i = 0; i < server->worker_count; i++) {
            corral_udp_socket *sock = &udp->sockets[i];
            corral_worker *worker = &server->workers[i];
            sock->handle.on_event = corral__udp_on_event;
            sock->udp = udp;
            sock->fd = udp->fds[i];
            /* A restart after a failed start keeps what it allocated. */
            int err = sock->recv_msgs != NULL ? 0 : udp_socket_alloc(udp, sock);
            if (err == 0)
                err = corral__loop_watch(worker->loop, sock->fd, &sock->handle, EPOLLIN);
            if (err != 0) {
                corral__error("udp %s: worker %u: %s", udp->address_text, i, strerror(-err));
                return err;
            }
            sock->worker = worker;
            sock->registered = true;
            sock->want_writable = false;
        }
    }
    return 0;
}

void corral__udp_detach(corral_worker *worker)
{
    for (corral_udp *udp = worker->server->udps; udp != NULL; udp = udp->next) {
        corral_udp_socket *sock = &udp->sockets[worker->index];
        if (sock->registered)
            corral__loop_unwatch(worker->loop, sock->fd);
        sock->registered = false;
    }
}

void corral__udp_stopped(corral_worker *worker)
{
    for (corral_udp *udp = worker->server->udps; udp != NULL; udp = udp->next)
        if (udp->handler->on_stop != NULL && udp->sockets[worker->index].worker != NULL)
            udp->handler->on_stop(&udp->sockets[worker->index]);
}

void corral__udp_stopping(corral_worker *worker)
{
    for (corral_udp *udp = worker->server->udps; udp != NULL; udp = udp->next)
        if (udp->handler->on_stopping != NULL && udp->sockets[worker->index].worker != NULL)
            udp->handler->on_stopping(&udp->sockets[worker->index]);
}

void corral__udp_free_all(corral_server *server)
{
    while (server->udps != NULL) {
        corral_udp *next = server->udps->next;
        udp_free(server->udps);
        server->udps = next;
    }
}
