/*
 * test_limit.c: limit_req and limit_conn through build/corral: rates and
 * bursts under a paced load across two workers sharing a zone, delays
 * (and a client that leaves while delayed), HTTP/2 streams, concurrent
 * exchanges held by a slow backend, an HTTP/2 request's trailers through
 * limits and rewrites, zones kept across a reload, the metrics, and
 * add_header on corral's own answers.
 */
#include "tests/daemon.h"
#include "tests/helpers.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ----------------------------------------------------------- the client */

/* Sends a GET for `path` that asks to close, on a new connection. */
static int send_get(int port, const char *path)
{
    int fd = test_connect(port);
    char text[256];
    int n = snprintf(text, sizeof(text), "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                     path);
    test_send_all(fd, text, (size_t)n);
    return fd;
}

/* Reads the whole response on `fd` and closes it: its status, the
 * response in `out` (NULL: not kept). */
static unsigned read_response(int fd, char *out, size_t size)
{
    char buf[4096];
    if (out == NULL) {
        out = buf;
        size = sizeof(buf);
    }
    size_t len = test_recv_all(fd, out, size - 1);
    out[len] = '\0';
    close(fd);
    unsigned status = 0;
    sscanf(out, "HTTP/1.1 %u", &status);
    return status;
}

/* A POST whose body stops half way: its exchange runs until the client
 * goes away. */
static int send_half_post(int port, const char *path)
{
    int fd = test_connect(port);
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "POST %s HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhalf.", path);
    test_send_all(fd, text, (size_t)n);
    return fd;
}

static unsigned get(int port, const char *path, char *out, size_t size)
{
    return read_response(send_get(port, path), out, size);
}

/* Whether the response head has the line "name: value". */
static bool has_header(const char *response, const char *line)
{
    char needle[256]; /* the line, at the start of one */
    ck_assert_uint_lt(strlen(line) + 1, sizeof(needle));
    snprintf(needle, sizeof(needle), "\n%s", line);
    const char *end = strstr(response, "\r\n\r\n");
    const char *at = strcasestr(response, needle);
    return at != NULL && end != NULL && at < end;
}

/* A counter of /metrics: the value of the line starting `series`, or -1. */
static long long metric(const struct test_daemon *d, const char *series)
{
    static char body[65536];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    const char *at = strstr(body, series);
    return at != NULL ? atoll(at + strlen(series)) : -1;
}

