/*
 * static_precompressed.h: files compressed ahead of time beside the file
 * asked for (FILE.gz, FILE.br, FILE.zst), nginx's gzip_static and the
 * brotli and zstd modules' brotli_static and zstd_static: which of them
 * a request gets, by its Accept-Encoding and the compress module's
 * preference (compress_accept.h).
 */
#ifndef CORRAL_PROTO_STATIC_PRECOMPRESSED_H
#define CORRAL_PROTO_STATIC_PRECOMPRESSED_H

#include "proto/compress/compress_accept.h"
#include "proto/http/exchange.h"
#include "proto/static/static_file.h"

#include <stdbool.h>
#include <stdint.h>

/* gzip_static's values (and brotli_static's, zstd_static's). */
enum static_precompressed {
    STATIC_PRECOMPRESSED_OFF,
    STATIC_PRECOMPRESSED_ON,     /* when the client accepts the coding */
    STATIC_PRECOMPRESSED_ALWAYS, /* whatever the client accepts */
};

/* The file's suffix for `coding`: ".gz", ".br", ".zst". */
const char *static_precompressed_suffix(enum compress_coding coding);

/* Opens the sibling of `file` (open, a regular file, named `path`) that
 * `req` gets under `modes` (one enum static_precompressed per coding):
 * first the codings the client accepts, the best first
 * (compress_accept_order()), among those on; then those `always`.  A
 * sibling counts when it is a regular file, opened as static_file_open()
 * opens (`no_symlinks`, `cache`), and not older than `file`.  Returns
 * the coding with the sibling in *out, or -1 (nothing opened). */
int static_precompressed_open(const struct http_request *req, const uint8_t modes[COMPRESS_CODINGS],
                              const char *path, const struct static_file *file, bool no_symlinks,
                              const struct static_file_cache_conf *cache, uint64_t now_ms,
                              struct static_file *out);

#endif
