/*
 * test_bodies.c: bodies of 0 B to 100 MB, every framing, both ways, plain
 * and TLS, through build/corral with proxy_splice on and off, checked by
 * SHA-256; bounded memory for slow readers and writers on either side; no
 * leak when either side goes away mid-body.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))
#define MB           (1024u * 1024u)

/* ------------------------------------------------------------ the pattern */

/* Body byte i is pattern[i % PATTERN_LEN]: a prime length, so that no
 * read or chunk size lines up with it. */
#define PATTERN_LEN 1048573u
static unsigned char pattern[PATTERN_LEN];

static void pattern_init(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < PATTERN_LEN; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pattern[i] = (unsigned char)x;
    }
}

/* Bytes [offset, offset + len) of the pattern, a piece at a time. */
typedef void (*piece_fn)(void *arg, const unsigned char *data, size_t len);

static void pattern_pieces(uint64_t offset, uint64_t len, piece_fn fn, void *arg)
{
    while (len > 0) {
        size_t at = (size_t)(offset % PATTERN_LEN);
        size_t n = PATTERN_LEN - at < len ? PATTERN_LEN - at : (size_t)len;
        fn(arg, pattern + at, n);
        offset += n;
        len -= n;
    }
}

static EVP_MD_CTX *sha_new(void)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        abort(); /* also from backend threads */
    return ctx;
}

static void sha_piece(void *arg, const unsigned char *data, size_t len)
{
    EVP_DigestUpdate(arg, data, len);
}

/* Finishes and frees ctx: the digest in hex. */
static void sha_hex(EVP_MD_CTX *ctx, char hex[65])
{
    unsigned char md[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void pattern_sha(uint64_t len, char hex[65])
{
    EVP_MD_CTX *ctx = sha_new();
    pattern_pieces(0, len, sha_piece, ctx);
    sha_hex(ctx, hex);
}

/* ------------------------------------------------------- buffered reading */

struct reader {
    int fd;
    SSL *ssl; /* a TLS client's: client_connect() */
    char buf[64 * 1024];
    size_t off, len;
    int err;                /* 0, or the errno of the read that ended the stream */
    atomic_ullong *counter; /* bytes received, or NULL */
};

/* More bytes into an empty buffer; false at the end of the stream. */
static bool rd_fill(struct reader *r)
{
    if (r->off < r->len)
        return true;
    r->off = r->len = 0;
    ssize_t n;
    if (r->ssl != NULL) {
        n = SSL_read(r->ssl, r->buf, (int)sizeof(r->buf));
        if (n <= 0) {
            r->err = SSL_get_error(r->ssl, (int)n) == SSL_ERROR_ZERO_RETURN ? 0
                     : errno != 0                                           ? errno
                                                                            : EPROTO;
            return false;
        }
        r->len = (size_t)n;
        return true;
    }
    do
        n = recv(r->fd, r->buf, sizeof(r->buf), 0);
    while (n == -1 && errno == EINTR);
    if (n <= 0) {
        r->err = n == 0 ? 0 : errno;
        return false;
    }
    r->len = (size_t)n;
    if (r->counter != NULL)
        atomic_fetch_add(r->counter, (unsigned long long)n);
    return true;
}

/* One line without its CRLF, cut at `size` - 1; false at the end. */
static bool rd_line(struct reader *r, char *line, size_t size)
{
    size_t n = 0;
    for (;;) {
        if (!rd_fill(r))
            return false;
        char c = r->buf[r->off++];
        if (c == '\n')
            break;
        if (c != '\r' && n + 1 < size)
            line[n++] = c;
    }
    line[n] = '\0';
    return true;
}

/* Up to `len` body bytes into `ctx`; returns how many came. */
static uint64_t rd_body(struct reader *r, uint64_t len, EVP_MD_CTX *ctx)
{
    uint64_t got = 0;
    while (got < len && rd_fill(r)) {
        size_t n = r->len - r->off;
        if (n > len - got)
            n = (size_t)(len - got);
        EVP_DigestUpdate(ctx, r->buf + r->off, n);
        r->off += n;
        got += n;
    }
    return got;
}

/* A message head: its first line, and the framing its fields give. */
struct head {
    char first[256];
    bool has_length, chunked, close;
    uint64_t length;
    unsigned status;
};

static bool rd_head(struct reader *r, struct head *h)
{
    *h = (struct head){0};
    if (!rd_line(r, h->first, sizeof(h->first)))
        return false;
    if (strncmp(h->first, "HTTP/1.", 7) == 0 && strlen(h->first) >= 12)
        h->status = (unsigned)atoi(h->first + 9);
    char line[1024];
    for (int i = 0; i < 200; i++) {
        if (!rd_line(r, line, sizeof(line)))
            return false;
        if (line[0] == '\0')
            return true;
        if (strncasecmp(line, "content-length:", 15) == 0) {
            h->has_length = true;
            h->length = strtoull(line + 15, NULL, 10);
        } else if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
            h->chunked = strstr(line, "chunked") != NULL;
        } else if (strncasecmp(line, "connection:", 11) == 0) {
            h->close = strcasestr(line, "close") != NULL;
        }
    }
    return false;
}

/* A chunked body into ctx; returns its length, or -1 if its framing is
 * broken or it ends early. */
static int64_t rd_chunked(struct reader *r, EVP_MD_CTX *ctx)
{
    char line[256];
    int64_t total = 0;
    for (;;) {
        if (!rd_line(r, line, sizeof(line)))
            return -1;
        char *end;
        uint64_t size = strtoull(line, &end, 16);
        if (end == line)
            return -1;
        if (size == 0)
            break;
        if (rd_body(r, size, ctx) != size || !rd_line(r, line, sizeof(line)) || line[0] != '\0')
            return -1;
        total += (int64_t)size;
    }
    for (int i = 0; i < 16; i++) /* trailers, then the empty line */
        if (!rd_line(r, line, sizeof(line)) || line[0] == '\0')
            return line[0] == '\0' ? total : -1;
    return -1;
}

/* ---------------------------------------------------------------- sending */

struct sender {
    int fd;
    SSL *ssl;
    bool failed;
    unsigned pause_us;      /* a slow writer: this long after each piece of at most 16 KiB */
    atomic_ullong *counter; /* bytes sent, or NULL */
};

static void send_piece(void *arg, const unsigned char *data, size_t len)
{
    struct sender *s = arg;
    while (len > 0 && !s->failed) {
        size_t want = s->pause_us > 0 && len > 16384 ? 16384 : len;
        if (s->pause_us > 0)
            usleep(s->pause_us);
        if (s->ssl != NULL) {
            int n = SSL_write(s->ssl, data, (int)(want < INT32_MAX ? want : INT32_MAX));
            if (n <= 0) {
                s->failed = true;
                return;
            }
            data += n;
            len -= (size_t)n;
            if (s->counter != NULL)
                atomic_fetch_add(s->counter, (unsigned long long)n);
            continue;
        }
        ssize_t n = send(s->fd, data, want, MSG_NOSIGNAL);
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            s->failed = true;
            return;
        }
        data += n;
        len -= (size_t)n;
        if (s->counter != NULL)
            atomic_fetch_add(s->counter, (unsigned long long)n);
    }
}

