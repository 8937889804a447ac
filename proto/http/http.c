/*
 * headers.c: HTTP header fields and heads, for whichever side parses them:
 * collecting llhttp's header spans, value helpers, the field checks llhttp
 * leaves to its caller, head framing checks, reason phrases, and the Date
 * value every response carries.
 */
#include "proto/http/http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <time.h>

char *http_append_uint(char *p, uint64_t value)
{
    char digits[HTTP_UINT64_DIGITS]; /* UINT64_MAX has 20 */
    size_t n = 0;
    do
        digits[n++] = (char)('0' + value % 10);
    while ((value /= 10) > 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

const char *http_date(void)
{
    /* An origin server with a clock sends Date (RFC 9110 6.6.1). */
    static _Thread_local char text[HTTP_DATE_LEN + 1];
    static _Thread_local time_t formatted_at = -1;
    time_t now = time(NULL);
    if (now != formatted_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        size_t n = strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        assert(n == HTTP_DATE_LEN); /* fixed-width fields; a year past 9999 would not fit */
        (void)n;
        formatted_at = now;
    }
    return text;
}

const char *http_reason(unsigned status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

void http_str_extend(struct http_str *str, const char *at, size_t len)
{
    if (str->data == NULL)
        str->data = at;
    str->len = (size_t)(at + len - str->data);
}

void http_headers_reset(struct http_header_list *list)
{
    list->count = 0;
    list->in_value = false;
}

bool http_headers_add_name(struct http_header_list *list, const char *at, size_t len, size_t limit)
{
    if (list->in_value || list->count == 0) {
        if (list->count == list->cap || list->count == limit)
            return false;
        list->headers[list->count++] = (struct http_header){{NULL, 0}, {NULL, 0}};
        list->in_value = false;
    }
    http_str_extend(&list->headers[list->count - 1].name, at, len);
    return true;
}

void http_headers_add_value(struct http_header_list *list, const char *at, size_t len)
{
    list->in_value = true;
    http_str_extend(&list->headers[list->count - 1].value, at, len);
}

bool http_header_lists(struct http_str list, struct http_str token)
{
    const char *p = list.data, *end = list.data + list.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        struct http_str item = http_trim((struct http_str){p, (size_t)(stop - p)});
        if (item.len == token.len && strncasecmp(item.data, token.data, token.len) == 0)
            return true;
        p = stop + 1;
    }
    return false;
}

const char *http_head_next_line(const char *p, const char *end, struct http_str *name,
                                struct http_str *value)
{
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    size_t len = eol != NULL ? (size_t)(eol - p) : (size_t)(end - p);
    const char *next = eol != NULL ? eol + 1 : end;
    if (len > 0 && p[len - 1] == '\r')
        len--;
    const char *stop = p + len;
    const char *colon = memchr(p, ':', (size_t)(stop - p));
    if (colon == NULL) {
        *name = (struct http_str){p, 0};
        *value = (struct http_str){p, 0};
        return next;
    }
    *name = http_trim((struct http_str){p, (size_t)(colon - p)});
    *value = http_trim((struct http_str){colon + 1, (size_t)(stop - colon - 1)});
    return next;
}

struct http_str http_trim(struct http_str s)
{
    while (s.len > 0 && (s.data[0] == ' ' || s.data[0] == '\t')) {
        s.data++;
        s.len--;
    }
    while (s.len > 0 && (s.data[s.len - 1] == ' ' || s.data[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* Transfer-Encoding: only "chunked" is accepted.  A list whose last coding
 * is not chunked leaves the body length unknowable: 400.  Other codings
 * before chunked are valid HTTP but not something to pass on blindly: 501. */
unsigned http_check_transfer_encoding(struct http_str value)
{
    struct http_str last = http_trim(value);
    const char *comma = memrchr(value.data, ',', value.len);
    if (comma != NULL)
        last =
            http_trim((struct http_str){comma + 1, (size_t)(value.data + value.len - comma - 1)});
    if (!http_str_equal_nocase(last, "chunked"))
        return 400;
    return comma != NULL ? 501 : 0;
}

/* Character classes, looked up rather than searched for: both checks run
 * on every request's header names and Host.  A token's characters (RFC
 * 9110 5.6.2); a reg-name's (RFC 3986 3.2.2: unreserved and sub-delims),
 * without pct-encoded: a percent-encoded host means something different to
 * each reader of it, and no DNS name needs one. */
#define HTTP_TOKEN    1u
#define HTTP_REG_NAME 2u
#define HTTP_ALNUM(c)                                                                              \
    (((c) >= '0' && (c) <= '9') || ((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define HTTP_CLASS(c)                                                                              \
    ((HTTP_ALNUM(c) || (c) == '!' || (c) == '#' || (c) == '$' || (c) == '%' || (c) == '&' ||       \
              (c) == '\'' || (c) == '*' || (c) == '+' || (c) == '-' || (c) == '.' || (c) == '^' || \
              (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~'                                 \
          ? HTTP_TOKEN                                                                             \
          : 0u) |                                                                                  \
     (HTTP_ALNUM(c) || (c) == '-' || (c) == '.' || (c) == '_' || (c) == '~' || (c) == '!' ||       \
              (c) == '$' || (c) == '&' || (c) == '\'' || (c) == '(' || (c) == ')' || (c) == '*' || \
              (c) == '+' || (c) == ',' || (c) == ';' || (c) == '='                                 \
          ? HTTP_REG_NAME                                                                          \
          : 0u))
#define HTTP_C4(n)  HTTP_CLASS(n), HTTP_CLASS(n + 1), HTTP_CLASS(n + 2), HTTP_CLASS(n + 3)
#define HTTP_C16(n) HTTP_C4(n), HTTP_C4(n + 4), HTTP_C4(n + 8), HTTP_C4(n + 12)
#define HTTP_C64(n) HTTP_C16(n), HTTP_C16(n + 16), HTTP_C16(n + 32), HTTP_C16(n + 48)
static const uint8_t char_class[256] = {HTTP_C64(0), HTTP_C64(64), HTTP_C64(128), HTTP_C64(192)};

bool http_is_token(struct http_str s)
{
    if (s.len == 0)
        return false;
    for (size_t i = 0; i < s.len; i++)
        if ((char_class[(unsigned char)s.data[i]] & HTTP_TOKEN) == 0)
            return false;
    return true;
}

static bool reg_name_char(char c)
{
    return (char_class[(unsigned char)c] & HTTP_REG_NAME) != 0;
}

/* uri-host [":" port] (RFC 9110 7.2, RFC 3986 3.2.2-3.2.3), the form of a
 * Host value and of an absolute-form target's authority, which must be
 * refused with 400 when invalid (RFC 9112 3.2).  The host is a reg-name or
 * an IPv6 address in brackets (no zone, no IPvFuture); the port, digits up
 * to 65535, possibly none.  Sets *host to the host without the port. */
bool http_authority_valid(struct http_str authority, struct http_str *host)
{
    if (authority.len == 0) { /* an empty Host: no authority (RFC 9110 7.2) */
        *host = authority;
        return true;
    }
    const char *p = authority.data, *end = p + authority.len;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        /* inet_pton() needs a string: an address longer than any IPv6
         * address's text is refused before it is copied. */
        char address[INET6_ADDRSTRLEN];
        struct in6_addr in6;
        if (close == NULL || (size_t)(close - p - 1) >= sizeof(address))
            return false;
        memcpy(address, p + 1, (size_t)(close - p - 1));
        address[close - p - 1] = '\0';
        if (inet_pton(AF_INET6, address, &in6) != 1)
            return false;
        p = close + 1;
    } else {
        while (p < end && reg_name_char(*p))
            p++;
    }
    *host = (struct http_str){authority.data, (size_t)(p - authority.data)};
    if (p == end)
        return true;
    if (*p != ':' || host->len == 0)
        return false;
    unsigned port = 0;
    for (p++; p < end; p++) {
        if (*p < '0' || *p > '9' || (port = port * 10 + (unsigned)(*p - '0')) > 65535)
            return false;
    }
    return true;
}

/* Every line must end in CRLF, and no line may continue the one before
 * (obs-fold, which llhttp accepts): bare CRs, bare LFs and folded lines are
 * how request smuggling hides a header from one of two parsers.  memchr,
 * because this scans every head byte. */
size_t http_head_length_valid(const char *data, size_t len, bool *valid)
{
    /* The pass for the length checks that no LF starts a fold, the pass
     * over the CRs that each starts a CRLF: with as many CRs as LFs, no LF
     * is a bare one either. */
    const char *p = data, *end = data + len;
    size_t lfs = 0, head = 0;
    bool crlfs = true;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        lfs++;
        p++;
        if (p < end && *p == '\n') { /* the head ends in a bare LF */
            *valid = false;
            return (size_t)(p + 1 - data);
        }
        if (p + 1 < end && p[0] == '\r' && p[1] == '\n') {
            lfs++;
            head = (size_t)(p + 2 - data);
            break;
        }
        /* Not the head's last line: what follows is in the head. */
        crlfs &= p == end || (*p != ' ' && *p != '\t');
    }
    if (head == 0)
        return 0;
    size_t crs = 0;
    end = data + head;
    for (p = data; (p = memchr(p, '\r', (size_t)(end - p))) != NULL; p++) {
        crs++;
        crlfs &= p + 1 < end && p[1] == '\n';
    }
    *valid = crlfs && crs == lfs;
    return head;
}

void http_chunk_iov(char size_line[HTTP_CHUNK_SIZE_LINE], const char *data, size_t len,
                    struct iovec iov[3])
{
    /* By hand: this runs for every chunk, and snprintf showed in profiles. */
    assert(len > 0); /* a chunk of 0 is the last one */
    static const char hex[] = "0123456789abcdef";
    char *p = size_line;
    int shift = 60;
    while (shift > 0 && ((len >> shift) & 0xf) == 0)
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        *p++ = hex[(len >> shift) & 0xf];
    *p++ = '\r';
    *p++ = '\n';
    iov[0] = (struct iovec){size_line, (size_t)(p - size_line)};
    iov[1] = (struct iovec){(void *)data, len};
    iov[2] = (struct iovec){"\r\n", 2};
}

bool http_trailer_allowed(struct http_str name)
{
    /* A backend that read them in a trailer section could take a client's
     * trailer for what the proxy set or checked in the head. */
    static const char *const forbidden[] = {
        /* framing, and what describes one connection */
        "content-length", "transfer-encoding", "trailer", "te", "connection", "keep-alive",
        "proxy-connection", "upgrade",
        /* routing, and what the proxy adds about the client */
        "host", "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
        "x-forwarded-port", "x-real-ip", "via", "max-forwards",
        /* request modifiers: controls, conditionals, range, negotiation */
        "cache-control", "pragma", "expect", "range", "if-match", "if-none-match",
        "if-modified-since", "if-unmodified-since", "if-range", "accept", "accept-encoding",
        "accept-language", "accept-charset", "prefer",
        /* authentication and state */
        "authorization", "proxy-authorization", "cookie", "www-authenticate", "proxy-authenticate",
        "set-cookie",
        /* response control */
        "age", "date", "expires", "location", "retry-after", "vary",
        /* how to process the content */
        "content-type", "content-encoding", "content-range", "content-language",
        "content-location"};
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (http_str_equal_nocase(name, forbidden[i]))
            return false;
    return true;
}

bool http_method_idempotent(struct http_str method)
{
    static const char *const idempotent[] = {"GET", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE"};
    for (size_t i = 0; i < sizeof(idempotent) / sizeof(idempotent[0]); i++)
        if (method.len == strlen(idempotent[i]) &&
            memcmp(method.data, idempotent[i], method.len) == 0)
            return true;
    return false;
}
