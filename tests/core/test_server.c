/*
 * test_server.c: the worker pool: graceful and fast stops with open
 * connections, the connection limit's pause and rejoin, running out of file
 * descriptors, signals, and per-worker counters.
 */
#include "../helpers.h"
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t echo_on_data(corral_conn *conn, const char *data, size_t len)
{
    corral_conn_write(conn, data, len);
    return len;
}

static const struct corral_conn_handler echo_handler = {.on_data = echo_on_data};

static corral_server *new_server(unsigned workers, unsigned max_connections)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = workers;
    config.max_connections = max_connections;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    return server;
}

static void round_trip(int fd)
{
    char reply[4];
    test_send_all(fd, "ping", 4);
    ck_assert_uint_eq(test_recv_all(fd, reply, 4), 4);
    ck_assert(memcmp(reply, "ping", 4) == 0);
}

static uint64_t total_accepts(corral_server *server)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < corral_server_worker_count(server); i++) {
        struct corral_worker_stats stats;
        corral_server_stats(server, i, &stats);
        sum += stats.accepts;
    }
    return sum;
}

/* Every worker has taken the stop request queued for it (its stop post
 * clears the flag first thing). */
static bool stop_begun(corral_server *server)
{
    for (unsigned i = 0; i < server->worker_count; i++)
        if (atomic_load(&server->workers[i].stop_queued))
            return false;
    return true;
}

struct stopper {
    corral_server *server;
    uint32_t graceful_ms;
    int delay_ms;
};

static void *stop_later(void *arg)
{
    struct stopper *s = arg;
    test_sleep_ms(s->delay_ms);
    corral_server_stop(s->server, s->graceful_ms);
    return NULL;
}

START_TEST(graceful_stop_lets_open_connections_finish)
{
    corral_server *server = new_server(2, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = test_connect(port);
        round_trip(fds[i]);
    }
    corral_server_stop(server, 5000);
    test_wait_for(stop_begun(server), TEST_WAIT_MS, "the workers did not begin the stop");
    /* In-flight connections are still served after the stop began... */
    for (int i = 0; i < 4; i++)
        round_trip(fds[i]);
    /* ...and the server exits as soon as the last one closes. */
    uint64_t start = test_now_ms();
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    corral_server_wait(server);
    ck_assert_uint_lt(test_now_ms() - start, 2000);
    ck_assert_uint_eq(total_accepts(server), 4);
    corral_server_free(server);
}
END_TEST

START_TEST(graceful_stop_ends_at_its_timeout)
{
    corral_server *server = new_server(2, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    int fd = test_connect(port);
    round_trip(fd);
    uint64_t start = test_now_ms();
    corral_server_stop(server, 300);
    corral_server_wait(server);
    uint64_t took = test_now_ms() - start;
    ck_assert_uint_ge(took, 250);
    ck_assert_uint_lt(took, 2000);
    char byte;
    ck_assert_int_le(recv(fd, &byte, 1, 0), 0); /* closed by the server */
    close(fd);
    corral_server_free(server);
}
END_TEST

static void close_on_stop(corral_conn *conn)
{
    corral_conn_close(conn);
}

static const struct corral_conn_handler closing_handler = {
    .on_data = echo_on_data,
    .on_stop = close_on_stop,
};

START_TEST(graceful_stop_asks_connections_to_close)
{
    corral_server *server = new_server(2, 0);
    int port = test_start_server(server, &closing_handler, NULL);
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = test_connect(port);
        round_trip(fds[i]);
    }
    uint64_t start = test_now_ms();
    corral_server_stop(server, 10000);
    /* Each client sees an orderly close, then closes its end. */
    for (int i = 0; i < 8; i++) {
        char byte;
        ck_assert_int_eq(recv(fds[i], &byte, 1, 0), 0);
        close(fds[i]);
    }
    corral_server_wait(server);
    ck_assert_uint_lt(test_now_ms() - start, 2000);
    corral_server_free(server);
}
END_TEST

