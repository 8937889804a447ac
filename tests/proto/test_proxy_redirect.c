/*
 * test_proxy_redirect.c: proxy_redirect's rewriting without sockets:
 * prefix lines, regex lines with their groups, variables, the first line
 * that matches, Location and Refresh (test_proxy's proxy_redirect_* cases
 * go through the daemon and a backend).
 */
#include "proto/upstream/proxy_redirect.h"

#include "proto/http/regex.h"

#include "tests/helpers.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Up to four rules, made from (from, to) pairs as proxy_redirect takes
 * them: "~REGEX" or "~*REGEX", else a prefix. */
struct rules {
    struct proxy_redirect items[4];
    struct proxy_redirects list;
    struct http_regex *regexes[4];
    struct vars_template *templates[8];
};

static void rules_make(struct rules *r, const char *const pairs[][2], size_t count)
{
    memset(r, 0, sizeof(*r));
    ck_assert_uint_le(count, 4);
    for (size_t i = 0; i < count; i++) {
        const char *from = pairs[i][0], *to = pairs[i][1];
        struct proxy_redirect *rule = &r->items[i];
        struct vars_maps maps = {0};
        struct vars_error error;
        if (from[0] == '~') {
            bool caseless = from[1] == '*';
            char message[128];
            size_t offset;
            ck_assert_int_eq(regex_compile(from + (caseless ? 2 : 1), caseless, &r->regexes[i],
                                           message, sizeof(message), &offset),
                             0);
            rule->regex = r->regexes[i];
            maps.captures = r->regexes[i];
        } else {
            rule->text = (struct http_str){from, strlen(from)};
            ck_assert_int_eq(vars_compile(from, NULL, &r->templates[2 * i], &error), 0);
            if (!vars_template_is_literal(r->templates[2 * i]))
                rule->pattern = r->templates[2 * i];
        }
        ck_assert_int_eq(vars_compile(to, &maps, &r->templates[2 * i + 1], &error), 0);
        rule->replacement = r->templates[2 * i + 1];
    }
    r->list = (struct proxy_redirects){r->items, count};
}

static void rules_free(struct rules *r)
{
    for (size_t i = 0; i < 4; i++)
        regex_free(r->regexes[i]);
    for (size_t i = 0; i < 8; i++)
        vars_template_free(r->templates[i]);
}

static const struct http_request request = {
    .method = {"GET", 3},
    .target = {"/one/x", 6},
    .path = {"/one/x", 6},
    .host = {"Front.Example", 13},
};

/* The header `name: value` through `r`: its new value, or "(kept)". */
static const char *rewrite(struct rules *r, const char *name, const char *value)
{
    static char result[512];
    struct vars_ctx ctx = {.req = &request, .escape = VARS_HEADER};
    char small[16]; /* small: long values take the heap */
    struct vars_buf out;
    vars_buf_init(&out, small, sizeof(small));
    bool done = proxy_redirect_header(&r->list, (struct http_str){name, strlen(name)},
                                      (struct http_str){value, strlen(value)}, &ctx, &out);
    ck_assert(!out.failed);
    if (done)
        snprintf(result, sizeof(result), "%.*s", (int)out.len, out.data);
    else
        snprintf(result, sizeof(result), "(kept)");
    ck_assert_msg(done || out.len == 0, "a value kept wrote something");
    vars_buf_free(&out);
    return result;
}

START_TEST(prefix_is_replaced_and_the_rest_kept)
{
    static const char *const pairs[][2] = {{"http://b:8080/two/", "/one/"}};
    struct rules r;
    rules_make(&r, pairs, 1);
    ck_assert_str_eq(rewrite(&r, "Location", "http://b:8080/two/x?y=1"), "/one/x?y=1");
    ck_assert_str_eq(rewrite(&r, "location", "http://b:8080/two/"), "/one/");
    /* no match: another host, a shorter value, another case (nginx
     * compares bytes) */
    ck_assert_str_eq(rewrite(&r, "Location", "http://c:8080/two/x"), "(kept)");
    ck_assert_str_eq(rewrite(&r, "Location", "http://b:8080/two"), "(kept)");
    ck_assert_str_eq(rewrite(&r, "Location", "HTTP://B:8080/two/x"), "(kept)");
    /* other headers are never touched */
    ck_assert_str_eq(rewrite(&r, "Content-Location", "http://b:8080/two/x"), "(kept)");
    ck_assert_str_eq(rewrite(&r, "X-Location", "http://b:8080/two/x"), "(kept)");
    rules_free(&r);
}
END_TEST

