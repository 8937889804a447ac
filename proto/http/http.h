/*
 * headers.h: HTTP header fields and heads as spans of the bytes they came
 * in: collecting them from llhttp, comparing and trimming values, the field
 * checks llhttp leaves to its caller, head framing checks, reason phrases,
 * the Date value.
 * Shared by the server side (http1.c) and the proxy's response parser.
 */
#ifndef CORRAL_PROTO_HEADERS_H
#define CORRAL_PROTO_HEADERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>

struct http_str {
    const char *data;
    size_t len;
};

struct http_header {
    struct http_str name, value;
};

/* Reason phrase of a status code ("Not Found"), or "Unknown". */
const char *http_reason(unsigned status);

/* The current time as a Date value, "Thu, 03 Dec 2026 04:10:00 GMT"
 * (RFC 9110 5.6.7: always HTTP_DATE_LEN bytes), formatted once per second
 * per thread, so once per loop; valid until the thread's next call. */
#define HTTP_DATE_LEN 29
const char *http_date(void);

/* Writes `value` in decimal at `p` (at most HTTP_UINT64_DIGITS bytes, no
 * terminator) and returns the end: the framers' status codes and lengths,
 * without snprintf's cost on every response. */
#define HTTP_UINT64_DIGITS 20
char *http_append_uint(char *p, uint64_t value);

/* Collects the headers llhttp reports as spans of one head in memory
 * (header names and values may arrive in adjacent pieces). */
struct http_header_list {
    struct http_header *headers;
    size_t count, cap;
    bool in_value;
};
/* Starts the list over for a new head. */
void http_headers_reset(struct http_header_list *list);
/* A piece of a header name: false when a new header would exceed `limit`
 * (or the list's capacity). */
bool http_headers_add_name(struct http_header_list *list, const char *at, size_t len, size_t limit);
void http_headers_add_value(struct http_header_list *list, const char *at, size_t len);
/* Extends `str` with the adjacent piece at..at+len. */
void http_str_extend(struct http_str *str, const char *at, size_t len);

/* Framing helper shared by the request reader and the proxy's response
 * parser: the length of the head at the start of `data`, through its empty
 * line (a bare LF one ends it too), or 0 while it is incomplete; for a
 * complete head, *valid is false for a bare CR, a bare LF or an obs-fold
 * anywhere in it. */
size_t http_head_length_valid(const char *data, size_t len, bool *valid);

/* Inline, so that the length of a literal is known when compiling: the
 * header rewriting compares every header name with several. */
static inline bool http_str_equal_nocase(struct http_str s, const char *literal)
{
    size_t len = strlen(literal);
    return s.len == len && strncasecmp(s.data, literal, len) == 0;
}

/* A string literal as a struct http_str, for tables of names. */
#define HTTP_STR_LIT(s)                                                                            \
    {                                                                                              \
        (s), sizeof(s) - 1                                                                         \
    }

/* Whether `s` is one of `table`'s `count` names, case aside.  Each entry's
 * length is kept with it: every field of every proxied message is looked
 * up in such tables, and the length rules out nearly all of one without
 * reading a byte (a loop over char pointers would strlen() each). */
static inline bool http_str_in_nocase(struct http_str s, const struct http_str *table, size_t count)
{
    for (size_t i = 0; i < count; i++)
        /* The first bytes differ in more than the case bit: not equal, and
         * no strncasecmp() call (most names of the same length end here:
         * "user-agent" and "keep-alive"). */
        if (s.len == table[i].len &&
            (s.len == 0 || ((unsigned char)(s.data[0] ^ table[i].data[0]) & ~0x20u) == 0) &&
            strncasecmp(s.data, table[i].data, s.len) == 0)
            return true;
    return false;
}

/* The header line at `p` (before `end`) of a head's lines, as handlers
 * and filters pass them ("Name: value\r\n"...): its name and value,
 * trimmed; returns where the next line starts.  A line with no colon has
 * an empty name.  Reads nothing past `end`. */
const char *http_head_next_line(const char *p, const char *end, struct http_str *name,
                                struct http_str *value);

/* Whether a comma-separated header value (Connection) lists `token`. */
bool http_header_lists(struct http_str list, struct http_str token);

/* Whether a request's trailer section may carry the field `name` on to a
 * handler: not one that RFC 9110 6.5.1 keeps to the header section
 * (framing, routing, request modifiers, authentication, response control,
 * how to process the content) nor a connection-specific one. */
bool http_trailer_allowed(struct http_str name);

/* Whether a request with `method` may be sent again (RFC 9110 9.2.2):
 * GET, HEAD, PUT, DELETE, OPTIONS and TRACE. */
bool http_method_idempotent(struct http_str method);
struct http_str http_trim(struct http_str s);

/* Field checks llhttp leaves to its caller. */
/* Transfer-Encoding: 0 for "chunked" alone, else the status to refuse
 * the request with (400, or 501 for other codings before chunked). */
unsigned http_check_transfer_encoding(struct http_str value);
/* Whether `s` is a token (RFC 9110 5.6.2), as a field name must be. */
bool http_is_token(struct http_str s);
/* Whether `authority` is uri-host [":" port], as Host and an absolute-form
 * target's authority must be; sets *host to the host without the port. */
bool http_authority_valid(struct http_str authority, struct http_str *host);

/* Room for a chunk's size line: 16 hex digits and CRLF at most. */
#define HTTP_CHUNK_SIZE_LINE 24
/* The chunked coding of `len` (> 0) body bytes as three pieces for
 * corral_conn_writev(): the size line (written into `size_line`), the data
 * itself (not copied), and its CRLF. */
void http_chunk_iov(char size_line[HTTP_CHUNK_SIZE_LINE], const char *data, size_t len,
                    struct iovec iov[3]);

#endif
