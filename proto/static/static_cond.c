/*
 * static_cond.c: the validators of a static file and the preconditions of
 * a request against them (static_cond.h): entity-tag lists, HTTP dates in
 * their three forms, and RFC 9110 13.2.2's order of evaluation.
 */
#include "proto/static/static_cond.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* `v` in lowercase hex without leading zeros ("0" for 0); its length. */
static size_t put_hex(char *out, uint64_t v)
{
    char digits[16];
    size_t n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    return n;
}

/* By hand, as static_date_format(): once per file response. */
size_t static_etag_format(char *out, int64_t mtime, uint64_t size)
{
    size_t n = 0;
    out[n++] = '"';
    n += put_hex(out + n, (uint64_t)mtime); /* "%llx" of a negative time: its two's complement */
    out[n++] = '-';
    n += put_hex(out + n, size);
    out[n++] = '"';
    out[n] = '\0';
    return n;
}

static const char wdays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static void put_digits(char *out, int value, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        out[i] = (char)('0' + value % 10);
        value /= 10;
    }
}

void static_date_format(char *out, int64_t t)
{
    /* The same file's time, response after response: the last one kept. */
    static _Thread_local int64_t last_t = INT64_MIN;
    static _Thread_local char last[STATIC_DATE_LEN + 1];
    if (t == last_t) {
        memcpy(out, last, sizeof(last));
        return;
    }
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 0)
        tm = (struct tm){.tm_mday = 1, .tm_year = 70, .tm_wday = 4}; /* the epoch */
    /* By hand: every field's width is fixed, which the compiler cannot
     * see through snprintf(). */
    memcpy(out, wdays[tm.tm_wday], 3);
    memcpy(out + 3, ", ", 2);
    put_digits(out + 5, tm.tm_mday, 2);
    out[7] = ' ';
    memcpy(out + 8, months[tm.tm_mon], 3);
    out[11] = ' ';
    put_digits(out + 12, tm.tm_year + 1900, 4);
    out[16] = ' ';
    put_digits(out + 17, tm.tm_hour, 2);
    out[19] = ':';
    put_digits(out + 20, tm.tm_min, 2);
    out[22] = ':';
    put_digits(out + 23, tm.tm_sec, 2);
    memcpy(out + 25, " GMT", 5); /* with its NUL */
    memcpy(last, out, sizeof(last));
    last_t = t;
}

/* A cursor over a date's text. */
struct cursor {
    const char *p, *end;
};

