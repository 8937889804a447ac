/*
 * test_proxy_protocol_send.c: the PROXY header corral sends to upstreams
 * (`proxy_protocol on` in an upstream block): the encoder against the
 * parser, then through the daemon to a backend that parses the header.
 * Each connection carries one header, naming its own client, ahead of the
 * request or the TLS handshake; a pooled connection serves no other client.
 */
#include "proto/http/proxy_protocol.h"

#include "tests/daemon.h"
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* "127.0.0.1:80", "[::1]:80" */
static void format_addr(const struct sockaddr *sa, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, size, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, size, "none");
    }
}

/* What a parsed header says: "v1 SRC>DST", or "v1 none" without addresses. */
static void format_header(const struct proxy_protocol_header *h, char *buf, size_t size)
{
    char src[80], dst[80];
    if (!h->has_address) {
        snprintf(buf, size, "v%u none", h->version);
        return;
    }
    format_addr(&h->source.sa, src, sizeof(src));
    format_addr(&h->destination.sa, dst, sizeof(dst));
    snprintf(buf, size, "v%u %s>%s", h->version, src, dst);
}

/* ------------------------------------------------------------ the encoder */

static struct sockaddr_in ipv4(const char *host, unsigned port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    ck_assert_int_eq(inet_pton(AF_INET, host, &a.sin_addr), 1);
    return a;
}

static struct sockaddr_in6 ipv6(const char *host, unsigned port)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    ck_assert_int_eq(inet_pton(AF_INET6, host, &a.sin6_addr), 1);
    return a;
}

/* Encodes, checks the exact bytes where given, parses them back, and
 * returns what the parse says (format_header()). */
