/*
 * limit.c: the limits phase of the router (router.h), for a location with
 * limit_req or limit_conn: refuses, delays on a loop timer (the request
 * kept, its body held) and then goes on with the walk, or counts the
 * exchange in.
 */
#include "proto/policy/limit.h"
#include "proto/policy/add_header.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"

#include <stdlib.h>
#include <string.h>

/* Body bytes kept while a request waits: the framer stops reading once
 * it is paused, so only what it had read already comes; more is not a
 * client to serve. */
#define WAIT_BODY_MAX (1024u * 1024)

struct limit_hold {
    struct limit_zone *zone;
    struct limit_node *node;
};

struct limit_exchange {
    const struct limit_location *loc;
    /* While a delayed request waits: its timer, a copy of the request,
     * and what came of its body meanwhile. */
    corral_timer *timer;
    struct http_request req;
    char *req_block;
    char *body;
    size_t body_len, body_cap;
    char *trailers; /* NULL: none came */
    size_t trailers_len;
    bool body_ended;
    bool req_checked; /* limit_req passed it (after its delay) */
    bool waiting;     /* the body that comes is kept */
    bool in_timer;    /* the timer's callback runs: it frees this after */
    bool ended;       /* limit_release() came during it */
    size_t hold_count;
    struct limit_hold holds[];
};

/* The key of `t` for the request in `buf`; its length, or SIZE_MAX when
 * the key is empty or too long (then it is not limited, as in nginx). */
static size_t eval_key(struct exchange *ex, const struct http_request *req,
                       const struct vars_template *t, char *buf)
{
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    size_t len = vars_eval_into(t, &ctx, buf, LIMIT_KEY_MAX);
    return len == 0 || len > LIMIT_KEY_MAX ? SIZE_MAX : len;
}

static struct limit_exchange *state_of(struct exchange *ex, const struct limit_location *loc)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL) {
        le = calloc(1, sizeof(*le) + loc->conn_count * sizeof(struct limit_hold));
        if (le != NULL)
            le->loc = loc;
        exchange_set_ctx(ex, limit_module.slot, le);
    }
    return le;
}

static void release_holds(struct limit_exchange *le)
{
    for (size_t i = 0; i < le->hold_count; i++)
        limit_zone_conn_end(le->holds[i].zone, le->holds[i].node);
    le->hold_count = 0;
}

/* limit_conn: on to the next phase, or a refusal. */
static int count_in(struct router_walk *w, const struct limit_location *loc)
{
    struct exchange *ex = w->ex;
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->conn_count; i++) {
        const struct limit_conn *c = &loc->conns[i];
        size_t len = eval_key(ex, &w->req, c->key, key);
        if (len == SIZE_MAX)
            continue;
        struct limit_exchange *le = state_of(ex, loc);
        if (le == NULL)
            return 500;
        struct limit_node *node = limit_zone_conn(c->zone, key, len, c->max);
        if (node == NULL) {
            release_holds(le);
            return (int)loc->conn_status;
        }
        le->holds[le->hold_count++] = (struct limit_hold){c->zone, node};
    }
    return ROUTER_NEXT;
}

static void free_wait(struct limit_exchange *le)
{
    le->waiting = false;
    if (le->timer != NULL)
        corral_timer_free(le->timer);
    le->timer = NULL;
    free(le->req_block);
    le->req_block = NULL;
    free(le->body);
    le->body = NULL;
    le->body_len = le->body_cap = 0;
    free(le->trailers);
    le->trailers = NULL;
    le->trailers_len = 0;
}

static void on_waited(corral_timer *timer, void *arg)
{
    (void)timer;
    struct exchange *ex = arg;
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    corral_timer_free(le->timer); /* safe inside its own callback */
    le->timer = NULL;
    le->in_timer = true;
    /* The framer may deliver body bytes at once: still kept, until the
     * handler has the request. */
    exchange_resume_body(ex);
    if (le->waiting && !le->ended) {
        le->waiting = false;
        bool handed = router_resume(ex, &le->req, ROUTER_LIMITS);
        /* What the body brought meanwhile, as the framer would have. */
        const struct http_handler *h = handed ? ex->loc->handler : NULL;
        if (h != NULL && !le->ended && le->body_len > 0 && h->on_body != NULL)
            h->on_body(ex, le->body, le->body_len);
        if (h != NULL && !le->ended && le->trailers != NULL && h->on_body_trailers != NULL)
            h->on_body_trailers(ex, le->trailers, le->trailers_len);
        if (h != NULL && !le->ended && le->body_ended && h->on_body_end != NULL)
            h->on_body_end(ex);
    }
    free_wait(le);
    le->in_timer = false;
    if (le->ended)
        free(le);
}

