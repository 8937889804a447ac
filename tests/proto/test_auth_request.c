/*
 * test_auth_request.c: auth_request through build/corral.  An auth
 * service (a second daemon) answers 200 with X-User, 401 with a
 * challenge, 403 or 502 by the URI it is asked; a backend thread echoes
 * request bodies and records what each request brought.  Checked: the
 * verdicts, auth_request_set with $upstream_http_NAME and
 * $upstream_status, a body held while the service decides and then
 * forwarded whole (never to the service), over HTTP/1.1 and HTTP/2, a
 * service that is down, and a client that leaves while the service
 * thinks.
 */
#include "tests/daemon.h"
#include "tests/helpers.h"

#include <check.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* curl with `args` for `path`: what it prints, then " code=STATUS". */
static void curl(int port, const char *args, const char *path, char *out, size_t size)
{
    static char command[8192];
    snprintf(command, sizeof(command),
             "curl -s --max-time 20 %s -w ' code=%%{http_code}' http://127.0.0.1:%d%s", args, port,
             path);
    ck_assert_int_eq(test_run(command, out, size), 0);
}

/* ------------------------------------------------------- the echo backend */

/* Answers each request on its connection with its body, and records the
 * method, target and body length of the last GET and the last POST. */
struct echo {
    struct test_backend server;
    int port;
    atomic_int posts, gets, posts_with_user;
    atomic_size_t get_body; /* body bytes a GET came with (the auth ask) */
};

/* Reads one request from `fd` into `buf`: its head and its Content-Length
 * body.  Returns the body's length, or -1 at the end of the connection. */