static void start(struct test_daemon *d, const char *text)
{
    test_daemon_init(d, "corral");
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

/* For what a limit lets through of a paced load: never more than the rate
 * allows over the time the load took to send (10% slack), but possibly
 * less when the machine is busy: a daemon that reads the paced requests
 * late sees them closer together than they were sent, and more of them
 * are excess.  So the floor is wider (25%): a limit that refused far too
 * much still fails. */
static bool near_paced(long got, double expected)
{
    double slack = expected * 0.1 > 2 ? expected * 0.1 : 2;
    double floor = expected * 0.25 > 2 ? expected * 0.25 : 2;
    return got >= expected - floor && got <= expected + slack;
}

/* ------------------------------------------------------------- limit_req */

#define LOAD_REQUESTS 150
#define LOAD_RATE     50 /* a second: 2.5 times the zone's */

/* 150 requests at 50 a second on new connections, which the two workers
 * share; then their statuses.  Returns the seconds the sending took. */
static double paced_load(int port, const char *path, unsigned statuses[LOAD_REQUESTS])
{
    static int fds[LOAD_REQUESTS];
    uint64_t begin = test_now_ms();
    for (int i = 0; i < LOAD_REQUESTS; i++) {
        uint64_t due = begin + (uint64_t)i * 1000 / LOAD_RATE;
        uint64_t now = test_now_ms();
        if (due > now)
            usleep((useconds_t)(due - now) * 1000);
        fds[i] = send_get(port, path);
    }
    double seconds = (double)(test_now_ms() - begin) / 1000;
    for (int i = 0; i < LOAD_REQUESTS; i++)
        statuses[i] = read_response(fds[i], NULL, 0);
    return seconds;
}

static const char rate_config[] =
    "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
    "limit_req_zone $binary_remote_addr zone=one:1m rate=20r/s;\n"
    "limit_req_zone $binary_remote_addr zone=two:1m rate=20r/s;\n"
    "server {\n  listen 127.0.0.1:0;\n"
    "  location /nodelay { limit_req zone=one burst=5 nodelay; return 200 ok; }\n"
    "  location /delay { limit_req zone=two burst=10 delay=5; limit_req_status 429;\n"
    "                    return 200 ok; }\n"
    "}\n";

/* rate=20r/s burst=5 nodelay at 50 r/s: 1 + 5 + 20 a second pass, the
 * rest are refused with 503; both workers count in the one zone. */
START_TEST(rate_and_burst_hold_across_workers)
{
    struct test_daemon d;
    start(&d, rate_config);
    unsigned statuses[LOAD_REQUESTS];
    double seconds = paced_load(d.port, "/nodelay", statuses);
    long passed = 0, refused = 0;
    for (int i = 0; i < LOAD_REQUESTS; i++) {
        passed += statuses[i] == 200;
        refused += statuses[i] == 503;
    }
    double expected = 1 + 5 + 20 * seconds;
    ck_assert_int_eq(passed + refused, LOAD_REQUESTS);
    ck_assert_msg(near_paced(passed, expected), "%ld passed in %.2f s, expected %.1f", passed,
                  seconds, expected);
    ck_assert_int_eq(passed + refused, LOAD_REQUESTS); /* so refused is as near */
    ck_assert_int_eq(metric(&d, "corral_limit_req_requests_total{zone=\"one\",result=\"passed\"} "),
                     passed);
    ck_assert_int_eq(
        metric(&d, "corral_limit_req_requests_total{zone=\"one\",result=\"rejected\"} "), refused);
    ck_assert_int_eq(
        metric(&d, "corral_limit_req_requests_total{zone=\"one\",result=\"delayed\"} "), 0);
    test_daemon_stop(&d);
}
END_TEST

/* burst=10 delay=5: the first few pass at once, the bucket's excess beyond
 * 5 waits on a timer, beyond 10 is refused with limit_req_status. */
START_TEST(excess_is_delayed_then_refused)
{
    struct test_daemon d;
    start(&d, rate_config);
    unsigned statuses[LOAD_REQUESTS];
    double seconds = paced_load(d.port, "/delay", statuses);
    long ok = 0, refused = 0;
    for (int i = 0; i < LOAD_REQUESTS; i++) {
        ok += statuses[i] == 200;
        refused += statuses[i] == 429;
    }
    double expected = 1 + 10 + 20 * seconds;
    ck_assert_int_eq(ok + refused, LOAD_REQUESTS);
    ck_assert_msg(near_paced(ok, expected), "%ld answered in %.2f s, expected %.1f", ok, seconds,
                  expected);
    long long passed =
        metric(&d, "corral_limit_req_requests_total{zone=\"two\",result=\"passed\"} ");
    long long delayed =
        metric(&d, "corral_limit_req_requests_total{zone=\"two\",result=\"delayed\"} ");
    ck_assert_int_eq(passed + delayed, ok);
    /* The bucket grows by 1000 - 20000 / 50 = 600 a request when they come
     * evenly: the first 9 are within delay=5 (5000) and pass at once; 6 at
     * least when they come together. */
    ck_assert_msg(passed >= 6 && passed <= 12, "%lld passed at once", passed);
    ck_assert_msg(near_paced((long)delayed, expected - (double)passed),
                  "%lld delayed, expected %.1f", delayed, expected - (double)passed);
    ck_assert_int_eq(
        metric(&d, "corral_limit_req_requests_total{zone=\"two\",result=\"rejected\"} "), refused);
    test_daemon_stop(&d);
}
END_TEST

/* 12 requests at once against rate=10r/s burst=10: the 1st at once, the
 * next 10 each 100 ms after the one before, the 12th refused. */
START_TEST(delays_follow_the_rate)
{
    struct test_daemon d;
    start(&d, "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
              "limit_req_zone $remote_addr zone=slow:64k rate=10r/s;\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  location / { limit_req zone=slow burst=10; return 200 ok; }\n}\n");
    int fds[12];
    uint64_t begin = test_now_ms();
    for (int i = 0; i < 12; i++)
        fds[i] = send_get(d.port, "/");
    unsigned statuses[12];
    uint64_t done[12];
    for (int i = 0; i < 12; i++) {
        statuses[i] = read_response(fds[i], NULL, 0);
        done[i] = test_now_ms() - begin;
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < 12; i++) {
        ok += statuses[i] == 200;
        refused += statuses[i] == 503;
    }
    ck_assert_int_eq(ok, 11);
    ck_assert_int_eq(refused, 1);
    /* The last delayed waited about 1 s: not less, and not much more. */
    uint64_t last = 0;
    for (int i = 0; i < 12; i++)
        if (statuses[i] == 200 && done[i] > last)
            last = done[i];
    ck_assert_msg(last >= 900 && last < 3000, "the last answer came after %llu ms",
                  (unsigned long long)last);
    ck_assert_int_eq(
        metric(&d, "corral_limit_req_requests_total{zone=\"slow\",result=\"delayed\"} "), 10);
    test_daemon_stop(&d);
}
END_TEST

/* A client that leaves while its request is delayed, its body half sent:
 * the daemon lets go of it at once, not when the delay (a minute) is
 * over, nor at the stop's drain timeout. */
START_TEST(client_gone_while_delayed)
{
    struct test_daemon d;
    start(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
              "limit_req_zone $remote_addr zone=minute:64k rate=1r/m;\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  location / { limit_req zone=minute burst=5; return 200 ok; }\n}\n");
    ck_assert_uint_eq(get(d.port, "/", NULL, 0), 200);
    long active = -1, idle = 1; /* the one that asks */
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle);
    int fd = send_half_post(d.port, "/");
    const char *delayed = "corral_limit_req_requests_total{zone=\"minute\",result=\"delayed\"} ";
    test_wait_for(metric(&d, delayed) == 1, TEST_WAIT_MS, "the request was not delayed");
    /* One that asked before may still be closing: a count that is right
     * comes soon. */
    test_wait_for((active = test_daemon_connections_active(&d)) == idle + 1, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle + 1);
    close(fd);
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, 2000,
                  "the delayed request's connection is still open: %ld", active);
    uint64_t stop_ms = test_now_ms();
    test_daemon_stop(&d);
    /* Half the default drain_timeout (10 s): a loaded machine's stop may
     * take a second or two, one that waits for the drain takes 10. */
    ck_assert_msg(test_now_ms() - stop_ms < 5000, "the stop waited %llu ms",
                  (unsigned long long)(test_now_ms() - stop_ms));
}
END_TEST

