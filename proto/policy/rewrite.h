/*
 * rewrite.h: `rewrite REGEX REPLACEMENT [last|break|redirect|permanent]`
 * at server and location level, as nginx runs them: phases of the router,
 * which searches the locations again for a URI they changed.
 */
#ifndef CORRAL_PROTO_REWRITE_H
#define CORRAL_PROTO_REWRITE_H

#include "conf/directive.h"
#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>

enum http_rewrite_flag {
    HTTP_REWRITE_NEXT,      /* no flag: on to the next rewrite, then search again */
    HTTP_REWRITE_LAST,      /* stop rewriting, search the locations again */
    HTTP_REWRITE_BREAK,     /* stop rewriting, stay in this location */
    HTTP_REWRITE_REDIRECT,  /* 302 to the replacement */
    HTTP_REWRITE_PERMANENT, /* 301 to the replacement */
};

struct http_regex;
struct vars_template;

struct http_rewrite {
    const struct http_regex *regex;          /* matched against the path */
    const struct vars_template *replacement; /* may read the regex's groups */
    enum http_rewrite_flag flag;
    /* The replacement starts with http://, https:// or $scheme: a redirect
     * (302 without a flag), as in nginx. */
    bool absolute;
    /* A `set $name VALUE` line (regex NULL): `replacement` is the value,
     * given to user variable `set_index` (vars.h); its $1... are the
     * groups of `captures` (the location's regex), NULL: none. */
    bool set;
    unsigned set_index;
    const struct http_regex *captures;
};

struct http_rewrites {
    const struct http_rewrite *items;
    size_t count;
};

/* The rewrite lines of one level (server, location) as written: not
 * inherited, as in nginx (a server's run in their own phase). */
struct rewrite_line {
    char *regex, *replacement; /* malloc'd; the replacement may hold $variables and $1... */
    char *name;                /* `set $name VALUE`: name ("$name"), replacement is VALUE;
                                  regex NULL.  NULL: a rewrite line */
    enum http_rewrite_flag flag;
    struct conf_pos regex_pos, replacement_pos;
};

struct rewrite_conf {
    struct rewrite_line *items;
    size_t count;
};

struct vars_buf;

/* The router's phase handlers (router.h): the server's rewrites, and the
 * location's, which ask for a new search when they change the URI
 * (without `break`).  A redirect is answered; a regex that gave up, 500. */
struct router_walk;
int rewrite_server_phase(struct router_walk *w);
int rewrite_location_phase(struct router_walk *w);

/* The module (module.h): the server's and the location's rewrite phases. */
struct http_module;
extern struct http_module rewrite_module;

#endif
