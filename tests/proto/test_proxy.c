/*
 * test_proxy.c: the reverse proxy as a user runs it: build/corral with a
 * temporary config, in front of a small threaded HTTP/1.1 backend written
 * here that records every byte it receives.  Conformance (keep-alive on both
 * sides, pipelining, chunked and close-delimited bodies, HEAD, 1xx/204/304,
 * 100-continue, large bodies in bounded memory), header rewriting, tunnels,
 * upstream failures and retries, stop and reload with pooled connections,
 * balancing, passive health, and a table of malformed requests that must be
 * refused without reaching the backend.  The daemon is the binary next to
 * this test's build directory (build/corral, build/asan/corral), run through
 * tests/daemon.h: a failing case that ends early leaves neither it nor its
 * directory behind.  Cases that need nothing of the daemon but its
 * proxying share one per test case group (shared_start()).
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))
#define MB           (1024u * 1024u)

/* ------------------------------------------------------------ bodies */

#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME  1099511628211ull

static void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count, size);
    if (p == NULL)
        abort(); /* also from backend threads, where ck_assert is no help */
    return p;
}

/* What arrived of a body: its length, an FNV-1a hash of every byte, and
 * the first `keep` bytes (NUL-terminated). */
struct body {
    uint64_t len, hash;
    bool hashed;
    char *data;
    size_t keep;
};

static void body_init(struct body *b, size_t keep, bool hashed)
{
    *b = (struct body){.hash = FNV_OFFSET, .hashed = hashed, .keep = keep};
    b->data = xcalloc(1, keep + 1);
}

static void body_free(struct body *b)
{
    free(b->data);
    b->data = NULL;
}

static uint64_t hash_add(uint64_t hash, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++)
        hash = (hash ^ (uint8_t)data[i]) * FNV_PRIME;
    return hash;
}

static void body_add(struct body *b, const char *data, size_t len)
{
    if (b->hashed)
        b->hash = hash_add(b->hash, data, len);
    if (b->len < b->keep) {
        size_t n = len < b->keep - b->len ? len : (size_t)(b->keep - b->len);
        memcpy(b->data + b->len, data, n);
    }
    b->len += len;
}

/* Large bodies are a position-dependent pattern (period 251, prime to every
 * buffer size), so a lost, repeated or shifted piece changes the hash. */
#define PATTERN_SPAN 65536
static char pattern[251 + PATTERN_SPAN];

static void pattern_init(void)
{
    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (char)(i % 251);
}

static const char *pattern_at(uint64_t offset)
{
    return &pattern[offset % 251];
}

static uint64_t pattern_hash(uint64_t len)
{
    uint64_t hash = FNV_OFFSET;
    for (uint64_t off = 0; off < len; off += PATTERN_SPAN)
        hash = hash_add(hash, pattern_at(off),
                        len - off < PATTERN_SPAN ? (size_t)(len - off) : PATTERN_SPAN);
    return hash;
}

/* ------------------------------------------------------------ sockets */

/* Sends everything; false when the peer is gone (no test failure: some
 * cases expect the daemon to close while a request is still going out). */
static bool send_quiet(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool send_str_quiet(int fd, const char *text)
{
    return send_quiet(fd, text, strlen(text));
}

/* Sends a string; fails the test on error. */
static void send_str(int fd, const char *text)
{
    test_send_all(fd, text, strlen(text));
}

static bool send_pattern(int fd, uint64_t len)
{
    for (uint64_t off = 0; off < len; off += PATTERN_SPAN) {
        size_t n = len - off < PATTERN_SPAN ? (size_t)(len - off) : PATTERN_SPAN;
        if (!send_quiet(fd, pattern_at(off), n))
            return false;
    }
    return true;
}

/* Buffered input from one socket, for both the backend and the clients. */
struct reader {
    int fd;
    atomic_ullong *counter; /* raw bytes received, or NULL */
    size_t start, end;
    char buf[1 << 16];
};

/* Reads more: > 0 bytes added, 0 at EOF, -1 on error or timeout. */
static ssize_t reader_fill(struct reader *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end == sizeof(r->buf))
        return -1;
    ssize_t n;
    do
        n = recv(r->fd, r->buf + r->end, sizeof(r->buf) - r->end, 0);
    while (n == -1 && errno == EINTR);
    if (n > 0) {
        r->end += (size_t)n;
        if (r->counter != NULL)
            atomic_fetch_add(r->counter, (unsigned long long)n);
    }
    return n;
}

/* Takes everything up to and including `delim` into `out`; false at EOF,
 * on error, or when it would not fit. */
static bool reader_until(struct reader *r, const char *delim, char *out, size_t size)
{
    size_t dlen = strlen(delim);
    for (;;) {
        const char *at = memmem(r->buf + r->start, r->end - r->start, delim, dlen);
        if (at != NULL) {
            size_t len = (size_t)(at - (r->buf + r->start)) + dlen;
            if (len >= size)
                return false;
            memcpy(out, r->buf + r->start, len);
            out[len] = '\0';
            r->start += len;
            return true;
        }
        if (r->end - r->start >= size || reader_fill(r) <= 0)
            return false;
    }
}

static bool reader_line(struct reader *r, char *line, size_t size)
{
    if (!reader_until(r, "\r\n", line, size))
        return false;
    line[strlen(line) - 2] = '\0';
    return true;
}

/* Passes `len` bytes to `sink` (NULL drops them); returns how many came. */
static uint64_t reader_body(struct reader *r, uint64_t len, struct body *sink)
{
    uint64_t got = 0;
    while (got < len) {
        if (r->start == r->end && reader_fill(r) <= 0)
            break;
        size_t n = r->end - r->start;
        if (n > len - got)
            n = (size_t)(len - got);
        if (sink != NULL)
            body_add(sink, r->buf + r->start, n);
        r->start += n;
        got += n;
    }
    return got;
}

/* Everything until the peer closes; false on a reset or timeout. */
static bool reader_rest(struct reader *r, struct body *sink)
{
    for (;;) {
        body_add(sink, r->buf + r->start, r->end - r->start);
        r->start = r->end;
        ssize_t n = reader_fill(r);
        if (n <= 0)
            return n == 0;
    }
}

/* A chunked body, decoded; false on a framing error or an early end. */
static bool read_chunked(struct reader *r, struct body *sink)
{
    char line[1024];
    for (;;) {
        if (!reader_line(r, line, sizeof(line)))
            return false;
        char *end;
        unsigned long long size = strtoull(line, &end, 16);
        if (end == line || (*end != '\0' && *end != ';'))
            return false;
        if (size == 0)
            break;
        if (reader_body(r, size, sink) != size || !reader_line(r, line, sizeof(line)) ||
            line[0] != '\0')
            return false;
    }
    do /* trailer fields, then the empty line */
        if (!reader_line(r, line, sizeof(line)))
            return false;
    while (line[0] != '\0');
    return true;
}

/* Counts the header fields called `name` in a message head; their values,
 * trimmed and joined with ", " as RFC 9110 5.3 combines them, in `value`. */
static int header_find(const char *head, const char *name, char *value, size_t size)
{
    int count = 0;
    size_t used = 0, name_len = strlen(name);
    if (value != NULL && size > 0)
        value[0] = '\0';
    const char *line = strstr(head, "\r\n");
    while (line != NULL && line[2] != '\r' && line[2] != '\0') {
        line += 2;
        const char *eol = strstr(line, "\r\n");
        if (eol == NULL)
            break;
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        if (colon != NULL && (size_t)(colon - line) == name_len &&
            strncasecmp(line, name, name_len) == 0) {
            const char *v = colon + 1, *v_end = eol;
            while (v < v_end && (*v == ' ' || *v == '\t'))
                v++;
            while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
                v_end--;
            if (value != NULL && used < size)
                used += (size_t)snprintf(value + used, size - used, "%s%.*s", count > 0 ? ", " : "",
                                         (int)(v_end - v), v);
            count++;
        }
        line = eol;
    }
    return count;
}

/* The value of a header that must appear exactly once. */
static const char *header_one(const char *head, const char *name)
{
    static char value[4096];
    int count = header_find(head, name, value, sizeof(value));
    ck_assert_msg(count == 1, "%d \"%s\" headers in:\n%s", count, name, head);
    return value;
}

/* ------------------------------------------------------------ the backend */

enum framing {
    FRAME_LENGTH,  /* Content-Length */
    FRAME_CHUNKED, /* Transfer-Encoding: chunked, in several chunks */
    FRAME_CLOSE,   /* neither: the body ends when the connection closes */
};

enum cut {
    CUT_NONE,
    CUT_RESET, /* after the head and part of the body: RST */
    CUT_CLOSE, /* after the head and part of the body: FIN */
};

#define BACKEND_CONNS    64
#define BACKEND_REQUESTS 512
#define BACKEND_HEAD_MAX 32768
#define BACKEND_KEEP     4096

struct backend_request {
    char *head;       /* request line and header fields, as received */
    struct body body; /* the decoded body */
    bool complete;    /* the whole body arrived */
};

struct backend;

struct backend_conn {
    struct backend *backend;
    pthread_t thread;
    int fd; /* -1 once closed; under the backend's lock */
};

/* A test HTTP/1.1 server on 127.0.0.1: a thread accepts, a thread per
 * connection serves.  The answer is set before backend_start():
 * `status` (a target "/status/NNN" overrides it), X-Backend: `name`,
 * `headers`, and a body: `body`, or `body_size` bytes of the pattern (a
 * target "/bytes/N": N bytes), or the request target with `echo_target`. */
struct backend {
    const char *name;
    unsigned status;
    const char *headers; /* extra header lines, each ending in CRLF */
    const char *body;
    uint64_t body_size;
    bool echo_target;
    enum framing framing;
    unsigned delay_ms;  /* before answering */
    bool interim;       /* "100 Continue" before the answer */
    bool interim_split; /* ...with the answer's head split across writes */
    enum cut cut;
    bool never_answer;
    int close_after_ms;       /* < 0: keep-alive; else close this long after each answer */
    bool discard_body;        /* count request body bytes, keep none */
    bool tunnel;              /* an Upgrade request gets 101, then an echo */
    const char *tunnel_reply; /* ...or this answer to whatever comes through the tunnel */
    const char *raw;          /* sent instead of a response, then the connection closes */
    const char *raw_after;    /* ...unless this is set: sent 100 ms later, and it stays open */

    int listen_fd, port;
    pthread_t thread;
    bool running;
    atomic_bool stop;
    atomic_uint connections, in_flight, answered;
    atomic_uint closed;   /* connections the backend has closed */
    atomic_uint raw_sent; /* times raw_after was sent */
    atomic_ullong bytes;  /* every byte received */
    pthread_mutex_t lock;
    struct backend_conn conns[BACKEND_CONNS];
    size_t conn_count;
    struct backend_request *requests;
    size_t request_count;
};

static struct backend *backend_new(const char *name)
{
    struct backend *b = xcalloc(1, sizeof(*b));
    b->name = name;
    b->status = 200;
    b->body = "ok";
    b->close_after_ms = -1;
    b->listen_fd = -1;
    b->requests = xcalloc(BACKEND_REQUESTS, sizeof(*b->requests));
    pthread_mutex_init(&b->lock, NULL);
    return b;
}

/* Sleeps up to `ms`, less if the backend stops. */
static void backend_wait(struct backend *b, unsigned ms)
{
    for (unsigned waited = 0; waited < ms && !atomic_load(&b->stop); waited += 10)
        usleep(10000);
}

static bool backend_send_body(struct backend *b, int fd, const char *body, uint64_t len)
{
    if (b->framing != FRAME_CHUNKED)
        return body != NULL ? send_quiet(fd, body, (size_t)len) : send_pattern(fd, len);
    /* Several chunks even for a short body. */
    uint64_t piece = len < 24000 ? len / 3 + 1 : 8000;
    for (uint64_t off = 0; off < len; off += piece) {
        uint64_t n = len - off < piece ? len - off : piece;
        char size_line[32];
        snprintf(size_line, sizeof(size_line), "%llx\r\n", (unsigned long long)n);
        if (!send_str_quiet(fd, size_line) ||
            !send_quiet(fd, body != NULL ? body + off : pattern_at(off), (size_t)n) ||
            !send_str_quiet(fd, "\r\n"))
            return false;
    }
    return send_str_quiet(fd, "0\r\n\r\n");
}

/* Answers one request; false when the connection must end (a cut, a
 * close-delimited body, or a send error). */
static bool backend_answer(struct backend *b, int fd, const char *request_head)
{
    if (b->raw != NULL) {
        send_str_quiet(fd, b->raw);
        if (b->raw_after == NULL)
            return false;
        usleep(100000);
        bool sent = send_str_quiet(fd, b->raw_after);
        atomic_fetch_add(&b->raw_sent, 1);
        return sent;
    }
    char method[16] = "", target[1024] = "";
    sscanf(request_head, "%15s %1023s", method, target);
    unsigned status = b->status;
    if (strncmp(target, "/status/", 8) == 0)
        status = (unsigned)atoi(target + 8);
    const char *body = b->echo_target ? target : b->body;
    uint64_t len = body != NULL ? strlen(body) : b->body_size;
    if (strncmp(target, "/bytes/", 7) == 0) {
        body = NULL;
        len = strtoull(target + 7, NULL, 10);
    }

    char head[4096];
    int n = snprintf(head, sizeof(head), "%sHTTP/1.1 %u Test\r\nX-Backend: %s\r\n%s",
                     b->interim ? "HTTP/1.1 100 Continue\r\n\r\n" : "", status, b->name,
                     b->headers != NULL ? b->headers : "");
    /* A 304 keeps the Content-Length a 200 would have (RFC 9110 8.6). */
    if (b->framing == FRAME_LENGTH && status >= 200 && status != 204)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %llu\r\n",
                      (unsigned long long)len);
    else if (b->framing == FRAME_CHUNKED && status >= 200 && status != 204 && status != 304)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Transfer-Encoding: chunked\r\n");
    if (b->interim_split) {
        /* The interim response and all of the final head but its last CRLF. */
        if (!send_quiet(fd, head, (size_t)n))
            return false;
        usleep(100000);
        n = 0;
    }
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    if (!send_quiet(fd, head, (size_t)n))
        return false;
    bool bodiless = strcmp(method, "HEAD") == 0 || status < 200 || status == 204 || status == 304;
    if (bodiless)
        return true;
    if (b->cut != CUT_NONE) {
        /* Part of the body, time for the proxy to pass it on, then the cut. */
        if (b->framing == FRAME_CHUNKED)
            send_str_quiet(fd, "3e8\r\n");
        send_pattern(fd, 1000);
        usleep(200000);
        return false;
    }
    return backend_send_body(b, fd, body, len) && b->framing != FRAME_CLOSE;
}

/* Reads one request body as the head frames it; false on an early end or
 * bad framing. */
static bool backend_read_body(struct reader *r, const char *head, struct body *body)
{
    char value[256];
    if (header_find(head, "Transfer-Encoding", value, sizeof(value)) > 0)
        return strcasecmp(value, "chunked") == 0 && read_chunked(r, body);
    if (header_find(head, "Content-Length", value, sizeof(value)) > 0) {
        uint64_t len = strtoull(value, NULL, 10);
        return reader_body(r, len, body) == len;
    }
    return true;
}

/* After a 101: sends back every byte until the peer closes, or `reply`
 * (when not NULL) for every read that brings something. */
static void backend_echo(struct reader *r, const char *reply)
{
    do {
        if (r->end > r->start && !send_quiet(r->fd, reply != NULL ? reply : r->buf + r->start,
                                             reply != NULL ? strlen(reply) : r->end - r->start))
            return;
        r->start = r->end;
    } while (reader_fill(r) > 0);
}

static void backend_close_conn(struct backend *b, struct backend_conn *c, bool reset)
{
    pthread_mutex_lock(&b->lock);
    if (c->fd >= 0) {
        if (reset) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        close(c->fd);
        c->fd = -1;
        atomic_fetch_add(&b->closed, 1);
    }
    pthread_mutex_unlock(&b->lock);
}

static void *backend_conn_main(void *arg)
{
    struct backend_conn *c = arg;
    struct backend *b = c->backend;
    struct reader *r = xcalloc(1, sizeof(*r));
    r->fd = c->fd;
    r->counter = &b->bytes;
    char *head = xcalloc(1, BACKEND_HEAD_MAX);
    bool reset = false;
    while (!atomic_load(&b->stop) && reader_until(r, "\r\n\r\n", head, BACKEND_HEAD_MAX)) {
        struct backend_request *req = NULL;
        pthread_mutex_lock(&b->lock);
        if (b->request_count < BACKEND_REQUESTS) {
            req = &b->requests[b->request_count++];
            req->head = strdup(head);
        }
        pthread_mutex_unlock(&b->lock);
        /* Counted in flight once recorded: a test that sees it in flight
         * reads a request count that already includes it. */
        atomic_fetch_add(&b->in_flight, 1);
        struct body body;
        body_init(&body, b->discard_body ? 0 : BACKEND_KEEP, !b->discard_body);
        bool complete = backend_read_body(r, head, &body);
        pthread_mutex_lock(&b->lock);
        if (req != NULL) {
            req->body = body;
            req->complete = complete;
        } else {
            body_free(&body);
        }
        pthread_mutex_unlock(&b->lock);
        if (!complete) {
            atomic_fetch_sub(&b->in_flight, 1);
            break;
        }
        if (b->tunnel && header_find(head, "Upgrade", NULL, 0) > 0) {
            send_str_quiet(c->fd, "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n"
                                  "Upgrade: echo\r\n\r\n");
            atomic_fetch_add(&b->answered, 1);
            atomic_fetch_sub(&b->in_flight, 1);
            backend_echo(r, b->tunnel_reply);
            break;
        }
        if (b->never_answer)
            backend_wait(b, UINT_MAX);
        backend_wait(b, b->delay_ms);
        bool keep = !atomic_load(&b->stop) && backend_answer(b, c->fd, head);
        atomic_fetch_add(&b->answered, 1);
        atomic_fetch_sub(&b->in_flight, 1);
        if (!keep) {
            reset = b->cut == CUT_RESET;
            break;
        }
        if (b->close_after_ms >= 0) {
            /* Closes without reading on, as an idle timeout would: a
             * request sent meanwhile meets a reset. */
            backend_wait(b, (unsigned)b->close_after_ms);
            break;
        }
    }
    backend_close_conn(b, c, reset);
    free(head);
    free(r);
    return NULL;
}