/* Five streams, one after the other, on one HTTP/2 connection (prior
 * knowledge), and what h2load says of their statuses. */
static void h2load(int port, const char *path, const char *expected)
{
    char command[256];
    snprintf(command, sizeof(command), "h2load -n 5 -c 1 -m 1 http://127.0.0.1:%d%s 2>&1", port,
             path);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    static char out[8192];
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    pclose(p);
    ck_assert_msg(strstr(out, expected) != NULL, "%s", out);
}

/* Streams of one HTTP/2 connection are requests like any: of 5 on one
 * connection, 1 + burst 2 pass.  limit_conn counts each stream only while
 * it runs. */
START_TEST(http2_streams_are_limited)
{
    struct test_daemon d;
    start(&d, "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
              "limit_req_zone $binary_remote_addr zone=h2:64k rate=1r/m;\n"
              "limit_conn_zone $binary_remote_addr zone=h2c:64k;\n"
              "server {\n  listen 127.0.0.1:0 http2;\n"
              "  location /r { limit_req zone=h2 burst=2 nodelay; return 200 ok; }\n"
              "  location /c { limit_conn h2c 1; return 200 ok; }\n}\n");
    h2load(d.port, "/r", "status codes: 3 2xx, 0 3xx, 0 4xx, 2 5xx");
    h2load(d.port, "/c", "status codes: 5 2xx, 0 3xx, 0 4xx, 0 5xx");
    ck_assert_int_eq(metric(&d, "corral_limit_req_requests_total{zone=\"h2\",result=\"passed\"} "),
                     3);
    ck_assert_int_eq(
        metric(&d, "corral_limit_conn_requests_total{zone=\"h2c\",result=\"passed\"} "), 5);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ limit_conn */

/* A backend that holds every request until released, then answers each
 * with 200 "ok" and closes. */
struct slow_backend {
    int fd, port;
    pthread_t thread;
    int clients[16];
    _Atomic int held;
    _Atomic bool release;
};

static void *slow_main(void *arg)
{
    struct slow_backend *b = arg;
    int count = 0;
    uint64_t end = test_now_ms() + 15000; /* bounded in time */
    while (test_now_ms() < end) {
        struct pollfd pfd = {.fd = b->fd, .events = POLLIN};
        if (count < 16 && poll(&pfd, 1, 20) == 1) {
            int c = accept(b->fd, NULL, NULL);
            if (c == -1)
                break;
            char head[4096];
            (void)!recv(c, head, sizeof(head), 0);
            b->clients[count++] = c;
            b->held = count;
        } else if (count >= 16) {
            usleep(20000);
        }
        if (b->release) {
            for (int i = 0; i < count; i++) {
                static const char answer[] =
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                (void)!send(b->clients[i], answer, sizeof(answer) - 1, MSG_NOSIGNAL);
                close(b->clients[i]);
            }
            count = 0;
            b->held = 0;
            b->release = false;
        }
        if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))
            break;
    }
    for (int i = 0; i < count; i++)
        close(b->clients[i]);
    return NULL;
}