static void round_trip(unsigned version, const struct sockaddr *src, const struct sockaddr *dst,
                       const char *exact, size_t exact_len, char *said, size_t size)
{
    char buf[PROXY_PROTOCOL_SEND_MAX];
    ssize_t n = proxy_protocol_encode(version, src, dst, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    if (exact != NULL)
        ck_assert_msg((size_t)n == exact_len && memcmp(buf, exact, exact_len) == 0,
                      "v%u: %zd bytes \"%.*s\"", version, n, (int)n, buf);
    /* Any shorter room is refused, never overrun. */
    char small[PROXY_PROTOCOL_SEND_MAX];
    ck_assert_int_eq(proxy_protocol_encode(version, src, dst, small, (size_t)n - 1), -ENOSPC);
    struct proxy_protocol_header h;
    ck_assert_int_eq(proxy_protocol_parse(buf, (size_t)n, &h), n);
    ck_assert_uint_eq(h.version, version);
    format_header(&h, said, size);
}

START_TEST(encoded_headers_parse_back)
{
    struct sockaddr_in c4 = ipv4("192.0.2.7", 40123), s4 = ipv4("127.0.0.1", 8080);
    struct sockaddr_in6 c6 = ipv6("2001:db8::7", 65535), s6 = ipv6("::1", 443);
    struct sockaddr_in6 mapped = ipv6("::ffff:192.0.2.7", 40123);
    struct sockaddr_in6 widest = ipv6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    struct sockaddr_in zero = ipv4("203.0.113.9", 0);
    struct sockaddr unix_family = {.sa_family = AF_UNIX};
    static const char v2_sig[] = "\r\n\r\n\0\r\nQUIT\n";
    char v2_tcp4[28];
    memcpy(v2_tcp4, v2_sig, 12);
    memcpy(v2_tcp4 + 12, "\x21\x11\x00\x0c", 4);
    memcpy(v2_tcp4 + 16, "\xc0\x00\x02\x07\x7f\x00\x00\x01\x9c\xbb\x1f\x90", 12);
    char v2_local[16];
    memcpy(v2_local, v2_sig, 12);
    memcpy(v2_local + 12, "\x20\x00\x00\x00", 4);
    char said[256];

    round_trip(1, (struct sockaddr *)&c4, (struct sockaddr *)&s4,
               "PROXY TCP4 192.0.2.7 127.0.0.1 40123 8080\r\n", 43, said, sizeof(said));
    ck_assert_str_eq(said, "v1 192.0.2.7:40123>127.0.0.1:8080");
    round_trip(2, (struct sockaddr *)&c4, (struct sockaddr *)&s4, v2_tcp4, sizeof(v2_tcp4), said,
               sizeof(said));
    ck_assert_str_eq(said, "v2 192.0.2.7:40123>127.0.0.1:8080");
    for (unsigned v = 1; v <= 2; v++) {
        round_trip(v, (struct sockaddr *)&c6, (struct sockaddr *)&s6, NULL, 0, said, sizeof(said));
        ck_assert_str_eq(said + 3, "[2001:db8::7]:65535>[::1]:443");
        /* An IPv4 client of an IPv6 socket: both as IPv6. */
        round_trip(v, (struct sockaddr *)&c4, (struct sockaddr *)&s6, NULL, 0, said, sizeof(said));
        ck_assert_str_eq(said + 3, "[::ffff:192.0.2.7]:40123>[::1]:443");
        round_trip(v, (struct sockaddr *)&mapped, (struct sockaddr *)&s4, NULL, 0, said,
                   sizeof(said));
        ck_assert_str_eq(said + 3, "[::ffff:192.0.2.7]:40123>[::ffff:127.0.0.1]:8080");
        round_trip(v, (struct sockaddr *)&widest, (struct sockaddr *)&widest, NULL, 0, said,
                   sizeof(said));
        ck_assert_str_eq(said + 3, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535>"
                                   "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
        /* An address from X-Forwarded-For has no port. */
        round_trip(v, (struct sockaddr *)&zero, (struct sockaddr *)&s4, NULL, 0, said,
                   sizeof(said));
        ck_assert_str_eq(said + 3, "203.0.113.9:0>127.0.0.1:8080");
    }
    /* No client address (a unix socket's client), or no local one. */
    round_trip(1, NULL, (struct sockaddr *)&s4, "PROXY UNKNOWN\r\n", 15, said, sizeof(said));
    ck_assert_str_eq(said, "v1 none");
    round_trip(1, &unix_family, (struct sockaddr *)&s4, "PROXY UNKNOWN\r\n", 15, said,
               sizeof(said));
    round_trip(2, (struct sockaddr *)&c4, NULL, v2_local, sizeof(v2_local), said, sizeof(said));
    ck_assert_str_eq(said, "v2 none");
}
END_TEST

/* -------------------------------------------------- a recording backend */

#define BACKEND_CONNS 32

/* Parses the PROXY header each connection starts with, then (`serve`)
 * answers each request head with 200 and the body "c=INDEX HEADER", the
 * connection's index and what its header said, keeping the connection
 * open; or keeps the first byte after the header and closes (`peek`); or
 * closes right after the header (`drop`). */
enum backend_mode { BACKEND_SERVE, BACKEND_PEEK, BACKEND_DROP };

struct backend_conn {
    int fd;
    char buf[8192];
    size_t len;
    bool header_done;
};

struct backend {
    int fd, port, wake[2];
    enum backend_mode mode;
    pthread_t thread;
    pthread_mutex_t lock;
    /* What it saw, under the lock. */
    unsigned conns, requests;
    char header[BACKEND_CONNS][160];        /* format_header() of each connection's */
    char raw[BACKEND_CONNS][128];           /* its bytes, for a v1 line */
    char first_request[BACKEND_CONNS][128]; /* the request line after it */
    int first_byte[BACKEND_CONNS];          /* BACKEND_PEEK: what came after it; -1 */
    char error[512];                        /* the first thing that went wrong */
    struct backend_conn c[BACKEND_CONNS];
};

static void backend_fail(struct backend *b, const char *what, unsigned index)
{
    pthread_mutex_lock(&b->lock);
    if (b->error[0] == '\0')
        snprintf(b->error, sizeof(b->error), "connection %u: %s", index, what);
    pthread_mutex_unlock(&b->lock);
}

/* `len` bytes of `text` as a string, cut to fit. */
static void copy_text(char *out, size_t size, const char *text, size_t len)
{
    len = len < size - 1 ? len : size - 1;
    memcpy(out, text, len);
    out[len] = '\0';
}

static void backend_close(struct backend_conn *c)
{
    close(c->fd);
    c->fd = -1;
}

/* Handles what connection `i` has read so far. */
static void backend_process(struct backend *b, unsigned i)
{
    struct backend_conn *c = &b->c[i];
    if (!c->header_done) {
        struct proxy_protocol_header h;
        ssize_t n = proxy_protocol_parse(c->buf, c->len, &h);
        if (n == 0)
            return;
        if (n < 0) {
            backend_fail(b, "no PROXY header first", i);
            backend_close(c);
            return;
        }
        pthread_mutex_lock(&b->lock);
        format_header(&h, b->header[i], sizeof(b->header[i]));
        copy_text(b->raw[i], sizeof(b->raw[i]), c->buf, (size_t)n);
        pthread_mutex_unlock(&b->lock);
        memmove(c->buf, c->buf + n, c->len - (size_t)n);
        c->len -= (size_t)n;
        c->header_done = true;
        if (b->mode == BACKEND_DROP) {
            backend_close(c);
            return;
        }
    }
    if (b->mode == BACKEND_PEEK) {
        if (c->len > 0) {
            pthread_mutex_lock(&b->lock);
            b->first_byte[i] = (unsigned char)c->buf[0];
            pthread_mutex_unlock(&b->lock);
            backend_close(c);
        }
        return;
    }
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (end == NULL)
            return;
        size_t head = (size_t)(end + 4 - c->buf);
        /* Each request starts with its method: a second header would not. */
        if (memcmp(c->buf, "GET ", 4) != 0) {
            backend_fail(b, "a request that is not a GET (a second PROXY header?)", i);
            backend_close(c);
            return;
        }
        char body[256];
        pthread_mutex_lock(&b->lock);
        if (b->first_request[i][0] == '\0')
            copy_text(b->first_request[i], sizeof(b->first_request[i]), c->buf,
                      (size_t)((char *)memchr(c->buf, '\r', head) - c->buf));
        b->requests++;
        int body_len = snprintf(body, sizeof(body), "c=%u %s", i, b->header[i]);
        pthread_mutex_unlock(&b->lock);
        char answer[512];
        int n = snprintf(answer, sizeof(answer), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s",
                         body_len, body);
        (void)!send(c->fd, answer, (size_t)n, MSG_NOSIGNAL);
        memmove(c->buf, c->buf + head, c->len - head);
        c->len -= head;
    }
}

static void *backend_main(void *arg)
{
    struct backend *b = arg;
    uint64_t deadline = test_now_ms() + 60 * 1000; /* bounded: a case takes seconds */
    while (test_now_ms() < deadline) {
        struct pollfd pfd[BACKEND_CONNS + 2];
        unsigned index[BACKEND_CONNS + 2];
        nfds_t count = 0;
        pfd[count++] = (struct pollfd){.fd = b->wake[0], .events = POLLIN};
        pfd[count++] = (struct pollfd){.fd = b->fd, .events = POLLIN};
        for (unsigned i = 0; i < b->conns; i++)
            if (b->c[i].fd >= 0) {
                index[count] = i;
                pfd[count++] = (struct pollfd){.fd = b->c[i].fd, .events = POLLIN};
            }
        if (poll(pfd, count, 100) < 0 || (pfd[0].revents & POLLIN))
            break;
        if ((pfd[1].revents & POLLIN) && b->conns < BACKEND_CONNS) {
            int fd = accept(b->fd, NULL, NULL);
            if (fd >= 0) {
                pthread_mutex_lock(&b->lock);
                b->c[b->conns] = (struct backend_conn){.fd = fd};
                b->first_byte[b->conns] = -1;
                b->conns++;
                pthread_mutex_unlock(&b->lock);
            }
        }
        for (nfds_t k = 2; k < count; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            struct backend_conn *c = &b->c[index[k]];
            if (c->len == sizeof(c->buf)) {
                backend_fail(b, "a head that does not end", index[k]);
                backend_close(c);
                continue;
            }
            ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
            if (n <= 0) {
                backend_close(c);
                continue;
            }
            c->len += (size_t)n;
            backend_process(b, index[k]);
        }
    }
    for (unsigned i = 0; i < b->conns; i++)
        if (b->c[i].fd >= 0)
            backend_close(&b->c[i]);
    return NULL;
}

static void backend_start(struct backend *b, enum backend_mode mode)
{
    memset(b, 0, sizeof(*b));
    b->mode = mode;
    pthread_mutex_init(&b->lock, NULL);
    ck_assert_int_eq(pipe(b->wake), 0);
    b->fd = test_listen(&b->port, 16);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, backend_main, b), 0);
}

