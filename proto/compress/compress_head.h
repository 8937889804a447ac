/*
 * compress_head.h: what compression reads of a response head's header
 * lines (the handler's, as they pass the header filter), and the lines
 * it sends instead when it codes the body.
 */
#ifndef CORRAL_PROTO_COMPRESS_HEAD_H
#define CORRAL_PROTO_COMPRESS_HEAD_H

#include "proto/http/http.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

struct vars_buf;

/* The facts of one head's lines; what is not there is zero. */
struct compress_head {
    struct http_str content_type;           /* the media type, without parameters */
    bool encoded;                           /* a Content-Encoding with a value */
    bool gzip;                              /* ... and that value is "gzip" alone */
    bool no_transform;                      /* Cache-Control: no-transform */
    bool vary_listed;                       /* Vary lists Accept-Encoding, or is "*" */
    bool cache_control;                     /* any Cache-Control line */
    bool no_cache, no_store, private_cache; /* what Cache-Control lists */
    bool expires, expires_valid;            /* Expires, and whether it is an IMF-fixdate */
    time_t expires_at;
    bool last_modified, etag;
};

/* Reads `len` bytes of lines, each "Name: value" ending in CRLF, into
 * *out.  A malformed line is skipped; nothing past `len` is read. */
void compress_head_read(const char *lines, size_t len, struct compress_head *out);

/* How compress_head_write() changes the body. */
enum compress_head_change {
    COMPRESS_HEAD_SAME,    /* not at all */
    COMPRESS_HEAD_CODED,   /* coded with `coding` */
    COMPRESS_HEAD_DECODED, /* its Content-Encoding decoded (gunzip) */
};

/* Appends `lines` to `out` as they go with a body changed as `change`
 * says: when changed, without Accept-Ranges and with a strong ETag made
 * weak (W/"...", and one that is no entity-tag dropped); coded, then
 * "Content-Encoding: coding" (a Content-Encoding token); decoded, without
 * Content-Encoding; then, with `vary`, "Vary: Accept-Encoding" (vary is
 * false when a Vary line already lists it). */
void compress_head_write(const char *lines, size_t len, enum compress_head_change change,
                         const char *coding, bool vary, struct vars_buf *out);

#endif