static void slow_start(struct slow_backend *b)
{
    memset(b, 0, sizeof(*b));
    b->fd = test_listen(&b->port, 16);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, slow_main, b), 0);
}

static void slow_stop(struct slow_backend *b)
{
    shutdown(b->fd, SHUT_RDWR);
    pthread_join(b->thread, NULL);
    close(b->fd);
}

/* Waits until the backend holds `n` requests (TEST_WAIT_MS: a loaded
 * machine may take seconds to pass them on). */
static void wait_held(struct slow_backend *b, int n)
{
    test_wait_for(b->held == n, TEST_WAIT_MS, "the backend holds %d requests, not %d", b->held, n);
}

/* limit_conn 2 in front of a backend that holds its requests: a third
 * concurrent request is refused with limit_conn_status; a finished
 * exchange and an aborted one each give their count back. */
START_TEST(limit_conn_counts_exchanges_under_way)
{
    struct slow_backend b;
    slow_start(&b);
    struct test_daemon d;
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "limit_conn_zone $binary_remote_addr zone=addr:64k;\n"
             "limit_conn_status 429;\n"
             "server {\n  listen 127.0.0.1:0;\n  limit_conn addr 2;\n"
             "  location / { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /free { limit_conn addr 100; return 200 free; }\n}\n",
             b.port);
    start(&d, conf);
    int first = send_get(d.port, "/a"), second = send_half_post(d.port, "/b");
    wait_held(&b, 2);
    ck_assert_uint_eq(get(d.port, "/c", NULL, 0), 429);
    /* A location that sets limit_conn of its own does not inherit. */
    ck_assert_uint_eq(get(d.port, "/free", NULL, 0), 200);
    /* A client that goes away (its body unfinished) gives its count back. */
    close(second);
    /* Until the daemon has seen it go, a third is refused at once: ask
     * again until one is held. */
    int third = send_get(d.port, "/d"), refused = 0;
    for (uint64_t end = test_now_ms() + 5000; b.held != 3 && test_now_ms() < end;) {
        struct pollfd answer = {.fd = third, .events = POLLIN};
        if (poll(&answer, 1, TEST_POLL_MS) == 1) {
            ck_assert_uint_eq(read_response(third, NULL, 0), 429);
            refused++;
            third = send_get(d.port, "/d");
        }
    }
    wait_held(&b, 3);
    ck_assert_uint_eq(get(d.port, "/e", NULL, 0), 429);
    b.release = true;
    ck_assert_uint_eq(read_response(first, NULL, 0), 200);
    ck_assert_uint_eq(read_response(third, NULL, 0), 200);
    /* Both ended: two fit again.  An answer can reach its client before
     * its worker gives the count back: a request refused meanwhile is
     * asked again. */
    int again[2] = {send_get(d.port, "/f"), send_get(d.port, "/g")};
    for (uint64_t end = test_now_ms() + 5000; b.held != 2 && test_now_ms() < end;) {
        for (int i = 0; i < 2; i++) {
            struct pollfd answer = {.fd = again[i], .events = POLLIN};
            if (poll(&answer, 1, TEST_POLL_MS) == 1) {
                ck_assert_uint_eq(read_response(again[i], NULL, 0), 429);
                refused++;
                again[i] = send_get(d.port, i == 0 ? "/f" : "/g");
            }
        }
    }
    wait_held(&b, 2);
    b.release = true;
    ck_assert_uint_eq(read_response(again[0], NULL, 0), 200);
    ck_assert_uint_eq(read_response(again[1], NULL, 0), 200);
    ck_assert_int_eq(
        metric(&d, "corral_limit_conn_requests_total{zone=\"addr\",result=\"rejected\"} "),
        2 + refused);
    test_daemon_stop(&d);
    slow_stop(&b);
}
END_TEST

