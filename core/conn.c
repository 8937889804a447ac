/*
 * conn.c: buffered non-blocking connections.  Sockets are registered once,
 * edge-triggered for input and output, so pausing, resuming and waiting for
 * output cost no epoll_ctl.  An accepted socket is read at once and joins the
 * epoll set only when it has to wait: a client that sends its request right
 * behind the handshake and is answered in one write never costs an epoll_ctl,
 * nor the removal from the set at close.  Input is read into the loop's
 * scratch buffer and copied into the connection only when the application
 * leaves some of it unconsumed; output is queued and flushed after every
 * few events (see loop.c).
 */
#include "internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MIN_BUFFER 4096
/* Reads per wakeup before yielding to other connections (fairness). */
#define READS_PER_TURN 16

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

static ssize_t plain_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    for (;;) {
        /* MSG_NOSIGNAL: a peer reset must be an error code, not SIGPIPE. */
        ssize_t n = sendmsg(conn->fd, &msg, MSG_NOSIGNAL);
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

static void conn_on_event(struct corral__handle *handle, uint32_t epoll_events);
static void conn_on_timer(corral_timer *timer, void *arg);
static void conn_update_timer(corral_conn *conn);
static void conn_read(corral_conn *conn);
static void conn_destroy(corral_conn *conn, int error);
static bool conn_reading_active(const corral_conn *conn);
static void conn_kick(corral_conn *conn);
static void conn_free_unopened(corral_conn *conn);

int corral__conn_new(corral_loop *loop, int fd, const struct corral_conn_handler *handler,
                     void *data, corral_conn **out)
{
    assert(corral__loop_owned(loop));
    corral_conn *conn = calloc(1, sizeof(*conn));
    if (conn == NULL || corral__timer_init(&conn->timer, loop, conn_on_timer, conn) != 0) {
        free(conn);
        close(fd);
        return -ENOMEM;
    }
    conn->handle.on_event = conn_on_event;
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

static int conn_register(corral_conn *conn)
{
    int err = corral__loop_watch(conn->loop, conn->fd, &conn->handle,
                                 EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    if (err == 0)
        conn->registered = true;
    return err;
}

/* Registers a connection that is not in the epoll set yet once it waits for
 * input or output.  Adding a socket that is ready already reports it at
 * once, so nothing that arrived meanwhile is missed. */
static void conn_register_if_waiting(corral_conn *conn)
{
    if (conn->registered || conn->state == CORRAL__CONN_CLOSED)
        return;
    bool wants_input = conn->state == CORRAL__CONN_LINGERING || conn_reading_active(conn);
    bool waits = (wants_input && !conn->readable) || (conn->out_len > 0 && !conn->writable);
    if (!waits)
        return;
    int err = conn_register(conn);
    if (err != 0)
        conn_destroy(conn, err);
}

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
    conn_kick(conn);
    conn_update_timer(conn);
}

int corral_connect(corral_loop *loop, const struct sockaddr *addr, socklen_t addrlen,
                   const struct corral_conn_handler *handler, void *data, corral_conn **out)
{
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
    /* Even an immediate success is completed by the first EPOLLOUT, so
     * on_open never runs before the caller has the pointer. */
    err = conn_register(conn);
    if (err != 0) {
        conn_free_unopened(conn);
        return err;
    }
    conn_update_timer(conn);
    *out = conn;
    return 0;
}

/* Idle connections keep no buffers: they go back to the loop's pool. */
static void conn_drop_input(corral_conn *conn)
{
    corral__buffer_put(conn->loop, conn->in, conn->in_cap);
    conn->in = NULL;
    conn->in_len = conn->in_cap = 0;
}

static void conn_drop_output(corral_conn *conn)
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
static void conn_end(corral_conn *conn, int error, bool reset)
{
    assert(corral__loop_owned(conn->loop));
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    assert(conn->fd >= 0);
    conn->state = CORRAL__CONN_CLOSED;
    conn->close_error = error;
    corral_timer_stop(&conn->timer);
    if (conn->transport->destroy != NULL)
        conn->transport->destroy(conn);
    if (reset) {
        /* Not checked: a socket the kernel has already torn down has
         * nothing left to reset. */
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(conn->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
    }
    close(conn->fd); /* also removes it from the epoll set */
    conn->fd = -1;
    conn_drop_input(conn);
    conn_drop_output(conn);
    conn->closed_next = conn->loop->closed_list;
    conn->loop->closed_list = conn;
}

/* Ends a connection with `error`: any error resets (see conn_end). */
static void conn_destroy(corral_conn *conn, int error)
{
    conn_end(conn, error, error != 0);
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
        corral__stat_add(&loop->worker->stats.connections_active, -1);
        corral__worker_conn_closed(loop->worker);
    }
}

/* Undoes corral__conn_new() for a connection whose creation failed before
 * any callback saw it.  No on_close: the caller learns of the failure from
 * the result alone, and may already have freed what on_close would use. */
static void conn_free_unopened(corral_conn *conn)
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
        if (conn->in_flush_list || conn->in_kick_list) {
            /* Still linked from a list processed next iteration. */
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
        conn_destroy(conn, -ECONNABORTED);
}

/* ------------------------------------------------------------------ input */

static bool conn_reading_active(const corral_conn *conn)
{
    return (conn->state == CORRAL__CONN_OPEN || conn->state == CORRAL__CONN_CONNECTING) &&
           !conn->read_paused && !conn->over_high && !conn->eof &&
           conn->in_len < conn->high_watermark;
}

static void conn_kick(corral_conn *conn)
{
    assert(conn->state != CORRAL__CONN_CLOSED);
    if (conn->in_kick_list)
        return;
    conn->in_kick_list = true;
    conn->kick_next = conn->loop->kick_list;
    conn->loop->kick_list = conn;
}

/* Keeps `len` unconsumed bytes at `data` (outside conn->in) for next time. */
static int conn_keep_input(corral_conn *conn, const char *data, size_t len)
{
    conn->in = corral__buffer_get(conn->loop, len, &conn->in_cap);
    if (conn->in == NULL)
        return -ENOMEM;
    memcpy(conn->in, data, len);
    conn->in_len = len;
    return 0;
}

/* Hands all unconsumed input to on_data and keeps what it leaves. */
static void conn_deliver(corral_conn *conn, const char *data, size_t len)
{
    size_t consumed = conn->handler->on_data(conn, data, len);
    if (conn->state != CORRAL__CONN_OPEN) {
        conn_drop_input(conn); /* closing: whatever is left will never be read */
        return;
    }
    if (consumed > len)
        consumed = len;
    size_t left = len - consumed;
    if (data != conn->in) {
        if (left > 0 && conn_keep_input(conn, data + consumed, left) != 0)
            conn_destroy(conn, -ENOMEM);
        return;
    }
    assert(conn->in_len == len && len <= conn->in_cap);
    if (left == 0) {
        conn_drop_input(conn);
    } else if (consumed > 0) {
        memmove(conn->in, conn->in + consumed, left);
        conn->in_len = (uint32_t)left;
    }
}

static void conn_on_eof(corral_conn *conn)
{
    conn->eof = true;
    conn->readable = false;
    if (conn->state == CORRAL__CONN_LINGERING) {
        conn_destroy(conn, 0);
        return;
    }
    if (conn->state != CORRAL__CONN_OPEN)
        return;
    if (conn->handler->on_eof != NULL)
        conn->handler->on_eof(conn);
    else
        corral_conn_close(conn);
    if (conn->state == CORRAL__CONN_OPEN)
        conn_update_timer(conn);
}

/* While lingering, input is read and dropped until EOF. */
static void conn_discard_input(corral_conn *conn)
{
    while (conn->readable && conn->state == CORRAL__CONN_LINGERING) {
        ssize_t n = conn->transport->read(conn, conn->loop->scratch, conn->loop->scratch_size);
        if (n == -EAGAIN)
            conn->readable = false;
        else if (n <= 0)
            conn_destroy(conn, 0);
    }
}

static void conn_read_input(corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_LINGERING) {
        conn_discard_input(conn);
        return;
    }
    for (int turn = 0; conn->readable && conn_reading_active(conn); turn++) {
        if (turn == READS_PER_TURN) {
            conn_kick(conn);
            return;
        }
        char *buf;
        size_t space;
        if (conn->in_len == 0) {
            buf = conn->loop->scratch;
            space = conn->loop->scratch_size;
        } else {
            if (conn->in_cap - conn->in_len < MIN_BUFFER) {
                char *grown = corral__buffer_grow(conn->loop, conn->in, conn->in_len, &conn->in_cap,
                                                  conn->in_cap + MIN_BUFFER);
                if (grown == NULL) {
                    conn_destroy(conn, -ENOMEM);
                    return;
                }
                conn->in = grown;
            }
            assert(conn->in_len < conn->in_cap);
            buf = conn->in + conn->in_len;
            space = conn->in_cap - conn->in_len;
        }

        ssize_t n = conn->transport->read(conn, buf, space);
        if (n == -EAGAIN) {
            conn->readable = false;
            return;
        }
        if (n < 0) {
            conn_destroy(conn, (int)n);
            return;
        }
        if (n == 0) {
            conn_on_eof(conn);
            return;
        }
        conn->last_read = conn->loop->now;
        /* A short plain read drained the socket: the next edge will tell
         * when more arrives, so skip the read that would say EAGAIN.  Not
         * when the peer's FIN came with that edge (no new edge would report
         * it), and not for a layered transport, which may hold bytes back. */
        if ((size_t)n < space && !conn->transport->layered && !conn->peer_hup)
            conn->readable = false;
        if (buf == conn->loop->scratch) {
            conn_deliver(conn, buf, (size_t)n);
        } else {
            conn->in_len += (size_t)n;
            conn_deliver(conn, conn->in, conn->in_len);
        }
    }
}

static void conn_read(corral_conn *conn)
{
    conn_read_input(conn);
    conn_register_if_waiting(conn);
}

/* Runs connections that have input to pick up again (resumed, or yielded
 * after their turn).  Kicks made meanwhile wait for the next iteration. */
void corral__loop_kick(corral_loop *loop)
{
    corral_conn *conn = loop->kick_list;
    loop->kick_list = NULL;
    while (conn != NULL) {
        corral_conn *next = conn->kick_next;
        conn->in_kick_list = false;
        if (conn->state == CORRAL__CONN_OPEN && conn->in_len > 0 && conn_reading_active(conn))
            conn_deliver(conn, conn->in, conn->in_len);
        if (conn->state != CORRAL__CONN_CLOSED)
            conn_read(conn);
        if (conn->state == CORRAL__CONN_OPEN)
            conn_update_timer(conn);
        conn = next;
    }
}

/* ----------------------------------------------------------------- output */

static void conn_start_linger(corral_conn *conn)
{
    assert(conn->state == CORRAL__CONN_CLOSING && conn->out_len == 0);
    if (conn->eof || conn->no_linger) {
        /* No waiting for the peer, but a transport's own end of stream (a
         * TLS close_notify) still goes out; a plain FIN goes with close(). */
        if (!conn->shutdown_done && conn->transport->layered && conn->transport->shutdown != NULL)
            conn->transport->shutdown(conn);
        conn_destroy(conn, 0);
        return;
    }
    if (!conn->shutdown_done) {
        conn->shutdown_done = true;
        if (conn->transport->shutdown != NULL && conn->transport->shutdown(conn) != 0) {
            conn_destroy(conn, 0);
            return;
        }
    }
    conn->state = CORRAL__CONN_LINGERING;
    conn->linger_deadline = conn->loop->now + CORRAL__LINGER_MS;
    conn->readable = true;
    conn_kick(conn);
    conn_update_timer(conn);
}

static void conn_flush(corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_CONNECTING || conn->state >= CORRAL__CONN_LINGERING)
        return;
    assert(conn->out_off + conn->out_len <= conn->out_cap);
    while (conn->out_len > 0 && conn->writable) {
        struct iovec iov = {.iov_base = conn->out + conn->out_off, .iov_len = conn->out_len};
        ssize_t n = conn->transport->writev(conn, &iov, 1);
        if (n == -EAGAIN) {
            conn->writable = false;
            conn_register_if_waiting(conn);
            if (conn->state == CORRAL__CONN_CLOSED)
                return;
            break;
        }
        if (n < 0) {
            conn_destroy(conn, (int)n);
            return;
        }
        assert((size_t)n <= conn->out_len); /* a transport sends no more than asked */
        conn->out_off += (uint32_t)n;
        conn->out_len -= (uint32_t)n;
        conn->last_write = conn->loop->now;
    }
    if (conn->out_len == 0)
        conn_drop_output(conn);
    if (conn->over_high && conn->out_len <= conn->low_watermark) {
        conn->over_high = false;
        if (conn->handler->on_drain != NULL)
            conn->handler->on_drain(conn);
        if (conn->state == CORRAL__CONN_OPEN)
            conn_kick(conn);
    }
    if (conn->out_len > 0 || conn->state == CORRAL__CONN_CLOSED)
        return;
    if (conn->state == CORRAL__CONN_CLOSING) {
        conn_start_linger(conn);
    } else if (conn->shutdown_pending && !conn->shutdown_done) {
        conn->shutdown_done = true;
        if (conn->transport->shutdown != NULL && conn->transport->shutdown(conn) != 0)
            conn_destroy(conn, 0);
    }
}

