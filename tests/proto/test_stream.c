/*
 * test_stream.c: the stream proxy (stream { } blocks) run by the daemon
 * between loopback clients and backends of this process: bytes both ways
 * checked by SHA-256, a half-close passed on in each direction, a reset
 * passed on as a reset, a slow reader that leaves the daemon's memory
 * bounded, many connections at once, PROXY headers on both sides, the
 * next server after a failed connect, allow/deny, and a reload while a
 * session runs.
 */
#include "tests/daemon.h"
#include "tests/helpers.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ backends */

enum backend_mode {
    ECHO,         /* writes back what it reads; half-closes after the client's FIN */
    HALF_FIRST,   /* sends "hello", half-closes, then reads until the client's FIN */
    RESET,        /* reads a few bytes, then resets */
    SOURCE,       /* sends `source_len` bytes of a pattern, then closes */
    PROXY_HEADER, /* reads one PROXY v1 line into `header`, then echoes */
};

struct backend {
    struct test_backend tcp;
    enum backend_mode mode;
    uint64_t source_len;
    /* What HALF_FIRST read after its half-close, and PROXY_HEADER's line. */
    pthread_mutex_t lock;
    char got[256];
    size_t got_len;
    char header[128];
};

static void fill_pattern(char *buf, size_t len, uint64_t offset)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)(((offset + i) * 2654435761u) >> 13);
}

static void send_all_quiet(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

static void backend_serve(int fd, void *data)
{
    struct backend *b = data;
    static __thread char buf[64 * 1024];
    switch (b->mode) {
    case PROXY_HEADER: {
        size_t len = 0;
        char ch;
        while (len + 1 < sizeof(b->header) && recv(fd, &ch, 1, 0) == 1) {
            b->header[len++] = ch;
            if (ch == '\n')
                break;
        }
        b->header[len] = '\0';
    }
        __attribute__((fallthrough)); /* then echo the rest */
    case ECHO:
        for (;;) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            send_all_quiet(fd, buf, (size_t)n);
        }
        shutdown(fd, SHUT_WR);
        break;
    case HALF_FIRST: {
        send_all_quiet(fd, "hello", 5);
        shutdown(fd, SHUT_WR);
        for (;;) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            pthread_mutex_lock(&b->lock);
            size_t room = sizeof(b->got) - 1 - b->got_len;
            size_t take = (size_t)n < room ? (size_t)n : room;
            memcpy(b->got + b->got_len, buf, take);
            b->got_len += take;
            pthread_mutex_unlock(&b->lock);
        }
        break;
    }
    case RESET: {
        (void)recv(fd, buf, 4, 0);
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
        break;
    }
    case SOURCE:
        for (uint64_t off = 0; off < b->source_len;) {
            size_t n =
                b->source_len - off < sizeof(buf) ? (size_t)(b->source_len - off) : sizeof(buf);
            fill_pattern(buf, n, off);
            send_all_quiet(fd, buf, n);
            off += n;
        }
        break;
    }
}

static void backend_start(struct backend *b, enum backend_mode mode)
{
    memset(b, 0, sizeof(*b));
    b->mode = mode;
    pthread_mutex_init(&b->lock, NULL);
    test_backend_start(&b->tcp, "127.0.0.1", 0, backend_serve, b);
}

static void backend_stop(struct backend *b)
{
    /* Not a check (a session may outlast its test): the wait only keeps
     * the serving threads from using `b` once its test has returned. */
    (void)test_backend_stop(&b->tcp, TEST_WAIT_MS);
}

/* ------------------------------------------------------------- daemons */

/* Starts the daemon with `stream` (a stream block's body) and an admin
 * listener, whose port tells that it started; d->port is the stream's
 * listen (the config's last one on port 0). */
/* The top level's wakeup line: the stream listens follow it. */
static const char *wakeup_line = "";

static void start_workers(struct test_daemon *d, unsigned workers, const char *stream)
{
    test_daemon_init(d, "corral");
    char config[32768];
    snprintf(config, sizeof(config),
             "workers %u;\n%sdrain_timeout 5s;\nadmin { listen 127.0.0.2:0; }\nstream {\n%s\n}\n",
             workers, wakeup_line, stream);
    test_daemon_write_config(d, config);
    test_daemon_start(d);
}

static void start_with(struct test_daemon *d, const char *stream)
{
    start_workers(d, 2, stream);
}

/* A stream to backend `b` (with `extra` in its server block). */
static void start_to(struct test_daemon *d, const struct backend *b, const char *extra)
{
    char stream[2048];
    snprintf(stream, sizeof(stream), "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; %s }",
             b->tcp.port, extra != NULL ? extra : "");
    start_with(d, stream);
}

/* ------------------------------------------------------ large transfers */

struct pump {
    int fd;
    uint64_t len;
    uint64_t got;
    unsigned char sha[32];
    int error;
};

static void *pump_send(void *arg)
{
    struct pump *p = arg;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char buf[64 * 1024];
    for (uint64_t off = 0; off < p->len;) {
        size_t n = p->len - off < sizeof(buf) ? (size_t)(p->len - off) : sizeof(buf);
        fill_pattern(buf, n, off);
        EVP_DigestUpdate(ctx, buf, n);
        for (size_t sent = 0; sent < n;) {
            ssize_t k = send(p->fd, buf + sent, n - sent, MSG_NOSIGNAL);
            if (k <= 0) {
                p->error = errno;
                goto out;
            }
            sent += (size_t)k;
        }
        off += n;
    }
    shutdown(p->fd, SHUT_WR);
out:
    EVP_DigestFinal_ex(ctx, p->sha, NULL);
    EVP_MD_CTX_free(ctx);
    return NULL;
}

/* The most a whole transfer may take: past it, pump_receive() stops with
 * ETIMEDOUT, which names a crawl (bytes still coming, each recv within
 * its SO_RCVTIMEO) instead of leaving it to the case's timeout. */
#define PUMP_DEADLINE_MS 60000

/* Reads until the end of the stream (`slow`: the first 200 reads of 4 KB
 * with 1 ms between them), hashing. */
static void pump_receive(struct pump *p, bool slow)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char buf[64 * 1024];
    uint64_t deadline = test_now_ms() + PUMP_DEADLINE_MS;
    for (int reads = 0;; reads++) {
        size_t want = slow && reads < 200 ? 4096 : sizeof(buf);
        if (slow && reads < 200)
            test_sleep_ms(1);
        if (test_now_ms() >= deadline) {
            p->error = ETIMEDOUT;
            break;
        }
        ssize_t n = recv(p->fd, buf, want, 0);
        if (n < 0)
            p->error = errno;
        if (n <= 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        p->got += (uint64_t)n;
    }
    EVP_DigestFinal_ex(ctx, p->sha, NULL);
    EVP_MD_CTX_free(ctx);
}

/* The SHA-256 of `len` bytes of the pattern. */
static void pattern_sha(uint64_t len, unsigned char sha[32])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char buf[64 * 1024];
    for (uint64_t off = 0; off < len;) {
        size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
        fill_pattern(buf, n, off);
        EVP_DigestUpdate(ctx, buf, n);
        off += n;
    }
    EVP_DigestFinal_ex(ctx, sha, NULL);
    EVP_MD_CTX_free(ctx);
}

/* Sends `len` bytes through the proxy to an echo backend while reading
 * them back: both directions at once, the FIN after them passed on. */
