/*
 * test_listener.c: address parsing and formatting, listeners on ephemeral
 * v4, v6 and unix addresses, and clean failures.
 */
#include "../helpers.h"

#include <errno.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const struct {
    const char *text;
    int error;
    const char *formatted;
} address_cases[] = {
    {"127.0.0.1:8080", 0, "127.0.0.1:8080"},
    {"[::1]:443", 0, "[::1]:443"},
    {"*:80", 0, "0.0.0.0:80"},
    {"80", 0, "0.0.0.0:80"},     /* a port alone, as nginx's "listen 80" */
    {"localhost:9090", 0, NULL}, /* 127.0.0.1 or ::1, by the resolver */
    {"unix:/tmp/corral.sock", 0, "unix:/tmp/corral.sock"},
    {"127.0.0.1", -EINVAL, NULL},
    {"127.0.0.1:", -EINVAL, NULL},
    {"127.0.0.1:65536", -EINVAL, NULL},
    {"127.0.0.1:-1", -EINVAL, NULL},
    {"127.0.0.1:80x", -EINVAL, NULL},
    {"[::1:80", -EINVAL, NULL},
    {"no-such-host.invalid:80", -ENOENT, NULL},
    {"80x", -EINVAL, NULL},
    {"unix:", -EINVAL, NULL},
    {"", -EINVAL, NULL},
};

START_TEST(addresses_parse_and_format)
{
    for (size_t i = 0; i < sizeof(address_cases) / sizeof(address_cases[0]); i++) {
        struct sockaddr_storage addr;
        socklen_t len;
        int err = corral_parse_address(address_cases[i].text, &addr, &len);
        ck_assert_msg(err == address_cases[i].error, "\"%s\": got %d, want %d",
                      address_cases[i].text, err, address_cases[i].error);
        if (err != 0 || address_cases[i].formatted == NULL)
            continue;
        char text[128];
        ck_assert_int_eq(corral_format_address((struct sockaddr *)&addr, len, text, sizeof(text)),
                         0);
        ck_assert_str_eq(text, address_cases[i].formatted);
    }
}
END_TEST

static size_t echo_on_data(corral_conn *conn, const char *data, size_t len)
{
    corral_conn_write(conn, data, len);
    return len;
}

static const struct corral_conn_handler echo_handler = {.on_data = echo_on_data};

static void check_echo_on(const char *address_pattern)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 2;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    corral_listener *listener;
    ck_assert_int_eq(
        corral_server_listen(server, address_pattern, NULL, &echo_handler, NULL, &listener), 0);
    char bound[128];
    ck_assert_int_eq(corral_listener_address(listener, bound, sizeof(bound)), 0);
    ck_assert_str_ne(bound, address_pattern); /* port 0 became a real port */
    ck_assert_int_eq(corral_server_start(server), 0);
    for (int i = 0; i < 4; i++) {
        int fd = test_connect_address(bound);
        char reply[5];
        test_send_all(fd, "hello", 5);
        ck_assert_uint_eq(test_recv_all(fd, reply, 5), 5);
        ck_assert(memcmp(reply, "hello", 5) == 0);
        close(fd);
    }
    test_stop_server(server);
}

START_TEST(ephemeral_ipv4_listener)
{
    check_echo_on("127.0.0.1:0");
}
END_TEST

START_TEST(ephemeral_ipv6_listener)
{
    check_echo_on("[::1]:0");
}
END_TEST

START_TEST(unix_socket_listener)
{
    char dir[] = "/tmp/corral-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/echo.sock", dir);

    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    char address[160];
    snprintf(address, sizeof(address), "unix:%s", path);
    ck_assert_int_eq(corral_server_listen(server, address, NULL, &echo_handler, NULL, NULL), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = test_connect_address(address);
    char reply[4];
    test_send_all(fd, "unix", 4);
    ck_assert_uint_eq(test_recv_all(fd, reply, 4), 4);
    ck_assert(memcmp(reply, "unix", 4) == 0);
    close(fd);
    test_stop_server(server);
    ck_assert_int_eq(access(path, F_OK), -1); /* the socket file is removed */
    rmdir(dir);
}
END_TEST