/* Waits until `*counter`, a writer's bytes sent, has grown and then not
 * for 300 ms (the writer blocked: all it may get into the pipeline is in),
 * or for TEST_WAIT_MS at most. */
static void wait_stalled(atomic_ullong *counter)
{
    unsigned long long last = atomic_load(counter);
    uint64_t since = test_now_ms(), end = since + TEST_WAIT_MS;
    while (test_now_ms() < end && (last == 0 || test_now_ms() - since < 300)) {
        test_sleep_ms(10);
        unsigned long long now = atomic_load(counter);
        if (now != last) {
            last = now;
            since = test_now_ms();
        }
    }
}

static void send_text(struct sender *s, const char *text)
{
    send_piece(s, (const unsigned char *)text, strlen(text));
}

/* Chunks of this size (a last shorter one): several go by, and each is
 * long enough for the proxy to splice its data.  A case may set larger
 * ones, whose rest after a first read still passes the threshold. */
#define CHUNK 300000u
static uint64_t chunk_size = CHUNK;

static void send_body(struct sender *s, uint64_t len, bool chunked)
{
    if (!chunked) {
        pattern_pieces(0, len, send_piece, s);
        return;
    }
    for (uint64_t at = 0; at < len && !s->failed; at += chunk_size) {
        uint64_t n = len - at < chunk_size ? len - at : chunk_size;
        char size_line[32];
        snprintf(size_line, sizeof(size_line), "%" PRIx64 "\r\n", n);
        send_text(s, size_line);
        pattern_pieces(at, n, send_piece, s);
        send_text(s, "\r\n");
    }
    send_text(s, "0\r\n\r\n");
}

/* ---------------------------------------------------------------- clients */

/* Set by a case whose daemon speaks TLS: its clients do too. */
static SSL_CTX *client_ctx;

static struct reader *client_connect(int port)
{
    struct reader *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->fd = test_connect(port);
    if (client_ctx != NULL) {
        r->ssl = SSL_new(client_ctx);
        ck_assert_ptr_nonnull(r->ssl);
        SSL_set_fd(r->ssl, r->fd);
        ck_assert_int_eq(SSL_connect(r->ssl), 1);
    }
    return r;
}

static void client_close(struct reader *r)
{
    if (r->ssl != NULL)
        SSL_free(r->ssl);
    close(r->fd);
    free(r);
}

