/*
 * test_access_log.c: the access log through the daemon: log_format
 * escape=json lines that a JSON parser reads whatever the client sent, the
 * named formats access_log picks, and the lines of requests refused before
 * they were whole (400, 408, 413, 431, 499), which name the client and the
 * request line as received.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The access log's name in the case's directory. */
static void log_path(char *path, size_t size)
{
    test_daemon_file(path, size, "access.log");
}

/* A daemon with `extra` at the top level and `location` in its server's
 * "location /", which returns 200 unless `location` says otherwise; its
 * listen has `flags` ("http2"). */
static void start_with(struct test_daemon *d, const char *extra, const char *location,
                       const char *flags)
{
    test_daemon_init(d, "corral");
    char conf[4096];
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 200ms;\n%s\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0 %s;\n"
             "    location / { %s }\n}\n",
             extra, flags, location != NULL ? location : "return 200 \"ok\";");
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

static void start(struct test_daemon *d, const char *extra, const char *location)
{
    start_with(d, extra, location, "");
}

/* Sends `len` bytes of `request` on a new connection and reads until the
 * daemon closes it (or 5 s pass). */
static void exchange_raw(int port, const char *request, size_t len)
{
    int fd = test_connect(port);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    test_send_all(fd, request, len);
    char response[4096];
    while (recv(fd, response, sizeof(response), 0) > 0)
        ;
    close(fd);
}

static void exchange_text(int port, const char *request)
{
    exchange_raw(port, request, strlen(request));
}

/* Waits up to 5 s for `lines` lines in the file at `path`; returns its
 * text (free it). */
static char *wait_lines(const char *path, unsigned lines)
{
    char *text = NULL;
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i <= TEST_WAIT_MS / TEST_POLL_MS && test_now_ms() < deadline; i++) {
        free(text);
        text = test_read_file(path);
        unsigned n = 0;
        for (const char *p = text; p != NULL && (p = strchr(p, '\n')) != NULL; p++)
            n++;
        if (n >= lines)
            return text;
        test_sleep_ms(TEST_POLL_MS);
    }
    ck_abort_msg("fewer than %u lines in %s:\n%s", lines, path, text != NULL ? text : "");
    return NULL;
}

/* Parses every line of `path` with Python's JSON parser, the file read as
 * strict UTF-8; `out` gets, a line each, [status, request, ua] as JSON
 * with only ASCII.  Returns the parser's exit status (0: all parsed). */
