/*
 * test_static_range.c: the Range parser of static files
 * (proto/static/static_range.c), without sockets: a table of values
 * against file sizes, whole and cut at every byte, the bound on the
 * number of ranges and the merging of overlapping ones.
 */
#include "../helpers.h"
#include "proto/static/static_range.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct range_case {
    const char *value;
    uint64_t size;
    enum static_range_result result;
    const char *ranges; /* "first-last,..." when STATIC_RANGE_OK */
};

static const struct range_case cases[] = {
    {"bytes=0-99", 1000, STATIC_RANGE_OK, "0-99"},
    {"bytes=0-0", 1000, STATIC_RANGE_OK, "0-0"},
    {"Bytes=5-", 10, STATIC_RANGE_OK, "5-9"},
    {"bytes=-3", 10, STATIC_RANGE_OK, "7-9"},
    {"bytes=-30", 10, STATIC_RANGE_OK, "0-9"},
    {"bytes=5-100", 10, STATIC_RANGE_OK, "5-9"},
    {"bytes=0-1,3-4", 10, STATIC_RANGE_OK, "0-1,3-4"},
    {"bytes= 0-1 , 3-4 ", 10, STATIC_RANGE_OK, "0-1,3-4"},
    {"bytes=3-4,0-1", 10, STATIC_RANGE_OK, "0-1,3-4"},
    /* overlapping and adjacent ranges merge: no byte twice */
    {"bytes=0-5,3-8", 10, STATIC_RANGE_OK, "0-8"},
    {"bytes=0-1,2-3", 10, STATIC_RANGE_OK, "0-3"},
    {"bytes=0-,0-,0-", 10, STATIC_RANGE_OK, "0-9"},
    {"bytes=-1,9-9", 10, STATIC_RANGE_OK, "9-9"},
    /* unsatisfiable ones are dropped, unless all are */
    {"bytes=20-30,0-0", 10, STATIC_RANGE_OK, "0-0"},
    {"bytes=10-", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=10-20,30-40", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=-0", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    /* past 4 GB: 64-bit offsets */
    {"bytes=5000000000-5000000009", 6000000000, STATIC_RANGE_OK, "5000000000-5000000009"},
    {"bytes=-10", 6000000000, STATIC_RANGE_OK, "5999999990-5999999999"},
    /* ignored: the whole file (nginx's cases: another unit, nothing) */
    {"bytes=", 10, STATIC_RANGE_IGNORE, NULL},
    {"items=0-1", 10, STATIC_RANGE_IGNORE, NULL},
    {"bytes", 10, STATIC_RANGE_IGNORE, NULL},
    {"bytes=0-1", 0, STATIC_RANGE_IGNORE, NULL},
    {"bytes=-5", 0, STATIC_RANGE_IGNORE, NULL},
    /* well formed, selecting nothing: 416 as nginx */
    {"bytes=5-1", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=5-1,20-", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=5-1,2-3", 10, STATIC_RANGE_OK, "2-3"},
    /* spaces around the dash, as nginx takes them */
    {"bytes=1 - 2", 10, STATIC_RANGE_OK, "1-2"},
    /* malformed: 416, as nginx, not the whole file */
    {"bytes=abc", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=,", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes= ", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=a-1", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=1-a", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=1", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=--1", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=-", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=1-2-3", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=0-1;2-3", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=0-1,x", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=abc", 0, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=99999999999999999999-", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=0-99999999999999999999", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    {"bytes=-99999999999999999999", 10, STATIC_RANGE_UNSATISFIABLE, NULL},
    /* 16 ranges are served, 17 are not */
    {"bytes=0-0,2-2,4-4,6-6,8-8,10-10,12-12,14-14,16-16,18-18,20-20,22-22,24-24,26-26,28-28,30-30",
     100, STATIC_RANGE_OK,
     "0-0,2-2,4-4,6-6,8-8,10-10,12-12,14-14,16-16,18-18,20-20,22-22,24-24,26-26,28-28,30-30"},
    {"bytes=0-0,2-2,4-4,6-6,8-8,10-10,12-12,14-14,16-16,18-18,20-20,22-22,24-24,26-26,28-28,30-30,"
     "32-32",
     100, STATIC_RANGE_IGNORE, NULL},
    {"bytes=0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0", 100,
     STATIC_RANGE_IGNORE, NULL},
};

static void format(const struct static_range *r, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%llu-%llu", i > 0 ? "," : "",
                              (unsigned long long)r[i].first, (unsigned long long)r[i].last);
}

START_TEST(range_table)
{
    const struct range_case *c = &cases[_i];
    struct static_range r[STATIC_RANGES_MAX];
    size_t n = 99;
    enum static_range_result got =
        static_range_parse((struct http_str){c->value, strlen(c->value)}, c->size, r, &n);
    ck_assert_msg(got == c->result, "%s: %d, expected %d", c->value, got, c->result);
    if (got == STATIC_RANGE_OK) {
        char text[512];
        format(r, n, text, sizeof(text));
        ck_assert_str_eq(text, c->ranges);
    } else {
        ck_assert_uint_eq(n, 0);
    }
}
END_TEST

/* A value cut short never reads past its end (ASan watches the copy). */
START_TEST(range_every_prefix)
{
    const struct range_case *c = &cases[_i];
    size_t len = strlen(c->value);
    for (size_t cut = 0; cut <= len; cut++) {
        char *copy = malloc(cut > 0 ? cut : 1);
        memcpy(copy, c->value, cut);
        struct static_range r[STATIC_RANGES_MAX];
        size_t n;
        enum static_range_result got =
            static_range_parse((struct http_str){copy, cut}, c->size, r, &n);
        ck_assert(got == STATIC_RANGE_OK || got == STATIC_RANGE_IGNORE ||
                  got == STATIC_RANGE_UNSATISFIABLE);
        ck_assert_uint_le(n, STATIC_RANGES_MAX);
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_le(r[i].first, r[i].last);
            ck_assert_uint_lt(r[i].last, c->size);
            if (i > 0)
                ck_assert_uint_gt(r[i].first, r[i - 1].last + 1);
        }
        free(copy);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/static_range");
    TCase *tc = tcase_create("parse");
    tcase_set_timeout(tc, 10);
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    tcase_add_loop_test(tc, range_table, 0, n);
    tcase_add_loop_test(tc, range_every_prefix, 0, n);
    suite_add_tcase(suite, tc);
    return suite;
}
