/*
 * h2_message.c: a request's or a response's header fields checked as
 * RFC 9113 8.1-8.3 and 8.5 ask (h2_message.h).  A field with a byte its kind may not
 * have makes the message malformed, regular fields too: libnghttp2 would
 * only drop those, but not without an invalid-header callback, which the
 * daemon does not set, so it resets their streams, and so does this.
 */
#include "proto/http2/h2_message.h"

#include <string.h>

/* The fields a request may have once, and what was seen. */
enum {
    SEEN_METHOD = 1 << 0,
    SEEN_SCHEME = 1 << 1,
    SEEN_PATH = 1 << 2,
    SEEN_AUTHORITY = 1 << 3,
    SEEN_HOST = 1 << 4,
    SEEN_REGULAR = 1 << 5, /* a regular field: no pseudo-header after it */
    SEEN_CONNECT = 1 << 6, /* :method CONNECT */
    SEEN_OPTIONS = 1 << 7, /* :method OPTIONS */
    SEEN_HTTP = 1 << 8,    /* :scheme http or https */
    SEEN_SLASH = 1 << 9,   /* :path starts with "/" */
    SEEN_STAR = 1 << 10,   /* :path is "*" */
    SEEN_STATUS = 1 << 11, /* a response's :status */
    SEEN_HEAD = 1 << 12,   /* a response to HEAD: no body */
};

/* The byte classes the checks below use, as integer constant expressions
 * of `c`, so that one table holds them all (CHARS[c], a bit per class):
 * a byte is classed by one load, not by a chain of comparisons. */
