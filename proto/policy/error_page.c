/*
 * error_page.c: error pages for corral's own answers: the request kept for
 * them, the redirect of the client to a URL, and the internal redirect,
 * run from the loop once the handler that failed has let go.  Its
 * directive, its pages per level and their build are the module's too.
 */
#include "proto/policy/error_page.h"

#include "proto/http/uri.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the exchange keeps for its error page (its slot). */
struct error_page_state {
    struct exchange *ex;     /* NULL once the exchange is gone */
    struct http_request req; /* as routed, without its body's fields */
    char *block;             /* req's strings (exchange_request_copy()) */
    char *uri;               /* the internal redirect's target, while it waits */
    size_t uri_len;
    const struct http_location *named; /* its named location; NULL: searched */
    unsigned status_override;          /* for the page's response; 0: its own */
    bool served;    /* a page was served: errors after it get the built-in answer */
    bool pending;   /* run_redirect() is queued: it frees an orphan */
    bool cancelled; /* the exchange was aborted while the redirect waited */
    bool orphan;    /* the exchange went while the redirect waited */
};

static void state_free(struct error_page_state *st)
{
    free(st->block);
    free(st->uri);
    free(st);
}

/* A redirected request has no body: the fields that frame one stay out
 * of what a handler (a proxy) forwards. */
static bool frames_body(struct http_str name)
{
    return http_str_equal_nocase(name, "content-length") ||
           http_str_equal_nocase(name, "transfer-encoding") ||
           http_str_equal_nocase(name, "expect");
}

/* The error_page lines for the exchange's answers: its location's (or,
 * with none, its server's). */
static const struct http_error_pages *pages_of(const struct exchange *ex)
{
    return http_module_built(ex, &error_page_module);
}

static bool respond(struct exchange *ex, unsigned status);

int error_page_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    if (pages_of(ex) == NULL || exchange_ctx(ex, error_page_module.slot) != NULL)
        return ROUTER_DECLINED;
    struct error_page_state *st = calloc(1, sizeof(*st));
    if (st != NULL)
        st->block = exchange_request_copy(&w->req, &st->req);
    if (st == NULL || st->block == NULL) {
        free(st);
        return ROUTER_DECLINED; /* the built-in answers, then */
    }
    /* The copy's header array starts its block, which is ours to change. */
    struct http_header *headers = (struct http_header *)(void *)st->block;
    size_t kept = 0;
    for (size_t i = 0; i < st->req.header_count; i++)
        if (!frames_body(headers[i].name))
            headers[kept++] = headers[i];
    st->req.header_count = kept;
    st->ex = ex;
    exchange_set_ctx(ex, error_page_module.slot, st);
    ex->error_hook = respond;
    return ROUTER_DECLINED;
}

void error_page_release(struct exchange *ex)
{
    struct error_page_state *st = exchange_ctx(ex, error_page_module.slot);
    if (st == NULL)
        return;
    exchange_set_ctx(ex, error_page_module.slot, NULL);
    ex->error_hook = NULL;
    if (st->pending) {
        st->orphan = true; /* run_redirect() frees it */
        st->ex = NULL;
        return;
    }
    state_free(st);
}

/* ------------------------------------------------------ internal redirect */

/* The error page's header filter: its response goes out with the
 * status the page was for (ex->status_override), as nginx's err_status;
 * it steps aside once that is cleared (a built-in answer after it). */
static void begin_with_status(struct exchange *ex, const struct exchange_filter *self,
                              const struct exchange_head *head)
{
    if (ex->status_override == 0) {
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    struct exchange_head h = *head;
    h.status = ex->status_override;
    exchange_filter_begin_next(ex, self, &h);
}

static struct exchange_filter error_page_status_filter = {
    .name = "error_page",
    .begin = begin_with_status,
};

/* The framer's handler while the redirect waits: it takes no body, and an
 * abort meanwhile cancels the redirect. */
static void pending_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    exchange_respond_builtin(ex, 500); /* never called: the framer routed already */
}

static void pending_on_abort(struct exchange *ex)
{
    struct error_page_state *st = exchange_ctx(ex, error_page_module.slot);
    if (st != NULL)
        st->cancelled = true;
}

static const struct http_handler pending_handler = {
    .name = "error_page",
    .on_request = pending_on_request,
    .on_abort = pending_on_abort,
};

/* The request to the error page's URI: GET (HEAD stays HEAD), no body,
 * the original's headers, host and connection. */
static void redirected_request(const struct error_page_state *st, struct http_request *req)
{
    *req = st->req;
    req->method = st->req.head ? (struct http_str){"HEAD", 4} : (struct http_str){"GET", 3};
    req->target = (struct http_str){st->uri, st->uri_len};
    const char *query = memchr(st->uri, '?', st->uri_len);
    req->path = (struct http_str){st->uri, query != NULL ? (size_t)(query - st->uri) : st->uri_len};
    req->has_body = false;
    req->has_content_length = false;
    req->content_length = 0;
    req->expect_continue = false;
    req->upgrade = false;
    req->upgrade_protocol = (struct http_str){NULL, 0};
}

