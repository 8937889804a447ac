/*
 * test_cache_conf.c: the cache's directives (proto/cache/cache_conf.c)
 * through conf_parse(), without sockets: their defaults, how a level
 * inherits them, and each error with its position.
 */
#include "../helpers.h"
#include "conf/config.h"
#include "proto/cache/cache.h"
#include "proto/cache/cache_conf.h"
#include "proto/cache/cache_policy.h"
#include "proto/http/module.h"
#include "proto/modules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    modules_init(); /* as the daemon does before its first parse */
    for (size_t m = 0; m < modules_count; m++)
        ck_assert_int_eq(conf_module_register(&modules_list[m]->conf), 0);
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

static const struct cache_conf *cache_of(const void *block)
{
    const struct cache_conf *conf = conf_module_conf(block, &cache_module.conf);
    ck_assert_ptr_nonnull(conf);
    return conf;
}

START_TEST(defaults_and_inheritance)
{
    struct conf_error error;
    struct conf_config *config =
        parse("proxy_cache_path /tmp/c1 levels=1:2 keys_zone=one:1m max_size=2m inactive=30s "
              "use_temp_path=off;\n"
              "proxy_cache_path /tmp/c2/ keys_zone=two:64k;\n"
              "proxy_cache_valid 5m;\n"
              "server { listen 127.0.0.1:8080; proxy_cache one; proxy_cache_background_update on;\n"
              "  location /a { proxy_pass http://127.0.0.1:9; }\n"
              "  location /b { proxy_pass http://127.0.0.1:9; proxy_cache off; }\n"
              "  location /c { proxy_pass http://127.0.0.1:9; proxy_cache two;\n"
              "    proxy_cache_valid 404 any 1m; proxy_cache_methods POST;\n"
              "    proxy_ignore_headers Set-Cookie Vary; proxy_cache_use_stale error http_503;\n"
              "    proxy_cache_lock on; proxy_cache_lock_timeout 250ms; proxy_cache_min_uses 3;\n"
              "    proxy_cache_background_update off;\n"
              "    proxy_cache_key $host$uri; proxy_cache_bypass $http_a $http_b; } }\n",
              &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    const struct cache_conf *top = cache_of(config->modules);
    ck_assert_uint_eq(top->path_count, 2);
    ck_assert_str_eq(top->paths[0].zone.name, "one");
    ck_assert_str_eq(top->paths[0].zone.path, "/tmp/c1");
    ck_assert_uint_eq(top->paths[0].zone.levels[0], 1);
    ck_assert_uint_eq(top->paths[0].zone.levels[1], 2);
    ck_assert_uint_eq(top->paths[0].zone.keys_size, 1024 * 1024);
    ck_assert_uint_eq(top->paths[0].zone.max_size, 2 * 1024 * 1024);
    ck_assert_uint_eq(top->paths[0].zone.inactive_s, 30);
    ck_assert_str_eq(top->paths[1].zone.path, "/tmp/c2"); /* its trailing slash gone */
    ck_assert_uint_eq(top->paths[1].zone.levels[0], 0);
    ck_assert_uint_eq(top->paths[1].zone.inactive_s, 600);
    ck_assert_ptr_null(top->zone);
    const struct cache_conf *a = cache_of(config->servers[0].locations[0].modules);
    ck_assert_str_eq(a->zone, "one");
    ck_assert_str_eq(a->key, "$scheme$host$request_uri");
    ck_assert_uint_eq(a->methods, CACHE_METHOD_GET | CACHE_METHOD_HEAD);
    ck_assert_uint_eq(a->min_uses, 1);
    ck_assert_uint_eq(a->lock_timeout_ms, 5000);
    ck_assert(!a->lock && !a->revalidate);
    ck_assert(a->background_update); /* the server's */
    ck_assert_uint_eq(a->use_stale, 0);
    ck_assert_uint_eq(a->valid_count, 3); /* 5m for 200 301 302, from the top */
    ck_assert_uint_eq(a->valid[0].status, 200);
    ck_assert_uint_eq(a->valid[2].seconds, 300);
    ck_assert_ptr_null(cache_of(config->servers[0].locations[1].modules)->zone);
    const struct cache_conf *c = cache_of(config->servers[0].locations[2].modules);
    ck_assert_str_eq(c->zone, "two");
    ck_assert_uint_eq(c->valid_count, 2);
    ck_assert_uint_eq(c->valid[0].status, 404);
    ck_assert_uint_eq(c->valid[1].status, 0);
    ck_assert_uint_eq(c->methods, CACHE_METHOD_POST);
    ck_assert_uint_eq(c->ignore, CACHE_IGNORE_SET_COOKIE | CACHE_IGNORE_VARY);
    ck_assert_uint_eq(c->use_stale, CACHE_STALE_ERROR | CACHE_STALE_503);
    ck_assert(c->lock);
    ck_assert(!c->background_update);
    ck_assert_uint_eq(c->lock_timeout_ms, 250);
    ck_assert_uint_eq(c->min_uses, 3);
    ck_assert_str_eq(c->key, "$host$uri");
    ck_assert_uint_eq(c->bypass.count, 2);
    conf_free(config);
}
END_TEST

/* Each error, at its position, as conf/'s own. */
START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"proxy_cache_path /tmp/x levels=1:3 keys_zone=z:1m;",
         "test.conf:1:32: invalid levels \"1:3\""},
        {"proxy_cache_path /tmp/x levels=1:2:2:2 keys_zone=z:1m;",
         "test.conf:1:32: invalid levels \"1:2:2:2\""},
        {"proxy_cache_path /tmp/x levels=1:2;", "needs keys_zone=NAME:SIZE"},
        {"proxy_cache_path /tmp/x keys_zone=z;", "test.conf:1:35: invalid keys_zone \"z\""},
        {"proxy_cache_path /tmp/x keys_zone=z:1k;", "keys_zone \"z:1k\" is too small"},
        {"proxy_cache_path /tmp/x keys_zone=a.b:1m;", "invalid keys_zone name in \"a.b:1m\""},
        {"proxy_cache_path /tmp/x keys_zone=z:1m max_size=lots;", "invalid max_size \"lots\""},
        {"proxy_cache_path /tmp/x keys_zone=z:1m inactive=0;", "invalid inactive \"0\""},
        {"proxy_cache_path /tmp/x keys_zone=z:1m purger=on;",
         "invalid parameter \"purger=on\" of \"proxy_cache_path\""},
        {"proxy_cache_path /tmp/x keys_zone=z:1m;\nproxy_cache_path /tmp/y keys_zone=z:1m;",
         "test.conf:2:18: duplicate zone \"z\""},
        {"server { listen 127.0.0.1:8080; proxy_cache_path /tmp/x keys_zone=z:1m; }",
         "\"proxy_cache_path\" is not allowed in server"},
        {"server { listen 127.0.0.1:8080; location / { proxy_pass http://127.0.0.1:9;\n"
         "  proxy_cache nope; } }",
         "test.conf:2:15: unknown cache zone \"nope\""},
        {"proxy_cache_valid 200 soon;", "test.conf:1:23: invalid time \"soon\""},
        {"proxy_cache_valid 99 1m;", "status must be from 100 to 599"},
        {"proxy_cache_min_uses 0;", "proxy_cache_min_uses"},
        {"proxy_cache_methods PUT;", "PUT"},
        {"proxy_cache_use_stale sometimes;", "sometimes"},
        {"proxy_cache_key \"\";", "empty cache key"},
        {"proxy_cache_background_update maybe;", "test.conf:1:31: invalid value \"maybe\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        struct conf_config *config = parse(cases[i].text, &error);
        ck_assert_msg(config == NULL, "%s: parsed", cases[i].text);
        ck_assert_msg(strstr(error.text, cases[i].message) != NULL, "%s: %s", cases[i].text,
                      error.text);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/cache_conf");
    TCase *tc = tcase_create("conf");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, defaults_and_inheritance);
    tcase_add_test(tc, directive_errors);
    suite_add_tcase(suite, tc);
    return suite;
}