static _Atomic int accepted_nodelay = -1;

static void record_nodelay(corral_conn *conn)
{
    int on = 0;
    socklen_t len = sizeof(on);
    getsockopt(corral_conn_fd(conn), IPPROTO_TCP, TCP_NODELAY, &on, &len);
    atomic_store(&accepted_nodelay, on);
}

static const struct corral_conn_handler nodelay_handler = {
    .on_open = record_nodelay,
    .on_data = echo_on_data,
};

START_TEST(accepted_sockets_have_nodelay)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    int port = test_start_server(server, &nodelay_handler, NULL);
    int client = test_connect(port);
    char reply[1];
    test_send_all(client, "a", 1);
    ck_assert_uint_eq(test_recv_all(client, reply, 1), 1);
    ck_assert_int_eq(atomic_load(&accepted_nodelay), 1);
    close(client);
    test_stop_server(server);
}
END_TEST

/* A passed listening socket that its owner shuts down makes accept4()
 * fail with EINVAL while epoll keeps reporting it ready: the worker must
 * stop watching it, not spin on it. */
START_TEST(a_socket_that_stops_listening_does_not_spin_the_worker)
{
    int port;
    int fd = test_listen(&port, 16);
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    config.wakeup = CORRAL_WAKEUP_HERD;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    ck_assert_int_eq(corral_server_listen_fds(server, &fd, 1, NULL, &nodelay_handler, NULL, NULL),
                     0);
    ck_assert_int_eq(corral_server_start(server), 0);
    shutdown(fd, SHUT_RDWR);
    /* Only time shows that the worker does not spin: a spinning one
     * wakes thousands of times in this window, a correct one a few. */
    test_sleep_ms(300);
    struct corral_worker_stats stats;
    corral_server_stats(server, 0, &stats);
    ck_assert_msg(stats.accept_wakeups < 10, "%llu wakeups in 300 ms",
                  (unsigned long long)stats.accept_wakeups);
    test_stop_server(server);
    close(fd);
}
END_TEST

/* A layout change: the successor joins the old sockets' group with a
 * random-pick program on it, which must come off once the old sockets are
 * gone (a detach then finds no program: ENOENT). */
START_TEST(a_joined_group_loses_its_program_once_settled)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 2;
    config.wakeup = CORRAL_WAKEUP_REUSEPORT;
    corral_server *old, *joined;
    ck_assert_int_eq(corral_server_new(&config, &old), 0);
    config.workers = 3;
    ck_assert_int_eq(corral_server_new(&config, &joined), 0);
    corral_listener *old_listener, *listener;
    ck_assert_int_eq(
        corral_server_listen(old, "127.0.0.1:0", NULL, &echo_handler, NULL, &old_listener), 0);
    const int *old_fds, *fds;
    unsigned count = corral_listener_fds(old_listener, &old_fds);
    ck_assert_uint_eq(count, 2);
    ck_assert_int_eq(
        corral_server_listen_beside(joined, old_fds, count, NULL, &echo_handler, NULL, &listener),
        0);
    ck_assert_uint_eq(corral_listener_fds(listener, &fds), 3);
    corral_server_close_listeners(old);
    corral_server_listeners_settled(joined);
    int unused = 0;
    errno = 0;
    ck_assert_int_eq(
        setsockopt(fds[0], SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof(unused)), -1);
    ck_assert_int_eq(errno, ENOENT);
    corral_server_free(joined);
    corral_server_free(old);
}
END_TEST

/* Another server's listener holds the port, however many sockets each has:
 * a new group must not join a group it did not make (SO_REUSEPORT would let
 * it, for the same user), which would split the port's connections. */
