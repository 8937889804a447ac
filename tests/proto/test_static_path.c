/*
 * test_static_path.c: from request paths to file paths
 * (proto/static/static_path.c) and from file names to types
 * (static_mime.c), without sockets: every spelling of "..", of a
 * separator and of a NUL that must never reach the filesystem.
 */
#include "../helpers.h"
#include "proto/static/static_mime.h"
#include "proto/static/static_path.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *in;
    int err;
    const char *out;
} cases[] = {
    {"/", 0, "/"},
    {"/a/b", 0, "/a/b"},
    {"/a/b/", 0, "/a/b/"},
    {"//a///b", 0, "/a/b"},
    {"/a/./b", 0, "/a/b"},
    {"/a/.", 0, "/a/"},
    {"/a/b/..", 0, "/a/"},
    {"/a/b/../c", 0, "/a/c"},
    {"/a/../../b", -EINVAL, NULL},
    {"/..", -EINVAL, NULL},
    {"/../etc/passwd", -EINVAL, NULL},
    {"/%2e%2e/etc/passwd", -EINVAL, NULL},
    {"/%2E%2E/etc/passwd", -EINVAL, NULL},
    {"/a/%2e%2e/%2e%2e/b", -EINVAL, NULL},
    {"/a/%2e/b", 0, "/a/b"},
    {"/a/.%2e/b", 0, "/b"},
    {"/a%20b", 0, "/a b"},
    {"/%41", 0, "/A"},
    {"/..%2fetc", -EINVAL, NULL},
    {"/a%2Fb", -EINVAL, NULL},
    {"/a%00b", -EINVAL, NULL},
    {"/a\\b", -EINVAL, NULL},
    {"/a%5cb", -EINVAL, NULL},
    {"/%", -EINVAL, NULL},
    {"/%4", -EINVAL, NULL},
    {"/%zz", -EINVAL, NULL},
    {"a/b", -EINVAL, NULL},
    {"", -EINVAL, NULL},
    {"/...", 0, "/..."},
    {"/a..", 0, "/a.."},
};

START_TEST(normalise_table)
{
    char out[64];
    size_t len = 0;
    const char *in = cases[_i].in;
    int err = static_path_normalise(in, strlen(in), out, sizeof(out), &len);
    ck_assert_msg(err == cases[_i].err, "%s: %d", in, err);
    if (err == 0) {
        ck_assert_str_eq(out, cases[_i].out);
        ck_assert_uint_eq(len, strlen(out));
    }
    /* every prefix, in a buffer of its exact size: ASan sees a read past */
    for (size_t cut = 0; cut <= strlen(in); cut++) {
        char *copy = malloc(cut > 0 ? cut : 1);
        memcpy(copy, in, cut);
        if (static_path_normalise(copy, cut, out, sizeof(out), &len) == 0) {
            ck_assert(!static_path_has_dot_segment(out));
            ck_assert_uint_eq(out[0], '/');
        }
        free(copy);
    }
}
END_TEST

START_TEST(normalise_bounds)
{
    char out[8];
    size_t len;
    ck_assert_int_eq(static_path_normalise("/abcdefgh", 9, out, sizeof(out), &len), -ENAMETOOLONG);
    ck_assert_int_eq(static_path_normalise("/abcdef", 7, out, sizeof(out), &len), 0);
    ck_assert_str_eq(out, "/abcdef");
    ck_assert_int_eq(static_path_normalise("/a/b/c/d/", 9, out, sizeof(out), &len), -ENAMETOOLONG);
}
END_TEST

START_TEST(join)
{
    char out[64];
    ck_assert_int_eq(static_path_join("/srv", 4, "/a/b", 4, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "/srv/a/b");
    /* an alias's prefix cut in the middle of a segment: "/x../y" */
    ck_assert_int_eq(static_path_join("/srv/x/", 7, "../y", 4, out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(static_path_join("/srv", 4, "/./y", 4, out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(static_path_join("/srv", 4, "/..", 3, out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(static_path_join("/srv", 4, "/...", 4, out, sizeof(out)), 0);
    ck_assert_int_eq(static_path_join("/srv", 4, "/a", 2, out, 6), -ENAMETOOLONG);
    ck_assert(static_path_has_dot_segment("/a/.."));
    ck_assert(static_path_has_dot_segment("./a"));
    ck_assert(!static_path_has_dot_segment("/a/..b/c."));
}
END_TEST

START_TEST(mime_builtin_sorted_and_found)
{
    for (size_t i = 1; i < static_mime_builtin_count; i++)
        ck_assert_msg(
            strcasecmp(static_mime_builtin[i - 1].extension, static_mime_builtin[i].extension) < 0,
            "%s", static_mime_builtin[i].extension);
    struct static_mime m = {.default_type = "application/octet-stream"};
    ck_assert_str_eq(static_mime_type(&m, "/srv/index.html"), "text/html");
    ck_assert_str_eq(static_mime_type(&m, "/srv/A.CSS"), "text/css");
    ck_assert_str_eq(static_mime_type(&m, "/srv/app.mjs"), "application/javascript");
    ck_assert_str_eq(static_mime_type(&m, "/srv/f.woff2"), "font/woff2");
    ck_assert_str_eq(static_mime_type(&m, "/srv/f.wasm"), "application/wasm");
    ck_assert_str_eq(static_mime_type(&m, "/srv/noext"), "application/octet-stream");
    ck_assert_str_eq(static_mime_type(&m, "/srv.d/noext"), "application/octet-stream");
    ck_assert_str_eq(static_mime_type(&m, "/srv/trailing."), "application/octet-stream");
    ck_assert_str_eq(static_mime_type(&m, "/srv/x.unknown"), "application/octet-stream");
}
END_TEST

START_TEST(mime_config_table)
{
    static const struct http_mime_type types[] = {{"html", "text/x-mine"}, {"zz", "app/zz"}};
    struct static_mime m = {.types = types, .count = 2, .default_type = "text/plain"};
    ck_assert_str_eq(static_mime_type(&m, "/a.html"), "text/x-mine");
    ck_assert_str_eq(static_mime_type(&m, "/a.ZZ"), "app/zz");
    /* the config's table replaces the built-in one, as nginx's types */
    ck_assert_str_eq(static_mime_type(&m, "/a.css"), "text/plain");
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/static_path");
    TCase *tc = tcase_create("path");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, normalise_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, normalise_bounds);
    tcase_add_test(tc, join);
    tcase_add_test(tc, mime_builtin_sorted_and_found);
    tcase_add_test(tc, mime_config_table);
    suite_add_tcase(suite, tc);
    return suite;
}
