/*
 * test_http1.c: the HTTP/1.1 server side over real loopback sockets:
 * routing, keep-alive, pipelining, bodies (gathered, with trailers),
 * timeouts, and a table of malformed requests that must be refused and the
 * connection closed.
 * Valid requests are fed whole, byte by byte, and in random splits.
 */
#include "../helpers.h"
#include "proto/modules.h"
#include "proto/policy/return.h"
#include "proto/policy/access_log.h"
#include "proto/serve/serve.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct http_return ret_root = {.status = 200, .text = "root\n", .text_len = 5};
static struct http_return ret_exact = {.status = 201, .text = "exact\n", .text_len = 6};
static struct http_return ret_prefix = {.status = 202, .text = "prefix\n", .text_len = 7};
static struct http_return ret_wild = {.status = 203, .text = "wild\n", .text_len = 5};
static struct http_return ret_named = {.status = 204, .text = NULL, .text_len = 0};
static struct http_return ret_moved = {
    .status = 301, .text = "https://main.example/new", .text_len = 24};
static struct http_return ret_drop = {.status = 444, .text = NULL, .text_len = 0};
static char far_url[5000];
static struct http_return ret_moved_far = {
    .status = 302, .text = far_url, .text_len = 0}; /* set in start() */

/* "/coded/L/C": a streamed 431 with L bytes of header lines and C bytes of
 * transfer codings before chunked, to probe the size of the response head. */
static void coded_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    static char headers[4096], codings[4096];
    unsigned long header_len = 0, coding_len = 0;
    sscanf(req->path.data, "/coded/%lu/%lu", &header_len, &coding_len);
    ck_assert_uint_lt(header_len, sizeof(headers));
    ck_assert_uint_lt(coding_len, sizeof(codings));
    /* "X-Long: aaa...\r\n", and "gzip, gzip, ..., g" */
    memset(headers, 'a', header_len);
    if (header_len >= 10) {
        memcpy(headers, "X-Long: ", 8);
        memcpy(headers + header_len - 2, "\r\n", 2);
    }
    for (size_t i = 0; i < coding_len; i++)
        codings[i] = "gzip, "[i % 6];
    exchange_begin_coded(ex, 431, headers, header_len >= 10 ? header_len : 0, -1,
                         (struct http_str){codings, coding_len});
    exchange_write(ex, "hello", 5);
    exchange_end(ex);
}

static const struct http_handler coded_handler = {
    .name = "coded",
    .on_request = coded_on_request,
};

/* "/gather/sized" and "/gather/streamed": a body written as a gather list
 * of 20 one-letter buffers, one of them empty (more than one chunk holds),
 * then an empty list, then trailers; with its length, or without. */
static void gather_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    static const char letters[] = "abcdefghijklmnopqrst";
    struct iovec iov[20];
    for (int i = 0; i < 20; i++)
        iov[i] = (struct iovec){(void *)&letters[i], i == 1 ? 0 : 1};
    bool sized = http_str_equal_nocase(req->path, "/gather/sized");
    exchange_begin(ex, 200, "Trailer: X-Checksum\r\n", 21, sized ? 19 : -1);
    exchange_writev(ex, iov, 20);
    exchange_writev(ex, &iov[1], 1); /* as a chunk, it would end the body */
    exchange_end_trailers(ex, "X-Checksum: 19\r\n", 16);
}

static const struct http_handler gather_handler = {
    .name = "gather",
    .on_request = gather_on_request,
};

/* A location of `path` (a literal), exact or a prefix, with its handler. */
#define LOCATION(path_, exact_, handler_, data_)                                                   \
    {                                                                                              \
        .path = (path_), .path_len = sizeof(path_) - 1, .exact = (exact_), .handler = (handler_),  \
        .handler_data = (data_)                                                                    \
    }

