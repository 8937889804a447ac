/*
 * conn_io.c: a connection's data path: input read and handed to on_data,
 * output queued and flushed after every few events (see loop.c), the
 * lingering close, and the epoll events that drive them.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#define MIN_BUFFER 4096
/* Reads per wakeup before yielding to other connections (fairness). */
#define READS_PER_TURN 16
/* A write that brings the output to at least DIRECT_WRITE_MIN bytes (what
 * is queued counts: a response head queued before a body read in the same
 * read is sent with it) goes to the socket at once, from the caller's
 * memory and behind what is queued, in one writev; only what the socket
 * does not take is copied into the output buffer.  Smaller writes are
 * copied and leave together at the end of the loop iteration.
 * Measured with tests/bench/conn_bench.c (docs/benchmarks.md): below
 * 64 KiB a direct write costs up to 30% more CPU per MB than a copy (a
 * system call per write against one per batch); at 64 KiB the two are
 * within a few percent of each other, and from 256 KiB on the direct write
 * costs a third less (and needs no buffer beyond the largest class). */
#define DIRECT_WRITE_MIN (64 * 1024)
/* The same for a layered transport (TLS): it sends a record, and makes a
 * system call, per 16 KiB whatever the batching, so a write that fills a
 * record gains nothing from waiting, and its copy is all the batch would
 * cost.  Smaller ones are still gathered into full records. */
#define DIRECT_WRITE_MIN_LAYERED (16 * 1024)
/* Gather lists longer than this are queued: the direct write's own list
 * lives on the stack. */
#define DIRECT_WRITE_IOV 16

void corral__loop_set_direct_write_min(corral_loop *loop, size_t min)
{
    assert(corral__loop_owned(loop));
    loop->direct_write_min = min;
}

/* ------------------------------------------------------------------ input */

/* Registers a connection that is not in the epoll set yet once it waits for
 * input or output.  Adding a socket that is ready already reports it at
 * once, so nothing that arrived meanwhile is missed. */
void corral__conn_register_if_waiting(corral_conn *conn)
{
    if (conn->registered || conn->state == CORRAL__CONN_CLOSED)
        return;
    bool wants_input = conn->state == CORRAL__CONN_LINGERING || corral__conn_reading_active(conn) ||
                       conn->splicing_from;
    bool wants_output = conn->out_len > 0 || conn->splicing_to;
    bool waits = (wants_input && !conn->readable) || (wants_output && !conn->writable);
    if (!waits)
        return;
    int err = corral__conn_register(conn);
    if (err != 0)
        corral__conn_destroy(conn, err);
}

void corral__conn_kick(corral_conn *conn)
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
    conn->in_on_data = true;
    size_t consumed = conn->handler->on_data(conn, data, len);
    conn->in_on_data = false;
    if (conn->state != CORRAL__CONN_OPEN) {
        corral__conn_drop_input(conn); /* closing: whatever is left will never be read */
        return;
    }
    if (consumed > len)
        consumed = len;
    size_t left = len - consumed;
    /* Kept input would go after the spliced bytes, which follow it. */
    if (left > 0 && conn->splicing_from)
        corral__splice_cancel(conn, -EBUSY);
    if (data != conn->in) {
        if (left > 0 && conn_keep_input(conn, data + consumed, left) != 0)
            corral__conn_destroy(conn, -ENOMEM);
        return;
    }
    assert(conn->in_len == len && len <= conn->in_cap);
    if (left == 0) {
        corral__conn_drop_input(conn);
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
        corral__conn_destroy(conn, 0);
        return;
    }
    if (conn->state != CORRAL__CONN_OPEN)
        return;
    if (conn->handler->on_eof != NULL)
        conn->handler->on_eof(conn);
    else
        corral_conn_close(conn);
    if (conn->state == CORRAL__CONN_OPEN)
        corral__conn_update_timer(conn);
}

