/*
 * test_io_batch.c: the sends of a flush and the first reads of a group of
 * events made in one io_uring call (core/io_batch.c): every connection's
 * bytes intact and its own, a failed send closing only its connection, a
 * read made ahead for a connection paused meanwhile kept for it, a read
 * that fills its slice followed by ordinary ones, input read ahead counted
 * as pending, and no ring when turned off.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PAIRS 6

/* A connection that records what reaches it, and pauses a peer's reading
 * from its on_data when told to. */
struct sink {
    char got[256 * 1024];
    size_t len;
    int closed_error;
    bool closed;
    corral_conn *pause; /* paused by this sink's on_data */
    corral_conn *probe; /* looked at by this sink's first on_data */
    bool probed, probe_pending;
    size_t probe_kept;
};

static size_t sink_data(corral_conn *conn, const char *data, size_t len)
{
    struct sink *s = corral_conn_data(conn);
    ck_assert_uint_le(s->len + len, sizeof(s->got));
    memcpy(s->got + s->len, data, len);
    s->len += len;
    if (s->pause != NULL)
        corral_conn_pause_read(s->pause);
    if (s->probe != NULL && !s->probed) {
        s->probed = true;
        s->probe_pending = corral_conn_input_pending(s->probe);
        s->probe_kept = corral_conn_kept_input(s->probe);
    }
    return len;
}

static void sink_close(corral_conn *conn, int error)
{
    struct sink *s = corral_conn_data(conn);
    s->closed = true;
    s->closed_error = error;
}

static const struct corral_conn_handler sink_handler = {.on_data = sink_data,
                                                        .on_close = sink_close};

/* Whether the loop's ring exists: where the kernel refuses io_uring the
 * cases below still pass, on the one-call-per-connection path, and say
 * so. */
static bool ring_in_use(const corral_loop *loop)
{
    if (loop->io_batch_off)
        fprintf(stderr, "test_io_batch: io_uring unavailable, the batches were not made\n");
    return !loop->io_batch_off;
}

/* A fresh loop with n connections, each recording into sinks[i] (cleared)
 * and with its peer's end in peers[i]. */
static corral_loop *open_pairs(struct sink *sinks, corral_conn **conns, int *peers, int n)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    memset(sinks, 0, (size_t)n * sizeof(*sinks));
    for (int i = 0; i < n; i++)
        conns[i] = pair_open(loop, &sink_handler, &sinks[i], &peers[i]);
    return loop;
}

/* Waits until the socket of every connection has input (or an error) for
 * the loop's next wakeup, without running the loop. */
static void wait_input(corral_conn **conns, int n)
{
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = corral_conn_fd(conns[i]), .events = POLLIN};
        while (poll(&p, 1, TEST_POLL_MS) != 1)
            ck_assert_msg(test_now_ms() < deadline, "no input on connection %d", i);
    }
}

/* Sends `a` and `b` (5 bytes each) to the two connections, both waiting
 * in their sockets before the loop runs again. */
static void send_both(corral_conn **conns, const int *peers, const char *a, const char *b)
{
    ck_assert_int_eq(send(peers[0], a, 5, 0), 5);
    ck_assert_int_eq(send(peers[1], b, 5, 0), 5);
    wait_input(conns, 2);
}

/* Closes the peers' ends and frees the loop. */
static void close_pairs(corral_loop *loop, int *peers, int n)
{
    for (int i = 0; i < n; i++)
        close(peers[i]);
    corral_loop_free(loop);
}

START_TEST(the_sends_of_a_flush_arrive_each_at_its_own_peer)
{
    static struct sink sinks[PAIRS];
    corral_conn *conns[PAIRS];
    int peers[PAIRS];
    corral_loop *loop = open_pairs(sinks, conns, peers, PAIRS);
    char data[PAIRS][3000];
    for (int i = 0; i < PAIRS; i++) {
        pair_fill(data[i], sizeof(data[i]), (uint64_t)i * 7919);
        /* Three small writes: copied, and sent by the flush as one. */
        for (int part = 0; part < 3; part++)
            corral_conn_write(conns[i], data[i] + part * 1000, 1000);
        ck_assert_uint_eq(corral_conn_pending_output(conns[i]), 3000);
    }
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    for (int i = 0; i < PAIRS; i++) {
        ck_assert_uint_eq(corral_conn_pending_output(conns[i]), 0);
        char got[3000];
        ck_assert_uint_eq(test_recv_all(peers[i], got, sizeof(got)), sizeof(got));
        ck_assert(memcmp(got, data[i], sizeof(got)) == 0);
    }
    if (ring_in_use(loop))
        ck_assert_ptr_nonnull(loop->io_batch);
    close_pairs(loop, peers, PAIRS);
}
END_TEST

/* Turned off, the same flush sends connection by connection: no ring. */
START_TEST(turned_off_the_loop_makes_no_ring)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    corral_loop_set_io_uring(loop, false);
    static struct sink sinks[PAIRS];
    memset(sinks, 0, sizeof(sinks));
    corral_conn *conns[PAIRS];
    int peers[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        conns[i] = pair_open(loop, &sink_handler, &sinks[i], &peers[i]);
        corral_conn_write(conns[i], "hello", 5);
    }
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    for (int i = 0; i < PAIRS; i++) {
        char got[5];
        ck_assert_uint_eq(test_recv_all(peers[i], got, sizeof(got)), sizeof(got));
        ck_assert(memcmp(got, "hello", 5) == 0);
    }
    ck_assert_ptr_null(loop->io_batch);
    ck_assert_ptr_null(loop->read_ahead);
    close_pairs(loop, peers, PAIRS);
}
END_TEST

/* A peer that reset: its send fails within the batch, and that closes its
 * connection with the error, the others' bytes still going. */
