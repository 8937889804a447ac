/*
 * test_http2.c: HTTP/2 toward clients as a user runs it: build/corral with
 * a temporary config, driven by curl (prior knowledge, and ALPN over TLS)
 * and h2load, in front of a small HTTP/1.1 backend written here that reads
 * every request body whole and answers with its length.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------- backend */

/* Answers every request with "len=N" (N: the body's bytes) and closes
 * (POST /p/sha: with the body kept in the file "received"); a
 * response of `big` bytes for /p/big, after a second for /p/slow;
 * for /p/hold it waits three seconds before it reads the body.  A
 * thread per connection, so that slow requests overlap. */
struct backend {
    int fd, port;
    pthread_t thread;
    atomic_bool stop;
    size_t big;
};

/* The /p/slow requests that have reached a backend, for a test to act
 * while they wait there (see with_slow_streams()). */
static atomic_uint slow_arrivals;

struct backend_conn {
    int fd;
    size_t big;
};

static void backend_serve(const struct backend_conn *b, int fd)
{
    char head[16384];
    size_t have = 0;
    char *end = NULL;
    while (have < sizeof(head) - 1 && end == NULL) {
        ssize_t n = recv(fd, head + have, sizeof(head) - 1 - have, 0);
        if (n <= 0)
            return;
        have += (size_t)n;
        head[have] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (end == NULL)
        return;
    size_t body_in_head = have - (size_t)(end + 4 - head);
    uint64_t length = 0, got = body_in_head;
    bool chunked = strcasestr(head, "transfer-encoding: chunked") != NULL;
    const char *cl = strcasestr(head, "\r\ncontent-length:");
    if (cl != NULL)
        length = strtoull(cl + 17, NULL, 10);
    if (strncmp(head, "POST /p/hold ", 13) == 0)
        usleep(3000 * 1000);
    char buf[65536];
    if (chunked) {
        /* Enough for the tests: read until the last chunk. */
        char tail[8] = {0};
        memcpy(tail, have >= 5 ? head + have - 5 : head, have >= 5 ? 5 : have);
        while (strstr(tail, "0\r\n\r\n") == NULL) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                return;
            got += (size_t)n;
            memcpy(tail, n >= 5 ? buf + n - 5 : buf, n >= 5 ? 5 : (size_t)n);
        }
    } else {
        /* /p/sha: the body is kept for the test to compare its SHA-256. */
        FILE *keep = NULL;
        if (strncmp(head, "POST /p/sha ", 12) == 0) {
            char path[PATH_MAX];
            test_daemon_file(path, sizeof(path), "received");
            keep = fopen(path, "w");
            if (keep != NULL)
                fwrite(end + 4, 1, body_in_head, keep);
        }
        while (got < length) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            got += (size_t)n;
            if (keep != NULL)
                fwrite(buf, 1, (size_t)n, keep);
        }
        if (keep != NULL)
            fclose(keep);
        if (got < length)
            return;
    }
    char reply[256];
    if (strncmp(head, "GET /p/big ", 11) == 0) {
        int len =
            snprintf(reply, sizeof(reply),
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", b->big);
        test_send_all(fd, reply, (size_t)len);
        memset(buf, 'x', sizeof(buf));
        for (size_t sent = 0; sent < b->big;) {
            size_t n = b->big - sent < sizeof(buf) ? b->big - sent : sizeof(buf);
            if (send(fd, buf, n, MSG_NOSIGNAL) <= 0)
                return;
            sent += n;
        }
        return;
    }
    if (strncmp(head, "GET /p/slow ", 12) == 0) {
        atomic_fetch_add(&slow_arrivals, 1);
        usleep(1000 * 1000);
    }
    char text[64];
    int text_len = snprintf(text, sizeof(text), "len=%llu\n", (unsigned long long)length);
    int len = snprintf(reply, sizeof(reply),
                       "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                       text_len, text);
    test_send_all(fd, reply, (size_t)len);
}

static void *backend_conn_run(void *arg)
{
    struct backend_conn *c = arg;
    backend_serve(c, c->fd);
    close(c->fd);
    free(c);
    return NULL;
}

static void *backend_run(void *arg)
{
    struct backend *b = arg;
    while (!atomic_load(&b->stop)) {
        int fd = accept(b->fd, NULL, NULL);
        if (fd == -1)
            continue;
        /* Every wait is bounded: a connection thread ends within 10 s. */
        struct timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        struct backend_conn *c = malloc(sizeof(*c));
        pthread_t thread;
        if (c == NULL)
            abort();
        *c = (struct backend_conn){fd, b->big};
        if (pthread_create(&thread, NULL, backend_conn_run, c) != 0)
            abort();
        pthread_detach(thread);
    }
    return NULL;
}

/* Takes a port that refuses connections until backend_listen(). */
static void backend_bind(struct backend *b, size_t big)
{
    *b = (struct backend){.big = big};
    b->fd = test_reserve_port(&b->port);
}

static void backend_listen(struct backend *b)
{
    ck_assert_int_eq(listen(b->fd, 128), 0);
    /* accept() wakes every 100 ms to see the stop flag. */
    struct timeval tv = {0, 100000};
    setsockopt(b->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_eq(pthread_create(&b->thread, NULL, backend_run, b), 0);
}

static void backend_start(struct backend *b, size_t big)
{
    backend_bind(b, big);
    backend_listen(b);
}

static void backend_stop(struct backend *b)
{
    atomic_store(&b->stop, true);
    /* Wakes accept() at once (it fails from now on), instead of at the
     * end of its 100 ms timeout: a case's stop is that much shorter. */
    shutdown(b->fd, SHUT_RDWR);
    pthread_join(b->thread, NULL);
    close(b->fd);
}

/* ------------------------------------------------------------- daemon */

/* One server on an ephemeral port with HTTP/2 on (`listen_flags`), whose
 * / returns "hello", /p proxies to the backend, and a second server named
 * other.test; `extra` goes in the main block. */
static void start(struct test_daemon *d, const struct backend *b, const char *listen_flags,
                  const char *server_extra, const char *extra)
{
    test_daemon_init(d, "corral");
    char access[PATH_MAX], conf[PATH_MAX + 4096];
    test_daemon_file(access, sizeof(access), "access.log");
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout 10s;\nadmin { listen 127.0.0.2:0; }\n"
             "access_log %s;\nclient_max_body_size 0;\n%s\n"
             "server {\n    listen 127.0.0.1:0 %s;\n%s\n"
             "    location / { return 200 \"hello\"; }\n"
             "    location /p { proxy_pass http://127.0.0.1:%d; }\n}\n"
             "server {\n    listen 127.0.0.1:0 %s;\n    server_name other.test;\n%s\n"
             "    location / { return 200 \"other\"; }\n}\n",
             access, extra, listen_flags, server_extra, b != NULL ? b->port : 9, listen_flags,
             server_extra);
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* The SHA-256 of `file` (of the test's directory) in hex. */
static void sha256_of(const char *file, char *out, size_t size)
{
    char command[2 * PATH_MAX];
    snprintf(command, sizeof(command), "cd %s && sha256sum %s | cut -c1-64", test_daemon_dir(),
             file);
    ck_assert_int_eq(test_run(command, out, size), 0);
    out[strcspn(out, "\n")] = '\0';
    ck_assert_uint_eq(strlen(out), 64);
}

/* Whether the backend received the body of `file` whole: same SHA-256. */
static void check_received(const char *file)
{
    char sent[128], received[128];
    sha256_of(file, sent, sizeof(sent));
    sha256_of("received", received, sizeof(received));
    ck_assert_str_eq(received, sent);
}

/* Makes cert.pem and key.pem in the test's directory. */
static void make_certificate(void)
{
    char command[2 * PATH_MAX];
    snprintf(command, sizeof(command),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout key.pem -out cert.pem -days 2 -subj /CN=localhost >/dev/null 2>&1",
             test_daemon_dir());
    ck_assert_int_eq(system(command), 0);
}

/* curl with `args`, against 127.0.0.1:port; prints the body, then
 * " v=VERSION code=STATUS". */
static void curl(int port, const char *args, const char *path, char *out, size_t size)
{
    char command[3 * PATH_MAX];
    snprintf(command, sizeof(command),
             "curl -sk --max-time 20 %s -w ' v=%%{http_version} code=%%{http_code}' "
             "http://127.0.0.1:%d%s",
             args, port, path);
    test_run(command, out, size);
}

/* ------------------------------------------------------------- cases */

START_TEST(prior_knowledge_get_and_http1_on_the_same_port)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    char out[512];
    curl(d.port, "--http2-prior-knowledge", "/", out, sizeof(out));
    ck_assert_str_eq(out, "hello v=2 code=200");
    curl(d.port, "--http1.1", "/", out, sizeof(out));
    ck_assert_str_eq(out, "hello v=1.1 code=200");
    curl(d.port, "--http2-prior-knowledge", "/nothing-here/../", out, sizeof(out));
    ck_assert_str_eq(out, "hello v=2 code=200");
    /* Both framers send the one Date formatter's value. */
    for (int i = 0; i < 2; i++) {
        char command[512];
        snprintf(command, sizeof(command),
                 "curl -s --max-time 20 %s -D - -o /dev/null http://127.0.0.1:%d/ | grep -ci "
                 "'^date: [A-Z][a-z][a-z], [0-9][0-9] [A-Z][a-z][a-z] [0-9]\\{4\\} "
                 "[0-9][0-9]:[0-9][0-9]:[0-9][0-9] GMT.$'",
                 i == 0 ? "--http1.1" : "--http2-prior-knowledge", d.port);
        test_run(command, out, sizeof(out));
        ck_assert_str_eq(out, "1\n");
    }
    test_daemon_stop(&d);
}
END_TEST

START_TEST(without_the_flag_a_preface_is_not_http2)
{
    struct test_daemon d;
    start(&d, NULL, "", "", "");
    char out[512];
    curl(d.port, "--http2-prior-knowledge", "/", out, sizeof(out));
    ck_assert_msg(strstr(out, "v=2 code=200") == NULL, "%s", out);
    curl(d.port, "--http1.1", "/", out, sizeof(out));
    ck_assert_str_eq(out, "hello v=1.1 code=200");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(vhost_is_picked_by_authority)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    char out[512];
    curl(d.port, "--http2-prior-knowledge -H 'Host: other.test'", "/", out, sizeof(out));
    ck_assert_str_eq(out, "other v=2 code=200");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(proxied_get_and_large_post)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char out[512], command[2 * PATH_MAX], body[PATH_MAX];
    curl(d.port, "--http2-prior-knowledge", "/p", out, sizeof(out));
    ck_assert_str_eq(out, "len=0\n v=2 code=200");
    test_daemon_file(body, sizeof(body), "body");
    snprintf(command, sizeof(command), "head -c 8000000 /dev/urandom > %s", body);
    ck_assert_int_eq(system(command), 0);
    snprintf(command, sizeof(command), "--http2-prior-knowledge --data-binary @%s", body);
    curl(d.port, command, "/p/upload", out, sizeof(out));
    ck_assert_str_eq(out, "len=8000000\n v=2 code=200");
    curl(d.port, command, "/p/sha", out, sizeof(out));
    ck_assert_str_eq(out, "len=8000000\n v=2 code=200");
    check_received("body");
    /* Without a length: the proxy sends it upstream chunked. */
    snprintf(command, sizeof(command),
             "--http2-prior-knowledge -H 'Transfer-Encoding:' --data-binary @- < %s", body);
    curl(d.port, command, "/p/upload", out, sizeof(out));
    ck_assert_msg(strstr(out, " v=2 code=200") != NULL, "%s", out);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

START_TEST(hundred_concurrent_streams_on_one_connection)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char command[256], out[8192];
    const char *paths[] = {"/", "/p"};
    for (int i = 0; i < 2; i++) {
        snprintf(command, sizeof(command), "h2load -n 100 -c 1 -m 100 http://127.0.0.1:%d%s 2>&1",
                 d.port, paths[i]);
        test_run(command, out, sizeof(out));
        ck_assert_msg(strstr(out, "100 succeeded, 0 failed") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "status codes: 100 2xx") != NULL, "%s", out);
    }
    char metrics[16384];
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", metrics, sizeof(metrics)), 200);
    ck_assert_msg(strstr(metrics, "corral_http2_events_total{event=\"streams_opened\"} 200") !=
                      NULL,
                  "%s", metrics);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

START_TEST(access_log_says_http_2_0)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    char out[512];
    curl(d.port, "--http2-prior-knowledge", "/logged", out, sizeof(out));
    ck_assert_str_eq(out, "hello v=2 code=200");
    test_daemon_stop(&d);
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "access.log");
    char *log = test_read_file(path);
    ck_assert_msg(strstr(log, "\"GET /logged HTTP/2.0\" 200 5") != NULL, "%s", log);
    free(log);
}
END_TEST

