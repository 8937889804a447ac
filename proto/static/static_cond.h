/*
 * static_cond.h: conditional requests for a static file (RFC 9110 13):
 * its validators (Last-Modified, a strong ETag as nginx writes it),
 * HTTP dates, and the preconditions evaluated in the RFC's order.
 */
#ifndef CORRAL_PROTO_STATIC_COND_H
#define CORRAL_PROTO_STATIC_COND_H

#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* if_modified_since's values, as nginx's. */
enum static_ims {
    STATIC_IMS_EXACT,  /* 304 when the file's time equals the date (the default) */
    STATIC_IMS_BEFORE, /* 304 when the file's time is not after the date */
    STATIC_IMS_OFF,    /* If-Modified-Since is ignored */
};

/* "\"" + 16 hex digits + "-" + 16 hex digits + "\"" and a NUL. */
#define STATIC_ETAG_MAX 40

/* What a file is judged by. */
struct static_validators {
    int64_t mtime; /* seconds since the epoch */
    uint64_t size;
    const char *etag; /* "\"...\"", or NULL with `etag off` */
    size_t etag_len;
};

/* Writes nginx's ETag, "\"MTIME-SIZE\"" in lowercase hex, into `out`
 * (STATIC_ETAG_MAX bytes) and returns its length. */
size_t static_etag_format(char *out, int64_t mtime, uint64_t size);

/* The length of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"). */
#define STATIC_DATE_LEN 29

/* Writes `t` as an IMF-fixdate into `out` (STATIC_DATE_LEN + 1 bytes). */
void static_date_format(char *out, int64_t t);

/* Parses an HTTP date in any of the three forms RFC 9110 5.6.7 has a
 * recipient accept (IMF-fixdate, RFC 850, asctime) into *out; false
 * when it is none of them. */
bool static_date_parse(struct http_str s, int64_t *out);

/* The preconditions of `req` against `v` in RFC 9110 13.2.2's order:
 * If-Match (else If-Unmodified-Since) failing gives 412; If-None-Match
 * (else If-Modified-Since, as `ims` says) matching gives 304 (412 for a
 * method other than GET and HEAD).  0: serve the file. */
unsigned static_cond_check(const struct http_request *req, const struct static_validators *v,
                           enum static_ims ims);

/* Whether a Range applies under the request's If-Range, if any: an
 * entity tag must match strongly, a date must equal the file's time. */
bool static_cond_if_range(const struct http_request *req, const struct static_validators *v);

#endif