START_TEST(a_failed_send_in_a_batch_closes_only_its_connection)
{
    static struct sink sinks[3];
    corral_conn *conns[3];
    int peers[3];
    corral_loop *loop = open_pairs(sinks, conns, peers, 3);
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    ck_assert_int_eq(setsockopt(peers[1], SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
    close(peers[1]);
    /* The reset there, without running the loop, which would see it. */
    wait_input(&conns[1], 1);
    for (int i = 0; i < 3; i++)
        corral_conn_write(conns[i], "hello", 5);
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    for (int i = 0; i < 50 && !sinks[1].closed; i++)
        ck_assert_int_eq(corral__loop_run_once(loop, 10), 0);
    ck_assert(sinks[1].closed);
    ck_assert_msg(sinks[1].closed_error == -ECONNRESET || sinks[1].closed_error == -EPIPE,
                  "closed with %d", sinks[1].closed_error);
    ck_assert(!sinks[0].closed && !sinks[2].closed);
    for (int i = 0; i < 3; i += 2) {
        char got[5];
        ck_assert_uint_eq(test_recv_all(peers[i], got, sizeof(got)), sizeof(got));
        ck_assert(memcmp(got, "hello", 5) == 0);
        close(peers[i]);
    }
    corral_loop_free(loop);
}
END_TEST

static bool all_received(void *arg)
{
    struct sink *sinks = arg;
    for (int i = 0; i < PAIRS; i++)
        if (sinks[i].len < 100 * 1024)
            return false;
    return true;
}

/* Input waiting on every connection when the loop wakes: read ahead
 * together, 100 KiB each, more than a slice holds. */
START_TEST(reads_made_ahead_deliver_each_connection_its_bytes)
{
    static struct sink sinks[PAIRS];
    corral_conn *conns[PAIRS];
    int peers[PAIRS];
    corral_loop *loop = open_pairs(sinks, conns, peers, PAIRS);
    static char data[PAIRS][100 * 1024];
    for (int i = 0; i < PAIRS; i++) {
        pair_fill(data[i], sizeof(data[i]), (uint64_t)i * 104729);
        ck_assert_int_eq(send(peers[i], data[i], sizeof(data[i]), 0), (ssize_t)sizeof(data[i]));
    }
    pair_run_until(loop, all_received, sinks, TEST_WAIT_MS);
    for (int i = 0; i < PAIRS; i++) {
        ck_assert_uint_eq(sinks[i].len, sizeof(data[i]));
        ck_assert(memcmp(sinks[i].got, data[i], sizeof(data[i])) == 0);
    }
    if (ring_in_use(loop))
        ck_assert_ptr_nonnull(loop->read_ahead);
    close_pairs(loop, peers, PAIRS);
}
END_TEST

static bool one_received(void *arg)
{
    struct sink *sinks = arg;
    return sinks[0].len + sinks[1].len > 0;
}

static bool both_received(void *arg)
{
    struct sink *sinks = arg;
    return sinks[0].len == 5 && sinks[1].len == 5;
}

/* Each pauses the other from its on_data: whichever comes second in the
 * group had its input read ahead, and keeps it until it reads again. */
START_TEST(a_read_made_ahead_for_a_paused_connection_waits_for_it)
{
    static struct sink sinks[2];
    corral_conn *conns[2];
    int peers[2];
    corral_loop *loop = open_pairs(sinks, conns, peers, 2);
    sinks[0].pause = conns[1];
    sinks[1].pause = conns[0];
    send_both(conns, peers, "first", "other");
    pair_run_until(loop, one_received, sinks, TEST_WAIT_MS);
    int waiting = sinks[0].len > 0 ? 1 : 0;
    ck_assert_uint_eq(sinks[waiting].len, 0);
    sinks[0].pause = sinks[1].pause = NULL;
    corral_conn_resume_read(conns[waiting]);
    pair_run_until(loop, both_received, sinks, TEST_WAIT_MS);
    ck_assert(memcmp(sinks[0].got, "first", 5) == 0);
    ck_assert(memcmp(sinks[1].got, "other", 5) == 0);
    close_pairs(loop, peers, 2);
}
END_TEST

/* Input read ahead for an event still to come counts as input: it is not
 * in the socket any more, and a stop deciding whether a request waits (or
 * a binary upgrade whether the socket alone can move) must see it. */
START_TEST(input_read_ahead_counts_as_pending)
{
    static struct sink sinks[2];
    corral_conn *conns[2];
    int peers[2];
    corral_loop *loop = open_pairs(sinks, conns, peers, 2);
    sinks[0].probe = conns[1];
    sinks[1].probe = conns[0];
    send_both(conns, peers, "GET /", "GET /");
    pair_run_until(loop, both_received, sinks, TEST_WAIT_MS);
    /* The first handled saw the other's bytes waiting, though its socket
     * had none left. */
    if (ring_in_use(loop)) {
        ck_assert(sinks[0].probe_pending || sinks[1].probe_pending);
        ck_assert(sinks[0].probe_kept == 5 || sinks[1].probe_kept == 5);
    }
    close_pairs(loop, peers, 2);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/io_batch");
    TCase *tc = tcase_create("io_batch");
    tcase_add_test(tc, the_sends_of_a_flush_arrive_each_at_its_own_peer);
    tcase_add_test(tc, turned_off_the_loop_makes_no_ring);
    tcase_add_test(tc, a_failed_send_in_a_batch_closes_only_its_connection);
    tcase_add_test(tc, reads_made_ahead_deliver_each_connection_its_bytes);
    tcase_add_test(tc, a_read_made_ahead_for_a_paused_connection_waits_for_it);
    tcase_add_test(tc, input_read_ahead_counts_as_pending);
    suite_add_tcase(suite, tc);
    return suite;
}