static void run_redirect(void *arg)
{
    struct error_page_state *st = arg;
    st->pending = false;
    if (st->orphan) {
        state_free(st);
        return;
    }
    struct exchange *ex = st->ex;
    /* Aborted meanwhile, or answered (an error after the page's own): the
     * framer releases the state with the exchange. */
    if (st->cancelled || exchange_response_started(ex))
        return;
    ex->status_override = st->status_override;
    exchange_add_filter(ex, &error_page_status_filter);
    struct http_request req;
    redirected_request(st, &req);
    /* Errors on the way get the built-in answer: a page was served. */
    router_redirect(ex, &req, st->named);
}

/* Queues the internal redirect to `uri` (starting with "/"): searched
 * for, or in the page's named location. */
static bool start_redirect(struct exchange *ex, struct error_page_state *st,
                           const struct http_error_page *page, unsigned status, struct http_str uri)
{
    char small[512];
    struct vars_buf target;
    vars_buf_init(&target, small, sizeof(small));
    uri_add_bytes(&target, uri.data, uri.len);
    free(st->uri);
    st->uri = target.failed ? NULL : malloc(target.len);
    if (st->uri != NULL) {
        memcpy(st->uri, target.data, target.len);
        st->uri_len = target.len;
    }
    vars_buf_free(&target);
    if (st->uri == NULL || corral_loop_defer(exchange_loop(ex), run_redirect, st) != 0)
        return false;
    st->pending = true;
    st->named = page->named;
    st->status_override = page->response == ERROR_PAGE_KEEP ? status : (unsigned)page->response;
    ex->redirected = true;
    ex->_ops->set_handler(ex, &pending_handler);
    return true;
}

/* Sends the client to `url`: 302, or the redirect status "=RESPONSE"
 * gives, as nginx does. */
static bool send_location(struct exchange *ex, const struct http_error_page *page,
                          const struct vars_buf *url)
{
    unsigned code = 302;
    switch (page->response) {
    case 301:
    case 302:
    case 303:
    case 307:
    case 308: code = (unsigned)page->response; break;
    default: break;
    }
    char small[512];
    struct vars_buf line;
    vars_buf_init(&line, small, sizeof(small));
    vars_buf_add(&line, "Content-Type: text/plain\r\nLocation: ", 36);
    vars_buf_add(&line, url->data, url->len);
    vars_buf_add(&line, "\r\n", 3); /* with its NUL */
    bool sent = !line.failed;
    if (sent) {
        char body[64]; /* as exchange_respond_builtin()'s */
        int n = snprintf(body, sizeof(body), "%u %s\n", code, http_reason(code));
        if (n < 0 || (size_t)n >= sizeof(body))
            n = (int)sizeof(body) - 1;
        exchange_respond(ex, code, line.data, body, (size_t)n);
    }
    vars_buf_free(&line);
    return sent;
}

/* ex->error_hook. */
static bool respond(struct exchange *ex, unsigned status)
{
    struct error_page_state *st = exchange_ctx(ex, error_page_module.slot);
    const struct http_error_pages *pages = pages_of(ex);
    if (st == NULL || pages == NULL || st->served || st->pending || exchange_response_started(ex))
        return false;
    const struct http_error_page *page = NULL;
    for (size_t i = 0; i < pages->count && page == NULL; i++)
        if (pages->items[i].status == status)
            page = &pages->items[i];
    if (page == NULL)
        return false;
    st->served = true;
    char small[512];
    struct vars_buf value;
    vars_buf_init(&value, small, sizeof(small));
    /* Header-escaped: a Location line, or a URI whose control bytes are
     * percent-encoded after. */
    struct vars_ctx ctx = {.ex = ex, .req = &st->req, .status = status, .escape = VARS_HEADER};
    vars_eval(page->uri, &ctx, &value);
    bool done = false;
    if (page->named != NULL) /* "@name": the request's own URI */
        done = start_redirect(ex, st, page, status, st->req.target);
    else if (!value.failed && value.len > 0 && value.data[0] == '/')
        done = start_redirect(ex, st, page, status, (struct http_str){value.data, value.len});
    else if (!value.failed && value.len > 0 && value.data[0] != '@')
        done = send_location(ex, page, &value);
    vars_buf_free(&value);
    return done;
}

/* ------------------------------------------------------- configuration */

/* "=" (0) or "=RESPONSE" (200 to 599) into *out. */
static int parse_response(const struct conf_arg *arg, int *out, struct conf_module_error *error)
{
    *out = 0;
    if (arg->text[1] == '\0')
        return 0;
    unsigned code;
    if (conf_parse_uint(arg->text + 1, &code) != 0 || code < 200 || code > 599)
        return conf_module_fail(error, &arg->pos,
                                "invalid response code \"%s\" (expected \"=\" or =200 to =599)",
                                arg->text);
    *out = (int)code;
    return 0;
}