static void conn_schedule_flush(corral_conn *conn)
{
    assert(conn->state != CORRAL__CONN_CLOSED);
    if (conn->in_flush_list)
        return;
    conn->in_flush_list = true;
    conn->flush_next = conn->loop->flush_list;
    conn->loop->flush_list = conn;
}

void corral__loop_flush(corral_loop *loop)
{
    corral_conn *conn = loop->flush_list;
    loop->flush_list = NULL;
    while (conn != NULL) {
        corral_conn *next = conn->flush_next;
        conn->in_flush_list = false;
        conn_flush(conn);
        if (conn->state != CORRAL__CONN_CLOSED)
            conn_update_timer(conn);
        conn = next;
    }
}

void corral_conn_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    assert(corral__loop_owned(conn->loop));
    /* Closing or half-closed: nothing more can go out.  The application
     * learns of the end from on_close, as for a peer that went away. */
    if (conn->state != CORRAL__CONN_OPEN && conn->state != CORRAL__CONN_CONNECTING)
        return;
    if (conn->shutdown_pending)
        return;
    /* Summed against the limit one length at a time, so that lengths whose
     * sum wraps around cannot pass for a small write. */
    size_t room = CORRAL__BUFFER_MAX - conn->out_len, total = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > room - total) {
            conn_destroy(conn, -ENOBUFS);
            return;
        }
        total += iov[i].iov_len;
    }
    if (total == 0)
        return;

    if (conn->out_off + conn->out_len + total > conn->out_cap) {
        if (conn->out_off > 0) {
            memmove(conn->out, conn->out + conn->out_off, conn->out_len);
            conn->out_off = 0;
        }
        char *grown = conn->out == NULL
                          ? corral__buffer_get(conn->loop, total, &conn->out_cap)
                          : corral__buffer_grow(conn->loop, conn->out, conn->out_len,
                                                &conn->out_cap, conn->out_len + total);
        if (grown == NULL) {
            conn_destroy(conn, -ENOMEM);
            return;
        }
        conn->out = grown;
    }
    if (conn->out_len == 0)
        conn->last_write = conn->loop->now; /* the write timeout counts from here */
    char *dst = conn->out + conn->out_off + conn->out_len;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(dst, iov[i].iov_base, iov[i].iov_len);
        dst += iov[i].iov_len;
    }
    conn->out_len += (uint32_t)total;
    assert(conn->out_off + conn->out_len <= conn->out_cap);
    if (conn->out_len > conn->high_watermark)
        conn->over_high = true;
    conn_schedule_flush(conn);
}