/* -------------------------------------------------------------- trailers */

/* A backend that keeps what each request brought (head, body, trailer
 * section: up to 16 requests of 2 kB) and answers 200 "ok". */
struct record_backend {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    char got[16][2048];
    int count;
};

/* Whether `buf` (NUL-terminated) holds a whole request: its head, and a
 * body of its Content-Length or a chunked one with its trailer section. */
static bool request_whole(const char *buf, size_t len)
{
    const char *end = strstr(buf, "\r\n\r\n");
    if (end == NULL)
        return false;
    if (strcasestr(buf, "\r\ntransfer-encoding: chunked\r\n") == NULL) {
        const char *cl = strcasestr(buf, "\r\ncontent-length:");
        unsigned long long want = cl != NULL && cl < end ? strtoull(cl + 17, NULL, 10) : 0;
        return (size_t)(buf + len - (end + 4)) >= want;
    }
    const char *last = strstr(end + 2, "\r\n0\r\n"); /* the body here is "hello" */
    if (last == NULL)
        return false;
    return strncmp(last + 5, "\r\n", 2) == 0 || strstr(last + 5, "\r\n\r\n") != NULL;
}

static void *record_main(void *arg)
{
    struct record_backend *b = arg;
    uint64_t end = test_now_ms() + 15000; /* bounded in time */
    while (test_now_ms() < end) {
        struct pollfd pfd = {.fd = b->fd, .events = POLLIN};
        if (poll(&pfd, 1, 20) != 1)
            continue;
        if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))
            break;
        int c = accept(b->fd, NULL, NULL);
        if (c == -1)
            break;
        struct timeval tv = {.tv_sec = 2};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[2048];
        size_t len = 0;
        buf[0] = '\0';
        while (len < sizeof(buf) - 1 && !request_whole(buf, len)) {
            ssize_t n = recv(c, buf + len, sizeof(buf) - 1 - len, 0);
            if (n <= 0)
                break;
            len += (size_t)n;
            buf[len] = '\0';
        }
        pthread_mutex_lock(&b->lock);
        if (b->count < 16)
            memcpy(b->got[b->count++], buf, len + 1);
        pthread_mutex_unlock(&b->lock);
        static const char answer[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        (void)!send(c, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
        close(c);
    }
    return NULL;
}

static void record_start(struct record_backend *b)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->lock, NULL);
    b->fd = test_listen(&b->port, 16);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, record_main, b), 0);
}

static void record_stop(struct record_backend *b)
{
    shutdown(b->fd, SHUT_RDWR);
    pthread_join(b->thread, NULL);
    close(b->fd);
    pthread_mutex_destroy(&b->lock);
}

/* What the backend received of the request whose target holds `token`;
 * "" when none came. */
static void record_of(struct record_backend *b, const char *token, char *out, size_t size)
{
    out[0] = '\0';
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->count; i++) {
        const char *line_end = strstr(b->got[i], "\r\n");
        const char *at = strstr(b->got[i], token);
        if (at != NULL && line_end != NULL && at < line_end)
            snprintf(out, size, "%s", b->got[i]);
    }
    pthread_mutex_unlock(&b->lock);
}