static void backend_stop(struct backend *b)
{
    (void)!write(b->wake[1], "x", 1);
    pthread_join(b->thread, NULL);
    close(b->fd);
    close(b->wake[0]);
    close(b->wake[1]);
}

/* The backend's connection count, once it stops changing for a moment:
 * the daemon may still be opening one when the answer is read. */
static unsigned backend_conns(struct backend *b)
{
    pthread_mutex_lock(&b->lock);
    unsigned n = b->conns;
    ck_assert_msg(b->error[0] == '\0', "backend: %s", b->error);
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* ---------------------------------------------------------- the clients */

/* A connection to the daemon on `host` (127.0.0.1 or ::1). */
static int client_connect(const char *host, int port)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (strchr(host, ':') != NULL) {
        struct sockaddr_in6 a = ipv6(host, (unsigned)port);
        memcpy(&ss, &a, sizeof(a));
        len = sizeof(a);
    } else {
        struct sockaddr_in a = ipv4(host, (unsigned)port);
        memcpy(&ss, &a, sizeof(a));
        len = sizeof(a);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&ss, len) == 0, "connect to %s:%d: %s", host, port,
                  strerror(errno));
    return fd;
}

/* The client's end of `fd` as the backend should hear it named. */
static void client_name(int fd, bool local, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    ck_assert_int_eq(local ? getsockname(fd, (struct sockaddr *)&ss, &len)
                           : getpeername(fd, (struct sockaddr *)&ss, &len),
                     0);
    format_addr((struct sockaddr *)&ss, buf, size);
}

