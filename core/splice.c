/*
 * splice.c: moving bytes from one connection's socket to another's inside
 * the kernel, through a pipe from the loop's pool, driven by both sockets'
 * readiness events; and from a file to a connection's socket with
 * sendfile(2), driven by the socket's, with the same links, end and
 * callback.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

/* The pipe's size: the default high watermark, so that a pipe the
 * destination does not drain holds no more than its output buffer would.
 * A system that refuses it (pipe-user-pages-soft) leaves the default. */
#define PIPE_SIZE (256 * 1024)
/* Rounds of moving per wakeup before yielding to other connections. */
#define ROUNDS_PER_TURN 16

/* ------------------------------------------------------------------ pipes */

static int pipe_take(corral_loop *loop, int fds[2], uint32_t *size)
{
    if (loop->pipe_count > 0) {
        loop->pipe_count--;
        fds[0] = loop->pipes[loop->pipe_count][0];
        fds[1] = loop->pipes[loop->pipe_count][1];
    } else {
        if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
            int err = -errno;
            corral__warn("pipe2: %s", strerror(errno));
            return err;
        }
        (void)fcntl(fds[1], F_SETPIPE_SZ, PIPE_SIZE); /* best effort, see PIPE_SIZE */
    }
    int got = fcntl(fds[1], F_GETPIPE_SZ);
    *size = got > 0 ? (uint32_t)got : 4096;
    return 0;
}

/* An empty pipe goes back to the pool; one with bytes in it is closed, so
 * that they never reach another splice. */
static void pipe_release(corral_loop *loop, int fds[2], bool empty)
{
    if (fds[0] < 0)
        return;
    if (empty && loop->pipe_count < CORRAL__PIPE_POOL) {
        loop->pipes[loop->pipe_count][0] = fds[0];
        loop->pipes[loop->pipe_count][1] = fds[1];
        loop->pipe_count++;
    } else {
        close(fds[0]);
        close(fds[1]);
    }
    fds[0] = fds[1] = -1;
}

void corral__loop_free_pipes(corral_loop *loop)
{
    while (loop->pipe_count > 0) {
        loop->pipe_count--;
        close(loop->pipes[loop->pipe_count][0]);
        close(loop->pipes[loop->pipe_count][1]);
    }
    free(loop->splice_links);
    loop->splice_links = NULL;
}

/* ------------------------------------------------------------------ links */

static struct corral__splice_link *conn_link(const corral_conn *conn)
{
    if (conn->splice_slot == 0)
        return NULL;
    return &conn->loop->splice_links[conn->splice_slot - 1];
}

/* The connection's link, taking a free one of `loop`'s if it has none. */
static struct corral__splice_link *conn_link_take(corral_loop *loop, corral_conn *conn)
{
    struct corral__splice_link *links = loop->splice_links;
    assert(links != NULL && conn->loop == loop);
    if (conn->splice_slot != 0)
        return &links[conn->splice_slot - 1];
    /* Two connections per splice at most, so one is free; a scan at the
     * start of a splice costs nothing beside its system calls. */
    size_t i = 0;
    while (links[i].as_from != NULL || links[i].as_to != NULL) {
        i++;
        assert(i < CORRAL__SPLICES_MAX * 2);
    }
    conn->splice_slot = (uint16_t)(i + 1);
    return &links[i];
}

static void conn_link_drop(corral_conn *conn)
{
    struct corral__splice_link *link = conn_link(conn);
    if (link != NULL && link->as_from == NULL && link->as_to == NULL)
        conn->splice_slot = 0;
}

static size_t pipe_bytes(const struct corral__splice *sp)
{
    return (size_t)(sp->moved_in - sp->moved_out);
}

size_t corral__splice_pending(const corral_conn *conn)
{
    if (!conn->splicing_to)
        return 0;
    const struct corral__splice *sp = conn_link(conn)->as_to;
    if (sp->done)
        return 0;
    if (sp->from == NULL) { /* the rest of the file waits for the socket */
        uint64_t left = sp->max - sp->moved_out;
        return left < SIZE_MAX ? (size_t)left : SIZE_MAX;
    }
    return pipe_bytes(sp);
}

bool corral__splice_waits_for_input(const corral_conn *conn)
{
    if (!conn->splicing_from)
        return false;
    const struct corral__splice *sp = conn_link(conn)->as_from;
    return !sp->done && !sp->from_eof && pipe_bytes(sp) == 0;
}

