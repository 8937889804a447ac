/*
 * router.h: the one way a request goes from its head to the handler that
 * answers it, whatever framer parsed it: a walk through ordered phases,
 * each a list of phase handlers that the modules declare (module.h; the
 * list of modules is proto/modules.c):
 *
 *     post-read -> server rewrite -> find location -> rewrite
 *               -> access -> limits -> content
 *
 * A handler returns ROUTER_DECLINED (the next handler of its phase),
 * ROUTER_NEXT (the first handler of the next phase), ROUTER_DONE (it
 * answered, or holds the exchange to go on later with router_resume()) or
 * a status to answer with.  A URI that a location's rewrite changed goes
 * back to the location search; an internal redirect (error_page) walks
 * again from the server rewrites (router_redirect()).  Framers call
 * router_start() and nothing else to route.
 */
#ifndef CORRAL_PROTO_ROUTER_H
#define CORRAL_PROTO_ROUTER_H

#include "proto/http/exchange.h"
#include "proto/http/vars.h"

#include <stdbool.h>
#include <stddef.h>

enum router_phase {
    ROUTER_POST_READ,      /* the client's address: first walk only */
    ROUTER_SERVER_REWRITE, /* the server's rewrites */
    ROUTER_FIND_LOCATION,  /* the location for the URI (ex->loc) */
    ROUTER_REWRITE,        /* the location's rewrites; a changed URI: search again */
    ROUTER_ACCESS,         /* real_ip, allow/deny */
    ROUTER_LIMITS,         /* limit_req, limit_conn */
    ROUTER_CONTENT,        /* the location's handler gets the request */
    ROUTER_PHASES,
};

/* What a phase handler returns, besides a status (300..599) to answer
 * with (exchange_respond_error(), with the location's add_header). */
#define ROUTER_NEXT     0 /* its phase is done: on to the next phase */
#define ROUTER_DECLINED 1 /* on to the next handler of the phase */
#define ROUTER_DONE     2 /* answered, or held: the walk stops here */

/* The rewritten URI (rewrite.c), in two buffers that take turns, as a
 * replacement reads the URI it replaces; set up only when a rewrite
 * changes the URI. */
struct router_uri {
    struct vars_buf bufs[2];
    int cur;
    bool used;
    size_t path_len;
    char small[2][512];
};

struct router_table;

/* One walk, on the stack of whoever started it: valid only while its
 * phase handlers run. */
struct router_walk {
    struct exchange *ex;
    const struct router_table *table;    /* the vhost's (http_vhost.router), else router_table */
    struct http_request req;             /* as the walk has it: its URI maybe rewritten */
    const struct http_request *received; /* as the walk got it: for the log */
    unsigned refuse;   /* the framer refuses the request (413): answered once found */
    unsigned searches; /* location searches so far */
    bool uri_changed;  /* a location's rewrite changed the URI: search again */
    struct router_uri uri;
};

typedef int (*router_phase_fn)(struct router_walk *w);

struct router_step {
    enum router_phase phase;
    router_phase_fn fn;
};

struct router_release {
    void (*fn)(struct exchange *ex);
    bool location; /* it holds it for the location: an internal redirect lets go too */
};

#define ROUTER_STEPS_MAX    32
#define ROUTER_RELEASES_MAX 16

/* What the router walks, built from the list of modules (module.h): the
 * phase handlers in the order they run, grouped by phase; what each
 * module releases when an exchange ends or is redirected; and the module
 * that makes the router's own answers (NULL: exchange_respond_error()).
 * `router_table`, with every module, is built once before any exchange
 * (http_module_init()); a site may have its own without the modules its
 * config leaves off (http_module_table(), http_vhost.router), so that a
 * module nothing turns on costs its requests nothing. */
struct router_table {
    struct router_step steps[ROUTER_STEPS_MAX];
    size_t step_count;
    struct router_release releases[ROUTER_RELEASES_MAX];
    size_t release_count;
    void (*answer)(struct exchange *ex, const struct http_request *req, unsigned status);
};
extern struct router_table router_table;

struct http_vhost;
struct http_location;

/* Routes `req`, which came to `vhost` (site_route_vhost()), and hands it to
 * its location's handler, or answers it.  `refuse` non-zero: the framer
 * refuses the request with that status (a body over client_max_body_size),
 * answered once its location is known, for its error page. */
void router_start(struct exchange *ex, const struct http_vhost *vhost,
                  const struct http_request *req, unsigned refuse);

/* Goes on with a walk that a phase handler of `phase` held (ROUTER_DONE),
 * from that phase's first handler, with `req` (a copy the handler kept).
 * Returns whether the location's handler got the request (else it was
 * answered). */
bool router_resume(struct exchange *ex, const struct http_request *req, enum router_phase phase);

/* The same from the step of `phase` whose handler is `at` (the holder
 * itself, which knows by its state that it is done), or from the phase's
 * first step when there is none such. */
bool router_resume_at(struct exchange *ex, const struct http_request *req, router_phase_fn at,
                      enum router_phase phase);

/* An internal redirect of an exchange whose response has not begun: what
 * modules held for the old location is released and `req` walks again
 * from the server rewrites, or, to `named` ("@name") when not NULL, from
 * the handlers of the find-location phase that follow the search.  No
 * request body goes to the handler it reaches. */
void router_redirect(struct exchange *ex, const struct http_request *req,
                     const struct http_location *named);

/* Tells the framer that the exchange is routed as far as it will be before
 * it is answered (exchange_ops.routed: its access log), once.  The router
 * does so before the limits and before any answer of its own; a phase
 * handler that answers by itself calls it first. */
void router_routed(struct router_walk *w);

/* Releases what modules hold for the exchange: framers call it once the
 * exchange is over (ended or aborted). */
void router_end(struct exchange *ex);

/* The core phase handlers (router.c): the search, which sets ex->loc;
 * the framer's refusal (router_start()), once the location is known; the
 * location's handler. */
int router_find_location(struct router_walk *w);
int router_refuse(struct router_walk *w);
int router_content(struct router_walk *w);

#endif