/* The URI: a path of this server (internal redirect), or else the URL a
 * client is redirected to.  A control byte would split the request line
 * or the Location line it goes into. */
static int check_uri(const struct conf_arg *arg, struct conf_module_error *error)
{
    if (arg->text[0] == '\0')
        return conf_module_fail(error, &arg->pos, "%s", "empty error_page URI");
    if (arg->text[0] == '=')
        return conf_module_fail(error, &arg->pos, "error_page needs a URI after \"%s\"", arg->text);
    if (arg->text[0] == '@' && arg->text[1] == '\0')
        return conf_module_fail(error, &arg->pos, "%s", "empty location name \"@\"");
    for (const char *p = arg->text; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return conf_module_fail(error, &arg->pos, "%s",
                                    "an error_page URI cannot hold control characters");
    return 0;
}

/* error_page CODE... [=[RESPONSE]] URI */
static int apply(void *conf, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    struct error_page_conf *c = conf;
    size_t last = count - 1, codes = last;
    const struct conf_arg *uri = &args[last];
    int response = -1;
    if (args[last - 1].text[0] == '=') {
        if (last - 1 == 0)
            return conf_module_fail(error, &args[0].pos,
                                    "error_page needs a status code before \"%s\"", args[0].text);
        if (parse_response(&args[last - 1], &response, error) != 0)
            return -1;
        codes = last - 1;
    }
    if (check_uri(uri, error) != 0)
        return -1;
    for (size_t i = 0; i < codes; i++) {
        const struct conf_arg *code = &args[i];
        unsigned status;
        if (conf_parse_uint(code->text, &status) != 0 || status < 300 || status > 599 ||
            status == 499)
            return conf_module_fail(error, &code->pos,
                                    "invalid error_page code \"%s\" (expected 300 to 599, not 499)",
                                    code->text);
        size_t n = c->count;
        struct error_page_line *items =
            n < SIZE_MAX / sizeof(*items) - 1 ? realloc(c->items, (n + 1) * sizeof(*items)) : NULL;
        if (items == NULL)
            return conf_module_fail(error, &code->pos, "%s", "out of memory");
        c->items = items;
        c->count = n + 1;
        struct error_page_line *page = &items[n]; /* freed with the rest */
        *page = (struct error_page_line){status, response, strdup(uri->text), uri->pos};
        if (page->uri == NULL)
            return conf_module_fail(error, &uri->pos, "%s", "out of memory");
    }
    return 0;
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct error_page_conf *c = conf;
    const struct error_page_conf *p = parent;
    if (c->count == 0 && p != NULL && p->count > 0)
        *c = (struct error_page_conf){p->items, p->count, true};
    return 0;
}

static void conf_free(void *conf)
{
    struct error_page_conf *c = conf;
    if (c->inherited)
        return;
    for (size_t i = 0; i < c->count; i++)
        free(c->items[i].uri);
    free(c->items);
}

/* A level's pages compiled, its "@name"s the server's named locations
 * (conf/ checked that they are there); none: nothing. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct error_page_conf *c = conf;
    *out = NULL;
    if (c->count == 0)
        return 0;
    struct http_error_pages *pages = b->calloc(b->arena, 1, sizeof(*pages));
    struct http_error_page *items = b->calloc(b->arena, c->count, sizeof(*items));
    if (pages == NULL || items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < c->count; i++) {
        const struct error_page_line *page = &c->items[i];
        items[i] = (struct http_error_page){.status = page->status,
                                            .response = page->response < 0 ? ERROR_PAGE_KEEP
                                                                           : page->response};
        int err = b->compile_with(b->arena, page->uri, &page->uri_pos, "error_page", NULL, true,
                                  &items[i].uri);
        if (err != 0)
            return err;
        if (page->uri[0] == '@' && (items[i].named = b->named(b->arena, page->uri)) == NULL)
            return -EINVAL; /* conf/ checked: never */
    }
    *pages = (struct http_error_pages){items, c->count};
    *out = pages;
    return 0;
}

static const struct conf_directive error_page_directives[] = {
    {.name = "error_page",
     .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 2,
     .max_args = CONF_ARGS_MANY,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = NULL},
};

/* The server's pages for what its rewrites answer, then the location's
 * once it is found. */
static const struct http_phase_handler error_page_phases[] = {
    {ROUTER_SERVER_REWRITE, error_page_phase},
    {ROUTER_FIND_LOCATION, error_page_phase},
};

struct http_module error_page_module = {
    .name = "error_page",
    .conf =
        {
            .name = "error_page",
            .directives = error_page_directives,
            .size = sizeof(struct error_page_conf),
            .merge = merge,
            .free = conf_free,
        },
    .build = build,
    .phases = error_page_phases,
    .phase_count = sizeof(error_page_phases) / sizeof(error_page_phases[0]),
    /* Its status filter is first: what follows sees the final status. */
    .filter = &error_page_status_filter,
    .slots = 1,
    .release = error_page_release,
};