/* ---------------------------------------------------------------- the end */

/* Ends the splice: the pipe goes, the callback runs at the iteration's
 * end.  Until then the connections stay linked, so `from` is not read. */
static void splice_finish(struct corral__splice *sp, int error)
{
    if (sp->done)
        return;
    sp->done = true;
    sp->error = error;
    pipe_release(sp->loop, sp->pipe, pipe_bytes(sp) == 0);
    sp->done_next = sp->loop->splices_done;
    sp->loop->splices_done = sp;
}

void corral__splice_cancel(corral_conn *conn, int error)
{
    struct corral__splice_link *link = conn_link(conn);
    if (link == NULL)
        return;
    if (link->as_from != NULL)
        splice_finish(link->as_from, error != 0 ? error : -ECANCELED);
    if (link->as_to != NULL)
        splice_finish(link->as_to, error != 0 ? error : -ECANCELED);
}

void corral__splice_cancel_to(corral_conn *conn, int error)
{
    struct corral__splice_link *link = conn_link(conn);
    if (link != NULL && link->as_to != NULL)
        splice_finish(link->as_to, error != 0 ? error : -ECANCELED);
}

void corral__loop_splices_done(corral_loop *loop)
{
    /* Callbacks may start splices that end at once: those wait for the
     * next pass. */
    struct corral__splice *sp = loop->splices_done;
    loop->splices_done = NULL;
    while (sp != NULL) {
        struct corral__splice *next = sp->done_next;
        corral_conn *from = sp->from, *to = sp->to;
        if (from != NULL) {
            conn_link(from)->as_from = NULL;
            from->splicing_from = false;
            conn_link_drop(from);
        }
        conn_link(to)->as_to = NULL;
        to->splicing_to = false;
        conn_link_drop(to);
        loop->splices_active--;
        uint64_t moved = sp->moved_out;
        int error = sp->error;
        corral_splice_cb cb = sp->cb;
        void *arg = sp->arg;
        free(sp);
        cb(from, to, moved, error, arg);
        /* `from` is read as usual again; its end of stream, if the splice
         * met it, is read again too. */
        if (from != NULL && from->state == CORRAL__CONN_OPEN && !from->splicing_from) {
            from->readable = true;
            corral__conn_kick(from);
        }
        if (to->state == CORRAL__CONN_OPEN)
            corral__conn_update_timer(to);
        sp = next;
    }
}

/* ------------------------------------------------------------------ moves */

/* Pipe to `to`: only once `to`'s queued output is out, which goes first. */
static ssize_t splice_out(struct corral__splice *sp)
{
    corral_conn *to = sp->to;
    if (pipe_bytes(sp) == 0 || to->out_len > 0 || !to->writable)
        return 0;
    for (;;) {
        ssize_t n = splice(sp->pipe[0], NULL, to->fd, NULL, pipe_bytes(sp),
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            sp->moved_out += (uint64_t)n;
            corral__stat_bytes(to, true, (size_t)n);
            to->last_write = to->loop->now;
            return n;
        }
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1 && errno == EAGAIN) {
            to->writable = false;
            return 0;
        }
        int err = n == 0 ? -EPIPE : -errno;
        splice_finish(sp, err);
        corral__conn_destroy(to, err);
        return err;
    }
}

/* `from` to the pipe, as far as the pipe and `to`'s watermark allow. */
static ssize_t splice_in(struct corral__splice *sp)
{
    corral_conn *from = sp->from;
    size_t limit = sp->pipe_size < sp->to->high_watermark ? sp->pipe_size : sp->to->high_watermark;
    if (limit == 0)
        limit = 1;
    if (sp->from_eof || !from->readable || sp->moved_in == sp->max || pipe_bytes(sp) >= limit)
        return 0;
    size_t want = limit - pipe_bytes(sp);
    if (want > sp->max - sp->moved_in)
        want = (size_t)(sp->max - sp->moved_in);
    for (;;) {
        ssize_t n =
            splice(from->fd, NULL, sp->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0 && pipe_bytes(sp) == 0 && sp->to->out_len == 0)
            sp->to->last_write = from->loop->now; /* its write timeout counts from here */
        if (n > 0) {
            sp->moved_in += (uint64_t)n;
            corral__stat_bytes(from, false, (size_t)n);
            from->last_read = from->loop->now;
            return n;
        }
        if (n == 0) {
            sp->from_eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            /* Either the socket is drained or the pipe is out of slots
             * (small segments fill them before its bytes): only the first
             * is waited for on `from`; the second is retried once the pipe
             * drains. */
            if (pipe_bytes(sp) == 0)
                from->readable = false;
            return 0;
        }
        int err = -errno;
        splice_finish(sp, err);
        corral__conn_destroy(from, err);
        return err;
    }
}