/* "src>dst" of the daemon connection `fd`, as a header from it says. */
static void client_pair(int fd, char *buf, size_t size)
{
    char src[80], dst[80];
    client_name(fd, true, src, sizeof(src));
    client_name(fd, false, dst, sizeof(dst));
    snprintf(buf, size, "%s>%s", src, dst);
}

/* Reads a response with a Content-Length on `fd`: its status, and the
 * body into `body`.  Waits 5 s at most. */
static int read_response(int fd, char *body, size_t size)
{
    char response[4096];
    size_t len = 0;
    uint64_t deadline = test_now_ms() + 5000;
    while (len < sizeof(response) - 1 && test_now_ms() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) != 1)
            continue;
        ssize_t r = recv(fd, response + len, sizeof(response) - 1 - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
        response[len] = '\0';
        char *end = strstr(response, "\r\n\r\n");
        const char *cl = strcasestr(response, "content-length:");
        if (end != NULL && cl != NULL && cl < end &&
            len >= (size_t)(end + 4 - response) + strtoul(cl + 15, NULL, 10))
            break;
    }
    response[len] = '\0';
    int status = 0;
    sscanf(response, "HTTP/1.1 %d", &status);
    const char *end = strstr(response, "\r\n\r\n");
    snprintf(body, size, "%s", end != NULL ? end + 4 : "");
    return status;
}

/* One keep-alive GET / on `fd` with `extra` header lines. */
static int get_on(int fd, const char *extra, char *body, size_t size)
{
    char request[512];
    int n = snprintf(request, sizeof(request), "GET / HTTP/1.1\r\nHost: front\r\n%s\r\n", extra);
    test_send_all(fd, request, (size_t)n);
    return read_response(fd, body, size);
}

#define ADMIN "admin { listen 127.0.0.2:0; }\n"

/* The daemon with one upstream `back` on the backend, proxy_protocol on,
 * `version`; `server` holds extra lines for the server block. */
