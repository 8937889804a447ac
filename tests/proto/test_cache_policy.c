/*
 * test_cache_policy.c: RFC 9111's rules for a shared cache
 * (proto/cache/cache_policy.c) and the keys of entries and their Vary
 * variants (proto/cache/cache_key.c), without sockets: a table of
 * response heads against what is stored and for how long.
 */
#include "../helpers.h"
#include "proto/cache/cache_key.h"
#include "proto/cache/cache_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1700000000 /* Tue, 14 Nov 2023 22:13:20 GMT */

struct policy_case {
    const char *name;
    unsigned status;
    const char *lines;
    int64_t valid; /* proxy_cache_valid; -1: none */
    bool authorization;
    unsigned ignore;
    enum cache_refusal refusal;
    int64_t lifetime; /* expires - NOW when stored */
    int64_t age;
};

static const struct policy_case cases[] = {
    {"max-age", 200, "Cache-Control: max-age=60\r\n", -1, false, 0, CACHE_STORE, 60, 0},
    {"s-maxage wins over max-age", 200, "Cache-Control: max-age=60, s-maxage=10\r\n", -1, false, 0,
     CACHE_STORE, 10, 0},
    {"quoted max-age", 200, "Cache-Control: max-age=\"30\"\r\n", -1, false, 0, CACHE_STORE, 30, 0},
    {"case of directives", 200, "cache-control: Max-Age=30\r\n", -1, false, 0, CACHE_STORE, 30, 0},
    {"two fields", 200, "Cache-Control: public\r\nCache-Control: max-age=5\r\n", -1, false, 0,
     CACHE_STORE, 5, 0},
    {"no-store", 200, "Cache-Control: max-age=60, no-store\r\n", -1, false, 0, CACHE_NO_STORE, 0,
     0},
    {"private", 200, "Cache-Control: private, max-age=60\r\n", -1, false, 0, CACHE_PRIVATE, 0, 0},
    {"private with fields", 200, "Cache-Control: private=\"x, y\", max-age=60\r\n", -1, false, 0,
     CACHE_PRIVATE, 0, 0},
    {"no-cache", 200, "Cache-Control: no-cache\r\n", 600, false, 0, CACHE_NO_CACHE, 0, 0},
    {"Expires minus now without Date", 200, "Expires: Tue, 14 Nov 2023 22:15:00 GMT\r\n", -1, false,
     0, CACHE_STORE, 100, 0},
    {"Expires minus Date", 200,
     "Date: Tue, 14 Nov 2023 22:13:20 GMT\r\nExpires: Tue, 14 Nov 2023 22:14:20 GMT\r\n", -1, false,
     0, CACHE_STORE, 60, 0},
    {"Expires in the past", 200, "Expires: Thu, 01 Jan 1970 00:00:00 GMT\r\n", -1, false, 0,
     CACHE_EXPIRED, 0, 0},
    {"invalid Expires is stale", 200, "Expires: 0\r\n", 600, false, 0, CACHE_EXPIRED, 0, 0},
    {"max-age beats Expires", 200,
     "Expires: Thu, 01 Jan 1970 00:00:00 GMT\r\nCache-Control: max-age=20\r\n", -1, false, 0,
     CACHE_STORE, 20, 0},
    {"nothing: no heuristic", 200,
     "Content-Type: text/plain\r\nLast-Modified: Mon, 01 Jan 2001 "
     "00:00:00 GMT\r\n",
     -1, false, 0, CACHE_NO_LIFETIME, 0, 0},
    {"proxy_cache_valid", 200, "Content-Type: text/plain\r\n", 300, false, 0, CACHE_STORE, 300, 0},
    {"headers beat proxy_cache_valid", 200, "Cache-Control: max-age=7\r\n", 300, false, 0,
     CACHE_STORE, 7, 0},
    {"Age counts against the lifetime", 200, "Cache-Control: max-age=60\r\nAge: 20\r\n", -1, false,
     0, CACHE_STORE, 40, 20},
    {"Age past the lifetime", 200, "Cache-Control: max-age=60\r\nAge: 60\r\n", -1, false, 0,
     CACHE_EXPIRED, 0, 0},
    {"apparent age from Date", 200,
     "Date: Tue, 14 Nov 2023 22:13:10 GMT\r\nCache-Control: max-age=60\r\n", -1, false, 0,
     CACHE_STORE, 50, 10},
    {"Set-Cookie", 200, "Cache-Control: max-age=60\r\nSet-Cookie: a=b\r\n", -1, false, 0,
     CACHE_SET_COOKIE, 0, 0},
    {"Set-Cookie ignored", 200, "Cache-Control: max-age=60\r\nSet-Cookie: a=b\r\n", -1, false,
     CACHE_IGNORE_SET_COOKIE, CACHE_STORE, 60, 0},
    {"Authorization", 200, "Cache-Control: max-age=60\r\n", -1, true, 0, CACHE_AUTHORIZATION, 0, 0},
    {"Authorization, public", 200, "Cache-Control: public, max-age=60\r\n", -1, true, 0,
     CACHE_STORE, 60, 0},
    {"Authorization, s-maxage", 200, "Cache-Control: s-maxage=60\r\n", -1, true, 0, CACHE_STORE, 60,
     0},
    {"Authorization, must-revalidate", 200, "Cache-Control: must-revalidate, max-age=9\r\n", -1,
     true, 0, CACHE_STORE, 9, 0},
    {"Vary: *", 200, "Cache-Control: max-age=60\r\nVary: *\r\n", -1, false, 0, CACHE_VARY_ANY, 0,
     0},
    {"Vary: * ignored", 200, "Cache-Control: max-age=60\r\nVary: *\r\n", -1, false,
     CACHE_IGNORE_VARY, CACHE_STORE, 60, 0},
    {"Cache-Control ignored", 200, "Cache-Control: no-store\r\n", 30, false,
     CACHE_IGNORE_CACHE_CONTROL, CACHE_STORE, 30, 0},
    {"Expires ignored", 200, "Expires: Tue, 14 Nov 2023 22:15:00 GMT\r\n", -1, false,
     CACHE_IGNORE_EXPIRES, CACHE_NO_LIFETIME, 0, 0},
    {"404 with max-age", 404, "Cache-Control: max-age=60\r\n", -1, false, 0, CACHE_STORE, 60, 0},
    {"500 with max-age", 500, "Cache-Control: max-age=60\r\n", -1, false, 0, CACHE_STATUS, 0, 0},
    {"206 never", 206, "Cache-Control: max-age=60\r\n", -1, false, 0, CACHE_STATUS, 0, 0},
    {"500 by proxy_cache_valid", 500, "", 10, false, 0, CACHE_STORE, 10, 0},
    {"304 never", 304, "", 10, false, 0, CACHE_STATUS, 0, 0},
    {"max-age=0", 200, "Cache-Control: max-age=0\r\n", -1, false, 0, CACHE_EXPIRED, 0, 0},
    {"invalid max-age is stale", 200, "Cache-Control: max-age=abc\r\n", 300, false, 0,
     CACHE_EXPIRED, 0, 0},
};

