/*
 * rewrite.c: the rewrite handler, a vhost's router when it has rewrites:
 * the server's rewrites, the location search, the location's rewrites and
 * a new search while they say so (at most HTTP_REWRITE_CYCLES_MAX times),
 * then the request, with its rewritten target, to the location's handler.
 */
#include "proto/rewrite.h"

#include "proto/access.h"
#include "proto/add_header.h"
#include "proto/error_page.h"
#include "proto/regex.h"
#include "proto/site.h"
#include "proto/vars.h"

#include <string.h>

/* The URI being rewritten: path, then "?args" when it has arguments.  Two
 * buffers take turns, as a replacement reads the URI it replaces. */
struct uri {
    struct vars_buf bufs[2];
    int cur;
    size_t path_len;
    char small[2][512];
};

static struct vars_buf *uri_buf(struct uri *u)
{
    return &u->bufs[u->cur];
}

static struct http_str uri_path(struct uri *u)
{
    return (struct http_str){uri_buf(u)->data, u->path_len};
}

/* The arguments, without the "?"; empty when there are none. */
static struct http_str uri_args(struct uri *u)
{
    struct vars_buf *b = uri_buf(u);
    if (b->len <= u->path_len)
        return (struct http_str){"", 0};
    return (struct http_str){b->data + u->path_len + 1, b->len - u->path_len - 1};
}

/* `req` with the current URI as its target and path. */
static struct http_request uri_request(struct uri *u, const struct http_request *req)
{
    struct http_request r = *req;
    r.target = (struct http_str){uri_buf(u)->data, uri_buf(u)->len};
    r.path = uri_path(u);
    return r;
}

enum outcome {
    UNCHANGED,
    CHANGED,      /* on to a new search */
    CHANGED_STAY, /* break: this location */
    ANSWERED,     /* a redirect was sent */
    FAILED,       /* out of memory, or a regex that gave up: 500 */
};

/* Sends the redirect to `value`, with the request's arguments unless the
 * value has its own or ends with "?" (then that "?" is dropped). */
static void redirect(struct exchange *ex, const struct http_rewrite *rule, struct vars_buf *value,
                     struct http_str args)
{
    char small[512];
    struct vars_buf line;
    vars_buf_init(&line, small, sizeof(small));
    vars_buf_add(&line, "Location: ", 10);
    const char *q = memchr(value->data, '?', value->len);
    if (q != NULL && q == value->data + value->len - 1) {
        vars_buf_add(&line, value->data, value->len - 1);
    } else {
        vars_buf_add(&line, value->data, value->len);
        if (q == NULL && args.len > 0) {
            vars_buf_add(&line, "?", 1);
            vars_buf_add(&line, args.data, args.len);
        }
    }
    vars_buf_add(&line, "\r\n", 3); /* with its NUL */
    if (line.failed)
        exchange_respond_error(ex, 500);
    else
        exchange_respond(ex, rule->flag == HTTP_REWRITE_PERMANENT ? 301 : 302, line.data, "", 0);
    vars_buf_free(&line);
}

void http_add_uri_bytes(struct vars_buf *b, const char *data, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c > 0x20 && c < 0x7f)
            continue;
        vars_buf_add(b, data + run, i - run);
        char hex[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
        vars_buf_add(b, hex, 3);
        run = i + 1;
    }
    vars_buf_add(b, data + run, len - run);
}

/* Makes `value` the URI: its path, and its arguments if it has any (then
 * the old ones follow them, unless it ends with "?"). */
static bool replace_uri(struct uri *u, struct vars_buf *value)
{
    struct http_str old_args = uri_args(u);
    struct vars_buf *next = &u->bufs[1 - u->cur];
    next->len = 0;
    const char *q = memchr(value->data, '?', value->len);
    http_add_uri_bytes(next, value->data, q != NULL ? (size_t)(q - value->data) : value->len);
    size_t path_len = next->len;
    if (q == NULL && old_args.len > 0) {
        vars_buf_add(next, "?", 1);
        vars_buf_add(next, old_args.data, old_args.len);
    } else if (q != NULL && q + 1 < value->data + value->len) {
        vars_buf_add(next, "?", 1);
        http_add_uri_bytes(next, q + 1, (size_t)(value->data + value->len - q - 1));
        if (old_args.len > 0) {
            vars_buf_add(next, "&", 1);
            vars_buf_add(next, old_args.data, old_args.len);
        }
    }
    if (next->failed)
        return false;
    u->cur = 1 - u->cur;
    u->path_len = path_len;
    return true;
}

