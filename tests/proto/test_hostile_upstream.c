/*
 * test_hostile_upstream.c: build/corral in front of a backend that lies.
 * A scripted backend written here answers each request with bytes from a
 * table (malformed status lines, conflicting framing, header bombs, broken
 * chunks, closes and resets at every point, stray bytes) and records what
 * it receives.  Each case checks what the client got (502, 504, or a reset
 * once the head was out), that nothing crafted reaches a later exchange,
 * and that the daemon still serves the next request.  Also: stop and
 * reload with a request in flight, and running out of descriptors.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* ------------------------------------------------------ scripted backend */

/* What the backend does once a step's reply is out. */
enum after {
    KEEP,  /* read the next request */
    CLOSE, /* FIN */
    RESET, /* RST */
    STALL, /* send nothing more, keep the connection open */
};

/* The answer to one request. */
struct step {
    const char *reply;
    size_t reply_len; /* 0: strlen(reply) */
    enum after after;
    unsigned delay_ms; /* before the reply */
    /* Sent late_ms after the reply (then `after` applies). */
    const char *late;
    unsigned late_ms;
    /* The reply goes out as soon as the connection is accepted, before the
     * request is read; `late` then answers the request itself. */
    bool early;
};

#define MAX_CONNS 32
#define MAX_SEEN  32

struct backend {
    int listen_fd, port;
    pthread_t acceptor;
    const struct step *steps;
    size_t step_count;
    atomic_size_t next_step;
    atomic_bool stopping;
    atomic_int accepted, open; /* connections: all, and those still being served */
    pthread_mutex_t lock;
    int fds[MAX_CONNS]; /* -1 once closed by its thread */
    pthread_t threads[MAX_CONNS];
    size_t conn_count;
    char *seen[MAX_SEEN]; /* request heads as received, raw */
    size_t seen_count;
};

struct conn_arg {
    struct backend *b;
    size_t index;
};

static void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count, size);
    if (p == NULL)
        abort(); /* also in backend threads */
    return p;
}

/* Sleeps up to ms, in slices, returning early once the backend stops. */
static void backend_sleep(struct backend *b, unsigned ms)
{
    for (unsigned slept = 0; slept < ms && !atomic_load(&b->stopping); slept += 10)
        usleep(10000);
}

static void send_bytes(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        data += n;
        len -= (size_t)n;
    }
}

static void record_head(struct backend *b, const char *head, size_t len)
{
    char *copy = xcalloc(1, len + 1);
    memcpy(copy, head, len);
    pthread_mutex_lock(&b->lock);
    if (b->seen_count < MAX_SEEN)
        b->seen[b->seen_count++] = copy;
    else
        free(copy);
    pthread_mutex_unlock(&b->lock);
}

/* The default answer: 200 with "ok PATH", so a client can tell which
 * request a response belongs to. */
static void send_default(int fd, const char *head)
{
    const char *path = strchr(head, ' ');
    size_t path_len = 0;
    if (path != NULL) {
        path++;
        path_len = strcspn(path, " \r\n");
    }
    char body[256];
    int body_len = snprintf(body, sizeof(body), "ok %.*s", (int)(path_len < 200 ? path_len : 200),
                            path != NULL ? path : "");
    char reply[512];
    int n = snprintf(reply, sizeof(reply), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s",
                     body_len, body);
    send_bytes(fd, reply, (size_t)n);
}

static void send_step_reply(const struct step *s, int fd)
{
    if (s->reply != NULL)
        send_bytes(fd, s->reply, s->reply_len > 0 ? s->reply_len : strlen(s->reply));
}

/* Ends a connection the way `after` says; returns false when the
 * connection is done. */
static bool finish_step(struct backend *b, int fd, enum after after)
{
    switch (after) {
    case KEEP: return true;
    case CLOSE: {
        /* FIN, then wait (bounded) for the peer's, so the close is not
         * turned into a reset by unread input. */
        shutdown(fd, SHUT_WR);
        char sink[4096];
        for (int i = 0; i < 200 && !atomic_load(&b->stopping); i++) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 10) == 1 && recv(fd, sink, sizeof(sink), 0) <= 0)
                break;
        }
        return false;
    }
    case RESET: {
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
        return false;
    }
    case STALL:
        while (!atomic_load(&b->stopping)) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            char sink[4096];
            if (poll(&p, 1, 10) == 1 && recv(fd, sink, sizeof(sink), 0) <= 0)
                break;
        }
        return false;
    }
    return false;
}

