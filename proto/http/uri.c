/*
 * uri.c: building request targets (uri.h).
 */
#include "proto/http/uri.h"

#include <string.h>

void uri_add_bytes(struct vars_buf *b, const char *data, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c > 0x20 && c < 0x7f)
            continue;
        vars_buf_add(b, data + run, i - run);
        char hex[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
        vars_buf_add(b, hex, 3);
        run = i + 1;
    }
    vars_buf_add(b, data + run, len - run);
}

void uri_replace_prefix(const struct http_request *req, struct http_str strip, struct http_str uri,
                        struct vars_buf *out)
{
    if (uri.data != NULL && req->path.len >= strip.len &&
        memcmp(req->path.data, strip.data, strip.len) == 0) {
        vars_buf_add(out, uri.data, uri.len);
        vars_buf_add(out, req->target.data + strip.len, req->target.len - strip.len);
    } else {
        vars_buf_add(out, req->target.data, req->target.len);
    }
}