static void start(struct test_daemon *d, const struct backend *b, unsigned version,
                  const char *upstream, const char *server)
{
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\n" ADMIN "upstream back {\n"
             "    server 127.0.0.1:%d;\n"
             "    proxy_protocol on;\n"
             "    proxy_protocol_version %u;\n%s"
             "}\n"
             "server {\n"
             "    listen 127.0.0.1:0;\n%s"
             "    location / { proxy_pass http://back; }\n"
             "}\n",
             b->port, version, upstream, server);
    test_daemon_init(d, "corral");
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* ------------------------------------------------------- through corral */

/* One client connection, three requests: one backend connection, whose
 * header (v1 or v2, as the loop says) names the client's address and
 * port and the daemon's, then the three requests, no second header. */
START_TEST(one_header_per_connection_then_requests)
{
    unsigned version = (unsigned)_i + 1;
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    struct test_daemon d;
    start(&d, &b, version, "", "");
    int fd = client_connect("127.0.0.1", d.port);
    char pair[200], expect[256], body[512];
    client_pair(fd, pair, sizeof(pair));
    snprintf(expect, sizeof(expect), "c=0 v%u %s", version, pair);
    struct sockaddr_in self;
    socklen_t len = sizeof(self);
    getsockname(fd, (struct sockaddr *)&self, &len);
    char line[128]; /* the whole v1 line */
    snprintf(line, sizeof(line), "PROXY TCP4 127.0.0.1 127.0.0.1 %u %d\r\n", ntohs(self.sin_port),
             d.port);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(get_on(fd, "", body, sizeof(body)), 200);
        ck_assert_str_eq(body, expect);
    }
    close(fd);
    ck_assert_uint_eq(backend_conns(&b), 1);
    pthread_mutex_lock(&b.lock);
    ck_assert_uint_eq(b.requests, 3);
    ck_assert_str_eq(b.first_request[0], "GET / HTTP/1.1");
    if (version == 1)
        ck_assert_str_eq(b.raw[0], line);
    pthread_mutex_unlock(&b.lock);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* The core of pooling with the PROXY protocol: requests of two client
 * connections, interleaved, never ride a backend connection whose header
 * names the other client. */
START_TEST(clients_never_share_a_connection)
{
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    struct test_daemon d;
    start(&d, &b, 2, "", "");
    int fds[2] = {client_connect("127.0.0.1", d.port), client_connect("127.0.0.1", d.port)};
    char pairs[2][200], body[512];
    client_pair(fds[0], pairs[0], sizeof(pairs[0]));
    client_pair(fds[1], pairs[1], sizeof(pairs[1]));
    char seen[2][16] = {"", ""}; /* "c=N" of each client's connection */
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(get_on(fds[k], "", body, sizeof(body)), 200);
            char *space = strchr(body, ' ');
            ck_assert_ptr_nonnull(space);
            ck_assert_msg(strcmp(space + 4, pairs[k]) == 0,
                          "client %d (%s) got a connection whose header says \"%s\"", k, pairs[k],
                          body);
            /* Its own connection each time: the pool gives it back. */
            *space = '\0';
            if (round == 0)
                copy_text(seen[k], sizeof(seen[k]), body, strlen(body));
            ck_assert_str_eq(body, seen[k]);
        }
    }
    ck_assert_str_ne(seen[0], seen[1]);
    close(fds[0]);
    close(fds[1]);
    /* A new client connection gets a new header, even from the same host. */
    int fd = client_connect("127.0.0.1", d.port);
    char pair[200];
    client_pair(fd, pair, sizeof(pair));
    ck_assert_int_eq(get_on(fd, "", body, sizeof(body)), 200);
    ck_assert_msg(strstr(body, pair) != NULL, "%s: %s", pair, body);
    close(fd);
    ck_assert_uint_eq(backend_conns(&b), 3);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* keepalive 1 with one request at a time: the pool keeps what that
 * concurrency needs (1) and one more, so a third client's connection
 * takes the place of the oldest client's, who may be gone. */
