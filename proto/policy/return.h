/*
 * return.h: `return CODE ["TEXT"]`, a location's fixed response or
 * redirect, as a module (module.h): its directive and struct, its build
 * step and its content handler (return.c).
 */
#ifndef CORRAL_PROTO_RETURN_H
#define CORRAL_PROTO_RETURN_H

#include "conf/directive.h"
#include "proto/http/exchange.h"

/* The directive as written in a location; code 0: none there. */
struct return_conf {
    unsigned code;
    char *text; /* malloc'd; NULL: no text (an empty body); may hold $variables */
    struct conf_pos text_pos;
    bool borrowed; /* an if's location's copy of its location's: `text` is that one's */
};

/* What the handler answers with: handler_data of http_return_handler.
 * HTTP_RETURN_CLOSE (nginx's 444) ends the exchange unanswered. */
#define HTTP_RETURN_CLOSE 444
struct vars_template;
struct http_regex;
struct http_add_headers;
struct http_return {
    unsigned status;
    const char *text;
    size_t text_len;
    const struct vars_template *value;          /* the text with $variables; NULL: none */
    const struct http_add_headers *add_headers; /* NULL: none */
    const struct http_regex *captures; /* the location's regex, when `value` reads its groups */
};
extern const struct http_handler http_return_handler;

/* Reads `return CODE ["TEXT"]`'s arguments into `c` (its text
 * malloc'd).  Returns 0, or -1 with `error` filled in.  For the return
 * module's directive and for a `return` inside an `if` (rewrite.c). */
int return_parse(struct return_conf *c, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error);

/* What `c` answers with, its text compiled, its $1... the groups of
 * `captures` (NULL: none), in the build's memory; no add_header lines.
 * Returns 0 or -errno, having logged why. */
struct http_module_build;
int return_compile(const struct return_conf *c, const struct http_module_build *b,
                   const struct http_regex *captures, struct http_return **out);

/* Answers the walk's exchange with `ret` (a `return` inside an `if`), as
 * a location's return does, with the add_header lines of the level the
 * walk is at; its text's $1... are the groups `ovector` gives (`count`
 * pairs) of `subject`. */
struct router_walk;
void return_answer(struct router_walk *w, const struct http_return *ret, const char *subject,
                   const size_t *ovector, size_t count);

/* The module. */
struct http_module;
extern struct http_module return_module;

#endif
