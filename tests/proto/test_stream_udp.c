/*
 * test_stream_udp.c: the stream proxy's udp listens, through the daemon:
 * DNS queries to the tests' DNS server, a session per client address and
 * what ends it (proxy_responses, proxy_requests, proxy_timeout, a server
 * that refuses), allow/deny, the access log, many clients at once, and a
 * reload that keeps the port.
 */
#include "tests/daemon.h"
#include "tests/dns.h"
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Starts the daemon (2 workers) with `top` at its top level and `stream`
 * as its stream block's body; d->port is the last udp listen's port. */
static void start_top(struct test_daemon *d, const char *top, const char *stream)
{
    test_daemon_init(d, "corral");
    char config[8192];
    snprintf(config, sizeof(config),
             "workers 2;\ndrain_timeout 2s;\n%s\nadmin { listen 127.0.0.2:0; }\nstream {\n"
             "  log_format s '$remote_addr $status $bytes_sent $bytes_received "
             "\"$upstream_addr\"';\n%s\n}\n",
             top, stream);
    test_daemon_write_config(d, config);
    test_daemon_start(d);
}

static void start_with(struct test_daemon *d, const char *stream)
{
    start_top(d, "", stream);
}

/* A UDP socket connected to 127.0.0.1:port, 5 s receive timeout. */
static int client(int port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* A query for "app.test" A with `id`: 26 bytes. */
#define QUERY_LEN 26
static void query(int fd, uint16_t id)
{
    uint8_t q[QUERY_LEN] = {(uint8_t)(id >> 8),
                            (uint8_t)id,
                            0x01,
                            0,
                            0,
                            1,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            3,
                            'a',
                            'p',
                            'p',
                            4,
                            't',
                            'e',
                            's',
                            't',
                            0,
                            0,
                            1,
                            0,
                            1};
    ck_assert_int_eq(send(fd, q, sizeof(q), 0), (ssize_t)sizeof(q));
}

/* Reads the answer to query `id`: one A record, 127.0.0.9.  Returns its
 * length. */
static ssize_t answer(int fd, uint16_t id)
{
    uint8_t a[512];
    ssize_t n = recv(fd, a, sizeof(a), 0);
    ck_assert_int_gt(n, QUERY_LEN);
    ck_assert_uint_eq((unsigned)(a[0] << 8 | a[1]), id);
    ck_assert_uint_eq(a[2] & 0x80, 0x80); /* a response */
    ck_assert_uint_eq(a[7], 1);
    ck_assert(memcmp(a + n - 4, "\x7f\x00\x00\x09", 4) == 0);
    return n;
}

/* How many lines of `path` contain `text`. */
static unsigned lines_with(const char *path, const char *text)
{
    char *log = test_read_file(path);
    unsigned n = 0;
    for (const char *at = log; (at = strstr(at, text)) != NULL; at += strlen(text))
        n++;
    free(log);
    return n;
}

/* proxy_responses 1: each answer ends its session, so each query is a
 * session of its own, logged at once. */
START_TEST(dns_queries_each_end_their_session)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char log[PATH_MAX], stream[PATH_MAX + 512];
    test_daemon_file(log, sizeof(log), "udp.log");
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_responses 1;\n"
             "    proxy_timeout 10s; access_log %s s; }",
             dns->port, log);
    struct test_daemon d;
    start_with(&d, stream);
    ssize_t answer_len = 0;
    for (int c = 0; c < 10; c++) {
        int fd = client(d.port);
        for (uint16_t i = 0; i < 3; i++) {
            query(fd, (uint16_t)(c * 16 + i));
            answer_len = answer(fd, (uint16_t)(c * 16 + i));
        }
        close(fd);
    }
    ck_assert_uint_eq(atomic_load(&dns->queries), 30);
    char expect[128];
    snprintf(expect, sizeof(expect), "127.0.0.1 200 %zd %d \"127.0.0.1:%d\"\n", answer_len,
             QUERY_LEN, dns->port);
    /* Logged as they end, well before the 10 s timeout. */
    test_wait_for(lines_with(log, expect) == 30, 5000, "30 sessions not logged:\n%s",
                  test_read_file(log));
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* Without proxy_responses, a client's datagrams are one session, which
 * ends when proxy_timeout passes without a datagram either way. */