/* ---------------------------------------------------------------- backend */

/* Answers, on each connection, one request after another:
 *   GET /dl/SIZE/cl|chunked|close   SIZE pattern bytes in that framing
 *   GET /slow/SIZE                  SIZE bytes with a length, trickled
 *   GET /die/SIZE/AT                announces SIZE, sends AT, then resets
 *   POST /up                        "LENGTH SHA256" of the body received
 *   POST /stall/MS                  the same, after MS without reading
 *                                   (or until stall_release is set)
 *   POST /dieup/AT                  reads AT bytes of the body, then resets */
/* The connection threads are detached, but counted and their sockets
 * kept, so that backend_stop() can end them and wait: a thread still in
 * OpenSSL's digest code when the case's process exits races OpenSSL's
 * cleanup at exit. */
#define BACKEND_CONNS 256
struct backend {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    int conns[BACKEND_CONNS]; /* -1: a free slot */
    atomic_int live;
    atomic_ullong received; /* every byte received */
    atomic_ullong sent;     /* every byte sent */
};

/* Ends a /stall before its time: the test has seen what it wanted. */
static atomic_bool stall_release;

struct backend_conn_arg {
    struct backend *b;
    struct reader *r;
    int slot;
};

static void backend_answer_upload(struct reader *r, struct sender *s, const struct head *h)
{
    EVP_MD_CTX *ctx = sha_new();
    int64_t len = -1;
    if (h->chunked)
        len = rd_chunked(r, ctx);
    else if (h->has_length && rd_body(r, h->length, ctx) == h->length)
        len = (int64_t)h->length;
    char hex[65], body[128], head[128];
    sha_hex(ctx, hex);
    int n = snprintf(body, sizeof(body), "%" PRId64 " %s", len, hex);
    snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", n);
    send_text(s, head);
    send_text(s, body);
}

/* Returns whether the connection goes on. */
static bool backend_answer(struct reader *r, struct sender *s, const struct head *h)
{
    char method[16] = "", path[128] = "";
    if (sscanf(h->first, "%15s %127s", method, path) != 2)
        return false;
    unsigned long long size = 0, at = 0;
    if (strcmp(method, "POST") == 0 && sscanf(path, "/dieup/%llu", &at) == 1) {
        EVP_MD_CTX *ctx = sha_new();
        rd_body(r, at, ctx);
        EVP_MD_CTX_free(ctx);
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
        return false;
    }
    if (strcmp(method, "POST") == 0) {
        if (sscanf(path, "/stall/%llu", &at) == 1)
            for (uint64_t end = test_now_ms() + at;
                 !atomic_load(&stall_release) && test_now_ms() < end;)
                test_sleep_ms(TEST_POLL_MS);
        backend_answer_upload(r, s, h);
        return !s->failed;
    }
    char framing[16] = "";
    char head[256];
    if (sscanf(path, "/slow/%llu", &size) == 1) {
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n\r\n", size);
        send_text(s, head);
        s->pause_us = 2000;
        pattern_pieces(0, size, send_piece, s);
        s->pause_us = 0;
        return !s->failed;
    }
    if (sscanf(path, "/die/%llu/%llu", &size, &at) == 2) {
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n\r\n", size);
        send_text(s, head);
        pattern_pieces(0, at, send_piece, s);
        usleep(100 * 1000); /* let the proxy take them before the reset */
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
        return false;
    }
    if (sscanf(path, "/dl/%llu/%15s", &size, framing) != 2)
        return false;
    bool chunked = strcmp(framing, "chunked") == 0, close = strcmp(framing, "close") == 0;
    if (chunked)
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    else if (close)
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    else
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n\r\n", size);
    send_text(s, head);
    send_body(s, size, chunked);
    return !close && !s->failed;
}

static void *backend_conn(void *arg)
{
    struct backend_conn_arg *a = arg;
    struct reader *r = a->r;
    struct sender s = {.fd = r->fd, .counter = &a->b->sent};
    struct head h;
    for (int i = 0; i < 10000 && rd_head(r, &h) && backend_answer(r, &s, &h); i++)
        ;
    pthread_mutex_lock(&a->b->lock);
    a->b->conns[a->slot] = -1;
    pthread_mutex_unlock(&a->b->lock);
    close(r->fd);
    free(r);
    atomic_fetch_sub_explicit(&a->b->live, 1, memory_order_release);
    free(a);
    return NULL;
}