static void echo_through(int port, uint64_t len)
{
    int fd = test_connect(port);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct pump out = {.fd = fd, .len = len}, in = {.fd = fd};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, pump_send, &out), 0);
    pump_receive(&in, false);
    pthread_join(t, NULL);
    close(fd);
    ck_assert_int_eq(out.error, 0);
    ck_assert_int_eq(in.error, 0);
    ck_assert_uint_eq(in.got, len);
    ck_assert(memcmp(in.sha, out.sha, sizeof(in.sha)) == 0);
}

START_TEST(echo_both_ways_intact)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    echo_through(d.port, 0);
    echo_through(d.port, 1);
    echo_through(d.port, 64 * 1024 + 1);
    echo_through(d.port, 48 * 1024 * 1024);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* Through the copying path too: with proxy_buffer_size at its least,
 * the watermarks are 1 KB and 256 B, and bytes read before the server
 * connected go by copy first. */
START_TEST(echo_with_small_buffers)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, "proxy_buffer_size 1k;");
    echo_through(d.port, 3 * 1024 * 1024 + 7);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A stream listen takes the configuration's wakeup mode, as an HTTP one:
 * one socket per worker with reuseport, one shared socket with
 * exclusive; both serve. */
START_TEST(wakeup_modes_apply)
{
    struct backend b;
    backend_start(&b, ECHO);
    static const char *const modes[] = {"wakeup reuseport;\n", "wakeup exclusive;\n"};
    static const int sockets[] = {2, 1};
    for (size_t m = 0; m < 2; m++) {
        wakeup_line = modes[m];
        struct test_daemon d;
        start_to(&d, &b, NULL);
        ck_assert_int_eq(test_listen_sockets("127.0.0.1", d.port), sockets[m]);
        for (int i = 0; i < 4; i++)
            echo_through(d.port, 100);
        test_daemon_stop(&d);
    }
    wakeup_line = "";
    backend_stop(&b);
}
END_TEST

/* ----------------------------------------------------------- half-close */

/* The client half-closes first: the backend sees the FIN, and what it
 * sends after it still reaches the client. */