static long read_request(int fd, char *buf, size_t cap, size_t *head_len)
{
    size_t have = 0;
    char *end = NULL;
    while (end == NULL) {
        if (have + 1 >= cap)
            return -1;
        ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    *head_len = (size_t)(end + 4 - buf);
    long body = 0;
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (cl != NULL && cl < end)
        body = strtol(cl + 17, NULL, 10);
    if (body < 0 || *head_len + (size_t)body >= cap)
        return -1;
    while (have < *head_len + (size_t)body) {
        ssize_t n = recv(fd, buf + have, *head_len + (size_t)body - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return body;
}

/* One connection's requests (a test_backend serve(), on a thread of its
 * own: the front keeps several connections open to the backend at once). */
static void echo_serve(int fd, void *data)
{
    struct echo *e = data;
    /* Every wait is bounded: a connection's thread ends within 10 s. */
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    size_t head;
    long body;
    while (buf != NULL && (body = read_request(fd, buf, cap, &head)) >= 0) {
        char line[256];
        if (strncmp(buf, "GET ", 4) == 0) {
            atomic_fetch_add(&e->gets, 1);
            atomic_store(&e->get_body, (size_t)body);
            int n = snprintf(line, sizeof(line),
                             "HTTP/1.1 200 OK\r\nX-User: bob\r\nContent-Length: 0\r\n\r\n");
            test_send_all(fd, line, (size_t)n);
            continue;
        }
        atomic_fetch_add(&e->posts, 1);
        buf[head - 2] = '\0';
        if (strcasestr(buf, "\r\nx-seen-user: bob\r\n") != NULL)
            atomic_fetch_add(&e->posts_with_user, 1);
        int n =
            snprintf(line, sizeof(line), "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n\r\n", body);
        test_send_all(fd, line, (size_t)n);
        test_send_all(fd, buf + head, (size_t)body);
    }
    free(buf);
}

static void echo_start(struct echo *e)
{
    memset(e, 0, sizeof(*e));
    test_backend_start(&e->server, "127.0.0.1", 0, echo_serve, e);
    e->port = e->server.port;
}

/* After the daemons stopped, which closed their connections. */
static void echo_stop(struct echo *e)
{
    ck_assert(test_backend_stop(&e->server, TEST_WAIT_MS));
}

/* A test_backend serve(): a service that answers every connection with
 * garbage (not HTTP) and closes. */
static void garbage_serve(int fd, void *data)
{
    (void)data;
    static const char reply[] = "garbage\r\n\r\n";
    char buf[4096];
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (recv(fd, buf, sizeof(buf), 0) > 0)
        test_send_all(fd, reply, sizeof(reply) - 1);
}

/* ------------------------------------------------------------ the daemons */

static void start(struct test_daemon *d, const char *name, const char *text)
{
    test_daemon_init(d, name);
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

/* The auth service: /check/good 200 with X-User alice, /check/forbidden
 * 403, /check/broken 502, any other /check/ 401 with a challenge. */
static void start_service(struct test_daemon *auth)
{
    start(auth, "auth",
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server {\n    listen 127.0.0.1:0;\n"
          "    location = /check/good { add_header X-User alice; return 200 \"ok\"; }\n"
          "    location = /check/forbidden { return 403; }\n"
          "    location = /check/broken { return 502; }\n"
          "    location /check/ {\n"
          "        add_header WWW-Authenticate 'Bearer realm=\"corral\"' always;\n"
          "        return 401;\n    }\n}\n");
}

/* A port nothing listens on. */
static int down_port(void)
{
    int port;
    close(test_reserve_port(&port));
    return port;
}

/* The front: each location asks the service a URI of its own, through
 * /_auth/; /upload/ (and /echo-auth/, which asks the echo backend)
 * forwards to the echo backend; /odd/ asks `odd` (0: none up), with a
 * proxy_read_timeout of 1 s.  `service` 0: the service is down. */
static void start_front_odd(struct test_daemon *d, int service, int echo, int odd)
{
    char text[4096];
    if (service == 0)
        service = down_port();
    if (odd == 0)
        odd = down_port();
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0 http2;\n"
             "    location /good/ {\n        auth_request /_auth/good;\n"
             "        auth_request_set $user $upstream_http_x_user;\n"
             "        auth_request_set $auth_status $upstream_status;\n"
             "        return 200 \"user=$user status=$auth_status\";\n    }\n"
             "    location /bad/ { auth_request /_auth/nope; return 200 \"never\"; }\n"
             "    location /forbidden/ { auth_request /_auth/forbidden; return 200 \"never\"; }\n"
             "    location /broken/ { auth_request /_auth/broken; return 200 \"never\"; }\n"
             "    location /upload/ {\n        auth_request /_auth/good;\n"
             "        proxy_pass http://127.0.0.1:%d;\n    }\n"
             "    location /echo-auth/ {\n        auth_request /_echo/check;\n"
             "        auth_request_set $user $upstream_http_x_user;\n"
             "        proxy_set_header X-Seen-User $user;\n"
             "        proxy_pass http://127.0.0.1:%d;\n    }\n"
             "    location /free/ { return 200 \"free\"; }\n"
             "    location /_auth/ { proxy_pass http://127.0.0.1:%d/check/; }\n"
             "    location /_echo/ { proxy_pass http://127.0.0.1:%d; }\n"
             "    location /odd/ { auth_request /_odd; return 200 \"never\"; }\n"
             "    location = /_odd {\n        proxy_read_timeout 1s;\n"
             "        proxy_pass http://127.0.0.1:%d;\n    }\n}\n",
             echo, echo, service, echo, odd);
    start(d, "front", text);
}

static void start_front(struct test_daemon *d, int service, int echo)
{
    start_front_odd(d, service, echo, 0);
}

/* ------------------------------------------------------------------ tests */

/* Each verdict: 2xx lets in, with auth_request_set's values read from the
 * service's answer; 401 passes the challenge on; 403 stays 403; anything
 * else is a 500. */
START_TEST(verdicts_and_values)
{
    struct test_daemon auth, d;
    struct echo e;
    echo_start(&e);
    start_service(&auth);
    start_front(&d, auth.port, e.port);
    char out[4096];
    curl(d.port, "", "/good/", out, sizeof(out));
    ck_assert_str_eq(out, "user=alice status=200 code=200");
    curl(d.port, "-D -", "/bad/", out, sizeof(out));
    ck_assert_msg(strstr(out, "HTTP/1.1 401") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "WWW-Authenticate: Bearer realm=\"corral\"\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\r\n\r\n401 Unauthorized\n code=401") != NULL, "%s", out);
    curl(d.port, "-o /dev/null", "/forbidden/", out, sizeof(out));
    ck_assert_str_eq(out, " code=403");
    curl(d.port, "-o /dev/null", "/broken/", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    /* The same over HTTP/2. */
    curl(d.port, "--http2-prior-knowledge", "/good/", out, sizeof(out));
    ck_assert_str_eq(out, "user=alice status=200 code=200");
    curl(d.port, "--http2-prior-knowledge -o /dev/null", "/bad/", out, sizeof(out));
    ck_assert_str_eq(out, " code=401");
    test_daemon_stop(&d);
    test_daemon_stop(&auth);
    echo_stop(&e);
}
END_TEST

/* A request body waits while the service decides, which never sees it
 * (its ask is a GET without a body), then reaches the backend whole:
 * 200 KB over HTTP/1.1 and HTTP/2; the service's X-User goes on as a
 * header auth_request_set's variable fills. */
START_TEST(bodies_wait_and_reach_the_backend_whole)
{
    struct test_daemon d;
    struct echo e;
    echo_start(&e);
    start_front(&d, 0, e.port);
    char file[PATH_MAX], command[2 * PATH_MAX + 512], out[512];
    test_daemon_file(file, sizeof(file), "body");
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 200 * 1024; i++)
        fputc('a' + i % 26, f);
    ck_assert_int_eq(fclose(f), 0);
    const char *protocols[] = {"", "--http2-prior-knowledge"};
    for (int i = 0; i < 2; i++) {
        snprintf(command, sizeof(command),
                 "curl -s --max-time 20 %s --data-binary @%s http://127.0.0.1:%d/echo-auth/ | "
                 "cmp - %s && echo same",
                 protocols[i], file, d.port, file);
        ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
        ck_assert_msg(strcmp(out, "same\n") == 0, "%s: %s", protocols[i], out);
    }
    ck_assert_int_eq(atomic_load(&e.gets), 2);
    ck_assert_int_eq(atomic_load(&e.posts), 2);
    ck_assert_int_eq(atomic_load(&e.posts_with_user), 2);
    ck_assert_uint_eq(atomic_load(&e.get_body), 0);
    test_daemon_stop(&d);
    echo_stop(&e);
}
END_TEST

/* A service that cannot be reached: 500, and the backend is not asked. */
START_TEST(service_down_is_500)
{
    struct test_daemon d;
    struct echo e;
    echo_start(&e);
    start_front(&d, 0, e.port);
    char out[512];
    curl(d.port, "-o /dev/null -d x", "/upload/", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    curl(d.port, "--http2-prior-knowledge -o /dev/null -d x", "/upload/", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    ck_assert_int_eq(atomic_load(&e.posts), 0);
    test_daemon_stop(&d);
    echo_stop(&e);
}
END_TEST

/* A client that leaves while the service has not answered (it accepts
 * and never answers): the daemon lets go of the subrequest and the held
 * request at once (not at the service's proxy_read_timeout, nor at the
 * stop's drain timeout), and serves on. */
START_TEST(client_gone_while_the_service_thinks)
{
    int silent_port;
    int silent = test_listen(&silent_port, 16);
    struct test_daemon d;
    struct echo e;
    echo_start(&e);
    start_front(&d, silent_port, e.port);
    long active = -1, idle = 1; /* the one that asks */
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle);
    int fd = test_connect(d.port);
    const char *request = "POST /upload/ HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123";
    test_send_all(fd, request, strlen(request));
    struct pollfd asked = {.fd = silent, .events = POLLIN};
    ck_assert_msg(poll(&asked, 1, TEST_WAIT_MS) == 1, "the service was not asked");
    /* One that asked before may still be closing: a count that is right
     * comes soon. */
    test_wait_for((active = test_daemon_connections_active(&d)) == idle + 1, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle + 1);
    close(fd);
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, 2000,
                  "the held request's connection is still open: %ld", active);
    /* The subrequest was cut off: its connection to the service is
     * closed, as the proxy closes one for a client that left. */
    int asked_fd = accept(silent, NULL, NULL);
    ck_assert_int_ge(asked_fd, 0);
    struct pollfd ended = {.fd = asked_fd, .events = POLLIN};
    char byte[4096];
    ssize_t got = 1;
    while (got > 0 && poll(&ended, 1, 2000) == 1)
        got = recv(asked_fd, byte, sizeof(byte), 0);
    ck_assert_msg(got <= 0, "the connection to the service is still open");
    close(asked_fd);
    char out[512];
    curl(d.port, "", "/free/", out, sizeof(out));
    ck_assert_str_eq(out, "free code=200");
    uint64_t stop_ms = test_now_ms();
    test_daemon_stop(&d);
    /* Half the default drain_timeout (10 s): a loaded machine's stop may
     * take a second or two, one that waits for the drain takes 10. */
    ck_assert_msg(test_now_ms() - stop_ms < 5000, "the stop waited %llu ms",
                  (unsigned long long)(test_now_ms() - stop_ms));
    echo_stop(&e);
    close(silent);
}
END_TEST

/* A service that answers garbage, and one that accepts and never
 * answers (past proxy_read_timeout): 500 each, and the front serves on. */
START_TEST(service_garbage_or_silence_is_500)
{
    struct test_backend garbage;
    test_backend_start(&garbage, "127.0.0.1", 0, garbage_serve, NULL);
    struct test_daemon d;
    struct echo e;
    echo_start(&e);
    start_front_odd(&d, 0, e.port, garbage.port);
    char out[512];
    curl(d.port, "-o /dev/null", "/odd/", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    test_daemon_stop(&d);
    (void)test_backend_stop(&garbage, TEST_WAIT_MS);
    int silent_port;
    int silent = test_listen(&silent_port, 16);
    start_front_odd(&d, 0, e.port, silent_port);
    uint64_t start_ms = test_now_ms();
    curl(d.port, "-o /dev/null", "/odd/", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    curl(d.port, "", "/free/", out, sizeof(out));
    ck_assert_str_eq(out, "free code=200");
    test_daemon_stop(&d);
    close(silent);
    echo_stop(&e);
}
END_TEST

/* Forward auth under load loses nothing: 1,000 requests over 20
 * HTTP/1.1 connections, and as many over 10 HTTP/2 connections with 10
 * streams each, all let in. */
START_TEST(under_load_nothing_is_lost)
{
    struct test_daemon auth, d;
    struct echo e;
    echo_start(&e);
    start_service(&auth);
    start_front(&d, auth.port, e.port);
    char command[512], out[8192];
    const char *modes[] = {"--h1 -c 20", "-c 10 -m 10"};
    for (int i = 0; i < 2; i++) {
        snprintf(command, sizeof(command),
                 "h2load %s -n 1000 http://127.0.0.1:%d/good/ 2>&1 | grep -E '^(requests|status)'",
                 modes[i], d.port);
        ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, "1000 succeeded, 0 failed, 0 errored") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "status codes: 1000 2xx") != NULL, "%s", out);
    }
    test_daemon_stop(&d);
    test_daemon_stop(&auth);
    echo_stop(&e);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/auth_request");
    TCase *tc = tcase_create("auth_request");
    tcase_set_timeout(tc, 60);
    test_daemon_fixture(tc);
    tcase_add_test(tc, verdicts_and_values);
    tcase_add_test(tc, bodies_wait_and_reach_the_backend_whole);
    tcase_add_test(tc, service_down_is_500);
    tcase_add_test(tc, client_gone_while_the_service_thinks);
    tcase_add_test(tc, service_garbage_or_silence_is_500);
    tcase_add_test(tc, under_load_nothing_is_lost);
    suite_add_tcase(suite, tc);
    return suite;
}
