/*
 * subrequest.c: subrequests (subrequest.h): an exchange whose framer is
 * this file, which keeps the response head and drops the body.
 */
#include "proto/http/subrequest.h"

#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct subrequest {
    struct exchange ex; /* first: subrequest_of() casts */
    const struct http_handler *handler;
    subrequest_done_fn done;
    void *arg;
    corral_timer *timer; /* tells `done` from the loop */
    char *headers;       /* the response's header lines */
    size_t headers_len;
    char *body; /* what was kept of the body, up to body_max */
    size_t body_len, body_max;
    bool body_over; /* more came, or memory ran out */
    unsigned status;
    bool started, over;
    bool handler_owns;    /* its handler runs: it is told of a cut-off */
    struct http_conn own; /* a detached one's connection */
};

static const struct exchange_ops subrequest_ops;

struct subrequest *subrequest_of(const struct exchange *ex)
{
    return ex->_ops == &subrequest_ops ? (struct subrequest *)(uintptr_t)ex : NULL;
}

static struct subrequest *sub_of(struct exchange *ex)
{
    assert(ex->_ops == &subrequest_ops);
    return (struct subrequest *)ex;
}

/* Over: `done` is told from the loop, once. */
static void finish(struct subrequest *sr, unsigned status)
{
    if (sr->over)
        return;
    sr->over = true;
    sr->status = status;
    sr->handler_owns = false;
    corral_timer_start(sr->timer, 0);
}

static void on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct subrequest *sr = arg;
    sr->done(sr, sr->arg);
}

static void sub_begin(struct exchange *ex, unsigned status, const char *headers, size_t len,
                      int64_t content_length, struct http_str codings)
{
    (void)content_length, (void)codings;
    struct subrequest *sr = sub_of(ex);
    if (sr->started || status < 200) /* interim answers: the final one follows */
        return;
    sr->started = true;
    sr->status = status;
    free(sr->headers);
    sr->headers = malloc(len + 1);
    if (sr->headers != NULL) {
        memcpy(sr->headers, headers, len);
        sr->headers_len = len;
    }
}

/* The body is kept as far as its owner wants it, else dropped. */
static void sub_write(struct exchange *ex, const char *data, size_t len)
{
    struct subrequest *sr = sub_of(ex);
    if (sr->body_max == 0 || sr->body_over)
        return;
    if (len > sr->body_max - sr->body_len) {
        sr->body_over = true;
        return;
    }
    if (sr->body == NULL && (sr->body = malloc(sr->body_max)) == NULL) {
        sr->body_over = true;
        return;
    }
    memcpy(sr->body + sr->body_len, data, len);
    sr->body_len += len;
}

static void sub_writev(struct exchange *ex, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        sub_write(ex, iov[i].iov_base, iov[i].iov_len);
}

static void sub_end(struct exchange *ex, const char *trailers, size_t len)
{
    (void)trailers, (void)len;
    struct subrequest *sr = sub_of(ex);
    finish(sr, sr->started ? sr->status : 0);
}

/* Its handler cut it off. */
static void sub_abort(struct exchange *ex)
{
    finish(sub_of(ex), 0);
}

static bool sub_started(const struct exchange *ex)
{
    return ((const struct subrequest *)ex)->started;
}

static bool sub_backed_up(const struct exchange *ex)
{
    (void)ex;
    return false;
}

/* It has no body to pause, and nothing to tunnel. */
static void sub_nothing(struct exchange *ex)
{
    (void)ex;
}

static void sub_tunnel_write(struct exchange *ex, const char *data, size_t len)
{
    (void)ex, (void)data, (void)len;
}

static void sub_tunnel(struct exchange *ex)
{
    finish(sub_of(ex), 0);
}

static void sub_set_handler(struct exchange *ex, const struct http_handler *handler)
{
    struct subrequest *sr = sub_of(ex);
    sr->handler = handler;
    sr->handler_owns = handler != NULL && !sr->over;
}

/* Subrequests are not logged, as nginx's log_subrequest off. */
static void sub_routed(struct exchange *ex, const struct http_request *req)
{
    (void)ex, (void)req;
}