START_TEST(tls_alpn_offers_h2_and_http_1_1)
{
    char command[2 * PATH_MAX], out[512];
    make_certificate();
    struct test_daemon d;
    start(&d, NULL, "tls http2", "    tls_certificate cert.pem;\n    tls_certificate_key key.pem;",
          "");
    snprintf(command, sizeof(command),
             "curl -sk --max-time 20 --http2 -w ' v=%%{http_version}' https://127.0.0.1:%d/",
             d.port);
    test_run(command, out, sizeof(out));
    ck_assert_str_eq(out, "hello v=2");
    snprintf(command, sizeof(command),
             "curl -sk --max-time 20 --http1.1 -w ' v=%%{http_version}' https://127.0.0.1:%d/",
             d.port);
    test_run(command, out, sizeof(out));
    ck_assert_str_eq(out, "hello v=1.1");
    test_daemon_stop(&d);
}
END_TEST

/* Over TLS (ALPN h2): a proxied GET, an 8 MB POST whose SHA-256 the backend
 * checks, and 100 concurrent streams on one connection. */
START_TEST(tls_get_large_post_and_hundred_streams)
{
    struct backend b;
    backend_start(&b, 0);
    make_certificate();
    struct test_daemon d;
    start(&d, &b, "tls http2", "    tls_certificate cert.pem;\n    tls_certificate_key key.pem;",
          "");
    char command[3 * PATH_MAX], out[8192], body[PATH_MAX];
    snprintf(command, sizeof(command),
             "curl -sk --max-time 20 --http2 -w ' v=%%{http_version} code=%%{http_code}' "
             "https://127.0.0.1:%d/p",
             d.port);
    test_run(command, out, sizeof(out));
    ck_assert_str_eq(out, "len=0\n v=2 code=200");

    test_daemon_file(body, sizeof(body), "body");
    snprintf(command, sizeof(command), "head -c 8000000 /dev/urandom > %s", body);
    ck_assert_int_eq(system(command), 0);
    snprintf(command, sizeof(command),
             "curl -sk --max-time 30 --http2 --data-binary @%s "
             "-w ' v=%%{http_version} code=%%{http_code}' https://127.0.0.1:%d/p/sha",
             body, d.port);
    test_run(command, out, sizeof(out));
    ck_assert_str_eq(out, "len=8000000\n v=2 code=200");
    check_received("body");

    snprintf(command, sizeof(command), "h2load -n 100 -c 1 -m 100 https://127.0.0.1:%d/p 2>&1",
             d.port);
    test_run(command, out, sizeof(out));
    ck_assert_msg(strstr(out, "Application protocol: h2") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "100 succeeded, 0 failed") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "status codes: 100 2xx") != NULL, "%s", out);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* `name` in the source tree, found from this program's path (build/...). */
