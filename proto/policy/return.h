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

/* The module. */
struct http_module;
extern struct http_module return_module;

#endif