START_TEST(a_full_pool_keeps_the_newest)
{
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    struct test_daemon d;
    start(&d, &b, 1, "    keepalive 1;\n", "");
    int fds[3];
    char body[512], expected[16];
    for (int k = 0; k < 3; k++) {
        fds[k] = client_connect("127.0.0.1", d.port);
        ck_assert_int_eq(get_on(fds[k], "", body, sizeof(body)), 200);
        snprintf(expected, sizeof(expected), "c=%d ", k);
        ck_assert_msg(strstr(body, expected) != NULL, "client %d: %s", k, body);
    }
    ck_assert_int_eq(get_on(fds[2], "", body, sizeof(body)), 200);
    ck_assert_msg(strstr(body, "c=2 ") != NULL, "the newest client's connection was not kept: %s",
                  body);
    ck_assert_int_eq(get_on(fds[1], "", body, sizeof(body)), 200);
    ck_assert_msg(strstr(body, "c=1 ") != NULL, "the middle client's connection was not kept: %s",
                  body);
    ck_assert_int_eq(get_on(fds[0], "", body, sizeof(body)), 200);
    ck_assert_msg(strstr(body, "c=3 ") != NULL, "the oldest client's connection was kept: %s",
                  body);
    for (int k = 0; k < 3; k++)
        close(fds[k]);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* An IPv6 client: a TCP6 header, v1 and v2. */
START_TEST(ipv6_clients_send_tcp6)
{
    unsigned version = (unsigned)_i + 1;
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    int v6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a = ipv6("::1", 0);
    socklen_t len = sizeof(a);
    ck_assert_int_eq(bind(v6, (struct sockaddr *)&a, sizeof(a)), 0);
    getsockname(v6, (struct sockaddr *)&a, &len);
    close(v6); /* free a moment ago: the daemon takes it */
    char listen6[64];
    snprintf(listen6, sizeof(listen6), "    listen [::1]:%u;\n", ntohs(a.sin6_port));
    struct test_daemon d;
    start(&d, &b, version, "", listen6);
    int fd = client_connect("::1", ntohs(a.sin6_port));
    char pair[200], expect[256], body[512];
    client_pair(fd, pair, sizeof(pair));
    snprintf(expect, sizeof(expect), "c=0 v%u %s", version, pair);
    ck_assert_int_eq(get_on(fd, "", body, sizeof(body)), 200);
    ck_assert_str_eq(body, expect);
    ck_assert_ptr_nonnull(strstr(expect, "[::1]:"));
    close(fd);
    if (version == 1) {
        pthread_mutex_lock(&b.lock);
        ck_assert_msg(strncmp(b.raw[0], "PROXY TCP6 ::1 ::1 ", 19) == 0, "%s", b.raw[0]);
        pthread_mutex_unlock(&b.lock);
    }
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* set_real_ip_from with X-Forwarded-For: the header names the address the
 * trusted proxy vouches for (with no port), not the connection's; and
 * clients it names differently do not share a connection. */
START_TEST(real_ip_sets_the_source)
{
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    struct test_daemon d;
    start(&d, &b, 1, "", "    set_real_ip_from 127.0.0.1;\n    real_ip_header X-Forwarded-For;\n");
    int fd = client_connect("127.0.0.1", d.port);
    char dst[80], expect[256], body[512];
    client_name(fd, false, dst, sizeof(dst));
    ck_assert_int_eq(
        get_on(fd, "X-Forwarded-For: 198.51.100.1, 203.0.113.9\r\n", body, sizeof(body)), 200);
    snprintf(expect, sizeof(expect), "c=0 v1 203.0.113.9:0>%s", dst);
    ck_assert_str_eq(body, expect);
    /* The same client connection, another address: another connection. */
    ck_assert_int_eq(get_on(fd, "X-Forwarded-For: 192.0.2.44\r\n", body, sizeof(body)), 200);
    snprintf(expect, sizeof(expect), "c=1 v1 192.0.2.44:0>%s", dst);
    ck_assert_str_eq(body, expect);
    ck_assert_int_eq(get_on(fd, "X-Forwarded-For: 203.0.113.9\r\n", body, sizeof(body)), 200);
    snprintf(expect, sizeof(expect), "c=0 v1 203.0.113.9:0>%s", dst);
    ck_assert_str_eq(body, expect);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* To a TLS upstream the header goes in the clear, and the ClientHello
 * (a handshake record, 0x16) follows it. */
START_TEST(tls_upstreams_get_the_header_before_the_handshake)
{
    struct backend b;
    backend_start(&b, BACKEND_PEEK);
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\n" ADMIN "upstream back {\n"
             "    server 127.0.0.1:%d;\n"
             "    proxy_protocol on;\n"
             "}\n"
             "server {\n"
             "    listen 127.0.0.1:0;\n"
             "    location / { proxy_pass https://back; proxy_tls_verify off; }\n"
             "}\n",
             b.port);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    int fd = client_connect("127.0.0.1", d.port);
    char pair[200], expect[256], body[512];
    client_pair(fd, pair, sizeof(pair));
    ck_assert_int_eq(get_on(fd, "", body, sizeof(body)), 502); /* the backend hangs up */
    close(fd);
    ck_assert_uint_ge(backend_conns(&b), 1);
    snprintf(expect, sizeof(expect), "v1 %s", pair);
    pthread_mutex_lock(&b.lock);
    ck_assert_str_eq(b.header[0], expect);
    ck_assert_int_eq(b.first_byte[0], 0x16);
    pthread_mutex_unlock(&b.lock);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* Another corral as the backend, reading the header on a plain and on a
 * TLS listen: it takes the header's source as its client, so its
 * $remote_addr and $remote_port are the first corral's client's, and the
 * TLS handshake after the header completes. */
START_TEST(a_proxy_protocol_listen_reads_what_is_sent)
{
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout back.key -out back.pem -subj /CN=back -days 2 >openssl.log 2>&1",
             test_daemon_dir());
    ck_assert_msg(system(cmd) == 0, "openssl failed");
    int plain_port, tls_port;
    close(test_reserve_port(&plain_port));
    close(test_reserve_port(&tls_port));
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\n" ADMIN "server {\n"
             "    listen 127.0.0.1:%d proxy_protocol;\n"
             "    listen 127.0.0.1:%d tls proxy_protocol;\n"
             "    tls_certificate back.pem;\n    tls_certificate_key back.key;\n"
             "    location / { return 200 \"$scheme $remote_addr:$remote_port\"; }\n"
             "}\n",
             plain_port, tls_port);
    struct test_daemon back, front;
    test_daemon_init(&back, "back");
    test_daemon_write_config(&back, conf);
    test_daemon_start(&back);
    snprintf(conf, sizeof(conf),
             "workers 1;\n" ADMIN "upstream plain {\n"
             "    server 127.0.0.1:%d;\n    proxy_protocol on;\n    proxy_protocol_version 2;\n}\n"
             "upstream secure {\n"
             "    server 127.0.0.1:%d;\n    proxy_protocol on;\n}\n"
             "server {\n"
             "    listen 127.0.0.1:0;\n"
             "    location /plain { proxy_pass http://plain; }\n"
             "    location /tls { proxy_pass https://secure; proxy_tls_verify off; }\n"
             "}\n",
             plain_port, tls_port);
    test_daemon_init(&front, "front");
    test_daemon_write_config(&front, conf);
    test_daemon_start(&front);
    static const char *const paths[] = {"/plain", "/tls"};
    static const char *const schemes[] = {"http", "https"};
    for (int i = 0; i < 2; i++) {
        int fd = client_connect("127.0.0.1", front.port);
        char self[80], expect[128], body[512], request[128];
        client_name(fd, true, self, sizeof(self));
        snprintf(expect, sizeof(expect), "%s %s", schemes[i], self);
        snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: front\r\n\r\n", paths[i]);
        for (int k = 0; k < 2; k++) { /* the second on the pooled connection */
            test_send_all(fd, request, strlen(request));
            ck_assert_int_eq(read_response(fd, body, sizeof(body)), 200);
            ck_assert_msg(strcmp(body, expect) == 0, "%s, request %d: \"%s\", not \"%s\"; log:\n%s",
                          paths[i], k, body, expect, test_daemon_log(&back));
        }
        close(fd);
    }
    test_daemon_stop(&front);
    test_daemon_stop(&back);
}
END_TEST

/* A server that fails after the header: the request goes on to the next
 * server, on a new connection with a header of its own. */
START_TEST(the_next_server_gets_a_header_of_its_own)
{
    struct backend bad, good;
    backend_start(&bad, BACKEND_DROP);
    backend_start(&good, BACKEND_SERVE);
    char more[128];
    snprintf(more, sizeof(more), "    server 127.0.0.1:%d;\n", good.port);
    struct test_daemon d;
    start(&d, &bad, 2, more, "");
    char pair[200], expect[256], body[512];
    for (int i = 0; i < 2; i++) { /* round robin: one of the two starts with the bad one */
        int fd = client_connect("127.0.0.1", d.port);
        client_pair(fd, pair, sizeof(pair));
        ck_assert_int_eq(get_on(fd, "", body, sizeof(body)), 200);
        snprintf(expect, sizeof(expect), "v2 %s", pair);
        ck_assert_msg(strstr(body, expect) != NULL, "%s: %s", expect, body);
        close(fd);
    }
    ck_assert_uint_ge(backend_conns(&bad), 1);
    pthread_mutex_lock(&bad.lock);
    ck_assert_msg(strncmp(bad.header[0], "v2 127.0.0.1:", 13) == 0, "%s", bad.header[0]);
    pthread_mutex_unlock(&bad.lock);
    test_daemon_stop(&d);
    backend_stop(&bad);
    backend_stop(&good);
}
END_TEST

/* Active health checks open connections of the proxy's own: their header
 * names no client (v1 UNKNOWN, v2 LOCAL), and the check's request
 * follows it. */
START_TEST(health_checks_send_a_header_naming_no_client)
{
    unsigned version = (unsigned)_i + 1;
    struct backend b;
    backend_start(&b, BACKEND_SERVE);
    struct test_daemon d;
    start(&d, &b, version, "    health_check interval=100ms;\n", "");
    bool seen = false;
    for (int i = 0; i < 250 && !seen; i++) { /* 5 s */
        pthread_mutex_lock(&b.lock);
        seen = b.requests > 0;
        pthread_mutex_unlock(&b.lock);
        if (!seen)
            usleep(20 * 1000);
    }
    ck_assert_msg(seen, "no health check reached the backend");
    char expect[32];
    snprintf(expect, sizeof(expect), "v%u none", version);
    pthread_mutex_lock(&b.lock);
    ck_assert_str_eq(b.header[0], expect);
    ck_assert_str_eq(b.first_request[0], "GET / HTTP/1.0");
    ck_assert_msg(b.error[0] == '\0', "%s", b.error);
    pthread_mutex_unlock(&b.lock);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* ------------------------------------------------------------ the config */

static const struct {
    const char *lines; /* in the upstream block, from line 3 */
    const char *error;
} config_errors[] = {
    {"    proxy_protocol_version 2;\n", "corral.conf:3:5: \"proxy_protocol_version\" needs "
                                        "\"proxy_protocol on\" in the upstream block"},
    {"    proxy_protocol on;\n    proxy_protocol_version 3;\n",
     "corral.conf:4:28: \"proxy_protocol_version\" must be from 1 to 2, got \"3\""},
    {"    proxy_protocol v2;\n", "corral.conf:3:20: invalid value \"v2\" (expected on or off)"},
    {"    proxy_protocol on;\n    proxy_protocol off;\n", "corral.conf:4:5:"},
};

START_TEST(config_errors_have_their_position)
{
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "upstream back {\n"
             "    server 127.0.0.1:9;\n"
             "%s"
             "}\n"
             "server { listen 127.0.0.1:0; location / { proxy_pass http://back; } }\n",
             config_errors[_i].lines);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, conf);
    char out[2048], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, config_errors[_i].error) != NULL, "expected \"%s\" in:\n%s",
                  config_errors[_i].error, out);
}
END_TEST

