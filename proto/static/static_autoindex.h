/*
 * static_autoindex.h: nginx's autoindex: the listing of a directory that
 * has no index file, as an HTML page.
 */
#ifndef CORRAL_PROTO_STATIC_AUTOINDEX_H
#define CORRAL_PROTO_STATIC_AUTOINDEX_H

#include "proto/http/vars.h"

#include <stddef.h>

/* Writes into `out` the page listing the directory open as `fd` (which
 * it takes and closes), for the request path `uri` (`len` bytes, as the
 * client sent it): its entries but hidden ones ("."), directories first,
 * then by name, each with its time and size, names escaped for the link
 * and for the text.  At most STATIC_AUTOINDEX_MAX entries are listed.
 * Returns 0, or -errno (the directory could not be read, or no memory). */
#define STATIC_AUTOINDEX_MAX 100000
int static_autoindex_page(int fd, const char *uri, size_t len, struct vars_buf *out);

#endif