/* Runs `rules` on the URI. */
static enum outcome run(struct exchange *ex, const struct http_request *req,
                        const struct http_rewrites *rules, struct uri *u)
{
    enum outcome outcome = UNCHANGED;
    for (size_t i = 0; rules != NULL && i < rules->count; i++) {
        const struct http_rewrite *rule = &rules->items[i];
        struct http_request current = uri_request(u, req);
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        struct vars_ctx ctx = {.ex = ex, .req = &current, .escape = VARS_HEADER};
        if (!vars_set_captures(&ctx, rule->regex, ovector))
            return FAILED; /* as nginx: a 500, never the next rule */
        if (ctx.capture_count == 0)
            continue;
        char small[512];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        vars_eval(rule->replacement, &ctx, &value);
        enum outcome step = value.failed ? FAILED : CHANGED;
        if (step == CHANGED && (rule->absolute || rule->flag == HTTP_REWRITE_REDIRECT ||
                                rule->flag == HTTP_REWRITE_PERMANENT)) {
            redirect(ex, rule, &value, uri_args(u));
            step = ANSWERED;
        } else if (step == CHANGED && !replace_uri(u, &value)) {
            step = FAILED;
        }
        vars_buf_free(&value);
        if (step != CHANGED)
            return step;
        outcome = CHANGED;
        if (rule->flag == HTTP_REWRITE_LAST)
            return CHANGED;
        if (rule->flag == HTTP_REWRITE_BREAK)
            return CHANGED_STAY;
    }
    return outcome;
}

static void route(struct exchange *ex, const struct http_request *req,
                  const struct http_vhost *vhost, struct uri *u)
{
    /* The server's rewrites run once, before the first search; a "last"
     * among them only ends them. */
    enum outcome outcome = run(ex, req, vhost->rewrites, u);
    if (outcome == ANSWERED)
        return;
    for (int cycle = 0; outcome != FAILED; cycle++) {
        if (cycle > HTTP_REWRITE_CYCLES_MAX) {
            exchange_respond_error(ex, 500); /* a rewrite loop */
            return;
        }
        struct http_str path = uri_path(u);
        const struct http_location *loc = http_search_location(vhost, path.data, path.len);
        if (loc == NULL) {
            exchange_respond_error(ex, 404);
            return;
        }
        outcome = run(ex, req, loc->rewrites, u);
        if (outcome == ANSWERED)
            return;
        if (outcome == CHANGED)
            continue;
        if (outcome == FAILED)
            break;
        if (loc->handler == NULL) { /* a location of rewrites only, none of which applied */
            exchange_respond_error(ex, 404);
            return;
        }
        struct http_request routed = uri_request(u, req);
        error_page_route(ex, vhost, loc, &routed);
        /* The framer checked the server's rules; the location's apply now
         * that it is known. */
        unsigned refused = access_check_routed(ex, loc->access, &routed);
        if (refused != 0) {
            exchange_respond_error_adding(ex, &routed, loc->add_headers, refused);
            return;
        }
        ex->routed = loc->handler;
        loc->handler->on_request(ex, &routed, loc->handler_data);
        return;
    }
    exchange_respond_error(ex, 500);
}

static void rewrite_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    struct uri u = {.cur = 0};
    vars_buf_init(&u.bufs[0], u.small[0], sizeof(u.small[0]));
    vars_buf_init(&u.bufs[1], u.small[1], sizeof(u.small[1]));
    vars_buf_add(&u.bufs[0], req->target.data, req->target.len);
    u.path_len = req->path.len;
    if (u.bufs[0].failed)
        exchange_respond_error(ex, 500);
    else
        route(ex, req, data, &u);
    vars_buf_free(&u.bufs[0]);
    vars_buf_free(&u.bufs[1]);
}

void http_replace_prefix(const struct http_request *req, struct http_str strip, struct http_str uri,
                         struct vars_buf *out)
{
    if (uri.data != NULL && req->path.len >= strip.len &&
        memcmp(req->path.data, strip.data, strip.len) == 0) {
        vars_buf_add(out, uri.data, uri.len);
        vars_buf_add(out, req->target.data + strip.len, req->target.len - strip.len);
    } else {
        vars_buf_add(out, req->target.data, req->target.len);
    }
}

/* The rest goes to the handler routed to, if any. */
const struct http_handler http_rewrite_handler = {
    .name = "rewrite",
    .on_request = rewrite_on_request,
    EXCHANGE_FORWARD_CALLBACKS,
};
