/*
 * test_compress_daemon.c: response compression through build/corral over
 * real sockets: a small backend behind proxy_pass, curl as the client
 * over HTTP/1.1 and HTTP/2, and each coding's body decoded by another
 * implementation than corral's (Python's gzip and brotli modules, the
 * zstd command) to the backend's exact bytes; the head a coded response
 * gets (HEAD's too), what is left alone, and a streaming backend whose
 * first event reaches the client, decoded, while the backend still holds
 * the rest.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "compress_decode.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------- backend */

#define PAGE_LEN 300000

static char page[PAGE_LEN + 1];

/* Text that compresses as pages do, and no two pages alike. */
static void make_page(void)
{
    uint32_t x = 99;
    for (size_t i = 0; i < PAGE_LEN; i++) {
        x = x * 1103515245u + 12345u;
        page[i] = i % 64 < 48 ? "<li>corral compresses this page</li>\n"[i % 37]
                              : (char)('a' + (x >> 27));
    }
    page[PAGE_LEN] = '\0';
}

/* The page as a gzip-coding backend sends it, for gunzip. */
static char *page_gz;
static size_t page_gz_len;

static void make_page_gz(void)
{
    z_stream z = {0};
    ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, PAGE_LEN);
    free(page_gz);
    page_gz = malloc(cap);
    ck_assert_ptr_nonnull(page_gz);
    z.next_in = (Bytef *)page;
    z.avail_in = PAGE_LEN;
    z.next_out = (Bytef *)page_gz;
    z.avail_out = (uInt)cap;
    ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    page_gz_len = cap - z.avail_out;
    deflateEnd(&z);
}

/* The streaming answer's second half waits for stream_release (or 10 s);
 * stream_finished says it has begun to go. */
static atomic_bool stream_release;
static atomic_bool stream_finished;

static void backend_serve(int fd, void *data)
{
    (void)data;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[8192];
    if (!test_recv_head(fd, req, sizeof(req)))
        return;
    bool head = strncmp(req, "HEAD ", 5) == 0;
    const char *path = strchr(req, ' ');
    if (path == NULL)
        return;
    path++;
    const char *small = "tiny body";
    if (strncmp(path, "/page ", 6) == 0) {
        test_send_head(fd,
                       "200 OK\r\nContent-Type: text/html; charset=utf-8\r\nETag: \"v1\"\r\n"
                       "Accept-Ranges: bytes\r\n",
                       PAGE_LEN);
        if (!head)
            test_send_all(fd, page, PAGE_LEN);
    } else if (strncmp(path, "/gz ", 4) == 0) {
        test_send_head(fd,
                       "200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
                       "ETag: \"g1\"\r\n",
                       page_gz_len);
        if (!head)
            test_send_all(fd, page_gz, page_gz_len);
    } else if (strncmp(path, "/small ", 7) == 0) {
        test_send_head(fd, "200 OK\r\nContent-Type: text/html\r\n", strlen(small));
        test_send_all(fd, small, strlen(small));
    } else if (strncmp(path, "/encoded ", 9) == 0) {
        test_send_head(fd, "200 OK\r\nContent-Type: text/html\r\nContent-Encoding: x-own\r\n",
                       strlen(small));
        test_send_all(fd, small, strlen(small));
    } else if (strncmp(path, "/notransform ", 13) == 0) {
        test_send_head(fd, "200 OK\r\nContent-Type: text/html\r\nCache-Control: no-transform\r\n",
                       PAGE_LEN);
        test_send_all(fd, page, PAGE_LEN);
    } else if (strncmp(path, "/stream ", 8) == 0) {
        static const char first[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                    "12\r\ndata: first event\n\r\n";
        test_send_all(fd, first, sizeof(first) - 1);
        for (int i = 0; i < 5000 && !atomic_load(&stream_release); i++)
            usleep(2000);
        /* Marked before the bytes go: marked after, the store could land
         * once the client has seen the end and begun the next case. */
        atomic_store(&stream_finished, true);
        static const char rest[] = "13\r\ndata: second event\n\r\n0\r\n\r\n";
        test_send_all(fd, rest, sizeof(rest) - 1);
    } else {
        test_send_head(fd, "404 Not Found\r\n", 0);
    }
}

/* -------------------------------------------------------------- daemon */

static struct test_backend backend;
static struct test_daemon daemon_;

static void start(void)
{
    make_page();
    make_page_gz();
    atomic_store(&stream_release, false);
    atomic_store(&stream_finished, false);
    test_backend_start(&backend, "127.0.0.1", 0, backend_serve, NULL);
    test_daemon_init(&daemon_, "corral");
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "gzip on; brotli on; zstd on; gzip_vary on; gzip_http_version 1.0;\n"
             "gzip_types text/event-stream; brotli_types text/event-stream;\n"
             "zstd_types text/event-stream;\n"
             "server {\n    listen 127.0.0.1:0 http2;\n"
             "    location / { proxy_pass http://127.0.0.1:%d; }\n"
             "    location /off/ { gzip off; brotli off; zstd off;\n"
             "        proxy_pass http://127.0.0.1:%d/; }\n"
             "    location /gunzip/ { gunzip on; gzip off; brotli off; zstd off;\n"
             "        proxy_pass http://127.0.0.1:%d/; }\n}\n",
             backend.port, backend.port, backend.port);
    test_daemon_write_config(&daemon_, conf);
    test_daemon_start(&daemon_);
}