/* While lingering, input is read and dropped until EOF. */
static void conn_discard_input(corral_conn *conn)
{
    while (conn->readable && conn->state == CORRAL__CONN_LINGERING) {
        ssize_t n = conn->transport->read(conn, conn->loop->scratch, conn->loop->scratch_size);
        if (n == -EAGAIN)
            conn->readable = false;
        else if (n <= 0)
            corral__conn_destroy(conn, 0);
    }
}

/* Where the next read goes: the loop's scratch buffer, or behind the input
 * kept.  Returns false when it could not grow (the connection is closed). */
static bool conn_input_space(corral_conn *conn, char **buf, size_t *space)
{
    if (conn->in_len == 0) {
        *buf = conn->loop->scratch;
        *space = conn->loop->scratch_size;
        return true;
    }
    if (conn->in_cap - conn->in_len < MIN_BUFFER) {
        char *grown = corral__buffer_grow(conn->loop, conn->in, conn->in_len, &conn->in_cap,
                                          conn->in_cap + MIN_BUFFER);
        if (grown == NULL) {
            corral__conn_destroy(conn, -ENOMEM);
            return false;
        }
        conn->in = grown;
    }
    assert(conn->in_len < conn->in_cap);
    *buf = conn->in + conn->in_len;
    *space = conn->in_cap - conn->in_len;
    return true;
}

/* The read made ahead for this connection (corral__loop_read_ahead()): its
 * bytes in the loop's read-ahead buffer, and its result. */
static ssize_t conn_take_read_ahead(corral_conn *conn, char **buf, size_t *space)
{
    assert(conn->read_ahead && conn->in_len == 0);
    conn->read_ahead = false;
    *buf = conn->loop->read_ahead + (size_t)conn->read_ahead_slot * CORRAL__READ_AHEAD_LEN;
    *space = CORRAL__READ_AHEAD_LEN;
    ssize_t n = conn->close_error;
    conn->close_error = 0;
    return n;
}

/* A read made ahead for a connection that no longer reads (another's
 * callback paused it): its bytes are kept as unconsumed input, delivered
 * when it reads again; an end of stream is read again then; an error ends
 * it now, since the socket reports an error only once. */
static void conn_keep_read_ahead(corral_conn *conn)
{
    char *buf;
    size_t space;
    ssize_t n = conn_take_read_ahead(conn, &buf, &space);
    if (n > 0) {
        corral__stat_bytes(conn, false, (size_t)n);
        if (conn_keep_input(conn, buf, (size_t)n) != 0)
            corral__conn_destroy(conn, -ENOMEM);
    } else if (n < 0 && n != -EAGAIN) {
        corral__conn_destroy(conn, (int)n);
    }
}

/* Input is read into the loop's scratch buffer and copied into the
 * connection only when the application leaves some of it unconsumed. */