static const struct http_location main_locations[] = {
    LOCATION("/", false, &http_return_handler, &ret_root),
    LOCATION("/exact", true, &http_return_handler, &ret_exact),
    LOCATION("/prefix/", false, &http_return_handler, &ret_prefix),
    LOCATION("/moved", true, &http_return_handler, &ret_moved),
    LOCATION("/drop", true, &http_return_handler, &ret_drop),
    LOCATION("/moved-far", true, &http_return_handler, &ret_moved_far),
    LOCATION("/coded/", false, &coded_handler, NULL),
    LOCATION("/gather/", false, &gather_handler, NULL),
};
static const struct http_location wild_locations[] = {
    LOCATION("/", false, &http_return_handler, &ret_wild),
};
static const struct http_location named_locations[] = {
    LOCATION("/only", false, &http_return_handler, &ret_named),
};
static const char *const main_names[] = {"main.example"};
static const char *const wild_names[] = {"*.wild.example"};
static const char *const named_names[] = {"named.example"};

static struct access_log *access_log; /* start() gives it to the site */
static struct http_vhost vhosts[3];
static struct http_stats stats[2];
static struct http_site site;

/* Timeouts of `kind` counted by both workers. */
static uint64_t timeouts_counted(enum http_timeout_kind kind)
{
    return atomic_load(&stats[0].timeouts[kind]) + atomic_load(&stats[1].timeouts[kind]);
}

static corral_server *server;
static int port;

/* header_timeout_ms sets the body timeout too. */
static void start(uint32_t header_timeout_ms, uint32_t keepalive_timeout_ms)
{
    /* A redirect longer than any fixed budget for its Location line. */
    memcpy(far_url, "https://far.example/", 20);
    memset(far_url + 20, 'p', sizeof(far_url) - 21);
    ret_moved_far.text_len = sizeof(far_url) - 1;

    struct http_limits limits = HTTP_LIMITS_DEFAULT;
    limits.max_header_size = 1024;
    limits.max_headers = 20;
    limits.max_body_size = 1000;
    limits.keepalive_requests = 5;
    if (header_timeout_ms)
        limits.header_timeout_ms = limits.body_timeout_ms = header_timeout_ms;
    if (keepalive_timeout_ms)
        limits.keepalive_timeout_ms = keepalive_timeout_ms;
    vhosts[0] =
        (struct http_vhost){.names = main_names,
                            .name_count = 1,
                            .locations = main_locations,
                            .location_count = sizeof(main_locations) / sizeof(main_locations[0]),
                            .limits = limits};
    vhosts[1] = (struct http_vhost){.names = wild_names,
                                    .name_count = 1,
                                    .locations = wild_locations,
                                    .location_count = 1,
                                    .limits = limits};
    vhosts[2] = (struct http_vhost){.names = named_names,
                                    .name_count = 1,
                                    .locations = named_locations,
                                    .location_count = 1,
                                    .limits = limits};
    site = (struct http_site){
        .vhosts = vhosts, .vhost_count = 3, .stats = stats, .access_log = access_log};

    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 2;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    port = test_start_server(server, &serve_handler, &site);
}

static void stop(void)
{
    test_stop_server(server);
}

static void setup(void)
{
    start(0, 0);
}

/* Reads one response: head through the blank line, then Content-Length
 * bytes of body (none for HEAD).  Returns the status, 0 on EOF. */