static void stop(void)
{
    test_daemon_stop(&daemon_);
    test_backend_stop(&backend, 0); /* what is still served ends on its own */
}

/* curl `args` on `path`: the head into `head` (lowercase names are left
 * as sent), the raw body into the case's file `body`. */
static void fetch(const char *args, const char *path, char *head, size_t size, const char *body)
{
    char file[PATH_MAX], command[2 * PATH_MAX + 256];
    test_daemon_file(file, sizeof(file), body);
    snprintf(command, sizeof(command), "curl -s --max-time 20 %s -D - -o %s http://127.0.0.1:%d%s",
             args, file, daemon_.port, path);
    ck_assert_int_eq(test_run(command, head, size), 0);
}

/* The case's file `name` decoded with `coding` by another implementation
 * than corral's, compared with the page byte for byte. */
static void check_decodes(const char *name, const char *coding)
{
    char file[PATH_MAX], command[3 * PATH_MAX + 512], out[256];
    test_daemon_file(file, sizeof(file), name);
    if (strcmp(coding, "zstd") == 0)
        snprintf(command, sizeof(command), "zstd -q -d -c %s | cmp -s - %s.expected && echo same",
                 file, file);
    else if (strcmp(coding, "br") == 0) /* Debian's brotli tool, and Python's module */
        snprintf(command, sizeof(command),
                 "brotli -d -c %s | cmp -s - %s.expected && /usr/bin/python3 -c 'import sys, "
                 "brotli; d = brotli.decompress(open(sys.argv[1], \"rb\").read()); "
                 "print(\"same\" if d == open(sys.argv[1] + \".expected\", \"rb\").read() else "
                 "\"differ\")' %s",
                 file, file, file);
    else
        snprintf(
            command, sizeof(command),
            "/usr/bin/python3 -c 'import sys, gzip, brotli; d = open(sys.argv[1], \"rb\").read(); "
            "d = gzip.decompress(d) if sys.argv[2] == \"gzip\" else brotli.decompress(d); "
            "print(\"same\" if d == open(sys.argv[1] + \".expected\", \"rb\").read() else "
            "\"differ\")' "
            "%s %s",
            file, coding);
    char expected[PATH_MAX + 16];
    snprintf(expected, sizeof(expected), "%s.expected", file);
    FILE *f = fopen(expected, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(page, 1, PAGE_LEN, f), PAGE_LEN);
    fclose(f);
    test_run(command, out, sizeof(out));
    ck_assert_msg(strcmp(out, "same\n") == 0, "%s body: %s", coding, out);
}

