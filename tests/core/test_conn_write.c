/*
 * test_conn_write.c: how output leaves a connection: large writes straight
 * from the caller's memory, small ones batched, every mix of the two intact
 * and in order through a slow reader, and the loop's buffer classes.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_segs_in */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const struct corral_conn_handler quiet_handler = {0};

static void set_rcvbuf(int fd, int size)
{
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

/* Room for a whole large write in the connection's socket, whatever the
 * system's autotuning starts it with. */
static void set_roomy_sndbuf(corral_conn *conn)
{
    int size = 1024 * 1024;
    setsockopt(corral_conn_fd(conn), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
}

/* ---------------------------------------------------------- direct writes */

/* A connection closed from another's on_close gets its own on_close in
 * the loop's next turn, without waiting for an event that may never come
 * (a proxy closing the client when its server's connection ends). */
struct chain {
    corral_conn *second;
    atomic_bool second_closed;
};

static void chain_first_closed(corral_conn *conn, int error)
{
    (void)error;
    struct chain *c = corral_conn_data(conn);
    corral_conn_abort(c->second, 0);
}

static void chain_second_closed(corral_conn *conn, int error)
{
    (void)error;
    struct chain *c = corral_conn_data(conn);
    atomic_store(&c->second_closed, true);
}

static void *chain_run(void *arg)
{
    corral_loop_run(arg);
    return NULL;
}

static void chain_stop(void *arg)
{
    corral_loop_stop(arg);
}

START_TEST(a_close_from_on_close_completes_without_another_event)
{
    static const struct corral_conn_handler first = {.on_close = chain_first_closed};
    static const struct corral_conn_handler second = {.on_close = chain_second_closed};
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct chain c = {0};
    int first_peer, second_peer;
    pair_open(loop, &first, &c, &first_peer);
    c.second = pair_open(loop, &second, &c, &second_peer);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, chain_run, loop), 0);
    close(first_peer); /* the first reads its end and closes, which closes the second */
    uint64_t deadline = test_now_ms() + 2000;
    while (!atomic_load(&c.second_closed) && test_now_ms() < deadline)
        test_sleep_ms(TEST_POLL_MS);
    bool closed = atomic_load(&c.second_closed);
    ck_assert_int_eq(corral_loop_post(loop, chain_stop, loop), 0);
    pthread_join(t, NULL);
    ck_assert_msg(closed, "the second connection's on_close waited for another event");
    corral_loop_free(loop);
    close(second_peer);
}
END_TEST

START_TEST(a_large_write_leaves_at_once)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    set_roomy_sndbuf(conn);
    static char data[64 * 1024];
    pair_fill(data, sizeof(data), 0);
    corral_conn_write(conn, data, sizeof(data));
    /* The socket had room: nothing was copied into the output buffer. */
    ck_assert_uint_eq(corral_conn_pending_output(conn), 0);
    ck_assert_ptr_null(conn->out);
    static char got[sizeof(data)];
    ck_assert_uint_eq(test_recv_all(fd, got, sizeof(got)), sizeof(got));
    ck_assert(memcmp(got, data, sizeof(data)) == 0);
    close(fd);
    corral_loop_free(loop);
}
END_TEST

START_TEST(small_writes_wait_for_the_flush_together)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    set_roomy_sndbuf(conn);
    char data[1000];
    pair_fill(data, sizeof(data), 0);
    for (size_t i = 0; i < 10; i++)
        corral_conn_write(conn, data + i * 100, 100);
    ck_assert_uint_eq(corral_conn_pending_output(conn), 1000);
    /* A large write behind them sends them first, in the same writev. */
    static char large[64 * 1024];
    pair_fill(large, sizeof(large), 1000);
    corral_conn_write(conn, large, sizeof(large));
    ck_assert_uint_eq(corral_conn_pending_output(conn), 0);
    static char got[1000 + sizeof(large)];
    ck_assert_uint_eq(test_recv_all(fd, got, sizeof(got)), sizeof(got));
    for (size_t i = 0; i < sizeof(got); i++)
        ck_assert_int_eq((unsigned char)got[i], pair_pattern(i));
    close(fd);
    corral_loop_free(loop);
}
END_TEST