static int read_response(int fd, char *head, size_t head_size, char *body, size_t body_size,
                         bool head_request)
{
    size_t len = 0;
    while (len + 1 < head_size) {
        ssize_t n = recv(fd, head + len, 1, 0);
        if (n <= 0)
            return 0;
        len++;
        if (len >= 4 && memcmp(head + len - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[len] = '\0';
    int status = 0;
    sscanf(head, "HTTP/1.1 %d", &status);
    const char *cl = strcasestr(head, "\r\nContent-Length: ");
    size_t body_len = cl != NULL ? strtoul(cl + 18, NULL, 10) : 0;
    if (head_request)
        body_len = 0;
    ck_assert_uint_lt(body_len, body_size);
    ck_assert_uint_eq(test_recv_all(fd, body, body_len), body_len);
    body[body_len] = '\0';
    return status;
}

static bool peer_closed(int fd)
{
    char byte;
    return recv(fd, &byte, 1, 0) == 0;
}

/* Sends `request` split into pieces, per `mode`: 0 whole, 1 byte by byte,
 * 2 random splits. */
static void send_split(int fd, const char *request, size_t len, int mode)
{
    size_t off = 0;
    while (off < len) {
        size_t piece = mode == 0 ? len - off : mode == 1 ? 1 : 1 + (size_t)rand() % 7;
        if (piece > len - off)
            piece = len - off;
        test_send_all(fd, request + off, piece);
        off += piece;
        if (mode != 0)
            usleep(200);
    }
}

static const struct {
    const char *request;
    int status;
    const char *body;
} valid_cases[] = {
    {"GET / HTTP/1.1\r\nHost: main.example\r\n\r\n", 200, "root\n"},
    {"GET /exact HTTP/1.1\r\nHost: main.example\r\n\r\n", 201, "exact\n"},
    {"GET /exact/not HTTP/1.1\r\nHost: main.example\r\n\r\n", 200, "root\n"},
    {"GET /prefix/deeper?q=1 HTTP/1.1\r\nHost: main.example\r\n\r\n", 202, "prefix\n"},
    {"GET / HTTP/1.1\r\nHost: a.wild.example:8080\r\n\r\n", 203, "wild\n"},
    {"GET / HTTP/1.1\r\nHost: WILD.example\r\n\r\n", 200, "root\n"},
    {"GET / HTTP/1.1\r\nHost: unknown.example\r\n\r\n", 200, "root\n"},
    {"\r\nGET /exact HTTP/1.1\r\nHost: main.example\r\n\r\n", 201, "exact\n"},
    {"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200, "root\n"},
    {"GET / HTTP/1.1\r\nHost: 127.0.0.1:\r\n\r\n", 200, "root\n"},
    {"GET / HTTP/1.1\r\nHost: main.example.\r\n\r\n", 200, "root\n"},
    {"GET / HTTP/1.1\r\nHost:\r\n\r\n", 200, "root\n"},
    {"GET /only HTTP/1.1\r\nHost: named.example:65535\r\n\r\n", 204, ""},
    {"GET http://named.example:80/only HTTP/1.1\r\nHost: x\r\n\r\n", 204, ""},
    {"GET /only HTTP/1.1\r\nHost: named.example\r\n\r\n", 204, ""},
    {"GET /other HTTP/1.1\r\nHost: named.example\r\n\r\n", 404, "404 Not Found\n"},
    {"POST / HTTP/1.1\r\nHost: main.example\r\nContent-Length: 5\r\n\r\nhello", 200, "root\n"},
    {"POST / HTTP/1.1\r\nHost: main.example\r\nTransfer-Encoding: chunked\r\n\r\n"
     "5\r\nhello\r\n0\r\n\r\n",
     200, "root\n"},
    {"GET / HTTP/1.1\r\nHost: main.example\r\nX-Empty:\r\nX-Spaces:   padded   \r\n\r\n", 200,
     "root\n"},
};

START_TEST(valid_requests_whole_and_split)
{
    for (int mode = 0; mode < 3; mode++) {
        int fd = test_connect(port);
        /* All on one keep-alive connection: bodies must be fully consumed. */
        for (size_t i = 0; i < sizeof(valid_cases) / sizeof(valid_cases[0]); i++) {
            if (i % 4 == 3) { /* keepalive_requests is 5: reconnect in time */
                close(fd);
                fd = test_connect(port);
            }
            send_split(fd, valid_cases[i].request, strlen(valid_cases[i].request), mode);
            char head[1024], body[256];
            int status = read_response(fd, head, sizeof(head), body, sizeof(body), false);
            ck_assert_msg(status == valid_cases[i].status, "mode %d case %zu: status %d\n%s", mode,
                          i, status, head);
            ck_assert_str_eq(body, valid_cases[i].body);
        }
        close(fd);
    }
}
END_TEST

START_TEST(return_redirect_sets_location)
{
    int fd = test_connect(port);
    const char *req = "GET /moved HTTP/1.1\r\nHost: main.example\r\n\r\n";
    test_send_all(fd, req, strlen(req));
    char head[1024], body[256];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 301);
    ck_assert_ptr_nonnull(strstr(head, "\r\nLocation: https://main.example/new\r\n"));
    ck_assert_ptr_nonnull(strstr(head, "\r\nContent-Length: 0\r\n"));
    close(fd);
}
END_TEST

/* nginx's 444: the connection ends without an answer. */
START_TEST(return_444_closes_without_answering)
{
    int fd = test_connect(port);
    const char *req = "GET /drop HTTP/1.1\r\nHost: main.example\r\n\r\n";
    test_send_all(fd, req, strlen(req));
    char buf[256];
    ssize_t n;
    do
        n = read(fd, buf, sizeof(buf));
    while (n == -1 && errno == EINTR);
    ck_assert_msg(n == 0 || (n == -1 && errno == ECONNRESET), "read %zd bytes: %.*s", n,
                  n > 0 ? (int)n : 0, buf);
    close(fd);
}
END_TEST

START_TEST(return_redirect_keeps_a_long_location)
{
    int fd = test_connect(port);
    const char *req = "GET /moved-far HTTP/1.1\r\nHost: main.example\r\n\r\n";
    test_send_all(fd, req, strlen(req));
    static char head[8192], body[8192];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 302);
    char *location = strstr(head, "\r\nLocation: ");
    ck_assert_msg(location != NULL, "no Location in\n%.300s", head);
    location += 12;
    *strstr(location, "\r\n") = '\0';
    ck_assert_str_eq(location, far_url);
    close(fd);
}
END_TEST

/* A streamed response's head holds whatever its producer gives, however
 * long: every header length across the sizes where a fixed budget would
 * end, with coding lists short and long, to a client that asked to close
 * (the longest fixed part). */
START_TEST(response_head_of_any_size_is_written_whole)
{
    static const unsigned coding_lens[] = {0, 4, 64, 250, 1000};
    for (size_t c = 0; c < sizeof(coding_lens) / sizeof(coding_lens[0]); c++) {
        for (unsigned header_len = 200; header_len <= 640; header_len += 2) {
            char request[128];
            int n = snprintf(request, sizeof(request),
                             "GET /coded/%u/%u HTTP/1.1\r\nHost: main.example\r\n"
                             "Connection: close\r\n\r\n",
                             header_len, coding_lens[c]);
            int fd = test_connect(port);
            test_send_all(fd, request, (size_t)n);
            char head[4096], body[16];
            ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 431);
            /* The header lines come last, whole, before the blank line. */
            const char *x = strstr(head, "\r\nX-Long: ");
            ck_assert_msg(x != NULL, "%u/%u: no X-Long in\n%s", header_len, coding_lens[c], head);
            ck_assert_uint_eq(strlen(x + 2), header_len + 2);
            ck_assert_ptr_nonnull(strstr(head, "\r\nConnection: close\r\n"));
            /* The whole coding list, then the chunked corral applies. */
            char te[1100] = "\r\nTransfer-Encoding: ";
            size_t len = strlen(te);
            for (size_t i = 0; i < coding_lens[c]; i++)
                te[len++] = "gzip, "[i % 6];
            snprintf(te + len, sizeof(te) - len, "%schunked\r\n", coding_lens[c] > 0 ? ", " : "");
            ck_assert_msg(strstr(head, te) != NULL, "%u/%u: codings cut in\n%s", header_len,
                          coding_lens[c], head);
            close(fd);
        }
    }
}
END_TEST

/* exchange_writev() and exchange_end_trailers(): a gather list is one
 * chunk (or a few, for a long list), never an empty one; trailers go in the
 * last chunk, and are dropped when the response is not chunked. */
START_TEST(gathered_body_and_trailers)
{
    static const struct {
        const char *request, *framing, *body;
    } cases[] = {
        {"GET /gather/streamed HTTP/1.1\r\nHost: main.example\r\nConnection: close\r\n\r\n",
         "\r\nTransfer-Encoding: chunked\r\n",
         "f\r\nacdefghijklmnop\r\n4\r\nqrst\r\n0\r\nX-Checksum: 19\r\n\r\n"},
        {"GET /gather/sized HTTP/1.1\r\nHost: main.example\r\nConnection: close\r\n\r\n",
         "\r\nContent-Length: 19\r\n", "acdefghijklmnopqrst"},
        /* No chunked coding for HTTP/1.0: the body ends with the connection. */
        {"GET /gather/streamed HTTP/1.0\r\n\r\n", "\r\nConnection: close\r\n",
         "acdefghijklmnopqrst"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = test_connect(port);
        test_send_all(fd, cases[i].request, strlen(cases[i].request));
        char response[1024];
        size_t len = test_recv_all(fd, response, sizeof(response) - 1);
        response[len] = '\0';
        close(fd);
        ck_assert_msg(strncmp(response, "HTTP/1.1 200 ", 13) == 0, "case %zu:\n%s", i, response);
        ck_assert_msg(strstr(response, cases[i].framing) != NULL, "case %zu:\n%s", i, response);
        const char *body = strstr(response, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        ck_assert_str_eq(body + 4, cases[i].body);
    }
}
END_TEST

START_TEST(pipelined_requests_are_answered_in_order)
{
    int fd = test_connect(port);
    const char *batch =
        "GET /exact HTTP/1.1\r\nHost: main.example\r\n\r\n"
        "POST /prefix/x HTTP/1.1\r\nHost: main.example\r\nContent-Length: 3\r\n\r\nabc"
        "GET / HTTP/1.1\r\nHost: x.wild.example\r\n\r\n"
        "HEAD / HTTP/1.1\r\nHost: main.example\r\n\r\n";
    test_send_all(fd, batch, strlen(batch));
    static const int expected[] = {201, 202, 203, 200};
    for (int i = 0; i < 4; i++) {
        char head[1024], body[256];
        ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), i == 3),
                         expected[i]);
        if (i == 3)
            ck_assert_ptr_nonnull(strstr(head, "Content-Length: 5\r\n"));
    }
    close(fd);
}
END_TEST