static void source_file(char *buf, size_t size, const char *name)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    char *cut = strstr(self, "/build/");
    ck_assert_ptr_nonnull(cut);
    *cut = '\0';
    ck_assert_int_lt(snprintf(buf, size, "%s/%s", self, name), (int)size);
}

/* A client that opens its windows slowly (python3-h2, 12.5 MB/s): the
 * backend's large response waits upstream, not in corral's memory. */
START_TEST(slow_reader_of_a_large_response_keeps_memory_bounded)
{
    struct backend b;
    backend_start(&b, 50u * 1024 * 1024);
    /* Under ASan, freed memory waits in a quarantine (256 MB by default)
     * that would stand for RSS: keep it small for this daemon. */
    char asan[512];
    const char *inherited = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=8", inherited ? inherited : "",
             inherited && *inherited ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char command[2 * PATH_MAX], out[512], reader[PATH_MAX];
    source_file(reader, sizeof(reader), "tests/proto/h2/slow_reader.py");
    /* 50 MB at 12.5 MB/s: four seconds, during which RSS is sampled.  The
     * backend sends it all at loopback speed, many times faster: a proxy
     * that read on regardless would hold most of it within the first. */
    snprintf(command, sizeof(command),
             "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 %s %d /p/big 12500000 60", reader, d.port);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    long max_rss_kb = 0;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
    /* Every 100 ms until the reader has its answer (and prints it). */
    for (bool done = false; !done;) {
        struct pollfd pfd = {.fd = fileno(p), .events = POLLIN};
        done = poll(&pfd, 1, 100) != 0;
        FILE *f = fopen(path, "r");
        if (f == NULL)
            break;
        while (fgets(line, sizeof(line), f) != NULL)
            if (strncmp(line, "VmRSS:", 6) == 0 && atol(line + 6) > max_rss_kb)
                max_rss_kb = atol(line + 6);
        fclose(f);
    }
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    char *log = test_daemon_log(&d);
    ck_assert_msg(strstr(out, "status=200 bytes=52428800") != NULL, "%s\n%s", out, log);
    free(log);
    /* Far below the 50 MB body (ASan's own overhead included). */
    ck_assert_msg(max_rss_kb < 64 * 1024, "RSS reached %ld kB", max_rss_kb);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

struct slow_load {
    int port;
    char out[8192];
};

static void *slow_load_run(void *arg)
{
    struct slow_load *load = arg;
    char command[256];
    snprintf(command, sizeof(command),
             "timeout 30 h2load -n 100 -c 1 -m 100 http://127.0.0.1:%d/p/slow 2>&1", load->port);
    test_run(command, load->out, sizeof(load->out));
    return NULL;
}

/* 100 streams of /p/slow on one connection to d, and `sig` to the daemon
 * once all 100 wait at the backend (polled, not guessed); h2load's
 * report in `out`. */
static void with_slow_streams(struct test_daemon *d, int sig, char *out, size_t size)
{
    struct slow_load load = {.port = d->port};
    unsigned before = atomic_load(&slow_arrivals);
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, slow_load_run, &load), 0);
    bool waiting = false;
    for (uint64_t until = test_now_ms() + 10000;
         !(waiting = atomic_load(&slow_arrivals) - before >= 100) && test_now_ms() < until;)
        test_sleep_ms(TEST_POLL_MS);
    kill(d->pid, sig);
    pthread_join(thread, NULL);
    snprintf(out, size, "%s", load.out);
    ck_assert_msg(waiting, "not all 100 streams reached the backend: %s", out);
}

/* A graceful stop while 100 streams wait on their backend: each completes
 * before the daemon exits. */
START_TEST(graceful_stop_lets_open_streams_finish)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char out[8192];
    with_slow_streams(&d, SIGTERM, out, sizeof(out));
    ck_assert_msg(strstr(out, "100 succeeded, 0 failed, 0 errored") != NULL, "%s", out);
    /* It stops by itself (a second SIGTERM would not be graceful). */
    int status = test_wait_exit(d.pid, 15000);
    d.pid = -1;
    ck_assert_msg(status == 0, "exit status %d (-1: the daemon did not stop)", status);
    backend_stop(&b);
}
END_TEST

/* Two 4 MB uploads on one connection, one to a backend that does not read
 * for three seconds: the proxy pauses that stream's body, which withholds
 * that stream's window only, so the other completes at once. */
START_TEST(paused_request_body_stalls_only_its_stream)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char command[2 * PATH_MAX], out[8192], body[PATH_MAX];
    test_daemon_file(body, sizeof(body), "body");
    snprintf(command, sizeof(command), "head -c 4000000 /dev/zero > %s", body);
    ck_assert_int_eq(system(command), 0);
    snprintf(command, sizeof(command),
             "timeout 30 nghttp -ns -d %s http://127.0.0.1:%d/p/hold http://127.0.0.1:%d/p/fast "
             "2>&1",
             body, d.port, d.port);
    test_run(command, out, sizeof(out));
    /* "id  responseEnd requestStart  process code size request path" */
    const char *fast = strstr(out, " /p/fast"), *hold = strstr(out, " /p/hold");
    ck_assert_msg(fast != NULL && hold != NULL, "%s", out);
    const char *line = fast;
    while (line > out && line[-1] != '\n')
        line--;
    char end_unit[8] = "";
    double end = 0;
    int code = 0, id = 0;
    ck_assert_msg(sscanf(line, "%d +%lf%7[a-z] %*s %*s %d", &id, &end, end_unit, &code) == 4, "%s",
                  out);
    double end_ms = strcmp(end_unit, "s") == 0    ? end * 1000
                    : strcmp(end_unit, "us") == 0 ? end / 1000
                                                  : end;
    ck_assert_msg(code == 200 && end_ms < 2500, "%s", out);
    ck_assert_msg(strstr(out, "200   12 /p/hold") != NULL, "%s", out);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* 100 streams that each wait a second upstream, and a reload meanwhile:
 * GOAWAY names the last of them, and every one completes. */
START_TEST(reload_with_streams_in_flight_loses_none)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    char out[8192];
    with_slow_streams(&d, SIGHUP, out, sizeof(out));
    ck_assert_msg(strstr(out, "100 succeeded, 0 failed, 0 errored") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "status codes: 100 2xx") != NULL, "%s", out);
    char *log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "generation 2") != NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A client that never opens its window: the stream is reset (CANCEL)
 * once send_timeout passes without progress, and the timeout is counted. */