/* Appends an HTTP/2 frame to out[*len]. */
static void h2_frame(char *out, size_t *len, size_t size, unsigned type, unsigned flags,
                     unsigned sid, const void *payload, size_t payload_len)
{
    ck_assert_uint_le(*len + 9 + payload_len, size);
    unsigned char *h = (unsigned char *)out + *len;
    h[0] = (unsigned char)(payload_len >> 16);
    h[1] = (unsigned char)(payload_len >> 8);
    h[2] = (unsigned char)payload_len;
    h[3] = (unsigned char)type;
    h[4] = (unsigned char)flags;
    h[5] = (unsigned char)(sid >> 24);
    h[6] = (unsigned char)(sid >> 16);
    h[7] = (unsigned char)(sid >> 8);
    h[8] = (unsigned char)sid;
    memcpy(out + *len + 9, payload, payload_len);
    *len += 9 + payload_len;
}

/* On one HTTP/2 connection (prior knowledge), one stream for each of
 * `paths` (at most 8): POST with :authority `authority`, no length, DATA
 * "hello", then the trailer field "x-checksum: abc" (HEADERS with
 * END_STREAM).  Fills the status of each: 200, 1 for another, 0 for none
 * (reset, or no answer in 10 s). */
static void h2_post_with_trailers(int port, const char *authority, const char *const *paths,
                                  int count, unsigned *statuses)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"  /* SETTINGS */
                                  "\0\0\0\4\1\0\0\0\0"; /* an ACK of the server's */
    static const unsigned char trailers[] = "\x00\x0ax-checksum\x03"
                                            "abc";
    char out[4096];
    size_t len = sizeof(preface) - 1;
    memcpy(out, preface, len);
    ck_assert_int_le(count, 8);
    for (int i = 0; i < count; i++) {
        unsigned sid = 2 * (unsigned)i + 1;
        /* HPACK: :method POST, :scheme http, then :path and :authority as
         * literals without indexing, of an indexed name. */
        unsigned char head[256];
        size_t path_len = strlen(paths[i]), auth_len = strlen(authority), n = 0;
        ck_assert_uint_lt(path_len + auth_len, 200);
        head[n++] = 0x83;
        head[n++] = 0x86;
        head[n++] = 0x04;
        head[n++] = (unsigned char)path_len;
        memcpy(head + n, paths[i], path_len);
        n += path_len;
        head[n++] = 0x01;
        head[n++] = (unsigned char)auth_len;
        memcpy(head + n, authority, auth_len);
        n += auth_len;
        h2_frame(out, &len, sizeof(out), 1, 0x4, sid, head, n);
        h2_frame(out, &len, sizeof(out), 0, 0, sid, "hello", 5);
        h2_frame(out, &len, sizeof(out), 1, 0x5, sid, trailers, sizeof(trailers) - 1);
        statuses[i] = 0;
    }
    int fd = test_connect(port);
    test_send_all(fd, out, len);
    int ended = 0;
    unsigned char frame[9], payload[16384];
    uint64_t begin = test_now_ms();
    while (ended < count && test_now_ms() - begin < 10000 && test_recv_all(fd, frame, 9) == 9) {
        size_t plen = (size_t)frame[0] << 16 | (size_t)frame[1] << 8 | frame[2];
        ck_assert_uint_le(plen, sizeof(payload));
        ck_assert_uint_eq(test_recv_all(fd, payload, plen), plen);
        unsigned sid = (unsigned)(frame[5] & 0x7f) << 24 | (unsigned)frame[6] << 16 |
                       (unsigned)frame[7] << 8 | frame[8];
        if (frame[3] == 7) /* GOAWAY */
            break;
        if (sid == 0 || sid % 2 == 0 || (sid - 1) / 2 >= (unsigned)count)
            continue;
        unsigned *status = &statuses[(sid - 1) / 2];
        if (frame[3] == 1 && *status == 0 && plen > 0)
            *status = payload[0] == 0x88 ? 200 : 1; /* :status 200, indexed */
        if (((frame[3] == 0 || frame[3] == 1) && (frame[4] & 1) != 0) || frame[3] == 3)
            ended++;
    }
    close(fd);
}

/* An HTTP/2 request's trailer fields reach the backend (after the last
 * chunk) whatever stands in front of proxy_pass: a server's rewrite, a
 * location's, limit_req and limit_conn, behind a rewrite or not, and a
 * limit_req delay that holds the request while its trailers come. */
