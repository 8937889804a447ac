/*
 * trace_context.c: the traceparent and tracestate headers of W3C Trace
 * Context, parsed strictly and without allocating (trace_context.h).
 */
#include "proto/policy/trace_context.h"

#include <string.h>

/* A lowercase hex digit's value, or -1: the specification allows no
 * uppercase (section 3.2.2). */
static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Reads 2n hex digits into `n` bytes; false on any other character. */
static bool hex_bytes(const char *text, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool all_zero(const uint8_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bytes[i] != 0)
            return false;
    return true;
}

bool traceparent_parse(const char *text, size_t len, struct trace_context *out)
{
    /* Version 00 has exactly this length; a later version may be longer,
     * but corral speaks 00 only and refuses what it cannot check. */
    if (len != TRACEPARENT_LEN || text[0] != '0' || text[1] != '0' || text[2] != '-' ||
        text[35] != '-' || text[52] != '-')
        return false;
    uint8_t flags;
    if (!hex_bytes(text + 3, out->trace_id, 16) || !hex_bytes(text + 36, out->span_id, 8) ||
        !hex_bytes(text + 53, &flags, 1))
        return false;
    if (all_zero(out->trace_id, 16) || all_zero(out->span_id, 8))
        return false;
    out->flags = flags;
    return true;
}

void trace_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

void traceparent_format(const struct trace_context *ctx, char out[TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    trace_hex(ctx->trace_id, 16, out + 3);
    out[35] = '-';
    trace_hex(ctx->span_id, 8, out + 36);
    out[52] = '-';
    trace_hex(&ctx->flags, 1, out + 53);
}

/* ------------------------------------------------------------ tracestate */

static bool lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A key character after the first: lcalpha / DIGIT / "_" / "-" / "*" / "/". */
static bool key_char(char c)
{
    return lcalpha(c) || digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

/* simple-key = lcalpha 0*255(key_char); multi-tenant-key = tenant-id "@"
 * system-id, tenant-id = (lcalpha / DIGIT) 0*240(key_char), system-id =
 * lcalpha 0*13(key_char). */
static bool key_valid(const char *key, size_t len)
{
    const char *at = memchr(key, '@', len);
    if (at == NULL) {
        if (len < 1 || len > 256 || !lcalpha(key[0]))
            return false;
        for (size_t i = 1; i < len; i++)
            if (!key_char(key[i]))
                return false;
        return true;
    }
    size_t tenant = (size_t)(at - key), system = len - tenant - 1;
    if (tenant < 1 || tenant > 241 || system < 1 || system > 14)
        return false;
    if (!lcalpha(key[0]) && !digit(key[0]))
        return false;
    for (size_t i = 1; i < tenant; i++)
        if (!key_char(key[i]))
            return false;
    if (!lcalpha(at[1]))
        return false;
    for (size_t i = 2; i <= system; i++)
        if (!key_char(at[i]))
            return false;
    return true;
}

/* value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr =
 * %x21-2B / %x2D-3C / %x3E-7E (no comma, no "="). */
static bool value_valid(const char *value, size_t len)
{
    if (len < 1 || len > 256 || value[len - 1] == ' ')
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
            return false;
    }
    return true;
}

bool tracestate_valid(const char *text, size_t len)
{
    if (len > TRACESTATE_MAX)
        return false;
    struct {
        const char *key;
        size_t len;
    } keys[TRACESTATE_MEMBERS_MAX];
    size_t members = 0;
    const char *p = text, *end = text + len;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        /* Optional spaces and tabs around a member (OWS). */
        const char *a = p;
        size_t n = (size_t)(stop - p); /* by length, which the analyzer follows */
        while (n > 0 && (*a == ' ' || *a == '\t')) {
            a++;
            n--;
        }
        while (n > 0 && (a[n - 1] == ' ' || a[n - 1] == '\t'))
            n--;
        const char *b = a + n;
        if (a < b) {
            const char *eq = memchr(a, '=', (size_t)(b - a));
            if (eq == NULL || !key_valid(a, (size_t)(eq - a)) ||
                !value_valid(eq + 1, (size_t)(b - eq - 1)))
                return false;
            if (members == TRACESTATE_MEMBERS_MAX)
                return false;
            size_t key_len = (size_t)(eq - a);
            for (size_t i = 0; i < members; i++)
                if (keys[i].len == key_len && memcmp(keys[i].key, a, key_len) == 0)
                    return false;
            keys[members].key = a;
            keys[members].len = key_len;
            members++;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return true;
}