static void *backend_main(void *arg)
{
    struct backend *b = arg;
    for (;;) {
        int fd = accept(b->fd, NULL, NULL);
        if (fd == -1)
            return NULL; /* the listener closed */
        struct reader *r = calloc(1, sizeof(*r));
        if (r == NULL)
            abort();
        r->fd = fd;
        r->counter = &b->received;
        struct backend_conn_arg *a = calloc(1, sizeof(*a));
        if (a == NULL)
            abort();
        *a = (struct backend_conn_arg){.b = b, .r = r, .slot = -1};
        pthread_mutex_lock(&b->lock);
        for (int i = 0; i < BACKEND_CONNS && a->slot < 0; i++)
            if (b->conns[i] == -1)
                a->slot = i;
        if (a->slot >= 0)
            b->conns[a->slot] = fd;
        pthread_mutex_unlock(&b->lock);
        if (a->slot < 0)
            abort(); /* more connections at once than any case opens */
        atomic_fetch_add_explicit(&b->live, 1, memory_order_relaxed);
        pthread_t t;
        if (pthread_create(&t, NULL, backend_conn, a) != 0)
            abort();
        pthread_detach(t);
    }
}

static void backend_start(struct backend *b)
{
    b->fd = test_listen(&b->port, 64);
    pthread_mutex_init(&b->lock, NULL);
    for (int i = 0; i < BACKEND_CONNS; i++)
        b->conns[i] = -1;
    atomic_init(&b->live, 0);
    atomic_init(&b->received, 0);
    atomic_init(&b->sent, 0);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, backend_main, b), 0);
}

/* Stops accepting, ends every connection, and waits (up to 10 s) until
 * their threads are done. */
static void backend_stop(struct backend *b)
{
    shutdown(b->fd, SHUT_RDWR);
    pthread_join(b->thread, NULL);
    close(b->fd);
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < BACKEND_CONNS; i++)
        if (b->conns[i] != -1)
            shutdown(b->conns[i], SHUT_RDWR);
    pthread_mutex_unlock(&b->lock);
    for (int i = 0; i < 1000 && atomic_load_explicit(&b->live, memory_order_acquire) > 0; i++)
        usleep(10000);
}

/* ----------------------------------------------------------------- daemon */

/* With `tls`, the clients speak TLS to it (client_connect()), with a
 * certificate made for the case. */
static void daemon_start_tls(struct test_daemon *d, const struct backend *b, bool splice, bool tls)
{
    test_daemon_init(d, "corral");
    char tls_lines[256] = "";
    if (tls) {
        char dir[] = "/tmp/corral-bodies-XXXXXX", cmd[512];
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(cmd, sizeof(cmd),
                 "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                 "-nodes -keyout t.key -out t.pem -subj /CN=t -days 1 >/dev/null 2>&1",
                 dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(tls_lines, sizeof(tls_lines),
                 " tls;\n    tls_certificate %s/t.pem;\n    tls_certificate_key %s/t.key", dir,
                 dir);
        client_ctx = SSL_CTX_new(TLS_client_method());
        ck_assert_ptr_nonnull(client_ctx);
    }
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\nproxy_splice %s;\n"
             "upstream b {\n    server 127.0.0.1:%d;\n    keepalive 8;\n}\n"
             "server {\n    listen 127.0.0.1:0%s;\n    client_max_body_size 0;\n"
             "    location / { proxy_pass http://b; }\n}\n",
             splice ? "on" : "off", b->port, tls_lines);
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

static void daemon_start(struct test_daemon *d, const struct backend *b, bool splice)
{
    daemon_start_tls(d, b, splice, false);
}

static long daemon_rss_kb(const struct test_daemon *d)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
    char *status = test_read_file(path);
    const char *line = strstr(status, "\nVmRSS:");
    long kb = line != NULL ? atol(line + 7) : -1;
    free(status);
    return kb;
}

static int daemon_fd_count(const struct test_daemon *d)
{
    char cmd[96], out[32] = "";
    snprintf(cmd, sizeof(cmd), "ls /proc/%d/fd | wc -l", (int)d->pid);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    if (fgets(out, sizeof(out), p) == NULL)
        out[0] = '\0';
    pclose(p);
    return atoi(out);
}

/* ---------------------------------------------------------------- clients */

/* Sends `request` and reads the response to it: its head into *h, the
 * body's length (-1: broken framing or cut short) and SHA-256.  A body
 * without a length or chunks ends with the stream. */
static int64_t exchange(struct reader *r, const char *request, struct head *h, char hex[65])
{
    struct sender s = {.fd = r->fd, .ssl = r->ssl};
    send_text(&s, request);
    ck_assert(!s.failed);
    ck_assert_msg(rd_head(r, h), "no response head to %s", request);
    EVP_MD_CTX *ctx = sha_new();
    int64_t len;
    if (h->chunked)
        len = rd_chunked(r, ctx);
    else if (h->has_length)
        len = rd_body(r, h->length, ctx) == h->length ? (int64_t)h->length : -1;
    else
        len = (int64_t)rd_body(r, UINT64_MAX, ctx);
    sha_hex(ctx, hex);
    return len;
}

