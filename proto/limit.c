/*
 * limit.c: the handler in front of a location with limit_req or
 * limit_conn: refuses, delays on a loop timer (the request kept, its body
 * held), or counts the exchange in and hands it to the location's handler.
 */
#include "proto/limit.h"
#include "proto/add_header.h"
#include "proto/vars.h"

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
    bool waiting;  /* the body that comes is kept */
    bool in_timer; /* the timer's callback runs: it frees this after */
    bool ended;    /* limit__exchange_end() came during it */
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

static void refuse(struct exchange *ex, const struct http_request *req,
                   const struct limit_location *loc, unsigned status)
{
    ex->routed = NULL; /* the body that follows goes nowhere */
    exchange_respond_error_adding(ex, req, loc->add_headers, status);
}

static struct limit_exchange *state_of(struct exchange *ex, const struct limit_location *loc)
{
    if (ex->limit == NULL) {
        ex->limit = calloc(1, sizeof(*ex->limit) + loc->conn_count * sizeof(struct limit_hold));
        if (ex->limit != NULL)
            ex->limit->loc = loc;
    }
    return ex->limit;
}

static void release_holds(struct limit_exchange *le)
{
    for (size_t i = 0; i < le->hold_count; i++)
        limit_zone_conn_end(le->holds[i].zone, le->holds[i].node);
    le->hold_count = 0;
}

/* limit_conn, then the location's handler. */
static void pass(struct exchange *ex, const struct http_request *req,
                 const struct limit_location *loc)
{
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->conn_count; i++) {
        const struct limit_conn *c = &loc->conns[i];
        size_t len = eval_key(ex, req, c->key, key);
        if (len == SIZE_MAX)
            continue;
        struct limit_exchange *le = state_of(ex, loc);
        if (le == NULL) {
            refuse(ex, req, loc, 500);
            return;
        }
        struct limit_node *node = limit_zone_conn(c->zone, key, len, c->max);
        if (node == NULL) {
            release_holds(le);
            refuse(ex, req, loc, loc->conn_status);
            return;
        }
        le->holds[le->hold_count++] = (struct limit_hold){c->zone, node};
    }
    ex->routed = loc->handler;
    loc->handler->on_request(ex, req, loc->handler_data);
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
    struct limit_exchange *le = ex->limit;
    corral_timer_free(le->timer); /* safe inside its own callback */
    le->timer = NULL;
    le->in_timer = true;
    /* The framer may deliver body bytes at once: still kept, until the
     * handler has the request. */
    exchange_resume_body(ex);
    if (le->waiting && !le->ended) {
        le->waiting = false;
        pass(ex, &le->req, le->loc);
        /* What the body brought meanwhile, as the framer would have. */
        if (!le->ended && le->body_len > 0)
            exchange_forward_body(ex, le->body, le->body_len);
        if (!le->ended && le->trailers != NULL)
            exchange_forward_body_trailers(ex, le->trailers, le->trailers_len);
        if (!le->ended && le->body_ended)
            exchange_forward_body_end(ex);
    }
    free_wait(le);
    le->in_timer = false;
    if (le->ended)
        free(le);
}

static const struct http_handler waiting_handler;

/* Holds the request for `ms`: a timer on the exchange's loop, the
 * request copied, the body paused. */
static void wait_for(struct exchange *ex, const struct http_request *req,
                     const struct limit_location *loc, uint64_t ms)
{
    struct limit_exchange *le = state_of(ex, loc);
    if (le == NULL || (le->req_block = http_request_copy(req, &le->req)) == NULL ||
        corral_timer_new(exchange_loop(ex), on_waited, ex, &le->timer) != 0) {
        if (le != NULL)
            free_wait(le);
        refuse(ex, req, loc, 500);
        return;
    }
    /* What stands in front (limit_handler, a rewrite) forwards to
     * ex->routed: to what keeps the body while the request waits. */
    ex->routed = &waiting_handler;
    le->waiting = true;
    corral_timer_start(le->timer, ms);
    exchange_pause_body(ex);
}

static void limit_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    const struct limit_location *loc = data;
    uint64_t now_ms = corral_monotonic_ns() / 1000000;
    int64_t delay = 0;
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->req_count; i++) {
        const struct limit_req *r = &loc->reqs[i];
        size_t len = eval_key(ex, req, r->key, key);
        if (len == SIZE_MAX)
            continue;
        int64_t ms = limit_zone_req(r->zone, key, len, now_ms, r->rate, r->burst, r->delay);
        if (ms < 0) {
            refuse(ex, req, loc, loc->req_status);
            return;
        }
        if (ms > delay)
            delay = ms;
    }
    if (delay > 0)
        wait_for(ex, req, loc, (uint64_t)delay);
    else
        pass(ex, req, loc);
}

/* A waiting request that cannot wait on: answered with `status`. */
static void give_up(struct exchange *ex, unsigned status)
{
    const struct http_add_headers *add_headers = ex->limit->loc->add_headers;
    free_wait(ex->limit);
    ex->routed = NULL;
    exchange_respond_error_adding(ex, NULL, add_headers, status);
}

/* ex->routed while a request waits: what comes of its body is kept for
 * the handler that gets the request after (on_waited()). */
static void waiting_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct limit_exchange *le = ex->limit;
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
    if (ex->limit != NULL)
        ex->limit->body_ended = true;
}

/* The framer bounds them (HTTP/2: by the header list's limit). */
static void waiting_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct limit_exchange *le = ex->limit;
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
    if (ex->limit != NULL)
        free_wait(ex->limit);
    ex->routed = NULL;
}

/* Never a location's handler: no on_request. */
static const struct http_handler waiting_handler = {
    .name = "limit delay",
    .on_body = waiting_on_body,
    .on_body_end = waiting_on_body_end,
    .on_body_trailers = waiting_on_body_trailers,
    .on_abort = waiting_on_abort,
};

/* Its limits checked, the exchange goes on to ex->routed: the location's
 * handler, or waiting_handler while it waits. */
const struct http_handler limit_handler = {
    .name = "limit",
    .on_request = limit_on_request,
    EXCHANGE_FORWARD_CALLBACKS,
};

void limit_handler_for(const struct http_handler *inner, struct http_handler *out)
{
    exchange_forward_for(&limit_handler, inner, out);
}

void limit__exchange_end(struct exchange *ex)
{
    struct limit_exchange *le = ex->limit;
    ex->limit = NULL;
    release_holds(le);
    if (le->in_timer) {
        le->ended = true; /* on_waited() frees it */
        return;
    }
    free_wait(le);
    free(le);
}
