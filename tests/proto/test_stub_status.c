/*
 * test_stub_status.c: the stub_status module: its page's format byte for
 * byte, its directive as conf/ parses it, its handler through the router
 * and a fake framer; and the page of a running daemon, whose counts move
 * with its traffic.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "conf/config.h"
#include "proto/http/module.h"
#include "proto/modules.h"
#include "proto/policy/stub_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

/* nginx's text, its trailing spaces included. */
START_TEST(format_is_nginx_s)
{
    struct stub_status_counts c = {.active = 291,
                                   .accepts = 16630948,
                                   .handled = 16630947,
                                   .requests = 31070465,
                                   .reading = 6,
                                   .writing = 179,
                                   .waiting = 106};
    char page[256];
    size_t len = stub_status_format(&c, page, sizeof(page));
    ck_assert_str_eq(page, "Active connections: 291 \n"
                           "server accepts handled requests\n"
                           " 16630948 16630947 31070465 \n"
                           "Reading: 6 Writing: 179 Waiting: 106 \n");
    ck_assert_uint_eq(len, strlen(page));
    /* The largest counts fit the handler's buffer. */
    memset(&c, 0xff, sizeof(c));
    ck_assert_uint_lt(stub_status_format(&c, page, sizeof(page)), sizeof(page));
}
END_TEST

static const struct stub_status_conf *page_of(const void *block)
{
    return conf_module_conf(block, &stub_status_module.conf);
}

START_TEST(directive_in_a_location)
{
    struct conf_error error;
    struct conf_config *config = parse("server { listen 127.0.0.1:8080;\n"
                                       "  location = /basic_status { stub_status; }\n"
                                       "  location /old { stub_status on; }\n"
                                       "  location / { return 200; } }\n",
                                       &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    ck_assert(page_of(config->servers[0].locations[0].modules)->on);
    ck_assert(page_of(config->servers[0].locations[1].modules)->on);
    ck_assert(!page_of(config->servers[0].locations[2].modules)->on);
    ck_assert(!page_of(config->servers[0].modules)->on);
    conf_free(config);
}
END_TEST

START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"server { listen 127.0.0.1:1; location / { stub_status off; } }",
         "test.conf:1:55: invalid value \"off\" (stub_status takes no argument, or \"on\")"},
        {"server { listen 127.0.0.1:1; stub_status; }",
         "test.conf:1:30: \"stub_status\" is not allowed in server (it belongs in location)"},
        {"server { listen 127.0.0.1:1; location / { stub_status; return 200; } }",
         "test.conf:1:56: \"return\" cannot be combined with \"stub_status\" in one location"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        ck_assert_ptr_null(parse(cases[i].text, &error));
        ck_assert_str_eq(error.text, cases[i].message);
    }
}
END_TEST

/* ------------------------------------------------------------ fake framer */

static struct {
    unsigned status;
    char headers[256], body[512];
    size_t body_len;
    int begins;
} seen;

static void fake_begin(struct exchange *ex, unsigned status, const char *headers, size_t len,
                       int64_t content_length, struct http_str codings)
{
    (void)ex, (void)content_length, (void)codings;
    seen.status = status;
    ck_assert_uint_lt(len, sizeof(seen.headers));
    memcpy(seen.headers, headers, len);
    seen.headers[len] = '\0';
    seen.begins++;
}

static void fake_write(struct exchange *ex, const char *data, size_t len)
{
    (void)ex;
    ck_assert_uint_lt(seen.body_len + len, sizeof(seen.body));
    memcpy(seen.body + seen.body_len, data, len);
    seen.body_len += len;
    seen.body[seen.body_len] = '\0';
}

static void fake_end(struct exchange *ex, const char *trailers, size_t len)
{
    (void)ex, (void)trailers, (void)len;
}

static bool fake_started(const struct exchange *ex)
{
    (void)ex;
    return seen.begins > 0;
}

static void fake_set_handler(struct exchange *ex, const struct http_handler *handler)
{
    (void)ex, (void)handler;
}

static void fake_routed(struct exchange *ex, const struct http_request *req)
{
    (void)ex, (void)req;
}

static const struct exchange_ops fake_ops = {
    .begin = fake_begin,
    .write = fake_write,
    .end = fake_end,
    .response_started = fake_started,
    .set_handler = fake_set_handler,
    .routed = fake_routed,
};

static unsigned source_calls;

static bool fake_source(struct stub_status_counts *out)
{
    source_calls++;
    *out = (struct stub_status_counts){
        .active = 3, .accepts = 10, .handled = 10, .requests = 42, .writing = 3};
    return true;
}

static const struct stub_status_conf on = {.on = true};
static struct http_location loc;
static struct http_vhost vhost;

