/*
 * static_module.h: static files as a content handler, with nginx's
 * directives (root, alias, index, try_files, expires, etag,
 * if_modified_since, disable_symlinks, open_file_cache, sendfile,
 * autoindex, gzip_static, brotli_static, zstd_static): the module
 * (module.h), its struct per level and what a location's becomes at
 * build (static_module.c).
 */
#ifndef CORRAL_PROTO_STATIC_MODULE_H
#define CORRAL_PROTO_STATIC_MODULE_H

#include "conf/directive.h"
#include "proto/http/exchange.h"
#include "proto/static/static_cond.h"
#include "proto/static/static_file.h"
#include "proto/static/static_mime.h"
#include "proto/static/static_precompressed.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* expires's forms. */
enum static_expires {
    STATIC_EXPIRES_OFF,
    STATIC_EXPIRES_EPOCH, /* long past: no-cache */
    STATIC_EXPIRES_MAX,   /* 31 Dec 2037, ten years of max-age */
    STATIC_EXPIRES_TIME,  /* now + seconds; negative: no-cache */
};

#define STATIC_INDEX_MAX     8
#define STATIC_TRY_FILES_MAX 16

/* The directives as written at one level; a field whose position is
 * unset (file NULL) takes the parent's (merge). */
struct static_conf {
    char *root, *alias; /* resolved paths; NULL: none at this level */
    struct conf_pos root_pos, alias_pos;
    bool root_inherited, index_inherited; /* the parent's: its to free */
    char *index[STATIC_INDEX_MAX];
    size_t index_count; /* 0: unset (nginx's "index.html") */
    struct conf_pos index_pos;
    char *try_files[STATIC_TRY_FILES_MAX];
    struct conf_pos try_args[STATIC_TRY_FILES_MAX];
    size_t try_count;
    struct conf_pos try_pos;
    enum static_expires expires;
    int64_t expires_s;
    struct conf_pos expires_pos;
    bool etag; /* on by default */
    struct conf_pos etag_pos;
    int ims; /* enum static_ims */
    struct conf_pos ims_pos;
    bool no_symlinks; /* disable_symlinks */
    struct conf_pos no_symlinks_pos;
    struct static_file_cache_conf cache;
    struct conf_pos cache_pos;
    uint32_t cache_valid_ms; /* open_file_cache_valid */
    struct conf_pos cache_valid_pos;
    bool sendfile; /* on by default */
    struct conf_pos sendfile_pos;
    bool autoindex;
    struct conf_pos autoindex_pos;
    /* gzip_static, brotli_static, zstd_static: enum static_precompressed */
    int precompressed[COMPRESS_CODINGS];
    struct conf_pos precompressed_pos[COMPRESS_CODINGS];
};

/* One try_files element as built. */
enum static_try_kind {
    STATIC_TRY_FILE,  /* a file, or a directory when it ends in '/' */
    STATIC_TRY_CODE,  /* last: =CODE */
    STATIC_TRY_NAMED, /* last: @name */
    STATIC_TRY_URI,   /* last: an internal redirect to the URI */
};
struct vars_template;
struct http_regex;
struct http_location;
struct http_add_headers;
struct static_try {
    enum static_try_kind kind;
    const char *text;                  /* as written */
    const struct vars_template *value; /* with $variables; NULL: the text */
    unsigned code;
    const struct http_location *named;
};

/* What a location serves files with: the handler's data. */
struct static_location {
    const char *base; /* root, or alias, without trailing slashes */
    size_t base_len;
    bool alias;
    const char *prefix; /* the location's prefix that alias replaces */
    size_t prefix_len;
    /* A regex location's alias, the file's whole path, with its $1...
     * (`captures`: the location's regex; NULL: it reads none); `base`
     * is then the directory it must stay under. */
    const struct vars_template *alias_value;
    const struct http_regex *captures;
    const char *const *index;
    size_t index_count;
    const struct static_try *tries;
    size_t try_count;
    enum static_expires expires;
    int64_t expires_s;
    bool etag;
    enum static_ims ims;
    bool no_symlinks;
    struct static_file_cache_conf cache;
    bool sendfile;
    bool autoindex;
    uint8_t precompressed[COMPRESS_CODINGS]; /* enum static_precompressed */
    bool any_precompressed;
    struct static_mime mime;
    const struct http_add_headers *add_headers;
};

extern const struct http_handler static_handler;

/* $request_filename: the file that the location (or, where none is
 * found, the server) serves for `req`'s path, from its root or alias,
 * into `buf` (`cap` bytes); its length, 0 where no files are served or
 * the path names none. */
size_t static_request_filename(const struct exchange *ex, const struct http_request *req, char *buf,
                               size_t cap);

/* The module. */
struct http_module;
extern struct http_module static_module;

#endif