static void splice_pump(struct corral__splice *sp)
{
    corral_conn *from = sp->from, *to = sp->to;
    for (int round = 0; !sp->done; round++) {
        if (round == ROUNDS_PER_TURN) {
            corral__conn_kick(from); /* the rest next iteration */
            break;
        }
        ssize_t out = splice_out(sp);
        if (sp->done)
            break;
        ssize_t in = splice_in(sp);
        if (sp->done)
            break;
        if (pipe_bytes(sp) == 0 && (sp->moved_in == sp->max || sp->from_eof)) {
            splice_finish(sp, 0);
            break;
        }
        if (out <= 0 && in <= 0)
            break;
    }
    if (from->state == CORRAL__CONN_OPEN) {
        corral__conn_register_if_waiting(from);
        if (from->state == CORRAL__CONN_OPEN)
            corral__conn_update_timer(from);
    }
    if (to->state == CORRAL__CONN_OPEN) {
        corral__conn_register_if_waiting(to);
        if (to->state == CORRAL__CONN_OPEN)
            corral__conn_update_timer(to);
    }
}

/* ------------------------------------------------------------- files */

/* The most one sendfile(2) is asked for: what a socket's buffer may take
 * at once, so that a round returns to the loop often. */
#define SENDFILE_CHUNK (1024 * 1024)

/* Sends `to`'s queued output (a response head, a chunk's size line)
 * with MSG_MORE, so that it leaves in the first segment of the file that
 * follows rather than alone in a segment of its own, as nginx's
 * tcp_nopush does with TCP_CORK: a lone head ahead of a large file cost
 * its client a quarter of its requests per second.  Returns 0, or what
 * the failed send says (-EAGAIN: the socket is full). */
static int head_out(corral_conn *to)
{
    while (to->out_len > 0) {
        ssize_t n = send(to->fd, to->out + to->out_off, to->out_len, MSG_NOSIGNAL | MSG_MORE);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return errno == EAGAIN ? -EAGAIN : -errno;
        corral__stat_bytes(to, true, (size_t)n);
        to->out_off += (uint32_t)n;
        to->out_len -= (uint32_t)n;
        to->last_write = to->loop->now;
    }
    corral__conn_drop_output(to);
    return 0;
}

/* File to `to`, behind `to`'s queued output, which goes first. */
static ssize_t file_out(struct corral__splice *sp)
{
    corral_conn *to = sp->to;
    if (!to->writable || sp->moved_out == sp->max || to->over_high)
        return 0; /* over its watermark, conn_flush() sends and tells */
    if (to->out_len > 0) {
        int err = head_out(to);
        if (err == -EAGAIN) {
            to->writable = false;
            return 0;
        }
        if (err != 0) {
            splice_finish(sp, err);
            corral__conn_destroy(to, err);
            return err;
        }
    }
    uint64_t left = sp->max - sp->moved_out;
    size_t want = left < SENDFILE_CHUNK ? (size_t)left : SENDFILE_CHUNK;
    for (;;) {
        ssize_t n = sendfile(to->fd, sp->file_fd, &sp->file_off, want);
        if (n > 0) {
            sp->moved_out += (uint64_t)n;
            sp->moved_in = sp->moved_out; /* no pipe between */
            corral__stat_bytes(to, true, (size_t)n);
            to->last_write = to->loop->now;
            return n;
        }
        if (n == 0) { /* the file ends before `max`: it shrank */
            sp->from_eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            to->writable = false;
            return 0;
        }
        int err = -errno;
        splice_finish(sp, err);
        corral__conn_destroy(to, err);
        return err;
    }
}

static void file_pump(struct corral__splice *sp)
{
    corral_conn *to = sp->to;
    for (int round = 0; !sp->done; round++) {
        if (round == ROUNDS_PER_TURN) {
            corral__conn_kick(to); /* the rest next iteration */
            break;
        }
        ssize_t out = file_out(sp);
        if (sp->done)
            break;
        if (sp->moved_out == sp->max || sp->from_eof) {
            splice_finish(sp, 0);
            break;
        }
        if (out <= 0)
            break;
    }
    if (to->state == CORRAL__CONN_OPEN) {
        corral__conn_register_if_waiting(to);
        if (to->state == CORRAL__CONN_OPEN)
            corral__conn_update_timer(to);
    }
}