static void *backend_conn(void *arg)
{
    struct conn_arg *ca = arg;
    struct backend *b = ca->b;
    size_t index = ca->index;
    pthread_mutex_lock(&b->lock);
    int fd = b->fds[index];
    pthread_mutex_unlock(&b->lock);
    free(ca);
    size_t size = 64 * 1024, have = 0;
    char *buf = xcalloc(1, size + 1);
    bool open = true;
    const struct step *early = NULL;
    if (b->step_count > 0 && b->steps[0].early && atomic_load(&b->next_step) == 0) {
        early = &b->steps[atomic_fetch_add(&b->next_step, 1)];
        send_step_reply(early, fd);
    }
    while (open && !atomic_load(&b->stopping)) {
        char *end = NULL;
        while ((end = strstr(buf, "\r\n\r\n")) == NULL && have < size) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 10) != 1) {
                if (atomic_load(&b->stopping))
                    break;
                continue;
            }
            ssize_t n = recv(fd, buf + have, size - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = '\0';
        }
        if (end == NULL)
            break;
        size_t head_len = (size_t)(end + 4 - buf);
        record_head(b, buf, head_len);
        /* A request body (Content-Length only: the cases send no other). */
        size_t body = 0;
        const char *cl = strcasestr(buf, "\r\ncontent-length:");
        if (cl != NULL && cl < end)
            body = strtoul(cl + 17, NULL, 10);
        while (have < head_len + body && have < size) {
            ssize_t n = recv(fd, buf + have, size - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
        }
        size_t used = head_len + body < have ? head_len + body : have;
        char head[1024];
        snprintf(head, sizeof(head), "%.*s", (int)(head_len < 1000 ? head_len : 1000), buf);
        memmove(buf, buf + used, have - used);
        have -= used;
        buf[have] = '\0';

        const struct step *s = NULL;
        if (early != NULL) {
            s = early;
            early = NULL;
        } else {
            size_t i = atomic_fetch_add(&b->next_step, 1);
            s = i < b->step_count ? &b->steps[i] : NULL;
        }
        if (s == NULL) {
            send_default(fd, head);
            continue;
        }
        backend_sleep(b, s->delay_ms);
        if (!s->early)
            send_step_reply(s, fd);
        if (s->late != NULL) {
            backend_sleep(b, s->late_ms);
            send_bytes(fd, s->late, strlen(s->late));
        }
        open = finish_step(b, fd, s->after);
    }
    free(buf);
    atomic_fetch_sub(&b->open, 1);
    /* Closed here, so that SO_LINGER 0 turns into a reset now. */
    pthread_mutex_lock(&b->lock);
    close(fd);
    b->fds[index] = -1;
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

static void *backend_accept(void *arg)
{
    struct backend *b = arg;
    while (!atomic_load(&b->stopping)) {
        struct pollfd p = {.fd = b->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 10) != 1)
            continue;
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd == -1)
            continue;
        atomic_fetch_add(&b->accepted, 1);
        pthread_mutex_lock(&b->lock);
        if (b->conn_count == MAX_CONNS) {
            pthread_mutex_unlock(&b->lock);
            close(fd);
            continue;
        }
        atomic_fetch_add(&b->open, 1);
        size_t index = b->conn_count++;
        b->fds[index] = fd;
        struct conn_arg *ca = xcalloc(1, sizeof(*ca));
        *ca = (struct conn_arg){b, index};
        if (pthread_create(&b->threads[index], NULL, backend_conn, ca) != 0)
            abort();
        pthread_mutex_unlock(&b->lock);
    }
    return NULL;
}

/* A backend on `fd`, a socket test_reserve_port() bound to `port`. */
static struct backend *backend_start_on(const struct step *steps, size_t count, int fd, int port)
{
    struct backend *b = xcalloc(1, sizeof(*b));
    b->steps = steps;
    b->step_count = count;
    pthread_mutex_init(&b->lock, NULL);
    b->listen_fd = fd;
    b->port = port;
    ck_assert_int_eq(listen(b->listen_fd, 64), 0);
    ck_assert_int_eq(pthread_create(&b->acceptor, NULL, backend_accept, b), 0);
    return b;
}

static struct backend *backend_start(const struct step *steps, size_t count)
{
    int port;
    int fd = test_reserve_port(&port);
    return backend_start_on(steps, count, fd, port);
}

/* Stops every thread, closes every connection, frees. */
static void backend_stop(struct backend *b)
{
    atomic_store(&b->stopping, true);
    pthread_join(b->acceptor, NULL);
    for (size_t i = 0; i < b->conn_count; i++) {
        pthread_mutex_lock(&b->lock);
        if (b->fds[i] != -1)
            shutdown(b->fds[i], SHUT_RDWR);
        pthread_mutex_unlock(&b->lock);
        pthread_join(b->threads[i], NULL);
    }
    close(b->listen_fd);
    for (size_t i = 0; i < b->seen_count; i++)
        free(b->seen[i]);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* The request head the backend received whose request line names `path`,
 * or NULL. */
static const char *backend_seen(struct backend *b, const char *path)
{
    const char *found = NULL;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->seen_count && found == NULL; i++) {
        const char *line_end = strstr(b->seen[i], "\r\n");
        const char *hit = strstr(b->seen[i], path);
        if (hit != NULL && line_end != NULL && hit < line_end)
            found = b->seen[i];
    }
    pthread_mutex_unlock(&b->lock);
    return found;
}

/* ------------------------------------------------------------ client */

struct response {
    int status; /* 0: no head arrived */
    int end;    /* 0: complete; -ECONNRESET; -EPIPE: EOF before the end; -ETIMEDOUT */
    bool close; /* the head says Connection: close */
    char head[4096];
    char body[4096];
    size_t body_len;
};

struct reader {
    int fd;
    char buf[16384];
    size_t have, pos;
};

/* Fills more bytes; returns 0 or the struct response end code. */
static int reader_fill(struct reader *r)
{
    if (r->pos == r->have)
        r->pos = r->have = 0;
    if (r->have == sizeof(r->buf))
        return -ENOBUFS;
    ssize_t n = recv(r->fd, r->buf + r->have, sizeof(r->buf) - r->have, 0);
    if (n > 0) {
        r->have += (size_t)n;
        return 0;
    }
    if (n == 0)
        return -EPIPE;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return -ETIMEDOUT;
    return -errno;
}