START_TEST(connection_close_and_http10)
{
    const char *requests[] = {
        "GET / HTTP/1.1\r\nHost: main.example\r\nConnection: close\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
    };
    for (int i = 0; i < 2; i++) {
        int fd = test_connect(port);
        test_send_all(fd, requests[i], strlen(requests[i]));
        char head[1024], body[256];
        ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 200);
        ck_assert_ptr_nonnull(strstr(head, "Connection: close\r\n"));
        ck_assert(peer_closed(fd));
        close(fd);
    }
    /* HTTP/1.0 asking for keep-alive gets it. */
    int fd = test_connect(port);
    const char *keep = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        test_send_all(fd, keep, strlen(keep));
        char head[1024], body[256];
        ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 200);
    }
    close(fd);
}
END_TEST

START_TEST(keepalive_requests_limit_closes_the_last)
{
    int fd = test_connect(port);
    const char *req = "GET / HTTP/1.1\r\nHost: main.example\r\n\r\n";
    for (int i = 0; i < 5; i++) {
        test_send_all(fd, req, strlen(req));
        char head[1024], body[256];
        ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 200);
        ck_assert_int_eq(strstr(head, "Connection: close") != NULL, i == 4);
    }
    ck_assert(peer_closed(fd));
    close(fd);
}
END_TEST