void corral_conn_write(corral_conn *conn, const void *data, size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    corral_conn_writev(conn, &iov, 1);
}

size_t corral_conn_pending_output(const corral_conn *conn)
{
    return conn->out_len;
}

void corral_conn_shutdown(corral_conn *conn)
{
    if (conn->state != CORRAL__CONN_OPEN || conn->shutdown_pending)
        return;
    conn->shutdown_pending = true;
    conn_schedule_flush(conn);
}

void corral_conn_close(corral_conn *conn)
{
    assert(corral__loop_owned(conn->loop));
    if (conn->state != CORRAL__CONN_OPEN && conn->state != CORRAL__CONN_CONNECTING) {
        return;
    }
    if (conn->state == CORRAL__CONN_CONNECTING) {
        conn_destroy(conn, 0);
        return;
    }
    conn->state = CORRAL__CONN_CLOSING;
    conn_schedule_flush(conn);
}

void corral_conn_close_no_linger(corral_conn *conn)
{
    conn->no_linger = true;
    corral_conn_close(conn);
}

void corral_conn_abort(corral_conn *conn, int error)
{
    conn_destroy(conn, error);
}

void corral_conn_pause_read(corral_conn *conn)
{
    conn->read_paused = true;
}

void corral_conn_resume_read(corral_conn *conn)
{
    if (!conn->read_paused)
        return;
    conn->read_paused = false;
    if (conn->state == CORRAL__CONN_OPEN)
        conn_kick(conn);
}

