/*
 * test_static_cond.c: validators and preconditions of static files
 * (proto/static/static_cond.c), without sockets: ETag and date formats,
 * the three date forms, and RFC 9110 13.2.2's order over a table of
 * requests.
 */
#include "../helpers.h"
#include "proto/static/static_cond.h"

#include <stdlib.h>
#include <string.h>

/* Sun, 06 Nov 1994 08:49:37 GMT: RFC 9110's own example. */
#define T 784111777

START_TEST(etag_is_nginx_s)
{
    char etag[STATIC_ETAG_MAX];
    size_t n = static_etag_format(etag, T, 10);
    ck_assert_str_eq(etag, "\"2ebc98a1-a\"");
    ck_assert_uint_eq(n, strlen(etag));
    n = static_etag_format(etag, INT64_MAX, UINT64_MAX);
    ck_assert_uint_eq(n, strlen(etag));
    ck_assert_str_eq(etag, "\"7fffffffffffffff-ffffffffffffffff\"");
}
END_TEST

START_TEST(dates)
{
    char text[STATIC_DATE_LEN + 1];
    static_date_format(text, T);
    ck_assert_str_eq(text, "Sun, 06 Nov 1994 08:49:37 GMT");
    static_date_format(text, 0);
    ck_assert_str_eq(text, "Thu, 01 Jan 1970 00:00:00 GMT");
    static const struct {
        const char *text;
        bool ok;
        int64_t t;
    } parse[] = {
        {"Sun, 06 Nov 1994 08:49:37 GMT", true, T},
        {"Sunday, 06-Nov-94 08:49:37 GMT", true, T},
        {"Sun Nov  6 08:49:37 1994", true, T},
        {"Sun Nov 16 08:49:37 1994", true, T + 10 * 86400},
        {"Thu, 01 Jan 1970 00:00:00 GMT", true, 0},
        {"Sun, 06 Nov 1994 08:49:37 UTC", false, 0},
        {"Sun, 06 Nov 1994 08:49:37 GMT ", false, 0},
        {"Sun, 06 Foo 1994 08:49:37 GMT", false, 0},
        {"Sun, 6 Nov 1994 08:49:37 GMT", false, 0},
        {"Sun, 06 Nov 1994 24:49:37 GMT", false, 0},
        {"Sun, 06 Nov 1960 08:49:37 GMT", false, 0},
        {"", false, 0},
        {"Sun,", false, 0},
        {"yesterday", false, 0},
    };
    for (size_t i = 0; i < sizeof(parse) / sizeof(parse[0]); i++) {
        int64_t t = -1;
        bool ok = static_date_parse((struct http_str){parse[i].text, strlen(parse[i].text)}, &t);
        ck_assert_msg(ok == parse[i].ok, "%s", parse[i].text);
        if (ok)
            ck_assert_int_eq(t, parse[i].t);
        /* cut short: never read past the end, never accepted */
        for (size_t cut = 0; cut < strlen(parse[i].text); cut++) {
            char *copy = malloc(cut + 1);
            memcpy(copy, parse[i].text, cut);
            (void)static_date_parse((struct http_str){copy, cut}, &t);
            free(copy);
        }
    }
}
END_TEST

struct cond_case {
    const char *method;
    const char *name, *value;   /* one header, or NULL */
    const char *name2, *value2; /* a second, or NULL */
    enum static_ims ims;
    bool etag;
    unsigned status;
};

#define ETAG   "\"2ebc98a1-a\""
#define DATE   "Sun, 06 Nov 1994 08:49:37 GMT"
#define LATER  "Mon, 07 Nov 1994 08:49:37 GMT"
#define SOONER "Sat, 05 Nov 1994 08:49:37 GMT"