START_TEST(a_client_is_one_session_until_the_timeout)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char log[PATH_MAX], stream[PATH_MAX + 512];
    test_daemon_file(log, sizeof(log), "udp.log");
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_timeout 300ms;\n"
             "    access_log %s s; }",
             dns->port, log);
    struct test_daemon d;
    start_with(&d, stream);
    int fd = client(d.port);
    ssize_t total = 0;
    for (uint16_t i = 0; i < 3; i++) {
        query(fd, i);
        total += answer(fd, i);
    }
    char expect[128];
    snprintf(expect, sizeof(expect), "127.0.0.1 200 %zd %d \"127.0.0.1:%d\"\n", total,
             3 * QUERY_LEN, dns->port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    ck_assert_uint_eq(lines_with(log, "127.0.0.1 "), 1);
    close(fd);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* proxy_requests 2: a session takes two datagrams; the next ones from
 * the same client make another. */
START_TEST(proxy_requests_starts_a_new_session)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char log[PATH_MAX], stream[PATH_MAX + 512];
    test_daemon_file(log, sizeof(log), "udp.log");
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_timeout 300ms;\n"
             "    proxy_requests 2; access_log %s s; }",
             dns->port, log);
    struct test_daemon d;
    start_with(&d, stream);
    int fd = client(d.port);
    for (uint16_t i = 0; i < 4; i++) {
        query(fd, i);
        answer(fd, i);
    }
    char expect[32];
    snprintf(expect, sizeof(expect), " %d \"127.0.0.1:", 2 * QUERY_LEN);
    test_wait_for(lines_with(log, expect) == 2, TEST_WAIT_MS, "not two sessions:\n%s",
                  test_read_file(log));
    close(fd);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* A server that never answers: the session ends at proxy_timeout, 502
 * when proxy_responses says an answer was owed, 200 when none was
 * counted (nginx's statuses).  A server whose port is closed refuses:
 * 502 at once. */
START_TEST(silent_and_refusing_servers_end_sessions)
{
    int silent_port, closed_port;
    int silent = test_bind_udp(&silent_port);
    int closed = test_bind_udp(&closed_port);
    /* Connected elsewhere, the socket keeps the port from other tests while
     * datagrams from anyone else find no socket and draw ICMP port
     * unreachable.  A closed socket's port could be bound again meanwhile. */
    struct sockaddr_in nowhere = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(1)};
    ck_assert_int_eq(connect(closed, (struct sockaddr *)&nowhere, sizeof(nowhere)), 0);

    int owed_port, free_port, stop_port;
    int r1 = test_reserve_port(&owed_port), r2 = test_reserve_port(&free_port),
        r3 = test_reserve_port(&stop_port);
    close(r1);
    close(r2);
    close(r3);
    char log[PATH_MAX], stream[PATH_MAX + 1024];
    test_daemon_file(log, sizeof(log), "udp.log");
    snprintf(stream, sizeof(stream),
             "  access_log %s s;\n  proxy_timeout 300ms;\n"
             "  server { listen 127.0.0.1:%d udp; proxy_pass 127.0.0.1:%d; proxy_responses 1; }\n"
             "  server { listen 127.0.0.1:%d udp; proxy_pass 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.2:%d udp; proxy_pass 127.0.0.1:%d; proxy_responses 2; "
             "proxy_timeout 10s; }\n"
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_responses 1; "
             "proxy_timeout 10s; }",
             log, owed_port, silent_port, free_port, silent_port, stop_port, silent_port,
             closed_port);
    struct test_daemon d;
    start_with(&d, stream);
    int fd = client(owed_port);
    query(fd, 1);
    char expect[128];
    snprintf(expect, sizeof(expect), "127.0.0.1 502 0 %d \"127.0.0.1:%d\"\n", QUERY_LEN,
             silent_port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    close(fd);
    fd = client(free_port);
    query(fd, 2);
    snprintf(expect, sizeof(expect), "127.0.0.1 200 0 %d \"127.0.0.1:%d\"\n", QUERY_LEN,
             silent_port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    close(fd);
    /* The refusal ends the session long before its 10 s timeout. */
    fd = client(d.port);
    uint64_t start = test_now_ms();
    query(fd, 3);
    snprintf(expect, sizeof(expect), "127.0.0.1 502 0 %d \"127.0.0.1:%d\"\n", QUERY_LEN,
             closed_port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    ck_assert_uint_lt(test_now_ms() - start, 5000);
    close(fd);
    /* A session still open when the daemon stops ends with it, logged. */
    uint8_t byte;
    while (recv(silent, &byte, 1, MSG_DONTWAIT) == 1) /* the earlier sessions' */
        ;
    int to_stop = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in stop_addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)stop_port)};
    inet_pton(AF_INET, "127.0.0.2", &stop_addr.sin_addr);
    ck_assert_int_eq(sendto(to_stop, "abc", 3, 0, (struct sockaddr *)&stop_addr, sizeof(stop_addr)),
                     3);
    test_wait_for(recv(silent, &byte, 1, MSG_DONTWAIT) == 1, TEST_WAIT_MS,
                  "the datagram did not reach the server");
    ck_assert_uint_eq(lines_with(log, " 3 \""), 0);
    test_daemon_stop(&d);
    snprintf(expect, sizeof(expect), "127.0.0.1 502 0 3 \"127.0.0.1:%d\"\n", silent_port);
    ck_assert_uint_eq(lines_with(log, expect), 1);
    close(to_stop);
    close(silent);
    close(closed);
}
END_TEST

