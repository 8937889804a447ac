/*
 * return.c: the module of `return CODE ["TEXT"]`: its directive, what a
 * location's becomes at build, and its handler: a fixed response, or a
 * redirect whose text is where it points; the text may hold $variables.
 * A `return` of an error code without text takes the error page.
 */
#include "proto/policy/return.h"

#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"
#include "proto/policy/redirect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Answers with `ret`; its text's $1... are the groups `ovector` gives
 * (`count` pairs) of `subject`. */
static void answer(struct exchange *ex, const struct http_request *req,
                   const struct http_return *ret, const char *subject, const size_t *ovector,
                   size_t count)
{
    /* nginx's 444: end the connection (HTTP/2: the stream) unanswered */
    if (ret->status == HTTP_RETURN_CLOSE) {
        exchange_abort(ex);
        return;
    }
    add_header_set_rules(ex, ret->add_headers);
    char early_small[256];
    struct vars_buf early;
    vars_buf_init(&early, early_small, sizeof(early_small));
    add_header_early(ex, req, &early);
    /* `return 404;` with no text is an error answer, as in nginx: its
     * error page, if the location has one, else (an error page's own
     * location among them) the built-in answer. */
    if (ret->text == NULL && ret->status >= 400 &&
        (ex->error_hook != NULL || ex->status_override != 0)) {
        exchange_respond_error(ex, ret->status);
        add_header_forget_early(ex);
        vars_buf_free(&early);
        return;
    }
    bool redirect = ret->status == 301 || ret->status == 302 || ret->status == 303 ||
                    ret->status == 307 || ret->status == 308;
    /* The text, its variables evaluated: a redirect's fit for its
     * Location line.  Sized from the values, on the stack when that fits. */
    char small[512];
    struct vars_buf text;
    vars_buf_init(&text, small, sizeof(small));
    if (ret->value != NULL) {
        struct vars_ctx ctx = {.ex = ex,
                               .req = req,
                               .escape = redirect ? VARS_HEADER : VARS_RAW,
                               .subject = subject,
                               .ovector = ovector,
                               .capture_count = count};
        vars_eval(ret->value, &ctx, &text);
    } else {
        vars_buf_add(&text, ret->text, ret->text_len);
    }
    if (text.failed) {
        vars_buf_free(&text);
        exchange_respond_error(ex, 500);
        add_header_forget_early(ex);
        vars_buf_free(&early);
        return;
    }
    if (redirect && text.len > 0) {
        /* As in nginx: a redirect's text is where it points. */
        char line_small[512];
        struct vars_buf line;
        vars_buf_init(&line, line_small, sizeof(line_small));
        redirect_location(ex, req->host, text.data, text.len, &line); /* with its NUL */
        if (line.failed)
            exchange_respond_error(ex, 500);
        else
            exchange_respond(ex, ret->status, line.data, "", 0);
        vars_buf_free(&line);
    } else {
        exchange_respond(ex, ret->status, text.len > 0 ? "Content-Type: text/plain\r\n" : "",
                         text.data, text.len);
    }
    vars_buf_free(&text);
    add_header_forget_early(ex); /* `early` goes with this frame */
    vars_buf_free(&early);
}

static void return_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    const struct http_return *ret = data;
    struct vars_ctx ctx = {.req = req};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    if (ret->value != NULL && ret->captures != NULL)
        vars_set_captures(&ctx, ret->captures, ovector);
    answer(ex, req, ret, ctx.subject, ctx.ovector, ctx.capture_count);
}

void return_answer(struct router_walk *w, const struct http_return *ret, const char *subject,
                   const size_t *ovector, size_t count)
{
    struct http_return at_level = *ret;
    at_level.add_headers = http_module_built(w->ex, &add_header_module);
    router_routed(w);
    answer(w->ex, &w->req, &at_level, subject, ovector, count);
}

const struct http_handler http_return_handler = {
    .name = "return",
    .on_request = return_on_request,
};

/* A server's own `return` answers every request of the server in its
 * rewrite phase, after its rewrites and before any location is searched,
 * as nginx's does. */
