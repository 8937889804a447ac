/*
 * fields.h: what HTTP/2 and HTTP/3 do alike with field lists: a request
 * built from the decoded fields (pseudo-headers, Host from :authority,
 * cookies joined), and a response head turned back into fields (the
 * framing's own, then the handler's lines without those of a connection).
 * The framers keep their own nv types; nothing here allocates but the
 * request's header array and joined cookie, as before.
 */
#ifndef CORRAL_PROTO_HTTP_FIELDS_H
#define CORRAL_PROTO_HTTP_FIELDS_H

#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One decoded field, as offsets into the buffer its bytes were copied to
 * (which may move while fields are collected). */
struct http_field_ref {
    size_t name, name_len, value, value_len;
};

/* http_fields_request()'s verdict on a malformed request: a stream error,
 * no response (RFC 9113 8.1.1, RFC 9114 4.1.2). */
#define HTTP_FIELDS_MALFORMED 1

/* A content-length value of decimal digits (the framing library checked
 * its syntax), saturating. */
uint64_t http_fields_length(struct http_str value);

/* Builds `req` from `count` fields in `base`: pseudo-headers out, a Host
 * from :authority (else the Host field) first, cookies joined with "; "
 * into one field (RFC 9113 8.2.3, RFC 9114 4.2.1), which is what an
 * HTTP/1.1 backend expects; then the authority and target checks the
 * framing libraries leave (a backend must never see a target it would
 * split differently).  `end_stream`: no body follows the head.  Returns 0,
 * a status to answer with (500, 501 for CONNECT), or
 * HTTP_FIELDS_MALFORMED.  *headers (always) and *cookie (when there are
 * cookies) are malloc'd, the caller frees both once `req` is used. */
unsigned http_fields_request(const char *base, const struct http_field_ref *fields, size_t count,
                             bool end_stream, struct http_request *req,
                             struct http_header **headers, char **cookie);

/* Fields that describe one HTTP/1.1 connection and are malformed in
 * HTTP/2 and HTTP/3 (RFC 9113 8.2.2, RFC 9114 4.2). */
bool http_fields_connection_specific(struct http_str name);

/* An upper bound of the fields in CRLF header lines. */
size_t http_fields_count_lines(const char *lines, size_t len);

/* The next field of CRLF header lines from *pos, skipping lines without a
 * name and connection-specific fields; its name as sent (the caller
 * lowercases it), its value trimmed.  Returns false at the end. */
bool http_fields_next_line(const char *lines, size_t len, size_t *pos, struct http_str *name,
                           struct http_str *value);

/* The framing's own fields of a response, before the handler's lines. */
struct http_fields_head {
    struct http_header field[4]; /* :status, server, date, maybe content-length */
    size_t count;
    char status[3], length[HTTP_UINT64_DIGITS];
};

/* Fills `out`: content-length only when known, not coded (a coded body's
 * length is that of the coded bytes, which is not framed), and the status
 * allows a body.  Points into `out` and into http_date()'s buffer. */
void http_fields_head(struct http_fields_head *out, unsigned status, int64_t content_length,
                      struct http_str codings);

#endif