static void conn_read_input(corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_LINGERING) {
        if (conn->read_ahead) { /* discarded with the rest */
            conn->read_ahead = false;
            conn->close_error = 0;
        }
        conn_discard_input(conn);
        return;
    }
    if (conn->read_ahead && !(conn->readable && corral__conn_reading_active(conn))) {
        conn_keep_read_ahead(conn);
        return;
    }
    for (int turn = 0; conn->readable && corral__conn_reading_active(conn); turn++) {
        if (turn == READS_PER_TURN) {
            corral__conn_kick(conn);
            return;
        }
        char *buf;
        size_t space;
        ssize_t n;
        if (conn->read_ahead) {
            n = conn_take_read_ahead(conn, &buf, &space);
        } else {
            if (!conn_input_space(conn, &buf, &space))
                return;
            n = conn->transport->read(conn, buf, space);
        }
        if (n == -EAGAIN) {
            conn->readable = false;
            return;
        }
        if (n < 0) {
            corral__conn_destroy(conn, (int)n);
            return;
        }
        if (n == 0) {
            conn_on_eof(conn);
            return;
        }
        corral__stat_bytes(conn, false, (size_t)n);
        conn->last_read = conn->loop->now;
        /* A short plain read drained the socket: the next edge will tell
         * when more arrives, so skip the read that would say EAGAIN.  Not
         * when the peer's FIN came with that edge (no new edge would report
         * it); a layered transport, which may hold bytes back, says itself. */
        bool drained = conn->transport->drained != NULL
                           ? conn->transport->drained(conn)
                           : (size_t)n < space && !conn->transport->layered;
        if (drained && !conn->peer_hup)
            conn->readable = false;
        /* The FIN came before this read and the read left the socket
         * empty: the next read would return 0, so the end is known now.
         * Not after an error (the next read would report it), nor on a
         * layered transport. */
        bool at_end = drained && conn->peer_fin && conn->transport->drained == NULL;
        if (conn->in_len == 0) { /* read into scratch or read-ahead memory */
            conn_deliver(conn, buf, (size_t)n);
        } else {
            conn->in_len += (size_t)n;
            conn_deliver(conn, conn->in, conn->in_len);
        }
        if (at_end && conn->readable && corral__conn_reading_active(conn)) {
            conn_on_eof(conn);
            return;
        }
    }
}

/* Reads ahead, in one call, the input of the connections among `events`
 * (a group that loop.c handles before it flushes) that will read from a
 * plain socket into scratch memory: each one's first read then costs no
 * system call of its own.  Each gets a CORRAL__READ_AHEAD_LEN slice; a
 * read that fills it is followed by ordinary reads, as a full read is. */
