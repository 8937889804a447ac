/*
 * test_cache_daemon.c: the HTTP cache through build/corral over real
 * sockets, a counting backend behind proxy_pass: hits and misses with
 * $upstream_cache_status, the RFC 9111 rules that keep a response out,
 * expiry, Vary variants, Range and HEAD from a stored GET, bypass and
 * proxy_no_cache, min_uses, a corrupted file, a restart after SIGKILL in
 * the middle of a store (the loader), a reload that keeps the hits,
 * eviction under max_size and a full disk (a small tmpfs).
 */
#include "../daemon.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- backend */

#define BIG_LEN (1024 * 1024)
static char big[BIG_LEN];

static atomic_uint requests;       /* every request the backend answered */
static atomic_uint collapse_asked; /* requests for /collapse* */
static atomic_bool collapse_release;
static atomic_int fail_mode;     /* for /stale*, /sie, /mr: 1 close at once, 2 answer 500 */
static atomic_uint hold_asked;   /* requests for paths with "hold" in them */
static atomic_uint not_modified; /* 304s the backend sent */
static atomic_bool stall_release;
static atomic_bool stalled; /* /stall sent its first half */

static const char *header_value(const char *req, const char *name, char *out, size_t size)
{
    const char *p = strcasestr(req, name);
    out[0] = '\0';
    if (p == NULL)
        return out;
    p += strlen(name);
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "\r\n");
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
    return out;
}

static void backend_serve(int fd, void *data)
{
    (void)data;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[8192];
    if (!test_recv_head(fd, req, sizeof(req)))
        return;
    unsigned n = atomic_fetch_add(&requests, 1) + 1;
    const char *path = strchr(req, ' ');
    if (path == NULL)
        return;
    path++;
    char body[256], head[512], value[128];
    snprintf(body, sizeof(body), "answer %u", n);
    const char *extra = "Cache-Control: max-age=60\r\n";
    if (strncmp(path, "/nostore", 8) == 0)
        extra = "Cache-Control: no-store\r\n";
    else if (strncmp(path, "/private", 8) == 0)
        extra = "Cache-Control: private, max-age=60\r\n";
    else if (strncmp(path, "/nocc", 5) == 0)
        extra = "";
    else if (strncmp(path, "/cookie", 7) == 0)
        extra = "Cache-Control: max-age=60\r\nSet-Cookie: id=1\r\n";
    else if (strncmp(path, "/short", 6) == 0 || strncmp(path, "/stale", 6) == 0 ||
             strncmp(path, "/bg/", 4) == 0)
        extra = "Cache-Control: max-age=1\r\n";
    else if (strncmp(path, "/sie", 4) == 0)
        extra = "Cache-Control: max-age=1, stale-if-error=60\r\n";
    else if (strncmp(path, "/mr", 3) == 0)
        extra = "Cache-Control: max-age=1, must-revalidate\r\n";
    else if (strncmp(path, "/public", 7) == 0)
        extra = "Cache-Control: public, max-age=60\r\n";
    else if (strncmp(path, "/vary", 5) == 0) {
        extra = "Cache-Control: max-age=60\r\nVary: Accept-Language\r\n";
        snprintf(body, sizeof(body), "answer %u for %s", n,
                 header_value(req, "\r\nAccept-Language:", value, sizeof(value)));
    } else if (strncmp(path, "/echo-range", 11) == 0) {
        /* What the backend was asked: the cache must not pass Range on. */
        snprintf(body, sizeof(body), "range [%s]",
                 header_value(req, "\r\nRange:", value, sizeof(value)));
    }
    bool may_fail = strncmp(path, "/stale", 6) == 0 || strncmp(path, "/sie", 4) == 0 ||
                    strncmp(path, "/mr", 3) == 0 || strncmp(path, "/bg/", 4) == 0;
    int mode = may_fail ? atomic_load(&fail_mode) : 0;
    if (mode == 1)
        return; /* closed with no response: an error */
    if (mode == 2) {
        test_send_head(fd, "500 Internal Server Error\r\n", 0);
        return;
    }
    if (strncmp(path, "/reval/", 7) == 0) {
        char inm[64];
        if (strcmp(header_value(req, "\r\nIf-None-Match:", inm, sizeof(inm)), "\"v1\"") == 0) {
            atomic_fetch_add(&not_modified, 1);
            static const char nm[] = "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\n"
                                     "ETag: \"v1\"\r\nConnection: close\r\n\r\n";
            test_send_all(fd, nm, sizeof(nm) - 1);
            return;
        }
        snprintf(body, sizeof(body), "answer %u", n);
        test_send_head(fd, "200 OK\r\nCache-Control: max-age=3\r\nETag: \"v1\"\r\n", strlen(body));
        test_send_all(fd, body, strlen(body));
        return;
    }
    if (strncmp(path, "/stale/hold", 11) == 0 || strncmp(path, "/bg/hold", 8) == 0) {
        atomic_fetch_add(&hold_asked, 1);
        for (int i = 0; i < 5000 && !atomic_load(&collapse_release); i++)
            usleep(2000);
        /* The proxy may have cut this request off meanwhile (a reload's
         * drain): the answer goes, or not. */
        int len = snprintf(head, sizeof(head),
                           "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%sContent-Length: "
                           "%zu\r\nConnection: close\r\n\r\n%s",
                           extra, strlen(body), body);
        (void)send(fd, head, (size_t)len, MSG_NOSIGNAL);
        return;
    }
    if (strncmp(path, "/collapse", 9) == 0) {
        atomic_fetch_add(&collapse_asked, 1);
        for (int i = 0; i < 5000 && !atomic_load(&collapse_release); i++)
            usleep(2000);
    }
    if (strncmp(path, "/big", 4) == 0 || strncmp(path, "/stall", 6) == 0) {
        test_send_head(fd, "200 OK\r\nCache-Control: max-age=60\r\n", BIG_LEN);
        if (strncmp(path, "/stall", 6) == 0) {
            test_send_all(fd, big, BIG_LEN / 2);
            atomic_store(&stalled, true);
            for (int i = 0; i < 5000 && !atomic_load(&stall_release); i++)
                usleep(2000);
            test_send_all(fd, big + BIG_LEN / 2, BIG_LEN / 2);
        } else {
            test_send_all(fd, big, BIG_LEN);
        }
        return;
    }
    snprintf(head, sizeof(head), "200 OK\r\nContent-Type: text/plain\r\n%s", extra);
    test_send_head(fd, head, strlen(body));
    if (strncmp(req, "HEAD ", 5) != 0)
        test_send_all(fd, body, strlen(body));
}

/* -------------------------------------------------------------- daemon */

static struct test_backend backend;
static struct test_daemon daemon_;
static char cache_dir[PATH_MAX];
static char admin_extra[PATH_MAX + 64]; /* in the admin block */