START_TEST(fast_stop_aborts_connections)
{
    corral_server *server = new_server(2, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    int fd = test_connect(port);
    round_trip(fd);
    struct stopper stopper = {server, 0, 10};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, stop_later, &stopper), 0);
    uint64_t start = test_now_ms();
    corral_server_wait(server);
    ck_assert_uint_lt(test_now_ms() - start, 1000);
    pthread_join(thread, NULL);
    char byte;
    /* Cut off, not ended: a reset, so a peer reading to the end of the
     * stream does not take what it got for all of it. */
    ck_assert_int_eq(recv(fd, &byte, 1, 0), -1);
    ck_assert_int_eq(errno, ECONNRESET);
    close(fd);
    corral_server_free(server);
}
END_TEST

START_TEST(connection_limit_pauses_and_rejoins)
{
    enum { LIMIT = 10 };
    corral_server *server = new_server(1, LIMIT);
    int port = test_start_server(server, &echo_handler, NULL);
    int fds[LIMIT];
    for (int i = 0; i < LIMIT; i++) {
        fds[i] = test_connect(port);
        round_trip(fds[i]);
    }
    /* One over the limit: the kernel completes the handshake, but the
     * worker has left the accept rotation, so nobody answers. */
    int extra = test_connect(port);
    test_send_all(extra, "ping", 4);
    ck_assert(!test_answers_within(extra, 300));
    struct corral_worker_stats stats;
    corral_server_stats(server, 0, &stats);
    ck_assert_uint_eq(stats.accept_pauses, 1);
    ck_assert_uint_eq(stats.connections_active, LIMIT);
    /* Back under the low-water mark (90%): accepting resumes. */
    close(fds[0]);
    ck_assert(test_answers_within(extra, 2000));
    close(extra);
    for (int i = 1; i < LIMIT; i++)
        close(fds[i]);
    test_stop_server(server);
}
END_TEST

static _Atomic int emfile_log_lines;

static void count_emfile_lines(enum corral_log_level level, const char *message, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(message, "pausing accepts") != NULL)
        atomic_fetch_add(&emfile_log_lines, 1);
}

START_TEST(out_of_fds_pauses_instead_of_spinning)
{
    corral_set_logger(count_emfile_lines, NULL);
    corral_server *server = new_server(1, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    enum { CLIENTS = 4 };
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* No descriptor left for the worker's accept4(): lower the limit, then
     * fill every free number below it. */
    struct rlimit saved, tight;
    getrlimit(RLIMIT_NOFILE, &saved);
    tight = saved;
    tight.rlim_cur = (rlim_t)fds[CLIENTS - 1] + 16;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &tight), 0);
    int fillers[64], filler_count = 0;
    while (filler_count < 64 && (fillers[filler_count] = dup(0)) != -1)
        filler_count++;
    ck_assert_int_eq(errno, EMFILE);

    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < CLIENTS; i++) {
        ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&addr, sizeof(addr)), 0);
        test_send_all(fds[i], "ping", 4);
    }
    /* Only time shows that the paused accepts are retried slowly rather
     * than spun on, so this waits out five retry periods. */
    test_sleep_ms(500);
    struct corral_worker_stats stats;
    corral_server_stats(server, 0, &stats);
    ck_assert_uint_eq(stats.accepts, 0);
    /* Paused and retried every 100 ms, not spinning on EMFILE. */
    ck_assert_uint_ge(stats.accept_wakeups, 2);
    ck_assert_uint_le(stats.accept_wakeups, 12);
    ck_assert_int_eq(atomic_load(&emfile_log_lines), 1);

    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
    for (int i = 0; i < filler_count; i++)
        close(fillers[i]);
    for (int i = 0; i < CLIENTS; i++) {
        ck_assert(test_answers_within(fds[i], 2000));
        close(fds[i]);
    }
    test_stop_server(server);
    corral_set_logger(NULL, NULL);
}
END_TEST

