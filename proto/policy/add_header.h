/*
 * add_header.h: `add_header NAME VALUE [always]`: header lines added to a
 * location's responses, in the exchange layer, whatever handler answers
 * and whatever protocol carries the response.
 */
#ifndef CORRAL_PROTO_ADD_HEADER_H
#define CORRAL_PROTO_ADD_HEADER_H

#include "conf/directive.h"
#include "proto/http/exchange.h"
#include "proto/http/vars.h"

struct http_add_header {
    struct http_str name;
    const struct vars_template *value; /* an empty value adds no line */
    bool always; /* every status; else 200, 201, 204, 206, 301, 302, 303, 304, 307, 308 */
};

/* add_header NAME VALUE [always] as written, one level's lines (top
 * level, server, location).  A level with none takes its parent's
 * (nginx's rule: one with lines of its own takes none of its parent's),
 * which it then does not own (`inherited`). */
struct add_header_line {
    char *name, *value; /* malloc'd; the value may hold $variables */
    bool always;
    struct conf_pos value_pos;
};

struct add_header_conf {
    struct add_header_line *items;
    size_t count;
    bool inherited;
};

/* A location's rules, as the location (or its server) writes them. */
struct http_add_headers {
    const struct http_add_header *items;
    size_t count;
    bool early; /* some value reads the request and nothing late: see below */
};

/* The add_header rules the response gets when it begins (NULL: none):
 * add_header's header filter is turned on to apply them. */
void add_header_set_rules(struct exchange *ex, const struct http_add_headers *rules);
/* The rules set; NULL: none. */
const struct http_add_headers *add_header_rules(const struct exchange *ex);

/* The request's strings are gone when a proxied response begins: the
 * values of the exchange's rules that read the request (and nothing known
 * only then, such as $status) are evaluated now, while `req` is valid, into
 * `out`, which must stay until the response begins or the exchange ends;
 * exchange_begin() uses them. */
void add_header_early(struct exchange *ex, const struct http_request *req, struct vars_buf *out);

/* Answers with exchange_respond_error() and `rules` (NULL: none; those
 * without `always` apply to no error): corral's own answers get the
 * add_header rules of the location (or server) they answer for, as in
 * nginx.  `req` (NULL: gone) is what the values that read the request
 * read. */
void add_header_respond_error(struct exchange *ex, const struct http_request *req,
                              const struct http_add_headers *rules, unsigned status);

/* Forgets the values add_header_early() kept, before `out` goes. */
void add_header_forget_early(struct exchange *ex);

/* Forgets the exchange's rules and values: the router calls it when the
 * exchange is redirected or ends. */
void add_header_release(struct exchange *ex);

/* The module (module.h): its header filter, and the router's own answers with the location's lines.
 */
struct http_module;
extern struct http_module add_header_module;

#endif