/* A listening socket the server does not hold, about to be closed (one a
 * binary upgrade passed in and a new layout no longer needs): what it
 * queued is served by the server's workers, and an empty one, even a
 * blocking one, returns at once. */
START_TEST(take_queue_serves_what_a_foreign_socket_queued)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 2;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    corral_listener *listener;
    ck_assert_int_eq(
        corral_server_listen(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &listener), 0);
    int port;
    /* A listener of the test's own, and a blocking one. */
    int other = test_listen(&port, 16);
    ck_assert_int_eq(corral_listener_take_queue(listener, other), -EINVAL); /* not running */

    ck_assert_int_eq(corral_server_start(server), 0);
    int clients[3];
    for (int i = 0; i < 3; i++)
        clients[i] = test_connect(port);
    ck_assert_int_eq(corral_listener_take_queue(listener, other), 0);
    ck_assert_int_eq(corral_listener_take_queue(listener, other), 0); /* empty */
    close(other);
    for (int i = 0; i < 3; i++) {
        char reply[4];
        test_send_all(clients[i], "take", 4);
        ck_assert_uint_eq(test_recv_all(clients[i], reply, 4), 4);
        ck_assert(memcmp(reply, "take", 4) == 0);
        close(clients[i]);
    }
    test_stop_server(server);
}
END_TEST

START_TEST(address_in_use_fails_cleanly)
{
    static const unsigned workers[] = {1, 2, 4};
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = workers[_i % 3];
    config.wakeup = CORRAL_WAKEUP_REUSEPORT;
    corral_server *first, *second;
    ck_assert_int_eq(corral_server_new(&config, &first), 0);
    /* The same count, then (IPv6) another. */
    config.workers = workers[(_i + _i / 3) % 3];
    ck_assert_int_eq(corral_server_new(&config, &second), 0);
    corral_listener *listener;
    ck_assert_int_eq(corral_server_listen(first, _i < 3 ? "127.0.0.1:0" : "[::1]:0", NULL,
                                          &echo_handler, NULL, &listener),
                     0);
    char bound[64];
    corral_listener_address(listener, bound, sizeof(bound));

    int fds_before = test_fd_count();
    ck_assert_int_eq(corral_server_listen(second, bound, NULL, &echo_handler, NULL, NULL),
                     -EADDRINUSE);
    ck_assert_int_eq(test_fd_count(), fds_before);
    corral_server_free(second);
    corral_server_free(first);
}
END_TEST

START_TEST(bad_addresses_fail_cleanly)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    int fds_before = test_fd_count();
    ck_assert_int_eq(corral_server_listen(server, "256.1.1.1:80", NULL, &echo_handler, NULL, NULL),
                     -EINVAL);
    ck_assert_int_eq(corral_server_listen(server, "127.0.0.1", NULL, &echo_handler, NULL, NULL),
                     -EINVAL);
    /* Parses, but no interface has it. */
    ck_assert_int_eq(corral_server_listen(server, "192.0.2.1:0", NULL, &echo_handler, NULL, NULL),
                     -EADDRNOTAVAIL);
    ck_assert_int_eq(test_fd_count(), fds_before);
    corral_server_free(server);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/listener");
    TCase *tc = tcase_create("listener");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, addresses_parse_and_format);
    tcase_add_test(tc, ephemeral_ipv4_listener);
    tcase_add_test(tc, ephemeral_ipv6_listener);
    tcase_add_test(tc, unix_socket_listener);
    tcase_add_test(tc, accepted_sockets_have_nodelay);
    tcase_add_test(tc, a_socket_that_stops_listening_does_not_spin_the_worker);
    tcase_add_test(tc, a_joined_group_loses_its_program_once_settled);
    tcase_add_test(tc, take_queue_serves_what_a_foreign_socket_queued);
    tcase_add_loop_test(tc, address_in_use_fails_cleanly, 0, 6);
    tcase_add_test(tc, bad_addresses_fail_cleanly);
    suite_add_tcase(suite, tc);
    return suite;
}