static int parse_json_lines(const char *path, char *out, size_t size)
{
    char command[PATH_MAX + 512];
    snprintf(command, sizeof(command),
             "python3 -c 'import json, sys\n"
             "for line in open(sys.argv[1], encoding=\"utf-8\", errors=\"strict\"):\n"
             "    o = json.loads(line)\n"
             "    print(json.dumps([o[\"status\"], o[\"request\"], o[\"ua\"]]))' %s 2>&1",
             path);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(out, 1, size - 1, p);
    out[len] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Requests whose user agents and targets hold what a JSON string must
 * escape or replace; some are refused (400), and logged all the same. */
/* A string literal and its length, NULs included. */
#define RAW(s) s, sizeof(s) - 1

static const struct {
    const char *text;
    size_t len;
    const char *expect; /* in the parsed line, as json.dumps() writes it */
} hostile[] = {
    {RAW("GET /q HTTP/1.1\r\nHost: t\r\nUser-Agent: a\"b\\c\r\nConnection: close\r\n\r\n"),
     "[200, \"GET /q HTTP/1.1\", \"a\\\"b\\\\c\"]"},
    {RAW("GET /t HTTP/1.1\r\nHost: t\r\nUser-Agent: tab\there\r\nConnection: close\r\n\r\n"),
     "\"tab\\there\""},
    {RAW("GET /u HTTP/1.1\r\nHost: t\r\nUser-Agent: \xc3\xa9\xe2\x82\xac\r\n"
         "Connection: close\r\n\r\n"),
     "\"\\u00e9\\u20ac\""},
    {RAW("GET /v HTTP/1.1\r\nHost: t\r\nUser-Agent: x\xff\xc3\x28\xed\xa0\x80y\r\n"
         "Connection: close\r\n\r\n"),
     "\"x\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffdy\""},
    {RAW("GET /a%00b?c=%22 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
     "\"GET /a%00b?c=%22 HTTP/1.1\""},
    {RAW("GET /ctl HTTP/1.1\r\nHost: t\r\nUser-Agent: a\x01z\r\nConnection: close\r\n\r\n"),
     "[400, \"GET /ctl HTTP/1.1\", \"\"]"},
    {RAW("GET /\"\\\x7f\xff HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
     "\"GET /\\\"\\\\\\u007f\\ufffd HTTP/1.1\""},
    {RAW("GET /nul\0x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
     "\"GET /nul\\u0000x HTTP/1.1\""},
};

#define JSON_FORMAT                                                                                \
    "log_format json escape=json '{\"remote\":\"$remote_addr\",\"request\":\"$request\","          \
    "\"status\":$status,\"ua\":\"$http_user_agent\",\"ref\":\"$http_referer\"}';"

START_TEST(json_lines_parse_for_hostile_requests)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    /* _i == 1: the default escaping, which a JSON parser refuses: the
     * check can fail. */
    snprintf(extra, sizeof(extra), "%s\naccess_log %s json;",
             _i == 0 ? JSON_FORMAT
                     : "log_format json '{\"request\":\"$request\",\"status\":"
                       "$status,\"ua\":\"$http_user_agent\"}';",
             path);
    struct test_daemon d;
    start(&d, extra, NULL);
    size_t count = sizeof(hostile) / sizeof(hostile[0]);
    for (size_t i = 0; i < count; i++)
        exchange_raw(d.port, hostile[i].text, hostile[i].len);
    free(wait_lines(path, (unsigned)count));
    test_daemon_stop(&d);

    char parsed[16384];
    int status = parse_json_lines(path, parsed, sizeof(parsed));
    if (_i == 1) {
        ck_assert_msg(status != 0, "default escaping parsed as JSON:\n%s", parsed);
        return;
    }
    ck_assert_msg(status == 0, "a line is not JSON:\n%s", parsed);
    for (size_t i = 0; i < count; i++)
        ck_assert_msg(strstr(parsed, hostile[i].expect) != NULL, "no %s in:\n%s", hostile[i].expect,
                      parsed);
}
END_TEST

/* nginx writes an empty value as "" in JSON, not "-". */
START_TEST(json_empty_values_stay_empty)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra), "%s\naccess_log %s json;", JSON_FORMAT, path);
    struct test_daemon d;
    start(&d, extra, NULL);
    exchange_text(d.port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char *text = wait_lines(path, 1);
    ck_assert_msg(strstr(text, "\"ua\":\"\",\"ref\":\"\"}") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\"remote\":\"127.0.0.1\"") != NULL, "%s", text);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

/* access_log PATH NAME picks a named format; "combined" is built in; a
 * name never defined, or a bad escape=, is refused by -t. */
START_TEST(named_formats_and_their_errors)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra),
             "log_format short '$status ' \"$request_method\";\n"
             "log_format \"$status unnamed\";\naccess_log %s short;",
             path);
    struct test_daemon d;
    start(&d, extra, NULL);
    exchange_text(d.port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char *text = wait_lines(path, 1);
    ck_assert_str_eq(text, "200 GET\n");
    free(text);
    test_daemon_stop(&d);

    unlink(path);
    unlink(d.log);
    snprintf(extra, sizeof(extra), "access_log %s combined;", path);
    start(&d, extra, NULL);
    exchange_text(d.port,
                  "GET /c HTTP/1.1\r\nHost: t\r\nUser-Agent: ua\r\nConnection: close\r\n\r\n");
    text = wait_lines(path, 1);
    ck_assert_msg(strstr(text, "127.0.0.1 - - [") == text, "%s", text);
    ck_assert_msg(strstr(text, "] \"GET /c HTTP/1.1\" 200 2 \"-\" \"ua\"\n") != NULL, "%s", text);
    free(text);
    test_daemon_stop(&d);

    static const struct {
        const char *extra, *message;
    } bad[] = {
        {"access_log /dev/null nope;", "access_log: unknown log_format \"nope\""},
        {"log_format j escape=yaml '$status';", "unknown log_format escape \"yaml\""},
        {"log_format j '$status';\nlog_format j '$uri';", "duplicate log_format \"j\""},
        {"log_format j escape=json '$nope';", "log_format: unknown variable \"$nope\""},
        {"access_log off x;", "\"access_log off\" takes nothing more"},
        {"server { listen 127.0.0.1:0; server_name x.test; location /x { access_log /dev/null "
         "inner; return 200; } }",
         "access_log: unknown log_format \"inner\""},
        {"access_log /dev/null buffer=0;", "\"buffer\" must be more than 0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char conf[PATH_MAX], out[2048], args[PATH_MAX + 8];
        test_daemon_file(conf, sizeof(conf), "bad.conf");
        snprintf(extra, sizeof(extra),
                 "%s\nserver { listen 127.0.0.1:0; location / { return 200; } }\n", bad[i].extra);
        test_write_file(conf, extra);
        snprintf(args, sizeof(args), "-t -c %s", conf);
        ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, bad[i].message) != NULL, "%s: %s", bad[i].extra, out);
    }
}
END_TEST