START_TEST(stream_stalled_at_a_zero_window_is_reset)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "send_timeout 1s;");
    /* The preface, SETTINGS_INITIAL_WINDOW_SIZE 0, an ACK of the server's
     * SETTINGS, and GET / (HPACK: :method GET, :scheme http, :path /,
     * :authority a). */
    static const char request[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\6\4\0\0\0\0\0"
                                  "\0\4\0\0\0\0"
                                  "\0\0\0\4\1\0\0\0\0"
                                  "\0\0\6\1\5\0\0\0\1"
                                  "\x82\x86\x84\x41\1a";
    int fd = test_connect(d.port);
    test_send_all(fd, request, sizeof(request) - 1);
    uint64_t start_ms = test_now_ms();
    bool reset = false;
    unsigned char frame[9];
    /* test_recv_all() waits at most 5 s for each piece. */
    while (!reset && test_recv_all(fd, frame, 9) == 9 && test_now_ms() - start_ms < 10000) {
        size_t len = (size_t)frame[0] << 16 | (size_t)frame[1] << 8 | frame[2];
        unsigned char payload[16384];
        ck_assert_uint_le(len, sizeof(payload));
        ck_assert_uint_eq(test_recv_all(fd, payload, len), len);
        reset = frame[3] == 3 && frame[8] == 1 && len == 4 && payload[3] == 8;
    }
    close(fd);
    ck_assert_msg(reset, "no RST_STREAM(CANCEL) for stream 1");
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    char metrics[16384];
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", metrics, sizeof(metrics)), 200);
    ck_assert_msg(strstr(metrics, "corral_client_timeouts_total{kind=\"send\"} 1") != NULL, "%s",
                  metrics);
    ck_assert_msg(strstr(metrics, "corral_http2_events_total{event=\"streams_stalled\"} 1") != NULL,
                  "%s", metrics);
    ck_assert_msg(strstr(metrics, "corral_http2_events_total{event=\"resets_sent\"} 1") != NULL,
                  "%s", metrics);
    test_daemon_stop(&d);
}
END_TEST

/* Reads frames until the server closes (or 10 s pass): whether a GOAWAY
 * with `code` came. */
static bool goaway_then_close(int fd, unsigned code)
{
    bool goaway = false;
    unsigned char frame[9], payload[16384];
    uint64_t start_ms = test_now_ms();
    while (test_recv_all(fd, frame, 9) == 9 && test_now_ms() - start_ms < 10000) {
        size_t len = (size_t)frame[0] << 16 | (size_t)frame[1] << 8 | frame[2];
        ck_assert_uint_le(len, sizeof(payload));
        ck_assert_uint_eq(test_recv_all(fd, payload, len), len);
        if (frame[3] == 7 && len >= 8)
            goaway = payload[7] == code && payload[4] == 0 && payload[5] == 0 && payload[6] == 0;
    }
    return goaway;
}

START_TEST(idle_connection_gets_goaway_and_closes)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "http2_idle_timeout 1s;");
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    int fd = test_connect(d.port);
    test_send_all(fd, preface, sizeof(preface) - 1);
    uint64_t start_ms = test_now_ms();
    ck_assert(goaway_then_close(fd, 0));
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    close(fd);
    char metrics[16384];
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", metrics, sizeof(metrics)), 200);
    ck_assert_msg(strstr(metrics, "corral_http2_events_total{event=\"goaway_no_error\"} 1") != NULL,
                  "%s", metrics);
    test_daemon_stop(&d);
}
END_TEST

/* A stream the client resets while its backend is slow is counted, and so
 * is the stream. */
START_TEST(client_reset_is_counted)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "");
    /* The preface, empty SETTINGS, an ACK, GET /p/slow (HPACK: :method GET,
     * :scheme http, :path /p/slow, :authority a) and RST_STREAM(CANCEL). */
    static const char request[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"
                                  "\0\0\0\4\1\0\0\0\0"
                                  "\0\0\x0e\1\5\0\0\0\1"
                                  "\x82\x86\x04\x07/p/slow\x41\1a"
                                  "\0\0\4\3\0\0\0\0\1\0\0\0\x08";
    int fd = test_connect(d.port);
    test_send_all(fd, request, sizeof(request) - 1);
    char metrics[16384];
    bool counted = false;
    for (int i = 0; i < 200 && !counted; i++) {
        usleep(10000);
        ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", metrics, sizeof(metrics)), 200);
        counted = strstr(metrics, "corral_http2_events_total{event=\"resets_received\"} 1") != NULL;
    }
    ck_assert_msg(counted, "%s", metrics);
    ck_assert_msg(strstr(metrics, "corral_http2_events_total{event=\"streams_opened\"} 1") != NULL,
                  "%s", metrics);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* Reads frames until stream `id` ends (END_STREAM on its HEADERS or DATA,
 * or its RST_STREAM), or 10 s pass: whether it did. */
static bool stream_ends(int fd, unsigned id)
{
    unsigned char frame[9], payload[16384];
    uint64_t start_ms = test_now_ms();
    while (test_now_ms() - start_ms < 10000 && test_recv_all(fd, frame, 9) == 9) {
        size_t len = (size_t)frame[0] << 16 | (size_t)frame[1] << 8 | frame[2];
        ck_assert_uint_le(len, sizeof(payload));
        ck_assert_uint_eq(test_recv_all(fd, payload, len), len);
        unsigned sid = (unsigned)(frame[5] & 0x7f) << 24 | (unsigned)frame[6] << 16 |
                       (unsigned)frame[7] << 8 | frame[8];
        bool end = (frame[3] == 0 || frame[3] == 1) && (frame[4] & 1) != 0;
        if (sid == id && (end || frame[3] == 3))
            return true;
    }
    return false;
}

/* A backend that refused the first connection and listens later: once its
 * fail_timeout has passed, HTTP/2 requests reach it as HTTP/1.1 ones do, on
 * the connection that saw the 502 as on a new one, and the error log says
 * the server was marked down. */
START_TEST(backend_up_after_a_refused_connect_serves_http2)
{
    struct backend b;
    backend_bind(&b, 0);
    char extra[256];
    snprintf(extra, sizeof(extra), "upstream late { server 127.0.0.1:%d fail_timeout=1s; }",
             b.port);
    struct test_daemon d;
    start(&d, NULL, "http2", "    location /late { proxy_pass http://late; }", extra);
    /* The preface, empty SETTINGS, an ACK of the server's, and GET /late
     * (HPACK: :method GET, :scheme http, :path /late, :authority a). */
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"
                                  "\0\0\0\4\1\0\0\0\0";
    static const char get1[] = "\0\0\x0c\1\5\0\0\0\1"
                               "\x82\x86\x04\x05/late\x41\1a";
    static const char get3[] = "\0\0\x0c\1\5\0\0\0\3"
                               "\x82\x86\x04\x05/late\x41\1a";
    int fd = test_connect(d.port);
    test_send_all(fd, preface, sizeof(preface) - 1);
    test_send_all(fd, get1, sizeof(get1) - 1);
    ck_assert(stream_ends(fd, 1));
    char out[512];
    curl(d.port, "--http1.1", "/late", out, sizeof(out));
    ck_assert_msg(strstr(out, "v=1.1 code=502") != NULL, "%s", out);

    backend_listen(&b);
    usleep(1100 * 1000); /* fail_timeout=1s since the failure, before the sleep */
    test_send_all(fd, get3, sizeof(get3) - 1);
    ck_assert(stream_ends(fd, 3));
    close(fd);
    curl(d.port, "--http2-prior-knowledge", "/late", out, sizeof(out));
    ck_assert_str_eq(out, "len=0\n v=2 code=200");
    curl(d.port, "--http1.1", "/late", out, sizeof(out));
    ck_assert_str_eq(out, "len=0\n v=1.1 code=200");
    test_daemon_stop(&d);
    backend_stop(&b);

    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "access.log");
    char *log = test_read_file(path);
    const char *first = strstr(log, "\"GET /late HTTP/2.0\" 502");
    ck_assert_msg(first != NULL, "%s", log);
    ck_assert_msg(strstr(first, "\"GET /late HTTP/2.0\" 200") != NULL, "%s", log);
    free(log);
    log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "127.0.0.1:") != NULL && strstr(log, "marked down") != NULL, "%s",
                  log);
    free(log);
}
END_TEST

