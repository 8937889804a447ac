/*
 * compress.h: response compression, nginx's gzip module with the brotli
 * and zstd modules' directives beside it: a header filter that decides
 * from the response head and the request's Accept-Encoding whether and
 * how to code the body, and a body filter that codes it as it streams,
 * flushed when the producer pauses (exchange_flush()).  Its struct per
 * level is here for tests; compress_conf.c reads and inherits it.
 */
#ifndef CORRAL_PROTO_COMPRESS_H
#define CORRAL_PROTO_COMPRESS_H

#include "conf/directive.h"
#include "proto/compress/compress_accept.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* gzip_proxied's words (nginx's), each a bit. */
enum {
    COMPRESS_PROXIED_OFF = 1u << 0,
    COMPRESS_PROXIED_EXPIRED = 1u << 1,
    COMPRESS_PROXIED_NO_CACHE = 1u << 2,
    COMPRESS_PROXIED_NO_STORE = 1u << 3,
    COMPRESS_PROXIED_PRIVATE = 1u << 4,
    COMPRESS_PROXIED_NO_LM = 1u << 5,
    COMPRESS_PROXIED_NO_ETAG = 1u << 6,
    COMPRESS_PROXIED_AUTH = 1u << 7,
    COMPRESS_PROXIED_ANY = 1u << 8,
};

/* What an unset count or size holds until the merge. */
#define COMPRESS_UNSET_LEVEL  UINT_MAX
#define COMPRESS_UNSET_LENGTH SIZE_MAX

/* One coding's settings at one level: `gzip`, `gzip_types`,
 * `gzip_min_length`, `gzip_comp_level` (and brotli_*, zstd_*). */
struct compress_coding_conf {
    bool on;
    struct conf_pos on_pos; /* where this level's switch is written; file NULL: not */
    unsigned level;
    size_t min_length;
    /* The media types it codes, lowercase, besides text/html; `any`: "*". */
    char **types;
    size_t type_count;
    bool any_type;
    bool types_set;       /* written at this level */
    bool types_inherited; /* `types` is the parent's, not freed here */
};

/* The module's struct per level (top level, server, location). */
struct compress_conf {
    struct compress_coding_conf coding[COMPRESS_CODINGS];
    bool vary; /* gzip_vary, for every coding */
    struct conf_pos vary_pos;
    unsigned proxied; /* gzip_proxied, for every coding; UINT_MAX: unset */
    /* gzip_http_version, for every coding: 10 (1.0) or 11 (1.1); an
     * HTTP/1.0 request gets no coding under 11.  0: unset. */
    unsigned http_version;
    /* gzip_disable's regexes as written ("msie6" among them), for every
     * coding; `disable_inherited`: the parent's, not freed here. */
    char **disable;
    struct conf_pos *disable_pos;
    size_t disable_count;
    bool disable_inherited;
    /* gunzip: a gzip-coded response decoded for a client that does not
     * take gzip, in pieces of gunzip_buffers' SIZE (0: unset). */
    bool gunzip;
    struct conf_pos gunzip_pos;
    size_t gunzip_piece;
};

/* What the module's build makes of a level where some coding is on, and
 * what its handlers read per request. */
struct http_regex;
struct compress_built {
    const struct compress_conf *conf;
    /* Some coding or gunzip is on (else it is built for gzip_http_version
     * 1.0 alone). */
    bool on;
    /* gzip_disable's, compiled caseless: a User-Agent one matches gets
     * no coding ("msie6": nginx's, MSIE 4 and 5, and 6 without SV1). */
    const struct http_regex **disable;
    size_t disable_count;
};

/* Whether `type` (a media type without parameters, any case) is among
 * those `c` codes: text/html always, "*" any. */
bool compress_conf_takes(const struct compress_coding_conf *c, const char *type, size_t len);

/* The module (module.h). */
struct http_module;
extern struct http_module compress_module;

/* gzip_http_version where the exchange is (10 or 11, nginx's default 11
 * where nothing is written), for the codings served ahead of time
 * (gzip_static), as nginx's gzip_static asks it too. */
struct exchange;
unsigned compress_http_version(const struct exchange *ex);

/* Its configuration (compress_conf.c), which the module's struct conf_module
 * names: the directive table and conf_module's init, merge and free, and
 * the module's build (module.h). */
extern const struct conf_directive compress_directives[];
void compress_conf_init(void *conf);
int compress_conf_merge(void *conf, const void *parent, char *error, size_t len);
void compress_conf_free(void *conf);
struct http_module_build;
int compress_conf_build(const void *conf, const struct http_module_build *b, const void **out);

#endif