static int reader_body(struct reader *r, struct response *resp, size_t len)
{
    while (len > 0) {
        if (r->pos == r->have) {
            int err = reader_fill(r);
            if (err != 0)
                return err;
        }
        size_t n = r->have - r->pos < len ? r->have - r->pos : len;
        size_t room = sizeof(resp->body) - 1 - resp->body_len;
        memcpy(resp->body + resp->body_len, r->buf + r->pos, n < room ? n : room);
        resp->body_len += n < room ? n : room;
        r->pos += n;
        len -= n;
    }
    return 0;
}

/* A line (without CRLF) into `line`. */
static int reader_line(struct reader *r, char *line, size_t size)
{
    for (;;) {
        char *lf = memchr(r->buf + r->pos, '\n', r->have - r->pos);
        if (lf != NULL) {
            size_t n = (size_t)(lf - (r->buf + r->pos));
            snprintf(line, size, "%.*s", (int)(n > 0 ? n - 1 : 0), r->buf + r->pos);
            r->pos += n + 1;
            return 0;
        }
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->have - r->pos);
            r->have -= r->pos;
            r->pos = 0;
        }
        int err = reader_fill(r);
        if (err != 0)
            return err;
    }
}

/* Reads one response (interim ones skipped) from `fd`. */
static void read_response(int fd, bool head_request, struct response *resp)
{
    memset(resp, 0, sizeof(*resp));
    struct reader *r = xcalloc(1, sizeof(*r));
    r->fd = fd;
    char *end;
    for (;;) {
        r->buf[r->have] = '\0';
        while ((end = strstr(r->buf, "\r\n\r\n")) == NULL) {
            int err = r->have < sizeof(r->buf) - 1 ? reader_fill(r) : -ENOBUFS;
            if (err != 0) {
                resp->end = err;
                free(r);
                return;
            }
            r->buf[r->have] = '\0';
        }
        int status = atoi(r->buf + 9);
        if (status >= 200 || status == 101)
            break;
        size_t len = (size_t)(end + 4 - r->buf); /* an interim response */
        memmove(r->buf, end + 4, r->have - len);
        r->have -= len;
    }
    size_t head_len = (size_t)(end + 4 - r->buf);
    snprintf(resp->head, sizeof(resp->head), "%.*s", (int)head_len, r->buf);
    resp->status = atoi(r->buf + 9);
    resp->close = strcasestr(resp->head, "\r\nconnection: close") != NULL;
    r->pos = head_len;
    const char *cl = strcasestr(resp->head, "\r\ncontent-length:");
    bool chunked = strcasestr(resp->head, "\r\ntransfer-encoding:") != NULL;
    if (head_request || resp->status == 204 || resp->status == 304) {
        resp->end = 0;
    } else if (chunked) {
        for (;;) {
            char line[128];
            int err = reader_line(r, line, sizeof(line));
            if (err != 0) {
                resp->end = err;
                break;
            }
            size_t size = strtoul(line, NULL, 16);
            if (size == 0) {
                err = reader_line(r, line, sizeof(line)); /* no trailers from corral */
                resp->end = err;
                break;
            }
            err = reader_body(r, resp, size);
            if (err == 0)
                err = reader_line(r, line, sizeof(line));
            if (err != 0) {
                resp->end = err;
                break;
            }
        }
    } else if (cl != NULL) {
        resp->end = reader_body(r, resp, strtoul(cl + 17, NULL, 10));
    } else {
        int err = reader_body(r, resp, SIZE_MAX);
        resp->end = err == -EPIPE ? 0 : err;
    }
    resp->body[resp->body_len] = '\0';
    free(r);
}

static void send_request(int fd, const char *method, const char *path, const char *extra)
{
    char req[1024];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: hostile.test\r\n%s\r\n", method,
                     path, extra);
    test_send_all(fd, req, (size_t)n);
}

/* ------------------------------------------------------------ daemon */

/* One worker, so every request meets the same pool; a 1 s read timeout so
 * that a silent backend costs the case little. */