START_TEST(http2_request_trailers_pass_rewrite_and_limits)
{
    struct record_backend b;
    record_start(&b);
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "limit_req_zone $binary_remote_addr zone=r:64k rate=1r/m;\n"
             "limit_req_zone $binary_remote_addr zone=w:64k rate=10r/s;\n"
             "limit_conn_zone $binary_remote_addr zone=c:64k;\n"
             "server {\n  listen 127.0.0.1:0 http2;\n"
             "  rewrite ^/old/(.*)$ /new/$1 last;\n"
             "  location /new/ { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /loc/ { rewrite ^/loc/(.*)$ /moved/$1 break;\n"
             "                  proxy_pass http://127.0.0.1:%d; }\n"
             "  location /lim/ { limit_req zone=r burst=10 nodelay; limit_conn c 10;\n"
             "                  proxy_pass http://127.0.0.1:%d; }\n"
             "  location /wait/ { limit_req zone=w burst=10; proxy_pass http://127.0.0.1:%d; }\n"
             "}\n"
             "server {\n  listen 127.0.0.1:0 http2;\n  server_name plain;\n"
             "  location /p/ { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /lim/ { limit_req zone=r burst=10 nodelay; limit_conn c 10;\n"
             "                  proxy_pass http://127.0.0.1:%d; }\n"
             "  location /wait/ { limit_req zone=w burst=10; proxy_pass http://127.0.0.1:%d; }\n"
             "}\n",
             b.port, b.port, b.port, b.port, b.port, b.port, b.port);
    struct test_daemon d;
    start(&d, conf);
    /* Two streams to /wait/ sent together: the second waits its turn. */
    static const char *const rewritten[] = {"/old/t1", "/loc/t2", "/lim/t3", "/wait/t4",
                                            "/wait/t5"};
    static const char *const plain[] = {"/p/t6", "/lim/t7", "/wait/t8", "/wait/t9"};
    unsigned statuses[8];
    h2_post_with_trailers(d.port, "a", rewritten, 5, statuses);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(statuses[i] == 200, "%s: %u", rewritten[i], statuses[i]);
    h2_post_with_trailers(d.port, "plain", plain, 4, statuses);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(statuses[i] == 200, "%s: %u", plain[i], statuses[i]);
    /* Every request that came without its trailers, to name them all. */
    char missing[128] = "", first[2048] = "", got[2048];
    for (int i = 1; i <= 9; i++) {
        char token[16];
        snprintf(token, sizeof(token), "/t%d ", i);
        record_of(&b, token, got, sizeof(got));
        if (strcasestr(got, "\r\ntransfer-encoding: chunked\r\n") == NULL ||
            strstr(got, "\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n") == NULL) {
            if (missing[0] == '\0')
                snprintf(first, sizeof(first), "%s", got);
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " t%d", i);
        }
    }
    ck_assert_msg(missing[0] == '\0', "without their trailers:%s; the first: %s", missing, first);
    ck_assert_int_ge(metric(&d, "corral_limit_req_requests_total{zone=\"w\",result=\"delayed\"} "),
                     2);
    test_daemon_stop(&d);
    record_stop(&b);
}
END_TEST

/* --------------------------------------------------------------- reloads */

static void reload_to(struct test_daemon *d, const char *text, unsigned generation)
{
    test_daemon_write_config(d, text);
    kill(d->pid, SIGHUP);
    char body[8192], want[64];
    snprintf(want, sizeof(want), "\"config_generation\": %u", generation);
    for (int i = 0; i < 500; i++) {
        if (test_daemon_admin_get(d, "/status", body, sizeof(body)) == 200 &&
            strstr(body, want) != NULL)
            return;
        usleep(10000);
    }
    ck_abort_msg("no generation %u: %s", generation, body);
}

/* A zone whose name and size stay keeps its state across a reload; one
 * whose size changes starts empty. */
