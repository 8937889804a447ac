/*
 * rewrite.h: `rewrite REGEX REPLACEMENT [last|break|redirect|permanent]`,
 * `set`, `break` and `if (CONDITION) { ... }` (holding those and
 * `return`) at server and location level, as nginx runs them: one list of
 * steps per level, an if a jump over its block when false and, in a
 * location, a move to its block's location when true (nginx's noname
 * location, which holds the block's other directives), in phases of the
 * router, which searches the locations again for a URI they changed.
 */
#ifndef CORRAL_PROTO_REWRITE_H
#define CORRAL_PROTO_REWRITE_H

#include "conf/directive.h"
#include "proto/http/exchange.h"
#include "proto/policy/return.h" /* struct return_conf */

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
struct http_return;

/* What a step of a level's list is. */
enum http_rewrite_kind {
    HTTP_STEP_REWRITE, /* rewrite REGEX REPLACEMENT [FLAG] */
    HTTP_STEP_SET,     /* set $name VALUE */
    HTTP_STEP_IF,      /* if (CONDITION) { : when false, on to step `end` */
    HTTP_STEP_RETURN,  /* return CODE [TEXT], inside an if */
    HTTP_STEP_BREAK,   /* break: no more steps, and this location */
};

/* An if's condition, as nginx's: */
enum http_if_op {
    HTTP_IF_VALUE,  /* $var: true unless empty or "0" */
    HTTP_IF_EQUAL,  /* $var = TEXT (!=: negated) */
    HTTP_IF_MATCH,  /* $var ~ REGEX, ~* (!~, !~*: negated); its groups for the block */
    HTTP_IF_FILE,   /* -f PATH: a regular file (!-f: negated) */
    HTTP_IF_DIR,    /* -d PATH: a directory */
    HTTP_IF_EXISTS, /* -e PATH: a file, directory or link */
    HTTP_IF_EXEC,   /* -x PATH: executable by its owner */
};

struct http_if {
    enum http_if_op op;
    bool negate;
    const struct vars_template *subject; /* the variable, or the path */
    const struct vars_template *value;   /* HTTP_IF_EQUAL's text */
    const struct http_regex *regex;      /* HTTP_IF_MATCH's */
    size_t end;                          /* the step after the block */
    /* A location's if: the location its block is (nginx's noname one,
     * http_module_build.nested), which the exchange moves to when the
     * condition holds, for the rest of the steps and the phases after;
     * NULL: a server's, which moves nowhere. */
    const struct http_location *loc;
};

struct http_rewrite {
    enum http_rewrite_kind kind;
    const struct http_regex *regex;          /* matched against the path */
    const struct vars_template *replacement; /* may read the regex's groups */
    enum http_rewrite_flag flag;
    /* The replacement starts with http://, https:// or $scheme: a redirect
     * (302 without a flag), as in nginx. */
    bool absolute;
    /* HTTP_STEP_SET: `replacement` is the value, given to user
     * variable `set_index` (vars.h).  A set's value, a return's text and
     * an if's values read the groups of `captures` (the location's
     * regex), NULL: none; or, with `if_groups`, those of the regex of
     * the if they are in. */
    unsigned set_index;
    const struct http_regex *captures;
    bool if_groups;
    const struct http_if *cond;       /* HTTP_STEP_IF */
    const struct http_return *answer; /* HTTP_STEP_RETURN */
};

struct http_rewrites {
    const struct http_rewrite *items;
    size_t count;
};

/* The rewrite lines of one level (server, location) as written, an if's
 * block among them: not inherited, as in nginx (a server's run in their
 * own phase). */
struct rewrite_line {
    enum http_rewrite_kind kind;
    /* malloc'd; the replacement may hold $variables and $1...
     * set: `name` ("$name") and VALUE in `replacement`;
     * if: the variable or path in `name`, the regex of ~ in `regex`, the
     * text of = in `replacement`;
     * return: in `ret` */
    char *regex, *replacement;
    char *name;
    enum http_rewrite_flag flag;
    struct conf_pos regex_pos, replacement_pos;
    enum http_if_op op; /* if */
    bool negate, caseless;
    size_t end; /* if: the line after its block */
    struct return_conf ret;
};

struct rewrite_conf {
    struct rewrite_line *items;
    size_t count;
    bool in_if;     /* an if's block is being applied */
    size_t open_if; /* ...whose line is this one */
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