static const uint64_t sizes[] = {0, 1, 4096, 64 * 1024 + 1, MB, 3 * MB + 7};
static const char *const framings[] = {"cl", "chunked", "close"};

/* One download: the body and its framing; an HTTP/1.1 client then asks
 * again on the same connection, which works only if the framing was
 * exact. */
static void check_download(int port, uint64_t size, const char *framing, bool http10)
{
    struct reader *r = client_connect(port);
    char request[256], hex[65], want[65];
    snprintf(request, sizeof(request), "GET /dl/%" PRIu64 "/%s HTTP/1.%d\r\nHost: t\r\n\r\n", size,
             framing, http10 ? 0 : 1);
    struct head h;
    int64_t got = exchange(r, request, &h, hex);
    pattern_sha(size, want);
    ck_assert_msg(h.status == 200, "%s: %s", request, h.first);
    ck_assert_msg(got == (int64_t)size && strcmp(hex, want) == 0,
                  "GET /dl/%" PRIu64 "/%s HTTP/1.%d: %" PRId64 " bytes, sha %.12s", size, framing,
                  http10 ? 0 : 1, got, hex);
    bool cl = strcmp(framing, "cl") == 0;
    ck_assert_msg(h.has_length == cl && h.chunked == (!cl && !http10), "%s: framed as %s", request,
                  h.has_length ? "a length"
                  : h.chunked  ? "chunks"
                               : "the close");
    if (!http10)
        ck_assert_int_eq((int)exchange(r, "GET /dl/5/cl HTTP/1.1\r\nHost: t\r\n\r\n", &h, hex), 5);
    client_close(r);
}

/* One upload, with a length (HTTP/1.1 or 1.0) or chunked, to `path`
 * (see the backend), the client pausing `pause_us` after each piece. */
static void check_upload_to(int port, const char *path, uint64_t size, const char *framing,
                            unsigned pause_us)
{
    struct reader *r = client_connect(port);
    bool chunked = strcmp(framing, "chunked") == 0, http10 = strcmp(framing, "1.0") == 0;
    char head[256];
    if (chunked)
        snprintf(head, sizeof(head),
                 "POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", path);
    else
        snprintf(head, sizeof(head),
                 "POST %s HTTP/1.%d\r\nHost: t\r\nContent-Length: %" PRIu64 "\r\n\r\n", path,
                 http10 ? 0 : 1, size);
    struct sender s = {.fd = r->fd, .ssl = r->ssl};
    send_text(&s, head);
    s.pause_us = pause_us;
    send_body(&s, size, chunked);
    ck_assert(!s.failed);
    struct head h;
    ck_assert(rd_head(r, &h));
    ck_assert_msg(h.status == 200 && h.has_length && h.length < 128, "%s", h.first);
    char body[128] = "", want[128], hex[65];
    size_t n = (size_t)h.length;
    for (size_t i = 0; i < n && rd_fill(r); i++)
        body[i] = r->buf[r->off++];
    pattern_sha(size, hex);
    snprintf(want, sizeof(want), "%" PRIu64 " %s", size, hex);
    ck_assert_msg(strcmp(body, want) == 0, "upload of %" PRIu64 " (%s): backend got %s", size,
                  framing, body);
    /* The framing was exact: the connection goes on. */
    if (!http10) {
        char hex2[65];
        ck_assert_int_eq((int)exchange(r, "GET /dl/5/cl HTTP/1.1\r\nHost: t\r\n\r\n", &h, hex2), 5);
    }
    client_close(r);
}

static void check_upload(int port, uint64_t size, const char *framing)
{
    check_upload_to(port, "/up", size, framing, 0);
}

/* ------------------------------------------------------------------ cases */

/* _i: bit 0 splice on, bit 1 an HTTP/1.0 client. */
START_TEST(downloads_arrive_whole)
{
    bool splice = _i & 1, http10 = _i & 2;
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, splice);
    for (int s = 0; s < COUNT(sizes); s++)
        for (int f = 0; f < COUNT(framings); f++)
            check_download(d.port, sizes[s], framings[f], http10);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

static const char *const upload_framings[] = {"cl", "chunked", "1.0"};

START_TEST(uploads_arrive_whole)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    for (int s = 0; s < COUNT(sizes); s++)
        for (int f = 0; f < COUNT(upload_framings); f++)
            check_upload(d.port, sizes[s], upload_framings[f]);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* 100 MB each way, spliced where it applies. */
START_TEST(hundred_megabytes_each_way)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, true);
    check_download(d.port, 100 * MB, "cl", false);
    check_download(d.port, 100 * MB, "chunked", false);
    check_upload(d.port, 100 * MB, "cl");
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A client that stops reading a 64 MB body: the daemon holds a bounded
 * part of it (watermarks, pipe), not the whole; then all of it arrives. */