START_TEST(zones_survive_a_reload)
{
    static const char conf[] = "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
                               "limit_req_zone $binary_remote_addr zone=keep:%s rate=1r/m;\n"
                               "server {\n  listen 127.0.0.1:0;\n"
                               "  location / { limit_req zone=keep; return 200 ok; }\n}\n";
    char text[1024];
    snprintf(text, sizeof(text), conf, "64k");
    struct test_daemon d;
    start(&d, text);
    ck_assert_uint_eq(get(d.port, "/", NULL, 0), 200);
    ck_assert_uint_eq(get(d.port, "/", NULL, 0), 503);
    reload_to(&d, text, 2);
    ck_assert_uint_eq(get(d.port, "/", NULL, 0), 503);
    snprintf(text, sizeof(text), conf, "128k");
    reload_to(&d, text, 3);
    ck_assert_uint_eq(get(d.port, "/", NULL, 0), 200);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ add_header */

/* add_header ... always reaches the answers corral makes itself: a
 * limit's 503, deny's 403, a 404 no location takes, a malformed
 * request's 400; a rule without `always` only the statuses nginx names. */
START_TEST(add_header_always_reaches_own_answers)
{
    struct test_daemon d;
    start(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
              "limit_req_zone $binary_remote_addr zone=one:64k rate=1r/m;\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  add_header X-Always \"on $host\" always;\n  add_header X-Plain yes;\n"
              "  location /denied { deny all; return 200 no; }\n"
              "  location /limited { limit_req zone=one; return 200 ok;\n"
              "    add_header X-Loc here always; }\n"
              "  location = /ok { return 200 ok; }\n}\n");
    char response[4096];
    ck_assert_uint_eq(get(d.port, "/ok", response, sizeof(response)), 200);
    ck_assert_msg(has_header(response, "X-Always: on h\r\n"), "%s", response);
    ck_assert_msg(has_header(response, "X-Plain: yes\r\n"), "%s", response);
    ck_assert_uint_eq(get(d.port, "/denied", response, sizeof(response)), 403);
    ck_assert_msg(has_header(response, "X-Always: on h\r\n"), "%s", response);
    ck_assert_msg(!has_header(response, "X-Plain:"), "%s", response);
    ck_assert_uint_eq(get(d.port, "/elsewhere", response, sizeof(response)), 404);
    ck_assert_msg(has_header(response, "X-Always: on h\r\n"), "%s", response);
    ck_assert_uint_eq(get(d.port, "/limited", response, sizeof(response)), 200);
    ck_assert_msg(has_header(response, "X-Loc: here\r\n"), "%s", response);
    ck_assert_uint_eq(get(d.port, "/limited", response, sizeof(response)), 503);
    ck_assert_msg(has_header(response, "X-Loc: here\r\n"), "%s", response);
    ck_assert_msg(!has_header(response, "X-Always:"), "%s", response); /* not inherited */
    int fd = test_connect(d.port);
    test_send_all(fd, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 36);
    ck_assert_uint_eq(read_response(fd, response, sizeof(response)), 400);
    ck_assert_msg(has_header(response, "X-Always: on \r\n"), "%s", response);
    test_daemon_stop(&d);
}
END_TEST

/* ---------------------------------------------------------------- config */

/* -t refuses what is wrong, at its file:line:col. */
START_TEST(config_errors_have_positions)
{
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"limit_req_zone $binary_remote_addr zone=one:1m rate=1r/s;\n"
         "server { listen 127.0.0.1:0;\n location / { limit_req zone=two; return 200; } }\n",
         "corral.conf:3:25: unknown limit_req zone \"two\""},
        {"limit_req_zone $nope zone=one:1m rate=1r/s;\n"
         "server { listen 127.0.0.1:0;\n location / { limit_req zone=one; return 200; } }\n",
         "corral.conf:1:16: limit_req_zone: unknown variable \"$nope\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct test_daemon d;
        test_daemon_init(&d, "corral");
        test_daemon_write_config(&d, cases[i].text);
        char out[2048], args[PATH_MAX + 8];
        snprintf(args, sizeof(args), "-t -c %s", d.conf);
        ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, cases[i].error) != NULL, "%s", out);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("limit");
    TCase *tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_add_test(tc, rate_and_burst_hold_across_workers);
    tcase_add_test(tc, excess_is_delayed_then_refused);
    tcase_add_test(tc, delays_follow_the_rate);
    tcase_add_test(tc, client_gone_while_delayed);
    tcase_add_test(tc, http2_streams_are_limited);
    tcase_add_test(tc, limit_conn_counts_exchanges_under_way);
    tcase_add_test(tc, zones_survive_a_reload);
    tcase_add_test(tc, add_header_always_reaches_own_answers);
    tcase_add_test(tc, config_errors_have_positions);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    tc = tcase_create("trailers");
    test_daemon_fixture(tc);
    tcase_add_test(tc, http2_request_trailers_pass_rewrite_and_limits);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