START_TEST(client_half_close_passes_on)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    int fd = test_connect(d.port);
    test_send_all(fd, "ping", 4);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    /* The echo backend writes after it read the FIN: "ping", then its own
     * FIN, which arrives only because the client's reached it. */
    char buf[16];
    ck_assert_uint_eq(test_recv_all(fd, buf, 4), 4);
    ck_assert(memcmp(buf, "ping", 4) == 0);
    ck_assert_int_eq(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

static bool got_late(void *arg)
{
    struct backend *b = arg;
    pthread_mutex_lock(&b->lock);
    bool done = b->got_len == 4 && memcmp(b->got, "late", 4) == 0;
    pthread_mutex_unlock(&b->lock);
    return done;
}

/* The backend half-closes first: the client reads the end, and what it
 * sends after that still reaches the backend. */
START_TEST(server_half_close_passes_on)
{
    struct backend b;
    backend_start(&b, HALF_FIRST);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    int fd = test_connect(d.port);
    char buf[16];
    ck_assert_uint_eq(test_recv_all(fd, buf, 5), 5);
    ck_assert(memcmp(buf, "hello", 5) == 0);
    ck_assert_int_eq(recv(fd, buf, sizeof(buf), 0), 0); /* the backend's FIN */
    test_send_all(fd, "late", 4);
    ck_assert_msg(test_poll_until(got_late, &b, TEST_WAIT_MS), "the backend did not get it");
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    /* Both sides ended: the proxy closes the client. */
    ck_assert_int_eq(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ---------------------------------------------------------------- reset */

START_TEST(backend_reset_reaches_the_client)
{
    struct backend b;
    backend_start(&b, RESET);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    int fd = test_connect(d.port);
    test_send_all(fd, "data", 4);
    char buf[16];
    errno = 0;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ck_assert_int_eq(n, -1);
    ck_assert_int_eq(errno, ECONNRESET);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ---------------------------------------------------------- slow reader */

static long rss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    char *text = test_read_file(path);
    const char *at = strstr(text, "VmRSS:");
    long kb = at != NULL ? atol(at + 6) : -1;
    free(text);
    return kb;
}

/* A client whose receive buffer is 16 KB (test_connect_small(): set
 * after connect(), the backend's first bytes may arrive before it, the
 * window grows to ~93 KB, and the proxy's socket, its MSS now half that
 * largest window, sends into the smaller window only on its window probe
 * timer, 32 KB per 200 ms: 40 MB then took minutes), reading with a 20 s
 * timeout. */
static int connect_small_window(int port)
{
    int fd = test_connect_small(port, 16 * 1024);
    struct timeval tv = {.tv_sec = 20};
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

/* A backend sends 40 MB to a client that reads slowly at first: the proxy
 * stops reading the backend instead of buffering, so the daemon's memory
 * stays well under the transfer's size. */
START_TEST(slow_reader_keeps_memory_bounded)
{
    struct backend b;
    backend_start(&b, SOURCE);
    b.source_len = 40 * 1024 * 1024;
    struct test_daemon d;
    start_to(&d, &b, NULL);
    long before = rss_kb(d.pid);
    int fd = connect_small_window(d.port);
    struct pump in = {.fd = fd};
    pump_receive(&in, true);
    long after = rss_kb(d.pid);
    close(fd);
    unsigned char sha[32];
    pattern_sha(b.source_len, sha);
    ck_assert_msg(in.error == 0, "recv: %s after %llu bytes", strerror(in.error),
                  (unsigned long long)in.got);
    ck_assert_uint_eq(in.got, b.source_len);
    ck_assert(memcmp(in.sha, sha, sizeof(sha)) == 0);
    ck_assert_msg(after - before < 16 * 1024, "RSS grew by %ld KB", after - before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------ many at once */

#define MANY 400

/* MANY clients at once, each sending 1 KB and reading it back. */
START_TEST(many_connections_at_once)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    static int fds[MANY];
    static size_t got[MANY];
    char msg[1024];
    for (int i = 0; i < MANY; i++) {
        fds[i] = test_connect(d.port);
        got[i] = 0;
    }
    for (int i = 0; i < MANY; i++) {
        fill_pattern(msg, sizeof(msg), (uint64_t)i);
        test_send_all(fds[i], msg, sizeof(msg));
        shutdown(fds[i], SHUT_WR);
    }
    static struct pollfd p[MANY];
    int open = MANY;
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    while (open > 0 && test_now_ms() < deadline) {
        for (int i = 0; i < MANY; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        ck_assert_int_gt(poll(p, MANY, 1000), -1);
        for (int i = 0; i < MANY; i++) {
            if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[2048];
            ssize_t n = recv(fds[i], buf, sizeof(buf), 0);
            if (n > 0) {
                fill_pattern(msg, sizeof(msg), (uint64_t)i);
                ck_assert_uint_le(got[i] + (size_t)n, sizeof(msg));
                ck_assert(memcmp(buf, msg + got[i], (size_t)n) == 0);
                got[i] += (size_t)n;
                continue;
            }
            ck_assert_int_eq(n, 0);
            ck_assert_uint_eq(got[i], sizeof(msg));
            close(fds[i]);
            fds[i] = -1;
            p[i].fd = -1;
            open--;
        }
    }
    ck_assert_int_eq(open, 0);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------- PROXY headers */

/* A PROXY header from the client names the client to the backend's
 * PROXY header; the bytes after it go through. */
START_TEST(proxy_protocol_on_both_sides)
{
    struct backend b;
    backend_start(&b, PROXY_HEADER);
    struct test_daemon d;
    char stream[512];
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 proxy_protocol; proxy_pass 127.0.0.1:%d; "
             "proxy_protocol on; }",
             b.tcp.port);
    start_with(&d, stream);
    int fd = test_connect(d.port);
    const char *header = "PROXY TCP4 192.0.2.7 198.51.100.9 40000 443\r\n";
    test_send_all(fd, header, strlen(header));
    test_send_all(fd, "after", 5);
    char buf[16];
    ck_assert_uint_eq(test_recv_all(fd, buf, 5), 5);
    ck_assert(memcmp(buf, "after", 5) == 0);
    ck_assert_str_eq(b.header, header);
    close(fd);
    /* A malformed header ends the connection with nothing sent on. */
    int before = atomic_load(&b.tcp.accepted);
    fd = test_connect(d.port);
    test_send_all(fd, "GET / HTTP/1.1\r\n\r\n", 18);
    ck_assert_int_le(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------- next upstream */

/* A server that refuses: the next one serves, for every connection; with
 * proxy_next_upstream off, the client of a refused attempt is closed. */
START_TEST(next_upstream_after_a_refused_connect)
{
    struct backend b;
    backend_start(&b, ECHO);
    int refused_port;
    int reserved = test_reserve_port(&refused_port);
    struct test_daemon d;
    char stream[512];
    snprintf(stream, sizeof(stream),
             "  upstream pair { server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass pair; }",
             refused_port, b.tcp.port);
    start_with(&d, stream);
    for (int i = 0; i < 6; i++) {
        int fd = test_connect(d.port);
        test_send_all(fd, "abc", 3);
        shutdown(fd, SHUT_WR);
        char buf[8];
        ck_assert_uint_eq(test_recv_all(fd, buf, 3), 3);
        ck_assert(memcmp(buf, "abc", 3) == 0);
        close(fd);
    }
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 6);
    test_daemon_stop(&d);

    snprintf(stream, sizeof(stream),
             "  upstream pair { server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass pair; proxy_next_upstream off; }",
             refused_port, b.tcp.port);
    start_workers(&d, 1, stream); /* one worker: one round robin */
    int closed = 0;
    for (int i = 0; i < 6; i++) {
        int fd = test_connect(d.port);
        test_send_all(fd, "abc", 3);
        shutdown(fd, SHUT_WR);
        /* Closed with the bytes unread: the kernel resets it, or a FIN. */
        char buf[8];
        closed += recv(fd, buf, sizeof(buf), MSG_WAITALL) <= 0;
        close(fd);
    }
    ck_assert_int_eq(closed, 3); /* round robin: every other one */
    test_daemon_stop(&d);
    close(reserved);
    backend_stop(&b);
}
END_TEST

/* -------------------------------------------------------------- access */

START_TEST(deny_closes_before_any_server)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, "deny 127.0.0.0/8;");
    int fd = test_connect(d.port);
    char buf[8];
    ck_assert_int_le(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 0);
    test_daemon_stop(&d);

    start_to(&d, &b, "allow 127.0.0.1; deny all;");
    echo_through(d.port, 10);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 1);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------------ access_log */

/* A line per session with the stream's variables: one proxied, one
 * denied (403), one whose server refused (502). */
START_TEST(access_log_lines)
{
    struct backend b;
    backend_start(&b, ECHO);
    int denied_port, refused_port;
    int r1 = test_reserve_port(&denied_port), r2 = test_reserve_port(&refused_port);
    close(r1);
    char log[PATH_MAX], stream[PATH_MAX + 1024];
    test_daemon_file(log, sizeof(log), "stream.log");
    snprintf(stream, sizeof(stream),
             "  log_format s '$remote_addr $status $bytes_sent $bytes_received "
             "$upstream_bytes_sent $upstream_bytes_received \"$upstream_addr\" $server_port';\n"
             "  access_log %s s;\n"
             "  server { listen 127.0.0.1:%d; proxy_pass 127.0.0.1:%d; deny all; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; }",
             log, denied_port, refused_port, refused_port);
    struct test_daemon d;
    start_with(&d, stream);
    char expect[256];
    /* The refused server first: its line. */
    int fd = test_connect(d.port);
    char buf[8];
    ck_assert_int_le(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    snprintf(expect, sizeof(expect), "127.0.0.1 502 0 0 0 0 \"127.0.0.1:%d\" %d\n", refused_port,
             d.port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    fd = test_connect(denied_port);
    ck_assert_int_le(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    snprintf(expect, sizeof(expect), "127.0.0.1 403 0 0 0 0 \"-\" %d\n", denied_port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    test_daemon_stop(&d);
    close(r2);

    /* And one that went through, to a server that answers. */
    snprintf(stream, sizeof(stream),
             "  log_format s '$remote_addr $status $bytes_sent $bytes_received "
             "$upstream_bytes_sent $upstream_bytes_received \"$upstream_addr\"';\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; access_log %s s; }",
             b.tcp.port, log);
    start_with(&d, stream);
    echo_through(d.port, 1000);
    snprintf(expect, sizeof(expect), "127.0.0.1 200 1000 1000 1000 1000 \"127.0.0.1:%d\"\n",
             b.tcp.port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* limit_conn 1 per client address: a second session while the first is
 * open is closed (503 in the log); once the first ends, a new one
 * passes. */
START_TEST(limit_conn_per_address)
{
    struct backend b;
    backend_start(&b, ECHO);
    char log[PATH_MAX], stream[PATH_MAX + 1024];
    test_daemon_file(log, sizeof(log), "stream.log");
    snprintf(stream, sizeof(stream),
             "  limit_conn_zone $binary_remote_addr zone=per_ip:64k;\n"
             "  log_format s '$status $bytes_sent';\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; limit_conn per_ip 1;\n"
             "    access_log %s s; }",
             b.tcp.port, log);
    struct test_daemon d;
    start_workers(&d, 1, stream);
    int first = test_connect(d.port);
    test_send_all(first, "one", 3);
    char buf[8];
    ck_assert_uint_eq(test_recv_all(first, buf, 3), 3); /* the first is open and served */
    int second = test_connect(d.port);
    ck_assert_int_le(recv(second, buf, sizeof(buf), 0), 0);
    close(second);
    free(test_wait_file(log, "503 0\n", TEST_WAIT_MS));
    shutdown(first, SHUT_WR);
    ck_assert_int_eq(recv(first, buf, sizeof(buf), 0), 0);
    close(first);
    free(test_wait_file(log, "200 3\n", TEST_WAIT_MS));
    echo_through(d.port, 10); /* its count went back */
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ----------------------------------------------------------- tls_preread */

/* The first flight OpenSSL sends as a client with `name` (NULL: none). */
static size_t client_hello(const char *name, unsigned char *buf, size_t cap)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = SSL_new(ctx);
    BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rbio, wbio);
    if (name != NULL)
        ck_assert_int_eq(SSL_set_tlsext_host_name(ssl, name), 1);
    ck_assert_int_eq(SSL_connect(ssl), -1);
    int n = BIO_read(wbio, buf, (int)cap);
    ck_assert_int_gt(n, 0);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return (size_t)n;
}

/* Sends `len` bytes (one byte per segment with `one_by_one`), then reads
 * them back from the echo backend the proxy chose. */
static void hello_through(int port, const unsigned char *hello, size_t len, bool one_by_one)
{
    int fd = test_connect(port);
    int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    if (!one_by_one) {
        test_send_all(fd, hello, len);
    } else {
        for (size_t i = 0; i < len; i++) {
            test_send_all(fd, hello + i, 1);
            if (i % 8 == 0)
                test_sleep_ms(1); /* pacing, so that segments stay apart */
        }
    }
    unsigned char back[4096];
    ck_assert_uint_le(len, sizeof(back));
    ck_assert_uint_eq(test_recv_all(fd, back, len), len);
    ck_assert(memcmp(back, hello, len) == 0);
    close(fd);
}

/* hello_through() with a ClientHello naming `name` (NULL: none). */
static void named_hello_through(int port, const char *name, bool one_by_one)
{
    unsigned char hello[4096];
    size_t len = client_hello(name, hello, sizeof(hello));
    hello_through(port, hello, len, one_by_one);
}

/* ssl_preread on and a map of the server name: three upstreams, picked by
 * an exact name, a regex and the default; a hello split into one-byte
 * segments routes the same; a client that speaks no TLS gets the
 * default. */
START_TEST(sni_routes_to_three_upstreams)
{
    struct backend a, b, c;
    backend_start(&a, ECHO);
    backend_start(&b, ECHO);
    backend_start(&c, ECHO);
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  upstream a { server 127.0.0.1:%d; }\n"
             "  upstream b { server 127.0.0.1:%d; }\n"
             "  upstream c { server 127.0.0.1:%d; }\n"
             "  map $ssl_preread_server_name $pick {\n"
             "    a.example a;\n"
             "    ~^b\\. b;\n"
             "    default c;\n"
             "  }\n"
             "  server { listen 127.0.0.1:0; ssl_preread on; proxy_pass $pick; }",
             a.tcp.port, b.tcp.port, c.tcp.port);
    struct test_daemon d;
    start_with(&d, stream);
    named_hello_through(d.port, "a.example", false);
    ck_assert_int_eq(atomic_load(&a.tcp.accepted), 1);
    named_hello_through(d.port, "A.EXAMPLE", false); /* names are caseless */
    ck_assert_int_eq(atomic_load(&a.tcp.accepted), 2);
    named_hello_through(d.port, "b.example.org", false);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 1);
    named_hello_through(d.port, "elsewhere.example", false);
    ck_assert_int_eq(atomic_load(&c.tcp.accepted), 1);
    named_hello_through(d.port, NULL, false);
    ck_assert_int_eq(atomic_load(&c.tcp.accepted), 2);
    /* One byte per segment. */
    named_hello_through(d.port, "a.example", true);
    ck_assert_int_eq(atomic_load(&a.tcp.accepted), 3);
    /* Not TLS at all: the variables are empty, the default serves. */
    hello_through(d.port, (const unsigned char *)"PING\r\n", 6, false);
    ck_assert_int_eq(atomic_load(&c.tcp.accepted), 3);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 1);
    test_daemon_stop(&d);
    backend_stop(&a);
    backend_stop(&b);
    backend_stop(&c);
}
END_TEST

/* -------------------------------------------------------------- reload */

/* A reload while a session moves bytes: the session finishes on the old
 * generation (within drain_timeout), intact, and new connections go to
 * the new one. */
START_TEST(reload_lets_sessions_finish)
{
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_to(&d, &b, NULL);
    int fd = test_connect(d.port);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint64_t len = 16 * 1024 * 1024;
    struct pump out = {.fd = fd, .len = len}, in = {.fd = fd};
    /* A first kilobyte goes before the reload, the rest after it. */
    char first[1024];
    fill_pattern(first, sizeof(first), 0);
    test_send_all(fd, first, sizeof(first));
    ck_assert_uint_eq(test_recv_all(fd, first, sizeof(first)), sizeof(first));
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    /* New connections are the new generation's. */
    echo_through(d.port, 1000);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, pump_send, &out), 0);
    pump_receive(&in, false);
    pthread_join(t, NULL);
    close(fd);
    ck_assert_int_eq(out.error, 0);
    ck_assert_uint_eq(in.got, len);
    ck_assert(memcmp(in.sha, out.sha, sizeof(in.sha)) == 0);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------------------ tls */

/* A CA with a server certificate (stream.test) and a client one, and
 * another CA with a client certificate it signed: NAME.pem, NAME.key. */
static const char make_certs[] =
    "set -e\n"
    "ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1.key\"; }\n"
    "ca() {\n"
    "    ec \"$1\"\n"
    "    openssl req -new -x509 -key \"$1.key\" -subj \"/CN=$2\" -days 30 -out \"$1.pem\" \\\n"
    "        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign\n"
    "}\n"
    "leaf() { # NAME CA CN SERIAL\n"
    "    ec \"$1\"\n"
    "    printf 'basicConstraints = CA:FALSE\\nextendedKeyUsage = serverAuth, clientAuth\\n"
    "subjectAltName = DNS:%s\\n' \"$3\" > \"$1.ext\"\n"
    "    openssl req -new -key \"$1.key\" -subj \"/CN=$3\" -out \"$1.csr\"\n"
    "    openssl x509 -req -in \"$1.csr\" -CA \"$2.pem\" -CAkey \"$2.key\" -set_serial \"$4\" \\\n"
    "        -days 30 -extfile \"$1.ext\" -out \"$1.pem\"\n"
    "}\n"
    "ca ca 'stream test CA'\n"
    "ca other-ca 'stream other CA'\n"
    "leaf server ca stream.test 1\n"
    "leaf client ca client 2\n"
    "leaf other-client other-ca client 3\n";

/* Makes the certificates in the case's directory (`dir` is where), and
 * those `more` makes with the script's functions. */
static void certs_make_more(char *dir, size_t size, const char *more)
{
    test_daemon_file(dir, size, "certs");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char path[PATH_MAX + 32], cmd[PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/make-certs.sh", dir);
    char script[sizeof(make_certs) + 512];
    ck_assert_uint_lt(strlen(more), 512);
    snprintf(script, sizeof(script), "%s%s", make_certs, more);
    test_write_file(path, script);
    snprintf(cmd, sizeof(cmd), "cd %s && sh make-certs.sh >make-certs.log 2>&1", dir);
    int rc = system(cmd);
    snprintf(path, sizeof(path), "%s/make-certs.log", dir);
    ck_assert_msg(rc == 0, "making the certificates failed:\n%s", test_read_file(path));
}

static void certs_make(char *dir, size_t size)
{
    certs_make_more(dir, size, "");
}

/* A stream with a tls listen to backend `b`: the server certificate,
 * and `extra` in the server block (CERTS is the certificates' directory). */
static void start_tls(struct test_daemon *d, const struct backend *b, const char *certs,
                      const char *extra)
{
    char stream[PATH_MAX * 3 + 2048];
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 ssl; proxy_pass 127.0.0.1:%d;\n"
             "    ssl_certificate %s/server.pem; ssl_certificate_key %s/server.key;\n"
             "    %s }",
             b->tcp.port, certs, certs, extra != NULL ? extra : "");
    start_with(d, stream);
}

/* A TLS client of the daemon's port: trusts the test CA, sends SNI
 * stream.test, shows client certificate `client` (NULL: none), offers
 * `alpn` (wire format; NULL: none).  Returns the SSL (its fd set), or NULL
 * when the handshake failed. */
static SSL *tls_connect_named(int port, const char *certs, const char *client, const char *alpn,
                              const char *sni, const char *verify);

static SSL *tls_connect(int port, const char *certs, const char *client, const char *alpn)
{
    return tls_connect_named(port, certs, client, alpn, "stream.test", "stream.test");
}

/* The same with SNI `sni`, and the server's certificate checked for the
 * name `verify`. */
static SSL *tls_connect_named(int port, const char *certs, const char *client, const char *alpn,
                              const char *sni, const char *verify)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(ctx);
    char path[PATH_MAX + 32], key[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/ca.pem", certs);
    ck_assert_int_eq(SSL_CTX_load_verify_locations(ctx, path, NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (client != NULL) {
        snprintf(path, sizeof(path), "%s/%s.pem", certs, client);
        snprintf(key, sizeof(key), "%s/%s.key", certs, client);
        ck_assert_int_eq(SSL_CTX_use_certificate_chain_file(ctx, path), 1);
        ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM), 1);
    }
    if (alpn != NULL)
        ck_assert_int_eq(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)alpn, strlen(alpn)),
                         0);
    int fd = test_connect(port);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL keeps its own reference */
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, sni);
    SSL_set1_host(ssl, verify);
    if (SSL_connect(ssl) != 1) {
        close(fd);
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

static void tls_close(SSL *ssl)
{
    int fd = SSL_get_fd(ssl);
    SSL_free(ssl);
    close(fd);
}

/* Whether the server's side of the session is refused: the first read
 * fails (TLS 1.3 sends the refusal of a client certificate after the
 * client's handshake is done) or the handshake did. */
static bool tls_refused(SSL *ssl)
{
    if (ssl == NULL)
        return true;
    char c;
    size_t n;
    bool refused =
        SSL_read_ex(ssl, &c, 1, &n) != 1 && SSL_get_error(ssl, 0) != SSL_ERROR_ZERO_RETURN;
    tls_close(ssl);
    return refused;
}

/* Sends `len` bytes of the pattern over `ssl` while reading the echo back
 * (non-blocking, one thread: an SSL is not shared between threads), then
 * a close_notify (a half-close), and reads to the echo's end: the bytes
 * are checked by SHA-256 both ways. */
static void tls_echo(SSL *ssl, uint64_t len)
{
    int fd = SSL_get_fd(ssl);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    EVP_MD_CTX *sent_md = EVP_MD_CTX_new(), *got_md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(sent_md, EVP_sha256(), NULL);
    EVP_DigestInit_ex(got_md, EVP_sha256(), NULL);
    static char out[16 * 1024], in[64 * 1024];
    uint64_t sent = 0, got = 0;
    size_t pending = 0; /* bytes of `out` a write must take again */
    bool shut = false, ended = false;
    while (!ended) {
        bool moved = false;
        if (sent < len || pending > 0) {
            if (pending == 0) {
                pending = len - sent < sizeof(out) ? (size_t)(len - sent) : sizeof(out);
                fill_pattern(out, pending, sent);
            }
            size_t n;
            if (SSL_write_ex(ssl, out, pending, &n) == 1) {
                EVP_DigestUpdate(sent_md, out, n);
                sent += n;
                pending = 0; /* partial writes are off: all of it */
                moved = true;
            } else {
                int e = SSL_get_error(ssl, 0);
                ck_assert_msg(e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE,
                              "SSL_write: %d", e);
            }
        } else if (!shut) {
            ck_assert_int_ge(SSL_shutdown(ssl), 0);
            shut = true;
            moved = true;
        }
        size_t n;
        if (SSL_read_ex(ssl, in, sizeof(in), &n) == 1) {
            EVP_DigestUpdate(got_md, in, n);
            got += n;
            moved = true;
        } else {
            int e = SSL_get_error(ssl, 0);
            if (e == SSL_ERROR_ZERO_RETURN)
                ended = true;
            else
                ck_assert_msg(e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE,
                              "SSL_read: %d after %llu bytes", e, (unsigned long long)got);
        }
        if (!moved && !ended) {
            struct pollfd p = {.fd = fd, .events = POLLIN | (sent < len || pending ? POLLOUT : 0)};
            ck_assert_msg(poll(&p, 1, 20000) > 0, "stuck: %llu of %llu sent, %llu back%s",
                          (unsigned long long)sent, (unsigned long long)len,
                          (unsigned long long)got, shut ? ", close_notify sent" : "");
        }
    }
    ck_assert(shut);
    ck_assert_uint_eq(got, len);
    unsigned char a[32], b[32];
    EVP_DigestFinal_ex(sent_md, a, NULL);
    EVP_DigestFinal_ex(got_md, b, NULL);
    EVP_MD_CTX_free(sent_md);
    EVP_MD_CTX_free(got_md);
    ck_assert(memcmp(a, b, sizeof(a)) == 0);
}

/* TLS ends at the daemon, the backend gets the plain bytes, and the
 * client's close_notify reaches it as a FIN: the echo ends after it. */
START_TEST(tls_terminates_to_a_plain_backend)
{
    char certs[PATH_MAX];
    certs_make(certs, sizeof(certs));
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_tls(&d, &b, certs, "proxy_buffer_size 16k;");
    const uint64_t sizes[] = {0, 1, 100 * 1000, 6 * 1024 * 1024 + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        SSL *ssl = tls_connect(d.port, certs, NULL, NULL);
        ck_assert_ptr_nonnull(ssl);
        tls_echo(ssl, sizes[i]);
        tls_close(ssl);
    }
    /* Plain text to the tls port is refused, not passed on. */
    int accepted = atomic_load(&b.tcp.accepted);
    int fd = test_connect(d.port);
    test_send_all(fd, "GET / HTTP/1.0\r\n\r\n", 18);
    char buf[64];
    ck_assert_int_le(recv(fd, buf, sizeof(buf), 0), 0);
    close(fd);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), accepted);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* The backend half-closes first: the client gets a close_notify, and
 * what it sends after it still reaches the backend. */
START_TEST(tls_server_half_close_passes_on)
{
    char certs[PATH_MAX];
    certs_make(certs, sizeof(certs));
    struct backend b;
    backend_start(&b, HALF_FIRST);
    struct test_daemon d;
    start_tls(&d, &b, certs, NULL);
    SSL *ssl = tls_connect(d.port, certs, NULL, NULL);
    ck_assert_ptr_nonnull(ssl);
    char buf[16];
    size_t n, got = 0;
    while (got < 5 && SSL_read_ex(ssl, buf + got, 5 - got, &n) == 1)
        got += n;
    ck_assert_uint_eq(got, 5);
    ck_assert(memcmp(buf, "hello", 5) == 0);
    ck_assert_int_eq(SSL_read_ex(ssl, buf, sizeof(buf), &n), 0);
    ck_assert_int_eq(SSL_get_error(ssl, 0), SSL_ERROR_ZERO_RETURN); /* the close_notify */
    ck_assert_int_eq(SSL_write_ex(ssl, "late", 4, &n), 1);
    ck_assert_msg(test_poll_until(got_late, &b, TEST_WAIT_MS), "the backend did not get it");
    tls_close(ssl);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ssl_verify_client on: a client without a certificate, or with one of
 * another CA, is refused before any server is contacted; one with a
 * certificate of the CA passes. */
START_TEST(tls_client_certificate_required)
{
    char certs[PATH_MAX];
    certs_make(certs, sizeof(certs));
    struct backend b;
    backend_start(&b, ECHO);
    char extra[PATH_MAX + 128];
    snprintf(extra, sizeof(extra), "ssl_client_certificate %s/ca.pem; ssl_verify_client on;",
             certs);
    struct test_daemon d;
    start_tls(&d, &b, certs, extra);
    ck_assert(tls_refused(tls_connect(d.port, certs, NULL, NULL)));
    ck_assert(tls_refused(tls_connect(d.port, certs, "other-client", NULL)));
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 0);
    SSL *ssl = tls_connect(d.port, certs, "client", NULL);
    ck_assert_ptr_nonnull(ssl);
    tls_echo(ssl, 70 * 1000);
    tls_close(ssl);
    ck_assert_int_eq(atomic_load(&b.tcp.accepted), 1);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ssl_alpn: the server's protocol among the client's is agreed; a client
 * that offers none of them is refused; one that offers nothing passes
 * without ALPN.  ssl_protocols holds the version to TLS 1.2. */
START_TEST(tls_alpn_and_protocols)
{
    char certs[PATH_MAX];
    certs_make(certs, sizeof(certs));
    struct backend b;
    backend_start(&b, ECHO);
    struct test_daemon d;
    start_tls(&d, &b, certs, "ssl_alpn mqtt imap; ssl_protocols TLSv1.2;");
    SSL *ssl = tls_connect(d.port, certs, NULL, "\x04imap\x04mqtt");
    ck_assert_ptr_nonnull(ssl);
    const unsigned char *agreed;
    unsigned len;
    SSL_get0_alpn_selected(ssl, &agreed, &len);
    ck_assert_uint_eq(len, 4);
    ck_assert(memcmp(agreed, "mqtt", 4) == 0);
    ck_assert_str_eq(SSL_get_version(ssl), "TLSv1.2");
    tls_echo(ssl, 1000);
    tls_close(ssl);
    ck_assert_ptr_null(tls_connect(d.port, certs, NULL, "\x02h2"));
    ssl = tls_connect(d.port, certs, NULL, NULL);
    ck_assert_ptr_nonnull(ssl);
    tls_echo(ssl, 10);
    tls_close(ssl);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* $ssl_protocol, $ssl_cipher and $ssl_server_name in the stream's log;
 * a refused handshake is a 500 line, as nginx's. */
START_TEST(tls_access_log_line)
{
    char certs[PATH_MAX];
    certs_make(certs, sizeof(certs));
    struct backend b;
    backend_start(&b, ECHO);
    char log[PATH_MAX], extra[PATH_MAX * 2 + 256];
    test_daemon_file(log, sizeof(log), "stream.log");
    snprintf(extra, sizeof(extra),
             "access_log %s s; ssl_protocols TLSv1.3; "
             "ssl_client_certificate %s/ca.pem; ssl_verify_client optional;",
             log, certs);
    char stream[PATH_MAX * 4 + 2048];
    snprintf(stream, sizeof(stream),
             "  log_format s '$status $bytes_received $ssl_protocol $ssl_cipher "
             "\"$ssl_server_name\"';\n"
             "  server { listen 127.0.0.1:0 tls; proxy_pass 127.0.0.1:%d;\n"
             "    tls_certificate %s/server.pem; tls_certificate_key %s/server.key; %s }",
             b.tcp.port, certs, certs, extra);
    struct test_daemon d;
    start_with(&d, stream);
    SSL *ssl = tls_connect(d.port, certs, NULL, NULL);
    ck_assert_ptr_nonnull(ssl);
    char cipher[128];
    snprintf(cipher, sizeof(cipher), "%s", SSL_get_cipher_name(ssl));
    tls_echo(ssl, 1234);
    tls_close(ssl);
    char expect[256];
    snprintf(expect, sizeof(expect), "200 1234 TLSv1.3 %s \"stream.test\"\n", cipher);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    ck_assert(tls_refused(tls_connect(d.port, certs, "other-client", NULL)));
    free(test_wait_file(log, "500 0 - - \"-\"\n", TEST_WAIT_MS));
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------- health checks */

/* One session through `port` to an echo: a byte there and back. */
static bool session_echoes(int port)
{
    int fd = test_connect(port);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c = 'x';
    bool ok = send(fd, &c, 1, MSG_NOSIGNAL) == 1 && recv(fd, &c, 1, 0) == 1 && c == 'x';
    close(fd);
    return ok;
}

/* Eight sessions in a row go through (round robin over two servers). */
static bool eight_echo(void *arg)
{
    for (int i = 0; i < 8; i++)
        if (!session_echoes(*(int *)arg))
            return false;
    return true;
}

/* health_check type=tcp: a server that refuses connections is taken out
 * by the checks.  Passive health is off (max_fails=0) and no next server
 * is tried, so without the checks every other session would fail. */
START_TEST(tcp_health_check_takes_a_dead_server_out)
{
    struct backend b;
    backend_start(&b, ECHO);
    int dead_port;
    int reserved = test_reserve_port(&dead_port); /* bound, not listening: refuses */
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  upstream u { server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d max_fails=0;\n"
             "    health_check type=tcp interval=50ms timeout=1s rise=1 fall=1; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass u; proxy_next_upstream off; }",
             dead_port, b.tcp.port);
    struct test_daemon d;
    start_with(&d, stream);
    ck_assert_msg(test_poll_until(eight_echo, &d.port, TEST_WAIT_MS),
                  "sessions still go to the dead server");
    /* The live server's checks connect and close: its echo saw them. */
    ck_assert_int_gt(atomic_load(&b.tcp.accepted), 8);
    test_daemon_stop(&d);
    close(reserved);
    backend_stop(&b);
}
END_TEST

/* --------------------------------------------------- servers by SNI name */

/* Certificates for alpha.test and *.beta.test, beside certs_make()'s. */
static const char sni_certs[] = "leaf alpha ca alpha.test 4\n"
                                "leaf beta ca '*.beta.test' 5\n";

/* One TLS session to `port` with SNI `sni` that gets the certificate for
 * `verify`, echoed through; the protocol agreed in `version`. */
static void sni_session(int port, const char *certs, const char *sni, const char *verify,
                        char *version, size_t size)
{
    SSL *ssl = tls_connect_named(port, certs, NULL, NULL, sni, verify);
    ck_assert_msg(ssl != NULL, "no handshake for %s with %s's certificate", sni, verify);
    snprintf(version, size, "%s", SSL_get_version(ssl));
    tls_echo(ssl, 5000);
    tls_close(ssl);
}

/* Three servers on one tls address, told apart by server_name: each SNI
 * name gets its server's certificate and backend, an unknown name or none
 * the default server's (the first); the stream block's certificate,
 * protocols and log are those of the servers that write none. */
START_TEST(tls_servers_picked_by_sni)
{
    char certs[PATH_MAX];
    certs_make_more(certs, sizeof(certs), sni_certs);
    struct backend def, alpha, beta;
    backend_start(&def, ECHO);
    backend_start(&alpha, ECHO);
    backend_start(&beta, ECHO);
    char log[PATH_MAX];
    test_daemon_file(log, sizeof(log), "stream.log");
    char stream[PATH_MAX * 7 + 1536];
    snprintf(
        stream, sizeof(stream),
        "  ssl_certificate %s/server.pem; ssl_certificate_key %s/server.key;\n"
        "  ssl_protocols TLSv1.2;\n"
        "  log_format s '$status $ssl_server_name $upstream_addr';\n"
        "  access_log %s s;\n"
        "  server { listen 127.0.0.1:0 ssl; proxy_pass 127.0.0.1:%d; }\n"
        "  server { listen 127.0.0.1:0 ssl; server_name alpha.test; proxy_pass 127.0.0.1:%d;\n"
        "    tls_certificate %s/alpha.pem; tls_certificate_key %s/alpha.key;\n"
        "    tls_protocols TLSv1.3; }\n"
        "  server { listen 127.0.0.1:0 ssl; server_name *.beta.test; proxy_pass 127.0.0.1:%d;\n"
        "    tls_certificate %s/beta.pem; tls_certificate_key %s/beta.key; }\n",
        certs, certs, log, def.tcp.port, alpha.tcp.port, certs, certs, beta.tcp.port, certs, certs);
    struct test_daemon d;
    start_with(&d, stream);
    char version[32];
    sni_session(d.port, certs, "alpha.test", "alpha.test", version, sizeof(version));
    ck_assert_str_eq(version, "TLSv1.3"); /* its own */
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 1);
    sni_session(d.port, certs, "ALPHA.test", "alpha.test", version, sizeof(version));
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 2);
    sni_session(d.port, certs, "x.beta.test", "x.beta.test", version, sizeof(version));
    ck_assert_str_eq(version, "TLSv1.2"); /* the stream block's */
    ck_assert_int_eq(atomic_load(&beta.tcp.accepted), 1);
    sni_session(d.port, certs, "other.test", "stream.test", version, sizeof(version));
    ck_assert_str_eq(version, "TLSv1.2");
    sni_session(d.port, certs, "beta.test", "stream.test", version, sizeof(version));
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 2);
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 2);
    ck_assert_int_eq(atomic_load(&beta.tcp.accepted), 1);
    char expect[128];
    snprintf(expect, sizeof(expect), "200 x.beta.test 127.0.0.1:%d\n", beta.tcp.port);
    free(test_wait_file(log, expect, TEST_WAIT_MS));
    test_daemon_stop(&d);
    backend_stop(&def);
    backend_stop(&alpha);
    backend_stop(&beta);
}
END_TEST

static bool got_one(void *arg)
{
    return atomic_load((atomic_uint *)arg) >= 1;
}

/* default_server: the server named so answers names no server has, not
 * the first; a server's own allow/deny applies to the sessions its name
 * picks, and with `openssl s_client -servername` as a client too. */
START_TEST(tls_default_server_and_own_rules)
{
    char certs[PATH_MAX];
    certs_make_more(certs, sizeof(certs), sni_certs);
    struct backend first, def;
    backend_start(&first, ECHO);
    backend_start(&def, ECHO);
    char stream[PATH_MAX * 7 + 1536];
    snprintf(stream, sizeof(stream),
             "  server { listen 127.0.0.1:0 ssl; server_name alpha.test; proxy_pass 127.0.0.1:%d;\n"
             "    tls_certificate %s/alpha.pem; tls_certificate_key %s/alpha.key; }\n"
             "  server { listen 127.0.0.1:0 ssl; server_name ~^[a-z]+\\.beta\\.test$;\n"
             "    deny 127.0.0.1; proxy_pass 127.0.0.1:%d;\n"
             "    tls_certificate %s/beta.pem; tls_certificate_key %s/beta.key; }\n"
             "  server { listen 127.0.0.1:0 ssl default_server; proxy_pass 127.0.0.1:%d;\n"
             "    tls_certificate %s/server.pem; tls_certificate_key %s/server.key; }\n",
             first.tcp.port, certs, certs, def.tcp.port, certs, certs, def.tcp.port, certs, certs);
    struct test_daemon d;
    start_with(&d, stream);
    char version[32];
    sni_session(d.port, certs, "nobody.test", "stream.test", version, sizeof(version));
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 1);
    ck_assert_int_eq(atomic_load(&first.tcp.accepted), 0);
    /* The regex name picks the server that denies the client: its
     * certificate is shown, then the session is closed before any
     * backend. */
    ck_assert(
        tls_refused(tls_connect_named(d.port, certs, NULL, NULL, "y.beta.test", "y.beta.test")));
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 1);
    sni_session(d.port, certs, "nobody.test", "stream.test", version, sizeof(version));
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 2);
    /* openssl s_client names alpha.test and sees its certificate. */
    char cmd[PATH_MAX + 256], out[PATH_MAX];
    test_daemon_file(out, sizeof(out), "s_client.out");
    snprintf(cmd, sizeof(cmd),
             "echo | timeout 20 openssl s_client -connect 127.0.0.1:%d -servername alpha.test "
             ">%s 2>&1",
             d.port, out);
    int rc = system(cmd);
    char *text = test_read_file(out);
    ck_assert_msg(rc == 0 && strstr(text, "CN = alpha.test") != NULL, "%d: %s", rc, text);
    free(text);
    ck_assert(test_poll_until(got_one, &first.tcp.accepted, TEST_WAIT_MS));
    test_daemon_stop(&d);
    backend_stop(&first);
    backend_stop(&def);
}
END_TEST

