/*
 * hold.h: a walk that a phase handler holds (ROUTER_DONE, router.h) until
 * what it waits for is over: a limit's delay, an authentication
 * subrequest.  The request is copied and its body paused; what the framer
 * had read of the body already, its trailers and its end are kept, and
 * handed to the location's handler once the walk goes on.
 */
#ifndef CORRAL_PROTO_HOLD_H
#define CORRAL_PROTO_HOLD_H

#include "proto/http/body_store.h"
#include "proto/http/router.h"

#include <stdbool.h>
#include <stddef.h>

/* Body bytes kept while a request is held: the framer stops reading once
 * the body is paused, so only what it had read already comes; more is
 * not a client to serve (503). */
#define HOLD_BODY_MAX (1024u * 1024)

struct http_hold {
    struct http_request req; /* the request, as the walk had it */
    char *req_block;
    struct body_store body; /* in memory only, up to HOLD_BODY_MAX */
    char *trailers;         /* NULL: none came */
    size_t trailers_len;
    bool body_ended;
    bool held;     /* between hold_begin() and the walk going on */
    bool resuming; /* hold_resume() runs */
    bool ended;    /* hold_release() came while it ran */
    /* Answers the exchange when it cannot be held on (503: too much
     * body, 500: out of memory), as its owner answers (add_header). */
    void (*give_up)(struct exchange *ex, unsigned status);
};

/* Holds the walk `w` in `h` (zeroed, or released): returns ROUTER_DONE,
 * or 500 when out of memory.  Until the walk goes on the exchange's data
 * is `h`. */
int hold_begin(struct http_hold *h, struct router_walk *w,
               void (*give_up)(struct exchange *ex, unsigned status));

/* Goes on with the held walk at the step whose handler is `at` (its
 * phase's first step when the exchange's site has no such step), and
 * gives the location's handler what came of the body.  Returns false
 * when the exchange ended meanwhile (hold_release() came): the owner,
 * which kept its state for this, frees it now. */
bool hold_resume(struct http_hold *h, struct exchange *ex, router_phase_fn at,
                 enum router_phase phase);

/* Lets go of what `h` keeps.  Returns false when hold_resume() runs:
 * the owner's state must live until it returns. */
bool hold_release(struct http_hold *h);

#endif