START_TEST(counters_add_up)
{
    corral_server *server = new_server(4, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    for (int i = 0; i < 40; i++) {
        int fd = test_connect(port);
        round_trip(fd);
        close(fd);
    }
    ck_assert_uint_eq(total_accepts(server), 40);
    uint64_t wakeups = 0, wasted = 0;
    for (unsigned i = 0; i < 4; i++) {
        struct corral_worker_stats stats;
        corral_server_stats(server, i, &stats);
        wakeups += stats.accept_wakeups;
        wasted += stats.accept_wasted;
        ck_assert_uint_le(stats.accept_wasted, stats.accept_wakeups);
    }
    ck_assert_uint_ge(wakeups - wasted, 1);
    test_stop_server(server);
}
END_TEST

/* ----------------------------------------------------------------- signals */

static void on_usr1(corral_server *server, int signo, void *arg)
{
    (void)server;
    (void)signo;
    int fd = *(int *)arg;
    ck_assert_int_eq(write(fd, "U", 1), 1);
}

/* Forks a process running corral_server_run(); returns its pid and the
 * port, and a pipe on which it reports SIGUSR1. */
static pid_t spawn_server(int *port, int *usr1_pipe)
{
    int report[2], usr1[2];
    ck_assert_int_eq(pipe(report), 0);
    ck_assert_int_eq(pipe(usr1), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(report[0]);
        close(usr1[0]);
        corral_server *server = new_server(2, 0);
        corral_listener *listener;
        if (corral_server_listen(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &listener) != 0)
            _exit(2);
        corral_server_on_signal(server, SIGUSR1, on_usr1, &usr1[1]);
        int bound = corral_listener_port(listener);
        if (write(report[1], &bound, sizeof(bound)) != sizeof(bound))
            _exit(2);
        close(report[1]);
        int err = corral_server_run(server);
        corral_server_free(server);
        _exit(err == 0 ? 0 : 1);
    }
    close(report[1]);
    close(usr1[1]);
    ck_assert_int_eq(read(report[0], port, sizeof(*port)), sizeof(*port));
    close(report[0]);
    *usr1_pipe = usr1[0];
    return pid;
}

START_TEST(signals_reach_the_main_loop)
{
    int port, usr1;
    pid_t pid = spawn_server(&port, &usr1);
    int fd = test_connect(port);
    round_trip(fd);

    kill(pid, SIGUSR1);
    char byte;
    ck_assert_int_eq(read(usr1, &byte, 1), 1);
    round_trip(fd); /* a custom handler leaves the server running */

    kill(pid, SIGTERM);
    /* The child shows nothing when its stop begins: give the signal time
     * to arrive, so that the round trip below runs during the stop. */
    test_sleep_ms(100);
    round_trip(fd); /* graceful: the open connection is still served */
    close(fd);
    ck_assert_int_eq(test_wait_exit(pid, 5000), 0);
    close(usr1);
}
END_TEST

START_TEST(sigquit_stops_at_once)
{
    int port, usr1;
    pid_t pid = spawn_server(&port, &usr1);
    int fd = test_connect(port);
    round_trip(fd);
    kill(pid, SIGQUIT);
    ck_assert_int_eq(test_wait_exit(pid, 2000), 0);
    close(fd);
    close(usr1);
}
END_TEST

/* A stop from a worker's first callback, made while the main thread is
 * still starting the other workers, must reach every one of them. */
static void stop_on_open(corral_conn *conn)
{
    corral_server_stop(corral_worker_server(corral_conn_worker(conn)), 0);
}

static const struct corral_conn_handler stop_on_open_handler = {
    .on_open = stop_on_open,
    .on_data = echo_on_data,
};

struct waiter {
    corral_server *server;
    atomic_bool done;
};

static void *wait_for_workers(void *arg)
{
    struct waiter *w = arg;
    corral_server_wait(w->server);
    atomic_store(&w->done, true);
    return NULL;
}

START_TEST(a_stop_from_a_worker_during_start_reaches_every_worker)
{
    uint64_t until = test_now_ms() + 10000;
    int rounds = 0;
    for (; rounds < 40 && test_now_ms() < until; rounds++) {
        struct corral_server_config config;
        corral_server_config_init(&config);
        config.workers = 16;
        config.wakeup = CORRAL_WAKEUP_HERD; /* every worker may take it */
        corral_server *server;
        ck_assert_int_eq(corral_server_new(&config, &server), 0);
        corral_listener *listener;
        ck_assert_int_eq(corral_server_listen(server, "127.0.0.1:0", NULL, &stop_on_open_handler,
                                              NULL, &listener),
                         0);
        /* Queued before the start: the first worker up accepts it at once. */
        int fd = test_connect(corral_listener_port(listener));
        ck_assert_int_eq(corral_server_start(server), 0);

        struct waiter w = {.server = server};
        pthread_t thread;
        ck_assert_int_eq(pthread_create(&thread, NULL, wait_for_workers, &w), 0);
        test_wait_for(atomic_load(&w.done), TEST_WAIT_MS,
                      "round %d: workers still running 10 s after the stop", rounds);
        pthread_join(thread, NULL);
        close(fd);
        corral_server_free(server);
    }
    ck_assert_int_gt(rounds, 0);
}
END_TEST

/* corral_server_close_listeners() waits for the workers to let go of the
 * sockets; one that has exited already has let go, and must not be waited
 * for. */
static atomic_bool first_worker_stopping;

static void stop_own_loop(void *arg)
{
    corral_loop_stop(arg);
    atomic_store(&first_worker_stopping, true);
}

static void *close_listeners(void *arg)
{
    struct waiter *w = arg;
    corral_server_close_listeners(w->server);
    atomic_store(&w->done, true);
    return NULL;
}

START_TEST(closing_listeners_does_not_wait_for_a_worker_that_exited)
{
    corral_server *server = new_server(2, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    corral_worker *first = corral_server_worker(server, 0);
    ck_assert_int_eq(corral_worker_post(first, stop_own_loop, corral_worker_loop(first)), 0);
    test_wait_for(atomic_load(&first_worker_stopping), TEST_WAIT_MS, "worker 0 did not stop");
    /* Worker 0 ends its last iteration and exits. */
    test_wait_for(atomic_load(&server->workers_running) == 1, TEST_WAIT_MS,
                  "worker 0 did not exit");

    struct waiter w = {.server = server};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, close_listeners, &w), 0);
    test_wait_for(atomic_load(&w.done), TEST_WAIT_MS, "close_listeners still waiting after 10 s");
    pthread_join(thread, NULL);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), -1); /* closed */
    close(fd);
    test_stop_server(server);
}
END_TEST