/* tls_preread on a plain address several servers share: the ClientHello's
 * name picks the server, whose proxy_pass gets the hello. */
START_TEST(preread_picks_the_server)
{
    struct backend def, alpha;
    backend_start(&def, ECHO);
    backend_start(&alpha, ECHO);
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  tls_preread on;\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.1:0; server_name alpha.test www.alpha.*;\n"
             "    proxy_pass 127.0.0.1:%d; }\n",
             def.tcp.port, alpha.tcp.port);
    struct test_daemon d;
    start_with(&d, stream);
    named_hello_through(d.port, "alpha.test", true);
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 1);
    named_hello_through(d.port, "www.alpha.org", false);
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 2);
    named_hello_through(d.port, "beta.test", false);
    named_hello_through(d.port, NULL, false);
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 2);
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 2);
    test_daemon_stop(&d);
    backend_stop(&def);
    backend_stop(&alpha);
}
END_TEST

/* Regex names are tried in the order of the servers in the config, as
 * HTTP's and nginx's are: a default_server written after another server
 * whose regex also matches does not take its names first. */
START_TEST(preread_regexes_in_config_order)
{
    struct backend first, def;
    backend_start(&first, ECHO);
    backend_start(&def, ECHO);
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  tls_preread on;\n"
             "  server { listen 127.0.0.1:0; server_name ~^alpha\\.;\n"
             "    proxy_pass 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.1:0 default_server; server_name ~\\.test$;\n"
             "    proxy_pass 127.0.0.1:%d; }\n",
             first.tcp.port, def.tcp.port);
    struct test_daemon d;
    start_with(&d, stream);
    named_hello_through(d.port, "alpha.test", false);
    ck_assert_int_eq(atomic_load(&first.tcp.accepted), 1);
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 0);
    named_hello_through(d.port, "beta.test", false);
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 1);
    test_daemon_stop(&d);
    backend_stop(&first);
    backend_stop(&def);
}
END_TEST