static void write_config(const char *zone_extra, const char *loc_extra)
{
    char conf[4 * PATH_MAX];
    int n = snprintf(cache_dir, sizeof(cache_dir), "%s/cache", test_daemon_dir());
    ck_assert(n > 0 && (size_t)n < sizeof(cache_dir));
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 500ms;\nadmin { listen 127.0.0.2:0; %s }\n"
             "proxy_cache_path %s levels=1:2 keys_zone=one:1m %s;\n"
             "server {\n    listen 127.0.0.1:0 http2;\n"
             "    add_header X-Cache $upstream_cache_status always;\n"
             "    location / { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_bypass $http_x_bypass; proxy_no_cache $http_x_no_store; %s }\n"
             "    location /min/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_min_uses 2; }\n"
             "    location /valid/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_valid 200 60s; }\n"
             "    location /collapse { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_lock on; proxy_cache_lock_timeout 60s; }\n"
             "    location /collapse-timeout { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_lock on; proxy_cache_lock_timeout 100ms; }\n"
             "    location /stale/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_use_stale error timeout http_500 updating; }\n"
             "    location /stale/mr { proxy_pass http://127.0.0.1:%d/mr; proxy_cache one;\n"
             "        proxy_cache_use_stale error timeout http_500; }\n"
             "    location /bg/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_use_stale error timeout http_500 updating;\n"
             "        proxy_cache_background_update on; }\n"
             "    location /reval/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        proxy_cache_revalidate on; }\n"
             "    location /gz/ { proxy_pass http://127.0.0.1:%d; proxy_cache one;\n"
             "        gzip on; gzip_types text/plain; gzip_min_length 1; }\n"
             "    location /off/ { proxy_pass http://127.0.0.1:%d; proxy_cache off; }\n"
             "}\n",
             admin_extra, cache_dir, zone_extra, backend.port, loc_extra, backend.port,
             backend.port, backend.port, backend.port, backend.port, backend.port, backend.port,
             backend.port, backend.port, backend.port);
    test_daemon_write_config(&daemon_, conf);
}

static void start_with(const char *zone_extra)
{
    for (size_t i = 0; i < BIG_LEN; i++)
        big[i] = (char)('a' + (i * 7 + i / 1000) % 26);
    atomic_store(&requests, 0);
    atomic_store(&collapse_asked, 0);
    atomic_store(&collapse_release, false);
    atomic_store(&fail_mode, 0);
    atomic_store(&hold_asked, 0);
    atomic_store(&not_modified, 0);
    admin_extra[0] = '\0';
    atomic_store(&stall_release, false);
    atomic_store(&stalled, false);
    test_backend_start(&backend, "127.0.0.1", 0, backend_serve, NULL);
    test_daemon_init(&daemon_, "corral");
    write_config(zone_extra, "");
    test_daemon_start(&daemon_);
}

static void start(void)
{
    start_with("");
}

static void stop(void)
{
    atomic_store(&stall_release, true);
    atomic_store(&collapse_release, true);
    test_daemon_stop(&daemon_);
    test_backend_stop(&backend, 0); /* what is still served ends on its own */
}

/* One response: status, head and body (up to `size` bytes). */
struct reply {
    int status;
    char head[2048];
    char *body;
    size_t body_len;
};

static void reply_free(struct reply *r)
{
    free(r->body);
}

/* `method` `path` with the extra header lines `headers` sent on a new
 * connection to the daemon: the connection. */
static int ask_send(const char *method, const char *path, const char *headers)
{
    int fd = test_connect(daemon_.port);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: cache.test\r\n%sConnection: close\r\n\r\n", method,
                     path, headers);
    test_send_all(fd, req, (size_t)n);
    return fd;
}

/* The reply in `buf` (`got` bytes, NUL-terminated; freed) into `r`. */
static void reply_parse(char *buf, size_t got, struct reply *r)
{
    char *end = strstr(buf, "\r\n\r\n");
    ck_assert_msg(end != NULL, "no head in: %.200s", buf);
    size_t head_len = (size_t)(end - buf) + 4;
    ck_assert_uint_lt(head_len, sizeof(r->head));
    memcpy(r->head, buf, head_len);
    r->head[head_len] = '\0';
    r->status = atoi(buf + 9);
    r->body_len = got - head_len;
    r->body = malloc(r->body_len + 1);
    memcpy(r->body, buf + head_len, r->body_len);
    r->body[r->body_len] = '\0';
    free(buf);
}

/* `method` `path` with the extra header lines `headers` on a new
 * connection to the daemon, read to its close. */
static void ask(const char *method, const char *path, const char *headers, struct reply *r)
{
    int fd = ask_send(method, path, headers);
    size_t cap = BIG_LEN + 4096;
    char *buf = malloc(cap + 1);
    size_t got = test_recv_all(fd, buf, cap);
    close(fd);
    buf[got] = '\0';
    reply_parse(buf, got, r);
}

/* The X-Cache of `method` `path`; its body into `body` (may be NULL). */
static void expect(const char *method, const char *path, const char *headers, const char *status,
                   char *body, size_t size)
{
    struct reply r;
    ask(method, path, headers, &r);
    char want[64];
    snprintf(want, sizeof(want), "X-Cache: %s\r\n", status);
    if (status[0] == '\0') /* no status: an empty add_header value is no line */
        snprintf(want, sizeof(want), "Cache-Control:");
    ck_assert_msg(strstr(r.head, want) != NULL && (status[0] != '\0' || !strstr(r.head, "X-Cache")),
                  "%s %s: wanted %s in\n%s", method, path, status, r.head);
    if (body != NULL)
        snprintf(body, size, "%s", r.body);
    reply_free(&r);
}

/* A response is stored once its exchange has ended; the next request
 * may come before the store filter renamed the file: poll. */
static bool is_hit(void *arg)
{
    struct reply r;
    ask("GET", arg, "", &r);
    bool hit = strstr(r.head, "X-Cache: HIT\r\n") != NULL;
    reply_free(&r);
    return hit;
}

START_TEST(hit_after_miss)
{
    char a[64], b[64];
    expect("GET", "/fresh", "", "MISS", a, sizeof(a));
    ck_assert(test_poll_until(is_hit, "/fresh", TEST_WAIT_MS));
    unsigned asked = atomic_load(&requests);
    expect("GET", "/fresh", "", "HIT", b, sizeof(b));
    ck_assert_str_eq(a, b);
    ck_assert_uint_eq(atomic_load(&requests), asked);
    struct reply r;
    ask("GET", "/fresh", "", &r);
    ck_assert_ptr_nonnull(strstr(r.head, "Age: "));
    ck_assert_ptr_nonnull(strstr(r.head, "Cache-Control: max-age=60\r\n"));
    reply_free(&r);
    /* proxy_cache off: never. */
    expect("GET", "/off/fresh", "", "", NULL, 0);
}
END_TEST

/* Responses that RFC 9111 keeps out of a shared cache go to the backend
 * every time. */
static void never_stored(const char *path, const char *headers)
{
    expect("GET", path, headers, "MISS", NULL, 0);
    unsigned asked = atomic_load(&requests);
    for (int i = 0; i < 3; i++)
        expect("GET", path, headers, "MISS", NULL, 0);
    ck_assert_uint_eq(atomic_load(&requests), asked + 3);
}