static void start_daemon(struct test_daemon *d, const struct backend *b, const char *drain,
                         const char *server_params, const char *upstream_extra)
{
    test_daemon_init(d, "corral");
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout %s;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app {\n    server 127.0.0.1:%d %s;\n%s\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    proxy_read_timeout 1s;\n"
             "    location / {\n        proxy_pass http://app;\n    }\n}\n",
             drain, b->port, server_params, upstream_extra);
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* A GET on a new connection, expected to give 200 "ok PATH". */
static void expect_clean_exchange(const struct test_daemon *d, const char *path)
{
    int fd = test_connect(d->port);
    send_request(fd, "GET", path, "");
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    char want[128];
    snprintf(want, sizeof(want), "ok %s", path);
    ck_assert_msg(resp.status == 200 && resp.end == 0 && strcmp(resp.body, want) == 0,
                  "%s: status %d end %d body \"%s\"", path, resp.status, resp.end, resp.body);
}

/* ------------------------------------------------------- the hostile table */

#define EXPECT_RESET (-1) /* the head arrived, then an RST */

struct hostile {
    const char *name;
    struct step step;
    const char *method; /* NULL: GET */
    int expect;         /* the status the client gets, or EXPECT_RESET */
    const char *body;   /* for a status: the body expected, or NULL */
    unsigned pause_ms;  /* before the next request (let late bytes arrive) */
};

#define OK_HEAD  "HTTP/1.1 200 OK\r\n"
#define SMUGGLED "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"

static char big_reason[100 * 1024 + 64];
static char header_bomb[300 * 16 + 64];
static char long_header[12 * 1024];
static char endless_head[20 * 1024];
static char interim_storm[40 * 32 + 64];
static char nul_reply[] = OK_HEAD "X-A: a\0b\r\nContent-Length: 2\r\n\r\nok";

static void hostile_init(void)
{
    int n = snprintf(big_reason, sizeof(big_reason), "HTTP/1.1 200 ");
    memset(big_reason + n, 'r', 100 * 1024);
    strcpy(big_reason + n + 100 * 1024, "\r\nContent-Length: 2\r\n\r\nok");

    n = snprintf(header_bomb, sizeof(header_bomb), OK_HEAD);
    for (int i = 0; i < 300; i++)
        n += snprintf(header_bomb + n, sizeof(header_bomb) - (size_t)n, "X-%03d: v\r\n", i);
    snprintf(header_bomb + n, sizeof(header_bomb) - (size_t)n, "Content-Length: 2\r\n\r\nok");

    n = snprintf(long_header, sizeof(long_header), OK_HEAD "X-Long: ");
    memset(long_header + n, 'v', 10 * 1024);
    strcpy(long_header + n + 10 * 1024, "\r\nContent-Length: 2\r\n\r\nok");

    n = snprintf(endless_head, sizeof(endless_head), OK_HEAD);
    while (n < 20 * 1024 - 32)
        n += snprintf(endless_head + n, sizeof(endless_head) - (size_t)n, "X-More: vvvvvvvv\r\n");

    n = 0;
    for (int i = 0; i < 40; i++)
        n += snprintf(interim_storm + n, sizeof(interim_storm) - (size_t)n,
                      "HTTP/1.1 100 Continue\r\n\r\n");
    snprintf(interim_storm + n, sizeof(interim_storm) - (size_t)n,
             OK_HEAD "Content-Length: 2\r\n\r\nok");
}

/* clang-format off */
#define GIVES(what, text) .step = {.reply = (text)}, .expect = (what)
#define THEN(what, text, how) .step = {.reply = (text), .after = (how)}, .expect = (what)
static const struct hostile hostile_cases[] = {
    /* Status lines. */
    {"status 99", GIVES(502, "HTTP/1.1 99 Low\r\nContent-Length: 0\r\n\r\n")},
    {"status 600", GIVES(502, "HTTP/1.1 600 High\r\nContent-Length: 0\r\n\r\n")},
    {"status of 4 digits", GIVES(502, "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n")},
    {"HTTP/2.0", GIVES(502, "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok")},
    {"not HTTP", GIVES(502, "ICY 200 OK\r\nContent-Length: 2\r\n\r\nok")},
    {"two spaces", GIVES(502, "HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok")},
    {"control in reason", GIVES(502, "HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok")},
    {"100 KB reason", GIVES(502, big_reason)},
    {"no reason is fine", GIVES(200, "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok"), .body = "ok"},
    /* Framing. */
    {"CL and TE", GIVES(502, OK_HEAD "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "2\r\nok\r\n0\r\n\r\n")},
    {"two Content-Lengths",
     GIVES(502, OK_HEAD "Content-Length: 2\r\nContent-Length: 8\r\n\r\noksmuggle")},
    {"Content-Length list", GIVES(502, OK_HEAD "Content-Length: 2, 8\r\n\r\noksmuggle")},
    {"negative Content-Length", GIVES(502, OK_HEAD "Content-Length: -1\r\n\r\nok")},
    {"Content-Length overflow",
     GIVES(502, OK_HEAD "Content-Length: 99999999999999999999999\r\n\r\nok")},
    /* Header sections. */
    {"300 headers", GIVES(502, header_bomb)},
    {"10 KB header", GIVES(502, long_header)},
    {"head without end", THEN(502, endless_head, STALL)},
    {"obs-fold", GIVES(502, OK_HEAD "X-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok")},
    {"bare LF", GIVES(502, "HTTP/1.1 200 OK\nContent-Length: 2\n\nok")},
    {"bare CR", GIVES(502, OK_HEAD "X-A: a\rb\r\nContent-Length: 2\r\n\r\nok")},
    {"CR before a CRLF", GIVES(502, OK_HEAD "X-A: a\r\r\nContent-Length: 2\r\n\r\nok")},
    {"bare LF between CRLFs",
     GIVES(502, OK_HEAD "X-A: a\nX-B: b\r\nContent-Length: 2\r\n\r\nok")},
    {"head ending in LF CRLF", GIVES(502, OK_HEAD "Content-Length: 2\n\r\nok")},
    {"obs-fold with a tab", GIVES(502, OK_HEAD "X-A: a\r\n\tb\r\nContent-Length: 2\r\n\r\nok")},
    /* After the head's end, a space or a line end is body, not a fold. */
    {"body starting with a space",
     GIVES(200, OK_HEAD "Content-Length: 3\r\n\r\n ok"), .body = " ok"},
    {"body starting with a CRLF",
     GIVES(200, OK_HEAD "Content-Length: 4\r\n\r\n\r\nok"), .body = "\r\nok"},
    {"NUL in a value", .step = {.reply = nul_reply, .reply_len = sizeof(nul_reply) - 1},
     .expect = 502},
    {"space before colon", GIVES(502, OK_HEAD "Content-Length : 2\r\n\r\nok")},
    {"space in a name", GIVES(502, OK_HEAD "X A: b\r\nContent-Length: 2\r\n\r\nok")},
    /* Chunks in the first read: nothing has reached the client yet. */
    {"chunk size overflow", GIVES(502, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n"
                                       "FFFFFFFFFFFFFFFFF1\r\nok\r\n0\r\n\r\n")},
    {"chunk size not hex",
     GIVES(502, OK_HEAD "Transfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n")},
    {"chunk extension with a control",
     GIVES(502, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n2;\x01\r\nok\r\n0\r\n\r\n")},
    {"chunk without its CRLF",
     GIVES(502, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n")},
    /* A bad chunk after the head went out: the client is reset. */
    {"bad chunk in a later read",
     .step = {.reply = OK_HEAD "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n",
              .late = "zz\r\n", .late_ms = 300},
     .expect = EXPECT_RESET},
    /* Closes and resets at every point. */
    {"close before the head", THEN(502, "", CLOSE)},
    {"reset before the head", THEN(502, "", RESET)},
    {"close mid-status-line", THEN(502, "HTTP/1.1 20", CLOSE)},
    {"close mid-head", THEN(502, OK_HEAD "Content-Le", CLOSE)},
    {"reset mid-head", THEN(502, OK_HEAD "Content-Le", RESET)},
    {"close mid-body", THEN(EXPECT_RESET, OK_HEAD "Content-Length: 10\r\n\r\nhalf", CLOSE)},
    {"reset mid-body", THEN(EXPECT_RESET, OK_HEAD "Content-Length: 10\r\n\r\nhalf", RESET)},
    {"close mid-chunk",
     THEN(EXPECT_RESET, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n5\r\nab", CLOSE)},
    {"close before the last chunk",
     THEN(EXPECT_RESET, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", CLOSE)},
    /* Silence. */
    {"no answer", THEN(504, "", STALL)},
    {"half a head, then silence", THEN(504, OK_HEAD "Content-Le", STALL)},
    {"half a body, then silence",
     THEN(EXPECT_RESET, OK_HEAD "Content-Length: 10\r\n\r\nhalf", STALL)},
    /* Interim responses. */
    {"1xx storm", GIVES(502, interim_storm)},
    {"a few 1xx", GIVES(200, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                             "HTTP/1.1 100 Continue\r\n\r\n" OK_HEAD "Content-Length: 2\r\n\r\nok"),
     .body = "ok"},
    {"unrequested 101", GIVES(502, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                   "Connection: upgrade\r\n\r\n" SMUGGLED)},
    /* Bodies where there must be none, and bytes beyond the response. */
    {"204 with a body", GIVES(204, "HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\nsmuggled"),
     .body = ""},
    {"304 with a body",
     GIVES(304, "HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\nsmuggled"), .body = ""},
    {"204 followed by a response", GIVES(204, "HTTP/1.1 204 No Content\r\n\r\n" SMUGGLED),
     .body = ""},
    {"HEAD answered with a body", GIVES(200, OK_HEAD "Content-Length: 8\r\n\r\nsmuggled"),
     .method = "HEAD", .body = ""},
    {"a second response in the same read",
     GIVES(200, OK_HEAD "Content-Length: 2\r\n\r\nok" SMUGGLED), .body = "ok"},
    {"a second response later",
     .step = {.reply = OK_HEAD "Content-Length: 2\r\n\r\nok", .late = SMUGGLED, .late_ms = 50},
     .expect = 200, .body = "ok", .pause_ms = 300},
    {"bytes after the last chunk",
     GIVES(200, OK_HEAD "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" SMUGGLED),
     .body = "ok"},
    {"a response before the request",
     .step = {.reply = OK_HEAD "Content-Length: 2\r\n\r\nok", .late = SMUGGLED, .early = true},
     .expect = 200, .body = "ok", .pause_ms = 300},
};
/* clang-format on */

/* The table's rows go through one daemon HOSTILE_ROWS at a time (a daemon
 * per row cost most of this program's time).  Each row has an upstream and
 * a backend of its own, its location /rN/ (N: the row), so that no row
 * meets another's pool or script; the backends listen one at a time, each
 * while its row runs. */
#define HOSTILE_ROWS 10

static int hostile_slices(void)
{
    return (COUNT(hostile_cases) + HOSTILE_ROWS - 1) / HOSTILE_ROWS;
}

/* One row against the daemon `d`, its backend `b` behind location /rN/. */
static void hostile_row(const struct test_daemon *d, int row, struct backend *b)
{
    const struct hostile *h = &hostile_cases[row];
    char first[32], second[32], third[32];
    snprintf(first, sizeof(first), "/r%d/first", row);
    snprintf(second, sizeof(second), "/r%d/second", row);
    snprintf(third, sizeof(third), "/r%d/third", row);

    const char *method = h->method != NULL ? h->method : "GET";
    int fd = test_connect(d->port);
    send_request(fd, method, first, "");
    struct response resp;
    read_response(fd, strcmp(method, "HEAD") == 0, &resp);
    if (h->expect == EXPECT_RESET) {
        ck_assert_msg(resp.status == 200 && resp.end == -ECONNRESET,
                      "%s: want the head then a reset, got status %d end %d (%s)", h->name,
                      resp.status, resp.end, strerror(-resp.end));
    } else {
        ck_assert_msg(resp.status == h->expect && resp.end == 0,
                      "%s: want %d, got status %d end %d\n%s", h->name, h->expect, resp.status,
                      resp.end, resp.head);
        if (h->body != NULL)
            ck_assert_msg(strcmp(resp.body, h->body) == 0, "%s: body \"%s\"", h->name, resp.body);
    }
    if (h->pause_ms > 0)
        usleep(h->pause_ms * 1000);

    /* The next exchange, on the same connection when it is still open,
     * gets its own response, and the backend sees a clean request. */
    if (resp.end != 0 || resp.close) {
        close(fd);
        fd = test_connect(d->port);
    }
    send_request(fd, "GET", second, "");
    read_response(fd, false, &resp);
    close(fd);
    char want[64], line[64];
    snprintf(want, sizeof(want), "ok %s", second);
    snprintf(line, sizeof(line), "GET %s HTTP/1.1\r\n", second);
    ck_assert_msg(resp.status == 200 && resp.end == 0 && strcmp(resp.body, want) == 0,
                  "%s: the next request got status %d end %d body \"%s\"", h->name, resp.status,
                  resp.end, resp.body);
    const char *seen = backend_seen(b, second);
    ck_assert_msg(seen != NULL && strncmp(seen, line, strlen(line)) == 0,
                  "%s: the backend saw \"%s\"", h->name, seen != NULL ? seen : "(nothing)");
    expect_clean_exchange(d, third);
}

START_TEST(hostile_upstream_is_contained)
{
    int from = _i * HOSTILE_ROWS;
    int to =
        from + HOSTILE_ROWS < COUNT(hostile_cases) ? from + HOSTILE_ROWS : COUNT(hostile_cases);
    int fds[HOSTILE_ROWS], ports[HOSTILE_ROWS];
    /* Timeouts would mark a row's only server down (as they should): not
     * what is tested here. */
    char conf[16384];
    int n = snprintf(conf, sizeof(conf),
                     "workers 1;\ndrain_timeout 1s;\nadmin { listen 127.0.0.2:0; }\n");
    for (int row = from; row < to; row++) {
        fds[row - from] = test_reserve_port(&ports[row - from]);
        n += snprintf(conf + n, sizeof(conf) - (size_t)n,
                      "upstream r%d {\n    server 127.0.0.1:%d max_fails=0;\n    keepalive 4;\n}\n",
                      row, ports[row - from]);
    }
    n += snprintf(conf + n, sizeof(conf) - (size_t)n,
                  "server {\n    listen 127.0.0.1:0;\n    proxy_read_timeout 1s;\n");
    for (int row = from; row < to; row++)
        n += snprintf(conf + n, sizeof(conf) - (size_t)n,
                      "    location /r%d/ {\n        proxy_pass http://r%d;\n    }\n", row, row);
    n += snprintf(conf + n, sizeof(conf) - (size_t)n, "}\n");
    ck_assert_int_lt(n, (int)sizeof(conf));
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    for (int row = from; row < to; row++) {
        struct backend *b =
            backend_start_on(&hostile_cases[row].step, 1, fds[row - from], ports[row - from]);
        hostile_row(&d, row, b);
        backend_stop(b);
    }
    test_daemon_stop(&d);
}
END_TEST

/* "Connection: close, Host" must not strip Host (nor the framing of the
 * request) on the way to the backend. */
START_TEST(connection_listing_cannot_strip_end_to_end_headers)
{
    struct backend *b = backend_start(NULL, 0);
    struct test_daemon d;
    start_daemon(&d, b, "1s", "", "");
    int fd = test_connect(d.port);
    const char req[] = "POST /listed HTTP/1.1\r\nHost: hostile.test\r\n"
                       "Connection: close, Host, Content-Length, Cache-Control\r\n"
                       "Cache-Control: no-cache\r\nContent-Length: 2\r\n\r\nhi";
    test_send_all(fd, req, sizeof(req) - 1);
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 200 && strcmp(resp.body, "ok /listed") == 0, "status %d body %s",
                  resp.status, resp.body);
    const char *seen = backend_seen(b, "/listed");
    ck_assert_ptr_nonnull(seen);
    ck_assert_msg(strcasestr(seen, "\r\nHost: hostile.test\r\n") != NULL, "no Host:\n%s", seen);
    ck_assert_msg(strcasestr(seen, "\r\nContent-Length: 2\r\n") != NULL, "no length:\n%s", seen);
    ck_assert_msg(strcasestr(seen, "\r\nCache-Control: no-cache\r\n") != NULL, "no C-C:\n%s", seen);
    test_daemon_stop(&d);
    backend_stop(b);
}
END_TEST

/* ------------------------------------------------------- stop and reload */

/* After a SIGTERM sent at `start`: the daemon exits cleanly well before its
 * 20 s drain timeout, its last request being done. */
static void check_stop_is_prompt(struct test_daemon *d, uint64_t start)
{
    int status = test_wait_exit(d->pid, 8000);
    uint64_t took = test_now_ms() - start;
    d->pid = -1;
    ck_assert_msg(status == 0, "exit status %d after %llu ms", status, (unsigned long long)took);
    ck_assert_msg(took < 6000, "the stop took %llu ms", (unsigned long long)took);
}

/* A graceful stop with one slow request in flight ends when that request
 * does, not at the drain timeout: its upstream connection is closed, not
 * pooled. */
START_TEST(graceful_stop_ends_with_the_last_request)
{
    static const struct step slow[] = {
        {.reply = OK_HEAD "Content-Length: 4\r\n\r\nslow", .delay_ms = 400}};
    struct backend *b = backend_start(slow, 1);
    struct test_daemon d;
    start_daemon(&d, b, "20s", "", "    keepalive 8;");
    int fd = test_connect(d.port);
    send_request(fd, "GET", "/slow", "");
    test_wait_for(backend_seen(b, "/slow") != NULL, 2000, "/slow did not reach the backend");
    uint64_t start = test_now_ms();
    kill(d.pid, SIGTERM);
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 200 && strcmp(resp.body, "slow") == 0, "status %d", resp.status);
    /* 0.4 s of request (within the 1 s read timeout); the drain timeout is 20 s. */
    check_stop_is_prompt(&d, start);
    backend_stop(b);
}
END_TEST

/* The bytes sent on the loopback client socket `fd` that the other end
 * has not read yet (its receive queue in /proc/net/tcp), or -1 if that end
 * is not there. */
static long peer_unread(int fd, int server_port)
{
    struct sockaddr_in self;
    socklen_t len = sizeof(self);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&self, &len), 0);
    FILE *table = fopen("/proc/net/tcp", "re");
    ck_assert_ptr_nonnull(table);
    char line[512];
    long unread = -1;
    while (unread < 0 && fgets(line, sizeof(line), table) != NULL) {
        unsigned local_port, remote_port;
        unsigned long queued;
        if (sscanf(line, " %*u: %*x:%x %*x:%x %*x %*x:%lx", &local_port, &remote_port, &queued) ==
                3 &&
            (int)local_port == server_port && remote_port == ntohs(self.sin_port))
            unread = (long)queued;
    }
    fclose(table);
    return unread;
}

/* A request whose head completes after the stop began opens the worker's
 * first upstream connection during the drain: that one is not pooled
 * either. */
START_TEST(graceful_stop_does_not_pool_a_connection_opened_while_draining)
{
    static const struct step quick[] = {
        {.reply = OK_HEAD "Content-Length: 4\r\n\r\nlate", .after = STALL}};
    struct backend *b = backend_start(quick, 1);
    struct test_daemon d;
    /* start_daemon()'s 1 s read timeout would end the pooled connection
     * soon enough to hide a wait for it. */
    test_daemon_init(&d, "corral");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout 20s;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app { server 127.0.0.1:%d; keepalive 8; }\n"
             "server { listen 127.0.0.1:0; location / { proxy_pass http://app; } }\n",
             b->port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    int fd = test_connect(d.port);
    test_send_all(fd, "GET /late HTTP/1.1\r\nHost: hostile.test\r\n", 40);
    /* The head is partly in when the stop begins. */
    test_wait_for(peer_unread(fd, d.port) == 0, TEST_WAIT_MS, "the daemon has not read %ld bytes",
                  peer_unread(fd, d.port));
    uint64_t start = test_now_ms();
    kill(d.pid, SIGTERM);
    /* The stop has begun once no worker listens any more. */
    test_wait_for(test_listen_sockets("127.0.0.1", d.port) == 0, TEST_WAIT_MS,
                  "still listening after SIGTERM");
    test_send_all(fd, "\r\n", 2);
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 200 && strcmp(resp.body, "late") == 0, "status %d", resp.status);
    check_stop_is_prompt(&d, start);
    backend_stop(b);
}
END_TEST

/* A 101 must say what it switches to (RFC 9110 15.2.2).  Without Upgrade,
 * llhttp does not take it for a switch and would parse the backend's
 * tunnel bytes as HTTP: a second response could follow the first. */
START_TEST(switch_without_upgrade_header_gives_502)
{
    static struct step steps[] = {{.reply =
                                       "HTTP/1.1 101 Switching\r\n\r\n"
                                       "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                       "Connection: Upgrade\r\n\r\n" SMUGGLED}};
    struct backend *b = backend_start(steps, 1);
    struct test_daemon d;
    start_daemon(&d, b, "2s", "", "");
    int fd = test_connect(d.port);
    send_request(fd, "GET", "/ws", "Connection: Upgrade\r\nUpgrade: websocket\r\n");
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 502, "status %d", resp.status);
    ck_assert_ptr_null(strstr(resp.body, "smuggled"));
    test_daemon_stop(&d);
    backend_stop(b);
}
END_TEST

/* proxy_buffer_size raises the bound on a response head: the 10 KB header
 * that the default 8k refuses passes under 16k. */
START_TEST(proxy_buffer_size_bounds_the_response_head)
{
    static struct step steps[] = {{.reply = long_header}};
    struct backend *b = backend_start(steps, 1);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app { server 127.0.0.1:%d; }\n"
             "server { listen 127.0.0.1:0;\n"
             "    location / { proxy_buffer_size 16k; proxy_pass http://app; } }\n",
             b->port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    int fd = test_connect(d.port);
    send_request(fd, "GET", "/long", "");
    struct response resp;
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 200 && strcmp(resp.body, "ok") == 0, "status %d", resp.status);
    test_daemon_stop(&d);
    backend_stop(b);
}
END_TEST

static int generations_running(const struct test_daemon *d)
{
    char body[4096];
    if (test_daemon_admin_get(d, "/status", body, sizeof(body)) != 200)
        return -1;
    const char *p = strstr(body, "\"generations_running\": ");
    return p != NULL ? atoi(p + strlen("\"generations_running\": ")) : -1;
}

/* Reloads while a request is in flight: each old generation ends with its
 * request instead of holding a pooled upstream connection for its drain
 * timeout. */
START_TEST(reloads_leave_no_generation_behind)
{
    enum { RELOADS = 20 };
    static struct step slow[RELOADS];
    for (int i = 0; i < RELOADS; i++)
        slow[i] = (struct step){.reply = OK_HEAD "Content-Length: 4\r\n\r\nslow", .delay_ms = 150};
    struct backend *b = backend_start(slow, RELOADS);
    struct test_daemon d;
    start_daemon(&d, b, "20s", "", "    keepalive 8;");
    for (int i = 0; i < RELOADS; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/r%d", i);
        int fd = test_connect(d.port);
        send_request(fd, "GET", path, "");
        for (int j = 0; j < 200 && backend_seen(b, path) == NULL; j++)
            usleep(5000);
        kill(d.pid, SIGHUP);
        struct response resp;
        read_response(fd, false, &resp);
        close(fd);
        ck_assert_msg(resp.status == 200, "%s: status %d", path, resp.status);
        /* The next connection must reach the new generation: wait until
         * the old one has been told to stop accepting (the reload logs
         * that once the new one listens). */
        char draining[64];
        snprintf(draining, sizeof(draining), "generation %d: draining", i + 1);
        free(test_daemon_wait_log(&d, draining));
    }
    /* The old generations are gone, and with them every backend
     * connection: the newest generation has not proxied anything yet. */
    int running = -1;
    for (int i = 0; i < 500; i++) {
        running = generations_running(&d);
        if (running == 1 && atomic_load(&b->open) == 0)
            break;
        usleep(10000);
    }
    ck_assert_msg(running == 1, "%d generations still running", running);
    ck_assert_msg(atomic_load(&b->open) == 0, "%d backend connections still open",
                  atomic_load(&b->open));
    expect_clean_exchange(&d, "/after");
    test_daemon_stop(&d);
    backend_stop(b);
}
END_TEST

/* ---------------------------------------------------- local resource limits */

/* How many of `pid`'s descriptors are numbered below `below`. */
static int open_fds(pid_t pid, int below)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    int count = 0;
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        if (e->d_name[0] != '.' && atoi(e->d_name) < below)
            count++;
    closedir(dir);
    return count;
}

/* The daemon runs out of descriptors: proxied requests get 503 meanwhile,
 * and once descriptors are free again the backend, which did nothing wrong,
 * is not marked down. */
START_TEST(running_out_of_descriptors_does_not_mark_the_backend_down)
{
    struct backend *b = backend_start(NULL, 0);
    struct test_daemon d;
    start_daemon(&d, b, "1s", "max_fails=1 fail_timeout=30s", "    keepalive 0;");
    int fd = test_connect(d.port);
    send_request(fd, "GET", "/before", "");
    struct response resp;
    read_response(fd, false, &resp);
    ck_assert_int_eq(resp.status, 200);

    /* Lower the daemon's limit to what it holds, then fill whatever gaps
     * the numbering has with idle client connections it accepts. */
    int held = open_fds(d.pid, INT_MAX);
    ck_assert_int_gt(held, 0);
    struct rlimit saved;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &saved), 0);
    struct rlimit limit = {.rlim_cur = (rlim_t)held, .rlim_max = saved.rlim_max};
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &limit, NULL), 0);
    enum { IDLE = 64 };
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        idle[i] = test_connect(d.port);
    int below = 0;
    for (int i = 0; i < 300 && (below = open_fds(d.pid, held)) < held; i++)
        usleep(10000);
    ck_assert_msg(below == held, "the daemon holds %d of %d descriptors", below, held);

    send_request(fd, "GET", "/starved", "");
    read_response(fd, false, &resp);
    close(fd);
    ck_assert_msg(resp.status == 503, "out of descriptors: status %d", resp.status);

    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    /* Give the descriptors back. Closing the idle clients alone is not
     * enough where the numbering had no gaps to fill: then the only slot
     * freed is the starved client's, and a proxied exchange needs two. */
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &saved, NULL), 0);
    int status = 0;
    char body[256];
    for (int i = 0; i < 100; i++) {
        status = test_daemon_http_try_get("127.0.0.1", d.port, "/after", body, sizeof(body));
        if (status == 200)
            break;
        usleep(20000);
    }
    ck_assert_msg(status == 200 && strcmp(body, "ok /after") == 0, "afterwards: %d \"%s\"", status,
                  body);
    char *log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "Too many open files") != NULL, "not logged:\n%s", log);
    free(log);
    test_daemon_stop(&d);
    backend_stop(b);
}
END_TEST

Suite *test_suite(void)
{
    hostile_init();
    Suite *suite = suite_create("proto/hostile_upstream");
    TCase *tc = test_daemon_case(suite, "responses", 20);
    tcase_add_loop_test(tc, hostile_upstream_is_contained, 0, hostile_slices());
    tcase_add_test(tc, connection_listing_cannot_strip_end_to_end_headers);
    tcase_add_test(tc, proxy_buffer_size_bounds_the_response_head);
    tcase_add_test(tc, switch_without_upgrade_header_gives_502);
    tc = test_daemon_case(suite, "drain", 40);
    tcase_add_test(tc, graceful_stop_ends_with_the_last_request);
    tcase_add_test(tc, graceful_stop_does_not_pool_a_connection_opened_while_draining);
    tcase_add_test(tc, reloads_leave_no_generation_behind);
    tc = test_daemon_case(suite, "resources", 20);
    tcase_add_test(tc, running_out_of_descriptors_does_not_mark_the_backend_down);
    return suite;
}