/* A reload from one server on an address to two told apart by name: the
 * port stays, and the ClientHello's name picks the new server. */
START_TEST(reload_adds_a_server_by_name)
{
    struct backend def, alpha;
    backend_start(&def, ECHO);
    backend_start(&alpha, ECHO);
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  tls_preread on;\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; }\n",
             def.tcp.port);
    struct test_daemon d;
    start_with(&d, stream);
    named_hello_through(d.port, "alpha.test", false);
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 1);
    char config[2048];
    snprintf(config, sizeof(config),
             "workers 2;\n%sdrain_timeout 5s;\nadmin { listen 127.0.0.2:0; }\nstream {\n"
             "  tls_preread on;\n"
             "  server { listen 127.0.0.1:0; proxy_pass 127.0.0.1:%d; }\n"
             "  server { listen 127.0.0.1:0; server_name alpha.test; proxy_pass 127.0.0.1:%d; }\n"
             "}\n",
             wakeup_line, def.tcp.port, alpha.tcp.port);
    test_daemon_write_config(&d, config);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    named_hello_through(d.port, "alpha.test", false);
    ck_assert_int_eq(atomic_load(&alpha.tcp.accepted), 1);
    ck_assert_int_eq(atomic_load(&def.tcp.accepted), 1);
    test_daemon_stop(&d);
    backend_stop(&def);
    backend_stop(&alpha);
}
END_TEST

