/*
 * fields.c: requests from HTTP/2's and HTTP/3's decoded fields, and
 * response heads back into fields, shared by both framers.
 */
#include "proto/http/fields.h"

#include <stdlib.h>
#include <string.h>

uint64_t http_fields_length(struct http_str value)
{
    uint64_t n = 0;
    for (size_t i = 0; i < value.len && n <= UINT64_MAX / 10 - 10; i++)
        n = n * 10 + (uint64_t)(value.data[i] - '0');
    return n;
}

/* The cookie fields joined into one value in a single allocation. */
static char *join_cookies(const char *base, const struct http_field_ref *fields, size_t count,
                          size_t total, size_t *len)
{
    char *joined = malloc(total), *p = joined;
    if (joined == NULL)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        const struct http_field_ref *f = &fields[i];
        if (!http_str_equal_nocase((struct http_str){base + f->name, f->name_len}, "cookie"))
            continue;
        if (p != joined) {
            memcpy(p, "; ", 2);
            p += 2;
        }
        memcpy(p, base + f->value, f->value_len);
        p += f->value_len;
    }
    *len = (size_t)(p - joined);
    return joined;
}

unsigned http_fields_request(const char *base, const struct http_field_ref *fields, size_t count,
                             bool end_stream, struct http_request *req,
                             struct http_header **headers, char **cookie)
{
    size_t cookie_len = 0, cookies = 0;
    struct http_str authority = {NULL, 0}, host_field = {NULL, 0};
    *req = (struct http_request){.method = {NULL, 0}};
    *cookie = NULL;
    *headers = calloc(count + 2, sizeof(**headers));
    if (*headers == NULL)
        return 500;
    size_t n = 1; /* [0] is Host */
    for (size_t i = 0; i < count; i++) {
        const struct http_field_ref *f = &fields[i];
        struct http_str name = {base + f->name, f->name_len};
        struct http_str value = {base + f->value, f->value_len};
        if (name.len > 0 && name.data[0] == ':') {
            if (http_str_equal_nocase(name, ":method"))
                req->method = value;
            else if (http_str_equal_nocase(name, ":path"))
                req->target = value;
            else if (http_str_equal_nocase(name, ":authority"))
                authority = value;
            continue; /* :scheme: the connection says it */
        }
        if (http_str_equal_nocase(name, "cookie")) {
            cookie_len += value.len + 2;
            cookies++;
            continue;
        }
        if (http_str_equal_nocase(name, "host")) {
            host_field = value; /* one Host goes first, from :authority if any */
            continue;
        }
        if (http_str_equal_nocase(name, "content-length")) {
            req->has_content_length = true;
            req->content_length = http_fields_length(value);
        }
        (*headers)[n++] = (struct http_header){name, value};
    }
    if (cookies > 0) {
        size_t len = 0;
        *cookie = join_cookies(base, fields, count, cookie_len, &len);
        if (*cookie == NULL)
            return 500;
        (*headers)[n++] = (struct http_header){{"cookie", 6}, {*cookie, len}};
    }
    if (req->method.len == 0 || req->target.len == 0)
        return 501; /* CONNECT: no tunnels over HTTP/2 or HTTP/3 here */
    /* :authority stands for Host (RFC 9113 8.3.1, RFC 9114 4.3.1); a Host
     * field is the fallback, and is dropped in favour of :authority. */
    if (authority.len == 0)
        authority = host_field;
    size_t first = authority.len > 0 ? 0 : 1;
    (*headers)[0] = (struct http_header){{"host", 4}, authority};
    if (authority.len > 0 && !http_authority_valid(authority, &req->host))
        return HTTP_FIELDS_MALFORMED;
    bool asterisk = req->target.len == 1 && req->target.data[0] == '*';
    if (req->target.data[0] != '/' && !(asterisk && http_str_equal_nocase(req->method, "OPTIONS")))
        return HTTP_FIELDS_MALFORMED;
    req->headers = *headers + first;
    req->header_count = n - first;
    req->path = req->target;
    const char *query = memchr(req->target.data, '?', req->target.len);
    if (query != NULL)
        req->path.len = (size_t)(query - req->target.data);
    req->head = http_str_equal_nocase(req->method, "HEAD");
    req->has_body = !end_stream && (!req->has_content_length || req->content_length > 0);
    return 0;
}

bool http_fields_connection_specific(struct http_str name)
{
    static const struct http_str names[] = {
        HTTP_STR_LIT("connection"), HTTP_STR_LIT("keep-alive"), HTTP_STR_LIT("proxy-connection"),
        HTTP_STR_LIT("transfer-encoding"), HTTP_STR_LIT("upgrade")};
    return http_str_in_nocase(name, names, sizeof(names) / sizeof(names[0]));
}

size_t http_fields_count_lines(const char *lines, size_t len)
{
    size_t n = 1;
    for (const char *p = lines; (p = memchr(p, '\n', len - (size_t)(p - lines))) != NULL; p++)
        n++;
    return n;
}

bool http_fields_next_line(const char *lines, size_t len, size_t *pos, struct http_str *name,
                           struct http_str *value)
{
    while (*pos < len) {
        size_t start = *pos;
        const char *eol = memchr(lines + start, '\n', len - start);
        size_t line_end = eol != NULL ? (size_t)(eol - lines) : len;
        *pos = eol != NULL ? line_end + 1 : len;
        struct http_str line = {lines + start, line_end - start};
        if (line.len > 0 && line.data[line.len - 1] == '\r')
            line.len--;
        const char *colon = memchr(line.data, ':', line.len);
        if (colon == NULL || colon == line.data)
            continue;
        *name = (struct http_str){line.data, (size_t)(colon - line.data)};
        if (http_fields_connection_specific(*name))
            continue;
        *value = http_trim((struct http_str){colon + 1, line.len - name->len - 1});
        return true;
    }
    return false;
}

void http_fields_head(struct http_fields_head *out, unsigned status, int64_t content_length,
                      struct http_str codings)
{
    bool informational = status < 200;
    status %= 1000;
    out->status[0] = (char)('0' + status / 100);
    out->status[1] = (char)('0' + status / 10 % 10);
    out->status[2] = (char)('0' + status % 10);
    out->field[0] = (struct http_header){{":status", 7}, {out->status, 3}};
    out->field[1] = (struct http_header){{"server", 6}, {"corral", 6}};
    out->field[2] = (struct http_header){{"date", 4}, {http_date(), HTTP_DATE_LEN}};
    out->count = 3;
    if (content_length >= 0 && codings.len == 0 && !informational && status != 204 &&
        status != 304) {
        size_t len =
            (size_t)(http_append_uint(out->length, (uint64_t)content_length) - out->length);
        out->field[out->count++] = (struct http_header){{"content-length", 14}, {out->length, len}};
    }
}