START_TEST(a_body_after_a_queued_head_leaves_with_it)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    set_roomy_sndbuf(conn);
    /* A response head, then the body that came in the same read as the
     * backend's head: short of the threshold alone, over it with the head. */
    static char data[64 * 1024];
    pair_fill(data, sizeof(data), 0);
    corral_conn_write(conn, data, 300);
    ck_assert_uint_eq(corral_conn_pending_output(conn), 300);
    corral_conn_write(conn, data + 300, sizeof(data) - 300);
    /* Both went in one writev from their own buffers: the body was never
     * copied behind the head. */
    ck_assert_uint_eq(corral_conn_pending_output(conn), 0);
    ck_assert_ptr_null(conn->out);
    static char got[sizeof(data)];
    ck_assert_uint_eq(test_recv_all(fd, got, sizeof(got)), sizeof(got));
    ck_assert(memcmp(got, data, sizeof(data)) == 0);
    close(fd);
    corral_loop_free(loop);
}
END_TEST

/* A producer that writes a stream in a fixed mix of sizes and shapes while
 * the connection is not backed up, continued from on_drain. */
struct producer {
    corral_conn *conn;
    uint64_t written, total;
    unsigned step;
    bool closed;
    char *buf;
};

enum { MAX_WRITE = 300 * 1024 };

/* Around the direct write's threshold (64 KiB) and far on either side. */
static const size_t write_sizes[] = {1,         100,  16384, 65535, 70000, 5,
                                     MAX_WRITE, 4096, 3,     65536, 17,    20000,
                                     65537,     1000, 32768, 2000,  1,     200000};

static void produce(corral_conn *conn)
{
    struct producer *p = corral_conn_data(conn);
    while (!p->closed && !corral_conn_backed_up(conn)) {
        if (p->written == p->total) {
            corral_conn_close(conn);
            p->closed = true;
            return;
        }
        size_t len = write_sizes[p->step % (sizeof(write_sizes) / sizeof(write_sizes[0]))];
        if (len > p->total - p->written)
            len = (size_t)(p->total - p->written);
        pair_fill(p->buf, len, p->written);
        /* Shapes: one buffer, two iovecs, and more iovecs than the direct
         * write's list holds (queued whole). */
        unsigned shape = (p->step / 3) % 3;
        if (shape == 0 || len < 40) {
            corral_conn_write(conn, p->buf, len);
        } else if (shape == 1) {
            struct iovec iov[2] = {{p->buf, len / 3}, {p->buf + len / 3, len - len / 3}};
            corral_conn_writev(conn, iov, 2);
        } else {
            struct iovec iov[20];
            size_t part = len / 20;
            for (int i = 0; i < 20; i++)
                iov[i] =
                    (struct iovec){p->buf + (size_t)i * part, i == 19 ? len - 19 * part : part};
            corral_conn_writev(conn, iov, 20);
        }
        p->written += len;
        p->step++;
    }
}

static void producer_closed(corral_conn *conn, int error)
{
    struct producer *p = corral_conn_data(conn);
    ck_assert_int_eq(error, 0);
    p->conn = NULL;
}

static const struct corral_conn_handler producer_handler = {
    .on_drain = produce,
    .on_close = producer_closed,
};

struct reader {
    int fd;
    int slow_reads; /* reads with a pause before them */
    uint64_t received;
    bool intact;
};

static void *read_stream(void *arg)
{
    struct reader *r = arg;
    static char buf[8192];
    r->intact = true;
    for (int reads = 0;; reads++) {
        if (reads < r->slow_reads)
            test_sleep_ms(1); /* slow at first, so that output backs up */
        ssize_t n = recv(r->fd, buf, reads % 2 ? sizeof(buf) : 700, 0);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] != pair_pattern(r->received + (size_t)i))
                r->intact = false;
        r->received += (size_t)n;
    }
    return NULL;
}

static bool producer_done(void *arg)
{
    return ((struct producer *)arg)->conn == NULL;
}

static void check_mixed_writes(int slow_reads, uint64_t total)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct producer p = {.total = total, .buf = malloc(MAX_WRITE)};
    ck_assert_ptr_nonnull(p.buf);
    int fd;
    p.conn = pair_open(loop, &producer_handler, &p, &fd);
    set_rcvbuf(fd, 32 * 1024);
    struct reader r = {.fd = fd, .slow_reads = slow_reads};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, read_stream, &r), 0);
    produce(p.conn);
    pair_run_until(loop, producer_done, &p, 30000);
    pthread_join(thread, NULL);
    ck_assert(r.intact);
    ck_assert_uint_eq(r.received, total);
    close(fd);
    free(p.buf);
    corral_loop_free(loop);
}