static const struct http_handler waiting_handler, waiting_bodyless;

/* Holds the request for `ms`: a timer on the exchange's loop, the
 * request copied, the body paused. */
static int wait_for(struct router_walk *w, const struct limit_location *loc, uint64_t ms)
{
    struct exchange *ex = w->ex;
    struct limit_exchange *le = state_of(ex, loc);
    if (le == NULL || (le->req_block = exchange_request_copy(&w->req, &le->req)) == NULL ||
        corral_timer_new(exchange_loop(ex), on_waited, ex, &le->timer) != 0) {
        if (le != NULL)
            free_wait(le);
        return 500;
    }
    /* What comes of the body meanwhile is kept, if the handler takes one. */
    ex->_ops->set_handler(ex,
                          ex->loc->handler->on_body != NULL ? &waiting_handler : &waiting_bodyless);
    le->req_checked = true;
    le->waiting = true;
    corral_timer_start(le->timer, ms);
    exchange_pause_body(ex);
    return ROUTER_DONE;
}

int limit_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct limit_location *loc = ex->loc != NULL ? ex->loc->limits : NULL;
    if (loc == NULL || ex->loc->handler == NULL)
        return ROUTER_NEXT;
    const struct limit_exchange *held = exchange_ctx(ex, limit_module.slot);
    if (held != NULL && held->req_checked)
        return count_in(w, loc); /* back from its delay */
    uint64_t now_ms = corral_monotonic_ns() / 1000000;
    int64_t delay = 0;
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->req_count; i++) {
        const struct limit_req *r = &loc->reqs[i];
        size_t len = eval_key(ex, &w->req, r->key, key);
        if (len == SIZE_MAX)
            continue;
        int64_t ms = limit_zone_req(r->zone, key, len, now_ms, r->rate, r->burst, r->delay);
        if (ms < 0)
            return (int)loc->req_status;
        if (ms > delay)
            delay = ms;
    }
    if (delay > 0)
        return wait_for(w, loc, (uint64_t)delay);
    return count_in(w, loc);
}

/* A waiting request that cannot wait on: answered with `status`. */
static void give_up(struct exchange *ex, unsigned status)
{
    free_wait(exchange_ctx(ex, limit_module.slot));
    add_header_respond_error(ex, NULL, ex->loc->add_headers, status);
}

/* The exchange's handler while its request waits: what comes of its body
 * is kept for the handler that gets the request after (on_waited()). */
static void waiting_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL)
        return;
    if (len > WAIT_BODY_MAX - le->body_len) {
        give_up(ex, 503);
        return;
    }
    if (le->body_len + len > le->body_cap) {
        size_t cap = le->body_cap > 0 ? le->body_cap : 4096;
        while (cap < le->body_len + len)
            cap *= 2;
        char *grown = realloc(le->body, cap);
        if (grown == NULL) {
            give_up(ex, 500);
            return;
        }
        le->body = grown;
        le->body_cap = cap;
    }
    memcpy(le->body + le->body_len, data, len);
    le->body_len += len;
}

static void waiting_on_body_end(struct exchange *ex)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le != NULL)
        le->body_ended = true;
}

/* The framer bounds them (HTTP/2: by the header list's limit). */
static void waiting_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL || le->trailers != NULL) /* one section per request */
        return;
    le->trailers = malloc(len > 0 ? len : 1);
    if (le->trailers == NULL) {
        give_up(ex, 500);
        return;
    }
    memcpy(le->trailers, lines, len);
    le->trailers_len = len;
}

static void waiting_on_abort(struct exchange *ex)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le != NULL)
        free_wait(le);
}

/* Never a location's handler: no on_request. */
static const struct http_handler waiting_handler = {
    .name = "limit delay",
    .on_body = waiting_on_body,
    .on_body_end = waiting_on_body_end,
    .on_body_trailers = waiting_on_body_trailers,
    .on_abort = waiting_on_abort,
};

/* The same before a handler that takes no body: the framer drops it. */
static const struct http_handler waiting_bodyless = {
    .name = "limit delay",
    .on_abort = waiting_on_abort,
};

void limit_release(struct exchange *ex)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL)
        return;
    exchange_set_ctx(ex, limit_module.slot, NULL);
    release_holds(le);
    if (le->in_timer) {
        le->ended = true; /* on_waited() frees it */
        return;
    }
    free_wait(le);
    free(le);
}

static const struct http_phase_handler limit_phases[] = {
    {ROUTER_LIMITS, limit_phase},
};

struct http_module limit_module = {
    .name = "limit",
    .phases = limit_phases,
    .phase_count = 1,
    .slots = 1,
    .release = limit_release,
    .release_on_redirect = true,
};
