/*
 * static_mime.c: extension to Content-Type (static_mime.h), by binary
 * search in a table sorted by extension: the config's, or the built-in
 * one below, a subset of nginx's mime.types for what the web serves.
 */
#include "proto/static/static_mime.h"

#include <string.h>
#include <strings.h>

/* Sorted by extension (strcasecmp): static_mime_type() searches it. */
const struct http_mime_type static_mime_builtin[] = {
    {"avif", "image/avif"},
    {"bmp", "image/bmp"},
    {"css", "text/css"},
    {"csv", "text/csv"},
    {"gif", "image/gif"},
    {"gz", "application/gzip"},
    {"htm", "text/html"},
    {"html", "text/html"},
    {"ico", "image/x-icon"},
    {"jpeg", "image/jpeg"},
    {"jpg", "image/jpeg"},
    {"js", "application/javascript"},
    {"json", "application/json"},
    {"m4a", "audio/x-m4a"},
    {"map", "application/json"},
    {"md", "text/markdown"},
    {"mjs", "application/javascript"},
    {"mp3", "audio/mpeg"},
    {"mp4", "video/mp4"},
    {"oga", "audio/ogg"},
    {"ogg", "audio/ogg"},
    {"ogv", "video/ogg"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"svg", "image/svg+xml"},
    {"svgz", "image/svg+xml"},
    {"tar", "application/x-tar"},
    {"ttf", "font/ttf"},
    {"txt", "text/plain"},
    {"wasm", "application/wasm"},
    {"wav", "audio/wav"},
    {"webm", "video/webm"},
    {"webmanifest", "application/manifest+json"},
    {"webp", "image/webp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"xhtml", "application/xhtml+xml"},
    {"xml", "text/xml"},
    {"zip", "application/zip"},
};
const size_t static_mime_builtin_count =
    sizeof(static_mime_builtin) / sizeof(static_mime_builtin[0]);

/* strcasecmp(), the table's order, inline: the extensions are short and
 * a call per probe cost more than the comparing. */
static int ext_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int ca = (unsigned char)*a, cb = (unsigned char)*b;
        ca += ca >= 'A' && ca <= 'Z' ? 'a' - 'A' : 0;
        cb += cb >= 'A' && cb <= 'Z' ? 'a' - 'A' : 0;
        if (ca != cb || ca == 0)
            return ca - cb;
    }
}

const char *static_mime_type(const struct static_mime *m, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash != NULL ? slash : path, '.');
    if (dot == NULL || dot[1] == '\0')
        return m->default_type;
    const char *ext = dot + 1;
    const struct http_mime_type *types = m->types != NULL ? m->types : static_mime_builtin;
    size_t lo = 0, hi = m->types != NULL ? m->count : static_mime_builtin_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = ext_cmp(ext, types[mid].extension);
        if (cmp == 0)
            return types[mid].type;
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return m->default_type;
}
