/*
 * router.c: the walk through the phases (router.h): each phase handler in
 * turn, as its verdict says; the location search and the content phase,
 * which are the router's own; answers with a status; the walk that goes
 * on after a hold, and the one an internal redirect starts.
 */
#include "proto/http/router.h"

#include "proto/http/site.h"
#include "proto/tls/acme_challenge.h"

#include <assert.h>

struct router_table router_table;

/* The vhost's own table, or the one with every module. */
static const struct router_table *table_of(const struct http_vhost *vhost)
{
    return vhost != NULL && vhost->router != NULL ? vhost->router : &router_table;
}

/* A URI may be changed and its location searched again this many times;
 * one more is a loop, answered 500 as nginx does. */
#define URI_CHANGES_MAX 10

void router_routed(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    if (ex->_routed)
        return;
    ex->_routed = true;
    ex->_ops->routed(ex, w->received);
}

static void answer(struct router_walk *w, unsigned status)
{
    struct exchange *ex = w->ex;
    router_routed(w);
    if (w->table->answer != NULL)
        w->table->answer(ex, &w->req, status);
    else
        exchange_respond_error(ex, status);
}

/* The index of the first step of `phase` (or of a later one). */
static size_t phase_start(const struct router_table *t, enum router_phase phase)
{
    size_t i = 0;
    while (i < t->step_count && t->steps[i].phase < phase)
        i++;
    return i;
}

/* Fields only: the URI buffers are set up when a rewrite needs them. */
static void walk_init(struct router_walk *w, struct exchange *ex, const struct http_request *req)
{
    w->ex = ex;
    w->table = table_of(ex->vhost);
    w->req = *req;
    w->received = req;
    w->refuse = 0;
    w->searches = 0;
    w->uri_changed = false;
    w->uri.used = false;
}

/* Runs the steps from `i`.  Returns whether the content handler got the
 * request. */
static bool walk(struct router_walk *w, size_t i)
{
    bool content = false;
    const struct router_table *t = w->table;
    while (i < t->step_count) {
        const struct router_step *step = &t->steps[i];
        if (step->phase == ROUTER_ACCESS && w->ex->subrequest) {
            i++;
            continue;
        }
        if (step->phase >= ROUTER_LIMITS)
            router_routed(w);
        int verdict = step->fn(w);
        if (verdict == ROUTER_DONE) {
            content = step->phase == ROUTER_CONTENT;
            break;
        }
        if (verdict != ROUTER_NEXT && verdict != ROUTER_DECLINED) {
            answer(w, (unsigned)verdict);
            break;
        }
        size_t next = i + 1;
        if (verdict == ROUTER_NEXT)
            while (next < t->step_count && t->steps[next].phase == step->phase)
                next++;
        /* Leaving the rewrites with a changed URI: search again. */
        if (step->phase == ROUTER_REWRITE && w->uri_changed &&
            (next == t->step_count || t->steps[next].phase != ROUTER_REWRITE)) {
            w->uri_changed = false;
            next = phase_start(t, ROUTER_FIND_LOCATION);
        }
        i = next;
    }
    if (w->uri.used) {
        vars_buf_free(&w->uri.bufs[0]);
        vars_buf_free(&w->uri.bufs[1]);
    }
    return content;
}

/* ACME HTTP-01 (RFC 8555 §8.3): the key authorization for a token being
 * validated, answered on a plain listener before anything of the server
 * (its `return 301 https://...` included); true when answered. */
static bool acme_http01(struct router_walk *w)
{
    char key_authorization[ACME_CHALLENGE_ANSWER_MAX];
    long n = acme_challenge_lookup(w->req.path.data, w->req.path.len, key_authorization,
                                   sizeof(key_authorization));
    if (n < 0)
        return false;
    router_routed(w);
    exchange_respond(w->ex, 200, "Content-Type: text/plain\r\n", key_authorization, (size_t)n);
    return true;
}

void router_start(struct exchange *ex, const struct http_vhost *vhost,
                  const struct http_request *req, unsigned refuse)
{
    ex->vhost = vhost;
    ex->loc = NULL;
    struct router_walk w;
    walk_init(&w, ex, req);
    assert(w.table->step_count > 0); /* http_module_init() ran */
    w.refuse = refuse;
    /* Only while an order waits for its validation: otherwise one relaxed
     * load. */
    if (acme_challenge_any() && !exchange_tls(ex) && acme_http01(&w))
        return;
    walk(&w, 0);
}

bool router_resume(struct exchange *ex, const struct http_request *req, enum router_phase phase)
{
    struct router_walk w;
    walk_init(&w, ex, req);
    return walk(&w, phase_start(w.table, phase));
}

bool router_resume_at(struct exchange *ex, const struct http_request *req, router_phase_fn at,
                      enum router_phase phase)
{
    struct router_walk w;
    walk_init(&w, ex, req);
    size_t i = phase_start(w.table, phase);
    for (size_t k = i; k < w.table->step_count && w.table->steps[k].phase == phase; k++)
        if (w.table->steps[k].fn == at) {
            i = k;
            break;
        }
    return walk(&w, i);
}

static void release(struct exchange *ex, bool location_only)
{
    const struct router_table *t = table_of(ex->vhost);
    for (size_t i = 0; i < t->release_count; i++)
        if (t->releases[i].location || !location_only)
            t->releases[i].fn(ex);
}

void router_redirect(struct exchange *ex, const struct http_request *req,
                     const struct http_location *named)
{
    release(ex, true);
    ex->data = NULL;
    ex->redirected = true;
    struct router_walk w;
    walk_init(&w, ex, req);
    if (named != NULL) {
        /* No search, but the location's other find-location handlers
         * (compression, timing) see it, as after a search. */
        ex->loc = named;
        size_t search = phase_start(w.table, ROUTER_FIND_LOCATION);
        assert(w.table->steps[search].fn == router_find_location);
        walk(&w, search + 1);
    } else {
        ex->loc = NULL;
        walk(&w, phase_start(w.table, ROUTER_SERVER_REWRITE));
    }
}

void router_end(struct exchange *ex)
{
    release(ex, false);
}

/* ------------------------------------------------------- the core phases */

int router_find_location(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    if (++w->searches > URI_CHANGES_MAX + 1)
        return 500; /* a rewrite loop */
    ex->loc = site_search_location(ex->vhost, w->req.path.data, w->req.path.len);
    return ROUTER_DECLINED; /* the phase's other handlers see it */
}

int router_refuse(struct router_walk *w)
{
    return w->refuse != 0 ? (int)w->refuse : ROUTER_NEXT;
}

int router_content(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct http_location *loc = ex->loc;
    /* None found: the server's own handler, if it has one. */
    const struct http_handler *handler = loc != NULL ? loc->handler : ex->vhost->handler;
    void *data = loc != NULL ? loc->handler_data : ex->vhost->handler_data;
    /* None, or a location of rewrites only, none of which applied. */
    if (handler == NULL)
        return 404;
    ex->_ops->set_handler(ex, handler);
    handler->on_request(ex, &w->req, data);
    return ROUTER_DONE;
}