/* ------------------------------------------------- raw frames, slowly */

/* What a raw client saw of the server: GOAWAY, resets, responses, EOF. */
struct h2_seen {
    unsigned char buf[65536 + 9];
    size_t have;
    int goaway;              /* its error code; -1: none */
    uint32_t goaway_last[4]; /* the last stream id each GOAWAY named, in order */
    unsigned goaways;
    bool ping; /* a PING that asks for an answer came */
    unsigned char ping_data[8];
    int rst[16];         /* by stream id / 2: RST_STREAM's code; -1: none */
    unsigned status[16]; /* by stream id / 2: the first HEADERS seen (1: some) */
    bool ended[16];      /* by stream id / 2: END_STREAM seen */
    char body[4096];     /* stream 1's response body (its start) */
    size_t body_len;
    bool eof;
};

static void seen_init(struct h2_seen *s)
{
    memset(s, 0, sizeof(*s));
    s->goaway = -1;
    for (size_t i = 0; i < 16; i++)
        s->rst[i] = -1;
}

/* Reads what arrives within `wait_ms` (0: only what is there) and records
 * the frames; false once the server has closed. */
static bool seen_read(int fd, struct h2_seen *s, int wait_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (s->eof)
        return false;
    if (poll(&p, 1, wait_ms) <= 0)
        return true;
    ssize_t n = recv(fd, s->buf + s->have, sizeof(s->buf) - s->have, MSG_DONTWAIT);
    if (n <= 0) {
        s->eof = n == 0 || (errno != EAGAIN && errno != EINTR);
        return !s->eof;
    }
    s->have += (size_t)n;
    size_t off = 0;
    while (s->have - off >= 9) {
        const unsigned char *f = s->buf + off;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        ck_assert_uint_le(len, sizeof(s->buf) - 9);
        if (s->have - off < 9 + len)
            break;
        unsigned sid =
            (unsigned)(f[5] & 0x7f) << 24 | (unsigned)f[6] << 16 | (unsigned)f[7] << 8 | f[8];
        const unsigned char *pl = f + 9;
        if (f[3] == 7 && len >= 8) {
            s->goaway =
                (int)((unsigned)pl[4] << 24 | (unsigned)pl[5] << 16 | (unsigned)pl[6] << 8 | pl[7]);
            if (s->goaways < 4)
                s->goaway_last[s->goaways] = (uint32_t)(pl[0] & 0x7f) << 24 |
                                             (uint32_t)pl[1] << 16 | (uint32_t)pl[2] << 8 | pl[3];
            s->goaways++;
        }
        if (f[3] == 6 && len == 8 && (f[4] & 1) == 0) {
            s->ping = true;
            memcpy(s->ping_data, pl, 8);
        }
        if (sid / 2 < 16 && f[3] == 3 && len == 4 && s->rst[sid / 2] == -1)
            s->rst[sid / 2] = pl[3];
        if (sid / 2 < 16 && f[3] == 1)
            s->status[sid / 2] = 1;
        if (sid / 2 < 16 && (f[3] == 0 || f[3] == 1) && (f[4] & 1) != 0)
            s->ended[sid / 2] = true;
        if (sid == 1 && f[3] == 0) {
            size_t n1 =
                len < sizeof(s->body) - 1 - s->body_len ? len : sizeof(s->body) - 1 - s->body_len;
            memcpy(s->body + s->body_len, pl, n1);
            s->body_len += n1;
            s->body[s->body_len] = '\0';
        }
        off += 9 + len;
    }
    memmove(s->buf, s->buf + off, s->have - off);
    s->have -= off;
    return true;
}

/* Reads until the server closes or `ms` pass: how long it took (ms), or
 * UINT64_MAX when it stayed open. */
static uint64_t seen_until_close(int fd, struct h2_seen *s, uint64_t ms)
{
    uint64_t start_ms = test_now_ms();
    while (test_now_ms() - start_ms < ms)
        if (!seen_read(fd, s, 50))
            return test_now_ms() - start_ms;
    return UINT64_MAX;
}

/* Sends `data` `step` bytes every `interval_ms`, reading what comes back;
 * stops early once the server closes.  Returns how many bytes went out. */
static size_t trickle(int fd, struct h2_seen *s, const char *data, size_t len, size_t step,
                      int interval_ms)
{
    size_t sent = 0;
    while (sent < len && !s->eof) {
        size_t n = len - sent < step ? len - sent : step;
        if (send(fd, data + sent, n, MSG_NOSIGNAL) != (ssize_t)n)
            break;
        sent += n;
        uint64_t until = test_now_ms() + (uint64_t)interval_ms;
        while (test_now_ms() < until && seen_read(fd, s, (int)(until - test_now_ms())))
            ;
    }
    return sent;
}

/* A frame's 9-byte header in front of `payload`, into `out`; its length. */
static size_t frame(char *out, unsigned type, unsigned flags, unsigned sid, const char *payload,
                    size_t len)
{
    unsigned char h[9] = {
        (unsigned char)(len >> 16), (unsigned char)(len >> 8), (unsigned char)len,
        (unsigned char)type,        (unsigned char)flags,      (unsigned char)(sid >> 24),
        (unsigned char)(sid >> 16), (unsigned char)(sid >> 8), (unsigned char)sid};
    memcpy(out, h, 9);
    memcpy(out + 9, payload, len);
    return 9 + len;
}

/* The preface, empty SETTINGS and an ACK of the server's. */
static const char h2_start[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                               "\0\0\0\4\0\0\0\0\0"
                               "\0\0\0\4\1\0\0\0\0";
/* HPACK: :method GET, :scheme http, :path /, :authority a. */
static const char get_block[] = "\x82\x86\x84\x41\1a";

/* The metric line `line` is in /metrics. */
static void check_metric(const struct test_daemon *d, const char *line)
{
    char metrics[16384];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", metrics, sizeof(metrics)), 200);
    ck_assert_msg(strstr(metrics, line) != NULL, "no %s in:\n%s", line, metrics);
}

#define HEADERS_END_STREAM_END_HEADERS 5

/* client_header_timeout 1s, and an idle timeout far beyond it. */
static int start_slow(struct test_daemon *d)
{
    start(d, NULL, "http2", "", "client_header_timeout 1s;\nhttp2_idle_timeout 30s;");
    int fd = test_connect(d->port);
    test_send_all(fd, h2_start, sizeof(h2_start) - 1);
    return fd;
}

/* A client that never answers the stop's PING gets the final GOAWAY and
 * the close anyway, a second later. */
START_TEST(reload_does_not_wait_for_an_unanswered_ping)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    int fd = test_connect(d.port);
    test_send_all(fd, preface, sizeof(preface) - 1);
    struct h2_seen s;
    seen_init(&s);
    ck_assert(seen_read(fd, &s, 200)); /* the server's SETTINGS */
    kill(d.pid, SIGHUP);
    uint64_t start_ms = test_now_ms();
    uint64_t took = seen_until_close(fd, &s, TEST_WAIT_MS);
    close(fd);
    ck_assert_msg(took != UINT64_MAX, "the connection stayed open");
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    ck_assert_uint_eq(s.goaways, 2);
    ck_assert_uint_eq(s.goaway_last[0], 0x7fffffff);
    ck_assert_uint_eq(s.goaway_last[1], 0);
    test_daemon_stop(&d);
}
END_TEST