START_TEST(mixed_writes_arrive_in_order_through_a_fast_reader)
{
    check_mixed_writes(0, 16 * 1024 * 1024);
}
END_TEST

START_TEST(mixed_writes_arrive_in_order_through_a_slow_reader)
{
    check_mixed_writes(400, 8 * 1024 * 1024 + 7);
}
END_TEST

/* A layered transport that takes at most 1000 bytes per writev, as a TLS
 * transport may take less than offered. */
static ssize_t stingy_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct iovec cut[64];
    size_t room = 1000;
    int count = 0;
    for (int i = 0; i < iovcnt && room > 0 && count < 64; i++) {
        size_t n = iov[i].iov_len < room ? iov[i].iov_len : room;
        cut[count++] = (struct iovec){iov[i].iov_base, n};
        room -= n;
    }
    return corral_plain_transport.writev(conn, cut, count);
}

static struct corral_transport stingy;

static void use_stingy_transport(corral_conn *conn)
{
    stingy = (struct corral_transport){
        .name = "stingy",
        .layered = true,
        .read = corral_plain_transport.read,
        .writev = stingy_writev,
        .shutdown = corral_plain_transport.shutdown,
    };
    corral_conn_set_transport(conn, &stingy, NULL);
}

static const struct corral_conn_handler stingy_handler = {
    .on_open = use_stingy_transport,
    .on_drain = produce,
    .on_close = producer_closed,
};

START_TEST(a_transport_that_takes_less_keeps_the_stream_intact)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct producer p = {.total = 2 * 1024 * 1024, .buf = malloc(MAX_WRITE)};
    ck_assert_ptr_nonnull(p.buf);
    int fd;
    p.conn = pair_open(loop, &stingy_handler, &p, &fd);
    struct reader r = {.fd = fd, .slow_reads = 50};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, read_stream, &r), 0);
    produce(p.conn);
    pair_run_until(loop, producer_done, &p, 30000);
    pthread_join(thread, NULL);
    ck_assert(r.intact);
    ck_assert_uint_eq(r.received, p.total);
    close(fd);
    free(p.buf);
    corral_loop_free(loop);
}
END_TEST

/* A layered transport (TLS) that passes everything to the socket. */
static struct corral_transport layered;

START_TEST(a_record_sized_write_on_a_layered_transport_leaves_at_once)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    set_roomy_sndbuf(conn);
    layered = (struct corral_transport){
        .name = "layered",
        .layered = true,
        .read = corral_plain_transport.read,
        .writev = corral_plain_transport.writev,
        .shutdown = corral_plain_transport.shutdown,
    };
    corral_conn_set_transport(conn, &layered, NULL);
    /* It makes a record per 16 KiB anyway: a write that fills one is not
     * copied to wait for a batch.  Smaller ones still wait. */
    static char data[16 * 1024 + 100];
    pair_fill(data, sizeof(data), 0);
    corral_conn_write(conn, data, 100);
    ck_assert_uint_eq(corral_conn_pending_output(conn), 100);
    corral_conn_write(conn, data + 100, 16 * 1024);
    ck_assert_uint_eq(corral_conn_pending_output(conn), 0);
    ck_assert_ptr_null(conn->out);
    static char got[sizeof(data)];
    ck_assert_uint_eq(test_recv_all(fd, got, sizeof(got)), sizeof(got));
    ck_assert(memcmp(got, data, sizeof(data)) == 0);
    close(fd);
    corral_loop_free(loop);
}
END_TEST

/* A large write that the socket takes only in part, then a half-close: the
 * rest is flushed before the FIN. */
START_TEST(a_half_close_waits_for_a_partly_sent_large_write)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    set_rcvbuf(fd, 16 * 1024);
    size_t len = 4 * 1024 * 1024;
    char *data = malloc(len);
    ck_assert_ptr_nonnull(data);
    pair_fill(data, len, 0);
    corral_conn_write(conn, data, len);
    size_t pending = corral_conn_pending_output(conn);
    ck_assert_uint_gt(pending, 0);
    ck_assert_uint_lt(pending, len);
    memset(data, 0, len); /* the rest was copied: the caller's memory is free */
    corral_conn_shutdown(conn);
    struct reader r = {.fd = fd, .slow_reads = 20};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, read_stream, &r), 0);
    uint64_t deadline = test_now_ms() + 20000;
    while (corral_conn_pending_output(conn) > 0 && test_now_ms() < deadline)
        ck_assert_int_eq(corral__loop_run_once(loop, 50), 0);
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0); /* the FIN */
    pthread_join(thread, NULL);
    ck_assert(r.intact);
    ck_assert_uint_eq(r.received, len);
    free(data);
    close(fd);
    corral_loop_free(loop);
}
END_TEST