/* --------------------------------------------------------------- timeouts */

/* When the read, write or linger timeout would end the connection. */
static uint64_t conn_timeout_deadline(const corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_LINGERING)
        return conn->linger_deadline;
    uint64_t deadline = UINT64_MAX;
    if (conn->read_timeout_ms > 0 && conn_reading_active(conn))
        deadline = conn->last_read + conn->read_timeout_ms;
    if (conn->write_timeout_ms > 0 && conn->out_len > 0 &&
        conn->last_write + conn->write_timeout_ms < deadline)
        deadline = conn->last_write + conn->write_timeout_ms;
    return deadline;
}

static uint64_t conn_deadline(const corral_conn *conn)
{
    uint64_t deadline = conn_timeout_deadline(conn);
    if (conn->app_deadline != 0 && conn->app_deadline < deadline &&
        conn->state == CORRAL__CONN_OPEN)
        deadline = conn->app_deadline;
    return deadline;
}

/* Activity only moves timestamps; the one timer fires at the earliest
 * possible deadline and re-arms itself if activity pushed it back. */
static void conn_update_timer(corral_conn *conn)
{
    uint64_t deadline = conn_deadline(conn);
    if (deadline == UINT64_MAX) {
        corral_timer_stop(&conn->timer);
        return;
    }
    if (corral_timer_active(&conn->timer) && conn->timer.deadline <= deadline)
        return;
    uint64_t now = conn->loop->now;
    corral_timer_start(&conn->timer, deadline > now ? deadline - now : 0);
}