static int return_server_phase(struct router_walk *w)
{
    const struct http_return *ret = http_module_built_in(w->ex->vhost->modules, &return_module);
    if (ret == NULL)
        return ROUTER_NEXT;
    router_routed(w);
    return_on_request(w->ex, &w->req, (void *)(uintptr_t)ret);
    return ROUTER_DONE;
}

static const struct http_phase_handler return_phases[] = {
    {ROUTER_SERVER_REWRITE, return_server_phase},
};

/* ------------------------------------------------------- configuration */

int return_parse(struct return_conf *c, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    const char *code = args[0].text;
    /* A 1xx status never ends an exchange: the client would wait for the
     * final response. */
    unsigned status = 0;
    size_t digits = strspn(code, "0123456789");
    if (digits >= 1 && digits <= 3 && code[digits] == '\0')
        status = (unsigned)strtoul(code, NULL, 10);
    if (status < 200 || status > 599) {
        return conf_module_fail(error, &args[0].pos,
                                "invalid status code \"%s\" (expected 200 to 599)", code);
    }
    c->code = status;
    if (count == 1)
        return 0;
    /* A redirect's text becomes its Location line: a CR or LF in it would
     * start header lines of its own. */
    bool redirect =
        status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
    for (const char *p = args[1].text; redirect && *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            return conf_module_fail(error, &args[1].pos, "%s",
                                    "a redirect target cannot hold control characters");
        }
    }
    c->text_pos = args[1].pos;
    c->text = strdup(args[1].text);
    if (c->text == NULL) {
        return conf_module_fail(error, &args[1].pos, "%s", "out of memory");
    }
    return 0;
}

static int apply(void *conf, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    return return_parse(conf, args, count, error);
}

static void conf_free(void *conf)
{
    struct return_conf *c = conf;
    if (!c->borrowed)
        free(c->text);
}

/* An if's location (nginx's noname one) without a handler of its own
 * answers with its location's return, with its own add_header lines, as
 * nginx's return step would once the if moved the request there. */
static void merge_nested(void *conf, const void *location, bool content)
{
    struct return_conf *c = conf;
    const struct return_conf *p = location;
    if (content || p->code == 0)
        return;
    *c = *p;
    c->borrowed = true;
}

static const struct conf_directive return_directives[] = {
    {.name = "return",
     .contexts = CONF_SERVER | CONF_LOCATION,
     .min_args = 1,
     .max_args = 2,
     .content = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = NULL},
};

/* A location's or a server's return: what it answers with, its text
 * compiled, with the level's add_header lines and, when the text reads
 * the location's regex groups, that regex.  None written: nothing. */
int return_compile(const struct return_conf *c, const struct http_module_build *b,
                   const struct http_regex *captures, struct http_return **out)
{
    struct http_return *ret = b->calloc(b->arena, 1, sizeof(*ret));
    if (ret == NULL)
        return -ENOMEM;
    *ret = (struct http_return){
        .status = c->code, .text = c->text, .text_len = c->text != NULL ? strlen(c->text) : 0};
    if (c->text != NULL) {
        int err = b->compile_with(b->arena, c->text, &c->text_pos, "return", captures, false,
                                  &ret->value);
        if (err != 0)
            return err;
    }
    if (ret->value != NULL && vars_template_uses_captures(ret->value))
        ret->captures = captures;
    *out = ret;
    return 0;
}

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct return_conf *c = conf;
    *out = NULL;
    if (c->code == 0)
        return 0;
    struct http_return *ret;
    int err = return_compile(c, b, b->loc != NULL ? b->loc->regex : NULL, &ret);
    if (err != 0)
        return err;
    ret->add_headers = http_module_built_in(*b->built, &add_header_module);
    *out = ret;
    return 0;
}

struct http_module return_module = {
    .name = "return",
    .conf =
        {
            .name = "return",
            .directives = return_directives,
            .size = sizeof(struct return_conf),
            .merge_nested = merge_nested,
            .free = conf_free,
        },
    .build = build,
    .content = &http_return_handler,
    .phases = return_phases,
    .phase_count = sizeof(return_phases) / sizeof(return_phases[0]),
};