static bool has(const char *head, const char *line)
{
    return strcasestr(head, line) != NULL;
}

/* Each coding, over HTTP/1.1 and HTTP/2, decodes to the page; the head
 * says so, varies, has no length and a weak ETag. */
START_TEST(each_coding_decodes_to_the_original)
{
    start();
    static const char *const codings[] = {"gzip", "br", "zstd"};
    static const char *const versions[] = {"--http1.1", "--http2-prior-knowledge"};
    for (int v = 0; v < 2; v++) {
        for (int c = 0; c < 3; c++) {
            char args[128], head[4096], name[32], line[64];
            snprintf(args, sizeof(args), "%s -H 'Accept-Encoding: %s'", versions[v], codings[c]);
            snprintf(name, sizeof(name), "body-%d-%d", v, c);
            fetch(args, "/page", head, sizeof(head), name);
            snprintf(line, sizeof(line), "content-encoding: %s\r\n", codings[c]);
            ck_assert_msg(has(head, line), "%s", head);
            ck_assert_msg(has(head, "vary: Accept-Encoding\r\n"), "%s", head);
            ck_assert_msg(has(head, "etag: W/\"v1\"\r\n"), "%s", head);
            ck_assert_msg(!has(head, "content-length"), "%s", head);
            ck_assert_msg(!has(head, "accept-ranges"), "%s", head);
            if (v == 0)
                ck_assert_msg(has(head, "transfer-encoding: chunked\r\n"), "%s", head);
            check_decodes(name, codings[c]);
        }
    }
    /* curl's own decoder, with what curl asks for. */
    char out[64], command[512];
    snprintf(command, sizeof(command),
             "curl -s --max-time 20 --compressed http://127.0.0.1:%d/page | cmp -s - "
             "%s/body-0-0.expected"
             " && echo same",
             daemon_.port, test_daemon_dir());
    test_run(command, out, sizeof(out));
    ck_assert_str_eq(out, "same\n");
    stop();
}
END_TEST

/* HEAD gets the head GET gets, with no body; what must be left alone is,
 * with its length. */
START_TEST(head_and_what_is_left_alone)
{
    start();
    char head[4096];
    fetch("--http1.1 -I -H 'Accept-Encoding: gzip'", "/page", head, sizeof(head), "head");
    ck_assert_msg(has(head, "content-encoding: gzip\r\n"), "%s", head);
    ck_assert_msg(has(head, "vary: Accept-Encoding\r\n"), "%s", head);
    ck_assert_msg(has(head, "etag: W/\"v1\"\r\n"), "%s", head);
    ck_assert_msg(!has(head, "content-length"), "%s", head);
    fetch("--http2-prior-knowledge -I -H 'Accept-Encoding: br'", "/page", head, sizeof(head),
          "head2");
    ck_assert_msg(has(head, "content-encoding: br\r\n"), "%s", head);
    static const struct {
        const char *path, *length;
    } alone[] = {
        {"/small", "content-length: 9\r\n"},
        {"/encoded", "content-length: 9\r\n"},
        {"/notransform", "content-length: 300000\r\n"},
        {"/off/page", "content-length: 300000\r\n"},
    };
    for (size_t i = 0; i < sizeof(alone) / sizeof(alone[0]); i++) {
        fetch("--http1.1 -H 'Accept-Encoding: gzip, br, zstd'", alone[i].path, head, sizeof(head),
              "alone");
        ck_assert_msg(has(head, alone[i].length), "%s: %s", alone[i].path, head);
        ck_assert_msg(!has(head, "content-encoding: gzip") && !has(head, "content-encoding: br") &&
                          !has(head, "content-encoding: zstd"),
                      "%s: %s", alone[i].path, head);
    }
    /* A client that takes no coding gets the page as it is, varying. */
    fetch("--http1.1", "/page", head, sizeof(head), "plain");
    ck_assert_msg(has(head, "content-length: 300000\r\n"), "%s", head);
    ck_assert_msg(has(head, "vary: Accept-Encoding\r\n"), "%s", head);
    ck_assert_msg(has(head, "etag: \"v1\"\r\n"), "%s", head);
    stop();
}
END_TEST

