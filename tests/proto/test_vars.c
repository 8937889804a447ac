/*
 * test_vars.c: $variables: the compiler and each variable's value on a fake
 * exchange, then through the daemon: proxy_set_header, return, add_header,
 * map and log_format with variables, and the config errors with their
 * positions.
 */
#include "proto/http/vars.h"

#include "tests/daemon.h"
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------- a fake exchange */

static bool fake_tls;

static const struct exchange_ops fake_ops = {0};

/* A connection without a socket: its addresses are unknown, and the
 * client's is the exchange's own (as real_ip would have set it). */
static struct http_conn fake_conn;

static union exchange_addr fake_client(void)
{
    union exchange_addr addr = {.in = {.sin_family = AF_INET}};
    inet_pton(AF_INET, "192.0.2.7", &addr.in.sin_addr);
    return addr;
}

static const struct http_header fake_headers[] = {
    {{"Host", 4}, {"Example.COM:8080", 16}},
    {{"User-Agent", 10}, {"curl/8 \"quoted\"", 15}},
    {{"Cookie", 6}, {"a=1; sid=xyz ; other=2", 22}},
    {{"X-Multi", 7}, {"one", 3}},
    {{"x-multi", 7}, {"two", 3}},
    {{"X-Evil", 6},
     {"a\x01"
      "b",
      3}},
    {{"Content-Type", 12}, {"text/plain", 10}},
};

static const struct http_request fake_request = {
    .method = {"GET", 3},
    .target = {"/p/a?x=1&name=Al&empty=&flag", 28},
    .path = {"/p/a", 4},
    .host = {"Example.COM", 11},
    .headers = fake_headers,
    .header_count = sizeof(fake_headers) / sizeof(fake_headers[0]),
};

/* The value of `text` for the fake request, in `out`. */
static void eval_text(const char *text, enum vars_escape escape, char *out, size_t size)
{
    fake_conn = (struct http_conn){.tls = fake_tls};
    struct exchange ex = {._ops = &fake_ops, .conn = &fake_conn, .client = fake_client()};
    struct vars_template *t;
    struct vars_error error;
    ck_assert_msg(vars_compile(text, NULL, &t, &error) == 0, "%s: %s", text, error.message);
    struct vars_ctx ctx = {.ex = &ex,
                           .req = &fake_request,
                           .protocol = "HTTP/1.1",
                           .escape = escape,
                           .status = 204,
                           .bytes_sent = 42,
                           .request_ns = 1500000000};
    size_t len = vars_eval_into(t, &ctx, out, size - 1);
    ck_assert_uint_lt(len, size);
    out[len] = '\0';
    vars_template_free(t);
}

static const struct {
    const char *text, *value;
} values[] = {
    {"plain text", "plain text"},
    {"", ""},
    {"$remote_addr", "192.0.2.7"},
    {"${remote_addr}x", "192.0.2.7x"},
    {"$REMOTE_ADDR", "192.0.2.7"},
    {"$host", "example.com"},
    {"$request_uri", "/p/a?x=1&name=Al&empty=&flag"},
    {"$uri", "/p/a"},
    {"$args", "x=1&name=Al&empty=&flag"},
    {"$is_args", "?"},
    {"$arg_x|$arg_name|$arg_NAME|$arg_empty|$arg_flag|$arg_none", "1|Al|Al|||"},
    {"$scheme", "http"},
    {"$https", ""},
    {"$request_method", "GET"},
    {"$request", "GET /p/a?x=1&name=Al&empty=&flag HTTP/1.1"},
    {"$server_protocol", "HTTP/1.1"},
    {"$http_user_agent", "curl/8 \"quoted\""},
    {"$http_x_multi", "one, two"},
    {"$http_missing", ""},
    {"$cookie_sid|$cookie_a|$cookie_other|$cookie_none", "xyz|1|2|"},
    {"$status $body_bytes_sent $bytes_sent $request_time", "204 42 42 1.500"},
    {"[$content_type][$content_length]", "[text/plain][]"},
    {"[$upstream_addr][$upstream_status][$upstream_response_time]", "[][][]"},
    {"$1", ""},
    {"$10|$2x", "0|x"},                           /* nginx: a capture's name is one digit */
    {"$remote_port$server_addr$server_port", ""}, /* no connection */
    {"[$ssl_protocol][$ssl_server_name][$ssl_cipher]", "[][][]"},
    {"[$connection_requests$pipe][$proxy_protocol_addr][$proxy_protocol_port]", "[0.][][]"},
};

START_TEST(each_variable_has_its_value)
{
    char out[512];
    eval_text(values[_i].text, VARS_RAW, out, sizeof(out));
    ck_assert_msg(strcmp(out, values[_i].value) == 0, "%s: got \"%s\", expected \"%s\"",
                  values[_i].text, out, values[_i].value);
}
END_TEST

START_TEST(times_have_their_shape)
{
    char out[128];
    eval_text("$time_iso8601|$time_local|$msec", VARS_RAW, out, sizeof(out));
    int year, month, day, hour, minute, second;
    ck_assert_msg(
        sscanf(out, "%4d-%2d-%2dT%2d:%2d:%2d", &year, &month, &day, &hour, &minute, &second) == 6 &&
            year >= 2024,
        "%s", out);
    const char *local = strchr(out, '|') + 1;
    ck_assert_msg(strlen(local) > 26 && local[2] == '/' && local[6] == '/' && local[11] == ':',
                  "%s", local);
    const char *msec = strchr(local, '|') + 1;
    ck_assert_msg(strlen(msec) == 14 && msec[10] == '.', "%s", msec);
    /* In the log, what is unknown reads "-". */
    eval_text("$upstream_response_time $upstream_status $http_none", VARS_LOG, out, sizeof(out));
    ck_assert_str_eq(out, "- - -");
}
END_TEST

START_TEST(scheme_follows_tls)
{
    char out[64];
    fake_tls = true;
    eval_text("$scheme $https", VARS_RAW, out, sizeof(out));
    ck_assert_str_eq(out, "https on");
}
END_TEST

START_TEST(binary_remote_addr_is_four_bytes)
{
    char out[64];
    eval_text("$binary_remote_addr", VARS_RAW, out, sizeof(out));
    ck_assert_int_eq(memcmp(out, "\xc0\x00\x02\x07", 4), 0);
}
END_TEST

START_TEST(values_are_escaped_for_headers_and_logs)
{
    char out[256];
    eval_text("<$http_x_evil>", VARS_HEADER, out, sizeof(out));
    ck_assert_str_eq(out, "<ab>");
    eval_text("<$http_x_evil> $http_user_agent $http_missing", VARS_LOG, out, sizeof(out));
    ck_assert_str_eq(out, "<a\\x01b> curl/8 \\x22quoted\\x22 -");
}
END_TEST

START_TEST(request_id_is_drawn_once)
{
    struct exchange ex = {._ops = &fake_ops}, other = {._ops = &fake_ops};
    char a[33], b[33], c[33];
    vars_request_id(&ex, a);
    vars_request_id(&ex, b);
    vars_request_id(&other, c);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
    ck_assert_uint_eq(strlen(a), 32);
    ck_assert_uint_eq(strspn(a, "0123456789abcdef"), 32);
}
END_TEST

START_TEST(into_a_small_buffer_counts_the_whole)
{
    struct vars_template *t;
    struct vars_error error;
    ck_assert_int_eq(vars_compile("$request_uri", NULL, &t, &error), 0);
    fake_conn = (struct http_conn){.tls = fake_tls};
    struct exchange ex = {._ops = &fake_ops, .conn = &fake_conn, .client = fake_client()};
    struct vars_ctx ctx = {.ex = &ex, .req = &fake_request};
    char buf[8] = "";
    ck_assert_uint_eq(vars_eval_into(t, &ctx, buf, 4), 28);
    ck_assert_int_eq(memcmp(buf, "/p/a", 4), 0);
    ck_assert_int_eq(buf[4], '\0');
    ck_assert(!vars_template_is_late(t));
    vars_template_free(t);
    ck_assert_int_eq(vars_compile("$upstream_status", NULL, &t, &error), 0);
    ck_assert(vars_template_is_late(t));
    vars_template_free(t);
}
END_TEST