/* Malformed or refused requests: the status, then the connection closes.
 * One line per case, however long. */
/* clang-format off */
static const struct {
    const char *name;
    const char *request;
    int status;
} refused_cases[] = {
    {"bare LF line ends", "GET / HTTP/1.1\nHost: main.example\n\n", 400},
    {"bare LF inside", "GET / HTTP/1.1\r\nHost: main.example\nX: y\r\n\r\n", 400},
    {"bare CR", "GET / HTTP/1.1\r\nHost: main.example\rX: y\r\n\r\n", 400},
    {"obs-fold", "GET / HTTP/1.1\r\nHost: main.example\r\nX: a\r\n b\r\n\r\n", 400},
    {"space before colon", "GET / HTTP/1.1\r\nHost : main.example\r\n\r\n", 400},
    {"CL and TE", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    {"TE and CL", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400},
    {"CL twice differing", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
    {"CL twice equal", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400},
    {"CL list", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3, 3\r\n\r\nabc", 400},
    {"CL empty", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: \r\n\r\n", 400},
    {"CL signed", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: +3\r\n\r\nabc", 400},
    {"CL negative", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: -3\r\n\r\nabc", 400},
    {"CL hex", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 0x3\r\n\r\nabc", 400},
    {"CL overflow", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
    {"TE not chunked last", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
    {"TE gzip only", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
    {"TE unknown coding", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
    {"TE twice", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    {"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    /* `return` answers at the head, before the body: the broken body can only
     * close the connection, and the pipelined request after it is dropped. */
    {"bad chunk size", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"
     "GET / HTTP/1.1\r\nHost: m\r\n\r\n", 200},
    {"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
    {"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
    {"Host with a space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
    {"Host with a path", "GET / HTTP/1.1\r\nHost: evil/x\r\n\r\n", 400},
    {"Host with userinfo", "GET / HTTP/1.1\r\nHost: a@evil\r\n\r\n", 400},
    {"Host percent-encoded", "GET / HTTP/1.1\r\nHost: evil%20x\r\n\r\n", 400},
    {"Host bad port", "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", 400},
    {"Host bad IP-literal", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400},
    {"absolute form, percent-encoded host", "GET http://evil%20x/ HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"empty lines, then bare LF line ends", "\r\n\r\nGET / HTTP/1.1\nHost: m\n\n", 400},
    {"empty lines, then obs-fold", "\r\n\r\nGET / HTTP/1.1\r\nHost: m\r\nX: a\r\n b\r\n\r\n", 400},
    {"two spaces before the target", "GET  / HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"two spaces before the version", "GET /  HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"space before the method", " GET / HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"space after the version", "GET / HTTP/1.1 \r\nHost: m\r\n\r\n", 400},
    {"tab before the target", "GET\t/ HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"tab before the version", "GET /\tHTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"empty line, then two spaces", "\r\nGET  / HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"bad header name", "GET / HTTP/1.1\r\nHost: m\r\nX(y): z\r\n\r\n", 400},
    {"control in value", "GET / HTTP/1.1\r\nHost: m\r\nX: a\x01z\r\n\r\n", 400},
    {"bad method", "G@T / HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"bad version", "GET / HTTP/1.x\r\nHost: m\r\n\r\n", 400},
    {"HTTP/2.0 text", "GET / HTTP/2.0\r\nHost: m\r\n\r\n", 505},
    {"absolute form, userinfo", "GET http://u@m/ HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"absolute form, other scheme", "GET ftp://m/ HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"space in target", "GET /a b HTTP/1.1\r\nHost: m\r\n\r\n", 400},
    {"expect other", "POST / HTTP/1.1\r\nHost: m\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417},
    {"body over limit", "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 1001\r\n\r\n", 413},
    {"chunked over limit", "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", 200},
};
/* clang-format on */

START_TEST(malformed_requests_are_refused_and_closed)
{
    for (size_t i = 0; i < sizeof(refused_cases) / sizeof(refused_cases[0]); i++) {
        int fd = test_connect(port);
        test_send_all(fd, refused_cases[i].request, strlen(refused_cases[i].request));
        if (strcmp(refused_cases[i].name, "chunked over limit") == 0) {
            char chunk[1001];
            memset(chunk, 'x', sizeof(chunk));
            send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
        }
        char head[1024], body[256];
        int status = read_response(fd, head, sizeof(head), body, sizeof(body), false);
        ck_assert_msg(status == refused_cases[i].status, "%s: got %d, want %d",
                      refused_cases[i].name, status, refused_cases[i].status);
        ck_assert_msg(status == 200 || strstr(head, "Connection: close\r\n") != NULL,
                      "%s: no Connection: close", refused_cases[i].name);
        ck_assert_msg(peer_closed(fd), "%s: connection left open", refused_cases[i].name);
        close(fd);
    }
}
END_TEST

START_TEST(oversized_heads_get_431)
{
    char big[2048];
    int n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: m\r\nX-Big: %01500d\r\n\r\n", 0);
    int fd = test_connect(port);
    test_send_all(fd, big, (size_t)n);
    char head[1024], body[256];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 431);
    ck_assert(peer_closed(fd));
    close(fd);

    /* An incomplete head that is already too big is refused without waiting. */
    fd = test_connect(port);
    test_send_all(fd, big, 1100);
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 431);
    close(fd);

    char many[1024] = "GET / HTTP/1.1\r\nHost: m\r\n";
    for (int i = 0; i < 25; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "X-%d: v\r\n", i);
    strcat(many, "\r\n");
    fd = test_connect(port);
    test_send_all(fd, many, strlen(many));
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 431);
    close(fd);
}
END_TEST

/* Sends `request` on a new connection and reads its answer, `status`; the
 * server then closes the connection, no sooner than `min_ms` after the
 * answer. */
static void answered_then_closed(const char *request, int status, uint64_t min_ms)
{
    int fd = test_connect(port);
    test_send_all(fd, request, strlen(request));
    char head[1024], body[256];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), status);
    uint64_t started = test_now_ms();
    ck_assert(peer_closed(fd));
    ck_assert_uint_ge(test_now_ms() - started, min_ms);
    close(fd);
}

START_TEST(slow_request_head_gets_408)
{
    stop();
    start(200, 0);
    int fd = test_connect(port);
    const char *part = "GET / HTTP/1.1\r\nHost: m";
    uint64_t started = test_now_ms();
    test_send_all(fd, part, strlen(part));
    char head[1024], body[256];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 408);
    ck_assert_uint_ge(test_now_ms() - started, 150);
    ck_assert(peer_closed(fd));
    close(fd);
    ck_assert_uint_eq(timeouts_counted(HTTP_TIMEOUT_HEADER), 1);
}
END_TEST

START_TEST(stalled_request_body_is_closed_and_counted)
{
    stop();
    start(200, 0);
    /* `return` answers at the head; the stalled body then ends the connection. */
    answered_then_closed("POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 10\r\n\r\nabc", 200, 100);
    test_wait_for(timeouts_counted(HTTP_TIMEOUT_BODY) > 0, TEST_WAIT_MS, "no body timeout counted");
    ck_assert_uint_eq(timeouts_counted(HTTP_TIMEOUT_BODY), 1);
}
END_TEST

START_TEST(idle_keepalive_connection_is_closed)
{
    stop();
    start(0, 200);
    answered_then_closed("GET / HTTP/1.1\r\nHost: m\r\n\r\n", 200, 150);
}
END_TEST

/* Restarts the server with an access log of `format` into a new file,
 * `path`: a mkstemp() template. */
static void log_start(char *path, const char *format)
{
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    close(tmp);
    const char *bad = NULL;
    ck_assert_int_eq(access_log_open(path, format, &access_log, &bad), 0);
    stop();
    start(0, 0);
}

/* Waits, briefly, for `want` bytes in the log at `path`, which it reads
 * into `written` (NUL-terminated) and removes; restarts the server
 * without the log.  Returns the length read. */
static size_t log_end(const char *path, char *written, size_t size, size_t want)
{
    size_t len = 0;
    for (int tries = 0; tries < 200 && len < want; tries++) {
        usleep(10000);
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        len = fread(written, 1, size - 1, f);
        fclose(f);
    }
    written[len] = '\0';
    unlink(path);
    stop();
    access_log_free(access_log);
    access_log = NULL;
    start(0, 0);
    return len;
}

/* A log line longer than any fixed budget for it: a long format literal,
 * a long target, and a user agent whose every byte is escaped. */
START_TEST(long_access_log_line_is_written_whole)
{
    static char format[4096], expected[8192];
    memset(format, '=', 3000);
    strcpy(format + 3000, "|$request_uri|$http_user_agent|");
    char path[] = "/tmp/corral-http1-log-XXXXXX";
    log_start(path, format);

    char agent[301], request[1024];
    memset(agent, '"', 300);
    agent[300] = '\0';
    int n = snprintf(request, sizeof(request),
                     "GET /%0400d HTTP/1.1\r\nHost: main.example\r\nUser-Agent: %s\r\n"
                     "Connection: close\r\n\r\n",
                     0, agent);
    int fd = test_connect(port);
    test_send_all(fd, request, (size_t)n);
    char head[1024], body[256];
    ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 200);
    close(fd);

    n = snprintf(expected, sizeof(expected), "%.3000s|/%0400d|", format, 0);
    for (int i = 0; i < 300; i++)
        n += snprintf(expected + n, sizeof(expected) - (size_t)n, "\\x22");
    snprintf(expected + n, sizeof(expected) - (size_t)n, "|\n");
    /* The line is written just after the response: wait for it, briefly. */
    static char written[16384];
    size_t len = log_end(path, written, sizeof(written), strlen(expected));
    ck_assert_uint_eq(len, strlen(expected));
    ck_assert_str_eq(written, expected);
}
END_TEST

/* $request ends with the protocol the request came in. */
START_TEST(access_log_names_the_protocol)
{
    char path[] = "/tmp/corral-http1-log-XXXXXX";
    log_start(path, "$request $status");

    static const char *const requests[] = {
        "GET /exact HTTP/1.0\r\n\r\n",
        "GET /exact HTTP/1.1\r\nHost: main.example\r\nConnection: close\r\n\r\n"};
    for (size_t i = 0; i < 2; i++) {
        int fd = test_connect(port);
        test_send_all(fd, requests[i], strlen(requests[i]));
        char head[1024], body[256];
        ck_assert_int_eq(read_response(fd, head, sizeof(head), body, sizeof(body), false), 201);
        close(fd);
    }
    /* Two workers may write the two lines in either order, just after the
     * responses: wait for both, briefly. */
    const size_t expected_len = 2 * strlen("GET /exact HTTP/1.0 201\n");
    char written[256];
    size_t len = log_end(path, written, sizeof(written), expected_len);
    ck_assert_uint_eq(len, expected_len);
    ck_assert_ptr_nonnull(strstr(written, "GET /exact HTTP/1.0 201\n"));
    ck_assert_ptr_nonnull(strstr(written, "GET /exact HTTP/1.1 201\n"));
}
END_TEST

START_TEST(responses_are_counted_by_status)
{
    int fd = test_connect(port);
    const char *reqs = "GET / HTTP/1.1\r\nHost: m\r\n\r\nGET /exact HTTP/1.1\r\nHost: m\r\n\r\n";
    test_send_all(fd, reqs, strlen(reqs));
    char head[1024], body[256];
    read_response(fd, head, sizeof(head), body, sizeof(body), false);
    read_response(fd, head, sizeof(head), body, sizeof(body), false);
    close(fd);
    uint64_t ok = 0, created = 0;
    for (int w = 0; w < 2; w++) {
        ok += atomic_load(&stats[w].responses[200]);
        created += atomic_load(&stats[w].responses[201]);
    }
    ck_assert_uint_eq(ok, 1);
    ck_assert_uint_eq(created, 1);
}
END_TEST

Suite *test_suite(void)
{
    modules_init(); /* the router's steps and the filters' places, before the forks */
    Suite *suite = suite_create("proto/http1");
    TCase *tc = tcase_create("http1");
    tcase_add_checked_fixture(tc, setup, stop);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, valid_requests_whole_and_split);
    tcase_add_test(tc, return_redirect_sets_location);
    tcase_add_test(tc, return_444_closes_without_answering);
    tcase_add_test(tc, return_redirect_keeps_a_long_location);
    tcase_add_test(tc, response_head_of_any_size_is_written_whole);
    tcase_add_test(tc, gathered_body_and_trailers);
    tcase_add_test(tc, pipelined_requests_are_answered_in_order);
    tcase_add_test(tc, connection_close_and_http10);
    tcase_add_test(tc, keepalive_requests_limit_closes_the_last);
    tcase_add_test(tc, malformed_requests_are_refused_and_closed);
    tcase_add_test(tc, oversized_heads_get_431);
    tcase_add_test(tc, slow_request_head_gets_408);
    tcase_add_test(tc, stalled_request_body_is_closed_and_counted);
    tcase_add_test(tc, idle_keepalive_connection_is_closed);
    tcase_add_test(tc, responses_are_counted_by_status);
    tcase_add_test(tc, long_access_log_line_is_written_whole);
    tcase_add_test(tc, access_log_names_the_protocol);
    suite_add_tcase(suite, tc);
    return suite;
}
