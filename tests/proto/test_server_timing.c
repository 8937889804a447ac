/*
 * test_server_timing.c: the Server-Timing module, without sockets: its
 * directive as conf/ parses and inherits it once the module is
 * registered (and the registry's refusals), and its header filter
 * through the router and a fake framer, for a location that says on, one
 * that says off, a proxied response and an interim one.
 */
#include "../helpers.h"
#include "fake_framer.h"
#include "conf/config.h"
#include "proto/http/module.h"
#include "proto/modules.h"
#include "proto/policy/add_header.h"
#include "proto/policy/server_timing.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- the config */

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

static bool timing_of(const void *block)
{
    const struct server_timing_conf *conf = conf_module_conf(block, &server_timing_module.conf);
    ck_assert_ptr_nonnull(conf);
    return conf->on;
}

/* Off by default; a level that does not write it takes its parent's. */
START_TEST(directive_is_inherited)
{
    struct conf_error error;
    struct conf_config *config = parse("server_timing on;\n"
                                       "server { listen 127.0.0.1:8080;\n"
                                       "  location /a { return 200; }\n"
                                       "  location /b { server_timing off; return 200; } }\n"
                                       "server { listen 127.0.0.1:8081; server_timing off;\n"
                                       "  location /c { server_timing on; return 200; }\n"
                                       "  location /d { return 200; } }\n",
                                       &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    ck_assert(timing_of(config->modules));
    ck_assert(timing_of(config->servers[0].modules));
    ck_assert(timing_of(config->servers[0].locations[0].modules));
    ck_assert(!timing_of(config->servers[0].locations[1].modules));
    ck_assert(!timing_of(config->servers[1].modules));
    ck_assert(timing_of(config->servers[1].locations[0].modules));
    ck_assert(!timing_of(config->servers[1].locations[1].modules));
    conf_free(config);

    config = parse("server { listen 127.0.0.1:8080; location / { return 200; } }\n", &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    ck_assert(!timing_of(config->modules));
    ck_assert(!timing_of(config->servers[0].locations[0].modules));
    conf_free(config);
}
END_TEST

/* Its errors are conf/'s, with the position, as for any directive. */
START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"server_timing maybe;", "test.conf:1:15: invalid value \"maybe\" (expected on or off)"},
        {"server_timing;", "test.conf:1:1: \"server_timing\" takes 1 argument, got 0"},
        {"server_timing on;\nserver_timing off;",
         "test.conf:2:1: duplicate \"server_timing\" (first at line 1)"},
        {"upstream u { server 127.0.0.1:1; server_timing on; }",
         "test.conf:1:34: \"server_timing\" is not allowed in upstream (it belongs at top level "
         "or in server or location)"},
        {"server_timin on;", "test.conf:1:1: unknown directive \"server_timin\" (did you mean "
                             "\"server_timing\"?)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        ck_assert_ptr_null(parse(cases[i].text, &error));
        ck_assert_str_eq(error.text, cases[i].message);
    }
}
END_TEST

/* A second registration of a module does nothing; a module whose
 * directive another already has in the same context is refused. */
START_TEST(registry_refuses_a_clash)
{
    ck_assert_int_eq(conf_module_register(&server_timing_module.conf), 0);
    static const struct conf_directive workers_again[] = {
        {.name = "workers", .contexts = CONF_MAIN, .min_args = 1, .max_args = 1},
        {.name = NULL},
    };
    static const struct conf_module clash = {.name = "clash", .directives = workers_again};
    ck_assert_int_eq(conf_module_register(&clash), -EEXIST);
    static const struct conf_directive timing_again[] = {
        {.name = "server_timing", .contexts = CONF_LOCATION, .min_args = 1, .max_args = 1},
        {.name = NULL},
    };
    static const struct conf_module clash2 = {.name = "clash2", .directives = timing_again};
    ck_assert_int_eq(conf_module_register(&clash2), -EEXIST);
}
END_TEST

/* ------------------------------------------------------------- the site */

/* Answers as a proxy would once its upstream's head came (`data` says
 * whether one did), after an interim 103 when asked. */
struct answer {
    bool upstream, interim;
};

static void answer_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    const struct answer *a = data;
    if (a->interim)
        exchange_begin(ex, 103, "Link: </a>\r\n", 12, 0);
    if (a->upstream) {
        struct exchange_upstream_try *t = exchange_upstream_ask(ex, "127.0.0.1:9", true);
        t->status = 200;
        t->header_ms = 12;
    }
    exchange_begin(ex, 200, "X-Handler: 1\r\n", 14, 0);
    exchange_end(ex);
}

static const struct http_handler answer_handler = {
    .name = "answer",
    .on_request = answer_on_request,
};

static const struct server_timing_conf on = {.on = true, .pos = {"t", 1, 1}};
static const struct server_timing_conf off = {.on = false, .pos = {"t", 1, 1}};
static struct answer plain, proxied, interim;

enum { LOC_ON, LOC_OFF, LOC_PROXIED, LOC_INTERIM, LOC_COUNT };
static struct http_location locs[LOC_COUNT];
static struct http_vhost vhost;