static bool take(struct cursor *c, const char *literal)
{
    size_t n = strlen(literal);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, literal, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* Exactly `digits` digits, or with `digits` 0 one or two (asctime's day). */
static bool take_number(struct cursor *c, int digits, int *out)
{
    int n = 0, seen = 0, max = digits > 0 ? digits : 2;
    while (seen < max && c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        n = n * 10 + (*c->p++ - '0');
        seen++;
    }
    if (digits > 0 ? seen != digits : seen == 0)
        return false;
    *out = n;
    return true;
}

static bool take_month(struct cursor *c, int *out)
{
    for (int m = 0; m < 12; m++) {
        if (take(c, months[m])) {
            *out = m;
            return true;
        }
    }
    return false;
}

static bool take_time(struct cursor *c, struct tm *tm)
{
    return take_number(c, 2, &tm->tm_hour) && take(c, ":") && take_number(c, 2, &tm->tm_min) &&
           take(c, ":") && take_number(c, 2, &tm->tm_sec);
}

bool static_date_parse(struct http_str s, int64_t *out)
{
    struct cursor c = {s.data, s.data + s.len};
    while (c.p < c.end && c.p[0] != ',' && c.p[0] != ' ')
        c.p++; /* the day's name, which the date says again */
    struct tm tm = {0};
    int year = 0;
    if (take(&c, ", ")) {
        const char *rest = c.p;
        if (take_number(&c, 2, &tm.tm_mday) && take(&c, " ")) { /* IMF-fixdate */
            if (!take_month(&c, &tm.tm_mon) || !take(&c, " ") || !take_number(&c, 4, &year) ||
                !take(&c, " ") || !take_time(&c, &tm) || !take(&c, " GMT"))
                return false;
        } else { /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
            c.p = rest;
            if (!take_number(&c, 2, &tm.tm_mday) || !take(&c, "-") || !take_month(&c, &tm.tm_mon) ||
                !take(&c, "-") || !take_number(&c, 2, &year) || !take(&c, " ") ||
                !take_time(&c, &tm) || !take(&c, " GMT"))
                return false;
            year += year < 70 ? 2000 : 1900; /* RFC 9110 5.6.7: within 50 years */
        }
    } else if (take(&c, " ")) { /* asctime: "Sun Nov  6 08:49:37 1994" */
        if (!take_month(&c, &tm.tm_mon) || !take(&c, " "))
            return false;
        take(&c, " ");
        if (!take_number(&c, 0, &tm.tm_mday) || !take(&c, " ") || !take_time(&c, &tm) ||
            !take(&c, " ") || !take_number(&c, 4, &year))
            return false;
    } else {
        return false;
    }
    if (c.p != c.end || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60 || year < 1970)
        return false;
    tm.tm_year = year - 1900;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return false;
    *out = (int64_t)t;
    return true;
}

/* The value of the first `name` header, else NULL data. */
static struct http_str header(const struct http_request *req, const char *name, bool *present)
{
    for (size_t i = 0; i < req->header_count; i++)
        if (http_str_equal_nocase(req->headers[i].name, name)) {
            *present = true;
            return http_trim(req->headers[i].value);
        }
    *present = false;
    return (struct http_str){NULL, 0};
}

/* Whether an entity-tag list (If-Match, If-None-Match; every header of
 * that name) holds "*" or a tag equal to `v`'s, weakly or strongly. */
static bool etag_list_matches(const struct http_request *req, const char *name,
                              const struct static_validators *v, bool weak)
{
    for (size_t i = 0; i < req->header_count; i++) {
        if (!http_str_equal_nocase(req->headers[i].name, name))
            continue;
        const char *p = req->headers[i].value.data;
        const char *end = p + req->headers[i].value.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
                p++;
            if (p == end)
                break;
            if (*p == '*')
                return true;
            bool is_weak = false;
            if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
                is_weak = true;
                p += 2;
            }
            if (p == end || *p != '"')
                return false; /* malformed: nothing matches */
            const char *close = memchr(p + 1, '"', (size_t)(end - p - 1));
            if (close == NULL)
                return false;
            size_t len = (size_t)(close - p) + 1;
            if (v->etag != NULL && (weak || !is_weak) && len == v->etag_len &&
                memcmp(p, v->etag, len) == 0)
                return true;
            p = close + 1;
        }
    }
    return false;
}

/* Whether some field's name begins with "If-": most requests have none,
 * and one pass over the fields then spares the four searches below. */
static bool any_condition(const struct http_request *req)
{
    for (size_t i = 0; i < req->header_count; i++) {
        const struct http_str n = req->headers[i].name;
        if (n.len > 3 && (n.data[0] | 0x20) == 'i' && (n.data[1] | 0x20) == 'f' && n.data[2] == '-')
            return true;
    }
    return false;
}

unsigned static_cond_check(const struct http_request *req, const struct static_validators *v,
                           enum static_ims ims)
{
    if (!any_condition(req))
        return 0;
    bool present;
    int64_t date;
    header(req, "if-match", &present);
    if (present) {
        if (!etag_list_matches(req, "if-match", v, false))
            return 412;
    } else {
        struct http_str s = header(req, "if-unmodified-since", &present);
        if (present && static_date_parse(s, &date) && v->mtime > date)
            return 412;
    }
    bool safe =
        http_str_equal_nocase(req->method, "GET") || http_str_equal_nocase(req->method, "HEAD");
    header(req, "if-none-match", &present);
    if (present) {
        if (etag_list_matches(req, "if-none-match", v, true))
            return safe ? 304 : 412;
        return 0;
    }
    if (!safe || ims == STATIC_IMS_OFF)
        return 0;
    struct http_str s = header(req, "if-modified-since", &present);
    if (!present || !static_date_parse(s, &date))
        return 0;
    if (ims == STATIC_IMS_EXACT ? v->mtime == date : v->mtime <= date)
        return 304;
    return 0;
}

bool static_cond_if_range(const struct http_request *req, const struct static_validators *v)
{
    bool present;
    struct http_str s = header(req, "if-range", &present);
    if (!present)
        return true;
    if (s.len >= 1 && (s.data[0] == '"' || s.data[0] == 'W')) {
        /* A strong comparison: a weak tag never matches. */
        return v->etag != NULL && s.len == v->etag_len && memcmp(s.data, v->etag, s.len) == 0;
    }
    int64_t date;
    return static_date_parse(s, &date) && date == v->mtime;
}