int corral_conn_sendfile(corral_conn *to, int fd, uint64_t offset, uint64_t len,
                         corral_splice_cb cb, void *arg)
{
    corral_loop *loop = to->loop;
    assert(corral__loop_owned(loop));
    if (to->transport != &corral_plain_transport)
        return -EOPNOTSUPP;
    if (offset > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - offset)
        return -EINVAL;
    if (to->state != CORRAL__CONN_OPEN || to->shutdown_pending)
        return -EPIPE;
    if (to->splicing_to)
        return -EBUSY;
    if (loop->splices_active == CORRAL__SPLICES_MAX)
        return -EAGAIN;
    if (loop->splice_links == NULL) {
        loop->splice_links = calloc(CORRAL__SPLICES_MAX * 2, sizeof(*loop->splice_links));
        if (loop->splice_links == NULL)
            return -ENOMEM;
    }
    struct corral__splice *sp = calloc(1, sizeof(*sp));
    if (sp == NULL)
        return -ENOMEM;
    *sp = (struct corral__splice){.loop = loop,
                                  .to = to,
                                  .file_fd = fd,
                                  .file_off = (off_t)offset,
                                  .max = len,
                                  .cb = cb,
                                  .arg = arg,
                                  .pipe = {-1, -1}};
    loop->splices_active++;
    conn_link_take(loop, to)->as_to = sp;
    to->splicing_to = true;
    file_pump(sp);
    return 0;
}

void corral__splice_on_event(corral_conn *conn)
{
    struct corral__splice_link *link = conn_link(conn);
    if (link == NULL)
        return;
    struct corral__splice *as_from = link->as_from, *as_to = link->as_to;
    if (as_to != NULL && !as_to->done && as_to->from == NULL) {
        file_pump(as_to);
        as_to = NULL;
    }
    if (as_to != NULL && !as_to->done)
        splice_pump(as_to);
    if (as_from != NULL && !as_from->done && as_from != as_to)
        splice_pump(as_from);
}

/* ------------------------------------------------------------------ start */

/* A layered transport holds bytes of its own between socket and caller. */
static bool spliceable(const corral_conn *conn)
{
    return conn->transport == &corral_plain_transport;
}

int corral_conn_splice(corral_conn *from, corral_conn *to, uint64_t max, corral_splice_cb cb,
                       void *arg)
{
    corral_loop *loop = from->loop;
    assert(corral__loop_owned(loop));
    if (to->loop != loop || !spliceable(from) || !spliceable(to))
        return -EOPNOTSUPP;
    if (from->state != CORRAL__CONN_OPEN || to->state != CORRAL__CONN_OPEN || to->shutdown_pending)
        return -EPIPE;
    /* Input read ahead for `from`'s event still to come (conn_io.c) goes
     * before what the splice would move. */
    if (from == to || from->splicing_from || to->splicing_to || from->read_ahead)
        return -EBUSY;
    if (loop->splices_active == CORRAL__SPLICES_MAX)
        return -EAGAIN;
    if (loop->splice_links == NULL) {
        loop->splice_links = calloc(CORRAL__SPLICES_MAX * 2, sizeof(*loop->splice_links));
        if (loop->splice_links == NULL)
            return -ENOMEM;
    }
    struct corral__splice *sp = calloc(1, sizeof(*sp));
    if (sp == NULL)
        return -ENOMEM;
    *sp = (struct corral__splice){
        .loop = loop, .from = from, .to = to, .max = max, .cb = cb, .arg = arg};
    int err = pipe_take(loop, sp->pipe, &sp->pipe_size);
    if (err != 0) {
        free(sp);
        return err;
    }
    loop->splices_active++;
    conn_link_take(loop, from)->as_from = sp;
    from->splicing_from = true;
    conn_link_take(loop, to)->as_to = sp;
    to->splicing_to = true;
    /* `from` may have been read to EAGAIN: try anyway, since a socket not
     * yet in the epoll set reports nothing until it joins (which the pump
     * does when it has to wait).  From on_data, the first move waits for
     * the kick, after on_data has returned: if it left input unconsumed,
     * the splice ends with -EBUSY before it moved anything. */
    from->readable = true;
    if (from->in_on_data)
        corral__conn_kick(from);
    else
        splice_pump(sp);
    return 0;
}
