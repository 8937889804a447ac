/*
 * static_mime.h: the Content-Type of a served file from its extension:
 * the config's `types { }` when it has one, else a built-in map of the
 * common web types, and default_type for the rest.
 */
#ifndef CORRAL_PROTO_STATIC_MIME_H
#define CORRAL_PROTO_STATIC_MIME_H

#include "proto/http/module.h" /* struct http_mime_type */

#include <stddef.h>

/* The types a location serves with: `types` sorted by extension,
 * caseless (NULL, 0: the built-in map). */
struct static_mime {
    const struct http_mime_type *types;
    size_t count;
    const char *default_type; /* nginx's default: "text/plain" */
};

/* The type of the file `path` (its extension after the last '.' of its
 * last segment, caseless), else m->default_type. */
const char *static_mime_type(const struct static_mime *m, const char *path);

/* The built-in map, sorted: for tests. */
extern const struct http_mime_type static_mime_builtin[];
extern const size_t static_mime_builtin_count;

#endif