static void setup(void)
{
    unsigned m = server_timing_module.index;
    plain = (struct answer){0};
    proxied = (struct answer){.upstream = true};
    interim = (struct answer){.interim = true};
    /* What the build gives: the struct where it is on (NULL where off;
     * the struct saying off is taken as off too). */
    static const void *built_on[HTTP_MODULES_MAX], *built_off[HTTP_MODULES_MAX];
    built_on[m] = &on;
    built_off[m] = &off;
    locs[LOC_ON] = (struct http_location){.path = "/on",
                                          .path_len = 3,
                                          .handler = &answer_handler,
                                          .handler_data = &plain,
                                          .modules = built_on};
    locs[LOC_OFF] = (struct http_location){.path = "/off",
                                           .path_len = 4,
                                           .handler = &answer_handler,
                                           .handler_data = &plain,
                                           .modules = built_off};
    locs[LOC_PROXIED] = (struct http_location){.path = "/proxied",
                                               .path_len = 8,
                                               .handler = &answer_handler,
                                               .handler_data = &proxied,
                                               .modules = built_on};
    locs[LOC_INTERIM] = (struct http_location){.path = "/interim",
                                               .path_len = 8,
                                               .handler = &answer_handler,
                                               .handler_data = &interim,
                                               .modules = built_on};
    /* The server says on: what no location takes (404) is timed too. */
    vhost =
        (struct http_vhost){.locations = locs, .location_count = LOC_COUNT, .modules = built_on};
}

static void route(const char *target)
{
    struct exchange ex = fake_exchange();
    struct http_request req = {
        .method = {"GET", 3}, .target = {target, strlen(target)}, .path = {target, strlen(target)}};
    router_start(&ex, &vhost, &req, 0);
    router_end(&ex);
}

/* "Server-Timing: total;dur=N.NNN", then what `rest` says, then CRLF. */
static void check_timing_line(const char *headers, const char *rest)
{
    const char *line = strstr(headers, "Server-Timing: total;dur=");
    ck_assert_msg(line != NULL, "no Server-Timing in \"%s\"", headers);
    unsigned long ms, frac;
    int used = 0;
    ck_assert_int_eq(sscanf(line, "Server-Timing: total;dur=%lu.%3lu%n", &ms, &frac, &used), 2);
    ck_assert_uint_lt(ms, 10000); /* a fake framer answers at once */
    ck_assert_str_eq(line + used, rest);
}

START_TEST(on_adds_the_header)
{
    route("/on");
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert(strncmp(fake_seen.headers, "X-Handler: 1\r\n", 14) == 0);
    check_timing_line(fake_seen.headers, "\r\n");
}
END_TEST

START_TEST(off_adds_nothing)
{
    route("/off");
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_str_eq(fake_seen.headers, "X-Handler: 1\r\n");
}
END_TEST

START_TEST(proxied_says_the_upstream_time)
{
    route("/proxied");
    check_timing_line(fake_seen.headers, ", upstream;dur=12\r\n");
}
END_TEST

/* The interim head goes as it is; the final one gets the line. */
START_TEST(interim_head_is_left_alone)
{
    route("/interim");
    ck_assert_int_eq(fake_seen.begins, 2);
    ck_assert_uint_eq(fake_seen.status, 200);
    check_timing_line(fake_seen.headers, "\r\n");
}
END_TEST

/* The router's own answer (no location: 404) is timed by its server. */
START_TEST(router_answer_is_timed)
{
    route("/nowhere");
    ck_assert_uint_eq(fake_seen.status, 404);
    check_timing_line(fake_seen.headers, "\r\n");
}
END_TEST

/* A site whose config turns the module on nowhere has a table without
 * it: one step fewer, and its requests never see the module, whatever a
 * location holds. */
START_TEST(site_without_it_leaves_it_out)
{
    static struct router_table all, without;
    http_module_table(&all, modules_list, modules_count, UINT32_MAX);
    http_module_table(&without, modules_list, modules_count,
                      ~(UINT32_C(1) << server_timing_module.index));
    ck_assert_uint_eq(without.step_count + 1, all.step_count);
    vhost.router = &without;
    route("/on");
    ck_assert_str_eq(fake_seen.headers, "X-Handler: 1\r\n");
    vhost.router = &all;
    route("/on");
    check_timing_line(fake_seen.headers, "\r\n");
}
END_TEST

/* The module's filter comes after add_header's: it times the head as
 * the filters before it made it. */
START_TEST(filter_follows_add_header)
{
    ck_assert_uint_gt(server_timing_module.filter->order, add_header_module.filter->order);
}
END_TEST

Suite *test_suite(void)
{
    /* As the daemon does before its first parse (runtime_modules_init()). */
    modules_init();
    for (size_t m = 0; m < modules_count; m++)
        if (conf_module_register(&modules_list[m]->conf) != 0)
            abort();
    Suite *suite = suite_create("proto/server_timing");
    TCase *conf = tcase_create("conf");
    tcase_set_timeout(conf, 10);
    tcase_add_test(conf, directive_is_inherited);
    tcase_add_test(conf, directive_errors);
    tcase_add_test(conf, registry_refuses_a_clash);
    suite_add_tcase(suite, conf);
    TCase *filter = tcase_create("filter");
    tcase_set_timeout(filter, 10);
    tcase_add_checked_fixture(filter, setup, NULL);
    tcase_add_test(filter, on_adds_the_header);
    tcase_add_test(filter, off_adds_nothing);
    tcase_add_test(filter, proxied_says_the_upstream_time);
    tcase_add_test(filter, interim_head_is_left_alone);
    tcase_add_test(filter, router_answer_is_timed);
    tcase_add_test(filter, filter_follows_add_header);
    tcase_add_test(filter, site_without_it_leaves_it_out);
    suite_add_tcase(suite, filter);
    return suite;
}