static void *backend_accept_main(void *arg)
{
    struct backend *b = arg;
    for (;;) {
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd == -1 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd == -1 || atomic_load(&b->stop)) {
            if (fd != -1)
                close(fd);
            return NULL;
        }
        atomic_fetch_add(&b->connections, 1);
        pthread_mutex_lock(&b->lock);
        if (b->conn_count == BACKEND_CONNS) {
            close(fd);
            atomic_fetch_add(&b->closed, 1);
        } else {
            struct backend_conn *c = &b->conns[b->conn_count];
            *c = (struct backend_conn){.backend = b, .fd = fd};
            if (pthread_create(&c->thread, NULL, backend_conn_main, c) == 0) {
                b->conn_count++;
            } else {
                close(fd);
                atomic_fetch_add(&b->closed, 1);
            }
        }
        pthread_mutex_unlock(&b->lock);
    }
}

static void backend_start_on(struct backend *b, int fd)
{
    b->listen_fd = fd;
    ck_assert_int_eq(listen(fd, 128), 0);
    struct sockaddr_in addr;
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    b->port = ntohs(addr.sin_port);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, backend_accept_main, b), 0);
    b->running = true;
}

static void backend_start(struct backend *b)
{
    int port;
    backend_start_on(b, test_reserve_port(&port));
}

/* Stops the threads and frees the backend. */
static void backend_free(struct backend *b)
{
    if (b->running) {
        atomic_store(&b->stop, true);
        shutdown(b->listen_fd, SHUT_RDWR); /* wakes accept() */
        pthread_join(b->thread, NULL);
        pthread_mutex_lock(&b->lock);
        for (size_t i = 0; i < b->conn_count; i++)
            if (b->conns[i].fd >= 0)
                shutdown(b->conns[i].fd, SHUT_RDWR); /* wakes recv() */
        pthread_mutex_unlock(&b->lock);
        for (size_t i = 0; i < b->conn_count; i++)
            pthread_join(b->conns[i].thread, NULL);
    }
    if (b->listen_fd >= 0)
        close(b->listen_fd);
    for (size_t i = 0; i < b->request_count; i++) {
        free(b->requests[i].head);
        body_free(&b->requests[i].body);
    }
    free(b->requests);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static size_t backend_request_count(struct backend *b)
{
    pthread_mutex_lock(&b->lock);
    size_t count = b->request_count;
    pthread_mutex_unlock(&b->lock);
    return count;
}

/* Requests whose whole body arrived. */
static size_t backend_complete_count(struct backend *b)
{
    size_t count = 0;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->request_count; i++)
        count += b->requests[i].complete;
    pthread_mutex_unlock(&b->lock);
    return count;
}

/* Once the daemon has exited: waits until the backend has accepted and
 * served to the end every connection the daemon made, so that everything
 * the daemon sent is counted.  A connection of its own marks the end of
 * the accept queue, which is first in, first out; it is then taken off
 * the counts. */
static void backend_settle(struct backend *b)
{
    int fd = test_connect(b->port);
    shutdown(fd, SHUT_WR);
    char byte;
    ck_assert_int_eq(recv(fd, &byte, 1, 0), 0); /* the backend closed it: it was accepted */
    close(fd);
    test_wait_for(atomic_load(&b->closed) == atomic_load(&b->connections), TEST_WAIT_MS,
                  "the backend still serves %u of %u connections",
                  atomic_load(&b->connections) - atomic_load(&b->closed),
                  atomic_load(&b->connections));
    atomic_fetch_sub(&b->connections, 1);
    atomic_fetch_sub(&b->closed, 1);
}

/* Request i as received; the test waits for its answer before looking. */
static const struct backend_request *backend_request(struct backend *b, size_t i)
{
    ck_assert_uint_lt(i, backend_request_count(b));
    return &b->requests[i];
}

/* ------------------------------------------------------------ the daemon */

/* A short drain_timeout keeps each stop short: idle pooled upstream
 * connections hold a graceful stop for all of it (see
 * graceful_stop_does_not_wait_for_idle_upstream_connections). */
static const char *drain_timeout = "100ms";

/* What follows the address in the server's listen (" http2"). */
static const char *listen_params = "";

/* The daemon's config: upstream "b" holding `upstream`, and one server on
 * an ephemeral port whose location / proxies to it; `server` and `location`
 * are added to those blocks. */
static void write_config(struct test_daemon *d, unsigned workers, const char *upstream,
                         const char *server, const char *location)
{
    test_daemon_init(d, "corral");
    char conf[16384];
    snprintf(conf, sizeof(conf),
             "workers %u;\ndrain_timeout %s;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream b {\n%s\n}\n"
             "server {\n    listen 127.0.0.1:0%s;\n%s\n"
             "    location / {\n        proxy_pass http://b;\n%s\n    }\n}\n",
             workers, drain_timeout, upstream, listen_params, server, location);
    test_daemon_write_config(d, conf);
}

/* One backend with a pool of 8, on `workers` workers. */
static void start_proxy_workers(struct test_daemon *d, const struct backend *b, unsigned workers,
                                const char *server, const char *location)
{
    char upstream[128];
    snprintf(upstream, sizeof(upstream), "    server 127.0.0.1:%d;\n    keepalive 8;", b->port);
    write_config(d, workers, upstream, server, location);
    test_daemon_start(d);
}

/* The usual setup: 2 workers. */
static void start_proxy(struct test_daemon *d, const struct backend *b, const char *server,
                        const char *location)
{
    start_proxy_workers(d, b, 2, server, location);
}

/* ------------------------------------------------------------ a shared daemon */

/* The cases of a test case group that need nothing of the daemon but its
 * proxying (no stop, reload, log, metrics or memory of its own) share one,
 * started by the runner before the group's first case (an unchecked
 * fixture): a daemon's start and exit cost more CPU than most of these
 * cases (about 0.4 s under ASan).  Each such case has a slot of its own in
 * it: a server on a port of its own, with the case's `server` and
 * `location` lines, proxying to an upstream of its own (keepalive 8, as
 * start_proxy()) on a port the runner holds bound, on which the case's
 * backend listens.  So no case meets another's pool, connections or
 * settings.  What a case checked of its own daemon's exit is checked once
 * per group, by its last case (shared_daemon_stops_cleanly). */
struct shared_slot {
    const char *server, *location; /* NULL: none */
};

#define SHARED_SLOTS 16

static struct {
    const struct shared_slot *slots;
    int count;
    struct test_daemon d;
    int ports[SHARED_SLOTS];        /* the slots' servers */
    int upstream_fds[SHARED_SLOTS]; /* bound, not listening: the backends' */
} shared;

/* The runner's: starts the daemon for `count` slots. */
static void shared_start(const struct shared_slot *slots, int count)
{
    ck_assert_int_le(count, SHARED_SLOTS);
    shared.slots = slots;
    shared.count = count;
    memset(&shared.d, 0, sizeof(shared.d));
    shared.d.pid = -1;
    snprintf(shared.d.conf, sizeof(shared.d.conf), "%s/shared.conf", test_daemon_group_dir());
    snprintf(shared.d.log, sizeof(shared.d.log), "%s/shared.log", test_daemon_group_dir());
    char conf[16384];
    int n =
        snprintf(conf, sizeof(conf),
                 "workers 2;\ndrain_timeout %s;\nadmin { listen 127.0.0.2:0; }\n", drain_timeout);
    int held[SHARED_SLOTS];
    for (int i = 0; i < count; i++) {
        int upstream_port;
        shared.upstream_fds[i] = test_reserve_port(&upstream_port);
        held[i] = test_reserve_port(&shared.ports[i]);
        n += snprintf(conf + n, sizeof(conf) - (size_t)n,
                      "upstream b%d {\n    server 127.0.0.1:%d;\n    keepalive 8;\n}\n"
                      "server {\n    listen 127.0.0.1:%d;\n%s\n"
                      "    location / {\n        proxy_pass http://b%d;\n%s\n    }\n}\n",
                      i, upstream_port, shared.ports[i], slots[i].server ? slots[i].server : "", i,
                      slots[i].location ? slots[i].location : "");
    }
    ck_assert_int_lt(n, (int)sizeof(conf));
    test_write_file(shared.d.conf, conf);
    /* The servers' ports stay held until the daemon is about to take them. */
    for (int i = 0; i < count; i++)
        close(held[i]);
    test_daemon_start(&shared.d);
}

/* The runner's, after the group: reaps the daemon, which
 * shared_daemon_stops_cleanly has stopped (or kills it, when a case ended
 * the group early). */
static void shared_stop(void)
{
    if (shared.d.pid > 0)
        test_daemon_kill(&shared.d);
    for (int i = 0; i < shared.count; i++)
        close(shared.upstream_fds[i]);
    shared.count = 0;
}

/* The fields of /proc/PID/stat after the command's name: [0] is the state
 * (field 3), [49] the exit status as waitpid() gives it (field 52); false
 * if there is no such process. */
static bool shared_stat(pid_t pid, char *state, int *exit_status)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    char *stat = test_read_file(path);
    const char *at = strrchr(stat, ')');
    bool found = at != NULL && at[1] == ' ';
    if (found) {
        *state = at[2];
        at += 2;
        for (int field = 0; field < 49 && at != NULL; field++) {
            at = strchr(at, ' ');
            at = at != NULL ? at + 1 : NULL;
        }
        *exit_status = at != NULL ? atoi(at) : -1;
    }
    free(stat);
    return found;
}

/* Whether the shared daemon runs (not exited, not a zombie the runner has
 * yet to reap). */
static bool shared_alive(pid_t pid)
{
    char state;
    int status;
    return shared_stat(pid, &state, &status) && state != 'Z' && state != 'X';
}

/* A case's: `d` is the shared daemon, at slot `slot`'s server, and `b`
 * (set up, not started) listens on the slot's upstream port. */
static void shared_proxy(struct test_daemon *d, struct backend *b, int slot)
{
    ck_assert_int_lt(slot, shared.count);
    ck_assert_msg(shared.d.pid > 0, "no shared daemon for this test case group");
    ck_assert_msg(shared_alive(shared.d.pid), "the shared daemon is gone; log:\n%s",
                  test_daemon_log(&shared.d));
    *d = shared.d;
    d->port = shared.ports[slot];
    backend_start_on(b, shared.upstream_fds[slot]);
}

/* A case's end with the shared daemon: it still runs. */
static void shared_done(const struct test_daemon *d)
{
    ck_assert_msg(shared_alive(d->pid), "the shared daemon is gone; log:\n%s", test_daemon_log(d));
}

/* The last case of a group with a shared daemon: on SIGTERM the daemon
 * must exit with status 0 (no sanitizer report, no error), as
 * test_daemon_stop() checks of a case's own daemon.  The case is not its
 * parent: it reads the exit status from the zombie's /proc entry, which
 * stays until the runner reaps it after the group. */
START_TEST(shared_daemon_stops_cleanly)
{
    ck_assert_msg(shared.d.pid > 0, "no shared daemon for this test case group");
    ck_assert_msg(shared_alive(shared.d.pid), "the shared daemon is gone before its stop; log:\n%s",
                  test_daemon_log(&shared.d));
    kill(shared.d.pid, SIGTERM);
    char state = '?';
    int status = -1;
    test_wait_for(shared_stat(shared.d.pid, &state, &status) && state == 'Z', 15000,
                  "the shared daemon did not stop on SIGTERM (state %c); log:\n%s", state,
                  test_daemon_log(&shared.d));
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the shared daemon's exit status 0x%x; log:\n%s", status,
                  test_daemon_log(&shared.d));
}
END_TEST

/* ------------------------------------------------------------ clients */

struct response {
    unsigned status;
    char head[16384];
    struct body body;
    bool complete; /* all of it arrived, as its framing says */
};

static struct reader *client_connect(int port)
{
    struct reader *r = xcalloc(1, sizeof(*r));
    r->fd = test_connect(port);
    return r;
}

static void client_close(struct reader *r)
{
    close(r->fd);
    free(r);
}

/* Reads one response (a 1xx is one too); with `head_request` it has no
 * body.  Returns whether all of it arrived; free with response_free(). */
static bool read_response(struct reader *r, bool head_request, struct response *resp)
{
    resp->status = 0;
    resp->complete = false;
    resp->head[0] = '\0';
    body_init(&resp->body, 65536, true);
    if (!reader_until(r, "\r\n\r\n", resp->head, sizeof(resp->head)) ||
        sscanf(resp->head, "HTTP/1.1 %u ", &resp->status) != 1)
        return false;
    char value[256];
    unsigned s = resp->status;
    if (head_request || s < 200 || s == 204 || s == 304)
        resp->complete = true;
    else if (header_find(resp->head, "Transfer-Encoding", value, sizeof(value)) > 0)
        resp->complete = strcasecmp(value, "chunked") == 0 && read_chunked(r, &resp->body);
    else if (header_find(resp->head, "Content-Length", value, sizeof(value)) > 0)
        resp->complete =
            reader_body(r, strtoull(value, NULL, 10), &resp->body) == strtoull(value, NULL, 10);
    else
        resp->complete = reader_rest(r, &resp->body);
    return resp->complete;
}

static void response_free(struct response *resp)
{
    body_free(&resp->body);
}

/* Reads the next response on `r`, which must arrive whole, with `status`;
 * free with response_free(). */
static void read_status(struct reader *r, bool head_request, unsigned status, struct response *resp)
{
    ck_assert_msg(read_response(r, head_request, resp), "no whole response (%u expected):\n%s",
                  status, resp->head);
    ck_assert_uint_eq(resp->status, status);
}

/* Sends `request` on a new connection and reads the response. */
static unsigned exchange(int port, const char *request, struct response *resp)
{
    struct reader *r = client_connect(port);
    test_send_all(r->fd, request, strlen(request));
    read_response(r, strncmp(request, "HEAD ", 5) == 0, resp);
    client_close(r);
    return resp->status;
}

/* GET `path` on a new connection: the status, or 0 without a complete
 * response. */
static unsigned get(int port, const char *path)
{
    char request[256];
    snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
             path);
    struct response resp;
    unsigned status = exchange(port, request, &resp);
    bool complete = resp.complete;
    response_free(&resp);
    return complete ? status : 0;
}

/* Whether the peer closes within 3 s; whatever it sends meanwhile is dropped. */
static bool peer_closed(struct reader *r)
{
    r->start = r->end = 0;
    for (uint64_t deadline = test_now_ms() + 3000; test_now_ms() < deadline;) {
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[4096];
        ssize_t n = recv(r->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n == -1 && errno == ECONNRESET))
            return true;
    }
    return false;
}

/* A series from the admin /metrics page ("name{labels}"); 0 when absent. */
static uint64_t metric(const struct test_daemon *d, const char *series)
{
    char address[64];
    snprintf(address, sizeof(address), "127.0.0.2:%d", d->admin_port);
    struct reader *r = xcalloc(1, sizeof(*r));
    r->fd = test_connect_address(address);
    send_str(r->fd, "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    struct response resp;
    ck_assert(read_response(r, false, &resp));
    client_close(r);
    uint64_t value = 0;
    size_t len = strlen(series);
    for (const char *line = resp.body.data; line != NULL && *line != '\0';) {
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            value = strtoull(line + len + 1, NULL, 10);
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    response_free(&resp);
    return value;
}

static long rss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    char *status = test_read_file(path);
    const char *line = strstr(status, "\nVmRSS:");
    long kb = line != NULL ? atol(line + 7) : -1;
    free(status);
    return kb;
}

/* The slots of the shared daemons (see shared_start()), by group. */
enum {
    SLOT_STATUS,
    SLOT_KEEP_ALIVE,
    SLOT_PIPELINED,
    SLOT_CHUNKED_REQUEST,
    SLOT_CHUNKED_RESPONSE,
    SLOT_CLOSE_DELIMITED,
    SLOT_HEAD,
    SLOT_NO_BODY,
    SLOT_EXPECT_100,
    SLOT_NO_100,
    SLOT_INTERIM,
    CONFORMANCE_SLOTS
};
static const struct shared_slot conformance_slots[CONFORMANCE_SLOTS] = {
    [SLOT_INTERIM] = {.server = "proxy_read_timeout 2s;"},
};

static void conformance_start(void)
{
    shared_start(conformance_slots, COUNT(conformance_slots));
}

enum { SLOT_RETRIED_POST, SLOT_CLIENT_GONE, SLOT_TRANSFER_CODING, FAILURES_SLOTS };
static const struct shared_slot failures_slots[FAILURES_SLOTS] = {
    [SLOT_CLIENT_GONE] = {.location = "proxy_read_timeout 120s;"},
};

static void failures_start(void)
{
    shared_start(failures_slots, COUNT(failures_slots));
}

enum {
    SLOT_FORWARDED_FOR,
    SLOT_EMPTY_POST,
    SLOT_RESPONSE_HEADERS,
    SLOT_TRAILER,
    SLOT_TUNNEL,
    HEADERS_SLOTS
};
static const struct shared_slot headers_slots[HEADERS_SLOTS] = {
    [SLOT_RESPONSE_HEADERS] = {.location = "        proxy_hide_header X-Secret;"},
};

static void headers_start(void)
{
    shared_start(headers_slots, COUNT(headers_slots));
}

/* ================================================================ conformance */

START_TEST(status_headers_and_body_pass_through)
{
    struct backend *b = backend_new("a");
    b->headers =
        "X-Test: value\r\nCache-Control: no-store\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n";
    b->body = "hello from the backend\n";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_STATUS);

    struct reader *r = client_connect(d.port);
    static const unsigned statuses[] = {200, 201, 404, 503};
    for (int i = 0; i < COUNT(statuses); i++) {
        char request[128];
        snprintf(request, sizeof(request), "GET /status/%u HTTP/1.1\r\nHost: test\r\n\r\n",
                 statuses[i]);
        test_send_all(r->fd, request, strlen(request));
        struct response resp;
        ck_assert(read_response(r, false, &resp));
        ck_assert_uint_eq(resp.status, statuses[i]);
        ck_assert_str_eq(header_one(resp.head, "X-Test"), "value");
        ck_assert_str_eq(header_one(resp.head, "Cache-Control"), "no-store");
        char cookies[128];
        ck_assert_int_eq(header_find(resp.head, "Set-Cookie", cookies, sizeof(cookies)), 2);
        ck_assert_str_eq(cookies, "a=1, b=2");
        ck_assert_str_eq(header_one(resp.head, "Content-Length"), "23");
        ck_assert_str_eq(resp.body.data, "hello from the backend\n");
        response_free(&resp);
    }
    client_close(r);
    ck_assert_str_eq(strtok(backend_request(b, 0)->head, "\r"), "GET /status/200 HTTP/1.1");
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(keep_alive_on_both_sides)
{
    struct backend *b = backend_new("a");
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_KEEP_ALIVE);

    /* Several requests on one client connection, served over one pooled
     * upstream connection (one client connection stays on one worker). */
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 10; i++) {
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        read_status(r, false, 200, &resp);
        ck_assert_int_eq(header_find(resp.head, "Connection", NULL, 0), 0);
        ck_assert_str_eq(resp.body.data, "ok");
        response_free(&resp);
    }
    client_close(r);
    /* Then requests on connections of their own reuse the pools too. */
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(get(d.port, "/"), 200);
    ck_assert_uint_eq(backend_request_count(b), 20);
    ck_assert_msg(atomic_load(&b->connections) <= 2, "%u upstream connections for 20 requests",
                  atomic_load(&b->connections));
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* An idle pooled connection is closed after the upstream's
 * keepalive_timeout: one client connection (so one worker) asks again,
 * first well within the timeout, then well after it (the margins, about
 * a second and 0.6 s, hold on a loaded machine). */
