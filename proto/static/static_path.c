/*
 * static_path.c: request paths to file paths (static_path.h).  The router
 * searches locations with the path as the client sent it; what opens a
 * file is decoded and normalised here, so that no spelling of ".." or of
 * a separator reaches the filesystem.
 */
#include "proto/static/static_path.h"

#include <errno.h>
#include <string.h>

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Ends the segment out[seg..*o): drops it when "." or empty, applies
 * "..", else keeps it; then, if `slash`, a '/' follows. */
static int end_segment(char *out, size_t *o, size_t seg, bool slash, size_t cap)
{
    size_t n = *o - seg;
    if (n == 1 && out[seg] == '.') {
        *o = seg;
    } else if (n == 2 && out[seg] == '.' && out[seg + 1] == '.') {
        if (seg <= 1)
            return -EINVAL;    /* above the root */
        size_t prev = seg - 1; /* the '/' before this segment */
        while (prev > 0 && out[prev - 1] != '/')
            prev--;
        *o = prev;
    } else if (n > 0 && slash) {
        if (*o + 1 >= cap)
            return -ENAMETOOLONG;
        out[(*o)++] = '/';
    }
    return 0;
}

int static_path_normalise(const char *path, size_t len, char *out, size_t cap, size_t *out_len)
{
    if (len == 0 || path[0] != '/')
        return -EINVAL;
    if (cap < 2)
        return -ENAMETOOLONG;
    size_t o = 0, seg = 1;
    out[o++] = '/';
    for (size_t i = 1; i < len; i++) {
        char c = path[i];
        if (c == '/') {
            int err = end_segment(out, &o, seg, true, cap);
            if (err != 0)
                return err;
            seg = o;
            continue;
        }
        if (c == '%') {
            int hi = i + 2 < len ? hex_value(path[i + 1]) : -1;
            int lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
            if (lo < 0)
                return -EINVAL;
            c = (char)(hi << 4 | lo);
            i += 2;
            if (c == '/')
                return -EINVAL; /* an escaped separator names no segment */
        }
        if (c == '\0' || c == '\\')
            return -EINVAL;
        if (o + 1 >= cap)
            return -ENAMETOOLONG;
        out[o++] = c;
    }
    int err = end_segment(out, &o, seg, false, cap);
    if (err != 0)
        return err;
    out[o] = '\0';
    *out_len = o;
    return 0;
}

bool static_path_has_dot_segment(const char *path)
{
    /* From dot to dot, not from slash to slash: a path has fewer dots
     * than segments, and only a segment that begins with one counts. */
    for (const char *p = path; (p = strchr(p, '.')) != NULL; p++) {
        if (p != path && p[-1] != '/')
            continue;
        size_t n = p[1] == '.' ? 2 : 1;
        if (p[n] == '/' || p[n] == '\0')
            return true;
    }
    return false;
}

int static_path_join(const char *base, size_t base_len, const char *rest, size_t rest_len,
                     char *out, size_t cap)
{
    if (base_len + rest_len + 1 > cap)
        return -ENAMETOOLONG;
    memcpy(out, base, base_len);
    memcpy(out + base_len, rest, rest_len);
    out[base_len + rest_len] = '\0';
    return static_path_has_dot_segment(out) ? -EINVAL : 0;
}
