/*
 * cache_policy.c: RFC 9111's storage and freshness rules for a shared
 * cache, read from a response head's lines (cache_policy.h).
 */
#include "proto/cache/cache_policy.h"

#include "proto/static/static_cond.h"

#include <string.h>
#include <strings.h>

#define SECONDS_MAX 2147483648u /* RFC 9111 1.2.2: 2^31 stands for more */

/* The next directive of a Cache-Control list from *p: its name and its
 * value (quotes removed), commas inside quotes kept.  False at the end. */
static bool next_directive(const char **p, const char *end, struct http_str *name,
                           struct http_str *value)
{
    while (*p < end && (**p == ',' || **p == ' ' || **p == '\t'))
        (*p)++;
    if (*p >= end)
        return false;
    const char *start = *p;
    while (*p < end && **p != ',' && **p != '=')
        (*p)++;
    *name = http_trim((struct http_str){start, (size_t)(*p - start)});
    *value = (struct http_str){*p, 0};
    if (*p < end && **p == '=') {
        (*p)++;
        if (*p < end && **p == '"') {
            const char *v = ++(*p);
            while (*p < end && **p != '"')
                (*p)++;
            *value = (struct http_str){v, (size_t)(*p - v)};
            if (*p < end)
                (*p)++;
            while (*p < end && **p != ',')
                (*p)++;
        } else {
            const char *v = *p;
            while (*p < end && **p != ',')
                (*p)++;
            *value = http_trim((struct http_str){v, (size_t)(*p - v)});
        }
    }
    return true;
}

static bool parse_seconds(struct http_str v, uint32_t *out)
{
    if (v.len == 0)
        return false;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9')
            return false;
        if (n < SECONDS_MAX)
            n = n * 10 + (uint64_t)(v.data[i] - '0');
    }
    *out = n < SECONDS_MAX ? (uint32_t)n : SECONDS_MAX;
    return true;
}

bool cache_policy_seconds(struct http_str value, const char *name, uint32_t *out)
{
    const char *p = value.data, *end = value.data + value.len;
    struct http_str n, v;
    while (next_directive(&p, end, &n, &v))
        if (http_str_equal_nocase(n, name))
            return parse_seconds(v, out);
    return false;
}

/* What Cache-Control says, over every field of it. */
struct cc {
    bool present, no_store, no_cache, private_, public_, must_revalidate;
    bool has_max_age, has_s_maxage;
    uint32_t max_age, s_maxage, swr, sie;
};

static void read_cache_control(struct http_str value, struct cc *cc)
{
    const char *p = value.data, *end = value.data + value.len;
    struct http_str n, v;
    cc->present = true;
    while (next_directive(&p, end, &n, &v)) {
        if (http_str_equal_nocase(n, "no-store"))
            cc->no_store = true;
        else if (http_str_equal_nocase(n, "no-cache"))
            cc->no_cache = true;
        else if (http_str_equal_nocase(n, "private"))
            cc->private_ = true;
        else if (http_str_equal_nocase(n, "public"))
            cc->public_ = true;
        else if (http_str_equal_nocase(n, "must-revalidate") ||
                 http_str_equal_nocase(n, "proxy-revalidate"))
            cc->must_revalidate = true;
        else if (http_str_equal_nocase(n, "max-age")) {
            /* RFC 9111 4.2.1: an invalid max-age makes the response stale. */
            if (!parse_seconds(v, &cc->max_age))
                cc->max_age = 0;
            cc->has_max_age = true;
        } else if (http_str_equal_nocase(n, "s-maxage")) {
            if (!parse_seconds(v, &cc->s_maxage))
                cc->s_maxage = 0;
            cc->has_s_maxage = true;
        } else if (http_str_equal_nocase(n, "stale-while-revalidate"))
            (void)parse_seconds(v, &cc->swr);
        else if (http_str_equal_nocase(n, "stale-if-error"))
            (void)parse_seconds(v, &cc->sie);
    }
}

/* Statuses a shared cache stores: those RFC 9110 15.1 calls heuristically
 * cacheable, and the redirects, with explicit freshness.  Never a 206
 * (corral stores whole objects) nor a 304. */
