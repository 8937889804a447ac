/*
 * compress_head.c: a response head's lines, read one at a time within
 * their length, for the few fields compression decides by, and written
 * again as a compressed response's.
 */
#include "proto/compress/compress_head.h"

#include "proto/http/vars.h"

#include <string.h>
#include <strings.h>

/* Whether the comma-separated `list` has `token`, ignoring parameters
 * ("max-age=0", "private=\"x\""). */
static bool lists(struct http_str list, const char *token)
{
    size_t tlen = strlen(token);
    const char *p = list.data, *end = list.data + list.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        struct http_str item = http_trim((struct http_str){p, (size_t)(stop - p)});
        const char *eq = memchr(item.data, '=', item.len);
        if (eq != NULL)
            item = http_trim((struct http_str){item.data, (size_t)(eq - item.data)});
        if (item.len == tlen && strncasecmp(item.data, token, tlen) == 0)
            return true;
        p = stop + 1;
    }
    return false;
}

/* An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110 5.6.7), the
 * form senders must use; the obsolete forms do not parse. */
static bool parse_date(struct http_str v, time_t *out)
{
    char text[40];
    if (v.len != 29)
        return false;
    memcpy(text, v.data, v.len);
    text[v.len] = '\0';
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == NULL || *end != '\0')
        return false;
    *out = timegm(&tm);
    return true;
}

void compress_head_read(const char *lines, size_t len, struct compress_head *out)
{
    memset(out, 0, sizeof(*out));
    const char *p = lines, *end = lines + len;
    while (p < end) {
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (http_str_equal_nocase(name, "content-type")) {
            const char *semi = memchr(value.data, ';', value.len);
            out->content_type = http_trim((struct http_str){
                value.data, semi != NULL ? (size_t)(semi - value.data) : value.len});
        } else if (http_str_equal_nocase(name, "content-encoding")) {
            /* gunzip's test, nginx's: the one coding gzip, nothing else
             * (a second line codes it again) */
            out->gzip = !out->encoded && value.len == 4 && strncasecmp(value.data, "gzip", 4) == 0;
            out->encoded |= value.len > 0; /* even "identity", as nginx */
        } else if (http_str_equal_nocase(name, "cache-control")) {
            out->cache_control = true;
            out->no_transform |= lists(value, "no-transform");
            out->no_cache |= lists(value, "no-cache");
            out->no_store |= lists(value, "no-store");
            out->private_cache |= lists(value, "private");
        } else if (http_str_equal_nocase(name, "vary")) {
            out->vary_listed |= lists(value, "accept-encoding") || lists(value, "*");
        } else if (http_str_equal_nocase(name, "expires")) {
            out->expires = true;
            out->expires_valid = parse_date(value, &out->expires_at);
        } else if (http_str_equal_nocase(name, "last-modified")) {
            out->last_modified = true;
        } else if (http_str_equal_nocase(name, "etag")) {
            out->etag = true;
        }
    }
}

void compress_head_write(const char *lines, size_t len, enum compress_head_change change,
                         const char *coding, bool vary, struct vars_buf *out)
{
    bool changed = change != COMPRESS_HEAD_SAME;
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *start = p;
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (changed && http_str_equal_nocase(name, "accept-ranges"))
            continue; /* ranges of the coded body are not those of the original */
        if (change == COMPRESS_HEAD_DECODED && http_str_equal_nocase(name, "content-encoding"))
            continue;
        if (changed && http_str_equal_nocase(name, "etag") &&
            !(value.len >= 2 && value.data[0] == 'W' && value.data[1] == '/')) {
            /* The coded body is not the same bytes: a weak validator; one
             * that is not an entity-tag goes, as nginx drops it. */
            if (value.len == 0 || value.data[0] != '"')
                continue;
            vars_buf_add(out, name.data, name.len);
            vars_buf_add(out, ": W/", 4);
            vars_buf_add(out, value.data, value.len);
            vars_buf_add(out, "\r\n", 2);
            continue;
        }
        vars_buf_add(out, start, (size_t)(p - start));
    }
    if (change == COMPRESS_HEAD_CODED) {
        vars_buf_add(out, "Content-Encoding: ", 18);
        vars_buf_add(out, coding, strlen(coding));
        vars_buf_add(out, "\r\n", 2);
    }
    if (vary)
        vars_buf_add(out, "Vary: Accept-Encoding\r\n", 23);
}