START_TEST(slow_reader_keeps_memory_bounded)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false); /* the daemon's buffers and pools in use once */
    long base = daemon_rss_kb(&d);
    struct reader *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->fd = test_connect(d.port);
    const uint64_t size = 64 * MB;
    const char *request = "GET /dl/67108864/cl HTTP/1.1\r\nHost: t\r\n\r\n";
    test_send_all(r->fd, request, strlen(request));
    struct head h;
    ck_assert(rd_head(r, &h));
    ck_assert(h.has_length && h.length == size);
    EVP_MD_CTX *ctx = sha_new();
    uint64_t got = rd_body(r, MB, ctx);
    wait_stalled(&b.sent); /* the backend fills whatever the proxy lets it */
    long held = daemon_rss_kb(&d) - base;
    ck_assert_msg(held < 24 * 1024, "the daemon grew by %ld KiB for a stalled reader", held);
    got += rd_body(r, size - got, ctx);
    char hex[65], want[65];
    sha_hex(ctx, hex);
    pattern_sha(size, want);
    ck_assert(got == size && strcmp(hex, want) == 0);
    close(r->fd);
    free(r);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* The backend resets after 2 MB of a 10 MB body: the client is reset too
 * (never a clean end it could take for the whole), and the daemon's
 * descriptors come back to their count (no pipe or socket left over). */
