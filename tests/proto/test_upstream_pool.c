/*
 * test_upstream_pool.c: the idle pool of upstream connections keeps what
 * the recent concurrency needed, beyond `keepalive`, and lets the excess
 * age out with keepalive_timeout.  build/corral runs in front of a
 * keep-alive backend written here that counts its connections.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A backend answering every request of a connection with 200 and "ok",
 * keeping it open, after `delay_ms`; it counts the connections accepted
 * and those still open. */
struct ka_backend {
    int fd, port;
    unsigned delay_ms;
    pthread_t thread;
    atomic_bool stop;
    atomic_uint accepted, live, requests;
};

struct ka_conn {
    struct ka_backend *b;
    int fd;
};

static void *ka_conn_main(void *arg)
{
    struct ka_conn *c = arg;
    struct ka_backend *b = c->b;
    char buf[8192];
    size_t len = 0;
    for (;;) {
        char *end = memmem(buf, len, "\r\n\r\n", 4);
        if (end == NULL) {
            if (len == sizeof(buf))
                break;
            ssize_t n = recv(c->fd, buf + len, sizeof(buf) - len, 0);
            if (n <= 0)
                break;
            len += (size_t)n;
            continue;
        }
        size_t used = (size_t)(end + 4 - buf);
        memmove(buf, buf + used, len - used);
        len -= used;
        atomic_fetch_add(&b->requests, 1);
        if (b->delay_ms > 0)
            usleep(b->delay_ms * 1000);
        static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        if (send(c->fd, reply, sizeof(reply) - 1, MSG_NOSIGNAL) < 0)
            break;
    }
    close(c->fd);
    atomic_fetch_sub(&b->live, 1);
    free(c);
    return NULL;
}

static void *ka_accept_main(void *arg)
{
    struct ka_backend *b = arg;
    while (!atomic_load(&b->stop)) {
        struct pollfd p = {.fd = b->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(b->fd, NULL, NULL);
        if (fd < 0)
            continue;
        struct ka_conn *c = malloc(sizeof(*c));
        ck_assert_ptr_nonnull(c);
        *c = (struct ka_conn){b, fd};
        atomic_fetch_add(&b->accepted, 1);
        atomic_fetch_add(&b->live, 1);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, ka_conn_main, c), 0);
        pthread_detach(t);
    }
    return NULL;
}

static struct ka_backend *ka_start(unsigned delay_ms)
{
    struct ka_backend *b = calloc(1, sizeof(*b));
    ck_assert_ptr_nonnull(b);
    b->delay_ms = delay_ms;
    b->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(b->fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(bind(b->fd, (struct sockaddr *)&addr, len), 0);
    ck_assert_int_eq(listen(b->fd, 128), 0);
    ck_assert_int_eq(getsockname(b->fd, (struct sockaddr *)&addr, &len), 0);
    b->port = ntohs(addr.sin_port);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, ka_accept_main, b), 0);
    return b;
}

static void ka_free(struct ka_backend *b)
{
    atomic_store(&b->stop, true);
    pthread_join(b->thread, NULL);
    close(b->fd);
    test_wait_for(atomic_load(&b->live) == 0, 5000, "%u backend connections live",
                  atomic_load(&b->live));
    free(b);
}

/* ------------------------------------------------------------ load */

#define BURST 8

struct burst {
    int port;
    atomic_uint ok;
};

static void *burst_request(void *arg)
{
    struct burst *b = arg;
    char body[16];
    if (test_daemon_http_get("127.0.0.1", b->port, "/", body, sizeof(body)) == 200)
        atomic_fetch_add(&b->ok, 1);
    return NULL;
}

/* BURST requests at once, each on a client connection of its own. */
static void burst(int port)
{
    struct burst b = {.port = port};
    pthread_t t[BURST];
    for (int i = 0; i < BURST; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, burst_request, &b), 0);
    for (int i = 0; i < BURST; i++)
        pthread_join(t[i], NULL);
    ck_assert_uint_eq(atomic_load(&b.ok), BURST);
}

static void start(struct test_daemon *d, const struct ka_backend *b, const char *pool)
{
    test_daemon_init(d, "corral");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout 100ms;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app {\n    server 127.0.0.1:%d;\n%s\n}\n"
             "server {\n    listen 127.0.0.1:0;\n"
             "    location / { proxy_pass http://app; }\n}\n",
             b->port, pool);
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* A burst of 8 requests at once with keepalive 2: all 8 connections stay
 * in the pool, so a second burst opens none (nginx's pool would have
 * closed 6 and opened 6 again).  Then with one request at a time the 7
 * the load no longer needs close after keepalive_timeout while the one in
 * use stays. */
START_TEST(pool_keeps_what_the_recent_concurrency_needed)
{
    struct ka_backend *b = ka_start(150);
    struct test_daemon d;
    start(&d, b, "    keepalive 2;\n    keepalive_timeout 600ms;");
    burst(d.port);
    unsigned first = atomic_load(&b->accepted);
    ck_assert_uint_eq(first, BURST);
    test_sleep_ms(50); /* the last responses go back to the pool */
    ck_assert_uint_eq(atomic_load(&b->live), BURST);
    burst(d.port);
    ck_assert_msg(atomic_load(&b->accepted) == first, "%u connections opened for the second burst",
                  atomic_load(&b->accepted) - first);
    /* one request at a time, for longer than keepalive_timeout */
    uint64_t until = test_now_ms() + 1200;
    char body[16];
    while (test_now_ms() < until)
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
    test_wait_for(atomic_load(&b->live) <= 1, 2000, "%u connections open", atomic_load(&b->live));
    ck_assert_uint_eq(atomic_load(&b->accepted), first);
    test_daemon_stop(&d);
    ka_free(b);
}
END_TEST

/* keepalive 0 still closes every connection after its response, however
 * many were busy at once. */
START_TEST(keepalive_0_keeps_nothing)
{
    struct ka_backend *b = ka_start(100);
    struct test_daemon d;
    start(&d, b, "    keepalive 0;");
    burst(d.port);
    test_wait_for(atomic_load(&b->live) == 0, 2000, "%u connections open", atomic_load(&b->live));
    burst(d.port);
    ck_assert_uint_eq(atomic_load(&b->accepted), 2 * BURST);
    test_daemon_stop(&d);
    ka_free(b);
}
END_TEST

/* The peak is remembered for one to two keepalive_timeout windows:
 * requests that stay busy longer than that find, when they end, a pool
 * back to `keepalive` connections. */
START_TEST(a_peak_two_windows_old_no_longer_counts)
{
    struct ka_backend *b = ka_start(900);
    struct test_daemon d;
    start(&d, b, "    keepalive 2;\n    keepalive_timeout 300ms;");
    burst(d.port);
    test_wait_for(atomic_load(&b->live) == 2, 2000, "%u connections open", atomic_load(&b->live));
    test_daemon_stop(&d);
    ka_free(b);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("upstream_pool");
    TCase *tc = tcase_create("pool");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, pool_keeps_what_the_recent_concurrency_needed);
    tcase_add_test(tc, keepalive_0_keeps_nothing);
    tcase_add_test(tc, a_peak_two_windows_old_no_longer_counts);
    suite_add_tcase(s, tc);
    return s;
}