/* The segments the socket `fd` has received so far. */
static unsigned segments_in(int fd)
{
    struct tcp_info info = {0};
    socklen_t len = sizeof(info);
    ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
    return info.tcpi_segs_in;
}

/* Small output and then the connection's end, by a half-close or a close:
 * the bytes wait for the FIN and leave in the same segment as it. */
START_TEST(the_last_bytes_leave_with_the_fin)
{
    for (int closing = 0; closing < 2; closing++) {
        corral_loop *loop;
        ck_assert_int_eq(corral_loop_new(&loop), 0);
        int fd;
        corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
        unsigned before = segments_in(fd);
        char data[1000];
        pair_fill(data, sizeof(data), 0);
        corral_conn_write(conn, data, sizeof(data));
        if (closing)
            corral_conn_close(conn);
        else
            corral_conn_shutdown(conn);
        ck_assert_int_eq(corral__loop_run_once(loop, 0), 0); /* the flush */
        char got[sizeof(data) + 1];
        ck_assert_uint_eq(test_recv_all(fd, got, sizeof(data)), sizeof(data));
        ck_assert(memcmp(got, data, sizeof(data)) == 0);
        ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 0); /* the end */
        ck_assert_uint_eq(segments_in(fd) - before, 1);
        close(fd);
        corral_loop_free(loop);
    }
}
END_TEST

/* --------------------------------------------------------- buffer classes */

START_TEST(buffers_come_in_fixed_classes)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    static const struct {
        size_t need;
        uint32_t cap;
    } cases[] = {
        {1, 16384},      {16384, 16384},   {16385, 65536},       {65536, 65536},
        {65537, 262144}, {262144, 262144}, {262145, 512 * 1024}, {600 * 1024, 1024 * 1024},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t cap = 0;
        char *buf = corral__buffer_get(loop, cases[i].need, &cap);
        ck_assert_ptr_nonnull(buf);
        ck_assert_msg(cap == cases[i].cap, "need %zu: cap %u", cases[i].need, cap);
        memset(buf, 1, cap);
        corral__buffer_put(loop, buf, cap);
    }
    corral_loop_free(loop);
}
END_TEST

START_TEST(freed_buffers_are_reused_up_to_a_bound_per_class)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    enum { MANY = 100 };
    static const uint32_t sizes[] = {16384, 65536, 262144};
    static const size_t kept[] = {64, 16, 4};
    for (size_t c = 0; c < 3; c++) {
        char *bufs[MANY];
        uint32_t cap;
        for (int i = 0; i < MANY; i++) {
            bufs[i] = corral__buffer_get(loop, sizes[c], &cap);
            ck_assert_ptr_nonnull(bufs[i]);
        }
        for (int i = 0; i < MANY; i++)
            corral__buffer_put(loop, bufs[i], sizes[c]);
        ck_assert_uint_eq(loop->pool_count[c], kept[c]);
        /* Taken again most recent first, without malloc. */
        char *again = corral__buffer_get(loop, sizes[c], &cap);
        ck_assert_ptr_eq(again, bufs[kept[c] - 1]);
        corral__buffer_put(loop, again, cap);
    }
    corral_loop_free(loop);
}
END_TEST

START_TEST(growing_moves_to_a_larger_class_and_keeps_the_bytes)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    uint32_t cap;
    char *buf = corral__buffer_get(loop, 100, &cap);
    ck_assert_ptr_nonnull(buf);
    pair_fill(buf, cap, 0);
    char *small = buf;
    buf = corral__buffer_grow(loop, buf, cap, &cap, 20000);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(cap, 65536);
    for (size_t i = 0; i < 16384; i++)
        ck_assert_int_eq((unsigned char)buf[i], pair_pattern(i));
    ck_assert_uint_eq(loop->pool_count[0], 1); /* the small one went back */
    ck_assert_ptr_eq(loop->pool[0][0], small);
    corral__buffer_put(loop, buf, cap);
    corral_loop_free(loop);
}
END_TEST

