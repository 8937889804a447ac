/*
 * conn_open.c: how a connection starts: wrapping a socket, opening an
 * accepted one, connecting out.
 */
#include "internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int corral__conn_new(corral_loop *loop, int fd, const struct corral_conn_handler *handler,
                     void *data, corral_conn **out)
{
    assert(corral__loop_owned(loop));
    corral_conn *conn = calloc(1, sizeof(*conn));
    if (conn == NULL || corral__timer_init(&conn->timer, loop, corral__conn_on_timer, conn) != 0) {
        free(conn);
        close(fd);
        return -ENOMEM;
    }
    conn->handle.on_event = corral__conn_on_event;
    conn->fd = fd;
    conn->state = CORRAL__CONN_CONNECTING;
    conn->loop = loop;
    conn->handler = handler;
    conn->data = data;
    conn->transport = &corral_plain_transport;
    conn->high_watermark = CORRAL_HIGH_WATERMARK;
    conn->low_watermark = CORRAL_LOW_WATERMARK;
    conn->last_read = conn->last_write = loop->now;

    conn->all_next = loop->all_conns;
    if (loop->all_conns != NULL)
        loop->all_conns->all_prev = conn;
    loop->all_conns = conn;
    if (conn->loop->worker != NULL)
        corral__stat_add(&conn->loop->worker->stats.connections_active, 1);
    *out = conn;
    return 0;
}

/* An accepted socket is read at once and joins the epoll set only when it
 * has to wait: a client that sends its request right behind the handshake
 * and is answered in one write never costs an epoll_ctl, nor the removal
 * from the set at close. */
void corral__conn_open(corral_conn *conn)
{
    assert(conn->state == CORRAL__CONN_CONNECTING && conn->out_len == 0);
    conn->state = CORRAL__CONN_OPEN;
    conn->writable = true;
    conn->readable = true; /* tried this iteration, see corral__loop_kick */
    if (conn->handler->on_open != NULL)
        conn->handler->on_open(conn);
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    corral__conn_kick(conn);
    corral__conn_update_timer(conn);
}

corral_conn *corral__conn_open_accepted(corral_worker *worker, corral_listener *listener, int fd,
                                        const struct sockaddr_storage *peer, socklen_t peer_len)
{
    corral_conn *conn;
    if (corral__conn_new(worker->loop, fd, listener->handler, NULL, &conn) != 0) {
        corral__warn("worker %u: out of memory for a connection on %s; closed it", worker->index,
                     listener->address_text);
        return NULL;
    }
    corral__stat_add(&worker->stats.accepts, 1);
    conn->listener = listener;
    /* A peer has its listener's family; a unix socket's peer (most often
     * unnamed) is recorded as having no address. */
    if (peer_len <= sizeof(conn->peer) && listener->addr.ss_family != AF_UNIX) {
        memcpy(&conn->peer, peer, peer_len);
        conn->peer_len = peer_len;
    }
    corral_conn_set_watermarks(conn, listener->options.high_watermark,
                               listener->options.low_watermark);
    /* Before on_open, which may close it again (corral__steer_closed()). */
    if (worker->steer_slot != NULL && listener->fds != NULL) /* a steered socket */
        corral__steer_accepted(worker);
    corral__conn_open(conn);
    /* A stopping worker told its connections before this one came. */
    if (worker->stopping && conn->state == CORRAL__CONN_OPEN && conn->handler->on_stop != NULL)
        conn->handler->on_stop(conn);
    return conn;
}

int corral_connect(corral_loop *loop, const struct sockaddr *addr, socklen_t addrlen,
                   const struct corral_conn_handler *handler, void *data, corral_conn **out)
{
    if (!CORRAL__RESERVED_CLEAR(handler->reserved))
        return -EINVAL;
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    if (addr->sa_family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (connect(fd, addr, addrlen) == -1 && errno != EINPROGRESS) {
        int err = -errno;
        close(fd);
        return err;
    }
    corral_conn *conn;
    int err = corral__conn_new(loop, fd, handler, data, &conn);
    if (err != 0)
        return err;
    if (loop->worker != NULL) /* conn_unlink() takes it off: it has no listener */
        corral__stat_add(&loop->worker->stats.connections_outgoing, 1);
    /* Even an immediate success is completed by the first EPOLLOUT, so
     * on_open never runs before the caller has the pointer. */
    err = corral__conn_register(conn);
    if (err != 0) {
        corral__conn_free_unopened(conn);
        return err;
    }
    corral__conn_update_timer(conn);
    *out = conn;
    return 0;
}