void corral__loop_read_ahead(corral_loop *loop, const struct epoll_event *events, int count)
{
    assert(count <= CORRAL__READ_AHEAD_CONNS);
    corral_conn *conns[CORRAL__READ_AHEAD_CONNS];
    char *bufs[CORRAL__READ_AHEAD_CONNS];
    int32_t results[CORRAL__READ_AHEAD_CONNS];
    size_t k = 0;
    for (int i = 0; i < count; i++) {
        struct corral__handle *handle = events[i].data.ptr;
        /* Input alone: an end or an error takes the event's own path. */
        if (handle->on_event != corral__conn_on_event ||
            (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != EPOLLIN)
            continue;
        corral_conn *conn = (corral_conn *)handle;
        if (conn->transport != &corral_plain_transport || conn->state != CORRAL__CONN_OPEN ||
            conn->in_len != 0 || conn->splice_slot != 0 || conn->read_ahead || conn->batch_failed ||
            !corral__conn_reading_active(conn))
            continue;
        conns[k] = conn;
        k++;
    }
    if (k < 2)
        return; /* one recv() costs what the batch's call would */
    if (loop->read_ahead == NULL) {
        loop->read_ahead = malloc(CORRAL__READ_AHEAD_CONNS * CORRAL__READ_AHEAD_LEN);
        if (loop->read_ahead == NULL)
            return; /* each reads for itself */
    }
    for (size_t i = 0; i < k; i++)
        bufs[i] = loop->read_ahead + i * CORRAL__READ_AHEAD_LEN;
    corral__io_batch_recv(loop, conns, bufs, CORRAL__READ_AHEAD_LEN, results, k);
    for (size_t i = 0; i < k; i++) {
        if (results[i] == CORRAL__IO_BATCH_UNSENT)
            continue;
        conns[i]->read_ahead = true;
        conns[i]->read_ahead_slot = (uint8_t)i;
        conns[i]->close_error = results[i];
    }
}

static void conn_read(corral_conn *conn)
{
    conn_read_input(conn);
    corral__conn_register_if_waiting(conn);
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
        /* A file sent to it yields after its turn too (splice.c): it
         * waits for no event, the socket still having room. */
        bool from = conn->splicing_from;
        if (conn->state == CORRAL__CONN_OPEN && (from || conn->splicing_to))
            corral__splice_on_event(conn);
        if (!from && conn->state == CORRAL__CONN_OPEN && conn->in_len > 0 &&
            corral__conn_reading_active(conn))
            conn_deliver(conn, conn->in, conn->in_len);
        if (conn->state != CORRAL__CONN_CLOSED)
            conn_read(conn);
        if (conn->state == CORRAL__CONN_OPEN)
            corral__conn_update_timer(conn);
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
        corral__conn_destroy(conn, 0);
        return;
    }
    if (!conn->shutdown_done) {
        conn->shutdown_done = true;
        if (conn->transport->shutdown != NULL && conn->transport->shutdown(conn) != 0) {
            corral__conn_destroy(conn, 0);
            return;
        }
    }
    conn->state = CORRAL__CONN_LINGERING;
    conn->linger_deadline = conn->loop->now + CORRAL__LINGER_MS;
    if (conn->registered || conn->transport->layered) {
        /* Input that arrived before may have had its edge already, or be
         * held by the transport (a TLS record read whole). */
        conn->readable = true;
        corral__conn_kick(conn);
    } else {
        /* A plain socket answered without ever waiting (a request, its
         * response, then the close): adding it to the epoll set reports at
         * once whatever input or FIN is there, so a read first would find
         * nothing on nearly every such connection, a recv() (EAGAIN)
         * each. */
        conn->readable = false;
        corral__conn_register_if_waiting(conn);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    corral__conn_update_timer(conn);
}

/* Takes the result of a write of the queued output (the flush's loop, or
 * its batch).  Returns whether to write on: false once the socket is full
 * or the write failed (the connection is then closed). */
static bool conn_flush_wrote(corral_conn *conn, ssize_t n)
{
    if (n == -EAGAIN) {
        conn->writable = false;
        corral__conn_register_if_waiting(conn);
        return false;
    }
    if (n < 0) {
        corral__conn_destroy(conn, (int)n);
        return false;
    }
    assert((size_t)n <= conn->out_len); /* a transport sends no more than asked */
    corral__stat_bytes(conn, true, (size_t)n);
    conn->out_off += (uint32_t)n;
    conn->out_len -= (uint32_t)n;
    conn->last_write = conn->loop->now;
    return true;
}

static void conn_flush(corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_CONNECTING || conn->state >= CORRAL__CONN_LINGERING)
        return;
    assert(conn->out_off + conn->out_len <= conn->out_cap);
    while (conn->out_len > 0 && conn->writable) {
        struct iovec iov = {.iov_base = conn->out + conn->out_off, .iov_len = conn->out_len};
        if (!conn_flush_wrote(conn, conn->transport->writev(conn, &iov, 1)))
            break;
    }
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    if (conn->out_len == 0)
        corral__conn_drop_output(conn);
    if (conn->out_len == 0 && conn->splicing_to) {
        corral__splice_on_event(conn); /* the spliced bytes come after the queued ones */
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (conn->over_high && conn->out_len <= conn->low_watermark) {
        conn->over_high = false;
        if (conn->handler->on_drain != NULL)
            conn->handler->on_drain(conn);
        if (conn->state == CORRAL__CONN_OPEN)
            corral__conn_kick(conn);
    }
    if (conn->out_len > 0 || conn->state == CORRAL__CONN_CLOSED)
        return;
    if (conn->state == CORRAL__CONN_CLOSING) {
        conn_start_linger(conn);
    } else if (conn->shutdown_pending && !conn->shutdown_done) {
        conn->shutdown_done = true;
        if (conn->transport->shutdown != NULL && conn->transport->shutdown(conn) != 0)
            corral__conn_destroy(conn, 0);
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

/* Whether a flush's first write can go in a batch: a plain socket that
 * takes output and has some queued (see conn_flush()). */
static bool conn_batchable(const corral_conn *conn)
{
    return conn->transport == &corral_plain_transport && conn->writable && conn->out_len > 0 &&
           (conn->state == CORRAL__CONN_OPEN || conn->state == CORRAL__CONN_CLOSING);
}

/* Sends the first write of each batchable connection in `list`, up to
 * CORRAL__IO_BATCH_MAX of them a call, and accounts for the results
 * before any callback runs: one that wrote to a connection still counted
 * as unsent would send its bytes again.  What is left, a short write's
 * rest included, the flush writes as usual. */
static void loop_flush_batch(corral_loop *loop, corral_conn *list)
{
    corral_conn *batch[CORRAL__IO_BATCH_MAX];
    int32_t results[CORRAL__IO_BATCH_MAX];
    size_t count = 0;
    corral_conn *conn = list;
    while (conn != NULL && count < CORRAL__IO_BATCH_MAX) {
        if (conn_batchable(conn))
            batch[count++] = conn;
        conn = conn->flush_next;
    }
    if (count < 2)
        return; /* one send() costs what the batch's call would */
    corral__io_batch_send(loop, batch, results, count);
    for (size_t i = 0; i < count; i++) {
        int32_t n = results[i];
        if (n >= 0) {
            conn_flush_wrote(batch[i], n);
        } else if (n != CORRAL__IO_BATCH_UNSENT) {
            if (n == -EAGAIN)
                batch[i]->writable = false;
            batch[i]->batch_failed = true; /* registered or closed by loop_flush_failed() */
            batch[i]->close_error = n;
        }
    }
    if (conn != NULL && !loop->io_batch_off)
        loop_flush_batch(loop, conn);
}

/* The part of a failed batched send that may call back: registering for
 * output (which can fail) or closing.  Returns whether the connection is
 * still open to flush. */
static bool loop_flush_failed(corral_conn *conn)
{
    conn->batch_failed = false;
    if (conn->state == CORRAL__CONN_CLOSED)
        return false; /* closed meanwhile: close_error is its own now */
    int n = conn->close_error;
    conn->close_error = 0;
    if (n == -EAGAIN)
        corral__conn_register_if_waiting(conn);
    else
        corral__conn_destroy(conn, n);
    return conn->state != CORRAL__CONN_CLOSED;
}

void corral__loop_flush(corral_loop *loop, bool mid_batch)
{
    corral_conn *conn = loop->flush_list, *held = NULL, *list = NULL, **tail = &list;
    loop->flush_list = NULL;
    while (conn != NULL) {
        corral_conn *next = conn->flush_next;
        if (mid_batch && conn->hold_output && conn->state == CORRAL__CONN_OPEN) {
            conn->flush_next = held;
            held = conn;
        } else {
            conn->flush_next = NULL;
            *tail = conn;
            tail = &conn->flush_next;
        }
        conn = next;
    }
    if (!loop->io_batch_off)
        loop_flush_batch(loop, list);
    for (conn = list; conn != NULL;) {
        corral_conn *next = conn->flush_next;
        conn->in_flush_list = false;
        if (!conn->batch_failed || loop_flush_failed(conn))
            conn_flush(conn);
        if (conn->state != CORRAL__CONN_CLOSED)
            corral__conn_update_timer(conn);
        conn = next;
    }
    /* Still listed (in_flush_list), for the batch's last flush. */
    while (held != NULL) {
        corral_conn *next = held->flush_next;
        held->flush_next = loop->flush_list;
        loop->flush_list = held;
        held = next;
    }
}

void corral_conn_hold_output(corral_conn *conn, bool hold)
{
    conn->hold_output = hold;
}

/* Copies iov[] (`total` bytes, of which the first `skip` are left out)
 * behind the queued output.  Returns 0 or -ENOMEM. */
static int conn_queue(corral_conn *conn, const struct iovec *iov, int iovcnt, size_t skip,
                      size_t total)
{
    size_t len = total - skip;
    if (conn->out_off + conn->out_len + len > conn->out_cap) {
        if (conn->out_off > 0) {
            memmove(conn->out, conn->out + conn->out_off, conn->out_len);
            conn->out_off = 0;
        }
        char *grown = conn->out == NULL ? corral__buffer_get(conn->loop, len, &conn->out_cap)
                                        : corral__buffer_grow(conn->loop, conn->out, conn->out_len,
                                                              &conn->out_cap, conn->out_len + len);
        if (grown == NULL)
            return -ENOMEM;
        conn->out = grown;
    }
    if (conn->out_len == 0)
        conn->last_write = conn->loop->now; /* the write timeout counts from here */
    char *dst = conn->out + conn->out_off + conn->out_len;
    for (int i = 0; i < iovcnt; i++) {
        size_t n = iov[i].iov_len;
        const char *src = iov[i].iov_base;
        if (skip >= n) {
            skip -= n;
            continue;
        }
        memcpy(dst, src + skip, n - skip);
        dst += n - skip;
        skip = 0;
    }
    conn->out_len += (uint32_t)len;
    assert(conn->out_off + conn->out_len <= conn->out_cap);
    return 0;
}

/* Sends the queued output and then iov[] in one writev.  Returns how many
 * of iov's bytes went (0 when the socket took none), or -errno. */
static ssize_t conn_write_direct(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct iovec all[DIRECT_WRITE_IOV + 1];
    int count = 0;
    if (conn->out_len > 0)
        all[count++] =
            (struct iovec){.iov_base = conn->out + conn->out_off, .iov_len = conn->out_len};
    memcpy(all + count, iov, (size_t)iovcnt * sizeof(*iov));
    count += iovcnt;
    ssize_t n = conn->transport->writev(conn, all, count);
    if (n == -EAGAIN) {
        conn->writable = false;
        return 0;
    }
    if (n <= 0)
        return n;
    corral__stat_bytes(conn, true, (size_t)n);
    conn->last_write = conn->loop->now;
    size_t queued = (size_t)n < conn->out_len ? (size_t)n : conn->out_len;
    conn->out_off += (uint32_t)queued;
    conn->out_len -= (uint32_t)queued;
    if (conn->out_len == 0)
        corral__conn_drop_output(conn);
    return n - (ssize_t)queued;
}

/* Inline in both entry points: corral_conn_write(), the most frequent,
 * gets a copy for one buffer, its loops unrolled and no second call. */
static inline void conn_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    assert(corral__loop_owned(conn->loop));
    assert(!conn->splicing_to); /* would overtake the spliced bytes */
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
            corral__conn_destroy(conn, -ENOBUFS);
            return;
        }
        total += iov[i].iov_len;
    }
    if (total == 0)
        return;

    size_t sent = 0;
    size_t direct_min = conn->transport->layered            ? DIRECT_WRITE_MIN_LAYERED
                        : conn->loop->direct_write_min != 0 ? conn->loop->direct_write_min
                                                            : DIRECT_WRITE_MIN;
    if (conn->out_len + total >= direct_min && iovcnt <= DIRECT_WRITE_IOV &&
        conn->state == CORRAL__CONN_OPEN && conn->writable) {
        ssize_t n = conn_write_direct(conn, iov, iovcnt);
        if (n < 0) {
            corral__conn_destroy(conn, (int)n);
            return;
        }
        sent = (size_t)n;
        assert(sent <= total); /* a transport sends no more than asked */
    }
    if (sent < total && conn_queue(conn, iov, iovcnt, sent, total) != 0) {
        corral__conn_destroy(conn, -ENOMEM);
        return;
    }
    if (conn->out_len > conn->high_watermark)
        conn->over_high = true;
    if (!conn->writable) {
        corral__conn_register_if_waiting(conn); /* the direct write met a full socket */
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    /* Also with nothing queued: the flush reports a drain below the low
     * watermark, and the close or half-close that waits for it. */
    conn_schedule_flush(conn);
}

void corral_conn_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    conn_writev(conn, iov, iovcnt);
}