/* Refused requests: each line names the client and the request line as
 * received; "-" only when not even the request line came. */
static const struct {
    const char *request;
    const char *expect;
} refused[] = {
    {"GET /bad HTTP/1.1\r\nHost: t\r\nNo colon here\r\n\r\n", "\"GET /bad HTTP/1.1\" 400 "},
    {"GET /nohost HTTP/1.1\r\nConnection: close\r\n\r\n", "\"GET /nohost HTTP/1.1\" 400 "},
    {"GET  /two  spaces HTTP/1.1\r\nHost: t\r\n\r\n", "\"GET  /two  spaces HTTP/1.1\" 400 "},
    {"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n", "\"POST /big HTTP/1.1\" 413 "},
    {"GET /slow HTTP/1.1\r\nHost: t\r\n", "\"GET /slow HTTP/1.1\" 408 "},
    {"GET /partial", "\"-\" 408 "},
    {NULL, "\"GET /huge HTTP/1.1\" 431 "}, /* a head over client_max_header_size */
};

START_TEST(refused_requests_name_the_client_and_the_request)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra),
             "client_max_body_size 10;\nclient_header_timeout 300ms;\n"
             "client_max_header_size 1k;\naccess_log %s;",
             path);
    struct test_daemon d;
    start(&d, extra, NULL);
    char huge[2048];
    snprintf(huge, sizeof(huge), "GET /huge HTTP/1.1\r\nHost: t\r\nX-Big: %01500d\r\n\r\n", 0);
    const char *request = refused[_i].request != NULL ? refused[_i].request : huge;
    exchange_text(d.port, request);
    char *text = wait_lines(path, 1);
    ck_assert_msg(strstr(text, "127.0.0.1 - - [") == text, "%s", text);
    ck_assert_msg(strstr(text, refused[_i].expect) != NULL, "expected %s in:\n%s",
                  refused[_i].expect, text);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

/* A client that leaves before its response (here while its body is
 * still coming): 499, with its request. */
START_TEST(client_gone_is_499_with_its_request)
{
    int port;
    int silent = test_listen(&port, 16); /* accepts, never answers */
    char path[256], extra[1024], location[256];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra), "access_log %s;", path);
    snprintf(location, sizeof(location), "proxy_pass http://127.0.0.1:%d;", port);
    struct test_daemon d;
    start(&d, extra, location);
    int fd = test_connect(d.port);
    const char *request = "POST /gone?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123";
    test_send_all(fd, request, strlen(request));
    /* The client goes once the request is being proxied: the daemon has
     * connected to the upstream. */
    struct pollfd upstream = {.fd = silent, .events = POLLIN};
    ck_assert_msg(poll(&upstream, 1, TEST_WAIT_MS) == 1, "the request was not proxied");
    close(fd);
    char *text = wait_lines(path, 1);
    ck_assert_msg(strstr(text, "127.0.0.1 - - [") == text, "%s", text);
    ck_assert_msg(strstr(text, "\"POST /gone?x=1 HTTP/1.1\" 499 ") != NULL, "%s", text);
    free(text);
    test_daemon_stop(&d);
    close(silent);
}
END_TEST