/* A worker runs with cancellation disabled and of the asynchronous type
 * (worker.c: glibc's cancellation points then skip two atomic operations
 * per system call): read on the worker, and a pthread_cancel() of it is
 * never acted on. */
struct cancel_seen {
    int state, type;
    atomic_bool read;
};

static void read_cancel_settings(void *arg)
{
    struct cancel_seen *seen = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &seen->state);
    pthread_setcancelstate(seen->state, NULL);
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &seen->type);
    pthread_setcanceltype(seen->type, NULL);
    atomic_store(&seen->read, true);
}

START_TEST(workers_are_never_cancelled)
{
    corral_server *server = new_server(1, 0);
    int port = test_start_server(server, &echo_handler, NULL);
    corral_worker *worker = corral_server_worker(server, 0);
    struct cancel_seen seen = {.state = -1, .type = -1};
    ck_assert_int_eq(corral_worker_post(worker, read_cancel_settings, &seen), 0);
    test_wait_for(atomic_load(&seen.read), TEST_WAIT_MS, "the worker ran no post");
    ck_assert_int_eq(seen.state, PTHREAD_CANCEL_DISABLE);
    ck_assert_int_eq(seen.type, PTHREAD_CANCEL_ASYNCHRONOUS);

    ck_assert_int_eq(pthread_cancel(worker->thread), 0);
    /* Its next epoll_wait() and the echo's recv() and send() are all
     * cancellation points: a worker that took the request would be gone. */
    for (int i = 0; i < 3; i++) {
        int fd = test_connect(port);
        round_trip(fd);
        close(fd);
    }
    ck_assert_uint_eq(atomic_load(&server->workers_running), 1);
    test_stop_server(server);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/server");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, graceful_stop_lets_open_connections_finish);
    tcase_add_test(tc, graceful_stop_ends_at_its_timeout);
    tcase_add_test(tc, graceful_stop_asks_connections_to_close);
    tcase_add_test(tc, fast_stop_aborts_connections);
    tcase_add_test(tc, connection_limit_pauses_and_rejoins);
    tcase_add_test(tc, out_of_fds_pauses_instead_of_spinning);
    tcase_add_test(tc, counters_add_up);
    tcase_add_test(tc, signals_reach_the_main_loop);
    tcase_add_test(tc, sigquit_stops_at_once);
    tcase_add_test(tc, a_stop_from_a_worker_during_start_reaches_every_worker);
    tcase_add_test(tc, closing_listeners_does_not_wait_for_a_worker_that_exited);
    tcase_add_test(tc, workers_are_never_cancelled);
    suite_add_tcase(suite, tc);
    return suite;
}