START_TEST(deny_drops_and_logs)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char log[PATH_MAX], stream[PATH_MAX + 512];
    test_daemon_file(log, sizeof(log), "udp.log");
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; deny 127.0.0.1;\n"
             "    access_log %s s; }",
             dns->port, log);
    struct test_daemon d;
    start_with(&d, stream);
    int fd = client(d.port);
    query(fd, 1);
    free(test_wait_file(log, "127.0.0.1 403 0 0 \"-\"\n", TEST_WAIT_MS));
    ck_assert_uint_eq(atomic_load(&dns->queries), 0);
    close(fd);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* 300 clients at once, each its own address: every query answered, over
 * both workers' sockets. */
START_TEST(many_clients_at_once)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char stream[512];
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_responses 1; }",
             dns->port);
    struct test_daemon d;
    start_with(&d, stream);
    enum { CLIENTS = 300 };
    static int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = client(d.port);
        query(fds[i], (uint16_t)i);
    }
    for (int i = 0; i < CLIENTS; i++) {
        answer(fds[i], (uint16_t)i);
        close(fds[i]);
    }
    ck_assert_uint_eq(atomic_load(&dns->queries), CLIENTS);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* A reload keeps the udp sockets: the same port answers, from the new
 * generation. */
START_TEST(reload_keeps_the_port)
{
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char stream[512];
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_responses 1; }",
             dns->port);
    struct test_daemon d;
    start_with(&d, stream);
    int fd = client(d.port);
    query(fd, 1);
    answer(fd, 1);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    free(test_daemon_wait_log(&d, "generation 1 finished"));
    query(fd, 2);
    answer(fd, 2);
    char *text = test_daemon_log(&d);
    const char *listening = strstr(text, "udp\n");
    ck_assert_ptr_nonnull(listening);
    ck_assert_ptr_null(strstr(listening + 1, "udp\n")); /* no second "listening on ... udp" */
    free(text);
    close(fd);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* A binary upgrade passes the udp sockets to the new process, which
 * serves the same port: the port was never closed. */
START_TEST(binary_upgrade_passes_the_sockets)
{
    /* The new process is the old one's child: it becomes this one's when
     * the old one exits, to be stopped and waited for. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.9");
    char pid_file[PATH_MAX], top[PATH_MAX + 32], stream[512];
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    snprintf(top, sizeof(top), "pid_file %s;", pid_file);
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 udp; proxy_pass 127.0.0.1:%d; proxy_responses 1; }",
             dns->port);
    struct test_daemon d;
    start_top(&d, top, stream);
    int fd = client(d.port);
    query(fd, 1);
    answer(fd, 1);
    pid_t old = d.pid;
    ck_assert_int_eq(kill(old, SIGUSR2), 0);
    char *log = test_daemon_wait_log(&d, "serves; stopping gracefully");
    const char *at = strstr(log, "upgrade: process ");
    ck_assert_ptr_nonnull(at);
    pid_t pid = (pid_t)atoi(at + strlen("upgrade: process "));
    free(log);
    ck_assert_int_gt(pid, 0);
    int status;
    ck_assert_int_eq(waitpid(old, &status, 0), old);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    d.pid = pid;
    /* The old process is gone: the new one answers on the same port. */
    query(fd, 2);
    answer(fd, 2);
    log = test_daemon_log(&d);
    char expect[64];
    snprintf(expect, sizeof(expect), "socket activation: 127.0.0.1:%d udp", d.port);
    ck_assert_msg(strstr(log, expect) != NULL, "no udp socket passed:\n%s", log);
    free(log);
    close(fd);
    test_daemon_stop(&d);
    dns_free(dns);
}
END_TEST

/* ---------------------------------------------------- udp health checks */

