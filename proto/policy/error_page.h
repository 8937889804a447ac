/*
 * error_page.h: nginx's `error_page CODE... [=[RESPONSE]] URI` for corral's
 * own error answers (exchange_respond_error()): an internal redirect to a
 * URI of the same server, or a redirect of the client to a URL.
 */
#ifndef CORRAL_PROTO_ERROR_PAGE_H
#define CORRAL_PROTO_ERROR_PAGE_H

#include "conf/directive.h"
#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>

struct vars_template;
struct http_location;

/* One code's page. */
struct http_error_page {
    unsigned status; /* the error answered, 300..599 */
    /* What the client gets: ERROR_PAGE_KEEP the error's status, 0 ("=")
     * the status the page answers with, else this one ("=RESPONSE"). */
    int response;
    /* Evaluated when the error happens: starting with "/", the URI to
     * redirect to inside the server (with its own "?args", if any); else
     * the Location of a redirect of the client. */
    const struct vars_template *uri;
    /* "@name": the named location the request goes to, its URI kept;
     * NULL: `uri` says. */
    const struct http_location *named;
};

#define ERROR_PAGE_KEEP (-1)

/* A level's error_page lines, one item per code. */
struct http_error_pages {
    const struct http_error_page *items;
    size_t count;
};

/* error_page CODE... [=[RESPONSE]] URI as written, one item per code,
 * one level's (top level, server, location).  A level with none takes
 * its parent's (nginx's rule: one with error_page of its own takes none
 * of its parent's), which it then does not own (`inherited`).  The
 * "@name" an item names is checked by conf/ (error_page_directives.c):
 * a location of each server whose pages they are. */
struct error_page_line {
    unsigned status;
    int response; /* -1: no "=" (the error's status); 0: "="; else =RESPONSE */
    char *uri;    /* malloc'd; may hold $variables */
    struct conf_pos uri_pos;
};

struct error_page_conf {
    struct error_page_line *items;
    size_t count;
    bool inherited;
};

/* The router's phase handler (router.h), once the server and again once
 * the location is known: when the exchange has error pages (its
 * location's, or its server's with none), keeps what a redirect needs of
 * the request, once per exchange (the request is gone when, say, a proxy
 * fails), and becomes the exchange's error_hook.  That answers `status`
 * with the exchange's error page, when it has one for it and none was
 * served for the exchange yet (nginx's recursive_error_pages off).  An
 * internal redirect runs from the loop, after the caller has returned:
 * the handler that failed lets go of the exchange as after any answer,
 * and the router walks again with the page's URI (router_redirect(): no
 * request body).  The hook returns false when the built-in answer is the
 * one to send. */
struct router_walk;
int error_page_phase(struct router_walk *w);

/* The exchange ends: frees what error_page_phase() kept.  The router calls
 * it (router_end()). */
void error_page_release(struct exchange *ex);

/* The module (module.h): its directive, its struct per level, the pages
 * it builds for each location and server (a "@name" found with
 * http_module_build.named), its phase handler, its status filter, what
 * it keeps per exchange. */
struct http_module;
extern struct http_module error_page_module;

#endif