void corral_conn_write(corral_conn *conn, const void *data, size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    conn_writev(conn, &iov, 1);
}

size_t corral_conn_pending_output(const corral_conn *conn)
{
    return conn->out_len + corral__splice_pending(conn);
}

void corral_conn_shutdown(corral_conn *conn)
{
    if (conn->state != CORRAL__CONN_OPEN || conn->shutdown_pending)
        return;
    /* Its sending side ends; a splice reading from it goes on. */
    corral__splice_cancel_to(conn, 0);
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
        corral__conn_destroy(conn, 0);
        return;
    }
    corral__splice_cancel(conn, 0);
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
    corral__conn_destroy(conn, error);
}

void corral_conn_pause_read(corral_conn *conn)
{
    conn->read_paused = true;
}

int corral_conn_watch(corral_conn *conn)
{
    if (conn->registered || conn->state != CORRAL__CONN_OPEN)
        return 0;
    int err = corral__conn_register(conn);
    if (err != 0)
        corral__conn_destroy(conn, err);
    return err;
}

void corral_conn_resume_read(corral_conn *conn)
{
    if (!conn->read_paused)
        return;
    conn->read_paused = false;
    if (conn->state == CORRAL__CONN_OPEN)
        corral__conn_kick(conn);
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

static void conn_on_connected(corral_conn *conn, uint32_t epoll_events)
{
    assert(conn->state == CORRAL__CONN_CONNECTING);
    int error = 0;
    /* A connect that failed has the socket's error set, which epoll reports
     * as EPOLLERR (with EPOLLHUP once the socket is closed); EPOLLOUT alone
     * is a connection made, and needs no getsockopt() to say so. */
    if (epoll_events & (EPOLLERR | EPOLLHUP)) {
        socklen_t len = sizeof(error);
        if (getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &error, &len) == -1)
            error = errno;
    }
    if (error != 0) {
        corral__conn_destroy(conn, -error);
        return;
    }
    conn->state = CORRAL__CONN_OPEN;
    conn->last_read = conn->loop->now;
    if (conn->handler->on_open != NULL)
        conn->handler->on_open(conn);
    if (conn->out_len > 0)
        conn_schedule_flush(conn);
}

