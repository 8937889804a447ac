/*
 * vars_escape.c: how a variable's value is written where it goes: as it
 * is, fit for a header line, for an access log line (\xHH escapes), or
 * inside a JSON string (log_format escape=json).
 */
#include "proto/http/vars_internal.h"

#include <stdint.h>
#include <stdio.h>

/* The length of the UTF-8 sequence `s` starts with (`len` bytes left), or
 * 0 when it is not a valid one: overlong forms, surrogates and code points
 * above U+10FFFF are not (RFC 3629). */
static size_t utf8_sequence(const unsigned char *s, size_t len)
{
    size_t n;
    uint32_t cp, min;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2, cp = s[0] & 0x1fu, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3, cp = s[0] & 0x0fu, min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4, cp = s[0] & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[k] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void vars_escape_json(struct vars_buf *out, const char *data, size_t len)
{
    size_t run = 0; /* bytes that need nothing, added at once */
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)data[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x7f) {
            i++;
            continue;
        }
        size_t n = c >= 0x80 ? utf8_sequence((const unsigned char *)data + i, len - i) : 0;
        if (n > 0) {
            i += n;
            continue;
        }
        vars_buf_add(out, data + run, i - run);
        char esc[7]; /* "\\u00HH" and the NUL snprintf adds */
        const char *text = esc;
        size_t text_len = 2;
        switch (c) {
        case '"': text = "\\\""; break;
        case '\\': text = "\\\\"; break;
        case '\n': text = "\\n"; break;
        case '\r': text = "\\r"; break;
        case '\t': text = "\\t"; break;
        case '\b': text = "\\b"; break;
        case '\f': text = "\\f"; break;
        default:
            if (c >= 0x80) { /* a byte of no valid sequence */
                text = "\\ufffd";
                text_len = 6;
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                text_len = 6;
            }
        }
        vars_buf_add(out, text, text_len);
        run = ++i;
    }
    vars_buf_add(out, data + run, len - run);
}

void vars_escape_put_value(struct vars_ctx *ctx, struct vars_buf *out, const char *data, size_t len)
{
    if (ctx->escape == VARS_RAW) {
        vars_buf_add(out, data, len);
        return;
    }
    if (ctx->escape == VARS_JSON) {
        vars_escape_json(out, data, len);
        return;
    }
    if (ctx->escape == VARS_LOG && len == 0) {
        vars_buf_add(out, "-", 1);
        return;
    }
    size_t run = 0; /* bytes that need nothing, added at once */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        bool plain = ctx->escape == VARS_HEADER ? (c >= 0x20 && c != 0x7f) || c == '\t'
                                                : c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        if (plain)
            continue;
        vars_buf_add(out, data + run, i - run);
        run = i + 1;
        if (ctx->escape == VARS_LOG) {
            char hex[5]; /* "\\xHH" and the NUL snprintf adds */
            snprintf(hex, sizeof(hex), "\\x%02X", c);
            vars_buf_add(out, hex, 4);
        }
    }
    vars_buf_add(out, data + run, len - run);
}