static const struct cond_case cases[] = {
    {"GET", NULL, NULL, NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-None-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"HEAD", "If-None-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"GET", "If-None-Match", "W/" ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"GET", "if-none-match", "\"x\", " ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"GET", "If-None-Match", "*", NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"GET", "If-None-Match", "\"other\"", NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-None-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, false, 0},
    {"GET", "If-None-Match", "\"unterminated", NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"POST", "If-None-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 412},
    /* If-None-Match wins over If-Modified-Since */
    {"GET", "If-None-Match", "\"other\"", "If-Modified-Since", DATE, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Modified-Since", DATE, NULL, NULL, STATIC_IMS_EXACT, true, 304},
    {"GET", "If-Modified-Since", LATER, NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Modified-Since", LATER, NULL, NULL, STATIC_IMS_BEFORE, true, 304},
    {"GET", "If-Modified-Since", SOONER, NULL, NULL, STATIC_IMS_BEFORE, true, 0},
    {"GET", "If-Modified-Since", DATE, NULL, NULL, STATIC_IMS_OFF, true, 0},
    {"GET", "If-Modified-Since", "garbage", NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Match", "*", NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Match", "\"other\"", NULL, NULL, STATIC_IMS_EXACT, true, 412},
    /* If-Match compares strongly */
    {"GET", "If-Match", "W/" ETAG, NULL, NULL, STATIC_IMS_EXACT, true, 412},
    {"GET", "If-Match", ETAG, NULL, NULL, STATIC_IMS_EXACT, false, 412},
    /* If-Match wins over If-Unmodified-Since */
    {"GET", "If-Match", ETAG, "If-Unmodified-Since", SOONER, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Unmodified-Since", SOONER, NULL, NULL, STATIC_IMS_EXACT, true, 412},
    {"GET", "If-Unmodified-Since", DATE, NULL, NULL, STATIC_IMS_EXACT, true, 0},
    {"GET", "If-Unmodified-Since", "garbage", NULL, NULL, STATIC_IMS_EXACT, true, 0},
    /* 412 before 304 */
    {"GET", "If-Match", "\"other\"", "If-None-Match", ETAG, STATIC_IMS_EXACT, true, 412},
};

static struct http_request request(const struct cond_case *c, struct http_header *h)
{
    size_t n = 0;
    if (c->name != NULL)
        h[n++] = (struct http_header){{c->name, strlen(c->name)}, {c->value, strlen(c->value)}};
    if (c->name2 != NULL)
        h[n++] = (struct http_header){{c->name2, strlen(c->name2)}, {c->value2, strlen(c->value2)}};
    return (struct http_request){
        .method = {c->method, strlen(c->method)}, .headers = h, .header_count = n};
}

START_TEST(cond_table)
{
    const struct cond_case *c = &cases[_i];
    struct http_header h[2];
    struct http_request req = request(c, h);
    struct static_validators v = {.mtime = T, .size = 10};
    if (c->etag) {
        v.etag = ETAG;
        v.etag_len = strlen(ETAG);
    }
    ck_assert_msg(static_cond_check(&req, &v, c->ims) == c->status, "case %d", _i);
}
END_TEST

START_TEST(if_range)
{
    struct static_validators v = {.mtime = T, .size = 10, .etag = ETAG, .etag_len = strlen(ETAG)};
    static const struct {
        const char *value; /* NULL: no If-Range */
        bool applies;
    } cases_ir[] = {
        {NULL, true}, {ETAG, true},   {"W/" ETAG, false}, {"\"other\"", false},
        {DATE, true}, {LATER, false}, {"garbage", false},
    };
    for (size_t i = 0; i < sizeof(cases_ir) / sizeof(cases_ir[0]); i++) {
        struct http_header h = {{"If-Range", 8}, {cases_ir[i].value, 0}};
        struct http_request req = {.method = {"GET", 3}, .headers = &h};
        if (cases_ir[i].value != NULL) {
            h.value.len = strlen(cases_ir[i].value);
            req.header_count = 1;
        }
        ck_assert_msg(static_cond_if_range(&req, &v) == cases_ir[i].applies, "%s",
                      cases_ir[i].value);
    }
    /* without an ETag, an entity tag never matches */
    v.etag = NULL;
    struct http_header h = {{"If-Range", 8}, {ETAG, strlen(ETAG)}};
    struct http_request req = {.method = {"GET", 3}, .headers = &h, .header_count = 1};
    ck_assert(!static_cond_if_range(&req, &v));
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/static_cond");
    TCase *tc = tcase_create("cond");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, etag_is_nginx_s);
    tcase_add_test(tc, dates);
    tcase_add_loop_test(tc, cond_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, if_range);
    suite_add_tcase(suite, tc);
    return suite;
}