/* A UDP server on 127.0.0.1 that answers each datagram with `reply`
 * (NULL: the datagram itself), until `stop`. */
struct responder {
    int fd, port;
    const char *reply;
    atomic_bool stop;
    pthread_t thread;
};

static void *responder_run(void *arg)
{
    struct responder *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        char buf[2048];
        struct sockaddr_storage from;
        socklen_t len = sizeof(from);
        ssize_t n = recvfrom(r->fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
        if (n < 0)
            continue;
        const char *out = r->reply != NULL ? r->reply : buf;
        size_t out_len = r->reply != NULL ? strlen(r->reply) : (size_t)n;
        (void)sendto(r->fd, out, out_len, 0, (struct sockaddr *)&from, len);
    }
    return NULL;
}

static void responder_start(struct responder *r, const char *reply)
{
    memset(r, 0, sizeof(*r));
    r->reply = reply;
    r->fd = test_bind_udp(&r->port);
    ck_assert_int_eq(pthread_create(&r->thread, NULL, responder_run, r), 0);
}

static void responder_stop(struct responder *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    close(r->fd);
}

/* health_check udp: with a match block, a server that answers what is
 * expected stays up, and one that answers something else, one that
 * never answers and one whose port is closed (ICMP unreachable) go down;
 * without, a server that says nothing stays up (no refusal came) and a
 * closed port goes down. */
START_TEST(udp_health_checks)
{
    struct responder right, wrong;
    responder_start(&right, NULL);
    responder_start(&wrong, "nope");
    int silent_port, closed_port;
    int silent = test_bind_udp(&silent_port);
    close(test_bind_udp(&closed_port)); /* datagrams to it draw ICMP port unreachable */
    char stream[2048];
    snprintf(stream, sizeof(stream),
             "  match hello { send \"hello?\"; expect ~ \"^hel+o\"; }\n"
             "  upstream m { server 127.0.0.1:%d; server 127.0.0.1:%d; server 127.0.0.1:%d;\n"
             "    server 127.0.0.1:%d; health_check udp match=hello interval=50ms "
             "timeout=300ms rise=1 fall=1; }\n"
             "  upstream plain { server 127.0.0.1:%d; server 127.0.0.1:%d;\n"
             "    health_check udp interval=50ms timeout=300ms rise=1 fall=1; }\n"
             "  server { listen 127.0.0.1:0 udp; proxy_pass m; }\n"
             "  server { listen 127.0.0.2:0 udp; proxy_pass plain; }",
             right.port, wrong.port, silent_port, closed_port, silent_port, closed_port);
    struct test_daemon d;
    start_with(&d, stream);
    char line[160];
    snprintf(line, sizeof(line),
             "upstream m: 127.0.0.1:%d is down: 1 failed checks (unexpected response)", wrong.port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    snprintf(line, sizeof(line), "upstream m: 127.0.0.1:%d is down: 1 failed checks (timeout)",
             silent_port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    snprintf(line, sizeof(line),
             "upstream m: 127.0.0.1:%d is down: 1 failed checks (Connection refused)", closed_port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    snprintf(line, sizeof(line),
             "upstream plain: 127.0.0.1:%d is down: 1 failed checks (Connection refused)",
             closed_port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    test_sleep_ms(400); /* more than a timeout: the silent server had its checks */
    char *log = test_read_file(d.log);
    snprintf(line, sizeof(line), "127.0.0.1:%d is down", right.port);
    ck_assert_msg(strstr(log, line) == NULL, "%s", log);
    snprintf(line, sizeof(line), "upstream plain: 127.0.0.1:%d is down", silent_port);
    ck_assert_msg(strstr(log, line) == NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
    close(silent);
    responder_stop(&right);
    responder_stop(&wrong);
}
END_TEST

Suite *test_suite(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("stream_udp");
    TCase *tc = tcase_create("udp");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dns_queries_each_end_their_session);
    tcase_add_test(tc, a_client_is_one_session_until_the_timeout);
    tcase_add_test(tc, proxy_requests_starts_a_new_session);
    tcase_add_test(tc, silent_and_refusing_servers_end_sessions);
    tcase_add_test(tc, deny_drops_and_logs);
    tcase_add_test(tc, many_clients_at_once);
    tcase_add_test(tc, reload_keeps_the_port);
    tcase_add_test(tc, binary_upgrade_passes_the_sockets);
    suite_add_tcase(s, tc);
    tc = tcase_create("health");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, udp_health_checks);
    suite_add_tcase(s, tc);
    return s;
}
