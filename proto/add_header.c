/*
 * add_header.c: applies a location's add_header rules when its response
 * begins: each value is evaluated (it may read $status, $upstream_* and
 * the exchange's other variables) and appended to the handler's header
 * lines.
 */
#include "proto/add_header.h"

#include <string.h>

/* nginx adds headers without `always` to these only. */
static bool status_takes_headers(unsigned status)
{
    switch (status) {
    case 200:
    case 201:
    case 204:
    case 206:
    case 301:
    case 302:
    case 303:
    case 304:
    case 307:
    case 308: return true;
    default: return false;
    }
}

void exchange__begin_adding(struct exchange *ex, unsigned status, const char *headers,
                            size_t headers_len, int64_t content_length, struct http_str codings)
{
    const struct http_add_headers *rules = ex->add_headers;
    char small[1024];
    struct vars_buf lines;
    vars_buf_init(&lines, small, sizeof(small));
    vars_buf_add(&lines, headers, headers_len);
    struct vars_ctx ctx = {.ex = ex, .status = status, .escape = VARS_HEADER};
    bool takes = status_takes_headers(status);
    for (size_t i = 0; i < rules->count; i++) {
        const struct http_add_header *h = &rules->items[i];
        if (!takes && !h->always)
            continue;
        size_t start = lines.len;
        vars_buf_add(&lines, h->name.data, h->name.len);
        vars_buf_add(&lines, ": ", 2);
        size_t value_start = lines.len;
        vars_eval(h->value, &ctx, &lines);
        if (lines.len == value_start) { /* empty: no line, as in nginx */
            lines.len = start;
            continue;
        }
        vars_buf_add(&lines, "\r\n", 2);
    }
    if (lines.failed) /* out of memory: the handler's own lines only */
        ex->_ops->begin(ex, status, headers, headers_len, content_length, codings);
    else
        ex->_ops->begin(ex, status, lines.data, lines.len, content_length, codings);
    vars_buf_free(&lines);
}
