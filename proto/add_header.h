/*
 * add_header.h: `add_header NAME VALUE [always]`: header lines added to a
 * location's responses, in the exchange layer, whatever handler answers
 * and whatever protocol carries the response.
 */
#ifndef CORRAL_PROTO_ADD_HEADER_H
#define CORRAL_PROTO_ADD_HEADER_H

#include "proto/exchange.h"
#include "proto/vars.h"

struct http_add_header {
    struct http_str name;
    const struct vars_template *value; /* an empty value adds no line */
    bool always; /* every status; else 200, 201, 204, 206, 301, 302, 303, 304, 307, 308 */
};

/* A location's rules, as the location (or its server) writes them. */
struct http_add_headers {
    const struct http_add_header *items;
    size_t count;
};

#endif