/* RFC 9110 5.6.2 tchar, lowercase letters only. */
#define NAME_CHAR(c)                                                                               \
    (((c) >= 'a' && (c) <= 'z') || ((c) >= '0' && (c) <= '9') || (c) == '!' ||                     \
     ((c) >= '#' && (c) <= '\'') || (c) == '*' || (c) == '+' || (c) == '-' || (c) == '.' ||        \
     (c) == '^' || (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~')
/* RFC 9110 5.5 field-vchar, SP and HTAB: no control byte, no DEL. */
#define VALUE_CHAR(c)  ((c) == '\t' || ((c) >= 0x20 && (c) != 0x7f))
#define METHOD_CHAR(c) (NAME_CHAR(c) || ((c) >= 'A' && (c) <= 'Z'))
/* RFC 3986 3.2: unreserved, sub-delims, ":", "@", "[", "]", "%". */
#define AUTHORITY_CHAR(c)                                                                          \
    (((c) >= 'a' && (c) <= 'z') || ((c) >= '@' && (c) <= '[') || ((c) >= '0' && (c) <= ';') ||     \
     ((c) >= '$' && (c) <= '.') || (c) == '!' || (c) == '=' || (c) == ']' || (c) == '_' ||         \
     (c) == '~')
#define PATH_CHAR(c) ((c) > 0x20 && (c) != 0x7f)

enum char_class {
    C_NAME = 1,
    C_VALUE = 2,
    C_METHOD = 4,
    C_AUTHORITY = 8,
    C_PATH = 16,
};

#define CLASS(c)                                                                                   \
    (uint8_t)((NAME_CHAR(c) ? C_NAME : 0) | (VALUE_CHAR(c) ? C_VALUE : 0) |                        \
              (METHOD_CHAR(c) ? C_METHOD : 0) | (AUTHORITY_CHAR(c) ? C_AUTHORITY : 0) |            \
              (PATH_CHAR(c) ? C_PATH : 0))
#define CLASS4(c)  CLASS(c), CLASS((c) + 1), CLASS((c) + 2), CLASS((c) + 3)
#define CLASS16(c) CLASS4(c), CLASS4((c) + 4), CLASS4((c) + 8), CLASS4((c) + 12)
#define CLASS64(c) CLASS16(c), CLASS16((c) + 16), CLASS16((c) + 32), CLASS16((c) + 48)
static const uint8_t chars[256] = {CLASS64(0), CLASS64(64), CLASS64(128), CLASS64(192)};

/* Whether every byte of p[0, n) is of class `cls`. */
static bool all(const uint8_t *p, size_t n, enum char_class cls)
{
    for (size_t i = 0; i < n; i++)
        if ((chars[p[i]] & cls) == 0)
            return false;
    return true;
}

/* The names these checks know, found once per field. */
enum token {
    T_OTHER,
    T_METHOD,
    T_SCHEME,
    T_PATH,
    T_AUTHORITY,
    T_HOST,
    T_CONTENT_LENGTH,
    T_TE,
    T_CONNECTION_SPECIFIC, /* 8.2.2 */
    T_STATUS,
    T_PSEUDO_OTHER, /* :protocol, any other */
};

static bool is(const struct hpack_field *f, const char *s, size_t n)
{
    return memcmp(f->name, s, n) == 0;
}

static enum token lookup(const struct hpack_field *f)
{
    if (f->name_len > 0 && f->name[0] == ':') {
        switch (f->name_len) {
        case 5: return is(f, ":path", 5) ? T_PATH : T_PSEUDO_OTHER;
        case 7:
            return is(f, ":method", 7)   ? T_METHOD
                   : is(f, ":scheme", 7) ? T_SCHEME
                   : is(f, ":status", 7) ? T_STATUS
                                         : T_PSEUDO_OTHER;
        case 10: return is(f, ":authority", 10) ? T_AUTHORITY : T_PSEUDO_OTHER;
        default: return T_PSEUDO_OTHER;
        }
    }
    switch (f->name_len) {
    case 2: return is(f, "te", 2) ? T_TE : T_OTHER;
    case 4: return is(f, "host", 4) ? T_HOST : T_OTHER;
    case 7: return is(f, "upgrade", 7) ? T_CONNECTION_SPECIFIC : T_OTHER;
    case 10:
        return is(f, "connection", 10) || is(f, "keep-alive", 10) ? T_CONNECTION_SPECIFIC : T_OTHER;
    case 14: return is(f, "content-length", 14) ? T_CONTENT_LENGTH : T_OTHER;
    case 16: return is(f, "proxy-connection", 16) ? T_CONNECTION_SPECIFIC : T_OTHER;
    case 17: return is(f, "transfer-encoding", 17) ? T_CONNECTION_SPECIFIC : T_OTHER;
    default: return T_OTHER;
    }
}

/* The value is the string literal `s` (its length known here, not
 * counted by strlen() for every request's :scheme), alike or in any
 * case. */
#define VALUE_IS(f, s)        value_is(f, s, sizeof(s) - 1)
#define VALUE_IS_NOCASE(f, s) value_is_nocase(f, s, sizeof(s) - 1)

static bool value_is(const struct hpack_field *f, const char *s, size_t n)
{
    return f->value_len == n && memcmp(f->value, s, n) == 0;
}

static bool value_is_nocase(const struct hpack_field *f, const char *s, size_t n)
{
    if (f->value_len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = f->value[i];
        if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != (uint8_t)s[i])
            return false;
    }
    return true;
}

/* A name RFC 9113 8.2.1 and 8.3 allow: tchars, lowercase, and one ":"
 * first for a pseudo-header. */
static bool name_valid(const struct hpack_field *f)
{
    size_t skip = f->name_len > 0 && f->name[0] == ':' ? 1 : 0;
    return f->name_len > skip && all(f->name + skip, f->name_len - skip, C_NAME);
}

/* RFC 9113 8.2.1: no leading or trailing whitespace, no CR, LF or NUL
 * (libnghttp2 refuses every control byte). */
static bool value_valid(const struct hpack_field *f)
{
    const uint8_t *v = f->value;
    size_t n = f->value_len;
    if (n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        return false;
    return all(v, n, C_VALUE);
}

static bool scheme_valid(const uint8_t *v, size_t n)
{
    /* RFC 3986 3.1. */
    if (n == 0 || !((v[0] | 0x20) >= 'a' && (v[0] | 0x20) <= 'z'))
        return false;
    for (size_t i = 1; i < n; i++) {
        uint8_t c = v[i];
        if (!(((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
              c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* A value's bytes as the field's kind asks. */
static bool field_value_valid(const struct hpack_field *f, enum token t)
{
    switch (t) {
    case T_METHOD: return f->value_len > 0 && all(f->value, f->value_len, C_METHOD);
    case T_PATH: return all(f->value, f->value_len, C_PATH);
    case T_AUTHORITY:
    case T_HOST: return all(f->value, f->value_len, C_AUTHORITY);
    case T_SCHEME: return scheme_valid(f->value, f->value_len);
    default: return value_valid(f);
    }
}

/* A decimal without sign or spaces that fits 63 bits, or -1. */
static int64_t parse_length(const uint8_t *p, size_t n)
{
    if (n == 0)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || v > (INT64_MAX - (p[i] - '0')) / 10)
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* A field a request may have once (8.3.1), not empty: false when seen. */
static bool once(struct h2_message *m, const struct hpack_field *f, uint16_t flag)
{
    if ((m->seen & flag) != 0 || f->value_len == 0)
        return false;
    m->seen |= flag;
    return true;
}

void h2_message_begin(struct h2_message *m)
{
    *m = (struct h2_message){.content_length = -1};
}

void h2_message_begin_response(struct h2_message *m, bool head)
{
    *m = (struct h2_message){.response = true, .content_length = -1};
    if (head)
        m->seen = SEEN_HEAD;
}

/* A response's :status (8.3.2): three digits, a code HTTP/2 can carry
 * (8.6: no 101), or 0. */
static unsigned parse_status(const struct hpack_field *f)
{
    if (f->value_len != 3)
        return 0;
    unsigned v = 0;
    for (size_t i = 0; i < 3; i++) {
        if (f->value[i] < '0' || f->value[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(f->value[i] - '0');
    }
    return v < 100 || v == 101 ? 0 : v;
}

/* One field of a response head or of its trailers, as libnghttp2 1.52's
 * client checks them (the bytes were checked already). */
static enum h2_message_verdict response_field(struct h2_message *m, const struct hpack_field *f,
                                              enum token t, bool trailers)
{
    switch (t) {
    case T_STATUS: {
        if ((m->seen & SEEN_STATUS) != 0)
            return H2_MESSAGE_MALFORMED;
        m->seen |= SEEN_STATUS;
        unsigned status = parse_status(f);
        if (status == 0)
            return H2_MESSAGE_MALFORMED;
        m->status = (uint16_t)status;
        break;
    }
    case T_CONTENT_LENGTH:
        /* Not in an interim head nor in trailers (RFC 9110 6.5.1); a
         * 204's only as "0" (RFC 9110 8.6), which servers send though
         * they should not. */
        if (trailers || m->content_length != -1 || (m->seen & SEEN_STATUS) == 0 || m->status < 200)
            return H2_MESSAGE_MALFORMED;
        m->content_length = parse_length(f->value, f->value_len);
        if (m->content_length == -1 || (m->status == 204 && m->content_length != 0))
            return H2_MESSAGE_MALFORMED;
        if (m->status == 204)
            return H2_MESSAGE_DROP; /* as libnghttp2 drops it */
        break;
    case T_TE:
        if (!VALUE_IS_NOCASE(f, "trailers"))
            return H2_MESSAGE_MALFORMED;
        break;
    case T_CONNECTION_SPECIFIC: return H2_MESSAGE_MALFORMED; /* 8.2.2 */
    case T_METHOD:
    case T_SCHEME:
    case T_PATH:
    case T_AUTHORITY:
    case T_PSEUDO_OTHER: return H2_MESSAGE_MALFORMED; /* 8.3.2: :status only */
    case T_HOST:
    case T_OTHER: break;
    }
    return H2_MESSAGE_PASS;
}

enum h2_message_verdict h2_message_field(struct h2_message *m, const struct hpack_field *f,
                                         bool trailers, bool *bytes_ok)
{
    enum token t = lookup(f);
    if (m->response && t == T_HOST)
        t = T_OTHER; /* a response's Host is a field as any other */
    if (!*bytes_ok)
        *bytes_ok = name_valid(f) && field_value_valid(f, t);
    if (!*bytes_ok)
        return H2_MESSAGE_MALFORMED;
    bool pseudo = f->name[0] == ':';
    /* 8.3: pseudo-headers come first, and never in trailers (8.1). */
    if (pseudo && (trailers || (m->seen & SEEN_REGULAR) != 0))
        return H2_MESSAGE_MALFORMED;
    if (!pseudo)
        m->seen |= SEEN_REGULAR;
    if (m->response)
        return response_field(m, f, t, trailers);
    switch (t) {
    case T_METHOD:
        if (!once(m, f, SEEN_METHOD))
            return H2_MESSAGE_MALFORMED;
        if (VALUE_IS(f, "CONNECT"))
            m->seen |= SEEN_CONNECT;
        else if (VALUE_IS(f, "OPTIONS"))
            m->seen |= SEEN_OPTIONS;
        break;
    case T_PATH:
        if (!once(m, f, SEEN_PATH))
            return H2_MESSAGE_MALFORMED;
        if (f->value[0] == '/')
            m->seen |= SEEN_SLASH;
        else if (f->value_len == 1 && f->value[0] == '*')
            m->seen |= SEEN_STAR;
        break;
    case T_SCHEME:
        if (!once(m, f, SEEN_SCHEME))
            return H2_MESSAGE_MALFORMED;
        if (VALUE_IS_NOCASE(f, "http") || VALUE_IS_NOCASE(f, "https"))
            m->seen |= SEEN_HTTP;
        break;
    case T_AUTHORITY:
        if (!once(m, f, SEEN_AUTHORITY))
            return H2_MESSAGE_MALFORMED;
        break;
    case T_HOST:
        if (!once(m, f, SEEN_HOST))
            return H2_MESSAGE_MALFORMED;
        break;
    case T_CONTENT_LENGTH:
        /* One, a number (8.1.1); trailers may not add one to a head
         * that has one. */
        if (m->content_length != -1)
            return H2_MESSAGE_MALFORMED;
        m->content_length = parse_length(f->value, f->value_len);
        if (m->content_length == -1)
            return H2_MESSAGE_MALFORMED;
        break;
    case T_TE:
        if (!VALUE_IS_NOCASE(f, "trailers"))
            return H2_MESSAGE_MALFORMED;
        break;
    case T_CONNECTION_SPECIFIC: return H2_MESSAGE_MALFORMED; /* 8.2.2 */
    case T_STATUS:
    case T_PSEUDO_OTHER:
        /* :protocol (not offered: no SETTINGS_ENABLE_CONNECT_PROTOCOL)
         * among them. */
        return H2_MESSAGE_MALFORMED;
    case T_OTHER: break;
    }
    return H2_MESSAGE_PASS;
}

/* A response's head ended (8.3.2, and RFC 9110 6.4.1 for the bodies
 * that have no bytes whatever content-length says). */
static bool response_head_end(struct h2_message *m)
{
    if ((m->seen & SEEN_STATUS) == 0)
        return false;
    if (m->status < 200) {
        /* Interim: the final head follows, checked afresh. */
        uint16_t status = m->status;
        h2_message_begin_response(m, (m->seen & SEEN_HEAD) != 0);
        m->status = status;
        return true;
    }
    if ((m->seen & SEEN_HEAD) != 0 || m->status == 204 || m->status == 304)
        m->content_length = 0;
    return true;
}

bool h2_message_head_end(struct h2_message *m)
{
    if (m->response)
        return response_head_end(m);
    const uint16_t required = SEEN_METHOD | SEEN_SCHEME | SEEN_PATH;
    if ((m->seen & SEEN_CONNECT) != 0) {
        /* 8.5: :authority alone, and the body has no length. */
        if ((m->seen & (SEEN_SCHEME | SEEN_PATH)) != 0 || (m->seen & SEEN_AUTHORITY) == 0)
            return false;
        m->content_length = -1;
        return true;
    }
    if ((m->seen & required) != required || (m->seen & (SEEN_AUTHORITY | SEEN_HOST)) == 0)
        return false;
    /* 8.3.1: an http or https :path is "/..." or, for OPTIONS, "*". */
    if ((m->seen & SEEN_HTTP) != 0 && (m->seen & SEEN_SLASH) == 0 &&
        !((m->seen & SEEN_OPTIONS) != 0 && (m->seen & SEEN_STAR) != 0))
        return false;
    return true;
}