static const struct exchange_ops subrequest_ops = {
    .begin = sub_begin,
    .write = sub_write,
    .writev = sub_writev,
    .end = sub_end,
    .abort = sub_abort,
    .response_started = sub_started,
    .backed_up = sub_backed_up,
    .pause_body = sub_nothing,
    .resume_body = sub_nothing,
    .tunnel = sub_tunnel,
    .tunnel_write = sub_tunnel_write,
    .tunnel_close = sub_nothing,
    .set_handler = sub_set_handler,
    .routed = sub_routed,
};

static struct subrequest *start(struct exchange *parent, const struct http_request *req,
                                const char *uri, size_t len, size_t body_max, bool detached,
                                subrequest_done_fn done, void *arg)
{
    struct subrequest *sr = calloc(1, sizeof(*sr));
    if (sr == NULL)
        return NULL;
    if (corral_timer_new(exchange_loop(parent), on_timer, sr, &sr->timer) != 0) {
        free(sr);
        return NULL;
    }
    sr->done = done;
    sr->arg = arg;
    sr->body_max = body_max;
    sr->ex._ops = &subrequest_ops;
    sr->ex.conn = parent->conn;
    if (detached) {
        const struct http_conn *c = parent->conn;
        sr->own = (struct http_conn){.site = c->site,
                                     .framer = c->framer,
                                     .tls = c->tls,
                                     .loop = exchange_loop(parent),
                                     .worker = exchange_worker(parent)};
        sr->ex.conn = &sr->own;
    }
    sr->ex.client = parent->client;
    sr->ex.subrequest = true;
    const char *query = memchr(uri, '?', len);
    struct http_request sub = *req;
    sub.method = (struct http_str){"GET", 3};
    sub.target = (struct http_str){uri, len};
    sub.path = (struct http_str){uri, query != NULL ? (size_t)(query - uri) : len};
    sub.head = false;
    sub.has_body = false;
    sub.has_content_length = false;
    sub.content_length = 0;
    sub.expect_continue = false;
    sub.upgrade = false;
    sub.upgrade_protocol = (struct http_str){NULL, 0};
    router_start(&sr->ex, parent->vhost, &sub, 0);
    return sr;
}

struct subrequest *subrequest_start(struct exchange *parent, const struct http_request *req,
                                    const char *uri, size_t len, size_t body_max,
                                    subrequest_done_fn done, void *arg)
{
    return start(parent, req, uri, len, body_max, false, done, arg);
}

struct subrequest *subrequest_start_detached(struct exchange *parent,
                                             const struct http_request *req, const char *uri,
                                             size_t len, subrequest_done_fn done, void *arg)
{
    return start(parent, req, uri, len, 0, true, done, arg);
}

unsigned subrequest_status(const struct subrequest *sr)
{
    return sr->over ? sr->status : 0;
}

const char *subrequest_body(const struct subrequest *sr, size_t *len)
{
    *len = sr->body_len;
    if (sr->body_over)
        return NULL;
    return sr->body != NULL ? sr->body : "";
}

struct exchange *subrequest_exchange(struct subrequest *sr)
{
    return &sr->ex;
}

bool subrequest_header(const struct subrequest *sr, const char *name, size_t len,
                       struct http_str *out)
{
    const char *h = sr->headers;
    size_t n = h != NULL ? sr->headers_len : 0;
    for (size_t i = 0; i < n;) {
        size_t eol = i;
        while (eol < n && h[eol] != '\n')
            eol++;
        size_t stop = eol;
        if (stop > i && h[stop - 1] == '\r')
            stop--;
        size_t colon = i;
        while (colon < stop && h[colon] != ':')
            colon++;
        if (colon < stop && vars_field_name_is((struct http_str){h + i, colon - i}, name, len)) {
            *out = http_trim((struct http_str){h + colon + 1, stop - colon - 1});
            return true;
        }
        i = eol + 1;
    }
    return false;
}

void subrequest_free(struct subrequest *sr)
{
    if (sr == NULL)
        return;
    if (sr->handler_owns && sr->handler != NULL && sr->handler->on_abort != NULL) {
        sr->handler_owns = false;
        sr->handler->on_abort(&sr->ex);
    }
    router_end(&sr->ex);
    corral_timer_free(sr->timer);
    free(sr->headers);
    free(sr->body);
    free(sr);
}