/* $body_bytes_sent counts each body byte however it left: a 1 MiB file
 * sent from disk by one server, and proxied through another, which
 * splices the body past the log's counter (an observer, which keeps the
 * zero-copy paths). */
START_TEST(body_bytes_sent_counts_files_and_spliced_bodies)
{
    char path[256], file[1024], extra[2048], location[256];
    log_path(path, sizeof(path));
    test_daemon_file(file, sizeof(file), "big");
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 1024 * 1024; i++)
        fputc('a' + i % 26, f);
    ck_assert_int_eq(fclose(f), 0);
    *strrchr(file, '/') = '\0';
    int port;
    close(test_reserve_port(&port));
    snprintf(extra, sizeof(extra),
             "log_format bytes '$server_port $request_uri $status $body_bytes_sent';\n"
             "access_log %s bytes;\n"
             "server { listen 127.0.0.1:%d; location / { root %s; } }",
             path, port, file);
    snprintf(location, sizeof(location), "proxy_pass http://127.0.0.1:%d;", port);
    struct test_daemon d;
    start(&d, extra, location);
    exchange_text(d.port, "GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char *text = wait_lines(path, 2);
    char want[64];
    snprintf(want, sizeof(want), "%d /big 200 1048576\n", port);
    ck_assert_msg(strstr(text, want) != NULL, "%s", text);
    snprintf(want, sizeof(want), "%d /big 200 1048576\n", d.port);
    ck_assert_msg(strstr(text, want) != NULL, "%s", text);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

/* HTTP/2: a header list over http2_max_header_list_size is refused with
 * 431, logged with the client and the request as far as it came. */
START_TEST(http2_refused_header_list_is_logged_with_its_request)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra), "http2_max_header_list_size 1k;\naccess_log %s;", path);
    struct test_daemon d;
    start_with(&d, extra, NULL, "http2");
    char command[4096];
    snprintf(command, sizeof(command),
             "curl -s -o /dev/null --max-time 10 --http2-prior-knowledge -H 'X-Big: %02000d' "
             "http://127.0.0.1:%d/h2big",
             0, d.port);
    ck_assert_int_ne(system(command), -1);
    char *text = wait_lines(path, 1);
    ck_assert_msg(strstr(text, "127.0.0.1 - - [") == text, "%s", text);
    /* The block is cut off at the limit, before any of it is decoded. */
    ck_assert_msg(strstr(text, "\"-\" 431 ") != NULL, "%s", text);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

static unsigned count_lines(const char *text)
{
    unsigned n = 0;
    for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++)
        n++;
    return n;
}

/* access_log in server and location blocks: the innermost level with
 * access_log lines gets a request's line (nginx's rule), every line of
 * that level does, and `off` turns a level off. */
START_TEST(levels_follow_nginx_inheritance)
{
    char top[256], sa1[256], sa2[256], loc[256];
    test_daemon_file(top, sizeof(top), "top.log");
    test_daemon_file(sa1, sizeof(sa1), "a1.log");
    test_daemon_file(sa2, sizeof(sa2), "a2.log");
    test_daemon_file(loc, sizeof(loc), "loc.log");
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[4096];
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 200ms;\nadmin { listen 127.0.0.2:0; }\n"
             "log_format short '$host $request_uri';\naccess_log %s;\n"
             "server {\n    listen 127.0.0.1:0;\n    server_name a.test;\n"
             "    access_log %s;\n    access_log %s short;\n"
             "    location / { return 200 \"a\"; }\n"
             "    location /loc { access_log %s short; return 200 \"loc\"; }\n"
             "    location /off { access_log off; return 200 \"off\"; }\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    server_name b.test;\n"
             "    location / { return 200 \"b\"; }\n}\n",
             top, sa1, sa2, loc);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    static const char *const requests[] = {
        "GET /a HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        "GET /loc/x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        "GET /off HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        "GET /b HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n",
        "GET /bad HTTP/1.1\r\nHost: a.test\r\nNo colon\r\n\r\n", /* the default server's */
    };
    for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++)
        exchange_text(d.port, requests[i]);
    test_daemon_stop(&d);
    char *text = test_read_file(top);
    ck_assert_msg(count_lines(text) == 1 && strstr(text, "\"GET /b HTTP/1.1\" 200 ") != NULL,
                  "top:\n%s", text);
    free(text);
    text = test_read_file(sa1);
    ck_assert_msg(count_lines(text) == 2 && strstr(text, "\"GET /a HTTP/1.1\" 200 ") != NULL &&
                      strstr(text, "\"GET /bad HTTP/1.1\" 400 ") != NULL,
                  "server a:\n%s", text);
    free(text);
    text = test_read_file(sa2);
    ck_assert_msg(strstr(text, "a.test /a\n") == text && count_lines(text) == 2,
                  "server a, short:\n%s", text);
    free(text);
    text = test_read_file(loc);
    ck_assert_str_eq(text, "a.test /loc/x\n");
    free(text);
}
END_TEST

