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
 * keeping it open, after `delay_ms`; `tcp` counts the connections
 * accepted and those still open. */
struct ka_backend {
    struct test_backend tcp;
    unsigned delay_ms;
    atomic_uint requests;
};

static void ka_serve(int fd, void *data)
{
    struct ka_backend *b = data;
    char buf[8192];
    size_t len = 0;
    for (;;) {
        char *end = memmem(buf, len, "\r\n\r\n", 4);
        if (end == NULL) {
            if (len == sizeof(buf))
                break;
            ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
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
        if (send(fd, reply, sizeof(reply) - 1, MSG_NOSIGNAL) < 0)
            break;
    }
}

static struct ka_backend *ka_start(unsigned delay_ms)
{
    struct ka_backend *b = calloc(1, sizeof(*b));
    ck_assert_ptr_nonnull(b);
    b->delay_ms = delay_ms;
    test_backend_start(&b->tcp, "127.0.0.1", 0, ka_serve, b);
    return b;
}

static void ka_free(struct ka_backend *b)
{
    ck_assert_msg(test_backend_stop(&b->tcp, 5000), "%u backend connections live",
                  atomic_load(&b->tcp.live));
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
             b->tcp.port, pool);
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
    unsigned first = atomic_load(&b->tcp.accepted);
    ck_assert_uint_eq(first, BURST);
    test_sleep_ms(50); /* the last responses go back to the pool */
    ck_assert_uint_eq(atomic_load(&b->tcp.live), BURST);
    burst(d.port);
    ck_assert_msg(atomic_load(&b->tcp.accepted) == first,
                  "%u connections opened for the second burst",
                  atomic_load(&b->tcp.accepted) - first);
    /* one request at a time, for longer than keepalive_timeout */
    uint64_t until = test_now_ms() + 1200;
    char body[16];
    while (test_now_ms() < until)
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
    test_wait_for(atomic_load(&b->tcp.live) <= 1, 2000, "%u connections open",
                  atomic_load(&b->tcp.live));
    ck_assert_uint_eq(atomic_load(&b->tcp.accepted), first);
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
    test_wait_for(atomic_load(&b->tcp.live) == 0, 2000, "%u connections open",
                  atomic_load(&b->tcp.live));
    burst(d.port);
    ck_assert_uint_eq(atomic_load(&b->tcp.accepted), 2 * BURST);
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
    test_wait_for(atomic_load(&b->tcp.live) == 2, 2000, "%u connections open",
                  atomic_load(&b->tcp.live));
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