/* Outside an upstream block, and the good forms. */
START_TEST(config_contexts)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "server {\n    listen 127.0.0.1:0;\n"
                                 "    location / {\n        proxy_pass http://127.0.0.1:9;\n"
                                 "        proxy_protocol on;\n    }\n}\n");
    char out[2048], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "corral.conf:5:9:") != NULL, "%s", out);
    test_daemon_write_config(&d,
                             "upstream a {\n    server 127.0.0.1:9;\n    proxy_protocol on;\n}\n"
                             "upstream b {\n    server 127.0.0.1:9;\n    proxy_protocol on;\n"
                             "    proxy_protocol_version 2;\n}\n"
                             "upstream c {\n    server 127.0.0.1:9;\n    proxy_protocol off;\n}\n"
                             "server {\n    listen 127.0.0.1:0;\n"
                             "    location /a { proxy_pass http://a; }\n"
                             "    location /b { proxy_pass https://b; }\n"
                             "    location /c { proxy_pass http://c; }\n}\n");
    ck_assert_msg(test_daemon_run(args, out, sizeof(out)) == 0, "%s", out);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("proxy_protocol_send");
    TCase *tc = tcase_create("encode");
    tcase_add_test(tc, encoded_headers_parse_back);
    tcase_set_timeout(tc, 10);
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_add_loop_test(tc, one_header_per_connection_then_requests, 0, 2);
    tcase_add_test(tc, clients_never_share_a_connection);
    tcase_add_test(tc, a_full_pool_keeps_the_newest);
    tcase_add_loop_test(tc, ipv6_clients_send_tcp6, 0, 2);
    tcase_add_test(tc, real_ip_sets_the_source);
    tcase_add_test(tc, tls_upstreams_get_the_header_before_the_handshake);
    tcase_add_test(tc, a_proxy_protocol_listen_reads_what_is_sent);
    tcase_add_test(tc, the_next_server_gets_a_header_of_its_own);
    tcase_add_loop_test(tc, health_checks_send_a_header_naming_no_client, 0, 2);
    tcase_add_loop_test(tc, config_errors_have_their_position, 0, COUNT(config_errors));
    tcase_add_test(tc, config_contexts);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