/* buffer= with flush=: a worker's lines are written within the flush
 * time, with the daemon running (buffer= alone keeps them until the end:
 * see below). */
START_TEST(buffered_lines_are_written_at_the_flush_time)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra), "access_log %s buffer=64k flush=500ms;", path);
    struct test_daemon d;
    start(&d, extra, NULL);
    for (int i = 0; i < 4; i++)
        exchange_text(d.port, "GET /1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char *text = wait_lines(path, 4);
    ck_assert_uint_eq(count_lines(text), 4);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

/* buffer= alone: the lines are written when the buffer is full, or when
 * their generation ends: none is lost at a reload or a stop. */
START_TEST(buffered_lines_survive_a_reload_and_a_stop)
{
    char path[256], extra[1024];
    log_path(path, sizeof(path));
    snprintf(extra, sizeof(extra), "access_log %s buffer=64k;", path);
    struct test_daemon d;
    start(&d, extra, NULL);
    for (int i = 0; i < 6; i++)
        exchange_text(d.port, "GET /before HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    /* Each line is logged as its response goes out: the first five had
     * the time of the requests after them to show.  Nothing marks that the
     * last was held back rather than late: a short pause for it. */
    test_sleep_ms(20);
    char *text = test_read_file(path);
    ck_assert_msg(text[0] == '\0', "written before the buffer filled:\n%s", text);
    free(text);
    kill(d.pid, SIGHUP);
    text = wait_lines(path, 6); /* when generation 1 ends */
    ck_assert_uint_eq(count_lines(text), 6);
    free(text);
    for (int i = 0; i < 5; i++)
        exchange_text(d.port, "GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    test_daemon_stop(&d);
    text = test_read_file(path);
    ck_assert_msg(count_lines(text) == 11, "%s", text);
    ck_assert_ptr_nonnull(strstr(text, "\"GET /after HTTP/1.1\" 200 "));
    free(text);

    /* Lines longer than the buffer go out at once, after those before. */
    unlink(path);
    unlink(d.log);
    snprintf(extra, sizeof(extra), "access_log %s buffer=100;", path);
    start(&d, extra, NULL);
    exchange_text(d.port, "GET /short HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char request[512];
    snprintf(request, sizeof(request),
             "GET /%0200d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 0);
    exchange_text(d.port, request);
    test_daemon_stop(&d);
    text = test_read_file(path);
    ck_assert_msg(count_lines(text) == 2, "%s", text);
    free(text);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("cmd/access_log");
    TCase *tc = tcase_create("access_log");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, json_lines_parse_for_hostile_requests, 0, 2);
    tcase_add_test(tc, json_empty_values_stay_empty);
    tcase_add_test(tc, named_formats_and_their_errors);
    tcase_add_loop_test(tc, refused_requests_name_the_client_and_the_request, 0,
                        sizeof(refused) / sizeof(refused[0]));
    tcase_add_test(tc, client_gone_is_499_with_its_request);
    tcase_add_test(tc, body_bytes_sent_counts_files_and_spliced_bodies);
    tcase_add_test(tc, http2_refused_header_list_is_logged_with_its_request);
    tcase_add_test(tc, buffered_lines_are_written_at_the_flush_time);
    tcase_add_test(tc, buffered_lines_survive_a_reload_and_a_stop);
    tcase_add_test(tc, levels_follow_nginx_inheritance);
    suite_add_tcase(suite, tc);
    return suite;
}