/* A reload stops a connection in two steps (RFC 9113 6.8): GOAWAY naming
 * the highest stream id possible, with a PING; a stream the client opened
 * before it answered the PING is still served, and only then comes the
 * GOAWAY with the last stream taken, and the close. */
START_TEST(reload_serves_streams_opened_before_the_goaway_was_seen)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    /* The preface, an empty SETTINGS, an ACK of the server's, and GET /
     * on stream 1 (HPACK: :method GET, :scheme http, :path /,
     * :authority a). */
    static const char request[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"
                                  "\0\0\0\4\1\0\0\0\0"
                                  "\0\0\6\1\5\0\0\0\1"
                                  "\x82\x86\x84\x41\1a";
    int fd = test_connect(d.port);
    test_send_all(fd, request, sizeof(request) - 1);
    struct h2_seen s;
    seen_init(&s);
    for (uint64_t end = test_now_ms() + TEST_WAIT_MS; !s.ended[0] && test_now_ms() < end;)
        ck_assert(seen_read(fd, &s, 50));
    ck_assert_msg(s.ended[0], "no response to stream 1");
    kill(d.pid, SIGHUP);
    for (uint64_t end = test_now_ms() + TEST_WAIT_MS;
         (s.goaways == 0 || !s.ping) && test_now_ms() < end;)
        ck_assert(seen_read(fd, &s, 50));
    ck_assert_uint_eq(s.goaways, 1);
    ck_assert_uint_eq(s.goaway_last[0], 0x7fffffff);
    ck_assert_int_eq(s.goaway, 0);
    ck_assert_msg(s.ping, "no PING after the first GOAWAY");
    /* Stream 3, sent as if before the GOAWAY arrived, then the PING's ACK. */
    static const char stream3[] = "\0\0\6\1\5\0\0\0\3"
                                  "\x82\x86\x84\x41\1a";
    char ack[9 + 8] = "\0\0\x08\6\1\0\0\0\0";
    memcpy(ack + 9, s.ping_data, 8);
    test_send_all(fd, stream3, sizeof(stream3) - 1);
    test_send_all(fd, ack, sizeof(ack));
    ck_assert_uint_ne(seen_until_close(fd, &s, TEST_WAIT_MS), UINT64_MAX);
    close(fd);
    ck_assert_msg(s.status[1] != 0 && s.ended[1], "stream 3 was not served");
    ck_assert_int_eq(s.rst[1], -1);
    ck_assert_uint_eq(s.goaways, 2);
    ck_assert_uint_eq(s.goaway_last[1], 3);
    test_daemon_stop(&d);
}
END_TEST

/* The first bytes of a HEADERS frame and nothing more: GOAWAY
 * (PROTOCOL_ERROR) and closed once client_header_timeout has passed from
 * the frame's first byte, counted. */
START_TEST(partial_headers_frame_times_out)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    char f[64];
    size_t n = frame(f, 1, HEADERS_END_STREAM_END_HEADERS, 1, get_block, sizeof(get_block) - 1);
    struct h2_seen s;
    seen_init(&s);
    test_send_all(fd, f, n - 3);
    uint64_t took = seen_until_close(fd, &s, 5000);
    ck_assert_msg(took != UINT64_MAX, "still open after 5 s");
    ck_assert_uint_ge(took, 900);
    ck_assert_int_eq(s.goaway, 1);
    ck_assert_uint_eq(s.status[0], 0);
    close(fd);
    /* A frame header cut short, its type not even known. */
    fd = test_connect(d.port);
    test_send_all(fd, h2_start, sizeof(h2_start) - 1);
    seen_init(&s);
    test_send_all(fd, f, 3);
    took = seen_until_close(fd, &s, 5000);
    ck_assert_msg(took != UINT64_MAX, "still open after 5 s");
    close(fd);
    check_metric(&d, "corral_http2_events_total{event=\"header_timeout\"} 2");
    check_metric(&d, "corral_client_timeouts_total{kind=\"header\"} 2");
    test_daemon_stop(&d);
}
END_TEST

/* A whole HEADERS frame without END_HEADERS, its CONTINUATION never sent. */
START_TEST(header_block_without_end_times_out)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    char f[64];
    size_t n = frame(f, 1, 1, 1, get_block, sizeof(get_block) - 1);
    struct h2_seen s;
    seen_init(&s);
    test_send_all(fd, f, n);
    uint64_t took = seen_until_close(fd, &s, 5000);
    ck_assert_msg(took != UINT64_MAX, "still open after 5 s");
    ck_assert_uint_ge(took, 900);
    ck_assert_int_eq(s.goaway, 1);
    close(fd);
    check_metric(&d, "corral_http2_events_total{event=\"header_timeout\"} 1");
    test_daemon_stop(&d);
}
END_TEST

/* A HEADERS frame sent a byte every 100 ms, 2.4 s in all: cut off at 1 s,
 * never answered. */
START_TEST(headers_frame_trickled_times_out)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    char block[64], f[96];
    memcpy(block, get_block, sizeof(get_block) - 1);
    memcpy(block + sizeof(get_block) - 1, "\x40\x03x-a\x05hello", 11); /* x-a: hello */
    size_t n = frame(f, 1, HEADERS_END_STREAM_END_HEADERS, 1, block, sizeof(get_block) - 1 + 11);
    struct h2_seen s;
    seen_init(&s);
    uint64_t start_ms = test_now_ms();
    size_t sent = trickle(fd, &s, f, n, 1, 100);
    seen_until_close(fd, &s, 3000);
    ck_assert_msg(s.eof, "still open");
    ck_assert_uint_lt(sent, n);
    ck_assert_uint_lt(test_now_ms() - start_ms, 2000);
    ck_assert_uint_eq(s.status[0], 0);
    close(fd);
    test_daemon_stop(&d);
}
END_TEST

/* Header blocks each slow but within the bound, one after another on one
 * connection, are served: each is timed from its own first byte, not from
 * the connection's.  A block then spread over CONTINUATION frames that
 * each arrive whole, 300 ms apart, never ending: cut off 1 s after its
 * HEADERS frame began, though no frame was ever left partial. */
START_TEST(slow_blocks_over_many_streams)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    struct h2_seen s;
    seen_init(&s);
    char f[64];
    for (unsigned sid = 1; sid <= 5; sid += 2) {
        size_t n =
            frame(f, 1, HEADERS_END_STREAM_END_HEADERS, sid, get_block, sizeof(get_block) - 1);
        ck_assert_uint_eq(trickle(fd, &s, f, n, 2, 60), n); /* ~0.5 s each */
        for (int i = 0; i < 40 && !s.ended[sid / 2]; i++)
            seen_read(fd, &s, 50);
        ck_assert_msg(s.ended[sid / 2] && s.rst[sid / 2] == -1, "stream %u not served", sid);
    }
    size_t n = frame(f, 1, 1, 7, get_block, sizeof(get_block) - 1);
    uint64_t start_ms = test_now_ms();
    test_send_all(fd, f, n);
    char c[32];
    size_t cn = frame(c, 9, 0, 7, "\x40\x01x\x01y", 5); /* CONTINUATION x: y */
    for (int i = 0; i < 20 && !s.eof; i++) {
        if (send(fd, c, cn, MSG_NOSIGNAL) != (ssize_t)cn)
            break;
        uint64_t until = test_now_ms() + 300;
        while (test_now_ms() < until && seen_read(fd, &s, 50))
            ;
    }
    seen_until_close(fd, &s, 2000);
    ck_assert_msg(s.eof, "still open");
    uint64_t took = test_now_ms() - start_ms;
    ck_assert_uint_ge(took, 900);
    ck_assert_uint_lt(took, 2500);
    ck_assert_int_eq(s.goaway, 1);
    ck_assert_uint_eq(s.status[3], 0);
    close(fd);
    check_metric(&d, "corral_http2_events_total{event=\"header_timeout\"} 1");
    test_daemon_stop(&d);
}
END_TEST

