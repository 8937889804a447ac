/*
 * static_range.c: the Range header against a file's size (static_range.h):
 * a parser of the byte-ranges form that allocates nothing, with the
 * ranges it keeps bounded, clamped, sorted and merged.
 */
#include "proto/static/static_range.h"

#include <stdbool.h>
#include <strings.h>

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Reads decimal digits at *p (before `end`) into *out; false when there
 * are none or the number passes UINT64_MAX. */
static bool read_number(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t n = 0;
    if (s == end || *s < '0' || *s > '9')
        return false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - d) / 10)
            return false;
        n = n * 10 + d;
    }
    *p = s;
    *out = n;
    return true;
}

/* Insertion sort by `first`, then one pass that merges what overlaps or
 * touches: at most STATIC_RANGES_MAX entries. */
static size_t coalesce(struct static_range *r, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct static_range key = r[i];
        size_t j = i;
        for (; j > 0 && r[j - 1].first > key.first; j--)
            r[j] = r[j - 1];
        r[j] = key;
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && r[i].first <= r[out - 1].last + 1) {
            if (r[i].last > r[out - 1].last)
                r[out - 1].last = r[i].last;
        } else {
            r[out++] = r[i];
        }
    }
    return out;
}

enum static_range_result static_range_parse(struct http_str value, uint64_t size,
                                            struct static_range *out, size_t *count)
{
    *count = 0;
    const char *p = value.data, *end = value.data + value.len;
    /* Another unit, or "bytes=" and nothing: not a byte range (nginx). */
    if (value.len < 7 || strncasecmp(p, "bytes=", 6) != 0)
        return STATIC_RANGE_IGNORE;
    p += 6;
    /* From here a value that does not parse is answered 416, as nginx
     * does, rather than sending the whole file to a client that asked for
     * a part. */
    size_t n = 0, specs = 0;
    for (;;) {
        while (p < end && is_ows(*p))
            p++;
        if (p < end && *p == ',') { /* an empty element (RFC 9110 5.6.1.2) */
            p++;
            continue;
        }
        if (p == end)
            break;
        if (++specs > STATIC_RANGES_MAX)
            return STATIC_RANGE_IGNORE;
        uint64_t first, last;
        bool satisfiable;
        if (*p == '-') {
            p++;
            uint64_t suffix;
            if (!read_number(&p, end, &suffix))
                return STATIC_RANGE_UNSATISFIABLE;
            satisfiable = suffix > 0 && size > 0;
            first = suffix >= size ? 0 : size - suffix;
            last = size > 0 ? size - 1 : 0;
        } else {
            if (!read_number(&p, end, &first))
                return STATIC_RANGE_UNSATISFIABLE;
            while (p < end && is_ows(*p))
                p++;
            if (p == end || *p != '-')
                return STATIC_RANGE_UNSATISFIABLE;
            p++;
            while (p < end && is_ows(*p))
                p++;
            last = UINT64_MAX;
            if (p < end && *p >= '0' && *p <= '9' && !read_number(&p, end, &last))
                return STATIC_RANGE_UNSATISFIABLE;
            /* "5-1" is well formed and selects nothing (nginx skips it). */
            satisfiable = first < size && first <= last;
            if (last >= size)
                last = size > 0 ? size - 1 : 0;
        }
        while (p < end && is_ows(*p))
            p++;
        if (p < end && *p != ',')
            return STATIC_RANGE_UNSATISFIABLE;
        if (satisfiable)
            out[n++] = (struct static_range){first, last};
    }
    if (specs == 0)
        return STATIC_RANGE_UNSATISFIABLE;
    /* An empty file has no range to give: the whole (empty) file. */
    if (size == 0)
        return STATIC_RANGE_IGNORE;
    if (n == 0)
        return STATIC_RANGE_UNSATISFIABLE;
    *count = coalesce(out, n);
    return STATIC_RANGE_OK;
}