/* gunzip: a client that takes no gzip gets the backend's gzip-coded page
 * decoded, over HTTP/1.1 and HTTP/2, whole (curl reads it into a file
 * while corral holds the rest of the input); one that takes gzip gets the
 * backend's bytes. */
START_TEST(gunzip_for_a_client_without_gzip)
{
    start();
    static const char *const versions[] = {"--http1.1", "--http2-prior-knowledge"};
    char head[4096], out[64], command[2 * PATH_MAX + 256];
    for (int v = 0; v < 2; v++) {
        fetch(versions[v], "/gunzip/gz", head, sizeof(head), "gunzipped");
        ck_assert_msg(!has(head, "content-encoding"), "%s", head);
        ck_assert_msg(!has(head, "content-length"), "%s", head);
        ck_assert_msg(has(head, "etag: W/\"g1\"\r\n"), "%s", head);
        ck_assert_msg(has(head, "vary: Accept-Encoding\r\n"), "%s", head);
        char file[PATH_MAX], expected[PATH_MAX + 16];
        test_daemon_file(file, sizeof(file), "gunzipped");
        snprintf(expected, sizeof(expected), "%s.expected", file);
        FILE *f = fopen(expected, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(page, 1, PAGE_LEN, f), PAGE_LEN);
        fclose(f);
        snprintf(command, sizeof(command), "cmp -s %s %s && echo same", file, expected);
        test_run(command, out, sizeof(out));
        ck_assert_msg(strcmp(out, "same\n") == 0, "%s: %s", versions[v], out);
    }
    fetch("--http1.1 -H 'Accept-Encoding: gzip'", "/gunzip/gz", head, sizeof(head), "coded");
    ck_assert_msg(has(head, "content-encoding: gzip\r\n"), "%s", head);
    char length[64];
    snprintf(length, sizeof(length), "content-length: %zu\r\n", page_gz_len);
    ck_assert_msg(has(head, length), "%s", head);
    ck_assert_msg(has(head, "etag: \"g1\"\r\n"), "%s", head);
    check_decodes("coded", "gzip");
    stop();
}
END_TEST

/* A streaming backend's first event reaches the client, decodable, while
 * the backend still holds the second: the coder was flushed when the
 * backend paused. */