START_TEST(idle_pooled_connection_is_closed_after_keepalive_timeout)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    char upstream[160];
    snprintf(upstream, sizeof(upstream),
             "    server 127.0.0.1:%d;\n    keepalive 8;\n    keepalive_timeout 1s;", b->port);
    write_config(&d, 1, upstream, "", "");
    test_daemon_start(&d);
    struct reader *r = client_connect(d.port);
    static const unsigned pause_ms[] = {0, 50, 1600};
    static const unsigned connections_after[] = {1, 1, 2};
    for (int i = 0; i < COUNT(pause_ms); i++) {
        usleep(pause_ms[i] * 1000);
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        read_status(r, false, 200, &resp);
        response_free(&resp);
        ck_assert_msg(atomic_load(&b->connections) == connections_after[i],
                      "request %d: %u upstream connections", i, atomic_load(&b->connections));
    }
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

START_TEST(pipelined_requests_are_answered_in_order)
{
    struct backend *b = backend_new("a");
    b->echo_target = true;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_PIPELINED);

    struct reader *r = client_connect(d.port);
    char requests[1024] = "";
    for (int i = 1; i <= 5; i++)
        snprintf(requests + strlen(requests), sizeof(requests) - strlen(requests),
                 "GET /p%d HTTP/1.1\r\nHost: test\r\n\r\n", i);
    /* With a body in the middle, and a HEAD. */
    strcat(requests, "POST /post HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\nbody"
                     "HEAD /head HTTP/1.1\r\nHost: test\r\n\r\n"
                     "GET /last HTTP/1.1\r\nHost: test\r\n\r\n");
    test_send_all(r->fd, requests, strlen(requests));
    static const char *const expected[] = {"/p1", "/p2", "/p3", "/p4", "/p5", "/post", "", "/last"};
    for (int i = 0; i < COUNT(expected); i++) {
        struct response resp;
        ck_assert_msg(read_response(r, i == 6, &resp), "response %d", i);
        ck_assert_uint_eq(resp.status, 200);
        ck_assert_str_eq(resp.body.data, expected[i]);
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(backend_request_count(b), 8);
    ck_assert_str_eq(backend_request(b, 5)->body.data, "body");
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(chunked_request_body_arrives_intact)
{
    struct backend *b = backend_new("a");
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_CHUNKED_REQUEST);

    struct reader *r = client_connect(d.port);
    const char *request =
        "POST /upload HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n1;name=value\r\n \r\n";
    test_send_all(r->fd, request, strlen(request));
    usleep(50000); /* the rest in a later segment */
    const char *rest = "10\r\nchunked world! 0\r\nA\r\n123456789\n\r\n0\r\nX-Trailer: t\r\n\r\n"
                       "GET /after HTTP/1.1\r\nHost: test\r\n\r\n";
    test_send_all(r->fd, rest, strlen(rest));
    for (int i = 0; i < 2; i++) {
        struct response resp;
        read_status(r, false, 200, &resp);
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(backend_request_count(b), 2);
    const struct backend_request *req = backend_request(b, 0);
    ck_assert(req->complete);
    ck_assert_str_eq(req->body.data, "hello chunked world! 0123456789\n");
    ck_assert_int_eq(header_find(req->head, "Content-Length", NULL, 0) +
                         header_find(req->head, "Transfer-Encoding", NULL, 0),
                     1);
    ck_assert_str_eq(strtok(backend_request(b, 1)->head, "\r"), "GET /after HTTP/1.1");
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(chunked_response_arrives_intact)
{
    struct backend *b = backend_new("a");
    b->framing = FRAME_CHUNKED;
    b->body = NULL;
    b->body_size = 100000;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_CHUNKED_RESPONSE);

    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 2; i++) {
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        read_status(r, false, 200, &resp);
        ck_assert_uint_eq(resp.body.len, 100000);
        ck_assert(resp.body.hash == pattern_hash(100000));
        response_free(&resp);
    }
    client_close(r);
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(close_delimited_response_arrives_intact)
{
    struct backend *b = backend_new("a");
    b->framing = FRAME_CLOSE;
    b->body = NULL;
    b->body_size = 300000;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_CLOSE_DELIMITED);

    /* HTTP/1.1: the proxy frames it (chunked) and the connection can stay;
     * HTTP/1.0: it ends with the connection. */
    static const char *const requests[] = {"GET / HTTP/1.1\r\nHost: test\r\n\r\n",
                                           "GET / HTTP/1.0\r\n\r\n"};
    for (int i = 0; i < COUNT(requests); i++) {
        struct response resp;
        exchange(d.port, requests[i], &resp);
        ck_assert_msg(resp.complete, "request %d:\n%s", i, resp.head);
        ck_assert_uint_eq(resp.status, 200);
        ck_assert_uint_eq(resp.body.len, 300000);
        ck_assert(resp.body.hash == pattern_hash(300000));
        response_free(&resp);
    }
    ck_assert_uint_eq(atomic_load(&b->connections), 2);
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(head_has_no_body_and_keeps_content_length)
{
    struct backend *b = backend_new("a");
    b->body = NULL;
    b->body_size = 1234;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_HEAD);

    struct reader *r = client_connect(d.port);
    send_str(r->fd, "HEAD / HTTP/1.1\r\nHost: test\r\n\r\n");
    struct response resp;
    read_status(r, true, 200, &resp);
    ck_assert_str_eq(header_one(resp.head, "Content-Length"), "1234");
    response_free(&resp);
    /* No body bytes follow the head: the next response starts right away. */
    send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
    read_status(r, false, 200, &resp);
    ck_assert_uint_eq(resp.body.len, 1234);
    response_free(&resp);
    client_close(r);
    ck_assert_str_eq(strtok(backend_request(b, 0)->head, "\r"), "HEAD / HTTP/1.1");
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(no_body_for_204_and_304)
{
    struct backend *b = backend_new("a");
    b->headers = "ETag: \"x\"\r\n";
    b->body = "not sent";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_NO_BODY);

    struct reader *r = client_connect(d.port);
    send_str(r->fd, "GET /status/204 HTTP/1.1\r\nHost: test\r\n\r\n"
                    "GET /status/304 HTTP/1.1\r\nHost: test\r\nIf-None-Match: \"x\"\r\n\r\n"
                    "GET /status/200 HTTP/1.1\r\nHost: test\r\n\r\n");
    static const unsigned statuses[] = {204, 304, 200};
    for (int i = 0; i < COUNT(statuses); i++) {
        struct response resp;
        ck_assert_msg(read_response(r, false, &resp), "no complete response %d (%u expected)", i,
                      statuses[i]);
        ck_assert_uint_eq(resp.status, statuses[i]);
        ck_assert_int_eq(header_find(resp.head, "Transfer-Encoding", NULL, 0), 0);
        if (statuses[i] == 204)
            ck_assert_int_eq(header_find(resp.head, "Content-Length", NULL, 0), 0);
        else if (statuses[i] == 200)
            ck_assert_str_eq(resp.body.data, "not sent");
        ck_assert_str_eq(header_one(resp.head, "ETag"), "\"x\"");
        response_free(&resp);
    }
    client_close(r);
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(expect_100_continue)
{
    struct backend *b = backend_new("a");
    b->interim = true; /* the proxy's client already had its own 100 */
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_EXPECT_100);

    struct reader *r = client_connect(d.port);
    const char *head = "POST /upload HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\n"
                       "Content-Length: 11\r\n\r\n";
    test_send_all(r->fd, head, strlen(head));
    char interim[256];
    ck_assert_msg(reader_until(r, "\r\n\r\n", interim, sizeof(interim)),
                  "no 100 Continue before the body");
    ck_assert_str_eq(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    send_str(r->fd, "hello world");
    struct response resp;
    read_status(r, false, 200, &resp); /* not the backend's 100 */
    ck_assert_str_eq(resp.body.data, "ok");
    response_free(&resp);
    client_close(r);
    const struct backend_request *req = backend_request(b, 0);
    ck_assert_str_eq(req->body.data, "hello world");
    ck_assert_int_eq(header_find(req->head, "Expect", NULL, 0), 0);
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* RFC 9110 15.2: no 1xx to an HTTP/1.0 client, which may not understand
 * one; it sends its body anyway after a while. */
START_TEST(no_100_continue_for_http_1_0)
{
    struct backend *b = backend_new("a");
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_NO_100);
    struct reader *r = client_connect(d.port);
    const char *head = "POST /upload HTTP/1.0\r\nHost: test\r\nExpect: 100-continue\r\n"
                       "Content-Length: 11\r\n\r\n";
    test_send_all(r->fd, head, strlen(head));
    /* A 100 is written as soon as the head is taken: a short wait sees it. */
    ck_assert_msg(!test_answers_within(r->fd, 500), "an HTTP/1.0 client got an answer early");
    send_str(r->fd, "hello world");
    struct response resp;
    read_status(r, false, 200, &resp);
    ck_assert_str_eq(resp.body.data, "ok");
    response_free(&resp);
    client_close(r);
    ck_assert_str_eq(backend_request(b, 0)->body.data, "hello world");
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* A 1xx from the upstream, and the final head arriving in two pieces of
 * which the first shares a read with the 1xx. */
START_TEST(interim_response_then_a_final_head_in_pieces)
{
    struct backend *b = backend_new("a");
    b->interim = true;
    b->interim_split = true;
    b->body = "final";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_INTERIM);
    struct response resp;
    exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", &resp);
    ck_assert_msg(resp.status == 200 && resp.complete, "got %u:\n%s", resp.status, resp.head);
    ck_assert_str_eq(resp.body.data, "final");
    response_free(&resp);
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(ten_megabyte_bodies_stream_intact)
{
    const uint64_t size = 10 * MB;
    struct backend *b = backend_new("a");
    b->body = NULL;
    b->body_size = size;
    backend_start(b);
    /* keepalive 0: each exchange on a connection of its own, apart from
     * what pooled_connection_paused_for_a_slow_client_reads_again checks. */
    struct test_daemon d;
    char upstream[128];
    snprintf(upstream, sizeof(upstream), "    server 127.0.0.1:%d;\n    keepalive 0;", b->port);
    write_config(&d, 2, upstream, "    client_max_body_size 0;", "");
    test_daemon_start(&d);

    /* Up and down in one exchange: the backend answers once it has it all. */
    struct reader *r = client_connect(d.port);
    char head[128];
    snprintf(head, sizeof(head), "PUT /big HTTP/1.1\r\nHost: test\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)size);
    test_send_all(r->fd, head, strlen(head));
    ck_assert(send_pattern(r->fd, size));
    struct response resp;
    read_status(r, false, 200, &resp);
    ck_assert_uint_eq(resp.body.len, size);
    ck_assert(resp.body.hash == pattern_hash(size));
    response_free(&resp);

    /* A chunked upload of the same size. */
    const char *chunked = "PUT /big HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
    test_send_all(r->fd, chunked, strlen(chunked));
    for (uint64_t off = 0; off < size; off += PATTERN_SPAN) {
        char size_line[16];
        snprintf(size_line, sizeof(size_line), "%x\r\n", PATTERN_SPAN);
        test_send_all(r->fd, size_line, strlen(size_line));
        test_send_all(r->fd, pattern_at(off), PATTERN_SPAN);
        send_str(r->fd, "\r\n");
    }
    send_str(r->fd, "0\r\n\r\n");
    bool complete = read_response(r, false, &resp);
    ck_assert_msg(complete && resp.status == 200 && resp.body.len == size,
                  "chunked upload: status %u, %llu bytes back; the backend has %zu requests, "
                  "the last %s with %llu body bytes",
                  resp.status, (unsigned long long)resp.body.len, backend_request_count(b),
                  b->requests[backend_request_count(b) - 1].complete ? "complete" : "incomplete",
                  (unsigned long long)b->requests[backend_request_count(b) - 1].body.len);
    response_free(&resp);
    client_close(r);

    for (size_t i = 0; i < 2; i++) {
        const struct backend_request *req = backend_request(b, i);
        ck_assert(req->complete);
        ck_assert_uint_eq(req->body.len, size);
        ck_assert(req->body.hash == pattern_hash(size));
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The proxy stops reading the upstream while the client's output is backed
 * up.  A connection that goes back to the pool in that state must read
 * again when it is reused.  The client here reads each response late, so
 * that the end of the body often finds the client's buffer over the mark. */
START_TEST(pooled_connection_paused_for_a_slow_client_reads_again)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy_workers(&d, b, 1, "    proxy_read_timeout 2s;", "");
    struct reader *r = client_connect(d.port);
    /* Sizes and delays vary, so that the end of some body meets a full
     * client buffer; a hang shows as no response within 5 s.  28 rounds:
     * each of the 7 sizes with each of the 4 delays once (more rounds, a
     * soak, belong in tests/bench). */
    for (int i = 0; i < 28; i++) {
        uint64_t start = test_now_ms(), size = MB + (uint64_t)(i % 7) * 37 * 1024;
        char request[128];
        snprintf(request, sizeof(request), "GET /bytes/%llu HTTP/1.1\r\nHost: test\r\n\r\n",
                 (unsigned long long)size);
        send_str(r->fd, request);
        usleep((useconds_t)(i % 4) * 10000);
        struct response resp;
        bool complete = read_response(r, false, &resp);
        ck_assert_msg(complete && resp.status == 200 && resp.body.len == size,
                      "round %d: status %u, %llu body bytes after %llu ms", i, resp.status,
                      (unsigned long long)resp.body.len,
                      (unsigned long long)(test_now_ms() - start));
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(atomic_load(&b->connections), 1);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

START_TEST(hundred_megabyte_upload_in_bounded_memory)
{
    const uint64_t size = 100 * MB;
    struct backend *b = backend_new("a");
    b->discard_body = true;
    backend_start(b);
    /* Under ASan, freed memory waits in a quarantine (256 MB by default)
     * that would count as the daemon's own; keep it small.  No effect on
     * other builds. */
    char asan[512];
    const char *inherited = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=8", inherited ? inherited : "",
             inherited && *inherited ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    struct test_daemon d;
    start_proxy(&d, b, "    client_max_body_size 0;", "");

    struct reader *r = client_connect(d.port);
    char head[128];
    snprintf(head, sizeof(head), "POST /big HTTP/1.1\r\nHost: test\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)size);
    test_send_all(r->fd, head, strlen(head));
    long before = rss_kb(d.pid), peak = before;
    for (uint64_t off = 0; off < size; off += 4 * MB) {
        ck_assert(send_pattern(r->fd, 4 * MB));
        long now = rss_kb(d.pid);
        peak = now > peak ? now : peak;
    }
    struct response resp;
    read_status(r, false, 200, &resp);
    response_free(&resp);
    client_close(r);
    ck_assert_uint_eq(backend_request(b, 0)->body.len, size);
    ck_assert_msg(peak < 64 * 1024, "daemon RSS reached %ld kB (%ld kB before the upload)", peak,
                  before);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* ================================================================ headers */

START_TEST(request_headers_are_rewritten)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "",
                "        proxy_set_header X-Added \"added\";\n"
                "        proxy_set_header X-Replace \"new\";\n"
                "        proxy_set_header X-Remove \"\";");

    const char *request = "GET /path?q=1 HTTP/1.1\r\n"
                          "Host: example.test:8080\r\n"
                          "Connection: keep-alive, X-Drop-Me\r\n"
                          "X-Drop-Me: secret\r\n"
                          "Keep-Alive: timeout=5\r\n"
                          "Proxy-Connection: keep-alive\r\n"
                          "TE: trailers\r\n"
                          "Trailer: X-Checksum\r\n"
                          "Upgrade: h2c\r\n"
                          "X-Forwarded-For: 10.0.0.1\r\n"
                          "X-Forwarded-Proto: https\r\n"
                          "X-Replace: old\r\n"
                          "X-Remove: gone\r\n"
                          "X-Custom: kept\r\n"
                          "\r\n";
    struct response resp;
    ck_assert_uint_eq(exchange(d.port, request, &resp), 200);
    response_free(&resp);
    const char *head = backend_request(b, 0)->head;
    ck_assert_msg(strncmp(head, "GET /path?q=1 HTTP/1.1\r\n", 24) == 0, "%s", head);
    ck_assert_str_eq(header_one(head, "Host"), "example.test:8080");
    static const char *const stripped[] = {"X-Drop-Me", "Keep-Alive", "Proxy-Connection",
                                           "Trailer",   "Upgrade",    "X-Remove"};
    for (int i = 0; i < COUNT(stripped); i++)
        ck_assert_msg(header_find(head, stripped[i], NULL, 0) == 0, "%s forwarded:\n%s",
                      stripped[i], head);
    char connection[256];
    ck_assert_int_eq(header_find(head, "Connection", connection, sizeof(connection)), 1);
    ck_assert_msg(strcasestr(connection, "x-drop-me") == NULL, "%s", head);
    /* "TE: trailers" holds end to end (the proxy passes trailers on), and
     * is announced as the hop-by-hop field it is. */
    ck_assert_str_eq(header_one(head, "TE"), "trailers");
    ck_assert_str_eq(connection, "TE");
    ck_assert_str_eq(header_one(head, "X-Forwarded-For"), "10.0.0.1, 127.0.0.1");
    ck_assert_str_eq(header_one(head, "X-Forwarded-Proto"), "http");
    ck_assert_int_eq(header_find(head, "Via", NULL, 0), 0); /* proxy_via is off */
    ck_assert_str_eq(header_one(head, "X-Added"), "added");
    ck_assert_str_eq(header_one(head, "X-Replace"), "new");
    ck_assert_str_eq(header_one(head, "X-Custom"), "kept");

    /* Without an X-Forwarded-For, the client's address alone; and a TE
     * without "trailers" names codings, which are the proxy's own business. */
    ck_assert_uint_eq(exchange(d.port, "GET / HTTP/1.1\r\nHost: t\r\nTE: gzip\r\n\r\n", &resp),
                      200);
    response_free(&resp);
    ck_assert_str_eq(header_one(backend_request(b, 1)->head, "X-Forwarded-For"), "127.0.0.1");
    ck_assert_int_eq(header_find(backend_request(b, 1)->head, "TE", NULL, 0), 0);
    ck_assert_int_eq(header_find(backend_request(b, 1)->head, "Connection", NULL, 0), 0);

    /* Octets of one, two and three digits: a client bound to 127.10.200.5. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f0ac805)};
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)d.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    static const char close_request[] = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    test_send_all(fd, close_request, sizeof(close_request) - 1);
    char reply[1024];
    while (recv(fd, reply, sizeof(reply), 0) > 0)
        ;
    close(fd);
    ck_assert_str_eq(header_one(backend_request(b, 2)->head, "X-Forwarded-For"), "127.10.200.5");
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* With proxy_via on, RFC 9110 7.6.3: each intermediary appends its own
 * entry.  Off (the default, as nginx), the client's Via goes on as it is. */
START_TEST(via_is_appended_to_an_existing_one)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "    proxy_via on;\n", "");
    struct response resp;
    ck_assert_uint_eq(
        exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\nVia: 1.0 edge\r\n\r\n", &resp), 200);
    response_free(&resp);
    char via[256];
    header_find(backend_request(b, 0)->head, "Via", via, sizeof(via));
    ck_assert_str_eq(via, "1.0 edge, 1.1 corral");
    test_daemon_stop(&d);
    start_proxy(&d, b, "", "");
    ck_assert_uint_eq(
        exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\nVia: 1.0 edge\r\n\r\n", &resp), 200);
    response_free(&resp);
    header_find(backend_request(b, 1)->head, "Via", via, sizeof(via));
    ck_assert_str_eq(via, "1.0 edge");
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* An absolute-form target (RFC 9112 3.2.2) goes on in origin-form, and its
 * authority replaces the Host header, which the server must ignore. */
START_TEST(absolute_form_target_goes_on_in_origin_form)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    static const struct {
        const char *request, *line, *host;
    } cases[] = {
        {"GET http://Shop.example:8080/p?q=1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET /p?q=1 HTTP/1.1",
         "Shop.example:8080"},
        {"GET https://shop.example HTTP/1.1\r\nHost: shop.example\r\n\r\n", "GET / HTTP/1.1",
         "shop.example"},
        {"GET http://old.example/x HTTP/1.0\r\n\r\n", "GET /x HTTP/1.1", "old.example"},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        struct response resp;
        ck_assert_uint_eq(exchange(d.port, cases[i].request, &resp), 200);
        response_free(&resp);
        const char *head = backend_request(b, (size_t)i)->head;
        ck_assert_msg(strncmp(head, cases[i].line, strlen(cases[i].line)) == 0,
                      "case %d: the backend got %.60s", i, head);
        char host[256];
        header_find(head, "Host", host, sizeof(host));
        ck_assert_str_eq(host, cases[i].host);
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* HTTP/1.1 requires Host: an HTTP/1.0 request without one gets the name
 * proxy_pass gives. */
START_TEST(host_is_added_for_an_http_1_0_client)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct response resp;
    ck_assert_uint_eq(exchange(d.port, "GET / HTTP/1.0\r\n\r\n", &resp), 200);
    response_free(&resp);
    char host[256];
    header_find(backend_request(b, 0)->head, "Host", host, sizeof(host));
    ck_assert_str_eq(host, "b");
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* Two X-Forwarded-For lines are one list (RFC 9110 5.3): every entry stays. */
START_TEST(x_forwarded_for_keeps_every_earlier_entry)
{
    struct backend *b = backend_new("a");
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_FORWARDED_FOR);
    struct response resp;
    ck_assert_uint_eq(exchange(d.port,
                               "GET / HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 10.0.0.1\r\n"
                               "X-Forwarded-For: 10.0.0.2\r\n\r\n",
                               &resp),
                      200);
    response_free(&resp);
    char forwarded[256];
    header_find(backend_request(b, 0)->head, "X-Forwarded-For", forwarded, sizeof(forwarded));
    ck_assert_str_eq(forwarded, "10.0.0.1, 10.0.0.2, 127.0.0.1");
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* RFC 9110 8.6: a POST carries Content-Length even when it is 0, and some
 * servers answer 411 without it; the framing the client chose stays. */
START_TEST(empty_post_keeps_its_content_length)
{
    struct backend *b = backend_new("a");
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_EMPTY_POST);
    struct response resp;
    ck_assert_uint_eq(
        exchange(d.port, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n", &resp), 200);
    response_free(&resp);
    ck_assert_str_eq(header_one(backend_request(b, 0)->head, "Content-Length"), "0");
    shared_done(&d);
    backend_free(b);
}
END_TEST

START_TEST(response_headers_are_rewritten)
{
    struct backend *b = backend_new("a");
    b->headers = "X-Secret: s\r\n"
                 "X-Visible: v\r\n"
                 "Server: backend/1.0\r\n"
                 "Date: Mon, 01 Jan 2001 00:00:00 GMT\r\n"
                 "Connection: X-Resp-Hop\r\n"
                 "X-Resp-Hop: h\r\n"
                 "Keep-Alive: timeout=5\r\n"
                 "Proxy-Connection: keep-alive\r\n";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_RESPONSE_HEADERS);

    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 2; i++) {
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        read_status(r, false, 200, &resp);
        ck_assert_str_eq(header_one(resp.head, "X-Visible"), "v");
        ck_assert_str_eq(header_one(resp.head, "X-Backend"), "a");
        ck_assert_str_eq(header_one(resp.head, "Server"), "corral");
        ck_assert_ptr_null(strstr(header_one(resp.head, "Date"), "2001"));
        static const char *const dropped[] = {"X-Secret", "X-Resp-Hop", "Keep-Alive",
                                              "Proxy-Connection"};
        for (int k = 0; k < COUNT(dropped); k++)
            ck_assert_msg(header_find(resp.head, dropped[k], NULL, 0) == 0, "%s passed:\n%s",
                          dropped[k], resp.head);
        ck_assert_str_eq(resp.body.data, "ok");
        response_free(&resp);
    }
    client_close(r);
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* proxy_redirect: the server's line where a location has none, `default`
 * (proxy_pass's URL to the location's prefix), off, and a regex whose
 * replacement reads the request ($host, once the request's head is gone)
 * and the groups; Refresh too, and no other header. */
START_TEST(proxy_redirect_rewrites_location_and_refresh)
{
    struct backend *b = backend_new("a");
    b->headers = "Location: http://b/two/z?q=1\r\nRefresh: 5; url=http://b/two/r\r\n"
                 "Content-Location: http://b/two/c\r\n";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b,
                "    proxy_redirect http://b/two/ /srv/;\n"
                "    location /one/ { proxy_pass http://b/two/; proxy_redirect default; }\n"
                "    location /off/ { proxy_pass http://b; proxy_redirect off; }\n"
                "    location /re/ { proxy_pass http://b;\n"
                "        proxy_redirect http://nomatch/ /x/;\n"
                "        proxy_redirect ~^http://b/two/(.*)$ https://$host/re/$1; }\n",
                "");
    static const struct {
        const char *path, *location, *refresh;
    } cases[] = {
        {"/", "/srv/z?q=1", "5; url=/srv/r"}, /* the server's line */
        {"/one/a", "/one/z?q=1", "5; url=/one/r"},
        {"/off/a", "http://b/two/z?q=1", "5; url=http://b/two/r"},
        {"/re/a", "https://test/re/z?q=1", "5; url=https://test/re/r"},
    };
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < COUNT(cases); i++) {
        char request[256];
        snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: Test\r\n\r\n", cases[i].path);
        send_str(r->fd, request);
        struct response resp;
        read_status(r, false, 200, &resp);
        ck_assert_str_eq(header_one(resp.head, "Location"), cases[i].location);
        ck_assert_str_eq(header_one(resp.head, "Refresh"), cases[i].refresh);
        ck_assert_str_eq(header_one(resp.head, "Content-Location"), "http://b/two/c");
        response_free(&resp);
    }
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* With no proxy_redirect anywhere, nginx's default: a proxy_pass
 * without a path makes its URL and "/" into "/". */
START_TEST(proxy_redirect_default_without_lines)
{
    struct backend *b = backend_new("a");
    b->headers = "Location: http://b/x/y\r\n";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
    struct response resp;
    ck_assert(read_response(r, false, &resp));
    ck_assert_str_eq(header_one(resp.head, "Location"), "/x/y");
    response_free(&resp);
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* proxy_intercept_errors: with it on, a backend's error for which the
 * location has an error_page gets the page (a URI answered by `return`,
 * a named location with "=", "=200"), the backend's body never reaching
 * the client nor, as leftover bytes, the next request on its connection;
 * an error without a page, and every error with it off, goes through. */
static const char intercept_server[] =
    "    location = /page { return 200 \"local page\\n\"; }\n"
    "    location @named { return 200 \"named page\\n\"; }\n"
    "    location /on/ { proxy_pass http://b/; proxy_intercept_errors on;\n"
    "        error_page 404 /page; error_page 502 = @named; error_page 503 =200 /page; }\n"
    "    location /off/ { proxy_pass http://b/; error_page 404 /page; }\n";

static const struct {
    const char *path;
    unsigned status;
    const char *body;
} intercept_cases[] = {
    {"/on/status/404", 404, "local page\n"},
    {"/on/status/200", 200, "the backend's own body, long enough to be left unread\n"},
    {"/on/status/502", 200, "named page\n"},
    {"/on/status/503", 200, "local page\n"},
    {"/on/status/410", 410, "the backend's own body, long enough to be left unread\n"},
    {"/off/status/404", 404, "the backend's own body, long enough to be left unread\n"},
    {"/on/status/404", 404, "local page\n"},
    {"/on/status/200", 200, "the backend's own body, long enough to be left unread\n"},
};

START_TEST(intercept_errors_serves_the_error_page)
{
    struct backend *b = backend_new("a");
    b->body = "the backend's own body, long enough to be left unread\n";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, intercept_server, "");
    struct reader *r = client_connect(d.port);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < COUNT(intercept_cases); i++) {
            char request[256];
            snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: test\r\n\r\n",
                     intercept_cases[i].path);
            send_str(r->fd, request);
            struct response resp;
            ck_assert_msg(read_response(r, false, &resp), "%s", intercept_cases[i].path);
            ck_assert_uint_eq(resp.status, intercept_cases[i].status);
            ck_assert_str_eq(resp.body.data, intercept_cases[i].body);
            /* the page's own head, not the backend's */
            ck_assert_int_eq(header_find(resp.head, "X-Backend", NULL, 0),
                             strstr(intercept_cases[i].body, "backend") != NULL);
            response_free(&resp);
        }
    }
    client_close(r);
    /* every request reached the backend, and each intercepted one closed
     * its connection (4 of each round's 8), which a pooled one would not */
    ck_assert_uint_eq(backend_request_count(b), 2 * COUNT(intercept_cases));
    test_wait_for(atomic_load(&b->connections) >= 8, TEST_WAIT_MS, "connections: %u",
                  atomic_load(&b->connections));
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The same over HTTP/2, with a request body the page goes without. */
START_TEST(intercept_errors_over_http2)
{
    struct backend *b = backend_new("a");
    b->body = "the backend's own body\n";
    backend_start(b);
    listen_params = " http2";
    struct test_daemon d;
    start_proxy(&d, b, intercept_server, "");
    static const struct {
        const char *args, *expected;
    } cases[] = {
        {"/on/status/404", "local page\n v=2 code=404"},
        {"/on/status/502 -d body=1", "named page\n v=2 code=200"},
        {"/on/status/410", "the backend's own body\n v=2 code=410"},
        {"/off/status/404", "the backend's own body\n v=2 code=404"},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        char command[512];
        snprintf(command, sizeof(command),
                 "curl -s --max-time 20 --http2-prior-knowledge -w ' v=%%{http_version} "
                 "code=%%{http_code}' http://127.0.0.1:%d%s",
                 d.port, cases[i].args);
        FILE *p = popen(command, "r");
        ck_assert_ptr_nonnull(p);
        char out[1024];
        size_t len = fread(out, 1, sizeof(out) - 1, p);
        out[len] = '\0';
        pclose(p);
        ck_assert_str_eq(out, cases[i].expected);
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A response's Trailer field is end to end: it announces the trailer
 * section that corral passes on after the last chunk, less the fields
 * RFC 9110 6.5.1 keeps out of trailers (a client could take a trailing
 * Set-Cookie or Location for the head's). */
START_TEST(response_trailer_field_is_passed)
{
    struct backend *b = backend_new("a");
    b->raw = "HTTP/1.1 200 OK\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n"
             "2\r\nok\r\n0\r\nSet-Cookie: s=1\r\nLocation: /x\r\nauthorization: a\r\n"
             "Content-Type: text/x\r\ngrpc-status: 0\r\nVary: *\r\nX-Checksum: 7\r\n\r\n";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_TRAILER);
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\nTE: trailers\r\n\r\n");
    char line[256], head[4096] = "";
    size_t used = 0;
    do { /* the head, kept for header_one() */
        ck_assert(reader_line(r, line, sizeof(line)));
        used += (size_t)snprintf(head + used, sizeof(head) - used, "%s\r\n", line);
        ck_assert_uint_lt(used, sizeof(head));
    } while (line[0] != '\0');
    ck_assert_str_eq(header_one(head, "Trailer"), "X-Checksum");
    ck_assert_str_eq(header_one(head, "Transfer-Encoding"), "chunked");
    /* The last chunk, then the trailer section that corral passed on. */
    ck_assert(reader_line(r, line, sizeof(line)));
    ck_assert_str_eq(line, "2");
    ck_assert(reader_line(r, line, sizeof(line)));
    ck_assert_str_eq(line, "ok");
    ck_assert(reader_line(r, line, sizeof(line)));
    ck_assert_str_eq(line, "0");
    static const char *const passed[] = {"grpc-status: 0", "X-Checksum: 7", ""};
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
        ck_assert(reader_line(r, line, sizeof(line)));
        ck_assert_str_eq(line, passed[i]);
    }
    client_close(r);
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* Upgrade is hop-by-hop unless the client asks to switch: then the request
 * carries it, the 101 comes back, and the connection becomes a byte pipe
 * that ends when either side ends it. */
START_TEST(upgrade_becomes_a_tunnel)
{
    struct backend *b = backend_new("a");
    b->tunnel = true;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_TUNNEL);
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "GET /ws HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\n"
                    "Upgrade: websocket\r\n\r\n");
    char head[4096];
    ck_assert(reader_until(r, "\r\n\r\n", head, sizeof(head)));
    ck_assert_msg(strncmp(head, "HTTP/1.1 101 ", 13) == 0, "%s", head);
    ck_assert_str_eq(header_one(head, "Upgrade"), "echo");
    ck_assert_ptr_nonnull(strcasestr(header_one(head, "Connection"), "upgrade"));
    const char *forwarded = backend_request(b, 0)->head;
    ck_assert_str_eq(header_one(forwarded, "Upgrade"), "websocket");
    ck_assert_ptr_nonnull(strcasestr(header_one(forwarded, "Connection"), "upgrade"));

    /* Raw bytes both ways, HTTP-looking or not. */
    const char *text = "GET /not-a-request HTTP/1.1\r\n\r\n";
    send_str(r->fd, text);
    struct body echo;
    body_init(&echo, 256, false);
    ck_assert_uint_eq(reader_body(r, strlen(text), &echo), strlen(text));
    ck_assert_str_eq(echo.data, text);
    body_free(&echo);
    ck_assert(send_pattern(r->fd, 200000));
    body_init(&echo, 0, true);
    ck_assert_uint_eq(reader_body(r, 200000, &echo), 200000);
    ck_assert(echo.hash == pattern_hash(200000));
    body_free(&echo);
    ck_assert_uint_eq(backend_request_count(b), 1);

    /* The client ends its side: the backend's end comes back as the close. */
    shutdown(r->fd, SHUT_WR);
    ck_assert_msg(peer_closed(r), "the tunnel stayed open after both sides ended");
    client_close(r);
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* The h2c smuggling attack: a client asks a proxied location to switch to
 * h2c, and a backend that agrees would give it a tunnel past every access
 * rule of the proxy (here the deny on /internal/).  Neither the Upgrade nor
 * HTTP2-Settings reaches the backend, no 101 reaches the client, and the
 * request after it is the proxy's to check. */
START_TEST(h2c_upgrade_is_not_forwarded)
{
    struct backend *b = backend_new("a");
    b->tunnel = true;
    b->tunnel_reply = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "    location /internal/ { deny all; proxy_pass http://b; }\n", "");
    ck_assert_uint_eq(get(d.port, "/internal/secret"), 403);

    struct reader *r = client_connect(d.port);
    send_str(r->fd, "GET /public/x HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\n"
                    "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
    struct response resp;
    ck_assert(read_response(r, false, &resp));
    ck_assert_msg(resp.status == 200, "%s", resp.head);
    ck_assert_str_eq(resp.body.data, "ok");
    response_free(&resp);
    const char *forwarded = backend_request(b, 0)->head;
    ck_assert_msg(header_find(forwarded, "Upgrade", NULL, 0) == 0, "%s", forwarded);
    ck_assert_msg(header_find(forwarded, "HTTP2-Settings", NULL, 0) == 0, "%s", forwarded);
    char connection[256] = "";
    header_find(forwarded, "Connection", connection, sizeof(connection));
    ck_assert_msg(strcasestr(connection, "upgrade") == NULL, "%s", forwarded);

    /* What the client sends next is HTTP to the proxy, or nothing at all:
     * never a request the backend gets unchecked. */
    if (send_str_quiet(r->fd, "GET /internal/secret HTTP/1.1\r\nHost: test\r\n\r\n")) {
        bool complete = read_response(r, false, &resp);
        ck_assert_msg(!complete || resp.status == 403, "%s", resp.head);
        ck_assert_ptr_null(strstr(resp.body.data, "secret"));
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(backend_request_count(b), 1);
    ck_assert_uint_eq(atomic_load(&b->bytes), strlen(forwarded));
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* An Upgrade value, and whether the location lets it through: each request
 * asks with Connection: Upgrade and carries HTTP2-Settings, unlisted. */
static const struct upgrade_case {
    const char *path, *upgrade;
    bool passes;
} upgrade_cases[] = {
    {"/", "websocket", true},
    {"/", "WebSocket", true},
    {"/", "websocket/13", true},
    {"/", "h2c", false},
    {"/", "H2C", false},
    {"/", "H2c", false},
    {"/", "h2c, websocket", false},
    {"/", "websocket, h2c", false},
    {"/", "websocket,h2c", false},
    {"/", "websocket, foo", false},
    {"/", "foo", false},
    {"/", "HTTP/2.0", false},
    {"/", ",", false},
    {"/listed/", "foo", true},
    {"/listed/", "FOO, websocket", true},
    {"/listed/", "bar", false},
    {"/listed/", "foo, h2c", false},
    {"/off/", "websocket", false},
    {"/any/", "bar", true},
    {"/any/", "bar, websocket/13", true},
    {"/any/", "h2c", false},
    {"/any/", "bar, H2C", false},
};

/* proxy_upgrade names what a location passes on (websocket by default, no
 * more); nginx's proxy_set_header Upgrade $http_upgrade says any but h2c.
 * What is not allowed goes on as an ordinary request, and HTTP2-Settings
 * never goes on.  Every row through one daemon, each on a connection of its
 * own: the rows differ only in what the client sends. */
START_TEST(only_allowed_upgrades_are_forwarded)
{
    struct backend *b = backend_new("a");
    b->tunnel = true;
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b,
                "    location /listed/ { proxy_pass http://b; proxy_upgrade websocket foo; }\n"
                "    location /off/ { proxy_pass http://b; proxy_upgrade off; }\n"
                "    location /any/ { proxy_pass http://b;\n"
                "        proxy_set_header Upgrade $http_upgrade;\n"
                "        proxy_set_header Connection \"upgrade\"; }\n",
                "");
    for (int i = 0; i < COUNT(upgrade_cases); i++) {
        const struct upgrade_case *row = &upgrade_cases[i];
        size_t before = backend_request_count(b);
        struct reader *r = client_connect(d.port);
        char request[512];
        snprintf(request, sizeof(request),
                 "GET %s HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"
                 "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                 row->path, row->upgrade);
        send_str(r->fd, request);
        struct response resp;
        read_response(r, false, &resp);
        ck_assert_msg(backend_request_count(b) == before + 1, "%s %s: %zu requests forwarded",
                      row->path, row->upgrade, backend_request_count(b) - before);
        const char *forwarded = backend_request(b, before)->head;
        ck_assert_msg(header_find(forwarded, "HTTP2-Settings", NULL, 0) == 0, "%s %s: %s",
                      row->path, row->upgrade, forwarded);
        if (row->passes) {
            ck_assert_msg(resp.status == 101, "%s %s: %s", row->path, row->upgrade, resp.head);
            ck_assert_str_eq(header_one(forwarded, "Upgrade"), row->upgrade);
            ck_assert_ptr_nonnull(strcasestr(header_one(forwarded, "Connection"), "upgrade"));
            send_str(r->fd, "ping");
            struct body echo;
            body_init(&echo, 16, false);
            ck_assert_uint_eq(reader_body(r, 4, &echo), 4);
            ck_assert_str_eq(echo.data, "ping");
            body_free(&echo);
        } else {
            ck_assert_msg(resp.status == 200, "%s %s: %s", row->path, row->upgrade, resp.head);
            ck_assert_msg(header_find(forwarded, "Upgrade", NULL, 0) == 0, "%s %s: %s", row->path,
                          row->upgrade, forwarded);
            char connection[256] = "";
            header_find(forwarded, "Connection", connection, sizeof(connection));
            ck_assert_msg(strcasestr(connection, "upgrade") == NULL, "%s %s: %s", row->path,
                          row->upgrade, forwarded);
        }
        response_free(&resp);
        client_close(r);
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* HTTP2-Settings only means something beside an Upgrade to h2c: it never
 * goes on, listed in Connection or not, upgrade or not. */
START_TEST(http2_settings_alone_is_not_forwarded)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct response resp;
    ck_assert_uint_eq(exchange(d.port,
                               "GET / HTTP/1.1\r\nHost: test\r\n"
                               "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                               &resp),
                      200);
    response_free(&resp);
    ck_assert_uint_eq(exchange(d.port,
                               "GET / HTTP/1.1\r\nHost: test\r\nUpgrade: h2c\r\n"
                               "http2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                               &resp),
                      200);
    response_free(&resp);
    for (size_t i = 0; i < 2; i++) {
        const char *forwarded = backend_request(b, i)->head;
        ck_assert_msg(header_find(forwarded, "HTTP2-Settings", NULL, 0) == 0, "%s", forwarded);
        ck_assert_msg(header_find(forwarded, "Upgrade", NULL, 0) == 0, "%s", forwarded);
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A backend that switches protocols on a request whose upgrade was not
 * passed on is not believed: the client gets a 502, never a tunnel. */
START_TEST(unforwarded_upgrade_gets_no_101)
{
    struct backend *b = backend_new("a");
    b->raw = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct response resp;
    ck_assert_uint_eq(exchange(d.port,
                               "GET / HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\n"
                               "Upgrade: h2c\r\n\r\n",
                               &resp),
                      502);
    response_free(&resp);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A listener that speaks HTTP/2 by its connection preface does not offer
 * the HTTP/1.1 Upgrade to h2c: the request is answered as HTTP/1.1, and
 * the Upgrade goes nowhere. */
START_TEST(h2c_upgrade_on_an_http2_listener_is_ignored)
{
    listen_params = " http2";
    struct backend *b = backend_new("a");
    b->tunnel = true;
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct response resp;
    ck_assert_uint_eq(
        exchange(d.port,
                 "GET / HTTP/1.1\r\nHost: test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                 "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                 &resp),
        200);
    ck_assert_str_eq(resp.body.data, "ok");
    response_free(&resp);
    const char *forwarded = backend_request(b, 0)->head;
    ck_assert_msg(header_find(forwarded, "Upgrade", NULL, 0) == 0, "%s", forwarded);
    ck_assert_msg(header_find(forwarded, "HTTP2-Settings", NULL, 0) == 0, "%s", forwarded);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* ================================================================ failures */

START_TEST(upstream_down_gives_502)
{
    struct backend *b = backend_new("a");
    int reserved = test_reserve_port(&b->port); /* nothing listens there */
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    for (int i = 0; i < 3; i++) {
        struct response resp;
        ck_assert_uint_eq(exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", &resp), 502);
        ck_assert(resp.complete);
        response_free(&resp);
    }
    ck_assert_uint_ge(metric(&d, "corral_upstream_errors_total{upstream=\"b\",kind=\"connect\"}"),
                      1);
    ck_assert_uint_ge(metric(&d, "corral_requests_total{code=\"502\"}"), 3);
    test_daemon_stop(&d);
    close(reserved);
    backend_free(b);
}
END_TEST

/* An upstream slower than proxy_read_timeout, or silent for good. */
static const bool never_answers[] = {false, true};

START_TEST(slow_upstream_gives_504)
{
    struct backend *b = backend_new("a");
    b->delay_ms = 5000;
    b->never_answer = never_answers[_i];
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "    proxy_read_timeout 300ms;", "");
    uint64_t start = test_now_ms();
    struct response resp;
    ck_assert_uint_eq(exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", &resp), 504);
    ck_assert(resp.complete);
    response_free(&resp);
    uint64_t elapsed = test_now_ms() - start;
    ck_assert_msg(elapsed >= 250 && elapsed < 2500, "504 after %llu ms",
                  (unsigned long long)elapsed);
    ck_assert_uint_ge(metric(&d, "corral_upstream_errors_total{upstream=\"b\",kind=\"timeout\"}"),
                      1);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The backend sends a head and part of the body, then resets or closes:
 * the client must not get what looks like a complete response. */
static const struct {
    const char *name;
    enum framing framing;
    enum cut cut;
} cut_cases[] = {
    {"Content-Length, reset", FRAME_LENGTH, CUT_RESET},
    {"Content-Length, close", FRAME_LENGTH, CUT_CLOSE},
    {"chunked, reset", FRAME_CHUNKED, CUT_RESET},
    {"chunked, close", FRAME_CHUNKED, CUT_CLOSE},
};

START_TEST(upstream_cut_mid_response_cuts_the_client)
{
    struct backend *b = backend_new("a");
    b->body = NULL;
    b->body_size = 100000;
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    /* One daemon for every row: each cut ends its connection on both
     * sides, so the next row starts with nothing pooled. */
    const char *resets = "corral_upstream_errors_total{upstream=\"b\",kind=\"reset\"}";
    for (int i = 0; i < COUNT(cut_cases); i++) {
        b->framing = cut_cases[i].framing;
        b->cut = cut_cases[i].cut;
        uint64_t resets_before = metric(&d, resets);
        struct reader *r = client_connect(d.port);
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        bool complete = read_response(r, false, &resp);
        ck_assert_msg(!complete, "%s: a complete response reached the client", cut_cases[i].name);
        ck_assert_msg(resp.status == 200 && resp.body.len >= 1000 && resp.body.len < 100000,
                      "%s: status %u, %llu body bytes", cut_cases[i].name, resp.status,
                      (unsigned long long)resp.body.len);
        ck_assert_msg(peer_closed(r), "%s: client connection left open", cut_cases[i].name);
        response_free(&resp);
        client_close(r);
        ck_assert_msg(metric(&d, resets) > resets_before, "%s: no reset counted",
                      cut_cases[i].name);
        test_wait_for(atomic_load(&b->closed) == atomic_load(&b->connections), TEST_WAIT_MS,
                      "%s: the backend still serves %u of %u connections", cut_cases[i].name,
                      atomic_load(&b->connections) - atomic_load(&b->closed),
                      atomic_load(&b->connections));
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The backend closes each connection after its response, without saying
 * so: at once (the proxy sees the close while the connection is idle), or
 * 150 ms later (the next request is already on its way: a reset). */
static const int stale_delays[] = {0, 150};

START_TEST(closed_pooled_connection_is_retried)
{
    struct backend *b = backend_new("a");
    b->close_after_ms = stale_delays[_i];
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 5; i++) {
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        ck_assert_msg(read_response(r, false, &resp), "request %d: no complete response", i);
        ck_assert_msg(resp.status == 200, "request %d: %u", i, resp.status);
        response_free(&resp);
    }
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The same for a POST with a body, by length or chunked: the backend never
 * read it, so sending it again on a fresh connection is safe. */
START_TEST(closed_pooled_connection_is_retried_for_a_post)
{
    struct backend *b = backend_new("a");
    b->close_after_ms = 150;
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_RETRIED_POST);
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 4; i++) {
        send_str(r->fd, i % 2 == 0
                            ? "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello"
                            : "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"
                              "\r\n5\r\nhello\r\n0\r\n\r\n");
        struct response resp;
        ck_assert_msg(read_response(r, false, &resp), "request %d: no complete response", i);
        ck_assert_msg(resp.status == 200, "request %d: %u", i, resp.status);
        response_free(&resp);
    }
    client_close(r);
    /* The backend read each once, on the fresh connection, whole. */
    ck_assert_uint_eq(backend_request_count(b), 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert(backend_request(b, i)->complete);
        ck_assert_str_eq(backend_request(b, i)->body.data, "hello");
    }
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* A body that could not be sent again (over 64 KiB, or chunked) never
 * takes a pooled connection, which the backend may have closed: one
 * worker, one client connection, and the backend counts its connections. */
START_TEST(body_too_large_to_resend_takes_a_new_connection)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy_workers(&d, b, 1, "", "");
    static const size_t body_size = 100 * 1000;
    char *large = xcalloc(1, body_size + 128);
    int head = snprintf(large, 128, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: %zu\r\n\r\n",
                        body_size);
    memset(large + head, 'x', body_size);
    static const struct {
        const char *request; /* NULL: the large POST */
        unsigned connections_after;
    } steps[] = {
        {"GET / HTTP/1.1\r\nHost: test\r\n\r\n", 1},
        {NULL, 2},
        {"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello", 2},
        {"POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
         "5\r\nhello\r\n0\r\n\r\n",
         3},
        {"GET / HTTP/1.1\r\nHost: test\r\n\r\n", 3},
    };
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < COUNT(steps); i++) {
        if (steps[i].request != NULL)
            send_str(r->fd, steps[i].request);
        else
            test_send_all(r->fd, large, (size_t)head + body_size);
        struct response resp;
        ck_assert_msg(read_response(r, false, &resp), "step %d: no complete response", i);
        ck_assert_msg(resp.status == 200, "step %d: %u", i, resp.status);
        response_free(&resp);
        ck_assert_msg(atomic_load(&b->connections) == steps[i].connections_after,
                      "step %d: %u upstream connections", i, atomic_load(&b->connections));
    }
    client_close(r);
    ck_assert_uint_eq(backend_request(b, 1)->body.len, body_size);
    free(large);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* What the upstream sends that is not HTTP: 502, nothing passed on. */
static const struct {
    const char *name;
    const char *raw;
} invalid_responses[] = {
    {"CL and TE", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "0\r\n\r\n"},
    {"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"},
    {"not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n"},
    {"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!"},
};

START_TEST(invalid_upstream_response_gives_502)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    /* One daemon for every row: the backend closes each connection after
     * its bytes, so the next row starts with nothing pooled. */
    for (int i = 0; i < COUNT(invalid_responses); i++) {
        b->raw = invalid_responses[i].raw;
        struct response resp;
        exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", &resp);
        ck_assert_msg(resp.status == 502, "%s: got %u", invalid_responses[i].name, resp.status);
        response_free(&resp);
        test_wait_for(
            atomic_load(&b->closed) == atomic_load(&b->connections), TEST_WAIT_MS,
            "%s: the backend still serves %u of %u connections", invalid_responses[i].name,
            atomic_load(&b->connections) - atomic_load(&b->closed), atomic_load(&b->connections));
    }
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* Idle pooled upstream connections are closed when a graceful stop or a
 * reload begins; they have nothing in flight to wait for. */
START_TEST(graceful_stop_does_not_wait_for_idle_upstream_connections)
{
    /* Long enough that a stop that waits for it cannot be taken for a
     * stop slowed down by a loaded machine. */
    drain_timeout = "20s";
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    ck_assert_uint_eq(get(d.port, "/"), 200); /* leaves one pooled connection */
    uint64_t start = test_now_ms();
    kill(d.pid, SIGTERM);
    int status = -1;
    while (waitpid(d.pid, &status, WNOHANG) == 0 && test_now_ms() - start < 25000)
        usleep(10000);
    uint64_t elapsed = test_now_ms() - start;
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status 0x%x", status);
    ck_assert_msg(elapsed < 10000, "SIGTERM took %llu ms (drain_timeout 20s)",
                  (unsigned long long)elapsed);
    backend_free(b);
}
END_TEST

START_TEST(reload_does_not_wait_for_idle_upstream_connections)
{
    /* As above: a generation that waits for it is told from a slow one. */
    drain_timeout = "20s";
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    ck_assert_uint_eq(get(d.port, "/"), 200);
    kill(d.pid, SIGHUP);
    free(test_wait_file(d.log, "generation 1 finished", 10000));
    ck_assert_uint_eq(get(d.port, "/"), 200);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* Bytes after a complete response, in the same read or later while the
 * connection idles in the pool, are no answer to anyone's next request. */
static const struct {
    const char *name;
    const char *raw, *raw_after;
} trailing_cases[] = {
    {"same read",
     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
     "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
     ""},
    {"later", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
     "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"},
};

START_TEST(upstream_bytes_after_a_response_are_dropped)
{
    struct backend *b = backend_new("a");
    b->raw = trailing_cases[_i].raw;
    b->raw_after = trailing_cases[_i].raw_after;
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 3; i++) {
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        ck_assert_msg(read_response(r, false, &resp), "%s, request %d: incomplete",
                      trailing_cases[_i].name, i);
        ck_assert_msg(resp.status == 200 && strcmp(resp.body.data, "ok") == 0,
                      "%s, request %d: %u \"%s\"", trailing_cases[_i].name, i, resp.status,
                      resp.body.data);
        response_free(&resp);
        /* The later bytes arrive meanwhile. */
        test_wait_for(atomic_load(&b->raw_sent) == (unsigned)i + 1, TEST_WAIT_MS,
                      "%s, request %d: the later bytes not sent", trailing_cases[_i].name, i);
    }
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A client that leaves while its response waits on the backend (nothing
 * more comes for now): the proxy lets go of the backend's connection at
 * once, as nginx does, rather than when proxy_read_timeout would end it.
 * Twice: the head read with the accept (the client's socket not yet
 * watched), and on a kept-alive connection. */
START_TEST(client_gone_releases_the_upstream)
{
    struct backend *b = backend_new("a");
    b->raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    b->raw_after = ""; /* and then nothing: the response stays open */
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_CLIENT_GONE);
    for (unsigned i = 0; i < 2; i++) {
        struct reader *r = client_connect(d.port);
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        char head[4096];
        ck_assert(reader_until(r, "hello", head, sizeof(head)));
        test_wait_for(atomic_load(&b->raw_sent) == i + 1, TEST_WAIT_MS,
                      "the backend is not holding");
        client_close(r);
        test_wait_for(atomic_load(&b->closed) == i + 1, TEST_WAIT_MS,
                      "the backend's connection %u is still held for a client that left", i + 1);
    }
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* A response transfer coding other than chunked: the proxy may pass it on
 * (re-chunked), decode it, or refuse the response, but never send the coded
 * bytes as if they were the content. */
START_TEST(response_transfer_coding_is_not_lost)
{
    struct backend *b = backend_new("a");
    b->raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
             "8\r\n\x1f\x8b\x08"
             "coded\r\n0\r\n\r\n";
    struct test_daemon d;
    shared_proxy(&d, b, SLOT_TRANSFER_CODING);
    struct response resp;
    exchange(d.port, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", &resp);
    char codings[256] = "";
    header_find(resp.head, "Transfer-Encoding", codings, sizeof(codings));
    ck_assert_msg(resp.status == 502 || strcasestr(codings, "gzip") != NULL,
                  "gzip-coded content passed on as %s:\n%s", codings[0] ? codings : "identity",
                  resp.head);
    response_free(&resp);
    shared_done(&d);
    backend_free(b);
}
END_TEST

/* A backend's raw 431 whose Transfer-Encoding lists `codings` gzips before
 * chunked, with an X-Long header of `value_len` bytes and the body "hello". */
static const char *coded_431(int codings, size_t value_len)
{
    static char raw[8192];
    int n = snprintf(raw, sizeof(raw), "HTTP/1.1 431 Too Large\r\nTransfer-Encoding: ");
    for (int i = 0; i < codings; i++)
        n += snprintf(raw + n, sizeof(raw) - (size_t)n, "gzip, ");
    n += snprintf(raw + n, sizeof(raw) - (size_t)n, "chunked\r\nX-Long: ");
    ck_assert_uint_lt((size_t)n + value_len + 64, sizeof(raw));
    memset(raw + n, 'v', value_len);
    strcpy(raw + n + value_len, "\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    return raw;
}

/* The response head a client's GET (with Connection: close when `closing`)
 * gets through the proxy from a backend that answers coded_431(codings,
 * value_len): a 431 whose chunked body, read to its end, is "hello".
 * The daemon and the backend are stopped.  A static buffer. */
static const char *coded_431_head(int codings, size_t value_len, bool closing)
{
    struct backend *b = backend_new("a");
    b->raw = coded_431(codings, value_len);
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct reader *r = client_connect(d.port);
    send_str(r->fd, closing ? "GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
                            : "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
    static char head[16384];
    ck_assert_msg(reader_until(r, "\r\n\r\n", head, sizeof(head)), "no response head");
    ck_assert_msg(strncmp(head, "HTTP/1.1 431 ", 13) == 0, "%s", head);
    struct body body;
    body_init(&body, 64, false);
    ck_assert(read_chunked(r, &body));
    ck_assert_str_eq(body.data, "hello");
    body_free(&body);
    client_close(r);
    test_daemon_stop(&d);
    backend_free(b);
    return head;
}

/* A long coding list, a long reason phrase, Connection: close and a header
 * line sized to fill what a fixed head budget allowed: the head is longer
 * than such a budget, and must reach the client whole. */
START_TEST(long_response_head_arrives_whole)
{
    /* "X-Long: " + 302 + CRLF: 312 bytes of header lines */
    const char *head = coded_431_head(40, 302, true);
    ck_assert_uint_eq(strlen(header_one(head, "X-Long")), 302);
    ck_assert_ptr_nonnull(strstr(head, "\r\nConnection: close\r\n"));
}
END_TEST

/* The fields for the client are gathered in a buffer on the stack (1 KiB)
 * and move to the heap past it: a head of several KiB reaches the client
 * whole, the fields before the move and after it alike. */
START_TEST(response_head_past_the_stack_buffer_arrives_whole)
{
    const char *head = coded_431_head(3, 2500, true);
    const char *value = header_one(head, "X-Long");
    ck_assert_uint_eq(strlen(value), 2500);
    ck_assert_uint_eq(strspn(value, "v"), 2500);
    ck_assert_str_eq(header_one(head, "Transfer-Encoding"), "gzip, gzip, gzip, chunked");
}
END_TEST

/* However long the backend's coding list, all of it reaches the client,
 * ahead of the chunked coding corral applies. */
START_TEST(whole_transfer_coding_list_is_passed_on)
{
    const char *head = coded_431_head(40, 10, false);
    char codings[512] = "";
    for (int i = 0; i < 40; i++)
        strcat(codings, "gzip, ");
    strcat(codings, "chunked");
    ck_assert_str_eq(header_one(head, "Transfer-Encoding"), codings);
}
END_TEST

/* ================================================================ balancing */

/* Two backends behind upstream b, with `extra` in its block. */
static void start_pair(struct test_daemon *d, struct backend *one, struct backend *two,
                       unsigned workers, const char *one_params, const char *extra)
{
    char upstream[512];
    snprintf(upstream, sizeof(upstream),
             "    server 127.0.0.1:%d%s;\n    server 127.0.0.1:%d;\n    keepalive 8;\n%s",
             one->port, one_params, two->port, extra);
    write_config(d, workers, upstream, "", "");
    test_daemon_start(d);
}

static void run_gets(int port, int count)
{
    for (int i = 0; i < count; i++)
        ck_assert_uint_eq(get(port, "/"), 200);
}

/* 100 GETs through start_pair()'s two backends: the first takes from
 * `least` to `most` of them. */
static void split_of_100(const char *one_params, const char *extra, size_t least, size_t most)
{
    struct backend *one = backend_new("one"), *two = backend_new("two");
    backend_start(one);
    backend_start(two);
    struct test_daemon d;
    start_pair(&d, one, two, 2, one_params, extra);
    run_gets(d.port, 100);
    size_t a = backend_request_count(one), c = backend_request_count(two);
    ck_assert_uint_eq(a + c, 100);
    ck_assert_msg(a >= least && a <= most, "split %zu/%zu", a, c);
    test_daemon_stop(&d);
    backend_free(one);
    backend_free(two);
}

START_TEST(round_robin_splits_evenly)
{
    split_of_100("", "    balance round_robin;", 40, 60);
}
END_TEST

START_TEST(weights_three_to_one)
{
    split_of_100(" weight=3", "", 65, 85);
}
END_TEST

/* One worker, so that one set of in-flight counts decides. */
START_TEST(least_conn_avoids_the_busy_backend)
{
    struct backend *slow = backend_new("slow"), *fast = backend_new("fast");
    /* Long enough that the ten requests below end before it, however
     * loaded the machine (1.5 s was not, under ASan on a busy host). */
    slow->delay_ms = 4000; /* under the clients' 5 s read timeout */
    backend_start(slow);
    backend_start(fast);
    struct test_daemon d;
    start_pair(&d, slow, fast, 1, "", "    balance least_conn;");

    /* Keep one request in flight on the slow backend. */
    struct reader *busy = NULL;
    for (int attempt = 0; attempt < 4 && atomic_load(&slow->in_flight) == 0; attempt++) {
        if (busy != NULL)
            client_close(busy);
        busy = client_connect(d.port);
        send_str(busy->fd, "GET /busy HTTP/1.1\r\nHost: test\r\n\r\n");
        for (int i = 0; i < 400 && atomic_load(&slow->in_flight) == 0 &&
                        atomic_load(&fast->answered) == (unsigned)attempt;
             i++)
            usleep(5000);
    }
    ck_assert_uint_eq(atomic_load(&slow->in_flight), 1);
    size_t slow_before = backend_request_count(slow);

    /* Meanwhile every new request goes to the idle one, at once. */
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < 10; i++) {
        uint64_t start = test_now_ms();
        send_str(r->fd, "GET / HTTP/1.1\r\nHost: test\r\n\r\n");
        struct response resp;
        ck_assert(read_response(r, false, &resp));
        ck_assert_str_eq(header_one(resp.head, "X-Backend"), "fast");
        ck_assert_uint_lt(test_now_ms() - start, 1000);
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(backend_request_count(slow), slow_before);
    struct response resp;
    ck_assert(read_response(busy, false, &resp));
    ck_assert_uint_eq(resp.status, 200);
    response_free(&resp);
    client_close(busy);
    test_daemon_stop(&d);
    backend_free(slow);
    backend_free(fast);
}
END_TEST

START_TEST(hash_keeps_a_client_on_one_backend)
{
    struct backend *one = backend_new("one"), *two = backend_new("two");
    backend_start(one);
    backend_start(two);
    struct test_daemon d;
    start_pair(&d, one, two, 2, "", "    balance hash;");
    run_gets(d.port, 30);
    size_t a = backend_request_count(one), c = backend_request_count(two);
    ck_assert_msg((a == 30 && c == 0) || (a == 0 && c == 30), "split %zu/%zu", a, c);
    test_daemon_stop(&d);
    backend_free(one);
    backend_free(two);
}
END_TEST

/* ================================================================ health */

START_TEST(failed_server_is_skipped_then_comes_back)
{
    struct backend *dead = backend_new("dead"), *live = backend_new("live");
    int reserved = test_reserve_port(&dead->port); /* refused until it listens */
    backend_start(live);
    struct test_daemon d;
    /* fail_timeout: 20 requests take well under a second, but a loaded
     * machine may take more. */
    start_pair(&d, dead, live, 2, " max_fails=1 fail_timeout=3s", "");

    /* Within fail_timeout: no client sees an error, and the dead server is
     * tried at most once per worker. */
    uint64_t start = test_now_ms();
    run_gets(d.port, 20);
    ck_assert_uint_lt(test_now_ms() - start, 2900);
    ck_assert_uint_eq(backend_request_count(live), 20);
    uint64_t failures = metric(&d, "corral_upstream_errors_total{upstream=\"b\",kind=\"connect\"}");
    ck_assert_msg(failures >= 1 && failures <= 2, "%llu connect failures",
                  (unsigned long long)failures);

    /* It comes back: after fail_timeout (each worker's, from its failure)
     * it gets its share of 20 requests again. */
    backend_start_on(dead, reserved);
    size_t got = 0;
    for (uint64_t until = test_now_ms() + 10000; got < 5 && test_now_ms() < until;) {
        size_t before = backend_request_count(dead);
        run_gets(d.port, 20);
        got = backend_request_count(dead) - before;
        if (got < 5)
            test_sleep_ms(100);
    }
    ck_assert_msg(got >= 5, "the recovered server got %zu of 20, 10 s on", got);
    test_daemon_stop(&d);
    backend_free(dead);
    backend_free(live);
}
END_TEST

/* Locations that proxy_pass to one upstream share its pool and its health
 * state, as in nginx, and keep their own server's timeouts.  One worker:
 * the dead server is the first pick. */
START_TEST(locations_share_an_upstream_and_keep_their_timeouts)
{
    struct backend *dead = backend_new("dead"), *live = backend_new("live");
    struct backend *slow = backend_new("slow");
    int reserved = test_reserve_port(&dead->port);
    slow->delay_ms = 500;
    backend_start(live);
    backend_start(slow);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout %s;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream b {\n    server 127.0.0.1:%d max_fails=1 fail_timeout=10s;\n"
             "    server 127.0.0.1:%d;\n    keepalive 8;\n}\n"
             "upstream s { server 127.0.0.1:%d; }\n"
             "server {\n    listen 127.0.0.1:0;\n    proxy_read_timeout 2s;\n"
             "    location / { proxy_pass http://b; }\n"
             "    location /other { proxy_pass http://b; }\n"
             "    location /slow { proxy_pass http://s; }\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    server_name impatient.test;\n"
             "    proxy_read_timeout 200ms;\n"
             "    location /slow { proxy_pass http://s; }\n}\n",
             drain_timeout, dead->port, live->port, slow->port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);

    /* The first request finds the dead server and marks it down for both
     * locations; all five go over one pooled connection to the live one. */
    static const char *const paths[] = {"/", "/other", "/other", "/", "/other"};
    struct reader *r = client_connect(d.port);
    for (int i = 0; i < COUNT(paths); i++) {
        char request[128];
        snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", paths[i]);
        send_str(r->fd, request);
        struct response resp;
        read_status(r, false, 200, &resp);
        response_free(&resp);
    }
    client_close(r);
    ck_assert_uint_eq(metric(&d, "corral_upstream_errors_total{upstream=\"b\",kind=\"connect\"}"),
                      1);
    ck_assert_uint_eq(backend_request_count(live), 5);
    ck_assert_uint_eq(atomic_load(&live->connections), 1);

    /* One upstream for /slow in both servers, each with its own timeout. */
    struct response resp;
    ck_assert_uint_eq(exchange(d.port, "GET /slow HTTP/1.1\r\nHost: test\r\n\r\n", &resp), 200);
    response_free(&resp);
    ck_assert_uint_eq(exchange(d.port, "GET /slow HTTP/1.1\r\nHost: impatient.test\r\n\r\n", &resp),
                      504);
    response_free(&resp);
    test_daemon_stop(&d);
    close(reserved);
    backend_free(dead);
    backend_free(live);
    backend_free(slow);
}
END_TEST

/* A connection that never opened carried nothing: a POST is as safe to
 * send to the next server as a GET.  One worker, so that the dead server
 * is the first pick. */
START_TEST(post_is_retried_when_the_connect_fails)
{
    struct backend *dead = backend_new("dead"), *live = backend_new("live");
    int reserved = test_reserve_port(&dead->port);
    backend_start(live);
    struct test_daemon d;
    start_pair(&d, dead, live, 1, "", "");
    struct response resp;
    exchange(d.port, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello", &resp);
    ck_assert_msg(resp.status == 200, "got %u with one of two servers up", resp.status);
    response_free(&resp);
    ck_assert_str_eq(backend_request(live, 0)->body.data, "hello");
    test_daemon_stop(&d);
    close(reserved);
    backend_free(dead);
    backend_free(live);
}
END_TEST

/* ================================================================ buffering */

/* The daemon's descriptors open on a file under `dir` that has left the
 * directory (an unlinked temporary body). */
static int deleted_files_under(pid_t pid, const char *dir)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *fds = opendir(path);
    ck_assert_ptr_nonnull(fds);
    int count = 0;
    size_t dir_len = strlen(dir);
    for (struct dirent *e; (e = readdir(fds)) != NULL;) {
        char link[PATH_MAX + 64], target[PATH_MAX];
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        count += strncmp(target, dir, dir_len) == 0 && target[dir_len] == '/' &&
                 strstr(target, "(deleted)") != NULL;
    }
    closedir(fds);
    return count;
}

/* A new directory for the request bodies, under the case's: `dir`, of
 * PATH_MAX bytes. */
static void bodies_dir(char *dir)
{
    snprintf(dir, PATH_MAX, "%s/bodies", test_daemon_dir());
    ck_assert_int_eq(mkdir(dir, 0700), 0);
}

/* A location's lines that buffer request bodies, past `buffer_size` in
 * files under `dir`. */
static void buffering_location(char *location, size_t size, const char *buffer_size,
                               const char *dir)
{
    int n = snprintf(location, size,
                     "        proxy_request_buffering on;\n        client_body_buffer_size %s;\n"
                     "        client_body_temp_path %s;",
                     buffer_size, dir);
    ck_assert(n > 0 && (size_t)n < size);
}

/* start_proxy() to `b` (started) with `server`'s lines, buffering request
 * bodies past `buffer_size` in files under `dir`. */
static void start_buffering(struct test_daemon *d, const struct backend *b, const char *server,
                            const char *buffer_size, const char *dir)
{
    char location[PATH_MAX + 128];
    buffering_location(location, sizeof(location), buffer_size, dir);
    start_proxy(d, b, server, location);
}

/* Entries in `dir` besides . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        count += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return count;
}

/* A body that arrives slowly holds no backend connection until it is
 * whole; then it goes with its length. */
START_TEST(buffered_slow_upload_holds_no_backend_connection)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "        proxy_request_buffering on;");
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nhello");
    for (int i = 0; i < 30; i++) { /* an absence: watched for a while */
        ck_assert_uint_eq(atomic_load(&b->connections), 0);
        test_sleep_ms(10);
    }
    send_str(r->fd, "world");
    struct response resp;
    read_status(r, false, 200, &resp);
    response_free(&resp);
    client_close(r);
    const struct backend_request *got = backend_request(b, 0);
    ck_assert_str_eq(got->body.data, "helloworld");
    ck_assert_str_eq(header_one(got->head, "Content-Length"), "10");
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A chunked body, buffered, goes with Content-Length, as nginx's. */
START_TEST(buffered_chunked_body_goes_with_its_length)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "        proxy_request_buffering on;");
    struct response resp;
    exchange(d.port,
             "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
             "\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n",
             &resp);
    ck_assert_uint_eq(resp.status, 200);
    response_free(&resp);
    const struct backend_request *got = backend_request(b, 0);
    ck_assert_str_eq(got->body.data, "hello world");
    ck_assert_str_eq(header_one(got->head, "Content-Length"), "11");
    ck_assert_int_eq(header_find(got->head, "Transfer-Encoding", NULL, 0), 0);
    /* an empty one */
    exchange(d.port,
             "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
             "\r\n0\r\n\r\n",
             &resp);
    ck_assert_uint_eq(resp.status, 200);
    response_free(&resp);
    ck_assert_str_eq(header_one(backend_request(b, 1)->head, "Content-Length"), "0");
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* Beyond client_body_buffer_size the body waits in a file of
 * client_body_temp_path that no name leads to, gone once the request is
 * over; the backend gets every byte. */
START_TEST(buffered_body_beyond_the_buffer_goes_to_an_unlinked_file)
{
    const uint64_t size = 3 * MB + 17;
    struct backend *b = backend_new("a");
    backend_start(b);
    char dir[PATH_MAX];
    bodies_dir(dir);
    struct test_daemon d;
    start_buffering(&d, b, "    client_max_body_size 0;", "4k", dir);
    struct reader *r = client_connect(d.port);
    char head[128];
    snprintf(head, sizeof(head), "POST /big HTTP/1.1\r\nHost: test\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)size);
    send_str(r->fd, head);
    ck_assert(send_pattern(r->fd, MB));
    test_wait_for(deleted_files_under(d.pid, dir) == 1, TEST_WAIT_MS,
                  "no unlinked temporary file under %s", dir);
    ck_assert_int_eq(dir_entries(dir), 0);
    ck_assert_uint_eq(atomic_load(&b->connections), 0);
    /* the rest: the pattern goes on from where it was */
    for (uint64_t off = MB; off < size; off += PATTERN_SPAN) {
        size_t n = size - off < PATTERN_SPAN ? (size_t)(size - off) : PATTERN_SPAN;
        ck_assert(send_quiet(r->fd, pattern_at(off), n));
    }
    struct response resp;
    read_status(r, false, 200, &resp);
    response_free(&resp);
    client_close(r);
    const struct backend_request *got = backend_request(b, 0);
    ck_assert_uint_eq(got->body.len, size);
    ck_assert_uint_eq(got->body.hash, pattern_hash(size));
    test_wait_for(deleted_files_under(d.pid, dir) == 0, TEST_WAIT_MS,
                  "the temporary file is still open");
    free(test_daemon_wait_log(&d, "buffered to a temporary file"));
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A client gone mid-upload takes its temporary file with it. */
START_TEST(buffered_body_file_goes_when_the_client_does)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    char dir[PATH_MAX];
    bodies_dir(dir);
    struct test_daemon d;
    start_buffering(&d, b, "", "1k", dir);
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n");
    ck_assert(send_pattern(r->fd, 50000));
    test_wait_for(deleted_files_under(d.pid, dir) == 1, TEST_WAIT_MS, "no temporary file");
    client_close(r);
    test_wait_for(deleted_files_under(d.pid, dir) == 0, TEST_WAIT_MS,
                  "the temporary file outlived its client");
    ck_assert_int_eq(dir_entries(dir), 0);
    ck_assert_uint_eq(atomic_load(&b->connections), 0);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A file that cannot be made is a 500, as nginx's, and logged; no backend
 * hears of the request. */
START_TEST(buffered_body_without_a_file_gives_500)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/missing", test_daemon_dir());
    struct test_daemon d;
    start_buffering(&d, b, "", "1k", missing);
    struct reader *r = client_connect(d.port);
    send_str(r->fd, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5000\r\n\r\n");
    send_pattern(r->fd, 5000);
    struct response resp;
    read_response(r, false, &resp);
    ck_assert_uint_eq(resp.status, 500);
    response_free(&resp);
    client_close(r);
    free(test_daemon_wait_log(&d, "cannot be buffered"));
    /* a body that fits the buffer needs no file */
    exchange(d.port,
             "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
             &resp);
    ck_assert_uint_eq(resp.status, 200);
    response_free(&resp);
    ck_assert_uint_eq(backend_request_count(b), 1);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* A backend that is gone (its port refuses) gets the client a 502 and
 * leaves no temporary file behind; so does one that resets the
 * connection while the body goes to it. */
START_TEST(buffered_body_file_goes_when_the_backend_fails)
{
    struct backend *b = backend_new("a");
    b->raw = "HTTP/1.1 200 OK\r\n"; /* a head cut short, then the connection closes */
    backend_start(b);
    struct backend *dead = backend_new("dead");
    int reserved = test_reserve_port(&dead->port);
    char dir[PATH_MAX], location[PATH_MAX + 128], upstream[256];
    bodies_dir(dir);
    buffering_location(location, sizeof(location), "1k", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(upstream, sizeof(upstream), "    server 127.0.0.1:%d;",
                 i == 0 ? dead->port : b->port);
        struct test_daemon d;
        write_config(&d, 1, upstream, "    client_max_body_size 0;", location);
        test_daemon_start(&d);
        struct reader *r = client_connect(d.port);
        send_str(r->fd, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 2000000\r\n\r\n");
        send_pattern(r->fd, 2000000);
        struct response resp;
        read_response(r, false, &resp);
        ck_assert_uint_eq(resp.status, 502);
        response_free(&resp);
        free(test_daemon_wait_log(&d, "buffered to a temporary file")); /* there was one */
        test_wait_for(deleted_files_under(d.pid, dir) == 0, TEST_WAIT_MS,
                      "a temporary file outlived its request");
        client_close(r);
        ck_assert_int_eq(dir_entries(dir), 0);
        test_daemon_stop(&d);
    }
    close(reserved);
    backend_free(dead);
    backend_free(b);
}
END_TEST

/* client_max_body_size holds as it does unbuffered: 413, and no backend
 * connection. */
START_TEST(buffered_body_over_client_max_body_size_gives_413)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "    client_max_body_size 1k;", "        proxy_request_buffering on;");
    char request[4096];
    int n = snprintf(request, sizeof(request),
                     "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n");
    memset(request + n, 'x', 2048);
    snprintf(request + n + 2048, sizeof(request) - (size_t)n - 2048, "\r\n0\r\n\r\n");
    struct response resp;
    exchange(d.port, request, &resp);
    ck_assert_uint_eq(resp.status, 413);
    response_free(&resp);
    exchange(d.port, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 2000\r\n\r\n", &resp);
    ck_assert_uint_eq(resp.status, 413);
    response_free(&resp);
    ck_assert_uint_eq(atomic_load(&b->connections), 0);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* proxy_next_upstream sends a buffered body to the next server whole,
 * even one too large to be kept for a replay when it streams (below: the
 * same without buffering, which cannot). */
START_TEST(buffered_body_is_sent_again_to_the_next_server)
{
    const uint64_t size = 300 * 1024;
    for (int buffered = 1; buffered >= 0; buffered--) {
        struct backend *bad = backend_new("bad"), *good = backend_new("good");
        bad->status = 502;
        backend_start(bad);
        backend_start(good);
        char upstream[256], location[256];
        snprintf(upstream, sizeof(upstream),
                 "    server 127.0.0.1:%d;\n    server 127.0.0.1:%d;\n    balance round_robin;",
                 bad->port, good->port);
        snprintf(location, sizeof(location),
                 "        proxy_request_buffering %s;\n        client_body_buffer_size 8k;\n"
                 "        client_body_temp_path %s;\n        proxy_next_upstream error http_502;",
                 buffered ? "on" : "off", test_daemon_dir());
        struct test_daemon d;
        write_config(&d, 1, upstream, "    client_max_body_size 0;", location);
        test_daemon_start(&d);
        unsigned good_answers = 0;
        for (int i = 0; i < 2; i++) { /* one of them goes to `bad` first */
            struct reader *r = client_connect(d.port);
            char head[128];
            snprintf(head, sizeof(head),
                     "PUT /up HTTP/1.1\r\nHost: test\r\nContent-Length: %llu\r\n\r\n",
                     (unsigned long long)size);
            send_str(r->fd, head);
            send_pattern(r->fd, size);
            struct response resp;
            read_response(r, false, &resp);
            good_answers += resp.status == 200;
            response_free(&resp);
            client_close(r);
        }
        if (buffered) {
            ck_assert_uint_eq(good_answers, 2);
            ck_assert_uint_eq(backend_request_count(good), 2);
            for (size_t i = 0; i < 2; i++) {
                ck_assert_uint_eq(backend_request(good, i)->body.len, size);
                ck_assert_uint_eq(backend_request(good, i)->body.hash, pattern_hash(size));
            }
        } else {
            ck_assert_uint_eq(good_answers, 1); /* the other got bad's 502 */
        }
        test_daemon_stop(&d);
        backend_free(bad);
        backend_free(good);
    }
}
END_TEST

/* An HTTP/2 client's body is buffered the same way. */
START_TEST(buffered_body_from_an_http2_client)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    listen_params = " http2";
    char file[PATH_MAX];
    struct test_daemon d;
    start_buffering(&d, b, "    client_max_body_size 0;", "1k", test_daemon_dir());
    snprintf(file, sizeof(file), "%s/upload", test_daemon_dir());
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    const uint64_t size = 200000;
    for (uint64_t off = 0; off < size; off += PATTERN_SPAN)
        fwrite(pattern_at(off), 1, size - off < PATTERN_SPAN ? size - off : PATTERN_SPAN, f);
    fclose(f);
    char command[PATH_MAX + 256], out[64] = "";
    snprintf(command, sizeof(command),
             "curl -s --max-time 20 --http2-prior-knowledge -o /dev/null -w '%%{http_code}' "
             "--data-binary @%s http://127.0.0.1:%d/up",
             file, d.port);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    pclose(p);
    ck_assert_str_eq(out, "200");
    ck_assert_uint_eq(backend_request(b, 0)->body.len, size);
    ck_assert_uint_eq(backend_request(b, 0)->body.hash, pattern_hash(size));
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* ================================================================ smuggling */

/* Requests a proxy must refuse, whole and at once, with `status` (or
 * `alt`, where RFC 9110/9112 allow either), closing the connection.  The
 * head ones must not reach the backend at all; a broken body can only be
 * seen after its head has been passed on, so for `in_body` ones the
 * backend must not get a complete request. */
struct smuggle_case {
    const char *name;
    unsigned status, alt;
    bool in_body;
    const char *request;
    size_t len; /* 0: strlen */
};

#define HEAD_CASE(name, status, text)                                                              \
    {                                                                                              \
        name, status, 0, false, text, sizeof(text) - 1                                             \
    }
#define HEAD_CASE2(name, status, alt, text)                                                        \
    {                                                                                              \
        name, status, alt, false, text, sizeof(text) - 1                                           \
    }
#define BODY_CASE(name, status, text)                                                              \
    {                                                                                              \
        name, status, 0, true, text, sizeof(text) - 1                                              \
    }
#define H "Host: a\r\n"

static const struct smuggle_case smuggle_cases[] = {
    HEAD_CASE("header with an empty name", 400, "GET / HTTP/1.1\r\n" H ": x\r\n\r\n"),
    HEAD_CASE("CL then TE", 400,
              "POST / HTTP/1.1\r\n" H "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("TE then CL", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("CL twice, different", 400,
              "POST / HTTP/1.1\r\n" H "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
    HEAD_CASE("CL twice, equal", 400,
              "POST / HTTP/1.1\r\n" H "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
    HEAD_CASE("CL list", 400, "POST / HTTP/1.1\r\n" H "Content-Length: 5, 5\r\n\r\nhello"),
    HEAD_CASE("CL plus sign", 400, "POST / HTTP/1.1\r\n" H "Content-Length: +5\r\n\r\nhello"),
    HEAD_CASE("CL negative", 400, "POST / HTTP/1.1\r\n" H "Content-Length: -5\r\n\r\nhello"),
    HEAD_CASE("CL inner space", 400, "POST / HTTP/1.1\r\n" H "Content-Length: 1 5\r\n\r\nhello"),
    HEAD_CASE("CL hex", 400, "POST / HTTP/1.1\r\n" H "Content-Length: 0x5\r\n\r\nhello"),
    HEAD_CASE("CL empty", 400, "POST / HTTP/1.1\r\n" H "Content-Length: \r\n\r\nhello"),
    HEAD_CASE("CL overflow", 400,
              "POST / HTTP/1.1\r\n" H "Content-Length: 99999999999999999999999\r\n\r\nhello"),
    HEAD_CASE("CL with space before colon", 400,
              "POST / HTTP/1.1\r\n" H "Content-Length : 5\r\n\r\nhello"),
    HEAD_CASE("TE chunked, gzip", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE gzip", 400, "POST / HTTP/1.1\r\n" H "Transfer-Encoding: gzip\r\n\r\nhello"),
    HEAD_CASE("TE identity", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: identity\r\n\r\nhello"),
    HEAD_CASE("TE gzip, chunked", 501,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE2("TE chunked, chunked", 400, 501,
               "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE xchunked", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE chunkedx", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunkedx\r\n\r\n0\r\n\r\n"),
    HEAD_CASE2("TE chunked with a parameter", 400, 501,
               "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE twice", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
              "\r\n0\r\n\r\n"),
    HEAD_CASE("TE upper case, and CL", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: CHUNKED\r\nContent-Length: 5\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("TE after a tab, and CL", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding:\tchunked\r\nContent-Length: 5\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("TE with a vertical tab", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: \x0b"
              "chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE with space before colon", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE in HTTP/1.0", 400,
              "POST / HTTP/1.0\r\n" H "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("TE and CL in HTTP/1.0", 400,
              "POST / HTTP/1.0\r\n" H "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("obs-fold", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
    HEAD_CASE("first header folded", 400, "GET / HTTP/1.1\r\n Host: a\r\n\r\n"),
    HEAD_CASE("bare LF line ends", 400, "GET / HTTP/1.1\nHost: a\n\n"),
    HEAD_CASE("bare LF in one line", 400, "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"),
    HEAD_CASE("bare CR", 400, "GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n"),
    HEAD_CASE("space before colon", 400, "GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
    HEAD_CASE("invalid name character", 400, "GET / HTTP/1.1\r\n" H "X(y): z\r\n\r\n"),
    HEAD_CASE("empty name", 400, "GET / HTTP/1.1\r\n" H ": z\r\n\r\n"),
    HEAD_CASE("no colon", 400, "GET / HTTP/1.1\r\n" H "X-No-Colon\r\n\r\n"),
    HEAD_CASE("control character in value", 400, "GET / HTTP/1.1\r\n" H "X: a\x01z\r\n\r\n"),
    HEAD_CASE("DEL in value", 400, "GET / HTTP/1.1\r\n" H "X: a\x7fz\r\n\r\n"),
    HEAD_CASE("NUL in value", 400, "GET / HTTP/1.1\r\n" H "X: a\0z\r\n\r\n"),
    HEAD_CASE("NUL in name", 400, "GET / HTTP/1.1\r\n" H "X\0Y: z\r\n\r\n"),
    HEAD_CASE("two Hosts", 400, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    HEAD_CASE("no Host", 400, "GET / HTTP/1.1\r\n\r\n"),
    HEAD_CASE("Host with a space", 400, "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
    HEAD_CASE("Host with a path", 400, "GET / HTTP/1.1\r\nHost: evil/x\r\n\r\n"),
    HEAD_CASE("Host with userinfo", 400, "GET / HTTP/1.1\r\nHost: a@evil\r\n\r\n"),
    HEAD_CASE("Host percent-encoded", 400, "GET / HTTP/1.1\r\nHost: evil%20x\r\n\r\n"),
    HEAD_CASE("Host with a backslash", 400, "GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n"),
    HEAD_CASE("Host with a query", 400, "GET / HTTP/1.1\r\nHost: a?b\r\n\r\n"),
    HEAD_CASE("Host port not digits", 400, "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n"),
    HEAD_CASE("Host port out of range", 400, "GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n"),
    HEAD_CASE("Host port without a host", 400, "GET / HTTP/1.1\r\nHost: :80\r\n\r\n"),
    HEAD_CASE("Host IPv6 without brackets", 400, "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n"),
    HEAD_CASE("Host IPv6 unclosed", 400, "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"),
    HEAD_CASE("Host IP-literal not IPv6", 400, "GET / HTTP/1.1\r\nHost: [evil]\r\n\r\n"),
    HEAD_CASE("Host IPv6 with a zone", 400, "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n"),
    HEAD_CASE("Host invalid beside an absolute-form target", 400,
              "GET http://a/ HTTP/1.1\r\nHost: a b\r\n\r\n"),
    HEAD_CASE("absolute-form authority percent-encoded", 400,
              "GET http://evil%20x/ HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form authority, port not digits", 400,
              "GET http://a:x/ HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form authority, bad IP-literal", 400,
              "GET http://[a]/ HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form target with userinfo", 400, "GET http://u@a/ HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form target, query without path", 400,
              "GET http://a?x HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form target, empty authority", 400, "GET http:///x HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("absolute-form target, other scheme", 400, "GET ftp://a/ HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("two spaces before the target", 400, "GET  / HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("two spaces before the version", 400, "GET /  HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("space after the version", 400, "GET / HTTP/1.1 \r\n" H "\r\n"),
    HEAD_CASE("empty lines, then two spaces", 400, "\r\n\r\nGET  / HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("empty lines, then obs-fold", 400,
              "\r\n\r\nPOST / HTTP/1.1\r\n" H "Transfer-Encoding:\r\n chunked\r\n\r\n"
              "0\r\n\r\n"),
    HEAD_CASE("empty lines, then a bare LF", 400, "\r\n\r\nGET / HTTP/1.1\r\n" H "X: y\n\r\n"),
    HEAD_CASE("space in target", 400, "GET /a b HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("control character in target", 400, "GET /a\x01 HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("invalid method", 400, "G@T / HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE2("lower-case method", 400, 501, "get / HTTP/1.1\r\n" H "\r\n"),
    HEAD_CASE("bad version", 400, "GET / HTTP/1.x\r\n" H "\r\n"),
    HEAD_CASE2("HTTP/0.9 request line", 400, 505, "GET /\r\n\r\n"),
    HEAD_CASE2("HTTP/2.0 request line", 505, 400, "GET / HTTP/2.0\r\n" H "\r\n"),
    HEAD_CASE2("HTTP/2 preface", 505, 400, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    HEAD_CASE("Expect other than 100-continue", 417,
              "POST / HTTP/1.1\r\n" H "Expect: 200-ok\r\nContent-Length: 5\r\n\r\nhello"),
    HEAD_CASE("CL over client_max_body_size", 413,
              "POST / HTTP/1.1\r\n" H "Content-Length: 2000000\r\n\r\nhello"),
    {"huge header", 431, 0, false, NULL, 0},
    {"too many headers", 431, 0, false, NULL, 0},
    BODY_CASE("bad chunk size", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk size overflow", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
              "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk size with a sign", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk extension with bare LF", 400,
              "POST / HTTP/1.1\r\n" H
              "Transfer-Encoding: chunked\r\n\r\n5;ext\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk size line with bare LF", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk longer than its size", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"),
    BODY_CASE("chunk data ended by other than CRLF", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n"),
    BODY_CASE("last chunk without CRLF, then a request", 400,
              "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n0\r\n"
              "GET /smuggled HTTP/1.1\r\n" H "\r\n"),
    {"chunked body over client_max_body_size", 413, 0, true, NULL, 0},
};

/* The cases too large to write out. */
static char *build_request(const struct smuggle_case *c, size_t *len)
{
    size_t cap = 2 * MB;
    char *text = xcalloc(1, cap);
    if (c->request != NULL) {
        memcpy(text, c->request, c->len);
        *len = c->len;
    } else if (strcmp(c->name, "huge header") == 0) {
        int n = snprintf(text, cap, "GET / HTTP/1.1\r\n" H "X-Big: ");
        memset(text + n, 'a', 10000);
        strcpy(text + n + 10000, "\r\n\r\n");
        *len = strlen(text);
    } else if (strcmp(c->name, "too many headers") == 0) {
        int n = snprintf(text, cap, "GET / HTTP/1.1\r\n" H);
        for (int i = 0; i < 150; i++)
            n += snprintf(text + n, cap - (size_t)n, "X-%d: v\r\n", i);
        strcpy(text + n, "\r\n");
        *len = strlen(text);
    } else {
        /* One chunk of 1.5 MB, past the 1 MB default. */
        int n = snprintf(text, cap,
                         "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
                         "180000\r\n");
        memset(text + n, 'x', 0x180000);
        *len = (size_t)n + 0x180000;
    }
    return text;
}

/* One case on a connection of its own to a daemon that has refused the
 * earlier ones: once the connection is closed and the backend has settled,
 * the backend got nothing new (a head case) or no new complete request
 * (a body case, whose upstream connection the daemon must have closed: a
 * pooled one would carry the next request into the broken body). */
static void smuggle_try(const struct test_daemon *d, struct backend *b,
                        const struct smuggle_case *c)
{
    unsigned connections = atomic_load(&b->connections);
    unsigned long long bytes = atomic_load(&b->bytes);
    size_t complete = backend_complete_count(b);

    size_t len;
    char *request = build_request(c, &len);
    struct reader *r = client_connect(d->port);
    send_quiet(r->fd, request, len); /* the daemon may close before it has it all */
    free(request);
    struct response resp;
    read_response(r, false, &resp);
    ck_assert_msg(resp.status == c->status || (c->alt != 0 && resp.status == c->alt),
                  "%s: got %u, want %u:\n%s", c->name, resp.status, c->status, resp.head);
    ck_assert_msg(strstr(resp.head, "\r\nConnection: close\r\n") != NULL,
                  "%s: no Connection: close", c->name);
    ck_assert_msg(peer_closed(r), "%s: connection left open", c->name);
    response_free(&resp);
    client_close(r);

    backend_settle(b); /* anything that was on its way to the backend is in */
    if (!c->in_body)
        ck_assert_msg(
            atomic_load(&b->connections) == connections && atomic_load(&b->bytes) == bytes,
            "%s: the backend got %u connections, %llu bytes:\n%s", c->name,
            atomic_load(&b->connections) - connections, atomic_load(&b->bytes) - bytes,
            backend_request_count(b) > 0 ? backend_request(b, backend_request_count(b) - 1)->head
                                         : "");
    else
        ck_assert_msg(backend_complete_count(b) == complete,
                      "%s: the backend got a complete request:\n%s", c->name,
                      backend_request(b, backend_request_count(b) - 1)->head);
}

/* Every case of the table against one daemon: each needs only a fresh
 * connection, and a daemon of its own per case cost most of this
 * program's time.  The body cases go first, while the backend has a
 * thread for each connection (settling takes one each time). */
START_TEST(malformed_requests_are_refused_before_the_backend)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    for (int i = 0; i < COUNT(smuggle_cases); i++)
        if (smuggle_cases[i].in_body)
            smuggle_try(&d, b, &smuggle_cases[i]);
    unsigned connections = atomic_load(&b->connections);
    unsigned long long bytes = atomic_load(&b->bytes);
    for (int i = 0; i < COUNT(smuggle_cases); i++)
        if (!smuggle_cases[i].in_body)
            smuggle_try(&d, b, &smuggle_cases[i]);

    /* What the daemon sent late would be counted here. */
    test_daemon_stop(&d);
    backend_settle(b);
    ck_assert_uint_eq(backend_complete_count(b), 0);
    ck_assert_msg(atomic_load(&b->connections) == connections && atomic_load(&b->bytes) == bytes,
                  "the head cases brought the backend %u connections, %llu bytes",
                  atomic_load(&b->connections) - connections, atomic_load(&b->bytes) - bytes);
    backend_free(b);
}
END_TEST

/* A valid request, then a malformed one on the same connection: only the
 * first reaches the backend. */
START_TEST(malformed_request_after_a_valid_one_is_not_forwarded)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    struct reader *r = client_connect(d.port);
    const char *requests = "GET /first HTTP/1.1\r\n" H "\r\n"
                           "POST /second HTTP/1.1\r\n" H "Content-Length: 30\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"
                           "0\r\n\r\nGET /smuggled HTTP/1.1\r\n" H "\r\n";
    send_quiet(r->fd, requests, strlen(requests));
    struct response resp;
    read_status(r, false, 200, &resp);
    response_free(&resp);
    read_response(r, false, &resp);
    ck_assert_uint_eq(resp.status, 400);
    response_free(&resp);
    ck_assert(peer_closed(r));
    client_close(r);
    test_daemon_stop(&d);
    backend_settle(b);
    ck_assert_uint_eq(backend_request_count(b), 1);
    ck_assert_str_eq(strtok(backend_request(b, 0)->head, "\r"), "GET /first HTTP/1.1");
    backend_free(b);
}
END_TEST

/* A request line inside a body is body: with a Content-Length larger than
 * what follows, the proxy waits for the rest and never treats the embedded
 * request as one of its own. */
START_TEST(request_inside_a_body_stays_body)
{
    struct backend *b = backend_new("a");
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    const char *inner = "GET /smuggled HTTP/1.1\r\n" H "\r\n";

    /* A body that holds the request exactly: one request at the backend. */
    struct reader *r = client_connect(d.port);
    char request[256];
    snprintf(request, sizeof(request), "POST /outer HTTP/1.1\r\n" H "Content-Length: %zu\r\n\r\n%s",
             strlen(inner), inner);
    test_send_all(r->fd, request, strlen(request));
    struct response resp;
    read_status(r, false, 200, &resp);
    response_free(&resp);
    client_close(r);
    ck_assert_uint_eq(backend_request_count(b), 1);
    ck_assert_str_eq(backend_request(b, 0)->body.data, inner);

    /* A Content-Length that promises more than comes, then the end: no
     * response, and nothing at the backend is a request for /smuggled. */
    r = client_connect(d.port);
    snprintf(request, sizeof(request), "POST /outer HTTP/1.1\r\n" H "Content-Length: %zu\r\n\r\n%s",
             strlen(inner) + 20, inner);
    test_send_all(r->fd, request, strlen(request));
    shutdown(r->fd, SHUT_WR);
    read_response(r, false, &resp);
    ck_assert_msg(resp.status != 200, "an incomplete request was answered 200");
    response_free(&resp);
    client_close(r);
    test_daemon_stop(&d);
    backend_settle(b);
    for (size_t i = 0; i < backend_request_count(b); i++)
        ck_assert_msg(strstr(backend_request(b, i)->head, "/smuggled") == NULL,
                      "the body became a request:\n%s", backend_request(b, i)->head);
    ck_assert_uint_eq(backend_complete_count(b), 1);
    backend_free(b);
}
END_TEST

/* server_timing on: a proxied response says how long the backend took to
 * its head (at least its 50 ms delay) and the total, which is no less; a
 * location that turns it off says nothing. */
START_TEST(server_timing_times_the_upstream)
{
    struct backend *b = backend_new("a");
    b->body = "timed\n";
    b->delay_ms = 50;
    backend_start(b);
    struct test_daemon d;
    char upstream[128];
    snprintf(upstream, sizeof(upstream), "    server 127.0.0.1:%d;", b->port);
    write_config(&d, 1, upstream,
                 "    server_timing on;\n    location /quiet { server_timing off; "
                 "return 200 \"quiet\\n\"; }",
                 "");
    test_daemon_start(&d);

    struct response resp;
    ck_assert_uint_eq(
        exchange(d.port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &resp), 200);
    const char *timing = header_one(resp.head, "Server-Timing");
    unsigned long total_ms, total_frac, upstream_ms;
    ck_assert_int_eq(sscanf(timing, "total;dur=%lu.%3lu, upstream;dur=%lu", &total_ms, &total_frac,
                            &upstream_ms),
                     3);
    ck_assert_uint_ge(upstream_ms, 50);
    ck_assert_uint_ge(total_ms + 1, upstream_ms); /* the loop clock counts whole ms */
    response_free(&resp);

    ck_assert_uint_eq(
        exchange(d.port, "GET /quiet HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &resp),
        200);
    char none[64];
    ck_assert_int_eq(header_find(resp.head, "Server-Timing", none, sizeof(none)), 0);
    response_free(&resp);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* The fields a Connection field lists are dropped whichever of a head's
 * Connection fields lists them: the second one's too, its name in
 * capitals, in the request and in the response. */
START_TEST(fields_listed_in_a_later_connection_field_are_dropped)
{
    struct backend *b = backend_new("a");
    b->headers = "Connection: keep-alive\r\n"
                 "X-Resp-Kept: k\r\n"
                 "CONNECTION: X-Resp-Two\r\n"
                 "X-Resp-Two: t\r\n";
    backend_start(b);
    struct test_daemon d;
    start_proxy(&d, b, "", "");
    const char *request = "GET / HTTP/1.1\r\n"
                          "Host: test\r\n"
                          "Connection: keep-alive\r\n"
                          "X-Kept: k\r\n"
                          "CONNECTION: X-Second\r\n"
                          "X-Second: s\r\n"
                          "\r\n";
    struct response resp;
    ck_assert_uint_eq(exchange(d.port, request, &resp), 200);
    ck_assert_str_eq(header_one(resp.head, "X-Resp-Kept"), "k");
    ck_assert_msg(header_find(resp.head, "X-Resp-Two", NULL, 0) == 0, "%s", resp.head);
    response_free(&resp);
    const char *head = backend_request(b, 0)->head;
    ck_assert_str_eq(header_one(head, "X-Kept"), "k");
    ck_assert_msg(header_find(head, "X-Second", NULL, 0) == 0, "%s", head);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

Suite *test_suite(void)
{
    pattern_init();
    Suite *suite = suite_create("proto/proxy");

    TCase *tc = test_daemon_case(suite, "conformance", 30);
    tcase_add_unchecked_fixture(tc, conformance_start, shared_stop);
    tcase_add_test(tc, status_headers_and_body_pass_through);
    tcase_add_test(tc, proxy_redirect_rewrites_location_and_refresh);
    tcase_add_test(tc, proxy_redirect_default_without_lines);
    tcase_add_test(tc, intercept_errors_serves_the_error_page);
    tcase_add_test(tc, intercept_errors_over_http2);
    tcase_add_test(tc, server_timing_times_the_upstream);
    tcase_add_test(tc, keep_alive_on_both_sides);
    tcase_add_test(tc, idle_pooled_connection_is_closed_after_keepalive_timeout);
    tcase_add_test(tc, pipelined_requests_are_answered_in_order);
    tcase_add_test(tc, chunked_request_body_arrives_intact);
    tcase_add_test(tc, chunked_response_arrives_intact);
    tcase_add_test(tc, close_delimited_response_arrives_intact);
    tcase_add_test(tc, head_has_no_body_and_keeps_content_length);
    tcase_add_test(tc, no_body_for_204_and_304);
    tcase_add_test(tc, expect_100_continue);
    tcase_add_test(tc, no_100_continue_for_http_1_0);
    tcase_add_test(tc, interim_response_then_a_final_head_in_pieces);
    tcase_add_test(tc, ten_megabyte_bodies_stream_intact);
    tcase_add_test(tc, pooled_connection_paused_for_a_slow_client_reads_again);
    tcase_add_test(tc, hundred_megabyte_upload_in_bounded_memory);
    tcase_add_test(tc, shared_daemon_stops_cleanly); /* the last */

    tc = test_daemon_case(suite, "headers", 20);
    tcase_add_unchecked_fixture(tc, headers_start, shared_stop);
    tcase_add_test(tc, request_headers_are_rewritten);
    tcase_add_test(tc, via_is_appended_to_an_existing_one);
    tcase_add_test(tc, host_is_added_for_an_http_1_0_client);
    tcase_add_test(tc, absolute_form_target_goes_on_in_origin_form);
    tcase_add_test(tc, x_forwarded_for_keeps_every_earlier_entry);
    tcase_add_test(tc, empty_post_keeps_its_content_length);
    tcase_add_test(tc, response_headers_are_rewritten);
    tcase_add_test(tc, response_trailer_field_is_passed);
    tcase_add_test(tc, upgrade_becomes_a_tunnel);
    tcase_add_test(tc, shared_daemon_stops_cleanly); /* the last */

    tc = test_daemon_case(suite, "upgrades", 20);
    tcase_add_test(tc, h2c_upgrade_is_not_forwarded);
    tcase_add_test(tc, only_allowed_upgrades_are_forwarded);
    tcase_add_test(tc, http2_settings_alone_is_not_forwarded);
    tcase_add_test(tc, unforwarded_upgrade_gets_no_101);
    tcase_add_test(tc, h2c_upgrade_on_an_http2_listener_is_ignored);

    tc = test_daemon_case(suite, "failures", 20);
    tcase_add_unchecked_fixture(tc, failures_start, shared_stop);
    tcase_add_test(tc, upstream_down_gives_502);
    tcase_add_loop_test(tc, slow_upstream_gives_504, 0, COUNT(never_answers));
    tcase_add_test(tc, upstream_cut_mid_response_cuts_the_client);
    tcase_add_loop_test(tc, closed_pooled_connection_is_retried, 0, COUNT(stale_delays));
    tcase_add_test(tc, closed_pooled_connection_is_retried_for_a_post);
    tcase_add_test(tc, body_too_large_to_resend_takes_a_new_connection);
    tcase_add_test(tc, invalid_upstream_response_gives_502);
    tcase_add_loop_test(tc, upstream_bytes_after_a_response_are_dropped, 0, COUNT(trailing_cases));
    tcase_add_test(tc, client_gone_releases_the_upstream);
    tcase_add_test(tc, response_transfer_coding_is_not_lost);
    tcase_add_test(tc, long_response_head_arrives_whole);
    tcase_add_test(tc, response_head_past_the_stack_buffer_arrives_whole);
    tcase_add_test(tc, whole_transfer_coding_list_is_passed_on);
    tcase_add_test(tc, graceful_stop_does_not_wait_for_idle_upstream_connections);
    tcase_add_test(tc, reload_does_not_wait_for_idle_upstream_connections);
    tcase_add_test(tc, shared_daemon_stops_cleanly); /* the last */

    tc = test_daemon_case(suite, "balancing", 20);
    tcase_add_test(tc, round_robin_splits_evenly);
    tcase_add_test(tc, weights_three_to_one);
    tcase_add_test(tc, least_conn_avoids_the_busy_backend);
    tcase_add_test(tc, hash_keeps_a_client_on_one_backend);

    tc = test_daemon_case(suite, "health", 20);
    tcase_add_test(tc, failed_server_is_skipped_then_comes_back);
    tcase_add_test(tc, post_is_retried_when_the_connect_fails);
    tcase_add_test(tc, locations_share_an_upstream_and_keep_their_timeouts);

    tc = test_daemon_case(suite, "buffering", 30);
    tcase_add_test(tc, buffered_slow_upload_holds_no_backend_connection);
    tcase_add_test(tc, buffered_chunked_body_goes_with_its_length);
    tcase_add_test(tc, buffered_body_beyond_the_buffer_goes_to_an_unlinked_file);
    tcase_add_test(tc, buffered_body_file_goes_when_the_client_does);
    tcase_add_test(tc, buffered_body_file_goes_when_the_backend_fails);
    tcase_add_test(tc, buffered_body_without_a_file_gives_500);
    tcase_add_test(tc, buffered_body_over_client_max_body_size_gives_413);
    tcase_add_test(tc, buffered_body_is_sent_again_to_the_next_server);
    tcase_add_test(tc, buffered_body_from_an_http2_client);

    tc = test_daemon_case(suite, "smuggling", 60);
    tcase_add_test(tc, malformed_requests_are_refused_before_the_backend);
    tcase_add_test(tc, malformed_request_after_a_valid_one_is_not_forwarded);
    tcase_add_test(tc, request_inside_a_body_stays_body);
    tcase_add_test(tc, fields_listed_in_a_later_connection_field_are_dropped);
    return suite;
}