START_TEST(policy_table)
{
    const struct policy_case *c = &cases[_i];
    struct cache_policy_in in = {.status = c->status,
                                 .lines = c->lines,
                                 .len = strlen(c->lines),
                                 .now = NOW,
                                 .valid = c->valid,
                                 .authorization = c->authorization,
                                 .ignore = c->ignore};
    struct cache_policy p;
    cache_policy_decide(&in, &p);
    ck_assert_msg(p.refusal == c->refusal, "%s: refusal %d, expected %d", c->name, p.refusal,
                  c->refusal);
    if (c->refusal == CACHE_STORE) {
        ck_assert_msg(p.expires - NOW == c->lifetime, "%s: lifetime %lld", c->name,
                      (long long)(p.expires - NOW));
        ck_assert_msg(p.initial_age == c->age, "%s: age %lld", c->name, (long long)p.initial_age);
    }
}
END_TEST

/* Every prefix of each head: no read past its end (ASan). */
START_TEST(policy_every_prefix)
{
    const struct policy_case *c = &cases[_i];
    size_t len = strlen(c->lines);
    for (size_t cut = 0; cut <= len; cut++) {
        char *copy = malloc(cut > 0 ? cut : 1);
        memcpy(copy, c->lines, cut);
        struct cache_policy_in in = {
            .status = c->status, .lines = copy, .len = cut, .now = NOW, .valid = c->valid};
        struct cache_policy p;
        cache_policy_decide(&in, &p);
        free(copy);
    }
}
END_TEST

START_TEST(policy_directives)
{
    uint32_t s = 0;
    struct http_str v = {"max-age=1, stale-while-revalidate=30, stale-if-error=\"60\"", 56};
    ck_assert(cache_policy_seconds(v, "stale-while-revalidate", &s));
    ck_assert_uint_eq(s, 30);
    ck_assert(cache_policy_seconds(v, "stale-if-error", &s));
    ck_assert_uint_eq(s, 60);
    ck_assert(!cache_policy_seconds(v, "s-maxage", &s));
    struct http_str big = {"max-age=99999999999999", 22};
    ck_assert(cache_policy_seconds(big, "max-age", &s));
    ck_assert_uint_eq(s, 2147483648u);
    struct cache_policy_in in = {.status = 200,
                                 .lines = "Cache-Control: max-age=10, stale-while-revalidate=5, "
                                          "stale-if-error=7\r\nVary: Accept-Language\r\n",
                                 .now = NOW,
                                 .valid = -1};
    in.len = strlen(in.lines);
    struct cache_policy p;
    cache_policy_decide(&in, &p);
    ck_assert_int_eq(p.refusal, CACHE_STORE);
    ck_assert_uint_eq(p.swr, 5);
    ck_assert_uint_eq(p.sie, 7);
    ck_assert(!p.must_revalidate);
    ck_assert_int_eq((int)p.vary.len, 15);
    ck_assert(strncmp(p.vary.data, "Accept-Language", 15) == 0);
    ck_assert_int_eq(cache_policy_age(5, NOW, NOW + 10), 15);
    ck_assert_int_eq(cache_policy_age(0, NOW, NOW - 10), 0);
}
END_TEST