/* A request that says content-length 0 but does not end its stream waits
 * for the END_STREAM (DATA would make it malformed), and that wait is part
 * of its head's time: reset (CANCEL) 1 s after it began; the connection
 * stays and serves the next stream. */
START_TEST(empty_body_request_waiting_for_its_end_times_out)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    struct h2_seen s;
    seen_init(&s);
    /* :method POST, :scheme http, :path /, :authority a, content-length 0 */
    static const char post[] = "\x83\x86\x84\x41\1a\x0f\x0d\x01"
                               "0";
    char f[64];
    size_t n = frame(f, 1, 4, 1, post, sizeof(post) - 1);
    uint64_t start_ms = test_now_ms();
    test_send_all(fd, f, n);
    for (int i = 0; i < 60 && s.rst[0] == -1 && !s.eof; i++)
        seen_read(fd, &s, 50);
    ck_assert_int_eq(s.rst[0], 8);
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    ck_assert_uint_eq(s.status[0], 0);
    n = frame(f, 1, HEADERS_END_STREAM_END_HEADERS, 3, get_block, sizeof(get_block) - 1);
    test_send_all(fd, f, n);
    for (int i = 0; i < 40 && !s.ended[1]; i++)
        seen_read(fd, &s, 50);
    ck_assert(s.ended[1]);
    close(fd);
    check_metric(&d, "corral_http2_events_total{event=\"header_timeout\"} 1");
    test_daemon_stop(&d);
}
END_TEST

/* HEADERS for a stream below one the client already opened, and gone:
 * a connection error (RFC 9113 5.1.1), GOAWAY PROTOCOL_ERROR, as nginx,
 * HAProxy and h2o answer; nghttp2 alone would skip the frame. */
START_TEST(headers_below_an_opened_stream_is_a_connection_error)
{
    struct test_daemon d;
    int fd = start_slow(&d);
    struct h2_seen s;
    seen_init(&s);
    char f[64];
    size_t n = frame(f, 1, HEADERS_END_STREAM_END_HEADERS, 5, get_block, sizeof(get_block) - 1);
    test_send_all(fd, f, n);
    for (int i = 0; i < 100 && !s.ended[2]; i++)
        seen_read(fd, &s, 50);
    ck_assert(s.ended[2]);
    n = frame(f, 1, HEADERS_END_STREAM_END_HEADERS, 3, get_block, sizeof(get_block) - 1);
    test_send_all(fd, f, n);
    ck_assert_uint_ne(seen_until_close(fd, &s, 5000), UINT64_MAX);
    ck_assert_int_eq(s.goaway, 1);
    ck_assert_uint_eq(s.status[1], 0);
    close(fd);
    test_daemon_stop(&d);
}
END_TEST

/* A TLS client that chose h2 by ALPN must send the preface: an HTTP/1.1
 * request line instead is a connection error, never answered as HTTP/1.1
 * (RFC 9113 3.4).  The server's SETTINGS is all it gets before the close. */
START_TEST(alpn_h2_then_http1_request_line_is_not_answered)
{
    char command[2 * PATH_MAX], out[512];
    make_certificate();
    struct test_daemon d;
    start(&d, NULL, "tls http2", "    tls_certificate cert.pem;\n    tls_certificate_key key.pem;",
          "");
    snprintf(command, sizeof(command),
             "printf 'GET / HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n' | timeout 10 openssl "
             "s_client -alpn h2 -quiet -connect 127.0.0.1:%d 2>/dev/null | od -An -tx1 -v | "
             "tr -d ' \\n'",
             d.port);
    test_run(command, out, sizeof(out));
    /* A SETTINGS frame on stream 0 first, and nothing but frames: no
     * "HTTP/1.1" (48 54 54 50 2f 31) anywhere. */
    ck_assert_msg(strlen(out) >= 18 && strncmp(out + 6, "040000000000", 12) == 0, "got %s", out);
    ck_assert_msg(strstr(out, "485454502f31") == NULL, "answered as HTTP/1.1: %s", out);
    test_daemon_stop(&d);
}
END_TEST

/* With no stream open, bytes of a frame that never completes (of a type
 * the server ignores, one every 100 ms) do not hold the idle timeout off:
 * GOAWAY (NO_ERROR) 1 s after the last whole frame, counted. */
START_TEST(partial_frame_does_not_keep_an_idle_connection)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "client_header_timeout 30s;\nhttp2_idle_timeout 1s;");
    int fd = test_connect(d.port);
    test_send_all(fd, h2_start, sizeof(h2_start) - 1);
    struct h2_seen s;
    seen_init(&s);
    char f[256], payload[200];
    memset(payload, 'p', sizeof(payload));
    size_t n = frame(f, 0xfa, 0, 0, payload, sizeof(payload));
    uint64_t start_ms = test_now_ms();
    trickle(fd, &s, f, n, 1, 100);
    seen_until_close(fd, &s, 2000);
    ck_assert_msg(s.eof, "still open");
    uint64_t took = test_now_ms() - start_ms;
    ck_assert_uint_ge(took, 900);
    ck_assert_uint_lt(took, 2500);
    ck_assert_int_eq(s.goaway, 0);
    close(fd);
    check_metric(&d, "corral_http2_events_total{event=\"partial_frame_timeout\"} 1");
    test_daemon_stop(&d);
}
END_TEST

/* A request body that stops coming: client_body_timeout applies to each
 * stream as between two reads of an HTTP/1.1 body.  A body whose pieces
 * come 300 ms apart, 1.5 s in all, is served; one that stops after 2 of
 * its 5 bytes is reset (CANCEL) 1 s after its last DATA, and counted. */