static void conn_on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    corral_conn *conn = arg;
    uint64_t now = conn->loop->now;
    if (conn->app_deadline != 0 && conn->app_deadline <= now && conn->state == CORRAL__CONN_OPEN) {
        conn->app_deadline = 0;
        if (conn->handler->on_deadline != NULL)
            conn->handler->on_deadline(conn);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (conn_timeout_deadline(conn) <= now) {
        /* A read timeout with nothing queued cuts nothing off, so it ends
         * with a FIN; with output dropped (the write timeout) it resets. */
        if (conn->state == CORRAL__CONN_LINGERING)
            conn_destroy(conn, 0);
        else
            conn_end(conn, -ETIMEDOUT, conn->out_len > 0);
        return;
    }
    conn_update_timer(conn);
}

void corral_conn_set_timeouts(corral_conn *conn, uint32_t read_ms, uint32_t write_ms)
{
    conn->read_timeout_ms = read_ms;
    conn->write_timeout_ms = write_ms;
    conn->last_read = conn->loop->now;
    if (conn->state != CORRAL__CONN_CLOSED)
        conn_update_timer(conn);
}

void corral_conn_set_deadline(corral_conn *conn, uint64_t at_ms)
{
    conn->app_deadline = at_ms;
    if (conn->state != CORRAL__CONN_CLOSED)
        conn_update_timer(conn);
}

void corral_conn_set_watermarks(corral_conn *conn, size_t high, size_t low)
{
    if (high > CORRAL__BUFFER_MAX / 2)
        high = CORRAL__BUFFER_MAX / 2; /* input may run a read past it */
    conn->high_watermark = (uint32_t)high;
    conn->low_watermark = (uint32_t)(low < high ? low : high);
}

bool corral_conn_backed_up(const corral_conn *conn)
{
    return conn->over_high;
}

/* ----------------------------------------------------------------- events */

static void conn_on_connected(corral_conn *conn)
{
    assert(conn->state == CORRAL__CONN_CONNECTING);
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &error, &len) == -1)
        error = errno;
    if (error != 0) {
        conn_destroy(conn, -error);
        return;
    }
    conn->state = CORRAL__CONN_OPEN;
    conn->last_read = conn->loop->now;
    if (conn->handler->on_open != NULL)
        conn->handler->on_open(conn);
    if (conn->out_len > 0)
        conn_schedule_flush(conn);
}

static void conn_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    corral_conn *conn = (corral_conn *)handle;
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    if (epoll_events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        conn->writable = true;
    if (conn->state == CORRAL__CONN_CONNECTING) {
        if (!(epoll_events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        conn_on_connected(conn);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (epoll_events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        conn->readable = true;
    /* A transport that writes while reading (a TLS handshake) may have
     * stopped reading for want of socket space. */
    if ((epoll_events & EPOLLOUT) && conn->transport->layered)
        conn->readable = true;
    if (epoll_events & (EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        conn->peer_hup = true;
    if (conn->out_len > 0 && conn->writable)
        conn_flush(conn);
    if (conn->state != CORRAL__CONN_CLOSED && conn->readable)
        conn_read(conn);
    if (conn->state != CORRAL__CONN_CLOSED)
        conn_update_timer(conn);
}

/* -------------------------------------------------------------- accessors */

void corral_conn_set_transport(corral_conn *conn, const struct corral_transport *ops, void *state)
{
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
