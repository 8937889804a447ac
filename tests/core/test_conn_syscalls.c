/*
 * test_conn_syscalls.c: the system calls a connection does without.  This
 * program defines its own getsockopt() and recv(), which count and pass
 * on to the kernel, so that libcorral (linked in statically) calls them:
 * no SO_ERROR after a connect that epoll reports made, no read for the 0
 * when the peer's FIN came with the data, no read that finds nothing
 * before lingering on a connection answered at once, and still the right
 * outcome.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic int so_error_calls, recv_zero_calls, recv_again_calls;

int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    if (level == SOL_SOCKET && name == SO_ERROR)
        atomic_fetch_add(&so_error_calls, 1);
    return (int)syscall(SYS_getsockopt, fd, level, name, value, len);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    ssize_t n = syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
    if (n == 0)
        atomic_fetch_add(&recv_zero_calls, 1);
    if (n == -1 && errno == EAGAIN)
        atomic_fetch_add(&recv_again_calls, 1);
    return n;
}

struct seen {
    char data[16];
    size_t len;
    bool eof;
};

static size_t keep_data(corral_conn *conn, const char *data, size_t len)
{
    struct seen *seen = corral_conn_data(conn);
    ck_assert_uint_le(seen->len + len, sizeof(seen->data));
    memcpy(seen->data + seen->len, data, len);
    seen->len += len;
    return len;
}

static void note_eof(corral_conn *conn)
{
    struct seen *seen = corral_conn_data(conn);
    seen->eof = true;
}

static const struct corral_conn_handler keeping_handler = {.on_data = keep_data,
                                                           .on_eof = note_eof};

static bool eof_seen(void *arg)
{
    return ((struct seen *)arg)->eof;
}

START_TEST(a_connect_reported_made_reads_no_so_error)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct seen seen = {0};
    int peer;
    atomic_store(&so_error_calls, 0);
    corral_conn *conn = pair_open(loop, &keeping_handler, &seen, &peer);
    ck_assert_int_eq(conn->state, CORRAL__CONN_OPEN);
    ck_assert_int_eq(atomic_load(&so_error_calls), 0);
    corral_conn_abort(conn, 0);
    close(peer);
    corral_loop_free(loop);
}
END_TEST

START_TEST(data_and_fin_together_end_without_a_read_of_0)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct seen seen = {0};
    int peer;
    corral_conn *conn = pair_open(loop, &keeping_handler, &seen, &peer);
    test_send_all(peer, "abc", 3);
    ck_assert_int_eq(shutdown(peer, SHUT_WR), 0);
    atomic_store(&recv_zero_calls, 0);
    pair_run_until(loop, eof_seen, &seen, 5000);
    ck_assert_uint_eq(seen.len, 3);
    ck_assert(memcmp(seen.data, "abc", 3) == 0);
    ck_assert_int_eq(atomic_load(&recv_zero_calls), 0);
    corral_conn_abort(conn, 0);
    close(peer);
    corral_loop_free(loop);
}
END_TEST

/* A FIN that comes on its own, after the data was read, is still read as
 * the 0 it is. */
START_TEST(a_fin_alone_is_read_as_the_end)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct seen seen = {0};
    int peer;
    corral_conn *conn = pair_open(loop, &keeping_handler, &seen, &peer);
    test_send_all(peer, "abc", 3);
    uint64_t deadline = test_now_ms() + 5000;
    while (seen.len < 3) {
        ck_assert(test_now_ms() < deadline);
        ck_assert_int_eq(corral__loop_run_once(loop, 50), 0);
    }
    ck_assert_int_eq(shutdown(peer, SHUT_WR), 0);
    pair_run_until(loop, eof_seen, &seen, 5000);
    ck_assert_uint_eq(seen.len, 3);
    corral_conn_abort(conn, 0);
    close(peer);
    corral_loop_free(loop);
}
END_TEST

/* A connection answered at once and closed lingers for its peer's end
 * without reading first: it joins the epoll set, which reports the FIN.
 * Deferred accept: the request is there when the worker first reads, so
 * the connection has never waited before it closes. */
static atomic_bool answered, worker_went_round;

static size_t answer_and_close(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    corral_conn_write(conn, "pong", 4);
    atomic_store(&recv_again_calls, 0);
    atomic_store(&answered, true);
    corral_conn_close(conn);
    return len;
}

static const struct corral_conn_handler answering_handler = {.on_data = answer_and_close};

static void note_round(void *arg)
{
    (void)arg;
    atomic_store(&worker_went_round, true);
}

static uint64_t connections_open(corral_server *server)
{
    struct corral_worker_stats stats;
    corral_server_stats(server, 0, &stats);
    return stats.connections_active;
}

START_TEST(a_close_after_an_answer_lingers_without_a_read_first)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    struct corral_listen_options options;
    corral_listen_options_init(&options);
    options.defer_accept_s = 5;
    corral_listener *listener;
    ck_assert_int_eq(
        corral_server_listen(server, "127.0.0.1:0", &options, &answering_handler, NULL, &listener),
        0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int port = corral_listener_port(listener);
    for (int i = 0; i < 3; i++) {
        atomic_store(&answered, false);
        atomic_store(&worker_went_round, false);
        int fd = test_connect(port);
        test_send_all(fd, "ping", 4);
        char reply[8];
        ck_assert_uint_eq(test_recv_all(fd, reply, 4), 4);
        ck_assert(memcmp(reply, "pong", 4) == 0);
        ck_assert_int_eq(recv(fd, reply, sizeof(reply), 0), 0); /* its FIN */
        /* The post runs in a later iteration than the shutdown: whatever
         * the worker read after it, it has read, and this end is open. */
        ck_assert_int_eq(corral_worker_post(corral_server_worker(server, 0), note_round, NULL), 0);
        test_wait_for(atomic_load(&worker_went_round), TEST_WAIT_MS, "the worker ran no post");
        ck_assert(atomic_load(&answered));
        int reads_of_nothing = atomic_load(&recv_again_calls);
        ck_assert_int_eq(reads_of_nothing, 0);
        close(fd);
        test_wait_for(connections_open(server) == 0, TEST_WAIT_MS, "the connection still lingers");
    }
    test_stop_server(server);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/conn_syscalls");
    TCase *tc = tcase_create("saved");
    tcase_add_test(tc, a_connect_reported_made_reads_no_so_error);
    tcase_add_test(tc, data_and_fin_together_end_without_a_read_of_0);
    tcase_add_test(tc, a_fin_alone_is_read_as_the_end);
    tcase_add_test(tc, a_close_after_an_answer_lingers_without_a_read_first);
    suite_add_tcase(suite, tc);
    return suite;
}