static void setup(void)
{
    memset(&seen, 0, sizeof(seen));
    source_calls = 0;
    static const void *built[HTTP_MODULES_MAX];
    built[stub_status_module.index] = &on;
    loc = (struct http_location){.path = "/status",
                                 .path_len = 7,
                                 .handler = stub_status_module.content,
                                 .handler_data = (void *)&on,
                                 .modules = built};
    vhost = (struct http_vhost){.locations = &loc, .location_count = 1};
}

static void route(const char *method, const char *target)
{
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    struct http_request req = {.method = {method, strlen(method)},
                               .target = {target, strlen(target)},
                               .path = {target, strlen(target)}};
    router_start(&ex, &vhost, &req, 0);
    router_end(&ex);
}

START_TEST(handler_writes_the_counts)
{
    stub_status_set_source(fake_source);
    route("GET", "/status");
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_str_eq(seen.headers, "Content-Type: text/plain\r\n");
    ck_assert_str_eq(seen.body, "Active connections: 3 \n"
                                "server accepts handled requests\n"
                                " 10 10 42 \n"
                                "Reading: 0 Writing: 3 Waiting: 0 \n");
    ck_assert_uint_eq(source_calls, 1);
}
END_TEST

/* As nginx: GET and HEAD only. */
START_TEST(other_methods_get_405)
{
    stub_status_set_source(fake_source);
    route("POST", "/status");
    ck_assert_uint_eq(seen.status, 405);
    ck_assert_str_eq(seen.headers, "Allow: GET, HEAD\r\n");
    ck_assert_uint_eq(source_calls, 0);
}
END_TEST

/* Without the daemon's counts (before it serves): 503, never zeros. */
START_TEST(no_source_is_503)
{
    stub_status_set_source(NULL);
    route("GET", "/status");
    ck_assert_uint_eq(seen.status, 503);
}
END_TEST

/* ------------------------------------------------------------- the daemon */

struct page {
    unsigned long long active, accepts, handled, requests, reading, writing, waiting;
};

static void get_page(int port, struct page *p)
{
    char body[512];
    ck_assert_int_eq(test_daemon_http_get("127.0.0.1", port, "/basic_status", body, sizeof(body)),
                     200);
    int used = 0;
    ck_assert_msg(sscanf(body,
                         "Active connections: %llu \nserver accepts handled requests\n"
                         " %llu %llu %llu \nReading: %llu Writing: %llu Waiting: %llu \n%n",
                         &p->active, &p->accepts, &p->handled, &p->requests, &p->reading,
                         &p->writing, &p->waiting, &used) == 7 &&
                      body[used] == '\0',
                  "%s", body);
}

START_TEST(daemon_serves_the_page)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                                 "server {\n  listen 127.0.0.1:0;\n"
                                 "  location = /basic_status { stub_status; allow 127.0.0.1; "
                                 "deny all; }\n"
                                 "  location / { return 200 hello; }\n}\n");
    test_daemon_start(&d);
    struct page first, second;
    get_page(d.port, &first);
    /* The page's own connection is open and accepted. */
    ck_assert_uint_ge(first.active, 1);
    ck_assert_uint_ge(first.accepts, 1);
    ck_assert_uint_eq(first.handled, first.accepts);
    char body[64];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
    get_page(d.port, &second);
    /* Three requests and the first page's, on four connections. */
    ck_assert_uint_eq(second.accepts, first.accepts + 4);
    ck_assert_uint_eq(second.requests, first.requests + 4);
    ck_assert_uint_eq(second.writing, second.active);
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    /* As the daemon does before its first parse (runtime_modules_init()). */
    modules_init();
    for (size_t m = 0; m < modules_count; m++)
        if ((modules_list[m]->conf.size != 0 || modules_list[m]->conf.directives != NULL) &&
            conf_module_register(&modules_list[m]->conf) != 0)
            abort();
    Suite *suite = suite_create("proto/stub_status");
    TCase *unit = tcase_create("unit");
    tcase_set_timeout(unit, 10);
    tcase_add_checked_fixture(unit, setup, NULL);
    tcase_add_test(unit, format_is_nginx_s);
    tcase_add_test(unit, directive_in_a_location);
    tcase_add_test(unit, directive_errors);
    tcase_add_test(unit, handler_writes_the_counts);
    tcase_add_test(unit, other_methods_get_405);
    tcase_add_test(unit, no_source_is_503);
    suite_add_tcase(suite, unit);
    TCase *daemon = tcase_create("daemon");
    tcase_set_timeout(daemon, 30);
    test_daemon_fixture(daemon);
    tcase_add_test(daemon, daemon_serves_the_page);
    suite_add_tcase(suite, daemon);
    return suite;
}