START_TEST(rfc_rules_keep_out)
{
    never_stored("/nostore", "");
    never_stored("/private", "");
    never_stored("/nocc", ""); /* no heuristic freshness */
    never_stored("/cookie", "");
    never_stored("/fresh-auth", "Authorization: Basic eDp5\r\n");
    /* ... but an authenticated request's public response is stored. */
    expect("GET", "/public-auth", "Authorization: Basic eDp5\r\n", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/public-auth", TEST_WAIT_MS));
    /* proxy_cache_valid gives the lifetime a response does not. */
    expect("GET", "/valid/nocc", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/valid/nocc", TEST_WAIT_MS));
}
END_TEST

static bool is_expired(void *arg)
{
    struct reply r;
    ask("GET", arg, "", &r);
    bool expired = strstr(r.head, "X-Cache: EXPIRED\r\n") != NULL;
    reply_free(&r);
    return expired;
}

START_TEST(expiry)
{
    expect("GET", "/short", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/short", TEST_WAIT_MS));
    ck_assert(test_poll_until(is_expired, "/short", 5000));
}
END_TEST

START_TEST(vary_variants)
{
    char en[64], fr[64], again[64];
    expect("GET", "/vary", "Accept-Language: en\r\n", "MISS", en, sizeof(en));
    ck_assert_ptr_nonnull(strstr(en, "for en"));
    expect("GET", "/vary", "Accept-Language: fr\r\n", "MISS", fr, sizeof(fr));
    ck_assert_ptr_nonnull(strstr(fr, "for fr"));
    /* Each variant is stored under its own values. */
    for (int i = 0; i < 100; i++) {
        struct reply r;
        ask("GET", "/vary", "Accept-Language: en\r\n", &r);
        bool hit = strstr(r.head, "X-Cache: HIT") != NULL;
        snprintf(again, sizeof(again), "%s", r.body);
        reply_free(&r);
        if (hit)
            break;
        test_sleep_ms(20);
    }
    ck_assert_str_eq(again, en);
    expect("GET", "/vary", "Accept-Language: fr\r\n", "HIT", again, sizeof(again));
    ck_assert_str_eq(again, fr);
    expect("GET", "/vary", "Accept-Language: de\r\n", "MISS", NULL, 0);
}
END_TEST

START_TEST(range_and_head_from_cache)
{
    struct reply r;
    /* A Range on a miss is not passed on: the whole response is fetched
     * and stored. */
    ask("GET", "/echo-range", "Range: bytes=0-3\r\n", &r);
    ck_assert_str_eq(r.body, "range []");
    reply_free(&r);
    expect("GET", "/big", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/big", TEST_WAIT_MS));
    ask("GET", "/big", "", &r);
    ck_assert_uint_eq(r.body_len, BIG_LEN);
    ck_assert(memcmp(r.body, big, BIG_LEN) == 0);
    reply_free(&r);
    ask("GET", "/big", "Range: bytes=1000-1999\r\n", &r);
    ck_assert_int_eq(r.status, 206);
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Range: bytes 1000-1999/1048576\r\n"));
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    ck_assert_uint_eq(r.body_len, 1000);
    ck_assert(memcmp(r.body, big + 1000, 1000) == 0);
    reply_free(&r);
    ask("GET", "/big", "Range: bytes=-10\r\n", &r);
    ck_assert_int_eq(r.status, 206);
    ck_assert(memcmp(r.body, big + BIG_LEN - 10, 10) == 0);
    reply_free(&r);
    ask("GET", "/big", "Range: bytes=2000000-\r\n", &r);
    ck_assert_int_eq(r.status, 416);
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Range: bytes */1048576\r\n"));
    reply_free(&r);
    unsigned asked = atomic_load(&requests);
    ask("HEAD", "/big", "", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Length: 1048576\r\n"));
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    ck_assert_uint_eq(r.body_len, 0);
    reply_free(&r);
    ck_assert_uint_eq(atomic_load(&requests), asked);
}
END_TEST

START_TEST(bypass_no_cache_min_uses)
{
    expect("GET", "/b", "X-No-Store: 1\r\n", "MISS", NULL, 0);
    expect("GET", "/b", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/b", TEST_WAIT_MS));
    unsigned asked = atomic_load(&requests);
    expect("GET", "/b", "X-Bypass: 1\r\n", "BYPASS", NULL, 0);
    ck_assert_uint_eq(atomic_load(&requests), asked + 1);
    expect("GET", "/b", "X-Bypass: 0\r\n", "HIT", NULL, 0);
    /* min_uses 2: the first response is not kept, the second is. */
    expect("GET", "/min/a", "", "MISS", NULL, 0);
    test_sleep_ms(50); /* nothing to poll for: it must stay a miss */
    expect("GET", "/min/a", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/min/a", TEST_WAIT_MS));
}
END_TEST

/* The cache's files (not the temporary ones), by a shell's find. */
static int count_files(const char *pattern)
{
    char cmd[PATH_MAX + 128], out[64];
    snprintf(cmd, sizeof(cmd), "find %s -type f -name '%s' | wc -l", cache_dir, pattern);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(out, sizeof(out), p));
    pclose(p);
    return atoi(out);
}

struct hit_or_miss {
    const char *path, *hit_body;
    char miss_body[64];
};

/* A MISS (its body kept), or else a HIT with the stored body. */
static bool miss_after_hits(void *arg)
{
    struct hit_or_miss *h = arg;
    struct reply r;
    ask("GET", h->path, "", &r);
    bool miss = strstr(r.head, "X-Cache: MISS\r\n") != NULL;
    if (miss)
        snprintf(h->miss_body, sizeof(h->miss_body), "%s", r.body);
    else
        ck_assert_msg(strstr(r.head, "X-Cache: HIT\r\n") != NULL &&
                          strcmp(r.body, h->hit_body) == 0,
                      "%s%s", r.head, r.body);
    reply_free(&r);
    return miss;
}

START_TEST(corrupted_file_not_served)
{
    char a[64];
    expect("GET", "/c", "", "MISS", a, sizeof(a));
    ck_assert(test_poll_until(is_hit, "/c", TEST_WAIT_MS));
    ck_assert_int_eq(count_files("[0-9a-f]*"), 1);
    /* One byte of the stored head changed, as a disk might. */
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd),
             "f=$(find %s -type f -name '[0-9a-f]*'); printf Z | dd of=$f bs=1 seek=120 "
             "conv=notrunc 2>/dev/null",
             cache_dir);
    ck_assert_int_eq(system(cmd), 0);
    /* The worker serves the copy it checked, kept in memory, until it
     * looks at the file again (once a second): never the changed bytes. */
    unsigned asked = atomic_load(&requests);
    struct hit_or_miss arg = {.path = "/c", .hit_body = a};
    ck_assert(test_poll_until(miss_after_hits, &arg, TEST_WAIT_MS));
    ck_assert_str_ne(a, arg.miss_body);
    ck_assert_uint_eq(atomic_load(&requests), asked + 1);
}
END_TEST

static bool stall_seen(void *arg)
{
    (void)arg;
    return atomic_load(&stalled);
}

static bool has_temp(void *arg)
{
    (void)arg;
    return count_files(".tmp.*") > 0;
}

struct client_arg {
    int port;
};

static void *stall_client(void *arg)
{
    struct client_arg *c = arg;
    int fd = test_connect(c->port);
    const char req[] = "GET /stall HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n";
    send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL);
    char buf[65536];
    while (recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
    return NULL;
}

static bool loader_done(void *arg);

/* SIGKILL while a response is being stored, then a restart: the half
 * file is never served, the loader removes it and indexes what was whole. */
START_TEST(kill_mid_write_then_loader)
{
    expect("GET", "/whole", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/whole", TEST_WAIT_MS));
    struct client_arg c = {daemon_.port};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, stall_client, &c), 0);
    ck_assert(test_poll_until(stall_seen, NULL, TEST_WAIT_MS));
    ck_assert(test_poll_until(has_temp, NULL, TEST_WAIT_MS));
    test_daemon_kill(&daemon_);
    pthread_join(t, NULL);
    atomic_store(&stall_release, true);
    ck_assert_int_eq(count_files(".tmp.*"), 1);
    test_daemon_start(&daemon_);
    /* Serving starts before the loader ends, and a key it has not
     * indexed yet is a miss: ask once it is done. */
    ck_assert(test_poll_until(loader_done, NULL, TEST_WAIT_MS));
    unsigned asked = atomic_load(&requests);
    ck_assert(test_poll_until(is_hit, "/whole", TEST_WAIT_MS)); /* loaded */
    ck_assert_uint_eq(atomic_load(&requests), asked);
    ck_assert_int_eq(count_files(".tmp.*"), 0);
    atomic_store(&stall_release, true);
    expect("GET", "/stall", "", "MISS", NULL, 0);
}
END_TEST

START_TEST(reload_keeps_hits)
{
    expect("GET", "/r", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/r", TEST_WAIT_MS));
    unsigned asked = atomic_load(&requests);
    kill(daemon_.pid, SIGHUP);
    test_daemon_wait_generation(&daemon_, 2);
    expect("GET", "/r", "", "HIT", NULL, 0);
    ck_assert_uint_eq(atomic_load(&requests), asked);
}
END_TEST

/* max_size bounds the disk: the oldest entries go. */
START_TEST(eviction_bounds_disk)
{
    test_daemon_stop(&daemon_);
    write_config("max_size=3m", "");
    test_daemon_start(&daemon_);
    for (int i = 0; i < 8; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/big%d", i);
        expect("GET", path, "", "MISS", NULL, 0);
        ck_assert(test_poll_until(is_hit, path, TEST_WAIT_MS));
    }
    char cmd[PATH_MAX + 64], out[64];
    snprintf(cmd, sizeof(cmd), "du -sk %s | cut -f1", cache_dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(out, sizeof(out), p));
    pclose(p);
    ck_assert_int_le(atoi(out), 3 * 1024 + 64);
    ck_assert_int_le(count_files("[0-9a-f]*"), 3);
    /* The newest is still there, the oldest went. */
    expect("GET", "/big7", "", "HIT", NULL, 0);
    expect("GET", "/big0", "", "MISS", NULL, 0);
}
END_TEST

/* A full disk: the response is served whole all the same, and logged
 * once. */
START_TEST(full_disk_serves_uncached)
{
    test_daemon_stop(&daemon_);
    mkdir(cache_dir, 0700);
    if (mount("tmpfs", cache_dir, "tmpfs", 0, "size=256k") != 0) {
        fprintf(stderr, "full_disk_serves_uncached: no tmpfs mount (%s): skipped\n",
                strerror(errno));
        test_daemon_start(&daemon_);
        return;
    }
    test_daemon_start(&daemon_);
    for (int i = 0; i < 3; i++) {
        struct reply r;
        ask("GET", "/big", "", &r);
        ck_assert_int_eq(r.status, 200);
        ck_assert_uint_eq(r.body_len, BIG_LEN);
        ck_assert(memcmp(r.body, big, BIG_LEN) == 0);
        ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: MISS"));
        reply_free(&r);
    }
    char *log = test_daemon_wait_log(&daemon_, "No space left on device");
    const char *first = strstr(log, "No space left on device");
    ck_assert_ptr_null(strstr(first + 1, "No space left on device")); /* once */
    free(log);
    ck_assert_int_eq(count_files(".tmp.*"), 0);
    /* Small ones still fit and are stored. */
    expect("GET", "/small", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/small", TEST_WAIT_MS));
    test_daemon_stop(&daemon_);
    ck_assert_int_eq(umount2(cache_dir, MNT_DETACH), 0);
    test_daemon_start(&daemon_);
}
END_TEST

/* `n` requests for `path` at once, each on its connection: sent, then
 * read to their ends; returns how many got a 200 with `body`, and the
 * first other answer's start in `bad` (`bad_size` bytes). */
static int many_at_once(const char *path, int n, bool (*release)(void *), const char *body,
                        char *bad, size_t bad_size)
{
    bad[0] = '\0';
    int *fds = calloc((size_t)n, sizeof(*fds));
    char req[256];
    int len = snprintf(req, sizeof(req),
                       "GET %s HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n", path);
    for (int i = 0; i < n; i++) {
        fds[i] = test_connect(daemon_.port);
        test_send_all(fds[i], req, (size_t)len);
    }
    release(NULL);
    int good = 0;
    char *buf = malloc(65536);
    for (int i = 0; i < n; i++) {
        size_t got = test_recv_all(fds[i], buf, 65535);
        buf[got] = '\0';
        char *b = strstr(buf, "\r\n\r\n");
        bool ok = strncmp(buf, "HTTP/1.1 200", 12) == 0 && b != NULL && strcmp(b + 4, body) == 0;
        if (!ok && bad[0] == '\0')
            snprintf(bad, bad_size, "request %d, %zu bytes: %s", i, got, buf);
        good += ok;
        close(fds[i]);
    }
    free(buf);
    free(fds);
    return good;
}

static bool release_collapse(void *arg)
{
    (void)arg;
    atomic_store(&collapse_release, true);
    return true;
}

static bool collapse_seen(void *arg)
{
    (void)arg;
    return atomic_load(&collapse_asked) >= 1;
}

/* proxy_cache_lock: a thousand requests for one cold key, one fetch.
 * The location's lock timeout is a minute, not nginx's 5 s: on a loaded
 * host the thousand take seconds to arrive and be read, and a waiter past
 * its timeout rightly fetches for itself (/collapse-timeout tests that). */
START_TEST(lock_collapses_misses)
{
    /* The first request's fetch is under way before the others come. */
    int first = test_connect(daemon_.port);
    const char req[] = "GET /collapse HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n";
    test_send_all(first, req, sizeof(req) - 1);
    ck_assert(test_poll_until(collapse_seen, NULL, TEST_WAIT_MS));
    char bad[512];
    int good = many_at_once("/collapse", 1000, release_collapse, "answer 1", bad, sizeof(bad));
    char buf[1024];
    size_t got = test_recv_all(first, buf, sizeof(buf) - 1);
    buf[got] = '\0';
    close(first);
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nanswer 1"));
    ck_assert_msg(good == 1000, "%d good; %s", good, bad);
    ck_assert_uint_eq(atomic_load(&collapse_asked), 1);
}
END_TEST

static bool no_release(void *arg)
{
    (void)arg;
    return true;
}

static bool five_asked(void *arg)
{
    (void)arg;
    return atomic_load(&collapse_asked) >= 5;
}

/* proxy_cache_lock_timeout: past it, those waiting go to the backend. */
START_TEST(lock_timeout_goes_to_backend)
{
    int fds[5];
    const char req[] =
        "GET /collapse-timeout HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n";
    for (int i = 0; i < 5; i++) {
        fds[i] = test_connect(daemon_.port);
        test_send_all(fds[i], req, sizeof(req) - 1);
    }
    (void)no_release;
    ck_assert(test_poll_until(five_asked, NULL, TEST_WAIT_MS));
    atomic_store(&collapse_release, true);
    for (int i = 0; i < 5; i++) {
        char buf[1024];
        size_t got = test_recv_all(fds[i], buf, sizeof(buf) - 1);
        buf[got] = '\0';
        ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 200"));
        close(fds[i]);
    }
    ck_assert_uint_eq(atomic_load(&collapse_asked), 5);
}
END_TEST

struct hit_body {
    const char *path;
    char body[64];
};

static bool is_hit_body(void *arg)
{
    struct hit_body *h = arg;
    struct reply r;
    ask("GET", h->path, "", &r);
    bool hit = strstr(r.head, "X-Cache: HIT\r\n") != NULL;
    snprintf(h->body, sizeof(h->body), "%s", r.body);
    reply_free(&r);
    return hit;
}

/* `path` stored (a MISS), then its body as a hit serves it into `out`:
 * with max-age=1, the entry may expire before the first hit and be
 * fetched again, and what is stored is then that second response. */
static void stored_then_hit(const char *path, char *out, size_t size)
{
    expect("GET", path, "", "MISS", NULL, 0);
    struct hit_body h = {.path = path};
    ck_assert(test_poll_until(is_hit_body, &h, TEST_WAIT_MS));
    snprintf(out, size, "%s", h.body);
}

static bool is_stale(void *arg)
{
    struct reply r;
    ask("GET", arg, "", &r);
    bool stale = strstr(r.head, "X-Cache: STALE\r\n") != NULL;
    reply_free(&r);
    return stale;
}

/* The backend fails (its connection closed, then a 500) after the entry
 * expired: proxy_cache_use_stale serves the stale one, whole. */
START_TEST(stale_on_error)
{
    char first[64], got[64];
    stored_then_hit("/stale/a", first, sizeof(first));
    atomic_store(&fail_mode, 1);
    ck_assert(test_poll_until(is_stale, "/stale/a", 5000)); /* once max-age=1 passed */
    expect("GET", "/stale/a", "", "STALE", got, sizeof(got));
    ck_assert_str_eq(got, first);
    atomic_store(&fail_mode, 2);
    expect("GET", "/stale/a", "", "STALE", got, sizeof(got));
    ck_assert_str_eq(got, first);
    /* must-revalidate: never stale, the error goes through. */
    atomic_store(&fail_mode, 0);
    expect("GET", "/stale/mr", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/stale/mr", TEST_WAIT_MS));
    atomic_store(&fail_mode, 2);
    ck_assert(test_poll_until(is_expired, "/stale/mr", 5000));
    struct reply r;
    ask("GET", "/stale/mr", "", &r);
    ck_assert_int_eq(r.status, 500);
    reply_free(&r);
}
END_TEST

/* stale-if-error in the response does it where the location says
 * nothing (RFC 5861 4). */
START_TEST(stale_if_error_from_response)
{
    char first[64], got[64];
    stored_then_hit("/sie", first, sizeof(first));
    atomic_store(&fail_mode, 2);
    ck_assert(test_poll_until(is_stale, "/sie", 5000));
    expect("GET", "/sie", "", "STALE", got, sizeof(got));
    ck_assert_str_eq(got, first);
}
END_TEST

static bool clock_past(void *arg)
{
    return (long)time(NULL) >= *(long *)arg + 2;
}

/* The backend has been asked for a held path more than *arg times.  Not a
 * fixed count: the polls that waited for the entry to be stored may have
 * asked for it too (a request that came before the store was renamed into
 * place is a miss), so that a count the update itself did not reach yet
 * could be taken for it, and the request meant to get UPDATING sent before
 * the update took the key (it would then take it, and be held). */
static bool hold_seen(void *arg)
{
    return atomic_load(&hold_asked) > *(const unsigned *)arg;
}

/* GET /stale/hold, which the backend holds until collapse_release: no
 * byte comes before, however long the test takes meanwhile (a few
 * requests, which on a loaded machine under a sanitizer may take longer
 * than a receive's 5 s timeout), so only a timeout after the release is a
 * failure. */
static void *ask_thread(void *arg)
{
    struct reply *r = arg;
    int fd = ask_send("GET", "/stale/hold", "");
    size_t cap = 4096, got = 0;
    char *buf = malloc(cap + 1);
    for (bool released = false; got < cap;) {
        ssize_t n = recv(fd, buf + got, cap - got, 0);
        if (n == -1 && (errno == EINTR || (errno == EAGAIN && !released))) {
            released = atomic_load(&collapse_release);
            continue;
        }
        ck_assert_msg(n >= 0, "recv after %zu bytes: %s", got, strerror(errno));
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    reply_parse(buf, got, r);
    return NULL;
}

/* While one request updates an expired entry, the others get the stale
 * one at once (updating), and the backend is asked once. */
START_TEST(stale_while_updating)
{
    atomic_store(&collapse_release, true);
    char first[64], got[64];
    expect("GET", "/stale/hold", "", "MISS", first, sizeof(first));
    ck_assert(test_poll_until(is_hit, "/stale/hold", TEST_WAIT_MS));
    atomic_store(&collapse_release, false);
    /* max-age=1: expired two seconds after it was stored, at the latest. */
    long t0 = (long)time(NULL);
    ck_assert(test_poll_until(clock_past, &t0, 5000));
    /* That request's fetch is held by the backend: the others are served. */
    struct reply held;
    pthread_t t;
    unsigned asked = atomic_load(&hold_asked);
    ck_assert_int_eq(pthread_create(&t, NULL, ask_thread, &held), 0);
    ck_assert(test_poll_until(hold_seen, &asked, TEST_WAIT_MS));
    for (int i = 0; i < 5; i++) {
        expect("GET", "/stale/hold", "", "UPDATING", got, sizeof(got));
        ck_assert_str_eq(got, first);
    }
    ck_assert_uint_eq(atomic_load(&hold_asked), asked + 1);
    atomic_store(&collapse_release, true);
    pthread_join(t, NULL);
    ck_assert_ptr_nonnull(strstr(held.head, "X-Cache: EXPIRED"));
    ck_assert_str_ne(held.body, first);
    reply_free(&held);
    ck_assert(test_poll_until(is_hit, "/stale/hold", TEST_WAIT_MS));
}
END_TEST

/* ------------------------------------------- proxy_cache_background_update */

/* `path` stored, then expired (max-age=1: two seconds past its store at
 * the latest), its first body into `first`.  The backend holds /bg/hold*
 * from here until collapse_release. */
static void bg_stored_then_expired(const char *path, char *first, size_t size)
{
    atomic_store(&collapse_release, true);
    stored_then_hit(path, first, size);
    atomic_store(&collapse_release, false);
    long t0 = (long)time(NULL);
    ck_assert(test_poll_until(clock_past, &t0, 5000));
}

struct fresh_arg {
    const char *path;
    const char *stale_body;
};

/* A hit whose body is not the stale one: the update was stored. */
static bool fresh_hit(void *arg)
{
    const struct fresh_arg *f = arg;
    struct reply r;
    ask("GET", f->path, "", &r);
    bool fresh = strstr(r.head, "X-Cache: HIT\r\n") != NULL && strcmp(r.body, f->stale_body) != 0;
    reply_free(&r);
    return fresh;
}

/* The stale answer comes while the backend holds the update, which one
 * subrequest makes: the others meanwhile get the stale one too
 * (UPDATING), and once the backend answers the fresh one is served. */
START_TEST(background_update_answers_at_once)
{
    char first[64], got[64];
    bg_stored_then_expired("/bg/hold", first, sizeof(first));
    unsigned asked = atomic_load(&hold_asked);
    /* Answered although the backend holds the update: no wait. */
    expect("GET", "/bg/hold", "", "STALE", got, sizeof(got));
    ck_assert_str_eq(got, first);
    ck_assert(test_poll_until(hold_seen, &asked, TEST_WAIT_MS));
    for (int i = 0; i < 3; i++) {
        expect("GET", "/bg/hold", "", "UPDATING", got, sizeof(got));
        ck_assert_str_eq(got, first);
    }
    ck_assert_uint_eq(atomic_load(&hold_asked), asked + 1); /* one update */
    atomic_store(&collapse_release, true);
    struct fresh_arg f = {"/bg/hold", first};
    ck_assert(test_poll_until(fresh_hit, &f, TEST_WAIT_MS));
    ck_assert_uint_eq(atomic_load(&hold_asked), asked + 1);
}
END_TEST

/* curl over HTTP/2 (prior knowledge) for `path`: its head and body. */
static void h2_get(const char *path, char *head, size_t head_size, char *body, size_t body_size)
{
    char file[PATH_MAX], cmd[2 * PATH_MAX + 256];
    test_daemon_file(file, sizeof(file), "h2bg");
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge -H 'Host: cache.test' -o %s -D - "
             "http://127.0.0.1:%d%s",
             file, daemon_.port, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(head, 1, head_size - 1, p);
    head[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(strncmp(head, "HTTP/2 200", 10) == 0, "%s", head);
    FILE *f = fopen(file, "rb");
    ck_assert_ptr_nonnull(f);
    n = fread(body, 1, body_size - 1, f);
    body[n] = '\0';
    fclose(f);
}

/* fresh_hit over HTTP/2.  Polled: the update is stored with max-age=1,
 * so that on a loaded machine a single request after it may come once it
 * has expired again (STALE). */
static bool h2_fresh_hit(void *arg)
{
    const struct fresh_arg *f = arg;
    char head[2048], body[64];
    h2_get(f->path, head, sizeof(head), body, sizeof(body));
    return strcasestr(head, "x-cache: HIT") != NULL && strcmp(body, f->stale_body) != 0;
}

/* The same over HTTP/2; curl leaves once it has its answer, while the
 * update is still held. */
START_TEST(background_update_http2)
{
    char first[64], head[2048], got[64];
    bg_stored_then_expired("/bg/hold2", first, sizeof(first));
    unsigned asked = atomic_load(&hold_asked);
    h2_get("/bg/hold2", head, sizeof(head), got, sizeof(got));
    ck_assert_msg(strcasestr(head, "x-cache: STALE") != NULL, "%s", head);
    ck_assert_str_eq(got, first);
    ck_assert(test_poll_until(hold_seen, &asked, TEST_WAIT_MS));
    h2_get("/bg/hold2", head, sizeof(head), got, sizeof(got));
    ck_assert_msg(strcasestr(head, "x-cache: UPDATING") != NULL, "%s", head);
    ck_assert_str_eq(got, first);
    ck_assert_uint_eq(atomic_load(&hold_asked), asked + 1);
    atomic_store(&collapse_release, true);
    struct fresh_arg f = {"/bg/hold2", first};
    ck_assert(test_poll_until(h2_fresh_hit, &f, TEST_WAIT_MS));
}
END_TEST

static bool asked_beyond(void *arg)
{
    return atomic_load(&requests) > *(unsigned *)arg;
}

/* The stale body, as STALE (true: a new update started) or UPDATING
 * (the last one is not over yet): never the backend's error. */
static bool stale_started(void *arg)
{
    struct reply r;
    ask("GET", "/bg/fail", "", &r);
    bool stale = strstr(r.head, "X-Cache: STALE\r\n") != NULL;
    ck_assert_msg(stale || strstr(r.head, "X-Cache: UPDATING\r\n") != NULL, "%s", r.head);
    ck_assert_str_eq(r.body, arg);
    reply_free(&r);
    return stale;
}

/* An update that fails (a 500, then a connection closed with no
 * answer: both in proxy_cache_use_stale) keeps the stale entry: each
 * request after it gets the stale one at once, and starts another. */
START_TEST(background_update_fails)
{
    char first[64];
    bg_stored_then_expired("/bg/fail", first, sizeof(first));
    for (int mode = 2; mode >= 1; mode--) {
        atomic_store(&fail_mode, mode);
        for (int i = 0; i < 2; i++) {
            unsigned asked = atomic_load(&requests);
            ck_assert(test_poll_until(stale_started, first, TEST_WAIT_MS));
            ck_assert(test_poll_until(asked_beyond, &asked, TEST_WAIT_MS));
        }
    }
    atomic_store(&fail_mode, 0);
    struct fresh_arg f = {"/bg/fail", first};
    ck_assert(test_poll_until(fresh_hit, &f, TEST_WAIT_MS));
}
END_TEST

/* The client closes as soon as it has the stale head: the update goes
 * on without it, and is stored. */
START_TEST(background_update_outlives_client)
{
    char first[64];
    bg_stored_then_expired("/bg/hold-gone", first, sizeof(first));
    unsigned asked = atomic_load(&hold_asked);
    int fd = test_connect(daemon_.port);
    static const char req[] = "GET /bg/hold-gone HTTP/1.1\r\nHost: cache.test\r\n\r\n";
    test_send_all(fd, req, sizeof(req) - 1);
    char head[2048];
    ck_assert(test_recv_head(fd, head, sizeof(head)));
    close(fd);
    ck_assert_msg(strstr(head, "X-Cache: STALE\r\n") != NULL, "%s", head);
    ck_assert(test_poll_until(hold_seen, &asked, TEST_WAIT_MS));
    atomic_store(&collapse_release, true);
    struct fresh_arg f = {"/bg/hold-gone", first};
    ck_assert(test_poll_until(fresh_hit, &f, TEST_WAIT_MS));
}
END_TEST

/* GET `path` into `buf`, head and body; a connection reset (after a
 * reload, the old generation's listening socket closing with it in its
 * queue) leaves it empty, for the caller to ask again. */
static void try_get(const char *path, char *buf, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)daemon_.port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int n = snprintf(buf, size, "GET %s HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n",
                     path);
    size_t have = 0;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n) {
        ssize_t got;
        while (have < size - 1 && (got = recv(fd, buf + have, size - 1 - have, 0)) > 0)
            have += (size_t)got;
    }
    close(fd);
    buf[have] = '\0';
}

static bool is_stale_after_reload(void *arg)
{
    char buf[4096];
    try_get(arg, buf, sizeof(buf));
    return strstr(buf, "X-Cache: STALE\r\n") != NULL;
}

/* A HIT whose body is not the stale one. */
static bool fresh_after_reload(void *arg)
{
    const struct fresh_arg *f = arg;
    char buf[4096];
    try_get(f->path, buf, sizeof(buf));
    const char *body = strstr(buf, "\r\n\r\n");
    return strstr(buf, "X-Cache: HIT\r\n") != NULL && body != NULL &&
           strcmp(body + 4, f->stale_body) != 0;
}

/* A reload stops the worker whose update the backend holds: past
 * drain_timeout (500ms here) the update is cut off with it, and lets the
 * key go, so that the next request starts another (STALE, not UPDATING
 * for ever). */
START_TEST(background_update_cut_by_reload)
{
    char first[64], got[64];
    bg_stored_then_expired("/bg/hold-reload", first, sizeof(first));
    unsigned asked = atomic_load(&hold_asked), once = asked + 1;
    expect("GET", "/bg/hold-reload", "", "STALE", got, sizeof(got));
    ck_assert(test_poll_until(hold_seen, &asked, TEST_WAIT_MS));
    kill(daemon_.pid, SIGHUP);
    test_daemon_wait_generation(&daemon_, 2);
    ck_assert(test_poll_until(is_stale_after_reload, "/bg/hold-reload", TEST_WAIT_MS));
    ck_assert(test_poll_until(hold_seen, &once, TEST_WAIT_MS)); /* the second update */
    atomic_store(&collapse_release, true);
    struct fresh_arg f = {"/bg/hold-reload", first};
    ck_assert(test_poll_until(fresh_after_reload, &f, TEST_WAIT_MS));
}
END_TEST

/* proxy_cache_revalidate: an expired entry with an ETag is asked for
 * with If-None-Match; the backend's 304 makes it fresh again, and the
 * stored body answers. */
START_TEST(revalidate_with_304)
{
    char first[64], got[64];
    expect("GET", "/reval/a", "", "MISS", first, sizeof(first));
    ck_assert(test_poll_until(is_hit, "/reval/a", TEST_WAIT_MS));
    /* Stored for max-age=3 before now: expired once 3 s have passed
     * (clock_past waits 2 s past its mark).  Its 3 s leave a slow
     * machine time to see the hit before it expires. */
    long t0 = (long)time(NULL) + 1;
    ck_assert(test_poll_until(clock_past, &t0, 6000));
    expect("GET", "/reval/a", "", "REVALIDATED", got, sizeof(got));
    ck_assert_str_eq(got, first);
    ck_assert_uint_eq(atomic_load(&not_modified), 1);
    /* Fresh for the 304's max-age=60 now. */
    expect("GET", "/reval/a", "", "HIT", got, sizeof(got));
    ck_assert_str_eq(got, first);
    ck_assert_uint_eq(atomic_load(&not_modified), 1);
}
END_TEST

/* `method` `target` on the admin listener, with `headers`. */
static void admin_ask(const char *method, const char *target, const char *headers, struct reply *r)
{
    char address[64];
    snprintf(address, sizeof(address), "127.0.0.2:%d", daemon_.admin_port);
    int fd = test_connect_address(address);
    char req[1024];
    int n =
        snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: admin\r\n%sConnection: close\r\n\r\n",
                 method, target, headers);
    test_send_all(fd, req, (size_t)n);
    char buf[65536];
    size_t got = test_recv_all(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[got] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    ck_assert_ptr_nonnull(end);
    r->status = atoi(buf + 9);
    size_t head_len = (size_t)(end - buf) + 4;
    snprintf(r->head, sizeof(r->head), "%.*s", (int)head_len, buf);
    r->body = strdup(buf + head_len);
    r->body_len = strlen(r->body);
}

/* The zone's loader has indexed the directory (/metrics says so); `arg`:
 * the request's extra header lines, or NULL. */
static bool loader_done(void *arg)
{
    struct reply r;
    admin_ask("GET", "/metrics", arg != NULL ? arg : "", &r);
    bool done = strstr(r.body, "corral_cache_loader_done{zone=\"one\"} 1\n") != NULL;
    reply_free(&r);
    return done;
}

/* Purge through the admin API: refused where the listener authenticates
 * nobody, 401 for a wrong token; the key, or a prefix, leaves the zone. */
START_TEST(purge_through_admin)
{
    struct reply r;
    admin_ask("POST", "/cache/purge?zone=one&key=x", "", &r);
    ck_assert_int_eq(r.status, 403);
    reply_free(&r);
    test_daemon_stop(&daemon_);
    char token[PATH_MAX];
    test_daemon_file(token, sizeof(token), "token");
    test_write_file(token, "s3cret\n");
    chmod(token, 0600);
    snprintf(admin_extra, sizeof(admin_extra), "auth_token_file %s;", token);
    write_config("", "");
    test_daemon_start(&daemon_);
    const char *paths[] = {"/p/a", "/p/b", "/q/c", "/vary"};
    for (int i = 0; i < 4; i++) {
        expect("GET", paths[i], "", "MISS", NULL, 0);
        ck_assert(test_poll_until(is_hit, (void *)paths[i], TEST_WAIT_MS));
    }
    const char *auth = "Authorization: Bearer s3cret\r\n";
    admin_ask("POST", "/cache/purge?zone=one&key=httpcache.test/q/c", "", &r);
    ck_assert_int_eq(r.status, 401);
    reply_free(&r);
    admin_ask("POST", "/cache/purge?zone=one&key=httpcache.test/q/c",
              "Authorization: Bearer wrong\r\n", &r);
    ck_assert_int_eq(r.status, 401);
    reply_free(&r);
    admin_ask("GET", "/cache/purge?zone=one&key=httpcache.test/q/c", auth, &r);
    ck_assert_int_eq(r.status, 405);
    reply_free(&r);
    admin_ask("POST", "/cache/purge?zone=none&key=k", auth, &r);
    ck_assert_int_eq(r.status, 404);
    reply_free(&r);
    admin_ask("POST", "/cache/purge?zone=one&key=httpcache.test%2Fq%2Fc", auth, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"purged\": 1}\n");
    reply_free(&r);
    expect("GET", "/q/c", "", "MISS", NULL, 0);
    expect("GET", "/p/a", "", "HIT", NULL, 0);
    admin_ask("PURGE", "/cache/purge?zone=one&key=httpcache.test/p/*", auth, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"purged\": 2}\n");
    reply_free(&r);
    expect("GET", "/p/a", "", "MISS", NULL, 0);
    expect("GET", "/p/b", "", "MISS", NULL, 0);
    /* A key that varies: every variant goes. */
    admin_ask("DELETE", "/cache/purge?zone=one&key=httpcache.test/vary", auth, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"purged\": 1}\n");
    reply_free(&r);
    expect("GET", "/vary", "", "MISS", NULL, 0);
    /* The metrics, per zone, once the restarted zone's loader is done. */
    ck_assert(test_poll_until(loader_done, (void *)auth, TEST_WAIT_MS));
    admin_ask("GET", "/metrics", auth, &r);
    ck_assert_ptr_nonnull(
        strstr(r.body, "corral_cache_requests_total{zone=\"one\",status=\"hit\"} "));
    ck_assert_ptr_nonnull(strstr(r.body, "corral_cache_loader_done{zone=\"one\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "corral_cache_size_bytes{zone=\"one\"} "));
    ck_assert_ptr_null(
        strstr(r.body, "corral_cache_requests_total{zone=\"one\",status=\"hit\"} 0\n"));
    reply_free(&r);
}
END_TEST

/* A chunked body whose first chunk starts with gzip's magic. */
static bool gzip_chunked(const struct reply *r)
{
    const char *data = strstr(r->body, "\r\n");
    return strstr(r->head, "Transfer-Encoding: chunked") != NULL && data != NULL &&
           (size_t)(data + 4 - r->body) <= r->body_len && (unsigned char)data[2] == 0x1f &&
           (unsigned char)data[3] == 0x8b;
}

/* Compression comes after the cache: one identity copy is stored, and
 * each request gets the coding it accepts, from a hit as from a miss. */
START_TEST(compression_after_cache)
{
    struct reply r;
    ask("GET", "/gz/a", "Accept-Encoding: gzip\r\n", &r);
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: MISS"));
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Encoding: gzip"));
    ck_assert(gzip_chunked(&r));
    reply_free(&r);
    ck_assert(test_poll_until(is_hit, "/gz/a", TEST_WAIT_MS));
    ask("GET", "/gz/a", "", &r);
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    ck_assert_ptr_null(strstr(r.head, "Content-Encoding"));
    ck_assert_str_eq(r.body, "answer 1");
    reply_free(&r);
    ask("GET", "/gz/a", "Accept-Encoding: gzip\r\n", &r);
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    ck_assert_ptr_nonnull(strstr(r.head, "Content-Encoding: gzip"));
    ck_assert(gzip_chunked(&r));
    reply_free(&r);
    ck_assert_int_eq(count_files("[0-9a-f]*"), 1);
    ck_assert_uint_eq(atomic_load(&requests), 1);
}
END_TEST

/* HTTP/2 clients alike: a hit's body (read through the filters, no
 * sendfile there) is the stored one, whole and by range. */
START_TEST(http2_hits)
{
    expect("GET", "/big", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/big", TEST_WAIT_MS));
    char file[PATH_MAX], cmd[2 * PATH_MAX + 256], out[512];
    test_daemon_file(file, sizeof(file), "h2body");
    for (int ranged = 0; ranged < 2; ranged++) {
        snprintf(cmd, sizeof(cmd),
                 "curl -s --max-time 20 --http2-prior-knowledge -H 'Host: cache.test' %s -o %s -w "
                 "'%%{http_version} "
                 "%%{http_code}' -D - http://127.0.0.1:%d/big",
                 ranged ? "-r 1000-1999" : "", file, daemon_.port);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_msg(strstr(out, ranged ? "2 206" : "2 200") != NULL, "%s", out);
        ck_assert_msg(strcasestr(out, "x-cache: HIT") != NULL, "%s", out);
        struct stat st;
        ck_assert_int_eq(stat(file, &st), 0);
        char *got = malloc((size_t)st.st_size + 1);
        FILE *f = fopen(file, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(got, 1, (size_t)st.st_size, f), (size_t)st.st_size);
        fclose(f);
        if (ranged) {
            ck_assert_int_eq(st.st_size, 1000);
            ck_assert(memcmp(got, big + 1000, 1000) == 0);
        } else {
            ck_assert_int_eq(st.st_size, BIG_LEN);
            ck_assert(memcmp(got, big, BIG_LEN) == 0);
        }
        free(got);
    }
}
END_TEST

/* A client that has the stored response gets a 304 from a hit. */
START_TEST(hit_answers_preconditions)
{
    expect("GET", "/reval/c", "", "MISS", NULL, 0);
    ck_assert(test_poll_until(is_hit, "/reval/c", TEST_WAIT_MS));
    struct reply r;
    ask("GET", "/reval/c", "If-None-Match: \"v0\", \"v1\"\r\n", &r);
    ck_assert_int_eq(r.status, 304);
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    ck_assert_ptr_nonnull(strstr(r.head, "ETag: \"v1\"\r\n"));
    ck_assert_ptr_null(strstr(r.head, "Content-Type"));
    ck_assert_uint_eq(r.body_len, 0);
    reply_free(&r);
    ask("GET", "/reval/c", "If-None-Match: \"v2\"\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "X-Cache: HIT"));
    reply_free(&r);
    ck_assert_uint_eq(atomic_load(&not_modified), 0); /* the backend was never asked */
}
END_TEST

/* A test case group whose cases each get a daemon of their own. */
static TCase *new_case(Suite *suite, const char *name)
{
    TCase *tc = test_daemon_case(suite, name, 30);
    tcase_add_checked_fixture(tc, start, stop);
    return tc;
}

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/cache_daemon");
    /* What the daemon's threads share: the index both workers store to
     * and hit from, the lock that collapses their misses, the updating
     * state, the loader, eviction, a reload's registry and the admin's
     * purge.  The only cases run under ThreadSanitizer. */
    TCase *tc = new_case(suite, "threads");
    tcase_add_test(tc, hit_after_miss);
    tcase_add_test(tc, kill_mid_write_then_loader);
    tcase_add_test(tc, reload_keeps_hits);
    tcase_add_test(tc, eviction_bounds_disk);
    tcase_add_test(tc, lock_collapses_misses);
    tcase_add_test(tc, lock_timeout_goes_to_backend);
    tcase_add_test(tc, stale_while_updating);
    tcase_add_test(tc, background_update_answers_at_once);
    tcase_add_test(tc, background_update_http2);
    tcase_add_test(tc, background_update_fails);
    tcase_add_test(tc, background_update_outlives_client);
    tcase_add_test(tc, background_update_cut_by_reload);
    tcase_add_test(tc, purge_through_admin);
    if (TEST_TSAN)
        return suite;

    /* HTTP's caching rules, one request at a time. */
    tc = new_case(suite, "rules");
    tcase_add_test(tc, rfc_rules_keep_out);
    tcase_add_test(tc, expiry);
    tcase_add_test(tc, vary_variants);
    tcase_add_test(tc, range_and_head_from_cache);
    tcase_add_test(tc, bypass_no_cache_min_uses);
    tcase_add_test(tc, corrupted_file_not_served);
    tcase_add_test(tc, full_disk_serves_uncached);
    tcase_add_test(tc, stale_on_error);
    tcase_add_test(tc, stale_if_error_from_response);
    tcase_add_test(tc, revalidate_with_304);
    tcase_add_test(tc, compression_after_cache);
    tcase_add_test(tc, http2_hits);
    tcase_add_test(tc, hit_answers_preconditions);
    return suite;
}