START_TEST(streaming_backend_is_flushed)
{
    start();
    static const char *const accept[] = {"gzip", "br", "zstd"};
    static const enum compress_coding codings[] = {COMPRESS_GZIP, COMPRESS_BR, COMPRESS_ZSTD};
    for (int c = 0; c < 3; c++) {
        atomic_store(&stream_release, false);
        atomic_store(&stream_finished, false);
        int fd = test_connect(daemon_.port);
        char req[256];
        /* HTTP/1.0 (gzip_http_version 1.0): the body ends with the
         * connection, no chunks to take off. */
        int n =
            snprintf(req, sizeof(req),
                     "GET /stream HTTP/1.0\r\nHost: x\r\nAccept-Encoding: %s\r\n\r\n", accept[c]);
        test_send_all(fd, req, (size_t)n);
        char buf[65536];
        size_t have = 0;
        char *body = NULL;
        struct compress_decoder *d = compress_decoder_new(codings[c]);
        size_t fed = 0, decoded = 0;
        uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
        while (decoded < 18 && test_now_ms() < deadline) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, TEST_POLL_MS * 10) <= 0)
                continue;
            ssize_t got = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
            ck_assert_int_gt(got, 0);
            have += (size_t)got;
            buf[have] = '\0';
            if (body == NULL && (body = strstr(buf, "\r\n\r\n")) != NULL) {
                body += 4;
                fed = (size_t)(body - buf);
                char line[64];
                snprintf(line, sizeof(line), "Content-Encoding: %s\r\n", accept[c]);
                ck_assert_msg(strstr(buf, line) != NULL, "%s", buf);
            }
            if (body != NULL && have > fed) {
                ck_assert(compress_decoder_feed(d, buf + fed, have - fed));
                fed = have;
                compress_decoder_output(d, &decoded);
            }
        }
        size_t len;
        const char *out = compress_decoder_output(d, &len);
        ck_assert_msg(len == 18 && memcmp(out, "data: first event\n", 18) == 0,
                      "%s: decoded %zu bytes before the backend went on", accept[c], len);
        ck_assert(!atomic_load(&stream_finished));
        atomic_store(&stream_release, true);
        for (;;) {
            ssize_t got = recv(fd, buf, sizeof(buf), 0);
            ck_assert_int_ge(got, 0);
            if (got == 0)
                break;
            ck_assert(compress_decoder_feed(d, buf, (size_t)got));
        }
        ck_assert(compress_decoder_done(d));
        out = compress_decoder_output(d, &len);
        ck_assert_str_eq(out, "data: first event\ndata: second event\n");
        compress_decoder_free(d);
        close(fd);
    }
    stop();
}
END_TEST

/* The same over HTTP/2, curl decoding as the bytes come (-N): the first
 * event is out of curl, decoded, before the backend sends the second. */
START_TEST(streaming_over_http2_is_flushed)
{
    start();
    static const char *const accept[] = {"gzip", "br", "zstd"};
    for (int c = 0; c < 3; c++) {
        atomic_store(&stream_release, false);
        atomic_store(&stream_finished, false);
        char command[512];
        snprintf(command, sizeof(command),
                 "curl -sN --max-time 20 --http2-prior-knowledge --compressed "
                 "-H 'Accept-Encoding: %s' -D - http://127.0.0.1:%d/stream",
                 accept[c], daemon_.port);
        FILE *p = popen(command, "r");
        ck_assert_ptr_nonnull(p);
        int fd = fileno(p);
        char out[4096] = "";
        size_t have = 0;
        uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
        while (strstr(out, "data: first event\n") == NULL && test_now_ms() < deadline) {
            struct pollfd pfd = {fd, POLLIN, 0};
            if (poll(&pfd, 1, TEST_POLL_MS * 10) <= 0)
                continue;
            ssize_t got = read(fd, out + have, sizeof(out) - 1 - have);
            ck_assert_int_gt(got, 0);
            have += (size_t)got;
            out[have] = '\0';
        }
        ck_assert_msg(strstr(out, "data: first event\n") != NULL, "%s: %s", accept[c], out);
        ck_assert(!atomic_load(&stream_finished));
        char line[64];
        snprintf(line, sizeof(line), "content-encoding: %s\r\n", accept[c]);
        ck_assert_msg(strcasestr(out, line) != NULL, "%s", out);
        atomic_store(&stream_release, true);
        ssize_t got;
        while ((got = read(fd, out + have, sizeof(out) - 1 - have)) > 0)
            have += (size_t)got;
        out[have] = '\0';
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_msg(strstr(out, "\r\n\r\ndata: first event\ndata: second event\n") != NULL, "%s",
                      out);
    }
    stop();
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/compress_daemon");
    TCase *tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, each_coding_decodes_to_the_original);
    tcase_add_test(tc, head_and_what_is_left_alone);
    tcase_add_test(tc, gunzip_for_a_client_without_gzip);
    tcase_add_test(tc, streaming_backend_is_flushed);
    tcase_add_test(tc, streaming_over_http2_is_flushed);
    suite_add_tcase(suite, tc);
    return suite;
}
