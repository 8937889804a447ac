/*
 * static_path.h: from a request's path to a file's: percent-decoding and
 * normalising the path (dot segments, repeated slashes), refusing what
 * could name a file outside the root, and joining it to root or alias.
 */
#ifndef CORRAL_PROTO_STATIC_PATH_H
#define CORRAL_PROTO_STATIC_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* Decodes `path` (`len` bytes, as the request has it, starting with '/')
 * into `out` (`cap` bytes, NUL-terminated): percent-escapes decoded,
 * repeated slashes merged, "." segments dropped and ".." ones applied.
 * Refused with -EINVAL: a path not starting with '/', a malformed escape,
 * an escaped '/' ("%2F"), a NUL, a backslash, a ".." above the root.
 * -ENAMETOOLONG when it does not fit.  Returns 0 with *out_len set. */
int static_path_normalise(const char *path, size_t len, char *out, size_t cap, size_t *out_len);

/* Whether `path` (NUL-terminated) has a "." or ".." segment: a joined
 * path that does is refused, whatever made it. */
bool static_path_has_dot_segment(const char *path);

/* Joins `base` (root or alias, without its trailing slashes) and `rest`
 * (a normalised path, or its part after the location's prefix) into
 * `out` (`cap` bytes).  Returns 0, -ENAMETOOLONG, or -EINVAL when the
 * result has a dot segment (an alias of "/x/" for location "/x" and a
 * request for "/x../y"). */
int static_path_join(const char *base, size_t base_len, const char *rest, size_t rest_len,
                     char *out, size_t cap);

#endif
