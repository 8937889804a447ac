/*
 * test_error_page.c: error_page through build/corral: pages for deny, no
 * location, a dead backend (served by `return` and by a live backend), the
 * "=" forms, redirects to a URL, inheritance, pages that fail themselves,
 * a request body dropped on a kept-alive connection, HTTP/2, the log.
 */
#include "tests/daemon.h"
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* ----------------------------------------------------------- the client */

static void start(struct test_daemon *d, const char *text)
{
    test_daemon_init(d, "corral");
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

/* Sends `request` on a new connection and reads until the server closes:
 * the responses in `out`. */
static void exchange(int port, const char *request, char *out, size_t size)
{
    int fd = test_connect(port);
    test_send_all(fd, request, strlen(request));
    size_t len = test_recv_all(fd, out, size - 1);
    out[len] = '\0';
    close(fd);
}

/* A GET that asks to close: its status, the response in `out`. */
static unsigned get(int port, const char *method, const char *path, char *out, size_t size)
{
    char request[512];
    snprintf(request, sizeof(request), "%s %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
             method, path);
    exchange(port, request, out, size);
    unsigned status = 0;
    sscanf(out, "HTTP/1.1 %u", &status);
    return status;
}

/* The body of the response in `response`. */
static const char *body_of(const char *response)
{
    const char *end = strstr(response, "\r\n\r\n");
    return end != NULL ? end + 4 : "";
}

/* Whether the response head in `response` has the line `line`. */
static bool has_header(const char *response, const char *line)
{
    const char *end = strstr(response, "\r\n\r\n");
    const char *at = strcasestr(response, line);
    return at != NULL && end != NULL && at < end && at[-1] == '\n';
}

/* A port nothing listens on: its socket stays bound, never listening,
 * until the case's process ends, so that connections to it are refused. */
static int dead_port(void)
{
    int port;
    ck_assert_int_ge(test_reserve_port(&port), 0);
    return port;
}

/* ------------------------------------------------- a recording backend */

/* The backend: a test_recorder answering every request with 200 and
 * "backend page\n". */
static const char backend_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                                     "Connection: close\r\n\r\nbackend page\n";

/* ---------------------------------------------------------------- cases */

/* Starts a config whose "%d" is a port nothing listens on. */
#define start_with_dead(d, fmt)                                                                    \
    do {                                                                                           \
        char text_[4096];                                                                          \
        snprintf(text_, sizeof(text_), fmt, dead_port());                                          \
        start(d, text_);                                                                           \
    } while (0)

#define PAGES_CONFIG                                                                               \
    "workers 1;\nadmin { listen 127.0.0.2:0; }\n"                                                  \
    "server {\n  listen 127.0.0.1:0;\n"                                                            \
    "  add_header X-Page yes always;\n"                                                            \
    "  error_page 404 /pages/404;\n"                                                               \
    "  error_page 502 503 504 /pages/50x?from=dead;\n"                                             \
    "  location /private { deny all; return 200 secret; error_page 403 /pages/403; }\n"            \
    "  location /pages/ { return 200 \"page $uri $args\\n\"; }\n"                                  \
    "  location = /gone { return 404; }\n"                                                         \
    "  location = /gone-text { return 404 \"own text\"; }\n"                                       \
    "  location /dead { proxy_pass http://127.0.0.1:%d; }\n"                                       \
    "}\n"

START_TEST(deny_and_no_location_get_their_pages)
{
    struct test_daemon d;
    start_with_dead(&d, PAGES_CONFIG);
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/private/x", out, sizeof(out)), 403);
    ck_assert_str_eq(body_of(out), "page /pages/403 \n");
    ck_assert(has_header(out, "X-Page: yes"));
    ck_assert_uint_eq(get(d.port, "GET", "/nowhere", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "page /pages/404 \n");
    /* `return 404;` takes the page, `return 404 TEXT` does not. */
    ck_assert_uint_eq(get(d.port, "GET", "/gone", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "page /pages/404 \n");
    ck_assert_uint_eq(get(d.port, "GET", "/gone-text", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "own text");
    /* HEAD stays HEAD: the page's length, no body. */
    ck_assert_uint_eq(get(d.port, "HEAD", "/nowhere", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "");
    ck_assert(has_header(out, "Content-Length: 17"));
    test_daemon_stop(&d);
}
END_TEST

START_TEST(dead_backend_page_from_return)
{
    struct test_daemon d;
    start_with_dead(&d, PAGES_CONFIG);
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/dead/x?q=1", out, sizeof(out)), 502);
    ck_assert_str_eq(body_of(out), "page /pages/50x from=dead\n");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(dead_backend_page_from_live_backend)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0;\n"
             "  location /dead { proxy_pass http://127.0.0.1:%d; error_page 502 /static/sorry; }\n"
             "  location /static/ { proxy_pass http://127.0.0.1:%d; }\n"
             "}\n",
             dead_port(), b.server.port);
    struct test_daemon d;
    start(&d, text);
    char out[4096];
    exchange(d.port,
             "POST /dead/form HTTP/1.1\r\nHost: site\r\nCookie: c=1\r\nContent-Length: 5\r\n"
             "Connection: close\r\n\r\nhello",
             out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 502 ", 13) == 0, "%s", out);
    ck_assert_str_eq(body_of(out), "backend page\n");
    pthread_mutex_lock(&b.lock);
    ck_assert_uint_eq(b.requests, 1);
    /* GET with no body, the client's fields passed on. */
    ck_assert_msg(strncmp(b.last, "GET /static/sorry HTTP/1.1\r\n", 28) == 0, "%s", b.last);
    ck_assert_msg(strcasestr(b.last, "\r\ncookie: c=1\r\n") != NULL, "%s", b.last);
    ck_assert_msg(strcasestr(b.last, "content-length") == NULL, "%s", b.last);
    ck_assert_msg(strstr(b.last, "hello") == NULL, "%s", b.last);
    pthread_mutex_unlock(&b.lock);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

START_TEST(response_code_forms)
{
    struct test_daemon d;
    start_with_dead(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                        "upstream dead { server 127.0.0.1:%d; }\n"
                        "server {\n  listen 127.0.0.1:0;\n"
                        "  location /to200 { proxy_pass http://dead; error_page 502 =200 /p; }\n"
                        "  location /own { proxy_pass http://dead; error_page 502 = /created; }\n"
                        "  location = /p { return 200 \"p\\n\"; }\n"
                        "  location = /created { return 201 \"made\\n\"; }\n"
                        "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/to200", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "p\n");
    ck_assert_uint_eq(get(d.port, "GET", "/own", out, sizeof(out)), 201);
    ck_assert_str_eq(body_of(out), "made\n");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(redirects_to_a_url)
{
    struct test_daemon d;
    start(&d,
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server {\n  listen 127.0.0.1:0;\n"
          "  error_page 404 https://errors.example/missing?host=$host;\n"
          "  location /old { deny all; return 200 x; error_page 403 =301 http://new.example/; }\n"
          "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/nothing", out, sizeof(out)), 302);
    ck_assert_msg(has_header(out, "Location: https://errors.example/missing?host=h"), "%s", out);
    ck_assert_uint_eq(get(d.port, "GET", "/old", out, sizeof(out)), 301);
    ck_assert_msg(has_header(out, "Location: http://new.example/"), "%s", out);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(inherited_only_without_own)
{
    struct test_daemon d;
    start(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
              "error_page 403 404 /top;\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  location /a { deny all; return 200 x; }\n"
              "  location /b { deny all; return 200 x; error_page 404 /own; }\n"
              "  location = /top { return 200 \"top\\n\"; }\n"
              "  location = /own { return 200 \"own\\n\"; }\n"
              "}\n"
              "server {\n  listen 127.0.0.1:0;\n  server_name other;\n"
              "  error_page 404 /srv;\n"
              "  location = /srv { return 200 \"srv\\n\"; }\n"
              "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/a", out, sizeof(out)), 403);
    ck_assert_str_eq(body_of(out), "top\n");
    /* /b has a 404 page of its own: the top level's 403 is not inherited. */
    ck_assert_uint_eq(get(d.port, "GET", "/b", out, sizeof(out)), 403);
    ck_assert_str_eq(body_of(out), "403 Forbidden\n");
    ck_assert_uint_eq(get(d.port, "GET", "/zzz", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "top\n");
    exchange(d.port, "GET /zzz HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n", out,
             sizeof(out));
    ck_assert_str_eq(body_of(out), "srv\n");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(failing_pages_get_the_builtin_answer)
{
    struct test_daemon d;
    start_with_dead(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                        "upstream dead { server 127.0.0.1:%d; }\n"
                        "server {\n  listen 127.0.0.1:0;\n"
                        "  error_page 404 /missing/page;\n"
                        "  location /a { proxy_pass http://dead; error_page 502 /dead-page; }\n"
                        "  location /dead-page { proxy_pass http://dead; error_page 502 /a; }\n"
                        "  location = /b { deny all; return 200 x; error_page 403 /nowhere; }\n"
                        "  location = /c { deny all; return 200 x; error_page 403 /gone; }\n"
                        "  location = /gone { return 404; }\n"
                        "  location = /missing/page { deny all; return 200 x; }\n"
                        "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/a", out, sizeof(out)), 502);
    ck_assert_str_eq(body_of(out), "502 Bad Gateway\n");
    /* The page is not found: its own 404, built in. */
    ck_assert_uint_eq(get(d.port, "GET", "/b", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "404 Not Found\n");
    /* The page's location answers `return 404;`: built in, 404. */
    ck_assert_uint_eq(get(d.port, "GET", "/c", out, sizeof(out)), 404);
    ck_assert_str_eq(body_of(out), "404 Not Found\n");
    ck_assert_uint_eq(get(d.port, "GET", "/zzz", out, sizeof(out)), 403);
    ck_assert_str_eq(body_of(out), "403 Forbidden\n");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(limits_and_rewrite_loops_get_pages)
{
    struct test_daemon d;
    start(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
              "limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  error_page 429 500 /pages/sorry;\n"
              "  location /limited { limit_req zone=one; limit_req_status 429; return 200 ok; }\n"
              "  location /loop { rewrite ^ /loop; return 200 x; }\n"
              "  location /pages/ { return 200 \"page $uri\\n\"; }\n"
              "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/limited", out, sizeof(out)), 200);
    ck_assert_uint_eq(get(d.port, "GET", "/limited", out, sizeof(out)), 429);
    ck_assert_str_eq(body_of(out), "page /pages/sorry\n");
    ck_assert_uint_eq(get(d.port, "GET", "/loop", out, sizeof(out)), 500);
    ck_assert_str_eq(body_of(out), "page /pages/sorry\n");
    test_daemon_stop(&d);
}
END_TEST

/* "@name": the request goes, with its own URI, to a location that no
 * request reaches by its path. */
START_TEST(named_locations)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0;\n"
             "  location /app/ { proxy_pass http://127.0.0.1:%d; error_page 502 = @fallback; }\n"
             "  location / { deny all; return 200 x; error_page 403 @text; }\n"
             "  location @fallback { proxy_pass http://127.0.0.1:%d; }\n"
             "  location @text { return 200 \"text for $uri\\n\"; }\n"
             "  location /z { deny all; return 200 x; error_page 403 @zipped; }\n"
             "  location @zipped { gzip on; gzip_types text/plain;\n"
             "    return 200 \"zipped zipped zipped zipped zipped zipped\"; }\n"
             "}\n",
             dead_port(), b.server.port);
    struct test_daemon d;
    start(&d, text);
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/app/x?y=1", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "backend page\n");
    pthread_mutex_lock(&b.lock);
    ck_assert_msg(strncmp(b.last, "GET /app/x?y=1 HTTP/1.1\r\n", 25) == 0, "%s", b.last);
    pthread_mutex_unlock(&b.lock);
    ck_assert_uint_eq(get(d.port, "GET", "/other", out, sizeof(out)), 403);
    ck_assert_str_eq(body_of(out), "text for /other\n");
    /* A path that spells the name reaches no named location. */
    ck_assert_uint_eq(get(d.port, "GET", "/@text", out, sizeof(out)), 403);
    /* The named location's filters apply, as after a search (nginx's
     * gzip there compresses the page). */
    exchange(d.port,
             "GET /z HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
             out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 403", 12) == 0, "%s", out);
    ck_assert_msg(strstr(out, "\r\nContent-Encoding: gzip\r\n") != NULL, "%s", out);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* A server's own return answers every request of the server, in its
 * rewrite phase: a location beside it is never searched (nginx's classic
 * redirect server), and the server's add_header lines go with it. */
START_TEST(server_return_answers_every_request)
{
    struct test_daemon d;
    start(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
              "server {\n  listen 127.0.0.1:0;\n"
              "  add_header X-Server yes always;\n"
              "  return 301 https://example.com$request_uri;\n"
              "  location / { return 200 never; }\n"
              "}\n");
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/a?b=1", out, sizeof(out)), 301);
    ck_assert_msg(strstr(out, "\r\nLocation: https://example.com/a?b=1\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\r\nX-Server: yes\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "never") == NULL, "%s", out);
    test_daemon_stop(&d);
}
END_TEST

/* A POST to a dead backend, its body partly sent after the head, then a
 * second request on the same connection: the body is dropped, never read
 * as a request. */
START_TEST(request_body_is_dropped_on_a_kept_connection)
{
    struct test_daemon d;
    start_with_dead(&d, PAGES_CONFIG);
    int fd = test_connect(d.port);
    static const char head[] = "POST /dead HTTP/1.1\r\nHost: h\r\nContent-Length: 40\r\n\r\n"
                               "GET /nowhere HTTP/1.1\r\n";
    test_send_all(fd, head, sizeof(head) - 1);
    /* The rest after the 502 has begun: it may come before the body ends,
     * or not at all until then, so 200 ms at most. */
    poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 200);
    static const char rest[] = "Host: h\r\n\r\n012345"
                               "GET /private HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    test_send_all(fd, rest, sizeof(rest) - 1);
    char out[8192];
    size_t len = test_recv_all(fd, out, sizeof(out) - 1);
    out[len] = '\0';
    close(fd);
    ck_assert_msg(strncmp(out, "HTTP/1.1 502 ", 13) == 0, "%s", out);
    const char *second = strstr(out + 13, "HTTP/1.1 ");
    ck_assert_msg(second != NULL && strncmp(second, "HTTP/1.1 403 ", 13) == 0, "%s", out);
    ck_assert_msg(strstr(out, "page /pages/50x from=dead\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "page /pages/403 \n") != NULL, "%s", out);
    ck_assert_msg(strstr(second + 13, "HTTP/1.1 ") == NULL, "%s", out);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(http2_gets_the_same_pages)
{
    char text[4096];
    snprintf(text, sizeof(text), PAGES_CONFIG, dead_port());
    char *listen = strstr(text, "127.0.0.1:0;");
    ck_assert_ptr_nonnull(listen);
    memmove(listen + 17, listen + 11, strlen(listen + 11) + 1);
    memcpy(listen + 11, " http2", 6);
    struct test_daemon d;
    start(&d, text);
    char command[512], out[1024];
    /* The third posts a body, which the page's request goes without. */
    static const char *const paths[] = {"/dead", "/nowhere", "/dead -d body=1"};
    static const char *const expected[] = {"page /pages/50x from=dead\n v=2 code=502",
                                           "page /pages/404 \n v=2 code=404",
                                           "page /pages/50x from=dead\n v=2 code=502"};
    for (int i = 0; i < 3; i++) {
        snprintf(command, sizeof(command),
                 "curl -s --max-time 20 --http2-prior-knowledge -w ' v=%%{http_version} "
                 "code=%%{http_code}' http://127.0.0.1:%d%s",
                 d.port, paths[i]);
        test_run(command, out, sizeof(out));
        ck_assert_str_eq(out, expected[i]);
    }
    test_daemon_stop(&d);
}
END_TEST

START_TEST(access_log_has_what_the_client_got)
{
    char text[4096 + PATH_MAX], log[PATH_MAX];
    test_daemon_file(log, sizeof(log), "access.log");
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "log_format short \"$status $request_uri $body_bytes_sent\";\n"
             "server {\n  listen 127.0.0.1:0;\n  access_log %s short;\n"
             "  error_page 404 = /made;\n"
             "  location = /made { return 201 \"made\\n\"; }\n"
             "}\n",
             log);
    struct test_daemon d;
    start(&d, text);
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/nothing?x=1", out, sizeof(out)), 201);
    test_daemon_stop(&d);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    ck_assert_str_eq(line, "201 /nothing?x=1 5\n");
}
END_TEST

/* The first line of the file `path`, in `line`. */
static void first_line(const char *path, char *line, size_t size)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    line[0] = '\0';
    ck_assert_ptr_nonnull(fgets(line, (int)size, f));
    fclose(f);
}

/* As nginx's: every server asked is logged, ", " between the servers of
 * one upstream pass, " : " before the pass an error_page started. */
START_TEST(access_log_lists_every_server_asked)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    int dead = dead_port(), dead2 = dead_port();
    char text[4096 + PATH_MAX], log[PATH_MAX];
    test_daemon_file(log, sizeof(log), "access.log");
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "log_format ups \"$status $upstream_addr|$upstream_status|$upstream_response_time|"
             "$upstream_header_time\";\n"
             "upstream two {\n  server 127.0.0.1:%d;\n  server 127.0.0.1:%d;\n}\n"
             "server {\n  listen 127.0.0.1:0;\n  access_log %s ups;\n"
             "  location /dead { proxy_pass http://two; error_page 502 /static/sorry; }\n"
             "  location /static/ { proxy_pass http://127.0.0.1:%d; }\n"
             "}\n",
             dead, dead2, log, b.server.port);
    struct test_daemon d;
    start(&d, text);
    char out[4096];
    ck_assert_uint_eq(get(d.port, "GET", "/dead/x", out, sizeof(out)), 502);
    ck_assert_str_eq(body_of(out), "backend page\n");
    test_daemon_stop(&d);
    char line[512], addrs[256];
    first_line(log, line, sizeof(line));
    /* Either dead server may be asked first. */
    char *bar = strchr(line, '|');
    ck_assert_ptr_nonnull(bar);
    size_t len = (size_t)(bar - line);
    ck_assert_uint_lt(len, sizeof(addrs));
    memcpy(addrs, line, len);
    addrs[len] = '\0';
    char expected[256], swapped[256];
    snprintf(expected, sizeof(expected), "502 127.0.0.1:%d, 127.0.0.1:%d : 127.0.0.1:%d", dead,
             dead2, b.server.port);
    snprintf(swapped, sizeof(swapped), "502 127.0.0.1:%d, 127.0.0.1:%d : 127.0.0.1:%d", dead2, dead,
             b.server.port);
    ck_assert_msg(strcmp(addrs, expected) == 0 || strcmp(addrs, swapped) == 0, "%s", line);
    /* Times for all three, a head from the live one only. */
    unsigned sec[4], ms[4];
    char end;
    ck_assert_msg(sscanf(bar + 1, "502, 502 : 200|%u.%3u, %u.%3u : %u.%3u|-, - : %u.%3u%c", &sec[0],
                         &ms[0], &sec[1], &ms[1], &sec[2], &ms[2], &sec[3], &ms[3], &end) == 9 &&
                      end == '\n',
                  "%s", line);
    test_recorder_stop(&b);
}
END_TEST

START_TEST(config_errors_have_positions)
{
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"server { listen 127.0.0.1:0;\n error_page 404 /p$nope; }\n",
         "corral.conf:2:17: error_page: unknown variable \"$nope\""},
        {"server { listen 127.0.0.1:0;\n location / { error_page 404 @fallback; return 200; } }\n",
         "corral.conf:2:30: no location \"@fallback\" in the server at line 1"},
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
    Suite *s = suite_create("error_page");
    TCase *tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_add_test(tc, deny_and_no_location_get_their_pages);
    tcase_add_test(tc, dead_backend_page_from_return);
    tcase_add_test(tc, dead_backend_page_from_live_backend);
    tcase_add_test(tc, response_code_forms);
    tcase_add_test(tc, redirects_to_a_url);
    tcase_add_test(tc, inherited_only_without_own);
    tcase_add_test(tc, failing_pages_get_the_builtin_answer);
    tcase_add_test(tc, limits_and_rewrite_loops_get_pages);
    tcase_add_test(tc, named_locations);
    tcase_add_test(tc, server_return_answers_every_request);
    tcase_add_test(tc, request_body_is_dropped_on_a_kept_connection);
    tcase_add_test(tc, http2_gets_the_same_pages);
    tcase_add_test(tc, access_log_has_what_the_client_got);
    tcase_add_test(tc, access_log_lists_every_server_asked);
    tcase_add_test(tc, config_errors_have_positions);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