void corral__conn_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    corral_conn *conn = (corral_conn *)handle;
    if (conn->state == CORRAL__CONN_CLOSED)
        return;
    if (epoll_events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        conn->writable = true;
    if (conn->state == CORRAL__CONN_CONNECTING) {
        if (!(epoll_events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        conn_on_connected(conn, epoll_events);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (epoll_events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        conn->readable = true;
    /* A transport that writes while reading (a TLS handshake) may have
     * stopped reading for want of socket space. */
    if ((epoll_events & EPOLLOUT) && conn->transport->layered)
        conn->readable = true;
    bool hangup = (epoll_events & (EPOLLRDHUP | EPOLLERR | EPOLLHUP)) && !conn->peer_hup;
    if (hangup)
        conn->peer_hup = true;
    if (epoll_events & (EPOLLERR | EPOLLHUP))
        conn->peer_fin = false;
    else if (hangup)
        conn->peer_fin = true;
    /* Edge-triggered: the end is reported once, here; with reading
     * paused nothing else would see it. */
    if (hangup && conn->state == CORRAL__CONN_OPEN && !corral__conn_reading_active(conn) &&
        conn->handler->on_hangup != NULL) {
        conn->handler->on_hangup(conn);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (conn->out_len > 0 && conn->writable)
        conn_flush(conn);
    if (conn->state == CORRAL__CONN_OPEN && conn->splice_slot != 0)
        corral__splice_on_event(conn);
    if (conn->state != CORRAL__CONN_CLOSED && conn->readable)
        conn_read(conn);
    if (conn->state != CORRAL__CONN_CLOSED)
        corral__conn_update_timer(conn);
}