START_TEST(refresh_url_is_rewritten)
{
    static const char *const pairs[][2] = {{"http://b/", "/"}};
    struct rules r;
    rules_make(&r, pairs, 1);
    ck_assert_str_eq(rewrite(&r, "Refresh", "5; url=http://b/next"), "5; url=/next");
    ck_assert_str_eq(rewrite(&r, "refresh", "0;URL=http://b/a/b"), "0;URL=/a/b");
    ck_assert_str_eq(rewrite(&r, "Refresh", "5"), "(kept)");
    ck_assert_str_eq(rewrite(&r, "Refresh", "5; url=http://c/next"), "(kept)");
    rules_free(&r);
}
END_TEST

START_TEST(regex_replaces_the_whole_value_with_its_groups)
{
    static const char *const pairs[][2] = {
        {"~^http://internal(:\\d+)?(/.*)$", "https://$host$2"},
        {"~*^HTTP://(?<name>[a-z]+)\\.corp/", "/corp/$name/"},
    };
    struct rules r;
    rules_make(&r, pairs, 2);
    ck_assert_str_eq(rewrite(&r, "Location", "http://internal:81/a/b?c"),
                     "https://front.example/a/b?c");
    ck_assert_str_eq(rewrite(&r, "Location", "http://internal/"), "https://front.example/");
    /* ~* is caseless; the whole value is replaced, not only the match */
    ck_assert_str_eq(rewrite(&r, "Location", "http://wiki.corp/page"), "/corp/wiki/");
    ck_assert_str_eq(rewrite(&r, "Location", "/relative"), "(kept)");
    rules_free(&r);
}
END_TEST

START_TEST(first_matching_line_wins_and_variables_are_read)
{
    static const char *const pairs[][2] = {
        {"http://b/special/", "/s/"},
        {"http://b/", "$scheme://$host:8443/"},
        {"http://b/special/deeper/", "/never/"},
    };
    struct rules r;
    rules_make(&r, pairs, 3);
    ck_assert_str_eq(rewrite(&r, "Location", "http://b/special/deeper/x"), "/s/deeper/x");
    /* a connection without TLS: $scheme is http */
    ck_assert_str_eq(rewrite(&r, "Location", "http://b/x"), "http://front.example:8443/x");
    rules_free(&r);
}
END_TEST

START_TEST(pattern_with_a_variable)
{
    static const char *const pairs[][2] = {{"http://$host/", "/"}, {"", "/prefixed"}};
    struct rules r;
    rules_make(&r, pairs, 2);
    ck_assert_str_eq(rewrite(&r, "Location", "http://front.example/a"), "/a");
    /* an empty pattern matches any value, as nginx's: the replacement is
     * put in front */
    ck_assert_str_eq(rewrite(&r, "Location", "/a"), "/prefixed/a");
    rules_free(&r);
}
END_TEST

START_TEST(no_rules_keep_everything)
{
    struct vars_ctx ctx = {.req = &request};
    struct vars_buf out;
    char small[64];
    vars_buf_init(&out, small, sizeof(small));
    ck_assert(!proxy_redirect_header(NULL, (struct http_str){"Location", 8},
                                     (struct http_str){"http://b/", 9}, &ctx, &out));
    ck_assert_uint_eq(out.len, 0);
    vars_buf_free(&out);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("proxy_redirect");
    TCase *tc = tcase_create("rewrite");
    tcase_add_test(tc, prefix_is_replaced_and_the_rest_kept);
    tcase_add_test(tc, refresh_url_is_rewritten);
    tcase_add_test(tc, regex_replaces_the_whole_value_with_its_groups);
    tcase_add_test(tc, first_matching_line_wins_and_variables_are_read);
    tcase_add_test(tc, pattern_with_a_variable);
    tcase_add_test(tc, no_rules_keep_everything);
    suite_add_tcase(s, tc);
    return s;
}
