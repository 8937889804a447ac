/*
 * conn.c: buffered non-blocking connections: epoll registration, end and
 * free, the plain transport, accessors.  Starting one is in conn_open.c, its
 * data path in conn_io.c, its timeouts in conn_timeout.c.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* --------------------------------------------------------- plain transport */

static ssize_t plain_read(corral_conn *conn, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = recv(conn->fd, buf, len, 0);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

/* Whether the output being written is the last before a FIN that the
 * flush sends once it is all out (conn_flush()): a half-close asked for,
 * or a close (shutdown(SHUT_WR) before lingering, or close() after the
 * peer's end).  Not a close_no_linger, whose close() resets instead when
 * input is left unread, and would drop the held bytes with it. */
static bool plain_fin_follows(const corral_conn *conn)
{
    if (conn->transport->shutdown == NULL)
        return false; /* no FIN would push the held bytes out */
    return (conn->shutdown_pending && !conn->shutdown_done) ||
           (conn->state == CORRAL__CONN_CLOSING && !conn->no_linger);
}

int corral__plain_send_flags(const corral_conn *conn)
{
    /* MSG_NOSIGNAL: a peer reset must be an error code, not SIGPIPE.
     * MSG_MORE before a FIN: the last partial segment waits for the
     * shutdown() that follows in the same flush, which sends it with the
     * FIN in one segment, a packet (and a wakeup of the peer) fewer. */
    return MSG_NOSIGNAL | (plain_fin_follows(conn) ? MSG_MORE : 0);
}

static ssize_t plain_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    int flags = corral__plain_send_flags(conn);
    for (;;) {
        /* One piece (most small responses) goes by send(), which copies
         * no msghdr and imports no iovec array from user memory. */
        ssize_t n = iovcnt == 1 ? send(conn->fd, iov[0].iov_base, iov[0].iov_len, flags)
                                : sendmsg(conn->fd, &msg, flags);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

static int plain_shutdown(corral_conn *conn)
{
    return shutdown(conn->fd, SHUT_WR) == -1 ? -errno : 0;
}

static bool plain_input_pending(const corral_conn *conn)
{
    char byte;
    return recv(conn->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

const struct corral_transport corral_plain_transport = {
    .name = "plain",
    .read = plain_read,
    .writev = plain_writev,
    .shutdown = plain_shutdown,
    .input_pending = plain_input_pending,
};

/* ------------------------------------------------------------- life cycle */

/* Sockets are registered once, edge-triggered for input and output, so
 * pausing, resuming and waiting for output cost no epoll_ctl. */
int corral__conn_register(corral_conn *conn)
{
    int err = corral__loop_watch(conn->loop, conn->fd, &conn->handle,
                                 EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    if (err == 0)
        conn->registered = true;
    return err;
}

/* Idle connections keep no buffers: they go back to the loop's pool. */
void corral__conn_drop_input(corral_conn *conn)
{
    corral__buffer_put(conn->loop, conn->in, conn->in_cap);
    conn->in = NULL;
    conn->in_len = conn->in_cap = 0;
}

void corral__conn_drop_output(corral_conn *conn)
{
    corral__buffer_put(conn->loop, conn->out, conn->out_cap);
    conn->out = NULL;
    conn->out_off = conn->out_len = conn->out_cap = 0;
}

/* Closes the socket now; on_close and the free follow at iteration end.
 * With `reset`, close() sends a RST instead of a FIN: a peer that reads to
 * the end of the stream (an HTTP/1.0 or close-delimited body) must see the
 * cut as an error, not as a complete stream.  No transport end-of-stream
 * (TLS close_notify) is ever sent from here, for the same reason. */
void corral__conn_end(corral_conn *conn, int error, bool reset)
{
    assert(corral__loop_owned(conn->loop));
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    assert(conn->fd >= 0);
    conn->state = CORRAL__CONN_CLOSED;
    conn->close_error = error;
    corral__splice_cancel(conn, error);
    corral_timer_stop(&conn->timer);
    if (conn->transport->destroy != NULL)
        conn->transport->destroy(conn);
    if (reset) {
        /* Not checked: a socket the kernel has already torn down has
         * nothing left to reset. */
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(conn->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
    }
    /* Out of the epoll set first, whoever else holds the socket (see
     * fd_share.c): an entry left there would report a freed connection. */
    corral__fd_share_close(conn->loop, conn->fd, conn->registered);
    conn->registered = false;
    conn->fd = -1;
    corral__conn_drop_input(conn);
    corral__conn_drop_output(conn);
    conn->closed_next = conn->loop->closed_list;
    conn->loop->closed_list = conn;
}

/* Ends a connection with `error`: any error resets (see corral__conn_end). */
void corral__conn_destroy(corral_conn *conn, int error)
{
    corral__conn_end(conn, error, error != 0);
}

/* Takes a connection off its loop's list and counters. */
static void conn_unlink(corral_conn *conn)
{
    corral_loop *loop = conn->loop;
    if (conn->all_prev != NULL)
        conn->all_prev->all_next = conn->all_next;
    else
        loop->all_conns = conn->all_next;
    if (conn->all_next != NULL)
        conn->all_next->all_prev = conn->all_prev;
    if (loop->worker != NULL) {
        if (conn->listener == NULL)
            corral__stat_add(&loop->worker->stats.connections_outgoing, -1);
        corral__stat_add(&loop->worker->stats.connections_active, -1);
        corral__worker_conn_closed(loop->worker);
    }
}

/* Undoes corral__conn_new() for a connection whose creation failed before
 * any callback saw it.  No on_close: the caller learns of the failure from
 * the result alone, and may already have freed what on_close would use. */
void corral__conn_free_unopened(corral_conn *conn)
{
    assert(conn->state == CORRAL__CONN_CONNECTING && !conn->registered && !conn->in_flush_list &&
           !conn->in_kick_list && !corral_timer_active(&conn->timer));
    close(conn->fd);
    corral__timer_deinit(&conn->timer);
    conn_unlink(conn);
    free(conn);
}

void corral__loop_free_closed(corral_loop *loop)
{
    corral_conn *conn = loop->closed_list, *keep = NULL;
    loop->closed_list = NULL;
    while (conn != NULL) {
        corral_conn *next = conn->closed_next;
        if (conn->in_flush_list || conn->in_kick_list || conn->splice_slot != 0 ||
            conn->detaching) {
            /* Still linked from a list processed next iteration, or from a
             * splice whose callback is still to run. */
            conn->closed_next = keep;
            keep = conn;
            conn = next;
            continue;
        }
        assert(conn->state == CORRAL__CONN_CLOSED && conn->fd == -1 && conn->in == NULL &&
               conn->out == NULL && !corral_timer_active(&conn->timer));
        if (conn->handler->on_close != NULL)
            conn->handler->on_close(conn, conn->close_error);
        corral__timer_deinit(&conn->timer);
        conn_unlink(conn);
        free(conn);
        conn = next;
    }
    /* on_close callbacks may have closed more connections. */
    while (keep != NULL) {
        corral_conn *next = keep->closed_next;
        keep->closed_next = loop->closed_list;
        loop->closed_list = keep;
        keep = next;
    }
}

void corral__loop_stop_conns(corral_loop *loop)
{
    for (corral_conn *conn = loop->all_conns; conn != NULL; conn = conn->all_next)
        if (conn->state != CORRAL__CONN_CLOSED && conn->handler->on_stop != NULL)
            conn->handler->on_stop(conn);
}

void corral__loop_abort_conns(corral_loop *loop)
{
    for (corral_conn *conn = loop->all_conns; conn != NULL; conn = conn->all_next)
        corral__conn_destroy(conn, -ECONNABORTED);
}

/* ------------------------------------------------ moving between workers */

/* A corral_conn_detach() waiting for the end of the loop's iteration. */
struct detach {
    corral_conn *conn;
    corral_conn_detached_cb cb;
    void *arg;
};

/* Takes `conn` off its loop: out of the epoll set, the timer heap, the
 * connection list and the worker's count. */
static void conn_leave_loop(corral_conn *conn)
{
    if (conn->registered)
        corral__loop_unwatch(conn->loop, conn->fd);
    conn->registered = false;
    corral__timer_deinit(&conn->timer);
    conn_unlink(conn);
    conn->all_prev = conn->all_next = NULL;
    conn->loop = NULL;
}

/* Deferred: the events of the iteration have all been handled, so none
 * can refer to the connection any more. */
static void conn_detach_now(void *arg)
{
    struct detach *detach = arg;
    corral_conn *conn = detach->conn;
    corral_loop *loop = conn->loop;
    bool running = atomic_load_explicit(&loop->running, memory_order_relaxed);
    bool open = conn->state == CORRAL__CONN_OPEN;
    bool listed = conn->in_kick_list || conn->in_flush_list;
    /* Kicked or given output meanwhile: the next iteration handles that. */
    if (open && running && listed && corral_loop_defer(loop, conn_detach_now, detach) == 0)
        return;
    conn->detaching = false;
    if (open && running && !listed && conn->splice_slot == 0) {
        conn_leave_loop(conn);
        detach->cb(conn, detach->arg);
    } else if (open) {
        corral__conn_kick(conn); /* it stays: read it again */
    } else if (!running) {
        corral__loop_free_closed(loop); /* corral_loop_free() kept it for this */
    }
    free(detach);
}

int corral_conn_detach(corral_conn *conn, corral_conn_detached_cb detached, void *arg)
{
    assert(corral__loop_owned(conn->loop));
    if (conn->state != CORRAL__CONN_OPEN || conn->listener == NULL || conn->loop->worker == NULL)
        return -EINVAL;
    /* Input read ahead for its event still to come (conn_io.c) is in this
     * process's memory, not in the socket a binary upgrade would pass on:
     * the event is handled here first. */
    if (conn->detaching || conn->splice_slot != 0 || conn->read_ahead)
        return -EBUSY;
    struct detach *detach = malloc(sizeof(*detach));
    if (detach == NULL)
        return -ENOMEM;
    *detach = (struct detach){conn, detached, arg};
    if (corral_loop_defer(conn->loop, conn_detach_now, detach) != 0) {
        free(detach);
        return -ENOMEM;
    }
    conn->detaching = true;
    return 0;
}

/* Frees a connection that belongs to no loop. */
static void conn_free_detached(corral_conn *conn, int error)
{
    assert(conn->state == CORRAL__CONN_OPEN);
    conn->loop = NULL;
    conn->state = CORRAL__CONN_CLOSED;
    if (conn->transport->destroy != NULL)
        conn->transport->destroy(conn);
    close(conn->fd);
    conn->fd = -1;
    /* Buffers come from malloc whichever pool they were in. */
    free(conn->in);
    free(conn->out);
    conn->in = conn->out = NULL;
    if (conn->handler->on_close != NULL)
        conn->handler->on_close(conn, error);
    free(conn);
}

size_t corral_conn_kept_input(const corral_conn *conn)
{
    /* With what was read ahead for its event still to come (conn_io.c). */
    return conn->in_len +
           (conn->read_ahead && conn->close_error > 0 ? (size_t)conn->close_error : 0);
}

void corral_conn_close_detached(corral_conn *conn, int error)
{
    conn_free_detached(conn, error);
}

/* The adopting worker's post: the connection joins its loop. */
static void conn_on_adopt(void *arg)
{
    corral_conn *conn = arg;
    corral_loop *loop = conn->loop;
    /* Posts still queued when a loop is freed run there, outside its run. */
    if (!atomic_load_explicit(&loop->running, memory_order_relaxed)) {
        conn_free_detached(conn, -ECANCELED);
        return;
    }
    assert(corral__loop_owned(loop));
    /* The timer takes the place of the post node, which is done with. */
    if (corral__timer_init(&conn->timer, loop, corral__conn_on_timer, conn) != 0) {
        conn_free_detached(conn, -ENOMEM);
        return;
    }
    conn->all_next = loop->all_conns;
    if (loop->all_conns != NULL)
        loop->all_conns->all_prev = conn;
    loop->all_conns = conn;
    corral__stat_add(&loop->worker->stats.connections_active, 1);
    /* What the socket holds is reported once it joins the epoll set; what
     * was read and kept is delivered by the kick. */
    conn->readable = conn->writable = true;
    int err = corral__conn_register(conn);
    if (err != 0) {
        corral__conn_destroy(conn, err);
        return;
    }
    corral__conn_kick(conn);
    corral__conn_update_timer(conn);
    if (loop->worker->stopping && conn->handler->on_stop != NULL)
        conn->handler->on_stop(conn);
}

void corral_conn_adopt(corral_worker *worker, corral_conn *conn, corral_listener *listener)
{
    assert(conn->loop == NULL && conn->state == CORRAL__CONN_OPEN);
    conn->listener = listener;
    conn->loop = worker->loop; /* read back by the post, which publishes it */
    conn->adopt_post = (struct corral__post){.cb = conn_on_adopt, .arg = conn, .embedded = true};
    corral__loop_post_node(worker->loop, &conn->adopt_post);
}

/* -------------------------------------------------------------- accessors */

void corral_conn_set_transport(corral_conn *conn, const struct corral_transport *ops, void *state)
{
    assert(CORRAL__RESERVED_CLEAR(ops->reserved)); /* from a later corral.h */
    conn->transport = ops;
    conn->transport_state = state;
}

void *corral_conn_transport_state(const corral_conn *conn)
{
    return conn->transport_state;
}

bool corral_conn_input_pending(const corral_conn *conn)
{
    if (conn->in_len > 0)
        return true; /* read, but not yet taken by on_data (a pipelined request) */
    if (conn->read_ahead && conn->close_error > 0)
        return true; /* read ahead for its event, still to come (conn_io.c) */
    if (conn->transport->input_pending != NULL)
        return conn->transport->input_pending(conn);
    return plain_input_pending(conn);
}

void corral_conn_set_data(corral_conn *conn, void *data)
{
    conn->data = data;
}

void *corral_conn_data(const corral_conn *conn)
{
    return conn->data;
}

void *corral_conn_listener_data(const corral_conn *conn)
{
    return conn->listener != NULL ? conn->listener->data : NULL;
}

int corral_conn_peer(const corral_conn *conn, struct sockaddr_storage *addr, socklen_t *len)
{
    if (conn->peer_len == 0)
        return -ENOTCONN;
    memcpy(addr, &conn->peer, conn->peer_len);
    *len = conn->peer_len;
    return 0;
}

int corral_conn_set_peer(corral_conn *conn, const struct sockaddr *addr, socklen_t len)
{
    socklen_t need = addr->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
                     : addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                   : 0;
    if (need == 0 || len < need)
        return -EINVAL;
    memcpy(&conn->peer, addr, need);
    conn->peer_len = need;
    return 0;
}

int corral_conn_fd(const corral_conn *conn)
{
    return conn->fd;
}

corral_loop *corral_conn_loop(const corral_conn *conn)
{
    return conn->loop;
}

corral_worker *corral_conn_worker(const corral_conn *conn)
{
    return conn->loop->worker;
}