START_TEST(stalled_request_body_times_out)
{
    struct backend b;
    backend_start(&b, 0);
    struct test_daemon d;
    start(&d, &b, "http2", "", "client_body_timeout 1s;");
    int fd = test_connect(d.port);
    test_send_all(fd, h2_start, sizeof(h2_start) - 1);
    struct h2_seen s;
    seen_init(&s);
    /* :method POST, :scheme http, :path /p, :authority a, content-length 5 */
    static const char post[] = "\x83\x86\x04\x02/p\x41\1a\x0f\x0d\x01"
                               "5";
    char f[64];
    test_send_all(fd, f, frame(f, 1, 4, 1, post, sizeof(post) - 1));
    for (int i = 0; i < 5; i++) {
        test_send_all(fd, f, frame(f, 0, i == 4 ? 1 : 0, 1, "x", 1));
        uint64_t until = test_now_ms() + 300;
        while (test_now_ms() < until && seen_read(fd, &s, 50))
            ;
    }
    for (int i = 0; i < 60 && !s.ended[0]; i++)
        seen_read(fd, &s, 50);
    ck_assert_msg(s.ended[0] && s.rst[0] == -1, "the slow body was not served (rst %d)", s.rst[0]);
    ck_assert_str_eq(s.body, "len=5\n");

    test_send_all(fd, f, frame(f, 1, 4, 3, post, sizeof(post) - 1));
    test_send_all(fd, f, frame(f, 0, 0, 3, "xx", 2));
    uint64_t start_ms = test_now_ms();
    for (int i = 0; i < 60 && s.rst[1] == -1 && !s.eof; i++)
        seen_read(fd, &s, 50);
    ck_assert_int_eq(s.rst[1], 8);
    ck_assert_uint_ge(test_now_ms() - start_ms, 900);
    close(fd);
    check_metric(&d, "corral_client_timeouts_total{kind=\"body\"} 1");
    check_metric(&d, "corral_http2_events_total{event=\"body_timeout\"} 1");
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------- one large field */

/* GET / with one more field, "x", whose value is `value_len` bytes of 'v'
 * (a literal without indexing or Huffman coding, so that its length is
 * what HPACK announces), as HEADERS and CONTINUATION frames of 16 KiB into
 * `out` (malloc'd); returns its length, and in *first that of the HEADERS
 * frame alone. */
static size_t large_field_request(size_t value_len, char **out, size_t *first)
{
    size_t cap = value_len + 1024;
    char *block = malloc(cap);
    ck_assert_ptr_nonnull(block);
    size_t n = sizeof(get_block) - 1;
    memcpy(block, get_block, n);
    block[n++] = 0x00; /* a literal without indexing, a new name */
    block[n++] = 0x01;
    block[n++] = 'x';
    if (value_len < 127) {
        block[n++] = (char)value_len;
    } else {
        block[n++] = 0x7f;
        size_t rest = value_len - 127;
        for (; rest >= 128; rest /= 128)
            block[n++] = (char)(rest % 128 + 128);
        block[n++] = (char)rest;
    }
    memset(block + n, 'v', value_len);
    n += value_len;
    *out = malloc(n + (n / 16384 + 1) * 9);
    ck_assert_ptr_nonnull(*out);
    size_t len = 0;
    for (size_t off = 0; off < n; off += 16384) {
        size_t piece = n - off < 16384 ? n - off : 16384;
        bool last = off + piece == n;
        /* HEADERS with END_STREAM, then CONTINUATION; END_HEADERS on the last. */
        len += frame(*out + len, off == 0 ? 1 : 9, (off == 0 ? 1u : 0u) | (last ? 4u : 0u), 1,
                     block + off, piece);
        if (off == 0)
            *first = len;
    }
    free(block);
    return len;
}

/* Sends GET / with a field of `value_len` bytes (only its HEADERS frame
 * when `whole` is false) and reads until stream 1 ends or the server
 * closes. */
static void large_field_exchange(int port, size_t value_len, bool whole, struct h2_seen *s)
{
    char *req;
    size_t first;
    size_t len = large_field_request(value_len, &req, &first);
    int fd = test_connect(port);
    test_send_all(fd, h2_start, sizeof(h2_start) - 1);
    seen_init(s);
    test_send_all(fd, req, whole ? len : first);
    free(req);
    uint64_t start_ms = test_now_ms();
    while (test_now_ms() - start_ms < 5000 && !s->ended[0] && seen_read(fd, s, 50))
        ;
    if (s->ended[0] && s->goaway == -1)
        seen_read(fd, s, 200); /* a GOAWAY right behind the answer */
    close(fd);
}

/* A field far over http2_max_header_list_size (1 MB, announced in the
 * first frame): 431, then GOAWAY (ENHANCE_YOUR_CALM), as for any header
 * block over the limit; not libnghttp2's COMPRESSION_ERROR. */
START_TEST(megabyte_field_is_answered_431)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "");
    struct h2_seen s;
    large_field_exchange(d.port, 1 << 20, false, &s);
    ck_assert_msg(strstr(s.body, "431") != NULL, "body: %s (GOAWAY %d)", s.body, s.goaway);
    ck_assert_int_eq(s.goaway, 11);
    /* Within the limit (32k), a large field is served. */
    large_field_exchange(d.port, 30000, true, &s);
    ck_assert_str_eq(s.body, "hello");
    ck_assert_int_eq(s.goaway, -1);
    check_metric(&d, "corral_http2_events_total{event=\"header_block_too_long\"} 1");
    test_daemon_stop(&d);
}
END_TEST

/* libnghttp2 decodes no HPACK string over 64 KiB, whatever the limit: with
 * a limit of 1m, a value of 65536 bytes is served, one of 65537 answered
 * 431 (then GOAWAY), the documented bound. */
START_TEST(field_over_64k_is_answered_431_whatever_the_limit)
{
    struct test_daemon d;
    start(&d, NULL, "http2", "", "http2_max_header_list_size 1m;");
    struct h2_seen s;
    large_field_exchange(d.port, 65536, true, &s);
    ck_assert_msg(strcmp(s.body, "hello") == 0, "body: %s (GOAWAY %d)", s.body, s.goaway);
    large_field_exchange(d.port, 65537, false, &s);
    ck_assert_msg(strstr(s.body, "431") != NULL, "body: %s (GOAWAY %d)", s.body, s.goaway);
    ck_assert_int_eq(s.goaway, 11);
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/http2");
    TCase *tc = test_daemon_case(suite, "basics", 30);
    tcase_add_test(tc, prior_knowledge_get_and_http1_on_the_same_port);
    tcase_add_test(tc, without_the_flag_a_preface_is_not_http2);
    tcase_add_test(tc, vhost_is_picked_by_authority);
    tcase_add_test(tc, access_log_says_http_2_0);
    tcase_add_test(tc, tls_alpn_offers_h2_and_http_1_1);
    tcase_add_test(tc, stream_stalled_at_a_zero_window_is_reset);
    tcase_add_test(tc, idle_connection_gets_goaway_and_closes);
    tcase_add_test(tc, client_reset_is_counted);
    tcase_add_test(tc, alpn_h2_then_http1_request_line_is_not_answered);

    tc = test_daemon_case(suite, "slowloris", 30);
    tcase_add_test(tc, partial_headers_frame_times_out);
    tcase_add_test(tc, header_block_without_end_times_out);
    tcase_add_test(tc, headers_frame_trickled_times_out);
    tcase_add_test(tc, slow_blocks_over_many_streams);
    tcase_add_test(tc, empty_body_request_waiting_for_its_end_times_out);
    tcase_add_test(tc, headers_below_an_opened_stream_is_a_connection_error);
    tcase_add_test(tc, partial_frame_does_not_keep_an_idle_connection);
    tcase_add_test(tc, stalled_request_body_times_out);

    tc = test_daemon_case(suite, "large fields", 30);
    tcase_add_test(tc, megabyte_field_is_answered_431);
    tcase_add_test(tc, field_over_64k_is_answered_431_whatever_the_limit);

    tc = test_daemon_case(suite, "streams", 60);
    tcase_add_test(tc, proxied_get_and_large_post);
    tcase_add_test(tc, tls_get_large_post_and_hundred_streams);
    tcase_add_test(tc, hundred_concurrent_streams_on_one_connection);
    tcase_add_test(tc, slow_reader_of_a_large_response_keeps_memory_bounded);
    tcase_add_test(tc, reload_with_streams_in_flight_loses_none);
    tcase_add_test(tc, reload_serves_streams_opened_before_the_goaway_was_seen);
    tcase_add_test(tc, reload_does_not_wait_for_an_unanswered_ping);
    tcase_add_test(tc, paused_request_body_stalls_only_its_stream);
    tcase_add_test(tc, graceful_stop_lets_open_streams_finish);
    tcase_add_test(tc, backend_up_after_a_refused_connect_serves_http2);
    return suite;
}