static const struct {
    const char *text;
    size_t offset;
    const char *message;
} bad_texts[] = {
    {"$nope", 0, "unknown variable \"$nope\""},        {"a $b c", 2, "unknown variable \"$b\""},
    {"x$", 1, "invalid variable name \"$\""},          {"x$ y", 1, "invalid variable name \"$ \""},
    {"${host", 0, "invalid variable name \"${host\""}, {"${}", 0, "invalid variable name \"${\""},
    {"$host$-", 5, "invalid variable name \"$-\""},    {"$http_", 0, "unknown variable \"$http_\""},
};

START_TEST(bad_texts_are_refused_where_they_are_wrong)
{
    struct vars_template *t = NULL;
    struct vars_error error;
    ck_assert_int_eq(vars_compile(bad_texts[_i].text, NULL, &t, &error), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_uint_eq(error.offset, bad_texts[_i].offset);
    ck_assert_str_eq(error.message, bad_texts[_i].message);
}
END_TEST

START_TEST(maps_look_up_exact_then_regex_then_default)
{
    struct vars_map *map = vars_map_new("kind");
    ck_assert_ptr_nonnull(map);
    struct vars_map *maps_array[] = {map};
    struct vars_maps maps = {.maps = maps_array, .count = 1};
    struct vars_error error;
    bool in_value;
    ck_assert_int_eq(vars_map_set_source(map, "$arg_k", &maps, &error), 0);
    ck_assert_int_eq(vars_map_add(map, "exact", "E", &maps, &error, &in_value), 0);
    ck_assert_int_eq(vars_map_add(map, "~^ex", "R1", &maps, &error, &in_value), 0);
    ck_assert_int_eq(vars_map_add(map, "~*^UP", "R2-$arg_k", &maps, &error, &in_value), 0);
    ck_assert_int_eq(vars_map_add(map, NULL, "D", &maps, &error, &in_value), 0);
    ck_assert_int_eq(vars_map_add(map, "~(", "x", &maps, &error, &in_value), -EINVAL);
    ck_assert(!in_value);
    ck_assert_uint_eq(error.offset, 2);
    ck_assert_msg(strstr(error.message, "missing closing parenthesis") != NULL, "%s",
                  error.message);
    ck_assert_int_eq(vars_map_add(map, "k", "$nope", &maps, &error, &in_value), -EINVAL);
    ck_assert(in_value);

    struct vars_template *t;
    ck_assert_int_eq(vars_compile("[$kind]", &maps, &t, &error), 0);
    static const struct {
        const char *target, *value;
    } cases[] = {{"/?k=exact", "[E]"},
                 {"/?k=extra", "[R1]"},
                 {"/?k=upper", "[R2-upper]"},
                 {"/?k=other", "[D]"},
                 {"/", "[D]"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct http_request req = {.target = {cases[i].target, strlen(cases[i].target)}};
        struct vars_ctx ctx = {.req = &req};
        char out[64];
        size_t len = vars_eval_into(t, &ctx, out, sizeof(out) - 1);
        out[len] = '\0';
        ck_assert_str_eq(out, cases[i].value);
    }
    vars_template_free(t);
    vars_map_free(map);
}
END_TEST

START_TEST(a_map_reading_itself_stops)
{
    struct vars_map *map = vars_map_new("loop");
    struct vars_map *maps_array[] = {map};
    struct vars_maps maps = {.maps = maps_array, .count = 1};
    struct vars_error error;
    bool in_value;
    ck_assert_int_eq(vars_map_set_source(map, "$loop", &maps, &error), 0);
    ck_assert_int_eq(vars_map_add(map, NULL, "x$loop", &maps, &error, &in_value), 0);
    struct vars_template *t;
    ck_assert_int_eq(vars_compile("$loop", &maps, &t, &error), 0);
    struct vars_ctx ctx = {0};
    char out[64];
    size_t len = vars_eval_into(t, &ctx, out, sizeof(out) - 1);
    out[len] = '\0';
    ck_assert_str_eq(out, "x"); /* inside itself, the map reads empty */
    vars_template_free(t);
    vars_map_free(map);
}
END_TEST

/* ---------------------------------------------------- a recording backend */

/* The backend: a test_recorder answering every request with `status`
 * and "ok". */
static void backend_start(struct test_recorder *b, unsigned status)
{
    char answer[128];
    snprintf(answer, sizeof(answer),
             "HTTP/1.1 %u Whatever\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", status);
    test_recorder_start(b, answer);
}

/* The value of header `name` in the head that begins `text` ("" if
 * none), and whether there was one. */
static bool head_header(const char *text, const char *name, char *value, size_t size)
{
    value[0] = '\0';
    size_t n = strlen(name);
    const char *end = strstr(text, "\r\n\r\n");
    for (const char *line = strstr(text, "\r\n"); line != NULL && line < end;
         line = strstr(line + 2, "\r\n")) {
        const char *p = line + 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            p += n + 1;
            while (*p == ' ')
                p++;
            snprintf(value, size, "%.*s", (int)strcspn(p, "\r"), p);
            return true;
        }
    }
    return false;
}

/* The value of header `name` in the backend's last request head ("" if
 * none), and whether there was one. */
static bool backend_header(struct test_recorder *b, const char *name, char *value, size_t size)
{
    pthread_mutex_lock(&b->lock);
    bool found = head_header(b->last, name, value, size);
    pthread_mutex_unlock(&b->lock);
    return found;
}

/* ------------------------------------------------------------- the client */

/* Sends `request` on a new connection to the daemon and reads the whole
 * response (the request asks to close): its status, into `response`. */
static unsigned request(int port, const char *text, char *response, size_t size)
{
    int fd = test_connect(port);
    test_send_all(fd, text, strlen(text));
    size_t len = test_recv_all(fd, response, size - 1);
    response[len] = '\0';
    close(fd);
    unsigned status = 0;
    sscanf(response, "HTTP/1.1 %u", &status);
    return status;
}

static void start(struct test_daemon *d, const char *text)
{
    test_daemon_init(d, "corral");
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

/* What every config here begins with: one worker and the admin listener. */
#define CONF_HEAD "workers 1;\nadmin { listen 127.0.0.2:0; }\n"

/* start() with CONF_HEAD, then the rest of the config, printf-style. */
__attribute__((format(printf, 2, 3))) static void start_with(struct test_daemon *d,
                                                             const char *format, ...)
{
    char conf[PATH_MAX + 8192] = CONF_HEAD;
    size_t used = strlen(conf);
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(conf + used, sizeof(conf) - used, format, ap);
    va_end(ap);
    ck_assert(n >= 0 && (size_t)n < sizeof(conf) - used);
    start(d, conf);
}

/* ----------------------------------------------------------- through corral */

START_TEST(proxy_set_header_sends_values)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    char conf[4096];
    snprintf(conf, sizeof(conf),
             CONF_HEAD "map $http_x_kind $kind_name { default other; web W; ~^api- API; }\n"
                       "server {\n  listen 127.0.0.1:0;\n"
                       "  location / {\n    proxy_pass http://127.0.0.1:%d;\n"
                       "    proxy_set_header X-Real-IP $remote_addr;\n"
                       "    proxy_set_header X-Both \"$scheme://$host$request_uri\";\n"
                       "    proxy_set_header X-Method $request_method;\n"
                       "    proxy_set_header X-Arg $arg_a;\n"
                       "    proxy_set_header X-Cookie $cookie_sid;\n"
                       "    proxy_set_header X-UA $http_user_agent;\n"
                       "    proxy_set_header X-Request-Id $request_id;\n"
                       "    proxy_set_header X-Empty $http_not_sent;\n"
                       "    proxy_set_header X-Ports \"$server_addr:$server_port $remote_port\";\n"
                       "    proxy_set_header X-Kind $kind_name;\n"
                       "    proxy_set_header X-Literal \"a$ b\";\n"
                       "  }\n}\n",
             b.server.port);
    /* "a$ b" is refused: start with a literal instead, after checking so. */
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, conf);
    char out[2048], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "corral.conf:18:32:") != NULL &&
                      strstr(out, "proxy_set_header: invalid variable name \"$ \"") != NULL,
                  "%s", out);
    strstr(conf, "a$ b")[1] = 'x';
    start(&d, conf);

    char response[4096], value[512];
    ck_assert_uint_eq(request(d.port,
                              "GET /some/path?a=1&b=2 HTTP/1.1\r\nHost: Front.Example:81\r\n"
                              "User-Agent: tester/1\r\nCookie: x=1; sid=s3cr3t\r\n"
                              "X-Kind: api-v2\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    backend_header(&b, "X-Real-IP", value, sizeof(value));
    ck_assert_str_eq(value, "127.0.0.1");
    backend_header(&b, "X-Both", value, sizeof(value));
    ck_assert_str_eq(value, "http://front.example/some/path?a=1&b=2");
    backend_header(&b, "X-Method", value, sizeof(value));
    ck_assert_str_eq(value, "GET");
    backend_header(&b, "X-Arg", value, sizeof(value));
    ck_assert_str_eq(value, "1");
    backend_header(&b, "X-Cookie", value, sizeof(value));
    ck_assert_str_eq(value, "s3cr3t");
    backend_header(&b, "X-UA", value, sizeof(value));
    ck_assert_str_eq(value, "tester/1");
    backend_header(&b, "X-Request-Id", value, sizeof(value));
    ck_assert_uint_eq(strlen(value), 32);
    ck_assert_uint_eq(strspn(value, "0123456789abcdef"), 32);
    ck_assert(!backend_header(&b, "X-Empty", value, sizeof(value)));
    backend_header(&b, "X-Ports", value, sizeof(value));
    char expected[64];
    snprintf(expected, sizeof(expected), "127.0.0.1:%d ", d.port);
    ck_assert_msg(strncmp(value, expected, strlen(expected)) == 0 &&
                      atoi(value + strlen(expected)) > 0,
                  "%s", value);
    backend_header(&b, "X-Kind", value, sizeof(value));
    ck_assert_str_eq(value, "API");
    backend_header(&b, "X-Literal", value, sizeof(value));
    ck_assert_str_eq(value, "ax b");

    /* No Cookie, no X-Kind: empty values drop their headers; the map's
     * default applies. */
    ck_assert_uint_eq(
        request(d.port, "GET / HTTP/1.1\r\nHost: h\r\nX-Kind: web\r\nConnection: close\r\n\r\n",
                response, sizeof(response)),
        200);
    ck_assert(!backend_header(&b, "X-Cookie", value, sizeof(value)));
    ck_assert(!backend_header(&b, "X-Arg", value, sizeof(value)));
    backend_header(&b, "X-Kind", value, sizeof(value));
    ck_assert_str_eq(value, "W");
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

START_TEST(return_evaluates_its_text)
{
    struct test_daemon d;
    start_with(&d, "server {\n  listen 127.0.0.1:0;\n"
                   "  location /old { return 301 https://$host$request_uri; }\n"
                   "  location /text { return 200 \"hello $arg_name from $remote_addr\\n\"; }\n"
                   "  location /plain { return 200 \"no variables\"; }\n"
                   "}\n");
    char response[4096], value[512];
    ck_assert_uint_eq(request(d.port,
                              "GET /old/x?y=1 HTTP/1.1\r\nHost: Site.Example\r\n"
                              "Connection: close\r\n\r\n",
                              response, sizeof(response)),
                      301);
    head_header(response, "Location", value, sizeof(value));
    ck_assert_str_eq(value, "https://site.example/old/x?y=1");
    ck_assert_uint_eq(request(d.port,
                              "GET /text?name=Ann HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert_msg(strstr(response, "\r\n\r\nhello Ann from 127.0.0.1\n") != NULL, "%s", response);
    ck_assert_uint_eq(request(d.port, "GET /plain HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert_msg(strstr(response, "\r\n\r\nno variables") != NULL, "%s", response);
    test_daemon_stop(&d);
}
END_TEST

/* Without a Host (HTTP/1.0), $host is the server's first server_name, as
 * in nginx: a redirect names a host. */
START_TEST(host_falls_back_to_the_server_name)
{
    struct test_daemon d;
    start_with(&d, "server {\n  listen 127.0.0.1:0;\n  server_name site.example www.site.example;\n"
                   "  location /old { return 301 https://$host$request_uri; }\n"
                   "}\n");
    char response[4096], value[512];
    ck_assert_uint_eq(request(d.port, "GET /old/x HTTP/1.0\r\n\r\n", response, sizeof(response)),
                      301);
    head_header(response, "Location", value, sizeof(value));
    ck_assert_str_eq(value, "https://site.example/old/x");
    /* A Host still wins. */
    ck_assert_uint_eq(request(d.port, "GET /old/y HTTP/1.0\r\nHost: www.site.example\r\n\r\n",
                              response, sizeof(response)),
                      301);
    head_header(response, "Location", value, sizeof(value));
    ck_assert_str_eq(value, "https://www.site.example/old/y");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(add_header_follows_nginx_inheritance)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    start_with(&d,
               "add_header X-Top top;\n"
               "server {\n  listen 127.0.0.1:0;\n"
               "  add_header X-Server server;\n"
               "  add_header X-Always \"st=$status\" always;\n"
               "  location /inherit { return 200 ok; }\n"
               "  location /missing { return 404; }\n"
               "  location /ret { add_header X-Arg \"a=$arg_a\"; return 200 ok; }\n"
               "  location /own {\n    add_header X-Own \"$request_method $upstream_status\";\n"
               "    add_header X-Empty $http_nothing;\n"
               "    add_header X-Method \"m=$request_method $http_x_in\";\n"
               "    proxy_pass http://127.0.0.1:%d;\n  }\n"
               "}\n",
               b.server.port);
    char response[4096], value[512];
    ck_assert_uint_eq(request(d.port,
                              "GET /inherit HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert(head_header(response, "X-Server", value, sizeof(value)));
    ck_assert_str_eq(value, "server");
    ck_assert(!head_header(response, "X-Top", value, sizeof(value)));
    ck_assert(head_header(response, "X-Always", value, sizeof(value)));
    ck_assert_str_eq(value, "st=200");

    /* A 404 gets only the `always` ones. */
    ck_assert_uint_eq(request(d.port,
                              "GET /missing HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      404);
    ck_assert(!head_header(response, "X-Server", value, sizeof(value)));
    ck_assert(head_header(response, "X-Always", value, sizeof(value)));
    ck_assert_str_eq(value, "st=404");

    /* A location with its own add_header inherits none; a proxied
     * response gets them too, with the upstream's status. */
    ck_assert_uint_eq(request(d.port,
                              "GET /own HTTP/1.1\r\nHost: h\r\nX-In: in\r\n"
                              "Connection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert(!head_header(response, "X-Server", value, sizeof(value)));
    ck_assert(!head_header(response, "X-Always", value, sizeof(value)));
    ck_assert(!head_header(response, "X-Empty", value, sizeof(value)));
    ck_assert(head_header(response, "X-Own", value, sizeof(value)));
    /* A value that reads what is known only with the response sees the
     * request's variables empty. */
    ck_assert_str_eq(value, "200");
    ck_assert(head_header(response, "X-Method", value, sizeof(value)));
    ck_assert_str_eq(value, "m=GET in");

    ck_assert_uint_eq(request(d.port,
                              "GET /ret?a=7 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert(head_header(response, "X-Arg", value, sizeof(value)));
    ck_assert_str_eq(value, "a=7");
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

START_TEST(add_header_reaches_http2_clients)
{
    struct test_daemon d;
    start_with(&d, "server {\n  listen 127.0.0.1:0 http2;\n"
                   "  add_header Strict-Transport-Security \"max-age=63072000\" always;\n"
                   "  location / { return 200 ok; }\n"
                   "}\n");
    char command[256];
    snprintf(command, sizeof(command),
             "curl -s -o /dev/null -D - --max-time 5 --http2-prior-knowledge "
             "http://127.0.0.1:%d/",
             d.port);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    char response[4096];
    size_t len = fread(response, 1, sizeof(response) - 1, p);
    response[len] = '\0';
    pclose(p);
    ck_assert_msg(strncmp(response, "HTTP/2 200", 10) == 0, "%s", response);
    ck_assert_msg(strstr(response, "strict-transport-security: max-age=63072000") != NULL, "%s",
                  response);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(tls_variables_name_the_session)
{
    char cmd[PATH_MAX * 2 + 256];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout key.pem -out cert.pem -days 2 -subj /CN=a.example >/dev/null 2>&1",
             test_daemon_dir());
    ck_assert_int_eq(system(cmd), 0);
    struct test_daemon d;
    start_with(&d, "server {\n  listen 127.0.0.1:0 tls;\n"
                   "  tls_certificate cert.pem;\n  tls_certificate_key key.pem;\n"
                   "  location / { return 200 \"$scheme $https $ssl_protocol $ssl_server_name "
                   "$ssl_cipher\"; }\n"
                   "}\n");
    snprintf(cmd, sizeof(cmd),
             "curl -sk --max-time 5 --tlsv1.3 --tls13-ciphers TLS_CHACHA20_POLY1305_SHA256 "
             "--resolve a.example:%d:127.0.0.1 https://a.example:%d/",
             d.port, d.port);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char body[256];
    size_t len = fread(body, 1, sizeof(body) - 1, p);
    body[len] = '\0';
    pclose(p);
    ck_assert_str_eq(body, "https on TLSv1.3 a.example TLS_CHACHA20_POLY1305_SHA256");
    test_daemon_stop(&d);
}
END_TEST

/* $connection_requests counts a connection's requests; $pipe says which
 * came behind an unanswered one; $proxy_protocol_* are the PROXY
 * header's source, and empty without one. */
START_TEST(connection_variables)
{
    struct test_daemon d;
    start_with(&d, "server {\n  listen 127.0.0.1:0;\n"
                   "  location / { return 200 \"[$connection_requests$pipe|$proxy_protocol_addr|"
                   "$proxy_protocol_port]\"; }\n}\n");
    char response[4096];
    /* two requests in one write, then a third after the answers */
    int fd = test_connect(d.port);
    const char *two = "GET / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    test_send_all(fd, two, strlen(two));
    size_t len = 0;
    while (len < sizeof(response) - 1) {
        ssize_t n = read(fd, response + len, sizeof(response) - 1 - len);
        ck_assert_int_gt(n, 0);
        len += (size_t)n;
        response[len] = '\0';
        if (strstr(response, "[2p||]") != NULL)
            break;
    }
    ck_assert_msg(strstr(response, "[1.||]") != NULL, "%s", response);
    const char *third = "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    test_send_all(fd, third, strlen(third));
    len = test_recv_all(fd, response, sizeof(response) - 1);
    response[len] = '\0';
    ck_assert_msg(strstr(response, "[3.||]") != NULL, "%s", response);
    close(fd);
    test_daemon_stop(&d);

    start_with(&d, "server {\n  listen 127.0.0.1:0 proxy_protocol;\n"
                   "  location / { return 200 \"[$proxy_protocol_addr|$proxy_protocol_port|"
                   "$remote_addr]\"; }\n}\n");
    ck_assert_uint_eq(request(d.port,
                              "PROXY TCP4 192.0.2.1 192.0.2.2 1234 80\r\n"
                              "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert_msg(strstr(response, "[192.0.2.1|1234|192.0.2.1]") != NULL, "%s", response);
    ck_assert_uint_eq(request(d.port,
                              "PROXY UNKNOWN\r\n"
                              "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert_msg(strstr(response, "[||127.0.0.1]") != NULL, "%s", response);
    test_daemon_stop(&d);

    /* HTTP/2: a connection's streams are its requests, none pipelined */
    start_with(&d, "server {\n  listen 127.0.0.1:0 http2;\n"
                   "  location / { return 200 \"[$connection_requests$pipe]\"; }\n}\n");
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "timeout 10 nghttp http://127.0.0.1:%d/a http://127.0.0.1:%d/b",
             d.port, d.port);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    len = fread(response, 1, sizeof(response) - 1, p);
    response[len] = '\0';
    pclose(p);
    ck_assert_msg(strlen(response) == 8 && strstr(response, "[1.]") != NULL &&
                      strstr(response, "[2.]") != NULL,
                  "%s", response);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(log_format_uses_the_same_variables)
{
    struct test_recorder b;
    backend_start(&b, 202);
    struct test_daemon d;
    char log_file[PATH_MAX];
    test_daemon_file(log_file, sizeof(log_file), "access.log");
    start_with(&d,
               "access_log %s;\n"
               "map $arg_m $m { default none; yes Y; }\n"
               "log_format '$status|$upstream_status|$upstream_addr|$http_x_a|$arg_q|$cookie_c|"
               "$m|$request|$request_id';\n"
               "server {\n  listen 127.0.0.1:0;\n"
               "  location / {\n    proxy_pass http://127.0.0.1:%d;\n"
               "    proxy_set_header X-Id $request_id;\n  }\n"
               "}\n",
               log_file, b.server.port);
    char response[4096], id[64];
    ck_assert_uint_eq(request(d.port,
                              "GET /x?q=\"1\"&m=yes HTTP/1.1\r\nHost: h\r\nX-A: va\r\n"
                              "Cookie: c=cv\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      202);
    backend_header(&b, "X-Id", id, sizeof(id));
    test_daemon_stop(&d);
    char *log = test_read_file(log_file);
    char expected[512];
    snprintf(expected, sizeof(expected),
             "202|202|127.0.0.1:%d|va|\\x221\\x22|cv|Y|GET /x?q=\\x221\\x22&m=yes HTTP/1.1|%s\n",
             b.server.port, id);
    ck_assert_str_eq(log, expected);
    free(log);
    test_recorder_stop(&b);
}
END_TEST

/* A variable `set` gives is read by every later use: another set, a
 * rewrite, return's text, add_header, proxy_set_header and the access
 * log; the server's lines run before the location's, with the location
 * regex's named groups; a variable set nowhere on a request's way is
 * empty. */
START_TEST(set_variables_reach_every_use)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    char log_file[PATH_MAX];
    test_daemon_file(log_file, sizeof(log_file), "access.log");
    start_with(&d,
               "access_log %s;\n"
               "log_format '$uri|$who|$greet|$Backend_Tag';\n"
               "server {\n  listen 127.0.0.1:0;\n  set $who srv;\n"
               "  location ~ ^/u/(?<name>[a-z]+)$ {\n"
               "    set $greet \"hi-$name-$who\";\n    set $greet \"<$greet>\";\n"
               "    add_header X-Greet $greet;\n    return 200 \"$greet\";\n  }\n"
               "  location /p/ {\n    set $backend_tag \"t-$arg_t\";\n"
               "    rewrite ^/p/(.*)$ /q/$1?tag=$backend_tag break;\n"
               "    proxy_pass http://127.0.0.1:%d;\n"
               "    proxy_set_header X-Tag $backend_tag;\n  }\n"
               "}\n",
               log_file, b.server.port);
    char response[4096], value[512];
    ck_assert_uint_eq(request(d.port, "GET /u/bob HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert(head_header(response, "X-Greet", value, sizeof(value)));
    ck_assert_str_eq(value, "<hi-bob-srv>");
    ck_assert_ptr_nonnull(strstr(response, "\r\n\r\n<hi-bob-srv>"));
    ck_assert_uint_eq(request(d.port,
                              "GET /p/z?t=7 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    ck_assert(backend_header(&b, "X-Tag", value, sizeof(value)));
    ck_assert_str_eq(value, "t-7");
    ck_assert_msg(strncmp(b.last, "GET /q/z?tag=t-7&t=7 HTTP/1.1\r\n", 31) == 0, "%s", b.last);
    test_daemon_stop(&d);
    char *log = test_read_file(log_file);
    ck_assert_str_eq(log, "/u/bob|srv|<hi-bob-srv>|-\n/p/z|srv|-|t-7\n");
    free(log);
    test_recorder_stop(&b);
}
END_TEST

/* Regex server names: the server is picked after the exact names and
 * the wildcards, and its named and numbered groups are variables in its
 * values (return, add_header); trailing wildcards too. */
START_TEST(regex_server_names_give_their_groups)
{
    struct test_daemon d;
    start_with(&d,
               "server {\n  listen 127.0.0.1:0;\n  server_name default.example;\n"
               "  return 200 default;\n}\n"
               "server {\n  listen 127.0.0.1:0;\n"
               "  server_name ~^(?<sub>[a-z]+)\\.(?<zone>example\\.(com|net))$;\n"
               "  add_header X-Sub $sub;\n"
               "  location / { return 200 \"sub=$sub zone=$zone 3=$3 uri=$uri\"; }\n"
               "  location ~ ^/r/(.*)$ { return 200 \"loc=$1 sub=$sub\"; }\n}\n"
               "server {\n  listen 127.0.0.1:0;\n  server_name exact.example.com www.example.*;\n"
               "  return 200 \"named $host\";\n}\n");
    static const struct {
        const char *host, *target, *body;
    } cases[] = {
        {"Shop.Example.net", "/p", "sub=shop zone=example.net 3=net uri=/p"},
        {"shop.example.com", "/r/x", "loc=x sub=shop"},
        {"exact.example.com", "/", "named exact.example.com"},
        {"www.example.com", "/", "named www.example.com"},
        {"x1.example.com", "/", "default"},
        {"other", "/", "default"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[256], response[4096], value[128];
        snprintf(text, sizeof(text), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                 cases[i].target, cases[i].host);
        ck_assert_uint_eq(request(d.port, text, response, sizeof(response)), 200);
        const char *body = strstr(response, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        ck_assert_msg(strcmp(body + 4, cases[i].body) == 0, "%s: %s", cases[i].host, body + 4);
        if (i == 0) {
            ck_assert(head_header(response, "X-Sub", value, sizeof(value)));
            ck_assert_str_eq(value, "shop");
        }
    }
    test_daemon_stop(&d);
}
END_TEST

/* A fast backend's times are "0.000", not "-" (no upstream), and never
 * longer than the request's: nginx's $upstream_*_time. */
START_TEST(upstream_times_of_a_fast_backend)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    char log_file[PATH_MAX];
    test_daemon_file(log_file, sizeof(log_file), "access.log");
    start_with(&d,
               "access_log %s;\n"
               "log_format '$request_time $upstream_response_time $upstream_header_time "
               "$upstream_connect_time';\n"
               "server {\n  listen 127.0.0.1:0;\n"
               "  location / {\n    proxy_pass http://127.0.0.1:%d;\n  }\n"
               "}\n",
               log_file, b.server.port);
    char response[4096];
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(request(d.port, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                                  response, sizeof(response)),
                          200);
    test_daemon_stop(&d);
    char *log = test_read_file(log_file);
    const char *line = log;
    for (int i = 0; i < 3; i++) {
        unsigned s[4], ms[4];
        int used = 0;
        ck_assert_msg(sscanf(line, "%u.%3u %u.%3u %u.%3u %u.%3u\n%n", &s[0], &ms[0], &s[1], &ms[1],
                             &s[2], &ms[2], &s[3], &ms[3], &used) == 8 &&
                          used > 0,
                      "%s", log);
        uint64_t t[4];
        for (int k = 0; k < 4; k++)
            t[k] = s[k] * 1000u + ms[k];
        ck_assert_msg(t[0] >= t[1] && t[1] >= t[2] && t[2] >= t[3], "%s", log);
        line += used;
    }
    free(log);
    test_recorder_stop(&b);
}
END_TEST

/* The body of a response (after its head), or "". */
static const char *body_of(const char *response)
{
    const char *end = strstr(response, "\r\n\r\n");
    return end != NULL ? end + 4 : "";
}

/* The body of `response` is `body` (NULL: not checked); `what` names the
 * request in a failure. */
static void body_is(const char *response, const char *body, const char *what)
{
    if (body != NULL)
        ck_assert_msg(strcmp(body_of(response), body) == 0, "%s: got \"%s\"", what,
                      body_of(response));
}

/* `method` `target` with the header lines `headers`, on a connection that
 * closes after: the status must be `status`; the response in `response`. */
static void ask_is(int port, const char *method, const char *target, const char *headers,
                   unsigned status, char *response, size_t size)
{
    char text[512];
    snprintf(text, sizeof(text), "%s %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n%s\r\n", method,
             target, headers);
    ck_assert_msg(request(port, text, response, size) == status, "%s %s: %s", method, target,
                  response);
}

START_TEST(locations_are_picked_in_nginx_order)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    start_with(&d,
               "server {\n  listen 127.0.0.1:0;\n"
               "  location = /exact { return 200 \"exact\"; }\n"
               "  location ^~ /static/ { return 200 \"static\"; }\n"
               "  location / { return 200 \"prefix /\"; }\n"
               "  location /images/ { return 200 \"prefix images\"; }\n"
               "  location ~ \\.(png|jpg)$ { return 200 \"regex $1\"; }\n"
               "  location ~* ^/CASE/(?<rest>.*)$ { return 200 \"caseless $rest\"; }\n"
               "  location ~ ^/images/(.+)\\.png$ { return 200 \"never $1\"; }\n"
               "  location ~ ^/api/(v[0-9])/(.*) {\n    proxy_pass http://127.0.0.1:%d;\n"
               "    proxy_set_header X-Version $1;\n    proxy_set_header X-Rest \"[$2]\";\n  }\n"
               "}\n",
               b.server.port);
    static const struct {
        const char *path, *body;
    } cases[] = {
        {"/exact", "exact"},
        {"/static/a.png", "static"},
        {"/images/a.png", "regex png"},
        {"/images/a.gif", "prefix images"},
        {"/exact.jpg", "regex jpg"},
        {"/case/xyz", "caseless xyz"},
        {"/CaSe/Q?x=1", "caseless Q"},
        {"/other", "prefix /"},
    };
    char response[4096], request_text[256], value[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(request_text, sizeof(request_text),
                 "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", cases[i].path);
        ck_assert_uint_eq(request(d.port, request_text, response, sizeof(response)), 200);
        body_is(response, cases[i].body, cases[i].path);
    }
    ck_assert_uint_eq(request(d.port,
                              "GET /api/v2/users/7?q=1 HTTP/1.1\r\nHost: h\r\n"
                              "Connection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    backend_header(&b, "X-Version", value, sizeof(value));
    ck_assert_str_eq(value, "v2");
    backend_header(&b, "X-Rest", value, sizeof(value));
    ck_assert_str_eq(value, "[users/7]");
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* A backtracking regex that PCRE2 gives up on (its match limit) neither
 * matches nor fails to: the request gets 500, as in nginx, not the next
 * location or rewrite rule; and the error log says why.  A map falls back
 * to its default. */
START_TEST(a_regex_that_gives_up_answers_500)
{
    struct test_daemon d;
    start_with(&d, "map $uri $m { ~^/m/(a+)+$ regex; ~. other; default dflt; }\n"
                   "server {\n  listen 127.0.0.1:0;\n"
                   "  location ~ ^/private/(a+)+$ { return 403; }\n"
                   "  location /r/ { rewrite ^/r/(a+)+$ /private last; return 200 \"r\"; }\n"
                   "  location / { return 200 \"open $m\"; }\n"
                   "}\n");
    /* 40 a's and a near miss: far past the default match limit of 10^7. */
    char many[64];
    memset(many, 'a', 40);
    strcpy(many + 40, "!");
    static const struct {
        const char *prefix, *host;
        unsigned status;
        const char *body;
    } cases[] = {
        {"/private/", "h", 500, NULL},
        {"/private/aaa", "h", 403, NULL},
        {"/other/", "h", 200, "open other"},
        {"/m/", "h", 200, "open dflt"},
        {"/r/", "h", 500, NULL},
        {"/r/b", "h", 200, "r"},
    };
    char response[4096], request_text[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool long_path = cases[i].prefix[strlen(cases[i].prefix) - 1] == '/';
        snprintf(request_text, sizeof(request_text),
                 "GET %s%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", cases[i].prefix,
                 long_path ? many : "", cases[i].host);
        unsigned status = request(d.port, request_text, response, sizeof(response));
        ck_assert_msg(status == cases[i].status, "%s: %u %s", request_text, status, response);
        body_is(response, cases[i].body, cases[i].prefix);
    }
    char *log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "gave up") != NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(rewrites_follow_nginx)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    start_with(&d,
               "server {\n  listen 127.0.0.1:0;\n"
               "  rewrite ^/old/(.*)$ /new/$1 last;\n"
               "  rewrite ^/perm$ https://$host/p permanent;\n"
               "  location /new/ { return 200 \"new $uri $args\"; }\n"
               "  location /temp { absolute_redirect off; rewrite ^ /target? redirect; }\n"
               "  location /abs { rewrite ^/abs(.*) http://x.example$1; }\n"
               "  location /chain { rewrite ^/chain/a /chain/b; rewrite ^/chain/b /final; }\n"
               "  location /final { return 200 \"final $uri\"; }\n"
               "  location /brk {\n    rewrite ^/brk/(.*) /other/$1?x=1 break;\n"
               "    return 200 \"brk $uri $args\";\n  }\n"
               "  location /loop { rewrite ^ /loop2 last; }\n"
               "  location /loop2 { rewrite ^ /loop last; }\n"
               "  location /up {\n    rewrite ^/up/(.*)$ /$1 break;\n"
               "    proxy_pass http://127.0.0.1:%d;\n  }\n"
               "  location / { return 200 \"root $uri\"; }\n"
               "}\n",
               b.server.port);
    static const struct {
        const char *target;
        unsigned status;
        const char *body, *location;
    } cases[] = {
        {"/old/a/b?q=1", 200, "new /new/a/b q=1", NULL},
        {"/perm?z=2", 301, "", "https://h/p?z=2"},
        {"/temp/x?drop=1", 302, "", "/target"},
        {"/abs/y?k=v", 302, "", "http://x.example/y?k=v"},
        {"/chain/a", 200, "final /final", NULL},
        {"/brk/q?orig=1", 200, "brk /other/q x=1&orig=1", NULL},
        {"/loop", 500, NULL, NULL},
        {"/elsewhere", 200, "root /elsewhere", NULL},
    };
    char response[4096], request_text[256], value[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(request_text, sizeof(request_text),
                 "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", cases[i].target);
        ck_assert_uint_eq(request(d.port, request_text, response, sizeof(response)),
                          cases[i].status);
        body_is(response, cases[i].body, cases[i].target);
        if (cases[i].location != NULL) {
            head_header(response, "Location", value, sizeof(value));
            ck_assert_str_eq(value, cases[i].location);
        }
    }
    /* A rewritten URI is what the upstream is asked for. */
    ck_assert_uint_eq(request(d.port,
                              "GET /up/api/v1?x=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                              response, sizeof(response)),
                      200);
    pthread_mutex_lock(&b.lock);
    ck_assert_msg(strncmp(b.last, "GET /api/v1?x=1 HTTP/1.1\r\n", 26) == 0, "%s", b.last);
    pthread_mutex_unlock(&b.lock);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* if, with nginx's common uses: a method refused, a bot's User-Agent
 * refused at server level, a file test that sends what is missing to a
 * front controller, http to https, set inside an if with the if's
 * groups, a quoted regex, spaced parentheses, != "", break. */
START_TEST(if_follows_nginx)
{
    char dir[PATH_MAX], file[PATH_MAX + 32];
    test_daemon_file(dir, sizeof(dir), "files");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(file, sizeof(file), "%s/app/there.html", dir);
    char app[PATH_MAX + 8];
    snprintf(app, sizeof(app), "%s/app", dir);
    ck_assert_int_eq(mkdir(app, 0755), 0);
    test_write_file(file, "x");
    struct test_daemon d;
    start_with(&d,
               "server {\n  listen 127.0.0.1:0;\n"
               "  if ($http_user_agent ~* bot) { return 403; }\n"
               "  location /form {\n"
               "    if ($request_method = POST) { return 405; }\n"
               "    return 200 \"form $request_method\";\n  }\n"
               "  location /app/ {\n"
               "    if (!-f %s$uri) { rewrite ^ /index.php last; }\n"
               "    return 200 \"file $uri\";\n  }\n"
               "  location = /index.php { return 200 \"front $uri $args\"; }\n"
               "  location /secure {\n"
               "    if ($scheme = http) { return 301 https://$host$request_uri; }\n"
               "    return 200 \"secure\";\n  }\n"
               "  location /who {\n"
               "    set $who anon;\n"
               "    if ($arg_name ~ ^([a-z]+)-(?<tag>[0-9]+)$) { set $who \"$1 $tag\"; }\n"
               "    return 200 \"who $who\";\n  }\n"
               "  location /quoted {\n"
               "    if ($http_x_y ~ \"a b\") { return 200 \"spaced\"; }\n"
               "    if ( $http_x_z ) { return 204; }\n"
               "    if ($http_x_w != \"\") { return 202 \"w=$http_x_w\"; }\n"
               "    return 200 \"plain\";\n  }\n"
               "  location /brk {\n"
               "    if ($arg_b) { rewrite ^ /moved; break; }\n"
               "    return 200 \"brk $uri\";\n  }\n"
               "}\n",
               dir);
    static const struct {
        const char *method, *target, *headers;
        unsigned status;
        const char *body, *location;
    } cases[] = {
        {"GET", "/form", "", 200, "form GET", NULL},
        {"POST", "/form", "Content-Length: 0\r\n", 405, NULL, NULL},
        {"GET", "/form", "User-Agent: GoogleBot/2.1\r\n", 403, NULL, NULL},
        {"GET", "/app/there.html", "", 200, "file /app/there.html", NULL},
        {"GET", "/app/missing?x=1", "", 200, "front /index.php x=1", NULL},
        {"GET", "/app/", "", 200, "front /index.php ", NULL}, /* a directory */
        {"GET", "/secure?a=b", "", 301, "", "https://h/secure?a=b"},
        {"GET", "/who", "", 200, "who anon", NULL},
        {"GET", "/who?name=ann-42", "", 200, "who ann 42", NULL},
        {"GET", "/who?name=Ann-42", "", 200, "who anon", NULL},
        {"GET", "/quoted", "X-Y: xa bx\r\n", 200, "spaced", NULL},
        {"GET", "/quoted", "X-Z: 1\r\n", 204, NULL, NULL},
        {"GET", "/quoted", "X-Z: 0\r\nX-W: v\r\n", 202, "w=v", NULL},
        {"GET", "/quoted", "X-Y: ab\r\n", 200, "plain", NULL},
        {"GET", "/brk", "", 200, "brk /brk", NULL},
        {"GET", "/brk?b=1", "", 200, "brk /moved", NULL},
    };
    char response[4096], value[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ask_is(d.port, cases[i].method, cases[i].target, cases[i].headers, cases[i].status,
               response, sizeof(response));
        body_is(response, cases[i].body, cases[i].target);
        if (cases[i].location != NULL) {
            head_header(response, "Location", value, sizeof(value));
            ck_assert_str_eq(value, cases[i].location);
        }
    }
    test_daemon_stop(&d);
}
END_TEST

/* The value of header `name` in a curl -D dump of an HTTP/2 response,
 * whose names are lowercase ("" if none); whether found. */
static bool h2_header(const char *response, const char *name, char *value, size_t size)
{
    value[0] = '\0';
    char key[64];
    snprintf(key, sizeof(key), "\n%s: ", name);
    const char *p = strstr(response, key);
    if (p == NULL)
        return false;
    p += strlen(key);
    snprintf(value, size, "%.*s", (int)strcspn(p, "\r\n"), p);
    return true;
}

/* curl over HTTP/2 (prior knowledge) to `target` with `args`: the head
 * it got, into `response`. */
static void h2_request(int port, const char *args, const char *target, char *response, size_t size)
{
    char command[512];
    snprintf(command, sizeof(command),
             "curl -s -o /dev/null -D - --max-time 5 --http2-prior-knowledge %s "
             "'http://127.0.0.1:%d%s'",
             args, port, target);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t len = fread(response, 1, size - 1, p);
    response[len] = '\0';
    pclose(p);
}

/* if in a location is a location of its own, as in nginx: its add_header
 * lines replace the location's when it holds (the CORS preflight answered
 * with them), a proxy_pass in it replaces the location's handler (a canary
 * by header), and an if without a proxy_pass proxies as its location
 * does; the surprises of nginx's linear script too: of two ifs that hold,
 * the last one's settings only, so the canary's if is undone by a later
 * one.  The if's regex groups reach add_header through set. */
START_TEST(if_carries_location_settings)
{
    struct test_recorder main_b, canary;
    backend_start(&main_b, 200);
    backend_start(&canary, 201);
    struct test_daemon d;
    char log[PATH_MAX];
    test_daemon_file(log, sizeof(log), "two.log");
    start_with(&d,
               "server {\n  listen 127.0.0.1:0 http2;\n"
               "  add_header X-Server s;\n"
               "  location /api/ {\n"
               "    add_header X-Outer o;\n"
               "    if ($request_method = OPTIONS) {\n"
               "      add_header Access-Control-Allow-Origin *;\n"
               "      add_header Access-Control-Allow-Methods \"GET, POST\";\n"
               "      return 204;\n    }\n"
               "    if ($http_x_canary) { proxy_pass http://127.0.0.1:%d; }\n"
               "    if ($arg_debug) { add_header X-Debug $arg_debug; }\n"
               "    proxy_pass http://127.0.0.1:%d;\n  }\n"
               "  location /r {\n"
               "    if ($arg_a ~ ^(\\w+)$) { set $a $1; add_header X-A \"a=$a\"; }\n"
               "    return 200 \"r\";\n  }\n"
               "  location /two {\n"
               "    access_log %s;\n"
               "    if ($arg_x) { add_header X-X 1; }\n"
               "    if ($arg_y) { add_header X-Y 1; }\n"
               "    return 200 \"two\";\n  }\n"
               "  location = /st {\n"
               "    stub_status;\n"
               "    if ($arg_x) { add_header X-St 1; }\n  }\n"
               "}\n",
               canary.server.port, main_b.server.port, log);
    static const struct {
        const char *method, *target, *headers;
        unsigned status;
        const char *body;
        /* a header of the response and its value; NULL: none of the
         * names in `absent` */
        const char *name, *value, *absent;
    } cases[] = {
        {"OPTIONS", "/api/x", "", 204, NULL, "Access-Control-Allow-Origin", "*", "X-Outer"},
        {"OPTIONS", "/api/x", "", 204, NULL, "Access-Control-Allow-Methods", "GET, POST",
         "X-Server"},
        {"GET", "/api/x", "", 200, "ok", "X-Outer", "o", "Access-Control-Allow-Origin"},
        {"GET", "/api/x", "", 200, "ok", "X-Outer", "o", "X-Debug"},
        {"GET", "/api/x", "X-Canary: 1\r\n", 201, "ok", "X-Outer", "o", "X-Debug"},
        {"GET", "/api/x?debug=7", "", 200, "ok", "X-Debug", "7", "X-Outer"},
        /* the debug if holds last: its location proxies as /api/ does */
        {"GET", "/api/x?debug=1", "X-Canary: 1\r\n", 200, "ok", "X-Debug", "1", "X-Outer"},
        {"GET", "/r?a=bob", "", 200, "r", "X-A", "a=bob", "X-Server"},
        {"GET", "/r?a=b-b", "", 200, "r", NULL, NULL, "X-A"},
        {"GET", "/two?x=1", "", 200, "two", "X-X", "1", "X-Y"},
        {"GET", "/two?x=1&y=1", "", 200, "two", "X-Y", "1", "X-X"},
        {"GET", "/two", "", 200, "two", "X-Server", "s", "X-X"},
        /* the location's handler, neither return nor proxy_pass (whose
         * page takes no add_header line, in a location or an if) */
        {"GET", "/st?x=1", "", 200, NULL, NULL, NULL, "X-St"},
    };
    char response[4096], value[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ask_is(d.port, cases[i].method, cases[i].target, cases[i].headers, cases[i].status,
               response, sizeof(response));
        body_is(response, cases[i].body, cases[i].target);
        if (cases[i].name != NULL) {
            ck_assert_msg(head_header(response, cases[i].name, value, sizeof(value)),
                          "%zu: no %s in %s", i, cases[i].name, response);
            ck_assert_str_eq(value, cases[i].value);
        }
        ck_assert_msg(!head_header(response, cases[i].absent, value, sizeof(value)),
                      "%zu: %s in %s", i, cases[i].absent, response);
    }
    /* An if's location logs where its location does. */
    char *logged = test_wait_file(log, "GET /two?x=1&y=1 ", 5000);
    ck_assert_msg(logged != NULL && strstr(logged, "GET /two?x=1 ") != NULL, "%s",
                  logged != NULL ? logged : "(none)");
    free(logged);
    /* The canary got the request as the location's backend would. */
    ck_assert(backend_header(&canary, "X-Canary", value, sizeof(value)));
    ck_assert_str_eq(value, "1");
    pthread_mutex_lock(&canary.lock); /* the HTTP/2 requests below reach it again */
    ck_assert(strncmp(canary.last, "GET /api/x HTTP/1.1\r\n", 21) == 0);
    pthread_mutex_unlock(&canary.lock);

    /* The same over HTTP/2. */
    h2_request(d.port, "-X OPTIONS", "/api/x", response, sizeof(response));
    ck_assert_msg(strncmp(response, "HTTP/2 204", 10) == 0, "%s", response);
    ck_assert(h2_header(response, "access-control-allow-origin", value, sizeof(value)));
    ck_assert_str_eq(value, "*");
    ck_assert_msg(!h2_header(response, "x-outer", value, sizeof(value)), "%s", response);
    h2_request(d.port, "-H 'X-Canary: 1'", "/api/x", response, sizeof(response));
    ck_assert_msg(strncmp(response, "HTTP/2 201", 10) == 0, "%s", response);
    ck_assert(h2_header(response, "x-outer", value, sizeof(value)));
    h2_request(d.port, "", "/api/x?debug=2", response, sizeof(response));
    ck_assert_msg(strncmp(response, "HTTP/2 200", 10) == 0, "%s", response);
    ck_assert(h2_header(response, "x-debug", value, sizeof(value)));
    ck_assert_str_eq(value, "2");
    ck_assert_msg(!h2_header(response, "x-outer", value, sizeof(value)), "%s", response);
    test_daemon_stop(&d);
    test_recorder_stop(&main_b);
    test_recorder_stop(&canary);
}
END_TEST

START_TEST(proxy_pass_with_a_path_replaces_the_prefix)
{
    struct test_recorder b;
    backend_start(&b, 200);
    struct test_daemon d;
    start_with(&d,
               "server {\n  listen 127.0.0.1:0;\n"
               "  location /app/ { proxy_pass http://127.0.0.1:%d/; }\n"
               "  location /v1 { proxy_pass http://127.0.0.1:%d/api/v2; }\n"
               "  location = /exact { proxy_pass http://127.0.0.1:%d/other; }\n"
               "  location / { proxy_pass http://127.0.0.1:%d; }\n"
               "}\n",
               b.server.port, b.server.port, b.server.port, b.server.port);
    static const struct {
        const char *sent, *received;
    } cases[] = {
        {"/app/x?y=1", "GET /x?y=1 "},           {"/app/", "GET / "},
        {"/v1/users", "GET /api/v2/users "},     {"/exact?q", "GET /other?q "},
        {"/kept/as/is?a", "GET /kept/as/is?a "},
    };
    char response[4096], request_text[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(request_text, sizeof(request_text),
                 "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", cases[i].sent);
        ck_assert_uint_eq(request(d.port, request_text, response, sizeof(response)), 200);
        pthread_mutex_lock(&b.lock);
        ck_assert_msg(strncmp(b.last, cases[i].received, strlen(cases[i].received)) == 0, "%s: %s",
                      cases[i].sent, b.last);
        pthread_mutex_unlock(&b.lock);
    }
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* ------------------------------------------------------------ config errors */

static const struct {
    const char *text;  /* the config's server block and what precedes it */
    const char *error; /* in -t's output */
} config_errors[] = {
    {"server {\n listen 127.0.0.1:0;\n location / { proxy_pass http://127.0.0.1:1;\n"
     "  proxy_set_header X-A $nope; }\n}\n",
     "corral.conf:4:24: proxy_set_header: unknown variable \"$nope\""},
    {"server {\n listen 127.0.0.1:0;\n location / { return 301 https://$hots/; }\n}\n",
     "corral.conf:3:26: return: unknown variable \"$hots\""},
    {"server {\n listen 127.0.0.1:0;\n add_header X-A $bad_name;\n location / { return 200; }\n}\n",
     "corral.conf:3:17: add_header: unknown variable \"$bad_name\""},
    {"server {\n listen 127.0.0.1:0;\n add_header X-A b sometimes;\n location / { return 200; "
     "}\n}\n",
     "corral.conf:3:19: unknown add_header parameter \"sometimes\" (expected always)"},
    {"log_format \"$status $nope\";\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:1:12: log_format: unknown variable \"$nope\""},
    {"map $host $m {\n default $what;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:2:10: map: unknown variable \"$what\""},
    {"map $host $m {\n ~(unclosed x;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:2:2: map: invalid regex \"(unclosed\": missing closing parenthesis"},
    {"map $host $m {\n a 1;\n a 2;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:3:2: duplicate map key \"a\" (first at line 2)"},
    {"map $host m {\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:1:11: invalid map variable \"m\" (expected $name)"},
    {"map $host $m {\n}\nmap $uri $M {\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:3:10: duplicate map \"$M\" (first at line 1)"},
    {"map $host $m {\n hostnames;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:2:2: \"hostnames\" is nginx's: corral's map has no host name patterns"},
    {"map $host $m {\n foo;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:2:2: a map entry is KEY VALUE (got 1 words)"},
    {"map $host $m {\n a b c;\n}\n"
     "server {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:2:2: a map entry is KEY VALUE (got 3 words)"},
    {"server {\n listen 127.0.0.1:0;\n location / { add_header X-A \"a\\nb\"; return 200; }\n}\n",
     "corral.conf:3:30: header value contains a control character"},
    {"server {\n listen 127.0.0.1:0;\n location ~ \"^/(a\" { return 200; }\n}\n",
     "corral.conf:3:13: location: invalid regex \"^/(a\": missing closing parenthesis at offset 4"},
    {"server {\n listen 127.0.0.1:0;\n location ~ ^/(?<name>a) { return 200 $nam; }\n}\n",
     "corral.conf:3:39: return: unknown variable \"$nam\""},
    {"server {\n listen 127.0.0.1:0;\n location ^= /a { return 200; }\n}\n",
     "corral.conf:3:11: unknown location modifier \"^=\" (expected =, ~, ~* or ^~)"},
    {"server {\n listen 127.0.0.1:0;\n rewrite ^/(a /b;\n location / { return 200; }\n}\n",
     "corral.conf:3:10: rewrite: invalid regex \"^/(a\": missing closing parenthesis at offset 4"},
    {"server {\n listen 127.0.0.1:0;\n location / { rewrite ^/(a) /$2x$b; return 200; }\n}\n",
     "corral.conf:3:29: rewrite: unknown variable \"$b\""},
    {"server {\n listen 127.0.0.1:0;\n location / { rewrite ^ /b stop; return 200; }\n}\n",
     "corral.conf:3:28: unknown rewrite flag \"stop\" (expected last, break, redirect or "
     "permanent)"},
    {"rewrite ^ /b;\nserver {\n listen 127.0.0.1:0;\n location / { return 200; }\n}\n",
     "corral.conf:1:1: \"rewrite\" is not allowed at top level"},
    {"server {\n listen 127.0.0.1:0;\n location / { map $a $b {} return 200; }\n}\n",
     "corral.conf:3:15: \"map\" is not allowed in location"},
    {"map $host $m { default 1; }\nserver {\n listen 127.0.0.1:0;\n set $M 2;\n"
     " location / { return 200; }\n}\n",
     "corral.conf:4:6: set: \"$M\" is a map's variable (map at line 1)"},
    {"server {\n listen 127.0.0.1:0;\n location / { set $a $b; return 200; }\n}\n",
     "corral.conf:3:22: set: unknown variable \"$b\""},
    {"server {\n listen 127.0.0.1:0;\n server_name ~^(a;\n return 200;\n}\n",
     "corral.conf:3:14: server_name: invalid regex \"^(a\": missing closing parenthesis"},
    {"server {\n listen 127.0.0.1:0;\n server_name ~^(?<sub>a)$;\n return 200 $sb;\n}\n",
     "corral.conf:4:13: return: unknown variable \"$sb\""},
};

START_TEST(config_errors_have_their_position)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, config_errors[_i].text);
    char out[2048], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, config_errors[_i].error) != NULL, "expected \"%s\" in:\n%s",
                  config_errors[_i].error, out);
}
END_TEST

START_TEST(good_config_passes_the_check)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "map $http_host $backend_name {\n default \"\";\n"
                                 " ~*^(www\\.)?example\\.com$ main;\n exact.example $other;\n}\n"
                                 "map $scheme $other { https secure; default plain; }\n"
                                 "add_header X-Top $backend_name;\n"
                                 "server {\n listen 127.0.0.1:0;\n"
                                 " location / { return 200 \"$backend_name\"; }\n}\n");
    char out[2048], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_msg(test_daemon_run(args, out, sizeof(out)) == 0, "%s", out);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("vars");
    TCase *tc = tcase_create("compile");
    tcase_add_loop_test(tc, each_variable_has_its_value, 0, sizeof(values) / sizeof(values[0]));
    tcase_add_test(tc, times_have_their_shape);
    tcase_add_test(tc, scheme_follows_tls);
    tcase_add_test(tc, binary_remote_addr_is_four_bytes);
    tcase_add_test(tc, values_are_escaped_for_headers_and_logs);
    tcase_add_test(tc, request_id_is_drawn_once);
    tcase_add_test(tc, into_a_small_buffer_counts_the_whole);
    tcase_add_loop_test(tc, bad_texts_are_refused_where_they_are_wrong, 0,
                        sizeof(bad_texts) / sizeof(bad_texts[0]));
    tcase_add_test(tc, maps_look_up_exact_then_regex_then_default);
    tcase_add_test(tc, a_map_reading_itself_stops);
    tcase_set_timeout(tc, 10);
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_add_test(tc, proxy_set_header_sends_values);
    tcase_add_test(tc, return_evaluates_its_text);
    tcase_add_test(tc, host_falls_back_to_the_server_name);
    tcase_add_test(tc, add_header_follows_nginx_inheritance);
    tcase_add_test(tc, add_header_reaches_http2_clients);
    tcase_add_test(tc, tls_variables_name_the_session);
    tcase_add_test(tc, connection_variables);
    tcase_add_test(tc, log_format_uses_the_same_variables);
    tcase_add_test(tc, set_variables_reach_every_use);
    tcase_add_test(tc, regex_server_names_give_their_groups);
    tcase_add_test(tc, upstream_times_of_a_fast_backend);
    tcase_add_test(tc, locations_are_picked_in_nginx_order);
    tcase_add_test(tc, a_regex_that_gives_up_answers_500);
    tcase_add_test(tc, rewrites_follow_nginx);
    tcase_add_test(tc, if_follows_nginx);
    tcase_add_test(tc, if_carries_location_settings);
    tcase_add_test(tc, proxy_pass_with_a_path_replaces_the_prefix);
    tcase_add_loop_test(tc, config_errors_have_their_position, 0,
                        sizeof(config_errors) / sizeof(config_errors[0]));
    tcase_add_test(tc, good_config_passes_the_check);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