static bool status_storable(unsigned status)
{
    switch (status) {
    case 200:
    case 203:
    case 204:
    case 300:
    case 301:
    case 302:
    case 307:
    case 308:
    case 404:
    case 405:
    case 410:
    case 414:
    case 501: return true;
    default: return false;
    }
}

void cache_policy_decide(const struct cache_policy_in *in, struct cache_policy *out)
{
    memset(out, 0, sizeof(*out));
    struct cc cc = {0};
    bool has_date = false, has_expires = false, expires_valid = false, set_cookie = false;
    int64_t date = 0, expires = 0;
    uint32_t age = 0;
    const char *p = in->lines, *end = in->lines + in->len;
    while (p < end) {
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (http_str_equal_nocase(name, "cache-control")) {
            if (!(in->ignore & CACHE_IGNORE_CACHE_CONTROL))
                read_cache_control(value, &cc);
        } else if (http_str_equal_nocase(name, "expires")) {
            if (!(in->ignore & CACHE_IGNORE_EXPIRES)) {
                has_expires = true;
                expires_valid = static_date_parse(value, &expires);
            }
        } else if (http_str_equal_nocase(name, "date")) {
            has_date = static_date_parse(value, &date);
        } else if (http_str_equal_nocase(name, "age")) {
            (void)parse_seconds(value, &age);
        } else if (http_str_equal_nocase(name, "set-cookie")) {
            set_cookie = !(in->ignore & CACHE_IGNORE_SET_COOKIE);
        } else if (http_str_equal_nocase(name, "vary")) {
            if (!(in->ignore & CACHE_IGNORE_VARY))
                out->vary = value;
        }
    }
    out->swr = cc.swr;
    out->sie = cc.sie;
    out->must_revalidate = cc.must_revalidate || cc.has_s_maxage;
    if (cc.no_store) {
        out->refusal = CACHE_NO_STORE;
        return;
    }
    if (cc.private_) {
        out->refusal = CACHE_PRIVATE;
        return;
    }
    if (cc.no_cache) {
        out->refusal = CACHE_NO_CACHE;
        return;
    }
    if (set_cookie) {
        out->refusal = CACHE_SET_COOKIE;
        return;
    }
    /* RFC 9111 3.5: an authenticated request's response only when it
     * says a shared cache may keep it. */
    if (in->authorization && !cc.public_ && !cc.has_s_maxage && !cc.must_revalidate) {
        out->refusal = CACHE_AUTHORIZATION;
        return;
    }
    /* An empty Vary may have no data at all: neither NULL + 0 nor
     * memchr(NULL, ...) is defined. */
    if (out->vary.len > 0 && memchr(out->vary.data, '*', out->vary.len) != NULL) {
        out->refusal = CACHE_VARY_ANY;
        return;
    }
    /* RFC 9111 4.2.1: s-maxage, then max-age, then Expires - Date; then
     * the location's proxy_cache_valid, as nginx ranks them. */
    int64_t lifetime;
    bool explicit_ = true;
    if (cc.has_s_maxage)
        lifetime = cc.s_maxage;
    else if (cc.has_max_age)
        lifetime = cc.max_age;
    else if (has_expires)
        lifetime = expires_valid ? expires - (has_date ? date : in->now) : 0;
    else if (in->valid >= 0) {
        lifetime = in->valid;
        explicit_ = false;
    } else {
        out->refusal = CACHE_NO_LIFETIME;
        return;
    }
    if (explicit_ ? !status_storable(in->status) : in->status == 206 || in->status == 304) {
        out->refusal = CACHE_STATUS;
        return;
    }
    /* RFC 9111 4.2.3: the age it had when it came. */
    int64_t apparent = has_date && in->now > date ? in->now - date : 0;
    out->initial_age = apparent > (int64_t)age ? apparent : (int64_t)age;
    if (lifetime <= out->initial_age) {
        out->refusal = CACHE_EXPIRED;
        return;
    }
    out->expires = in->now + lifetime - out->initial_age;
    out->refusal = CACHE_STORE;
}