/* ---------------------------------------------- send/expect health checks */

/* health_check match=NAME: a server that answers what is expected stays
 * up; one that answers something else without end (read no further than
 * 4 KB), one that says something else and closes, and one that never
 * answers are taken out, each for its reason, and sessions go to the
 * first alone. */
START_TEST(match_health_check_judges_the_answer)
{
    struct backend right, endless, wrong;
    backend_start(&right, ECHO);
    backend_start(&endless, SOURCE);
    endless.source_len = 64 * 1024 * 1024;
    backend_start(&wrong, HALF_FIRST);
    int never_port;
    int never = test_listen(&never_port, 64); /* never accepts */
    char stream[2048];
    snprintf(stream, sizeof(stream),
             "  match ping { send \"PING\\r\\n\"; expect ~ \"^PI+NG\\r\"; }\n"
             "  upstream u { server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d max_fails=0;\n"
             "    server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d max_fails=0;\n"
             "    health_check match=ping interval=50ms timeout=500ms rise=1 fall=1; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass u; proxy_next_upstream off; }",
             right.tcp.port, endless.tcp.port, wrong.tcp.port, never_port);
    struct test_daemon d;
    start_with(&d, stream);
    char line[128];
    snprintf(line, sizeof(line), "127.0.0.1:%d is down: 1 failed checks (unexpected response)",
             endless.tcp.port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    snprintf(line, sizeof(line),
             "127.0.0.1:%d is down: 1 failed checks (closed without the expected response)",
             wrong.tcp.port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    snprintf(line, sizeof(line), "127.0.0.1:%d is down: 1 failed checks (timeout)", never_port);
    free(test_wait_file(d.log, line, TEST_WAIT_MS));
    ck_assert_msg(test_poll_until(eight_echo, &d.port, TEST_WAIT_MS),
                  "sessions still go to the servers that failed their checks");
    char *log = test_read_file(d.log);
    snprintf(line, sizeof(line), "127.0.0.1:%d is down", right.tcp.port);
    ck_assert_msg(strstr(log, line) == NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
    close(never);
    backend_stop(&right);
    backend_stop(&endless);
    backend_stop(&wrong);
}
END_TEST

/* ------------------------------------------------------------- metrics */

struct metrics_wait {
    int admin_port;
    char expect[4][160]; /* lines /metrics must have */
    char body[65536];
};

static bool metrics_have(void *arg)
{
    struct metrics_wait *m = arg;
    if (test_daemon_http_get("127.0.0.2", m->admin_port, "/metrics", m->body, sizeof(m->body)) !=
        200)
        return false;
    for (size_t i = 0; i < sizeof(m->expect) / sizeof(m->expect[0]); i++)
        if (m->expect[i][0] != '\0' && strstr(m->body, m->expect[i]) == NULL)
            return false;
    return true;
}

/* /metrics counts each stream listen's sessions by status, the bytes
 * each way and the sessions no server took: round robin over a server
 * that refuses and one that echoes, without a next server. */
START_TEST(metrics_count_sessions)
{
    struct backend b;
    backend_start(&b, ECHO);
    int dead_port;
    int reserved = test_reserve_port(&dead_port);
    char stream[1024];
    snprintf(stream, sizeof(stream),
             "  upstream u { server 127.0.0.1:%d max_fails=0; server 127.0.0.1:%d max_fails=0; }\n"
             "  server { listen 127.0.0.1:0; proxy_pass u; proxy_next_upstream off; }",
             dead_port, b.tcp.port);
    struct test_daemon d;
    start_workers(&d, 1, stream);
    unsigned ok = 0, failed = 0;
    for (int i = 0; i < 4; i++) {
        if (session_echoes(d.port))
            ok++;
        else
            failed++;
    }
    ck_assert_uint_ge(ok, 1);
    ck_assert_uint_ge(failed, 1);
    static struct metrics_wait m;
    memset(&m, 0, sizeof(m));
    m.admin_port = d.admin_port;
    snprintf(m.expect[0], sizeof(m.expect[0]),
             "corral_stream_sessions_total{listen=\"127.0.0.1:0\",status=\"200\"} %u\n", ok);
    snprintf(m.expect[1], sizeof(m.expect[1]),
             "corral_stream_sessions_total{listen=\"127.0.0.1:0\",status=\"502\"} %u\n", failed);
    snprintf(m.expect[2], sizeof(m.expect[2]),
             "corral_stream_upstream_failures_total{listen=\"127.0.0.1:0\"} %u\n", failed);
    snprintf(m.expect[3], sizeof(m.expect[3]),
             "corral_stream_received_bytes_total{listen=\"127.0.0.1:0\"} %u\n", ok);
    ck_assert_msg(test_poll_until(metrics_have, &m, TEST_WAIT_MS), "%s", m.body);
    ck_assert(strstr(m.body, "corral_stream_sessions_started_total{listen=\"127.0.0.1:0\"} 4\n") !=
              NULL);
    ck_assert(strstr(m.body, "corral_stream_sent_bytes_total{listen=\"127.0.0.1:0\"} ") != NULL);
    ck_assert(strstr(m.body, "corral_stream_sessions_active{listen=\"127.0.0.1:0\"} 0\n") != NULL);
    test_daemon_stop(&d);
    close(reserved);
    backend_stop(&b);
}
END_TEST

Suite *test_suite(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("tcp");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 120); /* a ceiling for sanitizer builds on a loaded machine */
    tcase_add_test(tc, echo_both_ways_intact);
    tcase_add_test(tc, echo_with_small_buffers);
    tcase_add_test(tc, wakeup_modes_apply);
    tcase_add_test(tc, client_half_close_passes_on);
    tcase_add_test(tc, server_half_close_passes_on);
    tcase_add_test(tc, backend_reset_reaches_the_client);
    tcase_add_test(tc, slow_reader_keeps_memory_bounded);
    tcase_add_test(tc, many_connections_at_once);
    tcase_add_test(tc, proxy_protocol_on_both_sides);
    tcase_add_test(tc, next_upstream_after_a_refused_connect);
    tcase_add_test(tc, deny_closes_before_any_server);
    tcase_add_test(tc, reload_lets_sessions_finish);
    tcase_add_test(tc, sni_routes_to_three_upstreams);
    tcase_add_test(tc, access_log_lines);
    tcase_add_test(tc, limit_conn_per_address);
    tcase_add_test(tc, tcp_health_check_takes_a_dead_server_out);
    suite_add_tcase(s, tc);
    tc = tcase_create("tls");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tls_terminates_to_a_plain_backend);
    tcase_add_test(tc, tls_server_half_close_passes_on);
    tcase_add_test(tc, tls_client_certificate_required);
    tcase_add_test(tc, tls_alpn_and_protocols);
    tcase_add_test(tc, tls_access_log_line);
    suite_add_tcase(s, tc);
    tc = tcase_create("sni");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tls_servers_picked_by_sni);
    tcase_add_test(tc, tls_default_server_and_own_rules);
    tcase_add_test(tc, preread_picks_the_server);
    tcase_add_test(tc, preread_regexes_in_config_order);
    tcase_add_test(tc, reload_adds_a_server_by_name);
    suite_add_tcase(s, tc);
    tc = tcase_create("checks");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, match_health_check_judges_the_answer);
    tcase_add_test(tc, metrics_count_sessions);
    suite_add_tcase(s, tc);
    return s;
}