/* ------------------------------------------------------------ keys */

START_TEST(key_ids)
{
    uint8_t a[CACHE_ID_LEN], b[CACHE_ID_LEN], c[CACHE_ID_LEN];
    char hex[2 * CACHE_ID_LEN + 1];
    cache_key_id((struct http_str){"", 0}, (struct http_str){NULL, 0}, a);
    cache_key_hex(a, hex);
    ck_assert_str_eq(hex, "d41d8cd98f00b204e9800998ecf8427e"); /* MD5("") */
    cache_key_id((struct http_str){"httplocalhost/a", 15}, (struct http_str){NULL, 0}, a);
    cache_key_id((struct http_str){"httplocalhost/a", 15}, (struct http_str){"x:1\n", 4}, b);
    cache_key_id((struct http_str){"httplocalhost/a", 15}, (struct http_str){"x:2\n", 4}, c);
    ck_assert(memcmp(a, b, CACHE_ID_LEN) != 0);
    ck_assert(memcmp(b, c, CACHE_ID_LEN) != 0);
}
END_TEST

static void key_hex(const char *key, const char *variant, char hex[2 * CACHE_ID_LEN + 1])
{
    uint8_t id[CACHE_ID_LEN];
    cache_key_id((struct http_str){key, strlen(key)}, (struct http_str){variant, strlen(variant)},
                 id);
    cache_key_hex(id, hex);
}

/* Each thread keeps the ids of the keys it digested lately: one asked
 * again is the same MD5, and a key is never taken for another (the split
 * between key and variant, keys that share a slot, a key too long to be
 * kept). */
START_TEST(key_ids_kept)
{
    char hex[2 * CACHE_ID_LEN + 1];
    for (int round = 0; round < 2; round++) {
        key_hex("abc", "", hex);
        ck_assert_str_eq(hex, "900150983cd24fb0d6963f7d28e17f72");
        key_hex("a", "bc", hex);
        ck_assert_str_eq(hex, "f7712e5f4c2102af4600d38b83c20ff4"); /* MD5("a\nbc") */
        key_hex("ab", "c", hex);
        ck_assert_str_eq(hex, "d9ba2c08d8c6b968260a0412469612e4"); /* MD5("ab\nc") */
    }
    enum { KEYS = 300 }; /* many to a slot */
    static char first[KEYS][2 * CACHE_ID_LEN + 1];
    char key[400];
    for (int round = 0; round < 3; round++)
        for (int j = 0; j < KEYS; j++) {
            int i = round == 1 ? KEYS - 1 - j : j;
            /* Every seventh key longer than what is kept. */
            snprintf(key, sizeof(key), "httpexample.com/%d/%0*d", i, i % 7 == 0 ? 250 : 1, 0);
            key_hex(key, "", hex);
            if (round == 0) {
                for (int k = 0; k < i; k++)
                    ck_assert_str_ne(first[k], hex);
                memcpy(first[i], hex, sizeof(hex));
            } else {
                ck_assert_str_eq(first[i], hex);
            }
        }
}
END_TEST

static const struct http_header req_headers[] = {
    {{"Accept-Encoding", 15}, {"gzip", 4}},
    {{"accept-language", 15}, {" en ", 4}},
    {{"Accept-Language", 15}, {"fr", 2}},
    {{"Host", 4}, {"x", 1}},
};

START_TEST(key_variants)
{
    char out[256];
    struct http_str vary = {"Accept-Language, accept-encoding,,X-None", 40};
    size_t n = cache_key_variant(vary, req_headers, 4, out, sizeof(out));
    ck_assert_uint_eq(n, strlen("accept-language:en,fr\naccept-encoding:gzip\nx-none:\n"));
    ck_assert(memcmp(out, "accept-language:en,fr\naccept-encoding:gzip\nx-none:\n", n) == 0);
    /* Another request's values, another variant. */
    char other[256];
    size_t m = cache_key_variant(vary, req_headers + 3, 1, other, sizeof(other));
    ck_assert(m != n || memcmp(out, other, n) != 0);
    /* A short buffer: the whole length told, no write past it. */
    char tiny[4];
    ck_assert_uint_eq(cache_key_variant(vary, req_headers, 4, tiny, sizeof(tiny)), n);
    ck_assert(memcmp(tiny, "acce", 4) == 0);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/cache_policy");
    TCase *tc = tcase_create("policy");
    tcase_set_timeout(tc, 10);
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    tcase_add_loop_test(tc, policy_table, 0, n);
    tcase_add_loop_test(tc, policy_every_prefix, 0, n);
    tcase_add_test(tc, policy_directives);
    tcase_add_test(tc, key_ids);
    tcase_add_test(tc, key_ids_kept);
    tcase_add_test(tc, key_variants);
    suite_add_tcase(suite, tc);
    return suite;
}
