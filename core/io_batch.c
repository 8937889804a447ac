/*
 * io_batch.c: sends and reads of many connections made in one system call.
 * A loop handles its events in groups (loop.c); the output queued for
 * every plain connection during a group leaves in one io_uring_enter() at
 * its flush, and the first read of each plain connection the group wakes is
 * made, for all of them together, in one before the group is handled
 * (conn_io.c).  Entering the kernel costs about as much as a small send
 * itself on loopback and in virtual machines: a call per batch instead of
 * one per connection halves what a small send and read cost there
 * (docs/benchmarks.md).
 *
 * Every operation carries MSG_DONTWAIT, so a full or empty socket
 * completes at once with -EAGAIN instead of waiting in the kernel: nothing
 * is in flight when the call returns, and each result means what send()'s
 * or recv()'s would.  The ring is made when the loop starts to run, or on
 * first use, in the loop's own thread (it has a single issuer); where the kernel refuses one (no
 * io_uring, or a seccomp filter) the loop makes a call per connection, as
 * it does with corral_loop_set_io_uring(loop, false).
 */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct corral__io_batch {
    struct io_uring ring;
};

/* Says once per process how flushes send: the first loop's outcome, and
 * any later loss of the ring. */
static void io_batch_report(int err, bool given_up)
{
    static atomic_bool said;
    if (given_up)
        corral__warn("io_uring failed (%s): a system call per send and read from now on",
                     strerror(-err));
    else if (!atomic_exchange(&said, true)) {
        if (err == 0)
            corral__info("io_uring: sends and reads batched, a system call per batch");
        else
            corral__info("io_uring unavailable (%s): a system call per send and read",
                         strerror(-err));
    }
}

static struct corral__io_batch *io_batch_get(corral_loop *loop)
{
    if (loop->io_batch != NULL || loop->io_batch_off)
        return loop->io_batch;
    struct corral__io_batch *b = calloc(1, sizeof(*b));
    int err = b == NULL
                  ? -ENOMEM
                  : io_uring_queue_init(CORRAL__IO_BATCH_MAX, &b->ring,
                                        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN);
    if (err == -EINVAL) /* a kernel before 6.0 knows neither flag */
        err = io_uring_queue_init(CORRAL__IO_BATCH_MAX, &b->ring, 0);
    if (err != 0) {
        free(b);
        loop->io_batch_off = true;
        io_batch_report(err, false);
        return NULL;
    }
    loop->io_batch = b;
    io_batch_report(0, false);
    return b;
}

/* Gives the ring up for good, once what was submitted has completed. */
static void io_batch_give_up(corral_loop *loop, int err)
{
    io_uring_queue_exit(&loop->io_batch->ring);
    free(loop->io_batch);
    loop->io_batch = NULL;
    loop->io_batch_off = true;
    io_batch_report(err, true);
}

/* Submits the prepared operations, count of them, and stores each
 * result in results[i] (CORRAL__IO_BATCH_UNSENT for any not taken). */
static void io_batch_run(corral_loop *loop, int32_t *results, size_t count)
{
    struct corral__io_batch *b = loop->io_batch;
    size_t submitted = 0;
    int err = 0;
    while (submitted < count) {
        int n = io_uring_submit(&b->ring);
        if (n > 0)
            submitted += (size_t)n;
        else if (n != -EINTR && n != -EAGAIN) {
            err = n < 0 ? n : -EIO;
            break;
        }
    }
    /* Each operation completed within the submission (MSG_DONTWAIT): the
     * waits below find their results there. */
    for (size_t seen = 0; seen < submitted;) {
        struct io_uring_cqe *cqe;
        int got = io_uring_wait_cqe(&b->ring, &cqe);
        if (got == -EINTR)
            continue;
        assert(got == 0);
        uint64_t i = io_uring_cqe_get_data64(cqe);
        assert(i < count);
        results[i] = cqe->res;
        io_uring_cqe_seen(&b->ring, cqe);
        seen++;
    }
    /* The kernel took none, or not all: those left are done as before
     * (CORRAL__IO_BATCH_UNSENT), and so is every batch after. */
    if (err != 0)
        io_batch_give_up(loop, err);
}

/* Marks every result unsent, and returns the ring to prepare `count`
 * operations in, or NULL without one. */
static struct corral__io_batch *io_batch_begin(corral_loop *loop, int32_t *results, size_t count)
{
    assert(count <= CORRAL__IO_BATCH_MAX);
    for (size_t i = 0; i < count; i++)
        results[i] = CORRAL__IO_BATCH_UNSENT;
    return io_batch_get(loop);
}

void corral__io_batch_send(corral_loop *loop, corral_conn *const *conns, int32_t *results,
                           size_t count)
{
    struct corral__io_batch *b = io_batch_begin(loop, results, count);
    if (b == NULL)
        return;
    for (size_t i = 0; i < count; i++) {
        const corral_conn *conn = conns[i];
        struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);
        assert(sqe != NULL); /* the ring holds CORRAL__IO_BATCH_MAX, all completed */
        io_uring_prep_send(sqe, conn->fd, conn->out + conn->out_off, conn->out_len,
                           corral__plain_send_flags(conn) | MSG_DONTWAIT);
        io_uring_sqe_set_data64(sqe, i);
    }
    io_batch_run(loop, results, count);
}

void corral__io_batch_recv(corral_loop *loop, corral_conn *const *conns, char *const *bufs,
                           size_t len, int32_t *results, size_t count)
{
    struct corral__io_batch *b = io_batch_begin(loop, results, count);
    if (b == NULL)
        return;
    for (size_t i = 0; i < count; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);
        assert(sqe != NULL);
        io_uring_prep_recv(sqe, conns[i]->fd, bufs[i], len, MSG_DONTWAIT);
        io_uring_sqe_set_data64(sqe, i);
    }
    io_batch_run(loop, results, count);
}

void corral__io_batch_start(corral_loop *loop)
{
    io_batch_get(loop);
}

void corral_loop_set_io_uring(corral_loop *loop, bool on)
{
    assert(loop->io_batch == NULL); /* before the loop runs */
    loop->io_batch_off = !on;
}

void corral__io_batch_free(corral_loop *loop)
{
    if (loop->io_batch == NULL)
        return;
    io_uring_queue_exit(&loop->io_batch->ring);
    free(loop->io_batch);
    loop->io_batch = NULL;
}
