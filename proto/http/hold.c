/*
 * hold.c: a held walk (hold.h): the request copied, and a stand-in
 * handler that keeps what comes of the body until the walk goes on.
 */
#include "proto/http/hold.h"

#include "proto/http/site.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void hold_free(struct http_hold *h)
{
    h->held = false;
    free(h->req_block);
    h->req_block = NULL;
    body_store_free(&h->body);
    free(h->trailers);
    h->trailers = NULL;
    h->trailers_len = 0;
    h->body_ended = false;
}

static void hold_give_up(struct exchange *ex, struct http_hold *h, unsigned status)
{
    hold_free(h);
    exchange_set_data(ex, NULL);
    h->give_up(ex, status);
}

/* The exchange's handler while it is held. */
static void held_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct http_hold *h = exchange_data(ex);
    if (h == NULL || !h->held)
        return;
    int err = body_store_append(&h->body, data, len);
    if (err != 0)
        hold_give_up(ex, h, err == -EFBIG ? 503 : 500);
}

static void held_on_body_end(struct exchange *ex)
{
    struct http_hold *h = exchange_data(ex);
    if (h != NULL && h->held)
        h->body_ended = true;
}

/* The framer bounds them (HTTP/2: by the header list's limit). */
static void held_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct http_hold *h = exchange_data(ex);
    if (h == NULL || !h->held || h->trailers != NULL) /* one section per request */
        return;
    h->trailers = malloc(len > 0 ? len : 1);
    if (h->trailers == NULL) {
        hold_give_up(ex, h, 500);
        return;
    }
    memcpy(h->trailers, lines, len);
    h->trailers_len = len;
}

/* The owner's release frees the rest (router_end()). */
static void held_on_abort(struct exchange *ex)
{
    exchange_set_data(ex, NULL);
}

/* Never a location's handler: no on_request. */
static const struct http_handler held_handler = {
    .name = "held",
    .on_body = held_on_body,
    .on_body_end = held_on_body_end,
    .on_body_trailers = held_on_body_trailers,
    .on_abort = held_on_abort,
};

/* The same before a handler that takes no body: the framer drops it. */
static const struct http_handler held_bodyless = {
    .name = "held",
    .on_abort = held_on_abort,
};

int hold_begin(struct http_hold *h, struct router_walk *w,
               void (*give_up)(struct exchange *ex, unsigned status))
{
    struct exchange *ex = w->ex;
    hold_free(h);
    h->body = BODY_STORE_INIT;
    h->body.mem_max = HOLD_BODY_MAX;
    h->give_up = give_up;
    h->req_block = exchange_request_copy(&w->req, &h->req);
    if (h->req_block == NULL)
        return 500;
    h->held = true;
    exchange_set_data(ex, h);
    const struct http_handler *next = ex->loc != NULL ? ex->loc->handler : NULL;
    ex->_ops->set_handler(ex,
                          next != NULL && next->on_body != NULL ? &held_handler : &held_bodyless);
    exchange_pause_body(ex);
    return ROUTER_DONE;
}

bool hold_resume(struct http_hold *h, struct exchange *ex, router_phase_fn at,
                 enum router_phase phase)
{
    h->resuming = true;
    /* The framer may deliver body bytes at once: still kept, until the
     * handler has the request. */
    exchange_resume_body(ex);
    if (h->held && !h->ended) {
        h->held = false;
        exchange_set_data(ex, NULL);
        bool handed = router_resume_at(ex, &h->req, at, phase);
        /* What the body brought meanwhile, as the framer would have. */
        const struct http_handler *next = handed ? ex->loc->handler : NULL;
        if (next != NULL && !h->ended && h->body.mem_len > 0 && next->on_body != NULL)
            next->on_body(ex, h->body.mem, h->body.mem_len);
        if (next != NULL && !h->ended && h->trailers != NULL && next->on_body_trailers != NULL)
            next->on_body_trailers(ex, h->trailers, h->trailers_len);
        if (next != NULL && !h->ended && h->body_ended && next->on_body_end != NULL)
            next->on_body_end(ex);
    }
    hold_free(h);
    h->resuming = false;
    return !h->ended;
}

bool hold_release(struct http_hold *h)
{
    if (h->resuming) {
        h->ended = true;
        return false;
    }
    hold_free(h);
    return true;
}