/* What an idle connection holds: its struct, no buffer. */
START_TEST(an_idle_connection_holds_no_buffer)
{
    ck_assert_uint_le(sizeof(corral_conn), 280);
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int fd;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &fd);
    static char data[100 * 1024];
    corral_conn_write(conn, data, 100);
    corral_conn_write(conn, data, sizeof(data));
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    static char got[100 + sizeof(data)];
    ck_assert_uint_eq(test_recv_all(fd, got, sizeof(got)), sizeof(got));
    ck_assert_ptr_null(conn->out);
    ck_assert_ptr_null(conn->in);
    close(fd);
    corral_loop_free(loop);
}
END_TEST

/* --------------------------------------------------------- held output */

/* A batch of events: the first writes to the target, the last looks
 * whether the target's peer has it yet, i.e. whether the flush after every
 * few events sent it. */
#define HELD_TRIGGERS 12

struct held {
    corral_conn *target;
    int target_peer;
    bool hold;
    int seen;
    bool arrived_mid_batch;
};

static size_t held_on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    struct held *h = corral_conn_data(conn);
    if (++h->seen == 1) {
        corral_conn_hold_output(h->target, h->hold);
        corral_conn_write(h->target, "x", 1);
    } else if (h->seen == HELD_TRIGGERS) {
        char byte;
        h->arrived_mid_batch = recv(h->target_peer, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
    }
    return len;
}

static bool held_batch_sends(bool hold)
{
    static const struct corral_conn_handler trigger = {.on_data = held_on_data};
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct held h = {.hold = hold};
    h.target = pair_open(loop, &quiet_handler, NULL, &h.target_peer);
    int peers[HELD_TRIGGERS];
    for (int i = 0; i < HELD_TRIGGERS; i++)
        pair_open(loop, &trigger, &h, &peers[i]);
    for (int i = 0; i < HELD_TRIGGERS; i++)
        ck_assert_int_eq(write(peers[i], "t", 1), 1);
    /* All of them readable before the loop looks: one batch. */
    for (int turns = 0; h.seen < HELD_TRIGGERS && turns < 100; turns++)
        ck_assert_int_eq(corral__loop_run_once(loop, 1000), 0);
    ck_assert_int_eq(h.seen, HELD_TRIGGERS);
    char byte;
    ck_assert_int_eq(recv(h.target_peer, &byte, 1, 0), 1); /* at the batch's end at the latest */
    ck_assert_int_eq(byte, 'x');
    for (int i = 0; i < HELD_TRIGGERS; i++)
        close(peers[i]);
    close(h.target_peer);
    corral_loop_free(loop);
    return h.arrived_mid_batch;
}

START_TEST(held_output_waits_for_the_end_of_the_batch)
{
    ck_assert_msg(held_batch_sends(false), "output is flushed after every few events");
    ck_assert_msg(!held_batch_sends(true), "held output left before the batch's end");
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/conn_write");
    TCase *tc = tcase_create("conn_write");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_large_write_leaves_at_once);
    tcase_add_test(tc, small_writes_wait_for_the_flush_together);
    tcase_add_test(tc, a_body_after_a_queued_head_leaves_with_it);
    tcase_add_test(tc, mixed_writes_arrive_in_order_through_a_fast_reader);
    tcase_add_test(tc, mixed_writes_arrive_in_order_through_a_slow_reader);
    tcase_add_test(tc, a_transport_that_takes_less_keeps_the_stream_intact);
    tcase_add_test(tc, a_record_sized_write_on_a_layered_transport_leaves_at_once);
    tcase_add_test(tc, a_half_close_waits_for_a_partly_sent_large_write);
    tcase_add_test(tc, the_last_bytes_leave_with_the_fin);
    tcase_add_test(tc, buffers_come_in_fixed_classes);
    tcase_add_test(tc, freed_buffers_are_reused_up_to_a_bound_per_class);
    tcase_add_test(tc, growing_moves_to_a_larger_class_and_keeps_the_bytes);
    tcase_add_test(tc, an_idle_connection_holds_no_buffer);
    tcase_add_test(tc, a_close_from_on_close_completes_without_another_event);
    tcase_add_test(tc, held_output_waits_for_the_end_of_the_batch);
    suite_add_tcase(suite, tc);
    return suite;
}