START_TEST(backend_dying_mid_body_resets_the_client)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false);
    int before = daemon_fd_count(&d);
    struct reader *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->fd = test_connect(d.port);
    const char *request = "GET /die/10485760/2097152 HTTP/1.1\r\nHost: t\r\n\r\n";
    test_send_all(r->fd, request, strlen(request));
    struct head h;
    ck_assert(rd_head(r, &h));
    ck_assert(h.has_length && h.length == 10 * MB);
    EVP_MD_CTX *ctx = sha_new();
    uint64_t got = rd_body(r, h.length, ctx);
    EVP_MD_CTX_free(ctx);
    ck_assert_msg(got < h.length && r->err == ECONNRESET, "got %" PRIu64 ", end: %s", got,
                  strerror(r->err));
    close(r->fd);
    free(r);
    /* Back to one pooled upstream connection and one pooled pipe. */
    check_download(d.port, MB, "cl", false);
    test_wait_for(daemon_fd_count(&d) == before, 5000, "%d descriptors, %d before",
                  daemon_fd_count(&d), before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A client that resets its connection 1 MB into a 64 MB body: the daemon
 * lets go of the backend connection and of the pipe, and its descriptors
 * come back to their count. */
START_TEST(client_leaving_mid_body_frees_everything)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false);
    int before = daemon_fd_count(&d);
    struct reader *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->fd = test_connect(d.port);
    const char *request = "GET /dl/67108864/cl HTTP/1.1\r\nHost: t\r\n\r\n";
    test_send_all(r->fd, request, strlen(request));
    struct head h;
    ck_assert(rd_head(r, &h));
    EVP_MD_CTX *ctx = sha_new();
    ck_assert(rd_body(r, MB, ctx) == MB);
    EVP_MD_CTX_free(ctx);
    struct linger linger = {.l_onoff = 1, .l_linger = 0};
    ck_assert_int_eq(setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger)), 0);
    close(r->fd);
    free(r);
    check_download(d.port, MB, "cl", false);
    test_wait_for(daemon_fd_count(&d) == before, 5000, "%d descriptors, %d before",
                  daemon_fd_count(&d), before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* TLS clients (never spliced: their bytes pass through OpenSSL) get and
 * send every framing whole, whatever proxy_splice says. */
START_TEST(tls_clients_get_and_send_whole)
{
    static const uint64_t tls_sizes[] = {0, 1, 64 * 1024 + 1, MB, 5 * MB + 3};
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start_tls(&d, &b, _i == 1, true);
    for (int s = 0; s < COUNT(tls_sizes); s++) {
        for (int f = 0; f < COUNT(framings); f++) {
            check_download(d.port, tls_sizes[s], framings[f], false);
            check_download(d.port, tls_sizes[s], framings[f], true);
        }
        for (int f = 0; f < COUNT(upload_framings); f++)
            check_upload(d.port, tls_sizes[s], upload_framings[f]);
    }
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* The daemon's descriptors that are pipes (a splice's, or pooled). */
static int daemon_pipe_count(const struct test_daemon *d)
{
    char cmd[128], out[32] = "";
    snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd | grep -c pipe:", (int)d->pid);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    if (fgets(out, sizeof(out), p) == NULL)
        out[0] = '\0';
    pclose(p);
    return atoi(out);
}

struct stalled_upload {
    int port;
    uint64_t size;
    bool chunked;
    char result[128]; /* what the backend said it got */
    atomic_ullong sent;
};

static void *stalled_upload_main(void *arg)
{
    struct stalled_upload *u = arg;
    struct reader *r = client_connect(u->port);
    char head[128];
    if (u->chunked)
        snprintf(head, sizeof(head),
                 "POST /stall/3000 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    else
        snprintf(head, sizeof(head),
                 "POST /stall/3000 HTTP/1.1\r\nHost: t\r\nContent-Length: %" PRIu64 "\r\n\r\n",
                 u->size);
    struct sender s = {.fd = r->fd, .ssl = r->ssl, .counter = &u->sent};
    send_text(&s, head);
    send_body(&s, u->size, u->chunked);
    struct head h;
    if (!s.failed && rd_head(r, &h) && h.status == 200 && h.has_length && h.length < 128)
        for (size_t i = 0; i < h.length && rd_fill(r); i++)
            u->result[i] = r->buf[r->off++];
    client_close(r);
    return NULL;
}

/* A backend that reads nothing of a 64 MB upload until the client can send
 * no more (or 3 s pass): the daemon holds a bounded part of it; spliced,
 * that part waits in a kernel pipe.  Then all of it arrives.  _i: bit 0 splice on, bit 1 chunked (8
 * MiB chunks, whose data is spliced after each size line). */
START_TEST(slow_backend_reader_keeps_memory_bounded)
{
    bool splice = _i & 1;
    chunk_size = 8 * MB;
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, splice);
    check_upload(d.port, 64 * 1024 + 1, "cl"); /* buffers in use once; too short to splice */
    long base = daemon_rss_kb(&d);
    int pipes = daemon_pipe_count(&d);
    atomic_store(&stall_release, false);
    struct stalled_upload u = {.port = d.port, .size = 64 * MB, .chunked = _i & 2};
    atomic_init(&u.sent, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, stalled_upload_main, &u), 0);
    wait_stalled(&u.sent); /* the client fills whatever the proxy lets it */
    long held = daemon_rss_kb(&d) - base;
    int pipes_held = daemon_pipe_count(&d) - pipes;
    atomic_store(&stall_release, true); /* rather than wait out the rest */
    pthread_join(t, NULL);
    ck_assert_msg(held < 24 * 1024, "the daemon grew by %ld KiB for a stalled backend", held);
    ck_assert_msg(pipes_held == (splice ? 2 : 0), "%d pipe descriptors in use", pipes_held);
    char hex[65], want[128];
    pattern_sha(u.size, hex);
    snprintf(want, sizeof(want), "%" PRIu64 " %s", u.size, hex);
    ck_assert_msg(strcmp(u.result, want) == 0, "the backend got %s", u.result);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* With proxy_splice on, a 16 MB download to a client that stops reading:
 * on a keep-alive connection the rest of the body waits in a kernel pipe,
 * but the last response of a connection (the client asked to close) is
 * copied, which measured faster.  Then all of it arrives.  _i: 1 the
 * client sends Connection: close. */
START_TEST(last_response_of_a_connection_is_copied)
{
    bool closes = _i == 1;
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, true);
    check_download(d.port, 64 * 1024 + 1, "cl", false); /* too short to splice */
    int pipes = daemon_pipe_count(&d);
    struct reader *r = client_connect(d.port);
    char request[128], hex[65], want[65];
    snprintf(request, sizeof(request), "GET /dl/%d/cl HTTP/1.1\r\nHost: t\r\n%s\r\n", 16 * MB,
             closes ? "Connection: close\r\n" : "");
    struct sender s = {.fd = r->fd, .ssl = r->ssl};
    send_text(&s, request);
    /* The proxy fills what the client's socket takes: 500 ms for the
     * copy to show it holds no pipe; a splice shows its pipe at once. */
    int pipes_held = 0;
    for (uint64_t end = test_now_ms() + 500; pipes_held != 2 && test_now_ms() < end;) {
        test_sleep_ms(TEST_POLL_MS);
        pipes_held = daemon_pipe_count(&d) - pipes;
    }
    struct head h;
    ck_assert(rd_head(r, &h));
    EVP_MD_CTX *ctx = sha_new();
    uint64_t got = rd_body(r, h.length, ctx);
    sha_hex(ctx, hex);
    pattern_sha(16 * MB, want);
    ck_assert_msg(got == 16 * MB && strcmp(hex, want) == 0, "%" PRIu64 " bytes", got);
    ck_assert_msg(pipes_held == (closes ? 0 : 2), "%d pipe descriptors in use", pipes_held);
    client_close(r);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A client trickling an upload and a backend trickling a download, 2 MB
 * each, 16 KiB every 2 ms: whole, and the daemon stays small. */
START_TEST(slow_writers_on_either_side)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false);
    long base = daemon_rss_kb(&d);
    check_upload_to(d.port, "/up", 2 * MB, "cl", 2000);
    check_upload_to(d.port, "/up", 2 * MB, "chunked", 2000);
    struct reader *r = client_connect(d.port);
    struct head h;
    char hex[65], want[65];
    int64_t got = exchange(r, "GET /slow/2097152 HTTP/1.1\r\nHost: t\r\n\r\n", &h, hex);
    pattern_sha(2 * MB, want);
    ck_assert_msg(got == 2 * MB && strcmp(hex, want) == 0, "%" PRId64 " bytes", got);
    client_close(r);
    long held = daemon_rss_kb(&d) - base;
    ck_assert_msg(held < 24 * 1024, "the daemon grew by %ld KiB", held);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* The backend resets after 2 MB of a 16 MB upload: the client gets a 502
 * (the response had not begun), the rest of its body is read and dropped,
 * and the daemon's descriptors come back to their count. */
START_TEST(backend_dying_mid_upload_answers_502)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false);
    int before = daemon_fd_count(&d);
    struct reader *r = client_connect(d.port);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const uint64_t size = 16 * MB;
    char head[128];
    snprintf(head, sizeof(head),
             "POST /dieup/2097152 HTTP/1.1\r\nHost: t\r\nContent-Length: %" PRIu64 "\r\n\r\n",
             size);
    struct sender s = {.fd = r->fd};
    send_text(&s, head);
    send_body(&s, size, false);
    ck_assert_msg(!s.failed, "the daemon stopped reading the body: %s", strerror(errno));
    struct head h;
    ck_assert(rd_head(r, &h));
    ck_assert_msg(h.status == 502, "%s", h.first);
    client_close(r);
    check_download(d.port, MB, "cl", false); /* a pooled connection and pipe again */
    test_wait_for(daemon_fd_count(&d) == before, 5000, "%d descriptors, %d before",
                  daemon_fd_count(&d), before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

/* A client that resets its connection 4 MB into a 64 MB upload: the
 * daemon lets go of the backend connection and of the pipe. */
START_TEST(client_leaving_mid_upload_frees_everything)
{
    struct backend b;
    backend_start(&b);
    struct test_daemon d;
    daemon_start(&d, &b, _i == 1);
    check_download(d.port, MB, "cl", false);
    int before = daemon_fd_count(&d);
    struct reader *r = client_connect(d.port);
    const char *head = "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 67108864\r\n\r\n";
    unsigned long long upstream = atomic_load(&b.received);
    struct sender s = {.fd = r->fd};
    send_text(&s, head);
    pattern_pieces(0, 4 * MB, send_piece, &s);
    ck_assert(!s.failed);
    /* Under way on the upstream, spliced or not. */
    test_wait_for(atomic_load(&b.received) >= upstream + MB, TEST_WAIT_MS,
                  "%llu bytes of the upload at the backend", atomic_load(&b.received) - upstream);
    struct linger linger = {.l_onoff = 1, .l_linger = 0};
    ck_assert_int_eq(setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger)), 0);
    client_close(r);
    check_download(d.port, MB, "cl", false);
    test_wait_for(daemon_fd_count(&d) == before, 5000, "%d descriptors, %d before",
                  daemon_fd_count(&d), before);
    test_daemon_stop(&d);
    backend_stop(&b);
}
END_TEST

Suite *test_suite(void)
{
    pattern_init();
    Suite *suite = suite_create("proto/bodies");
    TCase *tc = test_daemon_case(suite, "framings", 60);
    tcase_add_loop_test(tc, downloads_arrive_whole, 0, 4);
    tcase_add_loop_test(tc, uploads_arrive_whole, 0, 2);
    tc = test_daemon_case(suite, "large", 90);
    tcase_add_test(tc, hundred_megabytes_each_way);
    tcase_add_loop_test(tc, slow_reader_keeps_memory_bounded, 0, 2);
    tcase_add_loop_test(tc, backend_dying_mid_body_resets_the_client, 0, 2);
    tcase_add_loop_test(tc, client_leaving_mid_body_frees_everything, 0, 2);
    tcase_add_loop_test(tc, slow_backend_reader_keeps_memory_bounded, 0, 4);
    tcase_add_loop_test(tc, slow_writers_on_either_side, 0, 2);
    tcase_add_loop_test(tc, last_response_of_a_connection_is_copied, 0, 2);
    tcase_add_loop_test(tc, backend_dying_mid_upload_answers_502, 0, 2);
    tcase_add_loop_test(tc, client_leaving_mid_upload_frees_everything, 0, 2);
    tc = test_daemon_case(suite, "tls", 90);
    tcase_add_loop_test(tc, tls_clients_get_and_send_whole, 0, 2);
    return suite;
}
